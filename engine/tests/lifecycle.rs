//! Engines die with their parent: a TLS server whose parent is SIGKILLed frees its port
//! within a second.

mod common;
use common::{engine, make_certs, TempDir};
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

fn alive(pid: i32) -> bool {
    // A zombie waiting for a reaper counts as gone: it holds no sockets.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

#[test]
fn a_server_whose_parent_is_killed_frees_its_port() {
    let dir = TempDir::new("pdeath");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let d = dir.path().to_str().unwrap();
    let out = format!("{d}/server.out");
    let exe = engine().get_program().to_str().unwrap().to_string();
    // A parent shell that starts the server in the background and waits.
    let mut parent = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{exe}' tls server --listen 127.0.0.1:0 --cert-chain '{d}/chain.pem' \
             --key '{d}/server.key.pem' > '{out}' 2>/dev/null & wait"
        ))
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let listening = loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if let Some(line) = text.lines().next() {
            break serde_json::from_str::<serde_json::Value>(line).unwrap();
        }
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let port = listening["port"].as_u64().unwrap() as u16;
    let pid = listening["pid"].as_i64().unwrap() as i32;
    assert!(
        TcpListener::bind(("127.0.0.1", port)).is_err(),
        "the server holds the port"
    );

    parent.kill().unwrap(); // SIGKILL: the shell gets no chance to pass anything on
    parent.wait().unwrap();
    let killed = Instant::now();
    let mut freed = None;
    while killed.elapsed() < Duration::from_secs(1) {
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            freed = Some(killed.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let still_alive = alive(pid);
    if still_alive {
        // Leave nothing behind even when the test fails.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        freed.is_some(),
        "port {port} still taken 1 s after the parent died"
    );
    assert!(!still_alive, "server {pid} outlived its parent");
}
