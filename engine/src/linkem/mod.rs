//! The userspace link emulator: two TUN devices and one forwarding thread per direction that
//! applies netem's semantics (`netem.rs`) with precise timers: a timerfd armed at an absolute
//! deadline a little before each packet is due, then a short busy-poll up to the deadline.
//!
//! Records: `linkem_ready` once both devices exist (pqlab then moves them into the two
//! namespaces and configures them), on SIGTERM/SIGINT one `linkem_stats` per direction and
//! `linkem_exit`. `--dump-table DIST` prints netem's distribution table instead.

mod netem;
mod tables;
mod tun;

use crate::out::{emit, Result};
use netem::{DirConfig, Netem, Rng, Verdict};
use serde::Deserialize;
use serde_json::json;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Args {
    /// Name of the TUN device of side A (the client side in pqlab).
    #[arg(long, required_unless_present = "dump_table")]
    tun_a: Option<String>,
    /// Name of the TUN device of side B (the server side).
    #[arg(long, required_unless_present = "dump_table")]
    tun_b: Option<String>,
    /// JSON: {"a_to_b": {...}, "b_to_a": {...}, "seed": N}; fields of each direction:
    /// latency_ns, jitter_ns, dist, delay_corr_pct, loss_pct, loss_corr_pct, rate_bps,
    /// limit, overhead_bytes.
    #[arg(long, default_value = "{}")]
    config: String,
    /// Busy-poll this long before each deadline (microseconds, at most 1000000) to absorb
    /// wake-up latency.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    spin_us: u64,
    /// Run the forwarding threads under SCHED_FIFO with this priority (1-99; 0 = normal
    /// scheduling). Real-time wake-ups keep the delay precise on a loaded machine; if the
    /// kernel refuses, the emulator says so in `linkem_ready` and runs normally.
    #[arg(long, default_value_t = 0)]
    rt_priority: i32,
    /// Keep up to this many samples of release lateness (actual - scheduled) per direction
    /// (at most 10000000: 8 bytes each in memory, all printed at exit).
    #[arg(long, default_value_t = 20000, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    lateness_samples: u64,
    /// Print netem's table for uniform|normal|pareto|paretonormal and exit.
    #[arg(long, value_name = "DIST")]
    dump_table: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    a_to_b: Option<DirConfig>,
    #[serde(default)]
    b_to_a: Option<DirConfig>,
    #[serde(default)]
    seed: u64,
}

