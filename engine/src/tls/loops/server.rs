//! `tls server`, the same for every stack: accept, full handshakes only, one request
//! answered (`GET <n>` or HTTP), one JSON record per connection with the negotiated
//! parameters, message events and TCP_INFO.

use super::admission::{Admission, Ending, Phase, Watch, RATE_WINDOW};
use super::options::TlsOpts;
use crate::out::Result;
use crate::tls::http::request::{Request, RequestParser};
use crate::tls::record::{self, Events, Recorder, SharedRecorder, Sink, Stamp};
use crate::tls::stack::{
    ClientAuth, ReadOutcome, ServerContext, ServerSetup, Session, Stack, Verification,
};
use crate::tls::transport::tcp::{self, Wire};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
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
    #[serde(flatten)]
    pub tls: TlsOpts,
    /// TLS 1.2 DHE group size in bits (1024, 2048, 3072, 4096); default: the stack's
    /// automatic choice matched to the certificate.
    #[arg(long)]
    pub dh_bits: Option<u32>,
    /// TLS 1.2 DHE parameters from this PEM file (`pqlab-engine dhparams --source generated`
    /// makes one); the `listening` record gives their size and private exponent length.
    #[arg(long, conflicts_with = "dh_bits")]
    pub dh_params: Option<PathBuf>,
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
    /// With --concurrent: most connections served at once, 1-4096 (default 64). A
    /// connection beyond the cap is closed at once and reported in a `connection_refused`
    /// record; it does not count towards --max-connections.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub max_concurrent: Option<u64>,
    /// Serve with a fixed pool of this many threads (1-256), each accepting and serving
    /// one connection at a time (for capacity measurements: as many threads as the server
    /// has CPUs). Not with --concurrent.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub threads: Option<u64>,
    /// Seconds a connection may take for its handshake and its request head together,
    /// 1-86400: a peer that stalls or sends a byte at a time is cut off then, however each
    /// single read is timed (--io-timeout). With --concurrent, a full server also makes
    /// room for a new connection by evicting the oldest one still in that phase.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub handshake_timeout: u64,
    /// Seconds a connection may take for its response, 1-86400: from its request to its
    /// last byte and close (with --response-mode none: until the client closes), however
    /// slowly the client reads. A bulk transfer's every request has its own.
    #[arg(long, default_value_t = DEFAULT_RESPONSE_TIMEOUT, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub response_timeout: u64,
    /// With --concurrent: a full server with no connection in its handshake evicts its
    /// slowest response when that moved fewer bytes a second than this over the last 5 to
    /// 7.5 s (0: responses are never evicted; at most 1073741824).
    #[arg(long, default_value_t = DEFAULT_MIN_RESPONSE_RATE, value_parser = clap::value_parser!(u64).range(0..=(1u64 << 30)))]
    pub min_response_rate: u64,
    /// Largest n accepted in `GET <n>` and HTTP `GET /<n>` (bytes). Responses are streamed
    /// in 16 KiB records, so the server's memory does not grow with n.
    #[arg(long, default_value_t = 1 << 30)]
    pub max_response_bytes: u64,
    /// Mutual TLS: request a client certificate and require it to chain to these PEM
    /// roots; a client without one, or with another, fails its handshake.
    #[arg(long)]
    pub client_ca: Option<PathBuf>,
    /// Mutual TLS: the signature schemes accepted for the client's CertificateVerify (stack
    /// names, sent in the CertificateRequest); default: the stack's list.
    #[arg(long, requires = "client_ca")]
    pub client_sigalgs: Option<String>,
    /// Count OpenSSL's allocations (its allocator hooks) and write a `heap` record after
    /// every handshake: connections open, counted heap in use, VmRSS (docs/memory.md).
    #[arg(long)]
    pub count_heap: bool,
    /// Write the records that follow `listening` only when the server ends: nothing is
    /// written while it serves, so no output competes with the handshakes being timed (at
    /// most 64 MiB are held; beyond that they are written as they come).
    #[arg(long)]
    pub hold_records: bool,
    /// Write the `connection` records to this file (JSON lines, created or truncated)
    /// instead of stdout; every other record stays on stdout.
    #[arg(long)]
    pub connection_records: Option<PathBuf>,
}

