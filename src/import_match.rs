//! `import`'s pure side: reading an InfraKit group spec as an instance spec, matching
//! `--resource TYPE=ID[:NAME]` requests to resources of the spec, and keeping an adopted
//! resource's live values for the keys the spec names.
//!
//! Where comments cite the reference (the infrakit plugin, `docs/reference/`): case IDs
//! (`D-01`, `N-04`, ...) are those of `infrakit-cases.md`; "§N" is a section of
//! `infrakit-behaviour.md`, and "bug N" item N of its §14 (known bugs, fixed here).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::spec::Spec;
use crate::text::short;
use crate::group::GROUP_TAG;
use crate::tfconfig::LOGICAL_ID_TAG;


fn get_ci<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    map.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v)
}

/// An InfraKit group spec (`{"ID", "Properties": {"Allocation": {"LogicalIDs"}, "Instance":
/// {"Properties"}, "Flavor": {"Properties": {"Tags"}}}}`) becomes an instance spec with the
/// reference's tags: `infrakit.group` (the spec's ID, which must equal `--group-id` when both
/// are given), `infrakit.logical_id` and `LogicalID` from the first logical ID, plus the
/// flavor's tags. The flavor's Init is dropped: an adopted machine has already booted. Any
/// other document is returned as it is (an instance spec).
pub fn instance_spec(doc: Value, group_id: Option<&str>) -> Result<Value, String> {
    let Value::Object(top) = &doc else { return Ok(doc) };
    let Some(Value::Object(props)) = get_ci(top, "Properties") else { return Ok(doc) };
    let Some(Value::Object(instance)) = get_ci(props, "Instance") else { return Ok(doc) };
    let mut tags = Map::new();
    if let Some(Value::Object(flavor)) = get_ci(props, "Flavor") {
        if let Some(Value::Object(fp)) = get_ci(flavor, "Properties") {
            if let Some(Value::Object(ft)) = get_ci(fp, "Tags") {
                tags.extend(ft.clone());
            }
        }
    }
    let spec_id = get_ci(top, "ID").and_then(Value::as_str);
    match (spec_id, group_id) {
        (Some(s), Some(g)) if s != g => {
            return Err(format!("the group spec's ID `{}` does not match --group-id `{}`", short(s), short(g)));
        }
        (_, Some(id)) | (Some(id), None) => {
            tags.insert(GROUP_TAG.into(), Value::String(id.into()));
        }
        (None, None) => {}
    }
    let mut out = Map::new();
    let lid = get_ci(props, "Allocation")
        .and_then(|a| get_ci(a.as_object()?, "LogicalIDs"))
        .and_then(|l| l.as_array()?.first()?.as_str());
    if let Some(lid) = lid {
        tags.insert(LOGICAL_ID_TAG.into(), Value::String(lid.into()));
        out.insert("LogicalID".into(), Value::String(lid.into()));
    }
    out.insert("Properties".into(), get_ci(instance, "Properties").cloned().unwrap_or(Value::Null));
    out.insert("Tags".into(), Value::Object(tags));
    Ok(Value::Object(out))
}

/// `TYPE=ID[:NAME]` → (type, rest).
pub fn parse_request(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((t, rest)) if !t.is_empty() && !rest.is_empty() => Ok((t.to_string(), rest.to_string())),
        _ => Err(format!("expected TYPE=ID or TYPE=ID:NAME, got `{}`", short(s))),
    }
}

/// One matched request: the spec resource (index into `spec.resources`) and the cloud ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    pub index: usize,
    pub cloud_id: String,
}

/// Matches requests to spec resources. A `:NAME` suffix names the resource when its type
/// appears more than once (cloud IDs may hold colons, so the suffix counts only when it names
/// a resource of that type); one resource of a type needs no name.
pub fn match_requests(spec: &Spec, requests: &[(String, String)]) -> Result<Vec<Matched>, String> {
    let mut out: Vec<Matched> = Vec::new();
    let mut taken = BTreeSet::new();
    for (rtype, rest) in requests {
        // This request as messages quote it.
        let (request, rtype_q) = (format!("--resource {}={}", short(rtype), short(rest)), short(rtype));
        let candidates: Vec<usize> = (0..spec.resources.len()).filter(|&i| spec.resources[i].rtype == *rtype).collect();
        if candidates.is_empty() {
            return Err(format!("{request}: the spec has no resource of type `{rtype_q}`"));
        }
        let named = rest.rsplit_once(':').and_then(|(id, name)| {
            let i = candidates.iter().copied().find(|&i| spec.resources[i].name == name)?;
            Some((i, id.to_string()))
        });
        let (index, cloud_id) = match (named, candidates.as_slice()) {
            (Some(found), _) => found,
            (None, [only]) => (*only, rest.clone()),
            (None, many) => {
                let names: Vec<_> = many.iter().map(|&i| short(&spec.resources[i].name)).collect();
                return Err(format!(
                    "{request}: the spec has {} resources of type `{rtype_q}` ({}): name one, as {rtype_q}=ID:NAME",
                    many.len(),
                    names.join(", ")
                ));
            }
        };
        if cloud_id.is_empty() {
            return Err(format!("{request}: the cloud ID is empty"));
        }
        if !taken.insert(index) {
            let r = &spec.resources[index];
            return Err(format!("`{}.{}` is requested twice", short(&r.rtype), short(&r.name)));
        }
        out.push(Matched { index, cloud_id });
    }
    if !out.iter().any(|m| m.index == spec.vm) {
        let vm = spec.vm();
        return Err(format!(
            "no request for the VM `{}.{}`: import adopts a machine, give --resource {}=ID",
            short(&vm.rtype),
            short(&vm.name),
            short(&vm.rtype)
        ));
    }
    Ok(out)
}

