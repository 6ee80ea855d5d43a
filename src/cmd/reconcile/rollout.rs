//! The rolling road: each group's rolling update (its members replaced, outdated ones and
//! those repaired, `MaxUnavailable` at a time: `decide::rollout`), batch by batch, each
//! waiting for the last. A batch destroys first (a dedicated slot, a logical ID: the old
//! members drained, removed, applied, then their replacements created in their slot) or
//! surges (the replacements created first, then the old members drained and removed). The
//! health gate (`--health-cmd`): a replacement an earlier run made, and each new one, must be
//! healthy before anything more is destroyed; the first that is not stops the update, and a
//! surge whose replacements failed is taken back. Ctrl-C or SIGTERM stops it between batches.
//! The drains (`cmd::drain`) of the members a run gives up, scale-in included, are here too.

use std::collections::BTreeSet;

use anyhow::Result;

use super::decide::{self, Decisions, Order, Step};
use super::groups::{Group, GroupReport, NewMembers, Replaced, RolloutReport};
use super::report::Report;
use super::{rollback, Run};
use crate::cli::{Reason, ReconcileArgs};
use crate::cmd::drain::Draining;
use crate::cmd::heal::Verdict;
use crate::cmd::instances::removals;
use crate::directory::Instance;
use crate::exit::{Code, Failure};
use crate::group::{checkpoint_counts, CHECKPOINT_DELAY};
use crate::names::{self, InstanceId};
use crate::rollout_record::{GoodSpec, GroupRollout, RolloutRecord, RolloutState};
use crate::terraform::Apply;
use crate::workspace::{ChangeSet, Workspace};

/// The groups' rollouts in one run: the record as the run found it, and each group's step
/// (`None`: no member outdated), in the groups' order.
pub(super) struct Rollouts {
    record: RolloutRecord,
    steps: Vec<Option<Step>>,
    /// Whether each group was whole and current when the run began: then its spec becomes its
    /// last good spec, unless the run finds a member of it unhealthy or its rollout fails.
    settled: Vec<bool>,
    /// Why each group's new spec failed before its rollout's batches (a member on it
    /// unhealthy before the spec was found good): with `AutoRollback`, it rolls back.
    failed: Vec<Option<String>>,
    /// Each group this run began to roll back, held back on its last good spec.
    back: Vec<Option<Group>>,
    /// Whether each group's rollout was closed by this run: its members, all on the new spec
    /// since an earlier run, passed their health check (`Run::close`).
    closed: Vec<bool>,
}

impl Rollouts {
    /// Whether group `i`'s rollout is to be closed by this run: it is not done yet (rolling,
    /// paused or stopped), and every member of the group (`instances`) is on its new spec.
    fn closing(&self, i: usize, group: &Group, instances: &[Instance]) -> bool {
        let open = self.record.groups.get(&group.spec.id).is_some_and(|r| {
            r.to == group.asked
                && matches!(r.state, RolloutState::Rolling | RolloutState::Paused | RolloutState::Stopped)
        });
        open && self.steps[i].is_none() && !group.held_back() && group.tagged(instances).all(|m| group.is_current(m))
    }

    /// Whether `verdict` (the group's health checks) fails the rollout of `group`'s spec:
    /// with `AutoRollback`, a member on its spec found unhealthy while the spec is not yet its
    /// last good one (it has one, and the group has not been found whole and healthy on the
    /// new spec since). Then nothing is repaired or replaced for it but by its rollback.
    pub(super) fn fails(&mut self, i: usize, group: &Group, verdict: &Verdict, instances: &[Instance]) -> bool {
        let on_trial = self.record.good.get(&group.spec.id).is_some_and(|g| g.hash != group.asked);
        if !group.spec.auto_rollback || group.held_back() || !on_trial {
            return false;
        }
        let mut on_spec =
            verdict.unhealthy.iter().filter(|id| instances.iter().any(|i| &i.id == *id && group.is_current(i)));
        let Some(first) = on_spec.next() else { return false };
        self.failed[i] = Some(format!("{first} on the new spec is not healthy (Healing)"));
        true
    }
}

