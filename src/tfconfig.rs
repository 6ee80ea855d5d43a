//! A `.tf.json` configuration document, as infrakit-tf writes and reads its managed files:
//! `{"resource": {<type>: {<name>: {...}}}}`. Finding its VM, reading and merging VM tags by
//! profile, and the deterministic bytes we write. Pure: values in, values out. (What terraform
//! prints back, its `-json` stream and `show -json`, is `tfoutput`.)
//!
//! Where comments cite the reference (the infrakit plugin, `docs/reference/`): case IDs
//! (`D-01`, `N-04`, ...) are those of `infrakit-cases.md`; "§N" is a section of
//! `infrakit-behaviour.md`, and "bug N" item N of its §14 (known bugs, fixed here).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::profile::{Profiles, TagFormat, VmProfile};
use crate::spec::{lookup, lookup_mut};

pub const NAME_TAG: &str = "infrakit.instance.name";
pub const ATTACH_TAG: &str = "infrakit.attach";
pub const LOGICAL_ID_TAG: &str = "infrakit.logical_id";
/// On a dedicated resource that can be looked up: its slot (`<scopeID>_dedicated_<key>`).
pub const SLOT_TAG: &str = "infrakit.slot";
/// On a global resource that can be looked up: its scope.
pub const GLOBAL_TAG: &str = "infrakit.global";
/// On a resource that can be looked up and shares its file with another of its type (two
/// volumes of one instance): its name in the directory's configuration, which tells them apart.
pub const RESOURCE_TAG: &str = "infrakit.resource";

/// `text` as terraform reads it literally in a string of a `.tf.json` (JSON strings are
/// templates there: `${...}` is evaluated, `%{...}` is a directive): each `${` becomes `$${`
/// and each `%{` becomes `%%{`, terraform's escapes. For data (a value given on the command
/// line, an ID read from the cloud), never for what a spec says (the user's own terraform).
pub fn literal(text: &str) -> String {
    text.replace("${", "$${").replace("%{", "%%{")
}

/// `value` with every string in it, and every key of its objects, [`literal`]: a value read
/// from the cloud, written into a file, is data.
pub fn literal_value(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(literal(s)),
        Value::Array(items) => Value::Array(items.iter().map(literal_value).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (literal(k), literal_value(v))).collect()),
        other => other.clone(),
    }
}

/// What terraform reads a string of ours as: the escapes of [`literal`] undone, so that a
/// value written literally reads back as it was given.
pub fn unliteral(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['$', '%']) {
        let c = &rest[i..i + 1];
        out.push_str(&rest[..i]);
        // `$${` is `${`, `%%{` is `%{`: drop the first of the doubled sign.
        if rest[i + 1..].starts_with(&format!("{c}{{")) {
            rest = &rest[i + 1..];
            out.push_str(c);
            out.push('{');
            rest = &rest[2..];
        } else {
            out.push_str(c);
            rest = &rest[i + 1..];
        }
    }
    out.push_str(rest);
    out
}

/// The tags that tell which file a resource of a cloud belongs to (see `workspace::lookup`): its
/// instance's name, its dedicated slot, or its global scope.
pub fn identity(kind: &crate::names::Kind) -> BTreeMap<String, String> {
    use crate::names::{dedicated_base, Kind};
    let (key, value) = match kind {
        Kind::Instance(id) => (NAME_TAG, id.to_string()),
        Kind::Dedicated { scope_id, key } => (SLOT_TAG, dedicated_base(scope_id, key)),
        Kind::Global { scope } => (GLOBAL_TAG, scope.clone()),
    };
    BTreeMap::from([(key.to_string(), value)])
}

/// Adds `tags` to the map of tags at `path` of a resource's properties, where the spec leaves
/// room: no value there yet, or a map (a tag the spec sets itself is kept). An expression in
/// its place (`"${var.tags}"`) leaves no room: nothing is added, and the resource cannot be
/// looked up by them.
pub fn add_tags(props: &mut Map<String, Value>, path: &[String], tags: &BTreeMap<String, String>) {
    let Some(slot) = lookup_mut(props, path, true) else { return };
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    if let Some(map) = slot.as_object_mut() {
        for (k, v) in tags {
            map.entry(k.clone()).or_insert_with(|| Value::String(v.clone()));
        }
    }
}

