//! Expansion: one spec and one instance ID into the documents of the files that make the
//! instance: `<ID>` (the VM and its default-scope siblings), `<scopeID>_dedicated_<key>` per
//! dedicated scope, `<scope>_global` per global scope. Pure and deterministic: what is taken
//! from the directory comes in as [`Slots`]; nothing here reads or writes files.
//!
//! Order of work (reference §3): tags, Init, decomposition and the attach tag; then templates
//! are rendered in every resource; then platform rules (AWS `private_ip`, SoftLayer hostname
//! and lowercase tags, base64 Init).
//!
//! Where comments cite the reference (the infrakit plugin, `docs/reference/`): case IDs
//! (`D-01`, `N-04`, ...) are those of `infrakit-cases.md`; "§N" is a section of
//! `infrakit-behaviour.md`, and "bug N" item N of its §14 (known bugs, fixed here).

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use serde_json::{Map, Value};

use crate::group::GROUP_TAG;
use crate::names::{self, InstanceId, Scope};
use crate::profile::Profiles;
use crate::spec::{lookup, lookup_mut, Spec};
use crate::template::{self, Vars};
use crate::text::{short, short_pointer};
use crate::tfconfig::{self, ATTACH_TAG, LOGICAL_ID_TAG, NAME_TAG};

/// What is asked for.
pub struct Request<'a> {
    pub spec: &'a Spec,
    pub profiles: &'a Profiles,
    pub id: &'a InstanceId,
    /// `--logical-id`, else the spec's `LogicalID`.
    pub logical_id: Option<&'a str>,
    /// `--tag K=V` flags, over the spec's `Tags`.
    pub tags: &'a BTreeMap<String, String>,
}

/// What the directory says about dedicated slots: which dedicated files exist (base names,
/// either suffix) and which of them an instance's `infrakit.attach` tag names.
#[derive(Debug, Default, Clone)]
pub struct Slots {
    pub existing: BTreeSet<String>,
    pub attached: BTreeSet<String>,
    /// (instance, dedicated base) for each attachment whose file exists under neither suffix:
    /// the directory is inconsistent, and the command says so. The slot stays taken.
    pub missing: Vec<(InstanceId, String)>,
    /// The slot (its key) a cattle instance takes instead of [`choose_slot`]'s: its own, when
    /// it is made again (`reconcile`'s placement after a capacity error).
    pub take: Option<String>,
}

/// The result: file base name → document.
#[derive(Debug, Clone, PartialEq)]
pub struct Expansion {
    pub files: BTreeMap<String, Value>,
    /// Where each spec resource went, in `spec.resources` order: (file base, final name).
    pub placed: Vec<(String, String)>,
    /// The dedicated key (`/self/dedicated/attachId`), when the spec has dedicated resources.
    pub dedicated_key: Option<String>,
}

/// Chooses the dedicated slot for a cattle instance: the lowest numeric slot that is orphaned
/// (its file exists, no instance is attached to it) in the spec's dedicated scopes, so that a
/// rolling update re-attaches the replaced instance's volume; else the lowest slot no instance
/// is attached to. One key serves every dedicated scope of the spec. (The reference picked a
/// random orphan, per resource, and counted logical-ID slots as candidates: bugs 1 and 3.)
///
/// Total on any directory, consistent or not: an instance attached to a slot whose file is gone
/// keeps that slot, and keys near `u64::MAX` are neither counted up to nor overflowed.
pub fn choose_slot(scope_ids: &BTreeSet<&str>, slots: &Slots) -> String {
    // The slot number of a base in one of the scopes: `1`, not `0`, `01` or a logical ID.
    let numeric = |base: &String| {
        scope_ids.iter().find_map(|s| {
            let key = base.strip_prefix(*s)?.strip_prefix("_dedicated_")?;
            key.parse::<u64>().ok().filter(|n| *n > 0 && n.to_string() == key)
        })
    };
    let taken: BTreeSet<u64> = slots.attached.iter().filter_map(numeric).collect();
    let orphan = slots.existing.iter().filter_map(numeric).filter(|k| !taken.contains(k)).min();
    // The first gap in 1, 2, 3, ...: `taken` is sorted, so slot k is free where the k-th
    // taken number is not k, or after the last.
    let free = || (1u64..).zip(&taken).find(|(k, t)| k != *t).map_or(taken.len() as u64 + 1, |(k, _)| k);
    orphan.unwrap_or_else(free).to_string()
}

