//! `tls memory`: what full handshakes cost in memory, per role. One process runs a server
//! thread and a client thread over loopback TCP (`--role both`), or one of the two roles
//! against the other role's process on another host (`--role server --listen`, `--role
//! client --connect`: the same loops, records and checks); each thread has its own stack of
//! `--thread-stack` bytes, painted before every handshake and scanned after it, and its own
//! heap counts (`crate::heap`; a thread is a role): the stack's own (`heap_*`: OpenSSL's
//! allocations through its hooks, installed by `main` before OpenSSL's first allocation, or
//! for a stack without hooks every block of the C allocator) and every block of the C
//! allocator for every stack (`malloc_*`, comparable across stacks). One `memory` record per
//! handshake and role. Every handshake is checked (version, group, server scheme, client scheme, both
//! chains) before it is recorded.
//!
//! `tls hold`: open N verified connections to a server and keep them all open (the idle
//! connection measurement, with `tls server --count-heap`).

use super::options::TlsOpts;
use crate::heap;
use crate::out::{Error, Result};
use crate::paint;
use crate::tls::record::{Negotiated, Recorder, SharedRecorder, Stamp};
use crate::tls::stack::{
    ClientAuth, ClientSetup, Identity, ServerName, ServerSetup, Session, Stack, Verification,
};
use crate::tls::transport::tcp::{self, Wire};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Args {
    /// The roles this process runs: both (a server and a client thread over 127.0.0.1),
    /// or one of them, against the other role's process (on another host).
    #[arg(long, value_enum, default_value = "both")]
    pub role: Role,
    /// --role server: the address to listen on, IP:PORT (port 0: any free port; the
    /// memory_setup record says which).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// --role client: the server role's address, IP:PORT.
    #[arg(long)]
    pub connect: Option<SocketAddr>,
    /// Server certificate chain (PEM) to send (roles both, server).
    #[arg(long)]
    pub cert_chain: Option<PathBuf>,
    /// Private key (PEM) of --cert-chain (roles both, server).
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Root certificate (PEM) the client verifies the server chain against (roles both,
    /// client).
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Name the client sends and checks (the server certificate's SAN).
    #[arg(long, default_value = "localhost")]
    pub servername: String,
    #[command(flatten)]
    #[serde(flatten)]
    pub tls: TlsOpts,
    /// Mutual TLS: the client certificate chain (PEM) to present (roles both, client).
    #[arg(long)]
    pub client_cert_chain: Option<PathBuf>,
    /// Mutual TLS: private key (PEM) of --client-cert-chain.
    #[arg(long)]
    pub client_key: Option<PathBuf>,
    /// Mutual TLS: root (PEM) the server verifies the client chain against (roles both,
    /// server).
    #[arg(long)]
    pub client_ca: Option<PathBuf>,
    /// Mutual TLS: the one scheme the client must sign its CertificateVerify with (the
    /// server accepts only it).
    #[arg(long)]
    pub client_sigalg: Option<String>,
    /// Measured handshakes, 1-100000.
    #[arg(short = 'n', long = "count", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub count: u64,
    /// Handshakes before the measured ones (first-use caches, per-thread random generators),
    /// recorded with "warmup": true; 0-1000.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub warmup: u64,
    /// Stack size of each handshaking thread in bytes, 262144-268435456.
    #[arg(long, default_value_t = 8 << 20, value_parser = clap::value_parser!(u64).range(262_144..=268_435_456))]
    pub thread_stack: u64,
    /// Draw all randomness of both threads from fixed-seed generators (OpenSSL's TEST-RAND)
    /// instead of the DRBG, so randomised work (ML-DSA signing's rejection loop) and its
    /// allocations repeat exactly from run to run when the keys are the same. Insecure by
    /// design: for measurement only.
    #[arg(long)]
    pub fixed_random: bool,
}

/// The roles one `tls memory` process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Both,
    Server,
    Client,
}

impl Role {
    fn serves(self) -> bool {
        self != Role::Client
    }

    fn connects(self) -> bool {
        self != Role::Server
    }

    fn name(self) -> &'static str {
        match self {
            Role::Both => "both",
            Role::Server => "server",
            Role::Client => "client",
        }
    }
}

