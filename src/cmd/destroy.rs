//! `destroy ID...`: remove instances. A rolling update removes only each instance's own file
//! (its dedicated slot stays, to be re-attached by the replacement); a termination also removes
//! the dedicated and global files it is attached to that no remaining instance refers to.
//! Every ID is checked before anything is removed.

use std::collections::BTreeSet;

use anyhow::Result;
use serde::Serialize;

use crate::cli::{DestroyArgs, Reason};
use crate::context::Ctx;
use crate::exit::{invalid, not_found};
use crate::names::{self, Kind};
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
    let profiles = ctx.profiles(dir)?;
    let known = dir.instance_ids();
    let missing: Vec<String> = ids.iter().filter(|id| !known.contains(id)).map(ToString::to_string).collect();
    if !missing.is_empty() {
        return Err(not_found(format!("no such instance in `{}`: {}", dir.path().display(), missing.join(", ")))
            .hint("`infrakit-tf describe` lists the instances")
            .into());
    }

    let mut doomed: Vec<String> = Vec::new();
    for id in &ids {
        doomed.extend(dir.twins(&id.to_string()));
    }
    if args.reason == Reason::Terminate {
        let (leaving, staying): (Vec<_>, Vec<_>) =
            dir.instances(&profiles).into_iter().partition(|i| ids.contains(&i.id));
        // An instance we cannot read may use any dedicated or global file: removing one would
        // pull it from under that instance. Refuse, as slot choice does.
        if let Some((blind, why)) = staying.iter().find_map(|i| Some((i, i.unreadable()?))) {
            return Err(invalid(format!("cannot tell which files {} still uses: {why}", blind.id))
                .hint(
                    "fix that instance file, or destroy with --reason rolling-update (removes only the instance file)",
                )
                .into());
        }
        let still_used: BTreeSet<String> = staying.into_iter().flat_map(|i| i.attachments).collect();
        let attached: BTreeSet<String> = leaving.into_iter().flat_map(|i| i.attachments).collect();
        for base in attached.difference(&still_used) {
            // Only ever our dedicated and global files, whatever a tag says.
            let ours = names::check_path_component(base, "attachment").is_ok()
                && matches!(names::classify(base), Some(Kind::Dedicated { .. } | Kind::Global { .. }));
            if !ours {
                ctx.printer.warn(&format!(
                    "ignoring attachment `{}`: not a dedicated or global file name",
                    crate::text::short(base)
                ));
                continue;
            }
            doomed.extend(dir.twins(base));
        }
    }

    let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let what =
        if list.len() == 1 { list[0].clone() } else { format!("{} instances ({})", list.len(), list.join(", ")) };
    if mode != CommitMode::DryRun {
        ctx.printer.confirm(
            ctx.assume_yes,
            &format!("destroy {what} in `{}` ({} file(s))?", dir.path().display(), doomed.len()),
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
