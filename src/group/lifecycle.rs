//! `Properties.Lifecycle`: the drain that runs before a member is destroyed.

use std::time::Duration;

use serde_json::Value;

use super::get_ci;

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
    let l = match value {
        None | Some(Value::Null) => return None,
        Some(Value::Object(l)) => l,
        Some(_) => {
            problem(
                "/Properties/Lifecycle",
                "`Lifecycle` must be an object: `{\"Drain\": \"CMD\", \"DrainTimeout\": \"5m\", \"OnDrainFailure\": \"abandon\"}`"
                    .into(),
            );
            return None;
        }
    };
    let mut out = Lifecycle::default();
    match get_ci(l, "Drain") {
        None | Some(Value::Null) => {}
        Some(Value::String(cmd)) if !cmd.trim().is_empty() => out.drain = Some(cmd.clone()),
        Some(_) => problem("/Properties/Lifecycle/Drain", "`Drain` must be a shell command (a non-empty string)".into()),
    }
    match get_ci(l, "DrainTimeout") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => match crate::text::parse_duration(text) {
            Ok(d) if !d.is_zero() => out.drain_timeout = Some(d),
            Ok(_) => problem("/Properties/Lifecycle/DrainTimeout", "`DrainTimeout` must be longer than 0".into()),
            Err(e) => problem("/Properties/Lifecycle/DrainTimeout", e),
        },
        Some(_) => problem(
            "/Properties/Lifecycle/DrainTimeout",
            "`DrainTimeout` must be a duration such as `30s` or `5m`".into(),
        ),
    }
    match get_ci(l, "OnDrainFailure") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.eq_ignore_ascii_case("abandon") => out.on_drain_failure = Some(OnDrainFailure::Abandon),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("continue") => {
            out.on_drain_failure = Some(OnDrainFailure::Continue)
        }
        Some(_) => problem(
            "/Properties/Lifecycle/OnDrainFailure",
            "`OnDrainFailure` must be `abandon` (keep the member) or `continue` (destroy it anyway)".into(),
        ),
    }
    Some(out)
}
