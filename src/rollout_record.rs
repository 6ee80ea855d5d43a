//! The rollout record: for each group whose spec changed, where its rollout stands (see
//! `cmd::reconcile::rollout`): the config hashes it goes `from` and `to`, its state, how many
//! checkpoints it has reached, and until when it pauses; and each group's last good spec
//! ([`GoodSpec`]), what a rollback goes back to. One file of the directory,
//! [`crate::names::ROLLOUT_RECORD`], written all or nothing with the other records (with a
//! store, in the store: any host goes on with the rollout). What is replaced is never in it:
//! the members' own config hashes say that, so a run killed anywhere loses no place and
//! replaces nothing twice. Pure: bytes in, bytes out, the choice of how far a rollout may
//! go ([`allowance`]), and how it is shown ([`RolloutReport`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a group's rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutState {
    /// Members are being replaced, batch by batch.
    Rolling,
    /// At a checkpoint: nothing is replaced for the rollout until `paused_until`.
    Paused,
    /// A replacement failed its health gate: nothing more is replaced until the spec changes
    /// or the cause is fixed (the next run checks the replacement first).
    Stopped,
    /// Every member is on the new spec.
    Done,
    /// The new spec failed (or `reconcile --rollback`): the members on it are being replaced
    /// by members on the group's last good spec.
    RollingBack,
    /// Every member is back on the last good spec; the spec is not rolled out again until it
    /// changes or `reconcile --retry-rollout`.
    RolledBack,
}

impl RolloutState {
    /// Every state, in the order the metrics list them.
    pub const ALL: [RolloutState; 6] = [
        RolloutState::Rolling,
        RolloutState::Paused,
        RolloutState::Stopped,
        RolloutState::Done,
        RolloutState::RollingBack,
        RolloutState::RolledBack,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RolloutState::Rolling => "rolling",
            RolloutState::Paused => "paused",
            RolloutState::Stopped => "stopped",
            RolloutState::Done => "done",
            RolloutState::RollingBack => "rolling_back",
            RolloutState::RolledBack => "rolled_back",
        }
    }

    /// Whether the group is held on its last good spec rather than its spec's.
    pub fn backing(self) -> bool {
        matches!(self, RolloutState::RollingBack | RolloutState::RolledBack)
    }
}

/// One group's rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRollout {
    /// The config hash most of the outdated members had when it began; once it rolls back,
    /// the last good spec's (where the group goes back to).
    pub from: String,
    /// The spec's config hash: the members it makes carry it.
    pub to: String,
    pub state: RolloutState,
    /// The checkpoint it last paused at (or had passed when it began), as the number of members
    /// on the new spec there: the next pause is at a checkpoint above it. A count, not a place in
    /// the list: `--checkpoints` or an edited spec moves the list, never what was passed.
    #[serde(default)]
    pub reached: usize,
    /// Since when it pauses (ms since the epoch, by the store's clock when there is one): until
    /// the `CheckpointDelay` of the run that looks has passed since then, so that
    /// `--checkpoint-delay 0s` ends a pause at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at_ms: Option<u64>,
    /// Why it stopped, or rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A group's last good spec: the last under which it was whole and current (every member on
/// it, none unhealthy), as the group spec gave it: its `Instance` and `Flavor`, and their
/// config hash. What a rollback makes members of, with nothing the user must still hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoodSpec {
    pub hash: String,
    pub instance: serde_json::Value,
    #[serde(default)]
    pub flavor: serde_json::Value,
}

/// The whole record, by group ID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutRecord {
    pub groups: BTreeMap<String, GroupRollout>,
    /// Each group's last good spec.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub good: BTreeMap<String, GoodSpec>,
}

impl RolloutRecord {

}

/// A group's rollout in the report: its state, the config hashes it goes `from` and `to`, how
/// many of the group's members (`of`: its desired size) are on the new spec (`replaced`),
/// until when it pauses, and why it stopped.
#[derive(Debug, Clone, Serialize)]
pub struct RolloutReport {
    pub state: RolloutState,
    pub from: String,
    pub to: String,
    pub replaced: usize,
    pub of: usize,
    pub paused_until: Option<String>,
    pub why: Option<String>,
}

