//! `Properties.Lifecycle`: the drain that runs before a member is destroyed.

use std::time::Duration;

use serde_json::Value;

use super::{command_key, duration_key, get_ci};

/// What a drain that failed or ran out of time does to its member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnDrainFailure {
    /// Keep the member: it is not destroyed, and the run exits 17
    Abandon,
    /// Destroy it anyway, with a warning
    Continue,
}

/// How long a drain may run when neither the spec nor `--drain-timeout` says.
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

/// `Properties.Lifecycle`: what runs before a member is destroyed. Not part of the config
/// hash: changing it replaces no member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lifecycle {
    /// `Drain`: the shell command that drains a member.
    pub drain: Option<String>,
    /// `DrainTimeout`.
    pub drain_timeout: Option<Duration>,
    /// `OnDrainFailure`.
    pub on_drain_failure: Option<OnDrainFailure>,
}

/// The drain a run carries out before destroying a member: the spec's `Lifecycle`, each part
/// overridden by its flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drain {
    pub command: String,
    pub timeout: Duration,
    pub on_failure: OnDrainFailure,
}

impl Drain {
    /// The drain of a member whose group has `lifecycle` (`None`: no group, or none known),
    /// each part of `flags` (the command line's `--drain-*`) overriding it; `None` when no
    /// drain command is given either way.
    pub fn resolve(lifecycle: Option<&Lifecycle>, flags: &Lifecycle) -> Option<Drain> {
        let command = flags.drain.clone().or_else(|| lifecycle?.drain.clone())?;
        Some(Drain {
            command,
            timeout: flags.drain_timeout.or_else(|| lifecycle?.drain_timeout).unwrap_or(DRAIN_TIMEOUT),
            on_failure: flags
                .on_drain_failure
                .or_else(|| lifecycle?.on_drain_failure)
                .unwrap_or(OnDrainFailure::Abandon),
        })
    }
}

/// `Properties.Lifecycle`: `Drain` a non-empty string, `DrainTimeout` a duration (`30s`,
/// `5m`), `OnDrainFailure` `abandon` or `continue`.
pub(super) fn lifecycle(value: Option<&Value>, problem: &mut impl FnMut(&str, String)) -> Option<Lifecycle> {
    const AT: &str = "/Properties/Lifecycle";
    let l = match value {
        None | Some(Value::Null) => return None,
        Some(Value::Object(l)) => l,
        Some(_) => {
            problem(
                AT,
                "`Lifecycle` must be an object: `{\"Drain\": \"CMD\", \"DrainTimeout\": \"5m\", \"OnDrainFailure\": \"abandon\"}`"
                    .into(),
            );
            return None;
        }
    };
    let mut out = Lifecycle {
        drain: command_key(l, AT, "Drain", problem),
        drain_timeout: duration_key(l, AT, "DrainTimeout", true, "`30s` or `5m`", problem),
        on_drain_failure: None,
    };
    match get_ci(l, "OnDrainFailure") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.eq_ignore_ascii_case("abandon") => out.on_drain_failure = Some(OnDrainFailure::Abandon),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("continue") => {
            out.on_drain_failure = Some(OnDrainFailure::Continue)
        }
        Some(_) => problem(
            &format!("{AT}/OnDrainFailure"),
            "`OnDrainFailure` must be `abandon` (keep the member) or `continue` (destroy it anyway)".into(),
        ),
    }
    Some(out)
}
