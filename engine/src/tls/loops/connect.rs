//! One client connection, the same for every stack and every loop that connects (`tls
//! client`, `load`, `bulk`): the client's flags, the configured context and target, the TCP
//! connect under its deadline, the handshake, the request, the close, and the checks of
//! what was negotiated (chain and host name against the CA, version, group, signature
//! scheme) every connection must pass before it is recorded.

use super::admission::{Admission, Ending, Phase, Watch};
use super::options::TlsOpts;
use crate::out::Result;
use crate::tls::record::{self, SharedRecorder, Stamp};
use crate::tls::stack::{
    ClientContext, ClientSetup, Identity, ReadOutcome, ServerName, Session, Stack, TlsVersion,
    Verification, VerifyMode,
};
use crate::tls::transport::tcp::{self, Wire};
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
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
    #[serde(flatten)]
    pub tls: TlsOpts,
    /// Measured connections.
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    pub count: u64,
    /// Warm-up connections before the measured ones (recorded with "warmup": true).
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// After the handshake, ask the server for this many bytes (`GET <n>`) and read them
    /// to the end (time to first / last byte).
    #[arg(long, conflicts_with = "request_path")]
    pub request_bytes: Option<u64>,
    /// What the warm-up connections ask for instead of --request-bytes (0: the handshake
    /// and an empty answer), so a warm-up need not carry a measured connection's transfer.
    #[arg(long, requires = "request_bytes")]
    pub warmup_request_bytes: Option<u64>,
    /// After the handshake, send an HTTP/1.1 GET of this path (Host: the server name) and
    /// read the response to its end (Content-Length, chunked, or the server's close): time
    /// to first / last byte, status and sizes.
    #[arg(long)]
    pub request_path: Option<String>,
    /// At the end of each connection, after sending close_notify, wait at most this many
    /// milliseconds (0-60000) for the server's: what it sends meanwhile (session tickets) is
    /// read and recorded. 0: close at once.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub await_close_ms: u64,
    /// Record the certificates the server sent (DER, hex, leaf first) in every connection
    /// record (`peer_chain`).
    #[arg(long)]
    pub peer_chain: bool,
    /// Group the handshake must negotiate (default: --groups when it names exactly one).
    #[arg(long)]
    pub expect_group: Option<String>,
    /// Server signature scheme the handshake must use (default: --sigalgs when it names
    /// exactly one).
    #[arg(long)]
    pub expect_sigalg: Option<String>,
    /// Mutual TLS: the client certificate (PEM, with any intermediates) to present when the
    /// server asks for one.
    #[arg(long, requires = "key")]
    pub cert_chain: Option<PathBuf>,
    /// Mutual TLS: the private key of --cert-chain (PEM).
    #[arg(long, requires = "cert_chain")]
    pub key: Option<PathBuf>,
    /// Mutual TLS: the scheme the client's CertificateVerify must use (default: the one
    /// --client-sigalgs names when it names exactly one); refused otherwise.
    #[arg(long, requires = "cert_chain")]
    pub expect_client_sigalg: Option<String>,
    /// Stop after this many seconds even if not all connections are done (error); at most
    /// 2592000 (30 days).
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=2_592_000))]
    pub time_limit: u64,
    /// Seconds each connection may take from the start of its TCP connect to its close
    /// (connect, handshake, request, response), 1-86400, however the server paces its
    /// bytes: at the deadline its socket is shut down and the connection fails, naming the
    /// phase it was in. Default: no bound of its own (--time-limit still bounds it, and
    /// --io-timeout every single wait).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub connection_timeout: Option<u64>,
    /// Pause between connections in milliseconds (0: back to back).
    #[arg(long, default_value_t = 0)]
    pub gap_ms: u64,
    /// Run the connections in rounds, WARMUP:COUNT each, comma-separated (20:100,2:100),
    /// -n and --warmup being their totals: each round starts when the process receives
    /// SIGCONT. Nothing is written while a round runs; its connection records follow its
    /// last connection, then a `round` record. A round's last connection waits (at most
    /// --io-timeout) for the server's close_notify, so the whole connection has crossed the
    /// link when the round ends. --time-limit then bounds the process's whole life, the
    /// waits included.
    #[arg(long)]
    pub rounds: Option<String>,
    /// Write the `connection` records to this file (JSON lines, created or truncated)
    /// instead of stdout; every other record stays on stdout. With --rounds a round's
    /// records are in the file before its `round` record is on stdout.
    #[arg(long)]
    pub connection_records: Option<PathBuf>,
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

