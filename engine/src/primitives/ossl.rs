//! OpenSSL 3.5 backend: every algorithm through the EVP_PKEY API by its provider name
//! (EVP_PKEY_CTX_new_from_name), as an application or libssl calls it. Each operation creates
//! its own EVP_PKEY_CTX / EVP_MD_CTX, as a TLS stack does per handshake; `openssl speed`
//! instead reuses one context, which makes it slightly faster for the quickest operations.

use super::backend::{cstr, Kem, KeyAgreement, KeySizes, Params, SigSizes, Signature};
use crate::out::{Error, Result};
use foreign_types::ForeignType;
use libc::{c_char, c_int, c_uchar, c_void, size_t};
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Padding;
use openssl::sign::{RsaPssSaltlen, Signer, Verifier};
use openssl_sys as ffi;
use serde_json::{json, Value};
use std::ffi::CString;
use std::ptr;

// Functions of libcrypto 3.x that openssl-sys does not declare.
extern "C" {
    fn EVP_PKEY_CTX_new_from_pkey(
        libctx: *mut ffi::OSSL_LIB_CTX,
        pkey: *mut ffi::EVP_PKEY,
        propq: *const c_char,
    ) -> *mut ffi::EVP_PKEY_CTX;
    fn EVP_PKEY_CTX_set_group_name(ctx: *mut ffi::EVP_PKEY_CTX, name: *const c_char) -> c_int;
    fn EVP_PKEY_CTX_set_dh_pad(ctx: *mut ffi::EVP_PKEY_CTX, pad: c_int) -> c_int;
    fn EVP_PKEY_paramgen_init(ctx: *mut ffi::EVP_PKEY_CTX) -> c_int;
    fn EVP_PKEY_paramgen(ctx: *mut ffi::EVP_PKEY_CTX, ppkey: *mut *mut ffi::EVP_PKEY) -> c_int;
    fn EVP_PKEY_get1_encoded_public_key(
        pkey: *mut ffi::EVP_PKEY,
        ppub: *mut *mut c_uchar,
    ) -> size_t;
    fn EVP_PKEY_set1_encoded_public_key(
        pkey: *mut ffi::EVP_PKEY,
        pubkey: *const c_uchar,
        publen: size_t,
    ) -> c_int;
    fn EVP_PKEY_CTX_set_rsa_keygen_bits(ctx: *mut ffi::EVP_PKEY_CTX, bits: c_int) -> c_int;
    fn CRYPTO_free(p: *mut libc::c_void, file: *const c_char, line: c_int);
}

/// The current OpenSSL error queue as one line, prefixed with what failed.
fn ossl_error(what: &str) -> Error {
    let stack = openssl::error::ErrorStack::get();
    if stack.errors().is_empty() {
        Error::Library(format!("OpenSSL: {what} failed"))
    } else {
        Error::Library(format!("OpenSSL: {what} failed: {stack}"))
    }
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Usage(format!("name {s:?} contains a NUL byte")))
}

/// An owned EVP_PKEY_CTX.
struct Ctx(*mut ffi::EVP_PKEY_CTX);
impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: we own the context.
        unsafe { ffi::EVP_PKEY_CTX_free(self.0) }
    }
}

/// How to generate a key: the provider's algorithm name plus the group or size parameter.
#[derive(Clone, Debug)]
struct KeySpec {
    name: CString,
    display: String,
    group: Option<CString>,
    rsa_bits: Option<u32>,
}

impl KeySpec {
    fn new(name: &str, group: Option<&str>, rsa_bits: Option<u32>) -> Result<Self> {
        let spec = KeySpec {
            name: cstring(name)?,
            display: name.to_string(),
            group: group.map(cstring).transpose()?,
            rsa_bits,
        };
        // Fail now, with a clear message, if this OpenSSL lacks the algorithm.
        let ctx = spec.ctx()?;
        drop(ctx);
        Ok(spec)
    }

