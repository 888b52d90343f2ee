//! JSON-lines output and the engine's typed errors: one record per line on stdout; a
//! failure ends the run with one `error` record (kind and message) and the kind's exit code
//! (docs/engine-protocol.md).

use serde_json::Value;
use std::io::Write;

/// Protocol version of the JSON lines; bump when a record changes incompatibly.
/// 2: typed error records and exit codes, `negotiated.*_code`, `info.tls_stacks`,
/// `info.build_id`, `--stack`.
pub const PROTOCOL: u32 = 2;

/// What went wrong, by who is to blame; each kind has its own exit code so the lab can tell
/// a bad argument from a broken library, a failed check or a misbehaving peer without
/// parsing messages. Exit 4 is the lab's own (missing privileges) and never used here.
#[derive(Debug)]
pub enum Error {
    /// Bad arguments: unknown names, values out of range, contradicting options (exit 2).
    Usage(String),
    /// The crypto or TLS library failed or refused an operation (exit 3).
    Library(String),
    /// A measured operation failed its verification: wrong group or signature scheme
    /// negotiated, certificate or signature not verified, secrets that differ, response
    /// bytes that are not what was asked for (exit 5). No numbers are reported for it.
    Check(String),
    /// Files, sockets and timeouts (exit 6).
    Io(String),
    /// The peer misbehaved or went away: alerts, resets, protocol violations (exit 7).
    Peer(String),
}

impl Error {
    /// The kind's name as written in error records.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Usage(_) => "usage",
            Error::Library(_) => "library",
            Error::Check(_) => "check",
            Error::Io(_) => "io",
            Error::Peer(_) => "peer",
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => 2,
            Error::Library(_) => 3,
            Error::Check(_) => 5,
            Error::Io(_) => 6,
            Error::Peer(_) => 7,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Error::Usage(m) | Error::Library(m) | Error::Check(m) | Error::Io(m) => m,
            Error::Peer(m) => m,
        }
    }

    /// The same error (same kind) with `context: ` in front of its message.
    pub fn context(self, context: impl std::fmt::Display) -> Error {
        let add = |m: String| format!("{context}: {m}");
        match self {
            Error::Usage(m) => Error::Usage(add(m)),
            Error::Library(m) => Error::Library(add(m)),
            Error::Check(m) => Error::Check(add(m)),
            Error::Io(m) => Error::Io(add(m)),
            Error::Peer(m) => Error::Peer(add(m)),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// Files and sockets: an I/O error. Callers that know better (a peer's reset, a timeout
/// on the peer) classify the error themselves before it gets here.
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}

/// OpenSSL's error queue: the library refused or failed.
impl From<openssl::error::ErrorStack> for Error {
    fn from(e: openssl::error::ErrorStack) -> Self {
        let text = e.to_string();
        if text.is_empty() {
            Error::Library("OpenSSL failed without an error on its queue".into())
        } else {
            Error::Library(format!("OpenSSL: {text}"))
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Build an `Error` of a kind from a format string: `err!(Usage, "--x {v} is too big")`.
#[macro_export]
macro_rules! err {
    ($kind:ident, $($arg:tt)*) => { $crate::out::Error::$kind(format!($($arg)*)) };
}

/// Return an `Err` of a kind from a format string: `bail!(Check, "wrong group {g}")`.
#[macro_export]
macro_rules! bail {
    ($kind:ident, $($arg:tt)*) => { return Err($crate::err!($kind, $($arg)*)) };
}

/// Write one record as a JSON line and flush, so a crash loses nothing already emitted.
pub fn emit(v: &Value) {
    // Serialized first, then written whole: one write(2) per record instead of one per
    // line-buffer fill, and no other thread's record can land in the middle.
    let mut text = match serde_json::to_vec(v) {
        Ok(t) => t,
        Err(_) => return,
    };
    text.push(b'\n');
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    // A closed pipe means the reader is gone; nothing useful left to do.
    if lock.write_all(&text).is_err() {
        std::process::exit(141);
    }
    let _ = lock.flush();
}

/// The error record that ends a failed run.
pub fn error_record(e: &Error) -> Value {
    serde_json::json!({"type": "error", "kind": e.kind(), "message": e.message()})
}

static PROGRAM: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// The running program's name, for error lines (set once by `run`).
pub fn set_program(name: &'static str) {
    let _ = PROGRAM.set(name);
}

/// Report an error record and exit with the kind's code.
pub fn fail(e: &Error) -> ! {
    emit(&error_record(e));
    let program = PROGRAM.get().copied().unwrap_or("pqlab-engine");
    eprintln!("{program}: error: {}", e.message());
    std::process::exit(e.exit_code());
}

/// A command line clap refused: an error record (kind usage) with clap's first message line,
/// clap's full message on stderr, exit 2. Help and version requests print and exit 0.
pub fn fail_arguments(e: clap::Error) -> ! {
    use clap::error::ErrorKind as Clap;
    if matches!(e.kind(), Clap::DisplayHelp | Clap::DisplayVersion) {
        e.exit();
    }
    let message = argument_message(&e);
    emit(&error_record(&Error::Usage(message)));
    let _ = e.print();
    std::process::exit(2);
}

/// The one line that says what clap refused ("invalid value '1e99' for '--warmup <WARMUP>':
/// ..."), without clap's "error: " prefix and usage hints.
fn argument_message(e: &clap::Error) -> String {
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return "a subcommand is required (see --help)".into();
    }
    let text = e.render().to_string();
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("invalid arguments");
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_distinct_exit_codes_and_names() {
        let all = [
            Error::Usage(String::new()),
            Error::Library(String::new()),
            Error::Check(String::new()),
            Error::Io(String::new()),
            Error::Peer(String::new()),
        ];
        let codes: Vec<i32> = all.iter().map(Error::exit_code).collect();
        assert_eq!(codes, [2, 3, 5, 6, 7]);
        let names: Vec<&str> = all.iter().map(Error::kind).collect();
        assert_eq!(names, ["usage", "library", "check", "io", "peer"]);
    }

    #[test]
    fn context_keeps_the_kind() {
        let e = Error::Check("group X25519".into()).context("connection 3");
        assert!(matches!(&e, Error::Check(m) if m == "connection 3: group X25519"));
        let record = error_record(&e);
        assert_eq!(record["kind"], "check");
        assert_eq!(record["message"], "connection 3: group X25519");
    }

    #[test]
    fn conversions_are_deliberate() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        assert!(matches!(Error::from(io), Error::Io(_)));
        let stack = openssl::error::ErrorStack::get();
        assert!(matches!(Error::from(stack), Error::Library(_)));
    }

    #[test]
    fn clap_messages_keep_the_first_line() {
        use clap::{Arg, Command};
        let cmd = Command::new("t").arg(
            Arg::new("warmup")
                .long("warmup")
                .value_parser(clap::value_parser!(u64)),
        );
        let e = cmd
            .try_get_matches_from(["t", "--warmup", "100000000000000000000"])
            .unwrap_err();
        let m = argument_message(&e);
        assert!(
            m.starts_with("invalid value '100000000000000000000' for '--warmup <warmup>'"),
            "{m}"
        );
        assert!(m.contains("number too large"), "{m}");
        assert!(!m.contains('\n'));
    }
}
