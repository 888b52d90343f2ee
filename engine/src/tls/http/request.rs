//! The one request the server answers after a handshake, parsed from peer bytes as they
//! arrive: pqlab's `GET <n>\n`, or an HTTP/1.x GET head (curl, browsers). The parser keeps
//! at most `MAX_HEAD` bytes, scans each byte once, and refuses anything else with a clear
//! error (kind peer).

use crate::out::Result;

/// Longest request head kept: a request must be complete within this many bytes.
pub const MAX_HEAD: usize = 16 * 1024;

#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET <n>\n`: send exactly n bytes.
    Size(u64),
    /// An HTTP/1.x GET; size when the path is `/<n>`.
    Http { path: String, size: Option<u64> },
    /// `PUSH <n>\n` (bulk transfer): the client sends n pattern bytes next.
    Push(u64),
    /// `PULL <n>\n` (bulk transfer): send n pattern bytes.
    Pull(u64),
    /// `ECHO <n>\n` (bulk transfer, tls_bench's loop): the client sends n pattern bytes a
    /// record at a time and waits for each to come back before the next.
    Echo(u64),
}

/// The bulk-transfer pattern: byte i of a transfer is `pattern_byte(i)`, so a lost,
/// repeated or reordered piece is caught, not only a changed one.
pub fn pattern_byte(i: u64) -> u8 {
    (i % PERIOD as u64) as u8
}

/// The pattern's period (a prime, so no record or segment size lines up with it).
const PERIOD: usize = 251;
/// Bytes of pattern handled per copy or comparison: whole periods, so every piece starts at
/// the same phase the last one left.
const PIECE: usize = PERIOD * 64;

/// The pattern from offset 0, one period longer than a piece: every piece of the pattern,
/// whatever its phase, is a slice of it. Filling and checking are then memcpy and memcmp;
/// byte by byte (a 64-bit division per byte) they ran at 100-200 MB/s on the development
/// machine and were what bulk transfers measured instead of the TLS stack.
fn table() -> &'static [u8] {
    static TABLE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| (0..(PIECE + PERIOD) as u64).map(pattern_byte).collect())
}

/// Fill `buf` with the pattern bytes starting at stream offset `from`.
pub fn fill_pattern(buf: &mut [u8], from: u64) {
    let phase = (from % PERIOD as u64) as usize;
    for piece in buf.chunks_mut(PIECE) {
        piece.copy_from_slice(&table()[phase..phase + piece.len()]);
    }
}

/// Whether `buf` holds the pattern bytes starting at stream offset `from`.
pub fn is_pattern(buf: &[u8], from: u64) -> bool {
    let phase = (from % PERIOD as u64) as usize;
    buf.chunks(PIECE)
        .all(|piece| piece == &table()[phase..phase + piece.len()])
}

/// Incremental parser for one request.
pub struct RequestParser {
    data: Vec<u8>,
    /// Largest n accepted (--max-response-bytes).
    max: u64,
    /// End of the first line, once seen.
    line_end: Option<usize>,
    /// Bytes already searched for the first line's end / the end of the head.
    scanned: usize,
}

impl RequestParser {
    pub fn new(max_response_bytes: u64) -> RequestParser {
        RequestParser {
            data: Vec::new(),
            max: max_response_bytes,
            line_end: None,
            scanned: 0,
        }
    }

    /// Bytes received after a complete `GET`/`PUSH`/`PULL`/`ECHO` line (the start of a pushed
    /// body that arrived with the request).
    pub fn rest(&self) -> &[u8] {
        match self.line_end {
            Some(e) if e < self.data.len() => &self.data[e + 1..],
            _ => &[],
        }
    }

    /// Nothing received yet.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Bytes kept (never more than MAX_HEAD).
    #[cfg(test)]
    pub fn buffered(&self) -> usize {
        self.data.len()
    }