    fn ctx(&self) -> Result<Ctx> {
        // SAFETY: NUL-terminated name; NULL library context and property query = defaults.
        let p = unsafe {
            ffi::EVP_PKEY_CTX_new_from_name(ptr::null_mut(), self.name.as_ptr(), ptr::null())
        };
        if p.is_null() {
            let _ = openssl::error::ErrorStack::get(); // clear the queue
            crate::bail!(
                Usage,
                "OpenSSL {} has no algorithm named {:?} (EVP_PKEY_CTX_new_from_name failed)",
                openssl::version::version(),
                self.display
            );
        }
        Ok(Ctx(p))
    }

    fn set_params(&self, ctx: &Ctx) -> Result<()> {
        if let Some(g) = &self.group {
            // SAFETY: valid context and NUL-terminated group name.
            if unsafe { EVP_PKEY_CTX_set_group_name(ctx.0, g.as_ptr()) } <= 0 {
                return Err(ossl_error(&format!(
                    "setting group {:?} on {}",
                    g.to_string_lossy(),
                    self.display
                )));
            }
        }
        if let Some(bits) = self.rsa_bits {
            // SAFETY: valid keygen context.
            if unsafe { EVP_PKEY_CTX_set_rsa_keygen_bits(ctx.0, bits as c_int) } <= 0 {
                return Err(ossl_error(&format!("setting RSA modulus to {bits} bits")));
            }
        }
        Ok(())
    }

    /// A fresh key pair (EVP_PKEY_keygen_init + parameters + EVP_PKEY_generate).
    fn generate(&self) -> Result<PKey<Private>> {
        let ctx = self.ctx()?;
        // SAFETY: valid context; the generated key is owned by the PKey we wrap it in.
        unsafe {
            if ffi::EVP_PKEY_keygen_init(ctx.0) <= 0 {
                return Err(ossl_error(&format!("{} keygen_init", self.display)));
            }
            self.set_params(&ctx)?;
            let mut key = ptr::null_mut();
            if ffi::EVP_PKEY_generate(ctx.0, &mut key) <= 0 || key.is_null() {
                return Err(ossl_error(&format!("{} key generation", self.display)));
            }
            Ok(PKey::from_ptr(key))
        }
    }

    /// A parameter-only key of the group (what libssl builds for a peer's key share).
    fn param_key(&self) -> Result<PKey<Private>> {
        let ctx = self.ctx()?;
        // SAFETY: as in generate().
        unsafe {
            if EVP_PKEY_paramgen_init(ctx.0) <= 0 {
                return Err(ossl_error(&format!("{} paramgen_init", self.display)));
            }
            self.set_params(&ctx)?;
            let mut key = ptr::null_mut();
            if EVP_PKEY_paramgen(ctx.0, &mut key) <= 0 || key.is_null() {
                return Err(ossl_error(&format!(
                    "{} parameter generation",
                    self.display
                )));
            }
            Ok(PKey::from_ptr(key))
        }
    }
}

fn encoded_public(key: &PKey<Private>) -> Result<Vec<u8>> {
    let mut p: *mut c_uchar = ptr::null_mut();
    // SAFETY: the key is valid; on success p points to len bytes we must free.
    let len = unsafe { EVP_PKEY_get1_encoded_public_key(key.as_ptr(), &mut p) };
    if len == 0 || p.is_null() {
        return Err(ossl_error("EVP_PKEY_get1_encoded_public_key"));
    }
    let v = unsafe { std::slice::from_raw_parts(p, len) }.to_vec();
    unsafe { CRYPTO_free(p.cast(), c"pqlab".as_ptr(), 0) };
    Ok(v)
}

fn raw_private_len(key: &PKey<Private>) -> Option<usize> {
    let mut len: size_t = 0;
    // SAFETY: NULL buffer asks for the length only.
    let ok = unsafe { ffi::EVP_PKEY_get_raw_private_key(key.as_ptr(), ptr::null_mut(), &mut len) };
    if ok == 1 {
        Some(len)
    } else {
        let _ = openssl::error::ErrorStack::get();
        None
    }
}

