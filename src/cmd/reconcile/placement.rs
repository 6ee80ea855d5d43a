//! Placement in a run (docs/groups-and-rollouts.md, "Placement"): a group with `Placement` has
//! each new member made in the zone with the fewest members that has room (`NewMembers`,
//! `group::choose`), tagged with it. When an apply fails and a member's create failed with a
//! capacity error (`Placement::is_capacity_error`, on terraform's diagnostic for its VM), its
//! (zone, fallback) is skipped for its backoff (the placement record, in the store with several
//! hosts), the member is made again, same ID, with its next choice (the next fallback in its
//! zone, else the zone with the fewest members that has room), and the run applies again: a
//! zone without capacity does not stop the group. An apply that ended (failed or not) left the
//! state as the cloud is: a create refused for want of capacity made nothing, and a lost
//! answer is no capacity error (it takes the look-up's road). A create that succeeds in a
//! (zone, fallback) clears it. Once zones differ by more than one member among those with room
//! (a zone that had none has it again), a run moves one member from the fullest through the
//! rolling road, its replacement made first in the emptiest (`Placing::rebalance`).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;

use super::decide::Decisions;
use super::groups::{own_slot, slot_zone, Group, Moved, NewMembers, Outcome, PlacementReport, Replaced, Waiting};
use super::report::Report;
use super::{OwnChange, Run};
use crate::directory::Instance;
use crate::exit::Code;
use crate::group::{placed, Placement, SlotZone, ZONE_TAG};
use crate::names::InstanceId;
use crate::placement_record::PlacementRecord;
use crate::rollout_record::{RolloutRecord, RolloutState};
use crate::tfoutput::Changes;
use crate::workspace::{ChangeSet, Workspace};

/// What a run knows of placement: the record, and when the run looked at it.
#[derive(Debug, Default)]
pub(super) struct Placing {
    pub(super) record: PlacementRecord,
    /// The record as it was read or last written: not written again unchanged.
    stored: PlacementRecord,
    pub(super) now_ms: u64,
    /// The members made again elsewhere after a capacity error, by group ID.
    moved: BTreeMap<String, Vec<Moved>>,
    /// The members this run moves to balance their group (`rebalance`): group ID, member,
    /// the zone it leaves.
    pub(super) rebalancing: Vec<(String, InstanceId, String)>,
    /// The members that wait for the zone their slot is pinned to, by group ID.
    waiting: BTreeMap<String, Vec<Waiting>>,
    /// The members whose files a run removed to wait (made by it, never in the cloud).
    pub(super) given_up: BTreeSet<String>,
    /// The dedicated files (base names) of the slots this run made: their resources, if
    /// made, are new and never attached, and pin nothing.
    fresh: BTreeSet<String>,
    /// The members whose slot is pinned to a zone without room (`hold_pinned`): not replaced,
    /// repaired or health-gated this run.
    pub(super) held: BTreeSet<InstanceId>,
}

/// The members `place_again` made again: the resources their files declare, and whether the
/// failed apply's every error was one of their capacity errors.
struct Again {
    written: BTreeSet<String>,
    /// What the files of members that now wait for their pinned zone declared.
    removed: BTreeSet<String>,
    only_capacity: bool,
}

impl Placing {
    /// The record and the time, when any of `placed` (whether each group has `Placement`) does;
    /// nothing read otherwise.
    pub(super) fn read(ws: &mut Workspace<'_>, placed: bool) -> Result<Placing> {
        if !placed {
            return Ok(Placing::default());
        }
        let record = ws.record::<PlacementRecord>();
        Ok(Placing { stored: record.clone(), record, now_ms: ws.now_ms()?, ..Placing::default() })
    }

    /// Whether `group` may create in zone `zone` (by index) now: one of its choices there is
    /// not skipped.
    fn room(&self, group: &Group, placement: &Placement, zone: usize) -> bool {
        let name = &placement.zones[zone].name;
        std::iter::once(None)
            .chain((0..placement.fallback.len()).map(Some))
            .any(|f| self.record.available(&group.spec.id, name, f, self.now_ms))
    }

