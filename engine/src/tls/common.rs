//! What the TLS client and server share: protocol options, the message-callback recorder,
//! a byte-counting socket wrapper, TCP_INFO and clocks.

use crate::out::Result;
use foreign_types::ForeignTypeRef;
use openssl::ssl::{SslContextBuilder, SslRef, SslVersion};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// Protocol options, the same flags on client and server.
#[derive(clap::Args, Clone)]
pub struct TlsOpts {
    /// Key-exchange groups, OpenSSL names, colon or comma separated (e.g. X25519MLKEM768).
    #[arg(long)]
    pub groups: Option<String>,
    /// Signature algorithms, OpenSSL names (e.g. mldsa44, rsa_pss_rsae_sha256,
    /// ecdsa_secp256r1_sha256).
    #[arg(long)]
    pub sigalgs: Option<String>,
    /// Protocol version, both minimum and maximum: 1.2 or 1.3.
    #[arg(long, default_value = "1.3")]
    pub tls_version: String,
    /// TLS 1.2 cipher list (OpenSSL syntax), e.g. ECDHE-RSA-AES128-GCM-SHA256.
    #[arg(long)]
    pub ciphers: Option<String>,
    /// TLS 1.3 cipher suites, e.g. TLS_AES_128_GCM_SHA256.
    #[arg(long)]
    pub ciphersuites: Option<String>,
    /// OpenSSL security level 0-5 (default: OpenSSL's, 2; lowered automatically to 1 for
    /// --dh-bits 1024 on the server and to what RSA key exchange ciphers need).
    #[arg(long)]
    pub security_level: Option<u32>,
    /// Append TLS secrets in SSLKEYLOGFILE format to this file (for Wireshark).
    #[arg(long)]
    pub keylog: Option<PathBuf>,
    /// Per-message events in connection records: on (default) or off.
    #[arg(long, default_value = "on")]
    pub events: String,
    /// Socket read/write timeout in seconds, 1-86400 (bounds every wait on the peer).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub io_timeout: u64,
}

impl TlsOpts {
    pub fn version(&self) -> Result<SslVersion> {
        match self.tls_version.as_str() {
            "1.3" | "TLSv1.3" => Ok(SslVersion::TLS1_3),
            "1.2" | "TLSv1.2" => Ok(SslVersion::TLS1_2),
            v => crate::bail!(
                Usage,
                "--tls-version {v:?} is not supported; use 1.2 or 1.3"
            ),
        }
    }

    pub fn events_on(&self) -> Result<bool> {
        match self.events.as_str() {
            "on" => Ok(true),
            "off" => Ok(false),
            v => crate::bail!(Usage, "--events {v:?}: use on or off"),
        }
    }

    /// Apply to a context (read the security level in force from the built context).
    pub fn apply(&self, b: &mut SslContextBuilder, min_level: Option<u32>) -> Result<()> {
        let v = self.version()?;
        b.set_min_proto_version(Some(v))?;
        b.set_max_proto_version(Some(v))?;
        if let Some(g) = &self.groups {
            b.set_groups_list(&g.replace(',', ":")).map_err(|e| {
                crate::out::Error::Usage(format!("--groups {g:?} not accepted by OpenSSL: {e}"))
            })?;
        }
        if let Some(s) = &self.sigalgs {
            b.set_sigalgs_list(&s.replace(',', ":")).map_err(|e| {
                crate::out::Error::Usage(format!("--sigalgs {s:?} not accepted by OpenSSL: {e}"))
            })?;
        }
        let mut level = self.security_level;
        if level.is_none() {
            if let Some(m) = min_level {
                level = Some(m);
            }
        }
        if let Some(l) = level {
            if l > 5 {
                crate::bail!(Usage, "--security-level {l} is out of range 0-5");
            }
            b.set_security_level(l);
        }
        if let Some(c) = &self.ciphers {
            b.set_cipher_list(c).map_err(|e| {
                crate::out::Error::Usage(format!("--ciphers {c:?} not accepted by OpenSSL: {e}"))
            })?;
        }
        if let Some(c) = &self.ciphersuites {
            b.set_ciphersuites(&c.replace(',', ":")).map_err(|e| {
                crate::out::Error::Usage(format!(
                    "--ciphersuites {c:?} not accepted by OpenSSL: {e}"
                ))
            })?;
        }
        if let Some(path) = &self.keylog {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| {
                    crate::out::Error::Io(format!("cannot open --keylog {}: {e}", path.display()))
                })?;
            let f: Arc<Mutex<File>> = Arc::new(Mutex::new(f));
            b.set_keylog_callback(move |_, line| {
                if let Ok(mut f) = f.lock() {
                    let _ = writeln!(f, "{line}");
                }
            });
        }
        Ok(())
    }
}

