//! The libssl calls the openssl crate does not wrap: `SSL_ctrl` numbers (named, checked
//! against OpenSSL 3.5's include/openssl/ssl.h.in), the message callback that feeds the
//! Recorder, and the getters for what a handshake negotiated.

use crate::tls::record::{Dir, Message, PeerTmpKey, Recorder, SharedRecorder};
use foreign_types::ForeignTypeRef;
use openssl::ssl::{SslContextRef, SslRef};
use std::cell::RefCell;
use std::rc::Rc;

// SSL_ctrl / SSL_CTX_ctrl commands (include/openssl/ssl.h.in, OpenSSL 3.5.4).
/// SSL_CTX_get_max_cert_list: the largest certificate chain a peer may send.
pub const SSL_CTRL_GET_MAX_CERT_LIST: libc::c_int = 50;
/// SSL_set_msg_callback_arg.
pub const SSL_CTRL_SET_MSG_CALLBACK_ARG: libc::c_int = 16;
/// SSL_get_peer_tmp_key: the peer's ephemeral key.
pub const SSL_CTRL_GET_PEER_TMP_KEY: libc::c_int = 109;
/// SSL_get_tmp_key: this side's ephemeral key (only while the key exchange is under way:
/// libssl frees it once the peer's share is processed).
pub const SSL_CTRL_GET_TMP_KEY: libc::c_int = 133;
/// SSL_get_negotiated_group: NID of the group, or TLSEXT_nid_unknown | code point for
/// groups without a NID.
pub const SSL_CTRL_GET_NEGOTIATED_GROUP: libc::c_int = 134;
/// SSL_get0_signature_name: the scheme this side signed with.
pub const SSL_CTRL_GET_SIGNATURE_NAME: libc::c_int = 140;
/// SSL_get0_peer_signature_name: the scheme the peer signed with.
pub const SSL_CTRL_GET_PEER_SIGNATURE_NAME: libc::c_int = 141;
/// SSL_CTX_set1_client_sigalgs_list: the schemes a server accepts for the client's
/// CertificateVerify (sent in its CertificateRequest).
pub const SSL_CTRL_SET_CLIENT_SIGALGS_LIST: libc::c_int = 102;
/// Flag SSL_get_negotiated_group sets for a group without a NID (TLSEXT_nid_unknown).
pub const TLSEXT_NID_UNKNOWN: libc::c_long = 0x0100_0000;

// The message callback's pseudo content types (include/openssl/ssl3.h).
const SSL3_RT_CHANGE_CIPHER_SPEC: libc::c_int = 20;
const SSL3_RT_ALERT: libc::c_int = 21;
const SSL3_RT_HANDSHAKE: libc::c_int = 22;
const SSL3_RT_HEADER: libc::c_int = 256;
const SSL3_RT_INNER_CONTENT_TYPE: libc::c_int = 257;
/// Handshake message type ServerKeyExchange (TLS 1.2).
const SSL3_MT_SERVER_KEY_EXCHANGE: u8 = 12;

type MsgCallback = unsafe extern "C" fn(
    libc::c_int,
    libc::c_int,
    libc::c_int,
    *const libc::c_void,
    libc::size_t,
    *mut openssl_sys::SSL,
    *mut libc::c_void,
);

extern "C" {
    fn SSL_set_msg_callback(ssl: *mut openssl_sys::SSL, cb: Option<MsgCallback>);
    fn SSL_get0_group_name(ssl: *mut openssl_sys::SSL) -> *const libc::c_char;
}

/// Translate one message-callback call into the Recorder's terms.
pub fn observe(rec: &mut Recorder, write_p: bool, content_type: libc::c_int, buf: &[u8]) {
    let dir = if write_p { Dir::Sent } else { Dir::Recv };
    let m = match content_type {
        SSL3_RT_HEADER => Message::RecordHeader(buf),
        SSL3_RT_INNER_CONTENT_TYPE => match buf.first() {
            Some(&ct) => Message::InnerContentType(ct),
            None => return,
        },
        SSL3_RT_HANDSHAKE => Message::Handshake(buf),
        SSL3_RT_ALERT => Message::Alert(buf),
        SSL3_RT_CHANGE_CIPHER_SPEC if !buf.is_empty() => Message::ChangeCipherSpec,
        _ => return,
    };
    rec.on_message(dir, m);
}

