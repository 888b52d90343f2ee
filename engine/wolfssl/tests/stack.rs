//! The wolfSSL stack through its program, as the lab runs it: its key log. (The contract
//! every stack keeps, interoperation with the library's stacks included, runs in-process in
//! the program's own tests: `contract_suite!` in src/main.rs.)

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn program() -> &'static str {
    env!("CARGO_BIN_EXE_pqlab-engine-wolfssl")
}

fn records(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("pqlab-wolf-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn certs(dir: &Path, ca: &str, server: &str) {
    let out = Command::new(program())
        .args([
            "tls",
            "certs",
            "--ca-alg",
            ca,
            "--server-alg",
            server,
            "--out-dir",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "certs {ca}/{server}: {:?}",
        records(&out.stdout)
    );
}

/// One server (on `server_stack`) and one client (on `client_stack`) handshake; the client's
/// connection record.
fn handshake(dir: &Path, server_stack: &str, client_stack: &str, extra: &[&str]) -> Value {
    let d = dir.to_str().unwrap();
    let mut server = Command::new(program())
        .args([
            "tls",
            "server",
            "--listen",
            "127.0.0.1:0",
            "--max-connections",
            "1",
        ])
        .args(["--cert-chain", &format!("{d}/chain.pem")])
        .args([
            "--key",
            &format!("{d}/server.key.pem"),
            "--stack",
            server_stack,
        ])
        .args(["--events", "off"])
        .args(extra)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let listening: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let port = listening["port"].as_u64().expect("listening record");
    let client = Command::new(program())
        .args(["tls", "client", "--connect", &format!("127.0.0.1:{port}")])
        .args([
            "--ca",
            &format!("{d}/root.crt.pem"),
            "--servername",
            "localhost",
        ])
        .args([
            "--stack",
            client_stack,
            "-n",
            "1",
            "--warmup",
            "0",
            "--events",
            "off",
        ])
        .args(extra)
        .current_dir(dir)
        .output()
        .unwrap();
    let _ = server.wait();
    let recs = records(&client.stdout);
    let conn = recs
        .iter()
        .find(|r| r["type"] == "connection")
        .cloned()
        .unwrap_or_else(|| panic!("{server_stack} <- {client_stack} {extra:?}: {recs:?}"));
    assert_eq!(conn["verified"], true, "{conn}");
    conn
}

#[test]
fn secrets_go_only_to_the_key_log_asked_for_and_it_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("keylog");
    certs(&dir.0, "EC:P-256", "EC:P-256");
    let keys = dir.0.join("keys.log");
    let k = keys.to_str().unwrap();
    handshake(&dir.0, "wolfssl", "wolfssl", &["--keylog", k]);
    let text = std::fs::read_to_string(&keys).unwrap();
    assert!(text.contains("CLIENT_HANDSHAKE_TRAFFIC_SECRET "), "{text}");
    assert!(text.contains("SERVER_TRAFFIC_SECRET_0 "), "{text}");
    let mode = std::fs::metadata(&keys).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // wolfSSL's own key-log export would have appended every connection's secrets to
    // sslkeylog.log in the working directory, readable by everyone.
    let strays: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("keylog"))
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
}
