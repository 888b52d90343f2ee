//! The timed loops. Work is done in batches of records, each record processed in place in a
//! slot of its own that starts on a 64-byte boundary; only the batch itself is timed, and
//! every record of a batch is checked right after it, outside the timed region (see each
//! loop: compared with a reference record that was verified before timing, compared with the
//! plaintext, or run through the inverse operation). Before each batch, also untimed, every
//! slot is given the record it is about to process, as a record layer's buffer holds the
//! record it encrypts or decrypts in place. Batches are grouped into timing windows, and one
//! raw sample (records, bytes, nanoseconds) is emitted per window.
//!
//! Two ways of driving EVP per record:
//! - `fair`: what a TLS record layer does (libssl's TLS 1.3 record layer makes the same
//!   calls). The key is set once; every record is a complete init(nonce) [CCM: length]
//!   [AEAD: 13 bytes AAD] update final [AEAD: get/set tag], in place, with a nonce of its own
//!   in its batch (every batch uses the same ones), for every cipher including the
//!   unauthenticated ones.
//! - `speed-compatible`: what OpenSSL 3.5.4's `apps/speed.c` does for `speed -evp`. GCM and
//!   CCM ("AE" modes) re-set key and the same fixed IV on every call (CCM also its length),
//!   without AAD, encrypting in place and decrypting from one buffer into another;
//!   everything else, ChaCha20-Poly1305 included (its EVP mode is 0, stream), is initialised
//!   once and then fed record after record, in place, as one long stream, with one final at
//!   the end, so Poly1305 produces a single tag for the whole run.
//!
//! The timed part of every loop is one call of `timed_batch`, which is never inlined, so an
//! instruction counter can count exactly the timed work (`valgrind --tool=callgrind
//! --toggle-collect='*timed_batch*'`, as benchmarks/aead_vs_openssl_speed.py does).

use super::cipher::{random, Algorithm, Ctx, Kind, Spec, AAD_LEN, TAG_LEN};
use crate::bail;
use crate::out::{emit, Result};
use serde_json::json;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Fair,
    SpeedCompatible,
}

impl Mode {
    pub fn label(&self) -> &'static str {
        match self {
            Mode::Fair => "fair",
            Mode::SpeedCompatible => "speed-compatible",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Direction {
    Encrypt,
    Decrypt,
}

impl Direction {
    pub fn label(&self) -> &'static str {
        match self {
            Direction::Encrypt => "encrypt",
            Direction::Decrypt => "decrypt",
        }
    }
}

/// A deliberate corruption, to show that the checks catch a bad record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// Flip a bit of the first record's authentication tag.
    Tag,
    /// Flip a bit of the first record's ciphertext (or, when decrypting a stream, output).
    Data,
}

pub struct Cell {
    pub spec: Spec,
    pub mode: Mode,
    pub direction: Direction,
    pub size: usize,
    pub seconds: f64,
    pub window_ns: u64,
    pub batch_bytes: usize,
    pub fault: Option<Fault>,
}

/// Bytes of records per batch: large enough that the per-batch clock reads (the CPU-time
/// clock is a syscall) cost about 1 % at 16 KiB records, small enough to stay in L2 so the
/// slots do not turn a cipher benchmark into a memory benchmark (measured: 64 KiB batches
/// read 10 % low in CPU time, 256 KiB and 512 KiB agreed, 1 MiB was lower again).
pub const DEFAULT_BATCH_BYTES: u64 = 256 * 1024;
const MAX_BATCH_RECORDS: usize = 4096;

/// Where every record starts: a 64-byte boundary, a cache line and the width of the AVX-512
/// loads and stores OpenSSL's ChaCha20, Poly1305 and AES-GCM code makes (at any other offset
/// each of them straddles two lines). The same for every record, run and machine, so a
/// number does not depend on where the allocator happened to put a buffer.
pub const RECORD_ALIGN: usize = 64;
/// Room after each record in its slot for EVP's final (which writes nothing for these
/// ciphers, but may be given a block).
const FINAL_ROOM: usize = 32;