unsafe extern "C" fn msg_cb(
    write_p: libc::c_int,
    _version: libc::c_int,
    content_type: libc::c_int,
    buf: *const libc::c_void,
    len: libc::size_t,
    ssl: *mut openssl_sys::SSL,
    arg: *mut libc::c_void,
) {
    if arg.is_null() {
        return;
    }
    let cell = &*(arg as *const RefCell<Recorder>);
    let slice = if buf.is_null() {
        &[][..]
    } else {
        std::slice::from_raw_parts(buf as *const u8, len)
    };
    if let Ok(mut r) = cell.try_borrow_mut() {
        observe(&mut r, write_p != 0, content_type, slice);
        // A TLS 1.2 server's ephemeral DH key exists from its ServerKeyExchange until the
        // client's share arrives: read the private exponent's length now.
        if write_p != 0
            && content_type == SSL3_RT_HANDSHAKE
            && slice.first() == Some(&SSL3_MT_SERVER_KEY_EXCHANGE)
        {
            if let Some(bits) = own_dh_private_bits(ssl) {
                r.dh_private_bits = Some(bits);
            }
        }
    }
}

/// The length in bits of this side's ephemeral finite-field DH private exponent, while the
/// key exists; None for any other key type.
unsafe fn own_dh_private_bits(ssl: *mut openssl_sys::SSL) -> Option<i32> {
    let mut pk: *mut openssl_sys::EVP_PKEY = std::ptr::null_mut();
    let got = openssl_sys::SSL_ctrl(
        ssl,
        SSL_CTRL_GET_TMP_KEY,
        0,
        &mut pk as *mut _ as *mut libc::c_void,
    );
    if got <= 0 || pk.is_null() {
        return None;
    }
    let mut bits = None;
    // DHX: X9.42 parameters with a subgroup order q (RFC 5114's groups).
    let id = openssl_sys::EVP_PKEY_get_id(pk);
    if id == openssl_sys::EVP_PKEY_DH || id == openssl_sys::EVP_PKEY_DHX {
        let mut bn: *mut openssl_sys::BIGNUM = std::ptr::null_mut();
        if openssl_sys::EVP_PKEY_get_bn_param(pk, c"priv".as_ptr(), &mut bn) == 1 && !bn.is_null() {
            bits = Some(openssl_sys::BN_num_bits(bn));
            openssl_sys::BN_clear_free(bn);
        }
    }
    openssl_sys::EVP_PKEY_free(pk);
    bits
}

/// Hook the recorder into this connection's message callback. The recorder must outlive
/// the SSL object: the Wire inside the SslStream holds an Rc to it.
pub fn attach_recorder(ssl: &mut SslRef, rec: &SharedRecorder) {
    unsafe {
        SSL_set_msg_callback(ssl.as_ptr(), Some(msg_cb));
        openssl_sys::SSL_ctrl(
            ssl.as_ptr(),
            SSL_CTRL_SET_MSG_CALLBACK_ARG,
            0,
            Rc::as_ptr(rec) as *mut libc::c_void,
        );
    }
}

fn cstr_opt(p: *const libc::c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        Some(
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned(),
        )
    }
}

/// Negotiated key-exchange group (TLS 1.3 and ECDHE in 1.2), e.g. "X25519MLKEM768".
pub fn group_name(ssl: &SslRef) -> Option<String> {
    cstr_opt(unsafe { SSL_get0_group_name(ssl.as_ptr()) })
}

