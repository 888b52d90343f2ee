//! Real loopback handshakes through the stack-neutral loops (beside the contract suite every
//! stack runs, `tls::contract`): a stack chosen by name from the registry (the test-only
//! `fake-openssl` included), a stack that lies about the group refused by the client's
//! check, negotiated code points compared with what libssl puts on the wire, key logs,
//! mutual TLS, the load generator and the server's pools.

use super::{load, server};
use crate::out::{Error, Result};
use crate::tls::contract::{
    loopback, make_certs, server_options, CertsCli, LoadCli, ServerCli, TempDir,
};
use crate::tls::pki::certs;
use crate::tls::record::Memory;
use crate::tls::stacks::openssl;
use clap::Parser;
use serde_json::Value;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;

fn handshake_messages(record: &Value) -> Vec<String> {
    record["events"]
        .as_array()
        .map(|evs| {
            evs.iter()
                .filter(|e| e["ev"] == "handshake")
                .map(|e| {
                    format!(
                        "{} {}",
                        e["dir"].as_str().unwrap(),
                        e["msg"].as_str().unwrap()
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_stack_named_in_the_registry_runs_both_loops() {
    let dir = TempDir::new("fake");
    make_certs(dir.path(), "EC:P-256", "ML-DSA-44");
    let r = loopback(
        dir.path(),
        &["--stack", "fake-openssl", "--groups", "X25519MLKEM768"],
        &[
            "--stack",
            "fake-openssl",
            "--groups",
            "X25519MLKEM768",
            "--sigalgs",
            "mldsa44",
            "-n",
            "2",
            "--request-bytes",
            "20000",
        ],
        2,
    );
    r.client.unwrap();
    assert_eq!(r.client_records.len(), 2);
    assert_eq!(r.server_records.len(), 2);
    for (c, s) in r.client_records.iter().zip(&r.server_records) {
        assert_eq!(
            (&c["type"], &s["type"]),
            (&"connection".into(), &"connection".into()),
            "{s}"
        );
        assert_eq!(c["stack"], "fake-openssl");
        assert_eq!(s["stack"], "fake-openssl");
        for neg in [&c["negotiated"], &s["negotiated"]] {
            assert_eq!(neg["group"], "X25519MLKEM768");
            assert_eq!(neg["group_code"], 0x11ec);
            assert_eq!(neg["sigalg"], "mldsa44");
            assert_eq!(neg["sigalg_code"], 0x0904);
            assert_eq!(neg["version"], "TLSv1.3");
            let cipher = neg["cipher_code"].as_u64().unwrap();
            assert!((0x1301..=0x1305).contains(&cipher), "{neg}");
        }
        assert_eq!(c["app_bytes_received"], 20000);
        assert_eq!(c["verified"], true);
        assert_eq!(c["bytes_received"], s["bytes_sent"]);
        assert_eq!(
            handshake_messages(c),
            [
                "sent client_hello",
                "recv server_hello",
                "recv encrypted_extensions",
                "recv certificate",
                "recv certificate_verify",
                "recv finished",
                "sent finished"
            ]
        );
    }
}

#[test]
fn a_stack_that_reports_another_group_is_refused_by_the_client_check() {
    let dir = TempDir::new("broken");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let r = loopback(
        dir.path(),
        &["--groups", "X25519"],
        &["--stack", "broken-wrong-group", "--groups", "X25519"],
        1,
    );
    match r.client {
        Err(Error::Check(m)) => {
            assert!(m.contains("negotiated group x448, asked for X25519"), "{m}")
        }
        other => panic!("expected a check failure, got {other:?}"),
    }
    // A refused handshake is not a sample: its record is a connection_error.
    assert!(
        r.client_records
            .iter()
            .all(|c| c["type"] == "connection_error" && c["kind"] == "check"),
        "{:?}",
        r.client_records
    );
    // The honest stack passes the same check against the same server.
    let ok = loopback(
        dir.path(),
        &["--groups", "X25519"],
        &["--groups", "X25519"],
        1,
    );
    ok.client.unwrap();
}

#[test]
fn the_client_refuses_what_it_did_not_ask_for() {
    let dir = TempDir::new("refuse");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let r = loopback(
        dir.path(),
        &["--groups", "P-256"],
        &["--groups", "X25519:P-256", "--expect-group", "X25519"],
        1,
    );
    assert!(
        matches!(&r.client, Err(Error::Check(m)) if m.contains("negotiated group secp256r1")),
        "{:?}",
        r.client
    );
    // NIST aliases are the same group (by code).
    let r = loopback(
        dir.path(),
        &["--groups", "P-256"],
        &["--groups", "prime256v1", "--expect-group", "P-256"],
        1,
    );
    r.client.unwrap();
    assert_eq!(r.client_records[0]["negotiated"]["group_code"], 23);
}

/// The code point libssl sends for one name.
fn wire_group(name: &str, tls12: bool) -> u16 {
    let w = openssl::caps::wire_code_points(name, None, tls12);
    assert_eq!(w.len(), 1, "{name}: {w:?}");
    w[0]
}

fn wire_sigalg(name: &str) -> u16 {
    let w = openssl::caps::wire_code_points("X25519", Some(name), false);
    assert_eq!(w.len(), 1, "{name}: {w:?}");
    w[0]
}

#[test]
fn negotiated_codes_are_the_code_points_libssl_sends() {
    struct Case {
        ca: &'static str,
        key: &'static str,
        version: &'static str,
        group: &'static str,
        sigalg: &'static str,
        extra: &'static [&'static str],
    }
    let case = |ca, key, version, group, sigalg, extra| Case {
        ca,
        key,
        version,
        group,
        sigalg,
        extra,
    };
    let cases = [
        case(
            "EC:P-256",
            "ML-DSA-65",
            "1.3",
            "SecP256r1MLKEM768",
            "mldsa65",
            &[],
        ),
        case(
            "EC:P-256",
            "EC:P-384",
            "1.3",
            "P-256",
            "ecdsa_secp384r1_sha384",
            &[],
        ),
        case(
            "EC:P-256",
            "RSA:2048",
            "1.3",
            "ffdhe2048",
            "rsa_pss_rsae_sha256",
            &[],
        ),
        case("EC:P-256", "ED25519", "1.3", "MLKEM512", "ed25519", &[]),
        case(
            "EC:P-256",
            "RSA:2048",
            "1.2",
            "x448",
            "rsa_pkcs1_sha384",
            &["--ciphers", "ECDHE-RSA-AES128-GCM-SHA256"],
        ),
    ];
    for Case {
        ca,
        key,
        version,
        group,
        sigalg,
        extra,
    } in cases
    {
        let dir = TempDir::new("codes");
        make_certs(dir.path(), ca, key);
        let mut common = vec![
            "--tls-version",
            version,
            "--groups",
            group,
            "--sigalgs",
            sigalg,
        ];
        common.extend(extra.iter());
        let r = loopback(dir.path(), &common, &common, 1);
        r.client.unwrap_or_else(|e| panic!("{group}/{sigalg}: {e}"));
        let c = &r.client_records[0]["negotiated"];
        let s = &r.server_records[0]["negotiated"];
        let g = wire_group(group, version == "1.2");
        let sa = wire_sigalg(sigalg);
        for neg in [c, s] {
            assert_eq!(neg["group_code"], g, "{group}: {neg}");
            assert_eq!(neg["sigalg_code"], sa, "{sigalg}: {neg}");
        }
        let cipher = c["cipher_code"].as_u64().unwrap();
        if version == "1.2" {
            assert_eq!(cipher, 0xc02f, "ECDHE-RSA-AES128-GCM-SHA256");
        }
    }
}

#[test]
fn key_logs_are_owner_only_and_never_take_over_a_file() {
    use crate::secrets::{mode, FILE_MODE};
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("keylog");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    // An existing key log of ours (0600, empty) is appended to; a new one is made 0600.
    let log = dir.path().join("keys.log");
    std::fs::write(&log, b"").unwrap();
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600)).unwrap();
    let fresh = dir.path().join("fresh.log");
    let l = log.to_str().unwrap();
    let f = fresh.to_str().unwrap();
    let r = loopback(dir.path(), &["--keylog", l], &["--keylog", f], 1);
    r.client.unwrap();
    assert_eq!(mode(&log), FILE_MODE);
    assert_eq!(mode(&fresh), FILE_MODE);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("SERVER_TRAFFIC_SECRET_0"), "{text}");
    assert!(std::fs::read_to_string(&fresh)
        .unwrap()
        .contains("CLIENT_TRAFFIC_SECRET_0"));
    // Any other file (here one readable by others, not a key log) is refused before
    // anything is served, its content and mode left as they were.
    let other = dir.path().join("passwd");
    std::fs::write(&other, b"root:x:0:0:root:/root:/bin/bash\n").unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = server::prepare(&server_options(
        dir.path(),
        &["--keylog", other.to_str().unwrap()],
    ))
    .err()
    .expect("a file that is no key log is refused");
    assert!(e.to_string().contains("--keylog"), "{e}");
    assert_eq!(mode(&other), 0o644);
    assert_eq!(
        std::fs::read(&other).unwrap(),
        b"root:x:0:0:root:/root:/bin/bash\n"
    );
}

/// A client certificate for mutual TLS: its own root (`ca`) and a leaf of `alg` with
/// clientAuth, in `dir`.
fn make_client_certs(dir: &Path, ca: &str, alg: &str) {
    let d = dir.to_str().unwrap();
    let cli = CertsCli::parse_from([
        "t",
        "--ca-alg",
        ca,
        "--server-alg",
        alg,
        "--out-dir",
        d,
        "--cn",
        "client.pqlab.test",
        "--purpose",
        "client",
    ]);
    certs::run(cli.a).unwrap();
}

#[test]
fn mutual_tls_checks_and_reports_the_client_signature() {
    let dir = TempDir::new("mtls");
    let client_dir = TempDir::new("mtls-client");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    make_client_certs(client_dir.path(), "ML-DSA-44", "ML-DSA-44");
    let c = client_dir.path().to_str().unwrap();
    let (client_ca, client_chain, client_key) = (
        format!("{c}/root.crt.pem"),
        format!("{c}/chain.pem"),
        format!("{c}/server.key.pem"),
    );
    let server = [
        "--client-ca",
        client_ca.as_str(),
        "--client-sigalgs",
        "mldsa44",
        "--response-mode",
        "none",
    ];
    let client = [
        "--cert-chain",
        client_chain.as_str(),
        "--key",
        client_key.as_str(),
        "--expect-client-sigalg",
        "mldsa44",
        "--events",
        "on",
    ];
    let r = loopback(dir.path(), &server, &client, 1);
    r.client.unwrap();
    for rec in [&r.client_records[0], &r.server_records[0]] {
        assert_eq!(rec["negotiated"]["client_sigalg"], "mldsa44", "{rec}");
        assert_eq!(rec["negotiated"]["client_sigalg_code"], 0x0904, "{rec}");
    }
    let s = &r.server_records[0];
    assert_eq!(s["type"], "connection");
    assert_eq!(s["client_verified"], true);
    assert!(s["peer_chain_der_bytes"][0].as_u64().unwrap() > 3000, "{s}");
    // The client's Certificate and CertificateVerify are in the message events.
    let sent = handshake_messages(&r.client_records[0]);
    for msg in ["sent certificate", "sent certificate_verify"] {
        assert!(sent.iter().any(|m| m == msg), "{sent:?}");
    }

    // A client without a certificate, and one whose chain ends at another root, are refused
    // by the server. (In TLS 1.3 the client has finished its side before the server's alert
    // can arrive, so only the server's record says so.)
    let r = loopback(dir.path(), &server, &[], 1);
    assert_eq!(r.server_records[0]["type"], "connection_error");
    let other = TempDir::new("mtls-other");
    make_client_certs(other.path(), "EC:P-256", "ML-DSA-44");
    let o = other.path().to_str().unwrap();
    let (oc, ok) = (format!("{o}/chain.pem"), format!("{o}/server.key.pem"));
    let r = loopback(dir.path(), &server, &["--cert-chain", &oc, "--key", &ok], 1);
    let s = &r.server_records[0];
    assert_eq!(s["type"], "connection_error", "{s}");
    assert_eq!(s["kind"], "check", "{s}");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("client's certificate"),
        "{s}"
    );
    // Without --client-ca the server does not ask, and a configured client certificate is
    // then an error on the client (it was not used).
    let r = loopback(dir.path(), &["--response-mode", "none"], &client, 1);
    let e = r.client.unwrap_err();
    assert!(matches!(e, Error::Check(_)), "{e}");
    assert!(e.to_string().contains("did not ask"), "{e}");
}

/// A --threads server on loopback (no --max-connections: it serves until the test ends)
/// and `tls load` runs against it.
fn load_against_pool(dir: &Path, threads: &str, load_args: &[&str]) -> Result<Value> {
    let d = dir.to_str().unwrap();
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
        "--events",
        "off",
        "--response-mode",
        "none",
        "--threads",
        threads,
        "--io-timeout",
        "10",
    ])
    .a;
    let (stack, ctx) = server::prepare(&sa).expect("server setup");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sink: Arc<dyn crate::tls::record::Sink> = Arc::new(Memory::default());
    std::thread::spawn(move || server::serve(stack, ctx, listener, Arc::new(sa), sink));
    let connect = format!("127.0.0.1:{port}");
    let mut argv = vec![
        "t",
        "--connect",
        &connect,
        "--ca",
        &root,
        "--servername",
        "localhost",
        "--events",
        "off",
        "--io-timeout",
        "10",
    ];
    argv.extend(load_args);
    load::run_with(
        &LoadCli::try_parse_from(argv)
            .map_err(|e| Error::Usage(e.to_string()))?
            .a,
    )
}

