//! Counting heap allocations, three ways, each per thread and for the whole process:
//!
//! - **OpenSSL's own** (`Source::OpenSsl`), through its allocator hooks
//!   (`CRYPTO_set_mem_functions`, installed before OpenSSL's first allocation: libcrypto
//!   refuses the hooks afterwards, and memory allocated before them could not be told
//!   apart). Every OpenSSL allocation (`OPENSSL_malloc`, `zalloc`, `realloc`, `strdup`, the
//!   secure heap when it is not initialised, which it never is here) goes through
//!   `hook_malloc` / `hook_realloc` / `hook_free`, which keep the requested size in a
//!   16-byte header in front of the block so a free knows how much it releases.
//! - **Another stack's own allocator callbacks** (`Source::Library`): a library that lets
//!   the program supply its allocation functions (wolfSSL's `wolfSSL_SetAllocators`) gets
//!   `library_malloc` / `library_realloc` / `library_free`, which keep the same header and
//!   count what the library requested.
//! - **Every block of the C allocator** (`Source::Malloc`): the engine is linked with
//!   `--wrap` for malloc, calloc, realloc, free, posix_memalign, aligned_alloc and memalign
//!   (build.rs), so every call from code linked into it, Rust's allocator (rustls, the
//!   engine), aws-lc, liboqs and OpenSSL alike, passes through `__wrap_*` here. Sizes are
//!   the usable sizes malloc returned (`malloc_usable_size`: its rounding included), the
//!   only size a free can know. Counted only while `count_malloc(true)`; otherwise the
//!   wrappers forward at the cost of one atomic load. Not seen: allocations inside the C
//!   library itself (glibc's own calls), and the kernel's socket buffers.
//!
//! Per thread: the thread that runs a role is the role (`tls memory`: client and server
//! each on their own thread); per process: `tls server --count-heap`.

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

/// What a count counts (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    OpenSsl = 0,
    Malloc = 1,
    Library = 2,
}

const SOURCES: usize = 3;

thread_local! {
    static THREAD: Cell<[Counts; SOURCES]> = const { Cell::new([Counts::ZERO; SOURCES]) };
}

/// Process-wide counts of one source.
struct Global {
    allocations: AtomicU64,
    frees: AtomicU64,
    total: AtomicU64,
    in_use: AtomicI64,
    peak: AtomicI64,
}

impl Global {
    const fn new() -> Global {
        Global {
            allocations: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            total: AtomicU64::new(0),
            in_use: AtomicI64::new(0),
            peak: AtomicI64::new(0),
        }
    }
}

static INSTALLED: AtomicBool = AtomicBool::new(false);
static MALLOC_COUNTING: AtomicBool = AtomicBool::new(false);
static GLOBAL: [Global; SOURCES] = [Global::new(), Global::new(), Global::new()];

fn on_thread(src: Source, f: impl FnOnce(&mut Counts)) {
    let _ = THREAD.try_with(|c| {
        let mut v = c.get();
        f(&mut v[src as usize]);
        c.set(v);
    });
}

fn note_alloc(src: Source, bytes: u64) {
    on_thread(src, |c| {
        c.allocations += 1;
        c.grow(bytes);
    });
    let g = &GLOBAL[src as usize];
    g.allocations.fetch_add(1, Ordering::Relaxed);
    g.total.fetch_add(bytes, Ordering::Relaxed);
    let now = g.in_use.fetch_add(bytes as i64, Ordering::Relaxed) + bytes as i64;
    g.peak.fetch_max(now, Ordering::Relaxed);
}

fn note_free(src: Source, bytes: u64) {
    on_thread(src, |c| {
        c.frees += 1;
        c.shrink(bytes);
    });
    let g = &GLOBAL[src as usize];
    g.frees.fetch_add(1, Ordering::Relaxed);
    g.in_use.fetch_sub(bytes as i64, Ordering::Relaxed);
}

fn note_realloc(src: Source, old: u64, new: u64) {
    on_thread(src, |c| {
        c.reallocations += 1;
        if new >= old {
            c.grow(new - old);
        } else {
            c.shrink(old - new);
        }
    });
    let g = &GLOBAL[src as usize];
    let delta = new as i64 - old as i64;
    g.total
        .fetch_add(new.saturating_sub(old), Ordering::Relaxed);
    let now = g.in_use.fetch_add(delta, Ordering::Relaxed) + delta;
    g.peak.fetch_max(now, Ordering::Relaxed);
}

