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