/// Every option is for a role: one the process does not run is refused, one it needs is
/// required, and mutual TLS is all or nothing where both roles run.
fn check_roles(a: &Args) -> Result<()> {
    let (serves, connects) = (a.role.serves(), a.role.connects());
    let options = [
        ("--cert-chain", a.cert_chain.is_some(), serves, serves),
        ("--key", a.key.is_some(), serves, serves),
        ("--ca", a.ca.is_some(), connects, connects),
        (
            "--listen",
            a.listen.is_some(),
            a.role == Role::Server,
            false,
        ),
        (
            "--connect",
            a.connect.is_some(),
            a.role == Role::Client,
            false,
        ),
        (
            "--client-cert-chain",
            a.client_cert_chain.is_some(),
            connects,
            false,
        ),
        ("--client-key", a.client_key.is_some(), connects, false),
        ("--client-ca", a.client_ca.is_some(), serves, false),
    ];
    for (flag, given, used, required) in options {
        if given && !used {
            crate::bail!(Usage, "{flag} is not an option of --role {}", a.role.name());
        }
        if required && !given {
            crate::bail!(Usage, "--role {} needs {flag}", a.role.name());
        }
    }
    match a.role {
        Role::Server if a.listen.is_none() => {
            crate::bail!(Usage, "--role server needs --listen IP:PORT")
        }
        Role::Client if a.connect.is_none() => {
            crate::bail!(Usage, "--role client needs --connect IP:PORT")
        }
        _ => {}
    }
    if a.client_cert_chain.is_some() != a.client_key.is_some() {
        crate::bail!(Usage, "--client-cert-chain and --client-key go together");
    }
    let presents = a.client_cert_chain.is_some();
    let asks = a.client_ca.is_some();
    if a.role == Role::Both && presents != asks {
        crate::bail!(
            Usage,
            "mutual TLS with --role both needs --client-cert-chain, --client-key and --client-ca"
        );
    }
    if a.client_sigalg.is_some() && !(presents || asks) {
        crate::bail!(
            Usage,
            "--client-sigalg is for mutual TLS (--client-cert-chain or --client-ca)"
        );
    }
    Ok(())
}

fn required(path: &Option<PathBuf>, flag: &str) -> Result<PathBuf> {
    path.clone()
        .ok_or_else(|| crate::err!(Usage, "{flag} is needed here"))
}

/// What both threads check every handshake against (codes from the stack's tables).
#[derive(Clone)]
struct Expect {
    version: &'static str,
    group: Option<(String, Option<u16>)>,
    sigalg: Option<(String, Option<u16>)>,
    client_sigalg: Option<(String, Option<u16>)>,
    mutual: bool,
}

fn single(flag: &str, list: &Option<Vec<String>>) -> Result<Option<String>> {
    match list.as_deref() {
        None => Ok(None),
        Some([one]) => Ok(Some(one.clone())),
        Some(many) => crate::bail!(
            Usage,
            "{flag} {:?}: tls memory measures one at a time; name exactly one",
            many.join(":")
        ),
    }
}

fn matches(want: &Option<(String, Option<u16>)>, name: Option<&str>, code: Option<u16>) -> bool {
    match want {
        None => true,
        Some((_, Some(w))) if code.is_some() => code == Some(*w),
        Some((w, _)) => name.is_some_and(|n| n.eq_ignore_ascii_case(w)),
    }
}

