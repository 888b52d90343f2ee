//! Keys of certificates, whatever library holds them: OpenSSL for the algorithms it has
//! (RSA, ECDSA, EdDSA, ML-DSA, SLH-DSA), liboqs for the rest of the signature table
//! (`tls::ids::SIGS`: Falcon, SPHINCS+, MAYO, CROSS, UOV). The certificate builder signs
//! with either through `CertKey`, and `verify` checks a signature by the key's public half
//! from its SubjectPublicKeyInfo alone, so chains of every algorithm are made and checked
//! by one stack-neutral builder (`tls::x509`) that every TLS stack reads.
//!
//! A liboqs key is written as PKCS#8 v2 (RFC 5958 OneAsymmetricKey): the algorithm's OID
//! with absent parameters, liboqs's raw secret key in the privateKey OCTET STRING and its
//! raw public key in `[1] publicKey`, so a reader needs no liboqs call to get the public
//! half.

use crate::out::Result;
use crate::primitives::backend::Signature as _;
use crate::primitives::der;
use crate::primitives::oqs::{shared_sig, KeyPair};
use crate::tls::pki::ids::{SigAlg, SIGS};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{Id, PKey, Private, Public};
use openssl::rsa::Rsa;
use openssl::sign::{Signer, Verifier};
use std::ffi::CString;