impl Run<'_> {
    /// Each group's rollout step (`decide::rollout_step`): what its checkpoints allow now,
    /// `decisions`' replacements limited to it. A group held back on its last good spec goes
    /// back with no pause. The clock is read only when a group has outdated members.
    pub(super) fn rollout_steps(
        &self,
        ws: &mut Workspace<'_>,
        instances: &[Instance],
        decisions: &mut Decisions,
    ) -> Result<Rollouts> {
        let record = self.rollouts.clone();
        let outdated = decisions.iter().any(|(members, _)| members.iter().any(|m| !m.current));
        let now_ms = if outdated { ws.now_ms()? } else { 0 };
        let settled = self
            .groups
            .iter()
            .zip(decisions.iter())
            .map(|(group, (members, decision))| {
                members.len() == group.spec.desired()
                    && members.iter().all(|m| m.current && m.created)
                    && decision.is_empty()
            })
            .collect();
        let steps = self
            .groups
            .iter()
            .zip(decisions.iter_mut())
            .map(|(group, (members, decision))| {
                let (counts, delay_ms) = self.checkpoints(group);
                let counts = if group.held_back() { Vec::new() } else { counts };
                let at = (record.groups.get(&group.spec.id), group.asked.as_str(), counts.as_slice());
                decide::rollout_step((members, decision), instances, at, (now_ms, delay_ms))
            })
            .collect();
        let n = self.groups.len();
        Ok(Rollouts { record, steps, settled, failed: vec![None; n], back: vec![None; n], closed: vec![false; n] })
    }

    fn checkpoints(&self, group: &Group) -> (Vec<usize>, u64) {
        checkpoints(self.args, group)
    }

    /// The groups' rolling updates, group by group; the first that fails stops them all (the
    /// failure returned, and named in its group's report). A group with `AutoRollback` whose
    /// rollout failed (`rollback::calls_for`) is rolled back instead (`roll_back`). Their
    /// applies join the report. Then each group's rollout is recorded (`decide::rollout_after`)
    /// and reported.
    pub(super) fn roll_all(
        &self,
        ws: &mut Workspace<'_>,
        decisions: &Decisions,
        mut rollouts: Rollouts,
        report: &mut Report,
    ) -> Option<anyhow::Error> {
        // A rollout that begins is recorded before its first batch: a run killed after the
        // batch leaves the next to find the checkpoint passed, and pause.
        for (group, step) in self.groups.iter().zip(&rollouts.steps) {
            let Some(step) = step else { continue };
            let to = &group.asked;
            if rollouts.record.groups.get(&group.spec.id).is_none_or(|r| &r.to != to) {
                rollouts.record.groups.insert(group.spec.id.clone(), step.begun(to));
            }
        }
        if let Err(e) = ws.save(&rollouts.record) {
            return Some(e);
        }
        let mut tally = Tally::default();
        let mut stopped = None;
        let groups = self.groups.iter().zip(decisions).zip(report.groups.iter_mut());
        for (i, ((group, (_, decision)), g)) in groups.enumerate() {
            if stopped.is_some() {
                continue;
            }
            let failed = rollouts.failed[i].take().map(|why| rollout_failed(group, &why));
            tally.spec_failed = failed.is_some();
            let mut failure = match failed {
                Some(failed) => Some(failed),
                None if !decision.replace.is_empty() => self.roll(ws, group, &decision.replace, g, &mut tally),
                None if g.made().next().is_none() && rollouts.closing(i, group, &ws.dir().instances(self.profiles)) => {
                    // The rollout's last batch, checked once by a later run before it is done.
                    let stopped =
                        rollouts.record.groups.get(&group.spec.id).is_some_and(|r| r.state == RolloutState::Stopped);
                    match self.close(ws, group, stopped) {
                        Ok(closed) => {
                            rollouts.closed[i] = closed;
                            None
                        }
                        Err(e) => {
                            tally.spec_failed = crate::exit::code_for(&e) == Code::UpdateStopped;
                            Some(e)
                        }
                    }
                }
                None => continue,
            };
            let good = rollouts.record.good.get(&group.spec.id).filter(|good| good.hash != group.asked).cloned();
            let back = failure.as_ref().filter(|_| group.spec.auto_rollback && !group.held_back() && tally.spec_failed);
            if let (Some(f), Some(good)) = (back, good) {
                let why = format!("{f:#}");
                failure = self.roll_back(ws, (group, &good, why), (i, &mut rollouts), g, &mut tally);
            }
            if let Some(failure) = &failure {
                g.stopped = Some(format!("{failure:#}"));
            }
            g.repaired();
            g.count_members(rollouts.back[i].as_ref().unwrap_or(group), &ws.dir().instances(self.profiles));
            stopped = failure;
        }
        if tally.tried {
            report.note_applied(tally.changes);
        }
        if let Err(e) = self.record_rollouts(ws, &mut rollouts, report) {
            return stopped.or(Some(e));
        }
        stopped
    }

    /// Rolls `group` back to its last good spec `good` after its rollout failed (`why`): the
    /// record says so first (`rolling_back`, written: a run killed after it goes on with the
    /// rollback), then every member not on `good` is replaced through the rolling road, its
    /// destroys counted by `--max-destroy` as any run's are. Group `i` is held back from then
    /// on (`rollouts.back`). What stopped the rollback, if anything did.
    fn roll_back(
        &self,
        ws: &mut Workspace<'_>,
        (group, good, why): (&Group, &GoodSpec, String),
        (i, rollouts): (usize, &mut Rollouts),
        report: &mut GroupReport,
        tally: &mut Tally,
    ) -> Option<anyhow::Error> {
        let back = match group.back_on(good, self.profiles) {
            Ok(back) => back,
            Err(e) => return Some(e),
        };
        let id = &group.spec.id;
        rollouts.record.groups.insert(id.clone(), rollback::backing(&good.hash, &group.asked, why.clone()));
        if let Err(e) = ws.save(&rollouts.record) {
            return Some(e);
        }
        self.ctx.printer.warn(&format!("group {id}: its rollout failed ({why}): rolling back to {}", good.hash));
        report.rolled_back = true;
        rollouts.back[i] = Some(back.clone());
        let instances = ws.dir().instances(self.profiles);
        // Not one whose machine a failed apply may have made, unlisted yet: its file stays,
        // and a later run (the look-up settled) takes it back.
        // Those never made first: the first batch's apply is then one without their files
        // (every apply with them fails).
        let state = match ws.state() {
            Ok(state) => state,
            Err(e) => return Some(e),
        };
        let made = |m: &Instance| m.vm_address().is_some_and(|vm| state.contains_key(&vm));
        let mut ids: Vec<(bool, InstanceId)> = back
            .tagged(&instances)
            .filter(|m| !back.is_current(m) && !ws.holds(&format!("{}{}", m.id, names::LIVE)))
            .map(|m| (made(m), m.id.clone()))
            .collect();
        ids.sort();
        // Not those whose slot is pinned to a zone without room: they wait (`Run::replace`).
        let mut ids: Vec<InstanceId> = ids.into_iter().map(|(_, id)| id).collect();
        if let Err(e) = self.placing.borrow_mut().keep_placeable(ws.dir(), (&back, &instances), &mut ids) {
            return Some(e);
        }
        // Unhealthy members the rollback replaces are not the breaker's concern any more.
        if let Some(h) =
            report.healing.as_mut().filter(|h| h.unhealthy.iter().all(|u| ids.iter().any(|id| id.to_string() == *u)))
        {
            h.repair_halted = None;
        }
        let run = Run { groups: std::slice::from_ref(&back), ..*self };
        let decisions = vec![(Vec::new(), crate::converge::Decision { replace: ids.clone(), ..Default::default() })];
        // Counted against what the run has left of --max-destroy after its rolling applies.
        let left = decide::max_destroy(self.args.max_destroy).saturating_sub(tally.changes.remove);
        let counted = run
            .planned_destroys(ws, &instances, &BTreeSet::new(), &decisions, &ChangeSet::default(), None)
            .and_then(|planned| {
                let plan = crate::terraform::Plan::default();
                decide::check_max_destroy(run.groups, Some(left), &plan, &[], planned, &decisions)
            });
        if let Err(e) = counted {
            return Some(e);
        }
        run.roll(ws, &back, &ids, report, tally)
    }

    /// Records where each group's rollout stands after the run, and puts it in the report. A
    /// group whose members are all on the spec again ends its rollout (`done`); one held back
    /// is `rolled_back` once none is left off its last good spec. A group that was whole and
    /// current when the run began, and still is, none of its members unhealthy, has its spec
    /// recorded as its last good one.
    fn record_rollouts(&self, ws: &mut Workspace<'_>, rollouts: &mut Rollouts, report: &mut Report) -> Result<()> {
        let instances = ws.dir().instances(self.profiles);
        // The health checks as this run left them (read only when a group heals).
        let checks =
            self.groups.iter().any(|g| g.heal.is_some()).then(|| crate::cmd::heal::read(ws, &self.ctx.printer));
        let healthy = |group: &Group| match (&group.heal, &checks) {
            (Some(heal), Some(checks)) => group.tagged(&instances).all(|m| {
                checks.health(&m.id.to_string(), heal.failures_before_repair)
                    == Some(crate::health_record::Health::Healthy)
            }),
            _ => true,
        };
        let mut now_ms = None;
        let groups = self.groups.iter().zip(&rollouts.steps).zip(report.groups.iter_mut());
        for (i, ((group, step), g)) in groups.enumerate() {
            let group = rollouts.back[i].as_ref().unwrap_or(group);
            let id = &group.spec.id;
            let to = group.asked.as_str();
            let current = group.tagged(&instances).filter(|i| group.is_current(i)).count();
            // (A member waiting for its zone, its old one destroyed: not done either.)
            let left = group.tagged(&instances).any(|i| !group.is_current(i)) || self.placing.borrow().has_waiting(id);
            let entry = match (step, rollouts.record.groups.get(id)) {
                (_, Some(r)) if group.held_back() => {
                    // Carried on by this run (begun, or found rolling back): it says so (exit 20).
                    g.rolled_back |= r.state == RolloutState::RollingBack;
                    let state = if left { RolloutState::RollingBack } else { RolloutState::RolledBack };
                    Some(GroupRollout { state, ..r.clone() })
                }
                (Some(step), _) => {
                    let now = match now_ms {
                        Some(now) => now,
                        None => *now_ms.insert(ws.now_ms()?),
                    };
                    Some(decide::rollout_after(step, to, (current, left, g.stopped.clone()), now))
                }
                // The rollback of a spec the group spec no longer asks for: over.
                (None, Some(r)) if r.to != to && r.state.backing() => None,
                // Every member on the spec: done, once closed (`Run::close`) when it was open.
                (None, Some(r)) if r.to != to || rollouts.closed[i] => Some(GroupRollout {
                    to: to.to_string(),
                    state: RolloutState::Done,
                    paused_at_ms: None,
                    why: None,
                    ..r.clone()
                }),
                (None, Some(r)) if r.state != RolloutState::Done && g.stopped.is_some() => {
                    Some(GroupRollout { state: RolloutState::Stopped, why: g.stopped.clone(), ..r.clone() })
                }
                (None, r) => r.cloned(),
            };
            // Its spec becomes its last good one once its rollout is done (in an earlier run,
            // or closed by this one) or it had none, the group whole and current since the
            // run began, and every member healthy by its checks, when it heals.
            let done_before =
                self.rollouts.groups.get(id).filter(|r| r.to == to).is_none_or(|r| r.state == RolloutState::Done);
            let whole = !left && current == group.spec.desired() && g.stopped.is_none();
            if rollouts.settled[i]
                && !group.held_back()
                && whole
                && (done_before || rollouts.closed[i])
                && healthy(group)
            {
                rollouts.record.good.insert(id.clone(), group.good());
            }
            match entry {
                Some(entry) => {
                    let delay_ms = self.checkpoints(group).1;
                    g.rollout = Some(RolloutReport::new(&entry, (current, group.spec.desired()), delay_ms));
                    rollouts.record.groups.insert(id.clone(), entry);
                }
                None => {
                    rollouts.record.groups.remove(id);
                }
            }
        }
        ws.save(&rollouts.record)
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
            tally.spec_failed = crate::exit::code_for(&e) == Code::UpdateStopped;
            return Some(e);
        }
        // The batch before, and when its replacements were made: ready (`MinReady`) before
        // the next batch starts. The last batch of a run is not waited for: nothing follows it.
        let mut before: Option<(Vec<InstanceId>, std::time::Instant)> = None;
        for batch in road.batches {
            if let Some((ids, made)) = before.take() {
                if let Err(e) = self.ready(ws, group, &ids, made) {
                    tally.spec_failed = crate::exit::code_for(&e) == Code::UpdateStopped;
                    return Some(e);
                }
            }
            if crate::signals::stop_requested() {
                return Some(interrupted(group));
            }
            self.ctx.printer.event(&format!(
                "group {}: replacing {}",
                group.spec.id,
                batch.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
            ));
            match self.replace(ws, (group, road.order), batch, report, tally) {
                Ok(made) => before = Some(made),
                Err(e) => return Some(e),
            }
        }
        None
    }

    /// Waits until the replacements `ids`, made at `made`, have been ready for `MinReady`
    /// (`--min-ready` over the spec's): their health check (`--health-cmd`, else the group's
    /// `Healing.Command`) run again every fifth of it (1 s to 30 s) passes each time until then;
    /// the first that fails stops the update (exit 15). Without a check, the time alone. Ctrl-C
    /// or SIGTERM stops the wait, and the update; the next run goes on.
    fn ready(&self, ws: &Workspace<'_>, group: &Group, ids: &[InstanceId], made: std::time::Instant) -> Result<()> {
        use std::time::Duration;
        let min_ready = self.args.min_ready.or(group.spec.min_ready).unwrap_or_default();
        if min_ready.is_zero() || ids.is_empty() {
            return Ok(());
        }
        let cmd = self.args.health_cmd.clone().or_else(|| group.heal.as_ref().map(|h| h.command.clone()));
        let step = (min_ready / 5).clamp(Duration::from_secs(1), Duration::from_secs(30));
        self.ctx.printer.event(&format!(
            "group {}: waiting for {} to be ready ({} MinReady)",
            group.spec.id,
            ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(" "),
            crate::text::duration(min_ready)
        ));
        // Checked at least once more, at or after `MinReady`: the gate's check alone says
        // nothing of the time since.
        loop {
            let left = min_ready.saturating_sub(made.elapsed());
            let wake = std::time::Instant::now() + left.min(step);
            while std::time::Instant::now() < wake {
                if crate::signals::stop_requested() {
                    return Err(interrupted(group));
                }
                std::thread::sleep(
                    Duration::from_millis(100).min(wake.saturating_duration_since(std::time::Instant::now())),
                );
            }
            if let Some(cmd) = &cmd {
                self.check(ws, group, ids, cmd)?;
            }
            if made.elapsed() >= min_ready {
                return Ok(());
            }
        }
    }

    /// Replaces one batch. Destroying first: drain the old members, remove them (their slots
    /// kept), apply, create the replacements (which re-attach the slots), apply. In a surge:
    /// create the replacements, apply, then drain and remove the old members, apply. Each
    /// replacement must be created and, with `--health-cmd`, healthy before the old ones go
    /// (surge) or before the next batch. The replacements, and when they were made.
    fn replace(
        &self,
        ws: &mut Workspace<'_>,
        (group, order): (&Group, Order),
        batch: &[InstanceId],
        report: &mut GroupReport,
        tally: &mut Tally,
    ) -> Result<(Vec<InstanceId>, std::time::Instant)> {
        let instances = ws.dir().instances(self.profiles);
        let mut batch = batch.to_vec();
        // One whose slot is pinned to a zone without room (as of now: an earlier batch may
        // have found it full) waits: destroyed, it could not be made again.
        self.placing.borrow_mut().keep_placeable(ws.dir(), (group, &instances), &mut batch)?;
        if batch.is_empty() {
            return Ok((Vec::new(), std::time::Instant::now()));
        }
        if order == Order::DestroyFirst {
            // Drained before their files go; one kept (`abandon`) is not replaced this run: its
            // slot or logical ID stays its own.
            let kept = self.drain(ws, &instances, [(group, batch.as_slice())])?;
            report.abandoned.extend(batch.iter().filter(|id| kept.contains(id)).map(ToString::to_string));
            batch.retain(|id| !kept.contains(id));
            if batch.is_empty() {
                return Ok((Vec::new(), std::time::Instant::now()));
            }
            self.remove(ws, &batch.iter().cloned().collect(), Reason::RollingUpdate, tally)?;
        }
        let ids = self.create(ws, (group, &instances), &batch)?;
        let created = match tally.apply(ws, Apply::Configuration { refresh: false }) {
            // A zone without capacity: the replacements made elsewhere, and applied again.
            Err(e) if group.spec.placement.is_some() => self.answer_capacity(ws, e).map(|c| tally.changes += c),
            created => created,
        };
        // Those given up to wait for their zone were never made: nothing to check.
        let live: Vec<InstanceId> =
            ids.iter().filter(|id| !self.placing.borrow().given_up.contains(&id.to_string())).cloned().collect();
        let made = std::time::Instant::now();
        // The spec failed when the create did for a reason of its own, every replacement
        // settled (none that the failed apply may have made, unlisted yet), or the gate did.
        let settled = || !ids.iter().any(|id| ws.holds(&format!("{id}{}", names::LIVE)));
        tally.spec_failed = created.as_ref().is_err_and(|e| rollback::calls_for(e, &self.retry()) && settled());
        let created = created.and_then(|()| self.health(ws, group, &live));
        if let Err(failed) = created {
            tally.spec_failed |= crate::exit::code_for(&failed) == Code::UpdateStopped;
            self.failed(ws, order, (&batch, &ids), report, tally);
            return Err(failed);
        }
        let old = match order {
            Order::DestroyFirst => batch.iter().cloned().collect(),
            Order::Surge => self.retire(ws, &instances, group, (&batch, &ids), report, tally)?,
        };
        report.replaced.extend(
            batch
                .iter()
                .zip(&ids)
                .filter(|(o, _)| old.contains(*o))
                .map(|(o, n)| Replaced { old: o.to_string(), new: n.to_string() }),
        );
        Ok((live, made))
    }

    /// Creates a member of `group` for each of `batch` (the old members, as `instances` had
    /// them: a pet for a logical ID, cattle otherwise) and promotes their files, not applied
    /// yet; their IDs.
    fn create(
        &self,
        ws: &mut Workspace<'_>,
        (group, instances): (&Group, &[Instance]),
        batch: &[InstanceId],
    ) -> Result<Vec<InstanceId>> {
        let placing = self.placing.borrow();
        // The members they replace are not counted in their zones: a replacement goes where
        // its old member leaves room.
        let mut new = NewMembers::new(ws.dir(), self.profiles, &self.ctx.printer)
            .replacing(&batch.iter().cloned().collect())
            .placing(&placing.record, placing.now_ms);
        let ids = new.replace_all(group, instances, batch)?;
        let outcome = new.outcome();
        let writes = new.writes();
        drop(placing);
        self.placing.borrow_mut().note(outcome);
        ws.write(ChangeSet::writing(writes))?;
        ws.promote()?;
        Ok(ids)
    }

    /// Removes the files of `ids` (`reason`: a rolling update keeps their slots), applied.
    fn remove(
        &self,
        ws: &mut Workspace<'_>,
        ids: &BTreeSet<InstanceId>,
        reason: Reason,
        tally: &mut Tally,
    ) -> Result<()> {
        let instances = ws.dir().instances(self.profiles);
        let files = removals(ws.dir(), &instances, ids, reason, &self.ctx.printer)?;
        ws.write(ChangeSet::removing(files))?;
        tally.apply(ws, Apply::Configuration { refresh: false })
    }

    /// After the replacements `ids` of `batch` failed (to be created, or the health gate).
    /// Destroying first, the old members are gone already; their replacements stay (a failed
    /// create is retried by the next apply), and the next run checks them first. A surge is
    /// taken back (the new members are removed again), so that the group is not left over its
    /// size and the next run's scale-down never gives up a healthy old member for a failed new
    /// one.
    fn failed(
        &self,
        ws: &mut Workspace<'_>,
        order: Order,
        (batch, ids): (&[InstanceId], &[InstanceId]),
        report: &mut GroupReport,
        tally: &mut Tally,
    ) {
        if order == Order::DestroyFirst {
            report.terminated.extend(batch.iter().map(ToString::to_string));
            report.provisioned.extend(ids.iter().map(ToString::to_string));
            return;
        }
        // Not one whose machine the failed apply may have made, unlisted yet: its file stays
        // (removing it would leave the machine behind), and a later run adopts it.
        let new: BTreeSet<InstanceId> =
            ids.iter().filter(|id| !ws.holds(&format!("{id}{}", names::LIVE))).cloned().collect();
        if let Err(e) = self.remove(ws, &new, Reason::Terminate, tally) {
            self.ctx.printer.warn(&format!("the failed replacements could not be taken back: {e:#}"));
            report.provisioned.extend(ids.iter().map(ToString::to_string));
        }
    }

    /// In a surge, once the replacements `ids` are up: the old members of `batch` are drained,
    /// then removed; one kept (`abandon`) stays beside its replacement, for a later run's
    /// scale-in. The old members removed.
    fn retire(
        &self,
        ws: &mut Workspace<'_>,
        instances: &[Instance],
        group: &Group,
        (batch, ids): (&[InstanceId], &[InstanceId]),
        report: &mut GroupReport,
        tally: &mut Tally,
    ) -> Result<BTreeSet<InstanceId>> {
        let kept = self.drain(ws, instances, [(group, batch)])?;
        let old: BTreeSet<InstanceId> = batch.iter().filter(|id| !kept.contains(id)).cloned().collect();
        for (o, n) in batch.iter().zip(ids).filter(|(o, _)| kept.contains(*o)) {
            report.abandoned.push(o.to_string());
            report.provisioned.push(n.to_string());
        }
        if !old.is_empty() {
            self.remove(ws, &old, Reason::Terminate, tally)?;
        }
        Ok(old)
    }

    /// Drains the members `doomed` lists, each with its group's drain (`cmd::drain`); returns
    /// those kept (`abandon`).
    pub(super) fn drain<'d>(
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

    /// Closes `group`'s rollout: every member is on the new spec since an earlier run, each in
    /// the state, and `--health-cmd` passes for each, once (else the health record of the
    /// group's `Healing` says each is healthy), before the rollout is done and its spec may
    /// become the last good one. The first that fails stops the update (exit 15), as the gate
    /// does. Whether it closed (`false`: a later run looks again; `stopped`: the rollout
    /// stopped at its gate, which no check has passed since).
    fn close(&self, ws: &Workspace<'_>, group: &Group, stopped: bool) -> Result<bool> {
        let instances = ws.dir().instances(self.profiles);
        let state = ws.state()?;
        let members: Vec<&Instance> = group.tagged(&instances).collect();
        // Only machines that exist are judged: one not made yet waits for a later run.
        if !members.iter().all(|m| m.vm_address().is_some_and(|vm| state.contains_key(&vm))) {
            return Ok(false);
        }
        let ids: Vec<InstanceId> = members.iter().map(|m| m.id.clone()).collect();
        if let Some(cmd) = &self.args.health_cmd {
            self.ctx.printer.event(&format!(
                "group {}: checking the rollout's {} member(s) before it is done",
                group.spec.id,
                ids.len()
            ));
            return self.check(ws, group, &ids, cmd).map(|()| true);
        }
        // Healing's checks ran this run: the health record judges (one unhealthy fails it;
        // all healthy close it; otherwise a later run does). Without any check, a rollout
        // stopped by its gate stays stopped; one that was rolling closes.
        let Some(heal) = &group.heal else { return Ok(!stopped) };
        let record = crate::cmd::heal::read(ws, &self.ctx.printer);
        let health = |id: &InstanceId| record.health(&id.to_string(), heal.failures_before_repair);
        if let Some(id) = ids.iter().find(|id| health(id) == Some(crate::health_record::Health::Unhealthy)) {
            return Err(rollout_failed(group, &format!("{id} on the new spec is not healthy (Healing)")));
        }
        Ok(ids.iter().all(|id| health(id) == Some(crate::health_record::Health::Healthy)))
    }

    /// The runner's retry policy (its patterns tell a transient failure), the default when the
    /// configuration has none it can read.
    fn retry(&self) -> crate::terraform::retry::Retry {
        self.ctx.retry().cloned().unwrap_or_default()
    }

    /// Runs `--health-cmd` for each new member; the first that fails stops the update.
    fn health(&self, ws: &Workspace<'_>, group: &Group, ids: &[InstanceId]) -> Result<()> {
        match &self.args.health_cmd {
            Some(cmd) => self.check(ws, group, ids, cmd),
            None => Ok(()),
        }
    }

    /// Runs the health check `cmd` for each of `ids`; the first that fails stops the update.
    fn check(&self, ws: &Workspace<'_>, group: &Group, ids: &[InstanceId], cmd: &str) -> Result<()> {
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
}

