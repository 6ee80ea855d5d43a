//! InfraKit group specs, read as InfraKit's group controller read them:
//!
//! ```json
//! {"ID": "web",
//!  "Properties": {
//!    "Allocation": {"Size": 3} | {"LogicalIDs": ["a", "b"]},
//!    "Instance": {"Plugin": "...", "Properties": <an instance spec's Properties>},
//!    "Flavor": {"Plugin": "...", "Properties": {"Init": "..." | ["...", ...], "Tags": {...}}},
//!    "Updating": {"MaxUnavailable": 1},
//!    "Lifecycle": {"Drain": "CMD", "DrainTimeout": "5m", "OnDrainFailure": "abandon" | "continue"},
//!    "Healing": {"Command": "CMD", "Timeout": "10s", "InitialDelay": "10m", "FailuresBeforeRepair": 3,
//!                "MaxUnhealthy": 2 | "40%", "MaxRepairsPerRun": 1}}}
//! ```
//!
//! Keys match case-insensitively, as Go's decoder matches struct fields. Plugin names are
//! accepted and ignored (we are the instance plugin); the flavor's Init and Tags are merged as
//! InfraKit's vanilla flavor did: Init lines joined by newlines, Tags added to the instance's.
//! Each member is tagged with the group's ID and its config hash ([`crate::confighash`]); a
//! member whose hash differs (such as `bootstrap`, which `import` gives the first manager) is
//! outdated.
//! Pure: text in, values out.

use std::collections::{BTreeMap, BTreeSet};

use std::time::Duration;

use serde_json::{Map, Value};

use crate::confighash::{config_sha, PluginSpec};
use crate::names;
use crate::spec::Problem;
use crate::tfconfig::LOGICAL_ID_TAG;

/// The tag naming a member's group (InfraKit's `group.GroupTag`).
pub const GROUP_TAG: &str = "infrakit.group";
/// The tag holding a member's config hash: InfraKit's `group.ConfigSHATag`, so that members
/// InfraKit made are recognised.
pub const CONFIG_TAG: &str = "infrakit.config.hash";
/// The same hash under the name infrakit-tf's group issue gives it; written too, read too.
pub const CONFIG_SHA_TAG: &str = "infrakit.config_sha";

/// Whether a member with `tags` is current for a spec whose config hash is `hash`.
pub fn is_current(tags: &std::collections::BTreeMap<String, String>, hash: &str) -> bool {
    [CONFIG_TAG, CONFIG_SHA_TAG].iter().any(|t| tags.get(*t).is_some_and(|h| h == hash))
}

/// The largest group: one directory holds its files, and one run creates the missing members
/// in one apply.
pub const MAX_SIZE: u64 = 10_000;

/// Flavor tags a group spec may not set: infrakit-tf's own bookkeeping.
const RESERVED_TAGS: [&str; 3] = [LOGICAL_ID_TAG, crate::tfconfig::ATTACH_TAG, crate::tfconfig::NAME_TAG];

/// How many members, or which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allocation {
    /// Cattle: this many interchangeable members.
    Size(u64),
    /// Pets: one member per logical ID.
    LogicalIds(Vec<String>),
}

/// What a drain that failed or ran out of time does to its member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnDrainFailure {
    /// Keep the member: it is not destroyed, and the run exits 17
    Abandon,
    /// Destroy it anyway, with a warning
    Continue,
}

/// How long a drain may run when neither the spec nor `--drain-timeout` says.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

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

/// How long a health check (`Healing.Timeout`) may run when neither the spec nor
/// `--heal-timeout` says.
pub const HEAL_TIMEOUT: Duration = Duration::from_secs(10);
/// Consecutive failed checks that make a member unhealthy, by default.
pub const FAILURES_BEFORE_REPAIR: u32 = 3;
/// Repairs per group per run, by default.
pub const MAX_REPAIRS_PER_RUN: u64 = 1;
/// The circuit breaker's default: more than half of the desired size unhealthy halts repairs
/// (see [`MaxUnhealthy`]).
pub const MAX_UNHEALTHY: MaxUnhealthy = MaxUnhealthy::Percent(50);

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