pub struct Target {
    pub addr: SocketAddr,
    pub name: String,
}

pub fn resolve(a: &Args) -> Result<Target> {
    let addr = a
        .connect
        .to_socket_addrs()
        .map_err(|e| crate::err!(Usage, "--connect {:?}: {e}; use HOST:PORT", a.connect))?
        .next()
        .ok_or_else(|| crate::err!(Usage, "--connect {:?} resolves to nothing", a.connect))?;
    let host = a
        .connect
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(&a.connect);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = a.servername.clone().unwrap_or_else(|| host.to_string());
    Ok(Target { addr, name })
}

/// A group or signature scheme the handshake must settle on.
struct Expected {
    name: String,
    /// Its code point, when the stack knows the name.
    code: Option<u16>,
}

impl Expected {
    /// Whether a negotiated (name, code) is this one: by code when both are known, else by
    /// name (case, punctuation and NIST curve aliases ignored).
    fn matches(&self, got: Option<&str>, got_code: Option<u16>) -> bool {
        match (self.code, got_code) {
            (Some(e), Some(g)) => e == g,
            _ => got.is_some_and(|g| norm(g) == norm(&self.name)),
        }
    }
}

/// What every connection is checked against.
pub struct Checks {
    version: TlsVersion,
    /// Whether the chain must validate (else it is only reported).
    verify: VerifyMode,
    group: Option<Expected>,
    sigalg: Option<Expected>,
    /// Mutual TLS: the scheme the client must have signed with.
    client_sigalg: Option<Expected>,
    /// Mutual TLS: a client certificate was configured, so the server must have asked for it
    /// and the client must have signed.
    client_certificate: bool,
}

/// A configured client context, its target and the checks every connection must pass.
pub fn setup(stack: &dyn Stack, a: &Args) -> Result<(Box<dyn ClientContext>, Target, Checks)> {
    let ctx = stack.client(&ClientSetup {
        protocol: a.tls.protocol()?,
        ca: a.ca.clone(),
        identity: a
            .cert_chain
            .clone()
            .zip(a.key.clone())
            .map(|(cert_chain, key)| Identity { cert_chain, key }),
    })?;
    let target = resolve(a)?;
    if let Some(path) = &a.request_path {
        crate::tls::http::response::check_path(path)?;
    }
    let checks = Checks {
        version: a.tls.version()?,
        verify: a.tls.protocol()?.verify,
        group: a
            .expect_group
            .clone()
            .or_else(|| single(&a.tls.groups))
            .map(|name| Expected {
                code: stack.group_code(&name),
                name,
            }),
        sigalg: a
            .expect_sigalg
            .clone()
            .or_else(|| single(&a.tls.sigalgs))
            .map(|name| Expected {
                code: stack.sigalg_code(&name),
                name,
            }),
        client_sigalg: a.expect_client_sigalg.clone().map(|name| Expected {
            code: stack.sigalg_code(&name),
            name,
        }),
        client_certificate: a.cert_chain.is_some(),
    };
    Ok((ctx, target, checks))
}

/// The client's options as it runs with them: the name it sends and checks, and the group
/// and scheme every handshake must settle on (given, or implied by --groups / --sigalgs).
pub fn effective_options(a: &Args, target: &Target, checks: &Checks) -> Value {
    let mut o = record::options(a);
    o["servername"] = json!(target.name);
    o["expect-group"] = json!(checks.group.as_ref().map(|g| &g.name));
    o["expect-sigalg"] = json!(checks.sigalg.as_ref().map(|s| &s.name));
    o
}

