//! The client's side of one HTTP/1.1 exchange (`tls client --request-path`): the request
//! head it sends, and a reader that takes the server's response apart from bytes as they
//! arrive, to know where it ends (Content-Length, chunked coding, or the connection's close)
//! and so when its last byte came. Bodies are counted, never kept; the head and each chunk
//! line are bounded, so a peer cannot make it grow.

use crate::out::Result;

/// Longest response head kept (status line and headers).
pub const MAX_HEAD: usize = 64 * 1024;
/// Longest chunk-size line or trailer line of a chunked body.
const MAX_LINE: usize = 4096;
/// Longest request path accepted.
pub const MAX_PATH: usize = 8192;

/// A request path as sent: `/` and printable ASCII, no spaces.
pub fn check_path(path: &str) -> Result<()> {
    if !path.starts_with('/') {
        crate::bail!(Usage, "--request-path {path:?} must start with /");
    }
    if path.len() > MAX_PATH {
        crate::bail!(Usage, "--request-path is at most {MAX_PATH} bytes");
    }
    if let Some(c) = path.chars().find(|c| !c.is_ascii_graphic()) {
        crate::bail!(
            Usage,
            "--request-path {path:?} holds {c:?}; write it percent-encoded (no spaces or control characters)"
        );
    }
    Ok(())
}

