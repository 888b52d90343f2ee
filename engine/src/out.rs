//! JSON-lines output: one record per line on stdout, errors as a final record.

use serde_json::Value;
use std::io::Write;

/// Protocol version of the JSON lines; bump when a record changes incompatibly.
pub const PROTOCOL: u32 = 1;

/// The engine's error: a message meant for the user, one line.
#[derive(Debug)]
pub struct Error(pub String);

impl<T: std::fmt::Display> From<T> for Error {
    fn from(e: T) -> Self {
        Error(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand to build an `Err(Error)` from a format string.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::out::Error(format!($($arg)*))) };
}

/// Write one record as a JSON line and flush, so a crash loses nothing already emitted.
pub fn emit(v: &Value) {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    // A closed pipe means the reader is gone; nothing useful left to do.
    if serde_json::to_writer(&mut lock, v).is_err() || lock.write_all(b"\n").is_err() {
        std::process::exit(141);
    }
    let _ = lock.flush();
}

/// Report an error record and exit non-zero.
pub fn fail(e: &Error) -> ! {
    emit(&serde_json::json!({"type": "error", "message": e.0}));
    eprintln!("pqlab-engine: error: {}", e.0);
    std::process::exit(2);
}
