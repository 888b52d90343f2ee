//! Per-sample clocks: CLOCK_MONOTONIC nanoseconds (vDSO, not affected by clock steps) and
//! the CPU's time-stamp counter. RDTSC counts at the TSC's constant reference rate, not the
//! core clock, exactly like liboqs's speed programs report "cycles".

/// Nanoseconds on CLOCK_MONOTONIC.
#[inline(always)]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The time-stamp counter, or None where the CPU has none we can read.
#[inline(always)]
pub fn cycles() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC is available on every x86_64 CPU.
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// One timed run: (ns, cycles).
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub ns: u64,
    pub cycles: Option<u64>,
}

/// Time `f` once. The clocks are read immediately around the call; their own cost
/// (about 20-40 ns for the pair on current x86) is part of every sample.
#[inline(always)]
pub fn time<T>(f: impl FnOnce() -> T) -> (T, Sample) {
    let c0 = cycles();
    let t0 = monotonic_ns();
    let out = f();
    let t1 = monotonic_ns();
    let c1 = cycles();
    let cycles = match (c0, c1) {
        (Some(a), Some(b)) => Some(b.wrapping_sub(a)),
        _ => None,
    };
    (
        out,
        Sample {
            ns: t1.saturating_sub(t0),
            cycles,
        },
    )
}
