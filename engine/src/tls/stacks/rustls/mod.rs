//! The rustls stacks: rustls 0.23 on the engine's `Wire`, in two flavours of crypto
//! provider.
//!
//! - `rustls`: a provider of pqlab's own (`oqs.rs`): every post-quantum key exchange and
//!   signature from liboqs (ML-KEM, BIKE, FrodoKEM and the NIST-curve ML-KEM hybrids; ML-DSA,
//!   Falcon, SPHINCS+, MAYO, CROSS, UOV) on oqs-provider's code points and OIDs, plus X25519,
//!   P-256, P-384, X25519MLKEM768, ECDSA, RSA-PSS and Ed25519 from rustls's aws-lc-rs
//!   provider.
//! - `rustls-aws-lc-rs`: rustls's own aws-lc-rs provider, untouched.
//!
//! Every handshake is checked as on OpenSSL: webpki validates the peer's chain against the
//! given roots (and the server's name), the CertificateVerify is verified by the provider's
//! algorithms, and the negotiated group and schemes are reported by code point for the loops
//! to compare with what was asked. rustls has no message callback: message boundaries come
//! from the capture and the key log. A flight is written whole: rustls queues every record of
//! it before the first write, and the `Wire` hands the queue to the socket in one writev.

mod keys;
pub mod oqs;

use crate::cputime::thread_cpu_ns;
use crate::out::{Error, Result};
use crate::tls::record::Negotiated;
use crate::tls::stack::{
    ClientContext, ClientSetup, Framing, Handshake, HeapCounting, KeyShares, Limits, NamedCode,
    Protocol, ReadOutcome, ReferenceHandshake, ReferenceRun, ServerContext, ServerName,
    ServerSetup, Session, Stack, StackInfo, TlsVersion, Transport, Verification, VerifyMode,
    WriteModel, Writes,
};
use crate::tls::transport::tcp::Wire;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, SupportedKxGroup, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName as PkiServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::{CertifiedKey, Signer, SigningKey};
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme, SupportedCipherSuite,
};
use std::cell::Cell;
use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

/// Largest handshake message rustls accepts (its 16-bit length limit on messages it
/// reassembles), and the largest certificate webpki parses.
pub const MAX_HANDSHAKE_MESSAGE: usize = 0xffff;
pub const MAX_CERTIFICATE: usize = 0xffff;

/// The fewest bytes a certificate adds to its key's SubjectPublicKeyInfo (names, validity,
/// extensions, a signature of 64 bytes or more, framing): a key whose SPKI leaves less
/// room than this under the limits can never be served or trusted here.
const CERTIFICATE_OVERHEAD_MIN: usize = 512;

/// Whether a certificate of this liboqs key can fit rustls's and webpki's limits.
fn certificate_can_fit(liboqs: &'static str) -> bool {
    let public = crate::primitives::oqs::shared_sig(liboqs).public_key_len();
    let spki = public + 24; // SEQUENCE, AlgorithmIdentifier of an OID, BIT STRING headers
    spki + CERTIFICATE_OVERHEAD_MIN <= MAX_CERTIFICATE.min(MAX_HANDSHAKE_MESSAGE - 13)
}

/// Which crypto provider a rustls stack runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Flavor {
    Oqs,
    AwsLcRs,
}

/// A rustls stack (registered twice: "rustls" and "rustls-aws-lc-rs").
pub struct Rustls(pub Flavor);

pub static RUSTLS: Rustls = Rustls(Flavor::Oqs);
pub static RUSTLS_AWS_LC_RS: Rustls = Rustls(Flavor::AwsLcRs);

/// A group or signature scheme of a flavour: its name (what `--groups`/`--sigalgs` take)
/// and IANA / oqs-provider code point.
struct Entry {
    name: &'static str,
    code: u16,
}

/// What a flavour can do, built once.
struct Tables {
    groups: Vec<(Entry, &'static dyn SupportedKxGroup)>,
    /// Schemes the flavour signs with and verifies, in preference order.
    sigalgs: Vec<Entry>,
    verify: WebPkiSupportedAlgorithms,
    /// `tls certs` key specs of certificates it can serve and verify.
    key_types: Vec<String>,
}

fn classical_groups() -> Vec<(Entry, &'static dyn SupportedKxGroup)> {
    use rustls::crypto::aws_lc_rs::kx_group::{SECP256R1, SECP384R1, X25519, X25519MLKEM768};
    vec![
        (
            Entry {
                name: "x25519",
                code: 0x001d,
            },
            X25519,
        ),
        (
            Entry {
                name: "secp256r1",
                code: 0x0017,
            },
            SECP256R1,
        ),
        (
            Entry {
                name: "secp384r1",
                code: 0x0018,
            },
            SECP384R1,
        ),
        (
            Entry {
                name: "X25519MLKEM768",
                code: 0x11ec,
            },
            X25519MLKEM768,
        ),
    ]
}

/// Classical schemes rustls's aws-lc-rs provider signs and verifies in TLS 1.3.
const CLASSICAL_SIGALGS: &[(&str, u16)] = &[
    ("ecdsa_secp256r1_sha256", 0x0403),
    ("ecdsa_secp384r1_sha384", 0x0503),
    ("ecdsa_secp521r1_sha512", 0x0603),
    ("ed25519", 0x0807),
    ("rsa_pss_rsae_sha256", 0x0804),
    ("rsa_pss_rsae_sha384", 0x0805),
    ("rsa_pss_rsae_sha512", 0x0806),
];
const CLASSICAL_KEY_TYPES: &[&str] = &[
    "RSA:2048", "RSA:3072", "RSA:4096", "EC:P-256", "EC:P-384", "EC:P-521", "ED25519",
];
const ML_DSA: &[(&str, u16, &str)] = &[
    ("mldsa44", 0x0904, "ML-DSA-44"),
    ("mldsa65", 0x0905, "ML-DSA-65"),
    ("mldsa87", 0x0906, "ML-DSA-87"),
];

fn aws() -> CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

fn tables(flavor: Flavor) -> &'static Tables {
    static OQS: OnceLock<Tables> = OnceLock::new();
    static AWS: OnceLock<Tables> = OnceLock::new();
    match flavor {
        Flavor::Oqs => OQS.get_or_init(oqs_tables),
        Flavor::AwsLcRs => AWS.get_or_init(aws_tables),
    }
}

