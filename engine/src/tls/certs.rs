//! `tls certs`: a root CA and a server certificate signed by it, with realistic content,
//! generated with OpenSSL's X509 API, and the DER sizes of what a handshake carries.

use crate::out::{emit, Result};
use openssl::asn1::{Asn1Integer, Asn1Time};
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::x509::extension::{
    AuthorityKeyIdentifier, BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
    SubjectKeyIdentifier,
};
use openssl::x509::{X509Builder, X509NameBuilder, X509};
use serde_json::json;
use std::ffi::CString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Root CA key: OpenSSL algorithm name with an optional parameter, e.g. RSA:2048,
    /// RSA:3072, EC:P-256, ED25519, ML-DSA-44, SLH-DSA-SHA2-128s.
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
    std::fs::read(path)
        .map_err(|e| crate::out::Error::Io(format!("cannot read {}: {e}", path.display())))
}

/// An OpenSSL key spec: algorithm name plus optional parameter (RSA bits, EC curve).
pub struct KeySpec {
    pub name: String,
    pub param: Option<String>,
}

impl KeySpec {
    pub fn parse(text: &str) -> Result<KeySpec> {
        let (name, param) = match text.split_once(':') {
            Some((n, p)) => (n.trim(), Some(p.trim().to_string())),
            None => (text.trim(), None),
        };
        if name.is_empty() {
            crate::bail!(
                Usage,
                "key spec {text:?} has no algorithm name; use e.g. RSA:2048, EC:P-256, ML-DSA-44"
            );
        }
        Ok(KeySpec {
            name: name.to_string(),
            param,
        })
    }

    pub fn generate(&self) -> Result<PKey<Private>> {
        let upper = self.name.to_ascii_uppercase();
        match upper.as_str() {
            "RSA" => {
                let bits: u32 = match &self.param {
                    None => 2048,
                    Some(p) => p.parse().map_err(|_| {
                        crate::out::Error::Usage(format!(
                            "RSA key size {p:?} is not a number of bits, e.g. RSA:2048"
                        ))
                    })?,
                };
                if !(1024..=16384).contains(&bits) {
                    crate::bail!(Usage, "RSA key size {bits} is out of range (1024..16384)");
                }
                Ok(PKey::from_rsa(Rsa::generate(bits)?)?)
            }
            "EC" | "ECDSA" => {
                let curve = self.param.clone().unwrap_or_else(|| "P-256".into());
                let nid = curve_nid(&curve)?;
                let group = EcGroup::from_curve_name(nid)?;
                Ok(PKey::from_ec_key(EcKey::generate(&group)?)?)
            }
            "ED25519" => Ok(PKey::generate_ed25519()?),
            "ED448" => Ok(PKey::generate_ed448()?),
            _ => generic_keygen(&self.name),
        }
    }

    /// Whether `generate` can make this key in this build (checked without making one).
    pub fn available(&self) -> bool {
        let upper = self.name.to_ascii_uppercase();
        match upper.as_str() {
            "RSA" => self
                .param
                .as_deref()
                .is_none_or(|p| p.parse::<u32>().is_ok_and(|b| (1024..=16384).contains(&b))),
            "EC" | "ECDSA" => curve_nid(self.param.as_deref().unwrap_or("P-256")).is_ok(),
            "ED25519" | "ED448" => self.param.is_none(),
            _ => self.param.is_none() && keygen_available(&self.name),
        }
    }

    /// Digest for signing certificates with this key (none for algorithms that hash inside).
    pub fn digest(&self) -> MessageDigest {
        let upper = self.name.to_ascii_uppercase();
        match upper.as_str() {
            "RSA" => match self.param.as_deref().and_then(|p| p.parse::<u32>().ok()) {
                Some(b) if b >= 7680 => MessageDigest::sha384(),
                _ => MessageDigest::sha256(),
            },
            "EC" | "ECDSA" => match self.param.as_deref().map(|c| c.to_ascii_uppercase()) {
                Some(c) if c.contains("384") => MessageDigest::sha384(),
                Some(c) if c.contains("521") => MessageDigest::sha512(),
                _ => MessageDigest::sha256(),
            },
            _ => MessageDigest::null(),
        }
    }
}

