//! The wolfSSL TLS stack (wolfSSL, GPL-2.0-or-later, built by scripts/build-wolfssl.sh):
//! TLS 1.3 with X25519, the NIST curves, X448, ML-KEM alone and in the IANA hybrids;
//! RSA-PSS, ECDSA, EdDSA and ML-DSA signers. Every byte goes through the engine's `Wire`
//! (wolfSSL's I/O callbacks, src/shim.c), so the engine counts it and reads its record
//! headers; key logs come from wolfSSL's secret callback.

use pqlab_engine::out::{Error, Result};
use pqlab_engine::tls::record::Negotiated;
use pqlab_engine::tls::stack::{
    ClientContext, ClientSetup, Framing, Handshake, HeapCounting, KeyShares, Limits, NamedCode,
    Protocol, ReadOutcome, ServerContext, ServerName, ServerSetup, Session, Stack, StackInfo,
    TlsVersion, Verification, VerifyMode, WriteModel, Writes,
};
use pqlab_engine::tls::transport::tcp::Wire;
use std::ffi::{c_char, c_int, c_long, c_ulong, c_void, CStr, CString};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, Once};

#[repr(C)]
struct Ctx {
    _opaque: [u8; 0],
}

#[repr(C)]
struct Ssl {
    _opaque: [u8; 0],
}

const SUCCESS: c_int = 1;
const FILETYPE_PEM: c_int = 1;
const SNI_HOST_NAME: u8 = 0;

extern "C" {
    fn wolfSSL_Init() -> c_int;
    fn wolfSSL_CTX_free(ctx: *mut Ctx);
    fn wolfSSL_CTX_use_certificate_chain_file(ctx: *mut Ctx, file: *const c_char) -> c_int;
    fn wolfSSL_CTX_use_PrivateKey_file(ctx: *mut Ctx, file: *const c_char, format: c_int) -> c_int;
    fn wolfSSL_CTX_load_verify_locations(
        ctx: *mut Ctx,
        file: *const c_char,
        path: *const c_char,
    ) -> c_int;
    fn wolfSSL_CTX_set_groups(ctx: *mut Ctx, groups: *mut c_int, count: c_int) -> c_int;
    fn wolfSSL_CTX_set1_sigalgs_list(ctx: *mut Ctx, list: *const c_char) -> c_int;
    fn wolfSSL_CTX_set_cipher_list(ctx: *mut Ctx, list: *const c_char) -> c_int;
    fn wolfSSL_new(ctx: *mut Ctx) -> *mut Ssl;
    fn wolfSSL_free(ssl: *mut Ssl);
    fn wolfSSL_UseKeyShare(ssl: *mut Ssl, group: u16) -> c_int;
    fn wolfSSL_UseSNI(ssl: *mut Ssl, kind: u8, data: *const c_void, size: u16) -> c_int;
    fn wolfSSL_check_domain_name(ssl: *mut Ssl, name: *const c_char) -> c_int;
    fn wolfSSL_check_ip_address(ssl: *mut Ssl, ip: *const c_char) -> c_int;
    fn wolfSSL_get_servername(ssl: *mut Ssl, kind: u8) -> *const c_char;
    fn wolfSSL_connect(ssl: *mut Ssl) -> c_int;
    fn wolfSSL_accept(ssl: *mut Ssl) -> c_int;
    fn wolfSSL_get_error(ssl: *mut Ssl, ret: c_int) -> c_int;
    fn wolfSSL_ERR_reason_error_string(e: c_ulong) -> *const c_char;
    fn wolfSSL_read(ssl: *mut Ssl, buf: *mut c_void, sz: c_int) -> c_int;
    fn wolfSSL_write(ssl: *mut Ssl, buf: *const c_void, sz: c_int) -> c_int;
    fn wolfSSL_shutdown(ssl: *mut Ssl) -> c_int;
    fn wolfSSL_get_verify_result(ssl: *const Ssl) -> c_long;
    fn wolfSSL_get_version(ssl: *const Ssl) -> *const c_char;

    fn pqlab_wolf_version() -> *const c_char;
    fn pqlab_wolf_count_allocations(
        m: unsafe extern "C" fn(usize) -> *mut c_void,
        f: unsafe extern "C" fn(*mut c_void),
        r: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    ) -> c_int;
    fn pqlab_wolf_ctx_new(server: c_int, keylog: c_int) -> *mut Ctx;
    fn pqlab_wolf_full_handshakes(ctx: *mut Ctx, server: c_int);
    fn pqlab_wolf_verify(ctx: *mut Ctx, require_peer_cert: c_int);
    fn pqlab_wolf_set_wire(ssl: *mut Ssl, wire: *mut c_void);
    fn pqlab_wolf_err_zero_return(err: c_int) -> c_int;
    fn pqlab_wolf_group_code(ssl: *mut Ssl) -> c_int;
    fn pqlab_wolf_sig_code(ssl: *mut Ssl, peer: c_int) -> c_int;
    fn pqlab_wolf_cipher_code(ssl: *mut Ssl) -> c_int;
    fn pqlab_wolf_cipher_iana(ssl: *mut Ssl) -> *const c_char;
    fn pqlab_wolf_peer_chain_count(ssl: *mut Ssl) -> c_int;
    fn pqlab_wolf_peer_chain_length(ssl: *mut Ssl, i: c_int) -> c_int;
    fn pqlab_wolf_peer_chain_der(ssl: *mut Ssl, i: c_int) -> *const u8;
    fn pqlab_wolf_verify_report(ctx: *mut Ctx);
    fn pqlab_wolf_take_report_failure() -> c_int;
    fn pqlab_wolf_verify_error_string(err: c_int) -> *const c_char;
}

