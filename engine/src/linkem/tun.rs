//! TUN devices and the few Linux calls the forwarder needs (timerfd, epoll, eventfd, clock).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Create a (non-persistent, layer-3, no packet-info header) TUN device named `name` in the
/// current network namespace. It disappears when the returned descriptor is closed, so an
/// exiting emulator leaves no interface behind, wherever the interface was moved.
pub fn open_tun(name: &str) -> Result<OwnedFd, String> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('/') {
        return Err(format!(
            "interface name {name:?} must be 1-15 characters without '/'"
        ));
    }
    let path = b"/dev/net/tun\0";
    // SAFETY: a NUL-terminated constant path.
    let fd = unsafe {
        libc::open(
            path.as_ptr() as *const libc::c_char,
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(format!(
            "cannot open /dev/net/tun: {e} (needs root or CAP_NET_ADMIN and the tun module)"
        ));
    }
    // SAFETY: fd was just opened and is owned here.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes an ifreq-sized struct we own.
    let r = unsafe { libc::ioctl(fd, TUNSETIFF, &mut req as *mut IfReq) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(format!("cannot create TUN device {name:?}: {e}"));
    }
    Ok(owned)
}

/// CLOCK_MONOTONIC in nanoseconds (shared by every network namespace on the host).
pub fn now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

pub struct TimerFd(OwnedFd);

impl TimerFd {
    pub fn new() -> io::Result<TimerFd> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        // SAFETY: fresh descriptor.
        Ok(TimerFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }
    /// Fire once at the absolute CLOCK_MONOTONIC time `at_ns`.
    pub fn arm_at(&self, at_ns: i64) -> io::Result<()> {
        let at = at_ns.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: at / 1_000_000_000,
                tv_nsec: at % 1_000_000_000,
            },
        };
        // SAFETY: valid itimerspec.
        cvt(unsafe {
            libc::timerfd_settime(
                self.0.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        })?;
        Ok(())
    }
    pub fn drain(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reading 8 bytes into a local buffer; EAGAIN is fine.
        unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr() as *mut _, 8) };
    }
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: fresh descriptor.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a local.
        unsafe { libc::write(self.0.as_raw_fd(), &one as *const u64 as *const _, 8) };
    }
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new(fds: &[RawFd]) -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fresh descriptor.
        let ep = Epoll(unsafe { OwnedFd::from_raw_fd(ep) });
        for &fd in fds {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: valid epoll_event.
            cvt(unsafe { libc::epoll_ctl(ep.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        }
        Ok(ep)
    }
    /// Wait up to `timeout_ms` (-1 = forever) for any descriptor to become readable.
    pub fn wait(&self, timeout_ms: i32) -> io::Result<()> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // SAFETY: buffer of 4 events.
        let r = unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), 4, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// Non-blocking read of one packet; Ok(None) when nothing is waiting.
pub fn read_packet(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: reading into a buffer we own, of its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut _, buf.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(n as usize))
}

/// Write one packet; false if the kernel refused it (interface down, no buffer).
pub fn write_packet(fd: RawFd, data: &[u8]) -> bool {
    // SAFETY: writing a buffer we own, of its length.
    let n = unsafe { libc::write(fd, data.as_ptr() as *const _, data.len()) };
    n == data.len() as isize
}