fn bn_param_len(key: &PKey<Private>, name: &std::ffi::CStr) -> Option<usize> {
    let mut bn: *mut ffi::BIGNUM = ptr::null_mut();
    // SAFETY: on success bn is a new BIGNUM we free.
    if unsafe { ffi::EVP_PKEY_get_bn_param(key.as_ptr(), name.as_ptr(), &mut bn) } != 1 {
        let _ = openssl::error::ErrorStack::get();
        return None;
    }
    let bits = unsafe { ffi::BN_num_bits(bn) };
    unsafe { ffi::BN_free(bn) };
    Some((bits as usize).div_ceil(8))
}

fn der_sizes(key: &PKey<Private>) -> (Option<usize>, Option<usize>) {
    let spki = key.public_key_to_der().ok().map(|v| v.len());
    let pkcs8 = key.private_key_to_pkcs8().ok().map(|v| v.len());
    let _ = openssl::error::ErrorStack::get();
    (spki, pkcs8)
}

fn reject_params(p: &Params, allowed: &[&str], what: &str) -> Result<()> {
    for k in p.keys() {
        if !allowed.contains(&k.as_str()) {
            if allowed.is_empty() {
                crate::bail!(Usage, "--param {k}: {what} takes no parameters");
            }
            crate::bail!(
                Usage,
                "--param {k}: not a parameter of {what}; accepted: {}",
                allowed.join(", ")
            );
        }
    }
    Ok(())
}

/// The group for EC/DH: `group=` or its synonym `curve=`.
fn group_param(p: &Params, what: &str) -> Result<String> {
    match (p.get("group"), p.get("curve")) {
        (Some(g), None) | (None, Some(g)) => Ok(g.clone()),
        (Some(_), Some(_)) => crate::bail!(Usage, "{what}: give group= or curve=, not both"),
        (None, None) => crate::bail!(
            Usage,
            "{what} needs --param group=NAME (EC: P-256, P-384, P-521; DH: ffdhe2048, ffdhe3072, ffdhe4096)"
        ),
    }
}

/// Key-agreement algorithm names (EVP keymgmt names); everything else is tried as a KEM.
pub const KEY_AGREEMENTS: [&str; 4] = ["X25519", "X448", "EC", "DH"];

pub fn is_key_agreement(name: &str) -> bool {
    KEY_AGREEMENTS.iter().any(|n| n.eq_ignore_ascii_case(name))
}

// ---------------------------------------------------------------------------------------
// KEM

pub struct OsslKem {
    spec: KeySpec,
    ct_len: usize,
    ss_len: usize,
}

impl OsslKem {
    pub fn new(name: &str, params: &Params) -> Result<Self> {
        reject_params(params, &[], name)?;
        let spec = KeySpec::new(name, None, None)?;
        let mut kem = OsslKem {
            spec,
            ct_len: 0,
            ss_len: 0,
        };
        // Find the output lengths once, and check the algorithm is a KEM at all.
        let key = kem.spec.generate()?;
        let ctx = kem.encaps_ctx(&key).map_err(|_| {
            Error::Usage(format!(
                "{name} is not a KEM in OpenSSL (EVP_PKEY_encapsulate_init failed); key agreements are {}",
                KEY_AGREEMENTS.join(", ")
            ))
        })?;
        let (mut ct, mut ss) = (0usize, 0usize);
        // SAFETY: NULL outputs query the lengths.
        if unsafe {
            ffi::EVP_PKEY_encapsulate(ctx.0, ptr::null_mut(), &mut ct, ptr::null_mut(), &mut ss)
        } <= 0
        {
            return Err(ossl_error(&format!("{name} encapsulate (length query)")));
        }
        kem.ct_len = ct;
        kem.ss_len = ss;
        Ok(kem)
    }

