//! liboqs inside rustls: key-exchange groups (KEMs, and hybrids of a KEM with an elliptic
//! curve), signing keys and webpki signature verification algorithms, on the code points
//! and OIDs oqs-provider 0.10 uses (the lab's catalogue holds the same values, and
//! tests/test_catalog_engine.py checks that they agree).
//!
//! Everything goes through the engine's liboqs backend (`primitives::oqs`), the same code
//! `pqlab primitives --backend liboqs` times.

use crate::primitives::backend::{Kem as _, Params, Signature as _};
use crate::primitives::der;
use crate::primitives::oqs::{shared_sig, KeyPair, OqsKem};
use rustls::crypto::{ActiveKeyExchange, CompletedKeyExchange, SharedSecret, SupportedKxGroup};
use rustls::pki_types::{AlgorithmIdentifier, InvalidSignature, SignatureVerificationAlgorithm};
use rustls::sign::{Signer, SigningKey};
use rustls::{Error, NamedGroup, SignatureAlgorithm, SignatureScheme};
use std::sync::{Arc, OnceLock};

pub use crate::tls::pki::ids::{KemAlg, SigAlg, KEMS, SIGS};

/// The IANA hybrids built here from liboqs's ML-KEM and aws-lc-rs's elliptic curve (the
/// curve's share first, as draft-kwiatkowski-tls-ecdhe-mlkem specifies for the NIST
/// curves). X25519MLKEM768 comes whole from aws-lc-rs.
pub struct HybridAlg {
    pub name: &'static str,
    pub code: u16,
    pub kem: &'static str,
    pub curve: &'static dyn SupportedKxGroup,
}

pub fn hybrids() -> [HybridAlg; 2] {
    use rustls::crypto::aws_lc_rs::kx_group::{SECP256R1, SECP384R1};
    [
        HybridAlg {
            name: "SecP256r1MLKEM768",
            code: 0x11eb,
            kem: "ML-KEM-768",
            curve: SECP256R1,
        },
        HybridAlg {
            name: "SecP384r1MLKEM1024",
            code: 0x11ed,
            kem: "ML-KEM-1024",
            curve: SECP384R1,
        },
    ]
}

fn no_params() -> Params {
    Params::new()
}

// --- KEM groups ------------------------------------------------------------------------------

/// liboqs objects hold only function pointers and sizes once made; using one from several
/// threads is what liboqs's own tests do.
struct SharedKem(OqsKem);
// SAFETY: see above; the pointer is never mutated after OQS_KEM_new.
unsafe impl Send for SharedKem {}
unsafe impl Sync for SharedKem {}

fn kem(name: &'static str) -> &'static SharedKem {
    static CACHE: OnceLock<std::sync::Mutex<Vec<(&'static str, &'static SharedKem)>>> =
        OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut c = cache.lock().expect("kem cache");
    if let Some((_, k)) = c.iter().find(|(n, _)| *n == name) {
        return k;
    }
    let k: &'static SharedKem = Box::leak(Box::new(SharedKem(
        OqsKem::new(name, &no_params(), None).expect("a KEM of this build's table"),
    )));
    c.push((name, k));
    k
}

fn lib_err(e: crate::out::Error) -> Error {
    Error::General(format!("liboqs: {e}"))
}

/// A liboqs KEM as a rustls group: the client sends an encapsulation key, the server
/// answers with a ciphertext (`start_and_complete`), the client decapsulates.
#[derive(Debug)]
pub struct KemGroup {
    alg: KemAlg,
}

impl KemGroup {
    pub fn new(alg: KemAlg) -> &'static KemGroup {
        Box::leak(Box::new(KemGroup { alg }))
    }
}

impl SupportedKxGroup for KemGroup {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, Error> {
        let k = kem(self.alg.liboqs);
        let key = k.0.keygen().map_err(lib_err)?;
        Ok(Box::new(KemKeyExchange {
            code: self.alg.code,
            kem: k,
            key,
        }))
    }

