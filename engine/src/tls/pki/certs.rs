//! `tls certs`: a root CA, optional intermediate CAs and a server certificate signed by the
//! last of them, with realistic content, made by the stack-neutral builder (`tls::x509`)
//! with keys of OpenSSL or liboqs (`tls::certkey`), and the DER sizes of what a handshake
//! carries. `--chain-bytes` grows the server certificate (more subjectAltName names) until
//! the certificates the server sends take exactly that many DER bytes.

use crate::out::{emit, Result};
use crate::primitives::der;
use crate::tls::pki::certkey::{self, CertKey, KeySpec};
use crate::tls::pki::ids::SIGS;
use crate::tls::pki::x509::{self, Profile, Purpose};
use serde_json::json;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Root CA key: an OpenSSL or liboqs algorithm name with an optional parameter, e.g.
    /// RSA:2048, RSA:3072, EC:P-256, ED25519, ML-DSA-44, SLH-DSA-SHA2-128s, MAYO-1,
    /// Falcon-512, cross-rsdp-128-balanced, OV-Ip-pkc.
    #[arg(long)]
    pub ca_alg: String,
    /// Server key, same syntax as --ca-alg.
    #[arg(long)]
    pub server_alg: String,
    /// Directory for the keys, certificates and chain (created 0700 if missing; private
    /// keys are written 0600).
    #[arg(long)]
    pub out_dir: PathBuf,
    /// Server certificate subject common name (also the first DNS SAN).
    #[arg(long, default_value = "server.pqlab.test")]
    pub cn: String,
    /// Subject alternative names (DNS names or IP addresses), comma separated; the CN is
    /// always included.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1,198.18.0.2"
    )]
    pub san: Vec<String>,
    /// Validity of both certificates in days, starting now.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
    /// Also put the root certificate into the chain the server sends (normally only the
    /// server certificate is sent; the client has the root).
    #[arg(long)]
    pub chain_with_root: bool,
    /// Reuse this root certificate (PEM) instead of generating one (with --ca-key); its key
    /// must be of the --ca-alg kind.
    #[arg(long, requires = "ca_key")]
    pub ca_cert: Option<PathBuf>,
    /// Private key (PEM) of --ca-cert.
    #[arg(long, requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,
    /// What the leaf certificate is for (extended key usage): server (serverAuth), client
    /// (clientAuth, for mutual TLS) or both.
    #[arg(long, default_value = "server", value_parser = ["server", "client", "both"])]
    pub purpose: String,
    /// Intermediate CA keys, comma separated, from the one the root signs down to the one
    /// that signs the server certificate (same syntax as --ca-alg); the chain the server
    /// sends carries them after its own certificate.
    #[arg(long, value_delimiter = ',')]
    pub intermediate_alg: Vec<String>,
    /// Make the certificates the server sends (its own, the intermediates, and the root
    /// with --chain-with-root) take this many DER bytes in all, by adding subjectAltName
    /// DNS names to the server certificate (within 2 bytes; refused when the chain without
    /// padding is already larger).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=16_777_215))]
    pub chain_bytes: Option<u64>,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| crate::err!(Io, "cannot read {}: {e}", path.display()))
}

/// A certificate (public): replaced whole, never written through a link (`secrets::replace`).
fn write(path: &Path, data: &[u8]) -> Result<()> {
    crate::secrets::replace(path, data, 0o644)
}

/// A root, its intermediates and a server certificate (DER) with the root's and the
/// server's keys.
pub struct Chain {
    pub root: Vec<u8>,
    /// Intermediate CAs in the order the server sends them (the server certificate's issuer
    /// first, the one the root signed last).
    pub intermediates: Vec<Vec<u8>>,
    pub server: Vec<u8>,
    pub ca_key: CertKey,
    pub server_key: CertKey,
    /// subjectAltName names added for --chain-bytes.
    pub padding_names: usize,
}

impl Chain {
    /// The certificates the server sends, leaf first.
    pub fn sent(&self, with_root: bool) -> Vec<&[u8]> {
        let mut out: Vec<&[u8]> = vec![&self.server];
        out.extend(self.intermediates.iter().map(|c| &c[..]));
        if with_root {
            out.push(&self.root);
        }
        out
    }
}

