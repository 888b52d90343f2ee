//! What every TLS stack's connections are recorded with, whatever the stack: clocks, the
//! per-connection event recorder (record headers, handshake messages, socket I/O, with
//! stream offsets), the `negotiated` facts each stack fills in, and where connection
//! records go (see docs/tls.md). What carries the bytes is in `transport`.

use serde_json::{json, Value};
use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

pub fn realtime_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME)
}

pub fn monotonic_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// A (realtime, monotonic) pair taken together.
#[derive(Clone, Copy)]
pub struct Stamp {
    pub real: i64,
    pub mono: i64,
}

impl Stamp {
    pub fn now() -> Stamp {
        let mono = monotonic_ns();
        let real = realtime_ns();
        Stamp { real, mono }
    }
}

/// What a handshake settled on, as every stack reports it. Names are the stack's own
/// spelling; the `*_code` fields are the IANA code points (TLS CipherSuite, NamedGroup,
/// SignatureScheme), which is what the lab compares with its catalogue.
#[derive(serde::Serialize, Clone, Debug, Default, PartialEq)]
pub struct Negotiated {
    /// "TLSv1.3" or "TLSv1.2".
    pub version: String,
    pub cipher: Option<String>,
    /// The RFC name of the cipher suite (TLS_AES_128_GCM_SHA256, TLS_ECDHE_...).
    pub cipher_standard_name: Option<String>,
    pub cipher_code: Option<u16>,
    /// Key-exchange group; None for RSA key exchange and TLS 1.2 DHE with explicit
    /// parameters.
    pub group: Option<String>,
    pub group_code: Option<u16>,
    /// Server: the scheme it signed with; client: the scheme the server signed with. None
    /// when the server signed nothing (TLS 1.2 RSA key exchange).
    pub sigalg: Option<String>,
    pub sigalg_code: Option<u16>,
    /// Mutual TLS: the scheme the client signed its CertificateVerify with (server: the
    /// peer's; client: its own); None without a client certificate.
    pub client_sigalg: Option<String>,
    pub client_sigalg_code: Option<u16>,
    pub session_reused: bool,
    /// Client, TLS 1.2: the server's ephemeral key (e.g. the DHE group size); else None.
    pub peer_tmp_key: Option<PeerTmpKey>,
}

#[derive(serde::Serialize, Clone, Debug, PartialEq)]
pub struct PeerTmpKey {
    pub bits: i32,
    /// The library's key type id (OpenSSL: EVP_PKEY id, e.g. 28 for DH).
    pub pkey_id: i32,
}

/// Direction of a message or I/O as seen from this side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Sent,
    Recv,
}

impl Dir {
    fn index(self) -> usize {
        match self {
            Dir::Sent => 0,
            Dir::Recv => 1,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Dir::Sent => "sent",
            Dir::Recv => "recv",
        }
    }
}

/// A TLS message a stack observed (OpenSSL: its message callback).
pub enum Message<'a> {
    /// A record header as on the wire: type, version, 2-byte length.
    RecordHeader(&'a [u8]),
    /// TLS 1.3: the inner content type of the record just reported.
    InnerContentType(u8),
    /// A handshake message, its 4-byte header first.
    Handshake(&'a [u8]),
    /// An alert: level, description.
    Alert(&'a [u8]),
    ChangeCipherSpec,
}

/// One message or socket event (serialized as in docs/tls.md; absent fields are left out).
/// A plain struct keeps recording cheap inside the handshake.
#[derive(serde::Serialize)]
pub struct Event {
    pub ev: &'static str,
    pub dir: &'static str,
    pub t: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_start: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_bytes: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msg: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msg_type: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset_end: Option<u64>,
}

impl Event {
    fn new(ev: &'static str, dir: Dir, t: i64) -> Event {
        Event {
            ev,
            dir: dir.name(),
            t,
            t_start: None,
            content_type: None,
            header_bytes: None,
            msg: None,
            msg_type: None,
            length: None,
            bytes: None,
            level: None,
            description: None,
            offset_end: None,
        }
    }
}

pub fn content_type_name(ct: u8) -> &'static str {
    match ct {
        20 => "change_cipher_spec",
        21 => "alert",
        22 => "handshake",
        23 => "application_data",
        24 => "heartbeat",
        _ => "other",
    }
}

pub fn handshake_type_name(t: u8) -> &'static str {
    match t {
        0 => "hello_request",
        1 => "client_hello",
        2 => "server_hello",
        4 => "new_session_ticket",
        5 => "end_of_early_data",
        8 => "encrypted_extensions",
        11 => "certificate",
        12 => "server_key_exchange",
        13 => "certificate_request",
        14 => "server_hello_done",
        15 => "certificate_verify",
        16 => "client_key_exchange",
        20 => "finished",
        24 => "key_update",
        25 => "compressed_certificate",
        254 => "message_hash",
        _ => "unknown",
    }
}

