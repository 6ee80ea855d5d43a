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
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::Serialize;

use crate::apply::{self, ChangeSet, PlannedChange};
use crate::cli::ReconcileArgs;
use crate::context::Ctx;
use crate::exit::{Code, Failure};
use crate::names::{self, Kind, Suffix};
use crate::progress::{utc_now, Progress};
use crate::terraform::Report as TfReport;

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
    drift: Vec<PlannedChange>,
    /// The plan's changes before anything was pruned.
    planned: Vec<PlannedChange>,
    added: u64,
    changed: u64,
    destroyed: u64,
    applied: bool,
    /// `--check`: whether anything is pending.
    pending: bool,
    terraform_runs: u32,
    duration_seconds: f64,
}

pub fn run(args: ReconcileArgs, ctx: &Ctx) -> Result<()> {
    let started = Instant::now();
    let timeout = if args.no_wait { Duration::ZERO } else { ctx.lock_timeout };
    let _lock = ctx.lock_within(timeout)?;
    let dir = ctx.directory()?;
    let profiles = ctx.profiles(&dir)?;
    let tf = ctx.terraform(&dir)?;
    apply::preflight(&dir, &ChangeSet::default())?; // refuses before anything is promoted
    let instances = dir.instances(&profiles);
    let queued: Vec<String> =
        dir.managed().filter(|(_, _, _, s)| *s == Suffix::Queued).map(|(n, _, _, _)| n.to_string()).collect();
    let mut report = Report { check: args.check, promoted: queued.clone(), ..Report::default() };

    if args.check {
        let plan = apply::plan_mirror(ctx, &dir, &tf, &ChangeSet::default(), true)?;
        report.terraform_runs = 1;
        fill_plan(&mut report, &plan);
        report.pending = plan.has_changes || !report.drift.is_empty() || !queued.is_empty();
        return finish(ctx, report, started, args.check);
    }

    let promoted_ids: BTreeSet<String> =
        instances.iter().filter(|i| i.suffix == Suffix::Queued).map(|i| i.id.to_string()).collect();
    apply::promote(ctx, dir.path())?;
    // An import that did not finish: its blocks are applied now (see `settle_imports`).
    let importing = apply::settle_imports(dir.path())? > 0;
    apply::init_if_needed(ctx, dir.path(), &tf, &providers(&dir, &instances))?;
    let plan_dir = tempfile::Builder::new()
        .prefix("infrakit-tf-plan-")
        .tempdir()
        .context("failed to create a temporary directory")?;
    let plan_file = plan_dir.path().join("plan");
    let out = format!("-out={}", plan_file.display());
    let mut progress = Progress::new(ctx.printer.quiet(), ctx.printer.verbose());
    let plan =
        tf.stream(&["plan", "-json", "-input=false", "-detailed-exitcode", &out], &mut |e| progress.on_event(e))?;
    report.terraform_runs = 1;
    fill_plan(&mut report, &plan);

    // Prune: live instances whose VM vanished. Queued (just promoted) ones are never pruned.
    let vanished: BTreeSet<&str> =
        plan.drift.iter().filter(|(_, action)| action == "delete").map(|(addr, _)| addr.as_str()).collect();
    let doomed: Vec<_> = instances
        .iter()
        .filter(|i| !promoted_ids.contains(&i.id.to_string()))
        .filter_map(|i| {
            let (t, n) = i.vm.as_ref()?;
            let addr = format!("{t}.{n}");
            vanished.contains(addr.as_str()).then_some((i, addr))
        })
        .collect();
    // Everything in a pruned instance's file goes: its vanished VM and the siblings the apply
    // will destroy. Counted before anything is touched.
    let prune_count: u64 = doomed.iter().map(|(i, _)| resource_count(i.doc.as_ref().ok()) as u64).sum();
    let destroys = plan.planned.map_or(0, |c| c.remove) + prune_count;
    if destroys > args.max_destroy {
        let ids: Vec<String> = doomed.iter().map(|(i, _)| i.id.to_string()).collect();
        return Err(Failure::new(
            Code::TooManyDestroys,
            format!(
                "refusing to destroy {destroys} resources (more than --max-destroy {}): {} vanished machine(s){}; nothing was applied",
                args.max_destroy,
                ids.len(),
                if ids.is_empty() { String::new() } else { format!(" ({})", ids.join(", ")) }
            ),
        )
        .hint("check the provider and the cloud; if this is wanted, run again with a higher --max-destroy")
        .into());
    }
    // All pruned files go together, or none (a killed prune is undone and found again).
    let pruned_files: Vec<String> = doomed.iter().map(|(inst, _)| format!("{}{}", inst.id, names::LIVE)).collect();
    let removals = ChangeSet { removals: pruned_files.clone(), ..ChangeSet::default() };
    apply::commit(ctx, &dir.relisted()?, removals, apply::Mode::Queue)?;
    for ((inst, vm), file) in doomed.iter().zip(pruned_files) {
        progress_line(ctx, &format!("pruned {} ({vm} vanished)", inst.id));
        report.pruned.push(Pruned { id: inst.id.to_string(), file, vm: vm.clone() });
    }
    if importing && !report.pruned.is_empty() {
        apply::settle_imports(dir.path())?;
    }

    // A refresh that found objects gone is saved by applying its plan, even one with no
    // changes: otherwise every later run finds the same drift and `--check` never says 0.
    let applied = if !report.pruned.is_empty() {
        Some(tf.stream(&["apply", "-auto-approve", "-input=false", "-json"], &mut |e| progress.on_event(e))?)
    } else if plan.has_changes || !plan.drift.is_empty() {
        let plan_arg = plan_file.to_str().context("plan path is not UTF-8")?;
        Some(tf.stream(&["apply", "-auto-approve", "-input=false", "-json", plan_arg], &mut |e| progress.on_event(e))?)
    } else {
        None
    };
    progress.finish();
    if importing && applied.is_none() {
        // The plan included the import blocks and found nothing to do: they were carried out
        // by an apply whose end the importing run did not see.
        dir.remove(names::IMPORT_FILE)?;
    }
    if let Some(applied) = applied {
        if importing {
            dir.remove(names::IMPORT_FILE)?;
        }
        report.terraform_runs += 1;
        report.applied = true;
        let c = applied.applied.unwrap_or_default();
        (report.added, report.changed, report.destroyed) = (c.add, c.change, c.remove);
    }
    finish(ctx, report, started, false)
}