fn aws_tables() -> Tables {
    use rustls::crypto::aws_lc_rs::kx_group::{MLKEM1024, MLKEM768, SECP256R1MLKEM768};
    let mut groups = classical_groups();
    groups.push((
        Entry {
            name: "SecP256r1MLKEM768",
            code: 0x11eb,
        },
        SECP256R1MLKEM768,
    ));
    groups.push((
        Entry {
            name: "MLKEM768",
            code: 0x0201,
        },
        MLKEM768,
    ));
    groups.push((
        Entry {
            name: "MLKEM1024",
            code: 0x0202,
        },
        MLKEM1024,
    ));
    let mut sigalgs: Vec<Entry> = CLASSICAL_SIGALGS
        .iter()
        .map(|&(name, code)| Entry { name, code })
        .collect();
    sigalgs.extend(ML_DSA.iter().map(|&(name, code, _)| Entry { name, code }));
    let mut key_types: Vec<String> = CLASSICAL_KEY_TYPES.iter().map(|s| s.to_string()).collect();
    key_types.extend(ML_DSA.iter().map(|(_, _, spec)| spec.to_string()));
    Tables {
        groups,
        sigalgs,
        verify: aws().signature_verification_algorithms,
        key_types,
    }
}

fn oqs_tables() -> Tables {
    let mut groups = classical_groups();
    for h in oqs::hybrids() {
        groups.push((
            Entry {
                name: h.name,
                code: h.code,
            },
            oqs::HybridGroup::new(&h),
        ));
    }
    for k in oqs::KEMS {
        groups.push((
            Entry {
                name: k.name,
                code: k.code,
            },
            oqs::KemGroup::new(*k),
        ));
    }
    let mut sigalgs: Vec<Entry> = CLASSICAL_SIGALGS
        .iter()
        .map(|&(name, code)| Entry { name, code })
        .collect();
    sigalgs.extend(oqs::SIGS.iter().map(|s| Entry {
        name: s.name,
        code: s.code,
    }));
    // webpki: aws-lc-rs's classical algorithms, and liboqs for everything post-quantum
    // (ML-DSA included: this flavour's ML-DSA is liboqs's, signing and verifying).
    let classical = aws().signature_verification_algorithms;
    let pq: Vec<&'static dyn rustls::pki_types::SignatureVerificationAlgorithm> = oqs::SIGS
        .iter()
        .map(|s| oqs::OqsVerify::new(*s) as _)
        .collect();
    let all: Vec<_> = classical
        .all
        .iter()
        .copied()
        .filter(|a| !is_ml_dsa(*a))
        .chain(pq.iter().copied())
        .collect();
    let mut mapping: Vec<_> = classical
        .mapping
        .iter()
        .filter(|(scheme, _)| !ML_DSA.iter().any(|m| u16::from(*scheme) == m.1))
        .copied()
        .collect();
    for (s, v) in oqs::SIGS.iter().zip(&pq) {
        let one: &'static [&'static dyn rustls::pki_types::SignatureVerificationAlgorithm] =
            Box::leak(vec![*v].into_boxed_slice());
        mapping.push((SignatureScheme::from(s.code), one));
    }
    let mut key_types: Vec<String> = CLASSICAL_KEY_TYPES.iter().map(|s| s.to_string()).collect();
    key_types.extend(
        oqs::SIGS
            .iter()
            .filter(|s| {
                crate::tls::pki::certkey::KeySpec::parse(s.liboqs).is_ok_and(|k| k.available())
            })
            .filter(|s| certificate_can_fit(s.liboqs))
            .map(|s| s.liboqs.to_string()),
    );
    Tables {
        groups,
        sigalgs,
        verify: WebPkiSupportedAlgorithms {
            all: Box::leak(all.into_boxed_slice()),
            mapping: Box::leak(mapping.into_boxed_slice()),
        },
        key_types,
    }
}

fn is_ml_dsa(a: &dyn rustls::pki_types::SignatureVerificationAlgorithm) -> bool {
    use rustls::pki_types::alg_id;
    let id = a.public_key_alg_id();
    [alg_id::ML_DSA_44, alg_id::ML_DSA_65, alg_id::ML_DSA_87].contains(&id)
}

/// Case- and punctuation-insensitive name matching, as `--groups` is spelled by users.
fn same(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        s.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect::<String>()
    };
    norm(a) == norm(b)
}

impl Tables {
    fn group(&self, name: &str) -> Option<&(Entry, &'static dyn SupportedKxGroup)> {
        self.groups.iter().find(|(e, _)| same(e.name, name))
    }

    fn sigalg(&self, name: &str) -> Option<&Entry> {
        self.sigalgs.iter().find(|e| same(e.name, name))
    }

    fn group_name(&self, code: u16) -> Option<&'static str> {
        self.groups
            .iter()
            .find(|(e, _)| e.code == code)
            .map(|(e, _)| e.name)
    }

    fn sigalg_name(&self, code: u16) -> Option<&'static str> {
        self.sigalgs.iter().find(|e| e.code == code).map(|e| e.name)
    }
}

// --- what each connection negotiated, as its own thread saw it -------------------------------

// rustls does not report the signature schemes a handshake used; the signer and the
// verifiers below note them on the thread that runs the handshake (a connection's handshake
// runs on one thread in every loop of the engine).
thread_local! {
    static SIGNED: Cell<Option<u16>> = const { Cell::new(None) };
    static VERIFIED: Cell<Option<u16>> = const { Cell::new(None) };
    /// `--verify report`: why the server's chain did not validate (the handshake went on).
    static CHAIN_FAILURE: std::cell::RefCell<Option<String>> =
        const { std::cell::RefCell::new(None) };
}

