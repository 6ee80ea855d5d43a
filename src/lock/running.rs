//! The running-terraform record, and the marker of an apply cut short.
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

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::held_dir;
use super::wait::Polite;
use crate::fsio;
use crate::lookup::Evidence;

/// The marker of an apply that was cut short (killed with its terraform, or its terraform
/// killed): why, as text, and when it was noted by this host's clock (`lookup::Evidence`). The lock that finds the record of a terraform `apply` whose process
/// is gone without having been seen to end turns it into this marker at once, before anything
/// else runs terraform (and rewrites the record); it stays until what that apply was making
/// has been looked up (`workspace::lookup`; with a store, the store keeps it for every
/// host). (Not terraform's `.terraform.tfstate.lock.info`: a terraform run by hand holds it
/// too.)
pub(crate) const EVIDENCE: &str = ".infrakit-tf-unsettled";

/// What applies created (address and ID of each machine), noted as each ended, until the
/// workspace moves it into the cloud record (`cloud_record`), stamped with the time it does:
/// a JSON list of `[address, id]`.
pub(crate) const CREATED: &str = ".infrakit-tf-created";

/// The record of a terraform running for the locked directory.
pub(crate) const RUNNING: &str = ".infrakit-tf-terraform.json";

#[derive(Debug, Serialize, Deserialize)]
struct Running {
    pid: u32,
    /// The process's start time (clock ticks since boot), which tells a reused PID apart.
    start: u64,
    command: String,
}

/// Under the flock of `dir` (absolute): waits in `polite` while the record names a terraform
/// that is still running; then removes the record, first turning that of an `apply` that did
/// not end into the marker ([`EVIDENCE`]).
pub(super) fn wait_for_left_running(dir: &Path, polite: &mut Polite<'_>) -> Result<()> {
    let record = dir.join(RUNNING);
    loop {
        match read_running(&record) {
            None => return Ok(()),
            Some(r) if alive(&r) => polite.wait_for(&format!(
                "terraform (pid {}, `{}`, left running by an earlier infrakit-tf run)",
                r.pid, r.command
            ))?,
            Some(r) => {
                if r.command.contains(" apply ") {
                    // Noted now: when it was cut is not known, and a later time only makes
                    // the look-up wait longer before it concludes anything.
                    write_marker(dir, &format!("{} did not end", r.command))?;
                }
                fsio::remove(&record)?;
                return Ok(());
            }
        }
    }
}

/// Records that terraform runs as `pid` for the locked directory (nothing when this process
/// holds no lock: a dry run plans in a mirror and changes nothing).
pub(crate) fn note_running(pid: u32, command: &str) -> Result<()> {
    let Some(dir) = held_dir() else { return Ok(()) };
    let Some(start) = crate::process::start_time(pid) else { return Ok(()) }; // already gone
    let running = Running { pid, start, command: command.to_string() };
    fsio::write_atomic(&dir.join(RUNNING), &serde_json::to_vec(&running)?, fsio::Perms::Public).map(drop)
}

/// An apply failed after it began to create (`why`): what it was creating may exist in no
/// state, so it leaves the marker of an apply cut short ([`EVIDENCE`]) in the locked
/// directory, and the next look-up (`workspace::lookup`) checks for those machines.
pub(crate) fn note_evidence(why: &str) -> Result<()> {
    let Some(dir) = held_dir() else { return Ok(()) };
    write_marker(&dir, why)
}

/// An apply created `created` (address, ID): noted beside what earlier ones noted and the
/// workspace has not moved yet ([`CREATED`]), in the locked directory.
pub(crate) fn note_created(created: &[(String, String)]) -> Result<()> {
    let Some(dir) = held_dir() else { return Ok(()) };
    let mut all = self::created(&dir);
    all.extend(created.iter().cloned());
    fsio::write_atomic(&dir.join(CREATED), &serde_json::to_vec(&all)?, fsio::Perms::Public).map(drop)
}

/// What the marker in `dir` says applies created ([`CREATED`]); nothing when there is none (or
/// it cannot be read: atomic writes make a torn one impossible).
pub(crate) fn created(dir: &Path) -> Vec<(String, String)> {
    crate::fsio::read(dir.join(CREATED)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// Writes the marker ([`EVIDENCE`]): `why`, noted now.
fn write_marker(dir: &Path, why: &str) -> Result<()> {
    let text = Evidence::text(why, crate::process::now_ms());
    fsio::write_atomic(&dir.join(EVIDENCE), text.as_bytes(), fsio::Perms::Public).map(drop)
}

/// What the marker in `dir` says ([`EVIDENCE`]), if it is there: why an apply was cut short,
/// and when that was noted (a marker that does not say: when it was written).
pub(crate) fn evidence(dir: &Path) -> Option<Evidence> {
    let path = dir.join(EVIDENCE);
    let text = crate::fsio::read_to_string(&path).ok()?;
    let written = std::fs::metadata(&path).and_then(|m| m.modified()).map_or(0, crate::process::epoch_ms);
    Some(Evidence::parse(&text, written))
}

/// Terraform has ended (and been reaped), on its own: forget its record. (One killed by a
/// signal keeps it, naming a process that is gone: the next lock learns that it was cut.)
pub(crate) fn note_done() -> Result<()> {
    let Some(dir) = held_dir() else { return Ok(()) };
    fsio::remove(&dir.join(RUNNING)).map(drop)
}

fn read_running(path: &Path) -> Option<Running> {
    let bytes = crate::fsio::read(path).ok()?;
    // A record that does not parse was cut by a crash of its write: atomic writes make that
    // impossible, so treat it as no record rather than wedge the directory.
    Some(serde_json::from_slice(&bytes).unwrap_or(Running { pid: 0, start: 0, command: String::new() }))
}

fn alive(r: &Running) -> bool {
    crate::process::alive(r.pid, r.start)
}