/// `count` record slots, each starting on a `RECORD_ALIGN` boundary and holding one record
/// of `size` bytes and the room for EVP's final after it.
struct Slots {
    buf: Vec<u8>,
    start: usize,
    stride: usize,
    size: usize,
}

impl Slots {
    fn new(count: usize, size: usize) -> Slots {
        let stride = (size + FINAL_ROOM).next_multiple_of(RECORD_ALIGN);
        let buf = vec![0u8; count * stride + RECORD_ALIGN];
        let start = buf.as_ptr().align_offset(RECORD_ALIGN);
        Slots {
            buf,
            start,
            stride,
            size,
        }
    }

    /// Slot `i` whole: its record, then the room for EVP's final.
    fn slot(&mut self, i: usize) -> &mut [u8] {
        let at = self.start + i * self.stride;
        &mut self.buf[at..at + self.stride]
    }

    /// The record in slot `i`.
    fn record(&self, i: usize) -> &[u8] {
        let at = self.start + i * self.stride;
        &self.buf[at..at + self.size]
    }

    fn record_mut(&mut self, i: usize) -> &mut [u8] {
        let at = self.start + i * self.stride;
        &mut self.buf[at..at + self.size]
    }

    /// Gives every slot the record it is about to process, in place: `input(i)` for slot `i`.
    fn fill<'a>(&mut self, count: usize, input: impl Fn(usize) -> &'a [u8]) {
        for i in 0..count {
            self.record_mut(i).copy_from_slice(input(i));
        }
    }
}

struct Totals {
    records: u64,
    bytes: u64,
    ns: u64,
    cpu_ns: u64,
    windows: u64,
    verified: u64,
}

/// Per-record nonce: a random 4-byte salt and the 64-bit record sequence number, laid out
/// for each cipher's IV format (CTR keeps the low 32 bits as its block counter; ChaCha20's
/// EVP IV starts with a 32-bit little-endian block counter).
fn nonce(spec: &Spec, salt: &[u8; 4], seq: u64, iv: &mut [u8; 16]) {
    *iv = [0; 16];
    match spec.kind {
        Kind::Gcm | Kind::Ccm | Kind::ChaChaPoly => {
            iv[..4].copy_from_slice(salt);
            iv[4..12].copy_from_slice(&seq.to_be_bytes());
        }
        Kind::Ctr => {
            iv[..4].copy_from_slice(salt);
            iv[4..12].copy_from_slice(&seq.to_be_bytes());
        }
        Kind::ChaCha20 => {
            iv[4..8].copy_from_slice(salt);
            iv[8..16].copy_from_slice(&seq.to_be_bytes());
        }
        Kind::Ecb => {}
    }
}

fn flip(buf: &mut [u8]) {
    if let Some(b) = buf.first_mut() {
        *b ^= 0x01;
    }
}

/// A context keyed once, as a record layer keeps it (fair mode). Padding is turned off only
/// for ECB, which needs it off for whole-block records; for every other cipher it means
/// nothing, and turning it off would cost every record's init a round trip to the provider
/// that a record layer (libssl) does not make.
fn keyed_ctx(alg: &Algorithm, key: &[u8], encrypt: bool) -> Result<Ctx> {
    let ctx = Ctx::new(alg, encrypt)?;
    if alg.spec.kind == Kind::Ecb {
        ctx.padding_off()?;
    }
    if alg.spec.kind == Kind::Ccm {
        ctx.set_iv_len(alg.spec.iv_len)?;
        ctx.set_tag_len(TAG_LEN)?;
    } else if alg.spec.kind == Kind::Gcm {
        ctx.set_iv_len(alg.spec.iv_len)?;
    }
    ctx.init(Some(key), None, encrypt as i32)?;
    Ok(ctx)
}

