//! liboqs backend (the vendored liboqs 0.13.0 in oqs-sys): OQS_KEM_* and OQS_SIG_* on byte
//! buffers, the library's own API. liboqs has no encodings; with the catalogue's OID
//! (`--oid`) the engine builds the SubjectPublicKeyInfo and PKCS#8 structures oqs-provider
//! uses (AlgorithmIdentifier = OID without parameters, BIT STRING / OCTET STRING of the raw
//! key), so their sizes are computed, not taken from a library.

use super::backend::{cstr, Kem, KeySizes, Params, SigSizes, Signature};
use super::der;
use crate::out::{Error, Result};
use oqs_sys::{common::OQS_STATUS, kem, sig};
use serde_json::{json, Value};
use std::ffi::CString;

fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: OQS_init only sets up CPU feature detection; called once.
    ONCE.call_once(|| unsafe { oqs_sys::common::OQS_init() });
}

pub fn liboqs_version() -> String {
    // SAFETY: OQS_version returns a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(oqs_sys::common::OQS_version()) }
        .to_string_lossy()
        .into_owned()
}

/// liboqs's enabled algorithms (`info.liboqs`) with the sizes and NIST level liboqs reports for each.
pub fn algorithms() -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    use oqs_sys::{kem, sig};
    let mut kems = Vec::new();
    let mut sigs = Vec::new();
    unsafe {
        for i in 0..kem::OQS_KEM_alg_count() {
            let name = kem::OQS_KEM_alg_identifier(i as usize);
            if kem::OQS_KEM_alg_is_enabled(name) != 1 {
                continue;
            }
            let k = kem::OQS_KEM_new(name);
            if k.is_null() {
                continue;
            }
            let r = &*k;
            kems.push(json!({
                "name": cstr(name),
                "nist_level": r.claimed_nist_level,
                "ind_cca": r.ind_cca,
                "public_key": r.length_public_key,
                "secret_key": r.length_secret_key,
                "ciphertext": r.length_ciphertext,
                "shared_secret": r.length_shared_secret,
            }));
            kem::OQS_KEM_free(k);
        }
        for i in 0..sig::OQS_SIG_alg_count() {
            let name = sig::OQS_SIG_alg_identifier(i as usize);
            if sig::OQS_SIG_alg_is_enabled(name) != 1 {
                continue;
            }
            let s = sig::OQS_SIG_new(name);
            if s.is_null() {
                continue;
            }
            let r = &*s;
            sigs.push(json!({
                "name": cstr(name),
                "nist_level": r.claimed_nist_level,
                "euf_cma": r.euf_cma,
                "public_key": r.length_public_key,
                "secret_key": r.length_secret_key,
                "signature": r.length_signature,
            }));
            sig::OQS_SIG_free(s);
        }
    }
    (kems, sigs)
}

fn no_params(params: &Params, name: &str) -> Result<()> {
    if let Some(k) = params.keys().next() {
        crate::bail!(
            Usage,
            "--param {k}: liboqs algorithm {name} takes no parameters"
        );
    }
    Ok(())
}

fn oid_der(oid: Option<&str>) -> Result<Option<Vec<u8>>> {
    oid.map(der::oid).transpose()
}

fn encoded_sizes(oid: &Option<Vec<u8>>, pk: &[u8], sk: &[u8]) -> (Option<usize>, Option<usize>) {
    match oid {
        Some(o) => (Some(der::spki(o, pk).len()), Some(der::pkcs8(o, sk).len())),
        None => (None, None),
    }
}

fn encoding_notes(oid: &Option<Vec<u8>>) -> Value {
    if oid.is_some() {
        json!({
            "public_key_der": "computed: SubjectPublicKeyInfo with the catalogue's OID (no parameters) and a BIT STRING of the raw public key, as oqs-provider encodes it",
            "secret_key_der": "computed: PKCS#8 with the catalogue's OID and an OCTET STRING of the raw secret key; oqs-provider may append the public key, so treat this as a lower bound",
        })
    } else {
        json!({
            "public_key_der": "none: liboqs has no encoder and the catalogue gives no OID for this algorithm",
            "secret_key_der": "none: liboqs has no encoder and the catalogue gives no OID for this algorithm",
        })
    }
}

pub struct OqsKem {
    ptr: *mut kem::OQS_KEM,
    oid: Option<Vec<u8>>,
}

impl Drop for OqsKem {
    fn drop(&mut self) {
        // SAFETY: we own the object.
        unsafe { kem::OQS_KEM_free(self.ptr) }
    }
}

fn unknown(kind: &str, name: &str, list: Vec<String>) -> Error {
    Error::Usage(format!(
        "liboqs {} has no enabled {kind} named {name:?}; enabled: {}",
        liboqs_version(),
        list.join(", ")
    ))
}