fn reset_notes() {
    SIGNED.with(|c| c.set(None));
    VERIFIED.with(|c| c.set(None));
    CHAIN_FAILURE.with(|c| c.borrow_mut().take());
}

#[derive(Debug)]
struct NotingKey(Arc<dyn SigningKey>);

impl SigningKey for NotingKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        self.0
            .choose_scheme(offered)
            .map(|s| Box::new(NotingSigner(s)) as Box<dyn Signer>)
    }

    fn public_key(&self) -> Option<rustls::pki_types::SubjectPublicKeyInfoDer<'_>> {
        self.0.public_key()
    }

    fn algorithm(&self) -> rustls::SignatureAlgorithm {
        self.0.algorithm()
    }
}

#[derive(Debug)]
struct NotingSigner(Box<dyn Signer>);

impl Signer for NotingSigner {
    fn sign(&self, message: &[u8]) -> std::result::Result<Vec<u8>, rustls::Error> {
        let out = self.0.sign(message)?;
        SIGNED.with(|c| c.set(Some(u16::from(self.0.scheme()))));
        Ok(out)
    }

    fn scheme(&self) -> SignatureScheme {
        self.0.scheme()
    }
}

// --- configuration --------------------------------------------------------------------------

fn provider(flavor: Flavor, p: &Protocol) -> Result<Arc<CryptoProvider>> {
    let t = tables(flavor);
    let base = aws();
    let kx_groups = match &p.groups {
        None => t.groups.iter().map(|(_, g)| *g).collect(),
        Some(names) => names
            .iter()
            .map(|n| {
                t.group(n).map(|(_, g)| *g).ok_or_else(|| {
                    crate::err!(
                        Usage,
                        "--groups {n:?} is not a group of this rustls stack; it has: {}",
                        t.groups
                            .iter()
                            .map(|(e, _)| e.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?,
    };
    let cipher_suites = match &p.ciphersuites {
        None => base.cipher_suites.clone(),
        Some(names) => names
            .iter()
            .map(|n| {
                rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES
                    .iter()
                    .copied()
                    .find(|s| same(&suite_name(*s), n) || same(&format!("{:?}", s.suite()), n))
                    .ok_or_else(|| crate::err!(Usage, "--ciphersuites {n:?} is not a rustls suite"))
            })
            .collect::<Result<Vec<_>>>()?,
    };
    let key_provider: &'static dyn rustls::crypto::KeyProvider = match flavor {
        Flavor::Oqs => &OqsKeys,
        Flavor::AwsLcRs => base.key_provider,
    };
    Ok(Arc::new(CryptoProvider {
        cipher_suites,
        kx_groups,
        signature_verification_algorithms: t.verify,
        secure_random: base.secure_random,
        key_provider,
    }))
}

/// The RFC name of a suite ("TLS_AES_128_GCM_SHA256"; rustls spells TLS 1.3 suites
/// "TLS13_...").
fn suite_name(s: SupportedCipherSuite) -> String {
    let name = s.suite().as_str().unwrap_or("unknown").to_string();
    name.replacen("TLS13_", "TLS_", 1)
}

/// liboqs's keys first (by the PKCS#8's algorithm OID), aws-lc-rs's for the rest.
#[derive(Debug)]
struct OqsKeys;

impl rustls::crypto::KeyProvider for OqsKeys {
    fn load_private_key(
        &self,
        key: rustls::pki_types::PrivateKeyDer<'static>,
    ) -> std::result::Result<Arc<dyn SigningKey>, rustls::Error> {
        match keys::oqs_signing_key(&key) {
            Ok(Some(k)) => Ok(k),
            Ok(None) => rustls::crypto::aws_lc_rs::sign::any_supported_type(&key),
            Err(e) => Err(rustls::Error::General(e.to_string())),
        }
    }
}

static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
static TLS12_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS12];

fn versions(p: &Protocol) -> &'static [&'static rustls::SupportedProtocolVersion] {
    match p.version {
        TlsVersion::Tls13 => &TLS13_ONLY,
        TlsVersion::Tls12 => &TLS12_ONLY,
    }
}

/// The schemes `--sigalgs` allows (None: all of the flavour's).
fn allowed_schemes(flavor: Flavor, list: &Option<Vec<String>>) -> Result<Vec<SignatureScheme>> {
    let t = tables(flavor);
    match list {
        None => Ok(t.sigalgs.iter().map(|e| SignatureScheme::from(e.code)).collect()),
        Some(names) => names
            .iter()
            .map(|n| {
                t.sigalg(n).map(|e| SignatureScheme::from(e.code)).ok_or_else(|| {
                    crate::err!(
                        Usage,
                        "--sigalgs {n:?} is not a signature scheme of this rustls stack; it has: {}",
                        t.sigalgs.iter().map(|e| e.name).collect::<Vec<_>>().join(", ")
                    )
                })
            })
            .collect(),
    }
}

fn certified_key(
    provider: &CryptoProvider,
    chain: &std::path::Path,
    key: &std::path::Path,
) -> Result<Arc<CertifiedKey>> {
    let certs = keys::certificates(chain, "--cert-chain")?;
    if let Some(big) = certs.iter().find(|c| c.len() > MAX_CERTIFICATE) {
        crate::bail!(
            Usage,
            "--cert-chain {}: a certificate of {} bytes; rustls and webpki take certificates \
             below 64 KiB ({MAX_CERTIFICATE} bytes)",
            chain.display(),
            big.len()
        );
    }
    // TLS 1.3 Certificate: header 4, context 1, list length 3, per entry 3 + DER + 2.
    let message = 8 + certs.iter().map(|c| c.len() + 5).sum::<usize>();
    if message > MAX_HANDSHAKE_MESSAGE {
        crate::bail!(
            Usage,
            "--cert-chain {}: a Certificate message of {message} bytes; rustls takes \
             handshake messages below 64 KiB ({MAX_HANDSHAKE_MESSAGE} bytes)",
            chain.display()
        );
    }
    let key = keys::private_key(key, "--key")?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| crate::err!(Usage, "--key: rustls cannot use this key: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(
        certs,
        Arc::new(NotingKey(signing)),
    )))
}

fn roots(path: &std::path::Path, flag: &str) -> Result<Arc<RootCertStore>> {
    let mut store = RootCertStore::empty();
    for c in keys::certificates(path, flag)? {
        store
            .add(c)
            .map_err(|e| crate::err!(Usage, "{flag} {}: not a usable root: {e}", path.display()))?;
    }
    Ok(Arc::new(store))
}

fn keylog(p: &Protocol) -> Result<Option<Arc<dyn rustls::KeyLog>>> {
    let Some(path) = &p.keylog else {
        return Ok(None);
    };
    // Checked now, created when the first secret comes (`secrets::KeyLog`).
    let log = crate::secrets::KeyLog::new(path).map_err(|e| e.context("--keylog"))?;
    Ok(Some(Arc::new(KeyLogFile(log))))
}

/// SSLKEYLOGFILE lines, appended as rustls hands over each secret.
#[derive(Debug)]
struct KeyLogFile(crate::secrets::KeyLog);

impl rustls::KeyLog for KeyLogFile {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        self.0
            .log(&format!("{label} {} {}", hex(client_random), hex(secret)));
    }
}

