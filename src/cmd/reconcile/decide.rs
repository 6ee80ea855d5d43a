//! What a converging run decides, from what it found (`observe.rs`), its groups and its flags:
//! which instances to prune (their VM vanished), what each group needs (`converge::decide` over
//! its members: new members, terminations in the scale-in order, replacements), the repairs the
//! health record calls for, whether `--max-destroy` allows it all, how each group's rolling
//! update goes (its order, its batches of `MaxUnavailable`), and which apply comes next.
//!
//! Pure: no I/O, no terraform. The caller looks, writes the files and runs terraform (`mod.rs`,
//! `rollout.rs`); the table-driven tests (`decide/tests.rs`) need nothing but values.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;

use super::groups::Group;
use crate::cmd::heal::{Healed, Verdict};
use crate::converge::{self, Decision, Member};
use crate::directory::Instance;
use crate::exit::{Code, Failure};
use crate::group::CONFIG_TAG;
use crate::health_record::{Health, HealthRecord};
use crate::names::{InstanceId, Suffix};
use crate::rollout_record::{allowance, Allowance, GroupRollout, RolloutState};
use crate::terraform::Plan;
use crate::tfoutput::{Action, ResourceChange};

#[cfg(test)]
mod tests;

/// `--max-destroy` when not given.
const MAX_DESTROY: u64 = 10;

/// Each group's members (less those pruned) and what converging it takes, in the groups' order.
pub(super) type Decisions = Vec<(Vec<Member>, Decision)>;

/// What the run found, as deciding needs it.
pub(super) struct Found<'i, 'a> {
    /// The directory's instances, as the run listed them (before it promoted the queue).
    pub(super) instances: &'i [Instance],
    /// What the plan (or the look) found: drift, and what applying would change.
    pub(super) plan: &'a Plan,
    /// The health record as the run found it.
    pub(super) record: &'a HealthRecord,
    /// Members whose machine a failed apply may have made, not settled yet (held back): their
    /// files are never removed by a rollback.
    pub(super) unsettled: &'a BTreeSet<InstanceId>,
}

/// What to prune, and what every group needs.
pub(super) struct Decided<'i> {
    /// Live instances whose VM vanished, with the VM's address: their files go.
    pub(super) doomed: Vec<(&'i Instance, String)>,
    /// Their IDs.
    pub(super) leaving: BTreeSet<InstanceId>,
    pub(super) decisions: Decisions,
}

/// Decides what to prune and what every group needs. An instance queued when the run began is
/// never pruned (its VM never was); a pruned one is no group's member any more. Nor is a member
/// of a group held back on its last good spec that is on another spec and was never made
/// (`never_made`): its file goes as a pruned one's does, and a member on the good spec takes
/// its place.
pub(super) fn decide<'i>(groups: &[Group], found: &Found<'i, '_>) -> Decided<'i> {
    let mut doomed = vanished(found.plan, found.instances);
    for (i, vm) in never_made(groups, found) {
        if !doomed.iter().any(|(d, _)| d.id == i.id) {
            doomed.push((i, vm));
        }
    }
    let leaving: BTreeSet<InstanceId> = doomed.iter().map(|(i, _)| i.id.clone()).collect();
    let decisions = groups
        .iter()
        .map(|g| {
            let members = members(g, found.instances, &leaving, found.plan, found.record);
            let mut decision = converge::decide(&g.spec.allocation, &members);
            // Spread across zones: the surplus leaves the fullest zones first.
            if let (Some(placement), crate::group::Allocation::Size(_)) = (&g.spec.placement, &g.spec.allocation) {
                if !decision.terminate.is_empty() {
                    let zone = |m: &Member| {
                        let inst = found.instances.iter().find(|i| i.id == m.id)?;
                        crate::group::placed(&inst.tags, placement).map(|(z, _)| z)
                    };
                    decision.terminate = converge::surplus_by_zone(&members, decision.terminate.len(), zone);
                }
            }
            (members, decision)
        })
        .collect();
    Decided { doomed, leaving, decisions }
}

/// The live instances whose VM the plan found deleted outside Terraform, with the VM's
/// address. Instances queued (promoted by this run) are never among them.
fn vanished<'i>(plan: &Plan, instances: &'i [Instance]) -> Vec<(&'i Instance, String)> {
    let gone: BTreeSet<&str> =
        plan.drift.iter().filter(|d| d.action == Action::Delete).map(|d| d.address.as_str()).collect();
    instances
        .iter()
        .filter(|i| i.suffix != Suffix::Queued)
        .filter_map(|i| {
            let (t, n) = i.vm.as_ref()?;
            let addr = format!("{t}.{n}");
            gone.contains(addr.as_str()).then_some((i, addr))
        })
        .collect()
}

