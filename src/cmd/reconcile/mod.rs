//! `reconcile`: what cron runs. Under the lock (`--no-wait`: busy is exit 5 at once), it
//! promotes the queue and looks at the cloud. When a look-up lists machines of the directory
//! (`look`), the look costs what a group costs, not what it holds: one listing per look-up
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
//! then the configuration applies without refreshing: nothing is read twice. A run that only
//! prunes and adds members after a look that found nothing else changed applies only its own
//! files' resources (`decide::only_ours`, `Run::apply_change`). Before anything is pruned or applied,
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
//!
//! This file orchestrates ([`run`], `Run::converge`); each idea has a file: `observe.rs` the
//! look and what it found, `decide.rs` what the run decides (pure), `rollout.rs` the rolling
//! road, `report.rs` the report and the exit it calls for, `groups.rs` the groups and the one
//! maker of new members, `absence.rs` what the run believes gone. The terraform runs the report
//! names are the workspace's count (`Workspace::runs`).

mod absence;
mod decide;
mod groups;
mod observe;
mod placement;
mod report;
mod rollback;
mod rollout;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Result;

use self::absence::Reading;
use self::decide::{Applying, Decisions, Found, Next};
use self::groups::{Group, GroupReport, NewMembers, RolloutReport};
use self::observe::{adopt_first, Observed, Seen};
use self::report::{Pruned, Report};
use crate::cli::{Reason, ReconcileArgs};
use crate::cloud_record::CloudRecord;
use crate::cloud_record::StrayKind;
use crate::cmd::instances::removals;
use crate::context::Ctx;
use crate::directory::Instance;
use crate::exit::{Code, Failure};
use crate::health_record::HealthRecord;
use crate::names::{self, InstanceId};
use crate::output::Printer;
use crate::profile::Profiles;
use crate::rollout_record::RolloutRecord;
use crate::terraform::Apply;
use crate::tfoutput::Changes;
use crate::workspace::{ChangeSet, FileWrite, SavedPlan, Workspace};

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
    // Groups whose rollout was rolled back are held on their last good spec (`rollback.rs`).
    let mut rollouts = ws.record::<RolloutRecord>();
    let groups = rollback::hold(groups, &mut rollouts, &args, &profiles)?;
    if !args.rollback.is_empty() || !args.retry_rollout.is_empty() {
        ws.save(&rollouts)?; // asked: whatever stops this run, the next goes on
    }
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
        if let Some(applied) = adopt_first(&mut ws, &ctx.printer, &adopted)? {
            report.note_applied(applied);
        }
    }
    let instances = ws.dir().instances(&profiles);
    // The health counts as earlier runs left them: which members are unhealthy.
    let record = if groups.iter().any(|g| g.heal.is_some()) {
        crate::cmd::heal::read(&ws, &ctx.printer)
    } else {
        HealthRecord::default()
    };
    let failure = if args.check {
        check(&mut ws, (&profiles, &ctx.printer, &args), (&groups, &rollouts), &instances, &record, &mut report)?;
        None
    } else {
        let placed = groups.iter().any(|g| g.spec.placement.is_some());
        let placing = std::cell::RefCell::new(placement::Placing::read(&mut ws, placed)?);
        let run = Run {
            ctx,
            profiles: &profiles,
            args: &args,
            groups: &groups,
            record: &record,
            rollouts: &rollouts,
            placing: &placing,
        };
        let failure = run.converge(&mut ws, &instances, &mut report)?;
        if let Err(e) = run.record_placement(&mut ws, &mut report) {
            ctx.printer.warn(&format!("the placement record was not written: {e:#}"));
        }
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

/// `--check`: plans the would-be directory (queue promoted) in a mirror, with a refresh that
/// is not saved, and decides the groups from it; changes nothing.
fn check(
    ws: &mut Workspace<'_>,
    (profiles, printer, args): (&Profiles, &Printer, &ReconcileArgs),
    (groups, rollouts): (&[Group], &RolloutRecord),
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
    let shown: BTreeSet<String> =
        ws.dir().record::<CloudRecord>().map(|r| r.gone.into_keys().collect()).unwrap_or_default();
    let reading = Reading { shown: &shown, read: None, ids: None, at };
    report.unconfirmed = absence::weigh(ws, &mut plan, &reading, profiles, printer, true)?;
    report.unconfirmed.extend(absence::held_and_unread(ws, &[]));
    let state: BTreeMap<String, String> =
        ws.state()?.into_iter().map(|(a, r)| (a, r.attribute("id").unwrap_or_default())).collect();
    report.strays = ws.known_strays(&state).into_iter().filter(|s| s.kind != StrayKind::Adoptable).collect();
    report.reads.full_refresh = true;
    report.fill_plan(&plan);
    let unsettled = unsettled(ws, instances);
    let mut decisions =
        decide::decide(groups, &Found { instances, plan: &plan, record, unsettled: &unsettled }).decisions;
    let placed = groups.iter().any(|g| g.spec.placement.is_some());
    let mut placing = placement::Placing::read(ws, placed)?;
    placing.hold_pinned(ws.dir(), (groups, instances), &mut decisions)?;
    let moves = placing.rebalance(groups, instances, &mut decisions, rollouts);
    let waits = placing.waits(ws.dir(), (profiles, printer), groups, &decisions)?;
    for (group, (members, decision)) in groups.iter().zip(&decisions) {
        let mut g = GroupReport::new(group, members, decision);
        // Where its rollout to this spec stands, as the last run left it.
        g.rollout = rollouts
            .groups
            .get(&group.spec.id)
            .filter(|r| r.to == group.asked)
            .map(|r| RolloutReport::new(r, (g.current, g.desired), rollout::checkpoints(args, group).1));
        report.groups.push(g);
    }
    // No check runs: the health record says which repairs are pending.
    for (i, g) in &decide::healed(groups, instances, &decisions, &placing.held) {
        report.groups[*i].heal(&crate::cmd::heal::verdict(record, g));
    }
    // Zones out of balance: a member to move.
    for (i, member) in moves {
        report.groups[i].pending = true;
        report.groups[i].todo = format!("{member} to move to balance its zones");
    }
    // Members that wait for the zone their slot is pinned to: why the group stays pending.
    for (i, waits) in waits {
        let g = &mut report.groups[i];
        g.pending = true;
        let words: Vec<String> = waits.iter().map(|w| w.words()).collect();
        g.todo = match g.todo.as_str() {
            "converged" => words.join("; "),
            todo => format!("{todo}; {}", words.join("; ")),
        };
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
    /// The rollout record as the run found it (with `--rollback` and `--retry-rollout`).
    rollouts: &'a RolloutRecord,
    /// Where members of groups with `Placement` may go (`placement.rs`).
    placing: &'a std::cell::RefCell<placement::Placing>,
}

impl Run<'_> {
    /// Promote, look and decide; then in one change and one apply: prune, and scale every
    /// group; then the rolling updates, batch by batch (`rollout.rs`). Returns the failure that
    /// stopped the run once it had written, if one did (the report is printed first).
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
        let Prepared { seen, doomed, decisions, scale, importing, own, rollouts } =
            match self.prepare(ws, instances, report) {
                Ok(prepared) => prepared,
                Err(e) => {
                    if let Err(undo) = ws.restore(&before) {
                        self.ctx.printer.warn(&format!("the promoted queue could not be put back: {undo:#}"));
                    }
                    report.promoted.clear();
                    return Err(e);
                }
            };
        let scaling = self.prune_and_scale(ws, &doomed, scale, &decisions, report)?;
        if importing && !report.pruned.is_empty() {
            ws.carry_out_imports()?;
        }
        let left = match self.apply_first(ws, &seen, (scaling, importing, own.as_ref()), report)? {
            First::Failed(failure) => return Ok(Some(failure)),
            First::Left => true,
            First::Done => false,
        };
        if scaling {
            self.count_members(ws, report);
        }
        if left {
            // What it wrote waits for the next run (`apply_change`).
            for g in &mut report.groups {
                g.pending = true;
            }
        }
        Ok(self.roll_all(ws, &decisions, rollouts, report))
    }

    /// Looks, then decides everything this run will do (`decide.rs`): what to prune, every
    /// group's new members and terminations as one change, the repairs. Checks `--max-destroy`,
    /// then drains the members to terminate. Writes nothing but the promotion.
    fn prepare<'i>(
        &self,
        ws: &mut Workspace<'_>,
        instances: &'i [Instance],
        report: &mut Report,
    ) -> Result<Prepared<'i>> {
        let mut observed = self.observe(ws, instances)?;
        report.observed(&mut observed);
        let Observed { mut seen, importing, .. } = observed;
        // Prune: live instances whose VM vanished. Queued (just promoted) ones are never pruned.
        let unsettled = unsettled(ws, instances);
        let found = Found { instances, plan: seen.plan(), record: self.record, unsettled: &unsettled };
        let decide::Decided { doomed, leaving, mut decisions } = decide::decide(self.groups, &found);
        // A held-back group's member a failed apply may have made is left to a later run.
        for (_, (_, decision)) in self.groups.iter().zip(decisions.iter_mut()).filter(|(g, _)| g.held_back()) {
            decision.replace.retain(|id| !unsettled.contains(id));
        }
        for (group, (members, decision)) in self.groups.iter().zip(&decisions) {
            report.groups.push(GroupReport::new(group, members, decision));
        }
        // Members whose slot is pinned to a zone without room wait: never destroyed (nor
        // counted by the checkpoints, repaired, or gated).
        self.placing.borrow_mut().hold_pinned(ws.dir(), (self.groups, instances), &mut decisions)?;
        // Each group's rollout: what its checkpoints let it replace now.
        let mut rollouts = self.rollout_steps(ws, instances, &mut decisions)?;
        // Health checks: the unhealthy members to repair join the rolling updates (an outdated
        // one the rollout holds back too: a repair does not wait for a checkpoint). Unless
        // one on a new spec fails its rollout: then its rollback replaces them (`AutoRollback`).
        for (i, verdict) in self.heal(ws, instances, &decisions)? {
            report.groups[i].heal(&verdict);
            if rollouts.fails(i, &self.groups[i], &verdict, instances) {
                // Its rollback replaces what is not on its last good spec; it scales on that
                // spec in the next run (not on the failed one now).
                decisions[i].1 = crate::converge::Decision::default();
                continue;
            }
            decide::repair(&mut decisions[i].1, &verdict);
        }
        // Groups whose zones are out of balance move one member, counted as any replacement.
        let moves = self.placing.borrow_mut().rebalance(self.groups, instances, &mut decisions, self.rollouts);
        for (i, member) in &moves {
            let g = &mut report.groups[*i];
            g.pending = true;
            g.todo = format!("{member} to move to balance its zones");
        }
        let mut scale = self.scale(ws, instances, (&doomed, &leaving), &decisions)?;
        let last_added = scale.added.iter().flatten().max();
        let mut planned = self.planned_destroys(ws, instances, &leaving, &decisions, &scale.change, last_added)?;
        // A move never makes a run too destructive to run: over --max-destroy, it waits.
        if !moves.is_empty() && planned.is_some_and(|p| p > decide::max_destroy(self.args.max_destroy)) {
            for (i, member) in &moves {
                decisions[*i].1.replace.retain(|id| id != member);
                self.ctx.printer.warn(&format!(
                    "group {}: {member} is not moved to balance its zones: that would destroy more than --max-destroy",
                    self.groups[*i].spec.id
                ));
            }
            self.placing.borrow_mut().rebalancing.clear();
            planned = self.planned_destroys(ws, instances, &leaving, &decisions, &scale.change, last_added)?;
        }
        // Nothing applies unless the whole configuration was planned and counted: an apply
        // plans all of it again, and what your data sources read may change more than the
        // look saw (a new image replaces every machine that uses it). Unless the run applies
        // only what it writes: then that plan is what is counted (`apply_change`).
        let narrow = decide::only_ours(seen.unchanged() && !importing, planned, &decisions, seen.plan(), &doomed);
        // What the change writes and removes, when only that is applied (a file to remove
        // that cannot be read: the whole configuration is planned, as otherwise).
        let own = narrow.then(|| scale.own_change(ws)).flatten();
        let anything = !doomed.is_empty()
            || !scale.change.writes.is_empty()
            || !scale.change.removals.is_empty()
            || decisions.iter().any(|(_, d)| !d.replace.is_empty());
        if own.is_none() && seen.plan_whole(ws, anything)? {
            report.reads.whole_plan = true;
            report.fill_plan(seen.plan());
        }
        decide::check_max_destroy(self.groups, self.args.max_destroy, seen.plan(), &doomed, planned, &decisions)?;
        self.drain_terminated(ws, instances, &mut decisions, &mut scale, report)?;
        Ok(Prepared { seen, doomed, decisions, scale, importing, own, rollouts })
    }

    /// The change that prunes and scales, all or nothing, applied at once: the pruned
    /// instances' files (`doomed`, whose IDs are `leaving`), every group's new members and its
    /// terminated members' files.
    fn scale(
        &self,
        ws: &Workspace<'_>,
        instances: &[Instance],
        (doomed, leaving): (&[(&Instance, String)], &BTreeSet<InstanceId>),
        decisions: &Decisions,
    ) -> Result<Scale> {
        let pruned_files: Vec<String> = doomed.iter().map(|(inst, _)| format!("{}{}", inst.id, names::LIVE)).collect();
        let terminations = self.terminations(ws, instances, decisions)?;
        let placing = self.placing.borrow();
        let mut new = NewMembers::new(ws.dir(), self.profiles, &self.ctx.printer)
            .replacing(leaving)
            .placing(&placing.record, placing.now_ms);
        let added = self
            .groups
            .iter()
            .zip(decisions)
            .map(|(group, (_, d))| new.add_all(group, &d.add))
            .collect::<Result<_>>()?;
        let outcome = new.outcome();
        let writes = new.writes();
        drop(placing);
        self.placing.borrow_mut().note(outcome);
        let removals = Scale::removals(&pruned_files, terminations, &writes);
        Ok(Scale { change: ChangeSet { writes, removals }, pruned_files, added })
    }

    /// Drains the members to terminate, now that the run is allowed, before their files go
    /// (see `cmd::drain`); those kept (`abandon`) leave the decisions and the change, and the
    /// report names them.
    fn drain_terminated(
        &self,
        ws: &Workspace<'_>,
        instances: &[Instance],
        decisions: &mut Decisions,
        scale: &mut Scale,
        report: &mut Report,
    ) -> Result<()> {
        let kept =
            self.drain(ws, instances, self.groups.iter().zip(decisions.iter().map(|(_, d)| d.terminate.as_slice())))?;
        if kept.is_empty() {
            return Ok(());
        }
        for ((_, decision), g) in decisions.iter_mut().zip(report.groups.iter_mut()) {
            g.abandoned = decision.terminate.iter().filter(|id| kept.contains(id)).map(ToString::to_string).collect();
            decision.terminate.retain(|id| !kept.contains(id));
        }
        let terminations = self.terminations(ws, instances, decisions)?;
        scale.change.removals = Scale::removals(&scale.pruned_files, terminations, &scale.change.writes);
        Ok(())
    }

    /// The files the terminated members of every group leave behind (`instances::removals`).
    fn terminations(&self, ws: &Workspace<'_>, instances: &[Instance], decisions: &Decisions) -> Result<Vec<String>> {
        let terminated: BTreeSet<InstanceId> =
            decisions.iter().flat_map(|(_, d)| d.terminate.iter().cloned()).collect();
        removals(ws.dir(), instances, &terminated, Reason::Terminate, &self.ctx.printer)
    }

    /// Writes the change that prunes and scales and promotes the new members' files; the
    /// report says what was pruned, provisioned and terminated. Whether any group scaled.
    fn prune_and_scale(
        &self,
        ws: &mut Workspace<'_>,
        doomed: &[(&Instance, String)],
        scale: Scale,
        decisions: &Decisions,
        report: &mut Report,
    ) -> Result<bool> {
        let Scale { change, pruned_files, added } = scale;
        let scaling = !change.writes.is_empty() || change.removals.len() > pruned_files.len();
        ws.write(change)?;
        ws.promote()?; // the new members' files, queued as any new file is
        for ((inst, vm), file) in doomed.iter().zip(pruned_files) {
            self.ctx.printer.event(&format!("pruned {} ({vm} vanished)", inst.id));
            report.pruned.push(Pruned { id: inst.id.to_string(), file, vm: vm.clone() });
        }
        for ((g, ids), (_, decision)) in report.groups.iter_mut().zip(&added).zip(decisions) {
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
        Ok(scaling)
    }

    /// The apply of what the run found, pruned and scaled (`decide::Applying::next`). After a
    /// look, or when machines are kept unconfirmed (a refresh would drop them from the state,
    /// and the apply make them again), what the reads found is brought into the state first
    /// (`bring_state_to_look`), and the configuration applied without refreshing: nothing is read
    /// twice. A failed apply in a run with groups is returned, the groups pending: the files
    /// stay as asked (a failed create is retried by the next apply), and the report says what
    /// was decided before the run fails.
    fn apply_first(
        &self,
        ws: &mut Workspace<'_>,
        seen: &Seen,
        (scaling, importing, own): (bool, bool, Option<&OwnChange>),
        report: &mut Report,
    ) -> Result<First> {
        let plan = seen.plan();
        let applying = Applying {
            looked: matches!(seen, Seen::Looked { .. }),
            whole: matches!(seen, Seen::Looked { whole: Some(_), .. }),
            unconfirmed: !report.unconfirmed.is_empty(),
            pruned: !report.pruned.is_empty(),
            scaling,
            drift: !plan.drift.is_empty(),
            changes: plan.has_changes,
            narrow: own.is_some(),
        };
        let next = applying.next();
        let applied = match self.apply_next(ws, seen, next, own, applying.careful()) {
            Ok(applied) => applied,
            // A zone without capacity: its members made elsewhere, and applied again.
            Err(e) if self.groups.iter().any(|g| g.spec.placement.is_some()) => match self.answer_capacity(ws, e) {
                Ok(applied) => Some(applied),
                Err(e) => {
                    for g in &mut report.groups {
                        g.pending = true;
                    }
                    return Ok(First::Failed(e));
                }
            },
            Err(e) if !self.groups.is_empty() => {
                for g in &mut report.groups {
                    g.pending = true;
                }
                return Ok(First::Failed(e));
            }
            Err(e) => return Err(e),
        };
        if importing {
            // Carried out by this apply, or (a plan with nothing to do) by an apply whose end the
            // importing run did not see.
            ws.finish_imports()?;
        }
        if let Some(c) = applied {
            report.note_applied(c);
        }
        seen.record_progress(ws, next != Next::Nothing)?;
        Ok(if next == Next::Change && applied.is_none() { First::Left } else { First::Done })
    }

    /// Runs the apply `next` calls for (`careful`: what the look found brought into the state
    /// first, see [`Run::bring_state_to_look`]). What it did; `None` when it applied nothing.
    fn apply_next(
        &self,
        ws: &mut Workspace<'_>,
        seen: &Seen,
        next: Next,
        own: Option<&OwnChange>,
        careful: bool,
    ) -> Result<Option<Changes>> {
        if next == Next::Nothing {
            return Ok(None);
        }
        if careful {
            Self::bring_state_to_look(ws, seen.plan(), seen.deposed())?;
        }
        let what = match (next, own) {
            (Next::Change, Some(own)) => return self.apply_change(ws, own),
            // `Applying::next` picks the saved plan only when there is one, and only what the
            // run wrote only when it knows what that is.
            (Next::Saved, _) => seen.saved().map_or(Apply::Configuration { refresh: false }, SavedPlan::to_apply),
            (Next::Configuration { refresh }, _) => Apply::Configuration { refresh },
            (Next::Change, None) | (Next::Nothing, _) => unreachable!("decided with what the run wrote: {next:?}"),
        };
        ws.apply(what).map(Some)
    }

    /// `Next::Change`: a plan of the resources of the files the run wrote and removed
    /// (terraform adds what they depend on), saved, and applied when it does nothing beyond
    /// the change (`decide::beyond_change`): it makes what the new files declare and destroys
    /// what the removed ones declared, all of it counted already. Then the directory as it is
    /// now may be marked planned (`Workspace::note_planned_now`), so that the next run need
    /// not plan everything. Otherwise (what a data source reads has changed a resource the
    /// change touches or depends on) nothing is applied: a warning says what, the groups stay
    /// pending, and the next run, whose files changed, plans the whole configuration and
    /// counts its destroys.
    fn apply_change(&self, ws: &mut Workspace<'_>, own: &OwnChange) -> Result<Option<Changes>> {
        self.apply_own(ws, own, true)
    }

    /// The same, the directory marked planned after it only when `mark` (a run whose other
    /// applies all succeeded).
    fn apply_own(&self, ws: &mut Workspace<'_>, own: &OwnChange, mark: bool) -> Result<Option<Changes>> {
        let targets: Vec<String> = own.written.union(&own.removed).cloned().collect();
        let saved = ws.plan_targets(&targets)?;
        let beyond = decide::beyond_change(&saved.plan.changes, &own.written, &own.removed);
        if !beyond.is_empty() {
            self.ctx.printer.warn(&format!(
                "applying this run's change would also change {}: not applied; the next run plans the whole configuration, and --max-destroy counts it",
                beyond.join(", ")
            ));
            return Ok(None);
        }
        let retries = crate::metrics::retries();
        let applied = ws.apply(saved.to_apply())?;
        // A retry plans again, and what it planned was not checked: no mark then.
        if mark && crate::metrics::retries() == retries {
            if let Err(e) = ws.note_planned_now() {
                self.ctx.printer.detail(&format!("the next run plans the whole configuration: {e:#}"));
            }
        }
        Ok(Some(applied))
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
        decisions: &Decisions,
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
            let placing = self.placing.borrow();
            let mut new = NewMembers::new(ws.dir(), self.profiles, &self.ctx.printer)
                .replacing(&gone)
                .after(last_added)
                .placing(&placing.record, placing.now_ms);
            for (group, (_, decision)) in self.groups.iter().zip(decisions) {
                new.replace_all(group, instances, &decision.replace)?;
            }
            after.writes.extend(new.writes());
        }
        Ok(Some(ws.plan_after(&after, false)?.totals.remove))
    }

    /// The member counts of every group after the scaling apply (the directory read once).
    fn count_members(&self, ws: &Workspace<'_>, report: &mut Report) {
        let instances = ws.dir().instances(self.profiles);
        for (group, g) in self.groups.iter().zip(report.groups.iter_mut()) {
            g.count_members(group, &instances);
        }
    }
}