fn column(r: &Value, name: &str) -> Vec<i64> {
    r["samples"][name]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect()
}

#[test]
fn closed_loop_load_is_bounded_by_count_and_every_handshake_checked() {
    let dir = TempDir::new("load-closed");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let r = load_against_pool(
        dir.path(),
        "2",
        &[
            "--groups",
            "X25519",
            "--sigalgs",
            "ecdsa_secp256r1_sha256",
            "--mode",
            "closed",
            "--clients",
            "3",
            "--duration-ms",
            "20000",
            "-n",
            "30",
            "--warmup",
            "1",
        ],
    )
    .unwrap();
    assert_eq!(r["type"], "load_result");
    assert_eq!(r["completed"], 30, "{r}");
    assert_eq!(r["errors"], 0);
    assert_eq!(r["negotiated"]["group_code"], 0x001d);
    let (sched, start, connected, done, end) = (
        column(&r, "scheduled_ns"),
        column(&r, "start_ns"),
        column(&r, "connected_ns"),
        column(&r, "handshake_done_ns"),
        column(&r, "end_ns"),
    );
    for i in 0..30 {
        // Closed loop: due when started; TCP connected, then the handshake done, after the
        // start; closed after done.
        assert_eq!(sched[i], start[i]);
        assert!(start[i] < connected[i] && connected[i] < done[i] && done[i] <= end[i]);
    }
    let workers: std::collections::BTreeSet<i64> = column(&r, "worker").into_iter().collect();
    assert_eq!(workers.len(), 3);
    assert!(r["window_ns"].as_i64().unwrap() < 20_000_000_000);
}