pub fn realtime_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME)
}

pub fn monotonic_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// A (realtime, monotonic) pair taken together.
#[derive(Clone, Copy)]
pub struct Stamp {
    pub real: i64,
    pub mono: i64,
}

impl Stamp {
    pub fn now() -> Stamp {
        let mono = monotonic_ns();
        let real = realtime_ns();
        Stamp { real, mono }
    }
}

/// One message-callback or socket event (serialized as in docs/tls.md; absent fields are
/// left out). A plain struct keeps recording cheap inside the handshake.
#[derive(serde::Serialize)]
pub struct Event {
    pub ev: &'static str,
    pub dir: &'static str,
    pub t: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_start: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_bytes: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msg: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msg_type: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset_end: Option<u64>,
}

impl Event {
    fn new(ev: &'static str, dir: &'static str, t: i64) -> Event {
        Event {
            ev,
            dir,
            t,
            t_start: None,
            content_type: None,
            header_bytes: None,
            msg: None,
            msg_type: None,
            length: None,
            bytes: None,
            level: None,
            description: None,
            offset_end: None,
        }
    }
}

/// Per-connection record of everything the TLS library and the socket did, in order.
#[derive(Default)]
pub struct Recorder {
    pub events_on: bool,
    pub events: Vec<Event>,
    /// Cumulative TLS record bytes (header + payload) seen by the message callback.
    pub record_bytes: [u64; 2],
    /// Cumulative bytes through the socket (write/read syscalls).
    pub io_bytes: [u64; 2],
    pub records: [u64; 2],
}

const SENT: usize = 0;
const RECV: usize = 1;

fn dir_name(d: usize) -> &'static str {
    if d == SENT {
        "sent"
    } else {
        "recv"
    }
}

pub fn content_type_name(ct: i32) -> &'static str {
    match ct {
        20 => "change_cipher_spec",
        21 => "alert",
        22 => "handshake",
        23 => "application_data",
        24 => "heartbeat",
        256 => "header",
        257 => "inner_content_type",
        _ => "other",
    }
}

pub fn handshake_type_name(t: u8) -> &'static str {
    match t {
        0 => "hello_request",
        1 => "client_hello",
        2 => "server_hello",
        4 => "new_session_ticket",
        5 => "end_of_early_data",
        8 => "encrypted_extensions",
        11 => "certificate",
        12 => "server_key_exchange",
        13 => "certificate_request",
        14 => "server_hello_done",
        15 => "certificate_verify",
        16 => "client_key_exchange",
        20 => "finished",
        24 => "key_update",
        25 => "compressed_certificate",
        254 => "message_hash",
        _ => "unknown",
    }
}