impl RolloutReport {
    /// The report of rollout `r`, `replaced` of `of` members on the new spec, its pause
    /// lasting `delay_ms`.
    pub fn new(r: &GroupRollout, (replaced, of): (usize, usize), delay_ms: u64) -> Self {
        RolloutReport {
            state: r.state,
            from: r.from.clone(),
            to: r.to.clone(),
            replaced,
            of,
            paused_until: r.paused_at_ms.map(|at| crate::text::utc_ms(at.saturating_add(delay_ms))),
            why: r.why.clone(),
        }
    }

    /// In words, for the cron line and the table: `rollout paused until T (2/10 on the new
    /// spec)`, `rollout rolled back to H (10/10 on the last good spec): why`.
    pub fn words(&self) -> String {
        let until = self.paused_until.as_ref().filter(|_| self.state == RolloutState::Paused);
        let state = match (until, self.state) {
            (Some(until), _) => format!("paused until {until}"),
            (None, RolloutState::RollingBack) => format!("rolling back to {}", self.from),
            (None, RolloutState::RolledBack) => format!("rolled back to {}", self.from),
            (None, state) => state.as_str().to_string(),
        };
        let spec = if self.state.backing() { "the last good spec" } else { "the new spec" };
        let why = self.why.as_ref().filter(|_| self.state.backing()).map(|w| format!(": {w}")).unwrap_or_default();
        format!("rollout {state} ({}/{} on {spec}){why}", self.replaced, self.of)
    }
}

/// How far a group's rollout may go in this run. `reached`: the checkpoint (a member count)
/// it has paused at or passed, for the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowance {
    /// At a checkpoint since then (ms), for the delay: replace nothing for the rollout.
    Pause { since_ms: u64, reached: usize },
    /// Replace outdated members until `up_to` members are on the new spec (`None`: all), then
    /// pause there.
    Go { up_to: Option<usize>, reached: usize },
}

/// How far the rollout to config hash `to` may go now (`now_ms`), with `current` members on
/// it, pausing `delay_ms` at each of `counts` (`group::checkpoint_counts`), as the record says
/// it stands (`record`: this group's entry, if any). A rollout to another hash (a new spec, or
/// the old one back) starts with the checkpoints its members already pass behind it. A
/// checkpoint found passed but not paused at (a run killed between its batch and the record,
/// which a rollout's first batch is written after) pauses now.
pub fn allowance(
    record: Option<&GroupRollout>,
    to: &str,
    counts: &[usize],
    (current, now_ms, delay_ms): (usize, u64, u64),
) -> Allowance {
    let passed = counts.iter().copied().filter(|n| *n <= current).max().unwrap_or(0);
    let Some(same) = record.filter(|r| r.to == to) else {
        return Allowance::Go { up_to: counts.iter().copied().find(|n| *n > current), reached: passed };
    };
    if let Some(since_ms) = same.paused_at_ms.filter(|since| now_ms < since.saturating_add(delay_ms)) {
        return Allowance::Pause { since_ms, reached: same.reached };
    }
    if passed > same.reached {
        return Allowance::Pause { since_ms: now_ms, reached: passed };
    }
    let floor = current.max(same.reached);
    Allowance::Go { up_to: counts.iter().copied().find(|n| *n > floor), reached: same.reached }
}