#[test]
fn open_loop_schedules_arrivals_and_measures_from_them() {
    let dir = TempDir::new("load-open");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    // 20 arrivals/s for 1 s: 20 arrivals at 0, 50, ..., 950 ms.
    let r = load_against_pool(
        dir.path(),
        "1",
        &[
            "--groups",
            "X25519",
            "--mode",
            "open",
            "--rate",
            "20",
            "--clients",
            "2",
            "--duration-ms",
            "1000",
            "-n",
            "1000",
        ],
    )
    .unwrap();
    assert_eq!(r["arrivals"], 20, "{r}");
    assert_eq!(r["completed"], 20);
    assert_eq!(r["abandoned"], 0);
    let sched = column(&r, "scheduled_ns");
    let start = column(&r, "start_ns");
    let want: Vec<i64> = (0..20).map(|i| i * 50_000_000).collect();
    assert_eq!(sched, want);
    for (s, t) in sched.iter().zip(&start) {
        // A worker never starts an arrival before it is due.
        assert!(t >= s, "started {t} before due {s}");
    }
}

#[test]
fn load_refuses_bad_shapes_before_connecting() {
    let dir = TempDir::new("load-refuse");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    for (args, words) in [
        (vec!["--mode", "open", "--duration-ms", "100"], "--rate"),
        (
            vec!["--mode", "closed", "--rate", "5", "--duration-ms", "100"],
            "--rate",
        ),
        (vec!["--mode", "half", "--duration-ms", "100"], "half"),
        (
            vec!["--mode", "open", "--rate", "0", "--duration-ms", "100"],
            "--rate 0",
        ),
        (
            vec!["--mode", "closed", "--gap-ms", "5", "--duration-ms", "100"],
            "--gap-ms",
        ),
    ] {
        match load_against_pool(dir.path(), "1", &args) {
            Err(Error::Usage(m)) => assert!(m.contains(words), "{m}"),
            other => panic!("{args:?}: {other:?}"),
        }
    }
}

#[test]
fn threads_and_concurrent_exclude_each_other() {
    let sa = ServerCli::parse_from([
        "t",
        "--listen",
        "127.0.0.1:0",
        "--cert-chain",
        "x",
        "--key",
        "y",
        "--threads",
        "2",
        "--concurrent",
    ])
    .a;
    assert!(matches!(server::prepare(&sa), Err(Error::Usage(m)) if m.contains("--threads")));
}

/// The library's stacks serve at least the classical and ML-DSA keys the lab's default
/// matrix uses.
#[test]
fn the_library_s_stacks_serve_the_default_matrix_s_keys() {
    for st in crate::tls::registry::library() {
        let info = st.describe().unwrap();
        for spec in ["RSA:2048", "EC:P-256", "ED25519", "ML-DSA-44", "ML-DSA-87"] {
            assert!(
                info.cert_key_types
                    .iter()
                    .any(|k| k == spec || spec.starts_with(&format!("{k}:"))),
                "{} lacks {spec}: {:?}",
                st.name(),
                info.cert_key_types
            );
        }
    }
}