/// One fair record, in place in `slot` (the record is its first `len` bytes): init with the
/// nonce, [CCM length], [AAD], data, final, [tag]. Returns false if a decryption did not
/// authenticate.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // hot path: plain slices, no struct to build per record
fn fair_record(
    ctx: &Ctx,
    spec: &Spec,
    encrypt: bool,
    iv: &[u8],
    aad: &[u8],
    slot: &mut [u8],
    len: usize,
    tag: &mut [u8],
) -> Result<bool> {
    let iv_opt = if spec.iv_len > 0 {
        Some(&iv[..spec.iv_len])
    } else {
        None
    };
    ctx.init(None, iv_opt, encrypt as i32)?;
    if !spec.is_aead() {
        ctx.update_in_place(slot, len)?;
        return Ok(ctx.finish(&mut slot[len..]));
    }
    if !encrypt {
        ctx.set_tag(tag)?;
    }
    if spec.kind == Kind::Ccm {
        ctx.set_length(len)?;
    }
    ctx.aad(aad)?;
    if encrypt {
        ctx.update_in_place(slot, len)?;
        if !ctx.finish(&mut slot[len..]) {
            return Ok(false);
        }
        ctx.get_tag(tag)?;
        Ok(true)
    } else {
        // CCM verifies its tag inside the update when decrypting.
        if !ctx.update_verify_in_place(slot, len)? {
            return Ok(false);
        }
        Ok(ctx.finish(&mut slot[len..]))
    }
}

pub fn run_cell(cell: &Cell) -> Result<()> {
    let alg = Algorithm::fetch(cell.spec)?;
    let size = cell.size;
    if size == 0 || !size.is_multiple_of(cell.spec.block_multiple()) {
        bail!(
            Usage,
            "{} needs record sizes that are a positive multiple of {} bytes, not {size}",
            cell.spec.name,
            cell.spec.block_multiple()
        );
    }
    if cell.fault == Some(Fault::Tag) && !cell.spec.is_aead() {
        bail!(
            Usage,
            "--inject-fault tag needs an AEAD cipher; {} has no tag",
            cell.spec.name
        );
    }
    let batch = (cell.batch_bytes / size).clamp(1, MAX_BATCH_RECORDS);
    let mut key = vec![0u8; alg.key_len];
    random(&mut key)?;
    let mut salt = [0u8; 4];
    random(&mut salt)?;
    let mut plaintext = vec![0u8; size];
    random(&mut plaintext)?;
    let aad = [0xccu8; AAD_LEN];

    let totals = match (cell.mode, cell.spec.speed_ae_mode()) {
        (Mode::Fair, _) => {
            let inputs = FairInputs {
                alg: &alg,
                key: &key,
                salt: &salt,
                plaintext: &plaintext,
                aad: &aad,
            };
            fair(cell, &inputs, batch)?
        }
        (Mode::SpeedCompatible, true) => speed_ae(cell, &alg, &key, &plaintext, batch)?,
        (Mode::SpeedCompatible, false) => speed_stream(cell, &alg, &key, &plaintext, batch)?,
    };
    let (aad_bytes, rekey, nonce_kind) = match cell.mode {
        Mode::Fair => (
            if cell.spec.is_aead() { AAD_LEN } else { 0 },
            false,
            if cell.spec.iv_len > 0 {
                "fresh per record of a batch, reused by every batch"
            } else {
                "none (ECB)"
            },
        ),
        Mode::SpeedCompatible if cell.spec.speed_ae_mode() => {
            (0, true, "same key and IV every call")
        }
        Mode::SpeedCompatible => (0, false, "one stream, initialised once"),
    };
    emit(&json!({
        "type": "cell",
        "cipher": cell.spec.name,
        "mode": cell.mode.label(),
        "direction": cell.direction.label(),
        "record_bytes": size,
        "records": totals.records,
        "bytes": totals.bytes,
        "ns": totals.ns,
        "cpu_ns": totals.cpu_ns,
        "windows": totals.windows,
        "verified_records": totals.verified,
        "batch_records": batch,
        "aad_bytes": aad_bytes,
        "key_set_per_record": rekey,
        "nonce": nonce_kind,
        "key_bytes": alg.key_len,
        // Speed decrypts its AE modes from one buffer into another; every other loop works
        // in place, as a record layer does.
        "in_place": !(cell.mode == Mode::SpeedCompatible
            && cell.spec.speed_ae_mode()
            && cell.direction == Direction::Decrypt),
        "record_alignment": RECORD_ALIGN,
    }));
    Ok(())
}

