//! The contract every TLS stack keeps, wherever it is linked: one suite of real loopback
//! handshakes through the engine's own loops, run for each stack by the tests of the program
//! that links it (`contract_suite!`): the library's stacks by `engine/tests/contract.rs`, the
//! wolfSSL program's by its own tests, a stack defined in a test program by that program
//! (`engine/tests/outside_stack.rs`). Every check takes the stack under test; interoperation
//! is checked against every other stack of the same program's registry. The helpers
//! (`loopback`, `make_certs`, `TempDir`) serve the loops' own tests too.

use super::loops::{client, connect, load, server};
use super::pki::certs;
use super::record::Memory;
use super::stack::Stack;
use crate::out::Result;
use clap::Parser;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The contract suite as tests: one `#[test]` per check, each run for every stack given
/// (`contract_suite!()`: the library's own; `contract_suite!(&STACKS)`: a program's, added
/// to its registry first so the loops find them by name).
#[macro_export]
macro_rules! contract_suite {
    () => {
        $crate::contract_suite!(@checks $crate::tls::registry::library());
    };
    ($stacks:expr) => {
        $crate::contract_suite!(@checks {
            let stacks: &'static [&'static dyn $crate::tls::stack::Stack] = $stacks;
            $crate::tls::registry::add(stacks);
            stacks.to_vec()
        });
    };
    (@checks $stacks:expr) => {
        fn contract_stacks() -> Vec<&'static dyn $crate::tls::stack::Stack> {
            $stacks
        }
        $crate::contract_suite!(@test contract_stacks,
            every_group_completes_a_verified_handshake,
            every_certificate_key_type_serves_a_verified_handshake,
            every_ca_key_type_signs_a_chain_its_client_verifies,
            a_trickling_server_cannot_hold_its_client_past_the_deadline,
            a_server_that_is_not_tls_is_a_misbehaving_peer,
            interoperates_on_every_group_it_shares,
            interoperates_on_every_signature_it_shares,
            fixes_its_randomness_exactly_when_it_says_it_can
        );
    };
    (@test $stacks:ident, $($check:ident),*) => {
        $(
            #[test]
            fn $check() {
                for stack in $stacks() {
                    $crate::tls::contract::$check(stack);
                }
            }
        )*
    };
}

#[derive(Parser)]
pub struct ServerCli {
    #[command(flatten)]
    pub a: server::Args,
}

#[derive(Parser)]
pub struct ClientCli {
    #[command(flatten)]
    pub a: connect::Args,
}

#[derive(Parser)]
pub struct LoadCli {
    #[command(flatten)]
    pub a: load::Args,
}

#[derive(Parser)]
pub struct CertsCli {
    #[command(flatten)]
    pub a: certs::Args,
}

/// A directory of the suite's own, under the system's temporary directory (named after
/// the process and a counter), removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "pqlab-tls-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A root and a server certificate in `dir`.
pub fn make_certs(dir: &Path, ca: &str, server_alg: &str) {
    let d = dir.to_str().unwrap();
    let cli = CertsCli::parse_from([
        "t",
        "--ca-alg",
        ca,
        "--server-alg",
        server_alg,
        "--out-dir",
        d,
    ]);
    certs::run(cli.a).unwrap_or_else(|e| panic!("certs {ca}/{server_alg}: {e}"));
}

pub struct Loopback {
    pub client: Result<()>,
    pub client_records: Vec<Value>,
    pub server_records: Vec<Value>,
}

/// The server's options: the chain and key in `dir`, any address, then `extra`.
pub fn server_options(dir: &Path, extra: &[&str]) -> server::Args {
    let d = dir.to_str().unwrap();
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
    ServerCli::parse_from(argv).a
}