/// Most events kept per connection. A peer decides how many records it sends (one-byte
/// records, endless post-handshake messages), so the list is bounded; a 1 GiB transfer in
/// 16 KiB records makes about 200 000 events, and each event takes about 150 bytes here.
/// Byte and record counters go on past the bound; the record then has `events_dropped`.
pub const MAX_EVENTS: usize = 1_000_000;

/// Which per-message events a connection record keeps (`--events`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Events {
    Off,
    /// Only what this side sent (its records, messages and writes): what the handshake
    /// analysis reads, half the events.
    Sent,
    All,
}

/// Per-connection record of everything the TLS stack and the socket did, in order.
pub struct Recorder {
    /// Which events it keeps.
    pub keep: Events,
    pub events: Vec<Event>,
    /// Events not kept because `max_events` was reached.
    pub events_dropped: u64,
    pub max_events: usize,
    /// Cumulative TLS record bytes (header + payload) seen in record headers.
    pub record_bytes: [u64; 2],
    /// Cumulative bytes through the socket (write/read syscalls).
    pub io_bytes: [u64; 2],
    pub records: [u64; 2],
    /// For a stack that reports no messages: record headers read off the socket's bytes
    /// (`scan_wire`), per direction.
    scanners: Option<[RecordScanner; 2]>,
    /// The length in bits of this side's ephemeral finite-field DH private exponent, where
    /// the stack can tell (OpenSSL, a TLS 1.2 DHE server: read as its ServerKeyExchange is
    /// written). Reported as the connection's `dh_private_bits`.
    pub dh_private_bits: Option<i32>,
}

/// Finds TLS record headers in a byte stream given in pieces: every record is a 5-byte
/// header (type, version, length) and `length` bytes, on the wire for every stack.
#[derive(Clone, Copy, Default)]
struct RecordScanner {
    header: [u8; 5],
    have: usize,
    /// Payload bytes of the current record still to come.
    remaining: usize,
}

impl RecordScanner {
    /// The complete headers in `data`, in order.
    fn feed(&mut self, mut data: &[u8], mut found: impl FnMut(&[u8; 5])) {
        while !data.is_empty() {
            if self.remaining > 0 {
                let skip = self.remaining.min(data.len());
                self.remaining -= skip;
                data = &data[skip..];
                continue;
            }
            let take = (5 - self.have).min(data.len());
            self.header[self.have..self.have + take].copy_from_slice(&data[..take]);
            self.have += take;
            data = &data[take..];
            if self.have == 5 {
                self.have = 0;
                self.remaining = u16::from_be_bytes([self.header[3], self.header[4]]) as usize;
                found(&self.header);
            }
        }
    }
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder {
            keep: Events::Off,
            events: Vec::new(),
            events_dropped: 0,
            max_events: MAX_EVENTS,
            record_bytes: [0; 2],
            io_bytes: [0; 2],
            records: [0; 2],
            scanners: None,
            dh_private_bits: None,
        }
    }
}

impl Recorder {
    /// A recorder keeping every event (`events_on`) or none.
    pub fn new(events_on: bool) -> Recorder {
        Recorder::for_events(if events_on { Events::All } else { Events::Off })
    }

    /// A recorder keeping the events `keep` asks for.
    pub fn for_events(keep: Events) -> Recorder {
        Recorder {
            keep,
            ..Default::default()
        }
    }

