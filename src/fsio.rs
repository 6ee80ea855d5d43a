//! Every file write and removal goes through here (clippy bans `std::fs::write` and
//! `remove_file` elsewhere).
//!
//! `write_atomic` writes a temporary file in the destination directory, syncs it, renames it
//! over the destination and syncs the directory, so a reader (terraform, another infrakit-tf,
//! a crash) sees the old bytes or the new bytes, never a mix. Unchanged bytes are not
//! rewritten. See <https://lwn.net/Articles/457667/> for why the directory sync matters.
#![allow(clippy::disallowed_methods)]

use std::fs::{self, File, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context, Result};

/// Who may read a file we write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 0644: no secrets inside.
    Public,
    /// 0600: carries Init (user data), which often holds secrets.
    Private,
}

impl Mode {
    fn bits(self) -> u32 {
        match self {
            Mode::Public => 0o644,
            Mode::Private => 0o600,
        }
    }
}

/// Prefix of our temporary files: a leading `.` keeps terraform and our listing away from them.
pub const TEMP_PREFIX: &str = ".infrakit-tf-";

/// What `write_atomic` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Changed,
    Unchanged,
}

/// Writes `bytes` to `path` atomically. An existing file keeps its permissions, except that a
/// private file is never left readable by others.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: Mode) -> Result<Written> {
    let existing = match fs::read(path) {
        Ok(old) if old == bytes => return Ok(Written::Unchanged),
        Ok(_) => Some(fs::metadata(path).with_context(|| format!("failed to stat `{}`", path.display()))?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", path.display())),
    };
    let bits = match (&existing, mode) {
        (Some(meta), Mode::Private) => meta.permissions().mode() & 0o770,
        (Some(meta), Mode::Public) => meta.permissions().mode() & 0o7777,
        (None, mode) => mode.bits(),
    };
    let dir = parent(path);
    let write = || -> io::Result<()> {
        let mut tmp = tempfile::Builder::new().prefix(TEMP_PREFIX).suffix(".tmp").tempfile_in(dir)?;
        tmp.as_file().set_permissions(Permissions::from_mode(bits))?;
        tmp.write_all(bytes)?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        sync_dir(dir)
    };
    write().with_context(|| format!("failed to write `{}`", path.display()))?;
    Ok(Written::Changed)
}

/// Removes a file; a file that is already gone is not an error (another run, or the user, got
/// there first and the outcome is the same).
pub fn remove(path: &Path) -> Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => {
            sync_dir(parent(path)).with_context(|| format!("failed to sync `{}`", parent(path).display()))?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("failed to remove `{}`", path.display())),
    }
}

/// Renames `from` over `to` (same directory: atomic) and syncs the directory.
pub fn rename(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).with_context(|| format!("failed to rename `{}` to `{}`", from.display(), to.display()))?;
    sync_dir(parent(to)).with_context(|| format!("failed to sync `{}`", parent(to).display()))
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_and_skip_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.tf.json");
        assert_eq!(write_atomic(&p, b"one\n", Mode::Public).unwrap(), Written::Changed);
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o644);
        let before = fs::metadata(&p).unwrap().modified().unwrap();
        assert_eq!(write_atomic(&p, b"one\n", Mode::Public).unwrap(), Written::Unchanged);
        assert_eq!(fs::metadata(&p).unwrap().modified().unwrap(), before);
        assert_eq!(write_atomic(&p, b"two\n", Mode::Public).unwrap(), Written::Changed);
        assert_eq!(fs::read(&p).unwrap(), b"two\n");
        // Nothing else left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn private_files_are_not_world_readable_even_when_replacing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("instance-1.tf.json");
        write_atomic(&p, b"x", Mode::Private).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        fs::set_permissions(&p, Permissions::from_mode(0o644)).unwrap();
        write_atomic(&p, b"y", Mode::Private).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o007, 0);
    }

    #[test]
    fn remove_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        write_atomic(&p, b"x", Mode::Public).unwrap();
        assert!(remove(&p).unwrap());
        assert!(!remove(&p).unwrap());
    }
}