/// CPU time of this thread (ns). Read just outside the wall-clock region of each batch, so
/// the (non-vDSO) syscall does not enter the wall-clock number; on a shared machine the CPU
/// time is what the batch cost even when the thread was descheduled part of the time.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: plain syscall writing into a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs one batch between the clock reads; returns (wall-clock ns, CPU ns). Every loop's
/// timed work is exactly this call, never inlined, so that an instruction counter can be
/// switched on for it alone (callgrind's `--toggle-collect='*timed_batch*'`).
#[inline(never)]
fn timed_batch(work: impl FnOnce() -> Result<()>) -> Result<(u64, u64)> {
    let c0 = thread_cpu_ns();
    let t0 = Instant::now();
    work()?;
    let ns = t0.elapsed().as_nanos() as u64;
    Ok((ns, thread_cpu_ns().saturating_sub(c0)))
}

/// Window bookkeeping shared by all loops: accumulate timed batches, emit a sample when the
/// window is full, stop when the requested timed duration is reached.
struct Clock<'a> {
    cell: &'a Cell,
    totals: Totals,
    win_records: u64,
    win_ns: u64,
    win_cpu_ns: u64,
    target_ns: u64,
}

impl<'a> Clock<'a> {
    fn new(cell: &'a Cell) -> Self {
        Clock {
            cell,
            totals: Totals {
                records: 0,
                bytes: 0,
                ns: 0,
                cpu_ns: 0,
                windows: 0,
                verified: 0,
            },
            win_records: 0,
            win_ns: 0,
            win_cpu_ns: 0,
            target_ns: (cell.seconds * 1e9) as u64,
        }
    }

    fn add(&mut self, records: usize, ns: u64, cpu_ns: u64) {
        self.win_records += records as u64;
        self.win_ns += ns;
        self.win_cpu_ns += cpu_ns;
        if self.win_ns >= self.cell.window_ns {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.win_records == 0 {
            return;
        }
        let bytes = self.win_records * self.cell.size as u64;
        emit(&json!({
            "type": "window",
            "cipher": self.cell.spec.name,
            "mode": self.cell.mode.label(),
            "direction": self.cell.direction.label(),
            "record_bytes": self.cell.size,
            "index": self.totals.windows,
            "records": self.win_records,
            "bytes": bytes,
            "ns": self.win_ns,
            "cpu_ns": self.win_cpu_ns,
        }));
        self.totals.records += self.win_records;
        self.totals.bytes += bytes;
        self.totals.ns += self.win_ns;
        self.totals.cpu_ns += self.win_cpu_ns;
        self.totals.windows += 1;
        self.win_records = 0;
        self.win_ns = 0;
        self.win_cpu_ns = 0;
    }

    fn done(&self) -> bool {
        self.totals.ns + self.win_ns >= self.target_ns
    }

    fn finish(mut self) -> Totals {
        self.flush();
        self.totals
    }
}

fn fail_record(cell: &Cell, seq: u64, what: &str) -> crate::out::Error {
    crate::out::Error::Check(format!(
        "{} {} {}: {}-byte record {seq} {what}",
        cell.spec.name,
        cell.mode.label(),
        cell.direction.label(),
        cell.size
    ))
}

/// A record whose decryption did not authenticate, inside a timed batch.
fn not_authentic(cell: &Cell, seq: u64) -> crate::out::Error {
    fail_record(cell, seq, "did not authenticate (tag check failed)")
}

/// What every record of a fair cell is made from: the cipher, its key, the nonces' salt, the
/// plaintext and the additional data.
#[derive(Clone, Copy)]
struct FairInputs<'a> {
    alg: &'a Algorithm,
    key: &'a [u8],
    salt: &'a [u8; 4],
    plaintext: &'a [u8],
    aad: &'a [u8],
}