/// Connections whose handshake is done and that are not closed yet (for `heap` records).
static ESTABLISHED: AtomicU64 = AtomicU64::new(0);

/// One established connection, counted in ESTABLISHED while it lives.
struct Established;

impl Established {
    fn new() -> Established {
        ESTABLISHED.fetch_add(1, Ordering::SeqCst);
        Established
    }
}

impl Drop for Established {
    fn drop(&mut self) {
        ESTABLISHED.fetch_sub(1, Ordering::SeqCst);
    }
}

/// --count-heap: the process's counted heap (the stack's own count, and every block of the
/// C allocator) and resident set with `open` connections up.
fn heap_record(sink: &dyn Sink, index: u64, stack: &dyn crate::tls::stack::Stack) {
    use crate::heap::{process_counts, Source};
    let c = process_counts(stack.heap_counting().source());
    let m = process_counts(Source::Malloc);
    sink.record(&json!({
        "type": "heap", "index": index, "connections_open": ESTABLISHED.load(Ordering::SeqCst),
        "heap_counting": stack.heap_counting(),
        "heap_in_use_bytes": c.in_use, "heap_peak_bytes": c.peak,
        "heap_total_bytes": c.total_bytes, "allocations": c.allocations, "frees": c.frees,
        "malloc_in_use_bytes": m.in_use, "malloc_peak_bytes": m.peak,
        "malloc_total_bytes": m.total_bytes,
        "vm_rss_bytes": crate::heap::vm_rss_bytes(), "t": record::realtime_ns(),
    }));
}

/// Bytes per application-data write (one full TLS record).
const CHUNK: usize = 16384;

/// --max-concurrent when not given: enough for a browser's parallel connections, few
/// enough that idle sockets cannot exhaust threads.
pub const DEFAULT_MAX_CONCURRENT: u64 = 64;

/// --response-timeout when not given: an hour, the client's --time-limit; a response of
/// --max-response-bytes (1 GiB) then needs 300 kB/s.
pub const DEFAULT_RESPONSE_TIMEOUT: u64 = 3600;

/// --min-response-rate when not given: one full TLS record a second.
pub const DEFAULT_MIN_RESPONSE_RATE: u64 = CHUNK as u64;

/// How long a full server waits for evicted connections to unwind before it refuses a new
/// one (a burst of connections can outrun the victims' threads).
const VICTIMS_UNWIND: Duration = Duration::from_secs(1);

/// Check the arguments and configure the stack, before anything listens.
pub fn prepare(a: &Args) -> Result<(&'static dyn Stack, Arc<dyn ServerContext>)> {
    a.tls.events_on()?;
    a.tls.server_only()?;
    if a.response_mode != "echo-size" && a.response_mode != "none" {
        crate::bail!(
            Usage,
            "--response-mode {:?}: use echo-size or none",
            a.response_mode
        );
    }
    if a.max_concurrent.is_some() && !a.concurrent {
        crate::bail!(Usage, "--max-concurrent needs --concurrent");
    }
    if a.threads.is_some() && a.concurrent {
        crate::bail!(
            Usage,
            "--threads and --concurrent exclude each other; use one of them"
        );
    }
    let stack = a.tls.stack()?;
    let client_auth = match &a.client_ca {
        Some(ca) => Some(ClientAuth {
            ca: ca.clone(),
            sigalgs: super::options::list("--client-sigalgs", &a.client_sigalgs)?,
        }),
        None => None,
    };
    let ctx = stack.server(&ServerSetup {
        protocol: a.tls.protocol()?,
        cert_chain: a.cert_chain.clone(),
        key: a.key.clone(),
        dh_bits: a.dh_bits,
        dh_params: a.dh_params.clone(),
        client_auth,
    })?;
    Ok((stack, ctx))
}