/// Expands a request. Errors are user errors (a name Terraform rejects, an undefined template
/// variable, two resources with one address), each one line.
pub fn expand(req: &Request<'_>, slots: &Slots) -> Result<Expansion, String> {
    let id = req.id.to_string();
    let dedicated_key = dedicated_key(req, slots);
    let placed = place(req, &id, dedicated_key.as_deref())?;
    let where_placed: Vec<(String, String)> = placed.iter().map(|p| (p.file.clone(), p.name.clone())).collect();
    let (tags, late) = tags(req, &id, &placed);
    let vars = Vars {
        inst_id: id.clone(),
        logical_id: req.logical_id.map(tfconfig::literal),
        attach_id: dedicated_key.clone(),
    };
    let mut files: BTreeMap<String, Vec<(&str, String, Value)>> = BTreeMap::new();
    for (i, placed) in placed.into_iter().enumerate() {
        let (file, rtype, name) = (placed.file.clone(), placed.rtype, placed.name.clone());
        let props = render(req, &id, placed, i == req.spec.vm, &vars, &late)?;
        files.entry(file).or_default().push((rtype, name, Value::Object(props)));
    }
    tag_for_lookups(req, &tags, &mut files);
    let files = files
        .into_iter()
        .map(|(file, resources)| {
            (file, tfconfig::document(resources.iter().map(|(t, n, p)| (*t, n.as_str(), p.clone()))))
        })
        .collect();
    Ok(Expansion { files, placed: where_placed, dedicated_key })
}

/// The key of the instance's dedicated files: its logical ID (a pet), else a slot ([`choose_slot`]);
/// `None` when the spec has no dedicated scope.
fn dedicated_key(req: &Request<'_>, slots: &Slots) -> Option<String> {
    dedicated(req.spec, req.logical_id, slots).map(|(_, key)| key)
}