// --- verifiers that note what they checked -----------------------------------------------

#[derive(Debug)]
struct ServerVerifier {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    schemes: Vec<SignatureScheme>,
    /// `--verify report`: a chain that does not validate is noted, not refused (the
    /// CertificateVerify signature is still checked against the leaf's key).
    report: bool,
}

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &PkiServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(e) if self.report => {
                CHAIN_FAILURE.with(|c| *c.borrow_mut() = Some(e.to_string()));
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        let ok = self.inner.verify_tls12_signature(message, cert, dss)?;
        VERIFIED.with(|c| c.set(Some(u16::from(dss.scheme))));
        Ok(ok)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        let ok = self.inner.verify_tls13_signature(message, cert, dss)?;
        VERIFIED.with(|c| c.set(Some(u16::from(dss.scheme))));
        Ok(ok)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes.clone()
    }
}

#[derive(Debug)]
struct ClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    schemes: Vec<SignatureScheme>,
}

impl ClientCertVerifier for ClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        let ok = self.inner.verify_tls12_signature(message, cert, dss)?;
        VERIFIED.with(|c| c.set(Some(u16::from(dss.scheme))));
        Ok(ok)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        let ok = self.inner.verify_tls13_signature(message, cert, dss)?;
        VERIFIED.with(|c| c.set(Some(u16::from(dss.scheme))));
        Ok(ok)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes.clone()
    }
}

#[derive(Debug)]
struct OneCert(Arc<CertifiedKey>);

impl rustls::server::ResolvesServerCert for OneCert {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

impl rustls::client::ResolvesClientCert for OneCert {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn rustls_err(what: &str, e: rustls::Error) -> Error {
    crate::err!(Usage, "{what}: {e}")
}

impl Rustls {
    /// The server configuration of `setup` (the loops and the in-memory reference share it).
    fn server_config(&self, setup: &ServerSetup) -> Result<Arc<rustls::ServerConfig>> {
        if setup.dh_bits.is_some() || setup.dh_params.is_some() {
            crate::bail!(
                Usage,
                "--dh-bits/--dh-params: rustls has no finite-field DHE"
            );
        }
        let p = &setup.protocol;
        let provider = provider(self.0, p)?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions(p))
            .map_err(|e| rustls_err("protocol versions", e))?;
        let builder = match &setup.client_auth {
            None => builder.with_no_client_auth(),
            Some(auth) => {
                let inner = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    roots(&auth.ca, "--client-ca")?,
                    provider.clone(),
                )
                .build()
                .map_err(|e| crate::err!(Usage, "--client-ca: {e}"))?;
                builder.with_client_cert_verifier(Arc::new(ClientVerifier {
                    inner,
                    schemes: allowed_schemes(self.0, &auth.sigalgs)?,
                }))
            }
        };
        let own = allowed_schemes(self.0, &p.sigalgs)?;
        let key = certified_key(&provider, &setup.cert_chain, &setup.key)?;
        let key = Arc::new(CertifiedKey::new(
            key.cert.clone(),
            Arc::new(Restricted(key.key.clone(), own)),
        ));
        let mut config = builder.with_cert_resolver(Arc::new(OneCert(key)));
        // Full handshakes only, as on OpenSSL: no tickets, no session cache.
        config.send_tls13_tickets = 0;
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        if let Some(k) = keylog(p)? {
            config.key_log = k;
        }
        Ok(Arc::new(config))
    }

    /// The client configuration of `setup` (the loops and the in-memory reference share it).
    fn client_config(&self, setup: &ClientSetup) -> Result<Arc<rustls::ClientConfig>> {
        let p = &setup.protocol;
        let provider = provider(self.0, p)?;
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots(&setup.ca, "--ca")?,
            provider.clone(),
        )
        .build()
        .map_err(|e| crate::err!(Usage, "--ca: {e}"))?;
        if let Some(shares) = &p.key_shares {
            check_key_shares(self.0, &provider, shares)?;
        }
        let verifier = Arc::new(ServerVerifier {
            inner,
            schemes: allowed_schemes(self.0, &p.sigalgs)?,
            report: p.verify == VerifyMode::Report,
        });
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions(p))
            .map_err(|e| rustls_err("protocol versions", e))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match &setup.identity {
            None => builder.with_no_client_auth(),
            Some(id) => {
                let key = certified_key(&provider, &id.cert_chain, &id.key)?;
                builder.with_client_cert_resolver(Arc::new(OneCert(key)))
            }
        };
        config.resumption = rustls::client::Resumption::disabled();
        if let Some(k) = keylog(p)? {
            config.key_log = k;
        }
        Ok(Arc::new(config))
    }
}

