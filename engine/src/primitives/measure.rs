//! The measuring loop, written once for every backend.
//!
//! Each algorithm is measured in phases: key generation alone, then the operations that use
//! a key in pairs (encaps+decaps, public_key+shared_secret, sign+verify). A phase runs in
//! batches of up to `BATCH` iterations: first every run of the first operation back to
//! back, then every run of the second on the first one's outputs, then the checks. So
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
//! (the documents' "first run dropped"), so `iterations` samples remain. In fixed-time mode
//! (`seconds_per_op`, liboqs's `speed_kem`/`speed_sig`) each operation is timed until its
//! own timed runs add up to the seconds asked for, independently of its partner: a pair's
//! operations then make different numbers of runs, the finished one running untimed (its
//! last outputs reused, as liboqs's programs reuse one input) to feed or check the other.

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
            "vm_hwm_kib": crate::heap::vm_hwm_kib(),
        }));
    }
}

// --- phases ------------------------------------------------------------------------------

/// One operation's part in a batch of a phase. The batch runs the operation as often as
/// the phase needs its outputs (as inputs or checks of the other operation); `run` times a
/// run only while the operation still wants timed runs: fewer than `runs_left` so far, and
/// either fewer than `must` (the dropped first run and one kept) or, in fixed-time mode,
/// fewer of its own timed nanoseconds than `ns_left`. Runs beyond that are made untimed.
pub struct Meter {
    runs_left: usize,
    must: usize,
    ns_left: Option<u64>,
    /// The first sample of this batch is the operation's dropped run: it does not count
    /// towards the fixed time.
    skip_first: bool,
    spent_ns: u64,
    samples: Vec<Sample>,
}

impl Meter {
    fn new(runs_left: usize, must: usize, ns_left: Option<u64>, skip_first: bool) -> Meter {
        Meter {
            runs_left,
            must,
            ns_left,
            skip_first,
            spent_ns: 0,
            samples: Vec::with_capacity(runs_left),
        }
    }

    /// Whether the next run of this operation is timed.
    pub fn wants(&self) -> bool {
        let n = self.samples.len();
        n < self.runs_left && (n < self.must || self.ns_left.is_none_or(|l| self.spent_ns < l))
    }

    /// Run `f`, timed if the operation still wants timed runs.
    pub fn run<T>(&mut self, f: impl FnOnce() -> T) -> T {
        if self.wants() {
            let (out, t) = time(f);
            self.push(t);
            out
        } else {
            f()
        }
    }

    /// A run timed by the caller (key generation into buffers prepared outside the clock).
    pub fn push(&mut self, t: Sample) {
        if !(self.skip_first && self.samples.is_empty()) {
            self.spent_ns += t.ns;
        }
        self.samples.push(t);
    }
}

/// Whether the first loop of a batch (the one whose outputs the phase's other operations
/// use) makes iteration `i`: while any operation of the phase still wants timed runs, at
/// most `BATCH`, and past the deadline only as long as some operation still lacks the runs
/// it must make.
fn more(meters: &[Meter], i: usize, deadline: Option<u64>) -> bool {
    let n = meters.iter().map(|m| m.runs_left).max().unwrap_or(0);
    if i >= n || !meters.iter().any(Meter::wants) {
        return false;
    }
    let owed = meters.iter().any(|m| i < m.must);
    owed || !past(deadline)
}

fn past(deadline: Option<u64>) -> bool {
    deadline.is_some_and(|d| monotonic_ns() >= d)
}

