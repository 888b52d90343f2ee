//! `tls client`: N sequential fresh TCP connections with full handshakes, each verified
//! (chain and host name against the CA, group, signature scheme, version) and recorded.

use super::common::{self, Recorder, SharedRecorder, Stamp, TlsOpts, Wire};
use crate::out::Result;
use openssl::ssl::{
    ErrorCode, Ssl, SslConnector, SslContext, SslMethod, SslSessionCacheMode, SslStream,
    SslVerifyMode,
};
use openssl::x509::X509VerifyResult;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Server address, HOST:PORT.
    #[arg(long)]
    pub connect: String,
    /// Root certificate(s) (PEM) the server chain must validate against.
    #[arg(long)]
    pub ca: PathBuf,
    /// Name sent in SNI and checked against the certificate (DNS name or IP address);
    /// default: the host part of --connect.
    #[arg(long)]
    pub servername: Option<String>,
    #[command(flatten)]
    pub tls: TlsOpts,
    /// Measured connections.
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    pub count: u64,
    /// Warm-up connections before the measured ones (recorded with "warmup": true).
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// After the handshake, ask the server for this many bytes (`GET <n>`) and read them
    /// to the end (time to first / last byte).
    #[arg(long)]
    pub request_bytes: Option<u64>,
    /// Group the handshake must negotiate (default: --groups when it names exactly one).
    #[arg(long)]
    pub expect_group: Option<String>,
    /// Server signature scheme the handshake must use (default: --sigalgs when it names
    /// exactly one).
    #[arg(long)]
    pub expect_sigalg: Option<String>,
    /// Stop after this many seconds even if not all connections are done (error); at most
    /// 2592000 (30 days).
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=2_592_000))]
    pub time_limit: u64,
    /// Pause between connections in milliseconds (0: back to back).
    #[arg(long, default_value_t = 0)]
    pub gap_ms: u64,
}

fn single(list: &Option<String>) -> Option<String> {
    let l = list.as_ref()?;
    let items: Vec<&str> = l.split([':', ',']).filter(|s| !s.is_empty()).collect();
    if items.len() == 1 {
        Some(items[0].to_string())
    } else {
        None
    }
}

/// Compare names case- and punctuation-insensitively, with OpenSSL's aliases for the NIST
/// curves (it reports "secp256r1" for a group configured as "P-256" or "prime256v1").
fn norm(s: &str) -> String {
    let n = s.to_ascii_lowercase().replace(['-', '_'], "");
    match n.as_str() {
        "p256" | "prime256v1" | "secp256r1" => "secp256r1".into(),
        "p384" | "secp384r1" => "secp384r1".into(),
        "p521" | "secp521r1" => "secp521r1".into(),
        _ => n,
    }
}

fn context(a: &Args) -> Result<(SslContext, u32)> {
    let mut b = SslConnector::builder(SslMethod::tls_client())?;
    b.set_verify(SslVerifyMode::PEER);
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    b.set_ca_file(&a.ca)
        .map_err(|e| crate::out::Error::Io(format!("cannot load --ca {}: {e}", a.ca.display())))?;
    a.tls.apply(&mut b, None)?;
    let ctx = b.build().into_context();
    let level = ctx.security_level();
    Ok((ctx, level))
}

struct Target {
    addr: SocketAddr,
    name: String,
}

fn resolve(a: &Args) -> Result<Target> {
    let addr = a
        .connect
        .to_socket_addrs()
        .map_err(|e| {
            crate::out::Error::Usage(format!("--connect {:?}: {e}; use HOST:PORT", a.connect))
        })?
        .next()
        .ok_or_else(|| {
            crate::out::Error::Usage(format!("--connect {:?} resolves to nothing", a.connect))
        })?;
    let host = a
        .connect
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(&a.connect);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = a.servername.clone().unwrap_or_else(|| host.to_string());
    Ok(Target { addr, name })
}