fn curve_nid(curve: &str) -> Result<Nid> {
    Ok(
        match curve.to_ascii_uppercase().replace(['-', '_'], "").as_str() {
            "P256" | "PRIME256V1" | "SECP256R1" => Nid::X9_62_PRIME256V1,
            "P384" | "SECP384R1" => Nid::SECP384R1,
            "P521" | "SECP521R1" => Nid::SECP521R1,
            _ => crate::bail!(
                Usage,
                "EC curve {curve:?} is not supported; use P-256, P-384 or P-521"
            ),
        },
    )
}

extern "C" {
    fn EVP_PKEY_CTX_new_from_name(
        libctx: *mut libc::c_void,
        name: *const libc::c_char,
        propq: *const libc::c_char,
    ) -> *mut openssl_sys::EVP_PKEY_CTX;
    fn EVP_PKEY_keygen_init(ctx: *mut openssl_sys::EVP_PKEY_CTX) -> libc::c_int;
    fn EVP_PKEY_generate(
        ctx: *mut openssl_sys::EVP_PKEY_CTX,
        ppkey: *mut *mut openssl_sys::EVP_PKEY,
    ) -> libc::c_int;
    fn EVP_PKEY_CTX_free(ctx: *mut openssl_sys::EVP_PKEY_CTX);
}

/// Whether OpenSSL has a key generator of this name (EVP_PKEY_CTX_new_from_name).
fn keygen_available(name: &str) -> bool {
    let Ok(cname) = CString::new(name) else {
        return false;
    };
    unsafe {
        let ctx =
            EVP_PKEY_CTX_new_from_name(std::ptr::null_mut(), cname.as_ptr(), std::ptr::null());
        if ctx.is_null() {
            let _ = openssl::error::ErrorStack::get(); // clear the queue
            return false;
        }
        let ok = EVP_PKEY_keygen_init(ctx) > 0;
        EVP_PKEY_CTX_free(ctx);
        if !ok {
            let _ = openssl::error::ErrorStack::get();
        }
        ok
    }
}

/// Key generation for algorithms without a dedicated API in the openssl crate (ML-DSA,
/// SLH-DSA, ...), through OpenSSL's provider-based EVP interface.
fn generic_keygen(name: &str) -> Result<PKey<Private>> {
    use foreign_types::ForeignType;
    let cname = CString::new(name)
        .map_err(|_| crate::out::Error::Usage(format!("bad algorithm name {name:?}")))?;
    unsafe {
        let ctx =
            EVP_PKEY_CTX_new_from_name(std::ptr::null_mut(), cname.as_ptr(), std::ptr::null());
        if ctx.is_null() {
            let _ = openssl::error::ErrorStack::get();
            crate::bail!(Usage, "OpenSSL has no key algorithm {name:?} (try RSA:2048, EC:P-256, ED25519, ML-DSA-44, SLH-DSA-SHA2-128s)");
        }
        let mut pkey: *mut openssl_sys::EVP_PKEY = std::ptr::null_mut();
        let ok = EVP_PKEY_keygen_init(ctx) > 0 && EVP_PKEY_generate(ctx, &mut pkey) > 0;
        EVP_PKEY_CTX_free(ctx);
        if !ok || pkey.is_null() {
            let e = openssl::error::ErrorStack::get();
            crate::bail!(Library, "key generation for {name} failed: {e}");
        }
        Ok(PKey::from_ptr(pkey))
    }
}

fn random_serial() -> Result<Asn1Integer> {
    let mut bn = BigNum::new()?;
    // 159 random bits, positive, as CAs do (RFC 5280: at most 20 octets).
    bn.rand(159, openssl::bn::MsbOption::MAYBE_ZERO, false)?;
    Ok(bn.to_asn1_integer()?)
}

fn write(path: &Path, data: &[u8]) -> Result<()> {
    std::fs::write(path, data)
        .map_err(|e| crate::out::Error::Io(format!("cannot write {}: {e}", path.display())))
}

pub struct Chain {
    pub root: X509,
    pub server: X509,
}

