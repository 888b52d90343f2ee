//! `kem` and `sig`: time primitive operations of one algorithm on one backend and check
//! every result. Output (JSON lines): `start`, one `sample` per timed run (op, index, ns,
//! cycles, dropped), `op_done` per operation, `checks`, `sizes`. See docs/primitives.md.
//!
//! Backends sit behind the traits in `backend.rs`; `measure.rs` holds the one measuring loop.

pub mod backend;
pub mod der;
mod measure;
pub mod oqs;
pub mod ossl;
mod timer;

#[cfg(test)]
mod tests;

use crate::out::{emit, Error, Result};
use backend::Params;
use measure::Plan;
use serde_json::{Map, Value};

/// Largest `--iterations`: 10 million samples per operation is about 1 GB of output lines.
const MAX_ITERATIONS: u64 = 10_000_000;
/// Largest `--warmup` (the warm-up also stops after 2 s).
const MAX_WARMUP: u64 = 1_000_000;
/// Largest `--max-seconds`: one day per phase.
const MAX_PHASE_SECONDS: f64 = 86_400.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Openssl,
    Liboqs,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Openssl => "openssl",
            Backend::Liboqs => "liboqs",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct Common {
    /// Library that runs the algorithm.
    #[arg(long, value_enum)]
    backend: Backend,
    /// Algorithm name as the backend knows it: OpenSSL's EVP name (X25519, EC, DH, RSA,
    /// ML-KEM-768, ML-DSA-44, SLH-DSA-SHA2-128s, ED25519, X25519MLKEM768) or liboqs's method
    /// name (ML-KEM-768, Falcon-512, MAYO-1, ...).
    #[arg(long)]
    alg: String,
    /// Backend parameter KEY=VALUE, repeatable. OpenSSL: group=|curve= (EC: P-256, P-384,
    /// P-521; DH: ffdhe2048, ffdhe3072, ffdhe4096), bits= (RSA), padding=pss|pkcs1 (RSA),
    /// digest= (RSA, ECDSA; e.g. SHA256). liboqs takes none.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    params: Vec<String>,
    /// Dotted OID of the algorithm (liboqs only), to compute SPKI / PKCS#8 sizes.
    #[arg(long)]
    oid: Option<String>,
    /// Kept timed runs per operation (1-10000000); one more is made first and dropped.
    /// Memory does not grow with it (samples are kept per batch of 128 and emitted), but
    /// every sample is one output line of about 100 bytes per operation.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=MAX_ITERATIONS))]
    iterations: u64,
    /// Untimed runs of each phase before timing (0-1000000; stops early after 2 s).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=MAX_WARMUP))]
    warmup: u64,
    /// Time budget per phase in seconds (above 0, at most 86400); a phase stops early when
    /// it is spent (recorded in `op_done.budget_exhausted`). At least 2 timed runs are
    /// always made.
    #[arg(long)]
    max_seconds: Option<f64>,
    /// Fixed-time mode, like liboqs's speed_kem / speed_sig: each operation runs until it
    /// has spent at least this many seconds in its own timed runs (above 0, at most 86400);
    /// --iterations is then only the cap. Operations paired in one phase (encaps and
    /// decaps, sign and verify) run equally often: each output of one is the other's input.
    #[arg(long)]
    seconds: Option<f64>,
    /// Do not emit sample records (sizes only).
    #[arg(long)]
    no_samples: bool,
}

#[derive(clap::Args, Debug)]
pub struct KemArgs {
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args, Debug)]
pub struct SigArgs {
    #[command(flatten)]
    common: Common,
    /// Time no key generation: sign and verify only, with one untimed key (its sizes are
    /// still reported). For an entry whose key generation another entry of the same key type
    /// measures (RSA with PKCS#1 v1.5 signing uses the key pair RSA-PSS uses).
    #[arg(long)]
    skip_keygen: bool,
}

