//! `reconcile`: what cron runs. Under the lock (`--no-wait`: busy is exit 5 at once), it
//! promotes the queue and looks at the cloud. When a look-up lists machines of the directory
//! (`presence`), the look costs what a group costs, not what it holds: one listing per look-up
//! type and group, a rotating slice refreshed (`--refresh-slice`), what no listing shows
//! refreshed, and a machine the listings did not show refreshed alone to confirm
//! (`workspace::look`); the whole configuration is planned without refreshing unless nothing
//! changed since such a plan found nothing to do. Otherwise (or `--full-refresh`), ONE
//! refreshing `plan -json -detailed-exitcode -out=PLAN`. The `resource_drift` events with
//! action `delete` name machines deleted behind Terraform's back. For each live instance whose VM vanished (never one with a queued file),
//! the instance file is removed: its default-scope siblings go with it, its dedicated slot
//! stays as an orphan for the next provision to re-attach, its global files stay (unreferenced
//! ones are `sweep-orphans`' business: a cron job never removes shared resources on its own).
//! An instance whose create failed is not pruned: its VM never vanished, so the apply retries
//! it, as after any failed apply.
//!
//! Then: nothing to do → done; changes and nothing pruned → apply the saved plan (no second
//! plan); something pruned → apply afresh. After a look, the objects confirmed gone are
//! forgotten and the drifted ones read into the state again (`-refresh-only` of them alone),
//! then the configuration applies without refreshing: nothing is read twice. Before anything is pruned or applied,
//! a run that would destroy more than `--max-destroy` resources is refused (exit 11).
//!
//! Every member a group gives up (terminated on scale-in, or the old member of a rolling
//! update) is first drained when its group has a drain (`cmd::drain`): after `--max-destroy`
//! allowed the run, before its files are removed, so that a run killed at any point leaves it
//! to the next run to drain again. One whose drain failed under `abandon` is kept (the
//! report's `abandoned`) and the run exits 17 once all else is done.
//!
//! Groups that heal (`Healing`, `--heal-cmd`) have their created members checked after the
//! plan, before `--max-destroy` is counted (`cmd::heal`): the health record is written then,
//! and the unhealthy members to repair join the group's rolling update, so that their
//! replacements take its road and count in `--max-destroy`. A group whose repairs the circuit
//! breaker halted ends the run with exit 18 once all else is done (after 17).
//!
//! `--check` plans the would-be directory (queue promoted) in a mirror, with a refresh that is
//! not saved, and exits 10 when anything is pending: drift, changes, queued files, or a repair
//! the health record calls for (it runs no check).

mod absence;
mod decide;
mod groups;
mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Result;

use self::absence::{Reading, Unconfirmed};
use self::decide::{Applying, Found, Next, Order};
use self::groups::{Group, GroupReport, Replaced};
use self::report::{Pruned, Reads, Report};
use crate::cli::{Reason, ReconcileArgs};
use crate::cloud_record::{Classified, StrayKind};
use crate::cmd::drain::Draining;
use crate::cmd::instances::{removals, NewInstances};
use crate::context::Ctx;
use crate::directory::Instance;
use crate::exit::{Code, Failure};
use crate::health_record::HealthRecord;
use crate::names::{self, InstanceId};
use crate::output::Printer;
use crate::presence::{RefreshRecord, Slice};
use crate::profile::Profiles;
use crate::terraform::{Apply, Plan};
use crate::workspace::{ChangeSet, SavedPlan, Workspace};

pub(crate) fn run(args: ReconcileArgs, ctx: &Ctx) -> Result<()> {
    let started = Instant::now();
    // Every group spec is read and checked before anything else: a bad one changes nothing.
    let profiles = ctx.profiles_of_existing_dir()?;
    let groups = groups::load(ctx, &args.groups, &profiles, &args.drain, &args.heal)?;
    let timeout = if args.no_wait { Duration::ZERO } else { ctx.lock_timeout };
    let mut ws = match Workspace::writer(ctx, timeout) {
        // `--no-wait` asked not to wait: the hint to wait longer does not fit.
        Err(e) if args.no_wait && crate::exit::code_for(&e) == Code::Locked => {
            return Err(Failure::new(Code::Locked, format!("{e}"))
                .hint("another run is at work; the next cron run tries again (without --no-wait, reconcile waits up to --lock-timeout)")
                .into())
        }
        locked => locked?,
    };
    let specs: Vec<(String, String)> = groups.iter().map(|g| (g.spec.id.clone(), g.spec.fingerprint_input())).collect();
    ws.check_groups(&specs)?;
    ws.terraform()?;
    if args.check {
        ws.check_only(); // a state terraform could not save is refused, not pushed
    }
    ws.preflight(&ChangeSet::default())?; // refuses before anything is promoted
    if !args.check {
        ws.forget_strays_sweep()?;
    }
    let adopted = ws.find_unrecorded(args.check, &[])?;
    let lookup_pending = ws.awaiting_lookup().map(str::to_string);
    let mut report = Report { check: args.check, adopted, lookup_pending, ..Report::default() };
    if !args.check && !report.adopted.is_empty() {
        let adopted = report.adopted.clone();
        adopt_first(&mut ws, &ctx.printer, &mut report, &adopted)?;
    }
    let instances = ws.dir().instances(&profiles);
    // The health counts as earlier runs left them: which members are unhealthy.
    let record = if groups.iter().any(|g| g.heal.is_some()) {
        crate::cmd::heal::read(&ws, &ctx.printer)
    } else {
        HealthRecord::default()
    };
    let failure = if args.check {
        check(&mut ws, (&profiles, &ctx.printer), &groups, &instances, &record, &mut report)?;
        None
    } else {
        let run = Run { ctx, profiles: &profiles, args: &args, groups: &groups, record: &record };
        let failure = run.converge(&mut ws, &instances, &mut report)?;
        report.lookup_pending = ws.awaiting_lookup().map(str::to_string);
        // What an apply's retry held back meanwhile (its look-up could not settle it yet).
        for held in absence::held_and_unread(&ws, &[]) {
            if !report.unconfirmed.iter().any(|u| u.address == held.address) {
                report.unconfirmed.push(held);
            }
        }
        failure
    };
    report.terraform_runs = ws.runs();
    report.note_metrics(started.elapsed());
    report::finish(ctx, &report, failure)
}

