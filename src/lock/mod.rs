//! The locks of a managed directory, in one room:
//!
//! - **the directory lock** (here): one exclusive `flock(2)` on the managed directory itself,
//!   taken by every command that writes. Locking the directory (not a lock file inside it)
//!   means a failed command leaves no file behind, and the lock is released by the kernel when
//!   the process exits, however it exits. Files are opened close-on-exec, so terraform never
//!   inherits it;
//! - **the running-terraform record** ([`running`]): terraform outlives us, so the lock is
//!   held, through that record, for as long as a terraform we started runs;
//! - **the generation lock** ([`generation`]): orders writers' changes against readers' copies;
//! - **the polite wait** ([`wait`]): the one loop in which the directory lock and the store's
//!   lease are waited for;
//! - **a turn at a shared file** ([`turn_at`]): runs that rewrite one file (the metrics) take
//!   turns.

pub(crate) mod generation;
pub(crate) mod running;
pub(crate) mod wait;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use fs4::fs_std::FileExt;

use crate::output::Printer;
pub(crate) use wait::Wait;

const POLL: Duration = Duration::from_millis(100);

/// The directory this process holds the lock of, if any: where a running terraform is recorded.
static HELD: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The directory lock, held while alive.
#[derive(Debug)]
pub(crate) struct DirLock {
    _dir: File,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        *HELD.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Takes the directory lock, waiting until `wait`'s deadline and saying so once when it has
/// to wait: for another infrakit-tf run, or for a terraform that an earlier, killed run left
/// running ([`running::wait_for_left_running`]).
pub(crate) fn directory(dir: &Path, wait: Wait, printer: &Printer) -> Result<DirLock> {
    let file = match File::open(dir) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(crate::exit::missing_directory(dir).into()),
        Err(e) => return Err(e).with_context(|| format!("failed to open `{}` to lock it", dir.display())),
    };
    let mut polite = wait::Polite::new(wait, printer, format!("`{}`", dir.display()), POLL);
    while !FileExt::try_lock_exclusive(&file).with_context(|| format!("failed to lock `{}`", dir.display()))? {
        polite.wait_for("another infrakit-tf run")?;
    }
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    running::wait_for_left_running(&abs, &mut polite)?;
    *HELD.lock().unwrap_or_else(|e| e.into_inner()) = Some(abs);
    Ok(DirLock { _dir: file })
}

/// Whether this process holds a directory lock.
pub(crate) fn held() -> bool {
    held_dir().is_some()
}

/// The directory this process holds the lock of, if any.
fn held_dir() -> Option<PathBuf> {
    HELD.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// This process's turn at a file several runs rewrite, held while alive.
pub(crate) struct Turn {
    _file: File,
}

/// Waits for this process's turn at `path`: an exclusive `flock` on `PATH.lock`, beside it
/// (the metrics file: runs that share it take turns, so that none loses another's series; a
/// collector reads `*.prom` only).
/// Waits until `wait`'s deadline (`--lock-timeout`): a holder that never lets go (another
/// user's process, where the file is in a directory others can write) costs the metrics, not
/// the run.
pub(crate) fn turn_at(path: &Path, wait: Wait, printer: &Printer) -> Result<Turn> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let file = crate::fsio::open_lock_file(Path::new(&name))?;
    let mut polite = wait::Polite::new(wait, printer, format!("`{}`", path.display()), POLL);
    while !FileExt::try_lock_exclusive(&file).with_context(|| format!("failed to lock `{}`", path.display()))? {
        polite.wait_for("another run")?;
    }
    Ok(Turn { _file: file })
}