/// Run one phase. `batch(meters, deadline)` makes one batch: its first loop makes the
/// phase's inputs while `more` says so (timing the first operation through `meters[0]`),
/// then each further operation runs on those inputs through its meter, every output
/// checked whether it was timed or not.
///
/// With a number of iterations every operation makes `iterations + 1` timed runs, in
/// pairs. In fixed-time mode (liboqs's speed programs) each operation stops being timed
/// once its own timed runs add up to the seconds asked for, so each makes as many runs as
/// fit in that time; the phase goes on, the finished operation running untimed to feed or
/// check the other, until every operation has its time.
fn run_phase(
    plan: &Plan,
    ops: &[&str],
    mut batch: impl FnMut(&mut [Meter], Option<u64>) -> Result<()>,
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
        let mut meters: Vec<Meter> = ops.iter().map(|_| Meter::new(n, 1, None, false)).collect();
        batch(&mut meters, Some(warm_deadline))?;
        warmed += meters[0].samples.len().max(1);
    }

    let total = plan.iterations + 1;
    let start = monotonic_ns();
    let deadline = plan.max_seconds.map(|s| start + (s * 1e9) as u64);
    let target_ns = plan.seconds_per_op.map(|s| (s * 1e9) as u64);
    let mut own_ns = vec![0u64; ops.len()]; // each operation's own timed nanoseconds
    let mut done = vec![0usize; ops.len()]; // each operation's timed runs
    let mut budget_exhausted = false;
    let finished =
        |done: usize, own: u64| done >= total || (done >= 2 && target_ns.is_some_and(|t| own >= t));
    loop {
        if done.iter().zip(&own_ns).all(|(&d, &o)| finished(d, o)) {
            break;
        }
        if done.iter().all(|&d| d >= 2) && past(deadline) {
            budget_exhausted = true;
            break;
        }
        let mut meters: Vec<Meter> = done
            .iter()
            .zip(&own_ns)
            .map(|(&d, &o)| {
                let runs = if finished(d, o) {
                    0
                } else {
                    (total - d).min(BATCH)
                };
                let ns_left = target_ns.map(|t| t.saturating_sub(o));
                Meter::new(runs, 2usize.saturating_sub(d), ns_left, d == 0)
            })
            .collect();
        batch(&mut meters, deadline)?;
        for (j, m) in meters.iter().enumerate() {
            if plan.emit_samples {
                for (k, s) in m.samples.iter().enumerate() {
                    let index = done[j] + k;
                    emit(&json!({
                        "type": "sample", "op": ops[j], "index": index, "ns": s.ns,
                        "cycles": s.cycles, "dropped": index == 0,
                    }));
                }
            }
            own_ns[j] += m.spent_ns;
            done[j] += m.samples.len();
        }
        if meters.iter().all(|m| m.samples.is_empty()) {
            // Only the deadline, passing between the check above and the batch, stops a
            // batch before its first timed run.
            if past(deadline) {
                budget_exhausted = true;
                break;
            }
            return Err(crate::err!(
                Library,
                "{}: a batch made no timed run; the measuring loop cannot go on",
                ops.join("/")
            ));
        }
    }
    let elapsed = (monotonic_ns() - start) as f64 / 1e9;
    for ((op, own), runs) in ops.iter().zip(&own_ns).zip(&done) {
        emit(&json!({
            "type": "op_done", "op": op, "timed_runs": runs, "kept": runs.saturating_sub(1),
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

/// The first half of a pair phase's batch: fresh outputs of the first operation, made back
/// to back while `more` says so, as long as the first operation is still timed (or there
/// are none yet); once it has had its time, the last outputs are used again, as liboqs's
/// speed programs decapsulate and verify one fixed input. Returns whether the outputs are
/// fresh: each fresh output must then be checked.
fn fill<T>(
    meters: &mut [Meter],
    deadline: Option<u64>,
    pool: &mut Vec<T>,
    mut make: impl FnMut(&mut Meter) -> Result<T>,
) -> Result<bool> {
    let fresh = meters[0].wants() || pool.is_empty();
    if fresh {
        pool.clear();
        let mut i = 0;
        while more(meters, i, deadline) {
            let out = make(&mut meters[0])?;
            pool.push(out);
            i += 1;
        }
    }
    Ok(fresh)
}

/// Whether the second operation of a pair makes its `j`-th run of this batch: once on every
/// fresh output (each is checked), else round the old outputs while it still wants timed runs.
fn second_turn(meter: &Meter, pool_len: usize, fresh: bool, j: usize) -> bool {
    if fresh {
        j < pool_len
    } else {
        pool_len > 0 && meter.wants()
    }
}

// --- KEM ---------------------------------------------------------------------------------

pub fn kem<K: Kem>(k: &K, plan: &Plan) -> Result<()> {
    let mut sizes = Sizes::default();
    let mut checks = 0u64;
    run_phase(plan, &["keygen"], |meters, deadline| {
        let mut keys = Vec::new();
        let mut i = 0;
        while more(meters, i, deadline) {
            let (key, t) = timed_keygen(|| k.key_buffer(), |buf| k.keygen_into(buf), || k.keygen());
            meters[0].push(t);
            keys.push(key?);
            i += 1;
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
        Ok(())
    })?;

    let key = k.keygen()?;
    let mut pool: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    run_phase(plan, &["encaps", "decaps"], |meters, deadline| {
        let fresh = fill(meters, deadline, &mut pool, |m| m.run(|| k.encaps(&key)))?;
        let mut j = 0;
        while second_turn(&meters[1], pool.len(), fresh, j) {
            let (ct, ss) = &pool[j % pool.len()];
            let r = meters[1].run(|| k.decaps(&key, ct));
            if r? != *ss {
                return Err(check_failed(
                    "decapsulated secret differs from the encapsulated one".into(),
                ));
            }
            if fresh {
                sizes.kem(ct.len(), ss.len());
            }
            checks += 1;
            j += 1;
        }
        Ok(())
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
    run_phase(plan, &["keygen"], |meters, deadline| {
        let mut keys = Vec::new();
        let mut i = 0;
        while more(meters, i, deadline) {
            keys.push(meters[0].run(|| x.keygen())?);
            i += 1;
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
        Ok(())
    })?;

    let key = x.keygen()?;
    let wire = x.wire_public(&key)?;
    let reference = x.derive(&peer, &x.public_key(&key)?)?;
    let mut pool: Vec<X::Peer> = Vec::new();
    run_phase(
        plan,
        &["public_key", "shared_secret"],
        |meters, deadline| {
            let fresh = fill(meters, deadline, &mut pool, |m| {
                m.run(|| x.public_key(&key))
            })?;
            if fresh {
                for s in &pool {
                    if x.peer_wire(s)? != wire {
                        return Err(check_failed(
                            "the imported key share differs from the exported public key".into(),
                        ));
                    }
                }
            }
            let mut j = 0;
            // The derivation does not use the shares: it runs only while it is timed.
            while second_turn(&meters[1], pool.len(), fresh, j) && meters[1].wants() {
                let r = meters[1].run(|| x.derive(&key, &peer_share));
                if r? != reference {
                    return Err(check_failed(
                        "the two sides derived different secrets".into(),
                    ));
                }
                checks += 1;
                j += 1;
            }
            Ok(())
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

/// The key generation phase of `sig`: each generated key signs one message, checked.
fn sig_keygen_phase<S: Signature>(
    s: &S,
    plan: &Plan,
    sizes: &mut Sizes,
    (checks, counter): (&mut u64, &mut u64),
) -> Result<()> {
    run_phase(plan, &["keygen"], |meters, deadline| {
        let mut keys = Vec::new();
        let mut i = 0;
        while more(meters, i, deadline) {
            let (key, t) = timed_keygen(|| s.key_buffer(), |buf| s.keygen_into(buf), || s.keygen());
            meters[0].push(t);
            keys.push(key?);
            i += 1;
        }
        for key in &keys {
            *counter += 1;
            let m = message(*counter);
            let signature = s.sign(key, &m)?;
            if !s.verify(key, &m, &signature)? {
                return Err(check_failed(
                    "a signature by a generated key does not verify".into(),
                ));
            }
            sizes.key(s.key_sizes(key)?);
            sizes.sig(s.signature_sizes(&signature)?);
            *checks += 1;
        }
        Ok(())
    })
}

/// `skip_keygen`: no key generation phase (sign and verify with one untimed key, whose
/// sizes are reported).
pub fn sig<S: Signature>(s: &S, plan: &Plan, skip_keygen: bool) -> Result<()> {
    let mut sizes = Sizes::default();
    let mut checks = 0u64;
    let mut counter = 0u64;
    if !skip_keygen {
        sig_keygen_phase(s, plan, &mut sizes, (&mut checks, &mut counter))?;
    }
    let key = s.keygen()?;
    if skip_keygen {
        sizes.key(s.key_sizes(&key)?);
    }
    let mut pool: Vec<([u8; MESSAGE_LEN], Vec<u8>)> = Vec::new();
    run_phase(plan, &["sign", "verify"], |meters, deadline| {
        let fresh = fill(meters, deadline, &mut pool, |m| {
            counter += 1;
            let msg = message(counter);
            let signature = m.run(|| s.sign(&key, &msg))?;
            Ok((msg, signature))
        })?;
        let mut j = 0;
        while second_turn(&meters[1], pool.len(), fresh, j) {
            let (m, signature) = &pool[j % pool.len()];
            let r = meters[1].run(|| s.verify(&key, m, signature));
            if !r? {
                return Err(check_failed("a signature failed to verify".into()));
            }
            if fresh {
                sizes.sig(s.signature_sizes(signature)?);
            }
            checks += 1;
            j += 1;
        }
        Ok(())
    })?;

    // The verify check must be able to fail.
    let (m, signature) = pool.pop().expect("at least two signatures were made");
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