    /// Takes in what placing new members found (`NewMembers::outcome`): the members that
    /// wait, for the report (once per slot), and the new slots.
    pub(super) fn note(&mut self, outcome: Outcome) {
        for (group, w) in outcome.waiting {
            let list = self.waiting.entry(group).or_default();
            if !list.iter().any(|x| x.slot == w.slot) {
                list.push(w);
            }
        }
        self.fresh.extend(outcome.fresh);
    }

    /// Whether a member of group `id` waits for its zone in this run.
    pub(super) fn has_waiting(&self, id: &str) -> bool {
        self.waiting.get(id).is_some_and(|w| !w.is_empty())
    }

    /// Those of `ids` (members of `group`, as `instances` have them) whose slot is pinned to
    /// a zone without room now, or to one the spec no longer lists (`groups::slot_zone`):
    /// replacing one would destroy it with nowhere to make it again. Each with why it waits.
    pub(super) fn pinned_without_room(
        &self,
        dir: &crate::directory::Directory,
        group: &Group,
        instances: &[Instance],
        ids: &[InstanceId],
    ) -> Result<Vec<(InstanceId, Waiting)>> {
        let Some(placement) = &group.spec.placement else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for inst in instances.iter().filter(|i| ids.contains(&i.id)) {
            let Some((zone, slot)) = slot_zone(dir, &inst.attachments, &BTreeSet::new(), (placement, &group.members))?
            else {
                continue;
            };
            let zone = match zone {
                SlotZone::In(zones) if zones.iter().any(|z| self.room(group, placement, *z)) => continue,
                SlotZone::In(zones) => zones.first().copied(),
                SlotZone::Unzoned => continue,
                SlotZone::Unlisted => None,
            };
            let waiting = Waiting::new(slot, (group, placement), zone, (&self.record, self.now_ms));
            out.push((inst.id.clone(), waiting));
        }
        Ok(out)
    }

    /// Keeps in `ids` (members of `group`, as `instances` have them) only those whose slot's
    /// zone has room (`pinned_without_room`); the others wait, noted for the report.
    pub(super) fn keep_placeable(
        &mut self,
        dir: &crate::directory::Directory,
        (group, instances): (&Group, &[Instance]),
        ids: &mut Vec<InstanceId>,
    ) -> Result<()> {
        let waits = self.pinned_without_room(dir, group, instances, ids)?;
        ids.retain(|id| !waits.iter().any(|(w, _)| w == id));
        let waiting = waits.into_iter().map(|(_, w)| (group.spec.id.clone(), w)).collect();
        self.note(Outcome { waiting, fresh: Vec::new() });
        Ok(())
    }

    /// Holds the members of `groups` whose slot is pinned to a zone without room
    /// (`pinned_without_room`): kept out of `decisions` (before a rollout's checkpoints count
    /// them), never repaired nor health-gated (`Placing::held`), counted nowhere (not by
    /// `--max-destroy`); those it was to replace wait, outdated. The decisions' groups are
    /// `groups`.
    pub(super) fn hold_pinned(
        &mut self,
        dir: &crate::directory::Directory,
        (groups, instances): (&[Group], &[Instance]),
        decisions: &mut Decisions,
    ) -> Result<()> {
        for (group, (_, decision)) in groups.iter().zip(decisions.iter_mut()) {
            if group.spec.placement.is_none() {
                continue;
            }
            let members: Vec<InstanceId> = group.tagged(instances).map(|i| i.id.clone()).collect();
            let pinned = self.pinned_without_room(dir, group, instances, &members)?;
            let (waits, idle): (Vec<_>, Vec<_>) = pinned.into_iter().partition(|(id, _)| decision.replace.contains(id));
            decision.replace.retain(|id| !waits.iter().any(|(w, _)| w == id));
            self.held.extend(waits.iter().chain(&idle).map(|(id, _)| id.clone()));
            let waiting = waits.into_iter().map(|(_, w)| (group.spec.id.clone(), w)).collect();
            self.note(Outcome { waiting, fresh: Vec::new() });
        }
        Ok(())
    }

