//! Groups in `reconcile`: reading the group specs, telling a group's members (its tag, its
//! config hash, its rolling update's order), making new members ([`NewMembers`]: the one place
//! a reconcile makes one, whether a group grows, a rolling update replaces a member, or
//! `--max-destroy` plans the replacements), and the report of what was done to them. What each
//! group needs is decided in `decide.rs` (pure, over `converge::decide`); the order of the work
//! is `Run::converge`'s.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use crate::cli::{DrainArgs, HealArgs};
use crate::cmd::heal::Verdict;
use crate::cmd::instances::NewInstances;
use crate::cmd::load_groups;
use crate::context::Ctx;
use crate::converge::{Decision, Member};
use crate::directory::{Directory, Instance};
use crate::group::{is_current, Drain, GroupSpec, Heal, Placement, SlotZone, FALLBACK_TAG, GROUP_TAG, ZONE_TAG};
use crate::names::{InstanceId, Scope};
use crate::output::Printer;
use crate::placement_record::PlacementRecord;
use crate::profile::Profiles;
use crate::rollout_record::GoodSpec;
pub(super) use crate::rollout_record::RolloutReport;
use crate::spec::Spec;
use crate::workspace::FileWrite;

/// One group to converge.
#[derive(Clone)]
pub(super) struct Group {
    /// Its spec: the group spec's, or, while it is held back on its last good spec (a
    /// rollback, `rollback.rs`), that one's members with everything else the group spec's.
    pub(super) spec: GroupSpec,
    /// The config hash its group spec asks for: `spec`'s unless it is held back.
    pub(super) asked: String,
    /// Its members' instance spec.
    pub(super) members: Spec,
    /// What drains a member before it is destroyed: the spec's `Lifecycle`, the flags over it.
    pub(super) drain: Option<Drain>,
    /// How its members are checked and repaired: the spec's `Healing`, the flags over it.
    pub(super) heal: Option<Heal>,
}

impl Group {
    /// Whether `instance` is one of its members: tagged with its ID.
    pub(super) fn is_member(&self, instance: &Instance) -> bool {
        instance.tags.get(GROUP_TAG) == Some(&self.spec.id)
    }

    /// Its members among `instances`: those tagged with its ID.
    pub(super) fn tagged<'i>(&'i self, instances: &'i [Instance]) -> impl Iterator<Item = &'i Instance> + 'i {
        instances.iter().filter(move |i| self.is_member(i))
    }

    /// Whether a member's config hash is the spec's.
    pub(super) fn is_current(&self, member: &Instance) -> bool {
        is_current(&member.tags, &self.spec.config_hash)
    }

    /// Whether it is held back on its last good spec: its spec's rollout rolled back.
    pub(super) fn held_back(&self) -> bool {
        self.asked != self.spec.config_hash
    }

    /// The same group held back on its last good spec `good`: its members made of `good`'s
    /// `Instance` and `Flavor`. An error when they no longer give the hash recorded with
    /// them (a spec this version cannot read as the one that wrote it did).
    pub(super) fn back_on(&self, good: &GoodSpec, profiles: &Profiles) -> Result<Group> {
        let bad = |why: String| {
            crate::exit::invalid(format!("the last good spec of group `{}` cannot be used: {why}", self.spec.id))
                .hint(format!(
                    "put the spec you want back in the group spec's file and run `infrakit-tf reconcile --retry-rollout {}`",
                    self.spec.id
                ))
        };
        let problems =
            |p: Vec<crate::spec::Problem>| p.iter().map(|p| p.message.clone()).collect::<Vec<_>>().join("; ");
        let spec =
            self.spec.with_members(&(good.instance.clone(), good.flavor.clone())).map_err(|p| bad(problems(p)))?;
        if spec.config_hash != good.hash {
            return Err(bad(format!("its config hash is now {}, not {}", spec.config_hash, good.hash)).into());
        }
        let members =
            crate::spec::parse(&spec.instance_spec(None).to_string(), profiles).map_err(|p| bad(problems(p)))?;
        Ok(Group { spec, members, ..self.clone() })
    }

    /// Its last good spec as the rollout record keeps it: its spec's members.
    pub(super) fn good(&self) -> GoodSpec {
        let (instance, flavor) = self.spec.members_spec.clone();
        GoodSpec { hash: self.spec.config_hash.clone(), instance, flavor }
    }

    /// Whether its rolling update destroys the old member first: when a member has a dedicated
    /// resource (the replacement re-attaches the same slot: a volume is never attached to two
    /// machines), or is a pet (a logical ID names one member's resources, never two).
    /// Otherwise the replacement is created first (surge).
    pub(super) fn destroy_first(&self) -> bool {
        matches!(self.spec.allocation, crate::group::Allocation::LogicalIds(_))
            || self.members.resources.iter().any(|r| matches!(r.scope, Scope::Dedicated(_)))
    }
}