    /// Whether an event in direction `dir` is kept.
    fn keeps(&self, dir: Dir) -> bool {
        match self.keep {
            Events::Off => false,
            Events::Sent => dir != Dir::Recv,
            Events::All => true,
        }
    }

    /// Read record headers off the socket's bytes (for a stack that reports no messages):
    /// record events and record counters then come from the wire.
    pub fn scan_wire(&mut self) {
        self.scanners = Some([RecordScanner::default(); 2]);
    }

    /// Bytes that went through the socket, for the record scanner.
    pub fn scan(&mut self, dir: Dir, data: &[u8]) {
        let Some(mut scanners) = self.scanners else {
            return;
        };
        let mut headers = Vec::new();
        scanners[dir.index()].feed(data, |h| headers.push(*h));
        self.scanners = Some(scanners);
        for h in headers {
            self.on_message(dir, Message::RecordHeader(&h));
        }
    }

    fn push(&mut self, e: Event) {
        if self.events.len() < self.max_events {
            self.events.push(e);
        } else {
            self.events_dropped += 1;
        }
    }

    /// A message the stack observed. Record headers advance the stream offsets; the other
    /// messages are stamped with the offset at the end of the record that carried them.
    pub fn on_message(&mut self, dir: Dir, m: Message) {
        let t = realtime_ns();
        let d = dir.index();
        if let Message::RecordHeader(h) = m {
            if h.len() < 5 {
                return;
            }
            self.record_bytes[d] += 5 + u16::from_be_bytes([h[3], h[4]]) as u64;
            self.records[d] += 1;
        }
        if !self.keeps(dir) {
            return;
        }
        let offset_end = Some(self.record_bytes[d]);
        let ev = match m {
            Message::RecordHeader(h) => Event {
                content_type: Some(content_type_name(h[0])),
                header_bytes: Some(5),
                length: Some(u16::from_be_bytes([h[3], h[4]]) as u64),
                offset_end,
                ..Event::new("record", dir, t)
            },
            Message::InnerContentType(ct) => Event {
                content_type: Some(content_type_name(ct)),
                ..Event::new("inner_content_type", dir, t)
            },
            Message::Handshake(body) => match body.first() {
                Some(&ty) => Event {
                    msg: Some(handshake_type_name(ty)),
                    msg_type: Some(ty),
                    length: Some(body.len() as u64),
                    offset_end,
                    ..Event::new("handshake", dir, t)
                },
                None => return,
            },
            Message::Alert(a) => match a {
                [level, description, ..] => Event {
                    level: Some(*level),
                    description: Some(*description),
                    offset_end,
                    ..Event::new("alert", dir, t)
                },
                _ => return,
            },
            Message::ChangeCipherSpec => Event {
                offset_end,
                ..Event::new("change_cipher_spec", dir, t)
            },
        };
        self.push(ev);
    }

    /// One read or write system call of `n` bytes, started at `t_start`.
    pub fn on_io(&mut self, dir: Dir, t_start: i64, n: usize) {
        let t = realtime_ns();
        let d = dir.index();
        self.io_bytes[d] += n as u64;
        if self.keeps(dir) {
            self.push(Event {
                t_start: Some(t_start),
                bytes: Some(n as u64),
                offset_end: Some(self.io_bytes[d]),
                ..Event::new("io", dir, t)
            });
        }
    }

    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// The byte and record counters, and `events_dropped` when events were lost.
    pub fn add_counters(&self, out: &mut Value, messages: bool) {
        // Record counters come from the stack's messages or from the wire.
        let (rs, rr, cs, cr) = if messages || self.scanners.is_some() {
            (
                json!(self.record_bytes[0]),
                json!(self.record_bytes[1]),
                json!(self.records[0]),
                json!(self.records[1]),
            )
        } else {
            (Value::Null, Value::Null, Value::Null, Value::Null)
        };
        out["record_bytes_sent"] = rs;
        out["record_bytes_received"] = rr;
        out["bytes_sent"] = json!(self.io_bytes[0]);
        out["bytes_received"] = json!(self.io_bytes[1]);
        out["records_sent"] = cs;
        out["records_received"] = cr;
        if self.events_dropped > 0 {
            out["events_dropped"] = json!(self.events_dropped);
        }
    }
}

