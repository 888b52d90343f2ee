//! Files the engine writes that hold secrets (private keys, TLS key logs), and how: never
//! through a symbolic link, never into a file someone else made.
//!
//! - `write` / `replace`: the content goes into a new file of a private name in the same
//!   directory (O_CREAT | O_EXCL | O_NOFOLLOW, its mode set on the descriptor), renamed over
//!   the target once complete: a link at the target is replaced, not followed; an existing
//!   file is replaced, never written into; a failed write leaves no half-written file.
//! - `KeyLog` (`--keylog`): created new (O_EXCL | O_NOFOLLOW, 0600) when the first secret
//!   comes, so a connection that fails before that leaves nothing; or appended to only when
//!   it is already a key log of the user's own: a regular file, one link, owned by the
//!   effective user, mode 0600, its first `KEYLOG_CHECKED_BYTES` NSS key log lines (the lab
//!   states the same rule, `pqlab.files.check_keylog`). An existing file's mode is never
//!   changed.
//! - `create_dir`: directories the engine creates are 0700.

use crate::out::Result;
use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const FILE_MODE: u32 = 0o600;
pub const DIR_MODE: u32 = 0o700;
/// How much of an existing key log is read to tell that it is one (the lab reads as much).
pub const KEYLOG_CHECKED_BYTES: usize = 64 * 1024;

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Create `dir` and any missing parents with mode 0700 (existing ones are left as they are);
/// `dir` itself must then be a real directory (not a link to one) of the effective user.
pub fn create_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|e| crate::err!(Io, "cannot create {}: {e}", dir.display()))?;
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| crate::err!(Io, "cannot read {}: {e}", dir.display()))?;
    if !meta.file_type().is_dir() {
        crate::bail!(
            Io,
            "{} is not a directory (a symbolic link?); keys are written only into a real one",
            dir.display()
        );
    }
    if meta.uid() != euid() {
        crate::bail!(
            Io,
            "{} belongs to uid {}, not to this user; keys are written only into one's own",
            dir.display(),
            meta.uid()
        );
    }
    Ok(())
}

/// Write a secret to `path` (replacing what was there), readable by the owner only.
pub fn write(path: &Path, data: &[u8]) -> Result<()> {
    replace(path, data, FILE_MODE)
}

/// Write `data` as the file `path` with `mode`: into a new file of a private name beside it,
/// renamed over `path` when complete (see the module's notes).
pub fn replace(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| crate::err!(Io, "{} is not a file name", path.display()))?;
    let (mut f, tmp) = new_file(dir, &name.to_string_lossy(), mode)?;
    let done = f.write_all(data).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = done {
        let _ = std::fs::remove_file(&tmp);
        crate::bail!(Io, "cannot write {}: {e}", path.display());
    }
    Ok(())
}