/// A checked group spec.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    pub id: String,
    pub allocation: Allocation,
    /// `Properties.Updating.MaxUnavailable`, when given.
    pub max_unavailable: Option<u64>,
    /// `Properties.Lifecycle`, when given.
    pub lifecycle: Option<Lifecycle>,
    /// `Properties.Healing`, when given.
    pub healing: Option<Healing>,
    /// The members' instance spec, less the logical ID (see [`GroupSpec::instance_spec`]).
    instance_spec: Value,
    /// The value every current member's [`CONFIG_TAG`] holds.
    pub config_hash: String,
}

impl GroupSpec {
    /// The instance spec of a member (a pet when `logical_id` is given): the Instance's
    /// Properties, the flavor's Init, and the flavor's Tags plus the group and config tags.
    pub fn instance_spec(&self, logical_id: Option<&str>) -> Value {
        let mut spec = self.instance_spec.clone();
        if let Some(lid) = logical_id {
            spec["LogicalID"] = Value::String(lid.to_string());
            spec["Tags"][LOGICAL_ID_TAG] = Value::String(lid.to_string());
        }
        spec
    }

    /// What decides how the group is converged, as one canonical text (for the store's
    /// configuration check): its ID, allocation, update budget, lifecycle, healing and members'
    /// spec. The lifecycle and the healing are there only when the spec has them, so that the
    /// text of a group without them is what it was before they existed.
    pub fn fingerprint_input(&self) -> String {
        let allocation = match &self.allocation {
            Allocation::Size(n) => serde_json::json!({ "Size": n }),
            Allocation::LogicalIds(ids) => serde_json::json!({ "LogicalIDs": ids }),
        };
        let mut input = serde_json::json!({
            "ID": self.id,
            "Allocation": allocation,
            "MaxUnavailable": self.max_unavailable,
            "Instance": self.instance_spec,
        });
        if let Some(l) = &self.lifecycle {
            input["Lifecycle"] = serde_json::json!({
                "Drain": l.drain,
                "DrainTimeoutMs": l.drain_timeout.map(|d| d.as_millis() as u64),
                "OnDrainFailure": l.on_drain_failure.map(|f| match f {
                    OnDrainFailure::Abandon => "abandon",
                    OnDrainFailure::Continue => "continue",
                }),
            });
        }
        if let Some(h) = &self.healing {
            input["Healing"] = serde_json::json!({
                "Command": h.command,
                "TimeoutMs": h.timeout.map(|d| d.as_millis() as u64),
                "InitialDelayMs": h.initial_delay.map(|d| d.as_millis() as u64),
                "FailuresBeforeRepair": h.failures_before_repair,
                "MaxUnhealthy": h.max_unhealthy.map(MaxUnhealthy::text),
                "MaxRepairsPerRun": h.max_repairs_per_run,
            });
        }
        input.to_string()
    }

    /// The desired member count.
    pub fn desired(&self) -> usize {
        match &self.allocation {
            Allocation::Size(n) => usize::try_from(*n).unwrap_or(usize::MAX),
            Allocation::LogicalIds(ids) => ids.len(),
        }
    }
}

/// Whether a document is a group spec rather than an instance spec: its `Properties` has an
/// `Instance` or an `Allocation`.
pub fn is_group_spec(doc: &Value) -> bool {
    let props = doc.as_object().and_then(|top| get_ci(top, "Properties")).and_then(Value::as_object);
    props.is_some_and(|p| get_ci(p, "Instance").is_some() || get_ci(p, "Allocation").is_some())
}

fn get_ci<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    map.get(key).or_else(|| map.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v))
}