    fn start_and_complete(&self, peer_pub_key: &[u8]) -> Result<CompletedKeyExchange, Error> {
        let k = kem(self.alg.liboqs);
        let key = KeyPair {
            public: peer_pub_key.to_vec(),
            secret: Vec::new(),
        };
        if peer_pub_key.len() != k.0.public_key_len() {
            return Err(Error::PeerMisbehaved(
                rustls::PeerMisbehaved::InvalidKeyShare,
            ));
        }
        let (ct, ss) = k.0.encaps(&key).map_err(lib_err)?;
        Ok(CompletedKeyExchange {
            group: self.name(),
            pub_key: ct,
            secret: SharedSecret::from(&ss[..]),
        })
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::from(self.alg.code)
    }
}

struct KemKeyExchange {
    code: u16,
    kem: &'static SharedKem,
    key: KeyPair,
}

impl ActiveKeyExchange for KemKeyExchange {
    fn complete(self: Box<Self>, peer_pub_key: &[u8]) -> Result<SharedSecret, Error> {
        let ss = self
            .kem
            .0
            .decaps(&self.key, peer_pub_key)
            .map_err(|_| Error::PeerMisbehaved(rustls::PeerMisbehaved::InvalidKeyShare))?;
        Ok(SharedSecret::from(&ss[..]))
    }

    fn pub_key(&self) -> &[u8] {
        &self.key.public
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::from(self.code)
    }
}

/// An elliptic curve (aws-lc-rs) and a liboqs ML-KEM in one share: the curve's part first.
#[derive(Debug)]
pub struct HybridGroup {
    code: u16,
    kem: &'static str,
    curve: &'static dyn SupportedKxGroup,
}

impl HybridGroup {
    pub fn new(alg: &HybridAlg) -> &'static HybridGroup {
        Box::leak(Box::new(HybridGroup {
            code: alg.code,
            kem: alg.kem,
            curve: alg.curve,
        }))
    }
}

impl SupportedKxGroup for HybridGroup {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, Error> {
        let curve = self.curve.start()?;
        let k = kem(self.kem);
        let key = k.0.keygen().map_err(lib_err)?;
        let mut share = curve.pub_key().to_vec();
        share.extend_from_slice(&key.public);
        Ok(Box::new(HybridKeyExchange {
            code: self.code,
            curve,
            kem: k,
            key,
            share,
        }))
    }

    fn start_and_complete(&self, peer: &[u8]) -> Result<CompletedKeyExchange, Error> {
        let k = kem(self.kem);
        let split = peer
            .len()
            .checked_sub(k.0.public_key_len())
            .ok_or(Error::PeerMisbehaved(
                rustls::PeerMisbehaved::InvalidKeyShare,
            ))?;
        let (ec_peer, kem_peer) = peer.split_at(split);
        let ec = self.curve.start_and_complete(ec_peer)?;
        let key = KeyPair {
            public: kem_peer.to_vec(),
            secret: Vec::new(),
        };
        let (ct, kem_ss) = k.0.encaps(&key).map_err(lib_err)?;
        let mut pub_key = ec.pub_key;
        pub_key.extend_from_slice(&ct);
        let mut secret = ec.secret.secret_bytes().to_vec();
        secret.extend_from_slice(&kem_ss);
        Ok(CompletedKeyExchange {
            group: self.name(),
            pub_key,
            secret: SharedSecret::from(&secret[..]),
        })
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::from(self.code)
    }
}

struct HybridKeyExchange {
    code: u16,
    curve: Box<dyn ActiveKeyExchange>,
    kem: &'static SharedKem,
    key: KeyPair,
    share: Vec<u8>,
}