/// New members of groups for one change (`cmd::instances::NewInstances`: the next IDs, the
/// lowest free slots): the one place a reconcile makes a member, whether a group grows, its
/// rolling update replaces one, or `--max-destroy` plans what the replacements would destroy.
pub(super) struct NewMembers<'a> {
    new: NewInstances<'a>,
    dir: &'a Directory,
    profiles: &'a Profiles,
    /// The instances the change removes: not counted in their zone.
    leaving: BTreeSet<InstanceId>,
    /// Where members of groups with `Placement` may go (`placement.rs`), when this change
    /// places them: the record, and now (ms).
    placing: Option<(&'a PlacementRecord, u64)>,
    /// Each placed group's members per zone (by index): those staying, and those added.
    zones: BTreeMap<String, BTreeMap<usize, usize>>,
    /// The zone (its name) each placed member added went to.
    chosen: Vec<(InstanceId, String)>,
    /// Dedicated files (base names) that do not pin their slot to their zone: their resources
    /// were never made (`placement.rs`, a member made again elsewhere).
    unpinned: BTreeSet<String>,
    /// The members not added: their slot is pinned to a zone without room now. By group ID.
    waiting: Vec<(String, Waiting)>,
    /// The slot (its key) the next member takes: its own, made again.
    own_slot: Option<String>,
    /// The dedicated files (base names) of the new slots the members added made.
    fresh: Vec<String>,
}

/// What placing new members found, for the run (`Placing::note`): the members that wait for
/// their slot's zone, by group ID, and the new slots' dedicated files.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) waiting: Vec<(String, Waiting)>,
    pub(super) fresh: Vec<String>,
}

impl<'a> NewMembers<'a> {
    pub(super) fn new(dir: &'a Directory, profiles: &'a Profiles, printer: &'a Printer) -> Self {
        let new = NewInstances::new(dir, profiles, printer);
        let (leaving, zones, chosen) = (BTreeSet::new(), BTreeMap::new(), Vec::new());
        let (unpinned, waiting, fresh) = (BTreeSet::new(), Vec::new(), Vec::new());
        NewMembers {
            new,
            dir,
            profiles,
            leaving,
            placing: None,
            zones,
            chosen,
            unpinned,
            waiting,
            own_slot: None,
            fresh,
        }
    }

    /// The same, in a change that also removes the instances `leaving` (their slots free).
    pub(super) fn replacing(mut self, leaving: &BTreeSet<InstanceId>) -> Self {
        self.new = self.new.replacing(leaving);
        self.leaving = leaving.clone();
        self
    }

    /// The same, issuing IDs after `last` (members another change adds first).
    pub(super) fn after(mut self, last: Option<&InstanceId>) -> Self {
        self.new = self.new.after(last);
        self
    }

    /// The same, placing the members of groups with `Placement` in zones (`placement.rs`): as
    /// `record` says at `now_ms`.
    pub(super) fn placing(mut self, record: &'a PlacementRecord, now_ms: u64) -> Self {
        self.placing = Some((record, now_ms));
        self
    }

    /// The same, the next member taking slot `key` (its own, made again), not the lowest
    /// orphaned or free one.
    pub(super) fn keeping_slot(mut self, key: Option<String>) -> Self {
        self.keep_slot(key);
        self
    }

