//! `destroy ID...`: remove instances. A rolling update removes only each instance's own file
//! (its dedicated slot stays, to be re-attached by the replacement); a termination also removes
//! the dedicated and global files it is attached to that no remaining instance refers to.
//! Every ID is checked before anything is removed.
//!
//! A member of a group whose spec has a drain (`Lifecycle.Drain`, the spec found as
//! `reconcile` finds it: `--group`, else infrakit-tf.json's `groups`, by the member's
//! `infrakit.group` tag), or any instance when `--drain-cmd` is given, is drained once the
//! destroy is confirmed, before its files are removed (`cmd::drain`); one whose drain failed
//! under `abandon` is kept, and the command exits 17 after destroying the others. `--dry-run`
//! drains nothing; `--no-apply` drains, since the removal it writes is what the next apply
//! destroys.

use std::collections::BTreeSet;

use anyhow::Result;
use serde::Serialize;

use crate::cli::{DestroyArgs, Reason};
use crate::cmd::drain::Draining;
use crate::cmd::instances::removals;
use crate::context::Ctx;
use crate::directory::Instance;
use crate::exit::not_found;
use crate::group::{Drain, GROUP_TAG};
use crate::names::InstanceId;
use crate::workspace::{ChangeSet, CommitMode, Committed, Outcome, Workspace};

#[derive(Serialize)]
struct Report {
    destroyed: Vec<String>,
    /// Instances whose drain failed, kept (`OnDrainFailure: abandon`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    abandoned: Vec<String>,
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
    let mut doomed = removals(dir, &instances, &ids, args.reason, &ctx.printer)?;

    let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let what =
        if list.len() == 1 { list[0].clone() } else { format!("{} instances ({})", list.len(), list.join(", ")) };
    let mut kept = BTreeSet::new();
    if mode != CommitMode::DryRun {
        ctx.printer.confirm(
            ctx.assume_yes,
            &format!("destroy {what} in `{}` ({} file(s))?", dir.shown().display(), doomed.len()),
        )?;
        let listed = dir.instances(&profiles);
        let drains = drains(ctx, &args, &ids, &listed, &profiles)?;
        let draining: Vec<Draining<'_>> =
            drains.iter().map(|(instance, group, drain)| Draining { instance, group, drain }).collect();
        kept = crate::cmd::drain::drain(&ws, &ctx.printer, &draining)?;
        if !kept.is_empty() {
            let left: BTreeSet<InstanceId> = ids.difference(&kept).cloned().collect();
            doomed = if left.is_empty() {
                Vec::new()
            } else {
                removals(ws.dir(), &instances, &left, args.reason, &ctx.printer)?
            };
        }
    }
    let list: Vec<String> = ids.difference(&kept).map(ToString::to_string).collect();
    let abandoned: Vec<String> = kept.iter().map(ToString::to_string).collect();
    let what = if list.is_empty() {
        "nothing".to_string()
    } else if list.len() == 1 {
        list[0].clone()
    } else {
        format!("{} instances ({})", list.len(), list.join(", "))
    };
    let Committed { outcome, failure } = if doomed.is_empty() {
        Committed { outcome: Outcome::default(), failure: None }
    } else {
        ws.commit(ChangeSet::removing(doomed), mode)?
    };
    let reason = match args.reason {
        Reason::Terminate => "terminate",
        Reason::RollingUpdate => "rolling_update",
    };
    let verb = if mode == CommitMode::DryRun { "would destroy" } else { "destroyed" };
    ctx.printer.status(&format!("{verb} {what} ({reason}): {} file(s)", outcome.files.len()));
    let report = Report { destroyed: list, abandoned, reason, outcome };
    if ctx.printer.json_output() {
        ctx.printer.json(&report)?;
    } else {
        ctx.printer.data(&report.destroyed.join("\n"))?;
    }
    if let Some(failure) = failure {
        return Err(failure);
    }
    if !report.abandoned.is_empty() {
        return Err(crate::cmd::drain::abandoned(&report.abandoned));
    }
    Ok(())
}

/// The drain of each of `ids` that has one: its group's (the member's `infrakit.group` tag,
/// its spec found as `reconcile` finds it), the flags over it; with `--drain-cmd`, every
/// instance's. The group specs are read only when a member has a group or `--group` is given.
fn drains<'i>(
    ctx: &Ctx,
    args: &DestroyArgs,
    ids: &BTreeSet<InstanceId>,
    listed: &'i [Instance],
    profiles: &crate::profile::Profiles,
) -> Result<Vec<(&'i Instance, String, Drain)>> {
    let doomed: Vec<&Instance> = listed.iter().filter(|i| ids.contains(&i.id)).collect();
    let grouped = doomed.iter().any(|i| i.tags.contains_key(GROUP_TAG));
    let groups = if grouped || !args.groups.is_empty() {
        crate::cmd::load_groups(ctx, &args.groups, &ctx.dir, profiles)?
    } else {
        Vec::new()
    };
    let flags = crate::cmd::drain::flags(&args.drain);
    Ok(doomed
        .into_iter()
        .filter_map(|i| {
            let group = i.tags.get(GROUP_TAG).cloned().unwrap_or_default();
            let spec = groups.iter().find(|(g, _)| !group.is_empty() && g.id == group);
            let drain = Drain::resolve(spec.and_then(|(g, _)| g.lifecycle.as_ref()), &flags)?;
            Some((i, group, drain))
        })
        .collect())
}
