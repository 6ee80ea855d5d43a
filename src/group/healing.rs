//! `Properties.Healing`: how members are checked and repaired, and the circuit breaker.

use std::time::Duration;

use serde_json::Value;

use super::{command_key, duration_key, get_ci};

/// How long a health check (`Healing.Timeout`) may run when neither the spec nor
/// `--heal-timeout` says.
pub(super) const HEAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Consecutive failed checks that make a member unhealthy, by default.
pub const FAILURES_BEFORE_REPAIR: u32 = 3;
/// Repairs per group per run, by default.
pub(super) const MAX_REPAIRS_PER_RUN: u64 = 1;
/// The circuit breaker's default: more than half of the desired size unhealthy halts repairs
/// (see [`MaxUnhealthy`]).
pub(super) const MAX_UNHEALTHY: MaxUnhealthy = MaxUnhealthy::Percent(50);

/// `Healing.MaxUnhealthy`: the most unhealthy members a group repairs; more halt every repair
/// of the group (the circuit breaker). A count, or a percentage of the desired size, rounded
/// down but at least one (so that a lone sick member is still repaired, and 40% of 4 is 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnhealthy {
    Count(u64),
    Percent(u64),
}

impl MaxUnhealthy {
    /// The most unhealthy members allowed in a group of `desired` members.
    pub fn allowed(self, desired: usize) -> u64 {
        match self {
            MaxUnhealthy::Count(n) => n,
            // Rounded down, but at least one (0% aside): a lone sick member is still repaired.
            MaxUnhealthy::Percent(0) => 0,
            MaxUnhealthy::Percent(p) => (desired as u64 * p / 100).max(1),
        }
    }

    /// As the spec says it: `2`, `40%`.
    pub fn text(self) -> String {
        match self {
            MaxUnhealthy::Count(n) => n.to_string(),
            MaxUnhealthy::Percent(p) => format!("{p}%"),
        }
    }
}

/// Parses `MaxUnhealthy` (and `--heal-max-unhealthy`): a whole number, or a percentage from
/// 0% to 100%.
pub fn parse_max_unhealthy(text: &str) -> Result<MaxUnhealthy, String> {
    let text = text.trim();
    let bad = || {
        format!(
            "`{}` is not a count or a percentage (such as `2` or `40%`)",
            crate::text::short(text)
        )
    };
    match text.strip_suffix('%') {
        Some(p) => match p.trim().parse::<u64>() {
            Ok(p) if p <= 100 => Ok(MaxUnhealthy::Percent(p)),
            Ok(_) => Err("a percentage of `MaxUnhealthy` must be at most 100%".into()),
            Err(_) => Err(bad()),
        },
        None => text.parse::<u64>().map(MaxUnhealthy::Count).map_err(|_| bad()),
    }
}

/// `Properties.Healing`: how members are checked and repaired. Not part of the config hash:
/// changing it replaces no member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Healing {
    /// `Command`: the shell command that checks a member (exit 0: healthy).
    pub command: Option<String>,
    /// `Timeout`.
    pub timeout: Option<Duration>,
    /// `InitialDelay`: a member is first checked this long after the tool first saw it created.
    pub initial_delay: Option<Duration>,
    /// `FailuresBeforeRepair`.
    pub failures_before_repair: Option<u32>,
    /// `MaxUnhealthy`.
    pub max_unhealthy: Option<MaxUnhealthy>,
    /// `MaxRepairsPerRun`.
    pub max_repairs_per_run: Option<u64>,
}

/// The healing a run carries out for a group: the spec's `Healing`, each part overridden by its
/// flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heal {
    pub command: String,
    pub timeout: Duration,
    pub initial_delay: Duration,
    pub failures_before_repair: u32,
    pub max_unhealthy: MaxUnhealthy,
    pub max_repairs_per_run: u64,
}

impl Heal {
    /// The healing of a group whose spec has `healing`, each part of `flags` (the command
    /// line's `--heal-*`) overriding it; `None` when no health command is given either way.
    pub fn resolve(healing: Option<&Healing>, flags: &Healing) -> Option<Heal> {
        let command = flags.command.clone().or_else(|| healing?.command.clone())?;
        Some(Heal {
            command,
            timeout: flags.timeout.or_else(|| healing?.timeout).unwrap_or(HEAL_TIMEOUT),
            initial_delay: flags.initial_delay.or_else(|| healing?.initial_delay).unwrap_or_default(),
            failures_before_repair: flags
                .failures_before_repair
                .or_else(|| healing?.failures_before_repair)
                .unwrap_or(FAILURES_BEFORE_REPAIR),
            max_unhealthy: flags.max_unhealthy.or_else(|| healing?.max_unhealthy).unwrap_or(MAX_UNHEALTHY),
            max_repairs_per_run: flags
                .max_repairs_per_run
                .or_else(|| healing?.max_repairs_per_run)
                .unwrap_or(MAX_REPAIRS_PER_RUN),
        })
    }
}

/// `Properties.Healing`: `Command` a non-empty string, `Timeout` and `InitialDelay` durations,
/// `FailuresBeforeRepair` and `MaxRepairsPerRun` whole numbers of at least 1, `MaxUnhealthy`
/// a count or a percentage (`2`, `"40%"`).
pub(super) fn healing(value: Option<&Value>, problem: &mut impl FnMut(&str, String)) -> Option<Healing> {
    const AT: &str = "/Properties/Healing";
    let h = match value {
        None | Some(Value::Null) => return None,
        Some(Value::Object(h)) => h,
        Some(_) => {
            problem(
                AT,
                "`Healing` must be an object: `{\"Command\": \"CMD\", \"FailuresBeforeRepair\": 3, \"MaxUnhealthy\": \"40%\"}`"
                    .into(),
            );
            return None;
        }
    };
    let mut out = Healing {
        command: command_key(h, AT, "Command", problem),
        timeout: duration_key(h, AT, "Timeout", true, "`30s` or `10m`", problem),
        initial_delay: duration_key(h, AT, "InitialDelay", false, "`30s` or `10m`", problem),
        ..Healing::default()
    };
    let mut count = |key: &str| match get_ci(h, key) {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64().filter(|n| *n > 0) {
            Some(n) => Some(n),
            None => {
                problem(&format!("{AT}/{key}"), format!("`{key}` must be a whole number of at least 1"));
                None
            }
        },
    };
    out.failures_before_repair = count("FailuresBeforeRepair").map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    out.max_repairs_per_run = count("MaxRepairsPerRun");
    match get_ci(h, "MaxUnhealthy") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) => match n.as_u64() {
            Some(n) => out.max_unhealthy = Some(MaxUnhealthy::Count(n)),
            None => problem(&format!("{AT}/MaxUnhealthy"), "`MaxUnhealthy` must be a count (0 or more) or a percentage".into()),
        },
        Some(Value::String(text)) => match parse_max_unhealthy(text) {
            Ok(m) => out.max_unhealthy = Some(m),
            Err(e) => problem(&format!("{AT}/MaxUnhealthy"), e),
        },
        Some(_) => problem(
            &format!("{AT}/MaxUnhealthy"),
            "`MaxUnhealthy` must be a count or a percentage (such as `2` or `\"40%\"`)".into(),
        ),
    }
    Some(out)
}