pub fn run(a: Args) -> Result<()> {
    let (stack, ctx) = prepare(&a)?;
    let listener = TcpListener::bind(a.listen)
        .map_err(|e| crate::err!(Io, "cannot listen on {}: {e}", a.listen))?;
    let local = listener.local_addr()?;
    let output = Arc::new(record::Stdout::with_records(
        a.connection_records.as_deref(),
    )?);
    let sink: Arc<dyn Sink> = output.clone();
    sink.record(&json!({
        "type": "listening", "address": local.to_string(), "port": local.port(),
        "pid": std::process::id(), "stack": stack.name(), "tls_version": a.tls.tls_version,
        "groups": a.tls.groups, "sigalgs": a.tls.sigalgs, "ciphers": a.tls.ciphers,
        "ciphersuites": a.tls.ciphersuites, "dh_bits": a.dh_bits, "dh_params": a.dh_params,
        "security_level": ctx.security_level(), "cert_chain": a.cert_chain,
        "response_mode": a.response_mode, "options": effective_options(&a),
        "t": record::realtime_ns(),
    }));
    if a.hold_records {
        output.hold();
    }
    let served = serve(stack, ctx, listener, Arc::new(a), sink);
    // Every connection's record is out before the command ends (or its error record).
    output.finish();
    served?;
    match output.records_error() {
        Some(e) => crate::bail!(Io, "{e}"),
        None => Ok(()),
    }
}

/// The server's options as it runs with them: --max-concurrent's default when
/// --concurrent, and the CPUs it may run on.
fn effective_options(a: &Args) -> Value {
    let mut o = record::options(a);
    if a.concurrent {
        o["max-concurrent"] = json!(a.max_concurrent.unwrap_or(DEFAULT_MAX_CONCURRENT));
    }
    o["cpus"] = json!(crate::cputime::allowed_cpus());
    o
}

/// Decrements the count of connections in flight when a worker ends (even by a panic).
struct InFlight(Arc<AtomicU64>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connection handed to a worker, with its slot in the --max-concurrent count and its
/// deadline.
type Job = (TcpStream, Conn, InFlight, std::io::Result<Watch>);

/// The accept loop: one connection at a time, or with --concurrent each on a worker thread,
/// at most --max-concurrent at once; until --max-connections. Workers are kept and reused:
/// a thread per connection cost a thread's creation and teardown (stack mapping, libssl's
/// per-thread state) on every connection's critical path.
pub fn serve(
    stack: &'static dyn Stack,
    ctx: Arc<dyn ServerContext>,
    listener: TcpListener,
    a: Arc<Args>,
    sink: Arc<dyn Sink>,
) -> Result<()> {
    // Only a --concurrent server evicts, and so samples its responses' rates.
    let admission = Admission::start(a.concurrent);
    if let Some(n) = a.threads {
        return serve_pool(stack, ctx, listener, a, sink, &admission, n);
    }
    let cap = a.max_concurrent.unwrap_or(DEFAULT_MAX_CONCURRENT);
    let in_flight = Arc::new(AtomicU64::new(0));
    // Workers waiting for a connection, and the queue they take them from.
    let idle = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel::<Job>();
    let rx = Arc::new(std::sync::Mutex::new(rx));
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
        let t_accept = Stamp::now();
        let c = Conn {
            index,
            peer,
            t_accept,
        };
        if !a.concurrent {
            index += 1;
            let watch = opening(&admission, &tcp, &a);
            serve_one(stack, &*ctx, &a, tcp, c, &*sink, watch);
            continue;
        }
        if in_flight.load(Ordering::SeqCst) >= cap {
            // Full: make room by evicting the connection that has been in its handshake
            // (or request head) the longest, or else the slowest response under
            // --min-response-rate; its worker ends at once. Silent or trickling peers and
            // slow readers therefore cannot lock good clients out. Responses moving at least
            // that rate are never evicted, and victims still unwinding count: never more
            // than twice the cap in flight.
            let unwound = std::time::Instant::now() + VICTIMS_UNWIND;
            while in_flight.load(Ordering::SeqCst) >= 2 * cap && std::time::Instant::now() < unwound
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            let evicted = in_flight.load(Ordering::SeqCst) < 2 * cap
                && admission.evict(a.min_response_rate).is_some();
            if !evicted {
                drop(tcp);
                let why = format!(
                    "{cap} connections are already being served, none of them in its \
                     handshake or slower than --min-response-rate {} B/s (--max-concurrent \
                     {cap})",
                    a.min_response_rate
                );
                refuse(&*sink, peer, cap, &why);
                continue;
            }
        }
        in_flight.fetch_add(1, Ordering::SeqCst);
        // Watched from now on (not only once a worker runs it), so a burst of connections
        // always has its oldest unfinished one to evict.
        let watch = opening(&admission, &tcp, &a);
        let job = (tcp, c, InFlight(in_flight.clone()), watch);
        // An idle worker takes it; else a new worker starts with it (at most twice `cap`
        // exist, since every worker beyond the idle ones holds a connection in flight).
        let claimed = idle
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if claimed {
            if tx.send(job).is_ok() {
                index += 1;
            }
            continue;
        }
        threads.retain(|t: &std::thread::JoinHandle<()>| !t.is_finished());
        let (ctx2, a2, sink2, idle2, rx2) = (
            ctx.clone(),
            a.clone(),
            sink.clone(),
            idle.clone(),
            rx.clone(),
        );
        let worker = std::thread::Builder::new()
            .name("conn-worker".into())
            .spawn(move || {
                let shared = Shared {
                    stack,
                    ctx: &*ctx2,
                    a: &a2,
                    sink: &*sink2,
                };
                worker_loop(&shared, job, &idle2, &rx2)
            });
        match worker {
            Ok(t) => {
                threads.push(t);
                index += 1;
            }
            // The system has no thread to spare: the connection (moved into the failed
            // closure) is closed; report it like the cap.
            Err(e) => refuse(&*sink, peer, cap, &format!("no thread to serve it: {e}")),
        }
    }
    // No more connections: idle workers see the queue close and end.
    drop(tx);
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

/// Watch a connection from its accept: its handshake and request head must be done within
/// --handshake-timeout.
fn opening(admission: &Arc<Admission>, tcp: &TcpStream, a: &Args) -> std::io::Result<Watch> {
    let deadline = Instant::now() + Duration::from_secs(a.handshake_timeout);
    admission.watch(tcp, Phase::Handshake, Some(deadline))
}

/// A response's deadline (--response-timeout from now).
fn response_deadline(a: &Args) -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(a.response_timeout))
}

