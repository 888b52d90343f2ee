//! Deadlines for connections, and which connections a full server keeps. Every phase of a
//! connection that only the peer can finish has a total deadline: on the server the handshake
//! with the request head (`--handshake-timeout`) and the response (`--response-timeout`), on
//! the client the whole connection (`--connection-timeout`, within `--time-limit`). A peer
//! that sends nothing, a byte at a time, or reads a kilobyte now and then cannot hold a
//! connection past it, however each single read or write is timed (`--io-timeout`). A server
//! whose worker pool is full makes room for a new connection by evicting the oldest
//! connection still in its opening phase or, when none is, its slowest response below a
//! minimum rate (`--min-response-rate`), so neither silent sockets nor slow readers can lock
//! good clients out (docs/security.md).
//!
//! A watcher thread shuts a late connection's socket down (a clone of it), which ends any
//! read or write blocked on it at once, whatever the TLS stack; the connection's own thread
//! then reports why it ended (`Watch::ending`). It sleeps until the earliest deadline (or the
//! next sample of the responses' rates, for a server that evicts), and without any until a
//! connection opens: an idle server or client does not wake up (the lab keeps many of them
//! beside the handshakes it times).

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The part of its life a connection is in, for eviction and for the reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Connect,
    Handshake,
    /// The request head (server: reading it; client: writing it).
    Request,
    Response,
    Close,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Connect => "TCP connect",
            Phase::Handshake => "handshake",
            Phase::Request => "request",
            Phase::Response => "response",
            Phase::Close => "close",
        }
    }

    /// The handshake and the request head: a server evicts these first, oldest first.
    fn opening(self) -> bool {
        matches!(self, Phase::Handshake | Phase::Request)
    }
}

/// Why a connection was cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The deadline passed in this phase.
    TimedOut(Phase),
    /// The server was full and this was its oldest opening, or (a response) its slowest
    /// connection, moving this many bytes a second.
    Evicted { phase: Phase, rate: Option<u64> },
}

/// How often a server that evicts samples each response's progress: a response's rate is
/// what it moved since the sample before the last, over the last one to one and a half of
/// these windows.
pub const RATE_WINDOW: Duration = Duration::from_secs(5);

/// Bytes moved by a response at a sample: (when, bytes).
type Mark = (Instant, u64);

struct Entry {
    id: u64,
    socket: TcpStream,
    phase: Phase,
    /// When the current phase began.
    since: Instant,
    deadline: Option<Instant>,
    /// Application bytes moved since the response began (the connection's thread counts).
    moved: Arc<AtomicU64>,
    /// The response's two latest samples (older, newer).
    marks: (Option<Mark>, Option<Mark>),
    ending: Option<Ending>,
}

impl Entry {
    fn live(&self) -> bool {
        self.ending.is_none()
    }

    /// Bytes a second the response moved since its older sample (None: not sampled twice,
    /// or not a response).
    fn rate(&self, now: Instant) -> Option<u64> {
        if self.phase.opening() {
            return None;
        }
        let (t, b) = self.marks.0?;
        let secs = now.saturating_duration_since(t).as_secs_f64().max(1e-3);
        let moved = self.moved.load(Ordering::Relaxed).saturating_sub(b);
        Some((moved as f64 / secs) as u64)
    }

    /// When this response needs its next sample.
    fn next_sample(&self) -> Option<Instant> {
        if self.phase.opening() || !self.live() {
            return None;
        }
        self.marks.1.map(|(t, _)| t + RATE_WINDOW)
    }