    /// The next member added takes slot `key` (its old member's, or its own made again).
    pub(super) fn keep_slot(&mut self, key: Option<String>) {
        self.own_slot = key;
    }

    /// The same, the dedicated files `bases` not pinning their slot to their zone.
    pub(super) fn unpinning(mut self, bases: &BTreeSet<String>) -> Self {
        self.unpinned = bases.clone();
        self
    }

    /// Adds a member of `group` for each of `lids` (a pet for a logical ID, cattle for
    /// `None`); the IDs of those added. With `Placement`, each in the zone with the fewest
    /// members that has room (`group::choose`), tagged with it; one whose slot is pinned to a
    /// zone (its dedicated file exists: `group::zone_of`) goes there, with the first choice
    /// the record allows, or waits (not added, its slot kept: [`NewMembers::waiting`]).
    pub(super) fn add_all(&mut self, group: &Group, lids: &[Option<String>]) -> Result<Vec<InstanceId>> {
        lids.iter().filter_map(|lid| self.add(group, lid.as_deref()).transpose()).collect()
    }

    /// Adds the replacements of `old` (members of `group`, as `instances` have them): a pet
    /// for each one's logical ID, cattle otherwise; placed, each on its old member's slot
    /// (`Run::replace` checks that its zone has room). Their IDs.
    pub(super) fn replace_all(
        &mut self,
        group: &Group,
        instances: &[Instance],
        old: &[InstanceId],
    ) -> Result<Vec<InstanceId>> {
        let lids = logical_ids(instances, old);
        let mut ids = Vec::new();
        for (old, lid) in old.iter().zip(&lids) {
            if group.spec.placement.is_some() {
                self.keep_slot(instances.iter().find(|i| &i.id == old).and_then(own_slot));
            }
            ids.extend(self.add_all(group, std::slice::from_ref(lid))?);
        }
        Ok(ids)
    }

    /// Counts one more member of `group` in zone `zone` (by name): one another change makes.
    pub(super) fn count(&mut self, group: &Group, zone: &str) {
        let Some(placement) = &group.spec.placement else { return };
        let Some(z) = placement.zones.iter().position(|p| p.name == zone) else { return };
        *self.counts(group, placement).entry(z).or_default() += 1;
    }

    /// `group`'s members per zone: those staying, and those added (read once).
    fn counts(&mut self, group: &Group, placement: &crate::group::Placement) -> &mut BTreeMap<usize, usize> {
        let (dir, profiles, leaving) = (self.dir, self.profiles, &self.leaving);
        self.zones.entry(group.spec.id.clone()).or_insert_with(|| {
            let mut counts = BTreeMap::new();
            for i in dir.instances(profiles).iter().filter(|i| !leaving.contains(&i.id) && group.is_member(i)) {
                if let Some((zone, _)) = crate::group::placed(&i.tags, placement) {
                    *counts.entry(zone).or_default() += 1;
                }
            }
            counts
        })
    }

    fn add(&mut self, group: &Group, lid: Option<&str>) -> Result<Option<InstanceId>> {
        let (Some(placement), Some((record, now_ms))) = (&group.spec.placement, self.placing) else {
            return self.new.add(&group.members, lid, &BTreeMap::new()).map(Some);
        };
        let own = self.own_slot.clone();
        if let Some(key) = &own {
            self.new.taking(Some(key))?;
        }
        let (slot, skipped) = self.slot(group, placement, lid, (record, now_ms))?;
        self.own_slot = None;
        let waits = match &slot {
            Slot::Waits(bases, _) => bases.clone(),
            _ => Vec::new(),
        };
        let added = self.add_placed(group, placement, lid, slot, (record, now_ms));
        if own.is_some() {
            self.new.taking(None)?; // that member's alone, made or waiting
        }
        // The orphans skipped are free again for the next member, but the one it waits for.
        self.new.release(&skipped)?;
        self.new.reserve(&waits)?;
        added
    }

