//! The measuring loop, written once for every backend.
//!
//! Each algorithm is measured in phases: key generation alone, then the operations that use
//! a key in pairs (encaps+decaps, public_key+shared_secret, sign+verify). A phase runs in
//! batches of up to `BATCH` iterations: first every timed run of the first operation back to
//! back, then every timed run of the second on the first one's outputs, then the checks. So
//! consecutive samples of one operation run back to back (as in `openssl speed` and liboqs's
//! speed programs), while every output is still checked:
//! - keygen: each key is used once, untimed (encaps+decaps, derive both ways, sign+verify);
//! - encaps/decaps: each decapsulation must return the encapsulated secret;
//! - public_key/shared_secret: each imported key share must equal the exported one, each
//!   derived secret the one the peer derives;
//! - sign/verify: each signature (of a distinct message) is verified by the timed verify,
//!   which must accept it.
//!
//! A failed check ends the run with an error record. Per operation, `iterations + 1` timed
//! runs are made after the warm-up; the first (index 0) is emitted with `"dropped": true`
//! (the documents' "first run dropped"), so `iterations` samples remain.

use super::backend::{Kem, KeyAgreement, KeySizes, SigSizes, Signature};
use super::timer::{monotonic_ns, time, Sample};
use crate::out::{emit, Result};
use serde_json::{json, Map, Value};

/// Iterations per batch (bounds memory: keys, ciphertexts and signatures of one batch).
pub const BATCH: usize = 128;
/// Length of each signed message (the order of a TLS 1.3 CertificateVerify's content).
pub const MESSAGE_LEN: usize = 64;
/// The warm-up of one phase stops after this long even if fewer runs were made.
const WARMUP_MAX_NS: u64 = 2_000_000_000;

#[derive(Clone, Debug)]
pub struct Plan {
    /// Kept samples per operation (one more timed run is made and dropped).
    pub iterations: usize,
    pub warmup: usize,
    /// Time budget per phase, seconds (None: none).
    pub max_seconds: Option<f64>,
    /// Fixed-time mode (liboqs `speed_kem` / `speed_sig` style): instead of `iterations`,
    /// a phase runs until each of its operations has spent at least this many seconds in
    /// its own timed runs (`iterations` is then only the cap).
    pub seconds_per_op: Option<f64>,
    /// Emit one record per timed run.
    pub emit_samples: bool,
}

/// Distinct 64-byte message number `j`.
pub fn message(j: u64) -> [u8; MESSAGE_LEN] {
    let mut m = [0u8; MESSAGE_LEN];
    m[..8].copy_from_slice(&j.to_be_bytes());
    const FILL: &[u8] = b"pqlab: a message to sign, one per timed signature. ";
    for (i, b) in m[8..].iter_mut().enumerate() {
        *b = FILL[i % FILL.len()];
    }
    m
}

// --- sizes -------------------------------------------------------------------------------

#[derive(Default)]
struct Range(Option<(usize, usize)>);
impl Range {
    fn add(&mut self, v: Option<usize>) {
        if let Some(v) = v {
            self.0 = Some(match self.0 {
                None => (v, v),
                Some((lo, hi)) => (lo.min(v), hi.max(v)),
            });
        }
    }
    fn json(&self) -> Value {
        match self.0 {
            Some((lo, hi)) => json!({"min": lo, "max": hi}),
            None => Value::Null,
        }
    }
}

#[derive(Default)]
pub struct Sizes {
    public_key: Range,
    secret_key: Range,
    ciphertext: Range,
    shared_secret: Range,
    signature: Range,
    public_key_der: Range,
    secret_key_der: Range,
    signature_der: Range,
    keys: usize,
    outputs: usize,
}

impl Sizes {
    fn key(&mut self, k: KeySizes) {
        self.public_key.add(k.public_key);
        self.secret_key.add(k.secret_key);
        self.public_key_der.add(k.public_key_der);
        self.secret_key_der.add(k.secret_key_der);
        self.keys += 1;
    }
    fn kem(&mut self, ct: usize, ss: usize) {
        self.ciphertext.add(Some(ct));
        self.shared_secret.add(Some(ss));
        self.outputs += 1;
    }
    fn sig(&mut self, s: SigSizes) {
        self.signature.add(Some(s.raw));
        self.signature_der.add(Some(s.encoded));
        self.outputs += 1;
    }
    fn emit(&self, notes: Value) {
        emit(&json!({
            "type": "sizes",
            "public_key": self.public_key.json(),
            "secret_key": self.secret_key.json(),
            "ciphertext": self.ciphertext.json(),
            "shared_secret": self.shared_secret.json(),
            "signature": self.signature.json(),
            "public_key_der": self.public_key_der.json(),
            "secret_key_der": self.secret_key_der.json(),
            "signature_der": self.signature_der.json(),
            "keys_observed": self.keys,
            "outputs_observed": self.outputs,
            "notes": notes,
            // The last record: the process's own peak resident set, which the lab cannot
            // sample reliably from outside for a run shorter than its sampling interval.
            "vm_hwm_kib": own_peak_rss_kib(),
        }));
    }
}

