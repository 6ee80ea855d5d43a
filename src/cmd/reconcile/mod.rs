//! `reconcile`: what cron runs. Under the lock (`--no-wait`: busy is exit 5 at once), it
//! promotes the queue and runs ONE refreshing `plan -json -detailed-exitcode -out=PLAN`. The
//! plan's `resource_drift` events with action `delete` name machines deleted behind
//! Terraform's back. For each live instance whose VM vanished (never one with a queued file),
//! the instance file is removed: its default-scope siblings go with it, its dedicated slot
//! stays as an orphan for the next provision to re-attach, its global files stay (unreferenced
//! ones are `sweep-orphans`' business: a cron job never removes shared resources on its own).
//! An instance whose create failed is not pruned: its VM never vanished, so the apply retries
//! it, as after any failed apply.
//!
//! Then: nothing to do → done (one terraform run); changes and nothing pruned → apply the saved
//! plan (no second plan); something pruned → apply afresh. Before anything is pruned or applied,
//! a run that would destroy more than `--max-destroy` resources is refused (exit 11).
//!
//! `--check` plans the would-be directory (queue promoted) in a mirror, with a refresh that is
//! not saved, and exits 10 when anything is pending: drift, changes or queued files.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::Serialize;

use crate::cli::ReconcileArgs;
use crate::context::Ctx;
use crate::directory::Instance;
use crate::exit::{Code, Failure};
use crate::names::{self, Suffix};
use crate::output::utc_now;
use crate::terraform::{Apply, Plan};
use crate::tfoutput::{Action, ResourceChange};
use crate::workspace::{ChangeSet, Workspace};

#[derive(Debug, Serialize)]
struct Pruned {
    #[serde(rename = "ID")]
    id: String,
    file: String,
    vm: String,
}

#[derive(Debug, Default, Serialize)]
struct Report {
    check: bool,
    /// Instances whose VM vanished, their files removed.
    pruned: Vec<Pruned>,
    /// Queued files promoted (in `--check`: that would be).
    promoted: Vec<String>,
    /// Objects changed outside Terraform (`action` `delete`: vanished).
    drift: Vec<ResourceChange>,
    /// The plan's changes before anything was pruned.
    planned: Vec<ResourceChange>,
    added: u64,
    changed: u64,
    destroyed: u64,
    applied: bool,
    /// `--check`: whether anything is pending.
    pending: bool,
    terraform_runs: u32,
    duration_seconds: f64,
}

pub(crate) fn run(args: ReconcileArgs, ctx: &Ctx) -> Result<()> {
    let started = Instant::now();
    let timeout = if args.no_wait { Duration::ZERO } else { ctx.lock_timeout };
    let mut ws = Workspace::lock(ctx, timeout)?;
    let profiles = ctx.profiles(ws.dir())?;
    ws.terraform()?;
    ws.preflight(&ChangeSet::default())?; // refuses before anything is promoted
    let instances = ws.dir().instances(&profiles);
    let mut report = Report { check: args.check, ..Report::default() };
    if args.check {
        check(&ws, &mut report)?;
    } else {
        converge(ctx, &mut ws, &instances, args.max_destroy, &mut report)?;
    }
    report.duration_seconds = (started.elapsed().as_secs_f64() * 100.0).round() / 100.0;
    finish(ctx, &report)
}

/// `--check`: plans the would-be directory (queue promoted) in a mirror, with a refresh that
/// is not saved.
fn check(ws: &Workspace<'_>, report: &mut Report) -> Result<()> {
    report.promoted = ws.dir().queued().map(str::to_string).collect();
    let plan = ws.plan_after(&ChangeSet::default(), true)?;
    report.terraform_runs = 1;
    fill_plan(report, &plan);
    report.pending = plan.has_changes || !report.drift.is_empty() || !report.promoted.is_empty();
    Ok(())
}

/// Promote, plan, prune, apply (see the module doc).
fn converge(
    ctx: &Ctx,
    ws: &mut Workspace<'_>,
    instances: &[Instance],
    max_destroy: u64,
    report: &mut Report,
) -> Result<()> {
    let promoted_ids: BTreeSet<String> =
        instances.iter().filter(|i| i.suffix == Suffix::Queued).map(|i| i.id.to_string()).collect();
    report.promoted = ws.promote()?;
    // An import that did not finish: its blocks are applied now (see `Workspace::settle_imports`).
    let importing = ws.settle_imports()?;
    ws.init_if_needed(&ws.providers(instances))?;
    let saved = ws.plan()?;
    report.terraform_runs = 1;
    fill_plan(report, &saved.plan);

    // Prune: live instances whose VM vanished. Queued (just promoted) ones are never pruned.
    let doomed = vanished(&saved.plan, instances, &promoted_ids);
    check_max_destroy(&saved.plan, &doomed, max_destroy)?;
    // All pruned files go together, or none (a killed prune is undone and found again).
    let pruned_files: Vec<String> = doomed.iter().map(|(inst, _)| format!("{}{}", inst.id, names::LIVE)).collect();
    ws.write(ChangeSet::removing(pruned_files.clone()))?;
    for ((inst, vm), file) in doomed.iter().zip(pruned_files) {
        ctx.printer.event(&format!("pruned {} ({vm} vanished)", inst.id));
        report.pruned.push(Pruned { id: inst.id.to_string(), file, vm: vm.clone() });
    }
    if importing && !report.pruned.is_empty() {
        ws.settle_imports()?;
    }

    // A refresh that found objects gone is saved by applying its plan, even one with no
    // changes: otherwise every later run finds the same drift and `--check` never says 0.
    let applied = if !report.pruned.is_empty() {
        Some(ws.apply(Apply::Configuration { refresh: true })?)
    } else if saved.plan.has_changes || !saved.plan.drift.is_empty() {
        Some(ws.apply(Apply::Saved(saved.path()))?)
    } else {
        None
    };
    if importing {
        // Carried out by this apply, or (a plan with nothing to do) by an apply whose end the
        // importing run did not see.
        ws.finish_imports()?;
    }
    if let Some(c) = applied {
        report.terraform_runs += 1;
        report.applied = true;
        (report.added, report.changed, report.destroyed) = (c.add, c.change, c.remove);
    }
    Ok(())
}

