//! The directory lock: one exclusive `flock(2)` on the managed directory itself, taken by every
//! command that writes. Locking the directory (not a lock file inside it) means a failed
//! command leaves no file behind, and the lock is released by the kernel when the process
//! exits, however it exits. Files are opened close-on-exec, so terraform never inherits it.
//!
//! Terraform outlives us: if infrakit-tf is killed while terraform runs, terraform carries on
//! and saves its state (its output goes to files, not to a pipe whose reader died; see
//! `terraform/supervise.rs`). The directory must stay locked until it ends, so while a terraform runs
//! for this directory its PID and start time are recorded in [`RUNNING`]. A command that takes
//! the flock and finds that record naming a live process waits for it as for a held lock (same
//! `--lock-timeout`, same exit code 5), then removes the record. A record whose process is gone
//! (or whose PID now belongs to another process: the start time differs) is simply removed.
//! The flock is not handed to terraform instead because terraform's own children (provider
//! plugins, a provisioner's daemon) would inherit it and could keep it forever. The record is
//! written just after the spawn: a kill in between (microseconds) leaves terraform unrecorded,
//! and then only terraform's own state lock keeps a second terraform off the state (exit 8).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fs4::fs_std::FileExt;
use serde::{Deserialize, Serialize};

use crate::exit::{Code, Failure};
use crate::fsio;
use crate::output::Printer;

/// Held while alive.
#[derive(Debug)]
pub(crate) struct DirLock {
    _dir: File,
}

/// The marker of an apply that was cut short (killed with its terraform, or its terraform
/// killed): why, as text. The lock that finds the record of a terraform `apply` whose process
/// is gone without having been seen to end turns it into this marker at once, before anything
/// else runs terraform (and rewrites the record); it stays until what that apply was making
/// has been looked up (`workspace::unrecorded`; with a store, the store keeps it for every
/// host). (Not terraform's `.terraform.tfstate.lock.info`: a terraform run by hand holds it
/// too.)
pub(crate) const UNSETTLED: &str = ".infrakit-tf-unsettled";

/// The record of a terraform running for the locked directory.
pub(crate) const RUNNING: &str = ".infrakit-tf-terraform.json";

const POLL: Duration = Duration::from_millis(100);

/// The directory this process holds the lock of, if any: where a running terraform is recorded.
static HELD: Mutex<Option<PathBuf>> = Mutex::new(None);

#[derive(Debug, Serialize, Deserialize)]
struct Running {
    pid: u32,
    /// The process's start time (clock ticks since boot), which tells a reused PID apart.
    start: u64,
    command: String,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        *HELD.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

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
    let Ok(file) = File::open(&path) else { return Ok(None) };
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
    let file = File::open(dir.join(GENERATION)).ok()?;
    FileExt::lock_shared(&file).ok()?;
    Some(Generation { _file: file })
}

/// How long a command waits for its locks: `--lock-timeout`, counted once from when it began
/// to wait, for every lock it takes (with a store: the store's, then the directory's).
/// Messages name the timeout as given.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    pub(crate) timeout: Duration,
    pub(crate) deadline: Instant,
}

impl Wait {
    pub(crate) fn new(timeout: Duration) -> Self {
        Wait { timeout, deadline: Instant::now() + timeout }
    }
}

