//! Counting the TLS library's heap through its own allocator hooks: OpenSSL's
//! `CRYPTO_set_mem_functions`, installed before OpenSSL's first allocation (libcrypto
//! refuses the hooks afterwards, and memory allocated before them could not be told apart).
//! Every OpenSSL allocation (`OPENSSL_malloc`, `zalloc`, `realloc`, `strdup`, the secure heap
//! when it is not initialised, which it never is here) then goes through `hook_malloc` /
//! `hook_realloc` / `hook_free`, which keep the requested size in a 16-byte header in front
//! of the block so a free knows how much it releases.
//!
//! Counts are kept twice: per thread (the thread that calls OpenSSL is the role: client or
//! server, each on its own thread; see `tls memory`) and for the whole process (`tls server
//! --count-heap`). Rust's own allocations (engine buffers, records) and the kernel's socket
//! buffers are not OpenSSL's and are not counted (docs/memory.md).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// Bytes in front of every block: the requested size (16 keeps malloc's alignment).
const HEADER: usize = 16;

type MallocFn =
    unsafe extern "C" fn(libc::size_t, *const libc::c_char, libc::c_int) -> *mut libc::c_void;
type ReallocFn = unsafe extern "C" fn(
    *mut libc::c_void,
    libc::size_t,
    *const libc::c_char,
    libc::c_int,
) -> *mut libc::c_void;
type FreeFn = unsafe extern "C" fn(*mut libc::c_void, *const libc::c_char, libc::c_int);

extern "C" {
    fn CRYPTO_set_mem_functions(
        m: Option<MallocFn>,
        r: Option<ReallocFn>,
        f: Option<FreeFn>,
    ) -> libc::c_int;
}

/// What one thread (or the process) allocated through OpenSSL since the last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Blocks obtained: malloc, and realloc of a null pointer.
    pub allocations: u64,
    /// Blocks given back: free, and realloc to size 0.
    pub frees: u64,
    /// Blocks resized in place or moved (realloc of a live block).
    pub reallocations: u64,
    /// Bytes requested: every malloc's size plus every realloc's growth.
    pub total_bytes: u64,
    /// Bytes allocated minus bytes freed (negative when this thread freed blocks another
    /// thread or an earlier window allocated).
    pub in_use: i64,
    /// Highest `in_use` since the reset.
    pub peak: i64,
}

impl Counts {
    const ZERO: Counts = Counts {
        allocations: 0,
        frees: 0,
        reallocations: 0,
        total_bytes: 0,
        in_use: 0,
        peak: 0,
    };

    fn grow(&mut self, bytes: u64) {
        self.total_bytes += bytes;
        self.in_use += bytes as i64;
        self.peak = self.peak.max(self.in_use);
    }

    fn shrink(&mut self, bytes: u64) {
        self.in_use -= bytes as i64;
    }
}

thread_local! {
    static THREAD: Cell<Counts> = const { Cell::new(Counts::ZERO) };
}

static INSTALLED: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);
static TOTAL: AtomicU64 = AtomicU64::new(0);
static IN_USE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

fn on_thread(f: impl FnOnce(&mut Counts)) {
    let _ = THREAD.try_with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}