impl Recorder {
    fn on_message(&mut self, write_p: bool, content_type: i32, buf: &[u8]) {
        let t = realtime_ns();
        let d = if write_p { SENT } else { RECV };
        if content_type == 256 && buf.len() >= 5 {
            self.record_bytes[d] += 5 + u16::from_be_bytes([buf[3], buf[4]]) as u64;
            self.records[d] += 1;
        }
        if !self.events_on || buf.is_empty() {
            return;
        }
        let dir = dir_name(d);
        let offset_end = Some(self.record_bytes[d]);
        let ev = match content_type {
            256 if buf.len() >= 5 => Event {
                content_type: Some(content_type_name(buf[0] as i32)),
                header_bytes: Some(5),
                length: Some(u16::from_be_bytes([buf[3], buf[4]]) as u64),
                offset_end,
                ..Event::new("record", dir, t)
            },
            257 => Event {
                content_type: Some(content_type_name(buf[0] as i32)),
                ..Event::new("inner_content_type", dir, t)
            },
            22 => Event {
                msg: Some(handshake_type_name(buf[0])),
                msg_type: Some(buf[0]),
                length: Some(buf.len() as u64),
                offset_end,
                ..Event::new("handshake", dir, t)
            },
            21 if buf.len() >= 2 => Event {
                level: Some(buf[0]),
                description: Some(buf[1]),
                offset_end,
                ..Event::new("alert", dir, t)
            },
            20 => Event {
                offset_end,
                ..Event::new("change_cipher_spec", dir, t)
            },
            _ => return,
        };
        self.events.push(ev);
    }

    fn on_io(&mut self, d: usize, t_start: i64, n: usize) {
        let t = realtime_ns();
        self.io_bytes[d] += n as u64;
        if self.events_on {
            self.events.push(Event {
                t_start: Some(t_start),
                bytes: Some(n as u64),
                offset_end: Some(self.io_bytes[d]),
                ..Event::new("io", dir_name(d), t)
            });
        }
    }

    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }
}

pub type SharedRecorder = Rc<RefCell<Recorder>>;

unsafe extern "C" fn msg_cb(
    write_p: libc::c_int,
    _version: libc::c_int,
    content_type: libc::c_int,
    buf: *const libc::c_void,
    len: libc::size_t,
    _ssl: *mut openssl_sys::SSL,
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
        r.on_message(write_p != 0, content_type, slice);
    }
}

extern "C" {
    fn SSL_set_msg_callback(
        ssl: *mut openssl_sys::SSL,
        cb: Option<
            unsafe extern "C" fn(
                libc::c_int,
                libc::c_int,
                libc::c_int,
                *const libc::c_void,
                libc::size_t,
                *mut openssl_sys::SSL,
                *mut libc::c_void,
            ),
        >,
    );
    fn SSL_get0_group_name(ssl: *mut openssl_sys::SSL) -> *const libc::c_char;
}

