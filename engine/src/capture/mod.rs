//! Packet capture with kernel timestamps: an AF_PACKET socket on one interface, a classic
//! BPF filter (`tcp port P`), SO_TIMESTAMPNS (CLOCK_REALTIME, nanoseconds), written as a
//! nanosecond pcap (magic 0xa1b23c4d) that Wireshark and tcpdump open.
//!
//! Run it inside the namespace that owns the interface (`ip netns exec NS pqlab-engine
//! capture ...`). Records: `capturing` once the socket is bound (the caller may start
//! traffic), optional `packet` lines, and a final `capture_summary` with the kernel's
//! PACKET_STATISTICS (packets seen by the filter, drops).
//!
//! On a loopback interface every packet passes the socket twice, once leaving and once
//! arriving; the capture keeps the arriving copy only, so each packet is in the pcap once
//! (`loopback_copies_skipped` counts the others).
//!
//! The kernel hands every packet on an interface to every packet socket hooked on it, and
//! runs each one's filter, in the packet's path: many captures on one interface (one per
//! cell of a batch) would slow every packet, the timed ones included. With `--unhooked` the
//! socket starts unhooked (bound to an EtherType no lab traffic carries, it is offered no
//! packet); SIGUSR1 hooks it (`hooked` record: from then on it captures, on a fresh socket
//! bound at once, as re-binding one would first wait for the kernel's RCU grace period),
//! SIGUSR2 unhooks it again once no packet has come for `UNHOOK_QUIET` (the tail of the last
//! connection is kept; the fresh socket closed; `unhooked` record).
//!
//! A hooked capture reads its queue on a timer (`HOOKED_TICK`), not when a packet arrives:
//! a reader asleep on the socket is woken by every packet, and that wake-up (a scheduler
//! call, on a virtual machine an interrupt to the other CPU) is made in the path of the
//! packet being timed, by the process that sent or received it. Nothing waits on the
//! socket while the capture sleeps on its timer, so a packet costs the queueing alone; the
//! kernel stamps each packet as it is queued (SO_TIMESTAMPNS), so the timestamps do not
//! depend on when they are read, and the queue (`RCVBUF`) holds far more than a tick's
//! packets. Unhooked, a capture sleeps until a signal: idle captures never wake.

mod bpf;
mod pcap;

use crate::out::{emit, Result};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Interface to capture on (inside the current network namespace).
    #[arg(long)]
    interface: String,
    /// TCP port to keep (either direction); everything else is filtered in the kernel.
    #[arg(long)]
    port: u16,
    /// Output pcap file (nanosecond timestamps).
    #[arg(long)]
    pcap: PathBuf,
    /// Bytes kept of each packet (64-262144, the largest snapshot length tcpdump uses).
    #[arg(long, default_value_t = 262144, value_parser = clap::value_parser!(u32).range(64..=262_144))]
    snaplen: u32,
    /// Stop after this many seconds even without a signal (a safety bound; at most 604800,
    /// one week).
    #[arg(long, default_value_t = 3600.0)]
    max_seconds: f64,
    /// Also print one `packet` record per captured packet.
    #[arg(long)]
    json_packets: bool,
    /// Start unhooked: no packet reaches the socket until SIGUSR1 hooks it; SIGUSR2
    /// unhooks it again (see the module documentation).
    #[arg(long)]
    unhooked: bool,
}

static STOP: AtomicBool = AtomicBool::new(false);
/// A hook (SIGUSR1) or unhook (SIGUSR2) asked for and not yet done.
static HOOK: AtomicBool = AtomicBool::new(false);
static UNHOOK: AtomicBool = AtomicBool::new(false);
/// IEEE 802 Local Experimental EtherType 1: what an unhooked socket is bound to.
const PARKED: u16 = 0x88B5;
/// An unhook waits until no packet has come for this long.
const UNHOOK_QUIET: Duration = Duration::from_millis(20);
/// How often a hooked capture reads its queue (see the module documentation). Packets
/// queue meanwhile: at a handshake a millisecond some 200 a tick, a few hundred kilobytes
/// of `RCVBUF`.
const HOOKED_TICK: Duration = Duration::from_millis(10);
/// The socket's receive queue: a burst of handshakes is not dropped while the pcap is
/// written or between two ticks.
const RCVBUF: libc::c_int = 32 << 20;