/// Every handshake is checked: a different negotiation is an error, not a sample.
pub fn check(stack: &dyn Stack, c: &Checks, neg: &Negotiation, i: u64) -> Result<()> {
    let n = &neg.negotiated;
    if n.version != c.version.name() {
        crate::bail!(
            Check,
            "connection {i}: negotiated {}, asked for {}",
            n.version,
            c.version.name()
        );
    }
    match &neg.verification {
        Verification::Verified => {}
        Verification::Failed(_) if c.verify == VerifyMode::Report => {}
        Verification::Failed(why) => {
            crate::bail!(
                Check,
                "connection {i}: certificate verification failed: {why}"
            )
        }
        Verification::NotChecked => crate::bail!(
            Check,
            "connection {i}: the {} stack did not verify the server's certificate",
            stack.name()
        ),
    }
    // What the stack reports must agree with its own code tables.
    for (what, name, code, table) in [
        (
            "group",
            &n.group,
            n.group_code,
            n.group.as_deref().and_then(|g| stack.group_code(g)),
        ),
        (
            "signature scheme",
            &n.sigalg,
            n.sigalg_code,
            n.sigalg.as_deref().and_then(|s| stack.sigalg_code(s)),
        ),
    ] {
        if let (Some(name), Some(t)) = (name, table) {
            if code != Some(t) {
                crate::bail!(
                    Check,
                    "connection {i}: the {} stack reported {what} {name} as {code:?}, its table says {t:#06x}",
                    stack.name()
                );
            }
        }
    }
    if let Some(g) = &c.group {
        if !g.matches(n.group.as_deref(), n.group_code) {
            crate::bail!(
                Check,
                "connection {i}: negotiated group {}, asked for {}",
                n.group.as_deref().unwrap_or("none"),
                g.name
            );
        }
    }
    if let Some(s) = &c.sigalg {
        if !s.matches(n.sigalg.as_deref(), n.sigalg_code) {
            crate::bail!(
                Check,
                "connection {i}: server signed with {}, asked for {}",
                n.sigalg.as_deref().unwrap_or("none"),
                s.name
            );
        }
    }
    check_client_auth(c, n, i)
}

/// Mutual TLS: a configured client certificate must have been asked for and used.
fn check_client_auth(c: &Checks, n: &record::Negotiated, i: u64) -> Result<()> {
    if c.client_certificate && n.client_sigalg.is_none() {
        crate::bail!(
            Check,
            "connection {i}: the server did not ask for the client certificate (mutual TLS)"
        );
    }
    if let Some(s) = &c.client_sigalg {
        if !s.matches(n.client_sigalg.as_deref(), n.client_sigalg_code) {
            crate::bail!(
                Check,
                "connection {i}: the client signed with {}, asked for {}",
                n.client_sigalg.as_deref().unwrap_or("none"),
                s.name
            );
        }
    }
    Ok(())
}

/// What one connection settled on, for the checks.
pub struct Negotiation {
    pub negotiated: record::Negotiated,
    pub verification: Verification,
}

/// What one connection does after its handshake, and by when it must be done.
#[derive(Clone, Copy)]
pub struct Ask {
    /// The bytes it asks for (`GET <n>`), if any.
    pub request: Option<u64>,
    /// How long it waits for the server's close after its own (0: it closes at once).
    pub await_close_ms: u64,
    /// The end of the run (--time-limit), if the caller keeps one: no connection lasts
    /// past it.
    pub until: Option<Instant>,
}

impl Ask {
    /// What `--request-bytes` and `--await-close-ms` ask of every connection.
    pub fn of(a: &Args) -> Ask {
        Ask {
            request: a.request_bytes,
            await_close_ms: a.await_close_ms,
            until: None,
        }
    }
}

/// What ends a connection's life: --connection-timeout from its start, or the run's
/// --time-limit, whichever comes first.
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    /// The option that set it, with its value, for the error.
    flag: &'static str,
    seconds: u64,
}