/// One server (max_connections = the client's warm-up + count) and one client run, each
/// with its own argv (after the certificate and address options).
pub fn loopback(
    dir: &Path,
    server_args: &[&str],
    client_args: &[&str],
    connections: u64,
) -> Loopback {
    let d = dir.to_str().unwrap();
    let root = format!("{d}/root.crt.pem");
    let max = connections.to_string();
    let mut extra = vec!["--io-timeout", "10", "--max-connections", &max];
    extra.extend(server_args);
    let sa = server_options(dir, &extra);
    let (stack, ctx) = server::prepare(&sa).expect("server setup");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server_sink = Arc::new(Memory::default());
    let sink: Arc<dyn super::record::Sink> = server_sink.clone();
    let srv = std::thread::spawn(move || server::serve(stack, ctx, listener, Arc::new(sa), sink));

    let connect = format!("127.0.0.1:{port}");
    let mut argv = vec![
        "t",
        "--connect",
        &connect,
        "--ca",
        &root,
        "--servername",
        "localhost",
        "--io-timeout",
        "10",
    ];
    argv.extend(client_args);
    let ca = ClientCli::parse_from(argv).a;
    let client_sink = Memory::default();
    let client = ca
        .tls
        .stack()
        .and_then(|s| client::run_with(s, &ca, &client_sink));
    if client.is_err() {
        // Unblock a server still waiting for connections the client will not make.
        for _ in 0..connections {
            let _ = std::net::TcpStream::connect(("127.0.0.1", port));
        }
    }
    srv.join().unwrap().unwrap();
    // The client's first record is its options (checked in tests/options_echo.rs).
    let mut client_records = client_sink.records();
    if client_records
        .first()
        .is_some_and(|r| r["type"] == "config")
    {
        client_records.remove(0);
    } else {
        assert!(
            client.is_err(),
            "no config record first: {client_records:?}"
        );
    }
    Loopback {
        client,
        client_records,
        server_records: server_sink.records(),
    }
}

/// The TLS 1.3 signature schemes a key of this spec signs with, from the IANA registry and
/// the liboqs table (independent of any stack's own mapping).
pub fn schemes_of_key(spec: &str) -> Vec<u16> {
    match spec.to_ascii_uppercase().as_str() {
        s if s == "RSA" || s.starts_with("RSA:") => vec![0x0804, 0x0805, 0x0806],
        s if s.starts_with("RSA-PSS") => vec![0x0809, 0x080a, 0x080b],
        "EC:P-256" => vec![0x0403],
        "EC:P-384" => vec![0x0503],
        "EC:P-521" => vec![0x0603],
        "ED25519" => vec![0x0807],
        "ED448" => vec![0x0808],
        _ => crate::tls::pki::ids::SIGS
            .iter()
            .filter(|s| s.liboqs.eq_ignore_ascii_case(spec))
            .map(|s| s.code)
            .collect(),
    }
}

/// A CA every stack can verify (for tests of the leaf's key).
pub const CA_FOR_ALL: &str = "EC:P-256";

/// Every TLS 1.3 group the stack lists completes a verified handshake between its own
/// client and server, both sides reporting that group.
pub fn every_group_completes_a_verified_handshake(st: &'static dyn Stack) {
    let dir = TempDir::new("groups");
    make_certs(dir.path(), CA_FOR_ALL, CA_FOR_ALL);
    let info = st.describe().unwrap();
    assert!(!info.groups.is_empty(), "{} lists no group", st.name());
    for g in &info.groups {
        if !g.versions.contains(&"1.3") {
            continue;
        }
        let args = [
            "--stack",
            st.name(),
            "--groups",
            g.name.as_str(),
            "--events",
            "off",
        ];
        let r = loopback(dir.path(), &args, &args, 1);
        r.client
            .unwrap_or_else(|e| panic!("{} group {}: {e}", st.name(), g.name));
        let neg = &r.client_records[0]["negotiated"];
        assert_eq!(
            neg["group_code"].as_u64(),
            Some(g.code as u64),
            "{} {}",
            st.name(),
            g.name
        );
        assert_eq!(r.client_records[0]["verified"], true);
        let srv = &r.server_records[0]["negotiated"];
        assert_eq!(srv["group_code"], neg["group_code"], "{}", st.name());
    }
}

/// Every key type the stack says it serves serves a verified handshake, signed with a
/// scheme of that key that the stack lists.
pub fn every_certificate_key_type_serves_a_verified_handshake(st: &'static dyn Stack) {
    let info = st.describe().unwrap();
    assert!(
        !info.cert_key_types.is_empty(),
        "{} serves no key",
        st.name()
    );
    let codes: Vec<u16> = info.sigalgs.iter().map(|s| s.code).collect();
    for spec in &info.cert_key_types {
        let dir = TempDir::new("keytype");
        make_certs(dir.path(), CA_FOR_ALL, spec);
        let args = ["--stack", st.name(), "--events", "off"];
        let r = loopback(dir.path(), &args, &args, 1);
        let what = format!("{} serving {spec}", st.name());
        r.client.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(r.client_records[0]["verified"], true, "{what}");
        let neg = &r.client_records[0]["negotiated"];
        let code = neg["sigalg_code"].as_u64().unwrap() as u16;
        assert!(codes.contains(&code), "{what}: {neg}");
        assert!(
            schemes_of_key(spec).contains(&code),
            "{what} signed with {neg}"
        );
    }
}