/// Takes the lock, waiting until `wait`'s deadline and saying so once when it has to wait:
/// for another infrakit-tf run, or for a terraform that an earlier, killed run left running.
pub(crate) fn lock(dir: &Path, wait: Wait, printer: &Printer) -> Result<DirLock> {
    let file = match File::open(dir) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(crate::directory::missing(dir).into()),
        Err(e) => return Err(e).with_context(|| format!("failed to open `{}` to lock it", dir.display())),
    };
    let Wait { timeout, deadline } = wait;
    let mut said = false;
    let mut wait = |what: &str| -> Result<()> {
        let now = Instant::now();
        if now >= deadline {
            return Err(Failure::new(Code::Locked, format!("`{}` is locked by {what}", dir.display()))
                .hint(format!("wait for it to finish, or give --lock-timeout more than {}", human(timeout)))
                .into());
        }
        if !said {
            printer.status(&format!(
                "waiting up to {} for {what} to release `{}` (--lock-timeout)",
                human(timeout),
                dir.display()
            ));
            said = true;
        }
        std::thread::sleep(POLL.min(deadline - now));
        Ok(())
    };
    while !FileExt::try_lock_exclusive(&file).with_context(|| format!("failed to lock `{}`", dir.display()))? {
        wait("another infrakit-tf run")?;
    }
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let record = abs.join(RUNNING);
    loop {
        match read_running(&record) {
            None => break,
            Some(r) if alive(&r) => wait(&format!(
                "terraform (pid {}, `{}`, left running by an earlier infrakit-tf run)",
                r.pid, r.command
            ))?,
            Some(r) => {
                if r.command.contains(" apply ") {
                    let why = format!("{} did not end", r.command);
                    fsio::write_atomic(&abs.join(UNSETTLED), why.as_bytes(), fsio::Perms::Public)?;
                }
                fsio::remove(&record)?;
                break;
            }
        }
    }
    *HELD.lock().unwrap_or_else(|e| e.into_inner()) = Some(abs);
    Ok(DirLock { _dir: file })
}

/// Records that terraform runs as `pid` for the locked directory (nothing when this process
/// holds no lock: a dry run plans in a mirror and changes nothing).
pub(crate) fn note_running(pid: u32, command: &str) -> Result<()> {
    let Some(dir) = HELD.lock().unwrap_or_else(|e| e.into_inner()).clone() else { return Ok(()) };
    let Some(start) = crate::process::start_time(pid) else { return Ok(()) }; // already gone
    let running = Running { pid, start, command: command.to_string() };
    fsio::write_atomic(&dir.join(RUNNING), &serde_json::to_vec(&running)?, fsio::Perms::Public).map(drop)
}

/// An apply failed after it began to create (`why`): what it was creating may exist in no
/// state, so it leaves the marker of an apply cut short ([`UNSETTLED`]) in the locked
/// directory, and the next look-up (`workspace::unrecorded`) checks for those machines.
pub(crate) fn note_unsettled(why: &str) -> Result<()> {
    let Some(dir) = HELD.lock().unwrap_or_else(|e| e.into_inner()).clone() else { return Ok(()) };
    fsio::write_atomic(&dir.join(UNSETTLED), why.as_bytes(), fsio::Perms::Public).map(drop)
}

/// Why the marker in `dir` says an apply was cut short, if it is there ([`UNSETTLED`]).
pub(crate) fn unsettled(dir: &Path) -> Option<String> {
    Some(std::fs::read_to_string(dir.join(UNSETTLED)).ok()?.trim().to_string())
}

/// Terraform has ended (and been reaped), on its own: forget its record. (One killed by a
/// signal keeps it, naming a process that is gone: the next lock learns that it was cut.)
pub(crate) fn note_done() -> Result<()> {
    let Some(dir) = HELD.lock().unwrap_or_else(|e| e.into_inner()).clone() else { return Ok(()) };
    fsio::remove(&dir.join(RUNNING)).map(drop)
}

/// Whether this process holds a directory lock.
pub(crate) fn held() -> bool {
    HELD.lock().unwrap_or_else(|e| e.into_inner()).is_some()
}

fn read_running(path: &Path) -> Option<Running> {
    let bytes = std::fs::read(path).ok()?;
    // A record that does not parse was cut by a crash of its write: atomic writes make that
    // impossible, so treat it as no record rather than wedge the directory.
    Some(serde_json::from_slice(&bytes).unwrap_or(Running { pid: 0, start: 0, command: String::new() }))
}

fn alive(r: &Running) -> bool {
    crate::process::alive(r.pid, r.start)
}

pub(crate) fn human(d: Duration) -> String {
    if d.subsec_millis() != 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs())
    }
}