/// The request head: GET `path` of `host` (with `port` unless it is 443), asking the server
/// to close the connection after its response.
pub fn request_head(path: &str, host: &str, port: u16) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let authority = if port == 443 {
        host
    } else {
        format!("{host}:{port}")
    };
    format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: pqlab\r\nAccept: */*\r\n\
         Connection: close\r\n\r\n"
    )
}

/// How a response body's end is known (RFC 9112 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD-like statuses: 1xx, 204, 304).
    Empty,
    /// Content-Length bytes.
    Length(u64),
    /// Transfer-Encoding: chunked.
    Chunked,
    /// Until the server closes the connection.
    Close,
}

impl Framing {
    pub fn name(self) -> &'static str {
        match self {
            Framing::Empty => "empty",
            Framing::Length(_) => "content-length",
            Framing::Chunked => "chunked",
            Framing::Close => "close",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines after the last chunk, up to an empty line.
    Trailer,
}

/// Reads one response from pieces of bytes. `push` returns true once the response is
/// complete (for `Framing::Close`, only `closed` ends it).
#[derive(Debug)]
pub struct Response {
    head: Vec<u8>,
    /// Status code once the head is in.
    pub status: Option<u16>,
    pub framing: Option<Framing>,
    /// Bytes of the final head (status line, headers, the empty line).
    pub head_bytes: u64,
    /// Body bytes (for chunked: the chunks' data, without the coding).
    pub body_bytes: u64,
    /// Every byte of the response, interim (1xx) heads included.
    pub total_bytes: u64,
    chunk: Chunk,
    line: Vec<u8>,
    done: bool,
}

impl Default for Response {
    fn default() -> Self {
        Response::new()
    }
}

impl Response {
    pub fn new() -> Response {
        Response {
            head: Vec::new(),
            status: None,
            framing: None,
            head_bytes: 0,
            body_bytes: 0,
            total_bytes: 0,
            chunk: Chunk::Size,
            line: Vec::new(),
            done: false,
        }
    }

    pub fn is_complete(&self) -> bool {
        self.done
    }

    /// Take the next bytes; true once the response is complete. Bytes after its end are a
    /// peer error (the request asked for one response and `Connection: close`).
    pub fn push(&mut self, mut data: &[u8]) -> Result<bool> {
        // Each pass consumes at least one byte or returns.
        while !data.is_empty() {
            if self.done {
                crate::bail!(
                    Peer,
                    "the server sent {} bytes after the end of its HTTP response",
                    data.len()
                );
            }
            let used = if self.framing.is_none() {
                self.take_head(data)?
            } else {
                self.take_body(data)?
            };
            self.total_bytes += used as u64;
            data = &data[used..];
        }
        Ok(self.done)
    }

    /// The server closed the connection: a body that runs to the close ends here; any other
    /// response that is not complete was cut short.
    pub fn closed(&mut self) -> Result<()> {
        match self.framing {
            _ if self.done => Ok(()),
            Some(Framing::Close) => {
                self.done = true;
                Ok(())
            }
            None => crate::bail!(
                Peer,
                "the server closed the connection after {} bytes of an HTTP response head",
                self.head.len()
            ),
            Some(f) => crate::bail!(
                Peer,
                "the server closed the connection in the middle of the response body ({} bytes \
                 received, {})",
                self.body_bytes,
                match f {
                    Framing::Length(n) => format!("Content-Length {n}"),
                    _ => f.name().to_string(),
                }
            ),
        }
    }

    /// Bytes of `data` that belong to the head; parses it once its empty line is in.
    fn take_head(&mut self, data: &[u8]) -> Result<usize> {
        let before = self.head.len();
        // Look for the end of the head in what is new (backing up 3 bytes for a
        // terminator split across pieces).
        let from = before.saturating_sub(3);
        let room = MAX_HEAD + 4 - before;
        self.head.extend_from_slice(&data[..data.len().min(room)]);
        let end = self.head[from..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|p| from + p + 4);
        let Some(end) = end else {
            if self.head.len() > MAX_HEAD {
                crate::bail!(
                    Peer,
                    "the HTTP response head is longer than {MAX_HEAD} bytes"
                );
            }
            return Ok(self.head.len() - before);
        };
        let used = end - before;
        self.head.truncate(end);
        let (status, framing) = parse_head(&self.head)?;
        if (100..200).contains(&status) {
            // An interim response: the real one follows.
            self.head.clear();
            return Ok(used);
        }
        self.status = Some(status);
        self.head_bytes = end as u64;
        self.framing = Some(framing);
        self.done = matches!(framing, Framing::Empty | Framing::Length(0));
        Ok(used)
    }

    fn take_body(&mut self, data: &[u8]) -> Result<usize> {
        match self.framing {
            Some(Framing::Length(n)) => {
                let take = (n - self.body_bytes).min(data.len() as u64);
                self.body_bytes += take;
                self.done = self.body_bytes == n;
                Ok(take as usize)
            }
            Some(Framing::Close) => {
                self.body_bytes += data.len() as u64;
                Ok(data.len())
            }
            _ => self.take_chunked(data),
        }
    }

    fn take_chunked(&mut self, data: &[u8]) -> Result<usize> {
        match self.chunk {
            Chunk::Data(left) => {
                let take = left.min(data.len() as u64);
                self.body_bytes += take;
                self.chunk = if take == left {
                    Chunk::DataEnd
                } else {
                    Chunk::Data(left - take)
                };
                Ok(take as usize)
            }
            Chunk::Size | Chunk::DataEnd | Chunk::Trailer => {
                let (used, line) = self.take_line(data)?;
                if let Some(line) = line {
                    self.chunk_line(&line)?;
                }
                Ok(used)
            }
        }
    }

    /// Bytes up to and including the next LF; the line (without CRLF) once complete.
    fn take_line(&mut self, data: &[u8]) -> Result<(usize, Option<Vec<u8>>)> {
        match data.iter().position(|&b| b == b'\n') {
            Some(p) => {
                self.line.extend_from_slice(&data[..p]);
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.len() > MAX_LINE {
                    crate::bail!(
                        Peer,
                        "a chunked-coding line is longer than {MAX_LINE} bytes"
                    );
                }
                Ok((p + 1, Some(line)))
            }
            None => {
                self.line.extend_from_slice(data);
                if self.line.len() > MAX_LINE {
                    crate::bail!(
                        Peer,
                        "a chunked-coding line is longer than {MAX_LINE} bytes"
                    );
                }
                Ok((data.len(), None))
            }
        }
    }

    fn chunk_line(&mut self, line: &[u8]) -> Result<()> {
        match self.chunk {
            Chunk::DataEnd => {
                if !line.is_empty() {
                    crate::bail!(Peer, "a chunk's data is not followed by CRLF");
                }
                self.chunk = Chunk::Size;
            }
            Chunk::Trailer => {
                if line.is_empty() {
                    self.done = true;
                }
            }
            _ => {
                let text = String::from_utf8_lossy(line);
                let hex = text.split(';').next().unwrap_or("").trim();
                let size = u64::from_str_radix(hex, 16)
                    .map_err(|_| crate::err!(Peer, "bad chunk size line {:?}", clip(&text)))?;
                self.chunk = if size == 0 {
                    Chunk::Trailer
                } else {
                    Chunk::Data(size)
                };
            }
        }
        Ok(())
    }
}

/// Status code and framing of a response head (ending in the empty line).
fn parse_head(head: &[u8]) -> Result<(u16, Framing)> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.split(' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().and_then(|c| c.parse::<u16>().ok());
    let (true, Some(code)) = (version.starts_with("HTTP/1."), code) else {
        crate::bail!(
            Peer,
            "the response does not start with an HTTP/1.x status line: {:?}",
            clip(status_line)
        );
    };
    if !(100..1000).contains(&code) {
        crate::bail!(Peer, "HTTP status {code} is not a status code");
    }
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "transfer-encoding" {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if name == "content-length" {
            let n = value
                .parse::<u64>()
                .map_err(|_| crate::err!(Peer, "bad Content-Length {:?}", clip(value)))?;
            if length.is_some_and(|l| l != n) {
                crate::bail!(Peer, "two different Content-Length headers");
            }
            length = Some(n);
        }
    }
    let framing = if (100..200).contains(&code) || code == 204 || code == 304 {
        Framing::Empty
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::Close
    };
    Ok((code, framing))
}

/// A peer's text, shortened for an error message.
fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pieces: &[&[u8]]) -> Result<Response> {
        let mut r = Response::new();
        for p in pieces {
            r.push(p)?;
        }
        Ok(r)
    }

    #[test]
    fn content_length_bodies_end_at_their_length() {
        let text = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: x\r\n\r\nhello";
        for cut in 1..text.len() {
            let r = read(&[&text[..cut], &text[cut..]]).unwrap();
            assert!(r.is_complete());
            assert_eq!((r.status, r.framing), (Some(200), Some(Framing::Length(5))));
            assert_eq!((r.head_bytes, r.body_bytes), (text.len() as u64 - 5, 5));
            assert_eq!(r.total_bytes, text.len() as u64);
        }
        let mut r = Response::new();
        assert!(!r
            .push(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel")
            .unwrap());
        assert!(r
            .closed()
            .unwrap_err()
            .message()
            .contains("middle of the response"));
        assert!(read(&[b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab"]).is_err());
    }

    #[test]
    fn chunked_bodies_count_their_data() {
        let text = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nWiki\r\n\
                     5\r\npedia\r\n0\r\nTrailer: 1\r\n\r\n";
        for cut in 1..text.len() {
            let r = read(&[&text[..cut], &text[cut..]]).unwrap();
            assert!(r.is_complete(), "cut {cut}");
            assert_eq!(r.body_bytes, 9);
            assert_eq!(r.total_bytes, text.len() as u64);
        }
        assert!(read(&[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]).is_err());
    }

    #[test]
    fn close_delimited_and_empty_bodies() {
        let mut r = read(&[b"HTTP/1.0 200 OK\r\n\r\nabc", b"def"]).unwrap();
        assert!(!r.is_complete());
        r.closed().unwrap();
        assert!(r.is_complete() && r.body_bytes == 6);
        let r = read(&[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"]).unwrap();
        assert_eq!((r.status, r.is_complete()), (Some(204), true));
    }

    #[test]
    fn what_is_not_http_is_a_peer_error() {
        for bad in [
            &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
            b"HTTP/1.1 abc\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        ] {
            assert!(matches!(read(&[bad]), Err(crate::out::Error::Peer(_))));
        }
        let big = vec![b'a'; MAX_HEAD + 10];
        assert!(read(&[&big]).is_err());
        let mut r = Response::new();
        r.push(b"HTTP/1.1 200 OK\r\n").unwrap();
        assert!(r.closed().is_err());
    }

    #[test]
    fn request_heads_and_paths() {
        assert_eq!(
            request_head("/a?b=1", "example.com", 443),
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: pqlab\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n"
        );
        assert!(request_head("/", "::1", 8443).contains("Host: [::1]:8443\r\n"));
        assert!(check_path("/x/y%20z").is_ok());
        for bad in ["x", "/a b", "/a\nb"] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic_or_grow(pieces in prop::collection::vec(
                prop::collection::vec(any::<u8>(), 0..300), 0..20)) {
                let mut r = Response::new();
                for p in &pieces {
                    if r.push(p).is_err() {
                        break;
                    }
                    prop_assert!(r.head.len() <= MAX_HEAD + 4 && r.line.len() <= MAX_LINE + 300);
                }
            }

            #[test]
            fn chunked_bodies_parse_in_any_pieces(
                sizes in prop::collection::vec(1usize..200, 0..6),
                cuts in prop::collection::vec(0usize..64, 0..8)) {
                let mut text = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                for n in &sizes {
                    text.extend(format!("{n:x}\r\n").into_bytes());
                    text.extend(vec![b'x'; *n]);
                    text.extend(b"\r\n");
                }
                text.extend(b"0\r\n\r\n");
                let mut r = Response::new();
                let mut rest = &text[..];
                for c in cuts {
                    let c = c.min(rest.len());
                    r.push(&rest[..c]).unwrap();
                    rest = &rest[c..];
                }
                prop_assert!(r.push(rest).unwrap());
                prop_assert_eq!(r.body_bytes, sizes.iter().sum::<usize>() as u64);
            }
        }
    }
}
