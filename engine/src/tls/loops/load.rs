//! `tls load`: a load generator of full handshakes against one server, for capacity
//! measurements. Closed loop: `--clients C` workers, each running handshakes back to back.
//! Open loop: arrivals at a fixed `--rate` (arrival i is scheduled at i/rate seconds), taken
//! by `--clients` workers; the latency of an arrival runs from its *scheduled* start, so a
//! server (or a worker pool) that falls behind shows its queueing instead of hiding it.
//!
//! Every handshake is checked like `tls client` checks it (chain, host name, version, group,
//! signature scheme); a failed check ends the run. I/O failures (refused, reset, timed out)
//! are counted and reported, not samples. Bounded in count (`-n`, arrivals), in time
//! (`--duration-ms` for the arrivals, `--time-limit` for everything) and by `--io-timeout`
//! per wait. One `load_result` record at the end carries every sample as columns.

use super::connect;
use crate::cputime;
use crate::out::{Error, Result};
use crate::tls::record::{self, Recorder, SharedRecorder, Stamp};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

#[derive(clap::Args, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Args {
    /// The client's options; here `-n` is the most measured handshakes in all, `--warmup`
    /// the unmeasured handshakes each worker makes before the clock starts, and
    /// `--time-limit` bounds the whole run (arrivals not started by then are abandoned).
    #[command(flatten)]
    #[serde(flatten)]
    pub client: connect::Args,
    /// closed (each worker back to back) or open (a fixed arrival rate).
    #[arg(long)]
    pub mode: String,
    /// Workers: closed loop, the concurrent clients; open loop, the most handshakes in
    /// flight (1-1024).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub clients: u64,
    /// Open loop: arrivals per second (0 < rate <= 1000000).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Length of the measuring window in milliseconds (1-86400000): closed loop, no
    /// handshake starts after it; open loop, arrivals are scheduled inside it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub duration_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Closed,
    Open { rate_milli: u64 },
}

/// When arrival `i` is due, in ns after the start, at `rate` arrivals per second.
pub fn scheduled_offset_ns(i: u64, rate: f64) -> i64 {
    ((i as f64) * 1e9 / rate).round() as i64
}

/// How many arrivals an open loop schedules: those due inside the window, at most `max`.
pub fn open_arrivals(rate: f64, duration_ns: i64, max: u64) -> u64 {
    let mut n = ((duration_ns as f64) * rate / 1e9).ceil() as u64;
    // ceil may count an arrival due exactly at the end of the window; it is outside.
    while n > 0 && scheduled_offset_ns(n - 1, rate) >= duration_ns {
        n -= 1;
    }
    n.min(max)
}

fn parse_mode(a: &Args) -> Result<(Mode, f64)> {
    match (a.mode.as_str(), a.rate) {
        ("closed", None) => Ok((Mode::Closed, 0.0)),
        ("closed", Some(_)) => crate::bail!(Usage, "--rate is for --mode open"),
        ("open", Some(r)) if r.is_finite() && r > 0.0 && r <= 1e6 => Ok((
            Mode::Open {
                rate_milli: (r * 1000.0) as u64,
            },
            r,
        )),
        ("open", Some(r)) => crate::bail!(Usage, "--rate {r}: use 0 < rate <= 1000000"),
        ("open", None) => crate::bail!(Usage, "--mode open needs --rate (arrivals per second)"),
        (m, _) => crate::bail!(Usage, "--mode {m:?}: use closed or open"),
    }
}

/// One measured handshake: offsets in ns from the start of the window.
#[derive(Clone, Copy, Debug)]
struct Sample {
    worker: u32,
    /// When it was due: the arrival time (open) or the actual start (closed).
    scheduled: i64,
    /// When the worker started its TCP connect.
    start: i64,
    /// TCP connected: the TLS handshake starts.
    connected: i64,
    /// Handshake complete (client side).
    done: i64,
    /// Connection closed (close_notify sent), ready for the next.
    end: i64,
}

