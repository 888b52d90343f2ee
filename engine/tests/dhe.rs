//! The TLS 1.2 DHE server reports the length of the private exponent it drew for each
//! connection: short with the RFC primes, which OpenSSL knows as named groups (RFC 3526, and
//! RFC 5114's 1024-bit group for 1024), and as long as the prime (less two bits) with a prime
//! of no named group given in a file (here RFC 2409's 1024-bit prime).

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

/// The server's `dh_private_bits` for `n` connections with these DH options (`--dh-bits N`
/// or `--dh-params FILE`).
fn private_bits(dir: &TempDir, dh: [&str; 2], n: usize) -> Vec<Option<u64>> {
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
        dh[0],
        dh[1],
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
    let short = private_bits(&dir, ["--dh-bits", "2048"], 6);
    assert!(
        short.iter().all(|b| b.is_some_and(|b| b <= 225)),
        "{short:?}"
    );
    assert!(
        short.iter().any(|b| b.is_some_and(|b| b > 200)),
        "{short:?}"
    );
    // The 1024-bit RFC parameters are RFC 5114's dh_1024_160: 160-bit exponents.
    let short = private_bits(&dir, ["--dh-bits", "1024"], 6);
    assert!(
        short
            .iter()
            .all(|b| b.is_some_and(|b| (140..=160).contains(&b))),
        "{short:?}"
    );
    // RFC 2409's 1024-bit prime is no named group: BN_priv_rand with the top bit set,
    // p bits - 2 long (crypto/dh/dh_key.c).
    let p = openssl::bn::BigNum::get_rfc2409_prime_1024().unwrap();
    let g = openssl::bn::BigNum::from_u32(2).unwrap();
    let pem = openssl::dh::Dh::from_pqg(p, None, g)
        .unwrap()
        .params_to_pem()
        .unwrap();
    let file = dir.path().join("rfc2409.pem");
    std::fs::write(&file, pem).unwrap();
    let full = private_bits(&dir, ["--dh-params", file.to_str().unwrap()], 3);
    assert!(full.iter().all(|&b| b == Some(1022)), "{full:?}");
}
