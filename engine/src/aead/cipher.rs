//! The ciphers pqlab measures and a thin, checked wrapper over OpenSSL's EVP cipher API
//! (openssl-sys), because the safe `openssl::symm::Crypter` cannot re-initialise a context
//! with only a new nonce, which is exactly what a TLS record layer does.

use crate::bail;
use crate::out::Result;
use openssl_sys as ffi;
use std::ffi::CString;
use std::os::raw::c_int;
use std::ptr;

extern "C" {
    // Declared here because openssl-sys does not bind them.
    fn EVP_CipherFinal_ex(ctx: *mut ffi::EVP_CIPHER_CTX, out: *mut u8, outl: *mut c_int) -> c_int;
    fn ERR_error_string_n(e: std::os::raw::c_ulong, buf: *mut std::os::raw::c_char, len: usize);
    #[cfg(test)]
    fn EVP_CIPHER_CTX_test_flags(ctx: *const ffi::EVP_CIPHER_CTX, flags: c_int) -> c_int;
}

/// openssl/evp.h's EVP_CIPH_NO_PADDING, the context flag `padding_off` sets.
#[cfg(test)]
const EVP_CIPH_NO_PADDING: c_int = 0x100;

pub const TAG_LEN: usize = 16;
pub const AAD_LEN: usize = 13; // TLS 1.2 additional data: seq(8) type(1) version(2) length(2)

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gcm,
    Ccm,
    ChaChaPoly,
    Ecb,
    Ctr,
    ChaCha20,
}

#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// pqlab's name (also the OpenSSL name).
    pub name: &'static str,
    pub kind: Kind,
    /// Nonce/IV length given to EVP (0 for ECB).
    pub iv_len: usize,
}

pub const CIPHERS: &[Spec] = &[
    Spec {
        name: "aes-128-gcm",
        kind: Kind::Gcm,
        iv_len: 12,
    },
    Spec {
        name: "aes-256-gcm",
        kind: Kind::Gcm,
        iv_len: 12,
    },
    Spec {
        name: "aes-128-ccm",
        kind: Kind::Ccm,
        iv_len: 12,
    },
    Spec {
        name: "aes-256-ccm",
        kind: Kind::Ccm,
        iv_len: 12,
    },
    Spec {
        name: "chacha20-poly1305",
        kind: Kind::ChaChaPoly,
        iv_len: 12,
    },
    Spec {
        name: "aes-128-ecb",
        kind: Kind::Ecb,
        iv_len: 0,
    },
    Spec {
        name: "aes-256-ecb",
        kind: Kind::Ecb,
        iv_len: 0,
    },
    Spec {
        name: "aes-128-ctr",
        kind: Kind::Ctr,
        iv_len: 16,
    },
    Spec {
        name: "aes-256-ctr",
        kind: Kind::Ctr,
        iv_len: 16,
    },
    // EVP's ChaCha20 IV is a 4-byte little-endian block counter followed by a 12-byte nonce.
    Spec {
        name: "chacha20",
        kind: Kind::ChaCha20,
        iv_len: 16,
    },
];

