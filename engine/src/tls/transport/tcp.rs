//! TCP, the transport every loop runs over today: the socket wrapper a stack reads and
//! writes (`Wire`, which records every system call and counts the bytes), the socket setup
//! of a TLS connection, and what the kernel tells about a connection (TCP_INFO, the
//! congestion control).

use crate::out::Result;
use crate::tls::record::{realtime_ns, Dir, SharedRecorder};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::Duration;

/// A connected socket set up for a TLS connection: no Nagle, every read and write timed out
/// after --io-timeout.
pub fn setup(tcp: &TcpStream, io_timeout: u64) -> Result<()> {
    let timeout = Some(Duration::from_secs(io_timeout.max(1)));
    tcp.set_nodelay(true)?;
    tcp.set_read_timeout(timeout)?;
    tcp.set_write_timeout(timeout)?;
    Ok(())
}

/// A TcpStream that records every read/write syscall in the recorder. The socket is shared
/// (`Rc`) so the loops can read TCP_INFO after the stack took the Wire, even when the
/// handshake failed. A socket timeout is reported as a timeout naming the peer and the
/// limit, not as the EAGAIN a timed-out blocking socket returns.
pub struct Wire {
    pub tcp: Rc<TcpStream>,
    pub rec: SharedRecorder,
    /// "server" or "client": the other side, for messages.
    pub peer: &'static str,
    /// The socket's read/write timeout in seconds (--io-timeout).
    pub timeout_s: u64,
}

impl Wire {
    fn timed_out(&self, e: std::io::Error, reading: bool) -> std::io::Error {
        use std::io::ErrorKind::{TimedOut, WouldBlock};
        if !matches!(e.kind(), WouldBlock | TimedOut) {
            return e;
        }
        let what = if reading {
            format!("no data from the {} for {} s", self.peer, self.timeout_s)
        } else {
            format!(
                "the {} accepted no data for {} s",
                self.peer, self.timeout_s
            )
        };
        std::io::Error::new(TimedOut, format!("{what} (--io-timeout)"))
    }
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let t0 = realtime_ns();
        let n = (&*self.tcp)
            .read(buf)
            .map_err(|e| self.timed_out(e, true))?;
        // The recorder is never borrowed across a stack call; try_borrow_mut keeps a panic
        // (which the stack would re-raise) impossible anyway.
        if n > 0 {
            if let Ok(mut r) = self.rec.try_borrow_mut() {
                r.on_io(Dir::Recv, t0, n);
                r.scan(Dir::Recv, &buf[..n]);
            }
        }
        Ok(n)
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let t0 = realtime_ns();
        let n = (&*self.tcp)
            .write(buf)
            .map_err(|e| self.timed_out(e, false))?;
        if let Ok(mut r) = self.rec.try_borrow_mut() {
            r.on_io(Dir::Sent, t0, n);
            r.scan(Dir::Sent, &buf[..n]);
        }
        Ok(n)
    }
    /// Several buffers in one system call, as a socket takes them: what a stack that queues a
    /// whole flight (rustls) hands over at once reaches TCP at once.
    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        let t0 = realtime_ns();
        let n = (&*self.tcp)
            .write_vectored(bufs)
            .map_err(|e| self.timed_out(e, false))?;
        if let Ok(mut r) = self.rec.try_borrow_mut() {
            r.on_io(Dir::Sent, t0, n);
            let mut left = n;
            for b in bufs {
                let take = left.min(b.len());
                r.scan(Dir::Sent, &b[..take]);
                left -= take;
                if left == 0 {
                    break;
                }
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.tcp).flush()
    }
}

/// TCP_INFO of a connected socket (the fields the analyses use).
pub fn info(tcp: &TcpStream) -> Value {
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            tcp.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut info as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Value::Null;
    }
    let mut v = json!({
        "state": info.tcpi_state,
        "ca_state": info.tcpi_ca_state,
        "retransmits": info.tcpi_retransmits,
        "backoff": info.tcpi_backoff,
        "total_retrans": info.tcpi_total_retrans,
        "lost": info.tcpi_lost,
        "unacked": info.tcpi_unacked,
        "reordering": info.tcpi_reordering,
        "snd_cwnd": info.tcpi_snd_cwnd,
        "snd_ssthresh": info.tcpi_snd_ssthresh,
        "snd_mss": info.tcpi_snd_mss,
        "rcv_mss": info.tcpi_rcv_mss,
        "advmss": info.tcpi_advmss,
        "pmtu": info.tcpi_pmtu,
        "rtt_us": info.tcpi_rtt,
        "rttvar_us": info.tcpi_rttvar,
        "rto_us": info.tcpi_rto,
        "rcv_space": info.tcpi_rcv_space,
    });
    // Newer fields only when this kernel filled them in (it returns how much it wrote).
    macro_rules! newer {
        ($name:literal, $field:ident) => {
            if std::mem::offset_of!(libc::tcp_info, $field) + std::mem::size_of_val(&info.$field)
                <= len as usize
            {
                v[$name] = json!(info.$field);
            }
        };
    }
    newer!("min_rtt_us", tcpi_min_rtt);
    newer!("segs_out", tcpi_segs_out);
    newer!("segs_in", tcpi_segs_in);
    newer!("data_segs_out", tcpi_data_segs_out);
    newer!("data_segs_in", tcpi_data_segs_in);
    newer!("bytes_acked", tcpi_bytes_acked);
    newer!("bytes_received", tcpi_bytes_received);
    newer!("delivery_rate", tcpi_delivery_rate);
    newer!("busy_time_us", tcpi_busy_time);
    newer!("rwnd_limited_us", tcpi_rwnd_limited);
    newer!("sndbuf_limited_us", tcpi_sndbuf_limited);
    newer!("delivered", tcpi_delivered);
    newer!("bytes_sent", tcpi_bytes_sent);
    newer!("bytes_retrans", tcpi_bytes_retrans);
    newer!("snd_wnd", tcpi_snd_wnd);
    v
}

/// The congestion control algorithm on this socket.
pub fn congestion_control(tcp: &TcpStream) -> Option<String> {
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            tcp.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(len as usize);
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}