impl OqsKem {
    pub fn new(name: &str, params: &Params, oid: Option<&str>) -> Result<Self> {
        init();
        no_params(params, name)?;
        let c = CString::new(name).map_err(|_| Error::Usage("NUL in name".into()))?;
        // SAFETY: NUL-terminated name; NULL means unknown or disabled.
        let ptr = unsafe { kem::OQS_KEM_new(c.as_ptr()) };
        if ptr.is_null() {
            let (kems, _) = algorithms();
            let names = kems
                .iter()
                .filter_map(|k| k["name"].as_str().map(String::from))
                .collect();
            return Err(unknown("KEM", name, names));
        }
        Ok(OqsKem {
            ptr,
            oid: oid_der(oid)?,
        })
    }

    fn r(&self) -> &kem::OQS_KEM {
        // SAFETY: non-null, owned, immutable after creation.
        unsafe { &*self.ptr }
    }

    /// The encapsulation key's length in bytes.
    pub fn public_key_len(&self) -> usize {
        self.r().length_public_key
    }

    pub fn ciphertext_len(&self) -> usize {
        self.r().length_ciphertext
    }
}

fn status(s: OQS_STATUS, what: &str) -> Result<()> {
    if s == OQS_STATUS::OQS_SUCCESS {
        Ok(())
    } else {
        crate::bail!(Library, "liboqs: {what} failed ({s:?})")
    }
}

pub struct KeyPair {
    pub public: Vec<u8>,
    pub secret: Vec<u8>,
}

impl KeyPair {
    /// Zeroed buffers of liboqs's declared lengths (allocated outside any timed region).
    fn zeroed(public_len: usize, secret_len: usize) -> KeyPair {
        KeyPair {
            public: vec![0u8; public_len],
            secret: vec![0u8; secret_len],
        }
    }

    /// Run a liboqs keypair function into these buffers after checking their lengths.
    fn fill(
        &mut self,
        public_len: usize,
        secret_len: usize,
        what: &str,
        keypair: impl FnOnce(*mut u8, *mut u8) -> oqs_sys::common::OQS_STATUS,
    ) -> Result<()> {
        if self.public.len() != public_len || self.secret.len() != secret_len {
            return Err(crate::err!(Library, "liboqs key buffer of the wrong size"));
        }
        status(
            keypair(self.public.as_mut_ptr(), self.secret.as_mut_ptr()),
            what,
        )
    }
}

impl Kem for OqsKem {
    type Key = KeyPair;

    fn keygen(&self) -> Result<KeyPair> {
        let mut key = self.key_buffer().expect("liboqs keys are caller-owned");
        self.keygen_into(&mut key)?;
        Ok(key)
    }

    fn key_buffer(&self) -> Option<KeyPair> {
        let r = self.r();
        Some(KeyPair::zeroed(r.length_public_key, r.length_secret_key))
    }

    fn keygen_into(&self, key: &mut KeyPair) -> Result<()> {
        let r = self.r();
        // SAFETY: `fill` checked the buffers have the lengths liboqs declares.
        key.fill(
            r.length_public_key,
            r.length_secret_key,
            "OQS_KEM_keypair",
            |pk, sk| unsafe { kem::OQS_KEM_keypair(self.ptr, pk, sk) },
        )
    }

    fn encaps(&self, key: &KeyPair) -> Result<(Vec<u8>, Vec<u8>)> {
        let r = self.r();
        let mut ct = vec![0u8; r.length_ciphertext];
        let mut ss = vec![0u8; r.length_shared_secret];
        // SAFETY: as above; the public key has the declared length.
        status(
            unsafe {
                kem::OQS_KEM_encaps(
                    self.ptr,
                    ct.as_mut_ptr(),
                    ss.as_mut_ptr(),
                    key.public.as_ptr(),
                )
            },
            "OQS_KEM_encaps",
        )?;
        Ok((ct, ss))
    }

    fn decaps(&self, key: &KeyPair, ciphertext: &[u8]) -> Result<Vec<u8>> {
        let r = self.r();
        if ciphertext.len() != r.length_ciphertext {
            crate::bail!(
                Library,
                "liboqs: ciphertext of {} bytes, expected {}",
                ciphertext.len(),
                r.length_ciphertext
            );
        }
        let mut ss = vec![0u8; r.length_shared_secret];
        // SAFETY: lengths checked above.
        status(
            unsafe {
                kem::OQS_KEM_decaps(
                    self.ptr,
                    ss.as_mut_ptr(),
                    ciphertext.as_ptr(),
                    key.secret.as_ptr(),
                )
            },
            "OQS_KEM_decaps",
        )?;
        Ok(ss)
    }

    fn key_sizes(&self, key: &KeyPair) -> Result<KeySizes> {
        let (spki, pkcs8) = encoded_sizes(&self.oid, &key.public, &key.secret);
        Ok(KeySizes {
            public_key: Some(key.public.len()),
            secret_key: Some(key.secret.len()),
            public_key_der: spki,
            secret_key_der: pkcs8,
        })
    }

    fn notes(&self) -> Value {
        encoding_notes(&self.oid)
    }
}

pub struct OqsSig {
    ptr: *mut sig::OQS_SIG,
    oid: Option<Vec<u8>>,
}