/// Hook the recorder into this connection's message callback. The recorder must outlive
/// the SSL object (callers keep the Rc until the stream is dropped).
pub fn attach_recorder(ssl: &mut SslRef, rec: &SharedRecorder) {
    unsafe {
        SSL_set_msg_callback(ssl.as_ptr(), Some(msg_cb));
        openssl_sys::SSL_ctrl(ssl.as_ptr(), 16, 0, Rc::as_ptr(rec) as *mut libc::c_void);
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

/// Signature scheme this side used (server: its CertificateVerify / ServerKeyExchange).
pub fn own_sigalg(ssl: &SslRef) -> Option<String> {
    let mut p: *const libc::c_char = std::ptr::null();
    let ok = unsafe {
        openssl_sys::SSL_ctrl(ssl.as_ptr(), 140, 0, &mut p as *mut _ as *mut libc::c_void)
    };
    if ok > 0 {
        cstr_opt(p)
    } else {
        None
    }
}

/// Signature scheme the peer used.
pub fn peer_sigalg(ssl: &SslRef) -> Option<String> {
    let mut p: *const libc::c_char = std::ptr::null();
    let ok = unsafe {
        openssl_sys::SSL_ctrl(ssl.as_ptr(), 141, 0, &mut p as *mut _ as *mut libc::c_void)
    };
    if ok > 0 {
        cstr_opt(p)
    } else {
        None
    }
}

/// The peer's ephemeral key (client side): type and bits, e.g. DHE group size in TLS 1.2.
pub fn peer_tmp_key(ssl: &SslRef) -> Option<Value> {
    let mut pk: *mut openssl_sys::EVP_PKEY = std::ptr::null_mut();
    let ok = unsafe {
        openssl_sys::SSL_ctrl(ssl.as_ptr(), 109, 0, &mut pk as *mut _ as *mut libc::c_void)
    };
    if ok <= 0 || pk.is_null() {
        return None;
    }
    let bits = unsafe { openssl_sys::EVP_PKEY_get_bits(pk) };
    let id = unsafe { openssl_sys::EVP_PKEY_get_id(pk) };
    unsafe { openssl_sys::EVP_PKEY_free(pk) };
    Some(json!({"bits": bits, "pkey_id": id}))
}

/// Common per-connection negotiation facts.
pub fn negotiated(ssl: &SslRef) -> Value {
    let cipher = ssl.current_cipher();
    json!({
        "version": ssl.version_str(),
        "cipher": cipher.map(|c| c.name()),
        "cipher_standard_name": cipher.and_then(|c| c.standard_name()),
        "group": group_name(ssl),
        "session_reused": ssl.session_reused(),
    })
}

/// A TcpStream that records every read/write syscall in the recorder.
pub struct Wire {
    pub tcp: TcpStream,
    pub rec: SharedRecorder,
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let t0 = realtime_ns();
        let n = self.tcp.read(buf)?;
        if n > 0 {
            self.rec.borrow_mut().on_io(RECV, t0, n);
        }
        Ok(n)
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let t0 = realtime_ns();
        let n = self.tcp.write(buf)?;
        self.rec.borrow_mut().on_io(SENT, t0, n);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

/// TCP_INFO of a connected socket (the fields the analyses use).
pub fn tcp_info(tcp: &TcpStream) -> Value {
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            tcp.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut info as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Value::Null;
    }
    let mut v = json!({
        "state": info.tcpi_state,
        "ca_state": info.tcpi_ca_state,
        "retransmits": info.tcpi_retransmits,
        "backoff": info.tcpi_backoff,
        "total_retrans": info.tcpi_total_retrans,
        "lost": info.tcpi_lost,
        "unacked": info.tcpi_unacked,
        "reordering": info.tcpi_reordering,
        "snd_cwnd": info.tcpi_snd_cwnd,
        "snd_ssthresh": info.tcpi_snd_ssthresh,
        "snd_mss": info.tcpi_snd_mss,
        "rcv_mss": info.tcpi_rcv_mss,
        "advmss": info.tcpi_advmss,
        "pmtu": info.tcpi_pmtu,
        "rtt_us": info.tcpi_rtt,
        "rttvar_us": info.tcpi_rttvar,
        "rto_us": info.tcpi_rto,
        "rcv_space": info.tcpi_rcv_space,
    });
    // Newer fields only when this kernel filled them in (it returns how much it wrote).
    macro_rules! newer {
        ($name:literal, $field:ident) => {
            if std::mem::offset_of!(libc::tcp_info, $field) + std::mem::size_of_val(&info.$field)
                <= len as usize
            {
                v[$name] = json!(info.$field);
            }
        };
    }
    newer!("min_rtt_us", tcpi_min_rtt);
    newer!("segs_out", tcpi_segs_out);
    newer!("segs_in", tcpi_segs_in);
    newer!("data_segs_out", tcpi_data_segs_out);
    newer!("data_segs_in", tcpi_data_segs_in);
    newer!("bytes_acked", tcpi_bytes_acked);
    newer!("bytes_received", tcpi_bytes_received);
    newer!("delivery_rate", tcpi_delivery_rate);
    newer!("busy_time_us", tcpi_busy_time);
    newer!("rwnd_limited_us", tcpi_rwnd_limited);
    newer!("sndbuf_limited_us", tcpi_sndbuf_limited);
    newer!("delivered", tcpi_delivered);
    newer!("bytes_sent", tcpi_bytes_sent);
    newer!("bytes_retrans", tcpi_bytes_retrans);
    newer!("snd_wnd", tcpi_snd_wnd);
    v
}

/// The congestion control algorithm on this socket.
pub fn congestion_control(tcp: &TcpStream) -> Option<String> {
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            tcp.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(len as usize);
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// TLS 1.2 DHE parameters of the requested size: the RFC 3526 MODP groups for 2048-4096,
/// RFC 2409 Oakley group 2 for 1024 (the classic 1024-bit MODP group); generator 2.
pub fn dh_params(bits: u32) -> Result<openssl::dh::Dh<openssl::pkey::Params>> {
    use openssl::bn::BigNum;
    let p = match bits {
        1024 => BigNum::get_rfc2409_prime_1024()?,
        2048 => BigNum::get_rfc3526_prime_2048()?,
        3072 => BigNum::get_rfc3526_prime_3072()?,
        4096 => BigNum::get_rfc3526_prime_4096()?,
        _ => crate::bail!(
            Usage,
            "--dh-bits {bits} is not supported; use 1024, 2048, 3072 or 4096"
        ),
    };
    let g = BigNum::from_u32(2)?;
    Ok(openssl::dh::Dh::from_pqg(p, None, g)?)
}

/// Emit a connection record with its events appended as an `events` array, serialized
/// straight from the event structs (no intermediate JSON values).
pub fn emit_with_events(record: &Value, events: Option<&[Event]>) {
    let Some(events) = events else {
        crate::out::emit(record);
        return;
    };
    let Ok(mut text) = serde_json::to_vec(record) else {
        return crate::out::emit(record);
    };
    if text.last() == Some(&b'}') {
        text.pop();
        if text.len() > 1 {
            text.push(b',');
        }
        text.extend_from_slice(b"\"events\":");
        if serde_json::to_writer(&mut text, events).is_err() {
            return crate::out::emit(record);
        }
        text.push(b'}');
    }
    text.push(b'\n');
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    if lock.write_all(&text).is_err() {
        std::process::exit(141);
    }
    let _ = lock.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_follow_record_headers() {
        let mut r = Recorder {
            events_on: true,
            ..Default::default()
        };
        // ServerHello record (22, 1210 bytes) then an encrypted record of 2042 bytes.
        r.on_message(true, 256, &[22, 3, 3, 0x04, 0xba]);
        r.on_message(true, 22, &[2, 0, 4, 0xb6]);
        r.on_message(true, 256, &[23, 3, 3, 0x07, 0xfa]);
        r.on_message(true, 257, &[22]);
        r.on_message(true, 22, &[11, 0, 7, 0xe9]);
        r.on_message(false, 256, &[21, 3, 3, 0, 19]);
        assert_eq!(r.record_bytes, [5 + 1210 + 5 + 2042, 5 + 19]);
        assert_eq!(r.records, [2, 1]);
        let hs: Vec<_> = r.events.iter().filter(|e| e.ev == "handshake").collect();
        assert_eq!(hs[0].msg, Some("server_hello"));
        assert_eq!(hs[0].offset_end, Some(1215));
        assert_eq!(hs[1].msg, Some("certificate"));
        assert_eq!(hs[1].offset_end, Some(1215 + 2047));
        r.on_io(SENT, 0, 4096);
        assert_eq!(r.io_bytes, [4096, 0]);
    }

    #[test]
    fn events_off_still_counts_bytes() {
        let mut r = Recorder::default();
        r.on_message(false, 256, &[22, 3, 3, 0, 100]);
        assert_eq!(r.record_bytes, [0, 105]);
        assert!(r.events.is_empty());
    }

    #[test]
    fn dh_sizes() {
        assert!(dh_params(1024).is_ok() && dh_params(4096).is_ok());
        assert!(dh_params(1536).is_err());
    }
}