/// The members of groups held back on their last good spec (a rollback) that are on another
/// spec and whose VM the plan would create (its create failed: a spec that fails to apply, or
/// a tainted one), with the VM's address: a rollback replaces them, and they are not to be
/// applied again first (every apply would fail on them). Not one queued, nor one `unsettled`.
fn never_made<'i>(groups: &[Group], found: &Found<'i, '_>) -> Vec<(&'i Instance, String)> {
    let creating = creating(found.plan);
    let mut out = Vec::new();
    for group in groups.iter().filter(|g| g.held_back()) {
        for i in found.instances.iter().filter(|i| group.is_member(i)) {
            let Some(addr) = i.vm_address() else { continue };
            if !group.is_current(i)
                && i.suffix != Suffix::Queued
                && creating.contains(addr.as_str())
                && !found.unsettled.contains(&i.id)
            {
                out.push((i, addr));
            }
        }
    }
    out
}

/// The addresses `plan` creates or replaces.
fn creating(plan: &Plan) -> BTreeSet<&str> {
    plan.changes
        .iter()
        .filter(|c| matches!(c.action, Action::Create | Action::Replace))
        .map(|c| c.address.as_str())
        .collect()
}

/// The members of `group` among `instances`, less those in `leaving` (pruned): tagged with the
/// group's ID. A member is current when its config hash is the spec's (`bootstrap`, what
/// `import` gives the first manager, never is), created unless the plan creates or replaces
/// its VM (a queued or pending member, or a tainted one), and unhealthy when its group heals
/// and `record` (as the run found it, before its checks) says so.
fn members(
    group: &Group,
    instances: &[Instance],
    leaving: &BTreeSet<InstanceId>,
    plan: &Plan,
    record: &HealthRecord,
) -> Vec<Member> {
    let threshold = group.heal.as_ref().map(|h| h.failures_before_repair);
    let creating = creating(plan);
    group
        .tagged(instances)
        .filter(|i| !leaving.contains(&i.id))
        .map(|i| Member {
            id: i.id.clone(),
            logical_id: i.logical_id().map(str::to_string),
            current: group.is_current(i),
            created: i.vm.as_ref().is_some_and(|(t, n)| !creating.contains(format!("{t}.{n}").as_str())),
            unhealthy: threshold.is_some_and(|k| record.health(&i.id.to_string(), k) == Some(Health::Unhealthy)),
        })
        .collect()
}

/// The groups that heal, each as `cmd::heal` checks it (with its index among `groups`): its
/// created members, and those `decisions` replace or terminate anyway, or that are `held`
/// (waiting for their zone: `placement.rs`), never repaired besides.
pub(super) fn healed<'a>(
    groups: &'a [Group],
    instances: &'a [Instance],
    decisions: &[(Vec<Member>, Decision)],
    held: &BTreeSet<InstanceId>,
) -> Vec<(usize, Healed<'a>)> {
    groups
        .iter()
        .zip(decisions)
        .enumerate()
        .filter_map(|(i, (group, (members, decision)))| {
            let heal = group.heal.as_ref()?;
            let created: BTreeSet<&InstanceId> = members.iter().filter(|m| m.created).map(|m| &m.id).collect();
            Some((
                i,
                Healed {
                    group: &group.spec.id,
                    heal,
                    desired: group.spec.desired(),
                    created: instances.iter().filter(|inst| created.contains(&inst.id)).collect(),
                    going: decision.replace.iter().chain(&decision.terminate).chain(held).cloned().collect(),
                },
            ))
        })
        .collect()
}

/// Joins the members a group's health verdict repairs (none when the circuit breaker halted
/// its repairs: `cmd::heal::verdict`) to its rolling update, after its outdated members: a
/// repair takes the replacement's road and counts in `--max-destroy`.
pub(super) fn repair(decision: &mut Decision, verdict: &Verdict) {
    decision.replace.extend(verdict.repair.iter().cloned());
}

/// A group's rollout in this run: the config hash most of its outdated members carry, and how
/// far it may go (`rollout_record::allowance`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Step {
    pub(super) from: String,
    pub(super) allowance: Allowance,
}