/// SSL_get_negotiated_group's raw answer (a NID, or TLSEXT_NID_UNKNOWN | code point).
pub fn negotiated_group_raw(ssl: &SslRef) -> libc::c_long {
    unsafe {
        openssl_sys::SSL_ctrl(
            ssl.as_ptr(),
            SSL_CTRL_GET_NEGOTIATED_GROUP,
            0,
            std::ptr::null_mut(),
        )
    }
}

fn signature_name(ssl: &SslRef, cmd: libc::c_int) -> Option<String> {
    let mut p: *const libc::c_char = std::ptr::null();
    let ok = unsafe {
        openssl_sys::SSL_ctrl(ssl.as_ptr(), cmd, 0, &mut p as *mut _ as *mut libc::c_void)
    };
    if ok > 0 {
        cstr_opt(p)
    } else {
        None
    }
}

/// Signature scheme this side used (server: its CertificateVerify / ServerKeyExchange).
/// Set the schemes accepted for a client's CertificateVerify (mutual TLS); false when
/// libssl refuses the list.
pub fn set_client_sigalgs_list(ctx: &mut openssl::ssl::SslContextBuilder, list: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(list) else {
        return false;
    };
    unsafe {
        openssl_sys::SSL_CTX_ctrl(
            ctx.as_ptr(),
            SSL_CTRL_SET_CLIENT_SIGALGS_LIST,
            0,
            c.as_ptr() as *mut libc::c_void,
        ) > 0
    }
}

pub fn own_sigalg(ssl: &SslRef) -> Option<String> {
    signature_name(ssl, SSL_CTRL_GET_SIGNATURE_NAME)
}

/// Signature scheme the peer used.
pub fn peer_sigalg(ssl: &SslRef) -> Option<String> {
    signature_name(ssl, SSL_CTRL_GET_PEER_SIGNATURE_NAME)
}

/// The peer's ephemeral key (client side): type and bits, e.g. DHE group size in TLS 1.2.
pub fn peer_tmp_key(ssl: &SslRef) -> Option<PeerTmpKey> {
    let mut pk: *mut openssl_sys::EVP_PKEY = std::ptr::null_mut();
    let ok = unsafe {
        openssl_sys::SSL_ctrl(
            ssl.as_ptr(),
            SSL_CTRL_GET_PEER_TMP_KEY,
            0,
            &mut pk as *mut _ as *mut libc::c_void,
        )
    };
    if ok <= 0 || pk.is_null() {
        return None;
    }
    let bits = unsafe { openssl_sys::EVP_PKEY_get_bits(pk) };
    let pkey_id = unsafe { openssl_sys::EVP_PKEY_get_id(pk) };
    unsafe { openssl_sys::EVP_PKEY_free(pk) };
    Some(PeerTmpKey { bits, pkey_id })
}

/// The largest certificate list (bytes) a context accepts from its peer.
pub fn max_cert_list(ctx: &SslContextRef) -> libc::c_long {
    unsafe {
        openssl_sys::SSL_CTX_ctrl(
            ctx.as_ptr(),
            SSL_CTRL_GET_MAX_CERT_LIST,
            0,
            std::ptr::null_mut(),
        )
    }
}

extern "C" {
    fn EVP_RAND_fetch(
        ctx: *mut libc::c_void,
        algorithm: *const libc::c_char,
        properties: *const libc::c_char,
    ) -> *mut libc::c_void;
    fn EVP_RAND_free(rand: *mut libc::c_void);
    fn EVP_RAND_CTX_new(rand: *mut libc::c_void, parent: *mut libc::c_void) -> *mut libc::c_void;
    fn EVP_RAND_CTX_free(ctx: *mut libc::c_void);
    fn EVP_RAND_instantiate(
        ctx: *mut libc::c_void,
        strength: libc::c_uint,
        prediction_resistance: libc::c_int,
        pstr: *const u8,
        pstr_len: libc::size_t,
        params: *const openssl_sys::OSSL_PARAM,
    ) -> libc::c_int;
    fn OSSL_PARAM_construct_uint(
        key: *const libc::c_char,
        buf: *mut libc::c_uint,
    ) -> openssl_sys::OSSL_PARAM;
    fn OSSL_PARAM_construct_end() -> openssl_sys::OSSL_PARAM;
    fn RAND_set0_public(ctx: *mut libc::c_void, rand: *mut libc::c_void) -> libc::c_int;
    fn RAND_set0_private(ctx: *mut libc::c_void, rand: *mut libc::c_void) -> libc::c_int;
}

