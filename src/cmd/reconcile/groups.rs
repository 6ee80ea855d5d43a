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
use crate::group::{is_current, Drain, GroupSpec, Heal, GROUP_TAG};
use crate::names::{InstanceId, Scope};
use crate::output::Printer;
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
    /// Its members among `instances`: those tagged with its ID.
    pub(super) fn tagged<'i>(&'i self, instances: &'i [Instance]) -> impl Iterator<Item = &'i Instance> + 'i {
        instances.iter().filter(|i| i.tags.get(GROUP_TAG) == Some(&self.spec.id))
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
pub(super) struct NewMembers<'a>(NewInstances<'a>);

impl<'a> NewMembers<'a> {
    pub(super) fn new(dir: &'a Directory, profiles: &'a Profiles, printer: &'a Printer) -> Self {
        NewMembers(NewInstances::new(dir, profiles, printer))
    }

    /// The same, in a change that also removes the instances `leaving` (their slots free).
    pub(super) fn replacing(self, leaving: &BTreeSet<InstanceId>) -> Self {
        NewMembers(self.0.replacing(leaving))
    }

    /// The same, issuing IDs after `last` (members another change adds first).
    pub(super) fn after(self, last: Option<&InstanceId>) -> Self {
        NewMembers(self.0.after(last))
    }

    /// Adds a member of `group` for each of `lids` (a pet for a logical ID, cattle for
    /// `None`); their IDs.
    pub(super) fn add_all(&mut self, group: &Group, lids: &[Option<String>]) -> Result<Vec<InstanceId>> {
        lids.iter().map(|lid| self.0.add(&group.members, lid.as_deref(), &BTreeMap::new())).collect()
    }

    /// The files the new members write, in order.
    pub(super) fn writes(self) -> Vec<FileWrite> {
        self.0.writes
    }
}

/// The logical ID of each of `ids` among `instances` (`None`: cattle, or not found): what a
/// replacement takes over.
pub(super) fn logical_ids(instances: &[Instance], ids: &[InstanceId]) -> Vec<Option<String>> {
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

    /// Moves the replacements of the members it repaired from `replaced` to `repaired`.
    pub(super) fn repaired(&mut self) {
        let Some(h) = &mut self.healing else { return };
        let (repaired, replaced) =
            std::mem::take(&mut self.replaced).into_iter().partition(|r| self.repairing.contains(&r.old));
        h.repaired = repaired;
        self.replaced = replaced;
    }
}