/// A --concurrent worker: serve its first connection, then wait for more until the accept
/// loop closes the queue.
fn worker_loop(
    sh: &Shared,
    first: Job,
    idle: &AtomicU64,
    rx: &std::sync::Mutex<std::sync::mpsc::Receiver<Job>>,
) {
    let mut job = first;
    loop {
        let (tcp, c, guard, watch) = job;
        serve_one(sh.stack, sh.ctx, sh.a, tcp, c, sh.sink, watch);
        drop(guard);
        idle.fetch_add(1, Ordering::SeqCst);
        let next = match rx.lock() {
            Ok(q) => q.recv(),
            Err(_) => return,
        };
        match next {
            Ok(j) => job = j,
            Err(_) => return,
        }
    }
}

/// What a --concurrent worker serves with.
struct Shared<'a> {
    stack: &'static dyn Stack,
    ctx: &'a dyn ServerContext,
    a: &'a Args,
    sink: &'a dyn Sink,
}

/// --threads N: N threads share the listening socket, each accepting and serving one
/// connection at a time, until --max-connections (counted across the pool).
fn serve_pool(
    stack: &'static dyn Stack,
    ctx: Arc<dyn ServerContext>,
    listener: TcpListener,
    a: Arc<Args>,
    sink: Arc<dyn Sink>,
    admission: &Arc<Admission>,
    threads: u64,
) -> Result<()> {
    // Non-blocking accept with a short poll, so every thread sees the end of the run.
    listener.set_nonblocking(true)?;
    let next = AtomicU64::new(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    let max = a.max_connections.unwrap_or(u64::MAX);
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (ctx, a, sink, listener) = (&*ctx, &*a, &*sink, &listener);
                let (next, done) = (&next, &done);
                s.spawn(move || -> Result<()> {
                    while !done.load(Ordering::SeqCst) {
                        if !readable(listener, 100) {
                            continue;
                        }
                        let (tcp, peer) = match listener.accept() {
                            Ok(x) => x,
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    std::io::ErrorKind::WouldBlock
                                        | std::io::ErrorKind::Interrupted
                                ) =>
                            {
                                continue
                            }
                            Err(e) => {
                                done.store(true, Ordering::SeqCst);
                                crate::bail!(Io, "accept failed: {e}");
                            }
                        };
                        let t_accept = Stamp::now();
                        let index = next.fetch_add(1, Ordering::SeqCst);
                        if index >= max {
                            done.store(true, Ordering::SeqCst);
                            break;
                        }
                        if index + 1 >= max {
                            done.store(true, Ordering::SeqCst);
                        }
                        tcp.set_nonblocking(false)?;
                        let c = Conn {
                            index,
                            peer,
                            t_accept,
                        };
                        let watch = opening(admission, &tcp, a);
                        serve_one(stack, ctx, a, tcp, c, sink, watch);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .unwrap_or_else(|_| Err(crate::err!(Io, "a server thread panicked")))?;
        }
        Ok(())
    })
}