    /// Adds the member of `group` for `slot` (see [`NewMembers::slot`]).
    fn add_placed(
        &mut self,
        group: &Group,
        placement: &Placement,
        lid: Option<&str>,
        slot: Slot,
        (record, now_ms): (&PlacementRecord, u64),
    ) -> Result<Option<InstanceId>> {
        let (zone, fallback) = match slot {
            Slot::Free => choice(group, placement, self.counts(group, placement), (record, now_ms)),
            // Its volume in no zone of the spec's: made as the spec says, in none.
            Slot::Unzoned => return self.new.add(&group.members, lid, &BTreeMap::new()).map(Some),
            Slot::In(zone, fallback) => (zone, fallback),
            Slot::Waits(bases, zone) => {
                let slot = bases.first().cloned().unwrap_or_default();
                let waiting = Waiting::new(slot, (group, placement), zone, (record, now_ms));
                self.waiting.push((group.spec.id.clone(), waiting));
                return Ok(None);
            }
        };
        let slot_files = self.new.next_slot(&group.members, lid)?;
        self.fresh.extend(slot_files.into_iter().filter(|b| self.dir.current(b).is_none()));
        *self.counts(group, placement).entry(zone).or_default() += 1;
        let spec = crate::group::place(&group.members, placement, zone, fallback);
        let mut tags = BTreeMap::from([(ZONE_TAG.to_string(), placement.zones[zone].name.clone())]);
        tags.extend(fallback.map(|f| (FALLBACK_TAG.to_string(), f.to_string())));
        let id = self.new.add(&spec, lid, &tags)?;
        self.chosen.push((id.clone(), placement.zones[zone].name.clone()));
        Ok(Some(id))
    }

    /// The slot of the next member of `group` (a pet for `lid`), for placement: the lowest
    /// orphaned slot whose zone (its existing dedicated file's, `slot_zone`, unless that file
    /// is [`NewMembers::unpinning`]'s) has a choice the record allows, skipping those whose
    /// zone has none; else a new slot, or none ([`Slot::Free`]); but when an orphan was skipped
    /// and no other orphan is left, the first skipped: its member waits (a new slot would leave
    /// its volume without a machine for good). A pet's slot is its own.
    /// With it, the orphans skipped, kept from the choice ([`NewInstances::reserve`]) until
    /// the member is added.
    fn slot(
        &mut self,
        group: &Group,
        placement: &Placement,
        lid: Option<&str>,
        (record, now_ms): (&PlacementRecord, u64),
    ) -> Result<(Slot, Vec<String>)> {
        // A pet's slot, or a member's own, is the one: never another.
        let fixed = lid.is_some() || self.own_slot.is_some();
        let mut skipped: Vec<(Vec<String>, Option<usize>)> = Vec::new();
        let chosen = loop {
            let bases = self.new.next_slot(&group.members, lid)?;
            let Some((zone, _)) = slot_zone(self.dir, &bases, &self.unpinned, (placement, &group.members))? else {
                break None;
            };
            let first = match zone {
                SlotZone::Unzoned => break Some(Slot::Unzoned),
                // The zone among its candidates with a choice the record allows, the fewest
                // members first.
                SlotZone::In(zones) => {
                    let counts = self.counts(group, placement).clone();
                    let id = &group.spec.id;
                    let available = |z: usize, f: Option<usize>| {
                        zones.contains(&z) && record.available(id, &placement.zones[z].name, f, now_ms)
                    };
                    if let Some((zone, fallback)) =
                        crate::group::choose(placement.zones.len(), placement.fallback.len(), &counts, available)
                    {
                        break Some(Slot::In(zone, fallback));
                    }
                    zones.first().copied()
                }
                SlotZone::Unlisted => None,
            };
            if fixed {
                skipped.push((bases, first));
                break None;
            }
            // Taken from the choice (an orphan: attached to none) while the next is looked for.
            self.new.reserve(&bases)?;
            skipped.push((bases, first));
        };
        let reserved: Vec<String> =
            if fixed { Vec::new() } else { skipped.iter().flat_map(|(b, _)| b.clone()).collect() };
        let slot = match (chosen, skipped.into_iter().next()) {
            (Some(slot), _) => slot,
            (None, Some((bases, zone))) => Slot::Waits(bases, zone),
            (None, None) => Slot::Free,
        };
        Ok((slot, reserved))
    }