/// The groups (codes) whose key shares rustls's ClientHello carries: the first offered
/// group's, and when that group is a hybrid whose classical half is offered too, that
/// half's as well (rustls sends it "for free", sharing the hybrid's key).
fn key_shares_sent(provider: &CryptoProvider) -> Result<Vec<u16>> {
    let Some(first) = provider.kx_groups.first() else {
        return Ok(Vec::new());
    };
    let mut out = vec![u16::from(first.name())];
    let active = first
        .start()
        .map_err(|e| rustls_err("starting a key exchange", e))?;
    if let Some((half, _)) = active.hybrid_component() {
        if provider.kx_groups.iter().any(|g| g.name() == half) {
            out.push(u16::from(half));
        }
    }
    Ok(out)
}

/// (hybrid, its classical half) for the stack's hybrids whose half is a group of the stack:
/// rustls sends the half's key share along with the hybrid's when both are offered. Only
/// aws-lc-rs's groups have halves (pqlab's liboqs hybrids report none), so only those are
/// started (a key generation each, well under a millisecond).
fn key_share_companions(t: &Tables) -> Vec<(u16, u16)> {
    let aws_codes: Vec<u16> = aws()
        .kx_groups
        .iter()
        .map(|g| u16::from(g.name()))
        .collect();
    t.groups
        .iter()
        .filter(|(e, _)| aws_codes.contains(&e.code))
        .filter_map(|(e, g)| {
            let half = u16::from(g.start().ok()?.hybrid_component()?.0);
            t.groups
                .iter()
                .any(|(h, _)| h.code == half)
                .then_some((e.code, half))
        })
        .collect()
}

/// `--key-shares` must be what rustls sends by itself: it has no way to choose.
fn check_key_shares(flavor: Flavor, provider: &CryptoProvider, shares: &[String]) -> Result<()> {
    let t = tables(flavor);
    let sent = key_shares_sent(provider)?;
    let mut asked: Vec<u16> = shares
        .iter()
        .filter_map(|s| t.group(s).map(|(e, _)| e.code))
        .collect();
    let mut want = sent.clone();
    want.sort();
    asked.sort();
    asked.dedup();
    if asked != want {
        let names: Vec<String> = sent
            .iter()
            .map(|c| {
                t.group_name(*c)
                    .map(String::from)
                    .unwrap_or(format!("{c:#06x}"))
            })
            .collect();
        crate::bail!(
            Usage,
            "--key-shares {}: rustls sends a key share for the first group of --groups (and \
             for a hybrid first group also its classical half when that group is offered \
             too), here {}; order --groups so that is what you ask for",
            shares.join(":"),
            names.join(" and ")
        );
    }
    Ok(())
}

// --- the stack ---------------------------------------------------------------------------------

impl Stack for Rustls {
    fn name(&self) -> &'static str {
        match self.0 {
            Flavor::Oqs => "rustls",
            Flavor::AwsLcRs => "rustls-aws-lc-rs",
        }
    }

    fn reports_messages(&self) -> bool {
        false
    }

    fn server(&self, setup: &ServerSetup) -> Result<Arc<dyn ServerContext>> {
        Ok(Arc::new(Server {
            config: self.server_config(setup)?,
            client_auth: setup.client_auth.is_some(),
            flavor: self.0,
        }))
    }

    fn client(&self, setup: &ClientSetup) -> Result<Box<dyn ClientContext>> {
        Ok(Box::new(Client {
            config: self.client_config(setup)?,
            identity: setup.identity.is_some(),
            flavor: self.0,
        }))
    }

    fn reference(
        &self,
        server: &ServerSetup,
        client: &ClientSetup,
        name: &ServerName,
        transport: Transport,
    ) -> Option<Result<ReferenceRun>> {
        Some((|| {
            let (s, c) = (self.server_config(server)?, self.client_config(client)?);
            let name = pki_name(name)?;
            let run: ReferenceRun = match transport {
                Transport::Memory => Box::new(move || in_memory_handshake(&s, &c, &name)),
                Transport::Tcp => tcp_reference(s, c, name)?,
            };
            Ok(run)
        })())
    }

    fn group_code(&self, name: &str) -> Option<u16> {
        tables(self.0).group(name).map(|(e, _)| e.code)
    }

    fn sigalg_code(&self, name: &str) -> Option<u16> {
        tables(self.0).sigalg(name).map(|e| e.code)
    }

    fn heap_counting(&self) -> HeapCounting {
        HeapCounting::Malloc
    }

    fn describe(&self) -> Result<StackInfo> {
        let t = tables(self.0);
        let v13 = vec!["1.3"];
        let limits = Limits {
            max_handshake_message_bytes: Some(MAX_HANDSHAKE_MESSAGE as u64),
            max_certificate_bytes: Some(MAX_CERTIFICATE as u64),
            ..Limits::default()
        };
        let provider = match self.0 {
            Flavor::Oqs => format!(
                "pqlab's liboqs {} provider, aws-lc-rs for X25519, P-256, P-384, \
                 X25519MLKEM768, ECDSA, RSA-PSS, Ed25519",
                crate::primitives::oqs::liboqs_version()
            ),
            Flavor::AwsLcRs => "rustls's aws-lc-rs provider".to_string(),
        };
        let cipher_suites = aws()
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS13)
            .map(|s| NamedCode {
                name: suite_name(*s),
                code: u16::from(s.suite()),
                versions: v13.clone(),
            })
            .collect();
        Ok(StackInfo {
            name: self.name(),
            implementation: format!("rustls {} with {provider}", RUSTLS_VERSION),
            cipher_suites,
            message_events: false,
            groups: t
                .groups
                .iter()
                .map(|(e, _)| NamedCode {
                    name: e.name.to_string(),
                    code: e.code,
                    versions: v13.clone(),
                })
                .collect(),
            sigalgs: t
                .sigalgs
                .iter()
                .map(|e| NamedCode {
                    name: e.name.to_string(),
                    code: e.code,
                    versions: v13.clone(),
                })
                .collect(),
            cert_key_types: t.key_types.clone(),
            ca_key_types: t.key_types.clone(),
            limits,
            // rustls joins a TLS 1.3 flight's encrypted messages (HandshakeFlight) and the
            // connection loop writes everything queued in one vectored write.
            write_model: WriteModel {
                kind: Writes::Flight,
                buffer_bytes: None,
                records: Framing::Flight,
            },
            server_name_ack: true,
            change_cipher_spec: true,
            key_shares: KeyShares::First,
            key_share_companions: key_share_companions(t),
            build_options: Vec::new(),
            heap_counting: self.heap_counting(),
            fixed_random: self.fixed_random(),
            tools: Default::default(),
        })
    }
}

