//! Which connections a server keeps. Every connection opens with a phase that only the peer
//! can finish (the handshake, then the request head) and that phase has a total deadline
//! (`--handshake-timeout`): a peer that sends nothing, or a byte at a time, cannot hold a
//! worker for longer, however each single read is timed. And a server whose worker pool is
//! full makes room for a new connection by evicting the oldest connection still in that
//! phase, so silent sockets cannot lock good clients out (docs/security.md).
//!
//! A watcher thread shuts a late connection's socket down (a clone of it), which ends any
//! read or write blocked on it at once, whatever the TLS stack; the connection's own thread
//! then reports why it ended (`Watch::ending`). It sleeps until the earliest deadline, and
//! without any until a connection opens: an idle server does not wake up (the lab keeps
//! many of them beside the handshakes it times).

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Why a connection was cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Its handshake or request head was not complete by the deadline.
    TimedOut,
    /// The server was full and this was its oldest unfinished opening.
    Evicted,
}

struct Entry {
    id: u64,
    socket: TcpStream,
    /// When the current opening phase began (None: the connection is being served).
    opened_at: Option<Instant>,
    ending: Option<Ending>,
}

/// The watched connections and what the watcher waits for.
#[derive(Default)]
struct State {
    entries: Vec<Entry>,
    /// When the watcher wakes next (None: it waits for a connection to open).
    wakes_at: Option<Instant>,
    stop: bool,
}

/// What the server's threads and the watcher share.
struct Shared {
    timeout: Duration,
    state: Mutex<State>,
    /// Signalled when the watcher must look again (a first deadline, or the end).
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection's opening phase begins: wake a watcher that has no deadline to wait for.
    fn opening(&self, st: &State) {
        if st.wakes_at.is_none() {
            self.changed.notify_one();
        }
    }

