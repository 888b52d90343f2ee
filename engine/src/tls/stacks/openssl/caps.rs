//! What OpenSSL's TLS stack can negotiate, read from the library: the providers' TLS-GROUP
//! and TLS-SIGALG capabilities, libssl's built-in signature schemes with their IANA code
//! points, and the ClientHello libssl really sends for each name (the test every code
//! point here must pass). Also the name -> code tables `negotiated` uses.

use crate::out::Result;
use crate::primitives::backend::cstr;
use crate::tls::stack::NamedCode;
use libc::{c_char, c_int, c_uint, c_void};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::OnceLock;

// ---------------------------------------------------------------------------------------
// Provider capabilities (OSSL_PROVIDER_get_capabilities), not bound by openssl-sys.

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

type ProviderFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type ParamsFn = unsafe extern "C" fn(*const OsslParam, *mut c_void) -> c_int;

extern "C" {
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

/// The value of one OSSL_PARAM as JSON (strings and integers; other types as null).
unsafe fn param_value(p: &OsslParam) -> Value {
    if p.data.is_null() {
        return Value::Null;
    }
    match p.data_type {
        OSSL_PARAM_UTF8_STRING => json!(cstr(p.data as *const c_char)),
        OSSL_PARAM_UTF8_PTR => json!(cstr(*(p.data as *const *const c_char))),
        OSSL_PARAM_UNSIGNED_INTEGER => match p.data_size {
            1 => json!(*(p.data as *const u8)),
            2 => json!(*(p.data as *const u16)),
            4 => json!(*(p.data as *const u32)),
            8 => json!(*(p.data as *const u64)),
            _ => Value::Null,
        },
        OSSL_PARAM_INTEGER => match p.data_size {
            1 => json!(*(p.data as *const i8)),
            2 => json!(*(p.data as *const i16)),
            4 => json!(*(p.data as *const i32)),
            8 => json!(*(p.data as *const i64)),
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

struct CapabilityScan {
    capability: &'static CStr,
    provider: String,
    entries: Vec<Map<String, Value>>,
}

unsafe extern "C" fn collect_params(params: *const OsslParam, arg: *mut c_void) -> c_int {
    let scan = &mut *(arg as *mut CapabilityScan);
    let mut entry = Map::new();
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

/// Every entry of a provider capability ("TLS-GROUP", "TLS-SIGALG") over loaded providers.
pub fn capabilities(capability: &'static CStr) -> Vec<Map<String, Value>> {
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

fn text_of<'a>(entry: &'a Map<String, Value>, key: &str) -> &'a str {
    entry.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Protocol versions 1.2 / 1.3 inside a capability's min_tls..max_tls (0: no maximum).
fn versions_between(entry: &Map<String, Value>) -> Vec<&'static str> {
    let min = entry.get("min_tls").and_then(Value::as_i64).unwrap_or(0);
    let max = entry.get("max_tls").and_then(Value::as_i64).unwrap_or(0);
    let ok = |v: i64| min <= v && (max == 0 || v <= max) && min >= 0;
    let mut out = Vec::new();
    if ok(0x0303) {
        out.push("1.2");
    }
    if ok(0x0304) {
        out.push("1.3");
    }
    out
}

fn u16_of(entry: &Map<String, Value>, key: &str) -> Option<u16> {
    entry
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|v| u16::try_from(v).ok())
}

// ---------------------------------------------------------------------------------------
// libssl's built-in signature schemes.

/// One scheme of libssl's built-in table (ssl/t1_lib.c `sigalg_lookup_tbl`, OpenSSL 3.5.4):
/// its name, the TLS 1.2-style alias libssl also accepts, the IANA TLS SignatureScheme
/// code point, and the versions whose handshakes may use it (RFC 8446 4.2.3 leaves the
/// PKCS#1 v1.5, SHA-1, SHA-224 and DSA schemes out of TLS 1.3 handshakes, as libssl does;
/// the brainpool "tls13" schemes are TLS 1.3 only).
pub struct Builtin {
    pub name: &'static str,
    pub alias: Option<&'static str>,
    pub code: u16,
    pub versions: &'static [&'static str],
}

const BOTH: &[&str] = &["1.2", "1.3"];
const TLS12: &[&str] = &["1.2"];
const TLS13: &[&str] = &["1.3"];

#[rustfmt::skip]
pub const BUILTIN_SIGALGS: &[Builtin] = &[
    Builtin { name: "ecdsa_secp256r1_sha256", alias: Some("ECDSA+SHA256"), code: 0x0403, versions: BOTH },
    Builtin { name: "ecdsa_secp384r1_sha384", alias: Some("ECDSA+SHA384"), code: 0x0503, versions: BOTH },
    Builtin { name: "ecdsa_secp521r1_sha512", alias: Some("ECDSA+SHA512"), code: 0x0603, versions: BOTH },
    Builtin { name: "ed25519", alias: None, code: 0x0807, versions: BOTH },
    Builtin { name: "ed448", alias: None, code: 0x0808, versions: BOTH },
    Builtin { name: "ecdsa_sha224", alias: Some("ECDSA+SHA224"), code: 0x0303, versions: TLS12 },
    Builtin { name: "ecdsa_sha1", alias: Some("ECDSA+SHA1"), code: 0x0203, versions: TLS12 },
    Builtin { name: "ecdsa_brainpoolP256r1tls13_sha256", alias: Some("ecdsa_brainpoolP256r1_sha256"), code: 0x081a, versions: TLS13 },
    Builtin { name: "ecdsa_brainpoolP384r1tls13_sha384", alias: Some("ecdsa_brainpoolP384r1_sha384"), code: 0x081b, versions: TLS13 },
    Builtin { name: "ecdsa_brainpoolP512r1tls13_sha512", alias: Some("ecdsa_brainpoolP512r1_sha512"), code: 0x081c, versions: TLS13 },
    Builtin { name: "rsa_pss_rsae_sha256", alias: Some("PSS+SHA256"), code: 0x0804, versions: BOTH },
    Builtin { name: "rsa_pss_rsae_sha384", alias: Some("PSS+SHA384"), code: 0x0805, versions: BOTH },
    Builtin { name: "rsa_pss_rsae_sha512", alias: Some("PSS+SHA512"), code: 0x0806, versions: BOTH },
    Builtin { name: "rsa_pss_pss_sha256", alias: None, code: 0x0809, versions: BOTH },
    Builtin { name: "rsa_pss_pss_sha384", alias: None, code: 0x080a, versions: BOTH },
    Builtin { name: "rsa_pss_pss_sha512", alias: None, code: 0x080b, versions: BOTH },
    Builtin { name: "rsa_pkcs1_sha256", alias: Some("RSA+SHA256"), code: 0x0401, versions: TLS12 },
    Builtin { name: "rsa_pkcs1_sha384", alias: Some("RSA+SHA384"), code: 0x0501, versions: TLS12 },
    Builtin { name: "rsa_pkcs1_sha512", alias: Some("RSA+SHA512"), code: 0x0601, versions: TLS12 },
    Builtin { name: "rsa_pkcs1_sha224", alias: Some("RSA+SHA224"), code: 0x0301, versions: TLS12 },
    Builtin { name: "rsa_pkcs1_sha1", alias: Some("RSA+SHA1"), code: 0x0201, versions: TLS12 },
    Builtin { name: "dsa_sha256", alias: Some("DSA+SHA256"), code: 0x0402, versions: TLS12 },
    Builtin { name: "dsa_sha384", alias: Some("DSA+SHA384"), code: 0x0502, versions: TLS12 },
    Builtin { name: "dsa_sha512", alias: Some("DSA+SHA512"), code: 0x0602, versions: TLS12 },
    Builtin { name: "dsa_sha224", alias: Some("DSA+SHA224"), code: 0x0302, versions: TLS12 },
    Builtin { name: "dsa_sha1", alias: Some("DSA+SHA1"), code: 0x0202, versions: TLS12 },
];

/// The names in libssl's built-in table that this build enables (SSL_get1_builtin_sigalgs).
pub fn builtin_sigalg_names() -> Vec<String> {
    let text = unsafe {
        let p = SSL_get1_builtin_sigalgs(std::ptr::null_mut());
        let s = cstr(p);
        if !p.is_null() {
            CRYPTO_free(p as *mut c_void, c"caps.rs".as_ptr(), line!() as c_int);
        }
        s
    };
    text.split(':')
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect()
}

pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTIN_SIGALGS
        .iter()
        .find(|b| b.name.eq_ignore_ascii_case(name))
}

// ---------------------------------------------------------------------------------------
// Name -> code tables for `negotiated`.

/// Group and signature scheme code points by name (lower case), built once per process
/// from the library's own tables (no handshake is made for them).
pub struct Codes {
    groups: HashMap<String, u16>,
    sigalgs: HashMap<String, u16>,
    /// Names that mapped to two different codes (must stay empty; see the tests).
    pub conflicts: Vec<String>,
}

impl Codes {
    fn build() -> Codes {
        let mut c = Codes {
            groups: HashMap::new(),
            sigalgs: HashMap::new(),
            conflicts: Vec::new(),
        };
        // libssl finds a group by its TLS name or its internal name, first entry first
        // (tls1_group_name2id), and reports the TLS name (tls1_group_id2name): "P-256" and
        // "secp256r1" share 23, and "brainpoolP256r1" is 26 although it is also the internal
        // name of brainpoolP256r1tls13 (31). The capability lists groups in libssl's order.
        for g in capabilities(c"TLS-GROUP") {
            let Some(id) = u16_of(&g, "id") else { continue };
            Self::insert(
                &mut c.groups,
                &mut c.conflicts,
                text_of(&g, "name"),
                id,
                true,
            );
            Self::insert(
                &mut c.groups,
                &mut c.conflicts,
                text_of(&g, "name_internal"),
                id,
                false,
            );
        }
        for b in BUILTIN_SIGALGS {
            Self::insert(&mut c.sigalgs, &mut c.conflicts, b.name, b.code, true);
            if let Some(a) = b.alias {
                Self::insert(&mut c.sigalgs, &mut c.conflicts, a, b.code, false);
            }
        }
        for s in capabilities(c"TLS-SIGALG") {
            let Some(code) = u16_of(&s, "code_point") else {
                continue;
            };
            // libssl reports the IANA name and also accepts the algorithm name.
            Self::insert(
                &mut c.sigalgs,
                &mut c.conflicts,
                text_of(&s, "iana_name"),
                code,
                true,
            );
            Self::insert(
                &mut c.sigalgs,
                &mut c.conflicts,
                text_of(&s, "name"),
                code,
                false,
            );
        }
        c
    }

    /// First entry wins, as in libssl. A reported name (`reported`: the name libssl gives
    /// back for a negotiated code) that already means another code is a conflict.
    fn insert(
        map: &mut HashMap<String, u16>,
        conflicts: &mut Vec<String>,
        name: &str,
        code: u16,
        reported: bool,
    ) {
        if name.is_empty() {
            return;
        }
        let key = name.to_ascii_lowercase();
        match map.get(&key) {
            Some(&old) if old != code && reported => {
                conflicts.push(format!("{name}: {old:#06x} and {code:#06x}"))
            }
            Some(_) => {}
            None => {
                map.insert(key, code);
            }
        }
    }

    pub fn group(&self, name: &str) -> Option<u16> {
        self.groups.get(&name.to_ascii_lowercase()).copied()
    }

    pub fn sigalg(&self, name: &str) -> Option<u16> {
        self.sigalgs.get(&name.to_ascii_lowercase()).copied()
    }
}

pub fn codes() -> &'static Codes {
    static CODES: OnceLock<Codes> = OnceLock::new();
    CODES.get_or_init(Codes::build)
}

