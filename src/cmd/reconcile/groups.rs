//! Groups in `reconcile`: reading the group specs, finding each group's members, and the
//! report of what was done to them. The decision itself is `converge::decide` (pure); the
//! order of the work is `reconcile::converge`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use crate::cli::{DrainArgs, HealArgs};
use crate::cmd::load_groups;
use crate::context::Ctx;
use crate::converge::{self, Decision, Member};
use crate::directory::Instance;
use crate::group::{is_current, Drain, GroupSpec, Heal, GROUP_TAG};
use crate::names::{InstanceId, Scope};
use crate::profile::Profiles;
use crate::spec::Spec;
use crate::terraform::Plan;
use crate::tfoutput::Action;

/// One group to converge.
pub(super) struct Group {
    pub(super) spec: GroupSpec,
    /// Its members' instance spec.
    pub(super) members: Spec,
    /// What drains a member before it is destroyed: the spec's `Lifecycle`, the flags over it.
    pub(super) drain: Option<Drain>,
    /// How its members are checked and repaired: the spec's `Healing`, the flags over it.
    #[expect(dead_code, reason = "read by the health checks, the next step")]
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

    /// Whether its rolling update destroys the old member first: when a member has a dedicated
    /// resource (the replacement re-attaches the same slot: a volume is never attached to two
    /// machines), or is a pet (a logical ID names one member's resources, never two).
    /// Otherwise the replacement is created first (surge).
    pub(super) fn destroy_first(&self) -> bool {
        matches!(self.spec.allocation, crate::group::Allocation::LogicalIds(_))
            || self.members.resources.iter().any(|r| matches!(r.scope, Scope::Dedicated(_)))
    }
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
            Group { spec, members, drain, heal }
        })
        .collect())
}

/// The members of `group` among `instances`, less those in `leaving` (pruned): tagged with the
/// group's ID. A member is current when its config hash is the spec's (`bootstrap`, what
/// `import` gives the first manager, never is), and created unless the plan creates or
/// replaces its VM (a queued or pending member, or a tainted one).
pub(super) fn members(
    group: &Group,
    instances: &[Instance],
    leaving: &BTreeSet<InstanceId>,
    plan: &Plan,
) -> Vec<Member> {
    let creating: BTreeSet<&str> = plan
        .changes
        .iter()
        .filter(|c| matches!(c.action, Action::Create | Action::Replace))
        .map(|c| c.address.as_str())
        .collect();
    group
        .tagged(instances)
        .filter(|i| !leaving.contains(&i.id))
        .map(|i| Member {
            id: i.id.clone(),
            logical_id: i.logical_id().map(str::to_string),
            current: group.is_current(i),
            created: i.vm.as_ref().is_some_and(|(t, n)| !creating.contains(format!("{t}.{n}").as_str())),
        })
        .collect()
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
        }
    }

    /// The member counts as `instances` have them (after the run's changes).
    pub(super) fn settle(&mut self, group: &Group, instances: &[Instance]) {
        self.members = group.tagged(instances).count();
        self.current = group.tagged(instances).filter(|i| group.is_current(i)).count();
        self.outdated = self.members - self.current;
        self.pending = self.members != self.desired || self.outdated > 0 || self.stopped.is_some();
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

/// Decides every group, from the members left after pruning.
pub(super) fn decide_all(
    groups: &[Group],
    instances: &[Instance],
    leaving: &BTreeSet<InstanceId>,
    plan: &Plan,
) -> Vec<(Vec<Member>, Decision)> {
    groups
        .iter()
        .map(|g| {
            let members = members(g, instances, leaving, plan);
            let decision = converge::decide(&g.spec.allocation, &members);
            (members, decision)
        })
        .collect()
}