/// A key spec (`tls certs --ca-alg/--server-alg` syntax): algorithm name plus an optional
/// parameter (RSA bits, EC curve), e.g. RSA:2048, EC:P-256, ED25519, ML-DSA-44, MAYO-1.
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

    fn upper(&self) -> String {
        self.name.to_ascii_uppercase()
    }

    /// The liboqs algorithm of this spec, when OpenSSL has no key of that name.
    fn liboqs(&self) -> Option<SigAlg> {
        if self.param.is_some() || openssl_keygen_available(&self.name) {
            return None;
        }
        SIGS.iter()
            .find(|s| s.liboqs.eq_ignore_ascii_case(&self.name))
            .copied()
            .filter(|s| liboqs_enabled(s.liboqs))
    }

    /// Whether `generate` can make this key in this build (checked without making one).
    pub fn available(&self) -> bool {
        match self.upper().as_str() {
            "RSA" => self
                .param
                .as_deref()
                .is_none_or(|p| p.parse::<u32>().is_ok_and(|b| (1024..=16384).contains(&b))),
            "EC" | "ECDSA" => curve_nid(self.param.as_deref().unwrap_or("P-256")).is_ok(),
            "ED25519" | "ED448" => self.param.is_none(),
            _ => {
                self.param.is_none()
                    && (openssl_keygen_available(&self.name) || self.liboqs().is_some())
            }
        }
    }

    /// Whether keys of this spec are made by OpenSSL (and so can be served by the OpenSSL
    /// stack), rather than by liboqs.
    pub fn by_openssl(&self) -> bool {
        self.available() && self.liboqs().is_none()
    }

    pub fn generate(&self) -> Result<CertKey> {
        let key = match self.upper().as_str() {
            "RSA" => {
                let bits: u32 = match &self.param {
                    None => 2048,
                    Some(p) => p.parse().map_err(|_| {
                        crate::err!(
                            Usage,
                            "RSA key size {p:?} is not a number of bits, e.g. RSA:2048"
                        )
                    })?,
                };
                if !(1024..=16384).contains(&bits) {
                    crate::bail!(Usage, "RSA key size {bits} is out of range (1024..16384)");
                }
                PKey::from_rsa(Rsa::generate(bits)?)?
            }
            "EC" | "ECDSA" => {
                let curve = self.param.clone().unwrap_or_else(|| "P-256".into());
                let group = EcGroup::from_curve_name(curve_nid(&curve)?)?;
                PKey::from_ec_key(EcKey::generate(&group)?)?
            }
            "ED25519" => PKey::generate_ed25519()?,
            "ED448" => PKey::generate_ed448()?,
            _ => {
                if let Some(alg) = self.liboqs() {
                    let key = shared_sig(alg.liboqs).keygen()?;
                    return Ok(CertKey::Oqs { alg, key });
                }
                if self.param.is_some() {
                    crate::bail!(
                        Usage,
                        "key spec {}:{}: only RSA and EC take a parameter",
                        self.name,
                        self.param.as_deref().unwrap_or_default()
                    );
                }
                openssl_keygen(&self.name)?
            }
        };
        Ok(CertKey::Openssl(key))
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

fn liboqs_enabled(name: &str) -> bool {
    let Ok(c) = CString::new(name) else {
        return false;
    };
    // SAFETY: a NUL-terminated name.
    unsafe { oqs_sys::sig::OQS_SIG_alg_is_enabled(c.as_ptr()) == 1 }
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
fn openssl_keygen_available(name: &str) -> bool {
    let Ok(cname) = CString::new(name) else {
        return false;
    };
    // SAFETY: the context is freed on every path; errors are drained from OpenSSL's queue.
    unsafe {
        let ctx =
            EVP_PKEY_CTX_new_from_name(std::ptr::null_mut(), cname.as_ptr(), std::ptr::null());
        if ctx.is_null() {
            let _ = openssl::error::ErrorStack::get();
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
fn openssl_keygen(name: &str) -> Result<PKey<Private>> {
    use foreign_types::ForeignType;
    let cname =
        CString::new(name).map_err(|_| crate::err!(Usage, "bad algorithm name {name:?}"))?;
    // SAFETY: as in openssl_keygen_available; the new key is owned by the returned PKey.
    unsafe {
        let ctx =
            EVP_PKEY_CTX_new_from_name(std::ptr::null_mut(), cname.as_ptr(), std::ptr::null());
        if ctx.is_null() {
            let _ = openssl::error::ErrorStack::get();
            crate::bail!(
                Usage,
                "no key algorithm {name:?} in OpenSSL or liboqs (try RSA:2048, EC:P-256, \
                 ED25519, ML-DSA-44, SLH-DSA-SHA2-128s, MAYO-1, Falcon-512)"
            );
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

/// A certificate key: an OpenSSL key or a liboqs key pair of an algorithm of `SIGS`.
pub enum CertKey {
    Openssl(PKey<Private>),
    Oqs { alg: SigAlg, key: KeyPair },
}

/// AlgorithmIdentifier of a signature algorithm given by its OID, with NULL parameters
/// (RSA PKCS#1 v1.5) or none (everything else).
fn algorithm_identifier(oid: &str, null_params: bool) -> Result<Vec<u8>> {
    let oid = der::oid(oid)?;
    Ok(if null_params {
        der::sequence(&[&oid, &der::tlv(der::NULL, &[])])
    } else {
        der::sequence(&[&oid])
    })
}

impl CertKey {
    /// A private key read from PEM: whatever OpenSSL reads, else a PKCS#8 key of a liboqs
    /// algorithm of `SIGS` with its public key ([1], as `private_key_pem` writes it).
    pub fn from_pem(pem: &[u8], flag: &str) -> Result<CertKey> {
        if let Ok(k) = PKey::private_key_from_pem(pem) {
            return Ok(CertKey::Openssl(k));
        }
        let _ = openssl::error::ErrorStack::get();
        let der = pem_body(pem, "PRIVATE KEY")
            .ok_or_else(|| crate::err!(Usage, "{flag}: not a PEM private key"))?;
        let (oid, secret, public) = pkcs8_parts(&der)
            .ok_or_else(|| crate::err!(Usage, "{flag}: not a PKCS#8 private key"))?;
        for alg in SIGS {
            if der::oid(alg.oid)?.get(2..) == Some(oid) {
                let Some(public) = public else {
                    crate::bail!(
                        Usage,
                        "{flag}: the {} key has no public key inside ([1] publicKey)",
                        alg.liboqs
                    );
                };
                return Ok(CertKey::Oqs {
                    alg: *alg,
                    key: KeyPair {
                        public: public.to_vec(),
                        secret: secret.to_vec(),
                    },
                });
            }
        }
        crate::bail!(
            Usage,
            "{flag}: a private key of an algorithm neither OpenSSL nor liboqs has here"
        )
    }

    /// The key's algorithm as the records name it (OpenSSL's or liboqs's name).
    pub fn algorithm(&self) -> String {
        match self {
            CertKey::Openssl(k) => match k.id() {
                Id::RSA => format!("RSA:{}", k.bits()),
                Id::RSA_PSS => format!("RSA-PSS:{}", k.bits()),
                Id::EC => {
                    let curve = k
                        .ec_key()
                        .ok()
                        .and_then(|e| e.group().curve_name())
                        .and_then(|n| n.short_name().ok())
                        .unwrap_or("?");
                    format!("EC:{curve}")
                }
                _ => openssl_name(k).unwrap_or_else(|| "unknown".into()),
            },
            CertKey::Oqs { alg, .. } => alg.liboqs.to_string(),
        }
    }

    /// An RSA key that can also decrypt (TLS 1.2 RSA key exchange): not an RSA-PSS key.
    pub fn is_rsa(&self) -> bool {
        matches!(self, CertKey::Openssl(k) if k.id() == Id::RSA)
    }

    /// SubjectPublicKeyInfo DER.
    pub fn spki(&self) -> Result<Vec<u8>> {
        Ok(match self {
            CertKey::Openssl(k) => k.public_key_to_der()?,
            CertKey::Oqs { alg, key } => der::spki(&der::oid(alg.oid)?, &key.public),
        })
    }

    /// The AlgorithmIdentifier DER of the signatures this key makes on certificates:
    /// sha256/384WithRSAEncryption (NULL parameters), ecdsa-with-SHA256/384/512 by curve,
    /// and for every other key its own public key's AlgorithmIdentifier (EdDSA, ML-DSA,
    /// SLH-DSA and the liboqs algorithms use one OID for key and signature).
    pub fn signature_algorithm(&self) -> Result<Vec<u8>> {
        match self {
            CertKey::Openssl(k) if k.id() == Id::RSA => {
                let oid = if k.bits() >= 7680 {
                    "1.2.840.113549.1.1.12"
                } else {
                    "1.2.840.113549.1.1.11"
                };
                algorithm_identifier(oid, true)
            }
            CertKey::Openssl(k) if k.id() == Id::RSA_PSS => {
                // id-RSASSA-PSS with its parameters: the hash, MGF1 with the same hash,
                // a salt of the hash's length (RFC 4055).
                let d = digest_for(k)?.expect("RSA-PSS signs with a digest");
                let hash_oid = if d.size() == 48 {
                    "2.16.840.1.101.3.4.2.2"
                } else {
                    "2.16.840.1.101.3.4.2.1"
                };
                let hash = algorithm_identifier(hash_oid, true)?;
                let mgf1 = der::sequence(&[&der::oid("1.2.840.113549.1.1.8")?, &hash]);
                let params = der::sequence(&[
                    &der::tlv(0xa0, &hash),
                    &der::tlv(0xa1, &mgf1),
                    &der::tlv(0xa2, &der::unsigned_integer(&[d.size() as u8])),
                ]);
                Ok(der::sequence(&[
                    &der::oid("1.2.840.113549.1.1.10")?,
                    &params,
                ]))
            }
            CertKey::Openssl(k) if k.id() == Id::EC => {
                let oid = match ec_digest(k)?.size() {
                    48 => "1.2.840.10045.4.3.3",
                    64 => "1.2.840.10045.4.3.4",
                    _ => "1.2.840.10045.4.3.2",
                };
                algorithm_identifier(oid, false)
            }
            _ => {
                let spki = self.spki()?;
                spki_algorithm(&spki)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| crate::err!(Library, "unreadable SubjectPublicKeyInfo"))
            }
        }
    }

    /// A signature over `message` as certificates carry it.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>> {
        match self {
            CertKey::Openssl(k) => {
                let mut s = match digest_for(k)? {
                    Some(d) => Signer::new(d, k)?,
                    None => Signer::new_without_digest(k)?,
                };
                if k.id() == Id::RSA_PSS {
                    s.set_rsa_padding(openssl::rsa::Padding::PKCS1_PSS)?;
                    s.set_rsa_pss_saltlen(openssl::sign::RsaPssSaltlen::DIGEST_LENGTH)?;
                }
                Ok(s.sign_oneshot_to_vec(message)?)
            }
            CertKey::Oqs { alg, key } => shared_sig(alg.liboqs).sign(key, message),
        }
    }

    /// The private key as PEM PKCS#8 (v2 with the public key for liboqs keys).
    pub fn private_key_pem(&self) -> Result<Vec<u8>> {
        match self {
            CertKey::Openssl(k) => Ok(k.private_key_to_pem_pkcs8()?),
            CertKey::Oqs { alg, key } => {
                let der = der::sequence(&[
                    &der::tlv(der::INTEGER, &[1]),
                    &der::sequence(&[&der::oid(alg.oid)?]),
                    &der::tlv(der::OCTET_STRING, &key.secret),
                    &der::tlv(0x81, &[&[0u8][..], &key.public].concat()),
                ]);
                Ok(pem("PRIVATE KEY", &der))
            }
        }
    }
}

fn openssl_name(k: &PKey<impl openssl::pkey::HasPublic>) -> Option<String> {
    extern "C" {
        fn EVP_PKEY_get0_type_name(key: *const openssl_sys::EVP_PKEY) -> *const libc::c_char;
    }
    use foreign_types::ForeignTypeRef;
    // SAFETY: a valid key; the returned name is a static string owned by its provider.
    let p = unsafe { EVP_PKEY_get0_type_name(k.as_ref().as_ptr()) };
    (!p.is_null()).then(|| {
        // SAFETY: non-null, NUL-terminated.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    })
}

fn ec_digest(k: &PKey<impl openssl::pkey::HasPublic>) -> Result<MessageDigest> {
    let bits = k.ec_key()?.group().degree();
    Ok(match bits {
        0..=256 => MessageDigest::sha256(),
        257..=384 => MessageDigest::sha384(),
        _ => MessageDigest::sha512(),
    })
}

/// The digest an OpenSSL key signs certificates with (None: the algorithm hashes inside).
fn digest_for(k: &PKey<impl openssl::pkey::HasPublic>) -> Result<Option<MessageDigest>> {
    Ok(match k.id() {
        Id::RSA | Id::RSA_PSS if k.bits() >= 7680 => Some(MessageDigest::sha384()),
        Id::RSA | Id::RSA_PSS => Some(MessageDigest::sha256()),
        Id::EC => Some(ec_digest(k)?),
        _ => None,
    })
}

/// The AlgorithmIdentifier element of a SubjectPublicKeyInfo.
pub fn spki_algorithm(spki: &[u8]) -> Option<&[u8]> {
    let (der::SEQUENCE, body, _) = der::read(spki)? else {
        return None;
    };
    der::first_element(body)
}

/// The public key bits (BIT STRING contents after the unused-bits byte) of an SPKI.
pub fn spki_key_bits(spki: &[u8]) -> Option<&[u8]> {
    let (der::SEQUENCE, body, _) = der::read(spki)? else {
        return None;
    };
    let (_, _, rest) = der::read(body)?;
    let (der::BIT_STRING, bits, _) = der::read(rest)? else {
        return None;
    };
    bits.split_first().map(|(_, k)| k)
}

/// Whether `signature` over `message` verifies under the key of `spki`, with the signature
/// algorithm `sig_alg` (an AlgorithmIdentifier): liboqs for the algorithms of `SIGS`,
/// OpenSSL for the rest. Err when neither has the algorithm.
pub fn verify(spki: &[u8], sig_alg: &[u8], message: &[u8], signature: &[u8]) -> Result<bool> {
    for alg in SIGS {
        if der::sequence(&[&der::oid(alg.oid)?]) == sig_alg {
            let public = spki_key_bits(spki)
                .ok_or_else(|| crate::err!(Check, "unreadable SubjectPublicKeyInfo"))?;
            let key = KeyPair {
                public: public.to_vec(),
                secret: Vec::new(),
            };
            let s = shared_sig(alg.liboqs);
            if key.public.len() != s.public_key_len() {
                return Ok(false);
            }
            return s.verify(&key, message, signature);
        }
    }
    let key: PKey<Public> = PKey::public_key_from_der(spki)?;
    let mut v = match digest_for(&key)? {
        Some(d) => Verifier::new(d, &key)?,
        None => Verifier::new_without_digest(&key)?,
    };
    if key.id() == Id::RSA_PSS {
        v.set_rsa_padding(openssl::rsa::Padding::PKCS1_PSS)?;
        v.set_rsa_pss_saltlen(openssl::sign::RsaPssSaltlen::DIGEST_LENGTH)?;
    }
    let ok = v.verify_oneshot(signature, message).unwrap_or(false);
    let _ = openssl::error::ErrorStack::get();
    Ok(ok)
}

/// PEM text of one DER object.
pub fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    let b64 = openssl::base64::encode_block(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out.into_bytes()
}

/// The DER of every PEM object labelled `label` in `text`, in order.
pub fn pem_all(text: &[u8], label: &str) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(text);
    let (begin, end) = (
        format!("-----BEGIN {label}-----"),
        format!("-----END {label}-----"),
    );
    let mut out = Vec::new();
    let mut rest = &text[..];
    while let Some(i) = rest.find(&begin) {
        let after = &rest[i + begin.len()..];
        let Some(j) = after.find(&end) else { break };
        let body: String = after[..j].split_whitespace().collect();
        if let Ok(der) = openssl::base64::decode_block(&body) {
            out.push(der);
        }
        rest = &after[j + end.len()..];
    }
    out
}

fn pem_body(text: &[u8], label: &str) -> Option<Vec<u8>> {
    pem_all(text, label).into_iter().next()
}

/// The parts of a PKCS#8 key: algorithm OID contents, privateKey contents, and the
/// publicKey [1] contents when present.
pub type Pkcs8Parts<'a> = (&'a [u8], &'a [u8], Option<&'a [u8]>);

pub fn pkcs8_parts(der: &[u8]) -> Option<Pkcs8Parts<'_>> {
    let (der::SEQUENCE, body, _) = der::read(der)? else {
        return None;
    };
    let (der::INTEGER, _version, rest) = der::read(body)? else {
        return None;
    };
    let (der::SEQUENCE, alg, rest) = der::read(rest)? else {
        return None;
    };
    let (der::OBJECT_IDENTIFIER, oid, _) = der::read(alg)? else {
        return None;
    };
    let (der::OCTET_STRING, private, mut rest) = der::read(rest)? else {
        return None;
    };
    let mut public = None;
    while let Some((tag, contents, more)) = der::read(rest) {
        if tag == 0x81 {
            // [1] IMPLICIT BIT STRING: the unused-bits byte first.
            public = contents.split_first().map(|(_, key)| key);
        }
        rest = more;
    }
    Some((oid, private, public))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkcs8_parts_reads_key_and_optional_public_key() {
        let oid = der::oid("1.3.9999.8.1.3").unwrap();
        let plain = der::pkcs8(&oid, b"secret");
        let (o, sk, pk) = pkcs8_parts(&plain).unwrap();
        assert_eq!((o, sk, pk), (&oid[2..], &b"secret"[..], None));
        // With a [1] public key appended (OneAsymmetricKey v2).
        let mut body = plain[2..].to_vec();
        body.extend_from_slice(&[0x81, 4, 0, b'p', b'u', b'b']);
        let mut v2 = vec![0x30, body.len() as u8];
        v2.extend(body);
        assert_eq!(pkcs8_parts(&v2).unwrap().2, Some(&b"pub"[..]));
        assert!(pkcs8_parts(b"\x30\x05garbage").is_none());
    }

    #[test]
    fn specs_go_to_openssl_when_it_has_the_key_and_to_liboqs_otherwise() {
        for (spec, openssl) in [
            ("RSA:2048", true),
            ("EC:P-384", true),
            ("ED25519", true),
            ("ML-DSA-44", true),
            ("MAYO-1", false),
            ("Falcon-512", false),
            ("cross-rsdp-128-balanced", false),
        ] {
            let k = KeySpec::parse(spec).unwrap();
            assert!(k.available(), "{spec}");
            assert_eq!(k.by_openssl(), openssl, "{spec}");
        }
        assert!(!KeySpec::parse("NOPE-1").unwrap().available());
        assert!(!KeySpec::parse("MAYO-1:x").unwrap().available());
    }

    #[test]
    fn every_key_kind_signs_verifies_and_reads_back_from_its_pem() {
        for spec in [
            "RSA:2048",
            "RSA-PSS",
            "EC:P-256",
            "EC:P-521",
            "ED25519",
            "ML-DSA-44",
            "MAYO-1",
        ] {
            let key = KeySpec::parse(spec).unwrap().generate().unwrap();
            let spki = key.spki().unwrap();
            let alg = key.signature_algorithm().unwrap();
            let sig = key.sign(b"to be signed").unwrap();
            assert!(
                verify(&spki, &alg, b"to be signed", &sig).unwrap(),
                "{spec}"
            );
            assert!(
                !verify(&spki, &alg, b"to be signeD", &sig).unwrap(),
                "{spec}"
            );
            let again = CertKey::from_pem(&key.private_key_pem().unwrap(), "--key").unwrap();
            assert_eq!(again.spki().unwrap(), spki, "{spec}");
            assert_eq!(again.algorithm(), key.algorithm());
        }
    }
}
