//! Every TLS command says in its first record what it runs with: a flag set on the command
//! line comes back under its own name in `options`, and a default comes back as the value
//! used, so the lab can check that every field of its specs reached the engine.

mod common;
use common::{make_certs, Running, TempDir};
use serde_json::{json, Value};

fn first_record(args: &[&str]) -> Value {
    let (out, recs) = common::run(args);
    assert!(
        out.status.success(),
        "{args:?}: {recs:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    recs.into_iter().next().expect("a first record")
}

fn assert_options(rec: &Value, expected: &[(&str, Value)]) {
    let o = &rec["options"];
    for (k, v) in expected {
        assert_eq!(&o[*k], v, "option {k} in {rec}");
    }
}

#[test]
fn every_tls_command_echoes_its_options() {
    let dir = TempDir::new("echo");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let d = dir.path().to_str().unwrap();
    let (chain, key, root) = (
        format!("{d}/chain.pem"),
        format!("{d}/server.key.pem"),
        format!("{d}/root.crt.pem"),
    );
    let mut srv = Running::start(&[
        "tls",
        "server",
        "--listen",
        "127.0.0.1:0",
        "--cert-chain",
        &chain,
        "--key",
        &key,
        "--threads",
        "3",
        "--max-response-bytes",
        "12345",
        "--handshake-timeout",
        "7",
        "--io-timeout",
        "9",
        "--response-mode",
        "echo-size",
        "--groups",
        "X25519",
        "--events",
        "off",
    ]);
    let listening = srv.wait_for("listening", 30.0).expect("listening record");
    assert_options(
        &listening,
        &[
            ("threads", json!(3)),
            ("max-response-bytes", json!(12345)),
            ("handshake-timeout", json!(7)),
            ("io-timeout", json!(9)),
            ("response-mode", json!("echo-size")),
            ("groups", json!("X25519")),
            ("events", json!("off")),
            ("concurrent", json!(false)),
            ("max-connections", Value::Null),
            ("stack", json!("openssl")),
            ("tls-version", json!("1.3")),
        ],
    );
    assert!(listening["options"]["cpus"]
        .as_array()
        .is_some_and(|c| !c.is_empty()));
    let port = listening["port"].as_u64().unwrap().to_string();
    let connect = format!("127.0.0.1:{port}");
    let target = [
        "--connect",
        &connect,
        "--ca",
        &root,
        "--servername",
        "localhost",
        "--groups",
        "X25519",
    ];

    client_and_load_echo(&target);
    bulk_and_hold_echo(&target);
    memory_echoes(&chain, &key, &root);
}

/// `tls client` and `tls load` against the server at `target`.
fn client_and_load_echo(target: &[&str]) {
    let client = first_record(
        &[
            &["tls", "client"][..],
            target,
            &[
                "-n",
                "2",
                "--warmup",
                "1",
                "--request-bytes",
                "100",
                "--time-limit",
                "50",
            ],
            &["--io-timeout", "8", "--gap-ms", "1"],
        ]
        .concat(),
    );
    assert_eq!(client["type"], "config");
    assert_eq!(client["command"], "tls client");
    assert_options(
        &client,
        &[
            ("count", json!(2)),
            ("warmup", json!(1)),
            ("request-bytes", json!(100)),
            ("time-limit", json!(50)),
            ("io-timeout", json!(8)),
            ("gap-ms", json!(1)),
            ("servername", json!("localhost")),
            // Implied by --groups naming one group.
            ("expect-group", json!("X25519")),
            ("expect-sigalg", Value::Null),
        ],
    );

    let load = first_record(
        &[
            &["tls", "load"][..],
            target,
            &["--mode", "open", "--rate", "250", "--clients", "3"],
            &["--duration-ms", "40", "-n", "5", "--warmup", "2"],
        ]
        .concat(),
    );
    assert_eq!(load["command"], "tls load");
    assert_options(
        &load,
        &[
            ("mode", json!("open")),
            ("rate", json!(250.0)),
            ("clients", json!(3)),
            ("duration-ms", json!(40)),
            ("count", json!(5)),
            ("warmup", json!(2)),
            ("expect-group", json!("X25519")),
        ],
    );
}

/// `tls bulk` and `tls hold` against the server at `target`.
fn bulk_and_hold_echo(target: &[&str]) {
    let bulk = first_record(
        &[
            &["tls", "bulk"][..],
            target,
            &["--push-bytes", "1000", "--pull-bytes", "2000", "-n", "1"],
        ]
        .concat(),
    );
    assert_eq!(bulk["command"], "tls bulk");
    assert_options(
        &bulk,
        &[("push-bytes", json!(1000)), ("pull-bytes", json!(2000))],
    );

    let hold = first_record(
        &[
            &["tls", "hold"][..],
            target,
            &["-n", "2", "--hold-ms", "5", "--gap-ms", "3"],
        ]
        .concat(),
    );
    assert_eq!(hold["command"], "tls hold");
    assert_options(
        &hold,
        &[
            ("count", json!(2)),
            ("hold-ms", json!(5)),
            ("gap-ms", json!(3)),
        ],
    );
}

/// `tls memory`, both roles in its own process.
fn memory_echoes(chain: &str, key: &str, root: &str) {
    let memory = first_record(&[
        "tls",
        "memory",
        "--cert-chain",
        chain,
        "--key",
        key,
        "--ca",
        root,
        "-n",
        "3",
        "--warmup",
        "1",
        "--thread-stack",
        "1048576",
        "--groups",
        "X25519",
    ]);
    assert_eq!(memory["type"], "memory_setup");
    assert_options(
        &memory,
        &[
            ("count", json!(3)),
            ("warmup", json!(1)),
            ("thread-stack", json!(1048576)),
            ("groups", json!("X25519")),
            ("servername", json!("localhost")),
            ("role", json!("both")),
        ],
    );
    assert_eq!(memory["role"], "both");
}

#[test]
fn concurrent_servers_echo_the_cap_they_use() {
    let dir = TempDir::new("echo-cap");
    make_certs(dir.path(), "EC:P-256", "EC:P-256");
    let d = dir.path().to_str().unwrap();
    let (chain, key) = (format!("{d}/chain.pem"), format!("{d}/server.key.pem"));
    let mut srv = Running::start(&[
        "tls",
        "server",
        "--listen",
        "127.0.0.1:0",
        "--cert-chain",
        &chain,
        "--key",
        &key,
        "--concurrent",
    ]);
    let listening = srv.wait_for("listening", 30.0).expect("listening record");
    assert_options(
        &listening,
        &[
            ("concurrent", json!(true)),
            ("max-concurrent", json!(64)),
            ("handshake-timeout", json!(60)),
        ],
    );
}