    /// What placing the members added found: those that wait, the new slots.
    pub(super) fn outcome(&self) -> Outcome {
        Outcome { waiting: self.waiting.clone(), fresh: self.fresh.clone() }
    }

    /// The placed members added, each with its zone.
    pub(super) fn chosen(&self) -> &[(InstanceId, String)] {
        &self.chosen
    }

    /// The files the new members write, in order.
    pub(super) fn writes(self) -> Vec<FileWrite> {
        self.new.writes
    }
}

/// Where a placed member's slot puts it ([`NewMembers::slot`]).
enum Slot {
    /// A new slot, or none: where the group has room.
    Free,
    /// An orphaned slot whose file carries no zone's properties: in no zone.
    Unzoned,
    /// An orphaned slot pinned to a zone (by index) with room: there, with this fallback.
    In(usize, Option<usize>),
    /// An orphaned slot (its dedicated files) pinned to a zone (by index; `None`: one the spec
    /// no longer lists) without room: the member waits.
    Waits(Vec<String>, Option<usize>),
}

/// The zone a slot is pinned to, with the file that pins it: as its first existing dedicated
/// file (of `bases`, not among `unpinned`) says (`group::zone_of`: a volume lives in one
/// zone). `None` when no file pins the slot.
pub(super) fn slot_zone<'b>(
    dir: &Directory,
    bases: impl IntoIterator<Item = &'b String>,
    unpinned: &BTreeSet<String>,
    (placement, members): (&Placement, &Spec),
) -> Result<Option<(SlotZone, String)>> {
    for base in bases.into_iter().filter(|b| !unpinned.contains(*b)) {
        let dedicated = matches!(crate::names::classify(base), Some(crate::names::Kind::Dedicated { .. }));
        let Some(file) = dedicated.then(|| dir.current(base)).flatten() else { continue };
        return Ok(Some((crate::group::zone_of(&dir.read_doc(&file)?, placement, members), base.clone())));
    }
    Ok(None)
}

/// Where a new member of `group` goes: the zone with the fewest members (`counts`) that has
/// a (zone, fallback) the placement record allows now; when none has, the one that is skipped
/// for the shortest time (it is tried: a create that fails there says why).
fn choice(
    group: &Group,
    placement: &crate::group::Placement,
    counts: &BTreeMap<usize, usize>,
    (record, now_ms): (&PlacementRecord, u64),
) -> (usize, Option<usize>) {
    let id = &group.spec.id;
    let name = |z: usize| placement.zones[z].name.as_str();
    let available = |z: usize, f: Option<usize>| record.available(id, name(z), f, now_ms);
    crate::group::choose(placement.zones.len(), placement.fallback.len(), counts, available).unwrap_or_else(|| {
        let soonest = |z: usize, f: Option<usize>| {
            record.unavailable(id, now_ms).find(|u| u.zone == name(z) && u.fallback == f).map_or(0, |u| u.until_ms)
        };
        let all = (0..placement.zones.len())
            .flat_map(|z| std::iter::once(None).chain((0..placement.fallback.len()).map(Some)).map(move |f| (z, f)));
        all.min_by_key(|(z, f)| (soonest(*z, *f), counts.get(z).copied().unwrap_or(0), *z)).unwrap_or((0, None))
    })
}

/// The logical ID of each of `ids` among `instances` (`None`: cattle, or not found): what a
/// replacement takes over.
fn logical_ids(instances: &[Instance], ids: &[InstanceId]) -> Vec<Option<String>> {
    ids.iter()
        .map(|id| instances.iter().find(|i| &i.id == id).and_then(|i| i.logical_id().map(str::to_string)))
        .collect()
}

/// The group specs to converge (see `cmd::load_groups`): `given`, else the configuration's;
/// each with its drain and healing, the flags overriding its spec's.
pub(super) fn load(
    ctx: &Ctx,
    given: &[PathBuf],
    profiles: &Profiles,
    drain: &DrainArgs,
    heal: &HealArgs,
) -> Result<Vec<Group>> {
    let groups = load_groups(ctx, given, &ctx.dir, profiles)?;
    let drain_flags = crate::cmd::drain::flags(drain);
    let heal_flags = crate::cmd::heal::flags(heal);
    Ok(groups
        .into_iter()
        .map(|(spec, members)| {
            let drain = Drain::resolve(spec.lifecycle.as_ref(), &drain_flags);
            let heal = Heal::resolve(spec.healing.as_ref(), &heal_flags);
            Group { asked: spec.config_hash.clone(), spec, members, drain, heal }
        })
        .collect())
}