/// Imports the machines adopted after a cut apply (a targeted plan of their addresses,
/// applied) before anything is decided: a scale-down could otherwise remove the instance whose
/// machine is being adopted, and its import block, left without an address, would leak the
/// machine. Their import blocks go once carried out (a scale-down may remove their addresses);
/// those of an import that did not finish stay for the whole apply that follows. A plan that
/// would destroy anything (an adopted machine replaced) is not applied here: it is left to
/// the whole apply, which `--max-destroy` checks.
fn adopt_first(
    ws: &mut Workspace<'_>,
    printer: &Printer,
    report: &mut Report,
    adopted: &[crate::lookup::Adopted],
) -> Result<()> {
    let targets: Vec<String> = adopted.iter().map(|a| a.address.clone()).collect();
    let saved = ws.plan_targets(&targets)?;
    if saved.plan.totals.remove > 0 {
        printer.status(&format!(
            "importing the adopted machines would destroy {}: left to this run's apply, which --max-destroy checks",
            saved.plan.totals.remove
        ));
        return Ok(());
    }
    let c = ws.apply(saved.to_apply())?;
    ws.imports_done(&targets)?;
    report.applied = true;
    report.added += c.add;
    report.changed += c.change;
    report.destroyed += c.remove;
    Ok(())
}

/// The line that reports a stray.
fn stray_line(s: &Classified) -> String {
    let whose = s.file.as_deref().map_or_else(
        || format!("the tags of group `{}`, naming no file here", s.group.as_deref().unwrap_or("(none)")),
        |f| format!("the tags of `{f}`"),
    );
    match s.kind {
        StrayKind::Twin => format!(
            "stray {} {}: it carries {whose}, whose {} is another machine, and is in no state (a twin a lost answer made, or a leak): `infrakit-tf sweep-orphans --strays` destroys it",
            s.rtype,
            s.id,
            s.address.as_deref().unwrap_or("resource")
        ),
        _ => format!(
            "stray {} {}: it carries {whose} and is in no state; another directory's? it is left alone (delete it, or take the tags off, if it is nobody's)",
            s.rtype, s.id
        ),
    }
}

/// `--check`: plans the would-be directory (queue promoted) in a mirror, with a refresh that
/// is not saved, and decides the groups from it; changes nothing.
fn check(
    ws: &mut Workspace<'_>,
    (profiles, printer): (&Profiles, &Printer),
    groups: &[Group],
    instances: &[Instance],
    record: &HealthRecord,
    report: &mut Report,
) -> Result<()> {
    report.promoted = ws.dir().queued().map(str::to_string).collect();
    let at = ws.now_ms()?;
    let mut plan = ws.plan_after(&ChangeSet::default(), true)?;
    // What a run would not believe gone yet is not pending either: the run would keep it.
    // A machine whose listing contradicted a read (a plain run's: the cloud record) counts as
    // listed, as the plain run that follows would count it: --check reads no listing itself.
    let shown: BTreeSet<String> = ws.dir().cloud_record().map(|r| r.gone.into_keys().collect()).unwrap_or_default();
    let reading = Reading { shown: &shown, read: None, ids: None, at };
    report.unconfirmed = absence::weigh(ws, &mut plan, &reading, profiles, printer, true)?;
    report.unconfirmed.extend(absence::held_and_unread(ws, &[]));
    let state: BTreeMap<String, String> =
        ws.state()?.into_iter().map(|(a, r)| (a, r.attribute("id").unwrap_or_default())).collect();
    report.strays = ws.known_strays(&state).into_iter().filter(|s| s.kind != StrayKind::Adoptable).collect();
    report.reads.full_refresh = true;
    report.fill_plan(&plan);
    let decisions = decide::decide(groups, &Found { instances, plan: &plan, record }).decisions;
    for (group, (members, decision)) in groups.iter().zip(&decisions) {
        report.groups.push(GroupReport::new(group, members, decision));
    }
    // No check runs: the health record says which repairs are pending.
    for (i, g) in &decide::healed(groups, instances, &decisions) {
        report.groups[*i].heal(&crate::cmd::heal::verdict(record, g));
    }
    report.pending = plan.has_changes
        || !report.adopted.is_empty()
        || !report.strays.is_empty()
        || !report.drift.is_empty()
        || !report.promoted.is_empty()
        || report.groups.iter().any(|g| g.pending);
    Ok(())
}

/// One converging run: what it was asked.
struct Run<'a> {
    ctx: &'a Ctx,
    profiles: &'a Profiles,
    args: &'a ReconcileArgs,
    groups: &'a [Group],
    /// The health record as the run found it.
    record: &'a HealthRecord,
}