pub fn run(a: Args) -> Result<()> {
    let events_on = a.tls.events_on()?;
    let (ctx, level) = context(&a)?;
    let target = resolve(&a)?;
    let expect_group = a.expect_group.clone().or_else(|| single(&a.tls.groups));
    let expect_sig = a.expect_sigalg.clone().or_else(|| single(&a.tls.sigalgs));
    let version = a.tls.version()?;
    let want_version = if version == openssl::ssl::SslVersion::TLS1_3 {
        "TLSv1.3"
    } else {
        "TLSv1.2"
    };
    let deadline = Instant::now() + Duration::from_secs(a.time_limit);
    let total = a.warmup + a.count;
    for i in 0..total {
        if Instant::now() > deadline {
            crate::bail!(
                Io,
                "--time-limit {} s reached after {i} of {total} connections",
                a.time_limit
            );
        }
        let warmup = i < a.warmup;
        let rec: SharedRecorder = Rc::new(RefCell::new(Recorder {
            events_on,
            ..Default::default()
        }));
        let mut out = json!({
            "type": "connection", "role": "client",
            "index": if warmup { i } else { i - a.warmup }, "warmup": warmup,
            "server": target.addr.to_string(), "servername": target.name,
            "security_level": level,
        });
        let res = one(&ctx, &a, &target, &rec, &mut out);
        let events;
        {
            let mut r = rec.borrow_mut();
            out["record_bytes_sent"] = json!(r.record_bytes[0]);
            out["record_bytes_received"] = json!(r.record_bytes[1]);
            out["bytes_sent"] = json!(r.io_bytes[0]);
            out["bytes_received"] = json!(r.io_bytes[1]);
            out["records_sent"] = json!(r.records[0]);
            out["records_received"] = json!(r.records[1]);
            events = if events_on {
                Some(r.take_events())
            } else {
                None
            };
        }
        if let Err(e) = res {
            return Err(e.context(format!("connection {i} to {}", target.addr)));
        }
        // Every handshake is checked: a different negotiation is an error, not a sample.
        let neg = &out["negotiated"];
        let got_version = neg["version"].as_str().unwrap_or("");
        if got_version != want_version {
            crate::bail!(
                Check,
                "connection {i}: negotiated {got_version}, asked for {want_version}"
            );
        }
        if let Some(g) = &expect_group {
            let got = neg["group"].as_str().unwrap_or("none");
            if norm(got) != norm(g) {
                crate::bail!(
                    Check,
                    "connection {i}: negotiated group {got}, asked for {g}"
                );
            }
        }
        if let Some(s) = &expect_sig {
            let got = neg["sigalg"].as_str().unwrap_or("none");
            if norm(got) != norm(s) {
                crate::bail!(
                    Check,
                    "connection {i}: server signed with {got}, asked for {s}"
                );
            }
        }
        common::emit_with_events(&out, events.as_deref());
        if a.gap_ms > 0 && i + 1 < total {
            std::thread::sleep(Duration::from_millis(a.gap_ms));
        }
    }
    Ok(())
}