/// Every key type the stack says can sign certificates signs a chain its client verifies
/// (a key type that serves can sign too).
pub fn every_ca_key_type_signs_a_chain_its_client_verifies(st: &'static dyn Stack) {
    let info = st.describe().unwrap();
    for spec in &info.cert_key_types {
        assert!(
            info.ca_key_types.contains(spec),
            "{}: {spec} serves but cannot sign?",
            st.name()
        );
    }
    for spec in &info.ca_key_types {
        let dir = TempDir::new("ca-keytype");
        make_certs(dir.path(), spec, CA_FOR_ALL);
        let args = ["--stack", st.name(), "--events", "off"];
        let r = loopback(dir.path(), &args, &args, 1);
        let what = format!("{} with CA {spec}", st.name());
        r.client.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(r.client_records[0]["verified"], true, "{what}");
    }
}

/// The other stacks of the registry: those the stack under test must interoperate with.
fn others(st: &dyn Stack) -> Vec<&'static dyn Stack> {
    crate::tls::registry::registered()
        .into_iter()
        .filter(|o| o.name() != st.name())
        .collect()
}

/// Every TLS 1.3 group the stack shares with another stack of the registry (by code
/// point) completes a verified handshake both ways, the stack as server and as client.
pub fn interoperates_on_every_group_it_shares(st: &'static dyn Stack) {
    let dir = TempDir::new("interop");
    make_certs(dir.path(), CA_FOR_ALL, CA_FOR_ALL);
    for other in others(st) {
        for (server, client) in [(st, other), (other, st)] {
            let si = server.describe().unwrap();
            let ci = client.describe().unwrap();
            for g in si.groups.iter().filter(|g| g.versions.contains(&"1.3")) {
                let Some(cg) = ci.groups.iter().find(|c| c.code == g.code) else {
                    continue;
                };
                let sa = ["--stack", server.name(), "--groups", g.name.as_str()];
                let ca = ["--stack", client.name(), "--groups", cg.name.as_str()];
                let r = loopback(dir.path(), &sa, &ca, 1);
                let what = format!(
                    "{} <- {} group {:#06x}",
                    server.name(),
                    client.name(),
                    g.code
                );
                r.client.unwrap_or_else(|e| panic!("{what}: {e}"));
                let neg = &r.client_records[0]["negotiated"];
                assert_eq!(neg["group_code"].as_u64(), Some(g.code as u64), "{what}");
                assert_eq!(r.client_records[0]["verified"], true, "{what}");
            }
        }
    }
}

/// Every signature scheme the stack shares with another stack of the registry, by code
/// point: a certificate of that key (made by the one builder) serves a verified handshake
/// from each one's server to the other's client.
pub fn interoperates_on_every_signature_it_shares(st: &'static dyn Stack) {
    for other in others(st) {
        for (server, client) in [(st, other), (other, st)] {
            let (sinfo, cinfo) = (server.describe().unwrap(), client.describe().unwrap());
            if !cinfo.ca_key_types.iter().any(|k| k == CA_FOR_ALL) {
                continue;
            }
            for spec in &sinfo.cert_key_types {
                let codes = schemes_of_key(spec);
                let Some(scheme) = sinfo
                    .sigalgs
                    .iter()
                    .find(|s| codes.contains(&s.code) && s.versions.contains(&"1.3"))
                else {
                    continue;
                };
                let Some(cscheme) = cinfo.sigalgs.iter().find(|c| c.code == scheme.code) else {
                    continue;
                };
                let dir = TempDir::new("interop-sig");
                make_certs(dir.path(), CA_FOR_ALL, spec);
                let sa = ["--stack", server.name(), "--sigalgs", scheme.name.as_str()];
                let ca = ["--stack", client.name(), "--sigalgs", cscheme.name.as_str()];
                let r = loopback(dir.path(), &sa, &ca, 1);
                let what = format!(
                    "{} <- {} signature {spec} ({:#06x})",
                    server.name(),
                    client.name(),
                    scheme.code
                );
                r.client.unwrap_or_else(|e| panic!("{what}: {e}"));
                let neg = &r.client_records[0]["negotiated"];
                assert_eq!(
                    neg["sigalg_code"].as_u64(),
                    Some(scheme.code as u64),
                    "{what}"
                );
                assert_eq!(r.client_records[0]["verified"], true, "{what}");
            }
        }
    }
}

/// `info`'s `fixed_random` is what `Stack::fix_randomness` does: a stack that says it can
/// fix a thread's randomness does, one that says it cannot refuses.
pub fn fixes_its_randomness_exactly_when_it_says_it_can(st: &'static dyn Stack) {
    let says = st.describe().unwrap().fixed_random;
    let did = std::thread::spawn(move || st.fix_randomness().is_ok())
        .join()
        .unwrap();
    assert_eq!(says, did, "{}", st.name());
}

