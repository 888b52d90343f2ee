//! `tls server`: OpenSSL libssl server, full handshakes only, one JSON record per
//! connection with the negotiated parameters, message events and TCP_INFO.

use super::common::{self, Recorder, SharedRecorder, Stamp, TlsOpts, Wire};
use crate::out::{emit, Result};
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslFiletype, SslMethod, SslOptions,
    SslSessionCacheMode, SslStream,
};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on, IP:PORT (port 0 picks a free port; see the listening record).
    #[arg(long)]
    pub listen: SocketAddr,
    /// PEM file with the server certificate (and any intermediates) to send.
    #[arg(long)]
    pub cert_chain: PathBuf,
    /// PEM private key of the server certificate.
    #[arg(long)]
    pub key: PathBuf,
    #[command(flatten)]
    pub tls: TlsOpts,
    /// TLS 1.2 DHE group size in bits (1024, 2048, 3072, 4096); default: OpenSSL's
    /// automatic choice matched to the certificate.
    #[arg(long)]
    pub dh_bits: Option<u32>,
    /// Exit after this many connections (default: run until killed).
    #[arg(long)]
    pub max_connections: Option<u64>,
    /// After the handshake: echo-size = read `GET <n>\n` and send exactly n bytes of
    /// application data then close_notify; none = wait for the client to close.
    #[arg(long, default_value = "echo-size")]
    pub response_mode: String,
    /// Handle connections in parallel threads (for outside clients such as browsers);
    /// default is one at a time, which keeps measured handshakes undisturbed.
    #[arg(long)]
    pub concurrent: bool,
    /// Largest n accepted in `GET <n>` (bytes).
    #[arg(long, default_value_t = 1 << 30)]
    pub max_response_bytes: u64,
}

fn context(a: &Args) -> Result<(SslContext, u32)> {
    let mut b = SslContextBuilder::new(SslMethod::tls_server())?;
    // Full handshakes only: no tickets, no session cache, no resumption of any kind.
    b.set_options(SslOptions::NO_TICKET);
    b.set_num_tickets(0)?;
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    b.set_certificate_chain_file(&a.cert_chain).map_err(|e| {
        crate::out::Error::Io(format!(
            "cannot load --cert-chain {}: {e}",
            a.cert_chain.display()
        ))
    })?;
    b.set_private_key_file(&a.key, SslFiletype::PEM)
        .map_err(|e| {
            crate::out::Error::Io(format!("cannot load --key {}: {e}", a.key.display()))
        })?;
    b.check_private_key().map_err(|_| {
        crate::out::Error::Usage("--key does not match the certificate in --cert-chain".into())
    })?;
    // OpenSSL's default level 2 refuses DH groups under 2048 bits: lower it to 1 for
    // --dh-bits 1024 unless --security-level says otherwise (recorded per connection).
    let min_level = match a.dh_bits {
        Some(bits) if bits < 2048 => Some(1),
        _ => None,
    };
    a.tls.apply(&mut b, min_level)?;
    if let Some(bits) = a.dh_bits {
        let dh = common::dh_params(bits)?;
        b.set_tmp_dh(&dh).map_err(|e| {
            crate::out::Error::Usage(format!(
                "--dh-bits {bits} refused at the security level in force: {e}"
            ))
        })?;
    }
    let ctx = b.build();
    let level = ctx.security_level();
    Ok((ctx, level))
}

struct Conn {
    index: u64,
    peer: SocketAddr,
    t_accept: Stamp,
}

/// Serve one connection and emit its record.
fn serve_one(ctx: &SslContext, a: &Args, tcp: TcpStream, c: Conn, level: u32) {
    let events_on = a.tls.events_on().unwrap_or(true);
    let rec: SharedRecorder = Rc::new(RefCell::new(Recorder {
        events_on,
        ..Default::default()
    }));
    let mut out = json!({
        "type": "connection", "role": "server", "index": c.index,
        "peer": c.peer.to_string(),
        "t_accept": c.t_accept.real, "security_level": level,
    });
    let result = handshake_and_respond(ctx, a, tcp, &rec, &c, &mut out);
    let mut r = rec.borrow_mut();
    out["record_bytes_sent"] = json!(r.record_bytes[0]);
    out["record_bytes_received"] = json!(r.record_bytes[1]);
    out["bytes_sent"] = json!(r.io_bytes[0]);
    out["bytes_received"] = json!(r.io_bytes[1]);
    out["records_sent"] = json!(r.records[0]);
    out["records_received"] = json!(r.records[1]);
    let events = if events_on {
        Some(r.take_events())
    } else {
        None
    };
    if let Err(e) = result {
        out["type"] = json!("connection_error");
        out["kind"] = json!(e.kind());
        out["message"] = json!(e.message());
    }
    common::emit_with_events(&out, events.as_deref());
}