    fn encaps_ctx(&self, key: &PKey<Private>) -> Result<Ctx> {
        // SAFETY: valid key; the new context holds its own reference.
        let p = unsafe { EVP_PKEY_CTX_new_from_pkey(ptr::null_mut(), key.as_ptr(), ptr::null()) };
        if p.is_null() {
            return Err(ossl_error("EVP_PKEY_CTX_new_from_pkey"));
        }
        let ctx = Ctx(p);
        if unsafe { ffi::EVP_PKEY_encapsulate_init(ctx.0, ptr::null()) } <= 0 {
            return Err(ossl_error("EVP_PKEY_encapsulate_init"));
        }
        Ok(ctx)
    }
}

impl Kem for OsslKem {
    type Key = PKey<Private>;

    fn keygen(&self) -> Result<Self::Key> {
        self.spec.generate()
    }

    fn encaps(&self, key: &Self::Key) -> Result<(Vec<u8>, Vec<u8>)> {
        let ctx = self.encaps_ctx(key)?;
        let mut ct = vec![0u8; self.ct_len];
        let mut ss = vec![0u8; self.ss_len];
        let (mut ct_len, mut ss_len) = (ct.len(), ss.len());
        // SAFETY: buffers of the lengths OpenSSL asked for.
        if unsafe {
            ffi::EVP_PKEY_encapsulate(
                ctx.0,
                ct.as_mut_ptr(),
                &mut ct_len,
                ss.as_mut_ptr(),
                &mut ss_len,
            )
        } <= 0
        {
            return Err(ossl_error("EVP_PKEY_encapsulate"));
        }
        ct.truncate(ct_len);
        ss.truncate(ss_len);
        Ok((ct, ss))
    }

    fn decaps(&self, key: &Self::Key, ciphertext: &[u8]) -> Result<Vec<u8>> {
        // SAFETY: as in encaps.
        let p = unsafe { EVP_PKEY_CTX_new_from_pkey(ptr::null_mut(), key.as_ptr(), ptr::null()) };
        if p.is_null() {
            return Err(ossl_error("EVP_PKEY_CTX_new_from_pkey"));
        }
        let ctx = Ctx(p);
        let mut ss = vec![0u8; self.ss_len];
        let mut ss_len = ss.len();
        unsafe {
            if ffi::EVP_PKEY_decapsulate_init(ctx.0, ptr::null()) <= 0 {
                return Err(ossl_error("EVP_PKEY_decapsulate_init"));
            }
            if ffi::EVP_PKEY_decapsulate(
                ctx.0,
                ss.as_mut_ptr(),
                &mut ss_len,
                ciphertext.as_ptr(),
                ciphertext.len(),
            ) <= 0
            {
                return Err(ossl_error("EVP_PKEY_decapsulate"));
            }
        }
        ss.truncate(ss_len);
        Ok(ss)
    }

    fn key_sizes(&self, key: &Self::Key) -> Result<KeySizes> {
        let (spki, pkcs8) = der_sizes(key);
        Ok(KeySizes {
            public_key: Some(encoded_public(key)?.len()),
            secret_key: raw_private_len(key),
            public_key_der: spki,
            secret_key_der: pkcs8,
        })
    }

    fn notes(&self) -> Value {
        json!({
            "public_key": "the encoded public key (EVP_PKEY_get1_encoded_public_key), as sent in a TLS key share",
            "public_key_der": "DER SubjectPublicKeyInfo from i2d_PUBKEY; empty where OpenSSL has no encoder (hybrid groups have no OID)",
            "secret_key_der": "DER PKCS#8 from OpenSSL's default encoder; empty where OpenSSL has none",
        })
    }
}

// ---------------------------------------------------------------------------------------
// Key agreement

pub struct OsslKex {
    spec: KeySpec,
}

impl OsslKex {
    pub fn new(name: &str, params: &Params) -> Result<Self> {
        let upper = name.to_ascii_uppercase();
        let group = match upper.as_str() {
            "EC" | "DH" => {
                reject_params(params, &["group", "curve"], name)?;
                Some(group_param(params, name)?)
            }
            _ => {
                reject_params(params, &[], name)?;
                None
            }
        };
        let spec = KeySpec::new(name, group.as_deref(), None)?;
        let kex = OsslKex { spec };
        kex.spec.generate()?; // a bad group name fails here, before any timing
        Ok(kex)
    }
}