fn make_root(
    args: &Args,
    ca_key: &PKey<Private>,
    digest: MessageDigest,
    not_before: &Asn1Time,
    not_after: &Asn1Time,
) -> Result<X509> {
    // Root CA: self-signed, CA:TRUE, keyCertSign + cRLSign.
    let mut name = X509NameBuilder::new()?;
    name.append_entry_by_nid(Nid::COUNTRYNAME, "JP")?;
    name.append_entry_by_nid(Nid::ORGANIZATIONNAME, "pqlab test PKI")?;
    name.append_entry_by_nid(Nid::COMMONNAME, &format!("pqlab Root CA ({})", args.ca_alg))?;
    let ca_name = name.build();
    let mut b = X509Builder::new()?;
    b.set_version(2)?;
    let serial = random_serial()?;
    b.set_serial_number(&serial)?;
    b.set_subject_name(&ca_name)?;
    b.set_issuer_name(&ca_name)?;
    b.set_not_before(not_before)?;
    b.set_not_after(not_after)?;
    b.set_pubkey(ca_key)?;
    b.append_extension(BasicConstraints::new().critical().ca().build()?)?;
    b.append_extension(
        KeyUsage::new()
            .critical()
            .key_cert_sign()
            .crl_sign()
            .build()?,
    )?;
    let ski = SubjectKeyIdentifier::new().build(&b.x509v3_context(None, None))?;
    b.append_extension(ski)?;
    b.sign(ca_key, digest)?;
    let root = b.build();
    Ok(root)
}

pub fn build(args: &Args) -> Result<(Chain, PKey<Private>, PKey<Private>)> {
    let ca_spec = KeySpec::parse(&args.ca_alg)?;
    let srv_spec = KeySpec::parse(&args.server_alg)?;
    let srv_key = srv_spec.generate()?;
    let not_before = Asn1Time::days_from_now(0)?;
    let not_after = Asn1Time::days_from_now(args.days)?;
    let (root, ca_key) = match (&args.ca_cert, &args.ca_key) {
        (Some(cert), Some(key)) => {
            let root = X509::from_pem(&read(cert)?).map_err(|e| {
                crate::out::Error::Usage(format!("--ca-cert {}: {e}", cert.display()))
            })?;
            let key = PKey::private_key_from_pem(&read(key)?).map_err(|e| {
                crate::out::Error::Usage(format!("--ca-key {}: {e}", key.display()))
            })?;
            if !root.public_key()?.public_eq(&key) {
                crate::bail!(Usage, "--ca-key does not belong to --ca-cert");
            }
            (root, key)
        }
        _ => {
            let key = ca_spec.generate()?;
            (
                make_root(args, &key, ca_spec.digest(), &not_before, &not_after)?,
                key,
            )
        }
    };

    // Server certificate: CN + SAN (DNS and IP), digitalSignature (+ keyEncipherment for
    // RSA so TLS 1.2 RSA key exchange works), EKU serverAuth, SKI/AKI.
    let mut name = X509NameBuilder::new()?;
    name.append_entry_by_nid(Nid::COUNTRYNAME, "JP")?;
    name.append_entry_by_nid(Nid::ORGANIZATIONNAME, "pqlab test server")?;
    name.append_entry_by_nid(Nid::COMMONNAME, &args.cn)?;
    let srv_name = name.build();
    let mut b = X509Builder::new()?;
    b.set_version(2)?;
    let serial = random_serial()?;
    b.set_serial_number(&serial)?;
    b.set_subject_name(&srv_name)?;
    b.set_issuer_name(root.subject_name())?;
    b.set_not_before(&not_before)?;
    b.set_not_after(&not_after)?;
    b.set_pubkey(&srv_key)?;
    b.append_extension(BasicConstraints::new().critical().build()?)?;
    let mut ku = KeyUsage::new();
    ku.critical().digital_signature();
    if srv_spec.name.eq_ignore_ascii_case("RSA") {
        ku.key_encipherment();
    }
    b.append_extension(ku.build()?)?;
    let mut eku = ExtendedKeyUsage::new();
    if args.purpose != "client" {
        eku.server_auth();
    }
    if args.purpose != "server" {
        eku.client_auth();
    }
    b.append_extension(eku.build()?)?;
    let mut san = SubjectAlternativeName::new();
    san.dns(&args.cn);
    for s in &args.san {
        let s = s.trim();
        if s.is_empty() || s == args.cn {
            continue;
        }
        if s.parse::<IpAddr>().is_ok() {
            san.ip(s);
        } else {
            san.dns(s);
        }
    }
    let ctx = b.x509v3_context(Some(&root), None);
    let san = san.build(&ctx)?;
    let ski = SubjectKeyIdentifier::new().build(&ctx)?;
    let aki = AuthorityKeyIdentifier::new().keyid(true).build(&ctx)?;
    b.append_extension(san)?;
    b.append_extension(ski)?;
    b.append_extension(aki)?;
    b.sign(&ca_key, ca_spec.digest())?;
    let server = b.build();
    Ok((Chain { root, server }, ca_key, srv_key))
}