/// The batch's reference records for fair mode: record `i` encrypted with nonce `i` by a
/// context of its own, then decrypted back by another with its tag verified and its output
/// compared with the plaintext, all before timing, by the same in-place calls as the timed
/// loop. Returns (the records, their tags).
fn reference_records(cell: &Cell, inputs: &FairInputs, batch: usize) -> Result<(Slots, Vec<u8>)> {
    let FairInputs {
        salt,
        plaintext,
        aad,
        ..
    } = *inputs;
    let spec = &cell.spec;
    let size = cell.size;
    let maker = keyed_ctx(inputs.alg, inputs.key, true)?;
    let checker = keyed_ctx(inputs.alg, inputs.key, false)?;
    let mut records = Slots::new(batch, size);
    let mut tags = vec![0u8; batch * TAG_LEN];
    let mut back = Slots::new(1, size);
    let mut iv = [0u8; 16];
    records.fill(batch, |_| plaintext);
    for i in 0..batch {
        nonce(spec, salt, i as u64, &mut iv);
        let t = &mut tags[i * TAG_LEN..(i + 1) * TAG_LEN];
        if !fair_record(&maker, spec, true, &iv, aad, records.slot(i), size, t)? {
            bail!(
                Library,
                "{}: preparing the reference records failed",
                spec.name
            );
        }
        back.fill(1, |_| records.record(i));
        if !fair_record(&checker, spec, false, &iv, aad, back.slot(0), size, t)?
            || back.record(0) != plaintext
        {
            bail!(
                Check,
                "{}: reference record {i} does not decrypt to the plaintext",
                spec.name
            );
        }
    }
    Ok((records, tags))
}

/// Fair mode. Both directions use the batch's reference records (`reference_records`), so
/// record `i` of every batch has nonce `i`: encryption must reproduce reference record `i`
/// byte for byte, ciphertext and tag (encryption is deterministic for a key, nonce and
/// plaintext, and the reference was shown to decrypt and verify), and decryption reads it
/// (the tag check is part of the timed operation) and must give the plaintext.
fn fair(cell: &Cell, inputs: &FairInputs, batch: usize) -> Result<Totals> {
    let FairInputs {
        alg,
        key,
        salt,
        plaintext,
        aad,
    } = *inputs;
    let spec = &cell.spec;
    let size = cell.size;
    let encrypt = cell.direction == Direction::Encrypt;
    let (mut pool, mut pool_tags) = reference_records(cell, inputs, batch)?;
    if !encrypt {
        match cell.fault {
            Some(Fault::Tag) => flip(&mut pool_tags[..TAG_LEN]),
            Some(Fault::Data) => flip(pool.record_mut(0)),
            None => {}
        }
    }
    let mut work = Slots::new(batch, size);
    let mut tags = vec![0u8; batch * TAG_LEN];
    let ctx = keyed_ctx(alg, key, encrypt)?;
    let mut clock = Clock::new(cell);
    let mut seq: u64 = 0;
    let mut first = true;
    while first || !clock.done() {
        // Untimed: each slot gets the record it is about to process in place.
        if encrypt {
            work.fill(batch, |_| plaintext);
        } else {
            work.fill(batch, |i| pool.record(i));
        }
        // Encryption writes each record's tag; decryption checks the reference's.
        let batch_tags = if encrypt { &mut tags } else { &mut pool_tags };
        let (ns, cpu) = timed_batch(|| {
            let mut iv = [0u8; 16];
            for (i, tag) in batch_tags.chunks_exact_mut(TAG_LEN).enumerate() {
                nonce(spec, salt, i as u64, &mut iv);
                if !fair_record(&ctx, spec, encrypt, &iv, aad, work.slot(i), size, tag)? {
                    return Err(not_authentic(cell, seq + i as u64));
                }
            }
            Ok(())
        })?;

        // Checks, untimed.
        if first && encrypt {
            match cell.fault {
                Some(Fault::Tag) => flip(&mut tags[..TAG_LEN]),
                Some(Fault::Data) => flip(work.record_mut(0)),
                None => {}
            }
        }
        check_fair_batch(cell, seq, batch, &work, &tags, &pool, &pool_tags, plaintext)?;
        seq += batch as u64;
        clock.totals.verified += batch as u64;
        clock.add(batch, ns, cpu);
        first = false;
    }
    Ok(clock.finish())
}