/// A handshake that settled on something else than asked is an error, not a sample.
fn check(e: &Expect, role: &str, n: &Negotiated, v: &Verification, i: u64) -> Result<()> {
    let fail = |what: &str, got: Option<&str>, want: &Option<(String, Option<u16>)>| {
        Error::Check(format!(
            "{role} handshake {i}: negotiated {what} {}, asked for {}",
            got.unwrap_or("none"),
            want.as_ref().map(|w| w.0.as_str()).unwrap_or("?")
        ))
    };
    if n.version != e.version {
        crate::bail!(
            Check,
            "{role} handshake {i}: negotiated {}, asked for {}",
            n.version,
            e.version
        );
    }
    if !matches(&e.group, n.group.as_deref(), n.group_code) {
        return Err(fail("group", n.group.as_deref(), &e.group));
    }
    if !matches(&e.sigalg, n.sigalg.as_deref(), n.sigalg_code) {
        return Err(fail("server signature", n.sigalg.as_deref(), &e.sigalg));
    }
    if e.mutual && n.client_sigalg.is_none() {
        crate::bail!(
            Check,
            "{role} handshake {i}: no client signature in mutual TLS"
        );
    }
    if !matches(
        &e.client_sigalg,
        n.client_sigalg.as_deref(),
        n.client_sigalg_code,
    ) {
        return Err(fail(
            "client signature",
            n.client_sigalg.as_deref(),
            &e.client_sigalg,
        ));
    }
    let must_verify = role == "client" || e.mutual;
    if must_verify && *v != Verification::Verified {
        crate::bail!(
            Check,
            "{role} handshake {i}: peer certificate not verified: {v:?}"
        );
    }
    Ok(())
}

/// One measured window on the calling thread: heap counts reset, stack painted, then `f`.
struct Window {
    painted: Option<paint::Painted>,
    t0: Stamp,
    source: heap::Source,
}

impl Window {
    fn open(stack: &dyn Stack) -> Window {
        let painted = paint::paint();
        heap::thread_reset();
        Window {
            painted,
            t0: Stamp::now(),
            source: stack.heap_counting().source(),
        }
    }

    /// The record fields of this window (to be called right after the handshake).
    fn close(self, entry_sp: usize, out: &mut Value) {
        let t1 = Stamp::now();
        let c = heap::thread_counts(self.source);
        let m = heap::thread_counts(heap::Source::Malloc);
        let (stack, overflow) = match &self.painted {
            Some(p) => (
                Some(entry_sp.saturating_sub(p.lowest_touched())),
                p.overflowed(),
            ),
            None => (None, false),
        };
        out["heap_total_bytes"] = json!(c.total_bytes);
        out["heap_peak_bytes"] = json!(c.peak.max(0));
        out["heap_retained_bytes"] = json!(c.in_use);
        out["allocations"] = json!(c.allocations);
        out["frees"] = json!(c.frees);
        out["reallocations"] = json!(c.reallocations);
        out["malloc_total_bytes"] = json!(m.total_bytes);
        out["malloc_peak_bytes"] = json!(m.peak.max(0));
        out["malloc_retained_bytes"] = json!(m.in_use);
        out["malloc_allocations"] = json!(m.allocations);
        out["malloc_frees"] = json!(m.frees);
        out["stack_bytes"] = json!(stack);
        out["stack_overflowed_paint"] = json!(overflow);
        out["handshake_ns"] = json!(t1.mono - self.t0.mono);
    }
}

fn wire(tcp: &Rc<TcpStream>, peer: &'static str, timeout_s: u64) -> Wire {
    Wire {
        tcp: tcp.clone(),
        rec: Rc::new(RefCell::new(Recorder::new(false))) as SharedRecorder,
        peer,
        timeout_s,
    }
}

fn base_record(stack: &dyn Stack, role: &str, i: u64, warmup: u64, entry: usize) -> Value {
    json!({
        "type": "memory", "role": role, "stack": stack.name(),
        "heap_counting": stack.heap_counting(),
        "index": if i < warmup { i } else { i - warmup }, "warmup": i < warmup,
        "stack_base_bytes": entry.saturating_sub(paint::stack_pointer()),
    })
}

fn finish_record(out: &mut Value, s: &dyn Session) {
    out["negotiated"] = serde_json::to_value(s.negotiated()).unwrap_or(Value::Null);
    out["verified"] = json!(s.verification() == Verification::Verified);
    out["peer_chain_der_bytes"] = json!(s.peer_chain_der_bytes());
}