fn init() {
    static ONCE: Once = Once::new();
    // SAFETY: called once, before any other wolfSSL call: every block wolfSSL ever allocates
    // comes from the counting callbacks and goes back to them.
    ONCE.call_once(|| unsafe {
        let counted = pqlab_wolf_count_allocations(
            pqlab_engine::heap::library_malloc,
            pqlab_engine::heap::library_free,
            pqlab_engine::heap::library_realloc,
        );
        assert_eq!(
            counted, 0,
            "wolfSSL_SetAllocators refused the counting callbacks"
        );
        wolfSSL_Init();
    });
}

fn c_text(p: *const c_char) -> Option<String> {
    // SAFETY: wolfSSL returns NUL-terminated static strings or null.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn cstring(text: &str, what: &str) -> Result<CString> {
    CString::new(text).map_err(|_| pqlab_engine::err!(Usage, "{what}: a NUL byte in {text:?}"))
}

fn path_c(path: &Path, what: &str) -> Result<CString> {
    cstring(&path.to_string_lossy(), what)
}

// --- what the stack carries -------------------------------------------------------------

/// The groups the stack offers, by the names `--groups` takes and their IANA codes.
const GROUPS: &[(&str, u16)] = &[
    ("x25519", 29),
    ("secp256r1", 23),
    ("secp384r1", 24),
    ("secp521r1", 25),
    ("x448", 30),
    ("MLKEM512", 0x0200),
    ("MLKEM768", 0x0201),
    ("MLKEM1024", 0x0202),
    ("X25519MLKEM768", 0x11ec),
    ("SecP256r1MLKEM768", 0x11eb),
    ("SecP384r1MLKEM1024", 0x11ed),
];

/// Signature schemes: name, code, and wolfSSL's sigalgs-list entry where it has one (for
/// `--sigalgs`; wolfSSL's list has no ML-DSA entry: a key of one ML-DSA set signs with that
/// set's scheme only).
const SIGALGS: &[(&str, u16, Option<&str>)] = &[
    ("ecdsa_secp256r1_sha256", 0x0403, Some("ECDSA+SHA256")),
    ("ecdsa_secp384r1_sha384", 0x0503, Some("ECDSA+SHA384")),
    ("ecdsa_secp521r1_sha512", 0x0603, Some("ECDSA+SHA512")),
    ("rsa_pss_rsae_sha256", 0x0804, Some("RSA-PSS+SHA256")),
    ("rsa_pss_rsae_sha384", 0x0805, Some("RSA-PSS+SHA384")),
    ("rsa_pss_rsae_sha512", 0x0806, Some("RSA-PSS+SHA512")),
    ("ed25519", 0x0807, Some("ED25519")),
    ("ed448", 0x0808, Some("ED448")),
    ("mldsa44", 0x0904, None),
    ("mldsa65", 0x0905, None),
    ("mldsa87", 0x0906, None),
];

const KEY_TYPES: &[&str] = &[
    "RSA:2048",
    "RSA:3072",
    "RSA:4096",
    "EC:P-256",
    "EC:P-384",
    "EC:P-521",
    "ED25519",
    "ED448",
    "ML-DSA-44",
    "ML-DSA-65",
    "ML-DSA-87",
];

const SUITES: &[(&str, u16, &str)] = &[
    ("TLS_AES_128_GCM_SHA256", 0x1301, "TLS13-AES128-GCM-SHA256"),
    ("TLS_AES_256_GCM_SHA384", 0x1302, "TLS13-AES256-GCM-SHA384"),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        0x1303,
        "TLS13-CHACHA20-POLY1305-SHA256",
    ),
];

fn group(name: &str) -> Option<u16> {
    GROUPS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, c)| *c)
}

fn group_name(code: u16) -> Option<&'static str> {
    GROUPS.iter().find(|(_, c)| *c == code).map(|(n, _)| *n)
}

fn sigalg(name: &str) -> Option<&'static (&'static str, u16, Option<&'static str>)> {
    SIGALGS
        .iter()
        .find(|(n, _, _)| n.eq_ignore_ascii_case(name))
}