fn parse_params(list: &[String]) -> Result<Params> {
    let mut out = Params::new();
    for p in list {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| Error::Usage(format!("--param {p:?} is not KEY=VALUE")))?;
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
        if k.is_empty() || v.is_empty() {
            crate::bail!(Usage, "--param {p:?} is not KEY=VALUE");
        }
        if out.insert(k.clone(), v).is_some() {
            crate::bail!(Usage, "--param {k} given twice");
        }
    }
    Ok(out)
}

fn plan(c: &Common) -> Result<Plan> {
    if let Some(s) = c.max_seconds {
        if !(s.is_finite() && s > 0.0 && s <= MAX_PHASE_SECONDS) {
            crate::bail!(
                Usage,
                "--max-seconds {s} must be above 0 and at most {MAX_PHASE_SECONDS} seconds"
            );
        }
    }
    if let Some(s) = c.seconds {
        if !(s.is_finite() && s > 0.0 && s <= MAX_PHASE_SECONDS) {
            crate::bail!(
                Usage,
                "--seconds {s} must be above 0 and at most {MAX_PHASE_SECONDS} seconds"
            );
        }
    }
    Ok(Plan {
        iterations: c.iterations as usize,
        warmup: c.warmup as usize,
        max_seconds: c.max_seconds,
        seconds_per_op: c.seconds,
        emit_samples: !c.no_samples,
    })
}

fn params_json(p: &Params) -> Map<String, Value> {
    p.iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

pub fn run_kem(a: KemArgs) -> Result<()> {
    let c = &a.common;
    let params = parse_params(&c.params)?;
    let plan = plan(c)?;
    let start = |kind: &str, ops: &[&str]| {
        emit(&measure::start_record(
            kind,
            c.backend.name(),
            &c.alg,
            &params_json(&params),
            &plan,
            ops,
        ))
    };
    match c.backend {
        Backend::Openssl if ossl::is_key_agreement(&c.alg) => {
            if c.oid.is_some() {
                crate::bail!(
                    Usage,
                    "--oid is for liboqs algorithms; OpenSSL encodes its keys itself"
                );
            }
            let x = ossl::OsslKex::new(&c.alg, &params)?;
            start("kex", &["keygen", "public_key", "shared_secret"]);
            measure::kex(&x, &plan)
        }
        Backend::Openssl => {
            if c.oid.is_some() {
                crate::bail!(
                    Usage,
                    "--oid is for liboqs algorithms; OpenSSL encodes its keys itself"
                );
            }
            let k = ossl::OsslKem::new(&c.alg, &params)?;
            start("kem", &["keygen", "encaps", "decaps"]);
            measure::kem(&k, &plan)
        }
        Backend::Liboqs => {
            let k = oqs::OqsKem::new(&c.alg, &params, c.oid.as_deref())?;
            start("kem", &["keygen", "encaps", "decaps"]);
            measure::kem(&k, &plan)
        }
    }
}

pub fn run_sig(a: SigArgs) -> Result<()> {
    let c = &a.common;
    let params = parse_params(&c.params)?;
    let plan = plan(c)?;
    let ops: &[&str] = if a.skip_keygen {
        &["sign", "verify"]
    } else {
        &["keygen", "sign", "verify"]
    };
    let start = || {
        emit(&measure::start_record(
            "sig",
            c.backend.name(),
            &c.alg,
            &params_json(&params),
            &plan,
            ops,
        ))
    };
    match c.backend {
        Backend::Openssl => {
            if c.oid.is_some() {
                crate::bail!(
                    Usage,
                    "--oid is for liboqs algorithms; OpenSSL encodes its keys itself"
                );
            }
            if ossl::is_key_agreement(&c.alg) && !c.alg.eq_ignore_ascii_case("EC") {
                crate::bail!(
                    Usage,
                    "{} is a key agreement, not a signature algorithm",
                    c.alg
                );
            }
            let s = ossl::OsslSig::new(&c.alg, &params)?;
            start();
            measure::sig(&s, &plan, a.skip_keygen)
        }
        Backend::Liboqs => {
            let s = oqs::OqsSig::new(&c.alg, &params, c.oid.as_deref())?;
            start();
            measure::sig(&s, &plan, a.skip_keygen)
        }
    }
}