/// The live instances whose VM the plan found deleted outside Terraform, with the VM's
/// address. Instances just promoted from the queue are never among them.
fn vanished<'i>(plan: &Plan, instances: &'i [Instance], promoted: &BTreeSet<String>) -> Vec<(&'i Instance, String)> {
    let gone: BTreeSet<&str> =
        plan.drift.iter().filter(|d| d.action == Action::Delete).map(|d| d.address.as_str()).collect();
    instances
        .iter()
        .filter(|i| !promoted.contains(&i.id.to_string()))
        .filter_map(|i| {
            let (t, n) = i.vm.as_ref()?;
            let addr = format!("{t}.{n}");
            gone.contains(addr.as_str()).then_some((i, addr))
        })
        .collect()
}

/// Refuses a run that would destroy more than `max` resources: the plan's own destroys, and
/// everything in a pruned instance's file (its vanished VM and the siblings the apply will
/// destroy). Counted before anything is touched.
fn check_max_destroy(plan: &Plan, doomed: &[(&Instance, String)], max: u64) -> Result<()> {
    let prune_count: u64 = doomed.iter().map(|(i, _)| resource_count(i.doc.as_ref().ok()) as u64).sum();
    let destroys = plan.totals.remove + prune_count;
    if destroys <= max {
        return Ok(());
    }
    let ids: Vec<String> = doomed.iter().map(|(i, _)| i.id.to_string()).collect();
    Err(Failure::new(
        Code::TooManyDestroys,
        format!(
            "refusing to destroy {destroys} resources (more than --max-destroy {max}): {} vanished machine(s){}; nothing was applied",
            ids.len(),
            if ids.is_empty() { String::new() } else { format!(" ({})", ids.join(", ")) }
        ),
    )
    .hint("check the provider and the cloud; if this is wanted, run again with a higher --max-destroy")
    .into())
}

fn fill_plan(report: &mut Report, plan: &Plan) {
    report.drift = plan.drift.clone();
    report.planned = plan.changes.clone();
}

fn resource_count(doc: Option<&serde_json::Value>) -> usize {
    doc.and_then(|d| d.get("resource")?.as_object())
        .map_or(0, |types| types.values().filter_map(|n| n.as_object()).map(|n| n.len()).sum())
}

fn finish(ctx: &Ctx, report: &Report) -> Result<()> {
    if ctx.printer.json_output() {
        ctx.printer.json(report)?;
    } else {
        ctx.printer.table_or_line(|| table(report).to_string(), || line(report))?;
    }
    if report.check && report.pending {
        return Err(Failure::new(Code::Pending, format!("changes are pending: {}", summary(report)))
            .hint("run `infrakit-tf reconcile` to apply them")
            .into());
    }
    Ok(())
}

fn summary(r: &Report) -> String {
    let vanished = r.drift.iter().filter(|d| d.action == Action::Delete).count();
    let changes = r.planned.len();
    format!(
        "{vanished} vanished, {} drifted, {changes} planned change(s), {} queued file(s)",
        r.drift.len() - vanished,
        r.promoted.len()
    )
}

/// One timestamped line: what cron logs.
fn line(r: &Report) -> String {
    let pruned: Vec<&str> = r.pruned.iter().map(|p| p.id.as_str()).collect();
    let head = if r.check { "reconcile --check" } else { "reconcile" };
    let pruned = if pruned.is_empty() { "0".to_string() } else { format!("{} ({})", pruned.len(), pruned.join(" ")) };
    let what = if r.check {
        format!("{}; pending={}", summary(r), r.pending)
    } else {
        format!(
            "pruned={pruned} promoted={} drift={} applied={} +{} ~{} -{}",
            r.promoted.len(),
            r.drift.len(),
            r.applied,
            r.added,
            r.changed,
            r.destroyed
        )
    };
    format!("{} {head}: {what} terraform_runs={} in {:.2}s", utc_now(), r.terraform_runs, r.duration_seconds)
}

fn table(r: &Report) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let list = |v: Vec<String>| if v.is_empty() { "-".to_string() } else { v.join("\n") };
    t.add_row(["pruned".to_string(), list(r.pruned.iter().map(|p| format!("{} ({} vanished)", p.id, p.vm)).collect())]);
    t.add_row(["promoted".to_string(), list(r.promoted.clone())]);
    t.add_row(["drift".to_string(), list(r.drift.iter().map(|d| format!("{} {}", d.action, d.address)).collect())]);
    if r.check {
        t.add_row([
            "planned".to_string(),
            list(r.planned.iter().map(|d| format!("{} {}", d.action, d.address)).collect()),
        ]);
        t.add_row(["pending".to_string(), r.pending.to_string()]);
    } else {
        t.add_row([
            "applied".to_string(),
            format!("{} added, {} changed, {} destroyed", r.added, r.changed, r.destroyed),
        ]);
    }
    t.add_row(["duration".to_string(), format!("{:.2}s ({} terraform run(s))", r.duration_seconds, r.terraform_runs)]);
    t
}