fn sigalg_name(code: u16) -> Option<&'static str> {
    SIGALGS
        .iter()
        .find(|(_, c, _)| *c == code)
        .map(|(n, _, _)| *n)
}

// --- key logs ---------------------------------------------------------------------------

static KEYLOG: Mutex<Option<pqlab_engine::secrets::KeyLog>> = Mutex::new(None);

/// One SSLKEYLOGFILE line from wolfSSL's secret callback (src/shim.c).
#[no_mangle]
extern "C" fn pqlab_wolf_keylog(line: *const c_char) {
    let Some(line) = c_text(line) else { return };
    if let Ok(log) = KEYLOG.lock() {
        if let Some(log) = log.as_ref() {
            log.log(&line);
        }
    }
}

// --- I/O through the Wire ------------------------------------------------------------------

thread_local! {
    /// The last socket error of this thread's connection, for the error report.
    static IO_ERROR: std::cell::RefCell<Option<std::io::Error>> = const { std::cell::RefCell::new(None) };
}

fn io_result(r: std::io::Result<usize>) -> c_int {
    match r {
        Ok(n) => n as c_int,
        Err(e) => {
            let timeout = e.kind() == std::io::ErrorKind::TimedOut;
            IO_ERROR.with(|s| *s.borrow_mut() = Some(e));
            if timeout {
                -2
            } else {
                -1
            }
        }
    }
}

#[no_mangle]
extern "C" fn pqlab_wolf_read(wire: *mut c_void, buf: *mut c_char, sz: c_int) -> c_int {
    // SAFETY: `wire` is the boxed Wire of the connection (set with pqlab_wolf_set_wire and
    // alive as long as its WOLFSSL); `buf` has `sz` writable bytes.
    let (wire, buf) = unsafe {
        (
            &mut *(wire as *mut Wire),
            std::slice::from_raw_parts_mut(buf as *mut u8, sz.max(0) as usize),
        )
    };
    io_result(wire.read(buf))
}

#[no_mangle]
extern "C" fn pqlab_wolf_write(wire: *mut c_void, buf: *const c_char, sz: c_int) -> c_int {
    // SAFETY: as in pqlab_wolf_read; `buf` has `sz` readable bytes.
    let (wire, buf) = unsafe {
        (
            &mut *(wire as *mut Wire),
            std::slice::from_raw_parts(buf as *const u8, sz.max(0) as usize),
        )
    };
    io_result(wire.write(buf))
}

// --- contexts ------------------------------------------------------------------------------

struct CtxPtr(*mut Ctx);
// SAFETY: a WOLFSSL_CTX is shared by the connections of several threads once configured;
// wolfSSL guards its mutable parts (its reference count) itself.
unsafe impl Send for CtxPtr {}
unsafe impl Sync for CtxPtr {}

impl Drop for CtxPtr {
    fn drop(&mut self) {
        // SAFETY: we own the context.
        unsafe { wolfSSL_CTX_free(self.0) }
    }
}