fn handshake_and_respond(
    ctx: &SslContext,
    a: &Args,
    tcp: TcpStream,
    rec: &SharedRecorder,
    c: &Conn,
    out: &mut Value,
) -> Result<()> {
    let timeout = Some(Duration::from_secs(a.tls.io_timeout.max(1)));
    tcp.set_nodelay(true)?;
    tcp.set_read_timeout(timeout)?;
    tcp.set_write_timeout(timeout)?;
    out["congestion_control"] = json!(common::congestion_control(&tcp));
    let mut ssl = Ssl::new(ctx)?;
    common::attach_recorder(&mut ssl, rec);
    let mut stream = SslStream::new(
        ssl,
        Wire {
            tcp,
            rec: rec.clone(),
        },
    )?;
    let t_hs_start = Stamp::now();
    out["t_handshake_start"] = json!(t_hs_start.real);
    let hs = stream.accept();
    let t_hs = Stamp::now();
    if let Err(e) = hs {
        out["tcp_info"] = common::tcp_info(&stream.get_ref().tcp);
        crate::bail!(Peer, "handshake failed: {e}");
    }
    out["t_handshake_done"] = json!(t_hs.real);
    out["handshake_ns"] = json!(t_hs.mono - t_hs_start.mono);
    out["accept_to_handshake_ns"] = json!(t_hs.mono - c.t_accept.mono);
    let ssl = stream.ssl();
    let mut neg = common::negotiated(ssl);
    neg["sigalg"] = json!(common::own_sigalg(ssl));
    out["negotiated"] = neg;
    out["servername"] = json!(ssl.servername(openssl::ssl::NameType::HOST_NAME));

    // Application phase.
    let mut sent_app: u64 = 0;
    let mut request: Option<u64> = None;
    if a.response_mode == "echo-size" {
        let chunk = vec![b'x'; 16384];
        match read_request(&mut stream, a.max_response_bytes)? {
            Request::None => {}
            Request::Size(n) => {
                request = Some(n);
                out["t_request_received"] = json!(common::realtime_ns());
                while sent_app < n {
                    let k = (n - sent_app).min(chunk.len() as u64) as usize;
                    stream.write_all(&chunk[..k])?;
                    sent_app += k as u64;
                }
                stream.flush()?;
                out["t_response_written"] = json!(common::realtime_ns());
            }
            Request::Http { path, size } => {
                // For curl and browsers: GET /<n> sends n filler bytes, anything else a
                // short text page naming what was negotiated.
                out["t_request_received"] = json!(common::realtime_ns());
                out["http_path"] = json!(path);
                let neg = &out["negotiated"];
                let body: Vec<u8> = match size {
                    Some(n) => vec![b'x'; n as usize],
                    None => format!(
                        "pqlab TLS server\nversion: {}\ngroup: {}\nsignature: {}\ncipher: {}\n",
                        neg["version"].as_str().unwrap_or("?"),
                        neg["group"].as_str().unwrap_or("none"),
                        neg["sigalg"].as_str().unwrap_or("none"),
                        neg["cipher"].as_str().unwrap_or("?"),
                    )
                    .into_bytes(),
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                stream.write_all(head.as_bytes())?;
                stream.write_all(&body)?;
                stream.flush()?;
                sent_app = (head.len() + body.len()) as u64;
                request = size;
                out["t_response_written"] = json!(common::realtime_ns());
            }
        }
    } else {
        // Wait for the client to close (close_notify or EOF).
        let mut buf = [0u8; 4096];
        loop {
            match stream.ssl_read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if matches!(e.code(), ErrorCode::ZERO_RETURN | ErrorCode::SYSCALL) => break,
                Err(e) => crate::bail!(Peer, "read after handshake failed: {e}"),
            }
        }
    }
    out["request_bytes"] = json!(request);
    out["app_bytes_sent"] = json!(sent_app);
    out["tcp_info"] = common::tcp_info(&stream.get_ref().tcp);
    // close_notify both ways (bounded by --io-timeout); the peer may already have gone,
    // which is not an error here.
    if let Ok(openssl::ssl::ShutdownResult::Sent) = stream.shutdown() {
        let _ = stream.shutdown();
    }
    out["t_closed"] = json!(common::realtime_ns());
    Ok(())
}