/// The bytes of a document: sorted keys (serde_json's map is a BTreeMap), two-space pretty
/// print, trailing newline. The same value always gives the same bytes.
pub fn to_bytes(doc: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(doc).expect("a Value always serialises");
    bytes.push(b'\n');
    bytes
}

/// Builds a document from (type, name, props) triples.
pub fn document<'a>(resources: impl IntoIterator<Item = (&'a str, &'a str, Value)>) -> Value {
    let mut types = Map::new();
    for (rtype, name, props) in resources {
        let by_name = types.entry(rtype.to_string()).or_insert_with(|| Value::Object(Map::new()));
        by_name.as_object_mut().expect("built as object").insert(name.to_string(), props);
    }
    let mut doc = Map::new();
    doc.insert("resource".into(), Value::Object(types));
    Value::Object(doc)
}

/// Every resource a document declares: (type, name, body), in the document's order.
pub fn resources(doc: &Value) -> impl Iterator<Item = (&str, &str, &Value)> {
    doc.get("resource")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .flat_map(|(rtype, by_name)| by_name.as_object().into_iter().flatten().map(move |(n, body)| (rtype.as_str(), n.as_str(), body)))
}

/// Every resource address (`type.name`) a document declares.
pub fn addresses(doc: &Value) -> impl Iterator<Item = String> + '_ {
    resources(doc).map(|(rtype, name, _)| format!("{rtype}.{name}"))
}

/// The VM of an instance file: (type, name). The resource of a VM type named like the instance
/// wins; otherwise the only VM-type resource (files written by hand or by older tools). Only a
/// resource whose body is an object counts, so [`resource`] always finds the VM returned.
pub fn find_vm<'d>(doc: &'d Value, profiles: &Profiles, id: &str) -> Option<(&'d str, &'d str)> {
    let types = doc.get("resource")?.as_object()?;
    let vms: Vec<(&str, &str)> = types
        .iter()
        .filter(|(t, _)| profiles.is_vm(t))
        .filter_map(|(t, names)| Some((t, names.as_object()?)))
        .flat_map(|(t, names)| {
            names.iter().filter(|(_, body)| body.is_object()).map(move |(n, _)| (t.as_str(), n.as_str()))
        })
        .collect();
    vms.iter().find(|(_, n)| *n == id).copied().or(match vms.as_slice() {
        [only] => Some(*only),
        _ => None,
    })
}

pub fn resource<'d>(doc: &'d Value, rtype: &str, name: &str) -> Option<&'d Map<String, Value>> {
    doc.get("resource")?.get(rtype)?.get(name)?.as_object()
}

pub fn resource_mut<'d>(doc: &'d mut Value, rtype: &str, name: &str) -> Option<&'d mut Map<String, Value>> {
    doc.get_mut("resource")?.get_mut(rtype)?.get_mut(name)?.as_object_mut()
}

/// Reads a VM's tags as a map (reference §5.3): map values as strings; list entries split at
/// the first `:`; the attach list's spaces (SoftLayer form) back to commas.
pub fn read_tags(props: &Map<String, Value>, profile: &VmProfile) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    match (lookup(props, &profile.tags), profile.tag_format) {
        (Ok(Some(Value::Object(map))), _) => {
            for (k, v) in map {
                out.insert(unliteral(k), unliteral(&scalar(v)));
            }
        }
        (Ok(Some(Value::Array(items))), TagFormat::List) => {
            out.extend(list_pairs(items).map(|(k, v)| (unliteral(&k), unliteral(&v))));
        }
        _ => {}
    }
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Merges `tags` over a VM's tags (new values win), in the profile's format. Lists come out
/// sorted; the attach entry is written `infrakit.attach:a b` (no commas, as the reference).
pub fn merge_tags(props: &mut Map<String, Value>, profile: &VmProfile, tags: &BTreeMap<String, String>) {
    let Some(slot) = lookup_mut(props, &profile.tags, true) else { return };
    match profile.tag_format {
        TagFormat::Map => {
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            let map = slot.as_object_mut().expect("made an object");
            for (k, v) in tags {
                map.insert(k.clone(), Value::String(v.clone()));
            }
        }
        TagFormat::List => {
            // What was there stays as it was written (a spec's own expression included).
            let mut merged: BTreeMap<String, String> = match slot {
                Value::Array(items) => list_pairs(items).collect(),
                _ => BTreeMap::new(),
            };
            merged.extend(tags.iter().map(|(k, v)| (k.clone(), v.clone())));
            *slot = Value::Array(merged.into_iter().map(|(k, v)| Value::String(list_entry(&k, &v))).collect());
        }
    }
}

