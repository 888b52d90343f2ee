//! `tls certs`: a root CA and a server certificate signed by it, with realistic content,
//! made by the stack-neutral builder (`tls::x509`) with keys of OpenSSL or liboqs
//! (`tls::certkey`), and the DER sizes of what a handshake carries.

use crate::out::{emit, Result};
use crate::primitives::der;
use crate::tls::certkey::{self, CertKey, KeySpec};
use crate::tls::ids::SIGS;
use crate::tls::x509::{self, Profile, Purpose};
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
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| crate::err!(Io, "cannot read {}: {e}", path.display()))
}

fn write(path: &Path, data: &[u8]) -> Result<()> {
    std::fs::write(path, data).map_err(|e| crate::err!(Io, "cannot write {}: {e}", path.display()))
}

/// A root and a server certificate (DER) with their keys.
pub struct Chain {
    pub root: Vec<u8>,
    pub server: Vec<u8>,
    pub ca_key: CertKey,
    pub server_key: CertKey,
}

fn purpose(text: &str) -> Purpose {
    match text {
        "client" => Purpose::Client,
        "both" => Purpose::Both,
        _ => Purpose::Server,
    }
}

pub fn build(args: &Args) -> Result<Chain> {
    let ca_spec = KeySpec::parse(&args.ca_alg)?;
    let srv_spec = KeySpec::parse(&args.server_alg)?;
    for (flag, spec, text) in [
        ("--ca-alg", &ca_spec, &args.ca_alg),
        ("--server-alg", &srv_spec, &args.server_alg),
    ] {
        if !spec.available() {
            crate::bail!(
                Usage,
                "{flag} {text:?}: no such key in OpenSSL or liboqs here (e.g. RSA:2048, \
                 EC:P-256, ED25519, ML-DSA-44, SLH-DSA-SHA2-128s, MAYO-1, Falcon-512)"
            );
        }
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
    let parsed_root = x509::parse(&root)?;
    let root_key_id = match parsed_root.key_identifier {
        Some(k) => k.to_vec(),
        None => x509::key_identifier(parsed_root.spki)?,
    };
    let mut san = vec![args.cn.clone()];
    for s in &args.san {
        let s = s.trim();
        if !s.is_empty() && s != args.cn && !san.iter().any(|n| n == s) {
            san.push(s.to_string());
        }
    }
    let profile = Profile {
        subject: x509::name("JP", "pqlab test server", &args.cn)?,
        issuer: Some((parsed_root.subject, &root_key_id)),
        ca: false,
        purpose: purpose(&args.purpose),
        san,
    };
    let server = x509::build(&profile, &server_key, &ca_key, args.days)?;
    Ok(Chain {
        root,
        server,
        ca_key,
        server_key,
    })
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

pub fn run(args: Args) -> Result<()> {
    // Everything is made and checked before the directory that will hold keys exists.
    let chain = build(&args)?;
    let root = x509::parse(&chain.root)?;
    let server = x509::parse(&chain.server)?;
    // Check what we made: the server certificate verifies under the root, the root under
    // itself.
    if !x509::signed_by(&chain.server, root.spki)? || !x509::signed_by(&chain.root, root.spki)? {
        crate::bail!(
            Check,
            "generated server certificate does not verify under its root"
        );
    }
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
    let mut chain_pem = server_pem;
    // Bytes of the certificate_list entries in the TLS 1.3 Certificate message:
    // 3-byte length + DER + 2-byte (empty) extensions per certificate.
    let mut chain_der_bytes = chain.server.len();
    let mut chain_certs = 1;
    if args.chain_with_root {
        chain_pem.extend_from_slice(&root_pem);
        chain_der_bytes += chain.root.len();
        chain_certs += 1;
    }
    write(&d.join("chain.pem"), &chain_pem)?;
    emit(&json!({
        "type": "certs",
        "ca_alg": args.ca_alg,
        "server_alg": args.server_alg,
        "ca_key": chain.ca_key.algorithm(),
        "server_key": chain.server_key.algorithm(),
        "ca_sig_alg": signature_algorithm_name(root.signature_algorithm),
        "server_cert_sig_alg": signature_algorithm_name(server.signature_algorithm),
        "root_der_bytes": chain.root.len(),
        "server_cert_der_bytes": chain.server.len(),
        "root_public_key_der_bytes": root.spki.len(),
        "server_public_key_der_bytes": server.spki.len(),
        "root_signature_bytes": root.signature.len(),
        "server_cert_signature_bytes": server.signature.len(),
        "chain_certs": chain_certs,
        "chain_der_bytes": chain_der_bytes,
        "chain_tls13_list_bytes": chain_der_bytes + chain_certs * 5,
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
        let untrusted = Stack::new().unwrap();
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