extern "C" fn on_signal(sig: libc::c_int) {
    match sig {
        libc::SIGUSR1 => {
            UNHOOK.store(false, Ordering::SeqCst);
            HOOK.store(true, Ordering::SeqCst);
        }
        libc::SIGUSR2 => UNHOOK.store(true, Ordering::SeqCst),
        _ => STOP.store(true, Ordering::SeqCst),
    }
}

const SOL_PACKET: libc::c_int = 263;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_OUTGOING: u8 = 4;

#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    tp_packets: u32,
    tp_drops: u32,
}

/// ARPHRD_LOOPBACK in /sys/class/net/*/type.
const ARPHRD_LOOPBACK: &str = "772";

/// Whether an interface is a loopback device.
fn is_loopback(interface: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{interface}/type"))
        .is_ok_and(|t| t.trim() == ARPHRD_LOOPBACK)
}

/// The link type of an interface, from /sys (ip netns exec mounts the namespace's /sys).
fn link_type(interface: &str) -> Result<(u32, bpf::Framing)> {
    let path = format!("/sys/class/net/{interface}/type");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| crate::err!(Usage, "interface {interface:?} not found ({path}: {e})"))?;
    match text.trim() {
        // ARPHRD_ETHER, ARPHRD_LOOPBACK: Ethernet framing.
        "1" | "772" => Ok((pcap::LINKTYPE_ETHERNET, bpf::Framing::Ethernet)),
        // ARPHRD_NONE (TUN): bare IP packets.
        "65534" => Ok((pcap::LINKTYPE_RAW, bpf::Framing::RawIp)),
        other => crate::bail!(
            Usage,
            "interface {interface:?} has link type {other}; capture supports Ethernet (1), \
             loopback (772) and TUN (65534)"
        ),
    }
}

/// A packet socket and the index of the interface it binds to.
struct Socket(libc::c_int, libc::c_int);

impl Drop for Socket {
    fn drop(&mut self) {
        unsafe { libc::close(self.0) };
    }
}

fn os_err(what: &str) -> crate::out::Error {
    crate::err!(Io, "{what}: {}", std::io::Error::last_os_error())
}

fn setsockopt<T>(fd: libc::c_int, level: libc::c_int, name: libc::c_int, v: &T) -> libc::c_int {
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    }
}

/// Open the socket with protocol 0 (receives nothing), attach the filter, then bind with
/// ETH_P_ALL, so no unfiltered packet can slip into the queue before the filter is on.
fn open_socket(
    interface: &str,
    framing: bpf::Framing,
    (port, snaplen): (u16, u32),
    hooked: bool,
) -> Result<Socket> {
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(os_err("AF_PACKET socket (needs CAP_NET_RAW)"));
    }
    let mut sock = Socket(fd, 0);
    let mut program = bpf::tcp_port(framing, port, snaplen);
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr() as *mut libc::sock_filter,
    };
    if setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog) < 0 {
        return Err(os_err("attaching the BPF filter"));
    }
    let on: libc::c_int = 1;
    if setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &on) < 0 {
        return Err(os_err("SO_TIMESTAMPNS"));
    }
    if setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &RCVBUF) < 0 {
        let _ = setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &RCVBUF);
    }
    let cname = std::ffi::CString::new(interface)
        .map_err(|_| crate::err!(Usage, "interface name {interface:?} contains a NUL byte"))?;
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(os_err(&format!("interface {interface:?}")));
    }
    sock.1 = ifindex as i32;
    sock.hook(hooked, interface)?;
    Ok(sock)
}

