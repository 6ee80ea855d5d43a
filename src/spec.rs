//! The instance spec: `{"Properties": {"resource": {<type>: {<name>: {...}}}}, "Tags": {...},
//! "Init": "...", "LogicalID": "..."}` (keys matched case-insensitively, as Go's decoder does;
//! a bare `{"resource": ...}` is taken as Properties). Parsing reports every problem it finds,
//! each with its JSON pointer, so `validate` can list them all. Pure: text in, [`Spec`] out.
//!
//! Where comments cite the reference (the infrakit plugin, `docs/reference/`): case IDs
//! (`D-01`, `N-04`, ...) are those of `infrakit-cases.md`; "§N" is a section of
//! `infrakit-behaviour.md`, and "bug N" item N of its §14 (known bugs, fixed here).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::names::{self, Scope};
use crate::profile::{Profiles, TagFormat, VmProfile};
use crate::template::{self, pointer_escape};
use crate::text::{short, short_pointer};

/// One thing wrong with a spec, where it is, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// RFC 6901 JSON pointer into the spec document; empty for the whole document.
    pub pointer: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pointer.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", short_pointer(&self.pointer), self.message)
        }
    }
}

/// The keys of a resource that are infrakit-tf's, not terraform's: `@scope` on any resource,
/// `@hostname_prefix` on a SoftLayer/IBM VM (left in the file on any other type, as InfraKit did).
const META_KEYS: [&str; 2] = ["@scope", "@hostname_prefix"];

/// "unknown key `key`", with the known key it is a slip of (two edits at most, case aside), or
/// else `otherwise`.
fn unknown_key(key: &str, known: &[&str], otherwise: &str) -> String {
    let lower = key.to_ascii_lowercase();
    match known.iter().find(|k| strsim::damerau_levenshtein(&lower, &k.to_ascii_lowercase()) <= 2) {
        Some(near) => format!("unknown key `{}`: did you mean `{near}`?", short(key)),
        None => format!("unknown key `{}`: {otherwise}", short(key)),
    }
}

/// One resource of the spec, `@scope` removed.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    pub rtype: String,
    pub name: String,
    pub scope: Scope,
    pub props: Map<String, Value>,
}

/// A parsed, checked spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Sorted by (type, name): the order of the output never depends on a hash map.
    pub resources: Vec<Resource>,
    /// Index into `resources` of the VM: the one default-scope resource of a VM type.
    pub vm: usize,
    pub tags: BTreeMap<String, String>,
    pub init: String,
    pub logical_id: Option<String>,
}

impl Spec {
    pub fn vm(&self) -> &Resource {
        &self.resources[self.vm]
    }

    /// Whether provisioning needs to know which dedicated slots are taken.
    pub fn needs_slot(&self) -> bool {
        self.logical_id.is_none() && self.resources.iter().any(|r| matches!(r.scope, Scope::Dedicated(_)))
    }
}

const TOP_KEYS: [&str; 5] = ["Properties", "Tags", "Init", "LogicalID", "Attachments"];

/// Parses and checks a spec document.
pub fn parse(text: &str, profiles: &Profiles) -> Result<Spec, Vec<Problem>> {
    let doc: Value = serde_json::from_str(text)
        .map_err(|e| vec![Problem { pointer: String::new(), message: format!("not valid JSON: {e}") }])?;
    let mut p = Parser { problems: Vec::new(), profiles };
    let spec = p.document(doc);
    match spec {
        Some(spec) if p.problems.is_empty() => Ok(spec),
        _ => Err(p.problems),
    }
}

struct Parser<'a> {
    problems: Vec<Problem>,
    profiles: &'a Profiles,
}