pub type SharedRecorder = Rc<RefCell<Recorder>>;

/// Every option a TLS command runs with, by flag name without the dashes (`max-concurrent`,
/// `io-timeout`, `count` for `-n`), defaults and values derived from others filled in: the
/// `options` of each command's first record, so a caller can check that what it asked for
/// reached the engine (docs/engine-protocol.md).
pub fn options(args: &impl serde::Serialize) -> Value {
    serde_json::to_value(args).unwrap_or(Value::Null)
}

/// The first record of a command that has no other one to carry its options.
pub fn config(command: &str, options: Value) -> Value {
    json!({"type": "config", "command": command, "options": options, "t": realtime_ns()})
}

/// Where the server and client loops put their records: stdout for real runs, memory in
/// tests.
pub trait Sink: Send + Sync {
    fn record(&self, record: &Value);
    /// A connection record, with its events appended as an `events` array when given.
    fn connection(&self, record: &Value, events: Option<&[Event]>);
    /// Total time the emitting threads have waited for room in the output so far (ns).
    fn blocked_ns(&self) -> u64 {
        0
    }
    /// Write every record held back so far, now, on the calling thread (see
    /// `Stdout::hold`); nothing to do for a sink that holds nothing.
    fn flush_held(&self) {}
}

/// JSON lines on stdout, written by a thread of their own. A thread serving connections
/// only hands its record over and goes on: written directly, a record waits whenever the
/// reader of stdout is behind (a pipe holds 64 KiB, some 30 connection records, and the lab
/// reads a busy server's output in batches), and a server stalled on its own output
/// measures its reader instead of its handshakes. The queue holds at most
/// `MAX_QUEUED_BYTES`; beyond that a thread waits, and the time it waited is counted
/// (`blocked_ns`). `finish` writes what is queued and ends the writer; call it before the
/// command ends (an error record must come after the records before it).
///
/// `hold` keeps every later record queued, unwritten, until `flush_held` or `finish`: no
/// write and no wake-up of the writer or of the reader while handshakes are timed (a held
/// queue beyond `MAX_QUEUED_BYTES` is written by the thread that fills it, counted in
/// `blocked_ns`, rather than grow without bound).
///
/// With a records file (`--connection-records`), `connection` records go to that file
/// instead of stdout (held alike, and written before stdout's lines when both are let
/// out: a reader that sees a record on stdout finds every connection before it in the
/// file); everything else, `connection_error` records included, stays on stdout.
pub struct Stdout {
    queue: Arc<Queue>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    records: Option<Mutex<RecordsFile>>,
}

/// The file connection records go to, and what is held for it.
struct RecordsFile {
    file: std::fs::File,
    path: String,
    lines: Vec<u8>,
    held: bool,
    error: Option<String>,
}

impl RecordsFile {
    fn write_out(&mut self) {
        if self.lines.is_empty() || self.error.is_some() {
            return;
        }
        if let Err(e) = self.file.write_all(&std::mem::take(&mut self.lines)) {
            self.error = Some(format!("writing {}: {e}", self.path));
        }
    }
}

/// Most bytes of records waiting for the writer before a thread must wait.
pub const MAX_QUEUED_BYTES: usize = 64 << 20;

#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    /// Signalled when lines arrive or the queue closes.
    ready: Condvar,
    /// Signalled when the writer has taken lines out.
    space: Condvar,
    blocked_ns: AtomicU64,
}

#[derive(Default)]
struct QueueState {
    lines: Vec<u8>,
    closed: bool,
    /// Records are kept queued until `flush_held` or `finish` (see `Stdout::hold`).
    held: bool,
    /// The writer has taken lines out and is writing them.
    writing: bool,
}

impl Stdout {
    /// Start the writer thread.
    pub fn start() -> Stdout {
        Stdout::with_records(None).expect("no file to open")
    }

