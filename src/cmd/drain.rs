//! Drains before destroys: before any member of a group is destroyed (`reconcile`'s scale-in
//! and rolling updates, `destroy`), its drain command (`Lifecycle.Drain`, or `--drain-cmd`)
//! runs with the member's environment, the drains of one batch in parallel (bounded, see
//! `health::run_all`). A member whose drain failed or ran out of time is destroyed anyway
//! under `OnDrainFailure: continue`, and kept under `abandon` (the default): the caller takes
//! it out of what it removes, and the run ends with exit 17.
//!
//! No record of a drain is kept, and none is needed: every drain runs before the files that
//! define its member are removed (before `Workspace::write` or `commit` of the removal). A run
//! killed during a drain, or after it but before the removal, leaves the member's files as they
//! were; the next run decides again, finds the member still to go, and drains it again before
//! removing it. Once the removal is written, the member's files are gone and only the apply
//! is left, which any later run finishes: a member is never destroyed undrained. Drains are
//! idempotent for the user's command to make so (draining a drained node changes nothing).
//! With a store, a long drain is covered by the lease's heartbeat, and the removal is a store
//! commit fenced by the lease: a host that lost the lease during a drain cannot remove.

use std::collections::BTreeSet;

use anyhow::Result;

use crate::cli::{DrainArgs, OnDrainFailure};
use crate::directory::Instance;
use crate::exit::{Code, Failure};
use crate::group::{Drain, Lifecycle};
use crate::health::{Hook, Job, Subject};
use crate::names::InstanceId;
use crate::output::Printer;
use crate::workspace::Workspace;

/// The command line's `--drain-*` flags, as the lifecycle they put over each group spec's.
pub(crate) fn flags(args: &DrainArgs) -> Lifecycle {
    Lifecycle {
        drain: args.drain_cmd.clone(),
        drain_timeout: args.drain_timeout,
        on_drain_failure: args.on_drain_failure,
    }
}

/// A member to drain before it is destroyed.
pub(crate) struct Draining<'a> {
    pub(crate) instance: &'a Instance,
    /// Its group's ID (empty when it has none).
    pub(crate) group: &'a str,
    pub(crate) drain: &'a Drain,
}

/// Drains `members` and returns those to keep: the members whose drain failed under
/// `abandon`. A member terraform's state has no machine for (never created, or not yet) has
/// nothing to drain and is not drained. Reads the state only when there is something to drain.
pub(crate) fn drain(ws: &Workspace<'_>, printer: &Printer, members: &[Draining<'_>]) -> Result<BTreeSet<InstanceId>> {
    if members.is_empty() {
        return Ok(BTreeSet::new());
    }
    let state = ws.state()?;
    let mut running = Vec::new();
    for m in members {
        let vm = m.instance.vm.as_ref().and_then(|(t, n)| state.get(&format!("{t}.{n}")));
        match vm {
            Some(vm) => running.push((m, m.instance.id.to_string(), vm.key_attributes())),
            None => printer.detail(&format!("{}: no machine in the state, nothing to drain", m.instance.id)),
        }
    }
    let jobs: Vec<Job<'_>> = running
        .iter()
        .map(|(m, id, attributes)| Job {
            command: &m.drain.command,
            timeout: m.drain.timeout,
            subject: Subject { id, logical_id: m.instance.logical_id(), group: m.group, attributes },
        })
        .collect();
    for (_, id, _) in &running {
        printer.event(&format!("draining {id}"));
    }
    let mut kept = BTreeSet::new();
    for ((m, id, _), result) in running.iter().zip(crate::health::run_all(Hook::Drain, &jobs)) {
        let why = match result {
            Ok(None) => {
                printer.event(&format!("drained {id}"));
                continue;
            }
            Ok(Some(why)) => why,
            // Stopped by Ctrl-C or SIGTERM: nothing is destroyed, the next run drains again.
            Err(e) if crate::signals::stop_requested() => return Err(e),
            Err(e) => format!("{e:#}"),
        };
        match m.drain.on_failure {
            OnDrainFailure::Continue => printer
                .warn(&format!("the drain of {id} failed ({why}): destroying it anyway (OnDrainFailure: continue)")),
            OnDrainFailure::Abandon => {
                printer.warn(&format!("the drain of {id} failed ({why}): it is kept (OnDrainFailure: abandon)"));
                kept.insert(m.instance.id.clone());
            }
        }
    }
    Ok(kept)
}

/// The failure a run ends with once everything else is done, when drains failed under
/// `abandon` and their members were kept (`kept`: their IDs).
pub(crate) fn abandoned(kept: &[String]) -> anyhow::Error {
    Failure::new(
        Code::DrainAbandoned,
        format!("a drain failed and its member was kept (OnDrainFailure: abandon): {}", kept.join(", ")),
    )
    .hint("fix the drain or the machine and run again (the drain runs again), or pass --on-drain-failure continue to destroy it anyway")
    .into()
}