/// What a group's rollout (to `to`, with `counts` its checkpoints: `group::checkpoint_counts`)
/// may replace now: `decision.replace` keeps the members repaired (current, unhealthy) and,
/// of the outdated ones, no more than bring the members on the new spec to the next
/// checkpoint, the members it adds (made on the new spec) counted; none at a pause. `None`
/// when no member is outdated (no rollout under way).
pub(super) fn rollout_step(
    (members, decision): (&[Member], &mut Decision),
    instances: &[Instance],
    (record, to, counts): (Option<&GroupRollout>, &str, &[usize]),
    (now_ms, delay_ms): (u64, u64),
) -> Option<Step> {
    let outdated: Vec<&Member> = members.iter().filter(|m| !m.current).collect();
    if outdated.is_empty() {
        return None;
    }
    let current = members.len() - outdated.len();
    let allowance = allowance(record, to, counts, (current, now_ms, delay_ms));
    let mut may = match allowance {
        Allowance::Pause { .. } => 0,
        Allowance::Go { up_to: Some(up_to), .. } => up_to.saturating_sub(current + decision.add.len()),
        Allowance::Go { up_to: None, .. } => usize::MAX,
    };
    decision.replace.retain(|id| {
        let is_outdated = outdated.iter().any(|m| &m.id == id);
        let kept = !is_outdated || may > 0;
        if is_outdated && kept {
            may -= 1;
        }
        kept
    });
    // Where it comes from: as recorded when it began, else the hash most outdated members
    // carry (the lowest of equals: one answer on every host).
    let recorded = record.filter(|r| r.to == to).map(|r| r.from.clone());
    let from = recorded.unwrap_or_else(|| {
        let mut hashes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in &outdated {
            let tag = instances.iter().find(|i| i.id == m.id).and_then(|i| i.tags.get(CONFIG_TAG));
            *hashes.entry(tag.map_or("", String::as_str)).or_default() += 1;
        }
        hashes.iter().max_by_key(|(h, n)| (**n, std::cmp::Reverse(**h))).map(|(h, _)| h.to_string()).unwrap_or_default()
    });
    Some(Step { from, allowance })
}

impl Step {
    /// The record of this rollout as it begins (before its first batch: a run killed after the
    /// batch then finds the checkpoint it passed, and pauses).
    pub(super) fn begun(&self, to: &str) -> GroupRollout {
        let reached = match self.allowance {
            Allowance::Pause { reached, .. } | Allowance::Go { reached, .. } => reached,
        };
        GroupRollout {
            from: self.from.clone(),
            to: to.to_string(),
            state: RolloutState::Rolling,
            reached,
            paused_at_ms: None,
            why: None,
        }
    }
}

/// Where a group's rollout stands once the run is done with it (`step`: what it was allowed;
/// `current` members on the new spec, outdated ones `left`, `stopped`: why its update stopped,
/// if it did), for the rollout record. A pause starts when a batch brought the members to a
/// checkpoint; a stop during a pause keeps the pause.
pub(super) fn rollout_after(
    step: &Step,
    to: &str,
    (current, left, stopped): (usize, bool, Option<String>),
    now_ms: u64,
) -> GroupRollout {
    let begun = step.begun(to);
    let entry = |state, reached, paused_at_ms| GroupRollout { state, reached, paused_at_ms, ..begun.clone() };
    match step.allowance {
        Allowance::Pause { since_ms, reached } if stopped.is_some() => {
            GroupRollout { why: stopped, ..entry(RolloutState::Stopped, reached, Some(since_ms)) }
        }
        Allowance::Go { reached, .. } if stopped.is_some() => {
            GroupRollout { why: stopped, ..entry(RolloutState::Stopped, reached, None) }
        }
        Allowance::Pause { since_ms, reached } => entry(RolloutState::Paused, reached, Some(since_ms)),
        Allowance::Go { reached, .. } if !left => entry(RolloutState::Done, reached, None),
        Allowance::Go { up_to: Some(up_to), .. } if current >= up_to => {
            entry(RolloutState::Paused, up_to, Some(now_ms))
        }
        Allowance::Go { reached, .. } => entry(RolloutState::Rolling, reached, None),
    }
}

/// `--max-destroy`, else its default.
pub(super) fn max_destroy(max: Option<u64>) -> u64 {
    max.unwrap_or(MAX_DESTROY)
}

