//! The command line as the lab sees it: every refusal is one `error` record with a kind and
//! the kind's exit code, clap's own refusals included; help and version still work.

mod common;
use common::run;

#[test]
fn clap_refusals_are_usage_error_records() {
    let (out, recs) = run(&[
        "kem",
        "--backend",
        "openssl",
        "--alg",
        "ML-KEM-768",
        "--warmup",
        "100000000000000000000",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let last = recs.last().expect("an error record");
    assert_eq!(last["type"], "error");
    assert_eq!(last["kind"], "usage");
    let m = last["message"].as_str().unwrap();
    assert!(
        m.starts_with("invalid value '100000000000000000000' for '--warmup <WARMUP>'"),
        "{m}"
    );
    assert!(m.contains("number too large to fit in target type"), "{m}");
    // The full clap message is still on stderr for a human.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("For more information, try '--help'."),
        "{stderr}"
    );
}

#[test]
fn unknown_subcommands_and_missing_arguments_are_usage_errors() {
    for args in [
        &["no-such-command"][..],
        &["tls"][..],
        &["tls", "client", "--ca", "x.pem"][..],
    ] {
        let (out, recs) = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let last = recs.last().expect("an error record");
        assert_eq!(
            (&last["type"], &last["kind"]),
            (&"error".into(), &"usage".into())
        );
        assert!(!last["message"].as_str().unwrap().is_empty(), "{args:?}");
    }
}

#[test]
fn help_and_version_exit_zero_without_records() {
    for args in [
        &["--help"][..],
        &["--version"][..],
        &["tls", "server", "--help"][..],
    ] {
        let out = common::engine().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.is_empty() && !text.contains("\"type\""),
            "{args:?}: {text}"
        );
    }
}

#[test]
fn absurd_values_are_refused_before_any_work() {
    let cases: &[&[&str]] = &[
        &[
            "kem",
            "--backend",
            "openssl",
            "--alg",
            "ML-KEM-768",
            "--iterations",
            "10000001",
        ],
        &[
            "kem",
            "--backend",
            "openssl",
            "--alg",
            "ML-KEM-768",
            "--max-seconds",
            "1e30",
        ],
        &[
            "aead",
            "--cipher",
            "aes-128-gcm",
            "--batch-bytes",
            "1000000000000",
        ],
        &[
            "capture",
            "--interface",
            "lo",
            "--port",
            "1",
            "--pcap",
            "/dev/null",
            "--snaplen",
            "4000000000",
        ],
        &[
            "capture",
            "--interface",
            "lo",
            "--port",
            "1",
            "--pcap",
            "/dev/null",
            "--max-seconds",
            "1e300",
        ],
        &[
            "tls",
            "client",
            "--connect",
            "127.0.0.1:1",
            "--ca",
            "x",
            "--time-limit",
            "18446744073709551615",
        ],
        &[
            "tls",
            "client",
            "--connect",
            "127.0.0.1:1",
            "--ca",
            "x",
            "--io-timeout",
            "0",
        ],
        &[
            "linkem",
            "--tun-a",
            "a",
            "--tun-b",
            "b",
            "--lateness-samples",
            "100000000000",
        ],
    ];
    for args in cases {
        let (out, recs) = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {recs:?}");
        let last = recs.last().expect("an error record");
        assert_eq!(last["kind"], "usage", "{args:?}");
        // Refused at once: the error is the only record (no measurement started).
        let kinds: Vec<&str> = recs.iter().map(|r| r["type"].as_str().unwrap()).collect();
        assert!(
            kinds == ["error"] || kinds == ["cpu", "error"],
            "{args:?}: {kinds:?}"
        );
    }
}

#[test]
fn failures_carry_their_kind_and_exit_code() {
    // A library refusal is usage when the name is ours to get right...
    let (out, recs) = run(&["kem", "--backend", "openssl", "--alg", "ML-KEM-769"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(recs.last().unwrap()["kind"], "usage");
    // ...and a file that cannot be written is io.
    let (out, recs) = run(&[
        "tls",
        "certs",
        "--ca-alg",
        "EC:P-256",
        "--server-alg",
        "EC:P-256",
        "--out-dir",
        "/proc/self/no-such-dir/x",
    ]);
    assert_eq!(out.status.code(), Some(6), "{recs:?}");
    assert_eq!(recs.last().unwrap()["kind"], "io");
}