/// The block a user pointer belongs to, and the size its header records.
///
/// # Safety
/// `p` must be a non-null pointer returned by `counted_malloc` / `counted_header_realloc`.
unsafe fn block(p: *mut libc::c_void) -> (*mut libc::c_void, usize) {
    let base = (p as *mut u8).sub(HEADER);
    (base as *mut libc::c_void, *(base as *const usize))
}

/// malloc with the size in a header in front, counted as `src`.
unsafe fn counted_malloc(src: Source, n: libc::size_t) -> *mut libc::c_void {
    let Some(size) = n.checked_add(HEADER) else {
        return std::ptr::null_mut();
    };
    let base = libc::malloc(size);
    if base.is_null() {
        return base;
    }
    *(base as *mut usize) = n;
    note_alloc(src, n as u64);
    (base as *mut u8).add(HEADER) as *mut libc::c_void
}

/// realloc of a block of `counted_malloc`, counted as `src`.
unsafe fn counted_header_realloc(
    src: Source,
    p: *mut libc::c_void,
    n: libc::size_t,
) -> *mut libc::c_void {
    if p.is_null() {
        return counted_malloc(src, n);
    }
    if n == 0 {
        counted_free(src, p);
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
    note_realloc(src, old as u64, n as u64);
    (moved as *mut u8).add(HEADER) as *mut libc::c_void
}

/// free of a block of `counted_malloc`, counted as `src`.
unsafe fn counted_free(src: Source, p: *mut libc::c_void) {
    if p.is_null() {
        return;
    }
    let (base, n) = block(p);
    note_free(src, n as u64);
    libc::free(base);
}

unsafe extern "C" fn hook_malloc(
    n: libc::size_t,
    _file: *const libc::c_char,
    _line: libc::c_int,
) -> *mut libc::c_void {
    counted_malloc(Source::OpenSsl, n)
}

unsafe extern "C" fn hook_realloc(
    p: *mut libc::c_void,
    n: libc::size_t,
    _file: *const libc::c_char,
    _line: libc::c_int,
) -> *mut libc::c_void {
    counted_header_realloc(Source::OpenSsl, p, n)
}

unsafe extern "C" fn hook_free(
    p: *mut libc::c_void,
    _file: *const libc::c_char,
    _line: libc::c_int,
) {
    counted_free(Source::OpenSsl, p)
}

/// A stack's own allocation callback (`Source::Library`): malloc with the requested size in
/// a 16-byte header, counted for the calling thread and the process.
///
/// # Safety
/// As malloc; the block must be released with `library_free` / `library_realloc`.
pub unsafe extern "C" fn library_malloc(n: libc::size_t) -> *mut libc::c_void {
    counted_malloc(Source::Library, n)
}

/// realloc for blocks of `library_malloc` (`Source::Library`).
///
/// # Safety
/// As realloc; `p` is null or a live block of `library_malloc` / `library_realloc`.
pub unsafe extern "C" fn library_realloc(
    p: *mut libc::c_void,
    n: libc::size_t,
) -> *mut libc::c_void {
    counted_header_realloc(Source::Library, p, n)
}

/// free for blocks of `library_malloc` (`Source::Library`).
///
/// # Safety
/// `p` is null or a live block of `library_malloc` / `library_realloc`.
pub unsafe extern "C" fn library_free(p: *mut libc::c_void) {
    counted_free(Source::Library, p)
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

/// Start a new window on this thread: every count of every source back to zero.
pub fn thread_reset() {
    let _ = THREAD.try_with(|c| c.set([Counts::ZERO; SOURCES]));
}

/// This thread's counts of `src` since its last reset.
pub fn thread_counts(src: Source) -> Counts {
    THREAD
        .try_with(|c| c.get()[src as usize])
        .unwrap_or_default()
}

/// The whole process's counts of `src` since counting began (peak: the process's highest
/// in use).
pub fn process_counts(src: Source) -> Counts {
    let g = &GLOBAL[src as usize];
    Counts {
        allocations: g.allocations.load(Ordering::Relaxed),
        frees: g.frees.load(Ordering::Relaxed),
        reallocations: 0,
        total_bytes: g.total.load(Ordering::Relaxed),
        in_use: g.in_use.load(Ordering::Relaxed),
        peak: g.peak.load(Ordering::Relaxed),
    }
}

/// Start (or stop) counting every block of the C allocator (`Source::Malloc`).
pub fn count_malloc(on: bool) {
    MALLOC_COUNTING.store(on, Ordering::SeqCst);
}

// --- the C allocator, wrapped (a program links with --wrap, see build.rs) ---------------

#[inline]
fn counting() -> bool {
    MALLOC_COUNTING.load(Ordering::Relaxed)
}

/// Count a block the C allocator just returned (usable size). For the wrappers of
/// `count_c_allocator!`.
///
/// # Safety
/// `p` is null or a live block of the C allocator.
#[inline]
pub unsafe fn after_alloc(p: *mut libc::c_void) -> *mut libc::c_void {
    if !p.is_null() && counting() {
        note_alloc(Source::Malloc, libc::malloc_usable_size(p) as u64);
    }
    p
}

/// Count a block about to be freed.
///
/// # Safety
/// `p` is null or a live block of the C allocator.
#[inline]
pub unsafe fn before_free(p: *mut libc::c_void) {
    if !p.is_null() && counting() {
        note_free(Source::Malloc, libc::malloc_usable_size(p) as u64);
    }
}

/// realloc through `real`, counted.
///
/// # Safety
/// As realloc: `p` is null or a live block of the C allocator.
pub unsafe fn counted_realloc(
    p: *mut libc::c_void,
    n: libc::size_t,
    real: unsafe extern "C" fn(*mut libc::c_void, libc::size_t) -> *mut libc::c_void,
) -> *mut libc::c_void {
    if !counting() {
        return real(p, n);
    }
    if p.is_null() {
        return after_alloc(real(p, n));
    }
    let old = libc::malloc_usable_size(p) as u64;
    let moved = real(p, n);
    if moved.is_null() {
        if n == 0 {
            note_free(Source::Malloc, old); // realloc(p, 0) frees p
        }
        return moved;
    }
    note_realloc(Source::Malloc, old, libc::malloc_usable_size(moved) as u64);
    moved
}

/// The wrappers of the C allocator, defined in a program (whose build.rs links it with
/// `--wrap` for these names): every call from code linked into the program passes through
/// them and is counted as `Source::Malloc` while `count_malloc(true)`.
#[macro_export]
macro_rules! count_c_allocator {
    () => {
        extern "C" {
            fn __real_malloc(n: $crate::libc::size_t) -> *mut $crate::libc::c_void;
            fn __real_calloc(
                n: $crate::libc::size_t,
                size: $crate::libc::size_t,
            ) -> *mut $crate::libc::c_void;
            fn __real_realloc(
                p: *mut $crate::libc::c_void,
                n: $crate::libc::size_t,
            ) -> *mut $crate::libc::c_void;
            fn __real_free(p: *mut $crate::libc::c_void);
            fn __real_posix_memalign(
                out: *mut *mut $crate::libc::c_void,
                align: $crate::libc::size_t,
                n: $crate::libc::size_t,
            ) -> $crate::libc::c_int;
            fn __real_aligned_alloc(
                align: $crate::libc::size_t,
                n: $crate::libc::size_t,
            ) -> *mut $crate::libc::c_void;
            fn __real_memalign(
                align: $crate::libc::size_t,
                n: $crate::libc::size_t,
            ) -> *mut $crate::libc::c_void;
        }

        /// # Safety
        /// As malloc.
        #[no_mangle]
        pub unsafe extern "C" fn __wrap_malloc(
            n: $crate::libc::size_t,
        ) -> *mut $crate::libc::c_void {
            $crate::heap::after_alloc(__real_malloc(n))
        }

        /// # Safety
        /// As calloc.
        #[no_mangle]
        pub unsafe extern "C" fn __wrap_calloc(
            n: $crate::libc::size_t,
            size: $crate::libc::size_t,
        ) -> *mut $crate::libc::c_void {
            $crate::heap::after_alloc(__real_calloc(n, size))
        }

        /// # Safety
        /// As aligned_alloc.
        #[no_mangle]
        pub unsafe extern "C" fn __wrap_aligned_alloc(
            align: $crate::libc::size_t,
            n: $crate::libc::size_t,
        ) -> *mut $crate::libc::c_void {
            $crate::heap::after_alloc(__real_aligned_alloc(align, n))
        }

        /// # Safety
        /// As memalign.
        #[no_mangle]
        pub unsafe extern "C" fn __wrap_memalign(
            align: $crate::libc::size_t,
            n: $crate::libc::size_t,
        ) -> *mut $crate::libc::c_void {
            $crate::heap::after_alloc(__real_memalign(align, n))
        }

        /// # Safety
        /// As posix_memalign.
        #[no_mangle]
        pub unsafe extern "C" fn __wrap_posix_memalign(
            out: *mut *mut $crate::libc::c_void,
            align: $crate::libc::size_t,
            n: $crate::libc::size_t,
        ) -> $crate::libc::c_int {
            let r = __real_posix_memalign(out, align, n);
            if r == 0 {
                $crate::heap::after_alloc(*out);
            }
            r
        }

        /// # Safety
        /// As realloc.
        #[no_mangle]
        pub unsafe extern "C" fn __wrap_realloc(
            p: *mut $crate::libc::c_void,
            n: $crate::libc::size_t,
        ) -> *mut $crate::libc::c_void {
            $crate::heap::counted_realloc(p, n, __real_realloc)
        }

        /// # Safety
        /// As free.
        #[no_mangle]
        pub unsafe extern "C" fn __wrap_free(p: *mut $crate::libc::c_void) {
            $crate::heap::before_free(p);
            __real_free(p)
        }
    };
}

/// The process's resident set (VmRSS of /proc/self/status) in bytes, when readable.
pub fn vm_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_rss(&status)
}

/// This process's peak resident set so far (VmHWM of /proc/self/status, KiB): the current
/// memory image only, unlike getrusage's ru_maxrss, which keeps the pre-exec image's peak.
pub fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
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
            let c = thread_counts(Source::OpenSsl);
            assert_eq!(c.allocations, 2);
            assert_eq!(c.frees, 1);
            assert_eq!(c.reallocations, 1);
            assert_eq!(c.total_bytes, 100 + 50 + 200);
            assert_eq!(c.in_use, 300);
            assert_eq!(c.peak, 350);
            let a = hook_realloc(a, 10, null(), 0);
            assert_eq!(thread_counts(Source::OpenSsl).in_use, 10);
            assert_eq!(thread_counts(Source::OpenSsl).peak, 350);
            assert!(hook_realloc(a, 0, null(), 0).is_null());
            let c = thread_counts(Source::OpenSsl);
            assert_eq!((c.in_use, c.frees, c.allocations), (0, 2, 2));
            let d = hook_realloc(std::ptr::null_mut(), 8, null(), 0);
            assert_eq!(thread_counts(Source::OpenSsl).allocations, 3);
            hook_free(d, null(), 0);
            hook_free(std::ptr::null_mut(), null(), 0);
            assert_eq!(thread_counts(Source::OpenSsl).frees, 3);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn threads_are_counted_apart() {
        let block = std::thread::spawn(|| unsafe {
            thread_reset();
            let p = hook_malloc(1000, null(), 0);
            assert_eq!(thread_counts(Source::OpenSsl).in_use, 1000);
            p as usize
        })
        .join()
        .unwrap();
        std::thread::spawn(move || unsafe {
            thread_reset();
            hook_free(block as *mut libc::c_void, null(), 0);
            let c = thread_counts(Source::OpenSsl);
            // Freed here, allocated elsewhere: this thread's balance goes negative.
            assert_eq!((c.allocations, c.frees, c.in_use, c.peak), (0, 1, -1000, 0));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_stacks_own_callbacks_count_apart_from_openssls() {
        std::thread::spawn(|| unsafe {
            thread_reset();
            let a = library_malloc(64);
            let o = hook_malloc(10, null(), 0);
            let a = library_realloc(a, 200);
            assert!(!a.is_null());
            let c = thread_counts(Source::Library);
            assert_eq!((c.allocations, c.reallocations, c.total_bytes), (1, 1, 200));
            assert_eq!(thread_counts(Source::OpenSsl).total_bytes, 10);
            library_free(a);
            hook_free(o, null(), 0);
            let c = thread_counts(Source::Library);
            assert_eq!((c.frees, c.in_use, c.peak), (1, 0, 200));
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