impl ActiveKeyExchange for HybridKeyExchange {
    fn complete(self: Box<Self>, peer: &[u8]) -> Result<SharedSecret, Error> {
        let ct_len = self.kem.0.ciphertext_len();
        let split = peer.len().checked_sub(ct_len).ok_or(Error::PeerMisbehaved(
            rustls::PeerMisbehaved::InvalidKeyShare,
        ))?;
        let (ec_peer, ct) = peer.split_at(split);
        let ec = self.curve.complete(ec_peer)?;
        let kem_ss = self
            .kem
            .0
            .decaps(&self.key, ct)
            .map_err(|_| Error::PeerMisbehaved(rustls::PeerMisbehaved::InvalidKeyShare))?;
        let mut secret = ec.secret_bytes().to_vec();
        secret.extend_from_slice(&kem_ss);
        Ok(SharedSecret::from(&secret[..]))
    }

    fn pub_key(&self) -> &[u8] {
        &self.share
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::from(self.code)
    }
}

// --- signatures ---------------------------------------------------------------------------------

/// A liboqs private key usable by rustls: signs with its one scheme.
pub struct OqsSigningKey {
    alg: SigAlg,
    key: Arc<KeyPair>,
    spki: Vec<u8>,
}

impl OqsSigningKey {
    pub fn new(alg: SigAlg, secret: Vec<u8>, public: Vec<u8>) -> crate::out::Result<Self> {
        let oid = der::oid(alg.oid)?;
        let spki = der::spki(&oid, &public);
        Ok(OqsSigningKey {
            alg,
            key: Arc::new(KeyPair { public, secret }),
            spki,
        })
    }
}

impl SigningKey for OqsSigningKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        let scheme = SignatureScheme::from(self.alg.code);
        offered.contains(&scheme).then(|| {
            Box::new(OqsSigner {
                alg: self.alg,
                key: self.key.clone(),
            }) as Box<dyn Signer>
        })
    }

    fn public_key(&self) -> Option<rustls::pki_types::SubjectPublicKeyInfoDer<'_>> {
        // A key written without its public half (OpenSSL's ML-DSA PKCS#8) cannot say.
        (!self.key.public.is_empty())
            .then(|| rustls::pki_types::SubjectPublicKeyInfoDer::from(&self.spki[..]))
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::Unknown(0)
    }
}

struct OqsSigner {
    alg: SigAlg,
    key: Arc<KeyPair>,
}

impl std::fmt::Debug for OqsSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OqsSigningKey({})", self.alg.liboqs)
    }
}

impl std::fmt::Debug for OqsSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OqsSigner({})", self.alg.liboqs)
    }
}

impl Signer for OqsSigner {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        shared_sig(self.alg.liboqs)
            .sign(&self.key, message)
            .map_err(lib_err)
    }

    fn scheme(&self) -> SignatureScheme {
        SignatureScheme::from(self.alg.code)
    }
}

/// webpki's view of a liboqs signature: the public key's AlgorithmIdentifier and the
/// signature's are the same (oqs-provider's OID, absent parameters).
#[derive(Debug)]
pub struct OqsVerify {
    alg: SigAlg,
    id: &'static [u8],
}

impl OqsVerify {
    pub fn new(alg: SigAlg) -> &'static OqsVerify {
        let id: &'static [u8] = Box::leak(
            der::oid(alg.oid)
                .expect("an OID of this build's table")
                .into_boxed_slice(),
        );
        Box::leak(Box::new(OqsVerify { alg, id }))
    }
}

impl SignatureVerificationAlgorithm for OqsVerify {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        let key = KeyPair {
            public: public_key.to_vec(),
            secret: Vec::new(),
        };
        let s = shared_sig(self.alg.liboqs);
        if public_key.len() != s.public_key_len() {
            return Err(InvalidSignature);
        }
        match s.verify(&key, message, signature) {
            Ok(true) => Ok(()),
            _ => Err(InvalidSignature),
        }
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        AlgorithmIdentifier::from_slice(self.id)
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        AlgorithmIdentifier::from_slice(self.id)
    }
}
