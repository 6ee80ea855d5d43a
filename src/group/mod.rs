//! InfraKit group specs, read as InfraKit's group controller read them:
//!
//! ```json
//! {"ID": "web",
//!  "Properties": {
//!    "Allocation": {"Size": 3} | {"LogicalIDs": ["a", "b"]},
//!    "Instance": {"Plugin": "...", "Properties": <an instance spec's Properties>},
//!    "Flavor": {"Plugin": "...", "Properties": {"Init": "..." | ["...", ...], "Tags": {...}}},
//!    "Updating": {"MaxUnavailable": 1, "MinReady": "30s", "Checkpoints": [20, 50], "CheckpointDelay": "1h",
//!                 "AutoRollback": true},
//!    "Lifecycle": {"Drain": "CMD", "DrainTimeout": "5m", "OnDrainFailure": "abandon" | "continue"},
//!    "Healing": {"Command": "CMD", "Timeout": "10s", "InitialDelay": "10m", "FailuresBeforeRepair": 3,
//!                "MaxUnhealthy": 2 | "40%", "MaxRepairsPerRun": 1},
//!    "Placement": {"Zones": [{"Name": "a", "Properties": {...}}], "Fallback": [{"Properties": {...}}],
//!                  "CapacityErrors": ["..."], "Backoff": "5m", "MaxBackoff": "30m"}}}
//! ```
//!
//! Keys match case-insensitively, as Go's decoder matches struct fields. Plugin names are
//! accepted and ignored (we are the instance plugin); the flavor's Init and Tags are merged as
//! InfraKit's vanilla flavor did: Init lines joined by newlines, Tags added to the instance's.
//! Each member is tagged with the group's ID and its config hash ([`crate::confighash`]); a
//! member whose hash differs (such as `bootstrap`, which `import` gives the first manager) is
//! outdated.
//! Pure: text in, values out. One file a section of the spec: `allocation.rs`, `flavor.rs`,
//! `lifecycle.rs` (the drain), `healing.rs`, `updating.rs` (the rollout), `placement.rs`
//! (zones and capacity fallbacks); this one the spec
//! as a whole.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::confighash::{config_sha, PluginSpec};
use crate::names;
use crate::spec::Problem;
use crate::tfconfig::LOGICAL_ID_TAG;

mod allocation;
mod flavor;
mod healing;
mod lifecycle;
mod placement;
mod updating;

pub use allocation::Allocation;
pub use healing::{parse_max_unhealthy, Heal, Healing, MaxUnhealthy, FAILURES_BEFORE_REPAIR};
pub use lifecycle::{Drain, Lifecycle, OnDrainFailure};
pub use placement::{backoff, choose, overfull, place, placed, zone_of, Placement, SlotZone, FALLBACK_TAG, ZONE_TAG};
pub use updating::{check_checkpoints, checkpoint_counts, CHECKPOINT_DELAY};

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
const RESERVED_TAGS: [&str; 5] =
    [LOGICAL_ID_TAG, crate::tfconfig::ATTACH_TAG, crate::tfconfig::NAME_TAG, ZONE_TAG, FALLBACK_TAG];