fn one(
    ctx: &SslContext,
    a: &Args,
    target: &Target,
    rec: &SharedRecorder,
    out: &mut Value,
) -> Result<()> {
    let timeout = Duration::from_secs(a.tls.io_timeout.max(1));
    let t0 = Stamp::now();
    out["t_connect_start"] = json!(t0.real);
    let tcp = TcpStream::connect_timeout(&target.addr, timeout)
        .map_err(|e| crate::out::Error::Io(format!("TCP connect failed: {e}")))?;
    let t1 = Stamp::now();
    out["t_tcp_connected"] = json!(t1.real);
    tcp.set_nodelay(true)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.set_write_timeout(Some(timeout))?;
    out["local"] = json!(tcp.local_addr()?.to_string());
    out["congestion_control"] = json!(common::congestion_control(&tcp));
    let mut ssl = Ssl::new(ctx)?;
    common::attach_recorder(&mut ssl, rec);
    match target.name.parse::<IpAddr>() {
        Ok(ip) => ssl.param_mut().set_ip(ip)?,
        Err(_) => {
            ssl.set_hostname(&target.name)?;
            ssl.param_mut().set_host(&target.name)?;
        }
    }
    let mut stream = SslStream::new(
        ssl,
        Wire {
            tcp,
            rec: rec.clone(),
        },
    )?;
    let hs = stream.connect();
    let t2 = Stamp::now();
    if let Err(e) = hs {
        let v = stream.ssl().verify_result();
        if v != X509VerifyResult::OK {
            crate::bail!(
                Check,
                "certificate verification failed: {}",
                v.error_string()
            );
        }
        crate::bail!(Peer, "handshake failed: {e}");
    }
    out["t_handshake_done"] = json!(t2.real);
    let ssl = stream.ssl();
    if ssl.verify_result() != X509VerifyResult::OK {
        crate::bail!(
            Check,
            "certificate verification failed: {}",
            ssl.verify_result().error_string()
        );
    }
    let mut neg = common::negotiated(ssl);
    neg["sigalg"] = json!(common::peer_sigalg(ssl));
    neg["peer_tmp_key"] = common::peer_tmp_key(ssl).unwrap_or(Value::Null);
    out["negotiated"] = neg;
    out["verified"] = json!(true);
    let chain = ssl.peer_cert_chain().map(|c| {
        c.iter()
            .map(|x| x.to_der().map(|d| d.len()).unwrap_or(0))
            .collect::<Vec<_>>()
    });
    out["peer_chain_der_bytes"] = json!(chain);
    let mut durations = json!({
        "tcp_connect_ns": t1.mono - t0.mono,
        "handshake_ns": t2.mono - t1.mono,
        "connect_to_handshake_ns": t2.mono - t0.mono,
    });

    if let Some(n) = a.request_bytes {
        stream.write_all(format!("GET {n}\n").as_bytes())?;
        stream.flush()?;
        let t_req = Stamp::now();
        out["t_request_sent"] = json!(t_req.real);
        let mut buf = vec![0u8; 65536];
        let mut got: u64 = 0;
        let mut first: Option<Stamp> = None;
        let mut last: Option<Stamp> = None;
        let clean;
        loop {
            match stream.ssl_read(&mut buf) {
                Ok(0) => {
                    clean = true;
                    break;
                }
                Ok(k) => {
                    let now = Stamp::now();
                    if first.is_none() {
                        first = Some(now);
                    }
                    if buf[..k].iter().any(|&b| b != b'x') {
                        crate::bail!(
                            Check,
                            "response data corrupted (expected the server's filler bytes)"
                        );
                    }
                    got += k as u64;
                    if got >= n {
                        last = Some(now);
                    }
                    if got > n {
                        crate::bail!(Check, "server sent {got} bytes, asked for {n}");
                    }
                }
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => {
                    clean = true;
                    break;
                }
                Err(e) => crate::bail!(
                    Peer,
                    "reading the response failed after {got} of {n} bytes: {e}"
                ),
            }
        }
        if got != n {
            crate::bail!(Check, "received {got} bytes, asked for {n}");
        }
        if !clean {
            crate::bail!(Peer, "server closed without close_notify");
        }
        let first = first.unwrap_or(t_req);
        let last = last.unwrap_or(t_req);
        out["t_first_byte"] = json!(first.real);
        out["t_last_byte"] = json!(last.real);
        out["app_bytes_received"] = json!(got);
        durations["first_byte_ns"] = json!(first.mono - t0.mono);
        durations["last_byte_ns"] = json!(last.mono - t0.mono);
        durations["request_to_last_byte_ns"] = json!(last.mono - t_req.mono);
    }
    out["durations"] = durations;
    out["tcp_info"] = common::tcp_info(&stream.get_ref().tcp);
    let _ = stream.shutdown();
    out["t_closed"] = json!(common::realtime_ns());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::norm;

    #[test]
    fn group_aliases_compare_equal() {
        assert_eq!(norm("P-256"), norm("secp256r1"));
        assert_eq!(norm("prime256v1"), norm("secp256r1"));
        assert_eq!(norm("P-521"), norm("secp521r1"));
        assert_eq!(norm("X25519MLKEM768"), norm("x25519mlkem768"));
        assert_ne!(norm("P-256"), norm("P-384"));
        assert_ne!(norm("X25519"), norm("X448"));
    }
}
