//! `info`: what this engine was built with, so every result can carry it.

use crate::out::{emit, Result, PROTOCOL};
use libc::{c_char, c_int, c_uint, c_void};
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

#[repr(C)]
struct OsslParam {
    key: *const c_char,
    data_type: c_uint,
    data: *mut c_void,
    data_size: usize,
    return_size: usize,
}

const OSSL_PARAM_INTEGER: c_uint = 1;
const OSSL_PARAM_UNSIGNED_INTEGER: c_uint = 2;
const OSSL_PARAM_UTF8_STRING: c_uint = 4;
const OSSL_PARAM_UTF8_PTR: c_uint = 6;

type MethodFn = unsafe extern "C" fn(*mut c_void, *mut c_void);
type NameFn = unsafe extern "C" fn(*const c_char, *mut c_void);
type ProviderFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type ParamsFn = unsafe extern "C" fn(*const OsslParam, *mut c_void) -> c_int;

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
    fn OSSL_PROVIDER_do_all(libctx: *mut c_void, f: ProviderFn, arg: *mut c_void) -> c_int;
    fn OSSL_PROVIDER_get_capabilities(
        p: *const c_void,
        capability: *const c_char,
        f: ParamsFn,
        arg: *mut c_void,
    ) -> c_int;
    fn SSL_get1_builtin_sigalgs(libctx: *mut c_void) -> *mut c_char;
    fn CRYPTO_free(p: *mut c_void, file: *const c_char, line: c_int);
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

/// The value of one OSSL_PARAM as JSON (strings and integers; other types as null).
unsafe fn param_value(p: &OsslParam) -> serde_json::Value {
    if p.data.is_null() {
        return serde_json::Value::Null;
    }
    match p.data_type {
        OSSL_PARAM_UTF8_STRING => json!(cstr(p.data as *const c_char)),
        OSSL_PARAM_UTF8_PTR => json!(cstr(*(p.data as *const *const c_char))),
        OSSL_PARAM_UNSIGNED_INTEGER => match p.data_size {
            1 => json!(*(p.data as *const u8)),
            2 => json!(*(p.data as *const u16)),
            4 => json!(*(p.data as *const u32)),
            8 => json!(*(p.data as *const u64)),
            _ => serde_json::Value::Null,
        },
        OSSL_PARAM_INTEGER => match p.data_size {
            1 => json!(*(p.data as *const i8)),
            2 => json!(*(p.data as *const i16)),
            4 => json!(*(p.data as *const i32)),
            8 => json!(*(p.data as *const i64)),
            _ => serde_json::Value::Null,
        },
        _ => serde_json::Value::Null,
    }
}

struct CapabilityScan {
    capability: &'static CStr,
    provider: String,
    entries: Vec<serde_json::Map<String, serde_json::Value>>,
}

unsafe extern "C" fn collect_params(params: *const OsslParam, arg: *mut c_void) -> c_int {
    let scan = &mut *(arg as *mut CapabilityScan);
    let mut entry = serde_json::Map::new();
    entry.insert("provider".into(), json!(scan.provider));
    let mut p = params;
    while !p.is_null() && !(*p).key.is_null() {
        // "tls-group-id" -> "id", "tls-sigalg-code-point" -> "code_point", "tls-min-tls" -> "min_tls"
        let key = cstr((*p).key);
        let short = key
            .trim_start_matches("tls-group-")
            .trim_start_matches("tls-sigalg-")
            .trim_start_matches("tls-")
            .replace('-', "_");
        entry.insert(short, param_value(&*p));
        p = p.add(1);
    }
    scan.entries.push(entry);
    1
}

unsafe extern "C" fn scan_provider(prov: *mut c_void, arg: *mut c_void) -> c_int {
    let scan = &mut *(arg as *mut CapabilityScan);
    scan.provider = cstr(OSSL_PROVIDER_get0_name(prov));
    let capability = scan.capability.as_ptr();
    // A provider without the capability is not an error (the base provider has none).
    OSSL_PROVIDER_get_capabilities(prov, capability, collect_params, arg);
    1
}

fn capabilities(capability: &'static CStr) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let mut scan = CapabilityScan {
        capability,
        provider: String::new(),
        entries: Vec::new(),
    };
    unsafe {
        OSSL_PROVIDER_do_all(
            std::ptr::null_mut(),
            scan_provider,
            &mut scan as *mut CapabilityScan as *mut c_void,
        );
    }
    scan.entries
}

/// A stream that records what the TLS client writes and never answers, so a handshake stops
/// right after the ClientHello.
#[derive(Debug)]
struct Capture(Vec<u8>);

impl std::io::Read for Capture {
    fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::WouldBlock.into())
    }
}

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The ClientHello libssl sends when configured with one group or one signature scheme.
/// `tls12_only` for groups that only TLS 1.2 may use (a TLS 1.3 ClientHello needs a key share).
fn client_hello(groups: &str, sigalgs: Option<&str>, tls12_only: bool) -> Result<Vec<u8>> {
    use openssl::ssl::{HandshakeError, Ssl, SslContext, SslMethod, SslVersion};
    let mut b = SslContext::builder(SslMethod::tls_client())?;
    b.set_security_level(0); // so that legacy schemes (SHA-1, DSA, small curves) are offered
    if tls12_only {
        b.set_max_proto_version(Some(SslVersion::TLS1_2))?;
    }
    b.set_groups_list(groups)?;
    if let Some(s) = sigalgs {
        b.set_sigalgs_list(s)?;
    }
    let ssl = Ssl::new(&b.build())?;
    match ssl.connect(Capture(Vec::new())) {
        Err(HandshakeError::WouldBlock(mid)) => Ok(mid.get_ref().0.clone()),
        Err(e) => crate::bail!(Library, "building a ClientHello failed: {e}"),
        Ok(_) => crate::bail!(Library, "a handshake completed without a server"),
    }
}