/// This process's peak resident set so far (VmHWM of /proc/self/status, KiB): the current
/// memory image only, unlike getrusage's ru_maxrss, which keeps the pre-exec image's peak.
fn own_peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

// --- phases ------------------------------------------------------------------------------

/// One batch: `n` iterations wanted, at least `min` before honouring `deadline` (ns on
/// CLOCK_MONOTONIC); returns the samples of each operation of the phase (equal lengths).
type BatchResult = Result<Vec<Vec<Sample>>>;

fn past(deadline: Option<u64>) -> bool {
    deadline.is_some_and(|d| monotonic_ns() >= d)
}

fn run_phase(
    plan: &Plan,
    ops: &[&str],
    mut batch: impl FnMut(usize, usize, Option<u64>) -> BatchResult,
) -> Result<()> {
    // Warm-up: the same work, untimed results discarded (checks still apply).
    let warm_deadline = {
        let cap = plan
            .max_seconds
            .map_or(WARMUP_MAX_NS, |s| ((s * 1e9) as u64).min(WARMUP_MAX_NS));
        monotonic_ns() + cap
    };
    let mut warmed = 0;
    while warmed < plan.warmup && !past(Some(warm_deadline)) {
        let n = (plan.warmup - warmed).min(BATCH);
        let got = batch(n, 1, Some(warm_deadline))?;
        warmed += got[0].len();
    }

    let total = plan.iterations + 1;
    let start = monotonic_ns();
    let deadline = plan.max_seconds.map(|s| start + (s * 1e9) as u64);
    let own_target_ns = plan.seconds_per_op.map(|s| (s * 1e9) as u64);
    let mut own_ns = vec![0u64; ops.len()]; // each operation's own timed nanoseconds
    let mut done = 0usize;
    let mut budget_exhausted = false;
    while done < total {
        if done >= 2 && past(deadline) {
            budget_exhausted = true;
            break;
        }
        if done >= 2 && own_target_ns.is_some_and(|t| own_ns.iter().all(|&n| n >= t)) {
            break;
        }
        let n = (total - done).min(BATCH);
        let min = 2usize.saturating_sub(done).min(n);
        let got = batch(n, min, deadline)?;
        let k = got[0].len();
        debug_assert!(got.iter().all(|s| s.len() == k));
        for (acc, samples) in own_ns.iter_mut().zip(&got) {
            // The dropped first run does not count towards the fixed time either.
            let skip = usize::from(done == 0);
            *acc += samples.iter().skip(skip).map(|s| s.ns).sum::<u64>();
        }
        if plan.emit_samples {
            for (op, samples) in ops.iter().zip(&got) {
                for (j, s) in samples.iter().enumerate() {
                    let index = done + j;
                    emit(&json!({
                        "type": "sample", "op": op, "index": index, "ns": s.ns,
                        "cycles": s.cycles, "dropped": index == 0,
                    }));
                }
            }
        }
        done += k;
    }
    let elapsed = (monotonic_ns() - start) as f64 / 1e9;
    for (op, own) in ops.iter().zip(&own_ns) {
        emit(&json!({
            "type": "op_done", "op": op, "timed_runs": done, "kept": done - 1,
            "requested": plan.iterations, "warmup_runs": warmed,
            "budget_exhausted": budget_exhausted, "phase_seconds": elapsed,
            "own_seconds": *own as f64 / 1e9, "seconds_per_op": plan.seconds_per_op,
        }));
    }
    Ok(())
}

fn check_failed(what: String) -> crate::out::Error {
    crate::out::Error::Check(format!(
        "check failed: {what}; no numbers are reported for this run"
    ))
}

fn flip(bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    let i = v.len() / 2;
    v[i] ^= 0x01;
    v
}

