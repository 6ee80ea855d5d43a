//! `provision SPEC`: expand a spec into a new instance's files, apply, print its ID.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use crate::cli::ProvisionArgs;
use crate::cmd::instances::NewInstances;
use crate::cmd::load_spec;
use crate::context::Ctx;
use crate::exit::invalid;
use crate::names;
use crate::workspace::{ChangeSet, CommitMode, Committed, Outcome, Workspace};

#[derive(Serialize)]
struct Report {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "LogicalID")]
    logical_id: Option<String>,
    #[serde(flatten)]
    outcome: Outcome,
}

pub(crate) fn run(args: ProvisionArgs, ctx: &Ctx) -> Result<()> {
    let profiles = ctx.profiles_of_existing_dir()?;
    let (spec, _group) = load_spec(&args.spec, &profiles, &ctx.printer)?;
    let logical_id = args.logical_id.clone().or_else(|| spec.logical_id.clone());
    if let Some(lid) = &logical_id {
        names::check_path_component(lid, "logical ID").map_err(invalid)?;
    }
    let tags: BTreeMap<String, String> = args.tags.iter().cloned().collect();
    let mode = CommitMode::from_flags(args.no_apply, args.dry_run);

    let mut ws = Workspace::for_mode(ctx, mode)?;
    let dir = ws.dir(); // listed under the lock: what another run wrote is seen
    if let Some(lid) = &logical_id {
        dir.check_logical_id_free(&profiles, lid)?;
    }
    let mut new = NewInstances::new(dir, &profiles, &ctx.printer);
    let id = new.add(&spec, logical_id.as_deref(), &tags)?;
    let Committed { outcome, failure } = ws.commit(ChangeSet::writing(new.writes), mode)?;
    let verb = match mode {
        CommitMode::DryRun => "would provision",
        CommitMode::Queue => "provisioned (queued)",
        CommitMode::Apply if failure.is_some() => "provisioned (apply failed)",
        CommitMode::Apply => "provisioned",
    };
    ctx.printer.status(&format!("{verb} {id}"));
    let report = Report { id: id.to_string(), logical_id, outcome };
    if ctx.printer.json_output() {
        ctx.printer.json(&report)?;
    } else {
        ctx.printer.data(&report.id)?;
    }
    failure.map_or(Ok(()), Err)
}