/// One liboqs signature object per algorithm for the whole process, shared by threads
/// (certificate signing, TLS signers and verifiers).
struct SharedSig(OqsSig);
// SAFETY: a liboqs OQS_SIG holds only function pointers and sizes once made and is never
// mutated after OQS_SIG_new; using one from several threads is what liboqs's own tests do.
unsafe impl Send for SharedSig {}
unsafe impl Sync for SharedSig {}

/// The process's shared liboqs signature object for `name` (a name of this build's tables;
/// panics on a name liboqs does not have, which the tables rule out).
pub fn shared_sig(name: &'static str) -> &'static OqsSig {
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<Vec<(&'static str, &'static SharedSig)>>> = OnceLock::new();
    let mut c = CACHE
        .get_or_init(Default::default)
        .lock()
        .expect("signature cache");
    if let Some((_, s)) = c.iter().find(|(n, _)| *n == name) {
        return &s.0;
    }
    let s: &'static SharedSig = Box::leak(Box::new(SharedSig(
        OqsSig::new(name, &Params::new(), None).expect("a signature of this build's table"),
    )));
    c.push((name, s));
    &s.0
}

impl Drop for OqsSig {
    fn drop(&mut self) {
        // SAFETY: we own the object.
        unsafe { sig::OQS_SIG_free(self.ptr) }
    }
}

impl OqsSig {
    pub fn new(name: &str, params: &Params, oid: Option<&str>) -> Result<Self> {
        init();
        no_params(params, name)?;
        let c = CString::new(name).map_err(|_| Error::Usage("NUL in name".into()))?;
        // SAFETY: as for KEMs.
        let ptr = unsafe { sig::OQS_SIG_new(c.as_ptr()) };
        if ptr.is_null() {
            let (_, sigs) = algorithms();
            let names = sigs
                .iter()
                .filter_map(|k| k["name"].as_str().map(String::from))
                .collect();
            return Err(unknown("signature", name, names));
        }
        Ok(OqsSig {
            ptr,
            oid: oid_der(oid)?,
        })
    }

    fn r(&self) -> &sig::OQS_SIG {
        // SAFETY: non-null, owned.
        unsafe { &*self.ptr }
    }

    pub fn public_key_len(&self) -> usize {
        self.r().length_public_key
    }
}

impl Signature for OqsSig {
    type Key = KeyPair;

    fn keygen(&self) -> Result<KeyPair> {
        let mut key = self.key_buffer().expect("liboqs keys are caller-owned");
        self.keygen_into(&mut key)?;
        Ok(key)
    }

    fn key_buffer(&self) -> Option<KeyPair> {
        let r = self.r();
        Some(KeyPair::zeroed(r.length_public_key, r.length_secret_key))
    }

    fn keygen_into(&self, key: &mut KeyPair) -> Result<()> {
        let r = self.r();
        // SAFETY: `fill` checked the buffers have the lengths liboqs declares.
        key.fill(
            r.length_public_key,
            r.length_secret_key,
            "OQS_SIG_keypair",
            |pk, sk| unsafe { sig::OQS_SIG_keypair(self.ptr, pk, sk) },
        )
    }

    fn sign(&self, key: &KeyPair, message: &[u8]) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.r().length_signature];
        let mut len = 0usize;
        // SAFETY: output buffer of the maximum signature length.
        status(
            unsafe {
                sig::OQS_SIG_sign(
                    self.ptr,
                    out.as_mut_ptr(),
                    &mut len,
                    message.as_ptr(),
                    message.len(),
                    key.secret.as_ptr(),
                )
            },
            "OQS_SIG_sign",
        )?;
        if len == 0 || len > out.len() {
            crate::bail!(
                Library,
                "liboqs: OQS_SIG_sign returned a signature of {len} bytes"
            );
        }
        out.truncate(len);
        Ok(out)
    }

    fn verify(&self, key: &KeyPair, message: &[u8], signature: &[u8]) -> Result<bool> {
        // SAFETY: slices with their lengths.
        let s = unsafe {
            sig::OQS_SIG_verify(
                self.ptr,
                message.as_ptr(),
                message.len(),
                signature.as_ptr(),
                signature.len(),
                key.public.as_ptr(),
            )
        };
        Ok(s == OQS_STATUS::OQS_SUCCESS)
    }

    fn key_sizes(&self, key: &KeyPair) -> Result<KeySizes> {
        let (spki, pkcs8) = encoded_sizes(&self.oid, &key.public, &key.secret);
        Ok(KeySizes {
            public_key: Some(key.public.len()),
            secret_key: Some(key.secret.len()),
            public_key_der: spki,
            secret_key_der: pkcs8,
        })
    }

    fn signature_sizes(&self, signature: &[u8]) -> Result<SigSizes> {
        Ok(SigSizes {
            raw: signature.len(),
            encoded: signature.len(),
        })
    }

    fn notes(&self) -> Value {
        let mut n = encoding_notes(&self.oid);
        n["signature"] = json!("as returned by OQS_SIG_sign (Falcon's length varies); sent as is, so signature_der = signature");
        n
    }
}
