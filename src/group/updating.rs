//! `Properties.Updating`: how a changed spec is rolled out. `MaxUnavailable` (members replaced
//! at a time), `MinReady` (how long a batch's replacements stay healthy before the next batch),
//! `Checkpoints` (percentages of the group at which the rollout pauses) and `CheckpointDelay`
//! (how long each pause lasts), `AutoRollback` (whether a failed rollout goes back to the
//! last good spec by itself). Not part of the config hash: changing it replaces no member.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{duration_key, get_ci};

/// How long a rollout pauses at a checkpoint when neither the spec nor `--checkpoint-delay`
/// says.
pub const CHECKPOINT_DELAY: Duration = Duration::from_secs(3600);

/// `Properties.Updating`, as the spec gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Updating {
    /// `MaxUnavailable`.
    pub(super) max_unavailable: Option<u64>,
    /// `Checkpoints`: percentages of the group, increasing, each from 1 to 99.
    pub(super) checkpoints: Vec<u64>,
    /// `CheckpointDelay`.
    pub(super) checkpoint_delay: Option<Duration>,
    /// `MinReady`.
    pub(super) min_ready: Option<Duration>,
    /// `AutoRollback`.
    pub(super) auto_rollback: bool,
}

/// Where a group's rollout pauses: the number of members on the new spec at each checkpoint
/// (a percentage of `size`, rounded up to whole members and at least one), increasing, those
/// that leave nobody to replace after them dropped.
pub fn checkpoint_counts(checkpoints: &[u64], size: usize) -> Vec<usize> {
    let mut counts: Vec<usize> = checkpoints
        .iter()
        .map(|p| (size as u64 * p).div_ceil(100).max(1) as usize)
        .filter(|n| *n < size)
        .collect();
    counts.dedup();
    counts
}

/// Parses `Checkpoints` (and `--checkpoints`): percentages from 1 to 99, increasing.
pub fn check_checkpoints(checkpoints: &[u64]) -> Result<(), String> {
    if let Some(p) = checkpoints.iter().find(|p| !(1..=99).contains(*p)) {
        return Err(format!("a checkpoint is a percentage of the group from 1 to 99, not {p}"));
    }
    if checkpoints.windows(2).any(|w| w[0] >= w[1]) {
        return Err("checkpoints must increase, such as [20, 50]".into());
    }
    Ok(())
}

/// `Properties.Updating`: `MaxUnavailable` a whole number of at least 1, `Checkpoints` a list
/// of increasing percentages, `CheckpointDelay` and `MinReady` durations, `AutoRollback`
/// `true` or `false`.
pub(super) fn updating(value: Option<&Value>, problem: &mut impl FnMut(&str, String)) -> Updating {
    const AT: &str = "/Properties/Updating";
    let empty = Map::new();
    let u = match value {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(u)) => u,
        Some(_) => {
            problem(AT, "`Updating` must be an object: `{\"MaxUnavailable\": 2, \"Checkpoints\": [20, 50]}`".into());
            &empty
        }
    };
    let max_unavailable = match get_ci(u, "MaxUnavailable") {
        None | Some(Value::Null) => None,
        Some(v) => v.as_u64().filter(|n| *n > 0).or_else(|| {
            problem(&format!("{AT}/MaxUnavailable"), "must be a whole number of at least 1".into());
            None
        }),
    };
    let checkpoints = match get_ci(u, "Checkpoints") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let numbers: Option<Vec<u64>> = items.iter().map(Value::as_u64).collect();
            match numbers.ok_or_else(|| "`Checkpoints` must be whole percentages, such as [20, 50]".to_string()) {
                Ok(n) => match check_checkpoints(&n) {
                    Ok(()) => n,
                    Err(why) => {
                        problem(&format!("{AT}/Checkpoints"), why);
                        Vec::new()
                    }
                },
                Err(why) => {
                    problem(&format!("{AT}/Checkpoints"), why);
                    Vec::new()
                }
            }
        }
        Some(_) => {
            problem(&format!("{AT}/Checkpoints"), "`Checkpoints` must be a list of percentages, such as [20, 50]".into());
            Vec::new()
        }
    };
    let checkpoint_delay = duration_key(u, AT, "CheckpointDelay", false, "`10m` or `1h`", problem);
    let min_ready = duration_key(u, AT, "MinReady", false, "`30s` or `5m`", problem);
    let auto_rollback = match get_ci(u, "AutoRollback") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            problem(&format!("{AT}/AutoRollback"), "`AutoRollback` must be true or false".into());
            false
        }
    };
    Updating { max_unavailable, checkpoints, checkpoint_delay, min_ready, auto_rollback }
}