/// The `k:v` entries of a list of tags, as written (the attach entry's spaces back to commas).
fn list_pairs(items: &[Value]) -> impl Iterator<Item = (String, String)> + '_ {
    items.iter().map(|item| {
        let entry = scalar(item);
        let (k, v) = entry.split_once(':').unwrap_or((&entry, ""));
        let v = if k == ATTACH_TAG { v.replace(' ', ",") } else { v.to_string() };
        (k.to_string(), v)
    })
}

fn list_entry(k: &str, v: &str) -> String {
    match (k, v) {
        (_, "") => k.to_string(),
        (ATTACH_TAG, v) => format!("{k}:{}", v.replace(',', " ")),
        _ => format!("{k}:{v}"),
    }
}

/// Lowercases list tags (SoftLayer/IBM), except the attach list and the logical ID, which name
/// files and must keep their case for termination and re-attachment to find them (bug 4).
pub fn lowercase_list_tags(props: &mut Map<String, Value>, profile: &VmProfile) {
    if let Some(Value::Array(items)) = lookup_mut(props, &profile.tags, false) {
        for item in items.iter_mut() {
            if let Value::String(s) = item {
                let keep =
                    [ATTACH_TAG, LOGICAL_ID_TAG].iter().any(|t| s.strip_prefix(t).is_some_and(|r| r.starts_with(':')));
                if !keep {
                    *s = s.to_lowercase();
                }
            }
        }
        items.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        items.dedup();
    }
}