/// Every record of a fair batch: an encryption must equal its reference record and tag, a
/// decryption must give the plaintext.
#[allow(clippy::too_many_arguments)] // the batch's buffers, as `fair` holds them
fn check_fair_batch(
    cell: &Cell,
    seq: u64,
    batch: usize,
    work: &Slots,
    tags: &[u8],
    pool: &Slots,
    pool_tags: &[u8],
    plaintext: &[u8],
) -> Result<()> {
    let encrypt = cell.direction == Direction::Encrypt;
    let tag_checked = encrypt && cell.spec.is_aead();
    for i in 0..batch {
        let record = work.record(i);
        let what = if !encrypt {
            (record != plaintext).then_some("failed its check: the output is not the plaintext")
        } else if record != pool.record(i) {
            Some("failed its check: the ciphertext differs from the verified reference record")
        } else if tag_checked
            && tags[i * TAG_LEN..(i + 1) * TAG_LEN] != pool_tags[i * TAG_LEN..(i + 1) * TAG_LEN]
        {
            Some("failed its check: the tag differs from the verified reference record's")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(fail_record(cell, seq + i as u64, what));
        }
    }
    Ok(())
}

/// A context as `openssl speed -evp` makes it: padding off, whatever the cipher.
fn speed_ctx(alg: &Algorithm, encrypt: bool) -> Result<Ctx> {
    let ctx = Ctx::new(alg, encrypt)?;
    ctx.padding_off()?;
    Ok(ctx)
}

/// The one valid (ciphertext, tag) of `plaintext` for this key and IV, made and verified
/// untimed. Speed makes it the same way (encrypt once without AAD, then decrypt it over and
/// over).
fn speed_reference(
    cell: &Cell,
    alg: &Algorithm,
    key: &[u8],
    iv: &[u8; 12],
    plaintext: &[u8],
) -> Result<(Slots, [u8; TAG_LEN])> {
    let (name, size) = (&cell.spec.name, cell.size);
    let ccm = cell.spec.kind == Kind::Ccm;
    let mut reference = Slots::new(1, size);
    let mut tag = [0u8; TAG_LEN];
    let e = speed_ctx(alg, true)?;
    e.set_iv_len(12)?;
    if ccm {
        e.set_tag_len(TAG_LEN)?;
    }
    e.init(Some(key), Some(iv), -1)?;
    if ccm {
        e.set_length(size)?;
    }
    reference.fill(1, |_| plaintext);
    e.update_in_place(reference.slot(0), size)?;
    if !e.finish(&mut reference.slot(0)[size..]) {
        bail!(Library, "{name}: preparing the reference ciphertext failed");
    }
    e.get_tag(&mut tag)?;
    let mut back = Slots::new(1, size);
    if !decrypt_once(alg, key, iv, reference.record(0), &tag, back.slot(0), ccm)?
        || back.record(0) != plaintext
    {
        bail!(
            Check,
            "{name}: the reference ciphertext does not decrypt to the plaintext"
        );
    }
    Ok((reference, tag))
}