struct Shared<'a> {
    a: &'a Args,
    mode: Mode,
    rate: f64,
    duration_ns: i64,
    next: AtomicU64,
    stop: AtomicBool,
    t0_mono: AtomicI64,
    deadline_mono: i64,
    errors: AtomicU64,
    messages: Mutex<Vec<String>>,
    first_negotiated: Mutex<Option<Value>>,
    barrier: Barrier,
}

pub fn run(a: Args) -> Result<()> {
    crate::out::emit(&run_with(&a)?);
    Ok(())
}

/// The load run; its `load_result` record.
pub fn run_with(a: &Args) -> Result<Value> {
    let a = a.clone();
    let (mode, rate) = parse_mode(&a)?;
    if a.client.gap_ms != 0 {
        crate::bail!(
            Usage,
            "--gap-ms is for tls client; tls load paces with --rate"
        );
    }
    if a.client.rounds.is_some() || a.client.connection_records.is_some() {
        crate::bail!(
            Usage,
            "--rounds and --connection-records are for tls client; tls load reports a summary"
        );
    }
    if a.client.warmup_request_bytes.is_some() {
        crate::bail!(
            Usage,
            "--warmup-request-bytes is for tls client; tls load's warm-ups ask for --request-bytes"
        );
    }
    if a.client.count == 0 {
        crate::bail!(Usage, "-n 0: tls load needs at least one handshake");
    }
    let stack = a.client.tls.stack()?;
    // Fail on bad options once, before any thread starts.
    let (_, target, checks) = connect::setup(stack, &a.client)?;
    let mut options = record::options(&a);
    let client = connect::effective_options(&a.client, &target, &checks);
    for key in ["servername", "expect-group", "expect-sigalg"] {
        options[key] = client[key].clone();
    }
    options["cpus"] = json!(cputime::allowed_cpus());
    crate::out::emit(&record::config("tls load", options));
    let duration_ns = a.duration_ms as i64 * 1_000_000;
    let shared = Shared {
        a: &a,
        mode,
        rate,
        duration_ns,
        next: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        t0_mono: AtomicI64::new(0),
        deadline_mono: record::monotonic_ns() + a.client.time_limit as i64 * 1_000_000_000,
        errors: AtomicU64::new(0),
        messages: Mutex::new(Vec::new()),
        first_negotiated: Mutex::new(None),
        barrier: Barrier::new(a.clients as usize + 1),
    };
    let (results, t0, cpu) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..a.clients as u32)
            .map(|w| {
                let sh = &shared;
                s.spawn(move || worker(stack, sh, w))
            })
            .collect();
        // Every worker has made its warm-up handshakes (or failed): start the clock.
        shared.barrier.wait();
        let cpu0 = CpuSnapshot::now();
        let t0 = Stamp::now();
        shared.t0_mono.store(t0.mono, Ordering::SeqCst);
        shared.barrier.wait();
        let results: Vec<Result<Vec<Sample>>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(crate::err!(Io, "a load worker panicked")))
            })
            .collect();
        (results, t0, cpu0.since())
    });
    let mut samples = Vec::new();
    for r in results {
        samples.extend(r?);
    }
    samples.sort_by_key(|s| (s.scheduled, s.worker));
    let mut record = result_record(&shared, &samples, t0);
    record["cpu"] = cpu;
    Ok(record)
}

/// The load generator's own CPU time and the machine's CPUs at the start of the window.
struct CpuSnapshot {
    mono: i64,
    process: i64,
    machine: Vec<(usize, cputime::CpuTicks)>,
}

impl CpuSnapshot {
    fn now() -> CpuSnapshot {
        CpuSnapshot {
            machine: cputime::machine(),
            process: cputime::process_cpu_ns(),
            mono: record::monotonic_ns(),
        }
    }