/// A checked group spec.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    pub id: String,
    pub allocation: Allocation,
    /// `Properties.Updating.MaxUnavailable`, when given.
    pub max_unavailable: Option<u64>,
    /// `Properties.Updating.Checkpoints`: percentages of the group (`updating`).
    pub checkpoints: Vec<u64>,
    /// `Properties.Updating.CheckpointDelay`, when given.
    pub checkpoint_delay: Option<std::time::Duration>,
    /// `Properties.Updating.MinReady`, when given.
    pub min_ready: Option<std::time::Duration>,
    /// `Properties.Updating.AutoRollback`.
    pub auto_rollback: bool,
    /// `Properties.Lifecycle`, when given.
    pub lifecycle: Option<Lifecycle>,
    /// `Properties.Healing`, when given.
    pub healing: Option<Healing>,
    /// `Properties.Placement`, when given.
    pub placement: Option<Placement>,
    /// The members' instance spec, less the logical ID (see [`GroupSpec::instance_spec`]).
    instance_spec: Value,
    /// The value every current member's [`CONFIG_TAG`] holds.
    pub config_hash: String,
    /// `Properties.Instance` and `Properties.Flavor` as the spec gives them (`null`: none):
    /// what the rollout record keeps of the last good spec.
    pub members_spec: (Value, Value),
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
        if !self.checkpoints.is_empty() || self.checkpoint_delay.is_some() {
            input["Checkpoints"] = serde_json::json!(self.checkpoints);
            input["CheckpointDelayMs"] = serde_json::json!(self.checkpoint_delay.map(|d| d.as_millis() as u64));
        }
        if let Some(d) = self.min_ready {
            input["MinReadyMs"] = serde_json::json!(d.as_millis() as u64);
        }
        if self.auto_rollback {
            input["AutoRollback"] = Value::Bool(true);
        }
        if let Some(p) = &self.placement {
            input["Placement"] = p.fingerprint();
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

    /// The same group with members made of another `Instance` and `Flavor` (as
    /// [`GroupSpec::members_spec`] holds them: a last good spec); everything else, the ID
    /// and its tag included, as it is.
    pub fn with_members(&self, (instance, flavor): &(Value, Value)) -> Result<GroupSpec, Vec<Problem>> {
        let doc = serde_json::json!({
            "ID": self.id,
            "Properties": {"Allocation": {"Size": 1}, "Instance": instance, "Flavor": flavor},
        });
        let other = parse(&doc)?;
        Ok(GroupSpec {
            instance_spec: other.instance_spec,
            config_hash: other.config_hash,
            members_spec: other.members_spec,
            ..self.clone()
        })
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

/// The shell command under `key` of `map` (at `at`): absent or null is `None`; anything but a
/// non-empty string is a problem.
fn command_key(map: &Map<String, Value>, at: &str, key: &str, problem: &mut impl FnMut(&str, String)) -> Option<String> {
    match get_ci(map, key) {
        None | Some(Value::Null) => None,
        Some(Value::String(cmd)) if !cmd.trim().is_empty() => Some(cmd.clone()),
        Some(_) => {
            problem(&format!("{at}/{key}"), format!("`{key}` must be a shell command (a non-empty string)"));
            None
        }
    }
}

/// The Go duration under `key` of `map` (at `at`), longer than 0 when `positive`: absent or
/// null is `None`; anything else that is not such a duration is a problem (`example`: the
/// durations a message suggests, such as "`30s` or `5m`").
fn duration_key(
    map: &Map<String, Value>,
    at: &str,
    key: &str,
    positive: bool,
    example: &str,
    problem: &mut impl FnMut(&str, String),
) -> Option<Duration> {
    let bad = |problem: &mut dyn FnMut(&str, String), why: String| {
        problem(&format!("{at}/{key}"), why);
        None
    };
    match get_ci(map, key) {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => match crate::text::parse_duration(text) {
            Ok(d) if positive && d.is_zero() => bad(problem, format!("`{key}` must be longer than 0")),
            Ok(d) => Some(d),
            Err(e) => bad(problem, e),
        },
        Some(_) => bad(problem, format!("`{key}` must be a duration such as {example}")),
    }
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
    let allocation = allocation::allocation(get_ci(props, "Allocation"), &mut problem);
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
    let (init, tags) = flavor::flavor_parts(flavor_props, &mut problem);
    let updating = updating::updating(get_ci(props, "Updating"), &mut problem);
    let max_unavailable = updating.max_unavailable;
    let lifecycle = lifecycle::lifecycle(get_ci(props, "Lifecycle"), &mut problem);
    let healing = healing::healing(get_ci(props, "Healing"), &mut problem);
    let placement = placement::placement(get_ci(props, "Placement"), &mut problem);
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
    let members_spec = (
        instance.map_or(Value::Null, |i| Value::Object(i.clone())),
        flavor.map_or(Value::Null, |f| Value::Object(f.clone())),
    );
    let (checkpoints, checkpoint_delay, min_ready) = (updating.checkpoints, updating.checkpoint_delay, updating.min_ready);
    Ok(GroupSpec {
        id,
        allocation,
        max_unavailable,
        checkpoints,
        checkpoint_delay,
        min_ready,
        auto_rollback: updating.auto_rollback,
        lifecycle,
        healing,
        placement,
        instance_spec,
        config_hash,
        members_spec,
    })
}

#[cfg(test)]
mod tests;