/// A TEST-RAND generator of the default provider in its "generate" mode: a fixed seed and
/// a simple deterministic sequence. Not random at all: for measurements only.
fn test_rand() -> Option<*mut libc::c_void> {
    unsafe {
        let rand = EVP_RAND_fetch(
            std::ptr::null_mut(),
            c"TEST-RAND".as_ptr(),
            std::ptr::null(),
        );
        if rand.is_null() {
            return None;
        }
        let ctx = EVP_RAND_CTX_new(rand, std::ptr::null_mut());
        EVP_RAND_free(rand);
        if ctx.is_null() {
            return None;
        }
        let mut generate: libc::c_uint = 1;
        let mut strength: libc::c_uint = 256;
        let params = [
            OSSL_PARAM_construct_uint(c"generate".as_ptr(), &mut generate),
            OSSL_PARAM_construct_uint(c"strength".as_ptr(), &mut strength),
            OSSL_PARAM_construct_end(),
        ];
        if EVP_RAND_instantiate(ctx, 0, 0, std::ptr::null(), 0, params.as_ptr()) != 1 {
            EVP_RAND_CTX_free(ctx);
            return None;
        }
        Some(ctx)
    }
}

/// Replace the calling thread's public and private random generators with fixed-seed
/// TEST-RAND instances (OpenSSL 3.1+ keeps them per thread), so everything this thread
/// draws (hello randoms, key shares, ECDSA nonces, ML-DSA's hedge) is the same sequence in
/// every run. `tls memory --fixed-random` only: it makes the work of randomised algorithms
/// (ML-DSA's rejection sampling) and so their allocation counts repeat run to run.
pub fn fixed_random_for_this_thread() -> bool {
    let (Some(public), Some(private)) = (test_rand(), test_rand()) else {
        return false;
    };
    unsafe {
        RAND_set0_public(std::ptr::null_mut(), public) == 1
            && RAND_set0_private(std::ptr::null_mut(), private) == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_callback_types_map_to_recorder_messages() {
        // The recorder test of record.rs, through OpenSSL's content-type numbers.
        let mut r = Recorder::new(true);
        observe(&mut r, true, 256, &[22, 3, 3, 0x04, 0xba]);
        observe(&mut r, true, 22, &[2, 0, 4, 0xb6]);
        observe(&mut r, true, 256, &[23, 3, 3, 0x07, 0xfa]);
        observe(&mut r, true, 257, &[22]);
        observe(&mut r, true, 22, &[11, 0, 7, 0xe9]);
        observe(&mut r, false, 256, &[21, 3, 3, 0, 19]);
        observe(&mut r, false, 21, &[1, 0]);
        observe(&mut r, false, 20, &[1]);
        observe(&mut r, false, 257, &[]);
        observe(&mut r, false, 999, &[1, 2, 3]);
        assert_eq!(r.record_bytes, [5 + 1210 + 5 + 2042, 5 + 19]);
        assert_eq!(r.records, [2, 1]);
        let kinds: Vec<&str> = r.events.iter().map(|e| e.ev).collect();
        assert_eq!(
            kinds,
            [
                "record",
                "handshake",
                "record",
                "inner_content_type",
                "handshake",
                "record",
                "alert",
                "change_cipher_spec"
            ]
        );
        assert_eq!(r.events[4].offset_end, Some(1215 + 2047));
        assert_eq!(r.events[6].description, Some(0));
    }

    #[test]
    fn ctrl_numbers_match_the_vendored_header() {
        // The header is not part of the built library: read it from the openssl-src crate
        // source the build compiled (cargo keeps it under $CARGO_HOME/registry/src).
        let text = vendored_ssl_header()
            .expect("openssl-src-300.5.4 source not found under $CARGO_HOME/registry/src");
        for (name, value) in [
            ("SSL_CTRL_GET_MAX_CERT_LIST", SSL_CTRL_GET_MAX_CERT_LIST),
            (
                "SSL_CTRL_SET_MSG_CALLBACK_ARG",
                SSL_CTRL_SET_MSG_CALLBACK_ARG,
            ),
            ("SSL_CTRL_GET_PEER_TMP_KEY", SSL_CTRL_GET_PEER_TMP_KEY),
            (
                "SSL_CTRL_GET_NEGOTIATED_GROUP",
                SSL_CTRL_GET_NEGOTIATED_GROUP,
            ),
            ("SSL_CTRL_GET_SIGNATURE_NAME", SSL_CTRL_GET_SIGNATURE_NAME),
            (
                "SSL_CTRL_SET_CLIENT_SIGALGS_LIST",
                SSL_CTRL_SET_CLIENT_SIGALGS_LIST,
            ),
            (
                "SSL_CTRL_GET_PEER_SIGNATURE_NAME",
                SSL_CTRL_GET_PEER_SIGNATURE_NAME,
            ),
        ] {
            let line = text
                .lines()
                .find(|l| {
                    let mut w = l.split_whitespace();
                    w.next() == Some("#") && w.next() == Some("define") && w.next() == Some(name)
                })
                .unwrap_or_else(|| panic!("{name} not in ssl.h.in"));
            let defined: libc::c_int = line.split_whitespace().nth(3).unwrap().parse().unwrap();
            assert_eq!(defined, value, "{name}");
        }
    }

    /// include/openssl/ssl.h.in of the openssl-src crate this engine was built from.
    fn vendored_ssl_header() -> Option<String> {
        let home = std::env::var_os("CARGO_HOME")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo"))
            })?;
        let src = home.join("registry/src");
        for index in std::fs::read_dir(src).ok()?.flatten() {
            for krate in std::fs::read_dir(index.path()).ok()?.flatten() {
                let name = krate.file_name().to_string_lossy().into_owned();
                if name.starts_with("openssl-src-300.5.4") {
                    let p = krate.path().join("openssl/include/openssl/ssl.h.in");
                    if let Ok(t) = std::fs::read_to_string(p) {
                        return Some(t);
                    }
                }
            }
        }
        None
    }

    mod properties {
        //! Whatever the message callback is handed (a peer chooses record lengths, message
        //! types and counts): no panic, offsets that add up, a bounded event list.
        use super::super::*;
        use proptest::prelude::*;

        fn message() -> impl Strategy<Value = (bool, libc::c_int, Vec<u8>)> {
            (
                any::<bool>(),
                prop::sample::select(vec![20, 21, 22, 23, 24, 256, 257, 0, 1000, -1]),
                prop::collection::vec(any::<u8>(), 0..40),
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn any_message_sequence_is_recorded_within_bounds(
                msgs in prop::collection::vec(message(), 0..300)
            ) {
                let mut r = Recorder::new(true);
                r.max_events = 64;
                let mut expect = [0u64; 2];
                for (write_p, ct, buf) in &msgs {
                    observe(&mut r, *write_p, *ct, buf);
                    if *ct == 256 && buf.len() >= 5 {
                        expect[usize::from(!*write_p)] += 5 + u16::from_be_bytes([buf[3], buf[4]]) as u64;
                    }
                }
                prop_assert_eq!(r.record_bytes, expect);
                prop_assert!(r.events.len() <= 64);
                let kept_or_dropped = r.events.len() as u64 + r.events_dropped;
                prop_assert!(kept_or_dropped <= msgs.len() as u64);
                for e in &r.events {
                    let d = usize::from(e.dir == "recv");
                    if let Some(o) = e.offset_end {
                        prop_assert!(o <= r.record_bytes[d]);
                    }
                }
            }
        }
    }
}