/// The rustls release (the exact version Cargo.lock pins).
pub const RUSTLS_VERSION: &str = "0.23.46";

/// A key that signs only with the schemes `--sigalgs` allows.
#[derive(Debug)]
struct Restricted(Arc<dyn SigningKey>, Vec<SignatureScheme>);

impl SigningKey for Restricted {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        let allowed: Vec<SignatureScheme> = offered
            .iter()
            .copied()
            .filter(|s| self.1.contains(s))
            .collect();
        self.0.choose_scheme(&allowed)
    }

    fn public_key(&self) -> Option<rustls::pki_types::SubjectPublicKeyInfoDer<'_>> {
        self.0.public_key()
    }

    fn algorithm(&self) -> rustls::SignatureAlgorithm {
        self.0.algorithm()
    }
}

struct Server {
    config: Arc<rustls::ServerConfig>,
    client_auth: bool,
    flavor: Flavor,
}

impl ServerContext for Server {
    fn security_level(&self) -> Option<u32> {
        None
    }

    fn start(&self, wire: Wire) -> Result<Box<dyn Handshake>> {
        let conn = rustls::ServerConnection::new(self.config.clone())
            .map_err(|e| rustls_err("server connection", e))?;
        Ok(Box::new(Pending {
            conn: rustls::Connection::Server(conn),
            wire,
            client_auth: self.client_auth,
            flavor: self.flavor,
        }))
    }
}

struct Client {
    config: Arc<rustls::ClientConfig>,
    identity: bool,
    flavor: Flavor,
}

impl ClientContext for Client {
    fn security_level(&self) -> Option<u32> {
        None
    }

    fn start(&self, wire: Wire, name: &ServerName) -> Result<Box<dyn Handshake>> {
        let conn = rustls::ClientConnection::new(self.config.clone(), pki_name(name)?)
            .map_err(|e| rustls_err("client connection", e))?;
        Ok(Box::new(Pending {
            conn: rustls::Connection::Client(conn),
            wire,
            client_auth: self.identity,
            flavor: self.flavor,
        }))
    }
}

fn pki_name(name: &ServerName) -> Result<PkiServerName<'static>> {
    Ok(match name {
        ServerName::Dns(d) => PkiServerName::try_from(d.clone())
            .map_err(|e| crate::err!(Usage, "--servername {d:?}: {e}"))?,
        ServerName::Ip(ip) => PkiServerName::IpAddress((*ip).into()),
    })
}

// --- the reference: rustls driven as its own benchmark and examples drive it ---------------------

/// One full handshake between a client and a server connection in this thread, each
/// side's flights handed to the other through a buffer (as rustls's own benchmark drives
/// them): the CPU each side spent in its calls into rustls, and what was negotiated.
fn in_memory_handshake(
    server: &Arc<rustls::ServerConfig>,
    client: &Arc<rustls::ClientConfig>,
    name: &PkiServerName<'static>,
) -> Result<ReferenceHandshake> {
    reset_notes();
    let mut h = ReferenceHandshake::default();
    let started = std::time::Instant::now();
    let t = thread_cpu_ns();
    let mut c = rustls::Connection::Client(
        rustls::ClientConnection::new(client.clone(), name.clone())
            .map_err(|e| rustls_err("client connection", e))?,
    );
    let t2 = thread_cpu_ns();
    h.client_cpu_ns += t2 - t;
    let mut s = rustls::Connection::Server(
        rustls::ServerConnection::new(server.clone())
            .map_err(|e| rustls_err("server connection", e))?,
    );
    h.server_cpu_ns += thread_cpu_ns() - t2;
    let mut buf = Vec::with_capacity(64 << 10);
    let (mut to_server, mut to_client) = (0, 0);
    // A full TLS 1.3 handshake is three flights; the bound only stops a stack that loops.
    for _ in 0..16 {
        if !c.is_handshaking() && !s.is_handshaking() && !c.wants_write() && !s.wants_write() {
            break;
        }
        to_server += hand_over(
            &mut c,
            &mut s,
            &mut buf,
            &mut h.client_cpu_ns,
            &mut h.server_cpu_ns,
        )?;
        to_client += hand_over(
            &mut s,
            &mut c,
            &mut buf,
            &mut h.server_cpu_ns,
            &mut h.client_cpu_ns,
        )?;
    }
    if c.is_handshaking() || s.is_handshaking() {
        crate::bail!(
            Library,
            "the in-memory handshake did not finish in 16 exchanges"
        );
    }
    (h.client_bytes, h.server_bytes) = (Some(to_server), Some(to_client));
    h.wall_ns = started.elapsed().as_nanos() as u64;
    h.client_group = c
        .negotiated_key_exchange_group()
        .map(|g| u16::from(g.name()));
    h.server_group = s
        .negotiated_key_exchange_group()
        .map(|g| u16::from(g.name()));
    h.signed = SIGNED.with(|x| x.get());
    h.verified = VERIFIED.with(|x| x.get());
    Ok(h)
}