impl Parser<'_> {
    fn problem(&mut self, pointer: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem { pointer: pointer.into(), message: message.into() });
    }

    fn document(&mut self, doc: Value) -> Option<Spec> {
        let Value::Object(top) = doc else {
            self.problem(
                "",
                "a spec must be a JSON object with `Properties` (and optionally `Tags`, `Init`, `LogicalID`)",
            );
            return None;
        };
        if top.contains_key("resource") {
            // A bare Properties document.
            return self.spec(Value::Object(top), String::new(), Map::new());
        }
        let mut fields: BTreeMap<&str, (String, Value)> = BTreeMap::new();
        for (key, value) in top {
            match TOP_KEYS.iter().find(|k| k.eq_ignore_ascii_case(&key)) {
                Some(k) => {
                    fields.insert(k, (format!("/{}", pointer_escape(&key)), value));
                }
                None => self.problem(
                    format!("/{}", pointer_escape(&key)),
                    unknown_key(&key, &TOP_KEYS, "a spec has `Properties`, `Tags`, `Init`, `LogicalID`"),
                ),
            }
        }
        let Some((ptr, props)) = fields.remove("Properties") else {
            self.problem("", "no `Properties`: a spec needs `{\"Properties\": {\"resource\": {...}}}`");
            return None;
        };
        let mut rest = Map::new();
        for (k, (_, v)) in fields {
            rest.insert(k.to_string(), v);
        }
        self.spec(props, ptr, rest)
    }

    fn spec(&mut self, props: Value, ptr: String, rest: Map<String, Value>) -> Option<Spec> {
        let tags = self.tags(rest.get("Tags"));
        let init = match rest.get("Init") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => {
                self.check_templates("/Init", &mut Value::String(s.clone()));
                s.clone()
            }
            Some(_) => {
                self.problem("/Init", "`Init` must be a string");
                String::new()
            }
        };
        let logical_id = match rest.get("LogicalID") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => match names::check_logical_id(s) {
                Ok(()) => Some(s.clone()),
                Err(e) => {
                    self.problem("/LogicalID", e);
                    None
                }
            },
            Some(_) => {
                self.problem("/LogicalID", "`LogicalID` must be a string");
                None
            }
        };
        let before = self.problems.len();
        let resources = self.resources(props, &ptr)?;
        if self.problems.len() > before {
            // A resource that could not be read may be the VM: counting VMs now would mislead.
            return None;
        }
        let vm = self.find_vm(&resources, &ptr)?;
        Some(Spec { resources, vm, tags: tags?, init, logical_id })
    }

    fn tags(&mut self, tags: Option<&Value>) -> Option<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        match tags {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (k, v) in map {
                    let ptr = format!("/Tags/{}", pointer_escape(k));
                    match v {
                        Value::String(s) => {
                            self.check_templates(&ptr, &mut v.clone());
                            out.insert(k.clone(), s.clone());
                        }
                        _ => self.problem(ptr, "tag values must be strings"),
                    }
                }
            }
            Some(_) => self.problem("/Tags", "`Tags` must be an object of strings"),
        }
        Some(out)
    }

    fn resources(&mut self, props: Value, ptr: &str) -> Option<Vec<Resource>> {
        let Value::Object(mut props) = props else {
            self.problem(ptr, "`Properties` must be an object with a `resource` section");
            return None;
        };
        if props.contains_key("type") && props.contains_key("value") {
            self.problem(
                ptr,
                "the legacy `{type, value}` form is not supported: write `{\"resource\": {\"<type>\": {\"<name>\": {...}}}}`",
            );
            return None;
        }
        let keys: Vec<String> = props.keys().filter(|k| *k != "resource").cloned().collect();
        for key in keys {
            self.problem(
                format!("{ptr}/{}", pointer_escape(&key)),
                format!(
                    "`{0}` is not supported in a spec: only `resource` is expanded (put `{0}` in your own .tf files)",
                    short(&key)
                ),
            );
        }
        let types = match props.remove("resource") {
            Some(Value::Object(types)) => types,
            None | Some(Value::Null) => {
                self.problem(
                    ptr,
                    "no `resource` section: `Properties` needs `{\"resource\": {\"<type>\": {\"<name>\": {...}}}}`",
                );
                return None;
            }
            Some(_) => {
                self.problem(format!("{ptr}/resource"), "`resource` must be an object of resource types");
                return None;
            }
        };
        let mut out = Vec::new();
        for (rtype, by_name) in types {
            let tptr = format!("{ptr}/resource/{}", pointer_escape(&rtype));
            if !names::is_terraform_name(&rtype) {
                self.problem(&tptr, format!("`{}` is not a valid resource type name", short(&rtype)));
                continue;
            }
            let Value::Object(by_name) = by_name else {
                self.problem(tptr, "a resource type must map names to objects");
                continue;
            };
            if by_name.is_empty() {
                self.problem(
                    &tptr,
                    format!("`{}` has no resources: give it at least one named resource", short(&rtype)),
                );
            }
            for (name, body) in by_name {
                let rptr = format!("{tptr}/{}", pointer_escape(&name));
                if let Some(r) = self.resource(&rtype, name, body, &rptr) {
                    out.push(r);
                }
            }
        }
        out.sort_by(|a, b| (&a.rtype, &a.name).cmp(&(&b.rtype, &b.name)));
        Some(out)
    }

    fn resource(&mut self, rtype: &str, name: String, body: Value, ptr: &str) -> Option<Resource> {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            self.problem(ptr, format!("resource name `{}` must be letters, digits, `_` or `-`", short(&name)));
            return None;
        }
        let mut body = match body {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            _ => {
                self.problem(ptr, "a resource must be a JSON object");
                return None;
            }
        };
        // `@` marks infrakit-tf's own keys; terraform has no attribute so named. One misspelt
        // would otherwise be written into the file, and `@scop` would leave the resource in the
        // default scope.
        let unknown: Vec<&String> = body.keys().filter(|k| k.starts_with('@') && !META_KEYS.contains(&k.as_str())).collect();
        if let Some(key) = unknown.first() {
            let why = unknown_key(key, &META_KEYS, "the keys infrakit-tf reads in a resource are `@scope` and `@hostname_prefix`");
            self.problem(format!("{ptr}/{}", pointer_escape(key)), why);
            return None;
        }
        let scope = match body.remove("@scope") {
            None => Scope::Default,
            Some(Value::String(s)) => match Scope::parse(&s) {
                Ok(scope) => scope,
                Err(e) => {
                    self.problem(format!("{ptr}/@scope"), e);
                    return None;
                }
            },
            Some(_) => {
                self.problem(format!("{ptr}/@scope"), "`@scope` must be a string");
                return None;
            }
        };
        let mut value = Value::Object(body);
        self.check_templates(ptr, &mut value);
        let Value::Object(props) = value else { unreachable!() };
        Some(Resource { rtype: rtype.into(), name, scope, props })
    }

    fn find_vm(&mut self, resources: &[Resource], ptr: &str) -> Option<usize> {
        let vms: Vec<usize> = (0..resources.len())
            .filter(|&i| resources[i].scope == Scope::Default && self.profiles.is_vm(&resources[i].rtype))
            .collect();
        match vms.as_slice() {
            [i] => {
                let profile = self.profiles.get(&resources[*i].rtype).expect("VM has a profile");
                let vptr = format!(
                    "{ptr}/resource/{}/{}",
                    pointer_escape(&resources[*i].rtype),
                    pointer_escape(&resources[*i].name)
                );
                self.check_vm_shape(&resources[*i].props, profile, &vptr);
                Some(*i)
            }
            [] => {
                self.problem(
                    format!("{ptr}/resource"),
                    "no VM: the spec needs one default-scope resource of a VM type (aws_instance, terraform_data, ...; declare others with --vm-type)",
                );
                None
            }
            many => {
                let list: Vec<String> = many
                    .iter()
                    .map(|&i| format!("{}.{}", short(&resources[i].rtype), short(&resources[i].name)))
                    .collect();
                self.problem(
                    format!("{ptr}/resource"),
                    format!(
                        "{} VMs ({}): a spec has exactly one; give the others an `@scope`",
                        many.len(),
                        list.join(", ")
                    ),
                );
                None
            }
        }
    }

    /// The tags and Init slots of the VM must have a shape we can merge into.
    fn check_vm_shape(&mut self, props: &Map<String, Value>, profile: &VmProfile, ptr: &str) {
        let tags_ptr = format!("{ptr}/{}", profile.tags.join("/"));
        match (lookup(props, &profile.tags), profile.tag_format) {
            (Ok(None | Some(Value::Object(_))), TagFormat::Map) => {}
            (Ok(Some(Value::Array(items))), TagFormat::List) if items.iter().all(Value::is_string) => {}
            (Ok(None), TagFormat::List) => {}
            (Ok(Some(_)), TagFormat::Map) => self.problem(tags_ptr, "VM tags must be an object of strings"),
            (Ok(Some(_)), TagFormat::List) => self.problem(tags_ptr, "VM tags must be a list of `key:value` strings"),
            (Err(at), _) => self.problem(format!("{ptr}/{at}"), "must be an object to hold the VM's tags"),
        }
        match lookup(props, &profile.init) {
            Ok(None | Some(Value::String(_))) => {}
            Ok(Some(_)) => {
                self.problem(format!("{ptr}/{}", profile.init.join("/")), "the VM's Init attribute must be a string")
            }
            Err(at) => self.problem(format!("{ptr}/{at}"), "must be an object to hold the VM's Init"),
        }
    }

    fn check_templates(&mut self, ptr: &str, value: &mut Value) {
        for (sub, message) in template::check_value(value) {
            self.problem(format!("{ptr}{sub}"), message);
        }
    }
}