/// Parses and checks a group spec document; every problem, with its location.
pub fn parse(doc: &Value) -> Result<GroupSpec, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut problem = |pointer: &str, message: String| problems.push(Problem { pointer: pointer.into(), message });
    let empty = Map::new();
    let Some(top) = doc.as_object() else {
        problem("", "a group spec must be a JSON object with `ID` and `Properties`".into());
        return Err(problems);
    };
    let id = match get_ci(top, "ID") {
        Some(Value::String(id)) => match names::check_path_component(id, "group ID") {
            Ok(()) => Some(id.clone()),
            Err(e) => {
                problem("/ID", e);
                None
            }
        },
        Some(_) => {
            problem("/ID", "the group ID must be a string".into());
            None
        }
        None => {
            problem("/ID", "a group spec needs an `ID` (the group's name)".into());
            None
        }
    };
    let props = match get_ci(top, "Properties") {
        Some(Value::Object(p)) => p,
        _ => {
            problem("/Properties", "a group spec needs `Properties`, an object".into());
            &empty
        }
    };
    let allocation = allocation(get_ci(props, "Allocation"), &mut problem);
    let instance = get_ci(props, "Instance").and_then(Value::as_object);
    let instance_props = instance.and_then(|i| get_ci(i, "Properties")).filter(|p| p.is_object());
    if instance_props.is_none() {
        problem(
            "/Properties/Instance/Properties",
            "a group spec needs `Instance.Properties`: the members' instance spec (`{\"resource\": ...}`)".into(),
        );
    }
    let flavor = get_ci(props, "Flavor").and_then(Value::as_object);
    let flavor_props = flavor.and_then(|f| get_ci(f, "Properties")).filter(|p| !p.is_null());
    let (init, tags) = flavor_parts(flavor_props, &mut problem);
    let max_unavailable = match get_ci(props, "Updating").and_then(Value::as_object).and_then(|u| get_ci(u, "MaxUnavailable")) {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64().filter(|n| *n > 0) {
            Some(n) => Some(n),
            None => {
                problem("/Properties/Updating/MaxUnavailable", "must be a whole number of at least 1".into());
                None
            }
        },
    };
    let lifecycle = lifecycle(get_ci(props, "Lifecycle"), &mut problem);
    let healing = healing(get_ci(props, "Healing"), &mut problem);
    let (Some(id), Some(allocation), Some(instance_props)) = (id, allocation, instance_props) else {
        return Err(problems);
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    let plugin = |spec: Option<&Map<String, Value>>| {
        spec.and_then(|s| get_ci(s, "Plugin")).and_then(Value::as_str).unwrap_or_default().to_string()
    };
    let (instance_plugin, flavor_plugin) = (plugin(instance), plugin(flavor));
    let config_hash = config_sha(
        &PluginSpec { plugin: &instance_plugin, properties: Some(instance_props) },
        &PluginSpec { plugin: &flavor_plugin, properties: flavor.and_then(|f| get_ci(f, "Properties")) },
    );
    let mut tags: Map<String, Value> = tags.into_iter().map(|(k, v)| (k, Value::String(v))).collect();
    tags.insert(GROUP_TAG.into(), Value::String(id.clone()));
    tags.insert(CONFIG_TAG.into(), Value::String(config_hash.clone()));
    tags.insert(CONFIG_SHA_TAG.into(), Value::String(config_hash.clone()));
    let mut instance_spec = serde_json::json!({"Properties": instance_props, "Tags": tags});
    if !init.is_empty() {
        instance_spec["Init"] = Value::String(init);
    }
    Ok(GroupSpec { id, allocation, max_unavailable, lifecycle, healing, instance_spec, config_hash })
}