/// Time one key generation. Where the backend writes into caller-owned buffers (liboqs),
/// they are allocated and zeroed before the clock starts, as liboqs's speed programs do;
/// otherwise the library's whole keygen (its own allocation included) is timed.
fn timed_keygen<Key>(
    buffer: impl FnOnce() -> Option<Key>,
    into: impl FnOnce(&mut Key) -> Result<()>,
    whole: impl FnOnce() -> Result<Key>,
) -> (Result<Key>, Sample) {
    match buffer() {
        Some(mut key) => {
            let (r, t) = time(|| into(&mut key));
            (r.map(|()| key), t)
        }
        None => time(whole),
    }
}

// --- KEM ---------------------------------------------------------------------------------

pub fn kem<K: Kem>(k: &K, plan: &Plan) -> Result<()> {
    let mut sizes = Sizes::default();
    let mut checks = 0u64;
    run_phase(plan, &["keygen"], |n, min, deadline| {
        let mut keys = Vec::with_capacity(n);
        let mut times = Vec::with_capacity(n);
        for i in 0..n {
            if i >= min && past(deadline) {
                break;
            }
            let (key, t) = timed_keygen(|| k.key_buffer(), |buf| k.keygen_into(buf), || k.keygen());
            keys.push(key?);
            times.push(t);
        }
        for key in &keys {
            let (ct, ss) = k.encaps(key)?;
            if k.decaps(key, &ct)? != ss {
                return Err(check_failed(
                    "a generated key pair does not decapsulate its own encapsulation".into(),
                ));
            }
            sizes.key(k.key_sizes(key)?);
            sizes.kem(ct.len(), ss.len());
            checks += 1;
        }
        Ok(vec![times])
    })?;

    let key = k.keygen()?;
    run_phase(plan, &["encaps", "decaps"], |n, min, deadline| {
        let mut outs = Vec::with_capacity(n);
        let mut te = Vec::with_capacity(n);
        for i in 0..n {
            if i >= min && past(deadline) {
                break;
            }
            let (r, t) = time(|| k.encaps(&key));
            outs.push(r?);
            te.push(t);
        }
        let mut td = Vec::with_capacity(outs.len());
        for (ct, ss) in &outs {
            let (r, t) = time(|| k.decaps(&key, ct));
            td.push(t);
            if r? != *ss {
                return Err(check_failed(
                    "decapsulated secret differs from the encapsulated one".into(),
                ));
            }
            sizes.kem(ct.len(), ss.len());
            checks += 1;
        }
        Ok(vec![te, td])
    })?;

    // The check must be able to fail: a corrupted ciphertext must not give the same secret
    // (ML-KEM's implicit rejection returns a pseudorandom one; others may return an error).
    let (ct, ss) = k.encaps(&key)?;
    let outcome = match k.decaps(&key, &flip(&ct)) {
        Ok(s) if s == ss => {
            return Err(check_failed(
                "a corrupted ciphertext decapsulated to the same secret".into(),
            ))
        }
        Ok(_) => "different secret",
        Err(_) => "error",
    };
    emit(&json!({"type": "checks", "passed": checks,
                 "negative": [{"name": "corrupted ciphertext", "outcome": outcome}]}));
    sizes.emit(k.notes());
    Ok(())
}

// --- key agreement -----------------------------------------------------------------------

pub fn kex<X: KeyAgreement>(x: &X, plan: &Plan) -> Result<()> {
    let mut sizes = Sizes::default();
    let mut checks = 0u64;
    let peer = x.keygen()?;
    let peer_share = x.public_key(&peer)?;
    run_phase(plan, &["keygen"], |n, min, deadline| {
        let mut keys = Vec::with_capacity(n);
        let mut times = Vec::with_capacity(n);
        for i in 0..n {
            if i >= min && past(deadline) {
                break;
            }
            let (key, t) = time(|| x.keygen());
            keys.push(key?);
            times.push(t);
        }
        for key in &keys {
            let mine = x.derive(key, &peer_share)?;
            let theirs = x.derive(&peer, &x.public_key(key)?)?;
            if mine != theirs {
                return Err(check_failed(
                    "the two sides derived different secrets".into(),
                ));
            }
            let ks = x.key_sizes(key)?;
            let share = ks.public_key.unwrap_or(0);
            sizes.key(ks);
            sizes.kem(share, mine.len());
            checks += 1;
        }
        Ok(vec![times])
    })?;

    let key = x.keygen()?;
    let wire = x.wire_public(&key)?;
    let reference = x.derive(&peer, &x.public_key(&key)?)?;
    run_phase(
        plan,
        &["public_key", "shared_secret"],
        |n, min, deadline| {
            let mut shares = Vec::with_capacity(n);
            let mut tp = Vec::with_capacity(n);
            for i in 0..n {
                if i >= min && past(deadline) {
                    break;
                }
                let (r, t) = time(|| x.public_key(&key));
                shares.push(r?);
                tp.push(t);
            }
            for s in &shares {
                if x.peer_wire(s)? != wire {
                    return Err(check_failed(
                        "the imported key share differs from the exported public key".into(),
                    ));
                }
            }
            let mut ts = Vec::with_capacity(shares.len());
            for _ in 0..shares.len() {
                let (r, t) = time(|| x.derive(&key, &peer_share));
                ts.push(t);
                if r? != reference {
                    return Err(check_failed(
                        "the two sides derived different secrets".into(),
                    ));
                }
                checks += 1;
            }
            Ok(vec![tp, ts])
        },
    )?;

    // Negative check: a different peer gives a different secret.
    let other = x.keygen()?;
    if x.derive(&key, &x.public_key(&other)?)? == reference {
        return Err(check_failed(
            "a different peer key produced the same secret".into(),
        ));
    }
    emit(&json!({"type": "checks", "passed": checks,
                 "negative": [{"name": "different peer key", "outcome": "different secret"}]}));
    sizes.emit(x.notes());
    Ok(())
}

