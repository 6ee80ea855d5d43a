//! Terraform's machine-readable interfaces, decoded into typed values: the `-json` UI stream
//! of plan/apply (one JSON object per line) and `show -json`. Pure; unknown event types and keys
//! are ignored, as Terraform's compatibility promise asks. OpenTofu speaks the same protocol
//! (its `@module` is `tofu.ui`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One line of the `-json` stream, reduced to what infrakit-tf acts on.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Diagnostic(Diagnostic),
    /// `change_summary`: totals of a plan (`operation: plan`) or of an apply/destroy.
    Summary(Changes),
    /// `planned_change`: what the plan would do to one resource.
    PlannedChange(ResourceChange),
    /// `resource_drift`: an object changed outside Terraform (`delete`: it vanished).
    Drift(ResourceChange),
    ApplyStart {
        address: String,
        action: Action,
    },
    ApplyProgress {
        address: String,
        action: Action,
        elapsed: u64,
    },
    ApplyComplete {
        address: String,
        action: Action,
        elapsed: u64,
        /// The object's ID (`id_value`), when terraform gives it: what a create made.
        id: Option<String>,
    },
    ApplyErrored {
        address: String,
        action: Action,
        elapsed: u64,
    },
    /// `refresh_start`: one resource read from the cloud (a refresh); `text` is terraform's.
    Refresh {
        address: String,
        text: String,
    },
    /// The state terraform could not save anywhere, printed as its last resort (a `log`
    /// event, "Emergency state dump", carrying `state`): the only record of what it did.
    StateDump(Value),
    /// Anything else with a human message (`log`, `version`, `outputs`, provisioner output).
    Message {
        level: String,
        text: String,
    },
}

/// One resource's planned change or drift: its address and what terraform does to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceChange {
    pub address: String,
    pub action: Action,
}

/// What terraform does (or did) to one resource, as its `-json` stream names it. Reports
/// show it by that name (`"delete"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Create,
    Read,
    Update,
    Replace,
    /// For drift: the object is gone (deleted outside Terraform).
    Delete,
    NoOp,
    /// An action of a newer terraform: kept by name.
    Other(String),
}