fn configure(server: bool, p: &Protocol) -> Result<CtxPtr> {
    init();
    if p.version != TlsVersion::Tls13 {
        pqlab_engine::bail!(
            Usage,
            "--tls-version: the wolfssl stack runs TLS 1.3 only here"
        );
    }
    if let Some(path) = &p.keylog {
        // Checked now, created when the first secret comes (`secrets::KeyLog`).
        let log = pqlab_engine::secrets::KeyLog::new(path).map_err(|e| e.context("--keylog"))?;
        *KEYLOG.lock().expect("keylog") = Some(log);
    }
    // SAFETY: a new context; null on failure.
    let ctx = unsafe { pqlab_wolf_ctx_new(server as c_int, p.keylog.is_some() as c_int) };
    if ctx.is_null() {
        pqlab_engine::bail!(Library, "wolfSSL_CTX_new failed");
    }
    let ctx = CtxPtr(ctx);
    // SAFETY: the context is valid.
    unsafe { pqlab_wolf_full_handshakes(ctx.0, server as c_int) };
    if let Some(names) = &p.groups {
        let mut codes = names
            .iter()
            .map(|n| {
                group(n).map(c_int::from).ok_or_else(|| {
                    pqlab_engine::err!(
                        Usage,
                        "--groups {n:?} is not a group of the wolfssl stack; it has: {}",
                        GROUPS.iter().map(|g| g.0).collect::<Vec<_>>().join(", ")
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // SAFETY: `codes` outlives the call.
        if unsafe { wolfSSL_CTX_set_groups(ctx.0, codes.as_mut_ptr(), codes.len() as c_int) }
            != SUCCESS
        {
            pqlab_engine::bail!(Library, "wolfSSL refused the groups {names:?}");
        }
    }
    if let Some(names) = &p.sigalgs {
        let mut list = Vec::new();
        for n in names {
            let (_, _, entry) = sigalg(n).ok_or_else(|| {
                pqlab_engine::err!(
                    Usage,
                    "--sigalgs {n:?} is not a signature scheme of the wolfssl stack; it has: {}",
                    SIGALGS.iter().map(|s| s.0).collect::<Vec<_>>().join(", ")
                )
            })?;
            list.extend(*entry);
        }
        // Only a server's own schemes are restricted, and only those wolfSSL's list names
        // (ML-DSA follows the key). A client's list also decides which certificate
        // signatures it accepts, and it cannot name ML-DSA: a client checks the scheme
        // after the handshake instead (the engine's expectation check).
        if server && !list.is_empty() && list.len() == names.len() {
            let text = cstring(&list.join(":"), "--sigalgs")?;
            // SAFETY: valid context and string.
            if unsafe { wolfSSL_CTX_set1_sigalgs_list(ctx.0, text.as_ptr()) } != SUCCESS {
                pqlab_engine::bail!(Library, "wolfSSL refused the sigalgs {list:?}");
            }
        }
    }
    if let Some(suites) = &p.ciphersuites {
        let mut list = Vec::new();
        for s in suites {
            let (_, _, wolf) = SUITES.iter().find(|(n, _, _)| n == s).ok_or_else(|| {
                pqlab_engine::err!(
                    Usage,
                    "--ciphersuites {s:?} is not a TLS 1.3 suite of wolfssl"
                )
            })?;
            list.push(*wolf);
        }
        let text = cstring(&list.join(":"), "--ciphersuites")?;
        // SAFETY: valid context and string.
        if unsafe { wolfSSL_CTX_set_cipher_list(ctx.0, text.as_ptr()) } != SUCCESS {
            pqlab_engine::bail!(Library, "wolfSSL refused the suites {list:?}");
        }
    }
    Ok(ctx)
}

fn load_identity(ctx: &CtxPtr, chain: &Path, key: &Path) -> Result<()> {
    let c = path_c(chain, "--cert-chain")?;
    let k = path_c(key, "--key")?;
    // SAFETY: valid context and paths.
    unsafe {
        if wolfSSL_CTX_use_certificate_chain_file(ctx.0, c.as_ptr()) != SUCCESS {
            pqlab_engine::bail!(
                Usage,
                "--cert-chain {}: wolfSSL cannot use these certificates",
                chain.display()
            );
        }
        if wolfSSL_CTX_use_PrivateKey_file(ctx.0, k.as_ptr(), FILETYPE_PEM) != SUCCESS {
            pqlab_engine::bail!(
                Usage,
                "--key {}: wolfSSL cannot use this key",
                key.display()
            );
        }
    }
    Ok(())
}

fn load_roots(ctx: &CtxPtr, ca: &Path, flag: &str) -> Result<()> {
    let c = path_c(ca, flag)?;
    // SAFETY: valid context and path.
    if unsafe { wolfSSL_CTX_load_verify_locations(ctx.0, c.as_ptr(), std::ptr::null()) } != SUCCESS
    {
        pqlab_engine::bail!(
            Usage,
            "{flag} {}: wolfSSL cannot load these roots",
            ca.display()
        );
    }
    Ok(())
}

/// wolfSSL's own programs, built beside the library by scripts/build-wolfssl.sh (their
/// directory is fixed when this program is built): its TLS benchmark and wolfCrypt's, the
/// example server and client with the memory tracker and stack-size check, and the TLS
/// benchmark without the post-quantum algorithms (for its binary size).
const TOOLS: &[(&str, &str)] = &[
    ("tls_bench", "bin/tls_bench"),
    ("wolfcrypt_benchmark", "bin/benchmark"),
    ("memory_server", "memory/bin/server"),
    ("memory_client", "memory/bin/client"),
    ("tls_bench_no_pq", "no-pq/bin/tls_bench"),
];

fn tools() -> std::collections::BTreeMap<&'static str, String> {
    let dir = Path::new(env!("PQLAB_WOLFSSL_DIR"));
    TOOLS
        .iter()
        .map(|(name, rel)| (*name, dir.join(rel)))
        .filter(|(_, path)| path.is_file())
        .map(|(name, path)| (name, path.to_string_lossy().into_owned()))
        .collect()
}

pub struct WolfSsl;
pub static WOLFSSL: WolfSsl = WolfSsl;

struct Server {
    ctx: CtxPtr,
    client_auth: bool,
}

struct Client {
    ctx: CtxPtr,
    identity: bool,
    /// The groups the ClientHello carries key shares for: `--key-shares`, or else the first
    /// group asked for, so the handshake takes no extra round trip for a HelloRetryRequest.
    key_shares: Vec<u16>,
    /// `--verify report`: the chain's verification is noted, not enforced.
    report: bool,
}

impl Stack for WolfSsl {
    fn name(&self) -> &'static str {
        "wolfssl"
    }

    fn reports_messages(&self) -> bool {
        false
    }

    fn server(&self, setup: &ServerSetup) -> Result<Arc<dyn ServerContext>> {
        if setup.dh_bits.is_some() || setup.dh_params.is_some() {
            pqlab_engine::bail!(
                Usage,
                "--dh-bits/--dh-params: TLS 1.2 DHE is not run on wolfssl"
            );
        }
        let ctx = configure(true, &setup.protocol)?;
        load_identity(&ctx, &setup.cert_chain, &setup.key)?;
        if let Some(auth) = &setup.client_auth {
            load_roots(&ctx, &auth.ca, "--client-ca")?;
        }
        // SAFETY: valid context.
        unsafe { pqlab_wolf_verify(ctx.0, setup.client_auth.is_some() as c_int) };
        Ok(Arc::new(Server {
            ctx,
            client_auth: setup.client_auth.is_some(),
        }))
    }

    fn client(&self, setup: &ClientSetup) -> Result<Box<dyn ClientContext>> {
        let ctx = configure(false, &setup.protocol)?;
        load_roots(&ctx, &setup.ca, "--ca")?;
        if let Some(id) = &setup.identity {
            load_identity(&ctx, &id.cert_chain, &id.key)?;
        }
        let report = setup.protocol.verify == VerifyMode::Report;
        // SAFETY: valid context.
        unsafe {
            if report {
                pqlab_wolf_verify_report(ctx.0)
            } else {
                pqlab_wolf_verify(ctx.0, 1)
            }
        };
        let p = &setup.protocol;
        let key_shares = match &p.key_shares {
            Some(names) => names.iter().filter_map(|n| group(n)).collect(),
            None => p
                .groups
                .iter()
                .flatten()
                .take(1)
                .filter_map(|n| group(n))
                .collect(),
        };
        Ok(Box::new(Client {
            ctx,
            identity: setup.identity.is_some(),
            key_shares,
            report,
        }))
    }

    fn group_code(&self, name: &str) -> Option<u16> {
        group(name)
    }

    fn sigalg_code(&self, name: &str) -> Option<u16> {
        sigalg(name).map(|s| s.1)
    }

    fn describe(&self) -> Result<StackInfo> {
        init();
        let v13 = vec!["1.3"];
        // Listed only what this build takes: each group tried on a context of its own.
        let groups = GROUPS
            .iter()
            .filter(|(_, code)| {
                // SAFETY: a throwaway context, freed by CtxPtr.
                let ctx = CtxPtr(unsafe { pqlab_wolf_ctx_new(0, 0) });
                let mut one = [c_int::from(*code)];
                !ctx.0.is_null()
                    && unsafe { wolfSSL_CTX_set_groups(ctx.0, one.as_mut_ptr(), 1) } == SUCCESS
            })
            .map(|(name, code)| NamedCode {
                name: name.to_string(),
                code: *code,
                versions: v13.clone(),
            })
            .collect();
        Ok(StackInfo {
            name: self.name(),
            implementation: format!(
                "wolfSSL {}",
                c_text(unsafe { pqlab_wolf_version() }).unwrap_or_default()
            ),
            message_events: false,
            groups,
            sigalgs: SIGALGS
                .iter()
                .map(|(name, code, _)| NamedCode {
                    name: name.to_string(),
                    code: *code,
                    versions: v13.clone(),
                })
                .collect(),
            cipher_suites: SUITES
                .iter()
                .map(|(name, code, _)| NamedCode {
                    name: name.to_string(),
                    code: *code,
                    versions: v13.clone(),
                })
                .collect(),
            cert_key_types: KEY_TYPES.iter().map(|s| s.to_string()).collect(),
            ca_key_types: KEY_TYPES.iter().map(|s| s.to_string()).collect(),
            limits: Limits::default(),
            write_model: WriteModel {
                kind: Writes::Record,
                buffer_bytes: None,
                records: Framing::Message,
            },
            server_name_ack: false,
            change_cipher_spec: false,
            // wolfSSL_UseKeyShare, once per group.
            key_shares: KeyShares::Any,
            key_share_companions: Vec::new(),
            build_options: env!("PQLAB_WOLFSSL_OPTIONS")
                .split("\\n")
                .map(String::from)
                .collect(),
            heap_counting: self.heap_counting(),
            fixed_random: self.fixed_random(),
            tools: tools(),
        })
    }

    fn heap_counting(&self) -> HeapCounting {
        HeapCounting::LibraryAllocators("wolfssl")
    }
}

impl ServerContext for Server {
    fn security_level(&self) -> Option<u32> {
        None
    }

    fn start(&self, wire: Wire) -> Result<Box<dyn Handshake>> {
        Pending::start(&self.ctx, wire, true, self.client_auth, None, &[], false)
    }
}

impl ClientContext for Client {
    fn security_level(&self) -> Option<u32> {
        None
    }

    fn start(&self, wire: Wire, name: &ServerName) -> Result<Box<dyn Handshake>> {
        Pending::start(
            &self.ctx,
            wire,
            false,
            self.identity,
            Some(name),
            &self.key_shares,
            self.report,
        )
    }
}

/// wolfSSL's errors (wolfssl/error-ssl.h) for bytes from the peer that TLS does not allow:
/// records that are not TLS or too long, malformed or unexpected messages and extensions,
/// records that do not decrypt. The peer misbehaved; wolfSSL did not refuse by itself.
const MALFORMED: [c_int; 24] = [
    -305, // VERIFY_MAC_ERROR
    -306, // PARSE_ERROR
    -307, // UNKNOWN_HANDSHAKE_TYPE
    -311, // UNKNOWN_RECORD_TYPE
    -312, // DECRYPT_ERROR
    -321, // BAD_HELLO
    -326, // VERSION_ERROR
    -328, // BUFFER_ERROR
    -341, // LENGTH_ERROR
    -345, // NO_PEER_CERT
    -373, // OUT_OF_ORDER_E
    -394, // SANITY_MSG_E
    -395, // DUPLICATE_MSG_E
    -420, // INVALID_CERT_CTX_E
    -421, // BAD_KEY_SHARE_DATA
    -422, // MISSING_HANDSHAKE_DATA
    -423, // BAD_BINDER
    -424, // EXT_NOT_ALLOWED
    -425, // INVALID_PARAMETER
    -428, // EXT_MISSING
    -429, // UNSUPPORTED_EXTENSION
    -442, // TOO_MUCH_EARLY_DATA
    -457, // DUPLICATE_TLS_EXT_E
    -505, // HRR_COOKIE_ERROR
];

/// SOCKET_ERROR_E: the socket failed or, with no error noted by the I/O callbacks, ended.
const SOCKET_ERROR_E: c_int = -308;

/// X509_V_ERR_CERT_CHAIN_TOO_LONG: the peer sent more certificates than wolfSSL keeps
/// (MAX_CHAIN_DEPTH, 9 in this build): it stops reading the chain there.
const CHAIN_TOO_LONG: c_long = 22;
const MAX_CHAIN_DEPTH: usize = 9;

/// A connection (a WOLFSSL and its Wire), before and after its handshake.
struct Conn {
    ssl: *mut Ssl,
    /// Boxed so its address, which wolfSSL's I/O callbacks hold, never moves.
    wire: Box<Wire>,
    server: bool,
    /// Server: client certificates are required; client: it has one to present.
    client_auth: bool,
    /// Client, `--verify report`: the chain's verification was noted, not enforced.
    report: bool,
    /// Client, `--verify report`: why the chain did not validate.
    chain_failure: Option<String>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // SAFETY: we own the WOLFSSL; the Wire outlives it (dropped after this).
        unsafe { wolfSSL_free(self.ssl) }
    }
}

impl Conn {
    /// Whether wolfSSL stopped reading the peer's chain at MAX_CHAIN_DEPTH certificates.
    fn chain_too_long(&self) -> bool {
        // SAFETY: valid WOLFSSL.
        unsafe { wolfSSL_get_verify_result(self.ssl) == CHAIN_TOO_LONG }
    }

    /// The engine's error kind for a failed call that returned `ret`.
    fn error(&self, what: &str, ret: c_int) -> Error {
        // SAFETY: valid WOLFSSL.
        let code = unsafe { wolfSSL_get_error(self.ssl, ret) };
        if let Some(e) = IO_ERROR.with(|s| s.borrow_mut().take()) {
            use std::io::ErrorKind as K;
            return match e.kind() {
                K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                    Error::Peer(format!("{what}: the peer closed the connection: {e}"))
                }
                _ => Error::Io(format!("{what}: {e}")),
            };
        }
        // SAFETY: a static string for any code.
        let reason =
            c_text(unsafe { wolfSSL_ERR_reason_error_string(code.unsigned_abs() as c_ulong) })
                .unwrap_or_else(|| format!("error {code}"));
        // SAFETY: valid WOLFSSL.
        let verify = unsafe { wolfSSL_get_verify_result(self.ssl) };
        let lower = reason.to_ascii_lowercase();
        // A chain only reported on cannot have ended the handshake.
        if !self.report
            && (verify != 0
                || lower.contains("verify")
                || lower.contains("signer")
                || lower.contains("domain"))
        {
            return Error::Check(format!(
                "{what}: certificate verification failed: {reason} (wolfSSL {code})"
            ));
        }
        if lower.contains("alert") || lower.contains("peer") || MALFORMED.contains(&code) {
            return Error::Peer(format!("{what}: {reason} (wolfSSL {code})"));
        }
        if code == SOCKET_ERROR_E {
            // The I/O callbacks saw the socket's end of file (an error would be in IO_ERROR).
            return Error::Peer(format!(
                "{what}: the peer closed the connection (EOF; wolfSSL {code})"
            ));
        }
        Error::Library(format!("{what}: {reason} (wolfSSL {code})"))
    }
}

struct Pending(Conn);

impl Pending {
    fn start(
        ctx: &CtxPtr,
        wire: Wire,
        server: bool,
        client_auth: bool,
        name: Option<&ServerName>,
        key_shares: &[u16],
        report: bool,
    ) -> Result<Box<dyn Handshake>> {
        // SAFETY: a new WOLFSSL from a configured context.
        let ssl = unsafe { wolfSSL_new(ctx.0) };
        if ssl.is_null() {
            pqlab_engine::bail!(Library, "wolfSSL_new failed");
        }
        let mut conn = Conn {
            ssl,
            wire: Box::new(wire),
            server,
            client_auth,
            report,
            chain_failure: None,
        };
        // SAFETY: the Box keeps the Wire at one address for the WOLFSSL's life.
        unsafe { pqlab_wolf_set_wire(ssl, &mut *conn.wire as *mut Wire as *mut c_void) };
        for &g in key_shares {
            // SAFETY: valid WOLFSSL.
            if unsafe { wolfSSL_UseKeyShare(ssl, g) } != SUCCESS {
                pqlab_engine::bail!(
                    Library,
                    "wolfSSL cannot make a key share for group {g:#06x}"
                );
            }
        }
        if let Some(name) = name {
            match name {
                ServerName::Dns(d) => {
                    let c = cstring(d, "--servername")?;
                    // SAFETY: valid WOLFSSL and string.
                    unsafe {
                        wolfSSL_UseSNI(
                            ssl,
                            SNI_HOST_NAME,
                            c.as_ptr() as *const c_void,
                            d.len() as u16,
                        );
                        wolfSSL_check_domain_name(ssl, c.as_ptr());
                    }
                }
                ServerName::Ip(ip) => {
                    let c = cstring(&ip.to_string(), "--servername")?;
                    // SAFETY: valid WOLFSSL and string.
                    unsafe { wolfSSL_check_ip_address(ssl, c.as_ptr()) };
                }
            }
        }
        Ok(Box::new(Pending(conn)))
    }
}

impl Handshake for Pending {
    fn run(self: Box<Self>) -> Result<Box<dyn Session>> {
        let mut conn = self.0;
        IO_ERROR.with(|s| s.borrow_mut().take());
        // SAFETY: clears this thread's note of an earlier handshake.
        unsafe { pqlab_wolf_take_report_failure() };
        // SAFETY: valid WOLFSSL; the I/O callbacks block on the Wire.
        let ret = unsafe {
            if conn.server {
                wolfSSL_accept(conn.ssl)
            } else {
                wolfSSL_connect(conn.ssl)
            }
        };
        if ret != SUCCESS {
            return Err(conn.error("handshake failed", ret));
        }
        if conn.report {
            // SAFETY: reads and clears this thread's note; the text is static.
            let failure = unsafe { pqlab_wolf_take_report_failure() };
            if conn.chain_too_long() {
                // The first failure, noted before any certificate was checked.
                conn.chain_failure = Some(format!(
                    "the chain is longer than the {MAX_CHAIN_DEPTH} certificates wolfSSL \
                     keeps (X509_V_ERR {CHAIN_TOO_LONG})"
                ));
            } else if failure != 0 {
                let text =
                    c_text(unsafe { pqlab_wolf_verify_error_string(failure) }).unwrap_or_default();
                // wolfSSL's store reports its own (negative) error codes or X509_V_ERR ones.
                let code = if failure < 0 {
                    "wolfSSL error"
                } else {
                    "X509_V_ERR"
                };
                conn.chain_failure = Some(format!("{text} ({code} {failure})"));
            }
        }
        Ok(Box::new(Connection { conn, eof: false }))
    }
}

struct Connection {
    conn: Conn,
    eof: bool,
}

impl Session for Connection {
    fn read(&mut self, buf: &mut [u8]) -> Result<ReadOutcome> {
        if self.eof {
            return Ok(ReadOutcome::Eof);
        }
        let n = buf.len().min(c_int::MAX as usize) as c_int;
        // SAFETY: `buf` has `n` writable bytes.
        let ret = unsafe { wolfSSL_read(self.conn.ssl, buf.as_mut_ptr() as *mut c_void, n) };
        if ret > 0 {
            return Ok(ReadOutcome::Data(ret as usize));
        }
        // SAFETY: valid WOLFSSL.
        let code = unsafe { wolfSSL_get_error(self.conn.ssl, ret) };
        // SAFETY: a pure function of the code.
        if unsafe { pqlab_wolf_err_zero_return(code) } != 0 {
            return Ok(ReadOutcome::Closed);
        }
        if let Some(e) = IO_ERROR.with(|s| s.borrow().as_ref().map(|e| e.kind())) {
            if matches!(
                e,
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) {
                IO_ERROR.with(|s| s.borrow_mut().take());
                self.eof = true;
                return Ok(ReadOutcome::Eof);
            }
        }
        Err(self.conn.error("TLS read failed", ret))
    }

    fn write_all(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            let n = data.len().min(16384) as c_int;
            // SAFETY: `data` has `n` readable bytes.
            let ret = unsafe { wolfSSL_write(self.conn.ssl, data.as_ptr() as *const c_void, n) };
            if ret <= 0 {
                return Err(self.conn.error("TLS write failed", ret));
            }
            data = &data[ret as usize..];
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    fn close(&mut self, wait_for_peer: bool) {
        // SAFETY: valid WOLFSSL.
        let sent = unsafe { wolfSSL_shutdown(self.conn.ssl) };
        if !wait_for_peer || sent < 0 {
            return;
        }
        let mut buf = [0u8; 4096];
        // Bounded by the socket's timeout; a peer that already left ends it too.
        for _ in 0..64 {
            match self.read(&mut buf) {
                Ok(ReadOutcome::Data(_)) => {}
                _ => return,
            }
        }
    }

    fn negotiated(&self) -> Negotiated {
        let ssl = self.conn.ssl;
        // SAFETY: valid WOLFSSL after a finished handshake.
        let (group, own, peer, cipher_code, cipher, version) = unsafe {
            (
                pqlab_wolf_group_code(ssl),
                pqlab_wolf_sig_code(ssl, 0),
                pqlab_wolf_sig_code(ssl, 1),
                pqlab_wolf_cipher_code(ssl),
                c_text(pqlab_wolf_cipher_iana(ssl)),
                c_text(wolfSSL_get_version(ssl)),
            )
        };
        let code = |c: c_int| (c > 0).then_some(c as u16);
        let (server_scheme, client_scheme) = if self.conn.server {
            (
                code(own),
                if self.conn.client_auth {
                    code(peer)
                } else {
                    None
                },
            )
        } else {
            (
                code(peer),
                if self.conn.client_auth {
                    code(own)
                } else {
                    None
                },
            )
        };
        let group = code(group);
        Negotiated {
            version: version.unwrap_or_else(|| "unknown".into()),
            cipher: cipher.clone(),
            cipher_standard_name: cipher,
            cipher_code: code(cipher_code),
            group: group.and_then(group_name).map(String::from),
            group_code: group,
            sigalg: server_scheme.and_then(sigalg_name).map(String::from),
            sigalg_code: server_scheme,
            client_sigalg: client_scheme.and_then(sigalg_name).map(String::from),
            client_sigalg_code: client_scheme,
            session_reused: false,
            peer_tmp_key: None,
        }
    }

    fn server_name(&self) -> Option<String> {
        if !self.conn.server {
            return None;
        }
        // SAFETY: valid WOLFSSL; the name is wolfSSL's copy.
        c_text(unsafe { wolfSSL_get_servername(self.conn.ssl, SNI_HOST_NAME) })
    }

    fn peer_chain_der_bytes(&self) -> Option<Vec<usize>> {
        // SAFETY: valid WOLFSSL.
        let n = unsafe { pqlab_wolf_peer_chain_count(self.conn.ssl) };
        (n > 0).then(|| {
            (0..n)
                .map(|i| unsafe { pqlab_wolf_peer_chain_length(self.conn.ssl, i) }.max(0) as usize)
                .collect()
        })
    }

    fn peer_chain_der(&self) -> Option<Vec<Vec<u8>>> {
        let lengths = self.peer_chain_der_bytes()?;
        let mut out = Vec::new();
        for (i, len) in lengths.into_iter().enumerate() {
            // SAFETY: valid WOLFSSL; the chain's i-th DER is `len` bytes owned by wolfSSL.
            let p = unsafe { pqlab_wolf_peer_chain_der(self.conn.ssl, i as c_int) };
            if p.is_null() {
                return None;
            }
            out.push(unsafe { std::slice::from_raw_parts(p, len) }.to_vec());
        }
        Some(out)
    }

    fn peer_chain_truncated(&self) -> bool {
        self.conn.chain_too_long()
    }

    fn verification(&self) -> Verification {
        if self.conn.server && !self.conn.client_auth {
            return Verification::NotChecked;
        }
        if self.conn.report {
            return match &self.conn.chain_failure {
                Some(why) => Verification::Failed(why.clone()),
                None => Verification::Verified,
            };
        }
        // SAFETY: valid WOLFSSL.
        match unsafe { wolfSSL_get_verify_result(self.conn.ssl) } {
            0 => Verification::Verified,
            v => Verification::Failed(format!("wolfSSL verify result {v}")),
        }
    }
}