    /// Take the next bytes from the peer: `Ok(Some(_))` once a request is complete,
    /// `Ok(None)` while more is needed, an error for a request this server refuses.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Option<Request>> {
        let room = MAX_HEAD - self.data.len();
        let take = bytes.len().min(room);
        self.data.extend_from_slice(&bytes[..take]);
        if let Some(r) = self.parse()? {
            return Ok(Some(r));
        }
        if self.data.len() >= MAX_HEAD {
            crate::bail!(Peer, "request head longer than 16 KiB");
        }
        Ok(None)
    }

    fn parse(&mut self) -> Result<Option<Request>> {
        let line_end = match self.line_end {
            Some(e) => e,
            None => match self.data[self.scanned..].iter().position(|&b| b == b'\n') {
                Some(p) => {
                    let e = self.scanned + p;
                    self.line_end = Some(e);
                    self.scanned = e;
                    e
                }
                None => {
                    self.scanned = self.data.len();
                    return Ok(None);
                }
            },
        };
        let line = String::from_utf8_lossy(&self.data[..line_end])
            .trim()
            .to_string();
        let is_http = line.starts_with("GET /") && line.contains(" HTTP/");
        for (verb, make) in [
            ("PUSH ", Request::Push as fn(u64) -> Request),
            ("PULL ", Request::Pull as fn(u64) -> Request),
            ("ECHO ", Request::Echo as fn(u64) -> Request),
        ] {
            if let Some(arg) = line.strip_prefix(verb) {
                let n = arg.trim().parse::<u64>().map_err(|_| {
                    crate::err!(Peer, "bad request {:?}; expected `{verb}<n>`", clip(&line))
                })?;
                if n > self.max {
                    crate::bail!(
                        Peer,
                        "request for {n} bytes exceeds --max-response-bytes {}",
                        self.max
                    );
                }
                return Ok(Some(make(n)));
            }
        }
        if !is_http {
            let n = line
                .strip_prefix("GET ")
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    crate::err!(Peer, "bad request {:?}; expected `GET <n>`", clip(&line))
                })?;
            if n > self.max {
                crate::bail!(
                    Peer,
                    "request for {n} bytes exceeds --max-response-bytes {}",
                    self.max
                );
            }
            return Ok(Some(Request::Size(n)));
        }
        // The head ends at an empty line: "\r\n\r\n" or "\n\n". Search only what is new
        // (backing up 3 bytes for a terminator split across reads).
        let from = self.scanned.saturating_sub(3);
        let tail = &self.data[from..];
        let done =
            tail.windows(4).any(|w| w == b"\r\n\r\n") || tail.windows(2).any(|w| w == b"\n\n");
        self.scanned = self.data.len();
        if !done {
            return Ok(None);
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let size = path.trim_start_matches('/').parse::<u64>().ok();
        if let Some(n) = size {
            if n > self.max {
                crate::bail!(
                    Peer,
                    "HTTP request for {n} bytes exceeds --max-response-bytes {}",
                    self.max
                );
            }
        }
        Ok(Some(Request::Http { path, size }))
    }
}

