//! The TLS server under clients that ask for much or hold on: memory stays bounded while
//! a large HTTP response is served, concurrent connections are capped, and a request that
//! trickles in is cut off.

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

#[test]
fn concurrent_connections_are_capped_and_the_excess_refused() {
    let dir = TempDir::new("cap");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let (mut srv, port) = server(
        &dir,
        &[
            "--concurrent",
            "--max-concurrent",
            "3",
            "--io-timeout",
            "3",
            "--max-connections",
            "4",
        ],
    );
    // Eight clients connect and say nothing.
    let mut idle: Vec<std::net::TcpStream> = (0..8)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let mut refused = Vec::new();
    for _ in 0..5 {
        refused.push(
            srv.wait_for("connection_refused", 10.0)
                .expect("a connection_refused record"),
        );
    }
    for r in &refused {
        assert_eq!(r["max_concurrent"], 3);
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .contains("--max-concurrent 3"),
            "{r}"
        );
    }
    // The refused ones were closed at once; the served ones are still open.
    let mut closed = 0;
    for s in &mut idle {
        s.set_read_timeout(Some(std::time::Duration::from_millis(500)))
            .unwrap();
        let mut b = [0u8; 1];
        if matches!(s.read(&mut b), Ok(0)) {
            closed += 1;
        }
    }
    assert_eq!(closed, 5);
    // One thread per connection in flight, plus the accept loop and the record writer.
    let threads = srv.status("Threads");
    assert!(threads <= 5, "{threads} threads for 3 connections");
    // The served ones time out (--io-timeout 3).
    for _ in 0..3 {
        let e = srv
            .wait_for("connection_error", 15.0)
            .expect("connection_error");
        assert_eq!(e["kind"], "io", "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("no data from the client for 3 s"),
            "{e}"
        );
    }
    // Room again: a fourth client is served, and the server ends after it.
    let mut tls = tls_connect(port);
    let _ = tls.shutdown();
    let done = srv
        .wait_for("connection", 15.0)
        .expect("a served connection");
    assert_eq!(done["index"], 3);
    let status = srv.child.wait().unwrap();
    assert!(status.success());
}

#[test]
fn a_request_that_trickles_in_is_cut_off() {
    let dir = TempDir::new("trickle");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let (mut srv, port) = server(&dir, &["--io-timeout", "1", "--max-connections", "1"]);
    let mut tls = tls_connect(port);
    let start = std::time::Instant::now();
    // One byte every 0.4 s: each read is within --io-timeout, the request never ends.
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
        e["message"].as_str().unwrap().contains("--io-timeout"),
        "{e}"
    );
    assert!(start.elapsed().as_secs_f64() < 4.0, "{:?}", start.elapsed());
    let _ = writer.join();
}
