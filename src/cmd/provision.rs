//! `provision SPEC`: expand a spec into a new instance's files, apply, print its ID. With
//! `--count N` (or several `--logical-id`), N instances in one change and one apply.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use crate::cli::ProvisionArgs;
use crate::cmd::instances::NewInstances;
use crate::cmd::load_spec;
use crate::context::Ctx;
use crate::exit::{invalid, Failure};
use crate::names::{self, InstanceId};
use crate::workspace::{ChangeSet, CommitMode, Committed, Outcome, Workspace};

#[derive(Serialize)]
struct Report<'o> {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "LogicalID")]
    logical_id: Option<String>,
    /// The whole change's (one commit for all the instances).
    #[serde(flatten)]
    outcome: &'o Outcome,
}

pub(crate) fn run(args: ProvisionArgs, ctx: &Ctx) -> Result<()> {
    let profiles = ctx.profiles_of_existing_dir()?;
    let (spec, group) = load_spec(&args.spec, &profiles, &ctx.printer)?;
    // A placed group's slots keep their zones, which only reconcile knows how to choose.
    let dedicated = spec.resources.iter().any(|r| matches!(r.scope, names::Scope::Dedicated(_)));
    if let Some(group) = group.filter(|g| g.placement.is_some() && dedicated) {
        return Err(invalid(format!(
            "group `{}` has `Placement` and dedicated resources: provision does not place members in zones; nothing was changed",
            group.id
        ))
        .hint("run `infrakit-tf reconcile --group FILE` (it keeps each slot's volume in its zone), or give an instance spec")
        .into());
    }
    // One instance per logical ID given, else `--count` of them (the spec's logical ID, if
    // any, for each: a second one is refused, as two pets cannot share it).
    let logical_ids: Vec<Option<String>> = if args.logical_id.is_empty() {
        vec![spec.logical_id.clone(); args.count.unwrap_or(1) as usize]
    } else {
        args.logical_id.iter().cloned().map(Some).collect()
    };
    for lid in logical_ids.iter().flatten() {
        names::check_logical_id(lid).map_err(invalid)?;
    }
    let tags: BTreeMap<String, String> = args.tags.iter().cloned().collect();
    let mode = CommitMode::from_flags(args.no_apply, args.dry_run);

    let mut ws = Workspace::for_mode(ctx, mode)?;
    let dir = ws.dir(); // listed under the lock: what another run wrote is seen
    let mut new = NewInstances::new(dir, &profiles, &ctx.printer);
    let ids =
        logical_ids.iter().map(|lid| new.add(&spec, lid.as_deref(), &tags)).collect::<Result<Vec<InstanceId>>>()?;
    let Committed { outcome, failure } = ws.commit(ChangeSet::writing(new.writes), mode)?;
    let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
    // An apply that failed may still have made some of the machines: each instance whose VM
    // (the resource named by its ID) was created is provisioned, the rest not; only the first
    // are printed on stdout, so that a script never holds an ID of nothing.
    let made = |id: &String| outcome.created.iter().any(|a| a.rsplit_once('.').is_some_and(|(_, n)| n == id));
    let (printed, not_made): (Vec<String>, Vec<String>) = match (mode, &failure) {
        (CommitMode::Apply, Some(_)) => list.iter().cloned().partition(made),
        _ => (list.clone(), Vec::new()),
    };
    let verb = match mode {
        CommitMode::DryRun => "would provision",
        CommitMode::Queue => "provisioned (queued)",
        CommitMode::Apply if failure.is_some() => "provisioned (apply failed)",
        CommitMode::Apply => "provisioned",
    };
    if !printed.is_empty() {
        ctx.printer.status(&format!("{verb} {}", printed.join(" ")));
    }
    if !not_made.is_empty() {
        ctx.printer.status(&format!(
            "not provisioned yet (the apply failed before its VM was created) {}",
            not_made.join(" ")
        ));
    }
    let several = args.count.is_some() || args.logical_id.len() > 1;
    if ctx.printer.json_output() && several {
        // One element per instance, each in the single provision's shape.
        let reports: Vec<Report<'_>> = ids
            .iter()
            .zip(&logical_ids)
            .map(|(id, lid)| Report { id: id.to_string(), logical_id: lid.clone(), outcome: &outcome })
            .collect();
        ctx.printer.json(&reports)?;
    } else if ctx.printer.json_output() {
        ctx.printer.json(&Report { id: list[0].clone(), logical_id: logical_ids[0].clone(), outcome: &outcome })?;
    } else if !printed.is_empty() {
        ctx.printer.data(&printed.join("\n"))?;
    }
    failure.map_or(Ok(()), |e| Err(undo_hint(e, &list)))
}

/// A failed apply keeps the new instances' files (it may have made part of their machines):
/// the failure says what to do next, unless it says so already.
fn undo_hint(mut err: anyhow::Error, ids: &[String]) -> anyhow::Error {
    if let Some(failure) = err.downcast_mut::<Failure>().filter(|f| f.hint.is_none()) {
        failure.hint = Some(format!(
            "the files of {} were kept: fix the spec or the directory's configuration and run `infrakit-tf reconcile`, or undo with `infrakit-tf destroy {} --yes`",
            ids.join(" "),
            ids.join(" ")
        ));
    }
    err
}