struct Job {
    stack: &'static dyn Stack,
    args: Args,
    expect: Expect,
    tx: mpsc::Sender<Value>,
}

/// --fixed-random on the calling thread (a stack whose randomness can be fixed).
fn thread_random(stack: &dyn Stack, fixed: bool) -> Result<()> {
    if fixed {
        stack.fix_randomness()?;
    }
    Ok(())
}

fn server_loop(
    job: Job,
    ctx: Arc<dyn crate::tls::stack::ServerContext>,
    listener: TcpListener,
) -> Result<()> {
    let entry = paint::stack_pointer();
    thread_random(job.stack, job.args.fixed_random)?;
    let a = &job.args;
    let total = a.warmup + a.count;
    for i in 0..total {
        let (tcp, _) = listener
            .accept()
            .map_err(|e| crate::err!(Io, "accept failed: {e}"))?;
        tcp::setup(&tcp, a.tls.io_timeout)?;
        let tcp = Rc::new(tcp);
        let mut out = base_record(job.stack, "server", i, a.warmup, entry);
        let w = Window::open(job.stack);
        let session = ctx.start(wire(&tcp, "client", a.tls.io_timeout))?.run();
        w.close(entry, &mut out);
        let mut session = session.map_err(|e| e.context(format!("server handshake {i}")))?;
        finish_record(&mut out, &*session);
        let n = session.negotiated();
        check(&job.expect, "server", &n, &session.verification(), i)?;
        session.close(true);
        drop(session);
        if job.tx.send(out).is_err() {
            break;
        }
    }
    Ok(())
}

fn client_loop(job: Job, addr: SocketAddr, identity: Option<Identity>) -> Result<()> {
    let entry = paint::stack_pointer();
    thread_random(job.stack, job.args.fixed_random)?;
    let a = &job.args;
    let mut protocol = a.tls.protocol()?;
    // libssl signs with the schemes of the client's own --sigalgs list too: add the client
    // scheme to the server's, or a client certificate of another kind could not sign.
    if let (Some(list), Some(own)) = (protocol.sigalgs.as_mut(), &a.client_sigalg) {
        if !list.contains(own) {
            list.push(own.clone());
        }
    }
    let ctx = job.stack.client(&ClientSetup {
        protocol,
        ca: required(&a.ca, "--ca")?,
        identity,
    })?;
    let name = ServerName::parse(&a.servername);
    let total = a.warmup + a.count;
    for i in 0..total {
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(a.tls.io_timeout))
            .map_err(|e| crate::err!(Io, "TCP connect to {addr} failed: {e}"))?;
        tcp::setup(&tcp, a.tls.io_timeout)?;
        let tcp = Rc::new(tcp);
        let mut out = base_record(job.stack, "client", i, a.warmup, entry);
        let w = Window::open(job.stack);
        let session = ctx
            .start(wire(&tcp, "server", a.tls.io_timeout), &name)?
            .run();
        w.close(entry, &mut out);
        let mut session = session.map_err(|e| e.context(format!("client handshake {i}")))?;
        finish_record(&mut out, &*session);
        let n = session.negotiated();
        check(&job.expect, "client", &n, &session.verification(), i)?;
        session.close(false);
        drop(session);
        if job.tx.send(out).is_err() {
            break;
        }
    }
    Ok(())
}

fn expectations(stack: &'static dyn Stack, a: &Args) -> Result<Expect> {
    let p = a.tls.protocol()?;
    let code = |n: Option<String>, g: bool| {
        n.map(|n| {
            let c = if g {
                stack.group_code(&n)
            } else {
                stack.sigalg_code(&n)
            };
            (n, c)
        })
    };
    let client_sigalg = match &a.client_sigalg {
        Some(s) => single(
            "--client-sigalg",
            &super::options::list("--client-sigalg", &Some(s.clone()))?,
        )?,
        None => None,
    };
    Ok(Expect {
        version: p.version.name(),
        group: code(single("--groups", &p.groups)?, true),
        sigalg: code(single("--sigalgs", &p.sigalgs)?, false),
        client_sigalg: code(client_sigalg, false),
        mutual: a.client_cert_chain.is_some() || a.client_ca.is_some(),
    })
}