/// The body of extension `wanted` in a ClientHello record, if present.
fn hello_extension(record: &[u8], wanted: u16) -> Option<Vec<u8>> {
    let u16_at = |i: usize| -> Option<usize> {
        Some(u16::from_be_bytes([*record.get(i)?, *record.get(i + 1)?]) as usize)
    };
    // record header (5), handshake header (4), legacy_version (2), random (32)
    if record.first() != Some(&22) || record.get(5) != Some(&1) {
        return None;
    }
    let mut i = 5 + 4 + 2 + 32;
    i += 1 + *record.get(i)? as usize; // session id
    i += 2 + u16_at(i)?; // cipher suites
    i += 1 + *record.get(i)? as usize; // compression methods
    let end = i + 2 + u16_at(i)?;
    i += 2;
    while i + 4 <= end {
        let ty = u16_at(i)? as u16;
        let len = u16_at(i + 2)?;
        if ty == wanted {
            return record.get(i + 4..i + 4 + len).map(<[u8]>::to_vec);
        }
        i += 4 + len;
    }
    None
}

/// The code points in a ClientHello list extension (2-byte length, then 2-byte entries).
fn code_points(ext: &[u8]) -> Vec<u16> {
    ext.get(2..)
        .unwrap_or_default()
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect()
}

const EXT_SUPPORTED_GROUPS: u16 = 10;
const EXT_SIGNATURE_ALGORITHMS: u16 = 13;

/// The code points libssl actually puts on the wire for a group / signature scheme name.
fn wire_code_points(groups: &str, sigalgs: Option<&str>, tls12_only: bool) -> Vec<u16> {
    let ext = if sigalgs.is_some() {
        EXT_SIGNATURE_ALGORITHMS
    } else {
        EXT_SUPPORTED_GROUPS
    };
    client_hello(groups, sigalgs, tls12_only)
        .ok()
        .and_then(|hello| hello_extension(&hello, ext))
        .map(|e| code_points(&e))
        .unwrap_or_default()
}

/// TLS groups from the providers' TLS-GROUP capability, each with the code point libssl
/// sends in a ClientHello offering only that group.
fn tls_groups() -> Vec<serde_json::Value> {
    capabilities(c"TLS-GROUP")
        .into_iter()
        .map(|mut g| {
            let name = g
                .get("name")
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_owned();
            // max_tls 771 = TLS 1.2 (0 = no maximum)
            let tls12_only = g.get("max_tls").and_then(|v| v.as_i64()) == Some(0x0303);
            g.insert(
                "wire_id".into(),
                json!(wire_code_points(&name, None, tls12_only)),
            );
            serde_json::Value::Object(g)
        })
        .collect()
}

/// TLS signature schemes: libssl's built-in table (names only) and the providers'
/// TLS-SIGALG capability (with code points), each with the code point libssl sends in a
/// ClientHello offering only that scheme.
fn tls_sigalgs() -> Vec<serde_json::Value> {
    let builtin = unsafe {
        let p = SSL_get1_builtin_sigalgs(std::ptr::null_mut());
        let s = cstr(p);
        if !p.is_null() {
            CRYPTO_free(p as *mut c_void, c"info.rs".as_ptr(), line!() as c_int);
        }
        s
    };
    let provided = capabilities(c"TLS-SIGALG");
    let mut out = Vec::new();
    for name in builtin.split(':').filter(|n| !n.is_empty()) {
        out.push(json!({
            "iana_name": name,
            "source": "libssl",
            "wire_code_point": wire_code_points("X25519", Some(name), false),
        }));
    }
    for mut s in provided {
        let name = s
            .get("iana_name")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_owned();
        s.insert("source".into(), json!("provider"));
        s.insert(
            "wire_code_point".into(),
            json!(wire_code_points("X25519", Some(&name), false)),
        );
        out.push(serde_json::Value::Object(s));
    }
    out
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
        "tls_groups": tls_groups(),
        "tls_sigalgs": tls_sigalgs(),
    })
}

pub fn run(_a: Args) -> Result<()> {
    let (kems, sigs) = liboqs_algorithms();
    let provided = openssl_algorithms();
    emit(&json!({
        "type": "info",
        "protocol": PROTOCOL,
        "engine_version": env!("CARGO_PKG_VERSION"),
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
    fn client_hello_carries_exactly_the_configured_scheme_and_group() {
        let hello = client_hello("x25519", Some("ed25519"), false).unwrap();
        let sigalgs = hello_extension(&hello, EXT_SIGNATURE_ALGORITHMS).unwrap();
        assert_eq!(code_points(&sigalgs), vec![0x0807]);
        let groups = hello_extension(&hello, EXT_SUPPORTED_GROUPS).unwrap();
        assert_eq!(code_points(&groups), vec![0x001d]);
    }

    #[test]
    fn extension_parser_rejects_what_is_not_a_client_hello() {
        assert_eq!(hello_extension(&[], EXT_SUPPORTED_GROUPS), None);
        assert_eq!(
            hello_extension(&[23, 3, 3, 0, 1, 1], EXT_SUPPORTED_GROUPS),
            None
        );
        let hello = client_hello("x25519", None, false).unwrap();
        assert_eq!(hello_extension(&hello[..60], EXT_SUPPORTED_GROUPS), None);
    }

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
}
