//! A server that accepts and never answers: the client reports a timeout naming the limit,
//! kind io, instead of the EAGAIN a timed-out blocking socket returns.

mod common;
use common::{make_certs, run, TempDir};
use std::net::TcpListener;
use std::time::{Duration, Instant};

#[test]
fn a_silent_server_is_a_named_timeout() {
    let dir = TempDir::new("silent");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accept and hold the connection without a byte in reply.
    let holder = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_secs(3));
        drop(s);
    });
    let ca = dir.path().join("root.crt.pem");
    let connect = format!("127.0.0.1:{port}");
    let start = Instant::now();
    let (out, recs) = run(&[
        "tls",
        "client",
        "--connect",
        &connect,
        "--ca",
        ca.to_str().unwrap(),
        "--io-timeout",
        "1",
    ]);
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(6), "{recs:?}");
    let err = recs.last().unwrap();
    assert_eq!(
        (&err["type"], &err["kind"]),
        (&"error".into(), &"io".into())
    );
    let m = err["message"].as_str().unwrap();
    assert!(
        m.contains("no data from the server for 1 s (--io-timeout)"),
        "{m}"
    );
    assert!(
        !m.contains("temporarily unavailable") && !m.contains("would have blocked"),
        "{m}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
    holder.join().unwrap();
}