fn spawn(
    name: &str,
    size: u64,
    f: impl FnOnce() -> Result<()> + Send + 'static,
) -> Result<std::thread::JoinHandle<Result<()>>> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(size as usize)
        .spawn(f)
        .map_err(|e| crate::err!(Io, "cannot start the {name} thread: {e}"))
}

/// The server role's context and listening socket (`--listen`, or any port of 127.0.0.1).
fn serving(
    stack: &'static dyn Stack,
    a: &Args,
) -> Result<(Arc<dyn crate::tls::stack::ServerContext>, TcpListener)> {
    let client_auth = a.client_ca.clone().map(|ca| ClientAuth {
        ca,
        sigalgs: a.client_sigalg.clone().map(|s| vec![s]),
    });
    let ctx = stack.server(&ServerSetup {
        protocol: a.tls.protocol()?,
        cert_chain: required(&a.cert_chain, "--cert-chain")?,
        key: required(&a.key, "--key")?,
        dh_bits: None,
        dh_params: None,
        client_auth,
    })?;
    let at = a
        .listen
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let listener =
        TcpListener::bind(at).map_err(|e| crate::err!(Io, "cannot listen on {at}: {e}"))?;
    Ok((ctx, listener))
}

pub fn run(a: Args) -> Result<()> {
    if !heap::installed() {
        crate::bail!(
            Library,
            "OpenSSL's allocations are not being counted (hooks not installed)"
        );
    }
    let stack = a.tls.stack()?;
    if a.fixed_random && !stack.fixed_random() {
        crate::bail!(
            Usage,
            "--fixed-random: the {} stack's randomness cannot be fixed here; run without it",
            stack.name()
        );
    }
    check_roles(&a)?;
    heap::count_malloc(true);
    a.tls.events_on()?;
    let expect = expectations(stack, &a)?;
    let identity = a
        .client_cert_chain
        .clone()
        .zip(a.client_key.clone())
        .map(|(cert_chain, key)| Identity { cert_chain, key });
    let server_side = if a.role.serves() {
        Some(serving(stack, &a)?)
    } else {
        None
    };
    let addr = match (&server_side, a.connect) {
        (Some((_, listener)), _) => listener.local_addr()?,
        (None, Some(connect)) => connect,
        (None, None) => crate::bail!(Usage, "--role client needs --connect IP:PORT"),
    };
    crate::out::emit(&json!({
        "type": "memory_setup", "stack": stack.name(), "role": a.role.name(),
        "address": addr.to_string(),
        "thread_stack_bytes": a.thread_stack, "warmup": a.warmup, "count": a.count,
        "hooks": "CRYPTO_set_mem_functions", "groups": a.tls.groups, "sigalgs": a.tls.sigalgs,
        "client_sigalg": a.client_sigalg, "mutual": expect.mutual,
        "security_level": server_side.as_ref().and_then(|(ctx, _)| ctx.security_level()),
        "fixed_random": a.fixed_random, "options": crate::tls::record::options(&a),
    }));
    let (tx, rx) = mpsc::channel::<Value>();
    let job = |tx: mpsc::Sender<Value>| Job {
        stack,
        args: a.clone(),
        expect: expect.clone(),
        tx,
    };
    let server = match server_side {
        Some((ctx, listener)) => {
            let sjob = job(tx.clone());
            Some(spawn("memory-server", a.thread_stack, move || {
                server_loop(sjob, ctx, listener)
            })?)
        }
        None => None,
    };
    let client = if a.role.connects() {
        let cjob = job(tx.clone());
        let wake = a.role == Role::Both;
        Some(spawn("memory-client", a.thread_stack, move || {
            let result = client_loop(cjob, addr, identity);
            if result.is_err() && wake {
                // The server thread may be waiting in accept: a connection that closes at
                // once ends its handshake (and its loop) with an error, so the run can end.
                let _ = TcpStream::connect(addr);
            }
            result
        })?)
    } else {
        None
    };
    drop(tx);
    for rec in rx {
        crate::out::emit(&rec);
    }
    let joined = |h: Option<std::thread::JoinHandle<Result<()>>>, who: &str| match h {
        Some(h) => h
            .join()
            .unwrap_or_else(|_| Err(crate::err!(Library, "the {who} thread panicked"))),
        None => Ok(()),
    };
    let c = joined(client, "client");
    let s = joined(server, "server");
    // The client's error explains the server's (a server sees only the reset).
    c.and(s)
}