/// A TCP server on 127.0.0.1 that reads the ClientHello and answers with `reply` (then
/// closes): all at once, or with `every` non-zero a byte at a time, until the client goes;
/// its port.
pub fn fake_server(reply: &[u8], every: Duration) -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let reply = reply.to_vec();
    let h = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 8192];
        let _ = s.read(&mut buf);
        if every.is_zero() {
            let _ = s.write_all(&reply);
            return;
        }
        for b in reply {
            if s.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(every);
        }
    });
    (port, h)
}

/// A server that answers the ClientHello with the start of a real ServerHello record, one
/// byte every 100 ms (so no single read waits long), until the client goes.
pub fn trickling_server() -> (u16, std::thread::JoinHandle<()>) {
    let mut hello = vec![22, 3, 3, 0, 122, 2, 0, 0, 118, 3, 3];
    hello.extend([7u8; 111]);
    fake_server(&hello, Duration::from_millis(100))
}

/// The stack's client against 127.0.0.1:`port`, trusting the root in `dir`: its result and
/// its records.
fn client_against(
    st: &dyn Stack,
    dir: &Path,
    port: u16,
    extra: &[&str],
) -> (Result<()>, Vec<Value>) {
    let connect = format!("127.0.0.1:{port}");
    let root = dir.join("root.crt.pem");
    let mut argv = vec![
        "t",
        "--stack",
        st.name(),
        "--connect",
        &connect,
        "--ca",
        root.to_str().unwrap(),
        "--io-timeout",
        "5",
    ];
    argv.extend(extra);
    let a = ClientCli::parse_from(argv).a;
    let sink = Memory::default();
    let res = client::run_with(st, &a, &sink);
    (res, sink.records())
}

/// A server that trickles its ServerHello a byte at a time cannot hold the stack's client
/// past `--connection-timeout` or `--time-limit`: the connection fails as an I/O error in
/// the handshake, naming the flag, soon after the deadline.
pub fn a_trickling_server_cannot_hold_its_client_past_the_deadline(st: &'static dyn Stack) {
    let dir = TempDir::new("trickle");
    make_certs(dir.path(), CA_FOR_ALL, CA_FOR_ALL);
    let name = st.name();
    for (bound, flag) in [
        (&["--connection-timeout", "1"][..], "--connection-timeout 1"),
        (&["--time-limit", "1"][..], "--time-limit 1"),
    ] {
        let (port, h) = trickling_server();
        let t0 = Instant::now();
        let (res, recs) = client_against(st, dir.path(), port, bound);
        let took = t0.elapsed();
        h.join().unwrap();
        let e = res.unwrap_err();
        // Each read got a byte within 100 ms: only the deadline ended the connection.
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(3),
            "{name} {flag}: {took:?}"
        );
        assert_eq!(e.kind(), "io", "{name} {flag}: {e}");
        assert!(
            e.message().contains("in the handshake") && e.message().contains(flag),
            "{name}: {e}"
        );
        let c = recs.iter().find(|r| r["type"] == "connection_error");
        let c = c.unwrap_or_else(|| panic!("{name}: {recs:?}"));
        assert_eq!(c["failed_in"], "handshake", "{name}");
        assert!(c["bytes_received"].as_u64().unwrap() >= 5, "{c}");
    }
}

/// A server that answers the ClientHello with something that is not a TLS server's answer
/// (HTTP, a Certificate where the ServerHello belongs, nothing at all) is a peer that
/// misbehaved, whatever the stack, and the connection is recorded as such.
pub fn a_server_that_is_not_tls_is_a_misbehaving_peer(st: &'static dyn Stack) {
    let dir = TempDir::new("not-tls");
    make_certs(dir.path(), CA_FOR_ALL, CA_FOR_ALL);
    for reply in [
        &b"HTTP/1.1 400 Bad Request\r\n\r\n"[..],
        &[22, 3, 3, 0, 4, 11, 0, 0, 0][..],
        &b""[..],
    ] {
        let (port, h) = fake_server(reply, Duration::ZERO);
        let (res, recs) = client_against(st, dir.path(), port, &[]);
        h.join().unwrap();
        let e = res.unwrap_err();
        assert_eq!(e.kind(), "peer", "{} {reply:?}: {e}", st.name());
        let c = recs.iter().find(|r| r["type"] == "connection_error");
        let c = c.unwrap_or_else(|| panic!("{}: {recs:?}", st.name()));
        assert_eq!(c["kind"], "peer", "{c}");
    }
}
