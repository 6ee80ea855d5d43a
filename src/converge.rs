//! What converging one group takes, decided from its allocation and its members: which
//! members to add, which to terminate, which to replace by a rolling update. Pure: the
//! caller reads the members and carries the decision out.
//!
//! - Size N: too few members → add the missing ones; too many → terminate the surplus,
//!   outdated members first, then unhealthy ones (their health checks failed, see `cmd::heal`),
//!   then those not created (pending, tainted), then the lowest IDs (InfraKit's order, with
//!   unhealthy added).
//! - LogicalIDs: each logical ID has exactly one member. A missing one is added as that pet;
//!   of several, the current, healthy and created one with the lowest ID stays and the others are
//!   terminated; members whose logical ID left the list (or that have none) are terminated.
//! - Every member that stays and is not current is replaced, in ID order.

use std::collections::{BTreeMap, BTreeSet};

use crate::group::Allocation;
use crate::names::InstanceId;

/// A member of a group, as the directory and the state describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: InstanceId,
    pub logical_id: Option<String>,
    /// Its config hash is the spec's.
    pub current: bool,
    /// In the state and not tainted.
    pub created: bool,
    /// Its health checks failed `FailuresBeforeRepair` runs in a row (the health record).
    pub unhealthy: bool,
}

/// What to do to one group.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Decision {
    /// New members: a logical ID each for pets, `None` for cattle.
    pub add: Vec<Option<String>>,
    /// Members to terminate, in the order chosen.
    pub terminate: Vec<InstanceId>,
    /// Members to replace by a rolling update, in ID order.
    pub replace: Vec<InstanceId>,
}

impl Decision {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.terminate.is_empty() && self.replace.is_empty()
    }
}

/// Decides how to converge `members` (in any order) to `allocation`.
pub fn decide(allocation: &Allocation, members: &[Member]) -> Decision {
    // The order members are given up in: outdated, then unhealthy, then not created, then
    // lowest ID.
    let mut by_worth: Vec<&Member> = members.iter().collect();
    by_worth.sort_by_key(|m| (m.current, !m.unhealthy, m.created, m.id.clone()));
    let mut decision = Decision::default();
    let staying: Vec<&Member> = match allocation {
        Allocation::Size(n) => {
            let n = usize::try_from(*n).unwrap_or(usize::MAX);
            let surplus = members.len().saturating_sub(n);
            decision.terminate = by_worth[..surplus].iter().map(|m| m.id.clone()).collect();
            decision.add = vec![None; n.saturating_sub(members.len())];
            by_worth[surplus..].to_vec()
        }
        Allocation::LogicalIds(ids) => {
            let mut staying = Vec::new();
            for lid in ids {
                // The best member for this logical ID stays: current, healthy, created, lowest ID.
                let best = members
                    .iter()
                    .filter(|m| m.logical_id.as_deref() == Some(lid.as_str()))
                    .min_by_key(|m| (!m.current, m.unhealthy, !m.created, m.id.clone()));
                match best {
                    None => decision.add.push(Some(lid.clone())),
                    Some(best) => staying.push(best),
                }
            }
            let kept: BTreeSet<&InstanceId> = staying.iter().map(|m| &m.id).collect();
            decision.terminate = by_worth.iter().filter(|m| !kept.contains(&m.id)).map(|m| m.id.clone()).collect();
            staying
        }
    };
    let mut replace: Vec<InstanceId> = staying.iter().filter(|m| !m.current).map(|m| m.id.clone()).collect();
    replace.sort();
    decision.replace = replace;
    decision
}