/// What the server thread of the TCP reference reports per connection: its CPU, the group
/// and the scheme it signed with.
type ServerSide = Result<(u64, Option<u16>, Option<u16>)>;

/// The TCP reference, as rustls's simpleserver and simpleclient examples: blocking sockets
/// on 127.0.0.1 (Nagle off, as in the engine's loops), `complete_io` until the handshake is
/// done, then close. The server runs on its own thread, one connection at a time, and
/// reports each connection's CPU; the calling thread is the client.
fn tcp_reference(
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
    name: PkiServerName<'static>,
) -> Result<ReferenceRun> {
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| crate::err!(Io, "cannot listen on 127.0.0.1: {e}"))?;
    let addr = listener.local_addr()?;
    let (tx, rx) = std::sync::mpsc::channel::<ServerSide>();
    std::thread::Builder::new()
        .name("reference-server".into())
        .spawn(move || loop {
            let t = thread_cpu_ns();
            let Ok((mut tcp, _)) = listener.accept() else {
                return;
            };
            reset_notes();
            let side = (|| -> Result<(Option<u16>, Option<u16>)> {
                tcp.set_nodelay(true)?;
                let mut conn = rustls::ServerConnection::new(server.clone())
                    .map_err(|e| rustls_err("server connection", e))?;
                while conn.is_handshaking() {
                    conn.complete_io(&mut tcp)
                        .map_err(|e| classify("reference server handshake", e))?;
                }
                while conn.wants_write() {
                    conn.write_tls(&mut tcp)
                        .map_err(|e| classify("reference server write", e))?;
                }
                // The client closes once its Finished is out: read to its end.
                let mut rest = [0u8; 4096];
                while matches!(tcp.read(&mut rest), Ok(n) if n > 0) {}
                let group = conn
                    .negotiated_key_exchange_group()
                    .map(|g| u16::from(g.name()));
                Ok((group, SIGNED.with(|x| x.get())))
            })();
            let cpu = thread_cpu_ns() - t;
            if tx.send(side.map(|(g, s)| (cpu, g, s))).is_err() {
                return;
            }
        })
        .map_err(|e| crate::err!(Io, "cannot start the reference server thread: {e}"))?;
    Ok(Box::new(move || {
        reset_notes();
        let started = std::time::Instant::now();
        let t = thread_cpu_ns();
        let mut tcp = TcpStream::connect(addr)
            .map_err(|e| crate::err!(Io, "cannot connect to the reference server: {e}"))?;
        tcp.set_nodelay(true)?;
        let mut conn = rustls::ClientConnection::new(client.clone(), name.clone())
            .map_err(|e| rustls_err("client connection", e))?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)
                .map_err(|e| classify("reference client handshake", e))?;
        }
        while conn.wants_write() {
            conn.write_tls(&mut tcp)
                .map_err(|e| classify("reference client write", e))?;
        }
        let client_group = conn
            .negotiated_key_exchange_group()
            .map(|g| u16::from(g.name()));
        let verified = VERIFIED.with(|x| x.get());
        drop(tcp);
        let client_cpu_ns = thread_cpu_ns() - t;
        let (server_cpu_ns, server_group, signed) = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .map_err(|_| crate::err!(Io, "the reference server reported nothing in 30 s"))??;
        Ok(ReferenceHandshake {
            wall_ns: started.elapsed().as_nanos() as u64,
            client_cpu_ns,
            server_cpu_ns,
            client_bytes: None,
            server_bytes: None,
            client_group,
            server_group,
            signed,
            verified,
        })
    }))
}

/// Everything `from` wants to write, read and processed by `to`; the bytes handed over.
fn hand_over(
    from: &mut rustls::Connection,
    to: &mut rustls::Connection,
    buf: &mut Vec<u8>,
    from_ns: &mut u64,
    to_ns: &mut u64,
) -> Result<u64> {
    buf.clear();
    let t = thread_cpu_ns();
    while from.wants_write() {
        from.write_tls(buf)
            .map_err(|e| crate::err!(Library, "in-memory write: {e}"))?;
    }
    *from_ns += thread_cpu_ns() - t;
    if buf.is_empty() {
        return Ok(0);
    }
    let t = thread_cpu_ns();
    let mut rd = &buf[..];
    while !rd.is_empty() {
        to.read_tls(&mut rd)
            .map_err(|e| crate::err!(Library, "in-memory read: {e}"))?;
        to.process_new_packets()
            .map_err(|e| crate::err!(Library, "in-memory handshake failed: {e}"))?;
    }
    *to_ns += thread_cpu_ns() - t;
    Ok(buf.len() as u64)
}

struct Pending {
    conn: rustls::Connection,
    wire: Wire,
    /// Server: client certificates are required; client: it has one to present.
    client_auth: bool,
    flavor: Flavor,
}

/// Sort a failed rustls I/O into the engine's kinds.
fn classify(what: &str, e: std::io::Error) -> Error {
    use std::io::ErrorKind as K;
    if let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return match inner {
            rustls::Error::InvalidCertificate(c) => {
                Error::Check(format!("{what}: certificate verification failed: {c:?}"))
            }
            rustls::Error::AlertReceived(a) => Error::Peer(format!("{what}: the peer sent {a:?}")),
            rustls::Error::PeerMisbehaved(m) => Error::Peer(format!("{what}: {m:?}")),
            // Bytes from the peer that TLS does not allow.
            rustls::Error::InvalidMessage(_)
            | rustls::Error::InappropriateMessage { .. }
            | rustls::Error::InappropriateHandshakeMessage { .. }
            | rustls::Error::DecryptError
            | rustls::Error::PeerSentOversizedRecord
            | rustls::Error::NoCertificatesPresented => {
                Error::Peer(format!("{what}: the peer misbehaved: {inner}"))
            }
            rustls::Error::PeerIncompatible(m) => {
                Error::Library(format!("{what}: nothing in common with the peer: {m:?}"))
            }
            other => Error::Library(format!("{what}: {other}")),
        };
    }
    match e.kind() {
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
            Error::Peer(format!("{what}: the peer closed the connection: {e}"))
        }
        _ => Error::Io(format!("{what}: {e}")),
    }
}