/// `openssl speed -evp` for GCM and CCM: `EVP_Update_loop_aead_enc/dec`. Like speed, it
/// encrypts in place and decrypts from one buffer (the reference ciphertext) into another.
fn speed_ae(
    cell: &Cell,
    alg: &Algorithm,
    key: &[u8],
    plaintext: &[u8],
    batch: usize,
) -> Result<Totals> {
    let spec = &cell.spec;
    let size = cell.size;
    let ccm = spec.kind == Kind::Ccm;
    let encrypt = cell.direction == Direction::Encrypt;
    let iv = [0u8; 12]; // speed's static aead_iv: zeros
    let mut work = Slots::new(batch, size);

    let (mut reference, mut tag) = speed_reference(cell, alg, key, &iv, plaintext)?;
    if !encrypt {
        match cell.fault {
            Some(Fault::Tag) => flip(&mut tag),
            Some(Fault::Data) => flip(reference.record_mut(0)),
            None => {}
        }
    }

    let ctx = speed_ctx(alg, encrypt)?;
    let mut clock = Clock::new(cell);
    let mut seq: u64 = 0;
    let mut first = true;
    while first || !clock.done() {
        if encrypt {
            work.fill(batch, |_| plaintext); // untimed
        }
        let (ns, cpu) = timed_batch(|| {
            for i in 0..batch {
                let slot = work.slot(i);
                ctx.set_iv_len(12)?;
                if ccm {
                    ctx.set_tag_len(TAG_LEN)?;
                }
                ctx.init(Some(key), Some(&iv), -1)?;
                let ok = if encrypt {
                    if ccm {
                        ctx.set_length(size)?;
                    }
                    ctx.update_in_place(slot, size)?;
                    ctx.finish(&mut slot[size..])
                } else {
                    ctx.decrypt_init_iv(&iv)?;
                    ctx.set_tag(&tag)?;
                    if ccm {
                        ctx.set_length(size)?;
                    }
                    ctx.update_verify(slot, reference.record(0))? && ctx.finish(&mut slot[size..])
                };
                if !ok {
                    return Err(not_authentic(cell, seq + i as u64));
                }
            }
            Ok(())
        })?;
        // Checks, untimed. Speed re-uses key and IV, so every encryption must equal the
        // reference ciphertext (which was shown to decrypt and verify); every decryption must
        // give the plaintext. The per-call tag is not read back inside the timed loop
        // because speed does not read it either.
        if first && encrypt && cell.fault.is_some() {
            flip(work.record_mut(0));
        }
        let want: &[u8] = if encrypt {
            reference.record(0)
        } else {
            plaintext
        };
        for i in 0..batch {
            if work.record(i) != want {
                return Err(fail_record(
                    cell,
                    seq + i as u64,
                    if encrypt {
                        "failed its check: ciphertext differs from the verified reference"
                    } else {
                        "failed its check: the output is not the plaintext"
                    },
                ));
            }
        }
        seq += batch as u64;
        clock.totals.verified += batch as u64;
        clock.add(batch, ns, cpu);
        first = false;
    }
    Ok(clock.finish())
}

fn decrypt_once(
    alg: &Algorithm,
    key: &[u8],
    iv: &[u8],
    ct: &[u8],
    tag: &[u8],
    out: &mut [u8],
    ccm: bool,
) -> Result<bool> {
    let d = speed_ctx(alg, false)?;
    d.set_iv_len(iv.len())?;
    if ccm {
        d.set_tag(tag)?;
    }
    d.init(Some(key), Some(iv), 0)?;
    if ccm {
        d.set_length(ct.len())?;
    } else {
        d.set_tag(tag)?;
    }
    Ok(d.update_verify(out, ct)? && d.finish(&mut out[ct.len()..]))
}

