//! `tls bulk`: bulk transfer after one handshake, each way, as wolfSSL's tls_bench does.
//! Per connection: a full handshake (checked like `tls client`); with `--echo-bytes e`, then
//! `ECHO <e>` and e pattern bytes a record at a time, each record's echo read back and
//! checked before the next is written (tls_bench's loop right after its handshake: its "Tx"
//! is the time inside the write calls, its "Rx" the time waiting in the reads); then
//! `PUSH <n>` and n pattern bytes to the server (which checks every read and answers
//! `OK <n> <ns>`), then `PULL <m>` and m pattern bytes from the server, every read checked
//! here. One `bulk` record per connection with the times of every direction.

use super::connect;
use crate::out::Result;
use crate::tls::http::request::{fill_pattern, is_pattern};
use crate::tls::record::{self, Recorder, SharedRecorder, Stamp};
use crate::tls::stack::{ReadOutcome, ServerName, Session};
use crate::tls::transport::tcp::{self, Wire};
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// Bytes per application-data write: one full TLS record.
const CHUNK: usize = 16384;

#[derive(clap::Args, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Args {
    /// The client's options: `-n` connections (each one handshake and both transfers),
    /// `--warmup` unrecorded ones first, `--time-limit` for the whole run.
    #[command(flatten)]
    #[serde(flatten)]
    pub client: connect::Args,
    /// Bytes sent to the server per connection (1 to 17179869184).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=(1u64 << 34)))]
    pub push_bytes: u64,
    /// Bytes received from the server per connection (1 to 17179869184).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=(1u64 << 34)))]
    pub pull_bytes: u64,
    /// Bytes echoed per connection after the pull, a 16 KiB record at a time (tls_bench
    /// echoes 131072: 8 records), 1 to 17179869184; none by default.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=(1u64 << 34)))]
    pub echo_bytes: Option<u64>,
}

pub fn run(a: Args) -> Result<()> {
    if a.client.request_bytes.is_some() || a.client.gap_ms != 0 {
        crate::bail!(
            Usage,
            "--request-bytes and --gap-ms are for tls client; tls bulk uses --push-bytes and --pull-bytes"
        );
    }
    if a.client.rounds.is_some() || a.client.connection_records.is_some() {
        crate::bail!(
            Usage,
            "--rounds and --connection-records are for tls client; tls bulk runs -n connections"
        );
    }
    let stack = a.client.tls.stack()?;
    let (ctx, target, checks) = connect::setup(stack, &a.client)?;
    let mut options = record::options(&a);
    let client = connect::effective_options(&a.client, &target, &checks);
    for key in ["servername", "expect-group", "expect-sigalg"] {
        options[key] = client[key].clone();
    }
    crate::out::emit(&record::config("tls bulk", options));
    let deadline = std::time::Instant::now() + Duration::from_secs(a.client.time_limit);
    let total = a.client.warmup.saturating_add(a.client.count);
    for i in 0..total {
        if std::time::Instant::now() > deadline {
            crate::bail!(
                Io,
                "--time-limit {} s reached after {i} of {total} connections",
                a.client.time_limit
            );
        }
        let dialed = connect::Dialed::connect(&a.client, &target, Some(deadline))
            .map_err(|e| e.context(format!("connection {i}")))?;
        let out = transfer(&a, stack, &*ctx, (&target, &checks), &dialed, i)
            .map_err(|e| dialed.explain(e))?;
        crate::out::emit(&out);
    }
    Ok(())
}

/// One connection's handshake and transfers on a connected socket; its `bulk` record.
fn transfer(
    a: &Args,
    stack: &dyn crate::tls::stack::Stack,
    ctx: &dyn crate::tls::stack::ClientContext,
    (target, checks): (&connect::Target, &connect::Checks),
    dialed: &connect::Dialed,
    i: u64,
) -> Result<serde_json::Value> {
    let tcp = &dialed.tcp;
    crate::tls::transport::tcp::setup(tcp, a.client.tls.io_timeout)?;
    let rec: SharedRecorder = Rc::new(RefCell::new(Recorder::new(false)));
    let wire = Wire {
        tcp: tcp.clone(),
        rec: rec.clone(),
        peer: "server",
        timeout_s: a.client.tls.io_timeout,
    };
    // The handshake alone, the TCP connection already up (what tls_bench's "Connect"
    // times: wolfSSL_connect on a connected socket).
    let handshake = ctx.start(wire, &ServerName::parse(&target.name))?;
    let started = std::time::Instant::now();
    let mut session = handshake.run()?;
    let handshake_ns = started.elapsed().as_nanos() as u64;
    let neg = connect::Negotiation {
        negotiated: session.negotiated(),
        verification: session.verification(),
    };
    connect::check(stack, checks, &neg, i)?;
    // The echo first, right after the handshake, as tls_bench's loop runs: after a bulk
    // transfer the same loop measured up to a quarter slower (docs/throughput.md).
    let echo = match a.echo_bytes {
        Some(e) => Some(
            echo(&mut *session, e).map_err(|err| err.context(format!("connection {i}: echo")))?,
        ),
        None => None,
    };
    let (push_ns, server_recv_ns, push_cpu_ns) = push(&mut *session, a.push_bytes)
        .map_err(|e| e.context(format!("connection {i}: push")))?;
    let (pull_ns, pull_first_ns, pull_cpu_ns) = pull(&mut *session, a.pull_bytes)
        .map_err(|e| e.context(format!("connection {i}: pull")))?;
    session.close(false);
    let mut out = json!({
        "type": "bulk", "index": if i < a.client.warmup { i } else { i - a.client.warmup },
        "warmup": i < a.client.warmup, "stack": stack.name(), "handshake_ns": handshake_ns,
        "negotiated": serde_json::to_value(&neg.negotiated).unwrap_or_default(),
        "push_bytes": a.push_bytes, "push_ns": push_ns, "server_recv_ns": server_recv_ns,
        "pull_bytes": a.pull_bytes, "pull_ns": pull_ns, "pull_first_to_last_ns": pull_first_ns,
        "push_cpu_ns": push_cpu_ns, "pull_cpu_ns": pull_cpu_ns,
        "tcp_info": tcp::info(tcp), "t": record::realtime_ns(),
    });
    if let (Some(e), Some((write_ns, read_ns))) = (a.echo_bytes, echo) {
        out["echo_bytes"] = json!(e);
        out["echo_write_ns"] = json!(write_ns);
        out["echo_read_ns"] = json!(read_ns);
    }
    if let Ok(r) = rec.try_borrow() {
        r.add_counters(&mut out, stack.reports_messages());
    }
    Ok(out)
}

