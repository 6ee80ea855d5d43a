//! All-or-nothing file changes: the files of one provision, destroy (all its IDs), label,
//! import, prune or sweep, and the ID record, become visible together or not at all, across
//! crashes (SIGKILL at any instruction) and write errors (a full disk).
//!
//! The protocol is an undo journal with one commit point:
//!
//! 1. Under the directory lock, [`commit`] writes [`JOURNAL`]: for every file the change
//!    touches, its bytes and permissions *before* the change (or that it did not exist). The
//!    journal is written atomically (`fsio::write_atomic`), so it is whole or absent.
//! 2. Each file is written or removed, each atomically.
//! 3. The journal is removed. **That removal is the commit point**: from then on the change
//!    stands.
//!
//! A change that fails at step 2 (a write error) is undone at once from the journal. A process
//! killed during step 2 leaves the journal behind; the next command that takes the lock calls
//! [`recover`] before it reads the directory, which puts every file back as the journal says
//! and removes it. So a killed `provision` leaves no instance, and the caller who retries gets
//! exactly one; a killed `destroy A B` removed neither. Rolling back (rather than forward) is
//! what a caller who saw no ID and no success expects. Until the journal is settled, the
//! directory is never handed to terraform.
//!
//! A change of one file needs no journal: its atomic write is already all or nothing.
//!
//! The journal holds file contents, which may carry Init secrets: it is private (0600).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::exit::{Code, Failure};
use crate::fsio::{self, Perms};

/// The undo journal of the change being committed (absent when none is).
pub(crate) const JOURNAL: &str = ".infrakit-tf-journal.json";

/// One file of a change: its new bytes and mode, or `None` to remove it.
#[derive(Debug, Clone)]
pub(crate) struct FileOp {
    pub(crate) name: String,
    pub(crate) after: Option<(Vec<u8>, Perms)>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    /// Format version, for later changes of this file.
    version: u32,
    /// What each file was before the change, in the order the change touches them.
    before: Vec<Before>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Before {
    name: String,
    /// The file's bytes (base64) and permission bits, or `null` when it did not exist.
    content: Option<Saved>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    mode: u32,
    base64: String,
}

/// Applies `ops` in `dir` all or nothing (see the module doc). On error, the directory is as
/// before, or, if even the undo failed, the journal stays for the next command to finish.
pub(crate) fn commit(dir: &Path, ops: &[FileOp]) -> Result<()> {
    if ops.len() <= 1 {
        return ops.iter().try_for_each(|op| perform(dir, op));
    }
    let changing = crate::lock::generation::changing(dir)?; // readers see all of it or none
    let journal = Journal { version: 1, before: ops.iter().map(|op| save(dir, &op.name)).collect::<Result<_>>()? };
    let journal_path = dir.join(JOURNAL);
    fsio::write_atomic(&journal_path, &serde_json::to_vec_pretty(&journal)?, Perms::Private)?;
    if let Err(err) = ops.iter().try_for_each(|op| perform(dir, op)) {
        return Err(match undo(dir, &journal).and_then(|()| fsio::remove(&journal_path)) {
            Ok(_) => err.context("nothing was changed"),
            Err(undo_err) => err.context(format!(
                "the change could not be undone ({undo_err:#}); the next command that takes the lock undoes it"
            )),
        });
    }
    fsio::remove(&journal_path)?; // the commit point
    crate::lock::generation::made_changes(dir, &changing);
    Ok(())
}

/// Under the lock, before anything reads the directory: undoes a change that a killed
/// command left half done. Returns the names of the files put back.
pub(crate) fn recover(dir: &Path) -> Result<Vec<String>> {
    let journal_path = dir.join(JOURNAL);
    let bytes = match crate::fsio::read(&journal_path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", journal_path.display())),
    };
    let journal = parse(&bytes, &journal_path)?;
    let _changing = crate::lock::generation::changing(dir)?;
    undo(dir, &journal)?;
    fsio::remove(&journal_path)?;
    Ok(journal.before.into_iter().map(|b| b.name).collect())
}

fn parse(bytes: &[u8], path: &Path) -> Result<Journal> {
    serde_json::from_slice(bytes).map_err(|e| {
        Failure::new(Code::Error, format!("`{}` is not a journal infrakit-tf can read: {e}", path.display()))
            .hint("it undoes an interrupted change: restore it, or remove it once you have checked the managed files")
            .into()
    })
}

/// A file as it was before a change: its name, and its bytes (`None`: it did not exist).
pub(crate) type Was = (String, Option<Vec<u8>>);

/// For a reader: the files a pending journal (a change half done: its writer was killed, or
/// its undo failed) puts back, as they were before that change (`None`: absent then). `None`
/// when no change is pending.
pub(crate) fn pending(dir: &Path) -> Result<Option<Vec<Was>>> {
    let path = dir.join(JOURNAL);
    let bytes = match crate::fsio::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", path.display())),
    };
    let journal = parse(&bytes, &path)?;
    let files = journal
        .before
        .into_iter()
        .map(|b| {
            let content = match b.content {
                None => None,
                Some(saved) => Some(
                    base64::engine::general_purpose::STANDARD
                        .decode(&saved.base64)
                        .with_context(|| format!("the journal's copy of `{}` is damaged", b.name))?,
                ),
            };
            Ok((b.name, content))
        })
        .collect::<Result<_>>()?;
    Ok(Some(files))
}

