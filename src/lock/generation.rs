//! The generation lock: orders writers' changes of the managed files against readers' copies
//! of them, so that a reader never sees half of a change and never waits for an apply.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};
use fs4::fs_std::FileExt;

use crate::fsio;

/// The file whose `flock` orders changes of the managed files against readers' copies of them
/// (the directory lock cannot: writers hold it for a whole command, terraform included). A
/// writer holds it exclusively only while it changes files ([`changing`]: a journal's commit
/// or undo, a promotion), a reader shared only while it lists and reads them ([`reading`]):
/// a reader sees every change whole or not at all, and never waits for an apply. Writers
/// create it; readers never create a file.
pub(crate) const GENERATION: &str = ".infrakit-tf-generation.lock";

/// A held `flock` on [`GENERATION`], released when dropped.
pub(crate) struct Generation {
    _file: File,
}

/// For a writer (under the directory lock), while it changes managed files: readers wait the
/// milliseconds it takes. `None` before the first change that succeeded in this directory made
/// the file ([`made_changes`]): a command that fails leaves nothing behind.
pub(crate) fn changing(dir: &Path) -> Result<Option<Generation>> {
    let path = dir.join(GENERATION);
    let Ok(file) = fsio::open_existing_lock_file(&path) else { return Ok(None) };
    FileExt::lock_exclusive(&file).with_context(|| format!("failed to lock `{}`", path.display()))?;
    Ok(Some(Generation { _file: file }))
}

/// After a change that succeeded: makes [`GENERATION`] if it is not there yet, so that the
/// next changes are ordered against readers. Best effort (a full disk may refuse an inode).
pub(crate) fn made_changes(dir: &Path, held: &Option<Generation>) {
    if held.is_none() {
        let _ = fsio::open_lock_file(&dir.join(GENERATION));
    }
}

/// For a reader, while it lists and reads the managed files. `None` when no writer ever made
/// the lock file (no change to order against), or it cannot be opened.
pub(crate) fn reading(dir: &Path) -> Option<Generation> {
    let file = fsio::open_existing_lock_file(&dir.join(GENERATION)).ok()?;
    FileExt::lock_shared(&file).ok()?;
    Some(Generation { _file: file })
}