#[derive(clap::Args, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct HoldArgs {
    /// Server address, HOST:PORT.
    #[arg(long)]
    pub connect: SocketAddr,
    /// Root certificate (PEM) the server chain must validate against.
    #[arg(long)]
    pub ca: PathBuf,
    /// Name sent in SNI and checked against the certificate.
    #[arg(long, default_value = "localhost")]
    pub servername: String,
    #[command(flatten)]
    #[serde(flatten)]
    pub tls: TlsOpts,
    /// Mutual TLS: client certificate chain (PEM).
    #[arg(long, requires = "key")]
    pub cert_chain: Option<PathBuf>,
    /// Mutual TLS: private key (PEM) of --cert-chain.
    #[arg(long, requires = "cert_chain")]
    pub key: Option<PathBuf>,
    /// Connections to open and keep open, 1-4096.
    #[arg(short = 'n', long = "count", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub count: u64,
    /// Keep them all open this long after the last one is up (milliseconds, 0-600000).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub hold_ms: u64,
    /// Pause after each connection is up before opening the next (milliseconds, 0-10000):
    /// a TLS 1.3 client is done when it has sent its Finished, the server only once it has
    /// read and checked it (and, in mutual TLS, the client's chain), so without a pause the
    /// next handshake can start on the server while the last one is still finishing.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub gap_ms: u64,
}

