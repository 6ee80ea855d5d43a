//! The report of a reconcile: one [`Report`], built as the run goes and printed once at its
//! end (`--output json`: as it is; else the table on a terminal, and the one timestamped line
//! cron keeps otherwise), its counts noted for the metrics ([`Report::note_metrics`]), and the
//! exit its content calls for ([`finish`]: the run's failure, abandoned members, halted
//! repairs, `--check` pending). The terraform runs it names are the workspace's count
//! (`Workspace::runs`), read once at the end.

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::Serialize;

use super::absence::Unconfirmed;
use super::groups::GroupReport;
use super::observe::{Observed, Reads};
use crate::cloud_record::Classified;
use crate::context::Ctx;
use crate::exit::{Code, Failure};
use crate::output::utc_now;
use crate::terraform::Plan;
use crate::tfoutput::{Action, Changes, ResourceChange};

#[derive(Debug, Serialize)]
pub(super) struct Pruned {
    #[serde(rename = "ID")]
    pub(super) id: String,
    pub(super) file: String,
    pub(super) vm: String,
}

#[derive(Debug, Default, Serialize)]
pub(super) struct Report {
    pub(super) check: bool,
    /// Instances whose VM vanished, their files removed.
    pub(super) pruned: Vec<Pruned>,
    /// Queued files promoted (in `--check`: that would be).
    pub(super) promoted: Vec<String>,
    /// Objects changed outside Terraform (`action` `delete`: vanished).
    pub(super) drift: Vec<ResourceChange>,
    /// The plan's changes before anything was pruned.
    pub(super) planned: Vec<ResourceChange>,
    pub(super) added: u64,
    pub(super) changed: u64,
    pub(super) destroyed: u64,
    pub(super) applied: bool,
    /// `--check`: whether anything is pending.
    pub(super) pending: bool,
    pub(super) terraform_runs: u32,
    /// Terraform runs started again after a transient error (README "Running unattended").
    pub(super) retries: u64,
    pub(super) duration_seconds: f64,
    /// The groups converged (`--group`, or infrakit-tf.json's `groups`).
    pub(super) groups: Vec<GroupReport>,
    /// What the run read from the cloud.
    pub(super) reads: Reads,
    /// Machines an apply that was cut short made but never recorded, found by their tags:
    /// adopted by this run (`{address, id}`); in `--check`, those the next run adopts (drift).
    pub(super) adopted: Vec<crate::lookup::Adopted>,
    /// Why machines may exist that no state records (an apply failed while creating, or was
    /// cut short), while the look-up is still to come: in `--check`, which looks without
    /// settling (what it finds is `adopted`, and pending); after a run, when its own apply
    /// failed while creating. `null`: nothing awaits.
    pub(super) lookup_pending: Option<String>,
    /// Machines kept as they are because the cloud's answer about them is not believed yet
    /// (a read that called one gone too early, or that its listing contradicts), could not be
    /// read, or may exist unlisted (an apply that failed or was cut short may have made them):
    /// nothing prunes, forgets or makes them again until a later run knows.
    pub(super) unconfirmed: Vec<Unconfirmed>,
    /// Machines a listing showed with this directory's tags that no state records, and that
    /// cannot be adopted: twins or leaks (`kind` `twin`: `sweep-orphans --strays` destroys
    /// them), and machines that name one of its groups but no file here (`unknown`: left
    /// alone). In `--check`, those the cloud record knows.
    pub(super) strays: Vec<Classified>,
}

impl Report {
    /// What an apply did.
    pub(super) fn note_applied(&mut self, c: Changes) {
        self.applied = true;
        self.added += c.add;
        self.changed += c.change;
        self.destroyed += c.remove;
    }

    /// What a converging run found before deciding.
    pub(super) fn observed(&mut self, o: &mut Observed) {
        self.promoted = std::mem::take(&mut o.promoted);
        self.reads = std::mem::take(&mut o.reads);
        self.unconfirmed = std::mem::take(&mut o.unconfirmed);
        self.strays.append(&mut o.strays.reported);
        self.adopted.extend(o.strays.adopted.iter().cloned());
        if let Some(c) = o.strays.applied.take() {
            self.note_applied(c);
        }
        self.fill_plan(o.seen.plan());
    }

    /// What the plan found: the drift, and the changes before anything was pruned.
    pub(super) fn fill_plan(&mut self, plan: &Plan) {
        self.drift = plan.drift.clone();
        self.planned = plan.changes.clone();
    }