/// Refuses a run that would destroy more than `max` resources (`--max-destroy`, when given):
/// `planned` (what a plan of the directory as the run would leave it destroys) when a group
/// has work, else the plan's own destroys and everything in a pruned instance's file. A group
/// spec that empties a group needs `--max-destroy`. Counted before anything is touched.
pub(super) fn check_max_destroy(
    groups: &[Group],
    max: Option<u64>,
    plan: &Plan,
    doomed: &[(&Instance, String)],
    planned: Option<u64>,
    decisions: &[(Vec<Member>, Decision)],
) -> Result<()> {
    let pruned: u64 = doomed.iter().map(|(i, _)| resource_count(i.doc.as_ref().ok()) as u64).sum();
    let destroys = planned.unwrap_or(plan.totals.remove + pruned);
    for (group, (members, _)) in groups.iter().zip(decisions) {
        if group.spec.desired() == 0 && !members.is_empty() && max.is_none() {
            return Err(Failure::new(
                Code::TooManyDestroys,
                format!(
                    "refusing to empty group `{}` ({} member(s)): its spec asks for none; nothing was applied",
                    group.spec.id,
                    members.len()
                ),
            )
            .hint(format!("if this is wanted, run again with --max-destroy {destroys} (or more)"))
            .into());
        }
    }
    let max = max_destroy(max);
    if destroys <= max {
        return Ok(());
    }
    let ids: Vec<String> = doomed.iter().map(|(i, _)| i.id.to_string()).collect();
    let terminated: usize = decisions.iter().map(|(_, d)| d.terminate.len()).sum();
    let outdated: usize = decisions.iter().map(|(_, d)| d.replace.len()).sum();
    let groups = if groups.is_empty() {
        String::new()
    } else {
        format!(", {terminated} member(s) to terminate, {outdated} to replace")
    };
    Err(Failure::new(
        Code::TooManyDestroys,
        format!(
            "refusing to destroy {destroys} resources (more than --max-destroy {max}): {} vanished machine(s){}{groups}; nothing was applied",
            ids.len(),
            if ids.is_empty() { String::new() } else { format!(" ({})", ids.join(", ")) }
        ),
    )
    .hint("check the provider and the cloud; if this is wanted, run again with a higher --max-destroy")
    .into())
}

/// The resources a document declares.
fn resource_count(doc: Option<&serde_json::Value>) -> usize {
    doc.map_or(0, |d| crate::tfconfig::resources(d).count())
}

/// Whether a run may apply only what it writes (`Next::Change`) and plan nothing else: after a
/// look that found the configuration and the state as a whole plan left them with nothing to
/// do (`unchanged`), when the run replaces, terminates and rewrites nothing (`planned`: no plan
/// of its destroys was needed) and the look found nothing but the machines of the instances it
/// prunes (`doomed`): their deletion, and their making again, which pruning drops. Then the
/// rest of the configuration has nothing to apply, and a whole plan would only say so.
pub(super) fn only_ours(
    unchanged: bool,
    planned: Option<u64>,
    decisions: &Decisions,
    plan: &Plan,
    doomed: &[(&Instance, String)],
) -> bool {
    let theirs: BTreeSet<String> =
        doomed.iter().filter_map(|(i, _)| i.doc.as_ref().ok()).flat_map(crate::tfconfig::addresses).collect();
    unchanged
        && planned.is_none()
        && decisions.iter().all(|(_, d)| d.replace.is_empty() && d.terminate.is_empty())
        && plan.drift.iter().all(|d| d.action == Action::Delete && theirs.contains(&d.address))
        && plan.changes.iter().all(|c| theirs.contains(&c.address))
}

/// What a plan of only a run's own change (`Next::Change`) would do beyond it, by address:
/// anything but making what the files it wrote declare (`written`) and destroying what the
/// files it removed declared (`removed`, counted by `check_max_destroy` as the pruned files').
/// An update or a replacement of a written resource (a dedicated volume re-attached, a
/// shared resource rewritten, that a data source changed) is beyond it too: it was neither
/// planned whole nor counted. Data sources read during the plan are not changes. Empty: the
/// plan may be applied.
pub(super) fn beyond_change<'p>(
    changes: &'p [ResourceChange],
    written: &BTreeSet<String>,
    removed: &BTreeSet<String>,
) -> Vec<&'p str> {
    changes
        .iter()
        .filter(|c| {
            // A resource of ours with `count` or `for_each`: its instances are `name[key]`.
            let resource = c.address.split('[').next().unwrap_or_default();
            match c.action {
                Action::Read | Action::NoOp => false,
                Action::Create => !written.contains(resource),
                Action::Delete => !removed.contains(resource),
                // Made again: a file written in place of one removed.
                Action::Replace => !(written.contains(resource) && removed.contains(resource)),
                _ => true,
            }
        })
        .map(|c| c.address.as_str())
        .collect()
}

