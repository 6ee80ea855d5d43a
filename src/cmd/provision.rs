//! `provision SPEC`: expand a spec into a new instance's files, apply, print its ID.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde::Serialize;

use crate::apply::{self, ChangeSet, Mode, Outcome};
use crate::cli::ProvisionArgs;
use crate::cmd::{load_spec, read_slots};
use crate::context::Ctx;
use crate::exit::invalid;
use crate::expand::{self, Request, Slots};
use crate::fsio::Perms;
use crate::names::{self, Kind};

#[derive(Serialize)]
struct Report {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "LogicalID")]
    logical_id: Option<String>,
    #[serde(flatten)]
    outcome: Outcome,
}

pub fn run(args: ProvisionArgs, ctx: &Ctx) -> Result<()> {
    let profiles = ctx.profiles_of_existing_dir()?;
    let spec = load_spec(&args.spec, &profiles, &ctx.printer)?;
    let logical_id = args.logical_id.clone().or_else(|| spec.logical_id.clone());
    if let Some(lid) = &logical_id {
        names::check_path_component(lid, "logical ID").map_err(invalid)?;
    }
    let tags: BTreeMap<String, String> = args.tags.iter().cloned().collect();
    let mode = Mode::from_flags(args.no_apply, args.dry_run);

    let _lock = if mode == Mode::DryRun { None } else { Some(ctx.lock()?) };
    let dir = ctx.directory()?; // listed under the lock: what another run wrote is seen
    if let Some(lid) = &logical_id {
        dir.check_logical_id_free(&profiles, lid)?;
    }
    let slots = if spec.needs_slot() { read_slots(&dir, &profiles, &ctx.printer)? } else { Slots::default() };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let id = dir.next_id(now)?;
    let expansion = expand::expand(
        &Request { spec: &spec, profiles: &profiles, id: &id, logical_id: logical_id.as_deref(), tags: &tags },
        &slots,
    )
    .map_err(invalid)?;
    let writes: Vec<_> = expansion
        .files
        .into_iter()
        .map(|(base, doc)| {
            let file_mode =
                if matches!(names::classify(&base), Some(Kind::Instance(_))) { Perms::Private } else { Perms::Public };
            (dir.target(&base), doc, file_mode)
        })
        .collect();
    let (outcome, failure) = apply::commit(ctx, &dir, ChangeSet { writes, removals: vec![] }, mode)?;
    let verb = match mode {
        Mode::DryRun => "would provision",
        Mode::Queue => "provisioned (queued)",
        Mode::Apply if failure.is_some() => "provisioned (apply failed)",
        Mode::Apply => "provisioned",
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