fn note_alloc(bytes: u64) {
    on_thread(|c| {
        c.allocations += 1;
        c.grow(bytes);
    });
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    TOTAL.fetch_add(bytes, Ordering::Relaxed);
    let now = IN_USE.fetch_add(bytes as i64, Ordering::Relaxed) + bytes as i64;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn note_free(bytes: u64) {
    on_thread(|c| {
        c.frees += 1;
        c.shrink(bytes);
    });
    FREES.fetch_add(1, Ordering::Relaxed);
    IN_USE.fetch_sub(bytes as i64, Ordering::Relaxed);
}

fn note_realloc(old: u64, new: u64) {
    on_thread(|c| {
        c.reallocations += 1;
        if new >= old {
            c.grow(new - old);
        } else {
            c.shrink(old - new);
        }
    });
    let delta = new as i64 - old as i64;
    TOTAL.fetch_add(new.saturating_sub(old), Ordering::Relaxed);
    let now = IN_USE.fetch_add(delta, Ordering::Relaxed) + delta;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

/// The block a user pointer belongs to, and the size its header records.
///
/// # Safety
/// `p` must be a non-null pointer returned by `hook_malloc` / `hook_realloc`.
unsafe fn block(p: *mut libc::c_void) -> (*mut libc::c_void, usize) {
    let base = (p as *mut u8).sub(HEADER);
    (base as *mut libc::c_void, *(base as *const usize))
}

unsafe extern "C" fn hook_malloc(
    n: libc::size_t,
    _file: *const libc::c_char,
    _line: libc::c_int,
) -> *mut libc::c_void {
    let Some(size) = n.checked_add(HEADER) else {
        return std::ptr::null_mut();
    };
    let base = libc::malloc(size);
    if base.is_null() {
        return base;
    }
    *(base as *mut usize) = n;
    note_alloc(n as u64);
    (base as *mut u8).add(HEADER) as *mut libc::c_void
}

unsafe extern "C" fn hook_realloc(
    p: *mut libc::c_void,
    n: libc::size_t,
    file: *const libc::c_char,
    line: libc::c_int,
) -> *mut libc::c_void {
    if p.is_null() {
        return hook_malloc(n, file, line);
    }
    if n == 0 {
        hook_free(p, file, line);
        return std::ptr::null_mut();
    }
    let Some(size) = n.checked_add(HEADER) else {
        return std::ptr::null_mut();
    };
    let (base, old) = block(p);
    let moved = libc::realloc(base, size);
    if moved.is_null() {
        return moved; // the old block is still valid and still counted
    }
    *(moved as *mut usize) = n;
    note_realloc(old as u64, n as u64);
    (moved as *mut u8).add(HEADER) as *mut libc::c_void
}

unsafe extern "C" fn hook_free(
    p: *mut libc::c_void,
    _file: *const libc::c_char,
    _line: libc::c_int,
) {
    if p.is_null() {
        return;
    }
    let (base, n) = block(p);
    note_free(n as u64);
    libc::free(base);
}

/// Install the hooks. Must run before anything calls OpenSSL (first thing in `main`); an
/// error when libcrypto has already allocated.
pub fn install() -> crate::out::Result<()> {
    if INSTALLED.load(Ordering::SeqCst) {
        return Ok(());
    }
    let ok =
        unsafe { CRYPTO_set_mem_functions(Some(hook_malloc), Some(hook_realloc), Some(hook_free)) };
    if ok != 1 {
        crate::bail!(
            Library,
            "OpenSSL refused the allocation hooks (CRYPTO_set_mem_functions): it had already allocated"
        );
    }
    INSTALLED.store(true, Ordering::SeqCst);
    Ok(())
}

/// Whether every OpenSSL allocation of this process is counted.
pub fn installed() -> bool {
    INSTALLED.load(Ordering::SeqCst)
}

/// Start a new window on this thread: every count back to zero.
pub fn thread_reset() {
    let _ = THREAD.try_with(|c| c.set(Counts::ZERO));
}

/// This thread's counts since its last reset.
pub fn thread_counts() -> Counts {
    THREAD.try_with(|c| c.get()).unwrap_or_default()
}

/// The whole process since the hooks were installed (peak: the process's highest in use).
pub fn process_counts() -> Counts {
    Counts {
        allocations: ALLOCATIONS.load(Ordering::Relaxed),
        frees: FREES.load(Ordering::Relaxed),
        reallocations: 0,
        total_bytes: TOTAL.load(Ordering::Relaxed),
        in_use: IN_USE.load(Ordering::Relaxed),
        peak: PEAK.load(Ordering::Relaxed),
    }
}

/// The process's resident set (VmRSS of /proc/self/status) in bytes, when readable.
pub fn vm_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_rss(&status)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::null;

    // The hooks are called directly: the test process's OpenSSL has its own allocator
    // (other tests use it before this one runs), so these tests exercise the accounting,
    // not the installation.

    #[test]
    fn counts_follow_malloc_realloc_free_on_this_thread() {
        std::thread::spawn(|| unsafe {
            thread_reset();
            let a = hook_malloc(100, null(), 0);
            let b = hook_malloc(50, null(), 0);
            assert!(!a.is_null() && !b.is_null());
            assert_eq!(a as usize % 16, 0, "blocks keep malloc's alignment");
            std::ptr::write_bytes(a as *mut u8, 7, 100);
            let a = hook_realloc(a, 300, null(), 0);
            assert_eq!(*(a as *const u8).add(99), 7, "realloc keeps the contents");
            hook_free(b, null(), 0);
            let c = thread_counts();
            assert_eq!(c.allocations, 2);
            assert_eq!(c.frees, 1);
            assert_eq!(c.reallocations, 1);
            assert_eq!(c.total_bytes, 100 + 50 + 200);
            assert_eq!(c.in_use, 300);
            assert_eq!(c.peak, 350);
            let a = hook_realloc(a, 10, null(), 0);
            assert_eq!(thread_counts().in_use, 10);
            assert_eq!(thread_counts().peak, 350);
            assert!(hook_realloc(a, 0, null(), 0).is_null());
            let c = thread_counts();
            assert_eq!((c.in_use, c.frees, c.allocations), (0, 2, 2));
            let d = hook_realloc(std::ptr::null_mut(), 8, null(), 0);
            assert_eq!(thread_counts().allocations, 3);
            hook_free(d, null(), 0);
            hook_free(std::ptr::null_mut(), null(), 0);
            assert_eq!(thread_counts().frees, 3);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn threads_are_counted_apart() {
        let block = std::thread::spawn(|| unsafe {
            thread_reset();
            let p = hook_malloc(1000, null(), 0);
            assert_eq!(thread_counts().in_use, 1000);
            p as usize
        })
        .join()
        .unwrap();
        std::thread::spawn(move || unsafe {
            thread_reset();
            hook_free(block as *mut libc::c_void, null(), 0);
            let c = thread_counts();
            // Freed here, allocated elsewhere: this thread's balance goes negative.
            assert_eq!((c.allocations, c.frees, c.in_use, c.peak), (0, 1, -1000, 0));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let s = "Name:\tx\nVmPeak:\t 100 kB\nVmRSS:\t    2048 kB\n";
        assert_eq!(parse_vm_rss(s), Some(2048 * 1024));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
        assert!(vm_rss_bytes().unwrap() > 0);
    }
}