pub fn run(args: Args) -> Result<()> {
    // The directory holds private keys: one the engine creates is owner-only.
    crate::secrets::create_dir(&args.out_dir)?;
    let (chain, ca_key, srv_key) = build(&args)?;
    // Check what we made: the server certificate verifies under the root.
    let root_pub = chain.root.public_key()?;
    if !chain.server.verify(&root_pub)? {
        crate::bail!(
            Check,
            "generated server certificate does not verify under its root"
        );
    }
    let d = &args.out_dir;
    let root_der = chain.root.to_der()?;
    let server_der = chain.server.to_der()?;
    write(&d.join("root.crt.pem"), &chain.root.to_pem()?)?;
    write(&d.join("root.crt.der"), &root_der)?;
    crate::secrets::write(&d.join("root.key.pem"), &ca_key.private_key_to_pem_pkcs8()?)?;
    write(&d.join("server.crt.pem"), &chain.server.to_pem()?)?;
    write(&d.join("server.crt.der"), &server_der)?;
    crate::secrets::write(
        &d.join("server.key.pem"),
        &srv_key.private_key_to_pem_pkcs8()?,
    )?;
    let mut chain_pem = chain.server.to_pem()?;
    // Bytes of the certificate_list entries in the TLS 1.3 Certificate message:
    // 3-byte length + DER + 2-byte (empty) extensions per certificate.
    let mut chain_der_bytes = server_der.len();
    let mut chain_certs = 1;
    if args.chain_with_root {
        chain_pem.extend_from_slice(&chain.root.to_pem()?);
        chain_der_bytes += root_der.len();
        chain_certs += 1;
    }
    write(&d.join("chain.pem"), &chain_pem)?;
    emit(&json!({
        "type": "certs",
        "ca_alg": args.ca_alg,
        "server_alg": args.server_alg,
        "ca_sig_alg": chain.root.signature_algorithm().object().to_string(),
        "server_cert_sig_alg": chain.server.signature_algorithm().object().to_string(),
        "root_der_bytes": root_der.len(),
        "server_cert_der_bytes": server_der.len(),
        "root_public_key_der_bytes": chain.root.public_key()?.public_key_to_der()?.len(),
        "server_public_key_der_bytes": chain.server.public_key()?.public_key_to_der()?.len(),
        "root_signature_bytes": chain.root.signature().as_slice().len(),
        "server_cert_signature_bytes": chain.server.signature().as_slice().len(),
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
    }

    #[test]
    fn chains_verify_for_classical_and_pq() {
        for (ca, srv) in [
            ("EC:P-256", "ML-DSA-44"),
            ("ML-DSA-44", "RSA:2048"),
            ("ED25519", "EC:P-384"),
        ] {
            let (chain, _, srv_key) = build(&args(ca, srv)).unwrap();
            assert!(
                chain
                    .server
                    .verify(&chain.root.public_key().unwrap())
                    .unwrap(),
                "{ca}/{srv}"
            );
            assert!(chain
                .root
                .verify(&chain.root.public_key().unwrap())
                .unwrap());
            assert!(chain.server.public_key().unwrap().public_eq(&srv_key));
            assert_eq!(
                chain.server.issuer_name().to_der().unwrap(),
                chain.root.subject_name().to_der().unwrap()
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
        let (first, ca_key, _) = build(&args("EC:P-256", "EC:P-256")).unwrap();
        std::fs::write(dir.join("r.pem"), first.root.to_pem().unwrap()).unwrap();
        std::fs::write(
            dir.join("k.pem"),
            ca_key.private_key_to_pem_pkcs8().unwrap(),
        )
        .unwrap();
        let mut a = args("EC:P-256", "ED25519");
        a.ca_cert = Some(dir.join("r.pem"));
        a.ca_key = Some(dir.join("k.pem"));
        let (second, _, _) = build(&a).unwrap();
        assert_eq!(second.root.to_der().unwrap(), first.root.to_der().unwrap());
        assert!(second
            .server
            .verify(&first.root.public_key().unwrap())
            .unwrap());
        // A key that does not match the root is refused.
        let other = KeySpec::parse("EC:P-256").unwrap().generate().unwrap();
        std::fs::write(dir.join("k.pem"), other.private_key_to_pem_pkcs8().unwrap()).unwrap();
        assert!(build(&a).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