    /// Notes the run's counts for the metrics (`metrics`): what terraform read, the retries,
    /// the drift, each group's outdated members and health.
    pub(super) fn note_metrics(&mut self, duration: std::time::Duration) {
        self.duration_seconds = (duration.as_secs_f64() * 100.0).round() / 100.0;
        self.retries = crate::metrics::retries();
        let read = crate::metrics::reads();
        (self.reads.refreshed, self.reads.lists, self.reads.data_sources) =
            (read.refreshed, read.lists, read.data_sources);
        crate::metrics::note_reconciled(self.drift.len(), self.groups.iter().map(|g| (g.id.clone(), g.outdated)));
        // Not when no group's rollout was reported (a run that failed before it rolled): the
        // series keep what the last run left.
        if self.groups.iter().any(|g| g.rollout.is_some()) {
            crate::metrics::note_rollouts(
                self.groups
                    .iter()
                    .filter_map(|g| Some((g.id.clone(), (g.rollout.as_ref()?.state, g.rollout.as_ref()?.replaced)))),
            );
        }
        if self.reads.slice.is_some() || self.check {
            crate::metrics::note_strays(self.strays.len());
        }
        if self.groups.iter().any(|g| g.placement.is_some()) {
            crate::metrics::note_zones(self.groups.iter().filter_map(|g| {
                let p = g.placement.as_ref()?;
                let zones = p.zones.iter().map(|(z, n)| (z.clone(), (*n, p.unavailable.iter().any(|u| &u.zone == z))));
                Some((g.id.clone(), zones.collect()))
            }));
        }
        crate::metrics::note_healing(self.groups.iter().filter_map(|g| {
            let h = g.healing.as_ref()?;
            let counts = crate::metrics::Healing {
                unhealthy: h.unhealthy.len(),
                repaired: h.repaired.len(),
                halted: h.repair_halted.is_some(),
            };
            Some((g.id.clone(), counts))
        }));
    }
}

/// Prints the report, then returns the failure that stopped the run, else the exit its
/// content calls for: abandoned members (17), halted repairs (18), a rollback (20), `--check`
/// pending (10).
pub(super) fn finish(ctx: &Ctx, report: &Report, failure: Option<anyhow::Error>) -> Result<()> {
    if ctx.printer.json_output() {
        ctx.printer.json(report)?;
    } else {
        ctx.printer.table_or_line(|| table(report).to_string(), || line(report))?;
    }
    if let Some(failure) = failure {
        return Err(failure);
    }
    let abandoned: Vec<String> = report.groups.iter().flat_map(|g| g.abandoned.iter().cloned()).collect();
    if !abandoned.is_empty() {
        return Err(crate::cmd::drain::abandoned(&abandoned));
    }
    let halted: Vec<(String, String)> =
        report.groups.iter().filter_map(|g| Some((g.id.clone(), g.healing.as_ref()?.repair_halted.clone()?))).collect();
    if !report.check && !halted.is_empty() {
        return Err(crate::cmd::heal::halted(&halted));
    }
    let rolled_back: Vec<(String, String)> = report
        .groups
        .iter()
        .filter(|g| g.rolled_back)
        .map(|g| (g.id.clone(), g.rollout.as_ref().and_then(|r| r.why.clone()).unwrap_or_default()))
        .collect();
    if !rolled_back.is_empty() {
        return Err(super::rollback::rolled_back(&rolled_back));
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
    let mut summary = format!(
        "{vanished} vanished, {} drifted, {changes} planned change(s), {} queued file(s)",
        r.drift.len() - vanished,
        r.promoted.len()
    );
    if !r.adopted.is_empty() {
        let unrecorded: Vec<String> = r.adopted.iter().map(|a| format!("{} = {}", a.address, a.id)).collect();
        summary.push_str(&format!(
            "; {} unrecorded machine(s) an apply cut short made: {}",
            unrecorded.len(),
            unrecorded.join(", ")
        ));
    }
    if !r.strays.is_empty() {
        let ids: Vec<&str> = r.strays.iter().map(|s| s.id.as_str()).collect();
        summary.push_str(&format!("; {} stray machine(s) in no state: {}", ids.len(), ids.join(", ")));
    }
    for g in r.groups.iter().filter(|g| g.pending) {
        summary.push_str(&format!("; group {}: {}", g.id, g.todo));
    }
    summary
}

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
    let adopted = if r.adopted.is_empty() || r.check { String::new() } else { format!(" adopted={}", r.adopted.len()) };
    let unconfirmed =
        if r.unconfirmed.is_empty() { String::new() } else { format!(" unconfirmed={}", r.unconfirmed.len()) };
    let strays = if r.strays.is_empty() || r.check { String::new() } else { format!(" strays={}", r.strays.len()) };
    let retries = if r.retries == 0 { String::new() } else { format!(" retries={}", r.retries) };
    let now = utc_now();
    let mut out = format!(
        "{now} {head}: {what}{adopted}{unconfirmed}{strays} terraform_runs={}{retries} refreshed={} lists={} in {:.2}s",
        r.terraform_runs, r.reads.refreshed, r.reads.lists, r.duration_seconds
    );
    for g in &r.groups {
        out.push_str(&format!("\n{now} {head}: {}", g.line()));
    }
    out
}