/// Whether the socket has a connection to accept within `ms` milliseconds.
fn readable(listener: &TcpListener, ms: i32) -> bool {
    use std::os::fd::AsRawFd;
    let mut fds = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    unsafe { libc::poll(&mut fds, 1, ms) > 0 }
}

/// A connection closed at once because the server is at --max-concurrent.
fn refuse(sink: &dyn Sink, peer: SocketAddr, cap: u64, why: &str) {
    sink.record(&json!({
        "type": "connection_refused", "peer": peer.to_string(), "t": record::realtime_ns(),
        "max_concurrent": cap,
        "message": format!("closed at once: {why}"),
    }));
}

struct Conn {
    index: u64,
    peer: SocketAddr,
    t_accept: Stamp,
}

/// Serve one connection and emit its record.
fn serve_one(
    stack: &dyn Stack,
    ctx: &dyn ServerContext,
    a: &Args,
    tcp: TcpStream,
    c: Conn,
    sink: &dyn Sink,
    watch: std::io::Result<Watch>,
) {
    let events = a.tls.events().unwrap_or(Events::All);
    let events_on = events != Events::Off;
    let rec: SharedRecorder = Rc::new(RefCell::new(Recorder::for_events(events)));
    if !stack.reports_messages() {
        rec.borrow_mut().scan_wire();
    }
    let mut out = json!({
        "type": "connection", "role": "server", "stack": stack.name(), "index": c.index,
        "peer": c.peer.to_string(),
        "t_accept": c.t_accept.real, "security_level": ctx.security_level(),
    });
    let result = match watch {
        Ok(watch) => handshake_and_respond(ctx, a, tcp, &rec, &c, &mut out, sink, &watch)
            .map_err(|e| why_it_ended(e, watch.ending(), a)),
        Err(e) => Err(crate::err!(
            Io,
            "cannot watch the connection's deadline: {e}"
        )),
    };
    let events = match rec.try_borrow_mut() {
        Ok(mut r) => {
            r.add_counters(&mut out, stack.reports_messages());
            events_on.then(|| r.take_events())
        }
        Err(_) => None,
    };
    out["output_blocked_ns"] = json!(sink.blocked_ns());
    out["process_cpu_ns"] = json!(crate::cputime::process_cpu_ns());
    if let Err(e) = result {
        out["type"] = json!("connection_error");
        out["kind"] = json!(e.kind());
        out["message"] = json!(e.message());
    }
    sink.connection(&out, events.as_deref());
}