/// A peer's text, shortened for an error message.
fn clip(s: &str) -> String {
    if s.chars().count() <= 80 {
        return s.to_string();
    }
    let mut t: String = s.chars().take(80).collect();
    t.push_str("...");
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::out::Error;

    fn parse_all(chunks: &[&[u8]]) -> Result<Option<Request>> {
        let mut p = RequestParser::new(1 << 30);
        for c in chunks {
            if let Some(r) = p.push(c)? {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    #[test]
    fn pqlab_requests() {
        assert_eq!(
            parse_all(&[b"GET 100\n"]).unwrap(),
            Some(Request::Size(100))
        );
        assert_eq!(
            parse_all(&[b"GE", b"T 1", b"2\r", b"\n"]).unwrap(),
            Some(Request::Size(12))
        );
        assert_eq!(parse_all(&[b"GET 1"]).unwrap(), None);
        let mut p = RequestParser::new(10);
        assert!(matches!(p.push(b"GET 11\n"), Err(Error::Peer(m)) if m.contains("exceeds")));
        assert!(
            matches!(parse_all(&[b"PUT 1\n"]), Err(Error::Peer(m)) if m.contains("bad request"))
        );
        assert!(parse_all(&[b"GET -1\n"]).is_err());
        assert!(parse_all(&[b"GET 100000000000000000000000\n"]).is_err());
    }

    #[test]
    fn bulk_requests_and_what_came_with_them() {
        let mut p = RequestParser::new(1 << 20);
        assert_eq!(p.push(b"PUSH 10\nabc").unwrap(), Some(Request::Push(10)));
        assert_eq!(p.rest(), b"abc");
        assert_eq!(parse_all(&[b"PULL 7\n"]).unwrap(), Some(Request::Pull(7)));
        assert_eq!(parse_all(&[b"ECHO 9\n"]).unwrap(), Some(Request::Echo(9)));
        assert!(parse_all(&[b"ECHO -1\n"]).is_err());
        assert!(parse_all(&[b"PUSH x\n"]).is_err());
        let mut p = RequestParser::new(5);
        assert!(p.push(b"PULL 6\n").is_err());
        let mut buf = [0u8; 600];
        fill_pattern(&mut buf, 300);
        assert!(is_pattern(&buf, 300));
        assert!(!is_pattern(&buf, 301));
        assert!(!is_pattern(&buf[1..], 300));
    }

    #[test]
    fn the_pattern_is_byte_i_mod_251_at_every_offset_and_length() {
        for from in [0u64, 1, 250, 251, 16_063, 16_064, (1 << 33) + 7] {
            for len in [0usize, 1, 250, 251, 16_064, 16_065, 40_000] {
                let mut buf = vec![0xAAu8; len];
                fill_pattern(&mut buf, from);
                for (k, b) in buf.iter().enumerate() {
                    assert_eq!(
                        *b,
                        pattern_byte(from + k as u64),
                        "from {from} len {len} at {k}"
                    );
                }
                assert!(is_pattern(&buf, from));
                if len > 0 {
                    // One byte wrong anywhere, the last piece included, is caught.
                    for at in [0, len / 2, len - 1] {
                        let mut bad = buf.clone();
                        bad[at] ^= 1;
                        assert!(!is_pattern(&bad, from), "from {from} len {len} at {at}");
                    }
                    assert!(!is_pattern(&buf, from + 1));
                }
            }
        }
    }

    #[test]
    fn http_heads() {
        assert_eq!(
            parse_all(&[b"GET /1000 HTTP/1.1\r\nHost: x\r\n", b"\r\n"]).unwrap(),
            Some(Request::Http {
                path: "/1000".into(),
                size: Some(1000)
            })
        );
        // Terminator split across reads.
        assert_eq!(
            parse_all(&[b"GET / HTTP/1.0\r\n\r", b"\n"]).unwrap(),
            Some(Request::Http {
                path: "/".into(),
                size: None
            })
        );
        assert_eq!(
            parse_all(&[b"GET /x HTTP/1.1\r\nHost: y\r\n"]).unwrap(),
            None
        );
        assert!(parse_all(&[b"GET /9999999999999 HTTP/1.1\r\n\r\n"]).is_err());
    }

    #[test]
    fn heads_are_bounded() {
        let mut p = RequestParser::new(1 << 30);
        assert_eq!(p.push(b"GET / HTTP/1.1\r\n").unwrap(), None);
        let filler = vec![b'a'; 1000];
        let mut err = None;
        for _ in 0..100 {
            match p.push(&filler) {
                Ok(None) => assert!(p.buffered() <= MAX_HEAD),
                Ok(Some(r)) => panic!("{r:?}"),
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        assert!(matches!(err, Some(Error::Peer(m)) if m.contains("16 KiB")));
        assert!(p.buffered() <= MAX_HEAD);
        // A line without an end is refused at the same bound.
        let mut p = RequestParser::new(1 << 30);
        let long = vec![b'x'; MAX_HEAD + 5];
        assert!(p.push(&long).is_err());
        assert_eq!(p.buffered(), MAX_HEAD);
    }

    mod properties {
        //! Whatever a peer sends, in whatever pieces: no panic, never more than MAX_HEAD
        //! bytes kept, and a refusal is a peer-kind error with a short message.
        use super::super::*;
        use crate::out::Error;
        use proptest::prelude::*;

        const MAX: u64 = 1 << 20;

        fn check_outcome(r: &Result<Option<Request>>) {
            match r {
                Ok(Some(
                    Request::Size(n) | Request::Push(n) | Request::Pull(n) | Request::Echo(n),
                )) => {
                    assert!(*n <= MAX)
                }
                Ok(Some(Request::Http { size, path })) => {
                    assert!(size.is_none_or(|n| n <= MAX));
                    assert!(path.len() <= MAX_HEAD);
                }
                Ok(None) => {}
                Err(Error::Peer(m)) => assert!(!m.is_empty() && m.len() < 300, "{m}"),
                Err(e) => panic!("not a peer error: {e:?}"),
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn arbitrary_bytes_never_panic_or_grow(
                chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..3000), 0..16)
            ) {
                let mut p = RequestParser::new(MAX);
                for c in &chunks {
                    let r = p.push(c);
                    prop_assert!(p.buffered() <= MAX_HEAD);
                    check_outcome(&r);
                    if !matches!(r, Ok(None)) {
                        break;
                    }
                }
            }

            #[test]
            fn request_like_bytes_never_panic(
                chunks in prop::collection::vec(
                    "(GET|GET /|PUT)?[ 0-9/a-zA-Z.:-]{0,40}(HTTP/1\\.[01])?(\r?\n){0,2}", 0..40)
            ) {
                let mut p = RequestParser::new(MAX);
                for c in &chunks {
                    let r = p.push(c.as_bytes());
                    prop_assert!(p.buffered() <= MAX_HEAD);
                    check_outcome(&r);
                    if !matches!(r, Ok(None)) {
                        break;
                    }
                }
            }

            #[test]
            fn long_heads_are_refused_at_the_bound(
                http in any::<bool>(),
                sizes in prop::collection::vec(1usize..5000, 1..40),
            ) {
                // A first line that never ends, or an HTTP head whose blank line never comes.
                let mut stream: Vec<u8> = if http { b"GET /1 HTTP/1.1\r\n".to_vec() } else { b"GET ".to_vec() };
                let filler: &[u8] = if http { b"X-Pad: aaaaaaaaaaaaaaaaaaaa\r\n" } else { b"1234567890" };
                while stream.len() < 4 * MAX_HEAD {
                    stream.extend_from_slice(filler);
                }
                let mut p = RequestParser::new(MAX);
                let mut at = 0;
                for n in sizes {
                    let end = (at + n).min(stream.len());
                    let r = p.push(&stream[at..end]);
                    at = end;
                    prop_assert!(p.buffered() <= MAX_HEAD);
                    if at < MAX_HEAD {
                        prop_assert!(matches!(r, Ok(None)), "{:?} at {}", r, at);
                    } else {
                        prop_assert!(matches!(r, Err(Error::Peer(ref m)) if m.contains("16 KiB")), "{:?}", r);
                        break;
                    }
                }
            }

            #[test]
            fn pqlab_requests_parse_in_any_pieces(n in 0u64..2 * MAX, cuts in prop::collection::vec(0usize..24, 0..6)) {
                let text = format!("GET {n}\n");
                let mut p = RequestParser::new(MAX);
                let mut at = 0;
                let mut result = Ok(None);
                let mut points: Vec<usize> = cuts.iter().map(|c| c % text.len()).collect();
                points.sort_unstable();
                points.push(text.len());
                for end in points {
                    if end < at { continue; }
                    result = p.push(&text.as_bytes()[at..end]);
                    at = end;
                    if !matches!(result, Ok(None)) { break; }
                }
                if n <= MAX {
                    prop_assert_eq!(result.ok().flatten(), Some(Request::Size(n)));
                } else {
                    prop_assert!(matches!(result, Err(Error::Peer(m)) if m.contains("exceeds")));
                }
            }

            #[test]
            fn http_heads_parse_in_any_pieces(
                n in 0u64..MAX,
                headers in prop::collection::vec("[A-Za-z-]{1,12}: [ -~]{0,30}", 0..8),
                split in 0usize..400,
            ) {
                let mut text = format!("GET /{n} HTTP/1.1\r\n");
                for h in &headers { text.push_str(h); text.push_str("\r\n"); }
                text.push_str("\r\n");
                let cut = split % text.len();
                let mut p = RequestParser::new(MAX);
                let first = p.push(&text.as_bytes()[..cut]).unwrap();
                let r = match first { Some(r) => r, None => p.push(&text.as_bytes()[cut..]).unwrap().unwrap() };
                prop_assert_eq!(r, Request::Http { path: format!("/{n}"), size: Some(n) });
            }
        }
    }
}