    /// Start the writer thread; connection records to the file at `records` if given
    /// (created, or truncated).
    pub fn with_records(records: Option<&std::path::Path>) -> crate::out::Result<Stdout> {
        let records = match records {
            Some(path) => {
                let file = std::fs::File::create(path).map_err(|e| {
                    crate::err!(Usage, "--connection-records {}: {e}", path.display())
                })?;
                Some(Mutex::new(RecordsFile {
                    file,
                    path: path.display().to_string(),
                    lines: Vec::new(),
                    held: false,
                    error: None,
                }))
            }
            None => None,
        };
        let queue = Arc::new(Queue::default());
        let q = queue.clone();
        let writer = std::thread::Builder::new()
            .name("record-writer".into())
            .spawn(move || write_queue(&q))
            .ok();
        // Without a writer thread, records are written directly.
        queue.state.lock().unwrap_or_else(|p| p.into_inner()).closed = writer.is_none();
        Ok(Stdout {
            queue,
            writer: Mutex::new(writer),
            records,
        })
    }

    fn records_file(&self) -> Option<std::sync::MutexGuard<'_, RecordsFile>> {
        self.records
            .as_ref()
            .map(|r| r.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Why writing the connection records failed, if it did.
    pub fn records_error(&self) -> Option<String> {
        self.records_file().and_then(|mut f| {
            f.write_out();
            f.error.clone()
        })
    }

    /// Write what is queued now, then keep every later record queued and unwritten until
    /// `flush_held` or `finish`.
    pub fn hold(&self) {
        if let Some(mut f) = self.records_file() {
            f.write_out();
            f.held = true;
        }
        let mut st = self.write_queued();
        st.held = true;
    }

    /// Everything queued written, in order, on this thread (after any batch the writer is
    /// writing); the queue's lock is still held on return.
    fn write_queued(&self) -> std::sync::MutexGuard<'_, QueueState> {
        let mut st = self.queue.state.lock().unwrap_or_else(|p| p.into_inner());
        while st.writing {
            st = self.queue.space.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if !st.lines.is_empty() {
            write_stdout(&std::mem::take(&mut st.lines));
        }
        st
    }

    fn push(&self, line: Vec<u8>) {
        let mut st = self.queue.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.closed {
            drop(st);
            return write_stdout(&line);
        }
        if st.held {
            st.lines.extend_from_slice(&line);
            if st.lines.len() > MAX_QUEUED_BYTES {
                let t0 = monotonic_ns();
                write_stdout(&std::mem::take(&mut st.lines));
                let spent = (monotonic_ns() - t0).max(0) as u64;
                self.queue.blocked_ns.fetch_add(spent, Ordering::Relaxed);
            }
            return;
        }
        if st.lines.len() + line.len() > MAX_QUEUED_BYTES && !st.lines.is_empty() {
            let t0 = monotonic_ns();
            while st.lines.len() + line.len() > MAX_QUEUED_BYTES && !st.lines.is_empty() {
                st = self.queue.space.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            let waited = (monotonic_ns() - t0).max(0) as u64;
            self.queue.blocked_ns.fetch_add(waited, Ordering::Relaxed);
        }
        st.lines.extend_from_slice(&line);
        self.queue.ready.notify_one();
    }

    /// Write everything queued and stop the writer (later records are written directly).
    pub fn finish(&self) {
        if let Some(mut f) = self.records_file() {
            f.held = false;
            f.write_out();
        }
        {
            let mut st = self.queue.state.lock().unwrap_or_else(|p| p.into_inner());
            st.closed = true;
            st.held = false;
            self.queue.ready.notify_one();
        }
        let handle = self.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

impl Drop for Stdout {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The writer thread: take whatever is queued, write it in one go, until closed and empty.
fn write_queue(q: &Queue) {
    loop {
        let batch = {
            let mut st = q.state.lock().unwrap_or_else(|p| p.into_inner());
            while (st.lines.is_empty() || st.held) && !st.closed {
                st = q.ready.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.lines.is_empty() {
                return;
            }
            st.writing = true;
            std::mem::take(&mut st.lines)
        };
        q.space.notify_all();
        write_stdout(&batch);
        q.state.lock().unwrap_or_else(|p| p.into_inner()).writing = false;
        q.space.notify_all();
    }
}

/// Whole lines to stdout; a closed pipe means the reader is gone, nothing useful is left.
fn write_stdout(text: &[u8]) {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    if lock.write_all(text).is_err() {
        std::process::exit(141);
    }
    let _ = lock.flush();
}

impl Sink for Stdout {
    fn record(&self, record: &Value) {
        if let Ok(mut text) = serde_json::to_vec(record) {
            text.push(b'\n');
            self.push(text);
        }
    }
    fn connection(&self, record: &Value, events: Option<&[Event]>) {
        let Some(text) = line_with_events(record, events) else {
            return;
        };
        if record["type"] == "connection" {
            if let Some(mut f) = self.records_file() {
                f.lines.extend_from_slice(&text);
                if !f.held || f.lines.len() > MAX_QUEUED_BYTES {
                    f.write_out();
                }
                return;
            }
        }
        self.push(text);
    }
    fn blocked_ns(&self) -> u64 {
        self.queue.blocked_ns.load(Ordering::Relaxed)
    }
    fn flush_held(&self) {
        if let Some(mut f) = self.records_file() {
            f.write_out();
        }
        drop(self.write_queued());
    }
}

/// A connection record as one JSON line, with its events appended as an `events` array
/// when given, serialized straight from the event structs (no intermediate JSON values).
pub fn line_with_events(record: &Value, events: Option<&[Event]>) -> Option<Vec<u8>> {
    let mut text = serde_json::to_vec(record).ok()?;
    if let Some(events) = events {
        if text.last() == Some(&b'}') {
            text.pop();
            if text.len() > 1 {
                text.push(b',');
            }
            text.extend_from_slice(b"\"events\":");
            serde_json::to_writer(&mut text, events).ok()?;
            text.push(b'}');
        }
    }
    text.push(b'\n');
    Some(text)
}

/// A sink that keeps records in memory, events included, for tests and the contract suite.
#[derive(Default)]
pub struct Memory(pub Mutex<Vec<Value>>);

impl Memory {
    pub fn records(&self) -> Vec<Value> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Sink for Memory {
    fn record(&self, record: &Value) {
        if let Ok(mut v) = self.0.lock() {
            v.push(record.clone());
        }
    }
    fn connection(&self, record: &Value, events: Option<&[Event]>) {
        let mut r = record.clone();
        if let Some(ev) = events {
            r["events"] = serde_json::to_value(ev).unwrap_or(Value::Null);
        }
        self.record(&r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_follow_record_headers() {
        let mut r = Recorder::new(true);
        // ServerHello record (22, 1210 bytes) then an encrypted record of 2042 bytes.
        r.on_message(Dir::Sent, Message::RecordHeader(&[22, 3, 3, 0x04, 0xba]));
        r.on_message(Dir::Sent, Message::Handshake(&[2, 0, 4, 0xb6]));
        r.on_message(Dir::Sent, Message::RecordHeader(&[23, 3, 3, 0x07, 0xfa]));
        r.on_message(Dir::Sent, Message::InnerContentType(22));
        r.on_message(Dir::Sent, Message::Handshake(&[11, 0, 7, 0xe9]));
        r.on_message(Dir::Recv, Message::RecordHeader(&[21, 3, 3, 0, 19]));
        assert_eq!(r.record_bytes, [5 + 1210 + 5 + 2042, 5 + 19]);
        assert_eq!(r.records, [2, 1]);
        let hs: Vec<_> = r.events.iter().filter(|e| e.ev == "handshake").collect();
        assert_eq!(hs[0].msg, Some("server_hello"));
        assert_eq!(hs[0].offset_end, Some(1215));
        assert_eq!(hs[1].msg, Some("certificate"));
        assert_eq!(hs[1].offset_end, Some(1215 + 2047));
        r.on_io(Dir::Sent, 0, 4096);
        assert_eq!(r.io_bytes, [4096, 0]);
    }

    #[test]
    fn sent_events_keep_this_sides_records_and_count_both_ways() {
        let mut all = Recorder::for_events(Events::All);
        let mut sent = Recorder::for_events(Events::Sent);
        for r in [&mut all, &mut sent] {
            r.on_message(Dir::Recv, Message::RecordHeader(&[22, 3, 3, 0, 200]));
            r.on_message(Dir::Recv, Message::Handshake(&[1, 0, 0, 196]));
            r.on_io(Dir::Recv, 0, 205);
            r.on_message(Dir::Sent, Message::RecordHeader(&[22, 3, 3, 0x04, 0xba]));
            r.on_message(Dir::Sent, Message::Handshake(&[2, 0, 4, 0xb6]));
            r.on_io(Dir::Sent, 0, 1215);
        }
        assert_eq!(all.events.len(), 6);
        let kept: Vec<_> = sent.events.iter().map(|e| (e.ev, e.offset_end)).collect();
        assert_eq!(
            kept,
            [
                ("record", Some(1215)),
                ("handshake", Some(1215)),
                ("io", Some(1215))
            ]
        );
        assert!(sent.events.iter().all(|e| e.dir == "sent"));
        assert_eq!(
            (sent.record_bytes, sent.records, sent.io_bytes),
            (all.record_bytes, all.records, all.io_bytes)
        );
    }

    #[test]
    fn events_off_still_counts_bytes() {
        let mut r = Recorder::default();
        r.on_message(Dir::Recv, Message::RecordHeader(&[22, 3, 3, 0, 100]));
        assert_eq!(r.record_bytes, [0, 105]);
        assert!(r.events.is_empty());
    }

    #[test]
    fn events_are_bounded_but_counters_are_not() {
        let mut r = Recorder {
            max_events: 10,
            ..Recorder::new(true)
        };
        for _ in 0..100 {
            r.on_message(Dir::Recv, Message::RecordHeader(&[23, 3, 3, 0, 1]));
            r.on_io(Dir::Recv, 0, 6);
        }
        assert_eq!(r.events.len(), 10);
        assert_eq!(r.events_dropped, 190);
        assert_eq!(
            (r.record_bytes[1], r.records[1], r.io_bytes[1]),
            (600, 100, 600)
        );
        let mut out = json!({});
        r.add_counters(&mut out, true);
        assert_eq!(out["events_dropped"], 190);
        assert_eq!(out["record_bytes_received"], 600);
    }

    #[test]
    fn short_or_empty_messages_are_ignored() {
        let mut r = Recorder::new(true);
        r.on_message(Dir::Recv, Message::RecordHeader(&[22, 3, 3]));
        r.on_message(Dir::Recv, Message::Handshake(&[]));
        r.on_message(Dir::Recv, Message::Alert(&[2]));
        assert!(r.events.is_empty());
        assert_eq!(r.record_bytes, [0, 0]);
    }

    #[test]
    fn record_headers_are_found_in_bytes_given_in_any_pieces() {
        // A ClientHello record of 3 bytes, a CCS of 1, an application record of 300.
        let mut stream = vec![22, 3, 1, 0, 3, 1, 2, 3, 20, 3, 3, 0, 1, 1, 23, 3, 3, 1, 44];
        stream.extend(vec![0u8; 300]);
        for piece in [1, 2, 4, 7, 64, 1000] {
            let mut r = Recorder::new(true);
            r.scan_wire();
            for chunk in stream.chunks(piece) {
                r.scan(Dir::Sent, chunk);
            }
            let kinds: Vec<_> = r
                .events
                .iter()
                .map(|e| (e.content_type.unwrap(), e.offset_end.unwrap()))
                .collect();
            assert_eq!(
                kinds,
                [
                    ("handshake", 8),
                    ("change_cipher_spec", 14),
                    ("application_data", 319)
                ],
                "pieces of {piece}"
            );
            assert_eq!(r.records[0], 3);
        }
        // Without scan_wire nothing is read off the bytes.
        let mut r = Recorder::new(true);
        r.scan(Dir::Sent, &stream);
        assert!(r.events.is_empty());
    }
}
