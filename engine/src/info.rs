//! `info`: what this engine was built with, so every result can carry it.

use crate::out::{emit, Result, PROTOCOL};
use serde_json::json;
use std::ffi::CStr;

#[derive(clap::Args)]
pub struct Args {}

fn cstr(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// liboqs's enabled algorithms with the sizes and NIST level liboqs reports for each.
pub fn liboqs_algorithms() -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
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

pub fn run(_a: Args) -> Result<()> {
    let (kems, sigs) = liboqs_algorithms();
    emit(&json!({
        "type": "info",
        "protocol": PROTOCOL,
        "engine_version": env!("CARGO_PKG_VERSION"),
        "openssl": {
            "version_text": cstr(unsafe { openssl_sys::OpenSSL_version(openssl_sys::OPENSSL_VERSION) }),
            "version_number": format!("{:#x}", unsafe { openssl_sys::OpenSSL_version_num() }),
            "built_on": cstr(unsafe { openssl_sys::OpenSSL_version(openssl_sys::OPENSSL_BUILT_ON) }),
            "cflags": cstr(unsafe { openssl_sys::OpenSSL_version(openssl_sys::OPENSSL_CFLAGS) }),
        },
        "liboqs": {
            "version": cstr(unsafe { oqs_sys::common::OQS_version() }),
            "kems": kems,
            "sigs": sigs,
        },
        "build": {
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "target_arch": std::env::consts::ARCH,
        },
    }));
    Ok(())
}