/// Send `PUSH <n>` (its own record) and n pattern bytes; wait for `OK <n> <ns>`.
/// (ns from the first byte written to the OK read, the server's first-to-last read ns, and
/// this thread's CPU ns from the first write to the last: encrypting and sending).
fn push(session: &mut dyn Session, n: u64) -> Result<(i64, i64, u64)> {
    session.write_all(format!("PUSH {n}\n").as_bytes())?;
    session.flush()?;
    let mut buf = vec![0u8; CHUNK];
    let t0 = Stamp::now();
    let cpu0 = crate::cputime::thread_cpu_ns();
    let mut sent = 0u64;
    while sent < n {
        let k = (n - sent).min(CHUNK as u64) as usize;
        fill_pattern(&mut buf[..k], sent);
        session.write_all(&buf[..k])?;
        sent += k as u64;
    }
    session.flush()?;
    let cpu_ns = crate::cputime::thread_cpu_ns().saturating_sub(cpu0);
    let mut line = Vec::new();
    let mut b = [0u8; 64];
    while !line.ends_with(b"\n") {
        match session.read(&mut b)? {
            ReadOutcome::Data(k) => line.extend_from_slice(&b[..k]),
            _ => crate::bail!(Peer, "the server closed before confirming the push"),
        }
        if line.len() > 64 {
            crate::bail!(Peer, "the server's confirmation is too long");
        }
    }
    let done = record::monotonic_ns();
    let text = String::from_utf8_lossy(&line);
    let parts: Vec<&str> = text.split_whitespace().collect();
    match parts.as_slice() {
        ["OK", got, ns] if got.parse::<u64>().ok() == Some(n) => {
            let server_ns = ns
                .parse::<i64>()
                .map_err(|_| crate::err!(Peer, "bad confirmation {text:?}"))?;
            Ok((done - t0.mono, server_ns, cpu_ns))
        }
        _ => crate::bail!(Check, "the server confirmed {text:?}, pushed {n} bytes"),
    }
}

/// Send `ECHO <e>`, then e pattern bytes a record at a time, reading each record's echo back
/// (checked) before writing the next; (ns inside the write calls, ns inside the reads), as
/// tls_bench's client times its Tx and Rx.
fn echo(session: &mut dyn Session, e: u64) -> Result<(i64, i64)> {
    session.write_all(format!("ECHO {e}\n").as_bytes())?;
    session.flush()?;
    let mut out = vec![0u8; CHUNK];
    let mut back = vec![0u8; CHUNK];
    let (mut write_ns, mut read_ns, mut sent) = (0i64, 0i64, 0u64);
    while sent < e {
        let k = (e - sent).min(CHUNK as u64) as usize;
        fill_pattern(&mut out[..k], sent);
        let t0 = record::monotonic_ns();
        session.write_all(&out[..k])?;
        session.flush()?;
        let t1 = record::monotonic_ns();
        write_ns += t1 - t0;
        let mut got = 0;
        while got < k {
            match session.read(&mut back[got..k])? {
                ReadOutcome::Data(r) => got += r,
                _ => crate::bail!(
                    Peer,
                    "the server stopped echoing after {} bytes",
                    sent + got as u64
                ),
            }
        }
        read_ns += record::monotonic_ns() - t1;
        if !is_pattern(&back[..k], sent) {
            crate::bail!(Check, "echoed data corrupted at offset {sent}");
        }
        sent += k as u64;
    }
    Ok((write_ns, read_ns))
}

/// Send `PULL <m>` and read m pattern bytes, every read checked.
/// (ns from the request to the last byte, ns from the first to the last byte, and this
/// thread's CPU ns over the pull: receiving, decrypting, checking).
fn pull(session: &mut dyn Session, m: u64) -> Result<(i64, i64, u64)> {
    session.write_all(format!("PULL {m}\n").as_bytes())?;
    session.flush()?;
    let t0 = record::monotonic_ns();
    let cpu0 = crate::cputime::thread_cpu_ns();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0u64;
    let mut first = t0;
    while got < m {
        let want = (m - got).min(buf.len() as u64) as usize;
        match session.read(&mut buf[..want])? {
            ReadOutcome::Data(k) => {
                if got == 0 {
                    first = record::monotonic_ns();
                }
                if !is_pattern(&buf[..k], got) {
                    crate::bail!(Check, "pulled data corrupted at offset {got}");
                }
                got += k as u64;
            }
            _ => crate::bail!(Peer, "the server stopped after {got} of {m} bytes"),
        }
    }
    let last = record::monotonic_ns();
    let cpu_ns = crate::cputime::thread_cpu_ns().saturating_sub(cpu0);
    Ok((last - t0, last - first, cpu_ns))
}
