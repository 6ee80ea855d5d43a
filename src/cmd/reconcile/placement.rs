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
//! (zone, fallback) clears it.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde::Serialize;

use super::groups::{NewMembers, PlacementReport};
use super::report::Report;
use super::Run;
use crate::group::placed;
use crate::names::InstanceId;
use crate::placement_record::PlacementRecord;
use crate::terraform::Apply;
use crate::tfoutput::Changes;
use crate::workspace::{ChangeSet, Workspace};

/// What a run knows of placement: the record, and when the run looked at it.
#[derive(Debug, Default)]
pub(super) struct Placing {
    pub(super) record: PlacementRecord,
    pub(super) now_ms: u64,
    /// The members made again elsewhere after a capacity error, by group ID.
    moved: BTreeMap<String, Vec<Moved>>,
}

/// A member made again in another zone (or with another fallback) than it was to be.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Moved {
    pub(super) from: String,
    pub(super) to: String,
    pub(super) member: String,
}

impl Placing {
    /// The record and the time, when any of `placed` (whether each group has `Placement`) does;
    /// nothing read otherwise.
    pub(super) fn read(ws: &mut Workspace<'_>, placed: bool) -> Result<Placing> {
        if !placed {
            return Ok(Placing::default());
        }
        Ok(Placing { record: ws.placement_record(), now_ms: ws.now_ms()?, moved: BTreeMap::new() })
    }
}

impl Run<'_> {
    /// After an apply failed (`failure`): places again each member of a group with `Placement`
    /// whose create failed for want of capacity, and applies again, as often as that moves a
    /// member (at most once per zone and fallback of the groups). The changes of the apply that
    /// succeeded; `failure` (or the last apply's) when no member could be placed again.
    pub(super) fn answer_capacity(&self, ws: &mut Workspace<'_>, failure: anyhow::Error) -> Result<Changes> {
        let tries: usize = self
            .groups
            .iter()
            .filter_map(|g| g.spec.placement.as_ref())
            .map(|p| p.zones.len() * (p.fallback.len() + 1))
            .sum();
        let mut failure = failure;
        for _ in 0..tries {
            if !self.place_again(ws)? {
                break;
            }
            match ws.apply(Apply::Configuration { refresh: false }) {
                Ok(changes) => return Ok(changes),
                Err(e) => failure = e,
            }
        }
        Err(failure)
    }

    /// The members whose create the last apply's errors say failed for want of capacity: their
    /// (zone, fallback) skipped for its backoff, each made again (same ID, same logical ID)
    /// with its next choice, the record written. Whether any was.
    fn place_again(&self, ws: &mut Workspace<'_>) -> Result<bool> {
        let errors = ws.terraform()?.last_errors();
        let instances = ws.dir().instances(self.profiles);
        let mut placing = self.placing.borrow_mut();
        let now_ms = placing.now_ms;
        let mut again: Vec<(usize, &crate::directory::Instance, String)> = Vec::new();
        for (g, group) in self.groups.iter().enumerate() {
            let Some(placement) = &group.spec.placement else { continue };
            for inst in group.tagged(&instances) {
                let Some((t, n)) = &inst.vm else { continue };
                let vm = format!("{t}.{n}");
                let refused = errors.iter().any(|d| {
                    d.address.as_deref() == Some(vm.as_str())
                        && placement.is_capacity_error(&format!("{}\n{}", d.summary, d.detail))
                });
                let Some((zone, fallback)) = placed(&inst.tags, placement).filter(|_| refused) else { continue };
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
                again.push((g, inst, name));
            }
        }
        // Made again where the record now allows: the next fallback in its zone, else the
        // zone with the fewest members that has room. Not where nothing is left: that member
        // stays as it is, and the failure stands.
        let mut writes = Vec::new();
        let mut moved: Vec<(String, Moved)> = Vec::new();
        let leaving: BTreeSet<InstanceId> = again.iter().map(|(_, i, _)| i.id.clone()).collect();
        for (g, inst, from) in again {
            let group = &self.groups[g];
            let placement = group.spec.placement.as_ref().expect("placed above");
            let id = &group.spec.id;
            let open = placement.zones.iter().any(|z| {
                std::iter::once(None)
                    .chain((0..placement.fallback.len()).map(Some))
                    .any(|f| placing.record.available(id, &z.name, f, now_ms))
            });
            if !open {
                continue;
            }
            // Made as its own ID again (one change per member: IDs need not follow), the zones
            // the members before it went to counted.
            let before = inst.id.number().checked_sub(1).map(InstanceId::new);
            let mut new = NewMembers::new(ws.dir(), self.profiles, &self.ctx.printer)
                .replacing(&leaving)
                .after(before.as_ref())
                .placing(&placing.record, now_ms);
            for (_, m) in moved.iter().filter(|(g, _)| g == id) {
                new.count(group, &m.to);
            }
            new.add_all(group, &[inst.logical_id().map(str::to_string)])?;
            let to = new.chosen().last().map(|(_, zone)| zone.clone()).unwrap_or_default();
            writes.extend(new.writes());
            moved.push((id.clone(), Moved { from, to, member: inst.id.to_string() }));
        }
        let record = placing.record.clone();
        for (id, m) in moved.iter().cloned() {
            self.ctx.printer.event(&format!("group {id}: making {} again in zone {}", m.member, m.to));
            placing.moved.entry(id).or_default().push(m);
        }
        drop(placing);
        ws.write_placement_record(&record)?;
        if writes.is_empty() {
            return Ok(false);
        }
        ws.write(ChangeSet::writing(writes))?;
        ws.promote()?;
        Ok(true)
    }

    /// Records what the run's creates say of each placed group's zones (a member it made that
    /// is in the state clears its zone and fallback), and puts each group's placement in the
    /// report: its members per zone, the zones skipped, the members made again elsewhere.
    pub(super) fn record_placement(&self, ws: &mut Workspace<'_>, report: &mut Report) -> Result<()> {
        if self.groups.iter().all(|g| g.spec.placement.is_none()) {
            return Ok(());
        }
        let instances = ws.dir().instances(self.profiles);
        let state = ws.state()?;
        let mut placing = self.placing.borrow_mut();
        let now_ms = placing.now_ms;
        for (group, g) in self.groups.iter().zip(report.groups.iter_mut()) {
            let Some(placement) = &group.spec.placement else { continue };
            let made: BTreeSet<String> = g.made().collect();
            let mut zones: BTreeMap<String, usize> = placement.zones.iter().map(|z| (z.name.clone(), 0)).collect();
            for inst in group.tagged(&instances) {
                let Some((zone, fallback)) = placed(&inst.tags, placement) else { continue };
                *zones.entry(placement.zones[zone].name.clone()).or_default() += 1;
                let created = inst.vm.as_ref().is_some_and(|(t, n)| state.contains_key(&format!("{t}.{n}")));
                if created && made.contains(&inst.id.to_string()) {
                    placing.record.succeeded(&group.spec.id, &placement.zones[zone].name, fallback);
                }
            }
            let unavailable = placing.record.unavailable(&group.spec.id, now_ms).map(Into::into).collect();
            let moved = placing.moved.get(&group.spec.id).cloned().unwrap_or_default();
            g.placement = Some(PlacementReport { zones, unavailable, moved });
        }
        let record = placing.record.clone();
        drop(placing);
        ws.write_placement_record(&record)
    }
}