/// What converging one group did (or, with `--check`, would do).
#[derive(Debug, Serialize)]
pub(super) struct GroupReport {
    #[serde(rename = "ID")]
    pub(super) id: String,
    /// The size, or the number of logical IDs.
    pub(super) desired: usize,
    /// Members after the run.
    pub(super) members: usize,
    /// Members whose config hash is the spec's, after the run.
    pub(super) current: usize,
    /// Members still to be replaced after the run.
    pub(super) outdated: usize,
    pub(super) provisioned: Vec<String>,
    pub(super) terminated: Vec<String>,
    pub(super) replaced: Vec<Replaced>,
    /// Members this run was to destroy whose drain failed: kept (`OnDrainFailure: abandon`).
    pub(super) abandoned: Vec<String>,
    /// Whether the group is not converged: something is left to do (with `--check`: to do).
    pub(super) pending: bool,
    /// Why the rolling update stopped, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stopped: Option<String>,
    /// What was left to do when the run started, for messages (`1 to add, 3 outdated`).
    #[serde(skip)]
    pub(super) todo: String,
    /// Its health checks and repairs, when it has healing (`Healing`, `--heal-cmd`).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(super) healing: Option<HealReport>,
    /// The members this run repairs (their replacements are `healing.repaired`, not `replaced`).
    #[serde(skip)]
    pub(super) repairing: BTreeSet<String>,
    /// Where its rollout stands, when its spec changed (`rollout_record`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rollout: Option<RolloutReport>,
    /// Whether this run rolled it back, or went on rolling it back (exit 20).
    #[serde(skip)]
    pub(super) rolled_back: bool,
    /// Its zones, when it has `Placement` (`placement.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) placement: Option<PlacementReport>,
}

/// A placed group's zones in the report: its members per zone (by `Name`), the zones (and
/// fallbacks) skipped for want of capacity and until when, the members made again elsewhere.
#[derive(Debug, Serialize)]
pub(super) struct PlacementReport {
    pub(super) zones: BTreeMap<String, usize>,
    pub(super) unavailable: Vec<UnavailableReport>,
    pub(super) moved: Vec<Moved>,
    /// The members that wait for the zone their slot is pinned to.
    pub(super) waiting: Vec<Waiting>,
}

/// A member made again in another zone (or with another fallback) than it was to be.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Moved {
    pub(super) from: String,
    pub(super) to: String,
    pub(super) member: String,
}

/// A member not made because the zone its slot is pinned to (its volume's) has no room: it
/// waits, its slot kept, until the zone's backoff has passed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Waiting {
    /// Its slot: the dedicated file's base name (the first, with several scopes).
    pub(super) slot: String,
    /// Its zone's `Name`; `unlisted` for a zone the spec no longer lists.
    pub(super) zone: String,
    /// When a choice in the zone may be tried again (`None`: an unlisted zone).
    pub(super) until: Option<String>,
}

/// A waiting member's zone when its slot's file is in a zone `Placement.Zones` no longer lists.
pub(super) const UNLISTED: &str = "unlisted";

impl Waiting {
    /// Slot `slot` of `group` waits for its zone `zone` (by index; `None`: unlisted), as
    /// `record` skips it at `now_ms`.
    pub(super) fn new(
        slot: String,
        (group, placement): (&Group, &Placement),
        zone: Option<usize>,
        (record, now_ms): (&PlacementRecord, u64),
    ) -> Waiting {
        let Some(zone) = zone else { return Waiting { slot, zone: UNLISTED.into(), until: None } };
        let name = &placement.zones[zone].name;
        let skipped = record.unavailable(&group.spec.id, now_ms).filter(|u| &u.zone == name);
        let until = skipped.map(|u| u.until_ms).min().unwrap_or(now_ms);
        Waiting { slot, zone: name.clone(), until: Some(crate::text::utc_ms(until)) }
    }