    /// What would wait for its pinned zone in a run that carries out `decisions` (for
    /// `--check`): each placed group's members to add whose slot is pinned to a zone without
    /// room, and the outdated members `hold_pinned` held. By group index.
    pub(super) fn waits(
        &self,
        dir: &crate::directory::Directory,
        (profiles, printer): (&crate::profile::Profiles, &crate::output::Printer),
        groups: &[Group],
        decisions: &Decisions,
    ) -> Result<Vec<(usize, Vec<Waiting>)>> {
        let mut out = Vec::new();
        let mut new = NewMembers::new(dir, profiles, printer).placing(&self.record, self.now_ms);
        for (i, (group, (_, decision))) in groups.iter().zip(decisions).enumerate() {
            if group.spec.placement.is_none() {
                continue;
            }
            new.add_all(group, &decision.add)?;
            let mut waits: Vec<Waiting> =
                new.outcome().waiting.into_iter().filter(|(g, _)| *g == group.spec.id).map(|(_, w)| w).collect();
            waits.extend(self.waiting.get(&group.spec.id).into_iter().flatten().cloned());
            if !waits.is_empty() {
                out.push((i, waits));
            }
        }
        Ok(out)
    }

    /// Rebalancing (`Placement.Rebalance`, on unless false): for each placed group at rest (its
    /// members all current and created, as many as asked, nothing else to do for it, no rollout
    /// paused or rolling back, `rollouts`), whose zones with room differ by more than one
    /// member (`group::overfull`), one member of the fullest (its highest ID) is replaced
    /// through the rolling road: its replacement is made first, in the zone with the fewest.
    /// One a run. The group indexes and members it moves.
    pub(super) fn rebalance(
        &mut self,
        groups: &[Group],
        instances: &[Instance],
        decisions: &mut Decisions,
        rollouts: &RolloutRecord,
    ) -> Vec<(usize, InstanceId)> {
        let mut moves = Vec::new();
        for (i, (group, (members, decision))) in groups.iter().zip(decisions.iter_mut()).enumerate() {
            let Some(placement) = group.spec.placement.as_ref().filter(|p| p.rebalance) else { continue };
            let paused = rollouts
                .groups
                .get(&group.spec.id)
                .is_some_and(|r| r.to == group.asked && (r.state == RolloutState::Paused || r.state.backing()));
            let at_rest = members.len() == group.spec.desired() && members.iter().all(|m| m.current && m.created);
            // A pet, or a member with a dedicated resource, would be destroyed before its
            // replacement is made: not moved.
            if group.held_back() || group.destroy_first() || paused || !at_rest || !decision.is_empty() {
                continue;
            }
            let mut counts = vec![0; placement.zones.len()];
            let mut by_zone: Vec<Vec<&InstanceId>> = vec![Vec::new(); placement.zones.len()];
            for inst in group.tagged(instances) {
                if let Some((z, _)) = placed(&inst.tags, placement) {
                    counts[z] += 1;
                    by_zone[z].push(&inst.id);
                }
            }
            let room: Vec<bool> = (0..placement.zones.len()).map(|z| self.room(group, placement, z)).collect();
            let Some(from) = crate::group::overfull(&counts, &room) else { continue };
            let Some(member) = by_zone[from].iter().max().map(|id| (*id).clone()) else { continue };
            decision.replace.push(member.clone());
            self.rebalancing.push((group.spec.id.clone(), member.clone(), placement.zones[from].name.clone()));
            moves.push((i, member));
        }
        moves
    }
}