impl crate::record::Record for RolloutRecord {
    const FILE: &'static str = crate::names::ROLLOUT_RECORD;
    const WHAT: &'static str = "the rollout record";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    fn rec(to: &str, state: RolloutState, reached: usize, paused_at_ms: Option<u64>) -> GroupRollout {
        GroupRollout { from: "old".into(), to: to.into(), state, reached, paused_at_ms, why: None }
    }

    #[test]
    fn a_rollout_goes_checkpoint_by_checkpoint_and_pauses_between() {
        use RolloutState::{Paused, Rolling};
        let counts = [2, 5];
        let hour = 3_600_000;
        let paused_2 = rec("new", Paused, 2, Some(10));
        let paused_5 = rec("new", Paused, 5, Some(20));
        let go = |up_to, reached| Allowance::Go { up_to, reached };
        let pause = |since_ms, reached| Allowance::Pause { since_ms, reached };
        // (what, the record, members current, now, the delay, the allowance)
        type Case<'a> = (&'a str, Option<&'a GroupRollout>, usize, u64, u64, Allowance);
        let cases: &[Case] = &[
            ("a new rollout: up to the first checkpoint", None, 0, 0, hour, go(Some(2), 0)),
            ("a new rollout whose hash some have: those checkpoints are behind it", None, 3, 0, hour, go(Some(5), 2)),
            ("the old spec back, 8 of 10 on it: no pause", None, 8, 0, hour, go(None, 5)),
            ("killed after its batch: the checkpoint passed pauses now", Some(&rec("new", Rolling, 0, None)), 2, 10, hour, pause(10, 2)),
            ("paused: still", Some(&paused_2), 2, 11, hour, pause(10, 2)),
            ("the pause over: to the second", Some(&paused_2), 2, 10 + hour, hour, go(Some(5), 2)),
            ("a shorter delay ends it sooner", Some(&paused_2), 2, 11, 0, go(Some(5), 2)),
            ("past the second: pause once", Some(&paused_2), 6, 10 + hour, hour, pause(10 + hour, 5)),
            ("the last pause over: all", Some(&paused_5), 5, 20 + hour, hour, go(None, 5)),
            ("another spec: starts over", Some(&rec("newer", Paused, 2, Some(5))), 0, 5, hour, go(Some(2), 0)),
            ("rolling, between checkpoints", Some(&rec("new", Rolling, 2, None)), 3, 5, hour, go(Some(5), 2)),
            // The list changed under a rollout paused at 2 (of 10): the next is the first above.
            ("checkpoints now [50]: to 5", Some(&rec("new", Rolling, 2, None)), 2, 5, hour, go(Some(5), 2)),
        ];
        for (what, record, current, now, delay, want) in cases {
            assert_eq!(allowance(*record, "new", &counts, (*current, *now, *delay)), *want, "{what}");
        }
        assert_eq!(allowance(None, "new", &[], (0, 0, hour)), go(None, 0), "no checkpoints");
        let fifty = allowance(Some(&rec("new", Rolling, 2, None)), "new", &[5], (2, 5, hour));
        assert_eq!(fifty, go(Some(5), 2), "a list of [50] alone: the 50% checkpoint is kept");
    }

    #[test]
    fn the_record_reads_back_what_it_wrote() {
        let mut r = RolloutRecord::default();
        r.groups.insert("web".into(), rec("new", RolloutState::Paused, 1, Some(42)));
        assert_eq!(RolloutRecord::parse(&r.to_bytes()).unwrap(), r);
        assert!(String::from_utf8(r.to_bytes()).unwrap().contains("\"state\": \"paused\""));
        assert!(RolloutRecord::parse(b"{").is_err());
    }

    #[test]
    fn a_rollout_is_said_in_words() {
        let report = |state, why: Option<&str>, paused_at_ms| {
            let r = GroupRollout { why: why.map(str::to_string), ..rec("new", state, 2, paused_at_ms) };
            RolloutReport::new(&r, (2, 10), 1000).words()
        };
        assert_eq!(report(RolloutState::Paused, None, Some(0)), "rollout paused until 1970-01-01T00:00:01Z (2/10 on the new spec)");
        assert_eq!(report(RolloutState::Rolling, None, None), "rollout rolling (2/10 on the new spec)");
        assert_eq!(
            report(RolloutState::RolledBack, Some("web-3 is not healthy"), None),
            "rollout rolled back to old (2/10 on the last good spec): web-3 is not healthy"
        );
        assert_eq!(report(RolloutState::RollingBack, None, None), "rollout rolling back to old (2/10 on the last good spec)");
        assert!(RolloutState::ALL.iter().filter(|s| s.backing()).count() == 2);
    }
}
