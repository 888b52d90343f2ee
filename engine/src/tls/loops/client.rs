//! `tls client`, the same for every stack: N sequential fresh TCP connections with full
//! handshakes, each checked (chain and host name against the CA, version, group, signature
//! scheme) before it is recorded; a failed check ends the run, it is never a sample.

use super::connect::{check, effective_options, one, setup, Args, Ask, Checks, Target};
use crate::out::Result;
use crate::tls::record::{self, Events, Recorder, SharedRecorder, Sink, Stamp};
use crate::tls::stack::{ClientContext, Stack};
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Most rounds `--rounds` takes.
pub const MAX_ROUNDS: usize = 100_000;

/// `--rounds` as (warm-up, measured) connections per round, checked against -n and
/// --warmup (their totals); None without it.
pub fn parse_rounds(a: &Args) -> Result<Option<Vec<(u64, u64)>>> {
    let Some(text) = a.rounds.as_deref() else {
        return Ok(None);
    };
    let bad = |why: &str| {
        crate::err!(
            Usage,
            "--rounds {text:?}: {why}; use WARMUP:COUNT per round, comma-separated (20:100,2:100)"
        )
    };
    let mut out = Vec::new();
    for item in text.split(',') {
        let (w, n) = item
            .trim()
            .split_once(':')
            .ok_or_else(|| bad("a round without ':'"))?;
        let w: u64 = w
            .trim()
            .parse()
            .map_err(|_| bad("a warm-up that is not a number"))?;
        let n: u64 = n
            .trim()
            .parse()
            .map_err(|_| bad("a count that is not a number"))?;
        if w.saturating_add(n) == 0 {
            return Err(bad("a round of no connections"));
        }
        out.push((w, n));
    }
    if out.len() > MAX_ROUNDS {
        return Err(bad(&format!("more than {MAX_ROUNDS} rounds")));
    }
    let warmups = out.iter().fold(0u64, |t, r| t.saturating_add(r.0));
    let counts = out.iter().fold(0u64, |t, r| t.saturating_add(r.1));
    if (warmups, counts) != (a.warmup, a.count) {
        crate::bail!(
            Usage,
            "--rounds {text:?} makes {warmups} warm-ups and {counts} measured connections; \
             -n and --warmup must be those totals (-n {counts} --warmup {warmups}), not \
             -n {} --warmup {}",
            a.count,
            a.warmup
        );
    }
    Ok(Some(out))
}

/// SIGCONT, the signal that starts a round, blocked in this thread and every thread it
/// starts later (call before any), so that it stays pending until `wait_for_round` takes
/// it, whenever it arrives.
pub fn block_round_signal() -> Result<()> {
    let set = round_signal_set();
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        crate::bail!(Io, "blocking SIGCONT failed (error {rc})");
    }
    Ok(())
}

fn round_signal_set() -> libc::sigset_t {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCONT);
        set
    }
}

/// Wait for SIGCONT (blocked, see `block_round_signal`) until `deadline`.
fn wait_for_round(round: usize, deadline: Instant, time_limit: u64) -> Result<()> {
    let set = round_signal_set();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            crate::bail!(
                Io,
                "--time-limit {time_limit} s reached waiting for the signal of round {round}"
            );
        }
        let timeout = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        let rc = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
        if rc == libc::SIGCONT {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
            _ => crate::bail!(Io, "waiting for SIGCONT failed: {err}"),
        }
    }
}

pub fn run(a: Args) -> Result<()> {
    let stack = a.tls.stack()?;
    let rounds = parse_rounds(&a)?.is_some();
    if rounds {
        // Before the writer thread exists, so that it blocks SIGCONT too.
        block_round_signal()?;
    }
    // The sink writes what it holds when dropped, before any error record of main.
    let sink = record::Stdout::with_records(a.connection_records.as_deref())?;
    if rounds {
        sink.hold();
    }
    run_with(stack, &a, &sink)?;
    match sink.records_error() {
        Some(e) => crate::bail!(Io, "{e}"),
        None => Ok(()),
    }
}