impl Run<'_> {
    /// Promote, plan, then in one change and one apply: prune, and scale every group; then
    /// replace the groups' outdated members, batch by batch. Returns the failure that stopped
    /// a rolling update, if one did (the report is printed first).
    fn converge(
        &self,
        ws: &mut Workspace<'_>,
        instances: &[Instance],
        report: &mut Report,
    ) -> Result<Option<anyhow::Error>> {
        // Until the first write, a refusal (too many destroys, a logical ID in use, a failed
        // plan) puts back what promotion and settling changed: refused, nothing changed.
        let touched: Vec<String> =
            ws.dir().queued().map(str::to_string).chain([names::IMPORT_FILE.to_string()]).collect();
        let before = ws.save_files(&touched);
        let Decided { seen, doomed, pruned_files, decisions, scale, added, importing } =
            match self.decide(ws, instances, report) {
                Ok(decided) => decided,
                Err(e) => {
                    if let Err(undo) = ws.restore(&before) {
                        self.ctx.printer.warn(&format!("the promoted queue could not be put back: {undo:#}"));
                    }
                    report.promoted.clear();
                    return Err(e);
                }
            };
        let scaling = !scale.writes.is_empty() || scale.removals.len() > pruned_files.len();
        ws.write(scale)?;
        ws.promote()?; // the new members' files, queued as any new file is
        for ((inst, vm), file) in doomed.iter().zip(pruned_files) {
            self.ctx.printer.event(&format!("pruned {} ({vm} vanished)", inst.id));
            report.pruned.push(Pruned { id: inst.id.to_string(), file, vm: vm.clone() });
        }
        for ((g, ids), (_, decision)) in report.groups.iter_mut().zip(&added).zip(&decisions) {
            g.provisioned = ids.iter().map(ToString::to_string).collect();
            g.terminated = decision.terminate.iter().map(ToString::to_string).collect();
            if !ids.is_empty() || !decision.terminate.is_empty() {
                self.ctx.printer.event(&format!(
                    "group {}: provisioning {}, terminating {}",
                    g.id,
                    g.provisioned.len(),
                    g.terminated.len()
                ));
            }
        }
        if importing && !report.pruned.is_empty() {
            ws.settle_imports()?;
        }

        // A refresh that found objects gone is saved by applying its plan, even one with no
        // changes: otherwise every later run finds the same drift and `--check` never says 0.
        // After a look, or when machines are kept unconfirmed (a refresh would drop them from
        // the state, and the apply make them again), what the reads found is settled first
        // (`settle_look`), and the configuration applied without refreshing: nothing is read
        // twice.
        let plan = seen.plan();
        let applying = Applying {
            looked: matches!(seen, Seen::Looked { .. }),
            whole: matches!(seen, Seen::Looked { whole: Some(_), .. }),
            unconfirmed: !report.unconfirmed.is_empty(),
            pruned: !report.pruned.is_empty(),
            scaling,
            drift: !plan.drift.is_empty(),
            changes: plan.has_changes,
        };
        let careful = applying.careful();
        let what = match (applying.next(), &seen) {
            (Next::Nothing, _) => None,
            (Next::Configuration { refresh }, _) => Some(Apply::Configuration { refresh }),
            (Next::Saved, Seen::Refreshed(saved) | Seen::Looked { whole: Some(saved), .. }) => Some(saved.to_apply()),
            (Next::Saved, Seen::Looked { whole: None, .. }) => {
                unreachable!("a saved plan is applied only when there is one")
            }
        };
        let settled_and_applied = |ws: &mut Workspace<'_>, what| {
            if careful {
                let deposed = match &seen {
                    Seen::Looked { deposed, .. } => deposed.as_slice(),
                    Seen::Refreshed(_) => &[],
                };
                Self::settle_look(ws, plan, deposed)?;
            }
            ws.apply(what)
        };
        let applied = match what.map(|what| settled_and_applied(ws, what)).transpose() {
            Ok(applied) => applied,
            // The files stay as asked (a failed create is retried by the next apply): the
            // report says what was decided, then the run fails.
            Err(e) if !self.groups.is_empty() => {
                for g in &mut report.groups {
                    g.pending = true;
                }
                return Ok(Some(e));
            }
            Err(e) => return Err(e),
        };
        if importing {
            // Carried out by this apply, or (a plan with nothing to do) by an apply whose end the
            // importing run did not see.
            ws.finish_imports()?;
        }
        if let Some(c) = applied {
            report.applied = true;
            report.added += c.add;
            report.changed += c.change;
            report.destroyed += c.remove;
        }
        if let Seen::Looked { digest, cursor, whole, .. } = &seen {
            // The slice was read and what the look found is settled: the next run, on any
            // host, goes on after it (a slice that could not be read is read again).
            if cursor.is_some() {
                ws.write_refresh_record(&RefreshRecord { cursor: cursor.clone() })?;
            }
            if what.is_none() && whole.is_some() {
                ws.note_planned(digest)?;
            }
        }
        if scaling {
            self.settle_counts(ws, report);
        }

        // Rolling updates: batch by batch, each waiting for the last.
        let mut tally = Tally::default();
        let mut stopped = None;
        for ((group, (_, decision)), g) in self.groups.iter().zip(&decisions).zip(report.groups.iter_mut()) {
            if decision.replace.is_empty() {
                continue;
            }
            let failure = self.roll(ws, group, &decision.replace, g, &mut tally);
            if let Some(failure) = &failure {
                g.stopped = Some(format!("{failure:#}"));
            }
            g.repaired();
            self.settle_group(ws, group, g);
            if failure.is_some() {
                stopped = failure;
                break;
            }
        }
        report.applied |= tally.tried;
        report.added += tally.changes.add;
        report.changed += tally.changes.change;
        report.destroyed += tally.changes.remove;
        Ok(stopped)
    }

    /// Promotes and settles the queue, plans, and decides everything this run will do: what
    /// to prune, and every group's new members and terminations as one change. Checks
    /// `--max-destroy`. Writes nothing but the promotion.
    fn decide<'i>(
        &self,
        ws: &mut Workspace<'_>,
        instances: &'i [Instance],
        report: &mut Report,
    ) -> Result<Decided<'i>> {
        report.promoted = ws.promote()?;
        // An import that did not finish: its blocks are applied now (see `Workspace::settle_imports`).
        let importing = ws.settle_imports()?;
        ws.keep_configuration()?;
        ws.init_if_needed(&ws.providers(instances))?;
        let read_at = ws.now_ms()?;
        let mut seen = self.look(ws, report)?;
        report.unconfirmed = seen.weigh(ws, read_at, self.profiles, &self.ctx.printer, false)?;
        if let Seen::Looked { strays, whole, .. } = &mut seen {
            // A stray adopted changes the state: a whole plan saved before is stale (planned
            // again below when the run applies anything).
            if self.strays(ws, strays, report)? {
                *whole = None;
            }
        }
        report.fill_plan(seen.plan());

        // Prune: live instances whose VM vanished. Queued (just promoted) ones are never pruned.
        let found = Found { instances, plan: seen.plan(), record: self.record };
        let decide::Decided { doomed, leaving, mut decisions } = decide::decide(self.groups, &found);
        for (group, (members, decision)) in self.groups.iter().zip(&decisions) {
            report.groups.push(GroupReport::new(group, members, decision));
        }
        // Health checks: the unhealthy members to repair join the rolling updates.
        self.heal(ws, instances, &mut decisions, report)?;

        // Scale: every group's new members and terminations, with the pruned files, in one
        // change (all or nothing), applied at once.
        let pruned_files: Vec<String> = doomed.iter().map(|(inst, _)| format!("{}{}", inst.id, names::LIVE)).collect();
        let terminated: BTreeSet<InstanceId> =
            decisions.iter().flat_map(|(_, d)| d.terminate.iter().cloned()).collect();
        let mut terminations = removals(ws.dir(), instances, &terminated, Reason::Terminate, &self.ctx.printer)?;
        let mut new = NewInstances::new(ws.dir(), self.profiles, &self.ctx.printer).replacing(&leaving);
        let mut added: Vec<Vec<InstanceId>> = Vec::new();
        for (group, (_, decision)) in self.groups.iter().zip(&decisions) {
            let ids = decision
                .add
                .iter()
                .map(|lid| new.add(&group.members, lid.as_deref(), &BTreeMap::new()))
                .collect::<Result<Vec<_>>>()?;
            added.push(ids);
        }
        let writes = new.writes;
        // A shared file a new member writes is not removed with a terminated one.
        terminations.retain(|name| !writes.iter().any(|w| w.name == *name));
        let mut scale = ChangeSet { writes, removals: pruned_files.iter().cloned().chain(terminations).collect() };
        let last_added = added.iter().flatten().max();
        // Nothing applies unless the whole configuration was planned and counted: an apply
        // plans all of it again, and what your data sources read may change more than the
        // look saw (a new image replaces every machine that uses it).
        let anything = !doomed.is_empty()
            || !scale.writes.is_empty()
            || !scale.removals.is_empty()
            || decisions.iter().any(|(_, d)| !d.replace.is_empty());
        seen.plan_whole(ws, anything, report)?;
        let planned = self.planned_destroys(ws, instances, &leaving, &decisions, &scale, last_added)?;
        decide::check_max_destroy(self.groups, self.args.max_destroy, seen.plan(), &doomed, planned, &decisions)?;

        // Drain the members to terminate, now that the run is allowed, before their files go
        // (see `cmd::drain`); those kept (`abandon`) leave the change.
        let kept =
            self.drain(ws, instances, self.groups.iter().zip(decisions.iter().map(|(_, d)| d.terminate.as_slice())))?;
        if !kept.is_empty() {
            for ((_, decision), g) in decisions.iter_mut().zip(report.groups.iter_mut()) {
                g.abandoned =
                    decision.terminate.iter().filter(|id| kept.contains(id)).map(ToString::to_string).collect();
                decision.terminate.retain(|id| !kept.contains(id));
            }
            let terminated: BTreeSet<InstanceId> = terminated.difference(&kept).cloned().collect();
            let mut terminations = removals(ws.dir(), instances, &terminated, Reason::Terminate, &self.ctx.printer)?;
            terminations.retain(|name| !scale.writes.iter().any(|w| w.name == *name));
            scale.removals = pruned_files.iter().cloned().chain(terminations).collect();
        }
        Ok(Decided { seen, doomed, pruned_files, decisions, scale, added, importing })
    }

    /// Looks at the cloud (see the module doc): a look when a look-up lists machines of the
    /// directory, else (or `--full-refresh`) a refreshing plan of everything, saved. A listing
    /// the cloud throttles fails the run (a full refresh would be throttled too, and cost
    /// more); one that fails otherwise (a mistake in `lookups`) makes it refresh everything.
    fn look(&self, ws: &mut Workspace<'_>, report: &mut Report) -> Result<Seen> {
        let slice = Slice { of: self.args.refresh_slice };
        let listed = if self.args.full_refresh { None } else { ws.presence(slice)? };
        let refresh_all = |ws: &mut Workspace<'_>, report: &mut Report| {
            let saved = ws.plan()?;
            report.reads = Reads { full_refresh: true, ..Reads::default() };
            Ok(Seen::Refreshed(saved))
        };
        let Some((state, presence)) = listed else { return refresh_all(ws, report) };
        report.reads.slice = Some(slice.to_string());
        let digest = ws.digest(&state);
        let whole = if ws.planned_before(&digest) { None } else { Some(ws.plan_unrefreshed()?) };
        report.reads.whole_plan = whole.is_some();
        let look = match ws.look(&presence)? {
            Ok(look) => look,
            Err(failed) if failed.transient => {
                return Err(Failure::new(
                    Code::TerraformFailed,
                    format!("{} failed: {:#}", failed.what, failed.error),
                )
                .hint("the cloud refused the listing for now (throttled, or briefly away); nothing was pruned or applied, and nothing more was read (a full refresh would be refused too): the next run looks again")
                .into());
            }
            // A look-up that cannot list (a mistake in `lookups`) must not stop cron: this run
            // refreshes everything, as before.
            Err(failed) => {
                self.ctx.printer.warn(&format!(
                    "{} could not be read, so this run refreshes everything (check `lookups` in infrakit-tf.json): {:#}",
                    failed.what, failed.error
                ));
                return refresh_all(ws, report);
            }
        };
        report.reads.unlisted = look.unlisted.clone();
        let addresses: BTreeSet<String> =
            presence.listed.iter().map(|l| l.address.clone()).chain(presence.always.iter().cloned()).collect();
        let (strays, strays_read) = ws.strays(&look.unknown, &addresses)?;
        // Each listing, one listing again after a read failed, the slice, each confirmation,
        // and two calls for each stray read: each tried as often as retries allow.
        let tries = u64::from(ws.terraform()?.retries()) + 1;
        let reads = presence.listings.len() + 1 + presence.slice.len() + look.unlisted.len() + 2 * strays_read;
        report.reads.bound = Some(tries * reads as u64);

        let plan = crate::workspace::merge(whole.as_ref().map(|w| &w.plan), look.plan, None);
        Ok(Seen::Looked {
            plan,
            whole,
            digest,
            cursor: look.cursor,
            deposed: presence.deposed,
            shown: look.shown,
            read: look.read,
            unread: look.unread,
            strays,
            ids: presence.ids,
        })
    }

    /// After a look, before the configuration applies without refreshing: the objects it
    /// confirmed gone are forgotten (no cloud call), and those that drifted are read into the
    /// state again (`-refresh-only` of them alone), so that the apply sees what the look saw.
    /// One gone that holds a deposed object is read again too: forgetting its address would
    /// forget that object, and leak it.
    fn settle_look(ws: &mut Workspace<'_>, plan: &Plan, deposed: &[String]) -> Result<()> {
        let (kept, gone): (Vec<String>, Vec<String>) = crate::workspace::gone(plan)
            .into_iter()
            .partition(|a| deposed.iter().any(|d| a.split('[').next() == Some(d.as_str())));
        let mut drifted = crate::workspace::drifted(plan);
        drifted.extend(kept);
        if !gone.is_empty() {
            ws.forget(&gone)?;
        }
        if !drifted.is_empty() {
            ws.apply(Apply::RefreshOnly(&drifted))?;
        }
        Ok(())
    }

    /// The strays the look found (`workspace::strays`): one that stands for a resource without
    /// a machine (and carries its group tag: `cloud_record::classify`) is adopted at once
    /// (imported, as after a cut apply); the others are reported, one line each, and left alone (a plain run
    /// still succeeds; `reconcile --check` says so; `sweep-orphans --strays` destroys twins).
    /// Whether it adopted any.
    fn strays(&self, ws: &mut Workspace<'_>, strays: &[Classified], report: &mut Report) -> Result<bool> {
        let mut adopting = Vec::new();
        for s in strays {
            match (s.kind, &s.address) {
                (StrayKind::Adoptable, Some(address)) => {
                    self.ctx.printer.status(&format!(
                        "adopted {address} = {}: a machine the listing shows with its tags, in no state",
                        s.id
                    ));
                    adopting.push(crate::lookup::Adopted { address: address.clone(), id: s.id.clone() });
                }
                _ => {
                    self.ctx.printer.warn(&stray_line(s));
                    report.strays.push(s.clone());
                }
            }
        }
        if adopting.is_empty() {
            return Ok(false);
        }
        let existing = ws.dir().read_doc(names::IMPORT_FILE).ok();
        let blocks = crate::lookup::import_blocks(existing.as_ref(), &adopting);
        ws.write(ChangeSet::writing(vec![crate::workspace::FileWrite::managed(names::IMPORT_FILE.into(), blocks)]))?;
        report.adopted.extend(adopting.iter().cloned());
        adopt_first(ws, &self.ctx.printer, report, &adopting)?;
        Ok(true)
    }

    /// Checks the members of the groups that heal (`cmd::heal`), writes the health record,
    /// and adds the members to repair to their group's replacements (after the outdated).
    fn heal(
        &self,
        ws: &mut Workspace<'_>,
        instances: &[Instance],
        decisions: &mut [(Vec<crate::converge::Member>, crate::converge::Decision)],
        report: &mut Report,
    ) -> Result<()> {
        let healed = decide::healed(self.groups, instances, decisions);
        let verdicts = crate::cmd::heal::check(
            ws,
            &self.ctx.printer,
            instances,
            self.record.clone(),
            &healed.iter().map(|(_, h)| h).collect::<Vec<_>>(),
        )?;
        for ((i, h), verdict) in healed.iter().zip(verdicts) {
            if let Some(why) = &verdict.halted {
                self.ctx.printer.warn(&format!("group {}: repairs halted: {why}", h.group));
            }
            for id in &verdict.repair {
                self.ctx.printer.event(&format!("group {}: {id} is unhealthy: repairing it", h.group));
            }
            report.groups[*i].heal(&verdict);
            decide::repair(&mut decisions[*i].1, &verdict);
        }
        Ok(())
    }

    /// Replaces `outdated` members of `group`, `--max-unavailable` at a time. Returns the
    /// failure that stopped it: nothing more is destroyed after a batch fails.
    fn roll(
        &self,
        ws: &mut Workspace<'_>,
        group: &Group,
        outdated: &[InstanceId],
        report: &mut GroupReport,
        tally: &mut Tally,
    ) -> Option<anyhow::Error> {
        let road = decide::rollout(group, outdated, self.args.max_unavailable);
        // A replacement an earlier run made must be healthy before anything more is destroyed:
        // an update that stopped stays stopped until the cause is fixed.
        let instances = ws.dir().instances(self.profiles);
        // (Not the members this roll replaces: an unhealthy member being repaired is current.)
        let current: Vec<InstanceId> = group
            .tagged(&instances)
            .filter(|i| group.is_current(i) && !outdated.contains(&i.id))
            .map(|i| i.id.clone())
            .collect();
        if let Err(e) = self.health(ws, group, &current) {
            return Some(e);
        }
        for batch in road.batches {
            if crate::signals::stop_requested() {
                return Some(
                    Failure::new(
                        Code::Interrupted,
                        format!("interrupted: the rolling update of group `{}` stopped", group.spec.id),
                    )
                    .hint("run `infrakit-tf reconcile` again to go on")
                    .into(),
                );
            }
            self.ctx.printer.event(&format!(
                "group {}: replacing {}",
                group.spec.id,
                batch.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
            ));
            if let Err(e) = self.replace(ws, (group, road.order), batch, report, tally) {
                return Some(e);
            }
        }
        None
    }

    /// Replaces one batch. With a dedicated resource: destroy the old members (their slots
    /// kept), apply, create the replacements (which re-attach the slots), apply. Without: create
    /// the replacements, apply, then destroy the old members, apply (surge). Each replacement
    /// must be created and, with `--health-cmd`, healthy before the old ones go (surge) or
    /// before the next batch. A surge whose replacements fail is taken back (the new members
    /// are removed again), so that the group is not left over its size and the next run's
    /// scale-down never gives up a healthy old member for a failed new one.
    fn replace(
        &self,
        ws: &mut Workspace<'_>,
        (group, order): (&Group, Order),
        batch: &[InstanceId],
        report: &mut GroupReport,
        tally: &mut Tally,
    ) -> Result<()> {
        let instances = ws.dir().instances(self.profiles);
        let mut batch = batch.to_vec();
        if order == Order::DestroyFirst {
            // Drained before their files go; one kept (`abandon`) is not replaced this run: its
            // slot or logical ID stays its own.
            let kept = self.drain(ws, &instances, [(group, batch.as_slice())])?;
            report.abandoned.extend(batch.iter().filter(|id| kept.contains(id)).map(ToString::to_string));
            batch.retain(|id| !kept.contains(id));
            if batch.is_empty() {
                return Ok(());
            }
        }
        let batch = batch.as_slice();
        let mut old: BTreeSet<InstanceId> = batch.iter().cloned().collect();
        let lids: Vec<Option<String>> = batch
            .iter()
            .map(|id| instances.iter().find(|i| &i.id == id).and_then(|i| i.logical_id().map(str::to_string)))
            .collect();
        let remove =
            |ws: &mut Workspace<'_>, ids: &BTreeSet<InstanceId>, reason: Reason, tally: &mut Tally| -> Result<()> {
                let instances = ws.dir().instances(self.profiles);
                let files = removals(ws.dir(), &instances, ids, reason, &self.ctx.printer)?;
                ws.write(ChangeSet::removing(files))?;
                tally.apply(ws, Apply::Configuration { refresh: false })
            };
        if order == Order::DestroyFirst {
            remove(ws, &old, Reason::RollingUpdate, tally)?;
        }
        let mut new = NewInstances::new(ws.dir(), self.profiles, &self.ctx.printer);
        let ids = lids
            .iter()
            .map(|lid| new.add(&group.members, lid.as_deref(), &BTreeMap::new()))
            .collect::<Result<Vec<_>>>()?;
        let writes = new.writes;
        ws.write(ChangeSet::writing(writes))?;
        ws.promote()?;
        let created =
            tally.apply(ws, Apply::Configuration { refresh: false }).and_then(|()| self.health(ws, group, &ids));
        if let Err(failed) = created {
            if order == Order::DestroyFirst {
                // The old members are gone already; their replacements stay (a failed create
                // is retried by the next apply), and the next run checks them first.
                report.terminated.extend(batch.iter().map(ToString::to_string));
                report.provisioned.extend(ids.iter().map(ToString::to_string));
                return Err(failed);
            }
            // Not one whose machine the failed apply may have made, unlisted yet: its file stays
            // (removing it would leave the machine behind), and a later run adopts it.
            let new: BTreeSet<InstanceId> =
                ids.iter().filter(|id| !ws.holds(&format!("{id}{}", names::LIVE))).cloned().collect();
            if let Err(e) = remove(ws, &new, Reason::Terminate, tally) {
                self.ctx.printer.warn(&format!("the failed replacements could not be taken back: {e:#}"));
                report.provisioned.extend(ids.iter().map(ToString::to_string));
            }
            return Err(failed);
        }
        if order == Order::Surge {
            // Drained once their replacements are up, before their files go; one kept
            // (`abandon`) stays beside its replacement, for a later run's scale-in.
            let kept = self.drain(ws, &instances, [(group, batch)])?;
            old.retain(|id| !kept.contains(id));
            for (o, n) in batch.iter().zip(&ids).filter(|(o, _)| kept.contains(*o)) {
                report.abandoned.push(o.to_string());
                report.provisioned.push(n.to_string());
            }
            if !old.is_empty() {
                remove(ws, &old, Reason::Terminate, tally)?;
            }
        }
        report.replaced.extend(
            batch
                .iter()
                .zip(&ids)
                .filter(|(o, _)| old.contains(*o))
                .map(|(o, n)| Replaced { old: o.to_string(), new: n.to_string() }),
        );
        Ok(())
    }

    /// Drains the members `doomed` lists, each with its group's drain (`cmd::drain`); returns
    /// those kept (`abandon`).
    fn drain<'d>(
        &self,
        ws: &Workspace<'_>,
        instances: &[Instance],
        doomed: impl IntoIterator<Item = (&'d Group, &'d [InstanceId])>,
    ) -> Result<BTreeSet<InstanceId>> {
        let mut draining = Vec::new();
        for (group, ids) in doomed {
            let Some(drain) = &group.drain else { continue };
            for id in ids {
                if let Some(instance) = instances.iter().find(|i| &i.id == id) {
                    draining.push(Draining { instance, group: &group.spec.id, drain });
                }
            }
        }
        crate::cmd::drain::drain(ws, &self.ctx.printer, &draining)
    }

    /// Runs `--health-cmd` for each new member; the first that fails stops the update.
    fn health(&self, ws: &Workspace<'_>, group: &Group, ids: &[InstanceId]) -> Result<()> {
        let Some(cmd) = &self.args.health_cmd else { return Ok(()) };
        let state = ws.state()?;
        let instances = ws.dir().instances(self.profiles);
        for id in ids {
            let inst = instances.iter().find(|i| &i.id == id);
            let attributes = inst
                .and_then(|i| i.vm.as_ref())
                .and_then(|(t, n)| state.get(&format!("{t}.{n}")))
                .map(|r| r.key_attributes())
                .unwrap_or_default();
            let subject = crate::health::Subject {
                id: &id.to_string(),
                logical_id: inst.and_then(Instance::logical_id),
                group: &group.spec.id,
                attributes: &attributes,
            };
            if let Some(why) = crate::health::run(crate::health::Hook::Health, cmd, &subject, self.args.health_timeout)?
            {
                return Err(Failure::new(
                    Code::UpdateStopped,
                    format!("the rolling update of group `{}` stopped: {id} is not healthy ({why})", group.spec.id),
                )
                .hint("nothing more was destroyed; fix the spec or the machine, then run `infrakit-tf reconcile` again")
                .into());
            }
        }
        Ok(())
    }

    /// What the whole run would destroy when its groups terminate, replace or rewrite an
    /// existing file: terraform's plan, in a mirror, of the directory as the run would leave it
    /// (pruned, scaled, every outdated member replaced), so that a shared resource the new spec
    /// changes, or a dedicated one it drops, counts too. `None` otherwise (adding members
    /// destroys nothing: the saved plan and the pruned files say what goes).
    fn planned_destroys(
        &self,
        ws: &Workspace<'_>,
        instances: &[Instance],
        leaving: &BTreeSet<InstanceId>,
        decisions: &[(Vec<crate::converge::Member>, crate::converge::Decision)],
        scale: &ChangeSet,
        last_added: Option<&InstanceId>,
    ) -> Result<Option<u64>> {
        let outdated: BTreeSet<InstanceId> = decisions.iter().flat_map(|(_, d)| d.replace.iter().cloned()).collect();
        let terminating = decisions.iter().any(|(_, d)| !d.terminate.is_empty());
        // Adding members destroys nothing unless it rewrites a file that exists (a shared
        // resource the spec changed): then only a plan can say what goes.
        let rewrites = scale.writes.iter().try_fold(false, |any, w| {
            Ok::<bool, anyhow::Error>(any || ws.dir().replaceable(&w.name)?.is_some_and(|old| old != w.doc))
        })?;
        if outdated.is_empty() && !terminating && !rewrites {
            return Ok(None);
        }
        let mut after = scale.clone();
        if !outdated.is_empty() {
            // As `replace` will remove them: slots kept when destroying first, not in a surge.
            for (group, (_, decision)) in self.groups.iter().zip(decisions) {
                let ids: BTreeSet<InstanceId> = decision.replace.iter().cloned().collect();
                let reason = if group.destroy_first() { Reason::RollingUpdate } else { Reason::Terminate };
                after.removals.extend(removals(ws.dir(), instances, &ids, reason, &self.ctx.printer)?);
            }
            let gone: BTreeSet<InstanceId> = leaving.union(&outdated).cloned().collect();
            let mut new =
                NewInstances::new(ws.dir(), self.profiles, &self.ctx.printer).replacing(&gone).after(last_added);
            for (group, (_, decision)) in self.groups.iter().zip(decisions) {
                for id in &decision.replace {
                    let lid = instances.iter().find(|i| &i.id == id).and_then(Instance::logical_id);
                    new.add(&group.members, lid, &BTreeMap::new())?;
                }
            }
            after.writes.extend(new.writes);
        }
        Ok(Some(ws.plan_after(&after, false)?.totals.remove))
    }

    /// The member counts of every group after the scaling apply (the directory read once).
    fn settle_counts(&self, ws: &Workspace<'_>, report: &mut Report) {
        let instances = ws.dir().instances(self.profiles);
        for (group, g) in self.groups.iter().zip(report.groups.iter_mut()) {
            g.settle(group, &instances);
        }
    }

    /// A group's member counts as the directory now has them.
    fn settle_group(&self, ws: &Workspace<'_>, group: &Group, g: &mut GroupReport) {
        g.settle(group, &ws.dir().instances(self.profiles));
    }
}

