//! `tls reference`: the rustls stacks driven as rustls's own benchmark (in memory) and
//! example client and server (blocking TCP on 127.0.0.1) drive them; every handshake
//! checked, each side's CPU reported; a stack without the mode says so in one line.

mod common;
use common::{make_certs, TempDir};

fn reference(dir: &str, stack: &str, transport: &str, group: &str) -> std::process::Output {
    let (chain, key, root) = (
        format!("{dir}/chain.pem"),
        format!("{dir}/server.key.pem"),
        format!("{dir}/root.crt.pem"),
    );
    common::engine()
        .args([
            "tls",
            "reference",
            "--stack",
            stack,
            "--transport",
            transport,
            "--cert-chain",
            &chain,
            "--key",
            &key,
            "--ca",
            &root,
            "--servername",
            "localhost",
            "--groups",
            group,
            "--sigalgs",
            "ecdsa_secp256r1_sha256",
            "-n",
            "5",
            "--warmup",
            "1",
        ])
        .output()
        .expect("engine runs")
}

#[test]
fn both_transports_run_checked_handshakes_and_report_each_side() {
    let dir = TempDir::new("reference");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let d = dir.path().to_str().unwrap();
    for stack in ["rustls", "rustls-aws-lc-rs"] {
        for transport in ["memory", "tcp"] {
            let out = reference(d, stack, transport, "X25519MLKEM768");
            assert!(
                out.status.success(),
                "{stack} {transport}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            let recs = common::records(&out.stdout);
            assert_eq!(recs[0]["type"], "config");
            assert_eq!(recs[0]["options"]["transport"], transport);
            let hs: Vec<_> = recs.iter().filter(|r| r["type"] == "reference").collect();
            assert_eq!(hs.len(), 6, "{stack} {transport}");
            for h in &hs {
                assert_eq!(h["group_code"], 0x11ec);
                assert_eq!(h["sigalg_code"], 0x0403);
                assert!(h["server_cpu_ns"].as_u64().unwrap() > 0);
                assert!(h["client_cpu_ns"].as_u64().unwrap() > 0);
                assert!(h["wall_ns"].as_u64().unwrap() > 0);
                if transport == "memory" {
                    // The server's flight (certificate included) is larger than the client's.
                    assert!(h["server_bytes"].as_u64() > h["client_bytes"].as_u64());
                } else {
                    assert!(h["client_bytes"].is_null());
                }
            }
        }
    }
}

#[test]
fn unknown_names_and_stacks_without_the_mode_are_refused() {
    let dir = TempDir::new("reference-bad");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let d = dir.path().to_str().unwrap();
    let out = reference(d, "openssl", "memory", "X25519");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no reference mode"));
    let out = reference(d, "rustls", "memory", "NOPE");
    assert_eq!(out.status.code(), Some(2));
}
