//! What `terraform version -json` said, remembered per binary: every command needs the
//! version, and probing costs a process (about 35 ms). The key is the binary's identity on
//! disk (canonical path, device, inode, size, modification and change times): a terraform that
//! is replaced or upgraded, even in place, has another key and is probed again. The cache is
//! `$XDG_CACHE_HOME/infrakit-tf/terraform-version/` (else `~/.cache/...`), one small file per
//! binary; without either variable, nothing is cached. Best effort: a cache that cannot be
//! read or written is probed around.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsio::{self, Perms};

#[derive(Serialize, Deserialize, PartialEq)]
struct Entry {
    key: String,
    version: String,
}

/// The version probed for `program` before, if it is still the same binary.
pub(super) fn lookup(program: &Path) -> Option<String> {
    let key = key(program)?;
    let entry: Entry = serde_json::from_slice(&crate::fsio::read(file(&key)?).ok()?).ok()?;
    (entry.key == key).then_some(entry.version)
}

/// Remembers that `program` is `version`.
pub(super) fn store(program: &Path, version: &str) {
    let Some(key) = key(program) else { return };
    let Some(path) = file(&key) else { return };
    let entry = Entry { key, version: version.to_string() };
    let Ok(bytes) = serde_json::to_vec(&entry) else { return };
    let _ = path
        .parent()
        .map(fsio::create_dir_all)
        .transpose()
        .and_then(|_| fsio::write_atomic(&path, &bytes, Perms::Public));
}

fn key(program: &Path) -> Option<String> {
    let path = program.canonicalize().ok()?;
    let m = std::fs::metadata(&path).ok()?;
    Some(format!(
        "{} dev={} ino={} size={} mtime={}.{} ctime={}.{}",
        path.display(),
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

fn file(key: &str) -> Option<PathBuf> {
    // The XDG Base Directory spec: a relative path is invalid and must be ignored.
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .or_else(|| std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".cache")))?;
    // FNV-1a: a file name per binary; the key inside guards against collisions.
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    Some(base.join("infrakit-tf").join("terraform-version").join(format!("{hash:016x}.json")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_binary_is_probed_again() {
        let tmp = tempfile::tempdir().unwrap();
        let program = tmp.path().join("terraform");
        fsio::write_atomic(&program, b"#!/bin/sh\n", Perms::Public).unwrap();
        let before = key(&program).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
        fsio::write_atomic(&program, b"#!/bin/sh\n# upgraded\n", Perms::Public).unwrap();
        assert_ne!(key(&program).unwrap(), before, "a new inode, size and times");
        assert!(key(&tmp.path().join("absent")).is_none());
    }
}
