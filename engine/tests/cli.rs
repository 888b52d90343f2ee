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

#[test]
fn fixed_time_mode_runs_each_operation_for_its_seconds_and_keeps_every_sample() {
    // liboqs's speed_kem style: as many operations as fit, each checked.
    let (out, recs) = run(&[
        "kem",
        "--backend",
        "openssl",
        "--alg",
        "X25519",
        "--seconds",
        "0.05",
        "--iterations",
        "10000000",
        "--warmup",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(0), "{recs:?}");
    let done: Vec<_> = recs.iter().filter(|r| r["type"] == "op_done").collect();
    assert_eq!(done.len(), 3, "{done:?}"); // keygen, public_key, shared_secret
    for d in &done {
        let own = d["own_seconds"].as_f64().unwrap();
        // Each operation has its own time, not its partner's: the fast public_key's runs do
        // not keep the slow shared_secret timed beyond its 50 ms (one run may cross it).
        assert!((0.05..0.1).contains(&own), "{d}");
        assert_eq!(d["budget_exhausted"], false, "{d}");
        let op = d["op"].as_str().unwrap();
        let kept = recs
            .iter()
            .filter(|r| r["type"] == "sample" && r["op"] == op && r["dropped"] == false)
            .count();
        assert_eq!(kept as u64, d["kept"].as_u64().unwrap(), "{op}");
        assert!(kept > 10, "{op}: only {kept} runs in 50 ms");
        let sum: u64 = recs
            .iter()
            .filter(|r| r["type"] == "sample" && r["op"] == op && r["dropped"] == false)
            .map(|r| r["ns"].as_u64().unwrap())
            .sum();
        assert!(
            (sum as f64 / 1e9 - own).abs() < 1e-6,
            "{op}: {sum} ns vs {own} s"
        );
    }
    // As many runs as fit: exporting and importing a key share is many times faster than
    // deriving a secret, so it makes many times more runs in the same time.
    let kept = |op: &str| {
        done.iter().find(|d| d["op"] == op).unwrap()["kept"]
            .as_u64()
            .unwrap()
    };
    assert!(
        kept("public_key") > 3 * kept("shared_secret"),
        "{} vs {}",
        kept("public_key"),
        kept("shared_secret")
    );
    let (out, recs) = run(&[
        "kem",
        "--backend",
        "openssl",
        "--alg",
        "X25519",
        "--seconds",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(recs.last().unwrap()["message"]
        .as_str()
        .unwrap()
        .contains("--seconds"));
}
