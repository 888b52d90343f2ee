//! The client options a probe of an outside server needs, on real loopback handshakes:
//! chains only reported on (`--verify report`), the key shares the ClientHello carries
//! (`--key-shares`, a HelloRetryRequest when the server wants another group), an HTTP GET
//! read to its end (`--request-path`), the server's certificates (`--peer-chain`), the wait
//! for the server's close (`--await-close-ms`), a failed connection recorded before the
//! run ends, and a whole connection bounded by `--connection-timeout` and `--time-limit`
//! however the server paces its bytes.

use super::{client, connect, server};
use crate::out::Error;
use crate::tls::contract::{fake_server, loopback, make_certs, ClientCli, ServerCli, TempDir};
use crate::tls::record::Memory;
use clap::Parser;
use serde_json::Value;
use std::net::TcpListener;
use std::time::{Duration, Instant};

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
    for stack in library_stacks() {
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
    // The library's stacks that serve the ML-DSA-44 leaf.
    let serve_it = |st: &&dyn crate::tls::stack::Stack| {
        st.describe()
            .is_ok_and(|i| i.cert_key_types.iter().any(|k| k == "ML-DSA-44"))
    };
    let stacks: Vec<_> = crate::tls::registry::library()
        .into_iter()
        .filter(serve_it)
        .collect();
    assert!(stacks.len() >= 2, "fewer than two stacks serve ML-DSA-44");
    for stack in stacks.iter().map(|s| s.name()) {
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

/// The names of the library's stacks.
fn library_stacks() -> Vec<&'static str> {
    crate::tls::registry::library()
        .iter()
        .map(|s| s.name())
        .collect()
}

#[test]
fn a_failed_connection_is_recorded_before_the_error() {
    let dir = TempDir::new("fail");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    for (reply, kind) in [
        (&b""[..], "peer"),
        // Bytes that are not TLS: the peer misbehaved (exit 7), the library refused nothing.
        (&b"HTTP/1.1 400 Bad Request\r\n\r\n"[..], "peer"),
        // A fatal handshake_failure alert, as a server without the group sends it.
        (&[21u8, 3, 3, 0, 2, 2, 40][..], "peer"),
    ] {
        let (port, h) = fake_server(reply, Duration::ZERO);
        let a = client_args(dir.path(), port, &[]);
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

/// The client's options against 127.0.0.1:`port` with the root of `dir`.
fn client_args(dir: &std::path::Path, port: u16, extra: &[&str]) -> connect::Args {
    let connect = format!("127.0.0.1:{port}");
    let root = dir.join("root.crt.pem");
    let mut argv = vec![
        "t",
        "--connect",
        &connect,
        "--ca",
        root.to_str().unwrap(),
        "--io-timeout",
        "5",
    ];
    argv.extend(extra);
    ClientCli::parse_from(argv).a
}

#[test]
fn a_server_that_stalls_after_the_handshake_is_cut_off_in_the_response() {
    let dir = TempDir::new("stall");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    for stack in library_stacks() {
        // --response-mode none: the server reads the request and never answers it.
        let t0 = Instant::now();
        let r = loopback(
            dir.path(),
            &["--stack", stack, "--response-mode", "none"],
            &[
                "--stack",
                stack,
                "--request-bytes",
                "1000",
                "--connection-timeout",
                "1",
            ],
            1,
        );
        let took = t0.elapsed();
        let e = r.client.unwrap_err();
        assert_eq!(e.kind(), "io", "{stack}: {e}");
        assert!(
            e.message()
                .contains("timed out after 1 s in the response (--connection-timeout 1)"),
            "{stack}: {e}"
        );
        assert!(took < Duration::from_secs(4), "{stack}: {took:?}");
        assert_eq!(r.client_records[0]["failed_in"], "response", "{stack}");
        assert!(r.client_records[0]["t_handshake_done"].is_i64(), "{stack}");
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

/// A sink that holds records as `record::Stdout::hold` does: only what `flush_held` let
/// out is `written`.
#[derive(Default)]
struct Held {
    pending: std::sync::Mutex<Vec<Value>>,
    written: std::sync::Mutex<Vec<Value>>,
}

impl Held {
    fn written(&self) -> Vec<Value> {
        self.written.lock().unwrap().clone()
    }
}

impl crate::tls::record::Sink for Held {
    fn record(&self, record: &Value) {
        self.pending.lock().unwrap().push(record.clone());
    }
    fn connection(&self, record: &Value, _events: Option<&[crate::tls::record::Event]>) {
        self.record(record);
    }
    fn flush_held(&self) {
        let mut p = self.pending.lock().unwrap();
        self.written.lock().unwrap().append(&mut p);
    }
}

/// SIGCONT to one thread (a process-wide one could go to any thread not blocking it).
fn signal_thread(thread: libc::pthread_t) {
    assert_eq!(unsafe { libc::pthread_kill(thread, libc::SIGCONT) }, 0);
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The records of a `--rounds 1:1,0:3` client: each connection of its round, warm-up
/// first, then the round's record with its size, time and memory; a round record last.
fn rounds_written_after_their_connections(all: &[Value]) {
    let conns: Vec<&Value> = all.iter().filter(|r| r["type"] == "connection").collect();
    let got: Vec<_> = conns
        .iter()
        .map(|c| {
            (
                c["round"].as_u64().unwrap(),
                c["warmup"].as_bool().unwrap(),
                c["index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (0, true, 0),
            (0, false, 0),
            (1, false, 1),
            (1, false, 2),
            (1, false, 3)
        ]
    );
    let rounds: Vec<&Value> = all.iter().filter(|r| r["type"] == "round").collect();
    assert_eq!(rounds.len(), 2);
    assert_eq!(
        (rounds[1]["round"].as_u64(), rounds[1]["count"].as_u64()),
        (Some(1), Some(3))
    );
    assert!(rounds[1]["seconds"].as_f64().unwrap() > 0.0);
    assert!(rounds[1]["vm_hwm_kib"].as_u64().unwrap() > 1000);
    assert_eq!(all.last().unwrap()["type"], "round");
}

#[test]
fn rounds_run_when_signalled_and_write_each_round_after_it() {
    let dir = TempDir::new("rounds");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let d = dir.path().to_str().unwrap();
    let (chain, key, root) = (
        format!("{d}/chain.pem"),
        format!("{d}/server.key.pem"),
        format!("{d}/root.crt.pem"),
    );
    let sa = ServerCli::parse_from([
        "t",
        "--listen",
        "127.0.0.1:0",
        "--cert-chain",
        &chain,
        "--key",
        &key,
        "--max-connections",
        "5",
        "--response-mode",
        "none",
    ])
    .a;
    let (stack, ctx) = server::prepare(&sa).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let connect = format!("127.0.0.1:{}", listener.local_addr().unwrap().port());
    let server_sink = std::sync::Arc::new(Memory::default());
    let sink: std::sync::Arc<dyn crate::tls::record::Sink> = server_sink.clone();
    let srv = std::thread::spawn(move || {
        server::serve(stack, ctx, listener, std::sync::Arc::new(sa), sink)
    });
    let a = ClientCli::parse_from([
        "t",
        "--connect",
        &connect,
        "--ca",
        &root,
        "--servername",
        "localhost",
        "--rounds",
        "1:1, 0:3",
        "-n",
        "4",
        "--warmup",
        "1",
        "--time-limit",
        "60",
    ])
    .a;
    client::block_round_signal().unwrap();
    let held = std::sync::Arc::new(Held::default());
    let me = unsafe { libc::pthread_self() };
    let h2 = held.clone();
    // The caller's side: each round's signal once the client is ready for it, and what the
    // client had written by then.
    let caller = std::thread::spawn(move || {
        let types = |v: &[Value]| {
            v.iter()
                .map(|r| r["type"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        wait_until("the config record", || !h2.written().is_empty());
        // Nothing runs before the first signal.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(types(&h2.written()), ["config"]);
        signal_thread(me);
        wait_until("round 0", || {
            h2.written().iter().any(|r| r["type"] == "round")
        });
        let first = types(&h2.written());
        signal_thread(me);
        first
    });
    let stack = a.tls.stack().unwrap();
    client::run_with(stack, &a, &*held).unwrap();
    let first = caller.join().unwrap();
    srv.join().unwrap().unwrap();
    assert_eq!(first, ["config", "connection", "connection", "round"]);
    rounds_written_after_their_connections(&held.written());
    assert!(held.pending.lock().unwrap().is_empty());
    assert_eq!(
        server_sink
            .records()
            .iter()
            .filter(|r| r["type"] == "connection")
            .count(),
        5
    );
}

#[test]
fn rounds_are_checked_and_bounded() {
    let dir = TempDir::new("rounds-bad");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let root = dir.path().join("root.crt.pem");
    let root = root.to_str().unwrap();
    for (rounds, n, warmup, why) in [
        ("1:2,0:3", "4", "1", "-n and --warmup must be those totals"),
        ("2", "2", "0", "a round without ':'"),
        ("x:1", "1", "0", "a warm-up that is not a number"),
        ("0:0", "0", "0", "a round of no connections"),
    ] {
        let a = ClientCli::parse_from([
            "t",
            "--connect",
            "127.0.0.1:9",
            "--ca",
            root,
            "--rounds",
            rounds,
            "-n",
            n,
            "--warmup",
            warmup,
        ])
        .a;
        let e = client::parse_rounds(&a).unwrap_err();
        assert_eq!(e.kind(), "usage", "{rounds}");
        assert!(e.message().contains(why), "{rounds}: {e}");
    }
    // No signal: the time limit ends the wait.
    let (port, h) = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        (l.local_addr().unwrap().port(), l)
    };
    let connect = format!("127.0.0.1:{port}");
    let a = ClientCli::parse_from([
        "t",
        "--connect",
        &connect,
        "--ca",
        root,
        "--rounds",
        "0:1",
        "--time-limit",
        "1",
    ])
    .a;
    client::block_round_signal().unwrap();
    let sink = Held::default();
    let t0 = std::time::Instant::now();
    let e = client::run_with(a.tls.stack().unwrap(), &a, &sink).unwrap_err();
    assert!(
        e.message().contains("waiting for the signal of round 0"),
        "{e}"
    );
    assert!(t0.elapsed() >= std::time::Duration::from_millis(900));
    assert_eq!(sink.written().len(), 1, "the config record only");
    drop(h);
}

#[test]
fn warm_ups_ask_for_their_own_bytes() {
    let dir = TempDir::new("warmup-bytes");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let r = loopback(
        dir.path(),
        &["--response-mode", "echo-size"],
        &[
            "--warmup",
            "2",
            "-n",
            "3",
            "--request-bytes",
            "5000",
            "--warmup-request-bytes",
            "0",
        ],
        5,
    );
    r.client.unwrap();
    let asked: Vec<(bool, i64)> = r
        .client_records
        .iter()
        .zip(&r.server_records)
        .map(|(c, s)| (c["warmup"] == true, s["request_bytes"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        asked,
        [
            (true, 0),
            (true, 0),
            (false, 5000),
            (false, 5000),
            (false, 5000)
        ]
    );
    let alone = ClientCli::try_parse_from([
        "t",
        "--connect",
        "127.0.0.1:1",
        "--ca",
        "x",
        "--warmup-request-bytes",
        "0",
    ]);
    assert!(
        alone.is_err(),
        "--warmup-request-bytes needs --request-bytes"
    );
}

#[test]
fn the_load_generator_refuses_warm_up_request_bytes() {
    #[derive(Parser)]
    struct LoadCli {
        #[command(flatten)]
        a: super::load::Args,
    }
    let a = LoadCli::parse_from([
        "t",
        "--connect",
        "127.0.0.1:1",
        "--ca",
        "x",
        "--mode",
        "closed",
        "--duration-ms",
        "10",
        "--request-bytes",
        "10",
        "--warmup-request-bytes",
        "0",
    ])
    .a;
    match super::load::run_with(&a) {
        Err(Error::Usage(m)) => assert!(m.contains("--warmup-request-bytes"), "{m}"),
        other => panic!("{other:?}"),
    }
}