impl Deadline {
    /// The deadline of a connection starting now (None: neither bound applies).
    fn of(a: &Args, until: Option<Instant>) -> Option<Deadline> {
        let now = Instant::now();
        let own = a.connection_timeout.map(|s| Deadline {
            at: now + Duration::from_secs(s),
            flag: "--connection-timeout",
            seconds: s,
        });
        let run = until.map(|at| Deadline {
            at,
            flag: "--time-limit",
            seconds: a.time_limit,
        });
        match (own, run) {
            (Some(o), Some(r)) => Some(if r.at < o.at { r } else { o }),
            (o, r) => o.or(r),
        }
    }

    /// The error of a connection this deadline cut off in `phase` (`e`: what the stack saw).
    fn passed(&self, phase: Phase, e: Option<&crate::out::Error>) -> crate::out::Error {
        let what = match self.flag {
            "--time-limit" => format!("the run's --time-limit {} s was reached", self.seconds),
            _ => format!("timed out after {} s", self.seconds),
        };
        let seen = e.map(|e| format!(": {}", e.message())).unwrap_or_default();
        crate::err!(
            Io,
            "{what} in the {} ({} {}){seen}",
            phase.name(),
            self.flag,
            self.seconds
        )
    }
}

/// A TCP connection to the target whose life is watched: its socket is shut down when its
/// deadline passes, whatever the stack is doing with it.
pub struct Dialed {
    pub tcp: Rc<TcpStream>,
    /// When the TCP connect completed (before the watch began: `tcp_connect_ns` is the
    /// connect alone).
    pub connected: Stamp,
    watch: Option<Watch>,
    deadline: Option<Deadline>,
}

impl Dialed {
    /// Connect (within --io-timeout, and the deadline) and start watching.
    pub fn connect(a: &Args, target: &Target, until: Option<Instant>) -> Result<Dialed> {
        let deadline = Deadline::of(a, until);
        let io = Duration::from_secs(a.tls.io_timeout.max(1));
        let wait = match deadline {
            Some(d) => {
                let left = d.at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(d.passed(Phase::Connect, None));
                }
                io.min(left)
            }
            None => io,
        };
        let tcp = TcpStream::connect_timeout(&target.addr, wait).map_err(|e| match deadline {
            Some(d) if wait < io && e.kind() == std::io::ErrorKind::TimedOut => {
                d.passed(Phase::Connect, None)
            }
            _ => crate::err!(Io, "TCP connect failed: {e}"),
        })?;
        let connected = Stamp::now();
        let watch = match deadline {
            Some(d) => Some(
                Admission::clients()
                    .watch(&tcp, Phase::Handshake, Some(d.at))
                    .map_err(|e| crate::err!(Io, "cannot watch the connection's deadline: {e}"))?,
            ),
            None => None,
        };
        Ok(Dialed {
            tcp: Rc::new(tcp),
            connected,
            watch,
            deadline,
        })
    }

    /// The connection moves on to `phase`.
    pub fn phase(&self, phase: Phase) {
        if let Some(w) = &self.watch {
            w.phase(phase);
        }
    }

    /// The phase it is in (or was cut off in).
    pub fn current(&self) -> Phase {
        self.watch.as_ref().map_or(Phase::Handshake, Watch::current)
    }

    /// A failure, told as the deadline when the deadline cut the connection off (the stack
    /// only saw its socket close).
    pub fn explain(&self, e: crate::out::Error) -> crate::out::Error {
        match (self.watch.as_ref().and_then(Watch::ending), self.deadline) {
            (Some(Ending::TimedOut(phase)), Some(d)) => d.passed(phase, Some(&e)),
            _ => e,
        }
    }
}