/// The client loop on a given stack, records into `sink`: -n connections after --warmup
/// ones, or with --rounds each round when its signal comes (`sink` holding its records
/// until the round ends; see `run`).
pub fn run_with(stack: &dyn Stack, a: &Args, sink: &dyn Sink) -> Result<()> {
    let (ctx, target, checks) = setup(stack, a)?;
    sink.record(&record::config(
        "tls client",
        effective_options(a, &target, &checks),
    ));
    let deadline = Instant::now() + Duration::from_secs(a.time_limit);
    let client = Loop {
        events: a.tls.events()?,
        stack,
        ctx: &*ctx,
        a,
        target: &target,
        checks: &checks,
        sink,
        deadline,
    };
    let Some(rounds) = parse_rounds(a)? else {
        return client.connections(a.warmup, a.count, (0, 0), None);
    };
    // The config record out: whoever started the client may signal the first round now.
    sink.flush_held();
    let mut done = (0, 0);
    for (k, &(warmup, count)) in rounds.iter().enumerate() {
        wait_for_round(k, deadline, a.time_limit)?;
        let t0 = Stamp::now();
        client.connections(warmup, count, done, Some(k))?;
        let t1 = Stamp::now();
        sink.record(&json!({
            "type": "round", "round": k, "warmup": warmup, "count": count,
            "t_start": t0.real, "seconds": (t1.mono - t0.mono) as f64 / 1e9,
            "vm_hwm_kib": crate::heap::vm_hwm_kib(),
        }));
        sink.flush_held();
        done = (done.0 + warmup, done.1 + count);
    }
    Ok(())
}

/// What every connection of a client run shares.
struct Loop<'a> {
    events: Events,
    stack: &'a dyn Stack,
    ctx: &'a dyn ClientContext,
    a: &'a Args,
    target: &'a Target,
    checks: &'a Checks,
    sink: &'a dyn Sink,
    deadline: Instant,
}

impl Loop<'_> {
    /// `warmup` then `count` connections, each checked and recorded; `first` is how many
    /// warm-ups and measured connections came before (their indexes go on from there),
    /// `round` the round they belong to, if any.
    fn connections(
        &self,
        warmup: u64,
        count: u64,
        first: (u64, u64),
        round: Option<usize>,
    ) -> Result<()> {
        let total = warmup.saturating_add(count);
        for i in 0..total {
            if Instant::now() > self.deadline {
                crate::bail!(
                    Io,
                    "--time-limit {} s reached after {i} of {total} connections",
                    self.a.time_limit
                );
            }
            let index = if i < warmup {
                first.0 + i
            } else {
                first.1 + i - warmup
            };
            let nth = first.0 + first.1 + i;
            // A round's last connection waits for the server's close: when the round ends
            // the whole connection has crossed the link both ways (and is in the captures
            // the lab unhooks then), whatever the link's delay.
            let await_close_ms = if round.is_some() && i + 1 == total {
                self.a
                    .await_close_ms
                    .max(self.a.tls.io_timeout.max(1) * 1000)
            } else {
                self.a.await_close_ms
            };
            self.one_recorded(i < warmup, (index, nth), round, await_close_ms)?;
            if self.a.gap_ms > 0 && i + 1 < total {
                std::thread::sleep(Duration::from_millis(self.a.gap_ms));
            }
        }
        Ok(())
    }

    /// One connection, checked, and its record (a failed one's as `connection_error`):
    /// `index` among the warm-ups or the measured ones, the `i`th of the run; at its end
    /// it waits at most `await_close_ms` for the server's close (`--await-close-ms`).
    fn one_recorded(
        &self,
        warmup: bool,
        (index, i): (u64, u64),
        round: Option<usize>,
        await_close_ms: u64,
    ) -> Result<()> {
        let (stack, a, target, sink) = (self.stack, self.a, self.target, self.sink);
        let events_on = self.events != Events::Off;
        let rec: SharedRecorder = Rc::new(RefCell::new(Recorder::for_events(self.events)));
        if !stack.reports_messages() {
            rec.borrow_mut().scan_wire();
        }
        let mut out = json!({
            "type": "connection", "role": "client", "stack": stack.name(),
            "index": index, "warmup": warmup,
            "server": target.addr.to_string(), "servername": target.name,
            "security_level": self.ctx.security_level(),
        });
        if let Some(k) = round {
            out["round"] = json!(k);
        }
        let request = match a.warmup_request_bytes {
            Some(n) if warmup => Some(n),
            _ => a.request_bytes,
        };
        let ask = Ask {
            request,
            await_close_ms,
            until: Some(self.deadline),
        };
        let res = one(self.ctx, a, target, ask, &rec, &mut out);
        let events = match rec.try_borrow_mut() {
            Ok(mut r) => {
                r.add_counters(&mut out, stack.reports_messages());
                events_on.then(|| r.take_events())
            }
            Err(_) => None,
        };
        // A connection that failed, or failed its check, is recorded with what it got
        // before the run ends: a `connection_error` record, then the error.
        let outcome = res
            .map_err(|e| e.context(format!("connection {i} to {}", target.addr)))
            .and_then(|n| check(stack, self.checks, &n, i));
        if let Err(e) = outcome {
            out["type"] = json!("connection_error");
            out["kind"] = json!(e.kind());
            out["message"] = json!(e.message());
            sink.connection(&out, events.as_deref());
            return Err(e);
        }
        sink.connection(&out, events.as_deref());
        Ok(())
    }
}