fn key_spec(flag: &str, text: &str) -> Result<KeySpec> {
    let spec = KeySpec::parse(text)?;
    if !spec.available() {
        crate::bail!(
            Usage,
            "{flag} {text:?}: no such key in OpenSSL or liboqs here (e.g. RSA:2048, \
             EC:P-256, ED25519, ML-DSA-44, SLH-DSA-SHA2-128s, MAYO-1, Falcon-512)"
        );
    }
    Ok(spec)
}

/// The CA that signs the next certificate: its Name, key identifier and key.
struct Issuer {
    subject: Vec<u8>,
    key_id: Vec<u8>,
    key: CertKey,
}

/// The intermediate CAs of `args`, each signed by the one before (the first by the root):
/// their certificates in the order a server sends them (the last made first), and the last
/// of them as the server certificate's issuer (the root when there are none).
fn intermediates(args: &Args, root: &[u8], root_key: CertKey) -> Result<(Vec<Vec<u8>>, Issuer)> {
    let parsed = x509::parse(root)?;
    let mut subject = parsed.subject.to_vec();
    let mut key_id = match parsed.key_identifier {
        Some(k) => k.to_vec(),
        None => x509::key_identifier(parsed.spki)?,
    };
    let mut signer = root_key;
    let mut certs = Vec::new();
    for (i, text) in args.intermediate_alg.iter().enumerate() {
        let key = key_spec("--intermediate-alg", text)?.generate()?;
        let profile = Profile {
            subject: x509::name(
                "JP",
                "pqlab test PKI",
                &format!("pqlab Intermediate CA {} ({text})", i + 1),
            )?,
            issuer: Some((&subject, &key_id)),
            ca: true,
            purpose: Purpose::Server,
            san: Vec::new(),
        };
        let cert = x509::build(&profile, &key, &signer, args.days)?;
        let next_subject = profile.subject;
        key_id = x509::key_identifier(&key.spki()?)?;
        subject = next_subject;
        signer = key;
        certs.push(cert);
    }
    certs.reverse();
    let issuer = Issuer {
        subject,
        key_id,
        key: signer,
    };
    Ok((certs, issuer))
}

fn purpose(text: &str) -> Purpose {
    match text {
        "client" => Purpose::Client,
        "both" => Purpose::Both,
        _ => Purpose::Server,
    }
}

pub fn build(args: &Args) -> Result<Chain> {
    let ca_spec = key_spec("--ca-alg", &args.ca_alg)?;
    let srv_spec = key_spec("--server-alg", &args.server_alg)?;
    for text in &args.intermediate_alg {
        key_spec("--intermediate-alg", text)?;
    }
    let (root, ca_key) = match (&args.ca_cert, &args.ca_key) {
        (Some(cert), Some(key)) => {
            let flag = format!("--ca-cert {}", cert.display());
            let root = certkey::pem_all(&read(cert)?, "CERTIFICATE")
                .into_iter()
                .next()
                .ok_or_else(|| crate::err!(Usage, "{flag}: no PEM certificate"))?;
            let key = CertKey::from_pem(&read(key)?, &format!("--ca-key {}", key.display()))?;
            if x509::parse(&root)?.spki != key.spki()? {
                crate::bail!(Usage, "--ca-key does not belong to --ca-cert");
            }
            (root, key)
        }
        _ => {
            let key = ca_spec.generate()?;
            let subject = x509::name(
                "JP",
                "pqlab test PKI",
                &format!("pqlab Root CA ({})", args.ca_alg),
            )?;
            let profile = Profile {
                subject,
                issuer: None,
                ca: true,
                purpose: Purpose::Server,
                san: Vec::new(),
            };
            (x509::build(&profile, &key, &key, args.days)?, key)
        }
    };
    let server_key = srv_spec.generate()?;
    // The root's key signs the first intermediate; keep a copy for the root's own file.
    let root_key = CertKey::from_pem(&ca_key.private_key_pem()?, "the root's key")?;
    let (intermediates, issuer) = intermediates(args, &root, root_key)?;
    let signer = issuer.key;
    let mut san = vec![args.cn.clone()];
    for s in &args.san {
        let s = s.trim();
        if !s.is_empty() && s != args.cn && !san.iter().any(|n| n == s) {
            san.push(s.to_string());
        }
    }
    let profile = Profile {
        subject: x509::name("JP", "pqlab test server", &args.cn)?,
        issuer: Some((&issuer.subject, &issuer.key_id)),
        ca: false,
        purpose: purpose(&args.purpose),
        san,
    };
    let mut chain = Chain {
        root,
        intermediates,
        server: Vec::new(),
        ca_key,
        server_key,
        padding_names: 0,
    };
    match args.chain_bytes {
        None => chain.server = x509::build(&profile, &chain.server_key, &signer, args.days)?,
        Some(total) => {
            let others: usize = chain.sent(args.chain_with_root)[1..]
                .iter()
                .map(|c| c.len())
                .sum();
            let target = (total as usize).saturating_sub(others);
            match x509::padded(&profile, &chain.server_key, &signer, args.days, target)? {
                Some((cert, names)) => {
                    chain.server = cert;
                    chain.padding_names = names;
                }
                None => {
                    let unpadded = x509::build(&profile, &chain.server_key, &signer, args.days)?;
                    crate::bail!(
                        Usage,
                        "--chain-bytes {total}: these certificates take {} bytes without \
                         padding (server certificate {}, the rest {others}); ask for at least that",
                        unpadded.len() + others,
                        unpadded.len()
                    );
                }
            }
        }
    }
    Ok(chain)
}