// --- signatures --------------------------------------------------------------------------

pub fn sig<S: Signature>(s: &S, plan: &Plan) -> Result<()> {
    let mut sizes = Sizes::default();
    let mut checks = 0u64;
    let mut counter = 0u64;
    run_phase(plan, &["keygen"], |n, min, deadline| {
        let mut keys = Vec::with_capacity(n);
        let mut times = Vec::with_capacity(n);
        for i in 0..n {
            if i >= min && past(deadline) {
                break;
            }
            let (key, t) = timed_keygen(|| s.key_buffer(), |buf| s.keygen_into(buf), || s.keygen());
            keys.push(key?);
            times.push(t);
        }
        for key in &keys {
            counter += 1;
            let m = message(counter);
            let signature = s.sign(key, &m)?;
            if !s.verify(key, &m, &signature)? {
                return Err(check_failed(
                    "a signature by a generated key does not verify".into(),
                ));
            }
            sizes.key(s.key_sizes(key)?);
            sizes.sig(s.signature_sizes(&signature)?);
            checks += 1;
        }
        Ok(vec![times])
    })?;

    let key = s.keygen()?;
    let mut last = None;
    run_phase(plan, &["sign", "verify"], |n, min, deadline| {
        let mut sigs = Vec::with_capacity(n);
        let mut tsig = Vec::with_capacity(n);
        for i in 0..n {
            if i >= min && past(deadline) {
                break;
            }
            counter += 1;
            let m = message(counter);
            let (r, t) = time(|| s.sign(&key, &m));
            sigs.push((m, r?));
            tsig.push(t);
        }
        let mut tver = Vec::with_capacity(sigs.len());
        for (m, signature) in &sigs {
            let (r, t) = time(|| s.verify(&key, m, signature));
            tver.push(t);
            if !r? {
                return Err(check_failed("a signature failed to verify".into()));
            }
            sizes.sig(s.signature_sizes(signature)?);
            checks += 1;
        }
        last = sigs.pop();
        Ok(vec![tsig, tver])
    })?;

    // The verify check must be able to fail.
    let (m, signature) = last.expect("at least two signatures were made");
    let mut negative = Vec::new();
    if s.verify(&key, &m, &flip(&signature))? {
        return Err(check_failed("a corrupted signature verified".into()));
    }
    negative.push(json!({"name": "corrupted signature", "outcome": "rejected"}));
    if s.verify(&key, &message(u64::MAX), &signature)? {
        return Err(check_failed(
            "a signature verified for a different message".into(),
        ));
    }
    negative.push(json!({"name": "different message", "outcome": "rejected"}));
    emit(&json!({"type": "checks", "passed": checks, "negative": negative}));
    sizes.emit(s.notes());
    Ok(())
}

/// The record that opens a run.
pub fn start_record(
    kind: &str,
    backend: &str,
    alg: &str,
    params: &Map<String, Value>,
    plan: &Plan,
    ops: &[&str],
) -> Value {
    json!({
        "type": "start", "kind": kind, "backend": backend, "algorithm": alg, "params": params,
        "operations": ops, "iterations": plan.iterations, "warmup": plan.warmup,
        "max_seconds": plan.max_seconds, "seconds_per_op": plan.seconds_per_op, "batch": BATCH, "message_bytes": MESSAGE_LEN,
        "clock": "CLOCK_MONOTONIC", "cycles": if super::timer::cycles().is_some() { "rdtsc" } else { "none" },
        "dropped": "index 0 of each operation (one extra timed run)",
    })
}
