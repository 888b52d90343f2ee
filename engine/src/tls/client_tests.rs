//! The client options a probe of an outside server needs, on real loopback handshakes:
//! chains only reported on (`--verify report`), the key shares the ClientHello carries
//! (`--key-shares`, a HelloRetryRequest when the server wants another group), an HTTP GET
//! read to its end (`--request-path`), the server's certificates (`--peer-chain`), the wait
//! for the server's close (`--await-close-ms`), and a failed connection recorded before the
//! run ends.

use super::record::testing::Memory;
use super::tests::{loopback, make_certs, TempDir};
use super::{client, server};
use crate::out::Error;
use clap::Parser;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpListener;

#[derive(Parser)]
struct ClientCli {
    #[command(flatten)]
    a: client::Args,
}

#[derive(Parser)]
struct ServerCli {
    #[command(flatten)]
    a: server::Args,
}

fn sent_and_received(record: &Value, msg: &str) -> (usize, usize) {
    let evs = record["events"].as_array().cloned().unwrap_or_default();
    let count = |dir: &str| {
        evs.iter()
            .filter(|e| e["ev"] == "handshake" && e["dir"] == dir && e["msg"] == msg)
            .count()
    };
    (count("sent"), count("recv"))
}

#[test]
fn a_chain_that_does_not_validate_is_reported_or_refused() {
    let dir = TempDir::new("verify");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    // The same server chain, and a root the client trusts that did not sign it.
    let other = TempDir::new("verify-other");
    make_certs(other.path(), "EC:P-256", "EC:P-256");
    let wrong = TempDir::new("verify-wrong");
    std::fs::create_dir_all(wrong.path()).unwrap();
    for f in ["chain.pem", "server.key.pem"] {
        std::fs::copy(dir.path().join(f), wrong.path().join(f)).unwrap();
    }
    std::fs::copy(
        other.path().join("root.crt.pem"),
        wrong.path().join("root.crt.pem"),
    )
    .unwrap();
    for stack in ["openssl", "rustls", "rustls-aws-lc-rs"] {
        // Required (the default): the handshake ends, recorded as a connection_error.
        let r = loopback(wrong.path(), &["--stack", stack], &["--stack", stack], 1);
        assert!(
            matches!(r.client, Err(Error::Check(_))),
            "{stack}: {:?}",
            r.client
        );
        assert_eq!(r.client_records.len(), 1, "{stack}");
        assert_eq!(r.client_records[0]["type"], "connection_error", "{stack}");
        // Reported: the handshake completes and says why the chain did not validate.
        let r = loopback(
            wrong.path(),
            &["--stack", stack],
            &["--stack", stack, "--verify", "report", "-n", "2"],
            2,
        );
        r.client.unwrap_or_else(|e| panic!("{stack}: {e}"));
        for c in &r.client_records {
            assert_eq!(c["type"], "connection", "{stack}");
            assert_eq!(c["verified"], false, "{stack}");
            assert!(!c["verify_error"].as_str().unwrap().is_empty(), "{stack}");
        }
        // Reported and valid: verified, no error.
        let r = loopback(
            dir.path(),
            &["--stack", stack],
            &["--stack", stack, "--verify", "report"],
            1,
        );
        r.client.unwrap();
        assert_eq!(r.client_records[0]["verified"], true, "{stack}");
        assert!(r.client_records[0].get("verify_error").is_none(), "{stack}");
    }
}

#[test]
fn key_shares_decide_whether_the_server_asks_again() {
    let dir = TempDir::new("shares");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let server = ["--groups", "X25519MLKEM768"];
    // A share for X25519 only: the server, which takes only the hybrid, retries.
    let r = loopback(
        dir.path(),
        &server,
        &[
            "--groups",
            "X25519:X25519MLKEM768",
            "--key-shares",
            "X25519",
        ],
        1,
    );
    r.client.unwrap();
    let c = &r.client_records[0];
    assert_eq!(c["negotiated"]["group"], "X25519MLKEM768");
    assert_eq!(sent_and_received(c, "client_hello"), (2, 0));
    assert_eq!(sent_and_received(c, "server_hello"), (0, 2));
    // Shares for both: one ClientHello, about 32 bytes plus the hybrid share larger.
    let r = loopback(
        dir.path(),
        &server,
        &[
            "--groups",
            "X25519:X25519MLKEM768",
            "--key-shares",
            "X25519,X25519MLKEM768",
        ],
        1,
    );
    r.client.unwrap();
    let c = &r.client_records[0];
    assert_eq!(sent_and_received(c, "client_hello"), (1, 0));
    assert!(c["record_bytes_sent"].as_u64().unwrap() > 1216 + 32);
    // rustls sends the first group's share (and a hybrid's classical half): asking for
    // another is refused before connecting.
    let r = loopback(
        dir.path(),
        &server,
        &[
            "--stack",
            "rustls-aws-lc-rs",
            "--groups",
            "X25519:X25519MLKEM768",
            "--key-shares",
            "X25519MLKEM768",
        ],
        1,
    );
    assert!(matches!(&r.client, Err(Error::Usage(m)) if m.contains("first group")));
    let r = loopback(
        dir.path(),
        &server,
        &[
            "--stack",
            "rustls-aws-lc-rs",
            "--groups",
            "X25519MLKEM768:X25519",
            "--key-shares",
            "X25519MLKEM768:X25519",
        ],
        1,
    );
    r.client.unwrap();
    assert_eq!(r.client_records[0]["negotiated"]["group_code"], 0x11ec);
}