impl KeyAgreement for OsslKex {
    type Key = PKey<Private>;
    type Peer = PKey<Private>; // holds only the public value (and the group parameters)

    fn keygen(&self) -> Result<Self::Key> {
        self.spec.generate()
    }

    fn public_key(&self, key: &Self::Key) -> Result<Self::Peer> {
        let wire = encoded_public(key)?;
        let peer = self.spec.param_key()?;
        // SAFETY: valid key and buffer.
        if unsafe { EVP_PKEY_set1_encoded_public_key(peer.as_ptr(), wire.as_ptr(), wire.len()) }
            != 1
        {
            return Err(ossl_error("EVP_PKEY_set1_encoded_public_key"));
        }
        Ok(peer)
    }

    fn wire_public(&self, key: &Self::Key) -> Result<Vec<u8>> {
        encoded_public(key)
    }

    fn peer_wire(&self, peer: &Self::Peer) -> Result<Vec<u8>> {
        encoded_public(peer)
    }

    fn derive(&self, key: &Self::Key, peer: &Self::Peer) -> Result<Vec<u8>> {
        let mut ctx =
            openssl::pkey_ctx::PkeyCtx::new(key).map_err(|_| ossl_error("EVP_PKEY_CTX_new"))?;
        ctx.derive_init()
            .map_err(|_| ossl_error("EVP_PKEY_derive_init"))?;
        // EVP_PKEY_derive_set_peer validates the peer's public value, as libssl does.
        ctx.derive_set_peer(peer)
            .map_err(|_| ossl_error("EVP_PKEY_derive_set_peer"))?;
        if key.id() == openssl::pkey::Id::DH {
            // A finite-field DH secret is padded to the length of p, as TLS uses it (RFC 8446
            // section 7.4.1); unpadded, one derive in 256 loses a leading zero byte.
            // SAFETY: ctx is a live EVP_PKEY_CTX initialised for derive.
            if unsafe { EVP_PKEY_CTX_set_dh_pad(ctx.as_ptr(), 1) } <= 0 {
                return Err(ossl_error("EVP_PKEY_CTX_set_dh_pad"));
            }
        }
        let mut out = Vec::new();
        ctx.derive_to_vec(&mut out)
            .map_err(|_| ossl_error("EVP_PKEY_derive"))?;
        Ok(out)
    }

    fn key_sizes(&self, key: &Self::Key) -> Result<KeySizes> {
        let (spki, pkcs8) = der_sizes(key);
        let upper = self.spec.display.to_ascii_uppercase();
        let secret = match upper.as_str() {
            // SEC 1 fixed-length private scalar: the group order's byte length.
            "EC" => Some((key.bits() as usize).div_ceil(8)),
            // FFDHE private exponents are short (OpenSSL picks 2x the security strength) and vary.
            "DH" => bn_param_len(key, c"priv"),
            _ => raw_private_len(key),
        };
        Ok(KeySizes {
            public_key: Some(encoded_public(key)?.len()),
            secret_key: secret,
            public_key_der: spki,
            secret_key_der: pkcs8,
        })
    }

    fn notes(&self) -> Value {
        json!({
            "public_key": "the TLS key share: raw X25519/X448 key, uncompressed SEC 1 EC point, or the DH public value padded to the prime's length",
            "ciphertext": "for a key agreement, the peer's key share (same size as the public key), as in the documents' table 1",
            "secret_key": "X25519/X448: raw key; EC: length of the private scalar; DH: bytes of the private exponent (varies)",
        })
    }
}

// ---------------------------------------------------------------------------------------
// Signatures

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SigFamily {
    Rsa {
        pss: bool,
    },
    Ecdsa,
    /// Ed25519, Ed448, ML-DSA, SLH-DSA: one-shot signing of the message itself, no digest.
    Pure,
}

