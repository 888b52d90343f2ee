//! Files that hold secrets (private keys, TLS key logs): created owner-only (0600, in
//! directories the engine creates 0700), and an existing file is narrowed to 0600 before a
//! secret is written into it.

use crate::out::Result;
use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

pub const FILE_MODE: u32 = 0o600;
pub const DIR_MODE: u32 = 0o700;

/// Create `dir` and any missing parents with mode 0700 (existing ones are left as they are).
pub fn create_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|e| crate::err!(Io, "cannot create {}: {e}", dir.display()))
}

/// Open for writing with mode 0600, fixing the mode of a file that already existed before
/// anything is written to it.
fn open(path: &Path, options: &mut OpenOptions) -> Result<File> {
    let f = options
        .mode(FILE_MODE)
        .open(path)
        .map_err(|e| crate::err!(Io, "cannot open {}: {e}", path.display()))?;
    f.set_permissions(Permissions::from_mode(FILE_MODE))
        .map_err(|e| crate::err!(Io, "cannot make {} private: {e}", path.display()))?;
    Ok(f)
}

/// Write a secret to `path` (replacing its content), readable by the owner only.
pub fn write(path: &Path, data: &[u8]) -> Result<()> {
    let mut f = open(
        path,
        OpenOptions::new().write(true).create(true).truncate(true),
    )?;
    f.write_all(data)
        .map_err(|e| crate::err!(Io, "cannot write {}: {e}", path.display()))
}

/// Open `path` for appending secrets (a key log), readable by the owner only.
pub fn append(path: &Path) -> Result<File> {
    open(path, OpenOptions::new().create(true).append(true))
}

#[cfg(test)]
pub fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_owner_only_new_or_existing() {
        let base = std::env::temp_dir().join(format!("pqlab-secrets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("a/b");
        create_dir(&dir).unwrap();
        assert_eq!(mode(&base.join("a")), DIR_MODE);
        assert_eq!(mode(&dir), DIR_MODE);
        let key = dir.join("k.pem");
        write(&key, b"secret").unwrap();
        assert_eq!(mode(&key), FILE_MODE);
        // A key file left world-readable by someone else is narrowed, then replaced.
        std::fs::set_permissions(&key, Permissions::from_mode(0o644)).unwrap();
        write(&key, b"new").unwrap();
        assert_eq!(
            (mode(&key), std::fs::read(&key).unwrap()),
            (FILE_MODE, b"new".to_vec())
        );
        let log = dir.join("keys.log");
        std::fs::write(&log, b"old line\n").unwrap();
        std::fs::set_permissions(&log, Permissions::from_mode(0o644)).unwrap();
        let mut f = append(&log).unwrap();
        writeln!(f, "new line").unwrap();
        assert_eq!(mode(&log), FILE_MODE);
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "old line\nnew line\n"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