/// A signature algorithm's name: liboqs's for its OIDs, OpenSSL's (or the dotted OID) else.
fn signature_algorithm_name(alg_id: &[u8]) -> String {
    let oid = der::read(alg_id)
        .and_then(|(_, body, _)| der::read(body))
        .map(|(_, oid, _)| der::oid_text(oid))
        .unwrap_or_default();
    if let Some(s) = SIGS.iter().find(|s| s.oid == oid) {
        return s.liboqs.to_string();
    }
    openssl::asn1::Asn1Object::from_str(&oid)
        .map(|o| o.to_string())
        .unwrap_or(oid)
}

/// Every certificate of `chain` verifies under its issuer's key (the root under itself).
fn check_signatures(chain: &Chain) -> Result<()> {
    let mut issuer = x509::parse(&chain.root)?.spki.to_vec();
    let mut issued: Vec<&[u8]> = vec![&chain.root];
    issued.extend(chain.intermediates.iter().rev().map(|c| &c[..]));
    issued.push(&chain.server);
    for cert in issued {
        if !x509::signed_by(cert, &issuer)? {
            crate::bail!(
                Check,
                "a generated certificate does not verify under its issuer's key"
            );
        }
        issuer = x509::parse(cert)?.spki.to_vec();
    }
    Ok(())
}