    /// In words: `slot web_dedicated_1 waits for zone a (no room until T)`.
    pub(super) fn words(&self) -> String {
        match &self.until {
            Some(until) => format!("slot {} waits for zone {} (no room until {until})", self.slot, self.zone),
            None => format!(
                "slot {} waits: its dedicated file is in a zone Placement.Zones no longer lists (list it again)",
                self.slot
            ),
        }
    }
}

/// A (zone, fallback) skipped, in the report.
#[derive(Debug, Serialize)]
pub(super) struct UnavailableReport {
    pub(super) zone: String,
    pub(super) fallback: Option<usize>,
    pub(super) until: String,
}

impl From<&crate::placement_record::Unavailable> for UnavailableReport {
    fn from(u: &crate::placement_record::Unavailable) -> Self {
        UnavailableReport { zone: u.zone.clone(), fallback: u.fallback, until: crate::text::utc_ms(u.until_ms) }
    }
}

impl PlacementReport {
    /// In words, for the cron line and the table: `zones a=2 b=2 c=2; a unavailable until T`.
    pub(super) fn words(&self) -> String {
        let counts: Vec<String> = self.zones.iter().map(|(z, n)| format!("{z}={n}")).collect();
        let mut out = format!("zones {}", counts.join(" "));
        for u in &self.unavailable {
            let fallback = u.fallback.map(|f| format!(" (fallback {f})")).unwrap_or_default();
            out.push_str(&format!("; {}{fallback} unavailable until {}", u.zone, u.until));
        }
        for m in &self.moved {
            out.push_str(&format!("; {} made in {} (not {})", m.member, m.to, m.from));
        }
        for w in &self.waiting {
            out.push_str(&format!("; {}", w.words()));
        }
        out
    }
}

/// A healed group's part of the report.
#[derive(Debug, Default, Serialize)]
pub(super) struct HealReport {
    /// Its unhealthy members, as the run found them.
    pub(super) unhealthy: Vec<String>,
    /// Unhealthy members replaced in their slot.
    pub(super) repaired: Vec<Replaced>,
    /// Why no member was repaired, when the circuit breaker halted the repairs.
    pub(super) repair_halted: Option<String>,
}

#[derive(Debug, Serialize)]
pub(super) struct Replaced {
    pub(super) old: String,
    pub(super) new: String,
}

impl GroupReport {
    /// The report before anything is done: what `decision` asks of `members`.
    pub(super) fn new(group: &Group, members: &[Member], decision: &Decision) -> Self {
        GroupReport {
            id: group.spec.id.clone(),
            desired: group.spec.desired(),
            members: members.len(),
            current: members.iter().filter(|m| m.current).count(),
            outdated: members.iter().filter(|m| !m.current).count(),
            provisioned: Vec::new(),
            terminated: Vec::new(),
            replaced: Vec::new(),
            abandoned: Vec::new(),
            pending: !decision.is_empty(),
            stopped: None,
            todo: Self::what(decision),
            healing: None,
            repairing: BTreeSet::new(),
            rollout: None,
            rolled_back: false,
            placement: None,
        }
    }

    /// The member counts as `instances` have them (after the run's changes).
    pub(super) fn count_members(&mut self, group: &Group, instances: &[Instance]) {
        self.members = group.tagged(instances).count();
        self.current = group.tagged(instances).filter(|i| group.is_current(i)).count();
        self.outdated = self.members - self.current;
        let repairs_left =
            self.healing.as_ref().is_some_and(|h| h.repair_halted.is_none() && h.unhealthy.len() > h.repaired.len());
        self.pending = self.members != self.desired || self.outdated > 0 || self.stopped.is_some() || repairs_left;
    }