/// Looks up a dotted attribute path. A block written as a one-element list (Terraform JSON's
/// block-list form, e.g. Azure's `os_profile: [{...}]`) is descended into. `Err` carries the
/// pointer of the first step that is neither absent nor an object.
pub fn lookup<'v>(props: &'v Map<String, Value>, path: &[String]) -> Result<Option<&'v Value>, String> {
    let (last, parents) = path.split_last().expect("paths are non-empty");
    let mut map = props;
    let mut at = String::new();
    for step in parents {
        at = if at.is_empty() { pointer_escape(step) } else { format!("{at}/{}", pointer_escape(step)) };
        match map.get(step) {
            None => return Ok(None),
            Some(Value::Object(m)) => map = m,
            Some(Value::Array(items)) if items.len() == 1 && items[0].is_object() => {
                map = items[0].as_object().expect("checked");
            }
            Some(_) => return Err(at),
        }
    }
    Ok(map.get(last))
}

/// The mutable twin of [`lookup`]. With `create`, missing parents become objects and a missing
/// leaf becomes `null` for the caller to fill; without, a missing step gives `None`.
pub fn lookup_mut<'v>(props: &'v mut Map<String, Value>, path: &[String], create: bool) -> Option<&'v mut Value> {
    let (last, parents) = path.split_last()?;
    let mut map = props;
    for step in parents {
        if !create && !map.contains_key(step) {
            return None;
        }
        let entry = map.entry(step.clone()).or_insert_with(|| Value::Object(Map::new()));
        let next =
            if entry.as_array().is_some_and(|a| a.len() == 1) { entry.as_array_mut()?.first_mut()? } else { entry };
        map = next.as_object_mut()?;
    }
    if create {
        Some(map.entry(last.clone()).or_insert(Value::Null))
    } else {
        map.get_mut(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(text: &str) -> Spec {
        parse(text, &Profiles::builtin()).unwrap_or_else(|p| panic!("{p:?}"))
    }

    fn problems(text: &str) -> Vec<String> {
        parse(text, &Profiles::builtin()).unwrap_err().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn parses_full_and_bare_forms() {
        let full = parse_ok(
            r#"{"properties": {"resource": {"aws_instance": {"host": {"ami": "x"}}, "aws_ebs_volume": {"d": {"@scope": "@dedicated-w"}}}},
                "tags": {"a": "b"}, "init": "echo", "LogicalID": "mgr1", "Attachments": []}"#,
        );
        assert_eq!(full.vm().rtype, "aws_instance");
        assert_eq!(full.resources[0].scope, Scope::Dedicated("w".into()));
        assert!(!full.resources[0].props.contains_key("@scope"));
        assert_eq!((full.init.as_str(), full.logical_id.as_deref()), ("echo", Some("mgr1")));
        let bare = parse_ok(r#"{"resource": {"terraform_data": {"vm": {}}}}"#);
        assert_eq!(bare.vm().name, "vm");
        assert!(!bare.needs_slot());
    }

    // B-01..B-04, A-03, N-08 and the improvements: every problem, with its location.
    #[test]
    fn reports_every_problem_with_its_location() {
        assert_eq!(problems("{{}")[0].split(':').next(), Some("not valid JSON"));
        assert!(problems(r#"{"Properties": {}}"#)[0].contains("no `resource` section"));
        assert!(problems(r#"{"Properties": {"resource": {}}}"#)[0].contains("no VM"));
        assert!(problems(r#"{"Properties": {"resource": {"aws_instance": {}}}}"#)
            .iter()
            .any(|p| p.contains("has no resources")));
        assert!(problems(r#"{"Properties": {"type": "aws_instance", "value": {}}}"#)[0].contains("legacy"));
        let many = problems(
            r#"{"Properties": {"resource": {
                "aws_instance": {"a": {"@scope": 5}, "b": {"user_data": "{{ var `/self/nope` }}"}},
                "google_compute_instance": {"c": {}},
                "x_disk": {"d": {"@scope": "../../etc"}}}},
              "Tags": {"n": 1}, "LogicalID": "../x", "Bogus": 1}"#,
        );
        let expect = [
            "/Bogus: unknown key `Bogus`",
            "/Tags/n: tag values must be strings",
            "/LogicalID: logical ID `../x` must not contain `/`",
            "/Properties/resource/aws_instance/a/@scope: `@scope` must be a string",
            "/Properties/resource/aws_instance/b/user_data: unknown template variable `/self/nope`",
            "/Properties/resource/x_disk/d/@scope: global scope `../../etc` must be letters",
        ];
        for e in expect {
            assert!(many.iter().any(|p| p.starts_with(e)), "missing {e:?} in {many:#?}");
        }
        assert_eq!(many.len(), expect.len(), "{many:#?}");
        // VMs are counted once every resource could be read.
        let two = problems(
            r#"{"Properties": {"resource": {"aws_instance": {"b": {}}, "google_compute_instance": {"c": {}}}}}"#,
        );
        // A misspelt `@scope` is named, not taken for a second VM.
        let typo = problems(r#"{"Properties": {"resource": {"aws_instance": {"a": {}, "b": {"@scop": "x"}}}}}"#);
        assert_eq!(typo, ["/Properties/resource/aws_instance/b/@scop: unknown key `@scop`: did you mean `@scope`?"]);
        assert_eq!(
            problems(r#"{"Properties": {"resource": {"aws_instance": {"a": {}}}}, "Tag": {}}"#),
            ["/Tag: unknown key `Tag`: did you mean `Tags`?"]
        );
        let odd = problems(r#"{"Properties": {"resource": {"aws_instance": {"a": {"@count": 2}}}}}"#);
        assert_eq!(
            odd,
            ["/Properties/resource/aws_instance/a/@count: unknown key `@count`: the keys infrakit-tf reads in a resource are `@scope` and `@hostname_prefix`"]
        );
        assert_eq!(two, ["/Properties/resource: 2 VMs (aws_instance.b, google_compute_instance.c): a spec has exactly one; give the others an `@scope`"]);
    }

    #[test]
    fn a_vm_type_with_another_scope_is_an_ordinary_resource() {
        let spec = parse_ok(
            r#"{"Properties": {"resource": {"terraform_data": {
                "vm": {}, "disk": {"@scope": "@dedicated"}, "nfs": {"@scope": "shared"}}}}}"#,
        );
        assert_eq!(spec.vm().name, "vm");
        assert!(spec.needs_slot());
    }

    #[test]
    fn vm_slots_must_have_a_mergeable_shape() {
        let p = problems(r#"{"Properties": {"resource": {"aws_instance": {"h": {"tags": ["a"], "user_data": 3}}}}}"#);
        assert_eq!(
            p,
            [
                "/Properties/resource/aws_instance/h/tags: VM tags must be an object of strings",
                "/Properties/resource/aws_instance/h/user_data: the VM's Init attribute must be a string"
            ]
        );
        let p = problems(r#"{"Properties": {"resource": {"terraform_data": {"h": {"input": "text"}}}}}"#);
        assert_eq!(p[0], "/Properties/resource/terraform_data/h/input: must be an object to hold the VM's tags");
    }

    #[test]
    fn unknown_scopes_are_typos() {
        let p = problems(r#"{"Properties": {"resource": {"aws_instance": {"h": {"@scope": "@Default"}}}}}"#);
        assert!(p[0].contains("unknown scope `@Default`"), "{p:?}");
    }
}