/// `tls hold`: N verified connections, opened one after the other and all kept open.
pub fn hold(a: HoldArgs) -> Result<()> {
    let stack = a.tls.stack()?;
    let ctx = stack.client(&ClientSetup {
        protocol: a.tls.protocol()?,
        ca: a.ca.clone(),
        identity: a
            .cert_chain
            .clone()
            .zip(a.key.clone())
            .map(|(cert_chain, key)| Identity { cert_chain, key }),
    })?;
    let expect = Expect {
        version: a.tls.version()?.name(),
        group: None,
        sigalg: None,
        client_sigalg: None,
        mutual: a.cert_chain.is_some(),
    };
    crate::out::emit(&crate::tls::record::config(
        "tls hold",
        crate::tls::record::options(&a),
    ));
    let name = ServerName::parse(&a.servername);
    let mut open: Vec<Box<dyn Session>> = Vec::new();
    for i in 0..a.count {
        let tcp = TcpStream::connect_timeout(&a.connect, Duration::from_secs(a.tls.io_timeout))
            .map_err(|e| {
                crate::err!(
                    Io,
                    "connection {i}: TCP connect to {} failed: {e}",
                    a.connect
                )
            })?;
        tcp::setup(&tcp, a.tls.io_timeout)?;
        let tcp = Rc::new(tcp);
        let s = ctx
            .start(wire(&tcp, "server", a.tls.io_timeout), &name)?
            .run()
            .map_err(|e| e.context(format!("connection {i}")))?;
        check(&expect, "client", &s.negotiated(), &s.verification(), i)?;
        open.push(s);
        if i + 1 < a.count {
            std::thread::sleep(Duration::from_millis(a.gap_ms));
        }
    }
    std::thread::sleep(Duration::from_millis(a.hold_ms));
    crate::out::emit(
        &json!({"type": "held", "connections": open.len(), "t": crate::tls::record::realtime_ns()}),
    );
    for s in open.iter_mut() {
        s.close(false);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_match_by_code_then_name() {
        let want = Some(("X25519MLKEM768".to_string(), Some(4588)));
        assert!(matches(&want, Some("whatever"), Some(4588)));
        assert!(!matches(&want, Some("X25519MLKEM768"), Some(29)));
        let by_name = Some(("mldsa44".to_string(), None));
        assert!(matches(&by_name, Some("MLDSA44"), None));
        assert!(!matches(&by_name, None, None));
        assert!(matches(&None, None, None));
    }

    fn args(extra: &[&str]) -> Args {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: Args,
        }
        let mut argv = vec!["memory"];
        argv.extend_from_slice(extra);
        <Cli as clap::Parser>::try_parse_from(argv).expect("clap").a
    }

    #[test]
    fn each_option_belongs_to_a_role() {
        let both = ["--cert-chain", "c", "--key", "k", "--ca", "r"];
        assert!(check_roles(&args(&both)).is_ok());
        let server = [
            "--role",
            "server",
            "--listen",
            "10.0.0.2:0",
            "--cert-chain",
            "c",
        ];
        assert!(check_roles(&args(&[&server[..], &["--key", "k"]].concat())).is_ok());
        let client = [
            "--role",
            "client",
            "--connect",
            "10.0.0.2:4433",
            "--ca",
            "r",
        ];
        assert!(check_roles(&args(&client)).is_ok());
        let usage = |argv: &[&str], words: &[&str]| match check_roles(&args(argv)) {
            Err(Error::Usage(m)) => assert!(words.iter().all(|w| m.contains(w)), "{m}"),
            other => panic!("{argv:?}: {:?}", other.err().map(|e| e.to_string())),
        };
        // A file of the other role is refused, not ignored (a server key on the client).
        usage(
            &[&client[..], &["--key", "k"]].concat(),
            &["--key", "--role client"],
        );
        usage(
            &[&server[..], &["--key", "k", "--ca", "r"]].concat(),
            &["--ca"],
        );
        usage(&server[..4], &["--role server", "--cert-chain"]);
        usage(
            &["--role", "server", "--cert-chain", "c", "--key", "k"],
            &["--listen"],
        );
        usage(&["--role", "client", "--ca", "r"], &["--connect"]);
        usage(
            &[&both[..], &["--listen", "127.0.0.1:0"]].concat(),
            &["--listen", "both"],
        );
        usage(
            &[&both[..], &["--client-ca", "r"]].concat(),
            &["mutual", "--role both"],
        );
        usage(
            &[&client[..], &["--client-key", "k"]].concat(),
            &["go together"],
        );
        usage(
            &[&both[..], &["--client-sigalg", "mldsa44"]].concat(),
            &["mutual"],
        );
        // Mutual TLS split over two processes: each role has its half.
        let mutual = [
            &client[..],
            &["--client-cert-chain", "cc", "--client-key", "ck"],
        ]
        .concat();
        assert!(check_roles(&args(&mutual)).is_ok());
        let asks = [&server[..], &["--key", "k", "--client-ca", "cr"]].concat();
        assert!(check_roles(&args(&asks)).is_ok());
    }

    #[test]
    fn failed_checks_are_check_errors() {
        let e = Expect {
            version: "TLSv1.3",
            group: Some(("x25519".into(), Some(29))),
            sigalg: None,
            client_sigalg: None,
            mutual: false,
        };
        let mut n = Negotiated {
            version: "TLSv1.3".into(),
            group: Some("x25519".into()),
            group_code: Some(29),
            ..Default::default()
        };
        assert!(check(&e, "server", &n, &Verification::NotChecked, 0).is_ok());
        assert!(matches!(
            check(&e, "client", &n, &Verification::NotChecked, 0),
            Err(Error::Check(_))
        ));
        n.group_code = Some(23);
        assert!(matches!(
            check(&e, "server", &n, &Verification::NotChecked, 3),
            Err(Error::Check(m)) if m.contains("group") && m.contains("handshake 3")
        ));
    }
}