fn fill_plan(report: &mut Report, plan: &TfReport) {
    report.drift = PlannedChange::list(&plan.drift);
    report.planned = PlannedChange::list(&plan.changes);
}

/// Provider prefixes of every managed resource type (for `init` on a new provider).
fn providers(dir: &crate::directory::Directory, instances: &[crate::directory::Instance]) -> BTreeSet<String> {
    // The listing predates promotion: every managed file now has its live name.
    let others: Vec<serde_json::Value> = dir
        .managed()
        .filter(|(_, _, kind, _)| !matches!(kind, Kind::Instance(_)))
        .filter_map(|(_, base, _, _)| dir.read_doc(&format!("{base}{}", names::LIVE)).ok())
        .collect();
    apply::providers_of(instances.iter().filter_map(|i| i.doc.as_ref().ok()).chain(&others))
}

fn resource_count(doc: Option<&serde_json::Value>) -> usize {
    doc.and_then(|d| d.get("resource")?.as_object())
        .map_or(0, |types| types.values().filter_map(|n| n.as_object()).map(|n| n.len()).sum())
}

fn progress_line(ctx: &Ctx, message: &str) {
    if std::io::stderr().is_terminal() {
        ctx.printer.status(message);
    } else {
        ctx.printer.status(&format!("{} {message}", utc_now()));
    }
}

fn finish(ctx: &Ctx, mut report: Report, started: Instant, check: bool) -> Result<()> {
    report.duration_seconds = (started.elapsed().as_secs_f64() * 100.0).round() / 100.0;
    if ctx.printer.json_output() {
        ctx.printer.json(&report)?;
    } else if std::io::stdout().is_terminal() {
        ctx.printer.data(&table(&report).to_string())?;
    } else {
        ctx.printer.data(&line(&report))?;
    }
    if check && report.pending {
        return Err(Failure::new(Code::Pending, format!("changes are pending: {}", summary(&report)))
            .hint("run `infrakit-tf reconcile` to apply them")
            .into());
    }
    Ok(())
}

fn summary(r: &Report) -> String {
    let vanished = r.drift.iter().filter(|d| d.action == "delete").count();
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