/// `group`'s rollout failed (`why`) before its batches: as a replacement that was not healthy
/// (exit 15), unless `AutoRollback` rolls it back.
fn rollout_failed(group: &Group, why: &str) -> anyhow::Error {
    Failure::new(Code::UpdateStopped, format!("the rolling update of group `{}` stopped: {why}", group.spec.id))
        .hint("nothing more was replaced; fix the spec or the machine, then run `infrakit-tf reconcile` again")
        .into()
}

/// Ctrl-C or SIGTERM stopped `group`'s rolling update between two of its steps (exit 130).
fn interrupted(group: &Group) -> anyhow::Error {
    Failure::new(Code::Interrupted, format!("interrupted: the rolling update of group `{}` stopped", group.spec.id))
        .hint("run `infrakit-tf reconcile` again to go on")
        .into()
}

/// A group's checkpoints as member counts (`--checkpoints` over the spec's), and how long each
/// pause lasts in ms (`--checkpoint-delay` over the spec's, else an hour).
pub(super) fn checkpoints(args: &ReconcileArgs, group: &Group) -> (Vec<usize>, u64) {
    let percents = args.checkpoints.as_ref().map_or(&group.spec.checkpoints, |c| &c.0);
    let delay = args.checkpoint_delay.or(group.spec.checkpoint_delay).unwrap_or(CHECKPOINT_DELAY);
    (checkpoint_counts(percents, group.spec.desired()), u64::try_from(delay.as_millis()).unwrap_or(u64::MAX))
}

/// The applies of the rolling updates, added up for the report.
#[derive(Default)]
struct Tally {
    /// Whether one was tried.
    tried: bool,
    changes: crate::tfoutput::Changes,
    /// Whether what stopped the group's update says its new spec failed (`rollback::calls_for`:
    /// a replacement's health gate or the apply that created it): what `AutoRollback` answers.
    spec_failed: bool,
}

impl Tally {
    /// Applies, counting the run whether it succeeds or not.
    fn apply(&mut self, ws: &mut Workspace<'_>, what: Apply<'_>) -> Result<()> {
        self.tried = true;
        self.changes += ws.apply(what)?;
        Ok(())
    }
}
