//! `provision SPEC`: expand a spec into a new instance's files and print its ID.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde::Serialize;

use crate::cli::ProvisionArgs;
use crate::cmd::load_spec;
use crate::context::Ctx;
use crate::exit::invalid;
use crate::expand::{self, Request, Slots};
use crate::fsio::{Mode, Written};
use crate::names::{self, Kind};

#[derive(Serialize)]
struct Report {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "LogicalID")]
    logical_id: Option<String>,
    /// The files written (or left unchanged), with what happened to each.
    files: Vec<FileChange>,
    /// Whether terraform ran.
    applied: bool,
}

#[derive(Serialize)]
struct FileChange {
    name: String,
    action: &'static str,
}

pub fn run(args: ProvisionArgs, ctx: &Ctx) -> Result<()> {
    let dir = ctx.directory()?;
    let profiles = ctx.profiles(&dir)?;
    let spec = load_spec(&args.spec, &profiles, &ctx.printer)?;
    let logical_id = args.logical_id.clone().or_else(|| spec.logical_id.clone());
    if let Some(lid) = &logical_id {
        names::check_path_component(lid, "logical ID").map_err(invalid)?;
    }
    let tags: BTreeMap<String, String> = args.tags.iter().cloned().collect();

    let _lock = ctx.lock()?;
    let dir = ctx.directory()?; // listed again: another run may have written while we waited
    let slots = if spec.needs_slot() { dir.slots(&profiles)? } else { Slots::default() };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let id = dir.next_id(now, &BTreeSet::new());
    let expansion = expand::expand(
        &Request { spec: &spec, profiles: &profiles, id: &id, logical_id: logical_id.as_deref(), tags: &tags },
        &slots,
    )
    .map_err(invalid)?;

    let mut files = Vec::new();
    for (base, doc) in &expansion.files {
        let name = dir.target(base);
        let mode = if matches!(names::classify(base), Some(Kind::Instance(_))) { Mode::Private } else { Mode::Public };
        let existed = dir.current(base).is_some();
        let action = match dir.write(&name, doc, mode)? {
            Written::Unchanged => "unchanged",
            Written::Changed if existed => "updated",
            Written::Changed => "created",
        };
        ctx.printer.detail(&format!("{action} {name}"));
        files.push(FileChange { name, action });
    }
    ctx.printer.status(&format!(
        "provisioned {id}: {} file(s) queued; run terraform to apply",
        files.iter().filter(|f| f.action != "unchanged").count()
    ));
    let report = Report { id: id.to_string(), logical_id, files, applied: false };
    if ctx.printer.json_output() {
        ctx.printer.json(&report)
    } else {
        ctx.printer.data(&report.id)
    }
}
