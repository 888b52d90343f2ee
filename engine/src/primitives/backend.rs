//! The two primitive backends (OpenSSL EVP, liboqs) behind three small traits, one per kind
//! of algorithm, so the measuring loop in `measure.rs` is written once and every check runs
//! the same way for both libraries.

use crate::out::Result;
use serde_json::Value;
use std::collections::BTreeMap;

/// Backend parameters given as `--param KEY=VALUE` (catalogue field `params`).
pub type Params = BTreeMap<String, String>;

/// A C library's NUL-terminated string (NULL: empty), lossily as UTF-8.
pub(crate) fn cstr(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a non-NULL pointer from a C library to a NUL-terminated string it owns.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// Sizes of one key pair, in bytes. `None`: the library has no such encoding for this
/// algorithm (the reason is in `notes`).
#[derive(Clone, Debug, Default)]
pub struct KeySizes {
    /// The public key as the algorithm defines it (raw key, EC point, RSA modulus length).
    pub public_key: Option<usize>,
    /// The secret key as the algorithm defines it.
    pub secret_key: Option<usize>,
    /// DER SubjectPublicKeyInfo.
    pub public_key_der: Option<usize>,
    /// DER PKCS#8 (RFC 5958 OneAsymmetricKey) private key.
    pub secret_key_der: Option<usize>,
}

/// Sizes of one signature, in bytes: as the algorithm defines it, and as sent in practice
/// (ECDSA: DER SEQUENCE of two INTEGERs, which varies; everything else: the same bytes).
#[derive(Clone, Copy, Debug)]
pub struct SigSizes {
    pub raw: usize,
    pub encoded: usize,
}

/// A key-encapsulation mechanism.
pub trait Kem {
    type Key;
    fn keygen(&self) -> Result<Self::Key>;
    /// Caller-owned output buffers for one key generation, allocated and zeroed (pages
    /// touched) outside the timed region. None where the library allocates the key itself
    /// (OpenSSL's EVP_PKEY_keygen): that keygen is timed whole, as `openssl speed` does.
    fn key_buffer(&self) -> Option<Self::Key> {
        None
    }
    /// Key generation into a buffer from `key_buffer` (the timed part).
    fn keygen_into(&self, _key: &mut Self::Key) -> Result<()> {
        Err(crate::err!(Library, "keygen_into without key_buffer"))
    }
    /// Encapsulate to the public half of `key`: (ciphertext, shared secret).
    fn encaps(&self, key: &Self::Key) -> Result<(Vec<u8>, Vec<u8>)>;
    fn decaps(&self, key: &Self::Key, ciphertext: &[u8]) -> Result<Vec<u8>>;
    fn key_sizes(&self, key: &Self::Key) -> Result<KeySizes>;
    /// Why an encoded size is missing, per field, for the sizes record.
    fn notes(&self) -> Value;
}

/// A Diffie-Hellman style key agreement (X25519, X448, ECDH, FFDHE).
pub trait KeyAgreement {
    type Key;
    type Peer;
    fn keygen(&self) -> Result<Self::Key>;
    /// The TLS key share: export this key's public value in its wire encoding and import it
    /// as the peer does (libssl: EVP_PKEY_get1_encoded_public_key, then a parameter-only key
    /// of the group plus EVP_PKEY_set1_encoded_public_key).
    fn public_key(&self, key: &Self::Key) -> Result<Self::Peer>;
    /// The wire encoding of a key's public value (untimed, for checks and sizes).
    fn wire_public(&self, key: &Self::Key) -> Result<Vec<u8>>;
    fn peer_wire(&self, peer: &Self::Peer) -> Result<Vec<u8>>;
    fn derive(&self, key: &Self::Key, peer: &Self::Peer) -> Result<Vec<u8>>;
    fn key_sizes(&self, key: &Self::Key) -> Result<KeySizes>;
    fn notes(&self) -> Value;
}

/// A signature scheme.
pub trait Signature {
    type Key;
    fn keygen(&self) -> Result<Self::Key>;
    /// Caller-owned output buffers for one key generation, allocated and zeroed (pages
    /// touched) outside the timed region. None where the library allocates the key itself
    /// (OpenSSL's EVP_PKEY_keygen): that keygen is timed whole, as `openssl speed` does.
    fn key_buffer(&self) -> Option<Self::Key> {
        None
    }
    /// Key generation into a buffer from `key_buffer` (the timed part).
    fn keygen_into(&self, _key: &mut Self::Key) -> Result<()> {
        Err(crate::err!(Library, "keygen_into without key_buffer"))
    }
    fn sign(&self, key: &Self::Key, message: &[u8]) -> Result<Vec<u8>>;
    /// Ok(false) for a signature that does not verify; Err only for a library failure.
    fn verify(&self, key: &Self::Key, message: &[u8], signature: &[u8]) -> Result<bool>;
    fn key_sizes(&self, key: &Self::Key) -> Result<KeySizes>;
    fn signature_sizes(&self, signature: &[u8]) -> Result<SigSizes>;
    fn notes(&self) -> Value;
}
