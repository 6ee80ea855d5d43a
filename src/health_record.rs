//! The health record: for each member of a healed group, when infrakit-tf first saw it created
//! and how many of its checks in a row failed (see `cmd::heal`). One file of the directory,
//! [`crate::names::HEALTH_RECORD`], written all or nothing with the other records (with a
//! store, in the store: any host continues the counts). Its bytes are deterministic (sorted
//! keys, pretty JSON, a trailing newline) and change only when a count or a member does, so
//! that a converged, healthy group writes nothing. Pure: bytes in, bytes out.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What the record holds of one member.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberHealth {
    /// When infrakit-tf first saw it created, in seconds since the epoch: `InitialDelay` counts
    /// from here.
    pub first_seen: u64,
    /// Failed checks in a row; a passed check resets it.
    pub failures: u32,
    /// Whether it was ever checked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub checked: bool,
}

/// A member's health as `describe` and the report say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Never checked yet (younger than `InitialDelay`, or not seen by a run since its creation).
    NotChecked,
    Healthy,
    /// Failing: `failures` of the `of` that make it unhealthy.
    Failing { failures: u32, of: u32 },
    Unhealthy,
}

impl Health {
    /// As `describe` prints it: `healthy`, `failing 1/3`, `unhealthy`, `not checked yet`.
    pub fn text(self) -> String {
        match self {
            Health::NotChecked => "not checked yet".into(),
            Health::Healthy => "healthy".into(),
            Health::Failing { failures, of } => format!("failing {failures}/{of}"),
            Health::Unhealthy => "unhealthy".into(),
        }
    }
}

/// The whole record, by instance ID (`instance-<digits>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthRecord {
    pub members: BTreeMap<String, MemberHealth>,
}

impl HealthRecord {


    /// Notes that `id` is created, at `now` (seconds since the epoch), if it is new. A time in
    /// the future (a host whose clock ran ahead wrote it) is taken for now: `InitialDelay`
    /// counts from there, not from a time that has not come.
    pub fn seen(&mut self, id: &str, now: u64) {
        let m = self.members.entry(id.to_string()).or_insert(MemberHealth { first_seen: now, ..MemberHealth::default() });
        m.first_seen = m.first_seen.min(now);
    }

    /// Forgets every member `keep` does not keep (destroyed, or no longer created): a
    /// replacement starts with a clean record.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.members.retain(|id, _| keep(id));
    }

    /// Whether `id` is due a check at `now`: seen at least `initial_delay` ago.
    pub fn due(&self, id: &str, now: u64, initial_delay: Duration) -> bool {
        self.members.get(id).is_some_and(|m| now.saturating_sub(m.first_seen) >= initial_delay.as_secs())
    }

    /// Notes a check of `id`: a pass resets its count, a failure adds one.
    pub fn note(&mut self, id: &str, passed: bool) {
        if let Some(m) = self.members.get_mut(id) {
            m.checked = true;
            m.failures = if passed { 0 } else { m.failures.saturating_add(1) };
        }
    }

    /// The health of `id` when `threshold` failures in a row make a member unhealthy; `None`
    /// when the record does not know it.
    pub fn health(&self, id: &str, threshold: u32) -> Option<Health> {
        let m = self.members.get(id)?;
        Some(match m.failures {
            _ if !m.checked => Health::NotChecked,
            0 => Health::Healthy,
            n if n >= threshold => Health::Unhealthy,
            n => Health::Failing { failures: n, of: threshold },
        })
    }
}


impl crate::record::Record for HealthRecord {
    const FILE: &'static str = crate::names::HEALTH_RECORD;
    const WHAT: &'static str = "the health record";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    #[test]
    fn counts_go_up_on_failures_reset_on_a_pass_and_wait_for_the_initial_delay() {
        let mut r = HealthRecord::default();
        r.seen("instance-1", 1000);
        r.seen("instance-2", 1000);
        r.seen("instance-1", 2000); // seen again: first seen stays
        assert_eq!(r.members["instance-1"].first_seen, 1000);
        assert_eq!(r.health("instance-1", 3), Some(Health::NotChecked));
        assert!(!r.due("instance-1", 1599, Duration::from_secs(600)));
        assert!(r.due("instance-1", 1600, Duration::from_secs(600)));
        assert!(!r.due("instance-9", 5000, Duration::ZERO), "unknown: not due");
        // A first sight in the future (a clock ahead wrote it) counts from now.
        r.members.get_mut("instance-1").unwrap().first_seen = 9_000;
        r.seen("instance-1", 5_000);
        assert_eq!(r.members["instance-1"].first_seen, 5_000);
        assert!(!r.due("instance-1", 5_010, Duration::from_secs(60)), "within InitialDelay of now");
        r.note("instance-1", false);
        r.note("instance-1", false);
        assert_eq!(r.health("instance-1", 3), Some(Health::Failing { failures: 2, of: 3 }));
        r.note("instance-1", false);
        assert_eq!(r.health("instance-1", 3), Some(Health::Unhealthy));
        r.note("instance-1", true);
        assert_eq!(r.health("instance-1", 3), Some(Health::Healthy));
        assert_eq!(r.health("instance-9", 3), None);
        assert_eq!(Health::Failing { failures: 1, of: 3 }.text(), "failing 1/3");

        r.members.insert("instance-7".into(), MemberHealth::default());
        r.retain(|id| id != "instance-1");
        assert_eq!(r.members.keys().collect::<Vec<_>>(), ["instance-2", "instance-7"]);
    }

    #[test]
    fn the_record_reads_back_what_it_wrote_deterministically() {
        let mut r = HealthRecord::default();
        r.seen("instance-2", 7);
        r.seen("instance-1", 5);
        r.note("instance-1", false);
        let bytes = r.to_bytes();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            "{\n  \"members\": {\n    \"instance-1\": {\n      \"first_seen\": 5,\n      \"failures\": 1,\n      \"checked\": true\n    },\n    \"instance-2\": {\n      \"first_seen\": 7,\n      \"failures\": 0\n    }\n  }\n}\n"
        );
        assert_eq!(HealthRecord::parse(&bytes).unwrap(), r);
        assert!(HealthRecord::parse(b"[").unwrap_err().contains("not valid"));
    }
}
