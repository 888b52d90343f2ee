//! Stack high-water marks by painting: fill the unused part of this thread's stack with a
//! pattern, run the code to measure, then find the lowest word that no longer holds the
//! pattern. Only for threads the engine made with a known stack size (`tls memory`).

/// What a painted word holds until something writes it.
const PATTERN: u64 = 0x5a5a_a5a5_c3c3_3c3c;
/// Never painted: the bottom of the stack (near the guard page).
const BOTTOM_MARGIN: usize = 64 * 1024;
/// Left unpainted below the painter's own frame (its callee frames live there).
const FRAME_MARGIN: usize = 4096;

/// The stack of the calling thread, [low, high).
pub fn bounds() -> Option<(usize, usize)> {
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (rc == 0).then_some((addr as usize, addr as usize + size))
    }
}

/// The current stack pointer, near enough (the address of a local).
#[inline(never)]
pub fn stack_pointer() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// A painted stack, ready to be scanned after the measured code ran.
pub struct Painted {
    low: usize,
    top: usize,
}

/// Paint this thread's unused stack (from the bottom margin up to just below the caller).
#[inline(never)]
pub fn paint() -> Option<Painted> {
    let (low, _) = bounds()?;
    let low = (low + BOTTOM_MARGIN + 7) & !7;
    let top = (stack_pointer().checked_sub(FRAME_MARGIN)?) & !7;
    if top <= low {
        return None;
    }
    let mut p = low;
    while p < top {
        unsafe { std::ptr::write_volatile(p as *mut u64, PATTERN) };
        p += 8;
    }
    Some(Painted { low, top })
}

impl Painted {
    /// The lowest address written since painting (the deepest the stack went), or the top
    /// of the painted area when nothing below it was touched.
    #[inline(never)]
    pub fn lowest_touched(&self) -> usize {
        let mut p = self.low;
        while p < self.top {
            if unsafe { std::ptr::read_volatile(p as *const u64) } != PATTERN {
                return p;
            }
            p += 8;
        }
        self.top
    }

    /// Whether the measured code reached the unpainted bottom margin (the mark is then
    /// a lower bound).
    pub fn overflowed(&self) -> bool {
        self.lowest_touched() == self.low
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn use_stack(bytes: usize) -> u8 {
        let mut buf = [0u8; 64 * 1024];
        let n = bytes.min(buf.len());
        for (i, b) in buf[..n].iter_mut().enumerate() {
            *b = i as u8;
        }
        std::hint::black_box(&mut buf);
        buf[n / 2]
    }

    #[test]
    fn a_deeper_call_leaves_a_deeper_mark() {
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(|| {
                let entry = stack_pointer();
                let p = paint().expect("painted");
                let shallow = entry - p.lowest_touched();
                let painted = paint().expect("painted");
                std::hint::black_box(use_stack(60 * 1024));
                let deep = entry - painted.lowest_touched();
                assert!(deep >= 60 * 1024, "deep {deep}");
                assert!(deep < 200 * 1024, "deep {deep}");
                assert!(shallow < 16 * 1024, "shallow {shallow}");
                assert!(!painted.overflowed());
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