/// One connection, and what `ask` asks after its handshake.
pub fn one(
    ctx: &dyn ClientContext,
    a: &Args,
    target: &Target,
    ask: Ask,
    rec: &SharedRecorder,
    out: &mut Value,
) -> Result<Negotiation> {
    let t0 = Stamp::now();
    out["t_connect_start"] = json!(t0.real);
    let dialed = Dialed::connect(a, target, ask.until).inspect_err(|_| {
        out["failed_in"] = json!(Phase::Connect.name());
    })?;
    let t1 = dialed.connected;
    out["t_tcp_connected"] = json!(t1.real);
    let result = tcp::setup(&dialed.tcp, a.tls.io_timeout)
        .and_then(|()| connected(ctx, a, target, rec, out, &dialed, (t0, t1, ask)))
        .map_err(|e| dialed.explain(e));
    if result.is_err() {
        // What TCP saw of a failed connection (its RTT, what was acknowledged), and the
        // phase it failed in.
        out["tcp_info"] = tcp::info(&dialed.tcp);
        out["t_failed"] = json!(record::realtime_ns());
        out["failed_in"] = json!(dialed.current().name());
    }
    result
}

/// The rest of `one` on a connected socket: handshake, request, close (`t0`, `t1`: when
/// the connect started and ended; `ask`: `one`'s).
fn connected(
    ctx: &dyn ClientContext,
    a: &Args,
    target: &Target,
    rec: &SharedRecorder,
    out: &mut Value,
    dialed: &Dialed,
    (t0, t1, ask): (Stamp, Stamp, Ask),
) -> Result<Negotiation> {
    let tcp = &dialed.tcp;
    out["local"] = json!(tcp.local_addr()?.to_string());
    out["congestion_control"] = json!(tcp::congestion_control(tcp));
    let handshake = ctx.start(
        Wire {
            tcp: tcp.clone(),
            rec: rec.clone(),
            peer: "server",
            timeout_s: a.tls.io_timeout,
        },
        &ServerName::parse(&target.name),
    )?;
    let hs = handshake.run();
    let t2 = Stamp::now();
    let mut session = hs?;
    out["t_handshake_done"] = json!(t2.real);
    let verification = session.verification();
    if let Verification::Failed(why) = &verification {
        if a.tls.protocol()?.verify == VerifyMode::Require {
            crate::bail!(Check, "certificate verification failed: {why}");
        }
    }
    let negotiated = session.negotiated();
    out["negotiated"] = serde_json::to_value(&negotiated).unwrap_or(Value::Null);
    out["verified"] = json!(verification == Verification::Verified);
    if let Verification::Failed(why) = &verification {
        out["verify_error"] = json!(why);
    }
    out["peer_chain_der_bytes"] = json!(session.peer_chain_der_bytes());
    out["peer_chain_truncated"] = json!(session.peer_chain_truncated());
    if a.peer_chain {
        out["peer_chain"] = json!(session
            .peer_chain_der()
            .map(|c| c.iter().map(|d| hex(d)).collect::<Vec<_>>()));
    }
    let mut durations = json!({
        "tcp_connect_ns": t1.mono - t0.mono,
        "handshake_ns": t2.mono - t1.mono,
        "connect_to_handshake_ns": t2.mono - t0.mono,
    });
    out["durations"] = durations.clone();
    if let Some(n) = ask.request {
        fetch(&mut *session, n, t0, out, &mut durations, dialed)?;
    }
    if let Some(path) = &a.request_path {
        fetch_http(&mut *session, path, target, t0, out, &mut durations, dialed)?;
    }
    out["durations"] = durations;
    out["tcp_info"] = tcp::info(tcp);
    dialed.phase(Phase::Close);
    if ask.await_close_ms > 0 {
        // The wait is bounded by the socket's read timeout, set to the wait.
        tcp.set_read_timeout(Some(Duration::from_millis(ask.await_close_ms)))?;
        let t = Stamp::now();
        session.close(true);
        out["close_wait_ns"] = json!(Stamp::now().mono - t.mono);
    } else {
        session.close(false);
    }
    out["t_closed"] = json!(record::realtime_ns());
    Ok(Negotiation {
        negotiated,
        verification,
    })
}

/// Lower-case hex of bytes.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Most bytes of one HTTP response read (a bound on what a server can make the client
/// read; the body is counted, not kept).
const MAX_HTTP_RESPONSE: u64 = 1 << 30;