impl Spec {
    pub fn find(name: &str) -> Result<Spec> {
        let lower = name.to_ascii_lowercase();
        match CIPHERS.iter().find(|s| s.name == lower) {
            Some(s) => Ok(*s),
            None => bail!(
                Usage,
                "unknown cipher {name:?}; known: {}",
                CIPHERS
                    .iter()
                    .map(|s| s.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    pub fn is_aead(&self) -> bool {
        matches!(self.kind, Kind::Gcm | Kind::Ccm | Kind::ChaChaPoly)
    }

    /// Modes `openssl speed -evp` treats as "AE" (re-keyed per call): EVP_CIPH_GCM/CCM_MODE.
    /// ChaCha20-Poly1305 reports mode 0 (stream) in OpenSSL 3, so speed streams it.
    pub fn speed_ae_mode(&self) -> bool {
        matches!(self.kind, Kind::Gcm | Kind::Ccm)
    }

    /// ECB without padding only takes whole blocks.
    pub fn block_multiple(&self) -> usize {
        if self.kind == Kind::Ecb {
            16
        } else {
            1
        }
    }
}

/// The last OpenSSL error as text (drains the queue).
fn ossl_error() -> String {
    let mut last = String::new();
    loop {
        let code = unsafe { ffi::ERR_get_error() };
        if code == 0 {
            break;
        }
        let mut buf = [0u8; 256];
        unsafe { ERR_error_string_n(code, buf.as_mut_ptr() as *mut _, buf.len()) };
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        last = String::from_utf8_lossy(&buf[..end]).into_owned();
    }
    if last.is_empty() {
        "no OpenSSL error queued".into()
    } else {
        last
    }
}

/// An `EVP_CIPHER` fetched from the default provider, as `openssl speed -evp` does.
pub struct Algorithm {
    ptr: *mut ffi::EVP_CIPHER,
    pub spec: Spec,
    pub key_len: usize,
}

impl Algorithm {
    pub fn fetch(spec: Spec) -> Result<Algorithm> {
        let name = CString::new(spec.name).expect("cipher names have no NUL");
        let ptr = unsafe { ffi::EVP_CIPHER_fetch(ptr::null_mut(), name.as_ptr(), ptr::null()) };
        if ptr.is_null() {
            bail!(
                Library,
                "OpenSSL cannot fetch cipher {}: {}",
                spec.name,
                ossl_error()
            );
        }
        let key_len = unsafe { ffi::EVP_CIPHER_get_key_length(ptr) } as usize;
        Ok(Algorithm { ptr, spec, key_len })
    }
}

impl Drop for Algorithm {
    fn drop(&mut self) {
        unsafe { ffi::EVP_CIPHER_free(self.ptr) }
    }
}

/// One `EVP_CIPHER_CTX`. Every call checks OpenSSL's return value; a failure is an error.
pub struct Ctx {
    ptr: *mut ffi::EVP_CIPHER_CTX,
    name: &'static str,
}

impl Drop for Ctx {
    fn drop(&mut self) {
        unsafe { ffi::EVP_CIPHER_CTX_free(self.ptr) }
    }
}

pub fn len_c(n: usize) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| crate::err!(Usage, "length {n} is too large"))
}

impl Ctx {
    /// A context bound to `alg` for `encrypt` (or decrypt). The key is set later (`init`) so
    /// callers control exactly what is initialised when.
    pub fn new(alg: &Algorithm, encrypt: bool) -> Result<Ctx> {
        let ptr = unsafe { ffi::EVP_CIPHER_CTX_new() };
        if ptr.is_null() {
            bail!(Library, "EVP_CIPHER_CTX_new failed");
        }
        let ctx = Ctx {
            ptr,
            name: alg.spec.name,
        };
        let ok = unsafe {
            ffi::EVP_CipherInit_ex(
                ptr,
                alg.ptr,
                ptr::null_mut(),
                ptr::null(),
                ptr::null(),
                encrypt as c_int,
            )
        };
        ctx.check(ok, "init")?;
        Ok(ctx)
    }

    /// Padding off, for whole-block input to a block mode (ECB) and as `openssl speed` sets
    /// it for every cipher. OpenSSL 3.5 then sends the setting to the provider again at
    /// every later init (about 350 instructions: building and parsing an OSSL_PARAM), so a
    /// context re-initialised per record pays it per record; libssl never sets it.
    pub fn padding_off(&self) -> Result<()> {
        let ok = unsafe { ffi::EVP_CIPHER_CTX_set_padding(self.ptr, 0) };
        self.check(ok, "padding off")
    }

    #[inline]
    fn check(&self, ok: c_int, what: &str) -> Result<()> {
        if ok != 1 {
            bail!(
                Library,
                "{}: EVP {what} failed: {}",
                self.name,
                ossl_error()
            );
        }
        Ok(())
    }

    /// Whether `padding_off` was called.
    #[cfg(test)]
    pub fn padding_is_off(&self) -> bool {
        unsafe { EVP_CIPHER_CTX_test_flags(self.ptr, EVP_CIPH_NO_PADDING) != 0 }
    }

    /// `EVP_CipherInit_ex(ctx, NULL, NULL, key, iv, enc)`; `None` leaves key or IV as is
    /// (enc = -1 keeps the direction).
    #[inline]
    pub fn init(&self, key: Option<&[u8]>, iv: Option<&[u8]>, enc: c_int) -> Result<()> {
        let ok = unsafe {
            ffi::EVP_CipherInit_ex(
                self.ptr,
                ptr::null(),
                ptr::null_mut(),
                key.map_or(ptr::null(), |k| k.as_ptr()),
                iv.map_or(ptr::null(), |v| v.as_ptr()),
                enc,
            )
        };
        self.check(ok, "init")
    }

    /// `EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, iv)` (what speed does before each decrypt).
    #[inline]
    pub fn decrypt_init_iv(&self, iv: &[u8]) -> Result<()> {
        let ok = unsafe {
            ffi::EVP_DecryptInit_ex(
                self.ptr,
                ptr::null(),
                ptr::null_mut(),
                ptr::null(),
                iv.as_ptr(),
            )
        };
        self.check(ok, "decrypt init")
    }

    #[inline]
    pub fn set_iv_len(&self, n: usize) -> Result<()> {
        let ok = unsafe {
            ffi::EVP_CIPHER_CTX_ctrl(
                self.ptr,
                ffi::EVP_CTRL_GCM_SET_IVLEN,
                len_c(n)?,
                ptr::null_mut(),
            )
        };
        self.check(ok, "set IV length")
    }

    /// Tag length only (CCM before the nonce, when encrypting).
    #[inline]
    pub fn set_tag_len(&self, n: usize) -> Result<()> {
        let ok = unsafe {
            ffi::EVP_CIPHER_CTX_ctrl(
                self.ptr,
                ffi::EVP_CTRL_GCM_SET_TAG,
                len_c(n)?,
                ptr::null_mut(),
            )
        };
        self.check(ok, "set tag length")
    }

    /// The expected tag, when decrypting.
    #[inline]
    pub fn set_tag(&self, tag: &[u8]) -> Result<()> {
        let ok = unsafe {
            ffi::EVP_CIPHER_CTX_ctrl(
                self.ptr,
                ffi::EVP_CTRL_GCM_SET_TAG,
                len_c(tag.len())?,
                tag.as_ptr() as *mut _,
            )
        };
        self.check(ok, "set tag")
    }

    #[inline]
    pub fn get_tag(&self, tag: &mut [u8]) -> Result<()> {
        let ok = unsafe {
            ffi::EVP_CIPHER_CTX_ctrl(
                self.ptr,
                ffi::EVP_CTRL_GCM_GET_TAG,
                len_c(tag.len())?,
                tag.as_mut_ptr() as *mut _,
            )
        };
        self.check(ok, "get tag")
    }

    /// CCM's total message length, which it needs before any data.
    #[inline]
    pub fn set_length(&self, n: usize) -> Result<()> {
        // SAFETY: no input is read and no output written (both NULL): only the length.
        let ok = unsafe { self.update_raw(ptr::null_mut(), ptr::null(), n)? };
        self.check(ok, "set message length")
    }

    #[inline]
    pub fn aad(&self, aad: &[u8]) -> Result<()> {
        // SAFETY: `aad` covers its length; a NULL output makes it additional data.
        let ok = unsafe { self.update_raw(ptr::null_mut(), aad.as_ptr(), aad.len())? };
        self.check(ok, "additional data")
    }

    /// `EVP_CipherUpdate` over `len` bytes from `input` to `out` (which may be the same
    /// address: EVP allows exactly-overlapping buffers); OpenSSL's return value.
    ///
    /// # Safety
    /// `input` must be readable and `out` writable for `len` bytes (or NULL where EVP
    /// accepts it: the output for additional data, both for CCM's length).
    #[inline]
    unsafe fn update_raw(&self, out: *mut u8, input: *const u8, len: usize) -> Result<c_int> {
        let mut outl: c_int = 0;
        let n = len_c(len)?;
        Ok(ffi::EVP_CipherUpdate(self.ptr, out, &mut outl, input, n))
    }

    /// Encrypt or decrypt `input` into `out` (at least as long).
    #[inline]
    pub fn update(&self, out: &mut [u8], input: &[u8]) -> Result<()> {
        assert!(out.len() >= input.len());
        // SAFETY: both slices cover `input.len()` bytes.
        let ok = unsafe { self.update_raw(out.as_mut_ptr(), input.as_ptr(), input.len())? };
        self.check(ok, "update")
    }

    /// Encrypt or decrypt the first `len` bytes of `buf` in place, as a TLS record layer
    /// does with the record in its buffer and `openssl speed` with its one buffer.
    #[inline]
    pub fn update_in_place(&self, buf: &mut [u8], len: usize) -> Result<()> {
        assert!(len <= buf.len());
        let p = buf.as_mut_ptr();
        // SAFETY: `buf` covers `len` bytes; input and output are the same address.
        let ok = unsafe { self.update_raw(p, p, len)? };
        self.check(ok, "update")
    }

    /// Like `update` but reports an authentication failure (CCM checks its tag inside the
    /// update when decrypting) as `Ok(false)` instead of an error.
    #[inline]
    pub fn update_verify(&self, out: &mut [u8], input: &[u8]) -> Result<bool> {
        assert!(out.len() >= input.len());
        // SAFETY: both slices cover `input.len()` bytes.
        let ok = unsafe { self.update_raw(out.as_mut_ptr(), input.as_ptr(), input.len())? };
        Ok(self.verified(ok))
    }

    /// `update_in_place` reporting an authentication failure as `Ok(false)`.
    #[inline]
    pub fn update_verify_in_place(&self, buf: &mut [u8], len: usize) -> Result<bool> {
        assert!(len <= buf.len());
        let p = buf.as_mut_ptr();
        // SAFETY: `buf` covers `len` bytes; input and output are the same address.
        let ok = unsafe { self.update_raw(p, p, len)? };
        Ok(self.verified(ok))
    }

    /// Whether an operation that may fail authentication succeeded; a failure's queued
    /// OpenSSL errors are drained.
    #[inline]
    fn verified(&self, ok: c_int) -> bool {
        if ok != 1 {
            let _ = ossl_error();
        }
        ok == 1
    }

    /// Finish a message. Returns whether OpenSSL accepted it: when decrypting an AEAD this is
    /// the tag check, so `false` means the record did not authenticate.
    #[inline]
    pub fn finish(&self, out: &mut [u8]) -> bool {
        let mut outl: c_int = 0;
        let ok = unsafe { EVP_CipherFinal_ex(self.ptr, out.as_mut_ptr(), &mut outl) };
        self.verified(ok)
    }
}

/// Cryptographically random bytes from OpenSSL (keys).
pub fn random(buf: &mut [u8]) -> Result<()> {
    if unsafe { ffi::RAND_bytes(buf.as_mut_ptr(), len_c(buf.len())?) } != 1 {
        bail!(Library, "RAND_bytes failed: {}", ossl_error());
    }
    Ok(())
}
