//! The placement record: for each group with `Placement` (see `group::Placement`), the zones
//! (and fallbacks in them) whose creates failed for want of capacity, and until when each is
//! skipped: [`Unavailable`], its wait doubling with each failure in a row up to `MaxBackoff`. One
//! file of the directory, [`crate::names::PLACEMENT_RECORD`], written all or nothing with the
//! other records (with a store, in the store: every host skips the same zones). A create that
//! succeeds in a (zone, fallback) clears it. Pure: bytes in, bytes out.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A (zone, fallback) of a group that had no capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    /// The zone's `Name`.
    pub zone: String,
    /// The fallback's index in `Placement.Fallback`; `None`: the spec's own properties.
    #[serde(default)]
    pub fallback: Option<usize>,
    /// Until when it is skipped (ms since the epoch, by the store's clock when there is one).
    pub until_ms: u64,
    /// Capacity errors in a row there.
    pub failures: u32,
}

/// The whole record, by group ID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementRecord {
    pub groups: BTreeMap<String, Vec<Unavailable>>,
}

impl PlacementRecord {


    /// Whether `group` may create in `zone` with `fallback` at `now_ms`.
    pub fn available(&self, group: &str, zone: &str, fallback: Option<usize>, now_ms: u64) -> bool {
        self.entry(group, zone, fallback).is_none_or(|u| u.until_ms <= now_ms)
    }

    /// The (zone, fallback)s of `group` skipped at `now_ms`.
    pub fn unavailable(&self, group: &str, now_ms: u64) -> impl Iterator<Item = &Unavailable> + '_ {
        self.groups.get(group).into_iter().flatten().filter(move |u| u.until_ms > now_ms)
    }

    /// A create of `group` in `zone` with `fallback` failed for want of capacity at `now_ms`:
    /// skipped for `backoff(failures)` (`group::backoff` of the spec's `Backoff` and
    /// `MaxBackoff`). Until when.
    pub fn failed(
        &mut self,
        (group, zone, fallback): (&str, &str, Option<usize>),
        now_ms: u64,
        backoff: impl Fn(u32) -> Duration,
    ) -> u64 {
        let list = self.groups.entry(group.to_string()).or_default();
        let at = match list.iter().position(|u| u.zone == zone && u.fallback == fallback) {
            Some(at) => at,
            None => {
                list.push(Unavailable { zone: zone.to_string(), fallback, until_ms: 0, failures: 0 });
                list.len() - 1
            }
        };
        let u = &mut list[at];
        u.failures = u.failures.saturating_add(1);
        let wait = u64::try_from(backoff(u.failures).as_millis()).unwrap_or(u64::MAX);
        u.until_ms = now_ms.saturating_add(wait);
        u.until_ms
    }

    /// A create of `group` in `zone` with `fallback` succeeded: it is available, its failures
    /// forgotten.
    pub fn succeeded(&mut self, group: &str, zone: &str, fallback: Option<usize>) {
        if let Some(list) = self.groups.get_mut(group) {
            list.retain(|u| !(u.zone == zone && u.fallback == fallback));
            if list.is_empty() {
                self.groups.remove(group);
            }
        }
    }

    fn entry(&self, group: &str, zone: &str, fallback: Option<usize>) -> Option<&Unavailable> {
        self.groups.get(group)?.iter().find(|u| u.zone == zone && u.fallback == fallback)
    }
}


impl crate::record::Record for PlacementRecord {
    const FILE: &'static str = crate::names::PLACEMENT_RECORD;
    const WHAT: &'static str = "the placement record";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    #[test]
    fn a_zone_without_capacity_is_skipped_longer_each_time_until_a_create_succeeds_there() {
        let mut r = PlacementRecord::default();
        let backoff = |n: u32| crate::group::backoff(n, Duration::from_secs(60), Duration::from_secs(150));
        assert!(r.available("web", "a", None, 0));
        assert_eq!(r.failed(("web", "a", None), 1_000, backoff), 61_000);
        assert!(!r.available("web", "a", None, 60_999) && r.available("web", "a", None, 61_000));
        assert!(r.available("web", "a", Some(0), 2_000), "its fallback is another choice");
        assert!(r.available("db", "a", None, 2_000), "another group's zone a is its own");
        assert_eq!(r.failed(("web", "a", None), 61_000, backoff), 181_000, "doubled");
        assert_eq!(r.failed(("web", "a", None), 181_000, backoff), 331_000, "at most MaxBackoff");
        assert_eq!(r.unavailable("web", 200_000).count(), 1);
        assert_eq!(PlacementRecord::parse(&r.to_bytes()).unwrap(), r);
        r.succeeded("web", "a", None);
        assert_eq!(r, PlacementRecord::default());
        assert!(PlacementRecord::parse(b"[").is_err());
    }
}