/// Send an HTTP/1.1 GET of `path` and read the response to its end.
fn fetch_http(
    session: &mut dyn Session,
    path: &str,
    target: &Target,
    t0: Stamp,
    out: &mut Value,
    durations: &mut Value,
    dialed: &Dialed,
) -> Result<()> {
    let head = crate::tls::http::response::request_head(path, &target.name, target.addr.port());
    dialed.phase(Phase::Request);
    session.write_all(head.as_bytes())?;
    session.flush()?;
    dialed.phase(Phase::Response);
    let t_req = Stamp::now();
    out["t_request_sent"] = json!(t_req.real);
    out["http_path"] = json!(path);
    let mut response = crate::tls::http::response::Response::new();
    let mut buf = vec![0u8; 65536];
    let mut first: Option<Stamp> = None;
    let mut last = t_req;
    let mut ended_by = None;
    while !response.is_complete() {
        let outcome = session.read(&mut buf).map_err(|e| {
            e.context(format!(
                "reading the HTTP response failed after {} bytes",
                response.total_bytes
            ))
        })?;
        match outcome {
            ReadOutcome::Data(k) => {
                let now = Stamp::now();
                first.get_or_insert(now);
                last = now;
                response.push(&buf[..k])?;
                if response.total_bytes > MAX_HTTP_RESPONSE {
                    crate::bail!(
                        Peer,
                        "the HTTP response is longer than {MAX_HTTP_RESPONSE} bytes"
                    );
                }
            }
            ReadOutcome::Closed | ReadOutcome::Eof => {
                ended_by = Some(if outcome == ReadOutcome::Closed {
                    "close_notify"
                } else {
                    "eof"
                });
                response.closed()?;
            }
        }
    }
    let first = first.unwrap_or(t_req);
    out["t_first_byte"] = json!(first.real);
    out["t_last_byte"] = json!(last.real);
    out["app_bytes_received"] = json!(response.total_bytes);
    out["http"] = json!({
        "status": response.status, "framing": response.framing.map(|f| f.name()),
        "head_bytes": response.head_bytes, "body_bytes": response.body_bytes,
        "ended_by": ended_by.or(response.framing.map(|f| f.name())),
    });
    durations["first_byte_ns"] = json!(first.mono - t0.mono);
    durations["last_byte_ns"] = json!(last.mono - t0.mono);
    durations["request_to_last_byte_ns"] = json!(last.mono - t_req.mono);
    Ok(())
}

/// Send `GET <n>\n` and read exactly n filler bytes, then close_notify.
fn fetch(
    session: &mut dyn Session,
    n: u64,
    t0: Stamp,
    out: &mut Value,
    durations: &mut Value,
    dialed: &Dialed,
) -> Result<()> {
    dialed.phase(Phase::Request);
    session.write_all(format!("GET {n}\n").as_bytes())?;
    session.flush()?;
    dialed.phase(Phase::Response);
    let t_req = Stamp::now();
    out["t_request_sent"] = json!(t_req.real);
    let mut buf = vec![0u8; 65536];
    let mut got: u64 = 0;
    let mut first: Option<Stamp> = None;
    let mut last: Option<Stamp> = None;
    loop {
        let outcome = session.read(&mut buf).map_err(|e| {
            e.context(format!(
                "reading the response failed after {got} of {n} bytes"
            ))
        })?;
        match outcome {
            ReadOutcome::Data(k) => {
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
            ReadOutcome::Closed => break,
            ReadOutcome::Eof => crate::bail!(
                Peer,
                "the server closed the connection without close_notify after {got} of {n} bytes"
            ),
        }
    }
    if got != n {
        crate::bail!(Check, "received {got} bytes, asked for {n}");
    }
    let first = first.unwrap_or(t_req);
    let last = last.unwrap_or(t_req);
    out["t_first_byte"] = json!(first.real);
    out["t_last_byte"] = json!(last.real);
    out["app_bytes_received"] = json!(got);
    durations["first_byte_ns"] = json!(first.mono - t0.mono);
    durations["last_byte_ns"] = json!(last.mono - t0.mono);
    durations["request_to_last_byte_ns"] = json!(last.mono - t_req.mono);
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