/// The spec's dedicated scopes and the key an instance of it takes (see [`dedicated_key`]).
fn dedicated<'s>(spec: &'s Spec, logical_id: Option<&str>, slots: &Slots) -> Option<(BTreeSet<&'s str>, String)> {
    let scopes: BTreeSet<&str> = spec
        .resources
        .iter()
        .filter_map(|r| match &r.scope {
            Scope::Dedicated(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    match (scopes.is_empty(), logical_id) {
        (true, _) => None,
        (false, Some(lid)) => Some((scopes, lid.to_string())),
        (false, None) => {
            let key = slots.take.clone().unwrap_or_else(|| choose_slot(&scopes, slots));
            Some((scopes, key))
        }
    }
}

/// The base names of the dedicated files an instance of `spec` (a pet for `logical_id`) would
/// have, given `slots`, as [`expand`] chooses them: one per dedicated scope, none without.
pub fn dedicated_bases(spec: &Spec, logical_id: Option<&str>, slots: &Slots) -> Vec<String> {
    dedicated(spec, logical_id, slots)
        .map(|(scopes, key)| scopes.iter().map(|s| names::dedicated_base(s, &key)).collect())
        .unwrap_or_default()
}

/// Each resource of the spec with its file and final name; refused when a name is not one
/// terraform takes, a file name would leave the directory, or two resources would share one.
fn place<'s>(req: &Request<'s>, id: &str, dedicated_key: Option<&str>) -> Result<Vec<Placed<'s>>, String> {
    let spec = req.spec;
    let mut placed: Vec<Placed<'_>> = Vec::new();
    for (i, r) in spec.resources.iter().enumerate() {
        let (file, name) = match &r.scope {
            Scope::Default if i == spec.vm => (id.to_string(), id.to_string()),
            Scope::Default => (id.to_string(), format!("{}-{}", req.logical_id.unwrap_or(id), r.name)),
            Scope::Dedicated(scope_id) => {
                let key = dedicated_key.expect("set when dedicated scopes exist");
                (names::dedicated_base(scope_id, key), format!("{scope_id}-{key}-{}", r.name))
            }
            Scope::Global(scope) => (names::global_base(scope), format!("{scope}-{}", r.name)),
        };
        if !names::is_terraform_name(&name) {
            return Err(format!(
                "resource `{}.{}` would be named `{}`, which Terraform rejects (names start with a letter or `_` and hold only letters, digits, `_` and `-`): check the logical ID and scope",
                short(&r.rtype),
                short(&r.name),
                short(&name)
            ));
        }
        names::check_path_component(&file, "file name")?;
        placed.push(Placed { file, rtype: &r.rtype, name, spec_name: &r.name, props: r.props.clone() });
    }
    let mut seen = BTreeSet::new();
    for Placed { rtype, name, .. } in &placed {
        if !seen.insert((*rtype, name.as_str())) {
            return Err(format!(
                "two resources of the spec would both be `{}.{}`: rename one",
                short(rtype),
                short(name)
            ));
        }
    }
    Ok(placed)
}

/// The VM's tags (property tags < spec Tags < --tag < the ones we own), and the part of them
/// merged late. What the command line gives (--tag, the logical ID) is data: written so that
/// terraform reads it literally (`tfconfig::literal`), and merged after the templates are
/// rendered (`{{` in a tag is text); the spec's own are the user's terraform, as written,
/// templates and all.
fn tags(req: &Request<'_>, id: &str, placed: &[Placed<'_>]) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let spec = req.spec;
    let mut late: BTreeMap<String, String> =
        req.tags.iter().map(|(k, v)| (tfconfig::literal(k), tfconfig::literal(v))).collect();
    if !spec.tags.contains_key(NAME_TAG) {
        late.entry(NAME_TAG.into()).or_insert_with(|| id.to_string());
    }
    if let Some(lid) = req.logical_id {
        late.insert(LOGICAL_ID_TAG.into(), tfconfig::literal(lid));
    }
    let attach: BTreeSet<&str> = placed.iter().map(|p| p.file.as_str()).filter(|f| *f != id).collect();
    if !attach.is_empty() {
        late.insert(ATTACH_TAG.into(), attach.into_iter().collect::<Vec<_>>().join(","));
    }
    let mut tags = spec.tags.clone();
    tags.extend(late.iter().map(|(k, v)| (k.clone(), v.clone())));
    (tags, late)
}