pub struct OsslSig {
    spec: KeySpec,
    family: SigFamily,
    digest: Option<MessageDigest>,
    digest_name: Option<String>,
    /// ECDSA: byte length of r and s (the group order's length).
    scalar_len: usize,
}

impl OsslSig {
    pub fn new(name: &str, params: &Params) -> Result<Self> {
        let upper = name.to_ascii_uppercase();
        let (family, group, bits) = match upper.as_str() {
            "RSA" => {
                reject_params(params, &["bits", "padding", "digest"], name)?;
                let bits: u32 = params
                    .get("bits")
                    .ok_or_else(|| Error::Usage("RSA needs --param bits=2048|3072|4096".into()))?
                    .parse()
                    .map_err(|_| {
                        Error::Usage(format!("--param bits={:?} is not a number", params["bits"]))
                    })?;
                if !(1024..=16384).contains(&bits) {
                    crate::bail!(
                        Usage,
                        "--param bits={bits}: RSA modulus must be 1024..16384 bits"
                    );
                }
                let pss = match params
                    .get("padding")
                    .map(|s| s.to_ascii_lowercase())
                    .as_deref()
                {
                    Some("pss") => true,
                    Some("pkcs1") | Some("pkcs1v15") => false,
                    Some(other) => {
                        crate::bail!(Usage, "--param padding={other:?}: accepted pss, pkcs1")
                    }
                    None => crate::bail!(Usage, "RSA needs --param padding=pss|pkcs1"),
                };
                (SigFamily::Rsa { pss }, None, Some(bits))
            }
            "EC" => {
                reject_params(params, &["curve", "group", "digest"], name)?;
                (SigFamily::Ecdsa, Some(group_param(params, name)?), None)
            }
            _ => {
                reject_params(params, &[], name)?;
                (SigFamily::Pure, None, None)
            }
        };
        let spec = KeySpec::new(name, group.as_deref(), bits)?;
        let digest_name = match family {
            SigFamily::Pure => None,
            SigFamily::Ecdsa => Some(params.get("digest").cloned().unwrap_or_else(|| {
                // The TLS 1.3 pairing (ecdsa_secp384r1_sha384, ...), if the catalogue gives none.
                match group.as_deref().map(|g| g.to_ascii_uppercase()).as_deref() {
                    Some("P-384") | Some("SECP384R1") => "SHA384".into(),
                    Some("P-521") | Some("SECP521R1") => "SHA512".into(),
                    _ => "SHA256".into(),
                }
            })),
            SigFamily::Rsa { .. } => Some(
                params
                    .get("digest")
                    .cloned()
                    .unwrap_or_else(|| "SHA256".into()),
            ),
        };
        let digest = match &digest_name {
            Some(d) => Some(MessageDigest::from_name(d).ok_or_else(|| {
                Error::Usage(format!("--param digest={d:?}: OpenSSL has no such digest (e.g. SHA256, SHA384, SHA512)"))
            })?),
            None => None,
        };
        let key = spec.generate()?;
        let scalar_len = (key.bits() as usize).div_ceil(8);
        let sig = OsslSig {
            spec,
            family,
            digest,
            digest_name,
            scalar_len,
        };
        // Fail early if OpenSSL cannot sign with this key type at all.
        sig.sign(&key, b"pqlab")
            .map_err(|e| Error::Usage(format!("{name} cannot sign in OpenSSL: {e}")))?;
        Ok(sig)
    }
}

impl Signature for OsslSig {
    type Key = PKey<Private>;

    fn keygen(&self) -> Result<Self::Key> {
        self.spec.generate()
    }