#[test]
fn an_http_get_is_read_to_its_end_and_the_chain_recorded() {
    let dir = TempDir::new("http");
    make_certs(dir.path(), "EC:P-256", "ML-DSA-44");
    for stack in ["openssl", "rustls"] {
        let r = loopback(
            dir.path(),
            &["--stack", stack],
            &[
                "--stack",
                stack,
                "--request-path",
                "/30000",
                "--peer-chain",
                "--await-close-ms",
                "2000",
            ],
            1,
        );
        r.client.unwrap_or_else(|e| panic!("{stack}: {e}"));
        let c = &r.client_records[0];
        assert_eq!(c["http"]["status"], 200, "{c}");
        assert_eq!(c["http"]["body_bytes"], 30000);
        assert_eq!(c["http"]["framing"], "content-length");
        let d = &c["durations"];
        assert!(d["last_byte_ns"].as_i64() >= d["first_byte_ns"].as_i64());
        assert!(d["first_byte_ns"].as_i64() > d["connect_to_handshake_ns"].as_i64());
        // The chain recorded is the server's certificate, byte for byte.
        let der = std::fs::read(dir.path().join("server.crt.der")).unwrap();
        let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(c["peer_chain"], serde_json::json!([hex]), "{stack}");
        // The server closed after its response, so the wait ended at once.
        assert!(c["close_wait_ns"].as_i64().unwrap() < 1_000_000_000, "{c}");
    }
    let bad = ClientCli::try_parse_from([
        "t",
        "--connect",
        "127.0.0.1:1",
        "--ca",
        "x",
        "--request-path",
        "/1",
        "--request-bytes",
        "1",
    ]);
    assert!(
        bad.is_err(),
        "--request-path and --request-bytes exclude each other"
    );
}

/// A TCP server on 127.0.0.1 that reads the ClientHello and answers with `reply` (then
/// closes); its port.
fn fake_server(reply: &'static [u8]) -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 8192];
        let _ = s.read(&mut buf);
        let _ = s.write_all(reply);
    });
    (port, h)
}

#[test]
fn a_failed_connection_is_recorded_before_the_error() {
    let dir = TempDir::new("fail");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let root = dir.path().join("root.crt.pem");
    for (reply, kind) in [
        (&b""[..], "peer"),
        (&b"HTTP/1.1 400 Bad Request\r\n\r\n"[..], "library"),
        // A fatal handshake_failure alert, as a server without the group sends it.
        (&[21u8, 3, 3, 0, 2, 2, 40][..], "peer"),
    ] {
        let (port, h) = fake_server(reply);
        let connect = format!("127.0.0.1:{port}");
        let a = ClientCli::parse_from([
            "t",
            "--connect",
            &connect,
            "--ca",
            root.to_str().unwrap(),
            "--io-timeout",
            "5",
        ])
        .a;
        let sink = Memory::default();
        let res = a.tls.stack().and_then(|s| client::run_with(s, &a, &sink));
        h.join().unwrap();
        let e = res.unwrap_err();
        assert_eq!(e.kind(), kind, "{reply:?}: {e}");
        let recs = sink.records();
        let c = recs
            .iter()
            .find(|r| r["type"] == "connection_error")
            .unwrap();
        assert_eq!(c["kind"], kind);
        assert_eq!(c["message"], e.message());
        assert!(c["tcp_info"]["rtt_us"].is_u64(), "{c}");
        // libssl reads a record header (5 bytes) before it judges what follows.
        let got = c["bytes_received"].as_u64().unwrap() as usize;
        assert!(
            got <= reply.len() && got >= reply.len().min(5),
            "{got} of {reply:?}"
        );
        assert!(
            c["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["ev"] == "handshake" && e["msg"] == "client_hello"),
            "{c}"
        );
        if reply.len() == 7 {
            let alert = c["events"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["ev"] == "alert" && e["dir"] == "recv")
                .cloned()
                .unwrap();
            assert_eq!(
                (alert["level"].as_u64(), alert["description"].as_u64()),
                (Some(2), Some(40))
            );
        }
    }
}

#[test]
fn servers_refuse_the_client_only_options() {
    let dir = TempDir::new("server-only");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let d = dir.path().to_str().unwrap();
    for extra in [
        &["--groups", "X25519", "--key-shares", "X25519"][..],
        &["--verify", "report"][..],
    ] {
        let chain = format!("{d}/chain.pem");
        let key = format!("{d}/server.key.pem");
        let mut argv = vec![
            "t",
            "--listen",
            "127.0.0.1:0",
            "--cert-chain",
            &chain,
            "--key",
            &key,
        ];
        argv.extend(extra);
        let a = ServerCli::parse_from(argv).a;
        assert!(
            matches!(server::prepare(&a), Err(Error::Usage(m)) if m.contains("client option")),
            "{extra:?}"
        );
    }
}
