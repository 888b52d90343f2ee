//! `info`: what this engine was built with, so every result can carry it: library versions,
//! the algorithms each backend provides, what each TLS stack can negotiate, and a hash of
//! the executable itself (`build_id`) so the lab can refuse to mix builds.

use crate::out::{emit, Result, PROTOCOL};
use libc::{c_char, c_int, c_void};
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

// ---------------------------------------------------------------------------------------
// OpenSSL: the algorithms of the loaded providers and the TLS groups / signature schemes
// with their code points, so the catalogue can be checked against the library itself.
// These OpenSSL 3 functions are not all bound by openssl-sys; declared here.

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

fn methods_json(mut methods: Vec<Method>) -> Vec<serde_json::Value> {
    methods.sort_by(|a, b| a.name.cmp(&b.name));
    methods
        .into_iter()
        .map(|m| json!({"name": m.name, "names": m.names, "provider": m.provider}))
        .collect()
}

/// OpenSSL's provided algorithms and TLS capabilities.
pub fn openssl_algorithms() -> serde_json::Value {
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
        "tls_groups": crate::tls::openssl::caps::tls_groups_json(),
        "tls_sigalgs": crate::tls::openssl::caps::tls_sigalgs_json(),
    })
}

/// SHA-256 (hex) of the running executable, read through /proc/self/exe.
pub fn build_id() -> Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open("/proc/self/exe")
        .map_err(|e| crate::err!(Io, "cannot read /proc/self/exe for build_id: {e}"))?;
    let mut h = openssl::sha::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| crate::err!(Io, "reading /proc/self/exe for build_id: {e}"))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finish().iter().map(|b| format!("{b:02x}")).collect())
}

pub fn run(_a: Args) -> Result<()> {
    let (kems, sigs) = liboqs_algorithms();
    let provided = openssl_algorithms();
    let tls_stacks = crate::tls::stacks_info()?;
    emit(&json!({
        "type": "info",
        "protocol": PROTOCOL,
        "engine_version": env!("CARGO_PKG_VERSION"),
        "build_id": build_id()?,
        "certificate_key_types": crate::tls::certificate_key_types(&tls_stacks),
        "tls_stacks": tls_stacks,
        "openssl": {
            "version_text": cstr(unsafe { openssl_sys::OpenSSL_version(openssl_sys::OPENSSL_VERSION) }),
            "version_number": format!("{:#x}", unsafe { openssl_sys::OpenSSL_version_num() }),
            "built_on": cstr(unsafe { openssl_sys::OpenSSL_version(openssl_sys::OPENSSL_BUILT_ON) }),
            "cflags": cstr(unsafe { openssl_sys::OpenSSL_version(openssl_sys::OPENSSL_CFLAGS) }),
            "kems": provided["kems"],
            "signatures": provided["signatures"],
            "keymgmt": provided["keymgmt"],
            "tls_groups": provided["tls_groups"],
            "tls_sigalgs": provided["tls_sigalgs"],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_lists_ml_kem_and_the_hybrid_groups() {
        let v = openssl_algorithms();
        let kems: Vec<&str> = v["kems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["name"].as_str().unwrap())
            .collect();
        assert!(kems.contains(&"ML-KEM-768"), "{kems:?}");
        let ids: Vec<u64> = v["tls_groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["id"].as_u64().unwrap())
            .collect();
        assert!(ids.contains(&0x11ec), "{ids:?}");
    }

    #[test]
    fn build_id_is_the_sha256_of_the_executable() {
        let id = build_id().unwrap();
        assert_eq!(id.len(), 64);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let expect: String = openssl::sha::sha256(&exe)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(id, expect);
    }

    #[test]
    fn tls_stacks_describe_the_openssl_stack() {
        let stacks = serde_json::to_value(crate::tls::stacks_info().unwrap()).unwrap();
        let openssl = stacks
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "openssl")
            .unwrap();
        assert!(openssl["implementation"]
            .as_str()
            .unwrap()
            .starts_with("OpenSSL 3.5.4"));
        let group = |name: &str| {
            openssl["groups"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["name"] == name)
                .cloned()
        };
        assert_eq!(group("X25519MLKEM768").unwrap()["code"], 0x11ec);
        assert_eq!(group("P-256").unwrap()["code"], 23);
        assert_eq!(group("secp256r1").unwrap()["code"], 23);
        let sig = openssl["sigalgs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "mldsa44")
            .unwrap();
        assert_eq!(
            (sig["code"].as_u64(), &sig["versions"]),
            (Some(0x0904), &json!(["1.3"]))
        );
        assert!(openssl["limits"]["max_cert_list_bytes"].as_u64().unwrap() >= 100 * 1024);
        assert_eq!(openssl["message_events"], true);
    }
}
