//! `aead`: symmetric cipher throughput through OpenSSL's EVP API, every record checked.
//!
//! Records out (JSON lines): one `cpu` record (the capability vector OpenSSL really uses,
//! after any `OPENSSL_ia32cap` mask in the environment), then per cell (cipher, mode,
//! direction, record size) one `window` record per timing window (raw sample: records,
//! bytes, ns) and a closing `cell` record with totals and how the records were driven.

mod bench;
mod cipher;
mod cpucaps;

use crate::bail;
use crate::out::{emit, Result};
use bench::{Cell, Direction, Fault, Mode, DEFAULT_BATCH_BYTES};

/// Largest `--batch-bytes` (64 MiB).
const MAX_BATCH_BYTES: u64 = 64 << 20;

#[derive(clap::Args)]
pub struct Args {
    /// Cipher (OpenSSL name): aes-128-gcm, aes-256-gcm, aes-128-ccm, aes-256-ccm,
    /// chacha20-poly1305, aes-128-ecb, aes-256-ecb, aes-128-ctr, aes-256-ctr, chacha20.
    #[arg(long, required_unless_present = "cpu_only")]
    cipher: Option<String>,
    /// Record sizes in bytes, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "16,64,256,1024,8192,16384"
    )]
    sizes: Vec<usize>,
    /// Directions, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "encrypt,decrypt")]
    directions: Vec<Direction>,
    /// fair: full init-update-final with a fresh nonce per record (TLS-like);
    /// speed-compatible: drive EVP exactly as `openssl speed -evp` (3.5.4) does.
    #[arg(long, value_enum, default_value = "fair")]
    mode: Mode,
    /// Timed seconds per cell (checks are not counted).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Length of one timing window (one raw sample), milliseconds of timed work.
    #[arg(long, default_value_t = 100.0)]
    window_ms: f64,
    /// Bytes of records per batch, each processed in place in a slot of its own and checked
    /// after the batch, untimed (1 to 67108864: the batch's slots are allocated at once).
    #[arg(long, default_value_t = DEFAULT_BATCH_BYTES,
          value_parser = clap::value_parser!(u64).range(1..=MAX_BATCH_BYTES))]
    batch_bytes: u64,
    /// Corrupt the first record on purpose (self-test of the checks): tag or data.
    #[arg(long, value_enum)]
    inject_fault: Option<Fault>,
    /// Only report the CPU features OpenSSL uses, run nothing.
    #[arg(long)]
    cpu_only: bool,
}

pub fn run(a: Args) -> Result<()> {
    // Reported first so every result says which code paths were possible.
    emit(&cpucaps::record());
    if a.cpu_only {
        return Ok(());
    }
    let name = a.cipher.as_deref().unwrap_or_default();
    let spec = cipher::Spec::find(name)?;
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        bail!(
            Usage,
            "--seconds {} must be above 0 and at most 600",
            a.seconds
        );
    }
    if !(a.window_ms > 0.0 && a.window_ms <= 600_000.0) {
        bail!(
            Usage,
            "--window-ms {} must be above 0 and at most 600000",
            a.window_ms
        );
    }
    if a.sizes.is_empty() {
        bail!(Usage, "--sizes is empty");
    }
    for &s in &a.sizes {
        if s == 0 || s > 16 * 1024 * 1024 - 1 {
            bail!(Usage, "record size {s} is outside 1..16777215 bytes");
        }
        if !s.is_multiple_of(spec.block_multiple()) {
            bail!(
                Usage,
                "{} needs record sizes that are multiples of {} bytes, not {s}",
                spec.name,
                spec.block_multiple()
            );
        }
    }
    for &direction in &a.directions {
        for &size in &a.sizes {
            bench::run_cell(&Cell {
                spec,
                mode: a.mode,
                direction,
                size,
                seconds: a.seconds,
                window_ns: (a.window_ms * 1e6) as u64,
                batch_bytes: a.batch_bytes as usize,
                fault: a.inject_fault,
            })?;
        }
    }
    Ok(())
}