/// Terraform's meta-arguments: configuration of the resource block, never attributes of the
/// object, so the state has no value for them and the spec's stands (a `lifecycle
/// { ignore_changes }` or a `provider` alias must survive adoption).
const META_ARGUMENTS: [&str; 7] =
    ["lifecycle", "depends_on", "provider", "provisioner", "connection", "count", "for_each"];

/// The props written for an adopted resource: for each key the spec names (less `exclude`),
/// the live value when the object has one (written literally: `tfconfig::literal_value`),
/// and the spec's own meta-arguments. Attributes the
/// object has no value for are left out, so adopting never rewrites a running machine.
pub fn adopt_props(
    spec_props: &Map<String, Value>,
    live: &Map<String, Value>,
    exclude: &[String],
) -> Map<String, Value> {
    spec_props
        .iter()
        .filter(|(k, _)| !exclude.contains(k))
        .filter_map(|(k, spec_value)| {
            // What the cloud says is data: written so that terraform reads it literally.
            let value = if META_ARGUMENTS.contains(&k.as_str()) {
                Some(spec_value.clone())
            } else {
                live.get(k).map(crate::tfconfig::literal_value)
            };
            value.filter(|v| !v.is_null()).map(|v| (k.clone(), v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profiles;
    use serde_json::json;

    // J-21: group spec → instance spec with the reference's tags.
    #[test]
    fn group_specs() {
        let group = json!({"ID": "managers", "Properties": {
            "Allocation": {"LogicalIDs": ["mgr1", "mgr2"]},
            "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": {"aws_instance": {"h": {}}}}},
            "Flavor": {"Plugin": "flavor-vanilla", "Properties": {"Init": ["echo hi"], "Tags": {"role": "mgr"}}}}});
        let spec = instance_spec(group.clone(), Some("managers")).unwrap();
        assert_eq!(
            spec,
            json!({"LogicalID": "mgr1", "Properties": {"resource": {"aws_instance": {"h": {}}}},
                   "Tags": {"infrakit.group": "managers", "infrakit.logical_id": "mgr1", "role": "mgr"}})
        );
        assert_eq!(instance_spec(group.clone(), None).unwrap()["Tags"]["infrakit.group"], "managers");
        assert_eq!(
            instance_spec(group, Some("not-managers")).unwrap_err(),
            "the group spec's ID `managers` does not match --group-id `not-managers`"
        );
        let plain = json!({"Properties": {"resource": {}}});
        assert_eq!(instance_spec(plain.clone(), None).unwrap(), plain);
    }

    fn spec() -> Spec {
        crate::spec::parse(
            r#"{"Properties": {"resource": {"aws_instance": {"host": {}}, "aws_ebs_volume": {"a": {"@scope": "@dedicated"}, "b": {}}}}}"#,
            &Profiles::builtin(),
        )
        .unwrap()
    }

    fn req(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(t, r)| (t.to_string(), r.to_string())).collect()
    }

    // J-04 and the matching rules.
    #[test]
    fn requests_match_by_type_and_name() {
        let s = spec();
        let vm = s.vm;
        let m = match_requests(&s, &req(&[("aws_instance", "i-1"), ("aws_ebs_volume", "vol-9:b")])).unwrap();
        assert_eq!(m[0], Matched { index: vm, cloud_id: "i-1".into() });
        assert_eq!(s.resources[m[1].index].name, "b");
        assert_eq!(m[1].cloud_id, "vol-9");
        // Colons in cloud IDs survive when the suffix names nothing.
        let m = match_requests(&s, &req(&[("aws_instance", "arn:aws:ec2:i-1")])).unwrap();
        assert_eq!(m[0].cloud_id, "arn:aws:ec2:i-1");
        let err = |r: &[(&str, &str)]| match_requests(&s, &req(r)).unwrap_err();
        assert!(err(&[("ibm_compute_vm_instance", "123")]).contains("no resource of type `ibm_compute_vm_instance`"));
        assert!(err(&[("aws_instance", "i-1"), ("aws_ebs_volume", "vol-1")])
            .contains("2 resources of type `aws_ebs_volume` (a, b)"));
        assert!(err(&[("aws_instance", "i-1"), ("aws_instance", "i-2")]).contains("requested twice"));
        assert!(err(&[("aws_ebs_volume", "vol-1:a")]).contains("no request for the VM"));
    }

    #[test]
    fn live_values_win_for_named_keys() {
        let lifecycle = json!({"ignore_changes": ["user_data"]});
        let spec = json!({"user_data": "new", "size": 2, "name": "x", "gone": 1, "lifecycle": lifecycle,
            "depends_on": ["terraform_data.net"]});
        let live = json!({"user_data": "old", "size": 8, "name": "x", "gone": null, "ip": "10.0.0.1"});
        let out = adopt_props(spec.as_object().unwrap(), live.as_object().unwrap(), &["size".into()]);
        assert_eq!(
            Value::Object(out),
            json!({"user_data": "old", "name": "x", "lifecycle": lifecycle, "depends_on": ["terraform_data.net"]})
        );
        let out = adopt_props(spec.as_object().unwrap(), live.as_object().unwrap(), &["lifecycle".into()]);
        assert!(!out.contains_key("lifecycle"), "a meta-argument can be excluded too");
        // What the cloud says is data: terraform must read it literally.
        let live = json!({"user_data": "${file(\"/etc/shadow\")}", "name": {"%{x}": ["${y}"]}});
        let out = adopt_props(spec.as_object().unwrap(), live.as_object().unwrap(), &[]);
        assert_eq!(out["user_data"], "$${file(\"/etc/shadow\")}");
        assert_eq!(out["name"], json!({"%%{x}": ["$${y}"]}));
    }
}