    /// What is left to do, for messages: `2 to add, 1 to terminate, 3 outdated`.
    pub(super) fn what(decision: &Decision) -> String {
        let mut parts = Vec::new();
        if !decision.add.is_empty() {
            parts.push(format!("{} to add", decision.add.len()));
        }
        if !decision.terminate.is_empty() {
            parts.push(format!("{} to terminate", decision.terminate.len()));
        }
        if !decision.replace.is_empty() {
            parts.push(format!("{} outdated", decision.replace.len()));
        }
        if parts.is_empty() {
            "converged".into()
        } else {
            parts.join(", ")
        }
    }

    /// One line for logs: `group web: 3/3 members, 3 current; +1 -0 replaced 1`.
    pub(super) fn line(&self) -> String {
        let mut line = format!(
            "group {}: {}/{} members, {} current, {} outdated; provisioned={} terminated={} replaced={} pending={}",
            self.id,
            self.members,
            self.desired,
            self.current,
            self.outdated,
            ids(&self.provisioned),
            ids(&self.terminated),
            if self.replaced.is_empty() {
                "0".to_string()
            } else {
                self.replaced.iter().map(|r| format!("{}->{}", r.old, r.new)).collect::<Vec<_>>().join(" ")
            },
            self.pending
        );
        if !self.abandoned.is_empty() {
            line.push_str(&format!(" abandoned={}", ids(&self.abandoned)));
        }
        if let Some(h) = &self.healing {
            line.push_str(&format!(" unhealthy={}", ids(&h.unhealthy)));
            if !h.repaired.is_empty() {
                let repaired: Vec<String> = h.repaired.iter().map(|r| format!("{}->{}", r.old, r.new)).collect();
                line.push_str(&format!(" repaired={}", repaired.join(" ")));
            }
            if let Some(why) = &h.repair_halted {
                line.push_str(&format!(" repair_halted: {why}"));
            }
        }
        if let Some(r) = &self.rollout {
            line.push_str(&format!(" {}", r.words()));
        }
        if let Some(p) = &self.placement {
            line.push_str(&format!(" {}", p.words()));
        }
        if let Some(why) = &self.stopped {
            line.push_str(&format!(" stopped: {why}"));
        }
        line
    }
}

fn ids(list: &[String]) -> String {
    if list.is_empty() {
        "0".to_string()
    } else {
        format!("{} ({})", list.len(), list.join(" "))
    }
}

impl GroupReport {
    /// Takes in what the health record says of the group (`cmd::heal::Verdict`): its
    /// unhealthy members, the repairs to come (added to what is left to do), the breaker.
    pub(super) fn heal(&mut self, verdict: &Verdict) {
        self.repairing = verdict.repair.iter().map(ToString::to_string).collect();
        if !verdict.repair.is_empty() {
            self.pending = true;
            let repairs = format!("{} to repair", verdict.repair.len());
            self.todo = if self.todo == "converged" { repairs } else { format!("{}, {repairs}", self.todo) };
        }
        self.healing = Some(HealReport {
            unhealthy: verdict.unhealthy.iter().map(ToString::to_string).collect(),
            repaired: Vec::new(),
            repair_halted: verdict.halted.clone(),
        });
    }

    /// The members this run made: provisioned, replacements, repairs.
    pub(super) fn made(&self) -> impl Iterator<Item = String> + '_ {
        let repaired = self.healing.iter().flat_map(|h| h.repaired.iter().map(|r| r.new.clone()));
        self.provisioned.iter().cloned().chain(self.replaced.iter().map(|r| r.new.clone())).chain(repaired)
    }

    /// Moves the replacements of the members it repaired from `replaced` to `repaired`.
    pub(super) fn repaired(&mut self) {
        let Some(h) = &mut self.healing else { return };
        let (repaired, replaced) =
            std::mem::take(&mut self.replaced).into_iter().partition(|r| self.repairing.contains(&r.old));
        h.repaired = repaired;
        self.replaced = replaced;
    }
}

/// The slot (its key) `inst` is attached to, when it is cattle with a dedicated resource.
pub(super) fn own_slot(inst: &Instance) -> Option<String> {
    if inst.logical_id().is_some() {
        return None;
    }
    inst.attachments.iter().find_map(|b| match crate::names::classify(b) {
        Some(crate::names::Kind::Dedicated { key, .. }) => Some(key),
        _ => None,
    })
}