fn table(r: &Report) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.add_row(["pruned".to_string(), list(r.pruned.iter().map(|p| format!("{} ({} vanished)", p.id, p.vm)).collect())]);
    t.add_row(["promoted".to_string(), list(r.promoted.clone())]);
    t.add_row(["drift".to_string(), list(r.drift.iter().map(|d| format!("{} {}", d.action, d.address)).collect())]);
    awaiting_lookup_rows(&mut t, r);
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
    for g in &r.groups {
        t.add_row([format!("group {}", g.id), group_cell(g)]);
    }
    t.add_row(["cloud reads".to_string(), reads_cell(&r.reads)]);
    t.add_row(["duration".to_string(), format!("{:.2}s ({} terraform run(s))", r.duration_seconds, r.terraform_runs)]);
    t
}

/// A cell of a list: one item a line, `-` for none.
fn list(v: Vec<String>) -> String {
    if v.is_empty() {
        "-".to_string()
    } else {
        v.join("\n")
    }
}

/// The rows of what the cloud's answer leaves open, each when there is any: machines adopted
/// (in `--check`: unrecorded), a look-up pending, machines unconfirmed, strays.
fn awaiting_lookup_rows(t: &mut Table, r: &Report) {
    if !r.adopted.is_empty() {
        let name = if r.check { "unrecorded" } else { "adopted" };
        t.add_row([name.to_string(), list(r.adopted.iter().map(|a| format!("{} = {}", a.address, a.id)).collect())]);
    }
    if let Some(why) = &r.lookup_pending {
        t.add_row(["lookup pending".to_string(), why.clone()]);
    }
    if !r.unconfirmed.is_empty() {
        let rows = r.unconfirmed.iter().map(|u| match &u.until {
            Some(until) => format!("{} ({}; believed from {until})", u.address, u.why),
            None => format!("{} ({})", u.address, u.why),
        });
        t.add_row(["unconfirmed".to_string(), list(rows.collect())]);
    }
    if !r.strays.is_empty() {
        let rows = r.strays.iter().map(|s| {
            let names = s.address.clone().or_else(|| s.file.clone()).unwrap_or_else(|| "no file here".into());
            format!("{} {} ({names}; {})", s.rtype, s.id, s.kind.as_str())
        });
        t.add_row(["strays".to_string(), list(rows.collect())]);
    }
}

/// A group's cell: its counts, then what the run did to it, a line each.
fn group_cell(g: &GroupReport) -> String {
    let mut what = vec![format!(
        "{}/{} members, {} current, {} outdated{}",
        g.members,
        g.desired,
        g.current,
        g.outdated,
        if g.pending { format!(" (pending: {})", g.todo) } else { String::new() }
    )];
    what.extend(g.provisioned.iter().map(|id| format!("provisioned {id}")));
    what.extend(g.terminated.iter().map(|id| format!("terminated {id}")));
    what.extend(g.replaced.iter().map(|r| format!("replaced {} by {}", r.old, r.new)));
    what.extend(g.abandoned.iter().map(|id| format!("kept {id}: its drain failed")));
    if let Some(h) = &g.healing {
        what.extend(h.unhealthy.iter().map(|id| format!("unhealthy {id}")));
        what.extend(h.repaired.iter().map(|r| format!("repaired {} by {}", r.old, r.new)));
        what.extend(h.repair_halted.iter().map(|why| format!("repairs halted: {why}")));
    }
    what.extend(g.rollout.iter().map(super::groups::RolloutReport::words));
    what.extend(g.placement.iter().map(super::groups::PlacementReport::words));
    what.extend(g.stopped.iter().map(|why| format!("stopped: {why}")));
    what.join("\n")
}

/// The cell of what the run read from the cloud.
fn reads_cell(reads: &Reads) -> String {
    let mut read = format!("{} resource(s) refreshed", reads.refreshed);
    match &reads.slice {
        Some(slice) => read.push_str(&format!(" (slice {slice}), {} look-up listing(s)", reads.lists)),
        None => read.push_str(" (all)"),
    }
    if !reads.unlisted.is_empty() {
        read.push_str(&format!(", {} not listed: confirmed", reads.unlisted.len()));
    }
    if reads.whole_plan {
        read.push_str(", whole configuration planned");
    }
    read
}
