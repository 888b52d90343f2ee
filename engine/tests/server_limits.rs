//! The TLS server under clients that ask for much or hold on: memory stays bounded while
//! a large HTTP response is served, a full server evicts its oldest stalled handshake for a
//! new client (and refuses one only when every connection is being served), and a
//! handshake or request that trickles in is cut off at its deadline.

mod common;
use common::{make_certs, tls_connect, Running, TempDir};
use std::io::{Read, Write};

fn server(dir: &TempDir, extra: &[&str]) -> (Running, u16) {
    let d = dir.path().to_str().unwrap();
    let chain = format!("{d}/chain.pem");
    let key = format!("{d}/server.key.pem");
    let mut args = vec![
        "tls",
        "server",
        "--listen",
        "127.0.0.1:0",
        "--cert-chain",
        &chain,
        "--key",
        &key,
    ];
    args.extend(extra);
    let mut srv = Running::start(&args);
    let listening = srv.wait_for("listening", 30.0).expect("listening record");
    let port = listening["port"].as_u64().unwrap() as u16;
    (srv, port)
}

#[test]
fn a_large_http_response_is_streamed_in_bounded_memory() {
    let dir = TempDir::new("rss");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    // Two connections: the server is still alive (waiting) after serving the first.
    let (mut srv, port) = server(&dir, &["--max-connections", "2"]);
    let before = srv.status("VmHWM");
    const N: u64 = 150_000_000;
    let mut tls = tls_connect(port);
    tls.write_all(format!("GET /{N} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut head = Vec::new();
    let mut body: u64 = 0;
    loop {
        match tls.ssl_read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                if head.windows(4).any(|w| w == b"\r\n\r\n") {
                    body += k as u64;
                } else {
                    head.extend_from_slice(&buf[..k]);
                    if let Some(p) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        body += (head.len() - p - 4) as u64;
                    }
                }
            }
            Err(e) if e.code() == openssl::ssl::ErrorCode::ZERO_RETURN => break,
            Err(e) => panic!("after {body} bytes: {e}"),
        }
    }
    let _ = tls.shutdown();
    drop(tls);
    let head = String::from_utf8_lossy(&head);
    assert!(head.contains(&format!("Content-Length: {N}\r\n")), "{head}");
    assert_eq!(body, N);
    let rec = srv.wait_for("connection", 30.0).expect("connection record");
    assert_eq!(rec["request_bytes"], N);
    let after = srv.status("VmHWM");
    // Building the body in memory took ~150 MB; streamed, the peak barely moves.
    assert!(
        after < before + 32 * 1024,
        "peak RSS {before} kB -> {after} kB while serving {N} bytes"
    );
}

/// A record header promising a 512-byte ClientHello, then nothing.
const STALLED: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00];

#[test]
fn a_full_server_evicts_the_oldest_stalled_handshake_for_a_good_client() {
    let dir = TempDir::new("cap");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let (mut srv, port) = server(
        &dir,
        &[
            "--concurrent",
            "--max-concurrent",
            "3",
            "--max-connections",
            "9",
        ],
    );
    // Eight clients send the start of a record and stall; the pool holds three.
    let mut stalled = Vec::new();
    for _ in 0..8 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(STALLED).unwrap();
        stalled.push(s);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut evicted = Vec::new();
    for _ in 0..5 {
        evicted.push(
            srv.wait_for("connection_error", 10.0)
                .expect("an eviction record"),
        );
    }
    for e in &evicted {
        assert!(e["message"].as_str().unwrap().starts_with("evicted"), "{e}");
    }
    // The oldest went first: the first five connections.
    let mut indexes: Vec<u64> = evicted
        .iter()
        .map(|e| e["index"].as_u64().unwrap())
        .collect();
    indexes.sort();
    assert_eq!(indexes, [0, 1, 2, 3, 4]);
    // At most twice the cap of workers (victims unwind, then wait idle for the next
    // connection), the accept loop, the record writer, the deadline watcher: the eight
    // stalled sockets got no thread of their own.
    let threads = srv.status("Threads");
    assert!(threads <= 2 * 3 + 3, "{threads} threads for 3 connections");
    // A good client still gets its handshake (evicting the oldest stalled one, index 5).
    let mut tls = tls_connect(port);
    let _ = tls.shutdown();
    let done = srv
        .wait_for("connection", 15.0)
        .expect("the good client is served");
    assert_eq!(done["index"], 8);
    drop(stalled);
}

#[test]
fn a_full_server_with_nothing_to_evict_refuses() {
    let dir = TempDir::new("full");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let (mut srv, port) = server(&dir, &["--concurrent", "--max-concurrent", "1"]);
    // One client past its handshake and request, its response held back by not reading it:
    // being served, not stalled, so never evicted.
    let mut tls = tls_connect(port);
    tls.write_all(b"GET 100000000\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut late = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let r = srv
        .wait_for("connection_refused", 10.0)
        .expect("a connection_refused record");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("none of them in its handshake"),
        "{r}"
    );
    late.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 1];
    assert!(
        matches!(late.read(&mut b), Ok(0) | Err(_)),
        "closed at once"
    );
    drop(tls);
}

#[test]
fn a_handshake_that_trickles_in_is_cut_off_at_its_deadline() {
    let dir = TempDir::new("trickle-hs");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let (mut srv, port) = server(
        &dir,
        &[
            "--handshake-timeout",
            "2",
            "--io-timeout",
            "5",
            "--max-connections",
            "1",
        ],
    );
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let start = std::time::Instant::now();
    // One byte every 0.3 s: each read is well within --io-timeout, the handshake never ends.
    let writer = std::thread::spawn(move || {
        for b in STALLED.iter().chain([0u8; 60].iter()) {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    });
    let e = srv
        .wait_for("connection_error", 10.0)
        .expect("connection_error");
    let waited = start.elapsed().as_secs_f64();
    assert_eq!(e["kind"], "peer", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("--handshake-timeout"),
        "{e}"
    );
    assert!((1.8..4.0).contains(&waited), "cut off after {waited:.2} s");
    let _ = writer.join();
}

#[test]
fn a_request_that_trickles_in_is_cut_off() {
    let dir = TempDir::new("trickle");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let (mut srv, port) = server(
        &dir,
        &[
            "--handshake-timeout",
            "1",
            "--io-timeout",
            "5",
            "--max-connections",
            "1",
        ],
    );
    let mut tls = tls_connect(port);
    let start = std::time::Instant::now();
    // One byte every 0.4 s: each read is within --io-timeout, the request never ends; the
    // handshake and the request head share one deadline.
    let writer = std::thread::spawn(move || {
        for b in b"GET 1".iter().cycle().take(40) {
            if tls.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(400));
        }
    });
    let e = srv
        .wait_for("connection_error", 10.0)
        .expect("connection_error");
    assert_eq!(e["kind"], "peer", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("--handshake-timeout"),
        "{e}"
    );
    assert!(start.elapsed().as_secs_f64() < 4.0, "{:?}", start.elapsed());
    let _ = writer.join();
}