impl Handshake for Pending {
    fn run(mut self: Box<Self>) -> Result<Box<dyn Session>> {
        reset_notes();
        while self.conn.is_handshaking() {
            if let Err(e) = self.conn.complete_io(&mut self.wire) {
                return Err(classify("handshake failed", e));
            }
        }
        // The last flight (the client's Finished) may still be queued.
        while self.conn.wants_write() {
            self.conn
                .write_tls(&mut self.wire)
                .map_err(|e| classify("handshake failed", e))?;
        }
        let signed = SIGNED.with(|c| c.get());
        let verified = VERIFIED.with(|c| c.get());
        let chain_failure = CHAIN_FAILURE.with(|c| c.borrow_mut().take());
        Ok(Box::new(Connection {
            conn: self.conn,
            wire: self.wire,
            client_auth: self.client_auth,
            flavor: self.flavor,
            signed,
            verified,
            chain_failure,
            plain_eof: false,
        }))
    }
}

struct Connection {
    conn: rustls::Connection,
    wire: Wire,
    client_auth: bool,
    flavor: Flavor,
    /// The scheme this side signed with (None: it signed nothing).
    signed: Option<u16>,
    /// The scheme of the peer's CertificateVerify this side verified.
    verified: Option<u16>,
    /// Client, `--verify report`: why the server's chain did not validate.
    chain_failure: Option<String>,
    plain_eof: bool,
}

impl Connection {
    fn is_server(&self) -> bool {
        matches!(self.conn, rustls::Connection::Server(_))
    }

    fn flush_tls(&mut self) -> Result<()> {
        while self.conn.wants_write() {
            self.conn
                .write_tls(&mut self.wire)
                .map_err(|e| classify("TLS write failed", e))?;
        }
        Ok(())
    }
}

impl Session for Connection {
    fn read(&mut self, buf: &mut [u8]) -> Result<ReadOutcome> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(0) => return Ok(ReadOutcome::Closed),
                Ok(n) => return Ok(ReadOutcome::Data(n)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Ok(ReadOutcome::Eof)
                }
                Err(e) => return Err(classify("TLS read failed", e)),
            }
            if self.plain_eof {
                return Ok(ReadOutcome::Eof);
            }
            match self.conn.read_tls(&mut self.wire) {
                Ok(0) => self.plain_eof = true,
                Ok(_) => {}
                Err(e) => return Err(classify("TLS read failed", e)),
            }
            if let Err(e) = self.conn.process_new_packets() {
                // Send our alert, as rustls queues one, then report.
                let _ = self.flush_tls();
                return Err(classify(
                    "TLS read failed",
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e),
                ));
            }
        }
    }

    fn write_all(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let n = self
                .conn
                .writer()
                .write(data)
                .map_err(|e| classify("TLS write failed", e))?;
            data = &data[n..];
            self.flush_tls()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.flush_tls()
    }

    fn close(&mut self, wait_for_peer: bool) {
        self.conn.send_close_notify();
        if self.flush_tls().is_err() || !wait_for_peer {
            return;
        }
        let mut buf = [0u8; 4096];
        // Bounded by the socket's timeout; a peer that already left ends it too.
        for _ in 0..64 {
            match self.read(&mut buf) {
                Ok(ReadOutcome::Data(_)) => {}
                _ => return,
            }
        }
    }

    fn negotiated(&self) -> Negotiated {
        let t = tables(self.flavor);
        let version = match self.conn.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
            _ => "unknown",
        };
        let suite = self.conn.negotiated_cipher_suite();
        let group = self
            .conn
            .negotiated_key_exchange_group()
            .map(|g| u16::from(g.name()));
        let (server_scheme, client_scheme) = if self.is_server() {
            (
                self.signed,
                if self.client_auth {
                    self.verified
                } else {
                    None
                },
            )
        } else {
            (
                self.verified,
                if self.client_auth { self.signed } else { None },
            )
        };
        let name = |code: Option<u16>| code.and_then(|c| t.sigalg_name(c)).map(String::from);
        Negotiated {
            version: version.to_string(),
            cipher: suite.map(suite_name),
            cipher_standard_name: suite.map(suite_name),
            cipher_code: suite.map(|s| u16::from(s.suite())),
            group: group.and_then(|c| t.group_name(c)).map(String::from),
            group_code: group,
            sigalg: name(server_scheme),
            sigalg_code: server_scheme,
            client_sigalg: name(client_scheme),
            client_sigalg_code: client_scheme,
            session_reused: false,
            peer_tmp_key: None,
        }
    }

    fn server_name(&self) -> Option<String> {
        match &self.conn {
            rustls::Connection::Server(s) => s.server_name().map(String::from),
            rustls::Connection::Client(_) => None,
        }
    }

    fn peer_chain_der_bytes(&self) -> Option<Vec<usize>> {
        self.conn
            .peer_certificates()
            .map(|c| c.iter().map(|d| d.len()).collect())
            .filter(|c: &Vec<usize>| !c.is_empty())
    }

    fn peer_chain_der(&self) -> Option<Vec<Vec<u8>>> {
        self.conn
            .peer_certificates()
            .map(|c| c.iter().map(|d| d.as_ref().to_vec()).collect())
            .filter(|c: &Vec<Vec<u8>>| !c.is_empty())
    }

    fn verification(&self) -> Verification {
        // A completed handshake is a verified one: rustls aborts on any chain or signature
        // it cannot verify, unless the client only reports the chain (`--verify report`).
        // A server that asked for no certificate checked nothing.
        if let Some(why) = &self.chain_failure {
            Verification::Failed(why.clone())
        } else if self.is_server() && !self.client_auth {
            Verification::NotChecked
        } else {
            Verification::Verified
        }
    }
}