    fn sign(&self, key: &Self::Key, message: &[u8]) -> Result<Vec<u8>> {
        let mut signer = match self.digest {
            Some(md) => Signer::new(md, key),
            None => Signer::new_without_digest(key),
        }
        .map_err(|_| ossl_error("EVP_DigestSignInit"))?;
        if let SigFamily::Rsa { pss } = self.family {
            if pss {
                signer
                    .set_rsa_padding(Padding::PKCS1_PSS)
                    .map_err(|_| ossl_error("RSA PSS padding"))?;
                // TLS 1.3 rsa_pss_rsae_*: salt length = digest length, MGF1 with the same hash.
                signer
                    .set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH)
                    .map_err(|_| ossl_error("PSS salt length"))?;
            } else {
                signer
                    .set_rsa_padding(Padding::PKCS1)
                    .map_err(|_| ossl_error("RSA PKCS#1 padding"))?;
            }
        }
        signer
            .sign_oneshot_to_vec(message)
            .map_err(|_| ossl_error("EVP_DigestSign"))
    }

    fn verify(&self, key: &Self::Key, message: &[u8], signature: &[u8]) -> Result<bool> {
        let mut verifier = match self.digest {
            Some(md) => Verifier::new(md, key),
            None => Verifier::new_without_digest(key),
        }
        .map_err(|_| ossl_error("EVP_DigestVerifyInit"))?;
        if let SigFamily::Rsa { pss } = self.family {
            if pss {
                verifier
                    .set_rsa_padding(Padding::PKCS1_PSS)
                    .map_err(|_| ossl_error("RSA PSS padding"))?;
                verifier
                    .set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH)
                    .map_err(|_| ossl_error("PSS salt length"))?;
            } else {
                verifier
                    .set_rsa_padding(Padding::PKCS1)
                    .map_err(|_| ossl_error("RSA PKCS#1 padding"))?;
            }
        }
        // EVP_DigestVerify returns 0 for a bad signature and leaves an error on the queue; a
        // malformed one (bad DER) gives an error too: both mean "does not verify".
        let ok = verifier.verify_oneshot(signature, message).unwrap_or(false);
        let _ = openssl::error::ErrorStack::get();
        Ok(ok)
    }

    fn key_sizes(&self, key: &Self::Key) -> Result<KeySizes> {
        let (spki, pkcs8) = der_sizes(key);
        let (public, secret) = match self.family {
            // The modulus; RSA has no raw private-key format (see secret_key_der).
            SigFamily::Rsa { .. } => (Some(key.size()), None),
            SigFamily::Ecdsa => (Some(encoded_public(key)?.len()), Some(self.scalar_len)),
            SigFamily::Pure => (
                Some(
                    key.raw_public_key()
                        .map_err(|_| ossl_error("raw public key"))?
                        .len(),
                ),
                raw_private_len(key),
            ),
        };
        Ok(KeySizes {
            public_key: public,
            secret_key: secret,
            public_key_der: spki,
            secret_key_der: pkcs8,
        })
    }

    fn signature_sizes(&self, signature: &[u8]) -> Result<SigSizes> {
        let raw = match self.family {
            SigFamily::Ecdsa => 2 * self.scalar_len, // r || s, fixed length (IEEE P1363)
            _ => signature.len(),
        };
        Ok(SigSizes {
            raw,
            encoded: signature.len(),
        })
    }

    fn notes(&self) -> Value {
        let mut n = json!({
            "public_key": "RSA: modulus length; ECDSA: uncompressed SEC 1 point; others: the raw public key",
            "secret_key": "RSA: none (no raw format, see secret_key_der); ECDSA: private scalar length; others: raw private key as OpenSSL exports it",
            "signature": "ECDSA: r||s (fixed); signature_der: the DER form TLS and X.509 carry (varies)",
        });
        if let Some(d) = &self.digest_name {
            n["digest"] = json!(d);
        }
        n
    }
}

// ---------------------------------------------------------------------------------------
// The algorithms of the loaded providers (`info.openssl`), so the catalogue can be checked
// against the library itself. These OpenSSL 3 functions are not bound by openssl-sys.

type MethodFn = unsafe extern "C" fn(*mut c_void, *mut c_void);
type NameFn = unsafe extern "C" fn(*const c_char, *mut c_void);