/// What a run saw of the cloud and the configuration before deciding.
#[expect(clippy::large_enum_variant, reason = "one per run: boxing the larger variant saves nothing")]
enum Seen {
    /// Every resource refreshed: the saved refreshing plan.
    Refreshed(SavedPlan),
    /// A look (`workspace::look`): what it found, merged with the whole plan (saved, not
    /// refreshed) when one ran; the state document it looked at, and where its slice stopped.
    /// `digest`: what the whole plan planned (`Workspace::digest`); `deposed`: the resources
    /// holding a deposed object, which are not forgotten (that would forget the object).
    /// `shown`: the listed machines their listing showed; `read`: every address a refresh
    /// read; `unread`: what could not be read, and why; `strays`: what the listings showed that
    /// no state records (`workspace::strays`); `ids`: the ID the state holds for each address.
    Looked {
        plan: Plan,
        whole: Option<SavedPlan>,
        digest: String,
        cursor: Option<String>,
        deposed: Vec<String>,
        shown: BTreeSet<String>,
        read: BTreeSet<String>,
        unread: Vec<(String, String)>,
        strays: Vec<Classified>,
        ids: BTreeMap<String, String>,
    },
}

impl Seen {
    fn plan(&self) -> &Plan {
        match self {
            Seen::Refreshed(saved) => &saved.plan,
            Seen::Looked { plan, .. } => plan,
        }
    }