impl Run<'_> {
    /// After an apply failed (`failure`, terraform's own: not an interrupt, a lost lease, a
    /// timeout): places again each member of a group with `Placement` whose create failed for
    /// want of capacity, and applies the resources of their files alone (a saved targeted plan
    /// that may do nothing beyond them: `Run::apply_own`), as often as that moves a member (at
    /// most once per zone and fallback of the groups). What else the failed apply left (another
    /// resource's error, one whose machine it may have made) is not applied again: the run
    /// still fails with it, and the next run looks it up. The changes, when the only errors
    /// were the capacity errors answered; else the failure.
    pub(super) fn answer_capacity(&self, ws: &mut Workspace<'_>, failure: anyhow::Error) -> Result<Changes> {
        let tries: usize = self
            .groups
            .iter()
            .filter_map(|g| g.spec.placement.as_ref())
            .map(|p| p.zones.len() * (p.fallback.len() + 1))
            .sum();
        let mut failure = failure;
        let mut only_capacity = true;
        for _ in 0..tries {
            if crate::exit::code_for(&failure) != Code::TerraformFailed || crate::signals::stop_requested() {
                break;
            }
            let Some(again) = self.place_again(ws)? else { break };
            only_capacity &= again.only_capacity;
            let own = OwnChange { written: again.written, removed: again.removed };
            match self.apply_own(ws, &own, false) {
                Ok(Some(changes)) if only_capacity => return Ok(changes),
                // Beyond the members' files (left to the next run, which plans everything), or
                // another error of the failed apply that stands.
                Ok(_) => break,
                Err(e) => failure = e,
            }
        }
        Err(failure)
    }

    /// The members whose create the last apply's errors say failed for want of capacity (their
    /// VM not made, or tainted; none whose machine a failed apply may have made, held back):
    /// their (zone, fallback) skipped for its backoff, each made again (same ID, same logical
    /// ID) with its next choice, the record written. What their files now declare, and whether
    /// every error was such a capacity error; `None` when no member was made again.
    fn place_again(&self, ws: &mut Workspace<'_>) -> Result<Option<Again>> {
        let errors = ws.terraform()?.last_errors();
        let instances = ws.dir().instances(self.profiles);
        let state = ws.state()?;
        let mut answered = 0;
        let mut placing = self.placing.borrow_mut();
        let now_ms = placing.now_ms;
        let mut again: Vec<(usize, &crate::directory::Instance, String, bool)> = Vec::new();
        // The dedicated files of members made again whose resources were never made: they
        // do not hold the member in its zone (rewritten wherever it goes).
        let mut unpinned = BTreeSet::new();
        for (g, group) in self.groups.iter().enumerate() {
            let Some(placement) = &group.spec.placement else { continue };
            for inst in group.tagged(&instances) {
                let Some(vm) = inst.vm_address() else { continue };
                let made = state.get(&vm).is_some_and(|r| !r.tainted);
                let refused = errors
                    .iter()
                    .filter(|d| {
                        d.address.as_deref() == Some(vm.as_str())
                            && placement.is_capacity_error(&format!("{}\n{}", d.summary, d.detail))
                    })
                    .count();
                if made || refused == 0 || ws.holds(&format!("{}{}", inst.id, crate::names::LIVE)) {
                    continue;
                }
                answered += refused;
                let Some((zone, fallback)) = placed(&inst.tags, placement) else { continue };
                let name = placement.zones[zone].name.clone();
                let backoff = |n| crate::group::backoff(n, placement.backoff, placement.max_backoff);
                let until = placing.record.failed((&group.spec.id, &name, fallback), now_ms, backoff);
                self.ctx.printer.warn(&format!(
                    "group {}: no capacity for {} in zone {name}{}: skipped until {}",
                    group.spec.id,
                    inst.id,
                    fallback.map(|f| format!(" (fallback {f})")).unwrap_or_default(),
                    crate::text::utc_ms(until)
                ));
                let slot: Vec<&String> = inst.attachments.iter().filter(|b| is_dedicated(b)).collect();
                // Its slot holds it in its zone once its resources are made, unless this run
                // made them (new, never attached: rewritten elsewhere, they are made again).
                let pinned = slot.iter().any(|b| {
                    let doc = ws.dir().current(b).and_then(|f| ws.dir().read_doc(&f).ok());
                    !placing.fresh.contains(*b)
                        && doc.is_some_and(|d| crate::tfconfig::addresses(&d).any(|a| state.contains_key(&a)))
                });
                if !pinned {
                    unpinned.extend(slot.into_iter().cloned());
                }
                again.push((g, inst, name, pinned));
            }
        }
        // Made again where the record now allows: the next fallback in its zone, else the
        // zone with the fewest members that has room. Not where nothing is left: that member
        // stays as it is, and the failure stands.
        let mut writes = Vec::new();
        let mut removals = Vec::new();
        let mut waiting = Vec::new();
        let mut given_up = Vec::new();
        let mut moved: Vec<(String, Moved)> = Vec::new();
        let leaving: BTreeSet<InstanceId> = again.iter().map(|(_, i, _, _)| i.id.clone()).collect();
        for (g, inst, from, pinned) in again {
            let group = &self.groups[g];
            let placement = group.spec.placement.as_ref().expect("placed above");
            let id = &group.spec.id;
            // One its slot pins is left to `NewMembers`: made in its zone, or waiting.
            if !pinned && !(0..placement.zones.len()).any(|z| placing.room(group, placement, z)) {
                continue;
            }
            // Made as its own ID again (one change per member: IDs need not follow), the zones
            // the members before it went to counted.
            let before = inst.id.number().checked_sub(1).map(InstanceId::new);
            let mut new = NewMembers::new(ws.dir(), self.profiles, &self.ctx.printer)
                .replacing(&leaving)
                .after(before.as_ref())
                .placing(&placing.record, now_ms)
                .unpinning(&unpinned)
                .keeping_slot(own_slot(inst));
            for (_, m) in moved.iter().filter(|(g, _)| g == id) {
                new.count(group, &m.to);
            }
            if new.add_all(group, &[inst.logical_id().map(str::to_string)])?.is_empty() {
                // Its zone has no room left: it waits, its files removed (its slot kept), so
                // that no apply tries it again before the zone's backoff has passed.
                waiting.extend(new.outcome().waiting);
                removals.extend(ws.dir().twins(&inst.id.to_string()));
                given_up.push(inst.id.to_string());
                continue;
            }
            let to = new.chosen().last().map(|(_, zone)| zone.clone()).unwrap_or_default();
            writes.extend(new.writes());
            moved.push((id.clone(), Moved { from, to, member: inst.id.to_string() }));
        }
        placing.note(Outcome { waiting, fresh: Vec::new() });
        placing.given_up.extend(given_up);
        let record = placing.record.clone();
        placing.stored = record.clone();
        for (id, m) in moved.iter().cloned() {
            self.ctx.printer.event(&format!("group {id}: making {} again in zone {}", m.member, m.to));
            placing.moved.entry(id).or_default().push(m);
        }
        drop(placing);
        ws.save(&record)?;
        if writes.is_empty() && removals.is_empty() {
            return Ok(None);
        }
        let written = writes.iter().flat_map(|w| crate::tfconfig::addresses(&w.doc)).collect();
        let mut removed = BTreeSet::new();
        for name in &removals {
            removed.extend(crate::tfconfig::addresses(&ws.dir().read_doc(name)?));
        }
        // A new slot's resources, made by this run and moved with their member: made again.
        for file in unpinned.iter().filter_map(|b| ws.dir().current(b)) {
            removed.extend(crate::tfconfig::addresses(&ws.dir().read_doc(&file)?));
        }
        let errors = errors.iter().filter(|d| d.is_error()).count();
        ws.write(ChangeSet { writes, removals })?;
        ws.promote()?;
        Ok(Some(Again { written, removed, only_capacity: answered >= errors }))
    }

    /// Records what the run's creates say of each placed group's zones (a member it made that
    /// is in the state clears its zone and fallback), and puts each group's placement in the
    /// report: its members per zone, the zones skipped, the members made again elsewhere.
    pub(super) fn record_placement(&self, ws: &mut Workspace<'_>, report: &mut Report) -> Result<()> {
        if self.groups.iter().all(|g| g.spec.placement.is_none()) {
            return Ok(());
        }
        let instances = ws.dir().instances(self.profiles);
        // The state says which members the run made are created: read only when it made any.
        let made_any = self
            .groups
            .iter()
            .zip(&report.groups)
            .any(|(group, g)| group.spec.placement.is_some() && g.made().next().is_some());
        // (Addresses and taint only, read without `terraform show`.)
        let made_vms: BTreeSet<String> = match made_any {
            true => ws.state_resources()?.into_iter().filter(|r| r.current && !r.tainted).map(|r| r.address).collect(),
            false => BTreeSet::new(),
        };
        let mut placing = self.placing.borrow_mut();
        let now_ms = placing.now_ms;
        for (group, g) in self.groups.iter().zip(report.groups.iter_mut()) {
            let Some(placement) = &group.spec.placement else { continue };
            let made: BTreeSet<String> = g.made().collect();
            let mut zones: BTreeMap<String, usize> = placement.zones.iter().map(|z| (z.name.clone(), 0)).collect();
            for inst in group.tagged(&instances) {
                let Some((zone, fallback)) = placed(&inst.tags, placement) else { continue };
                *zones.entry(placement.zones[zone].name.clone()).or_default() += 1;
                let created = inst.vm_address().is_some_and(|vm| made_vms.contains(&vm));
                if created && made.contains(&inst.id.to_string()) {
                    placing.record.succeeded(&group.spec.id, &placement.zones[zone].name, fallback);
                }
            }
            let unavailable = placing.record.unavailable(&group.spec.id, now_ms).map(Into::into).collect();
            let mut moved = placing.moved.get(&group.spec.id).cloned().unwrap_or_default();
            // Those moved to balance it: where their replacements went.
            for (_, member, from) in placing.rebalancing.iter().filter(|(g, _, _)| *g == group.spec.id) {
                let new = g.replaced.iter().find(|r| r.old == member.to_string()).map(|r| r.new.clone());
                let zone = |id: &str| instances.iter().find(|i| i.id.to_string() == id)?.tags.get(ZONE_TAG).cloned();
                if let Some(to) = new.as_deref().and_then(zone) {
                    moved.push(Moved { from: from.clone(), to, member: member.to_string() });
                }
            }
            // A member made and given up in the run (it waits for its zone) was never made.
            g.provisioned.retain(|id| !placing.given_up.contains(id));
            let given_up = |r: &Replaced| placing.given_up.contains(&r.new);
            let (gone, replaced): (Vec<Replaced>, _) = std::mem::take(&mut g.replaced).into_iter().partition(given_up);
            g.replaced = replaced;
            g.terminated.extend(gone.into_iter().map(|r| r.old));
            if let Some(h) = g.healing.as_mut() {
                let (gone, repaired): (Vec<Replaced>, _) =
                    std::mem::take(&mut h.repaired).into_iter().partition(given_up);
                h.repaired = repaired;
                g.terminated.extend(gone.into_iter().map(|r| r.old));
            }
            let waiting = placing.waiting.get(&group.spec.id).cloned().unwrap_or_default();
            g.placement = Some(PlacementReport { zones, unavailable, moved, waiting });
        }
        if placing.record == placing.stored {
            return Ok(());
        }
        let record = placing.record.clone();
        placing.stored = record.clone();
        drop(placing);
        ws.save(&record)
    }
}

/// Whether `base` names a dedicated file (a slot's).
fn is_dedicated(base: &str) -> bool {
    matches!(crate::names::classify(base), Some(crate::names::Kind::Dedicated { .. }))
}