    fn cut(&mut self, why: Ending) {
        self.ending = Some(why);
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

/// The watched connections and what the watcher waits for.
#[derive(Default)]
struct State {
    entries: Vec<Entry>,
    /// When the watcher wakes next (None: it waits for a connection to open).
    wakes_at: Option<Instant>,
    stop: bool,
}

/// What the connections' threads and the watcher share.
struct Shared {
    /// Whether responses' rates are sampled (a server that may evict slow responses).
    sampling: bool,
    state: Mutex<State>,
    /// Signalled when the watcher must look again (an earlier wake-up, or the end).
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wake the watcher when it sleeps past `at` (or without a time to wake).
    fn wake_by(&self, st: &State, at: Option<Instant>) {
        let Some(at) = at else { return };
        if st.wakes_at.is_none_or(|w| at < w) {
            self.changed.notify_one();
        }
    }

    /// The watcher: cut off every connection past its deadline, sample the responses'
    /// progress, then sleep until the next deadline or sample (or until one exists), until
    /// stopped.
    fn watch_deadlines(&self) {
        let mut st = self.lock();
        while !st.stop {
            let now = Instant::now();
            for e in st.entries.iter_mut().filter(|e| e.live()) {
                if e.deadline.is_some_and(|d| now >= d) {
                    let phase = e.phase;
                    e.cut(Ending::TimedOut(phase));
                } else if self.sampling && e.next_sample().is_some_and(|t| now >= t) {
                    e.marks = (e.marks.1, Some((now, e.moved.load(Ordering::Relaxed))));
                }
            }
            let live = st.entries.iter().filter(|e| e.live());
            let deadlines = live.clone().filter_map(|e| e.deadline);
            let samples = live.filter_map(|e| e.next_sample().filter(|_| self.sampling));
            st.wakes_at = deadlines.chain(samples).min();
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

/// The connections of one server (or of a client process) and their deadlines.
pub struct Admission {
    shared: Arc<Shared>,
    next_id: AtomicU64,
}

impl Admission {
    /// Start the watcher; it runs until the `Admission` is dropped. `sampling`: measure each
    /// response's rate, for `evict` (a server with a bounded pool).
    pub fn start(sampling: bool) -> Arc<Admission> {
        let shared = Arc::new(Shared {
            sampling,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let watcher = shared.clone();
        let _ = std::thread::Builder::new()
            .name("deadlines".into())
            .spawn(move || watcher.watch_deadlines());
        Arc::new(Admission {
            shared,
            next_id: AtomicU64::new(0),
        })
    }

    /// The client's watcher, one per process, started with its first connection.
    pub fn clients() -> &'static Arc<Admission> {
        static CLIENTS: OnceLock<Arc<Admission>> = OnceLock::new();
        CLIENTS.get_or_init(|| Admission::start(false))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Watch a connection, in `phase` from now, cut off at `deadline`.
    pub fn watch(
        self: &Arc<Self>,
        tcp: &TcpStream,
        phase: Phase,
        deadline: Option<Instant>,
    ) -> std::io::Result<Watch> {
        let socket = tcp.try_clone()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let moved = Arc::new(AtomicU64::new(0));
        let now = Instant::now();
        let mut st = self.lock();
        st.entries.push(Entry {
            id,
            socket,
            phase,
            since: now,
            deadline,
            moved: moved.clone(),
            marks: (None, None),
            ending: None,
        });
        self.shared.wake_by(&st, deadline);
        drop(st);
        Ok(Watch {
            admission: self.clone(),
            id,
            moved,
        })
    }

    /// Make room on a full server: evict the connection that has been in its opening phase
    /// (handshake, request head) the longest, or, when none is, the response moving the
    /// fewest bytes a second if that is below `min_rate` (0: responses are never evicted).
    /// What was evicted; None when nothing may be (every connection is a response at or
    /// above the rate, or too young to have one).
    pub fn evict(&self, min_rate: u64) -> Option<Ending> {
        let now = Instant::now();
        let mut st = self.lock();
        let live = st.entries.iter_mut().filter(|e| e.live());
        let (opening, serving): (Vec<_>, Vec<_>) = live.partition(|e| e.phase.opening());
        let victim = match opening.into_iter().min_by_key(|e| e.since) {
            Some(e) => Some((e, None)),
            None => serving
                .into_iter()
                .filter_map(|e| e.rate(now).map(|r| (e, Some(r))))
                .filter(|(_, r)| r.is_some_and(|r| r < min_rate))
                .min_by_key(|(_, r)| *r),
        };
        let (e, rate) = victim?;
        let why = Ending::Evicted {
            phase: e.phase,
            rate,
        };
        e.cut(why);
        Some(why)
    }

    fn update(&self, id: u64, f: impl FnOnce(&mut Entry)) {
        let mut st = self.lock();
        if let Some(e) = st.entries.iter_mut().find(|e| e.id == id) {
            f(e);
            let (deadline, sample) = (e.deadline, e.next_sample());
            let sample = sample.filter(|_| self.shared.sampling);
            self.shared.wake_by(&st, deadline);
            self.shared.wake_by(&st, sample);
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
    moved: Arc<AtomicU64>,
}

impl Watch {
    /// A new phase with a new deadline (None: none). A response starts counting its bytes
    /// (`moved`) and its rate afresh.
    pub fn enter(&self, phase: Phase, deadline: Option<Instant>) {
        let now = Instant::now();
        self.moved.store(0, Ordering::Relaxed);
        self.admission.update(self.id, |e| {
            e.phase = phase;
            e.since = now;
            e.deadline = deadline;
            e.marks = (None, Some((now, 0)));
        });
    }

    /// The next phase of the same deadline (the client's whole connection; the server's
    /// request head after its handshake).
    pub fn phase(&self, phase: Phase) {
        self.admission.update(self.id, |e| e.phase = phase);
    }

    /// The phase the connection is in (or was cut off in).
    pub fn current(&self) -> Phase {
        let mut phase = Phase::Connect;
        self.admission.update(self.id, |e| {
            phase = match e.ending {
                Some(Ending::TimedOut(p) | Ending::Evicted { phase: p, .. }) => p,
                None => e.phase,
            }
        });
        phase
    }

    /// `n` more application bytes moved by the response (read or written): its progress.
    pub fn moved(&self, n: u64) {
        self.moved.fetch_add(n, Ordering::Relaxed);
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
    use std::io::{Read, Write};
    use std::net::TcpListener;

    fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    /// A server that evicts, and three accepted sockets (with their clients, kept open until
    /// dropped).
    fn three() -> (Arc<Admission>, [(TcpStream, TcpStream); 3]) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        (Admission::start(true), [pair(&l), pair(&l), pair(&l)])
    }

    fn in_ms(ms: u64) -> Option<Instant> {
        Some(Instant::now() + Duration::from_millis(ms))
    }

    #[test]
    fn a_late_phase_is_cut_off_and_a_connection_without_a_deadline_is_not() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::start(false);
        let (_c1, mut s1) = pair(&l);
        let (_c2, mut s2) = pair(&l);
        let w1 = a.watch(&s1, Phase::Handshake, in_ms(200)).unwrap();
        let w2 = a.watch(&s2, Phase::Handshake, in_ms(200)).unwrap();
        w2.enter(Phase::Response, None);
        let t0 = Instant::now();
        let mut b = [0u8; 1];
        // Blocked on a silent peer, the read ends when the deadline passes.
        assert_eq!(s1.read(&mut b).unwrap_or(0), 0);
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        assert!(waited < Duration::from_secs(3), "{waited:?}");
        assert_eq!(w1.ending(), Some(Ending::TimedOut(Phase::Handshake)));
        assert_eq!(w1.current(), Phase::Handshake);
        s2.set_read_timeout(Some(Duration::from_millis(400)))
            .unwrap();
        assert!(
            s2.read(&mut b).is_err(),
            "a connection without a deadline stays open"
        );
        assert_eq!(w2.ending(), None);
    }

    #[test]
    fn a_peer_trickling_bytes_is_cut_off_at_the_deadline_of_its_phase() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::start(false);
        let (mut c, mut s) = pair(&l);
        let w = a.watch(&s, Phase::Connect, in_ms(600)).unwrap();
        w.phase(Phase::Response);
        let feeder = std::thread::spawn(move || {
            for _ in 0..40 {
                if c.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let t0 = Instant::now();
        let mut b = [0u8; 16];
        // Every read gets a byte within 50 ms; only the deadline ends the loop.
        while s.read(&mut b).unwrap_or(0) > 0 {}
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(500) && took < Duration::from_millis(1900));
        assert_eq!(w.ending(), Some(Ending::TimedOut(Phase::Response)));
        feeder.join().unwrap();
    }

    #[test]
    fn eviction_takes_the_oldest_opening_first() {
        let (a, [(_c1, s1), (_c2, s2), (_c3, s3)]) = three();
        let hour = in_ms(3_600_000);
        let w1 = a.watch(&s1, Phase::Handshake, hour).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let w2 = a.watch(&s2, Phase::Handshake, hour).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let w3 = a.watch(&s3, Phase::Handshake, hour).unwrap();
        w1.enter(Phase::Response, hour); // the oldest, but being served
        let evicted = Ending::Evicted {
            phase: Phase::Handshake,
            rate: None,
        };
        assert_eq!(a.evict(u64::MAX), Some(evicted));
        assert_eq!(w2.ending(), Some(evicted));
        assert_eq!((w1.ending(), w3.ending()), (None, None));
        w3.phase(Phase::Request); // past its handshake, reading the request: still opening
        assert_eq!(
            a.evict(u64::MAX),
            Some(Ending::Evicted {
                phase: Phase::Request,
                rate: None
            })
        );
        assert_eq!(
            a.evict(u64::MAX),
            None,
            "a response is judged by its rate, and this one has none yet"
        );
        drop(w2);
        assert_eq!(a.lock().entries.len(), 2);
    }

    /// A response's samples pushed back in time: as if it had run for two windows.
    fn aged(a: &Admission, w: &Watch, bytes_then: u64) {
        let now = Instant::now();
        a.update(w.id, |e| {
            e.marks = (
                Some((now - 2 * RATE_WINDOW, bytes_then)),
                Some((now - RATE_WINDOW / 2, bytes_then)),
            )
        });
    }

    #[test]
    fn a_full_server_evicts_its_slowest_response_under_the_minimum_rate() {
        let (a, [(_c1, s1), (_c2, s2), (_c3, s3)]) = three();
        let hour = in_ms(3_600_000);
        let [w1, w2, w3] = [&s1, &s2, &s3].map(|s| {
            let w = a.watch(s, Phase::Handshake, hour).unwrap();
            w.enter(Phase::Response, hour);
            w
        });
        // w1 moved 10 MB in its window, w2 10 kB, w3 100 kB; all are ten seconds old.
        for (w, bytes) in [(&w1, 10_000_000), (&w2, 10_000), (&w3, 100_000)] {
            aged(&a, w, 0);
            w.moved(bytes);
        }
        let Some(Ending::Evicted { phase, rate }) = a.evict(50_000) else {
            panic!("nothing evicted")
        };
        assert_eq!(phase, Phase::Response);
        let rate = rate.unwrap();
        assert!((900..=1100).contains(&rate), "{rate} B/s");
        assert!(matches!(w2.ending(), Some(Ending::Evicted { .. })));
        assert_eq!(
            a.evict(5_000),
            None,
            "the others move at least the minimum rate"
        );
        assert_eq!(
            a.evict(0),
            None,
            "a minimum rate of 0 never evicts a response"
        );
        assert!(
            matches!(a.evict(20_000_000), Some(Ending::Evicted { rate: Some(r), .. }) if r < 20_000)
        );
        assert_eq!((w1.ending(), w3.ending().is_some()), (None, true));
    }

    #[test]
    fn the_watcher_samples_a_response_every_window() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::start(true);
        let (_c, s) = pair(&l);
        let w = a.watch(&s, Phase::Handshake, None).unwrap();
        w.enter(Phase::Response, None);
        w.moved(1000);
        std::thread::sleep(Duration::from_millis(50));
        let at = a
            .lock()
            .wakes_at
            .expect("woken for the response's first sample");
        let t0 = Instant::now();
        assert!(
            at > t0 && at <= t0 + RATE_WINDOW,
            "{:?}",
            at.saturating_duration_since(t0)
        );
        assert_eq!(a.evict(u64::MAX), None, "no rate before two samples");
    }

    #[test]
    fn the_watcher_sleeps_until_the_next_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::start(false);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            a.lock().wakes_at,
            None,
            "no connection: no deadline to wake for"
        );
        let (_c, s) = pair(&l);
        let t0 = Instant::now();
        let w = a
            .watch(&s, Phase::Handshake, Some(t0 + Duration::from_secs(60)))
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let at = a.lock().wakes_at.expect("woken by the first deadline");
        assert!(at >= t0 + Duration::from_secs(59) && at <= t0 + Duration::from_secs(61));
        w.enter(Phase::Response, None);
        drop(w);
        let (_c2, s2) = pair(&l);
        let _w2 = a
            .watch(
                &s2,
                Phase::Handshake,
                Some(Instant::now() + Duration::from_secs(60)),
            )
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        // A later deadline does not move the wake-up earlier than the one already set.
        assert_eq!(a.lock().wakes_at, Some(at));
    }
}