    /// Weighs what the run's reads (begun at `at`) found gone (`absence::weigh`): what is not
    /// believed leaves the plan. With what the run held back or could not read, the machines
    /// it leaves unconfirmed.
    fn weigh(
        &mut self,
        ws: &mut Workspace<'_>,
        at: u64,
        profiles: &Profiles,
        printer: &Printer,
        check: bool,
    ) -> Result<Vec<Unconfirmed>> {
        let none = BTreeSet::new();
        let (plan, reading, unread) = match self {
            Seen::Refreshed(saved) => (&mut saved.plan, Reading { shown: &none, read: None, ids: None, at }, &[][..]),
            Seen::Looked { plan, shown, read, unread, ids, .. } => {
                (plan, Reading { shown: &*shown, read: Some(&*read), ids: Some(&*ids), at }, unread.as_slice())
            }
        };
        let mut unconfirmed = absence::weigh(ws, plan, &reading, profiles, printer, check)?;
        unconfirmed.extend(absence::held_and_unread(ws, unread));
        Ok(unconfirmed)
    }

    /// After a look that skipped the whole plan: plans the whole configuration (without
    /// refreshing) when the run will apply anything (`anything`, or what the look found), and
    /// merges it in, so that `--max-destroy` counts all that the apply will do.
    fn plan_whole(&mut self, ws: &mut Workspace<'_>, anything: bool, report: &mut Report) -> Result<()> {
        let Seen::Looked { plan, whole: whole @ None, .. } = self else { return Ok(()) };
        if !anything && !plan.has_changes && plan.drift.is_empty() {
            return Ok(());
        }
        let planned = ws.plan_unrefreshed()?;
        report.reads.whole_plan = true;
        *plan = crate::workspace::merge(Some(&planned.plan), std::mem::take(plan), None);
        *whole = Some(planned);
        report.fill_plan(plan);
        Ok(())
    }
}

/// What a converging run decided before its first write.
struct Decided<'i> {
    seen: Seen,
    doomed: Vec<(&'i Instance, String)>,
    pruned_files: Vec<String>,
    decisions: Vec<(Vec<crate::converge::Member>, crate::converge::Decision)>,
    scale: ChangeSet,
    added: Vec<Vec<InstanceId>>,
    importing: bool,
}

/// The applies of the rolling updates, added up for the report.
#[derive(Default)]
struct Tally {
    /// Whether one was tried.
    tried: bool,
    changes: crate::tfoutput::Changes,
}

impl Tally {
    /// Applies, counting the run whether it succeeds or not.
    fn apply(&mut self, ws: &mut Workspace<'_>, what: Apply<'_>) -> Result<()> {
        self.tried = true;
        let c = ws.apply(what)?;
        self.changes.add += c.add;
        self.changes.change += c.change;
        self.changes.remove += c.remove;
        Ok(())
    }
}
