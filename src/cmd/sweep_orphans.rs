//! `sweep-orphans`: remove what nothing owns any more. Orphans are live files only (queued
//! files are intentions, never swept):
//!
//! - an instance file whose VM is not in Terraform's state;
//! - a dedicated slot file no remaining instance's `infrakit.attach` names (left by a rolling
//!   update followed by a scale-down, or by pruning);
//! - a global file no remaining instance names.
//!
//! Never while an apply that failed while creating (or was cut short) awaits its look-up: an
//! instance whose VM is not in state may then have its machine in the cloud.
//!
//! It lists them with what terraform will destroy (a dry-run plan), asks on a terminal (or
//! needs `--yes`), then removes them and applies (unless `--no-apply`).
//!
//! `--strays` sweeps machines instead of files: the twins among the strays the last
//! `reconcile` found (`workspace::strays`), counted by `--max-destroy`, asked for the same way.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::Serialize;

use crate::cli::SweepArgs;
use crate::cloud_record::{Classified, StrayKind};
use crate::context::Ctx;
use crate::directory::{Directory, Instance};
use crate::exit::{invalid, Code, Failure};
use crate::names::{Kind, Suffix, IMPORT_FILE, STRAYS_FILE};
use crate::tfoutput::{Action, ResourceChange};
use crate::workspace::{ChangeSet, CommitMode, Committed, Outcome, Workspace};

#[derive(Debug, Serialize)]
struct Orphan {
    file: String,
    kind: &'static str,
    why: String,
}

#[derive(Debug, Serialize)]
struct Report {
    orphans: Vec<Orphan>,
    /// What terraform plans to destroy for them.
    destroys: Vec<ResourceChange>,
    #[serde(flatten)]
    outcome: Option<Outcome>,
}

pub(crate) fn run(args: SweepArgs, ctx: &Ctx) -> Result<()> {
    let mut ws = if args.dry_run { Workspace::read(ctx)? } else { Workspace::writer(ctx, ctx.lock_timeout)? };
    if args.strays {
        return strays(&args, ctx, &mut ws);
    }
    let profiles = ctx.profiles()?;
    let instances = ws.dir().instances(&profiles);
    may_sweep(&ws, &instances)?;
    let orphans = orphans(ws.dir(), &instances, &ws.state()?);
    let dir = ws.dir();

    if orphans.is_empty() {
        ctx.printer.status(&format!("no orphans in `{}`", dir.shown().display()));
        if ctx.printer.json_output() {
            ctx.printer.json(&Report { orphans, destroys: vec![], outcome: None })?;
        }
        return Ok(());
    }
    let changes = || ChangeSet::removing(orphans.iter().map(|o| o.file.clone()).collect());
    let preview = ws.commit(changes(), CommitMode::DryRun)?.outcome;
    let destroys: Vec<ResourceChange> = preview.planned.into_iter().filter(|c| c.action == Action::Delete).collect();
    if !ctx.printer.json_output() {
        ctx.printer.data(&table(&orphans, &destroys).to_string())?;
    }
    if args.dry_run {
        if ctx.printer.json_output() {
            ctx.printer.json(&Report { orphans, destroys, outcome: None })?;
        }
        return Ok(());
    }
    ctx.printer.confirm(
        ctx.assume_yes,
        &format!(
            "remove {} orphaned file(s) in `{}` and destroy {} resource(s)?",
            orphans.len(),
            ws.dir().shown().display(),
            destroys.len()
        ),
    )?;
    let mode = if args.no_apply { CommitMode::Queue } else { CommitMode::Apply };
    let Committed { outcome, failure } = ws.commit(changes(), mode)?;
    ctx.printer.status(&format!("swept {} orphaned file(s)", orphans.len()));
    if ctx.printer.json_output() {
        ctx.printer.json(&Report { orphans, destroys, outcome: Some(outcome) })?;
    }
    failure.map_or(Ok(()), Err)
}

/// Refuses a sweep while what looks orphaned may not be: an import did not finish, an apply
/// that failed while creating awaits its look-up, or an instance file cannot be read.
fn may_sweep(ws: &Workspace<'_>, instances: &[Instance]) -> Result<()> {
    // A killed import's blocks adopt objects on the next apply: until then, the instance they
    // belong to has files but no VM in state, and would look orphaned.
    if ws.dir().has(IMPORT_FILE) {
        return Err(invalid(format!("an import did not finish: `{IMPORT_FILE}` is still in the directory"))
            .hint("run `infrakit-tf reconcile` first (it finishes the import), then sweep-orphans")
            .into());
    }
    // An apply that failed while creating (or was cut short) may have made machines that no
    // state records: their files are not orphans, and whether they are is known once
    // `reconcile` has looked them up (exit 13 until then).
    ws.refuse_until_looked_up("sweep orphans")?;
    // An instance we cannot read may own anything: its VM may be in state under a type we do
    // not know, and its attachments are unknown. Sweeping around it could destroy what it uses.
    if let Some((blind, why)) = instances.iter().find_map(|i| Some((i, i.unreadable()?))) {
        return Err(invalid(format!("cannot tell what {} owns: {why}", blind.id))
            .hint("fix or remove that instance file, then re-run sweep-orphans")
            .into());
    }
    Ok(())
}