/// `openssl speed -evp` for everything else: `EVP_Update_loop`, one stream, in place.
fn speed_stream(
    cell: &Cell,
    alg: &Algorithm,
    key: &[u8],
    plaintext: &[u8],
    batch: usize,
) -> Result<Totals> {
    let spec = &cell.spec;
    let size = cell.size;
    let encrypt = cell.direction == Direction::Encrypt;
    let iv = [0u8; 32]; // speed's static iv: zeros
    let iv_opt = if spec.iv_len > 0 {
        Some(&iv[..spec.iv_len])
    } else {
        None
    };
    let mut work = Slots::new(batch, size);
    let mut scratch = Slots::new(1, size);

    let ctx = speed_ctx(alg, encrypt)?;
    ctx.init(Some(key), iv_opt, -1)?;
    // The checker runs the inverse operation over the same stream: decrypting what we
    // encrypt must give the plaintext; encrypting what we decrypt must give the input.
    let check = speed_ctx(alg, !encrypt)?;
    check.init(Some(key), iv_opt, -1)?;
    let input: &[u8] = plaintext; // when decrypting, any bytes are a valid stream ciphertext

    let mut clock = Clock::new(cell);
    let mut seq: u64 = 0;
    let mut first = true;
    while first || !clock.done() {
        work.fill(batch, |_| input); // untimed
        let (ns, cpu) = timed_batch(|| {
            for i in 0..batch {
                ctx.update_in_place(work.slot(i), size)?;
            }
            Ok(())
        })?;
        if first && cell.fault == Some(Fault::Data) {
            flip(work.record_mut(0));
        }
        for i in 0..batch {
            check.update(scratch.slot(0), work.record(i))?;
            if scratch.record(0) != input {
                return Err(fail_record(
                    cell,
                    seq + i as u64,
                    "failed its check: the inverse operation does not give the input back",
                ));
            }
        }
        seq += batch as u64;
        clock.totals.verified += batch as u64;
        clock.add(batch, ns, cpu);
        first = false;
    }
    // One final for the whole stream, as speed does; for ChaCha20-Poly1305 the single tag
    // over everything must verify.
    let mut tail = [0u8; 32];
    let mut tag = [0u8; TAG_LEN];
    let (enc_ctx, dec_ctx) = if encrypt {
        (&ctx, &check)
    } else {
        (&check, &ctx)
    };
    if !enc_ctx.finish(&mut tail) {
        bail!(Library, "{}: finishing the stream failed", spec.name);
    }
    if spec.kind == Kind::ChaChaPoly {
        enc_ctx.get_tag(&mut tag)?;
        if cell.fault == Some(Fault::Tag) {
            flip(&mut tag);
        }
        dec_ctx.set_tag(&tag)?;
    }
    if !dec_ctx.finish(&mut tail) {
        return Err(crate::out::Error::Check(format!(
            "{} speed-compatible {}: the stream's tag did not verify after {seq} records",
            spec.name,
            cell.direction.label()
        )));
    }
    Ok(clock.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aead::cipher::CIPHERS;

    fn cell(spec: Spec, mode: Mode, direction: Direction, fault: Option<Fault>) -> Cell {
        Cell {
            spec,
            mode,
            direction,
            size: 48,
            seconds: 0.0005,
            window_ns: 100_000,
            batch_bytes: 1024,
            fault,
        }
    }

    #[test]
    fn every_record_starts_on_a_64_byte_boundary_in_a_slot_of_its_own() {
        for size in [1, 16, 48, 1000, 16384] {
            let mut slots = Slots::new(5, size);
            let mut spans = Vec::new();
            for i in 0..5 {
                let at = slots.record(i).as_ptr() as usize;
                assert_eq!(at % RECORD_ALIGN, 0, "{size}-byte record {i}");
                assert_eq!(slots.slot(i).as_ptr() as usize, at);
                assert!(slots.slot(i).len() >= size + FINAL_ROOM);
                spans.push(at..at + slots.stride);
            }
            assert!(spans.windows(2).all(|w| w[0].end <= w[1].start));
        }
    }

    #[test]
    fn fair_contexts_turn_padding_off_for_ecb_only() {
        // OpenSSL sends a context's padding setting to the provider again at every init, so a
        // fair context with padding off pays for it on every record; libssl never sets it.
        for spec in CIPHERS {
            let alg = Algorithm::fetch(*spec).unwrap();
            let key = vec![7u8; alg.key_len];
            for encrypt in [true, false] {
                let fair = keyed_ctx(&alg, &key, encrypt).unwrap();
                assert_eq!(
                    fair.padding_is_off(),
                    spec.kind == Kind::Ecb,
                    "{}",
                    spec.name
                );
                // speed turns it off for every cipher, and so does speed-compatible mode.
                assert!(speed_ctx(&alg, encrypt).unwrap().padding_is_off());
            }
        }
    }

    #[test]
    fn every_cipher_mode_and_direction_runs_and_verifies() {
        for spec in CIPHERS {
            for mode in [Mode::Fair, Mode::SpeedCompatible] {
                for dir in [Direction::Encrypt, Direction::Decrypt] {
                    run_cell(&cell(*spec, mode, dir, None))
                        .unwrap_or_else(|e| panic!("{} {:?} {:?}: {e}", spec.name, mode, dir));
                }
            }
        }
    }

    #[test]
    fn corrupted_records_are_caught() {
        for spec in CIPHERS {
            let faults: &[Fault] = if spec.is_aead() {
                &[Fault::Tag, Fault::Data]
            } else {
                &[Fault::Data]
            };
            for &fault in faults {
                for mode in [Mode::Fair, Mode::SpeedCompatible] {
                    for dir in [Direction::Encrypt, Direction::Decrypt] {
                        let r = run_cell(&cell(*spec, mode, dir, Some(fault)));
                        assert!(
                            r.is_err(),
                            "{} {:?} {:?} {:?} not caught",
                            spec.name,
                            mode,
                            dir,
                            fault
                        );
                    }
                }
            }
        }
    }
}
