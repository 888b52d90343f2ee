//! The TLS 1.2 DHE server reports the length of the private exponent it drew for each
//! connection: short with the RFC 3526 primes, which OpenSSL knows as named groups, and as
//! long as the prime (less two bits) with the RFC 2409 1024-bit prime, which it does not.

mod common;
use common::{make_certs, Running, TempDir};

const SUITE: &str = "DHE-RSA-AES128-GCM-SHA256";

/// A TLS 1.2 DHE handshake with the server on `port`, as a client at security level 1
/// (level 2 refuses 1024-bit DH).
fn dhe_handshake(port: u16) {
    use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode, SslVersion};
    let mut b = SslConnector::builder(SslMethod::tls_client()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    b.set_max_proto_version(Some(SslVersion::TLS1_2)).unwrap();
    b.set_cipher_list(SUITE).unwrap();
    b.set_security_level(1);
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut tls = b
        .build()
        .configure()
        .unwrap()
        .verify_hostname(false)
        .connect("localhost", tcp)
        .expect("DHE handshake");
    assert_eq!(tls.ssl().current_cipher().unwrap().name(), SUITE);
    let _ = tls.shutdown();
}

/// The server's `dh_private_bits` for `n` connections with the RFC prime of `bits`.
fn private_bits(dir: &TempDir, bits: &str, n: usize) -> Vec<Option<u64>> {
    let d = dir.path().to_str().unwrap();
    let (chain, key) = (format!("{d}/chain.pem"), format!("{d}/server.key.pem"));
    let count = n.to_string();
    let mut srv = Running::start(&[
        "tls",
        "server",
        "--listen",
        "127.0.0.1:0",
        "--cert-chain",
        &chain,
        "--key",
        &key,
        "--tls-version",
        "1.2",
        "--ciphers",
        SUITE,
        "--dh-bits",
        bits,
        "--max-connections",
        &count,
    ]);
    let port = srv.wait_for("listening", 30.0).expect("listening")["port"]
        .as_u64()
        .unwrap() as u16;
    (0..n)
        .map(|_| {
            dhe_handshake(port);
            let rec = srv.wait_for("connection", 30.0).expect("connection record");
            rec["dh_private_bits"].as_u64()
        })
        .collect()
}

#[test]
fn the_server_reports_the_dh_exponent_it_drew() {
    let dir = TempDir::new("dhe");
    make_certs(dir.path(), "RSA:2048", "RSA:2048");
    // RFC 3526's 2048-bit prime is OpenSSL's named group modp_2048: exponents of at most 225
    // bits (crypto/ffc/ffc_dh.c), never all with the top bit clear.
    let short = private_bits(&dir, "2048", 6);
    assert!(
        short.iter().all(|b| b.is_some_and(|b| b <= 225)),
        "{short:?}"
    );
    assert!(
        short.iter().any(|b| b.is_some_and(|b| b > 200)),
        "{short:?}"
    );
    // RFC 2409's 1024-bit prime is no named group: BN_priv_rand with the top bit set,
    // p bits - 2 long (crypto/dh/dh_key.c).
    let full = private_bits(&dir, "1024", 3);
    assert!(full.iter().all(|&b| b == Some(1022)), "{full:?}");
}