/// A connection's error, told as the deadline or the eviction when one of them cut it off
/// (the stack only saw its socket close).
fn why_it_ended(e: crate::out::Error, ending: Option<Ending>, a: &Args) -> crate::out::Error {
    let Some(ending) = ending else { return e };
    let why = match ending {
        Ending::TimedOut(p @ (Phase::Handshake | Phase::Request | Phase::Connect)) => format!(
            "the handshake and request were not complete after {} s (--handshake-timeout; \
             it was in its {})",
            a.handshake_timeout,
            p.name()
        ),
        Ending::TimedOut(_) => format!(
            "the response was not complete after {} s (--response-timeout)",
            a.response_timeout
        ),
        Ending::Evicted { rate: None, phase } => format!(
            "evicted: the server was full (--max-concurrent) and this was the oldest \
             connection still in its handshake or request (it was in its {})",
            phase.name()
        ),
        Ending::Evicted {
            rate: Some(rate), ..
        } => format!(
            "evicted: the server was full (--max-concurrent) and this was its slowest \
             response, {rate} B/s over the last {}-{} s, under --min-response-rate {}",
            RATE_WINDOW.as_secs(),
            RATE_WINDOW.as_secs_f64() * 1.5,
            a.min_response_rate
        ),
    };
    crate::err!(Peer, "{why}: {}", e.message())
}

#[allow(clippy::too_many_arguments)] // one connection's state, passed down once
fn handshake_and_respond(
    ctx: &dyn ServerContext,
    a: &Args,
    tcp: TcpStream,
    rec: &SharedRecorder,
    c: &Conn,
    out: &mut Value,
    sink: &dyn Sink,
    watch: &Watch,
) -> Result<()> {
    tcp::setup(&tcp, a.tls.io_timeout)?;
    out["congestion_control"] = json!(tcp::congestion_control(&tcp));
    let tcp = Rc::new(tcp);
    let handshake = ctx.start(Wire {
        tcp: tcp.clone(),
        rec: rec.clone(),
        peer: "client",
        timeout_s: a.tls.io_timeout,
    })?;
    let t_hs_start = Stamp::now();
    out["t_handshake_start"] = json!(t_hs_start.real);
    let hs = handshake.run();
    let t_hs = Stamp::now();
    let mut session = match hs {
        Ok(s) => s,
        Err(e) => {
            out["tcp_info"] = tcp::info(&tcp);
            return Err(e);
        }
    };
    let _established = Established::new();
    watch.phase(Phase::Request);
    if a.count_heap {
        heap_record(sink, c.index, a.tls.stack()?);
    }
    out["t_handshake_done"] = json!(t_hs.real);
    out["handshake_ns"] = json!(t_hs.mono - t_hs_start.mono);
    out["accept_to_handshake_ns"] = json!(t_hs.mono - c.t_accept.mono);
    out["negotiated"] = serde_json::to_value(session.negotiated()).unwrap_or(Value::Null);
    if let Some(bits) = rec.try_borrow().ok().and_then(|r| r.dh_private_bits) {
        out["dh_private_bits"] = json!(bits);
    }
    out["servername"] = json!(session.server_name());
    if a.client_ca.is_some() {
        // Mutual TLS: the client's chain as the stack judged it (a failure never gets here:
        // the stack refuses the handshake).
        out["client_verified"] = json!(session.verification() == Verification::Verified);
        out["peer_chain_der_bytes"] = json!(session.peer_chain_der_bytes());
    }

    let (request, sent_app) = if a.response_mode == "echo-size" {
        respond(&mut *session, a, out, watch)?
    } else {
        watch.enter(Phase::Response, response_deadline(a));
        wait_for_close(&mut *session, watch)?;
        (None, 0)
    };
    out["request_bytes"] = json!(request);
    out["app_bytes_sent"] = json!(sent_app);
    out["tcp_info"] = tcp::info(&tcp);
    // close_notify both ways (bounded by --io-timeout and the response's deadline); the peer
    // may already have gone, which is not an error here.
    watch.phase(Phase::Close);
    session.close(true);
    out["t_closed"] = json!(record::realtime_ns());
    Ok(())
}

