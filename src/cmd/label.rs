//! `label ID K=V...`: merge labels into an instance's VM tags, in its current file, and apply.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use crate::cli::LabelArgs;
use crate::context::Ctx;
use crate::exit::{invalid, not_found};
use crate::tfconfig;
use crate::workspace::{ChangeSet, CommitMode, Committed, FileWrite, Outcome, Workspace};

#[derive(Serialize)]
struct Report {
    #[serde(rename = "ID")]
    id: String,
    file: String,
    #[serde(rename = "Tags")]
    tags: BTreeMap<String, String>,
    /// Whether the file changed.
    changed: bool,
    #[serde(flatten)]
    outcome: Outcome,
}

pub(crate) fn run(args: LabelArgs, ctx: &Ctx) -> Result<()> {
    let id = args.id.to_string();
    // Data: written so that terraform reads it literally (`tfconfig::literal`); the report
    // reads the tags back as given.
    let labels: BTreeMap<String, String> =
        args.labels.iter().map(|(k, v)| (tfconfig::literal(k), tfconfig::literal(v))).collect();
    let mode = CommitMode::from_flags(args.no_apply, args.dry_run);
    let mut ws = Workspace::for_mode(ctx, mode)?;
    let dir = ws.dir();
    let profiles = ctx.profiles()?;
    let file = dir.current(&id).ok_or_else(|| {
        not_found(format!("no such instance in `{}`: {id}", dir.shown().display()))
            .hint("`infrakit-tf describe` lists the instances")
    })?;
    let mut doc = dir.read_doc(&file)?;
    let (vm_type, vm_name) =
        tfconfig::find_vm(&doc, &profiles, &id).map(|(t, n)| (t.to_string(), n.to_string())).ok_or_else(|| {
            invalid(format!("`{file}` has no VM to label"))
                .hint("declare its VM type with --vm-type or in infrakit-tf.json")
        })?;
    let profile = profiles.get(&vm_type).expect("find_vm returns VM types");
    let props = tfconfig::resource_mut(&mut doc, &vm_type, &vm_name).expect("found above");
    tfconfig::merge_tags(props, profile, &labels);
    if profile.lowercase_tags {
        tfconfig::lowercase_list_tags(props, profile);
    }
    let tags = tfconfig::read_tags(props, profile);
    let changes = ChangeSet::writing(vec![FileWrite::managed(file.clone(), doc)]);
    let Committed { outcome, failure } = ws.commit(changes, mode)?;
    let changed = outcome.changed();
    ctx.printer.status(&format!("labelled {id} in {file}{}", if changed { "" } else { " (no change)" }));
    let report = Report { id, file, tags, changed, outcome };
    if ctx.printer.json_output() {
        ctx.printer.json(&report)?;
    } else {
        ctx.printer.data(&report.id)?;
    }
    failure.map_or(Ok(()), Err)
}