/// A new file of a private name in `dir`, made with `mode` (set on its descriptor, whatever
/// the umask): the file and its path.
fn new_file(dir: &Path, base: &str, mode: u32) -> Result<(File, PathBuf)> {
    let mut last = None;
    for attempt in 0..100u32 {
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
            ^ std::process::id().rotate_left(16)
            ^ attempt.wrapping_mul(0x9e37_79b9);
        let tmp = dir.join(format!(".{base}.{nonce:08x}.tmp"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(FILE_MODE)
            .open(&tmp)
        {
            Ok(f) => {
                f.set_permissions(Permissions::from_mode(mode))
                    .map_err(|e| {
                        crate::err!(Io, "cannot set the mode of {}: {e}", tmp.display())
                    })?;
                return Ok((f, tmp));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => crate::bail!(Io, "cannot create a file in {}: {e}", dir.display()),
        }
    }
    crate::bail!(
        Io,
        "cannot create a new file in {}: {}",
        dir.display(),
        last.map(|e| e.to_string()).unwrap_or_default()
    )
}

/// Whether the first bytes of a file are those of an NSS key log (empty counts): every
/// complete line `LABEL <hex> <hex>`, a `#` comment or blank, and at least one complete line
/// in a file that is not empty. The same rule as `pqlab.files.is_key_log`.
pub fn is_key_log(head: &[u8]) -> bool {
    if head.is_empty() {
        return true;
    }
    let mut lines: Vec<&[u8]> = head.split(|&b| b == b'\n').collect();
    lines.pop(); // after the last newline: cut at the limit, or empty
    !lines.is_empty() && lines.iter().all(|l| key_log_line(l))
}

fn key_log_line(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) || line.starts_with(b"#") {
        return true;
    }
    let text = match std::str::from_utf8(line) {
        Ok(t) => t.trim_end_matches(' '),
        Err(_) => return false,
    };
    let fields: Vec<&str> = text.split(' ').filter(|f| !f.is_empty()).collect();
    let label = |f: &str| {
        f.starts_with(|c: char| c.is_ascii_uppercase())
            && f.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    };
    let hex = |f: &str| !f.is_empty() && f.chars().all(|c| c.is_ascii_hexdigit());
    fields.len() == 3
        && !text.starts_with(' ')
        && label(fields[0])
        && hex(fields[1])
        && hex(fields[2])
}

/// Open `path` without following a link (and without blocking on a FIFO), for reading and,
/// with `append`, appending.
fn open_existing(path: &Path, append: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .append(append)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// Why the open file `f` is no key log to append to (None: it is a key log of ours).
fn not_a_key_log(f: &File) -> std::io::Result<Option<String>> {
    use std::os::unix::fs::FileExt;
    let meta = f.metadata()?;
    let why = if !meta.file_type().is_file() {
        "is not a regular file".to_string()
    } else if meta.uid() != euid() {
        format!("belongs to uid {}", meta.uid())
    } else if meta.nlink() != 1 {
        format!("has {} hard links", meta.nlink())
    } else if meta.mode() & 0o777 != FILE_MODE {
        format!("has mode {:04o}, not 0600", meta.mode() & 0o777)
    } else {
        let mut head = vec![0u8; KEYLOG_CHECKED_BYTES];
        let mut got = 0;
        while got < head.len() {
            match f.read_at(&mut head[got..], got as u64)? {
                0 => break,
                n => got += n,
            }
        }
        if is_key_log(&head[..got]) {
            return Ok(None);
        }
        "is not a key log (its lines are not LABEL HEX HEX)".to_string()
    };
    Ok(Some(why))
}

/// `path` as an existing key log of ours, opened (for appending with `append`); None when
/// there is no such file.
fn existing_key_log(path: &Path, append: bool) -> Result<Option<File>> {
    let f = match open_existing(path, append) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            let why = if link {
                "is a symbolic link".to_string()
            } else {
                format!("cannot be opened: {e}")
            };
            return Err(refused(path, &why));
        }
    };
    match not_a_key_log(&f) {
        Ok(None) => Ok(Some(f)),
        Ok(Some(why)) => Err(refused(path, &why)),
        Err(e) => Err(refused(path, &format!("cannot be read: {e}"))),
    }
}

fn refused(path: &Path, why: &str) -> crate::out::Error {
    crate::err!(
        Io,
        "{} {why}; secrets are appended only to a key log of one's own (mode 0600): give a \
         new file",
        path.display()
    )
}

/// Open the key log for appending: a new file, or an existing key log of ours.
fn open_key_log(path: &Path) -> Result<File> {
    let new = OpenOptions::new()
        .append(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(FILE_MODE)
        .open(path);
    match new {
        Ok(f) => {
            // Our own new file: exactly 0600, whatever the umask.
            f.set_permissions(Permissions::from_mode(FILE_MODE))
                .map_err(|e| crate::err!(Io, "cannot make {} private: {e}", path.display()))?;
            Ok(f)
        }
        // Checked on the descriptor that is then written: the file checked is the one used.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => existing_key_log(path, true)?
            .ok_or_else(|| crate::err!(Io, "{} vanished while it was opened", path.display())),
        Err(e) => crate::bail!(Io, "cannot create {}: {e}", path.display()),
    }
}

/// A TLS key log (SSLKEYLOGFILE): checked when made (an existing file must be a key log of
/// ours), created or opened when the first secret comes.
#[derive(Debug)]
pub struct KeyLog {
    path: PathBuf,
    /// Not opened yet (None), open, or refused when the first secret came (said once).
    file: Mutex<Option<std::result::Result<File, ()>>>,
}

impl KeyLog {
    /// Check `path` now; nothing is created until `line` is called.
    pub fn new(path: &Path) -> Result<KeyLog> {
        existing_key_log(path, false)?;
        Ok(KeyLog {
            path: path.to_path_buf(),
            file: Mutex::new(None),
        })
    }

    /// Append one key log line (the newline is added), in one write. A file refused when
    /// the first secret came stays refused (the error is returned once, then nothing).
    pub fn line(&self, line: &str) -> Result<()> {
        let mut slot = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            match open_key_log(&self.path) {
                Ok(f) => *slot = Some(Ok(f)),
                Err(e) => {
                    *slot = Some(Err(()));
                    return Err(e);
                }
            }
        }
        match slot.as_mut().expect("opened above") {
            Ok(f) => f
                .write_all(format!("{line}\n").as_bytes())
                .map_err(|e| crate::err!(Io, "cannot write {}: {e}", self.path.display())),
            Err(()) => Ok(()),
        }
    }

    /// `line`, with a failure reported on stderr (a TLS library's callback has no way to
    /// return one); the connection goes on without its secrets in the file.
    pub fn log(&self, line: &str) {
        if let Err(e) = self.line(line) {
            eprintln!("--keylog: {e}");
        }
    }
}

#[cfg(test)]
pub fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Base(PathBuf);
    impl Base {
        fn new(name: &str) -> Base {
            let base =
                std::env::temp_dir().join(format!("pqlab-secrets-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&base);
            std::fs::create_dir_all(&base).unwrap();
            Base(base)
        }
    }
    impl Drop for Base {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const LINE: &str = "CLIENT_RANDOM 00112233 aabbccdd";

    #[test]
    fn secrets_are_owner_only_and_replace_links_without_following_them() {
        let base = Base::new("write");
        let dir = base.0.join("a/b");
        create_dir(&dir).unwrap();
        assert_eq!(mode(&base.0.join("a")), DIR_MODE);
        assert_eq!(mode(&dir), DIR_MODE);
        let key = dir.join("k.pem");
        write(&key, b"secret").unwrap();
        assert_eq!(mode(&key), FILE_MODE);
        // A key file left world-readable is replaced by a new, private one.
        std::fs::set_permissions(&key, Permissions::from_mode(0o644)).unwrap();
        write(&key, b"new").unwrap();
        assert_eq!(
            (mode(&key), std::fs::read(&key).unwrap()),
            (FILE_MODE, b"new".to_vec())
        );
        // A link planted at the name is replaced; what it points to is untouched.
        let victim = base.0.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::fs::set_permissions(&victim, Permissions::from_mode(0o644)).unwrap();
        let planted = dir.join("server.key.pem");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        write(&planted, b"key").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(mode(&victim), 0o644);
        assert!(!std::fs::symlink_metadata(&planted)
            .unwrap()
            .file_type()
            .is_symlink());
        replace(&dir.join("c.pem"), b"cert", 0o644).unwrap();
        assert_eq!(mode(&dir.join("c.pem")), 0o644);
        // No temporary file stays behind.
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["c.pem", "k.pem", "server.key.pem"]);
        // A link where the directory should be is refused, not followed.
        std::os::unix::fs::symlink(base.0.join("a"), base.0.join("link")).unwrap();
        assert!(create_dir(&base.0.join("link")).is_err());
    }

    #[test]
    fn a_key_log_is_made_when_the_first_secret_comes() {
        let base = Base::new("lazy");
        let path = base.0.join("keys.log");
        let log = KeyLog::new(&path).unwrap();
        assert!(!path.exists(), "nothing made before a secret");
        log.line(LINE).unwrap();
        log.line(LINE).unwrap();
        assert_eq!(mode(&path), FILE_MODE);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{LINE}\n{LINE}\n")
        );
        // An existing key log of ours (0600) is appended to, by a second writer too.
        let again = KeyLog::new(&path).unwrap();
        again.line(LINE).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
    }

    #[test]
    fn no_other_file_is_taken_over() {
        let base = Base::new("refused");
        let victim = base.0.join("passwd");
        std::fs::write(&victim, b"root:x:0:0:root:/root:/bin/bash\n").unwrap();
        std::fs::set_permissions(&victim, Permissions::from_mode(0o600)).unwrap();
        let link = base.0.join("link.log");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let wide = base.0.join("wide.log");
        std::fs::write(&wide, format!("{LINE}\n")).unwrap();
        std::fs::set_permissions(&wide, Permissions::from_mode(0o644)).unwrap();
        let hard = base.0.join("hard.log");
        let log_file = base.0.join("real.log");
        std::fs::write(&log_file, format!("{LINE}\n")).unwrap();
        std::fs::set_permissions(&log_file, Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(&log_file, &hard).unwrap();
        for (path, why) in [
            (&victim, "not a key log"),
            (&link, "symbolic link"),
            (&wide, "mode 0644"),
            (&hard, "2 hard links"),
            (&base.0, "not a regular file"),
        ] {
            let e = KeyLog::new(path).unwrap_err().to_string();
            assert!(e.contains(why), "{}: {e}", path.display());
        }
        // Made after the check (a race): refused when the first secret comes.
        let late = base.0.join("late.log");
        let log = KeyLog::new(&late).unwrap();
        std::os::unix::fs::symlink(&victim, &late).unwrap();
        assert!(log.line(LINE).is_err());
        assert!(log.line(LINE).is_ok(), "said once, then nothing is written");
        assert_eq!(
            std::fs::read(&victim).unwrap(),
            b"root:x:0:0:root:/root:/bin/bash\n"
        );
        assert_eq!(mode(&victim), 0o600);
        assert_eq!(mode(&wide), 0o644);
    }

    /// The examples the lab's rule is tested on too (tests/test_hostile_files.py): one rule,
    /// stated in each language, held to the same cases.
    #[test]
    fn key_log_lines_are_told_from_other_text() {
        let cases: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/key_log_heads.json")).unwrap();
        let cases = cases.as_array().unwrap();
        assert!(cases.len() >= 10);
        for case in cases {
            let head = match (case.get("head"), case.get("head_hex")) {
                (Some(text), _) => text.as_str().unwrap().as_bytes().to_vec(),
                (None, Some(hex)) => {
                    let hex = hex.as_str().unwrap();
                    (0..hex.len())
                        .step_by(2)
                        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                        .collect()
                }
                (None, None) => panic!("a case without a head: {case}"),
            };
            assert_eq!(
                is_key_log(&head),
                case["key_log"].as_bool().unwrap(),
                "{}",
                case["why"]
            );
        }
    }
}