/// Read one request and answer it: (n asked for, application bytes sent).
fn respond(
    session: &mut dyn Session,
    a: &Args,
    out: &mut Value,
    watch: &Watch,
) -> Result<(Option<u64>, u64)> {
    let request = read_request(session, a.max_response_bytes)?;
    watch.enter(Phase::Response, response_deadline(a));
    let Some(request) = request else {
        return Ok((None, 0));
    };
    out["t_request_received"] = json!(record::realtime_ns());
    let chunk = [b'x'; CHUNK];
    let (request_bytes, sent) = match request {
        Request::Push(n) | Request::Pull(n) | Request::Echo(n) => {
            return bulk(session, a, out, request, n, watch);
        }
        Request::Size(n) => {
            send_filler(session, &chunk, n, watch)?;
            (Some(n), n)
        }
        Request::Http { path, size } => {
            // For curl and browsers: GET /<n> sends n filler bytes, streamed a record at a
            // time like `GET <n>`; anything else gets a short text page naming what was
            // negotiated.
            out["http_path"] = json!(path);
            let neg = &out["negotiated"];
            let page = match size {
                Some(_) => Vec::new(),
                None => format!(
                    "pqlab TLS server\nversion: {}\ngroup: {}\nsignature: {}\ncipher: {}\n",
                    neg["version"].as_str().unwrap_or("?"),
                    neg["group"].as_str().unwrap_or("none"),
                    neg["sigalg"].as_str().unwrap_or("none"),
                    neg["cipher"].as_str().unwrap_or("?"),
                )
                .into_bytes(),
            };
            let body_len = size.unwrap_or(page.len() as u64);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {body_len}\r\nConnection: close\r\n\r\n"
            );
            session.write_all(head.as_bytes())?;
            match size {
                Some(n) => send_filler(session, &chunk, n, watch)?,
                None => session.write_all(&page)?,
            }
            (size, head.len() as u64 + body_len)
        }
    };
    session.flush()?;
    out["t_response_written"] = json!(record::realtime_ns());
    Ok((request_bytes, sent))
}

/// Bulk transfer (tls_bench style): up to three requests on one connection, in this order,
/// each at most once: `ECHO <e>`, e pattern bytes each sent back as it is read (the client
/// waits for each record's echo before writing the next, as tls_bench does right after its
/// handshake); `PUSH <n>` then the client's n pattern bytes, each read checked, answered
/// with `OK <n> <first-to-last ns>\n`; `PULL <m>`, answered with m pattern bytes a full
/// record at a time.
fn bulk(
    session: &mut dyn Session,
    a: &Args,
    out: &mut Value,
    first: Request,
    n: u64,
    watch: &Watch,
) -> Result<(Option<u64>, u64)> {
    let mut request = Some(first);
    let (mut stage, mut sent) = (0, 0);
    while let Some(r) = request.take() {
        let next_stage = match r {
            Request::Echo(_) => 1,
            Request::Push(_) => 2,
            Request::Pull(_) => 3,
            _ => 0,
        };
        if next_stage <= stage {
            crate::bail!(
                Peer,
                "a bulk transfer takes ECHO, PUSH and PULL in that order, each at most once; got {r:?}"
            );
        }
        stage = next_stage;
        match r {
            Request::Push(p) => {
                let (t_first, t_last) = receive_pattern(session, p, watch, None)?;
                out["push_bytes"] = json!(p);
                out["push_recv_ns"] = json!(t_last - t_first);
                session.write_all(format!("OK {p} {}\n", t_last - t_first).as_bytes())?;
                session.flush()?;
            }
            Request::Pull(m) => {
                let mut buf = vec![0u8; CHUNK];
                let t0 = record::monotonic_ns();
                let mut pulled = 0;
                while pulled < m {
                    let k = (m - pulled).min(CHUNK as u64) as usize;
                    crate::tls::http::request::fill_pattern(&mut buf[..k], pulled);
                    session.write_all(&buf[..k])?;
                    pulled += k as u64;
                    watch.moved(k as u64);
                }
                session.flush()?;
                sent += m;
                out["pull_bytes"] = json!(m);
                out["pull_send_ns"] = json!(record::monotonic_ns() - t0);
            }
            Request::Echo(e) => {
                receive_pattern(
                    session,
                    e,
                    watch,
                    Some(&mut |s, piece| {
                        s.write_all(piece)?;
                        s.flush()
                    }),
                )?;
                sent += e;
                out["echo_bytes"] = json!(e);
            }
            _ => unreachable!("refused above"),
        }
        if stage < 3 {
            // The next line is another request head, with a deadline of its own, and so is
            // its response.
            let head = Instant::now() + Duration::from_secs(a.handshake_timeout);
            watch.enter(Phase::Request, Some(head));
            request = read_request(session, a.max_response_bytes)?;
            watch.enter(Phase::Response, response_deadline(a));
        }
    }
    out["t_response_written"] = json!(record::realtime_ns());
    Ok((Some(n), sent))
}