pub fn run(a: Args) -> Result<()> {
    if let Some(name) = &a.dump_table {
        let Some(dist) = tables::Dist::parse(name) else {
            crate::bail!(
                Usage,
                "--dump-table {name:?}: use normal, pareto or paretonormal"
            )
        };
        let values = tables::table(dist).unwrap_or_default();
        emit(
            &json!({"type": "netem_table", "dist": name, "scale": tables::DIST_SCALE,
                     "values": values}),
        );
        return Ok(());
    }
    let cfg: Config = serde_json::from_str(&a.config)
        .map_err(|e| crate::err!(Usage, "--config is not a valid link profile: {e}"))?;
    let default_dir = || serde_json::from_str::<DirConfig>("{}").expect("empty config");
    let a2b = cfg.a_to_b.unwrap_or_else(default_dir);
    let b2a = cfg.b_to_a.unwrap_or_else(default_dir);
    let mut seeder = Rng::new(cfg.seed);
    let ne_a2b = Netem::new(a2b, seeder.next_u64()).map_err(crate::out::Error::Usage)?;
    let ne_b2a = Netem::new(b2a, seeder.next_u64()).map_err(crate::out::Error::Usage)?;

    // main() has asked for SIGTERM when the parent dies (lifecycle.rs): it is blocked here
    // and collected by wait_signal, so the devices go away with the emulator.
    block_signals();

    // What it runs with, echoed in linkem_ready as every TLS command's first record does.
    let options = serde_json::to_value(&a).unwrap_or(serde_json::Value::Null);
    let (name_a, name_b) = (a.tun_a.unwrap_or_default(), a.tun_b.unwrap_or_default());
    let fd_a = tun::open_tun(&name_a).map_err(crate::out::Error::Io)?;
    let fd_b = tun::open_tun(&name_b).map_err(crate::out::Error::Io)?;
    if !(0..=99).contains(&a.rt_priority) {
        crate::bail!(Usage, "--rt-priority {} is outside 0-99", a.rt_priority);
    }
    // Threads created below inherit the scheduling policy of this one.
    let rt_error = if a.rt_priority > 0 {
        set_fifo(a.rt_priority).err()
    } else {
        None
    };
    let rt = if rt_error.is_none() { a.rt_priority } else { 0 };
    emit(
        &json!({"type": "linkem_ready", "tun_a": name_a, "tun_b": name_b,
                 "pid": std::process::id(), "clock": "CLOCK_MONOTONIC",
                 "spin_us": a.spin_us, "rt_priority": rt, "rt_error": rt_error,
                 "options": options}),
    );

    let stop = Arc::new(AtomicBool::new(false));
    let wake = Arc::new(tun::EventFd::new()?);
    let spin_ns = (a.spin_us * 1000) as i64;
    let mut handles = Vec::new();
    for (name, ne, rx, tx) in [
        ("a_to_b", ne_a2b, fd_a.as_raw_fd(), fd_b.as_raw_fd()),
        ("b_to_a", ne_b2a, fd_b.as_raw_fd(), fd_a.as_raw_fd()),
    ] {
        let dir = Direction {
            name,
            netem: ne,
            rx,
            tx,
            spin_ns,
            stats: Stats::new(a.lateness_samples as usize, seeder.next_u64()),
        };
        let (stop, wake) = (stop.clone(), wake.clone());
        handles.push(std::thread::spawn(move || dir.forward(&stop, &wake)));
    }

    // Wait for a signal, or for a direction that failed.
    let mut exit_signal = 0;
    while handles.iter().all(|h| !h.is_finished()) {
        if let Some(sig) = wait_signal(200) {
            exit_signal = sig;
            break;
        }
    }
    stop.store(true, Ordering::SeqCst);
    wake.signal();
    let mut failure = None;
    for h in handles {
        match h.join() {
            Ok(Ok(stats)) => emit(&stats),
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some("a forwarding thread panicked".to_string()),
        }
    }
    drop((fd_a, fd_b));
    if let Some(e) = failure {
        crate::bail!(Io, "{e}");
    }
    emit(&json!({"type": "linkem_exit", "signal": exit_signal}));
    Ok(())
}