/// The `surplus` members to give up, for a group spread across zones (`zone`: a member's zone
/// by index, `None` for one in none): as [`decide`] gives them up (outdated, unhealthy, not
/// created first), then, among the current, healthy, created ones, one at a time from the zone
/// with the most members left (one in no zone first, the zone listed first among equals), its
/// lowest ID: the zones stay balanced, as an Auto Scaling group's termination keeps them.
pub fn surplus_by_zone(members: &[Member], surplus: usize, zone: impl Fn(&Member) -> Option<usize>) -> Vec<InstanceId> {
    let mut by_worth: Vec<&Member> = members.iter().collect();
    by_worth.sort_by_key(|m| (m.current, !m.unhealthy, m.created, m.id.clone()));
    let plain = |m: &Member| m.current && !m.unhealthy && m.created;
    let mut out: Vec<InstanceId> = by_worth.iter().filter(|m| !plain(m)).take(surplus).map(|m| m.id.clone()).collect();
    let mut left: Vec<&Member> = by_worth.into_iter().filter(|m| !out.contains(&m.id)).collect();
    while out.len() < surplus && !left.is_empty() {
        let mut counts: BTreeMap<Option<usize>, usize> = BTreeMap::new();
        for m in &left {
            *counts.entry(zone(m)).or_default() += 1;
        }
        let fullest = counts.iter().max_by_key(|(z, n)| (z.is_none(), **n, std::cmp::Reverse(**z))).map(|(z, _)| *z);
        let Some(pick) = left.iter().filter(|m| zone(m) == fullest.flatten()).map(|m| m.id.clone()).min() else { break };
        left.retain(|m| m.id != pick);
        out.push(pick);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_surplus_is_given_up_from_the_fullest_zone() {
        let members: Vec<Member> = (1..=7).map(|n| m(n, None, n != 7, true)).collect();
        // Zones of 1..=7: a a a b b c c (7 outdated).
        let zone = |m: &Member| Some([0, 0, 0, 1, 1, 2, 2][m.id.number() as usize - 1]);
        assert_eq!(ids(&surplus_by_zone(&members, 1, zone)), [7], "the outdated first");
        assert_eq!(ids(&surplus_by_zone(&members, 2, zone)), [7, 1], "then the fullest zone's lowest ID");
        assert_eq!(ids(&surplus_by_zone(&members, 4, zone)), [7, 1, 2, 4], "a a b b c c -> a b c c... balanced");
        let unzoned = |m: &Member| (m.id.number() != 5).then_some(0);
        assert_eq!(ids(&surplus_by_zone(&members, 2, unzoned)), [7, 5], "one in no zone before the rest");
        assert_eq!(ids(&surplus_by_zone(&members, 9, zone)).len(), 7, "never more than there are");
    }

    fn m(n: u64, lid: Option<&str>, current: bool, created: bool) -> Member {
        Member { id: InstanceId::new(n), logical_id: lid.map(str::to_string), current, created, unhealthy: false }
    }

    fn ids(v: &[InstanceId]) -> Vec<u64> {
        v.iter().map(InstanceId::number).collect()
    }

    #[test]
    fn size_adds_the_missing_and_terminates_outdated_then_uncreated_then_lowest() {
        let members =
            [m(1, None, true, true), m(2, None, false, true), m(3, None, true, false), m(4, None, true, true), m(5, None, true, true)];
        let d = decide(&Allocation::Size(2), &members);
        assert_eq!(ids(&d.terminate), [2, 3, 1], "outdated, then not created, then the lowest ID");
        assert!(d.add.is_empty() && d.replace.is_empty());
        let d = decide(&Allocation::Size(5), &members[..2]);
        assert_eq!(d.add, vec![None, None, None]);
        assert_eq!(ids(&d.replace), [2], "the outdated member that stays is replaced");
        assert_eq!(decide(&Allocation::Size(5), &members), Decision { replace: vec![InstanceId::new(2)], ..Decision::default() });
        let d = decide(&Allocation::Size(0), &members);
        assert_eq!(d.terminate.len(), 5);
    }

    #[test]
    fn scale_in_gives_up_unhealthy_members_after_outdated_ones_before_uncreated_ones() {
        let sick = |n| Member { unhealthy: true, ..m(n, None, true, true) };
        let members = [m(1, None, true, true), sick(2), m(3, None, true, false), m(4, None, false, true), sick(5)];
        let d = decide(&Allocation::Size(1), &members);
        assert_eq!(ids(&d.terminate), [4, 2, 5, 3], "outdated, unhealthy, not created, then the lowest ID");
        let twins = [Member { logical_id: Some("a".into()), ..sick(1) }, m(2, Some("a"), true, true)];
        let d = decide(&Allocation::LogicalIds(vec!["a".into()]), &twins);
        assert_eq!(ids(&d.terminate), [1], "of twins, the healthy one stays");
    }

    #[test]
    fn logical_ids_have_exactly_one_member_each() {
        let members = [
            m(1, Some("a"), false, true),
            m(2, Some("a"), true, true),
            m(3, Some("gone"), true, true),
            m(4, None, true, true),
            m(5, Some("b"), false, true),
        ];
        let d = decide(&Allocation::LogicalIds(vec!["a".into(), "b".into(), "c".into()]), &members);
        assert_eq!(d.add, vec![Some("c".to_string())]);
        assert_eq!(ids(&d.terminate), [1, 3, 4], "the outdated twin, the one whose ID left, the one without");
        assert_eq!(ids(&d.replace), [5]);
        let twins = [m(7, Some("a"), true, true), m(6, Some("a"), true, true)];
        let d = decide(&Allocation::LogicalIds(vec!["a".into()]), &twins);
        assert_eq!(ids(&d.terminate), [7], "of equals, the lowest ID stays");
        assert!(decide(&Allocation::LogicalIds(vec![]), &twins).terminate.len() == 2);
    }
}