enum Request {
    /// The client closed without a request (handshake-only runs).
    None,
    /// `GET <n>\n`: send exactly n bytes.
    Size(u64),
    /// An HTTP/1.x GET (curl, browsers); size when the path is `/<n>`.
    Http { path: String, size: Option<u64> },
}

/// Read `GET <n>\n` or an HTTP GET request head.
fn read_request(stream: &mut SslStream<Wire>, max: u64) -> Result<Request> {
    let mut data = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        if let Some(pos) = data.iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&data[..pos]).trim().to_string();
            let is_http = line.starts_with("GET /") && line.contains(" HTTP/");
            if !is_http {
                let n = line
                    .strip_prefix("GET ")
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .ok_or_else(|| {
                        crate::out::Error::Peer(format!("bad request {line:?}; expected `GET <n>`"))
                    })?;
                if n > max {
                    crate::bail!(
                        Peer,
                        "request for {n} bytes exceeds --max-response-bytes {max}"
                    );
                }
                return Ok(Request::Size(n));
            }
            if data.windows(4).any(|w| w == b"\r\n\r\n") || data.windows(2).any(|w| w == b"\n\n") {
                let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                let size = path.trim_start_matches('/').parse::<u64>().ok();
                if let Some(n) = size {
                    if n > max.min(1 << 28) {
                        crate::bail!(Peer, "HTTP request for {n} bytes exceeds the limit");
                    }
                }
                return Ok(Request::Http { path, size });
            }
        }
        if data.len() > 16384 {
            crate::bail!(Peer, "request head longer than 16 KiB");
        }
        match stream.ssl_read(&mut buf) {
            Ok(0) => return Ok(Request::None),
            Ok(k) => data.extend_from_slice(&buf[..k]),
            Err(e) if e.code() == ErrorCode::ZERO_RETURN => return Ok(Request::None),
            Err(e) if e.code() == ErrorCode::SYSCALL && data.is_empty() => {
                return Ok(Request::None)
            }
            Err(e) => crate::bail!(Peer, "reading the request failed: {e}"),
        }
    }
}

pub fn run(a: Args) -> Result<()> {
    a.tls.events_on()?;
    if a.response_mode != "echo-size" && a.response_mode != "none" {
        crate::bail!(
            Usage,
            "--response-mode {:?}: use echo-size or none",
            a.response_mode
        );
    }
    let (ctx, level) = context(&a)?;
    let listener = TcpListener::bind(a.listen)
        .map_err(|e| crate::out::Error::Io(format!("cannot listen on {}: {e}", a.listen)))?;
    let local = listener.local_addr()?;
    emit(&json!({
        "type": "listening", "address": local.to_string(), "port": local.port(),
        "pid": std::process::id(), "tls_version": a.tls.tls_version,
        "groups": a.tls.groups, "sigalgs": a.tls.sigalgs, "ciphers": a.tls.ciphers,
        "ciphersuites": a.tls.ciphersuites, "dh_bits": a.dh_bits,
        "security_level": level, "cert_chain": a.cert_chain, "response_mode": a.response_mode,
        "t": common::realtime_ns(),
    }));
    let mut index: u64 = 0;
    let mut threads = Vec::new();
    loop {
        if let Some(max) = a.max_connections {
            if index >= max {
                break;
            }
        }
        let (tcp, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => crate::bail!(Io, "accept failed: {e}"),
        };
        let c = Conn {
            index,
            peer,
            t_accept: Stamp::now(),
        };
        index += 1;
        if a.concurrent {
            let ctx = ctx.clone();
            let a2 = Args {
                listen: a.listen,
                cert_chain: a.cert_chain.clone(),
                key: a.key.clone(),
                tls: a.tls.clone(),
                dh_bits: a.dh_bits,
                max_connections: a.max_connections,
                response_mode: a.response_mode.clone(),
                concurrent: true,
                max_response_bytes: a.max_response_bytes,
            };
            threads.push(std::thread::spawn(move || {
                serve_one(&ctx, &a2, tcp, c, level)
            }));
            threads.retain(|t| !t.is_finished());
        } else {
            serve_one(&ctx, &a, tcp, c, level);
        }
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}