    /// The watcher: cut off every connection whose opening phase is older than the
    /// timeout, then sleep until the next deadline (or until one exists), until stopped.
    fn watch_deadlines(&self) {
        let mut st = self.lock();
        while !st.stop {
            let now = Instant::now();
            for e in st.entries.iter_mut() {
                if e.ending.is_none() && e.opened_at.is_some_and(|t| now >= t + self.timeout) {
                    e.ending = Some(Ending::TimedOut);
                    let _ = e.socket.shutdown(Shutdown::Both);
                }
            }
            st.wakes_at = st
                .entries
                .iter()
                .filter(|e| e.ending.is_none())
                .filter_map(|e| e.opened_at)
                .min()
                .map(|t| t + self.timeout);
            st = match st.wakes_at {
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    self.changed
                        .wait_timeout(st, left)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0)
                }
                None => self.changed.wait(st).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

/// The connections of one server and their deadlines.
pub struct Admission {
    shared: Arc<Shared>,
    next_id: std::sync::atomic::AtomicU64,
}

impl Admission {
    /// Start the watcher; it runs until the `Admission` is dropped.
    pub fn start(timeout: Duration) -> Arc<Admission> {
        let shared = Arc::new(Shared {
            timeout,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let watcher = shared.clone();
        let _ = std::thread::Builder::new()
            .name("deadlines".into())
            .spawn(move || watcher.watch_deadlines());
        Arc::new(Admission {
            shared,
            next_id: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Watch a new connection, its opening phase starting now.
    pub fn watch(self: &Arc<Self>, tcp: &TcpStream) -> std::io::Result<Watch> {
        let socket = tcp.try_clone()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut st = self.lock();
        st.entries.push(Entry {
            id,
            socket,
            opened_at: Some(Instant::now()),
            ending: None,
        });
        self.shared.opening(&st);
        drop(st);
        Ok(Watch {
            admission: self.clone(),
            id,
        })
    }

    /// Evict the connection that has been in its opening phase the longest; false when no
    /// connection is in one (every connection is being served).
    pub fn evict_oldest(&self) -> bool {
        let mut st = self.lock();
        let victim = st
            .entries
            .iter_mut()
            .filter(|e| e.ending.is_none())
            .filter_map(|e| e.opened_at.map(|t| (t, e)))
            .min_by_key(|(t, _)| *t)
            .map(|(_, e)| e);
        match victim {
            Some(e) => {
                e.ending = Some(Ending::Evicted);
                let _ = e.socket.shutdown(Shutdown::Both);
                true
            }
            None => false,
        }
    }

    fn update(&self, id: u64, f: impl FnOnce(&mut Entry)) {
        let mut st = self.lock();
        if let Some(e) = st.entries.iter_mut().find(|e| e.id == id) {
            f(e);
            if e.opened_at.is_some() {
                self.shared.opening(&st);
            }
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.shared.changed.notify_one();
    }
}

/// One watched connection; it stops being watched when this is dropped.
pub struct Watch {
    admission: Arc<Admission>,
    id: u64,
}

impl Watch {
    /// The opening phase is over (handshake and request head done): no deadline, never
    /// evicted.
    pub fn opened(&self) {
        self.admission.update(self.id, |e| e.opened_at = None);
    }

    /// A new opening phase (another request head to read) with a fresh deadline.
    pub fn reopen(&self) {
        self.admission
            .update(self.id, |e| e.opened_at = Some(Instant::now()));
    }

    /// Whether and why the connection was cut off.
    pub fn ending(&self) -> Option<Ending> {
        let mut ending = None;
        self.admission.update(self.id, |e| ending = e.ending);
        ending
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.admission.lock().entries.retain(|e| e.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    #[test]
    fn a_late_opening_is_cut_off_and_a_served_connection_is_not() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::start(Duration::from_millis(200));
        let (_c1, mut s1) = pair(&l);
        let (_c2, mut s2) = pair(&l);
        let w1 = a.watch(&s1).unwrap();
        let w2 = a.watch(&s2).unwrap();
        w2.opened();
        let t0 = Instant::now();
        let mut b = [0u8; 1];
        // Blocked on a silent peer, the read ends when the deadline passes.
        assert_eq!(s1.read(&mut b).unwrap_or(0), 0);
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        assert!(waited < Duration::from_secs(3), "{waited:?}");
        assert_eq!(w1.ending(), Some(Ending::TimedOut));
        s2.set_read_timeout(Some(Duration::from_millis(400)))
            .unwrap();
        assert!(s2.read(&mut b).is_err(), "a served connection stays open");
        assert_eq!(w2.ending(), None);
    }

    #[test]
    fn eviction_takes_the_oldest_opening_only() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::start(Duration::from_secs(60));
        let (_c1, s1) = pair(&l);
        let (_c2, s2) = pair(&l);
        let (_c3, s3) = pair(&l);
        let w1 = a.watch(&s1).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let w2 = a.watch(&s2).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let w3 = a.watch(&s3).unwrap();
        w1.opened(); // the oldest, but being served
        assert!(a.evict_oldest());
        assert_eq!(w2.ending(), Some(Ending::Evicted));
        assert_eq!((w1.ending(), w3.ending()), (None, None));
        assert!(a.evict_oldest());
        assert_eq!(w3.ending(), Some(Ending::Evicted));
        assert!(!a.evict_oldest(), "nothing left in its opening phase");
        drop(w2);
        assert_eq!(a.lock().entries.len(), 2);
    }

    #[test]
    fn the_watcher_sleeps_until_the_next_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::start(Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            a.lock().wakes_at,
            None,
            "no connection: no deadline to wake for"
        );
        let (_c, s) = pair(&l);
        let t0 = Instant::now();
        let w = a.watch(&s).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let at = a.lock().wakes_at.expect("woken by the first opening");
        assert!(at >= t0 + Duration::from_secs(59) && at <= t0 + Duration::from_secs(61));
        w.opened();
        drop(w);
        let (_c2, s2) = pair(&l);
        let _w2 = a.watch(&s2).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        // A later opening does not move the wake-up earlier than the one already set.
        assert_eq!(a.lock().wakes_at, Some(at));
    }
}