extern "C" {
    fn EVP_KEM_do_all_provided(libctx: *mut c_void, f: MethodFn, arg: *mut c_void);
    fn EVP_KEM_names_do_all(m: *const c_void, f: NameFn, arg: *mut c_void) -> c_int;
    fn EVP_KEM_get0_name(m: *const c_void) -> *const c_char;
    fn EVP_KEM_get0_provider(m: *const c_void) -> *const c_void;
    fn EVP_SIGNATURE_do_all_provided(libctx: *mut c_void, f: MethodFn, arg: *mut c_void);
    fn EVP_SIGNATURE_names_do_all(m: *const c_void, f: NameFn, arg: *mut c_void) -> c_int;
    fn EVP_SIGNATURE_get0_name(m: *const c_void) -> *const c_char;
    fn EVP_SIGNATURE_get0_provider(m: *const c_void) -> *const c_void;
    fn EVP_KEYMGMT_do_all_provided(libctx: *mut c_void, f: MethodFn, arg: *mut c_void);
    fn EVP_KEYMGMT_names_do_all(m: *const c_void, f: NameFn, arg: *mut c_void) -> c_int;
    fn EVP_KEYMGMT_get0_name(m: *const c_void) -> *const c_char;
    fn EVP_KEYMGMT_get0_provider(m: *const c_void) -> *const c_void;
    fn OSSL_PROVIDER_get0_name(p: *const c_void) -> *const c_char;
}

/// One provided method (KEM, signature or key manager): its name, every alias, its provider.
struct Method {
    name: String,
    names: Vec<String>,
    provider: String,
}

unsafe extern "C" fn collect_name(name: *const c_char, arg: *mut c_void) {
    let names = &mut *(arg as *mut Vec<String>);
    names.push(cstr(name));
}

macro_rules! method_collector {
    ($fn_name:ident, $names:ident, $get_name:ident, $provider:ident) => {
        unsafe extern "C" fn $fn_name(m: *mut c_void, arg: *mut c_void) {
            let out = &mut *(arg as *mut Vec<Method>);
            let mut names: Vec<String> = Vec::new();
            $names(
                m,
                collect_name,
                &mut names as *mut Vec<String> as *mut c_void,
            );
            names.sort();
            out.push(Method {
                name: cstr($get_name(m)),
                names,
                provider: cstr(OSSL_PROVIDER_get0_name($provider(m))),
            });
        }
    };
}
method_collector!(
    collect_kem,
    EVP_KEM_names_do_all,
    EVP_KEM_get0_name,
    EVP_KEM_get0_provider
);
method_collector!(
    collect_signature,
    EVP_SIGNATURE_names_do_all,
    EVP_SIGNATURE_get0_name,
    EVP_SIGNATURE_get0_provider
);
method_collector!(
    collect_keymgmt,
    EVP_KEYMGMT_names_do_all,
    EVP_KEYMGMT_get0_name,
    EVP_KEYMGMT_get0_provider
);

fn methods_json(mut methods: Vec<Method>) -> Vec<Value> {
    methods.sort_by(|a, b| a.name.cmp(&b.name));
    methods
        .into_iter()
        .map(|m| json!({"name": m.name, "names": m.names, "provider": m.provider}))
        .collect()
}

/// The KEMs, signatures and key managers of OpenSSL's loaded providers, with every alias
/// and the provider of each.
pub fn provided() -> Value {
    let mut kems: Vec<Method> = Vec::new();
    let mut sigs: Vec<Method> = Vec::new();
    let mut keymgmt: Vec<Method> = Vec::new();
    unsafe {
        let null = std::ptr::null_mut();
        EVP_KEM_do_all_provided(
            null,
            collect_kem,
            &mut kems as *mut Vec<Method> as *mut c_void,
        );
        EVP_SIGNATURE_do_all_provided(
            null,
            collect_signature,
            &mut sigs as *mut Vec<Method> as *mut c_void,
        );
        EVP_KEYMGMT_do_all_provided(
            null,
            collect_keymgmt,
            &mut keymgmt as *mut Vec<Method> as *mut c_void,
        );
    }
    json!({
        "kems": methods_json(kems),
        "signatures": methods_json(sigs),
        "keymgmt": methods_json(keymgmt),
    })
}