/// The files an instance's VM says it is attached to (`infrakit.attach`, comma-separated).
pub fn attachments(tags: &BTreeMap<String, String>) -> Vec<String> {
    tags.get(ATTACH_TAG)
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // A value written literally reads back exactly as it was given, whatever it holds.
    #[test]
    fn literal_values_round_trip() {
        assert_eq!(literal(r#"${file("/etc/hostname")}"#), r#"$${file("/etc/hostname")}"#);
        assert_eq!(literal("%{ if true }x%{ endif }"), "%%{ if true }x%%{ endif }");
        for text in ["", "plain", "${x}", "$${x}", "$$${x}", "%{x}", "%%{x}", "$", "%", "${", "a$b%c{", "$%{", "%${", "€${é}"]
        {
            assert_eq!(unliteral(&literal(text)), text, "{text:?} -> {:?}", literal(text));
        }
        assert_eq!(unliteral("$${a} %%{b} ${c}"), "${a} %{b} ${c}", "what terraform reads");
    }

    fn profiles() -> Profiles {
        Profiles::builtin()
    }

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    // I-08: tag parsing for map and list VMs; the split is at the first colon.
    #[test]
    fn reads_map_and_list_tags() {
        let p = profiles();
        let aws = json!({"tags": {"t1": "v1", "t3": "v3:extra", "n": 2, "b": true}});
        assert_eq!(
            read_tags(aws.as_object().unwrap(), p.get("aws_instance").unwrap()),
            tags(&[("t1", "v1"), ("t3", "v3:extra"), ("n", "2"), ("b", "true")])
        );
        let sl = json!({"tags": ["t1:v1", "t3:v3:extra", "bare", "infrakit.attach:a1 a2"]});
        assert_eq!(
            read_tags(sl.as_object().unwrap(), p.get("softlayer_virtual_guest").unwrap()),
            tags(&[("t1", "v1"), ("t3", "v3:extra"), ("bare", ""), (ATTACH_TAG, "a1,a2")])
        );
        let none = json!({"tags": true});
        assert!(read_tags(none.as_object().unwrap(), p.get("aws_instance").unwrap()).is_empty());
    }

    // C-13: override and attach formatting; list output is sorted (reference bug 5).
    #[test]
    fn merges_tags_in_each_format() {
        let p = profiles();
        let new = tags(&[("key", "override::val"), (ATTACH_TAG, "attach1,attach2"), (NAME_TAG, "instance-1234")]);
        let mut aws = json!({"tags": {"key": "original", "keep": "me"}}).as_object().unwrap().clone();
        merge_tags(&mut aws, p.get("aws_instance").unwrap(), &new);
        assert_eq!(
            aws["tags"],
            json!({"key": "override::val", "keep": "me", ATTACH_TAG: "attach1,attach2", NAME_TAG: "instance-1234"})
        );
        let mut sl = json!({"tags": ["key:original", "flag"]}).as_object().unwrap().clone();
        merge_tags(&mut sl, p.get("ibm_compute_vm_instance").unwrap(), &new);
        assert_eq!(
            sl["tags"],
            json!([
                "flag",
                "infrakit.attach:attach1 attach2",
                "infrakit.instance.name:instance-1234",
                "key:override::val"
            ])
        );
        // C-10: nothing to merge still creates the tag container.
        let mut empty = Map::new();
        merge_tags(&mut empty, p.get("softlayer_virtual_guest").unwrap(), &BTreeMap::new());
        assert_eq!(empty["tags"], json!([]));
        let mut td = Map::new();
        merge_tags(&mut td, p.get("terraform_data").unwrap(), &tags(&[("a", "b")]));
        assert_eq!(Value::Object(td), json!({"input": {"tags": {"a": "b"}}}));
    }

    #[test]
    fn lowercases_all_but_the_attach_list() {
        let p = profiles();
        let mut sl = json!({"tags": ["foo:BaR", "infrakit.attach:Managers_global default_dedicated_LID1"]})
            .as_object()
            .unwrap()
            .clone();
        lowercase_list_tags(&mut sl, p.get("softlayer_virtual_guest").unwrap());
        assert_eq!(sl["tags"], json!(["foo:bar", "infrakit.attach:Managers_global default_dedicated_LID1"]));
        let mut lid = json!({"tags": ["infrakit.logical_id:LID1"]}).as_object().unwrap().clone();
        lowercase_list_tags(&mut lid, p.get("softlayer_virtual_guest").unwrap());
        assert_eq!(lid["tags"], json!(["infrakit.logical_id:LID1"]));
    }

    // G-02, I-10: the VM need not be named like the instance when it is the only one.
    #[test]
    fn finds_the_vm() {
        let p = profiles();
        let doc = json!({"resource": {"softlayer_virtual_guest": {"host": {}}, "nfs": {"instance-1-x": {}}}});
        assert_eq!(find_vm(&doc, &p, "instance-1"), Some(("softlayer_virtual_guest", "host")));
        let doc = json!({"resource": {"aws_instance": {"instance-2": {}, "other": {}}}});
        assert_eq!(find_vm(&doc, &p, "instance-2"), Some(("aws_instance", "instance-2")));
        assert_eq!(find_vm(&json!({"resource": {}}), &p, "instance-1"), None);
    }

    // Found by fuzz/ (instance_file): `label` took the props of a VM whose body was not an
    // object for granted, and panicked on a hand-edited file.
    #[test]
    fn a_vm_is_a_resource_with_a_body() {
        let p = profiles();
        let doc = json!({"resource": {"azurerm_virtual_machine": {"instance-1": "instance-0"}}});
        assert_eq!(find_vm(&doc, &p, "instance-1"), None);
        let doc = json!({"resource": {"aws_instance": {"instance-1": null, "host": {"tags": {}}}}});
        assert_eq!(find_vm(&doc, &p, "instance-1"), Some(("aws_instance", "host")));
        assert!(resource(&doc, "aws_instance", "host").is_some());
    }

    #[test]
    fn bytes_are_sorted_pretty_and_end_in_newline() {
        let doc = document([("b", "y", json!({"z": 1, "a": [2, 1]})), ("a", "x", json!({}))]);
        let text = String::from_utf8(to_bytes(&doc)).unwrap();
        assert_eq!(
            text,
            "{\n  \"resource\": {\n    \"a\": {\n      \"x\": {}\n    },\n    \"b\": {\n      \"y\": {\n        \"a\": [\n          2,\n          1\n        ],\n        \"z\": 1\n      }\n    }\n  }\n}\n"
        );
    }
}
