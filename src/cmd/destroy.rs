//! `destroy ID...`: remove instances. A rolling update removes only each instance's own file
//! (its dedicated slot stays, to be re-attached by the replacement); a termination also removes
//! the dedicated and global files it is attached to that no remaining instance refers to.
//! Every ID is checked before anything is removed.

use std::collections::BTreeSet;

use anyhow::Result;
use serde::Serialize;

use crate::cli::{DestroyArgs, Reason};
use crate::cmd::instances::removals;
use crate::context::Ctx;
use crate::exit::not_found;
use crate::workspace::{ChangeSet, CommitMode, Committed, Outcome, Workspace};

#[derive(Serialize)]
struct Report {
    destroyed: Vec<String>,
    reason: &'static str,
    #[serde(flatten)]
    outcome: Outcome,
}

pub(crate) fn run(args: DestroyArgs, ctx: &Ctx) -> Result<()> {
    let ids: BTreeSet<_> = args.ids.iter().cloned().collect();
    let mode = CommitMode::from_flags(args.no_apply, args.dry_run);
    let mut ws = Workspace::for_mode(ctx, mode)?;
    let dir = ws.dir();
    let profiles = ctx.profiles()?;
    let known = dir.instance_ids();
    let missing: Vec<String> = ids.iter().filter(|id| !known.contains(id)).map(ToString::to_string).collect();
    if !missing.is_empty() {
        return Err(not_found(format!("no such instance in `{}`: {}", dir.shown().display(), missing.join(", ")))
            .hint("`infrakit-tf describe` lists the instances")
            .into());
    }

    let instances = if args.reason == Reason::Terminate { dir.instances(&profiles) } else { Vec::new() };
    let doomed = removals(dir, &instances, &ids, args.reason, &ctx.printer)?;

    let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let what =
        if list.len() == 1 { list[0].clone() } else { format!("{} instances ({})", list.len(), list.join(", ")) };
    if mode != CommitMode::DryRun {
        ctx.printer.confirm(
            ctx.assume_yes,
            &format!("destroy {what} in `{}` ({} file(s))?", dir.shown().display(), doomed.len()),
        )?;
    }
    let Committed { outcome, failure } = ws.commit(ChangeSet::removing(doomed), mode)?;
    let reason = match args.reason {
        Reason::Terminate => "terminate",
        Reason::RollingUpdate => "rolling_update",
    };
    let verb = if mode == CommitMode::DryRun { "would destroy" } else { "destroyed" };
    ctx.printer.status(&format!("{verb} {what} ({reason}): {} file(s)", outcome.files.len()));
    let report = Report { destroyed: list, reason, outcome };
    if ctx.printer.json_output() {
        ctx.printer.json(&report)?;
    } else {
        ctx.printer.data(&report.destroyed.join("\n"))?;
    }
    failure.map_or(Ok(()), Err)
}