/// `Properties.Lifecycle`: `Drain` a non-empty string, `DrainTimeout` a duration (`30s`,
/// `5m`), `OnDrainFailure` `abandon` or `continue`.
fn lifecycle(value: Option<&Value>, problem: &mut impl FnMut(&str, String)) -> Option<Lifecycle> {
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

/// `Properties.Healing`: `Command` a non-empty string, `Timeout` and `InitialDelay` durations,
/// `FailuresBeforeRepair` and `MaxRepairsPerRun` whole numbers of at least 1, `MaxUnhealthy`
/// a count or a percentage (`2`, `"40%"`).
fn healing(value: Option<&Value>, problem: &mut impl FnMut(&str, String)) -> Option<Healing> {
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
    let mut out = Healing::default();
    match get_ci(h, "Command") {
        None | Some(Value::Null) => {}
        Some(Value::String(cmd)) if !cmd.trim().is_empty() => out.command = Some(cmd.clone()),
        Some(_) => problem(&format!("{AT}/Command"), "`Command` must be a shell command (a non-empty string)".into()),
    }
    let mut duration = |key: &str, positive: bool| match get_ci(h, key) {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => match crate::text::parse_duration(text) {
            Ok(d) if positive && d.is_zero() => {
                problem(&format!("{AT}/{key}"), format!("`{key}` must be longer than 0"));
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                problem(&format!("{AT}/{key}"), e);
                None
            }
        },
        Some(_) => {
            problem(&format!("{AT}/{key}"), format!("`{key}` must be a duration such as `30s` or `10m`"));
            None
        }
    };
    out.timeout = duration("Timeout", true);
    out.initial_delay = duration("InitialDelay", false);
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

fn allocation(value: Option<&Value>, problem: &mut impl FnMut(&str, String)) -> Option<Allocation> {
    let Some(Value::Object(a)) = value else {
        problem("/Properties/Allocation", "a group spec needs `Allocation`: `{\"Size\": N}` or `{\"LogicalIDs\": [...]}`".into());
        return None;
    };
    match (get_ci(a, "Size"), get_ci(a, "LogicalIDs")) {
        (Some(_), Some(_)) => {
            problem("/Properties/Allocation", "give `Size` or `LogicalIDs`, not both".into());
            None
        }
        (None, None) => {
            problem("/Properties/Allocation", "give `Size` (cattle) or `LogicalIDs` (pets)".into());
            None
        }
        (Some(size), None) => match size.as_u64() {
            Some(n) if n <= MAX_SIZE => Some(Allocation::Size(n)),
            Some(_) => {
                problem("/Properties/Allocation/Size", format!("`Size` must be at most {MAX_SIZE}"));
                None
            }
            None => {
                problem("/Properties/Allocation/Size", "`Size` must be a whole number, 0 or more".into());
                None
            }
        },
        (None, Some(Value::Array(ids))) => {
            let mut seen = BTreeSet::new();
            let mut out = Vec::new();
            for (i, lid) in ids.iter().enumerate() {
                let at = format!("/Properties/Allocation/LogicalIDs/{i}");
                match lid.as_str() {
                    None => problem(&at, "each logical ID must be a string".into()),
                    Some(s) => {
                        if let Err(e) = names::check_logical_id(s) {
                            problem(&at, e);
                        } else if !seen.insert(s) {
                            problem(&at, format!("logical ID `{}` is listed twice", crate::text::short(s)));
                        } else {
                            out.push(s.to_string());
                        }
                    }
                }
            }
            if ids.len() as u64 > MAX_SIZE {
                problem("/Properties/Allocation/LogicalIDs", format!("at most {MAX_SIZE} logical IDs"));
                return None;
            }
            (out.len() == ids.len()).then_some(Allocation::LogicalIds(out))
        }
        (None, Some(_)) => {
            problem("/Properties/Allocation/LogicalIDs", "`LogicalIDs` must be a list of strings".into());
            None
        }
    }
}

/// The flavor's Init (lines joined by newlines) and Tags.
fn flavor_parts(props: Option<&Value>, problem: &mut impl FnMut(&str, String)) -> (String, BTreeMap<String, String>) {
    let mut tags = BTreeMap::new();
    let Some(props) = props else { return (String::new(), tags) };
    let Some(props) = props.as_object() else {
        problem("/Properties/Flavor/Properties", "the flavor's `Properties` must be an object".into());
        return (String::new(), tags);
    };
    let init = match get_ci(props, "Init") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(lines)) if lines.iter().all(Value::is_string) => {
            lines.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n")
        }
        Some(_) => {
            problem("/Properties/Flavor/Properties/Init", "`Init` must be a string or a list of strings".into());
            String::new()
        }
    };
    match get_ci(props, "Tags") {
        None | Some(Value::Null) => {}
        Some(Value::Object(t)) => {
            for (k, v) in t {
                if RESERVED_TAGS.contains(&k.as_str()) {
                    problem(
                        &format!("/Properties/Flavor/Properties/Tags/{k}"),
                        format!("`{k}` is infrakit-tf's own tag: a flavor may not set it"),
                    );
                    continue;
                }
                match v.as_str() {
                    Some(v) => {
                        tags.insert(k.clone(), v.to_string());
                    }
                    None => problem(
                        &format!("/Properties/Flavor/Properties/Tags/{k}"),
                        "a tag's value must be a string".into(),
                    ),
                }
            }
        }
        Some(_) => problem("/Properties/Flavor/Properties/Tags", "`Tags` must be an object of strings".into()),
    }
    (init, tags)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<GroupSpec, Vec<String>> {
        parse(&serde_json::from_str(text).unwrap()).map_err(|p| p.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_group_spec_becomes_its_members_instance_spec() {
        let g = parsed(
            r#"{"ID":"g","Properties":{"Allocation":{"Size":1},"Instance":{"Plugin":"p",
            "Properties":{"resource":{"aws_instance":{"vm":{"ami":"a"}}}}},"Flavor":{"Plugin":"f",
            "Properties":{"Init":["x", "y"], "Tags": {"role": "web"}}}}}"#,
        )
        .unwrap();
        assert_eq!(g.allocation, Allocation::Size(1));
        assert_eq!(
            g.instance_spec(None),
            serde_json::json!({"Properties": {"resource":{"aws_instance":{"vm":{"ami":"a"}}}}, "Init": "x\ny",
                "Tags": {"role": "web", "infrakit.group": "g", "infrakit.config.hash": g.config_hash, "infrakit.config_sha": g.config_hash}})
        );
        let pet = g.instance_spec(Some("db-1"));
        assert_eq!(pet["LogicalID"], "db-1");
        assert_eq!(pet["Tags"]["infrakit.logical_id"], "db-1");
    }

    #[test]
    fn the_issue_vector_is_the_config_hash() {
        let g = parsed(
            r#"{"ID":"g","Properties":{"Allocation":{"Size":1},"Instance":{"Plugin":"p","Properties":{"resource":{"aws_instance":{"vm":{"ami":"a"}}}}},"Flavor":{"Plugin":"f","Properties":{"Init":["x"]}}}}"#,
        )
        .unwrap();
        assert_eq!(g.config_hash, "6uz6s7yo4cnw3r42wgqo2t3jmpkxzhkw");
        // Keys match case-insensitively, as Go's decoder does; the hash is of the documents.
        let lower = parsed(
            r#"{"id":"g","properties":{"allocation":{"size":1},"instance":{"plugin":"p","properties":{"resource":{"aws_instance":{"vm":{"ami":"a"}}}}},"flavor":{"plugin":"f","properties":{"Init":["x"]}}}}"#,
        )
        .unwrap();
        assert_eq!(lower.config_hash, g.config_hash);
    }

    #[test]
    fn malformed_group_specs_list_every_problem() {
        let problems = parsed(
            r#"{"ID":"../x","Properties":{"Allocation":{"Size":-1,"LogicalIDs":["a"]},"Instance":{},
            "Flavor":{"Properties":{"Init":3}},"Updating":{"MaxUnavailable":0}}}"#,
        )
        .unwrap_err();
        assert_eq!(problems.len(), 5, "{problems:#?}");
        assert!(problems[0].contains("group ID `../x`"), "{problems:#?}");
        assert!(problems[1].contains("not both"), "{problems:#?}");
        assert!(problems[2].contains("Instance.Properties"), "{problems:#?}");
        assert!(problems[3].contains("`Init` must be"), "{problems:#?}");
        assert!(problems[4].contains("at least 1"), "{problems:#?}");
        let ids = parsed(
            r#"{"ID":"g","Properties":{"Allocation":{"LogicalIDs":["a", 1, "a"]},"Instance":{"Properties":{"resource":{}}}}}"#,
        )
        .unwrap_err();
        assert_eq!(ids.len(), 2, "{ids:#?}");
        assert!(ids[0].contains("must be a string") && ids[1].contains("listed twice"), "{ids:#?}");
        let size = parsed(r#"{"ID":"g","Properties":{"Allocation":{"Size":1.5},"Instance":{"Properties":{"resource":{}}}}}"#);
        assert!(size.unwrap_err()[0].contains("whole number"));
        let huge = parsed(r#"{"ID":"g","Properties":{"Allocation":{"Size":18446744073709551615},"Instance":{"Properties":{"resource":{}}}}}"#);
        assert!(huge.unwrap_err()[0].contains("at most 10000"));
        let reserved = parsed(
            r#"{"ID":"g","Properties":{"Allocation":{"Size":1},"Instance":{"Properties":{"resource":{}}},"Flavor":{"Properties":{"Tags":{"infrakit.logical_id":"x"}}}}}"#,
        );
        assert!(reserved.unwrap_err()[0].contains("infrakit-tf's own tag"));
        let neither = parsed(r#"{"ID":"g","Properties":{"Allocation":{},"Instance":{"Properties":{"resource":{}}}}}"#);
        assert!(neither.unwrap_err()[0].contains("`Size` (cattle) or `LogicalIDs` (pets)"));
    }

    #[test]
    fn members_infrakit_made_are_current_and_bootstrap_is_not() {
        let tags = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(is_current(&tags(&[(CONFIG_TAG, "abc")]), "abc"), "InfraKit's tag alone");
        assert!(is_current(&tags(&[(CONFIG_TAG, "abc"), (CONFIG_SHA_TAG, "abc")]), "abc"));
        assert!(!is_current(&tags(&[(CONFIG_TAG, "bootstrap")]), "abc"));
        assert!(!is_current(&tags(&[]), "abc"));
    }

    #[test]
    fn a_lifecycle_is_read_checked_and_overridden_by_the_flags() {
        let base = r#"{"ID":"g","Properties":{"Allocation":{"Size":1},"Instance":{"Properties":{"resource":{}}}}}"#;
        let plain = parsed(base).unwrap();
        assert_eq!(plain.lifecycle, None);
        // A group without a lifecycle has the fingerprint it had before lifecycles existed.
        assert_eq!(
            plain.fingerprint_input(),
            r#"{"Allocation":{"Size":1},"ID":"g","Instance":{"Properties":{"resource":{}},"Tags":{"infrakit.config.hash":"3cxos73jkapke6rprxhm56ynnoa2fu7g","infrakit.config_sha":"3cxos73jkapke6rprxhm56ynnoa2fu7g","infrakit.group":"g"}},"MaxUnavailable":null}"#
        );
        let with = |lifecycle: &str| {
            parsed(&base.replace(r#""Instance""#, &format!(r#""Lifecycle":{lifecycle},"Instance""#)))
        };
        // Go's duration grammar, as InfraKit's specs are read.
        let go = with(r#"{"Drain":"true","DrainTimeout":"2m30.5s"}"#).unwrap();
        assert_eq!(go.lifecycle.unwrap().drain_timeout, Some(Duration::from_millis(150_500)));
        let g = with(r#"{"Drain":"kubectl drain $INFRAKIT_TF_ID","DrainTimeout":"1m30s","OnDrainFailure":"Continue"}"#)
            .unwrap();
        let l = g.lifecycle.clone().unwrap();
        assert_eq!(l.drain.as_deref(), Some("kubectl drain $INFRAKIT_TF_ID"));
        assert_eq!(l.drain_timeout, Some(Duration::from_secs(90)));
        assert_eq!(l.on_drain_failure, Some(OnDrainFailure::Continue));
        assert_eq!(g.config_hash, plain.config_hash, "a lifecycle replaces no member");
        assert_ne!(g.fingerprint_input(), plain.fingerprint_input());

        let none = Lifecycle::default();
        let drain = Drain::resolve(Some(&l), &none).unwrap();
        assert_eq!((drain.timeout, drain.on_failure), (Duration::from_secs(90), OnDrainFailure::Continue));
        let flags = Lifecycle {
            drain: Some("true".into()),
            drain_timeout: None,
            on_drain_failure: Some(OnDrainFailure::Abandon),
        };
        let drain = Drain::resolve(Some(&l), &flags).unwrap();
        assert_eq!(
            (drain.command.as_str(), drain.timeout, drain.on_failure),
            ("true", Duration::from_secs(90), OnDrainFailure::Abandon)
        );
        let only_flags = Drain::resolve(None, &flags).unwrap();
        assert_eq!(only_flags.timeout, DRAIN_TIMEOUT);
        assert_eq!(Drain::resolve(None, &none), None);
        let no_command = with(r#"{"DrainTimeout":"1m"}"#).unwrap().lifecycle.unwrap();
        assert_eq!(Drain::resolve(Some(&no_command), &none), None, "no command, no drain");

        let bad = with(r#"{"Drain":"","DrainTimeout":"soon","OnDrainFailure":"ignore"}"#).unwrap_err();
        assert_eq!(bad.len(), 3, "{bad:#?}");
        assert!(bad[0].contains("`Drain` must be a shell command"), "{bad:#?}");
        assert!(bad[1].contains("not a duration"), "{bad:#?}");
        assert!(bad[2].contains("`abandon` (keep the member) or `continue`"), "{bad:#?}");
        assert!(with(r#""drain it""#).unwrap_err()[0].contains("`Lifecycle` must be an object"));
        assert!(with(r#"{"DrainTimeout":"0s"}"#).unwrap_err()[0].contains("longer than 0"));
    }

    #[test]
    fn healing_is_read_checked_and_overridden_by_the_flags() {
        let base = r#"{"ID":"g","Properties":{"Allocation":{"Size":4},"Instance":{"Properties":{"resource":{}}}}}"#;
        let plain = parsed(base).unwrap();
        assert_eq!(plain.healing, None);
        let with = |healing: &str| parsed(&base.replace(r#""Instance""#, &format!(r#""Healing":{healing},"Instance""#)));
        let g = with(
            r#"{"Command":"curl -fsS $INFRAKIT_TF_ATTR_IP","Timeout":"5s","InitialDelay":"10m","FailuresBeforeRepair":2,
            "MaxUnhealthy":"40%","MaxRepairsPerRun":3}"#,
        )
        .unwrap();
        let h = g.healing.clone().unwrap();
        assert_eq!(h.command.as_deref(), Some("curl -fsS $INFRAKIT_TF_ATTR_IP"));
        assert_eq!((h.timeout, h.initial_delay), (Some(Duration::from_secs(5)), Some(Duration::from_secs(600))));
        assert_eq!((h.failures_before_repair, h.max_repairs_per_run), (Some(2), Some(3)));
        assert_eq!(h.max_unhealthy, Some(MaxUnhealthy::Percent(40)));
        assert_eq!(g.config_hash, plain.config_hash, "healing replaces no member");
        assert_ne!(g.fingerprint_input(), plain.fingerprint_input());
        assert!(g.fingerprint_input().contains(r#""Healing":{"Command":"curl"#), "{}", g.fingerprint_input());

        let none = Healing::default();
        let heal = Heal::resolve(Some(&h), &none).unwrap();
        assert_eq!((heal.failures_before_repair, heal.max_repairs_per_run), (2, 3));
        let flags = Healing {
            command: Some("true".into()),
            max_unhealthy: Some(MaxUnhealthy::Count(1)),
            ..Healing::default()
        };
        let heal = Heal::resolve(Some(&h), &flags).unwrap();
        assert_eq!((heal.command.as_str(), heal.max_unhealthy, heal.timeout), ("true", MaxUnhealthy::Count(1), Duration::from_secs(5)));
        let defaults = Heal::resolve(None, &flags).unwrap();
        assert_eq!(
            (defaults.timeout, defaults.initial_delay, defaults.failures_before_repair, defaults.max_repairs_per_run),
            (HEAL_TIMEOUT, Duration::ZERO, 3, 1)
        );
        assert_eq!(Heal::resolve(None, &none), None);
        let no_command = with(r#"{"FailuresBeforeRepair":5}"#).unwrap().healing.unwrap();
        assert_eq!(Heal::resolve(Some(&no_command), &none), None, "no command, no healing");
        assert_eq!(with(r#"{"MaxUnhealthy":2}"#).unwrap().healing.unwrap().max_unhealthy, Some(MaxUnhealthy::Count(2)));

        let bad = with(
            r#"{"Command":"","Timeout":"0s","InitialDelay":"soon","FailuresBeforeRepair":0,"MaxUnhealthy":"140%","MaxRepairsPerRun":-1}"#,
        )
        .unwrap_err();
        assert_eq!(bad.len(), 6, "{bad:#?}");
        assert!(bad[0].contains("`Command` must be a shell command"), "{bad:#?}");
        assert!(bad[1].contains("`Timeout` must be longer than 0"), "{bad:#?}");
        assert!(bad[2].contains("not a duration"), "{bad:#?}");
        assert!(bad[3].contains("`FailuresBeforeRepair` must be a whole number of at least 1"), "{bad:#?}");
        assert!(bad[4].contains("`MaxRepairsPerRun` must be"), "{bad:#?}");
        assert!(bad[5].contains("at most 100%"), "{bad:#?}");
        assert!(with(r#""heal""#).unwrap_err()[0].contains("`Healing` must be an object"));
        assert!(with(r#"{"MaxUnhealthy":"many"}"#).unwrap_err()[0].contains("not a count or a percentage"));
    }

    #[test]
    fn the_breaker_counts_or_takes_a_percentage_rounded_down_but_at_least_one() {
        assert_eq!(parse_max_unhealthy("40%"), Ok(MaxUnhealthy::Percent(40)));
        assert_eq!(parse_max_unhealthy("3"), Ok(MaxUnhealthy::Count(3)));
        assert!(parse_max_unhealthy("-1").is_err());
        assert_eq!(MaxUnhealthy::Percent(40).allowed(5), 2);
        assert_eq!(MaxUnhealthy::Percent(40).allowed(4), 1, "1.6 rounds down: 2 of 4 is more than 40%");
        assert_eq!(MAX_UNHEALTHY.allowed(1), 1, "a lone member is repaired by default");
        assert_eq!(MAX_UNHEALTHY.allowed(3), 1, "2 of 3 is more than half");
        assert_eq!(MAX_UNHEALTHY.allowed(4), 2);
        assert_eq!(MaxUnhealthy::Percent(0).allowed(10), 0);
        assert_eq!(MaxUnhealthy::Count(2).allowed(100), 2);
        assert_eq!(MaxUnhealthy::Percent(40).text(), "40%");
    }

    #[test]
    fn group_specs_are_told_from_instance_specs() {
        assert!(is_group_spec(&serde_json::json!({"ID": "g", "Properties": {"Instance": {}}})));
        assert!(is_group_spec(&serde_json::json!({"properties": {"allocation": {}}})));
        assert!(!is_group_spec(&serde_json::json!({"Properties": {"resource": {}}})));
        assert!(!is_group_spec(&serde_json::json!([])));
    }
}