impl Socket {
    /// Bind to the interface for every protocol (hooked: the kernel offers it every packet,
    /// its filter keeps the port's) or, unhooked, for the local experimental EtherType no
    /// traffic of the lab carries (`PARKED`): the kernel then offers it nothing, not even to
    /// filter, in either direction (a protocol 0 bind would keep the current protocol).
    fn hook(&self, on: bool, interface: &str) -> Result<()> {
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = if on { libc::ETH_P_ALL as u16 } else { PARKED }.to_be();
        addr.sll_ifindex = self.1;
        let rc = unsafe {
            libc::bind(
                self.0,
                &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(os_err(&format!("binding to {interface:?}")));
        }
        Ok(())
    }
}

fn statistics(fd: libc::c_int) -> TpacketStats {
    // Reading PACKET_STATISTICS also resets the kernel's counters: callers accumulate.
    let mut st = TpacketStats::default();
    let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
    unsafe {
        libc::getsockopt(
            fd,
            SOL_PACKET,
            PACKET_STATISTICS,
            &mut st as *mut TpacketStats as *mut libc::c_void,
            &mut len,
        )
    };
    st
}

/// One received packet: kernel timestamp, original length, whether we sent it.
struct Received {
    ts_ns: u64,
    orig_len: u32,
    caplen: u32,
    outgoing: bool,
    kernel_ts: bool,
}

fn realtime_ns() -> u64 {
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// recvmsg one packet (non-blocking); None when the queue is empty.
fn receive(fd: libc::c_int, buf: &mut [u8]) -> Result<Option<Received>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; 16];
    let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = &mut from as *mut libc::sockaddr_ll as *mut libc::c_void;
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control);
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(crate::err!(Io, "recvmsg: {err}")),
        };
    }
    let orig_len = n as u32; // MSG_TRUNC: the real length even if the buffer was smaller
    let caplen = orig_len.min(buf.len() as u32);
    let mut ts_ns = 0u64;
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::timespec);
                ts_ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    let kernel_ts = ts_ns != 0;
    if !kernel_ts {
        ts_ns = realtime_ns();
    }
    Ok(Some(Received {
        ts_ns,
        orig_len,
        caplen,
        outgoing: from.sll_pkttype == PACKET_OUTGOING,
        kernel_ts,
    }))
}

/// The signals a capture takes: SIGTERM and SIGINT stop it, SIGUSR1 and SIGUSR2 hook and
/// unhook its socket.
const CONTROL_SIGNALS: [libc::c_int; 4] =
    [libc::SIGTERM, libc::SIGINT, libc::SIGUSR1, libc::SIGUSR2];