pub fn run(args: Args) -> Result<()> {
    // Everything is made and checked before the directory that will hold keys exists.
    let chain = build(&args)?;
    check_signatures(&chain)?;
    let root = x509::parse(&chain.root)?;
    let server = x509::parse(&chain.server)?;
    // The directory holds private keys: one the engine creates is owner-only.
    crate::secrets::create_dir(&args.out_dir)?;
    let d = &args.out_dir;
    let root_pem = certkey::pem("CERTIFICATE", &chain.root);
    let server_pem = certkey::pem("CERTIFICATE", &chain.server);
    write(&d.join("root.crt.pem"), &root_pem)?;
    write(&d.join("root.crt.der"), &chain.root)?;
    crate::secrets::write(&d.join("root.key.pem"), &chain.ca_key.private_key_pem()?)?;
    write(&d.join("server.crt.pem"), &server_pem)?;
    write(&d.join("server.crt.der"), &chain.server)?;
    crate::secrets::write(
        &d.join("server.key.pem"),
        &chain.server_key.private_key_pem()?,
    )?;
    // What the server sends, leaf first (the Certificate message of TLS 1.3 adds a 3-byte
    // length and 2 bytes of empty extensions to each: `chain_tls13_list_bytes`).
    let sent = chain.sent(args.chain_with_root);
    let chain_pem: Vec<u8> = sent
        .iter()
        .flat_map(|c| certkey::pem("CERTIFICATE", c))
        .collect();
    let chain_der_bytes: usize = sent.iter().map(|c| c.len()).sum();
    write(&d.join("chain.pem"), &chain_pem)?;
    emit(&json!({
        "type": "certs",
        "ca_alg": args.ca_alg,
        "server_alg": args.server_alg,
        "intermediate_algs": args.intermediate_alg,
        "ca_key": chain.ca_key.algorithm(),
        "server_key": chain.server_key.algorithm(),
        "ca_sig_alg": signature_algorithm_name(root.signature_algorithm),
        "server_cert_sig_alg": signature_algorithm_name(server.signature_algorithm),
        "root_der_bytes": chain.root.len(),
        "server_cert_der_bytes": chain.server.len(),
        "intermediate_der_bytes": chain.intermediates.iter().map(Vec::len).collect::<Vec<_>>(),
        "root_public_key_der_bytes": root.spki.len(),
        "server_public_key_der_bytes": server.spki.len(),
        "root_signature_bytes": root.signature.len(),
        "server_cert_signature_bytes": server.signature.len(),
        "chain_certs": sent.len(),
        "chain_der_bytes": chain_der_bytes,
        "chain_tls13_list_bytes": chain_der_bytes + sent.len() * 5,
        "chain_with_root": args.chain_with_root,
        "chain_bytes_requested": args.chain_bytes,
        "padding_names": chain.padding_names,
        "files": {
            "root_cert": d.join("root.crt.pem"),
            "root_key": d.join("root.key.pem"),
            "server_cert": d.join("server.crt.pem"),
            "server_key": d.join("server.key.pem"),
            "chain": d.join("chain.pem"),
        },
        "cn": args.cn,
        "days": args.days,
        "purpose": args.purpose,
    }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(ca: &str, server: &str) -> Args {
        Args {
            ca_alg: ca.into(),
            server_alg: server.into(),
            out_dir: std::env::temp_dir(),
            cn: "server.pqlab.test".into(),
            san: vec!["localhost".into(), "127.0.0.1".into()],
            days: 30,
            chain_with_root: false,
            purpose: "server".into(),
            ca_cert: None,
            ca_key: None,
            intermediate_alg: Vec::new(),
            chain_bytes: None,
        }
    }

    #[test]
    fn key_specs_parse_and_reject() {
        let s = KeySpec::parse("RSA:3072").unwrap();
        assert_eq!((s.name.as_str(), s.param.as_deref()), ("RSA", Some("3072")));
        assert!(KeySpec::parse(":x").is_err());
        assert!(KeySpec::parse("RSA:lots").unwrap().generate().is_err());
        assert!(KeySpec::parse("EC:P-999").unwrap().generate().is_err());
        assert!(KeySpec::parse("NO-SUCH-ALG").unwrap().generate().is_err());
        assert!(build(&args("NO-SUCH-ALG", "EC:P-256")).is_err());
    }

    /// OpenSSL's own X.509 code, an independent reader, verifies the chain as a TLS client
    /// would (signature, issuer, validity, CA flag, key usages, purpose, host name).
    fn openssl_verifies(chain: &Chain, purpose: &str) -> std::result::Result<(), String> {
        use openssl::stack::Stack;
        use openssl::x509::store::X509StoreBuilder;
        use openssl::x509::verify::{X509CheckFlags, X509VerifyParam};
        use openssl::x509::{X509StoreContext, X509};
        let root = X509::from_der(&chain.root).map_err(|e| e.to_string())?;
        let leaf = X509::from_der(&chain.server).map_err(|e| e.to_string())?;
        let mut store = X509StoreBuilder::new().unwrap();
        store.add_cert(root).unwrap();
        let p = openssl::x509::X509PurposeId::SSL_SERVER;
        let p = if purpose == "client" {
            openssl::x509::X509PurposeId::SSL_CLIENT
        } else {
            p
        };
        store.set_purpose(p).unwrap();
        let mut param = X509VerifyParam::new().unwrap();
        param.set_host("localhost").unwrap();
        param.set_hostflags(X509CheckFlags::NO_PARTIAL_WILDCARDS);
        store.set_param(&param).unwrap();
        let store = store.build();
        let mut ctx = X509StoreContext::new().unwrap();
        let mut untrusted = Stack::new().unwrap();
        for c in &chain.intermediates {
            untrusted.push(X509::from_der(c).unwrap()).unwrap();
        }
        ctx.init(&store, &leaf, &untrusted, |c| {
            Ok(c.verify_cert()?.then_some(()).ok_or(c.error()))
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
    }

    #[test]
    fn chains_of_openssl_keys_verify_in_openssl_itself() {
        for (ca, srv) in [
            ("EC:P-256", "ML-DSA-44"),
            ("ML-DSA-44", "RSA:2048"),
            ("ED25519", "EC:P-384"),
            ("RSA:2048", "ED448"),
            ("SLH-DSA-SHA2-128f", "ML-DSA-65"),
            ("EC:P-521", "EC:P-256"),
            ("RSA-PSS", "RSA-PSS"),
        ] {
            let chain = build(&args(ca, srv)).unwrap();
            openssl_verifies(&chain, "server").unwrap_or_else(|e| panic!("{ca}/{srv}: {e}"));
            let leaf = openssl::x509::X509::from_der(&chain.server).unwrap();
            let key = chain.server_key.spki().unwrap();
            assert_eq!(leaf.public_key().unwrap().public_key_to_der().unwrap(), key);
        }
        // A client certificate is not a server's, and the other way round.
        let mut a = args("EC:P-256", "EC:P-256");
        a.purpose = "client".into();
        let chain = build(&a).unwrap();
        assert!(openssl_verifies(&chain, "server").is_err());
        openssl_verifies(&chain, "client").unwrap();
    }

    #[test]
    fn chains_of_liboqs_keys_verify_and_fail_when_tampered() {
        for (ca, srv) in [
            ("ML-DSA-44", "MAYO-1"),
            ("MAYO-2", "cross-rsdp-128-balanced"),
            ("Falcon-512", "EC:P-256"),
        ] {
            let chain = build(&args(ca, srv)).unwrap();
            let root = x509::parse(&chain.root).unwrap();
            assert!(
                x509::signed_by(&chain.server, root.spki).unwrap(),
                "{ca}/{srv}"
            );
            assert!(
                x509::signed_by(&chain.root, root.spki).unwrap(),
                "{ca}/{srv}"
            );
            let mut bad = chain.server.clone();
            let i = bad.len() / 3; // inside the signed part
            bad[i] ^= 1;
            assert!(
                !x509::signed_by(&bad, root.spki).unwrap_or(false),
                "{ca}/{srv}"
            );
            // OpenSSL still reads the structure (names, extensions) of these certificates.
            let leaf = openssl::x509::X509::from_der(&chain.server).unwrap();
            let names = leaf.subject_alt_names().unwrap();
            assert_eq!(
                names.iter().filter_map(|n| n.dnsname()).next(),
                Some("server.pqlab.test")
            );
        }
    }

    #[test]
    fn intermediates_chain_to_the_root_in_openssl_itself() {
        let mut a = args("EC:P-256", "ML-DSA-44");
        a.intermediate_alg = vec!["ML-DSA-65".into(), "RSA:2048".into()];
        let mut chain = build(&a).unwrap();
        check_signatures(&chain).unwrap();
        assert_eq!(chain.intermediates.len(), 2);
        openssl_verifies(&chain, "server").unwrap();
        // The server certificate's issuer is sent first: the RSA CA, signed by ML-DSA-65.
        let first = x509::parse(&chain.intermediates[0]).unwrap();
        assert_eq!(
            signature_algorithm_name(first.signature_algorithm),
            "ML-DSA-65"
        );
        assert_eq!(chain.sent(true).len(), 4);
        // Without the intermediates the leaf does not chain to the root.
        chain.intermediates.clear();
        assert!(openssl_verifies(&chain, "server").is_err());
    }

    #[test]
    fn chain_bytes_pads_the_server_certificate_to_the_size_asked() {
        for (ca, srv, with_root, total) in [
            ("RSA:2048", "RSA:2048", true, 8000),
            ("RSA:2048", "RSA:2048", true, 16000),
            ("EC:P-256", "EC:P-256", false, 2000),
            ("ML-DSA-44", "ML-DSA-44", true, 12785),
            ("Falcon-512", "EC:P-256", false, 40000),
            ("ML-DSA-65", "Falcon-512", true, 20000),
        ] {
            let mut a = args(ca, srv);
            a.chain_with_root = with_root;
            a.chain_bytes = Some(total);
            let chain = build(&a).unwrap();
            let got: usize = chain.sent(with_root).iter().map(|c| c.len()).sum();
            assert!(
                got.abs_diff(total as usize) <= 2,
                "{ca}/{srv}: {got} bytes for {total}"
            );
            assert!(chain.padding_names > 0);
            check_signatures(&chain).unwrap();
            // Still a valid server certificate for its names (OpenSSL knows no Falcon keys;
            // liboqs checked their signatures above).
            if !ca.starts_with("Falcon") && !srv.starts_with("Falcon") {
                openssl_verifies(&chain, "server").unwrap_or_else(|e| panic!("{ca}/{srv}: {e}"));
            }
        }
        // Smaller than the chain without padding: refused, naming the smallest size.
        let mut a = args("ML-DSA-44", "ML-DSA-44");
        a.chain_bytes = Some(1000);
        match build(&a) {
            Err(crate::out::Error::Usage(m)) => assert!(m.contains("without padding"), "{m}"),
            other => panic!("{:?}", other.map(|c| c.server.len())),
        }
    }

    #[test]
    fn serials_are_always_twenty_bytes() {
        // Fixed-size keys and signatures give certificates of one size, every time.
        let sizes: std::collections::BTreeSet<usize> = (0..600)
            .map(|_| build(&args("ED25519", "ED25519")).unwrap().server.len())
            .collect();
        assert_eq!(sizes.len(), 1, "{sizes:?}");
    }

    #[test]
    fn private_keys_are_owner_only_and_certificates_are_not() {
        use crate::secrets::{mode, DIR_MODE, FILE_MODE};
        let base = std::env::temp_dir().join(format!("pqlab-certs-modes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let mut a = args("EC:P-256", "EC:P-256");
        a.out_dir = base.join("new/dir");
        run(a).unwrap();
        assert_eq!(mode(&base.join("new")), DIR_MODE);
        assert_eq!(mode(&base.join("new/dir")), DIR_MODE);
        for key in ["root.key.pem", "server.key.pem"] {
            assert_eq!(mode(&base.join("new/dir").join(key)), FILE_MODE, "{key}");
        }
        assert_eq!(mode(&base.join("new/dir/chain.pem")) & 0o044, 0o044);
        // Regenerating over keys that were made world-readable narrows them again.
        let key = base.join("new/dir/server.key.pem");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut a = args("EC:P-256", "EC:P-256");
        a.out_dir = base.join("new/dir");
        run(a).unwrap();
        assert_eq!(mode(&key), FILE_MODE);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn reused_root_signs_the_server_certificate() {
        let dir = std::env::temp_dir().join(format!("pqlab-certs-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (ca, srv) in [("EC:P-256", "ED25519"), ("MAYO-1", "ML-DSA-44")] {
            let first = build(&args(ca, ca)).unwrap();
            std::fs::write(dir.join("r.pem"), certkey::pem("CERTIFICATE", &first.root)).unwrap();
            std::fs::write(dir.join("k.pem"), first.ca_key.private_key_pem().unwrap()).unwrap();
            let mut a = args(ca, srv);
            a.ca_cert = Some(dir.join("r.pem"));
            a.ca_key = Some(dir.join("k.pem"));
            let second = build(&a).unwrap();
            assert_eq!(second.root, first.root);
            let root = x509::parse(&first.root).unwrap();
            assert!(x509::signed_by(&second.server, root.spki).unwrap());
            // A key that does not match the root is refused.
            let other = KeySpec::parse(ca).unwrap().generate().unwrap();
            std::fs::write(dir.join("k.pem"), other.private_key_pem().unwrap()).unwrap();
            assert!(build(&a).is_err());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