/// The live files nothing owns: instance files whose VM is not in `state`, and dedicated and
/// global files no remaining instance is attached to.
fn orphans<S>(dir: &Directory, instances: &[Instance], state: &BTreeMap<String, S>) -> Vec<Orphan> {
    let mut orphans = Vec::new();
    let mut swept_ids = BTreeSet::new();
    for inst in instances.iter().filter(|i| i.suffix == Suffix::Live) {
        let (t, n) = inst.vm.as_ref().expect("readable instances have a VM");
        let vm = format!("{t}.{n}");
        if !state.contains_key(&vm) {
            let why = format!("its VM `{vm}` is not in Terraform's state");
            orphans.push(Orphan { file: inst.file.clone(), kind: "instance", why });
            swept_ids.insert(inst.id.clone());
        }
    }
    let attached: BTreeSet<&String> =
        instances.iter().filter(|i| !swept_ids.contains(&i.id)).flat_map(|i| i.attachments.iter()).collect();
    for f in dir.managed() {
        let kind = match f.kind {
            Kind::Dedicated { .. } => "dedicated",
            Kind::Global { .. } => "global",
            Kind::Instance(_) => continue,
        };
        if f.suffix == Suffix::Live && !attached.contains(&f.base.to_string()) {
            orphans.push(Orphan { file: f.name.to_string(), kind, why: "no instance is attached to it".into() });
        }
    }
    orphans
}

/// What `sweep-orphans --strays` reports.
#[derive(Debug, Serialize)]
struct StraysReport {
    /// Every stray the last reconcile found, and whether it is destroyed (`kind` `twin`).
    strays: Vec<Classified>,
    /// Machines destroyed (in a dry run: that would be).
    destroyed: u64,
}

/// `--strays`: destroys the twins among the strays the last reconcile found (see the module
/// doc). A sweep of strays killed half way is finished first.
fn strays(args: &SweepArgs, ctx: &Ctx, ws: &mut Workspace<'_>) -> Result<()> {
    let mut destroyed = 0;
    if !args.dry_run && ws.dir().has(STRAYS_FILE) {
        ctx.printer.status("an earlier sweep of strays was cut short: finishing it");
        destroyed += ws.finish_strays()?.remove;
    }
    // One adopted or destroyed since the reconcile that found it is no stray any more.
    let state: BTreeMap<String, String> =
        ws.state()?.into_iter().map(|(a, r)| (a, r.attribute("id").unwrap_or_default())).collect();
    let strays: Vec<Classified> = ws.known_strays(&state);
    let twins = strays.iter().filter(|s| s.kind == StrayKind::Twin).count() as u64;
    if strays.is_empty() {
        ctx.printer.status(&format!("no strays in `{}` (as the last reconcile found)", ws.dir().shown().display()));
    } else if !ctx.printer.json_output() {
        ctx.printer.data(&strays_table(&strays).to_string())?;
    }
    if args.dry_run || twins == 0 {
        if ctx.printer.json_output() {
            ctx.printer.json(&StraysReport { strays, destroyed: if args.dry_run { twins } else { destroyed } })?;
        }
        return Ok(());
    }
    if twins > args.max_destroy {
        return Err(Failure::new(
            Code::TooManyDestroys,
            format!("refusing to destroy {twins} stray machine(s) (more than --max-destroy {}); nothing was destroyed", args.max_destroy),
        )
        .hint("look at them first (`infrakit-tf sweep-orphans --strays --dry-run`); if this is wanted, run again with a higher --max-destroy")
        .into());
    }
    ctx.printer.confirm(
        ctx.assume_yes,
        &format!("destroy {twins} stray machine(s) of `{}` (in no state)?", ws.dir().shown().display()),
    )?;
    destroyed += ws.destroy_strays(&strays)?.remove;
    ctx.printer.status(&format!("destroyed {destroyed} stray machine(s)"));
    if ctx.printer.json_output() {
        ctx.printer.json(&StraysReport { strays, destroyed })?;
    }
    Ok(())
}

fn strays_table(strays: &[Classified]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(["STRAY", "TYPE", "NAMES", "WHAT IS DONE"]);
    for s in strays {
        let names = s
            .address
            .clone()
            .or_else(|| s.file.clone())
            .unwrap_or_else(|| format!("no file here (group {})", s.group.as_deref().unwrap_or("-")));
        let done = match s.kind {
            StrayKind::Twin => "destroyed: its resource has another machine",
            StrayKind::Adoptable => "left to reconcile, which adopts it",
            StrayKind::Unknown | StrayKind::Foreign => "left alone: not this directory's to destroy",
        };
        t.add_row([s.id.clone(), s.rtype.clone(), names, done.to_string()]);
    }
    t
}

fn table(orphans: &[Orphan], destroys: &[ResourceChange]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(["ORPHAN", "KIND", "WHY"]);
    for o in orphans {
        t.add_row([o.file.clone(), o.kind.to_string(), o.why.clone()]);
    }
    let destroyed = if destroys.is_empty() {
        "-".into()
    } else {
        destroys.iter().map(|d| d.address.clone()).collect::<Vec<_>>().join("\n")
    };
    t.add_row(["terraform will destroy".to_string(), String::new(), destroyed]);
    t
}