    /// Who was busy from this snapshot to now: this process (all its workers) over
    /// `span_ns`, the CPUs it may use, and every CPU of the machine (/proc/stat).
    fn since(&self) -> Value {
        let process = cputime::process_cpu_ns() - self.process;
        let span = record::monotonic_ns() - self.mono;
        json!({
            "span_ns": span,
            "process_cpu_ns": process,
            "cpus_allowed": cputime::allowed_cpus(),
            "machine": cputime::machine_delta(&self.machine, &cputime::machine()),
        })
    }
}

fn result_record(sh: &Shared, samples: &[Sample], t0: Stamp) -> Value {
    let col = |f: fn(&Sample) -> i64| samples.iter().map(f).collect::<Vec<i64>>();
    let arrivals = match sh.mode {
        Mode::Closed => None,
        Mode::Open { .. } => Some(open_arrivals(sh.rate, sh.duration_ns, sh.a.client.count)),
    };
    let started = sh
        .next
        .load(Ordering::SeqCst)
        .min(arrivals.unwrap_or(u64::MAX));
    let errors = sh.errors.load(Ordering::SeqCst);
    let abandoned = arrivals.map(|n| n.saturating_sub(samples.len() as u64 + errors));
    let window = samples.iter().map(|s| s.end).max().unwrap_or(0);
    json!({
        "type": "load_result",
        "mode": match sh.mode { Mode::Closed => "closed", Mode::Open { .. } => "open" },
        "clients": sh.a.clients,
        "rate": (sh.rate > 0.0).then_some(sh.rate),
        "duration_ms": sh.a.duration_ms,
        "max_handshakes": sh.a.client.count,
        "warmup_per_worker": sh.a.client.warmup,
        "t_start": t0.real,
        "window_ns": window,
        "completed": samples.len(),
        "errors": errors,
        "error_messages": *sh.messages.lock().unwrap_or_else(|p| p.into_inner()),
        "arrivals": arrivals,
        "started": started.min(samples.len() as u64 + errors),
        "abandoned": abandoned,
        "negotiated": *sh.first_negotiated.lock().unwrap_or_else(|p| p.into_inner()),
        "samples": {
            "worker": samples.iter().map(|s| s.worker).collect::<Vec<u32>>(),
            "scheduled_ns": col(|s| s.scheduled),
            "start_ns": col(|s| s.start),
            "connected_ns": col(|s| s.connected),
            "handshake_done_ns": col(|s| s.done),
            "end_ns": col(|s| s.end),
        },
    })
}

/// The warm-up of one worker: its own context (contexts are per thread), `--warmup`
/// checked handshakes.
fn warm_up(
    stack: &dyn crate::tls::stack::Stack,
    a: &connect::Args,
) -> Result<(
    Box<dyn crate::tls::stack::ClientContext>,
    connect::Target,
    connect::Checks,
)> {
    let (ctx, target, checks) = connect::setup(stack, a)?;
    for i in 0..a.warmup {
        let (n, _, _) = handshake(&*ctx, a, &target)?;
        connect::check(stack, &checks, &n, i)?;
    }
    Ok((ctx, target, checks))
}

fn worker(stack: &dyn crate::tls::stack::Stack, sh: &Shared, w: u32) -> Result<Vec<Sample>> {
    let ready = warm_up(stack, &sh.a.client);
    if ready.is_err() {
        sh.stop.store(true, Ordering::SeqCst);
    }
    sh.barrier.wait();
    sh.barrier.wait();
    let (ctx, target, checks) = ready.map_err(|e| e.context(format!("load worker {w} warm-up")))?;
    let t0 = sh.t0_mono.load(Ordering::SeqCst);
    let mut out = Vec::new();
    while let Some(scheduled) = claim(sh, t0) {
        // Closed loop: due when claimed, which is its start.
        let start = match sh.mode {
            Mode::Closed => scheduled,
            Mode::Open { .. } => record::monotonic_ns() - t0,
        };
        let result = handshake(&*ctx, &sh.a.client, &target);
        let (neg, connected, done) = match result {
            Ok(x) => x,
            Err(e) => {
                sh.errors.fetch_add(1, Ordering::SeqCst);
                let mut m = sh.messages.lock().unwrap_or_else(|p| p.into_inner());
                if m.len() < 5 {
                    m.push(format!("worker {w}: {}", e.message()));
                }
                continue;
            }
        };
        let end = record::monotonic_ns() - t0;
        if let Err(e) = connect::check(stack, &checks, &neg, out.len() as u64) {
            sh.stop.store(true, Ordering::SeqCst);
            return Err(e.context(format!("load worker {w}")));
        }
        {
            let mut first = sh
                .first_negotiated
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if first.is_none() {
                *first = serde_json::to_value(&neg.negotiated).ok();
            }
        }
        out.push(Sample {
            worker: w,
            scheduled,
            start,
            connected: connected - t0,
            done: done - t0,
            end,
        });
    }
    Ok(out)
}