/// The order of a group's rolling update (see `Group::destroy_first`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Order {
    /// The old members of a batch are drained and removed (applied) before their replacements
    /// are created: a dedicated slot is re-attached by the replacement, and a logical ID names
    /// one member's resources, never two at once.
    DestroyFirst,
    /// The replacements are created (and pass the health gate) first; then the old members
    /// are drained and removed.
    Surge,
}

/// A group's rolling update: its order, and the members it replaces, batch by batch.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Rollout<'a> {
    pub(super) order: Order,
    /// `MaxUnavailable` members a batch (`--max-unavailable` over the spec's, else 1), in the
    /// order decided (the outdated, in ID order, then those repaired).
    pub(super) batches: Vec<&'a [InstanceId]>,
}

/// How `group` replaces `replace`, with `--max-unavailable` when given.
pub(super) fn rollout<'a>(group: &Group, replace: &'a [InstanceId], max_unavailable: Option<u64>) -> Rollout<'a> {
    let at_once = max_unavailable.or(group.spec.max_unavailable).unwrap_or(1);
    let order = if group.destroy_first() { Order::DestroyFirst } else { Order::Surge };
    Rollout { order, batches: replace.chunks(usize::try_from(at_once).unwrap_or(usize::MAX)).collect() }
}

/// What the run found and decided, as the choice of its (first) apply needs it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Applying {
    /// It looked (`workspace::look`) rather than refreshing everything.
    pub(super) looked: bool,
    /// After a look: the whole configuration was planned, and that plan saved.
    pub(super) whole: bool,
    /// Machines are kept unconfirmed (a refresh would drop them from the state).
    pub(super) unconfirmed: bool,
    /// Instances were pruned.
    pub(super) pruned: bool,
    /// A group's members are added or terminated.
    pub(super) scaling: bool,
    /// The plan found objects changed outside Terraform.
    pub(super) drift: bool,
    /// The plan has changes.
    pub(super) changes: bool,
    /// What the run wrote is all there is to apply ([`only_ours`]).
    pub(super) narrow: bool,
}

/// The apply that comes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    Nothing,
    /// The saved plan: the refreshing plan's, or after a look the whole plan's.
    Saved,
    /// The configuration as the directory now has it, refreshed first or not.
    Configuration {
        refresh: bool,
    },
    /// Only what the run wrote and removed: a plan of those files' resources (`-target`),
    /// saved, applied when it changes nothing else.
    Change,
}

impl Applying {
    /// Whether what the reads found is brought into the state before the apply, which then does not refresh
    /// (`bring_state_to_look`): after a look, or when machines are kept unconfirmed.
    pub(super) fn careful(&self) -> bool {
        self.looked || self.unconfirmed
    }

    /// The apply that comes next. A refresh that found objects gone is saved by applying,
    /// even with no changes: otherwise every later run finds the same drift and `--check`
    /// never says 0. Files written since a refreshing plan (pruned, scaled) are applied afresh,
    /// refreshing again only when the plan found drift to save (one that found none need not
    /// read every object twice); a saved plan is applied as it is when nothing was written.
    pub(super) fn next(&self) -> Next {
        let work = self.pruned || self.scaling || self.drift || self.changes;
        if self.careful() {
            // After a look, a whole plan saved applies as it is when the look found nothing
            // to settle and the run wrote nothing.
            let as_planned = self.looked && self.whole && !self.pruned && !self.scaling && !self.drift;
            return if as_planned && self.changes {
                Next::Saved
            } else if self.narrow && (self.pruned || self.scaling) {
                Next::Change
            } else if work {
                Next::Configuration { refresh: false }
            } else {
                Next::Nothing
            };
        }
        if self.pruned || self.drift && self.scaling {
            Next::Configuration { refresh: true }
        } else if self.scaling {
            // The plan just refreshed every object and found nothing changed outside
            // Terraform: a second refresh would only double the cost on a large group.
            Next::Configuration { refresh: false }
        } else if self.changes || self.drift {
            Next::Saved
        } else {
            Next::Nothing
        }
    }
}