impl Action {
    pub fn parse(name: &str) -> Self {
        match name {
            "create" => Action::Create,
            "read" => Action::Read,
            "update" => Action::Update,
            "replace" => Action::Replace,
            "delete" => Action::Delete,
            "noop" => Action::NoOp,
            other => Action::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Action::Create => "create",
            Action::Read => "read",
            Action::Update => "update",
            Action::Replace => "replace",
            Action::Delete => "delete",
            Action::NoOp => "noop",
            Action::Other(name) => name,
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub severity: String,
    pub summary: String,
    #[serde(default)]
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

impl Diagnostic {
    pub fn is_error(&self) -> bool {
        self.severity == "error"
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    #[serde(default)]
    pub add: u64,
    #[serde(default)]
    pub change: u64,
    #[serde(default)]
    pub remove: u64,
    #[serde(default)]
    pub import: u64,
    #[serde(default, skip_serializing)]
    pub operation: Operation,
}

/// Totals of several runs (the operation stays the first's).
impl std::ops::AddAssign for Changes {
    fn add_assign(&mut self, other: Changes) {
        self.add += other.add;
        self.change += other.change;
        self.remove += other.remove;
        self.import += other.import;
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    #[default]
    Plan,
    Apply,
    Destroy,
    #[serde(other)]
    Other,
}

impl Changes {
    /// Saturates: the counts are terraform's, and a garbled line must not overflow.
    pub fn total(&self) -> u64 {
        self.add.saturating_add(self.change).saturating_add(self.remove)
    }
}

#[derive(Deserialize)]
struct Raw {
    #[serde(rename = "@level", default)]
    level: String,
    #[serde(rename = "@message", default)]
    message: String,
    #[serde(rename = "type", default)]
    kind: String,
    diagnostic: Option<Diagnostic>,
    changes: Option<Changes>,
    change: Option<Hook>,
    hook: Option<Hook>,
    state: Option<Value>,
}

#[derive(Deserialize)]
struct Hook {
    resource: Option<ResourceRef>,
    #[serde(default)]
    action: String,
    #[serde(default)]
    elapsed_seconds: u64,
    #[serde(default)]
    id_value: Option<String>,
}

#[derive(Deserialize)]
struct ResourceRef {
    addr: String,
}

/// Decodes one line; `None` when it is not a JSON object of the stream (garbage).
pub fn parse_line(line: &str) -> Option<Event> {
    let raw: Raw = serde_json::from_str(line).ok()?;
    let hook = |h: Option<Hook>| h.and_then(|h| Some((h.resource?.addr, Action::parse(&h.action), h.elapsed_seconds)));
    Some(match raw.kind.as_str() {
        "diagnostic" if raw.diagnostic.is_some() => Event::Diagnostic(raw.diagnostic?),
        "change_summary" if raw.changes.is_some() => Event::Summary(raw.changes?),
        "planned_change" => hook(raw.change).map(|(address, action, _)| Event::PlannedChange(ResourceChange { address, action }))?,
        "resource_drift" => hook(raw.change).map(|(address, action, _)| Event::Drift(ResourceChange { address, action }))?,
        "apply_start" => hook(raw.hook).map(|(address, action, _)| Event::ApplyStart { address, action })?,
        "apply_progress" => {
            hook(raw.hook).map(|(address, action, elapsed)| Event::ApplyProgress { address, action, elapsed })?
        }
        "apply_complete" => {
            let id = raw.hook.as_ref().and_then(|h| h.id_value.clone());
            hook(raw.hook).map(|(address, action, elapsed)| Event::ApplyComplete { address, action, elapsed, id })?
        }
        "apply_errored" => {
            hook(raw.hook).map(|(address, action, elapsed)| Event::ApplyErrored { address, action, elapsed })?
        }
        "refresh_start" => {
            let text = raw.message;
            hook(raw.hook).map(|(address, _, _)| Event::Refresh { address, text })?
        }
        "log" if raw.state.is_some() => Event::StateDump(raw.state?),
        _ => Event::Message { level: raw.level, text: raw.message },
    })
}

/// `version -json` → the version string (`terraform_version`; OpenTofu keeps the key).
pub fn parse_version(json: &str) -> Option<String> {
    let v: Value = serde_json::from_str(json).ok()?;
    v.get("terraform_version")?.as_str().map(str::to_string)
}

/// One resource in state (`show -json`).
#[derive(Debug, Clone, PartialEq)]
pub struct StateResource {
    pub rtype: String,
    pub values: Value,
    pub sensitive: Value,
    pub tainted: bool,
}

impl StateResource {
    /// A top-level attribute as text, `(sensitive)` when the state marks it so.
    pub fn attribute(&self, key: &str) -> Option<String> {
        if self.sensitive.get(key) == Some(&Value::Bool(true)) {
            return Some("(sensitive)".into());
        }
        match self.values.get(key)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// The key attributes describe shows: `id` and every top-level attribute that looks like
    /// an address (`ip`, `private_ip`, `ipv4_address`, ...), sensitive ones masked.
    pub fn key_attributes(&self) -> BTreeMap<String, String> {
        let Some(values) = self.values.as_object() else { return BTreeMap::new() };
        values
            .keys()
            .filter(|k| *k == "id" || k.split('_').any(|w| w == "ip" || w == "ipv4" || w == "ipv6" || w == "address"))
            .filter_map(|k| Some((k.clone(), self.attribute(k)?)))
            .collect()
    }
}

/// `show -json`: managed resources by address, across child modules. No state at all gives an
/// empty map (`{"format_version": "1.0"}`).
pub fn parse_state(json: &str) -> Result<BTreeMap<String, StateResource>, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("`show -json` is not JSON: {e}"))?;
    let mut out = BTreeMap::new();
    let mut stack: Vec<&Value> = v.pointer("/values/root_module").into_iter().collect();
    while let Some(module) = stack.pop() {
        for r in module.get("resources").and_then(Value::as_array).into_iter().flatten() {
            if r.get("mode").and_then(Value::as_str) == Some("data") {
                continue;
            }
            let (Some(addr), Some(rtype)) =
                (r.get("address").and_then(Value::as_str), r.get("type").and_then(Value::as_str))
            else {
                continue;
            };
            out.insert(
                addr.to_string(),
                StateResource {
                    rtype: rtype.to_string(),
                    values: r.get("values").cloned().unwrap_or(Value::Null),
                    sensitive: r.get("sensitive_values").cloned().unwrap_or(Value::Null),
                    tainted: r.get("tainted").and_then(Value::as_bool).unwrap_or(false),
                },
            );
        }
        stack.extend(module.get("child_modules").and_then(Value::as_array).into_iter().flatten());
    }
    Ok(out)
}

/// `show -json <planfile>`: the live values of each object an import block adopts
/// (`resource_changes[].change.before` where `change.importing` is set), by address.
pub fn parse_plan_imports(json: &str) -> Result<BTreeMap<String, Value>, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("`show -json` of the plan is not JSON: {e}"))?;
    Ok(v.get("resource_changes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|rc| rc.pointer("/change/importing").is_some_and(|i| !i.is_null()))
        .filter_map(|rc| Some((rc.get("address")?.as_str()?.to_string(), rc.pointer("/change/before")?.clone())))
        .collect())
}

/// The data sources a saved plan read (`show -json PLAN`), by address: their values. They
/// are in its `prior_state` (read during the plan), root module only.
pub fn parse_plan_reads(json: &str) -> Result<BTreeMap<String, Value>, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("`show -json` of the plan is not JSON: {e}"))?;
    Ok(v.pointer("/prior_state/values/root_module/resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| r.get("mode").and_then(Value::as_str) == Some("data"))
        .filter_map(|r| Some((r.get("address")?.as_str()?.to_string(), r.get("values")?.clone())))
        .collect())
}

/// The managed resources of a state document as terraform stores it (the local state file,
/// the store's state row, `state pull`: format 4), without a terraform run: address, type,
/// each instance's `id`, and whether one is deposed, one is current, and a current one tainted.
pub fn raw_state_resources(json: &str) -> Result<Vec<crate::look::Recorded>, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("the state is not JSON: {e}"))?;
    let resources = v.get("resources").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    Ok(resources
        .iter()
        .filter(|r| r.get("mode").and_then(Value::as_str) == Some("managed"))
        .filter_map(|r| {
            let rtype = r.get("type")?.as_str()?;
            let name = r.get("name")?.as_str()?;
            let module = r.get("module").and_then(Value::as_str);
            let instances = || r.get("instances").and_then(Value::as_array).into_iter().flatten();
            let ids = instances().filter_map(|i| i.pointer("/attributes/id")?.as_str().map(str::to_string)).collect();
            let deposed = instances().any(|i| i.get("deposed").is_some());
            let current = || instances().filter(|i| i.get("deposed").is_none());
            let tainted = current().any(|i| i.get("status").and_then(Value::as_str) == Some("tainted"));
            let current = current().next().is_some();
            Some(crate::look::Recorded {
                address: module.map_or(format!("{rtype}.{name}"), |m| format!("{m}.{rtype}.{name}")),
                rtype: rtype.to_string(),
                root: module.is_none(),
                ids,
                deposed,
                current,
                tainted,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests;