/// What to do with each piece read (ECHO: write it back).
type OnPiece<'a> = &'a mut dyn FnMut(&mut dyn Session, &[u8]) -> Result<()>;

/// Read exactly n pattern bytes, handing each piece to `on_piece` when given; (monotonic ns
/// of the first and of the last read). The response's deadline bounds it (`watch`).
fn receive_pattern(
    session: &mut dyn Session,
    n: u64,
    watch: &Watch,
    mut on_piece: Option<OnPiece>,
) -> Result<(i64, i64)> {
    let mut buf = vec![0u8; 1 << 16];
    let mut got: u64 = 0;
    let (mut first, mut last) = (record::monotonic_ns(), record::monotonic_ns());
    while got < n {
        let want = (n - got).min(buf.len() as u64) as usize;
        match session.read(&mut buf[..want])? {
            ReadOutcome::Data(k) => {
                if got == 0 {
                    first = record::monotonic_ns();
                }
                if !crate::tls::http::request::is_pattern(&buf[..k], got) {
                    crate::bail!(Check, "pushed data corrupted at offset {got}");
                }
                if let Some(f) = on_piece.as_mut() {
                    f(session, &buf[..k])?;
                }
                got += k as u64;
                watch.moved(k as u64);
                last = record::monotonic_ns();
            }
            _ => crate::bail!(Peer, "the client stopped after {got} of {n} pushed bytes"),
        }
    }
    Ok((first, last))
}

/// Exactly n filler bytes, one full record at a time, each counted as the response's
/// progress.
fn send_filler(session: &mut dyn Session, chunk: &[u8], n: u64, watch: &Watch) -> Result<()> {
    let mut sent: u64 = 0;
    while sent < n {
        let k = (n - sent).min(chunk.len() as u64) as usize;
        session.write_all(&chunk[..k])?;
        sent += k as u64;
        watch.moved(k as u64);
    }
    Ok(())
}

/// Read `GET <n>\n` or an HTTP GET request head; None when the client closed without one
/// (handshake-only runs). Each read is bounded by the socket timeout (--io-timeout) and the
/// whole head by the connection's deadline (--handshake-timeout, `admission.rs`), so a
/// client trickling a byte at a time cannot hold the server.
fn read_request(session: &mut dyn Session, max: u64) -> Result<Option<Request>> {
    let mut parser = RequestParser::new(max);
    let mut buf = [0u8; 1024];
    loop {
        let got = session
            .read(&mut buf)
            .map_err(|e| e.context("reading the request failed"))?;
        match got {
            ReadOutcome::Data(k) => {
                if let Some(r) = parser.push(&buf[..k])? {
                    if matches!(r, Request::Push(_) | Request::Pull(_) | Request::Echo(_))
                        && !parser.rest().is_empty()
                    {
                        crate::bail!(
                            Peer,
                            "data arrived in the record of the {r:?} line; send the line in a record of its own"
                        );
                    }
                    return Ok(Some(r));
                }
            }
            ReadOutcome::Closed => return Ok(None),
            ReadOutcome::Eof if parser.is_empty() => return Ok(None),
            ReadOutcome::Eof => crate::bail!(
                Peer,
                "the client closed the connection in the middle of its request"
            ),
        }
    }
}

/// --response-mode none: read until the client closes (close_notify or EOF), within the
/// response's deadline.
fn wait_for_close(session: &mut dyn Session, watch: &Watch) -> Result<()> {
    let mut buf = [0u8; 4096];
    loop {
        match session.read(&mut buf) {
            Ok(ReadOutcome::Data(k)) => watch.moved(k as u64),
            Ok(ReadOutcome::Closed | ReadOutcome::Eof) => return Ok(()),
            Err(e) => return Err(e.context("read after handshake failed")),
        }
    }
}