/// One placed resource's properties, rendered: for the VM, the spec's tags and Init merged
/// first, the templates rendered, then the `late` tags and the platform's rules.
fn render(
    req: &Request<'_>,
    id: &str,
    placed: Placed<'_>,
    is_vm: bool,
    vars: &Vars,
    late: &BTreeMap<String, String>,
) -> Result<Map<String, Value>, String> {
    let spec = req.spec;
    let profile = req.profiles.get(&spec.vm().rtype).expect("the VM's type has a profile");
    let Placed { rtype, spec_name, mut props, .. } = placed;
    if is_vm {
        tfconfig::merge_tags(&mut props, profile, &spec.tags);
        if !spec.init.is_empty() {
            // Checked by spec::parse: the slot is absent or a string.
            if let Some(slot) = lookup_mut(&mut props, &profile.init, true) {
                *slot = match slot.as_str() {
                    Some(old) => Value::String(format!("{old}\n{}", spec.init)),
                    None => Value::String(spec.init.clone()),
                };
            }
        }
    }
    let raw_init = (is_vm && profile.init_base64)
        .then(|| lookup(&props, &profile.init).ok().flatten().and_then(Value::as_str).map(str::to_string))
        .flatten();
    let mut value = Value::Object(props);
    let at = |ptr: String, e: String| {
        let at = if ptr.is_empty() { "/".to_string() } else { short_pointer(&ptr) };
        format!("`{}.{}` at `{at}`: {e}", short(rtype), short(spec_name))
    };
    template::render_value(&mut value, vars).map_err(|(ptr, e)| at(ptr, e))?;
    let Value::Object(mut props) = value else { unreachable!() };
    if let Some(raw) = raw_init {
        // A base64 Init is no terraform string once encoded: it gets the logical ID as given.
        let raw_vars = Vars { logical_id: req.logical_id.map(str::to_string), ..vars.clone() };
        let rendered = template::render_str(&raw, &raw_vars).map_err(|e| at(String::new(), e))?;
        if let Some(slot) = lookup_mut(&mut props, &profile.init, false) {
            *slot = Value::String(rendered);
        }
    }
    if is_vm {
        tfconfig::merge_tags(&mut props, profile, late);
        platform(&mut props, req, id);
    }
    Ok(props)
}

/// A type that can be looked up (after a cut apply) carries the tags that find it: its file's
/// and its group's, and its own name where another of its type shares its file.
fn tag_for_lookups(
    req: &Request<'_>,
    tags: &BTreeMap<String, String>,
    files: &mut BTreeMap<String, Vec<(&str, String, Value)>>,
) {
    for (file, resources) in files {
        let mut identity = tfconfig::identity(&names::classify(file).expect("a file of ours"));
        identity.extend(tags.get(GROUP_TAG).map(|g| (GROUP_TAG.to_string(), g.clone())));
        let mut per_type: BTreeMap<&str, usize> = BTreeMap::new();
        for (rtype, _, _) in resources.iter() {
            *per_type.entry(*rtype).or_default() += 1;
        }
        for (rtype, name, props) in resources.iter_mut() {
            let Some(path) = req.profiles.lookup(rtype).and_then(|l| l.tag_path()) else { continue };
            let mut own = identity.clone();
            if per_type[*rtype] > 1 {
                own.insert(tfconfig::RESOURCE_TAG.to_string(), name.clone());
            }
            tfconfig::add_tags(props.as_object_mut().expect("an object"), &path, &own);
        }
    }
}

/// One spec resource with its place in the output.
struct Placed<'s> {
    file: String,
    rtype: &'s str,
    name: String,
    spec_name: &'s str,
    props: Map<String, Value>,
}

/// Per-type rules on the rendered VM (reference §3.8), driven by the profile.
fn platform(props: &mut Map<String, Value>, req: &Request<'_>, id: &str) {
    let profile = req.profiles.get(&req.spec.vm().rtype).expect("VM profile");
    if profile.private_ip_placeholder && props.get("private_ip").and_then(Value::as_str) == Some("INSTANCE_LOGICAL_ID")
    {
        match req.logical_id {
            Some(lid) => props.insert("private_ip".into(), Value::String(tfconfig::literal(lid))),
            None => props.remove("private_ip"),
        };
    }
    if profile.hostname {
        let base = req.logical_id.map_or_else(|| id.to_string(), tfconfig::literal);
        let hostname = match props.remove("@hostname_prefix") {
            Some(Value::String(p)) if !p.trim_matches(' ').is_empty() => {
                format!("{p}-{}", base.replace("instance-", ""))
            }
            _ => base.to_string(),
        };
        props.insert("hostname".into(), Value::String(hostname));
    }
    if profile.lowercase_tags {
        tfconfig::lowercase_list_tags(props, profile);
    }
    if profile.init_base64 {
        if let Some(Value::String(s)) = lookup_mut(props, &profile.init, false) {
            *s = base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests;