/// The instances whose machine a failed apply may have made, not settled yet
/// (`Workspace::holds`).
fn unsettled(ws: &Workspace<'_>, instances: &[Instance]) -> BTreeSet<InstanceId> {
    instances.iter().filter(|i| ws.holds(&format!("{}{}", i.id, names::LIVE))).map(|i| i.id.clone()).collect()
}

/// How the first apply of a converging run ended.
enum First {
    /// As decided (or nothing to apply).
    Done,
    /// Left to the next run: only the run's own change was to be applied, and a plan of it
    /// found more (`Run::apply_change`).
    Left,
    /// It failed, after the files were written: the run ends with this error.
    Failed(anyhow::Error),
}

/// What a converging run decided before its first write.
struct Prepared<'i> {
    seen: Seen,
    /// The instances pruned, with their VM's address.
    doomed: Vec<(&'i Instance, String)>,
    decisions: Decisions,
    scale: Scale,
    /// Whether import blocks remain for the apply (`Workspace::carry_out_imports`).
    importing: bool,
    /// Only what the run writes is applied (`decide::only_ours`): its files' resources.
    own: Option<OwnChange>,
    /// The groups' rollouts: how far each may go (`Run::rollout_steps`).
    rollouts: rollout::Rollouts,
}

/// The change that prunes and scales.
struct Scale {
    change: ChangeSet,
    /// The pruned instances' files (the first of `change.removals`).
    pruned_files: Vec<String>,
    /// Each group's new members.
    added: Vec<Vec<InstanceId>>,
}

/// The resources of the files a run's change writes and removes: all that `Next::Change`
/// plans and applies.
struct OwnChange {
    written: BTreeSet<String>,
    removed: BTreeSet<String>,
}

impl Scale {
    /// What the change writes and removes ([`OwnChange`]). `None` when a file to remove
    /// cannot be read: then the whole configuration is planned.
    fn own_change(&self, ws: &Workspace<'_>) -> Option<OwnChange> {
        let written = self.change.writes.iter().flat_map(|w| crate::tfconfig::addresses(&w.doc)).collect();
        let mut removed = BTreeSet::new();
        for name in &self.change.removals {
            removed.extend(crate::tfconfig::addresses(&ws.dir().read_doc(name).ok()?));
        }
        Some(OwnChange { written, removed })
    }

    /// What the change removes: the pruned files, then the terminated members' files, less
    /// those a new member writes (a shared file is not removed with a terminated member).
    fn removals(pruned_files: &[String], terminations: Vec<String>, writes: &[FileWrite]) -> Vec<String> {
        let terminations = terminations.into_iter().filter(|name| !writes.iter().any(|w| w.name == *name));
        pruned_files.iter().cloned().chain(terminations).collect()
    }
}
