//! Helpers for the tests that drive the real `pqlab-engine` binary: running it, reading its
//! JSON lines, temporary directories that are removed, certificates.

#![allow(dead_code)] // each test file uses its own subset

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn engine() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pqlab-engine"))
}

pub fn records(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

pub fn run(args: &[&str]) -> (Output, Vec<Value>) {
    let out = engine().args(args).output().expect("engine runs");
    let recs = records(&out.stdout);
    (out, recs)
}

/// A directory under the system temp dir, removed (with its content) when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "pqlab-engine-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `tls certs` into `dir` (EC P-256 root and server unless told otherwise).
pub fn make_certs(dir: &Path, ca: &str, server: &str) {
    let (out, recs) = run(&[
        "tls",
        "certs",
        "--ca-alg",
        ca,
        "--server-alg",
        server,
        "--out-dir",
        dir.to_str().expect("utf-8 path"),
    ]);
    assert!(
        out.status.success(),
        "tls certs failed: {recs:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An engine process whose stdout records are collected by a thread as they arrive; killed
/// (and reaped) when dropped.
pub struct Running {
    pub child: std::process::Child,
    lines: std::sync::mpsc::Receiver<Value>,
    pub seen: Vec<Value>,
}

impl Running {
    pub fn start(args: &[&str]) -> Running {
        use std::io::BufRead;
        let mut child = engine()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("engine starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(|l| l.ok())
            {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        });
        Running {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// The next record of this type, waiting at most `secs`.
    pub fn wait_for(&mut self, ty: &str, secs: f64) -> Option<Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if v["type"] == ty {
                        return Some(v);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// A field of /proc/PID/status in kB or as a count ("VmHWM", "Threads").
    pub fn status(&self, field: &str) -> u64 {
        proc_status(self.child.id(), field).unwrap_or_else(|| panic!("no {field}"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn proc_status(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with(&format!("{field}:")))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A TLS client from the openssl crate (no verification: these tests are about the server).
pub fn tls_connect(port: u16) -> openssl::ssl::SslStream<std::net::TcpStream> {
    use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
    let mut b = SslConnector::builder(SslMethod::tls_client()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    b.build()
        .configure()
        .unwrap()
        .verify_hostname(false)
        .connect("localhost", tcp)
        .unwrap()
}