/// SCHED_FIFO for the calling thread (and threads it creates afterwards).
fn set_fifo(priority: i32) -> std::result::Result<(), String> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: valid sched_param; 0 = the calling thread.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if r != 0 {
        return Err(format!(
            "SCHED_FIFO refused: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Block the exit signals in every thread; the main thread collects them synchronously.
fn block_signals() {
    let set = signal_set();
    // SAFETY: valid sigset; called before threads start so they inherit the mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

fn wait_signal(timeout_ms: i64) -> Option<i32> {
    let set = signal_set();
    let ts = libc::timespec {
        tv_sec: timeout_ms / 1000,
        tv_nsec: (timeout_ms % 1000) * 1_000_000,
    };
    // SAFETY: valid set and timeout; info may be null.
    let r = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    (r > 0).then_some(r)
}

/// Counters of one direction, plus a reservoir of release-lateness samples.
struct Stats {
    packets_in: u64,
    bytes_in: u64,
    lost: u64,
    queue_drops: u64,
    packets_out: u64,
    bytes_out: u64,
    write_errors: u64,
    max_queue: usize,
    late_over_1ms: u64,
    lateness_ns: Vec<i64>,
    cap: usize,
    seen: u64,
    rng: Rng,
}

impl Stats {
    fn new(cap: usize, seed: u64) -> Stats {
        Stats {
            packets_in: 0,
            bytes_in: 0,
            lost: 0,
            queue_drops: 0,
            packets_out: 0,
            bytes_out: 0,
            write_errors: 0,
            max_queue: 0,
            late_over_1ms: 0,
            lateness_ns: Vec::with_capacity(cap.min(1 << 20)),
            cap,
            seen: 0,
            rng: Rng::new(seed),
        }
    }
    fn lateness(&mut self, ns: i64) {
        if ns > 1_000_000 {
            self.late_over_1ms += 1;
        }
        self.seen += 1;
        if self.lateness_ns.len() < self.cap {
            self.lateness_ns.push(ns);
        } else if self.cap > 0 {
            // Reservoir sampling keeps a uniform sample of the whole run.
            let j = self.rng.next_u64() % self.seen;
            if (j as usize) < self.cap {
                self.lateness_ns[j as usize] = ns;
            }
        }
    }
}

struct Direction {
    name: &'static str,
    netem: Netem,
    rx: RawFd,
    tx: RawFd,
    spin_ns: i64,
    stats: Stats,
}

impl Direction {
    fn forward(
        mut self,
        stop: &AtomicBool,
        wake: &tun::EventFd,
    ) -> std::result::Result<serde_json::Value, String> {
        let timer = tun::TimerFd::new().map_err(|e| format!("timerfd: {e}"))?;
        let epoll = tun::Epoll::new(&[self.rx, timer.fd(), wake.fd()])
            .map_err(|e| format!("epoll: {e}"))?;
        let mut buf = vec![0u8; 65536];
        while !stop.load(Ordering::Relaxed) {
            let now = tun::now_ns();
            // Release everything that is due.
            while let Some((due, pkt)) = self.netem.dequeue_due(now) {
                let t = tun::now_ns();
                self.stats.lateness(t - due);
                if tun::write_packet(self.tx, &pkt) {
                    self.stats.packets_out += 1;
                    self.stats.bytes_out += pkt.len() as u64;
                } else {
                    self.stats.write_errors += 1;
                }
            }
            // Take in what has arrived (bounded, so releases are not starved).
            let mut got = 0;
            while got < 64 {
                match tun::read_packet(self.rx, &mut buf) {
                    Ok(Some(n)) => {
                        got += 1;
                        let t = tun::now_ns();
                        self.stats.packets_in += 1;
                        self.stats.bytes_in += n as u64;
                        match self.netem.enqueue(t, buf[..n].to_vec()).0 {
                            Verdict::Queued(_) => {}
                            Verdict::Lost => self.stats.lost += 1,
                            Verdict::QueueFull => self.stats.queue_drops += 1,
                        }
                        self.stats.max_queue = self.stats.max_queue.max(self.netem.len());
                    }
                    Ok(None) => break,
                    Err(e) => {
                        // The device went away (e.g. its namespace was deleted): stop quietly.
                        if e.raw_os_error() == Some(libc::EBADFD) {
                            return Ok(self.finish());
                        }
                        return Err(format!("{}: reading the TUN device failed: {e}", self.name));
                    }
                }
            }
            if got > 0 {
                continue;
            }
            let now = tun::now_ns();
            match self.netem.next_due() {
                Some(due) if due - now <= self.spin_ns => {
                    // Busy-poll the last stretch; yield so the endpoints still get the CPU.
                    if due > now {
                        std::thread::yield_now();
                    }
                }
                Some(due) => {
                    timer
                        .arm_at(due - self.spin_ns)
                        .map_err(|e| format!("timerfd: {e}"))?;
                    epoll.wait(-1).map_err(|e| format!("epoll: {e}"))?;
                    timer.drain();
                }
                None => {
                    epoll.wait(-1).map_err(|e| format!("epoll: {e}"))?;
                }
            }
        }
        Ok(self.finish())
    }

    fn finish(self) -> serde_json::Value {
        let s = self.stats;
        json!({
            "type": "linkem_stats", "direction": self.name,
            "packets_in": s.packets_in, "bytes_in": s.bytes_in,
            "lost": s.lost, "queue_drops": s.queue_drops,
            "packets_out": s.packets_out, "bytes_out": s.bytes_out,
            "write_errors": s.write_errors, "max_queue": s.max_queue,
            "queued_at_exit": self.netem.len(), "late_over_1ms": s.late_over_1ms,
            "lateness_seen": s.seen, "lateness_ns": s.lateness_ns,
        })
    }
}