fn save(dir: &Path, name: &str) -> Result<Before> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    let content = match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("failed to stat `{}`", path.display())),
        Ok(meta) => {
            let bytes = crate::fsio::read(&path).with_context(|| format!("failed to read `{}`", path.display()))?;
            let mode = meta.permissions().mode() & 0o7777;
            Some(Saved { mode, base64: base64::engine::general_purpose::STANDARD.encode(bytes) })
        }
    };
    Ok(Before { name: name.to_string(), content })
}

fn perform(dir: &Path, op: &FileOp) -> Result<()> {
    let path: PathBuf = dir.join(&op.name);
    match &op.after {
        Some((bytes, mode)) => fsio::write_atomic(&path, bytes, *mode).map(drop),
        None => fsio::remove(&path).map(drop),
    }
}

/// Puts every file back as it was, last change first. Idempotent: a crash during the undo is
/// undone again by the next command.
fn undo(dir: &Path, journal: &Journal) -> Result<()> {
    for before in journal.before.iter().rev() {
        let path = dir.join(&before.name);
        match &before.content {
            None => {
                fsio::remove(&path)?;
            }
            Some(saved) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(&saved.base64)
                    .with_context(|| format!("the journal's copy of `{}` is damaged", before.name))?;
                fsio::write_atomic(&path, &bytes, Perms::Exact(saved.mode))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, text: Option<&str>) -> FileOp {
        FileOp { name: name.into(), after: text.map(|t| (t.as_bytes().to_vec(), Perms::Public)) }
    }

    #[test]
    fn a_committed_change_leaves_no_journal() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        fsio::write_atomic(&d.join("old"), b"old", Perms::Public).unwrap();
        commit(d, &[op("a", Some("A")), op("b", Some("B")), op("old", None)]).unwrap();
        assert_eq!(listing(d), vec![("a".into(), Some("A".into())), ("b".into(), Some("B".into()))]);
    }

    #[test]
    fn a_failed_write_undoes_the_whole_change() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        fsio::write_atomic(&d.join("keep"), b"v1", Perms::Public).unwrap();
        let before = listing(d);
        // The third write fails (its directory does not exist) after two succeeded.
        let err = commit(d, &[op("keep", Some("v2")), op("new", Some("N")), op("no/such", Some("x"))]).unwrap_err();
        assert!(format!("{err:#}").contains("nothing was changed"), "{err:#}");
        assert_eq!(listing(d), before);
    }

    #[test]
    fn recovery_rolls_back_what_a_killed_change_left() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        fsio::write_atomic(&d.join("keep"), b"v1", Perms::Private).unwrap();
        fsio::write_atomic(&d.join("gone"), b"g", Perms::Public).unwrap();
        let ops = [op("keep", Some("v2")), op("gone", None), op("new", Some("N"))];
        // As if killed after the journal and the first two operations.
        let journal = Journal { version: 1, before: ops.iter().map(|o| save(d, &o.name).unwrap()).collect() };
        fsio::write_atomic(&d.join(JOURNAL), &serde_json::to_vec(&journal).unwrap(), Perms::Private).unwrap();
        perform(d, &ops[0]).unwrap();
        perform(d, &ops[1]).unwrap();
        let mut names = recover(d).unwrap();
        names.sort();
        assert_eq!(names, ["gone", "keep", "new"]);
        assert_eq!(listing(d), vec![("gone".into(), Some("g".into())), ("keep".into(), Some("v1".into()))]);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(d.join("keep")).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(recover(d).unwrap().is_empty(), "nothing left to recover");
    }

    fn listing(dir: &Path) -> Vec<(String, Option<String>)> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().into_string().unwrap(), crate::fsio::read_to_string(e.path()).ok())
            })
            .filter(|(name, _)| name != crate::lock::generation::GENERATION) // the readers' lock, not a change
            .collect();
        v.sort();
        v
    }
}