// ---------------------------------------------------------------------------------------
// What libssl puts in a ClientHello.

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
pub fn client_hello(groups: &str, sigalgs: Option<&str>, tls12_only: bool) -> Result<Vec<u8>> {
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

/// The body of extension `wanted` in a ClientHello record, if present. Never panics on
/// malformed input: every length is checked against the buffer.
pub fn hello_extension(record: &[u8], wanted: u16) -> Option<Vec<u8>> {
    let u16_at = |i: usize| -> Option<usize> {
        Some(u16::from_be_bytes([*record.get(i)?, *record.get(i.checked_add(1)?)?]) as usize)
    };
    // record header (5), handshake header (4), legacy_version (2), random (32)
    if record.first() != Some(&22) || record.get(5) != Some(&1) {
        return None;
    }
    let mut i: usize = 5 + 4 + 2 + 32;
    i = i.checked_add(1 + *record.get(i)? as usize)?; // session id
    i = i.checked_add(2 + u16_at(i)?)?; // cipher suites
    i = i.checked_add(1 + *record.get(i)? as usize)?; // compression methods
    let end = i.checked_add(2 + u16_at(i)?)?;
    i += 2;
    while i.checked_add(4)? <= end {
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
pub fn code_points(ext: &[u8]) -> Vec<u16> {
    ext.get(2..)
        .unwrap_or_default()
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect()
}

pub const EXT_SUPPORTED_GROUPS: u16 = 10;
pub const EXT_SIGNATURE_ALGORITHMS: u16 = 13;

/// The code points libssl actually puts on the wire for a group / signature scheme name
/// (empty when libssl refuses the name or offers nothing for it).
pub fn wire_code_points(groups: &str, sigalgs: Option<&str>, tls12_only: bool) -> Vec<u16> {
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

fn tls12_only(entry: &Map<String, Value>) -> bool {
    // max_tls 771 = TLS 1.2 (0 = no maximum)
    entry.get("max_tls").and_then(Value::as_i64) == Some(0x0303)
}

/// TLS groups from the providers' TLS-GROUP capability, each with the code point libssl
/// sends in a ClientHello offering only that group (info's `openssl.tls_groups`).
pub fn tls_groups_json() -> Vec<Value> {
    capabilities(c"TLS-GROUP")
        .into_iter()
        .map(|mut g| {
            let name = text_of(&g, "name").to_owned();
            let wire = wire_code_points(&name, None, tls12_only(&g));
            g.insert("wire_id".into(), json!(wire));
            Value::Object(g)
        })
        .collect()
}

/// TLS signature schemes: libssl's built-in table and the providers' TLS-SIGALG capability,
/// each with the code point libssl sends in a ClientHello offering only that scheme
/// (info's `openssl.tls_sigalgs`).
pub fn tls_sigalgs_json() -> Vec<Value> {
    let mut out = Vec::new();
    for name in builtin_sigalg_names() {
        out.push(json!({
            "iana_name": name,
            "code_point": builtin(&name).map(|b| b.code),
            "source": "libssl",
            "wire_code_point": wire_code_points("X25519", Some(&name), false),
        }));
    }
    for mut s in capabilities(c"TLS-SIGALG") {
        let name = text_of(&s, "iana_name").to_owned();
        s.insert("source".into(), json!("provider"));
        s.insert(
            "wire_code_point".into(),
            json!(wire_code_points("X25519", Some(&name), false)),
        );
        out.push(Value::Object(s));
    }
    out
}

/// Check a table code against the ClientHello: Ok(false) when libssl offers nothing for
/// the name (not negotiable in this build), an error when it offers another code.
fn on_the_wire(what: &str, name: &str, code: u16, wire: &[u16]) -> Result<bool> {
    match wire {
        [] => Ok(false),
        [w] if *w == code => Ok(true),
        _ => crate::bail!(
            Library,
            "{what} {name}: libssl's table says {code:#06x} but its ClientHello carries {wire:04x?}"
        ),
    }
}

/// Every group libssl would negotiate, with its code (checked against the ClientHello).
pub fn groups() -> Result<Vec<NamedCode>> {
    let mut out = Vec::new();
    for g in capabilities(c"TLS-GROUP") {
        let name = text_of(&g, "name");
        let Some(code) = u16_of(&g, "id") else {
            continue;
        };
        let versions = versions_between(&g);
        if name.is_empty() || versions.is_empty() {
            continue;
        }
        let wire = wire_code_points(name, None, tls12_only(&g));
        if on_the_wire("group", name, code, &wire)? {
            out.push(NamedCode {
                name: name.to_string(),
                code,
                versions,
            });
        }
    }
    Ok(out)
}

/// Every signature scheme libssl would negotiate, with its code (checked against the
/// ClientHello).
pub fn sigalgs() -> Result<Vec<NamedCode>> {
    let mut out = Vec::new();
    for name in builtin_sigalg_names() {
        let Some(b) = builtin(&name) else {
            crate::bail!(
                Library,
                "libssl has a built-in signature scheme {name:?} this engine has no code point for"
            );
        };
        let wire = wire_code_points("X25519", Some(&name), false);
        if on_the_wire("signature scheme", &name, b.code, &wire)? {
            out.push(NamedCode {
                name,
                code: b.code,
                versions: b.versions.to_vec(),
            });
        }
    }
    for s in capabilities(c"TLS-SIGALG") {
        let name = text_of(&s, "iana_name");
        let Some(code) = u16_of(&s, "code_point") else {
            continue;
        };
        let versions = versions_between(&s);
        if name.is_empty() || versions.is_empty() {
            continue;
        }
        let wire = wire_code_points("X25519", Some(name), false);
        if on_the_wire("signature scheme", name, code, &wire)? {
            out.push(NamedCode {
                name: name.to_string(),
                code,
                versions,
            });
        }
    }
    Ok(out)
}

/// The key spec (`tls certs` syntax) whose certificates a signature scheme signs with.
pub fn key_spec_for_sigalg(name: &str) -> Option<String> {
    if let Some(b) = builtin(name) {
        let spec = match b.name {
            "ecdsa_secp256r1_sha256" => "EC:P-256",
            "ecdsa_secp384r1_sha384" => "EC:P-384",
            "ecdsa_secp521r1_sha512" => "EC:P-521",
            "ed25519" => "ED25519",
            "ed448" => "ED448",
            n if n.starts_with("rsa_pss_rsae_") || n.starts_with("rsa_pkcs1_") => "RSA",
            n if n.starts_with("rsa_pss_pss_") => "RSA-PSS",
            // ecdsa_sha1/sha224 sign with any curve (covered above); brainpool curves and
            // DSA keys are not made by `tls certs`.
            _ => return None,
        };
        return Some(spec.to_string());
    }
    // Provider schemes name their key type (TLS-SIGALG keytype, else the algorithm name).
    capabilities(c"TLS-SIGALG")
        .into_iter()
        .find(|s| text_of(s, "iana_name").eq_ignore_ascii_case(name))
        .map(|s| {
            let kt = text_of(&s, "keytype");
            if kt.is_empty() {
                text_of(&s, "name").to_string()
            } else {
                kt.to_string()
            }
        })
        .filter(|k| !k.is_empty())
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
    fn every_builtin_scheme_has_the_code_libssl_sends() {
        let names = builtin_sigalg_names();
        assert!(names.len() >= 20, "{names:?}");
        for name in &names {
            let b = builtin(name).unwrap_or_else(|| panic!("no code point for {name}"));
            let wire = wire_code_points("X25519", Some(name), false);
            assert_eq!(wire, [b.code], "{name}");
            if let Some(alias) = b.alias {
                assert_eq!(
                    wire_code_points("X25519", Some(alias), false),
                    [b.code],
                    "{alias}"
                );
            }
        }
    }

    #[test]
    fn every_group_and_provider_scheme_code_is_what_libssl_sends() {
        let groups = groups().unwrap();
        assert!(groups
            .iter()
            .any(|g| g.name == "X25519MLKEM768" && g.code == 0x11ec));
        assert!(groups.iter().any(|g| g.name == "P-256" && g.code == 23));
        assert!(groups.iter().any(|g| g.name == "secp256r1" && g.code == 23));
        for g in &groups {
            assert_eq!(codes().group(&g.name), Some(g.code), "{}", g.name);
        }
        let sigalgs = sigalgs().unwrap();
        assert!(sigalgs
            .iter()
            .any(|s| s.name == "mldsa44" && s.code == 0x0904));
        for s in &sigalgs {
            assert_eq!(codes().sigalg(&s.name), Some(s.code), "{}", s.name);
        }
        // TLS 1.2-only groups are probed with a TLS 1.2 ClientHello and listed as 1.2.
        let bp = groups.iter().find(|g| g.name == "brainpoolP256r1").unwrap();
        assert_eq!((bp.code, bp.versions.as_slice()), (26, &["1.2"][..]));
        let ml = groups.iter().find(|g| g.name == "MLKEM768").unwrap();
        assert_eq!(ml.versions, ["1.3"]);
    }

    #[test]
    fn no_name_maps_to_two_codes() {
        assert!(codes().conflicts.is_empty(), "{:?}", codes().conflicts);
        // Aliases and case: what libssl reports and what users type.
        assert_eq!(codes().group("x25519"), Some(29));
        assert_eq!(codes().group("X25519"), Some(29));
        assert_eq!(codes().group("prime256v1"), Some(23));
        assert_eq!(codes().sigalg("ML-DSA-65"), Some(0x0905));
        assert_eq!(codes().sigalg("PSS+SHA256"), Some(0x0804));
        assert_eq!(codes().group("no-such-group"), None);
    }

    mod properties {
        //! The ClientHello extension parser on malformed input: no panic, and what it
        //! returns is bytes of its input.
        use super::super::*;
        use proptest::prelude::*;
        use std::sync::OnceLock;

        fn real_hello() -> &'static [u8] {
            static H: OnceLock<Vec<u8>> = OnceLock::new();
            H.get_or_init(|| client_hello("x25519:X25519MLKEM768", None, false).unwrap())
        }

        fn contains(hay: &[u8], needle: &[u8]) -> bool {
            needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..700), ext in any::<u16>()) {
                if let Some(e) = hello_extension(&bytes, ext) {
                    prop_assert!(contains(&bytes, &e));
                }
            }

            #[test]
            fn damaged_client_hellos(
                edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
                cut in any::<usize>(),
                ext in prop::sample::select(vec![EXT_SUPPORTED_GROUPS, EXT_SIGNATURE_ALGORITHMS, 43, 51]),
            ) {
                let mut h = real_hello().to_vec();
                for (at, v) in edits {
                    let i = at % h.len();
                    h[i] = v;
                }
                h.truncate(cut % (h.len() + 1));
                if let Some(e) = hello_extension(&h, ext) {
                    prop_assert!(contains(&h, &e));
                    let _ = code_points(&e);
                }
            }
        }
    }
}
