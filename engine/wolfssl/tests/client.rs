//! The wolfSSL client with the options a probe of an outside server uses: key shares for
//! several groups (`--key-shares`), a chain only reported on (`--verify report`), and the
//! server's certificates recorded (`--peer-chain`), against the library's OpenSSL server in
//! the same program.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn program() -> &'static str {
    env!("CARGO_BIN_EXE_pqlab-engine-wolfssl")
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn certs(tag: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("pqlab-wolf-client-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let out = Command::new(program())
        .args([
            "tls",
            "certs",
            "--ca-alg",
            "ML-DSA-44",
            "--server-alg",
            "ML-DSA-44",
        ])
        .arg("--out-dir")
        .arg(&d)
        .output()
        .unwrap();
    assert!(out.status.success());
    Dir(d)
}

/// An OpenSSL-stack server taking only X25519MLKEM768 for one connection, and the records
/// of a wolfSSL client run with `client_args` against it (root: `root`).
fn run(dir: &Path, root: &Path, client_args: &[&str]) -> Vec<Value> {
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
            "--groups",
            "X25519MLKEM768",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let listening: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let port = listening["port"].as_u64().unwrap() as u16;
    let mut args = vec!["--servername", "localhost"];
    args.extend(client_args);
    let (recs, _) = client(root, port, &args);
    let _ = server.kill();
    let _ = server.wait();
    recs
}

/// The records and exit code of a wolfSSL client run with `args` against
/// 127.0.0.1:`port` (root: `root`).
fn client(root: &Path, port: u16, args: &[&str]) -> (Vec<Value>, Option<i32>) {
    let out = Command::new(program())
        .args(["tls", "client", "--connect", &format!("127.0.0.1:{port}")])
        .arg("--ca")
        .arg(root)
        .args(["--stack", "wolfssl"])
        .args(args)
        .output()
        .unwrap();
    let recs = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (recs, out.status.code())
}

fn connection(recs: &[Value]) -> &Value {
    recs.iter()
        .find(|r| r["type"] == "connection")
        .unwrap_or_else(|| panic!("{recs:?}"))
}

#[test]
fn key_shares_a_reported_chain_and_the_peer_chain() {
    let dir = certs("a");
    let other = certs("b");
    let root = dir.0.join("root.crt.pem");
    // A share for the hybrid as well as X25519: one ClientHello, the hybrid chosen.
    let recs = run(
        &dir.0,
        &root,
        &[
            "--groups",
            "X25519:X25519MLKEM768",
            "--key-shares",
            "X25519,X25519MLKEM768",
            "--peer-chain",
        ],
    );
    let c = connection(&recs);
    assert_eq!(c["negotiated"]["group_code"], 0x11ec);
    assert_eq!(c["verified"], true);
    let der = std::fs::read(dir.0.join("server.crt.der")).unwrap();
    let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(c["peer_chain"], serde_json::json!([hex]));
    // Two plaintext handshake records sent (ClientHello twice) when only X25519 has a share.
    let recs = run(
        &dir.0,
        &root,
        &[
            "--groups",
            "X25519:X25519MLKEM768",
            "--key-shares",
            "X25519",
        ],
    );
    let c = connection(&recs);
    let hellos = c["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ev"] == "record" && e["dir"] == "sent" && e["content_type"] == "handshake")
        .count();
    assert_eq!(hellos, 2, "{c}");
    // Another root: refused by default, reported with --verify report.
    let wrong = other.0.join("root.crt.pem");
    let recs = run(&dir.0, &wrong, &[]);
    assert!(
        recs.iter()
            .any(|r| r["type"] == "connection_error" && r["kind"] == "check"),
        "{recs:?}"
    );
    let recs = run(&dir.0, &wrong, &["--verify", "report"]);
    let c = connection(&recs);
    assert_eq!(c["verified"], false);
    assert!(
        c["verify_error"].as_str().unwrap().contains("wolfSSL"),
        "{c}"
    );
}

#[test]
fn a_chain_longer_than_wolfssl_keeps_is_reported_as_truncated() {
    let dir = certs("long");
    let root = dir.0.join("root.crt.pem");
    let recs = run(&dir.0, &root, &["--verify", "report", "--peer-chain"]);
    let c = connection(&recs);
    assert_eq!(c["peer_chain_truncated"], false, "{c}");
    // The server's certificate, then its root twelve times: 13 certificates sent.
    let chain = dir.0.join("chain.pem");
    let mut text = std::fs::read_to_string(&chain).unwrap();
    text.push_str(&std::fs::read_to_string(&root).unwrap().repeat(12));
    std::fs::write(&chain, text).unwrap();
    let recs = run(&dir.0, &root, &["--verify", "report", "--peer-chain"]);
    let c = connection(&recs);
    assert_eq!(c["peer_chain_truncated"], true, "{c}");
    assert_eq!(c["peer_chain"].as_array().unwrap().len(), 9);
    assert_eq!(c["verified"], false);
    let why = c["verify_error"].as_str().unwrap();
    assert!(why.contains("longer than the 9 certificates"), "{why}");
}