/// The next handshake this worker makes: its scheduled offset (waiting until it is due in
/// an open loop), or None when the run is over.
fn claim(sh: &Shared, t0: i64) -> Option<i64> {
    if sh.stop.load(Ordering::SeqCst) {
        return None;
    }
    let now = record::monotonic_ns();
    if now >= sh.deadline_mono {
        sh.stop.store(true, Ordering::SeqCst);
        return None;
    }
    let i = sh.next.fetch_add(1, Ordering::SeqCst);
    if i >= sh.a.client.count {
        return None;
    }
    match sh.mode {
        Mode::Closed => {
            let off = now - t0;
            (off < sh.duration_ns).then_some(off)
        }
        Mode::Open { .. } => {
            let due = scheduled_offset_ns(i, sh.rate);
            if due >= sh.duration_ns {
                return None;
            }
            let wait = t0 + due - record::monotonic_ns();
            if wait > 0 {
                std::thread::sleep(Duration::from_nanos(wait as u64));
            }
            Some(due)
        }
    }
}

/// One connection: TCP connect, full handshake, close_notify; what it negotiated and when
/// (monotonic ns) the TCP connect and the handshake completed.
fn handshake(
    ctx: &dyn crate::tls::stack::ClientContext,
    a: &connect::Args,
    target: &connect::Target,
) -> Result<(connect::Negotiation, i64, i64)> {
    let rec: SharedRecorder = Rc::new(RefCell::new(Recorder::new(false)));
    let mut out = json!({});
    // `one` stamps its own start right after this one; the gap is a few hundred ns.
    let start = record::monotonic_ns();
    let n = connect::one(ctx, a, target, connect::Ask::of(a), &rec, &mut out)?;
    let at = |key: &str| {
        out["durations"][key]
            .as_i64()
            .map(|d| start + d)
            .ok_or_else(|| Error::Io(format!("the client recorded no {key}")))
    };
    Ok((n, at("tcp_connect_ns")?, at("connect_to_handshake_ns")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_evenly_spaced_from_zero() {
        assert_eq!(scheduled_offset_ns(0, 100.0), 0);
        assert_eq!(scheduled_offset_ns(1, 100.0), 10_000_000);
        assert_eq!(scheduled_offset_ns(250, 1000.0), 250_000_000);
        assert_eq!(scheduled_offset_ns(3, 3.0), 1_000_000_000);
    }

    #[test]
    fn open_arrivals_count_only_the_window() {
        // 1 s at 10/s: arrivals at 0, 0.1, ..., 0.9 s; the one at 1.0 s is outside.
        assert_eq!(open_arrivals(10.0, 1_000_000_000, 1000), 10);
        assert_eq!(open_arrivals(10.0, 1_000_000_001, 1000), 11);
        assert_eq!(open_arrivals(3.0, 1_000_000_000, 1000), 3);
        assert_eq!(open_arrivals(10.0, 1_000_000_000, 4), 4);
        assert_eq!(open_arrivals(0.5, 1_000_000, 10), 1);
    }
}