fn control_signals() -> libc::sigset_t {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in CONTROL_SIGNALS {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Sleep until a packet is queued on `fd` (with `None`, on no socket: a plain sleep), a
/// stop signal arrives or `timeout` passes. The stop signals are blocked everywhere else
/// and let through only while waiting here (ppoll does both at once), so one that arrives
/// while packets are being written is not lost until the timeout, and an idle capture does
/// not wake up at all: captures of cells that are not running stay off the CPUs of the one
/// that is.
fn sleep_on(fd: Option<libc::c_int>, timeout: Duration, unblocked: &libc::sigset_t) {
    let mut pfd = libc::pollfd {
        fd: fd.unwrap_or(-1),
        events: libc::POLLIN,
        revents: 0,
    };
    let (fds, nfds) = match fd {
        Some(_) => (&mut pfd as *mut libc::pollfd, 1),
        None => (std::ptr::null_mut(), 0),
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    unsafe { libc::ppoll(fds, nfds, &ts, unblocked) };
}

/// What a capture counted so far.
#[derive(Default)]
struct Tally {
    packets: u64,
    bytes: u64,
    outgoing: u64,
    user_ts: u64,
    skipped: u64,
    kernel_packets: u64,
    kernel_drops: u64,
}

impl Tally {
    /// Add a socket's kernel counters (reading them resets them).
    fn add_statistics(&mut self, sock: &Socket) {
        let st = statistics(sock.0);
        self.kernel_packets += st.tp_packets as u64;
        self.kernel_drops += st.tp_drops as u64;
    }
}

/// Write every packet queued on `sock` to the pcap; whether there was any.
fn drain(
    sock: &Socket,
    buf: &mut [u8],
    writer: &mut pcap::Writer,
    tally: &mut Tally,
    (loopback, json_packets): (bool, bool),
) -> Result<bool> {
    let mut any = false;
    while let Some(p) = receive(sock.0, buf)? {
        any = true;
        if loopback && p.outgoing {
            tally.skipped += 1;
            continue;
        }
        writer.write(p.ts_ns, &buf[..p.caplen as usize], p.orig_len)?;
        tally.packets += 1;
        tally.bytes += p.orig_len as u64;
        tally.outgoing += p.outgoing as u64;
        tally.user_ts += (!p.kernel_ts) as u64;
        if json_packets {
            emit(
                &json!({"type": "packet", "t_ns": p.ts_ns, "len": p.orig_len,
                         "caplen": p.caplen, "outgoing": p.outgoing}),
            );
        }
    }
    Ok(any)
}

pub fn run(a: Args) -> Result<()> {
    if !(a.max_seconds > 0.0 && a.max_seconds <= 604_800.0) {
        crate::bail!(
            Usage,
            "--max-seconds {} must be above 0 and at most 604800 (one week)",
            a.max_seconds
        );
    }
    let (linktype, framing) = link_type(&a.interface)?;
    let loopback = is_loopback(&a.interface);
    // The control signals are taken only inside `sleep_on`.
    let mut unblocked: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        for sig in CONTROL_SIGNALS {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &control_signals(), &mut unblocked);
        for sig in CONTROL_SIGNALS {
            libc::sigdelset(&mut unblocked, sig);
        }
    }
    let mut writer = pcap::Writer::create(&a.pcap, a.snaplen, linktype)?;
    let mut hooked = !a.unhooked;
    let open = |hooked| open_socket(&a.interface, framing, (a.port, a.snaplen), hooked);
    let mut sock = open(hooked)?;
    // The parked socket while a fresh one is hooked.
    let mut spare: Option<Socket> = None;
    let _ = statistics(sock.0); // reset counters
    emit(&json!({
        "type": "capturing", "interface": a.interface, "port": a.port,
        "pcap": a.pcap.display().to_string(), "linktype": linktype, "snaplen": a.snaplen,
        "timestamps": "SO_TIMESTAMPNS", "clock": "CLOCK_REALTIME", "loopback": loopback,
        "hooked": hooked,
    }));
    let how = (loopback, a.json_packets);
    let mut last_packet = Instant::now();
    let deadline = Instant::now() + Duration::from_secs_f64(a.max_seconds);
    let mut buf = vec![0u8; a.snaplen as usize];
    let mut tally = Tally::default();
    let mut stopped_by = "signal";
    loop {
        // Drain what is queued; after a stop request this also collects the packets that
        // arrived before the signal, so the tail of the last handshake is not lost.
        if drain(&sock, &mut buf, &mut writer, &mut tally, how)? {
            last_packet = Instant::now();
        }
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        if Instant::now() >= deadline {
            stopped_by = "max-seconds";
            break;
        }
        tally.add_statistics(&sock);
        let mut wait = deadline.saturating_duration_since(Instant::now());
        // SIGUSR1: hooked at once. Re-binding or closing a hooked packet socket waits for
        // the kernel's RCU grace period (5-16 ms measured); binding a fresh one does not. So
        // a fresh socket (its filter attached before its bind) does the capturing, the
        // parked one waits aside, and unhooking closes the fresh one once the port is
        // quiet: the grace period falls after the round, outside every wait of the lab's.
        if HOOK.swap(false, Ordering::SeqCst) {
            if !hooked {
                spare = Some(std::mem::replace(&mut sock, open(true)?));
                hooked = true;
            }
            emit(&json!({"type": "hooked", "t": realtime_ns()}));
        }
        // SIGUSR2: unhooked once no packet has come for UNHOOK_QUIET (the tail of the last
        // connection is kept); nothing waits for it.
        if UNHOOK.load(Ordering::SeqCst) {
            let quiet = last_packet.elapsed();
            if hooked && quiet < UNHOOK_QUIET {
                wait = wait.min(UNHOOK_QUIET - quiet);
            } else {
                if hooked {
                    let parked = match spare.take() {
                        Some(parked) => parked,
                        None => open(false)?,
                    };
                    let done = std::mem::replace(&mut sock, parked);
                    drain(&done, &mut buf, &mut writer, &mut tally, how)?;
                    tally.add_statistics(&done);
                    hooked = false;
                }
                UNHOOK.store(false, Ordering::SeqCst);
                emit(&json!({"type": "unhooked", "t": realtime_ns()}));
            }
        }
        if hooked {
            sleep_on(None, wait.min(HOOKED_TICK), &unblocked);
        } else {
            sleep_on(Some(sock.0), wait, &unblocked);
        }
    }
    // Final drain and statistics.
    drain(&sock, &mut buf, &mut writer, &mut tally, how)?;
    tally.add_statistics(&sock);
    writer.finish()?;
    let t = &tally;
    emit(&json!({
        "type": "capture_summary", "interface": a.interface,
        "pcap": a.pcap.display().to_string(), "packets": t.packets, "bytes": t.bytes,
        "outgoing": t.outgoing, "incoming": t.packets - t.outgoing,
        "kernel_packets": t.kernel_packets, "kernel_drops": t.kernel_drops,
        "userspace_timestamps": t.user_ts, "stopped_by": stopped_by,
        "loopback_copies_skipped": t.skipped,
    }));
    Ok(())
}
