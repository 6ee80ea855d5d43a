//! Expansion cases, most of them from `docs/reference/infrakit-cases.md` (ids in comments; "bug N"
//! is item N of §14 of `docs/reference/infrakit-behaviour.md`).

use super::*;
use serde_json::json;

fn spec(text: &str) -> Spec {
    crate::spec::parse(text, &Profiles::builtin()).unwrap_or_else(|p| panic!("{p:?}"))
}

fn run(spec: &Spec, id: u64, lid: Option<&str>, slots: &Slots) -> Expansion {
    try_run(spec, id, lid, slots).unwrap()
}

fn try_run(spec: &Spec, id: u64, lid: Option<&str>, slots: &Slots) -> Result<Expansion, String> {
    let profiles = Profiles::builtin();
    let id = InstanceId::new(id);
    let tags = BTreeMap::new();
    let lid = lid.or(spec.logical_id.as_deref());
    expand(&Request { spec, profiles: &profiles, id: &id, logical_id: lid, tags: &tags }, slots)
}

fn res<'e>(e: &'e Expansion, file: &str, rtype: &str, name: &str) -> &'e Value {
    e.files
        .get(file)
        .and_then(|d| d["resource"].get(rtype))
        .and_then(|t| t.get(name))
        .unwrap_or_else(|| panic!("no {rtype}.{name} in {file}: {:#?}", e.files))
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

const D01: &str = r#"{"Properties": {"resource": {
    "aws_instance": {"host": {"vmp1": "vmv1", "vmp2": "vmv2", "@scope": "@default"}},
    "softlayer_file_storage": {"worker_fs": {"fsp1": "fsv1", "fsp2": "fsv2", "@scope": "@dedicated"}},
    "softlayer_block_storage": {"worker_bs": {"bsp1": "bsv1", "bsp2": "bsv2", "@scope": "managers"}},
    "another-dedicated": {"another-dedicated-name": {"kded-1": "vded-1", "@scope": "@dedicated"}},
    "another-default": {"another-default-name": {"kdef-1": "vdef-1"}}}},
  "Tags": {"tag1": "val1"}}"#;

// Reference §3.14, the worked example: the same names, tags and base64 user data.
#[test]
fn worked_example() {
    let s = spec(
        r#"{"Properties": {"resource": {
           "aws_instance":       {"host": {"ami": "ami-1", "instance_type": "t2.micro"}},
           "aws_ebs_volume":     {"data": {"@scope": "@dedicated-workers", "size": 10}},
           "aws_security_group": {"sg":   {"@scope": "workers", "name": "wsg"}},
           "aws_eip":            {"ip":   {"vpc": true}}}},
         "Tags": {"infrakit.group": "workers", "infrakit.config.hash": "abc"},
         "Init": "echo hi"}"#,
    );
    let e = run(&s, 1500000000, None, &Slots::default());
    assert_eq!(e.files.keys().collect::<Vec<_>>(), ["instance-1500000000", "workers_dedicated_1", "workers_global"]);
    assert_eq!(
        e.files["instance-1500000000"],
        json!({"resource": {
            "aws_eip": {"instance-1500000000-ip": {"vpc": true}},
            "aws_instance": {"instance-1500000000": {
                "ami": "ami-1", "instance_type": "t2.micro",
                "tags": {"infrakit.attach": "workers_dedicated_1,workers_global", "infrakit.config.hash": "abc",
                         "infrakit.group": "workers", "infrakit.instance.name": "instance-1500000000"},
                "user_data": "ZWNobyBoaQ=="}}}})
    );
    // Beyond the reference: a volume that can be looked up after a cut apply carries its slot
    // and group (`workspace::lookup`).
    assert_eq!(
        e.files["workers_dedicated_1"],
        json!({"resource": {"aws_ebs_volume": {"workers-1-data": {"size": 10,
            "tags": {"infrakit.group": "workers", "infrakit.slot": "workers_dedicated_1"}}}}})
    );
    assert_eq!(e.files["workers_global"], json!({"resource": {"aws_security_group": {"workers-sg": {"name": "wsg"}}}}));

    // With a logical ID: siblings and the slot take its name, and it becomes a tag.
    let e = run(&s, 1500000000, Some("w1"), &Slots::default());
    assert!(e.files.contains_key("workers_dedicated_w1"));
    res(&e, "instance-1500000000", "aws_eip", "w1-ip");
    res(&e, "workers_dedicated_w1", "aws_ebs_volume", "workers-w1-data");
    let tags = &res(&e, "instance-1500000000", "aws_instance", "instance-1500000000")["tags"];
    assert_eq!(tags["infrakit.attach"], "workers_dedicated_w1,workers_global");
    assert_eq!(tags["infrakit.logical_id"], "w1");
}

// D-01 / E-03: mixed scopes without a logical ID; `@scope` gone everywhere.
#[test]
fn mixed_scopes_without_logical_id() {
    let e = run(&spec(D01), 1234, None, &Slots::default());
    assert_eq!(e.dedicated_key.as_deref(), Some("1"));
    assert_eq!(
        res(&e, "instance-1234", "aws_instance", "instance-1234"),
        &json!({"vmp1": "vmv1", "vmp2": "vmv2", "tags": {
            "infrakit.attach": "default_dedicated_1,managers_global", "infrakit.instance.name": "instance-1234", "tag1": "val1"}})
    );
    assert_eq!(
        res(&e, "instance-1234", "another-default", "instance-1234-another-default-name"),
        &json!({"kdef-1": "vdef-1"})
    );
    assert_eq!(
        res(&e, "default_dedicated_1", "softlayer_file_storage", "default-1-worker_fs"),
        &json!({"fsp1": "fsv1", "fsp2": "fsv2"})
    );
    res(&e, "default_dedicated_1", "another-dedicated", "default-1-another-dedicated-name");
    assert_eq!(
        res(&e, "managers_global", "softlayer_block_storage", "managers-worker_bs"),
        &json!({"bsp1": "bsv1", "bsp2": "bsv2"})
    );
    assert!(!serde_json::to_string(&e.files).unwrap().contains("@scope"));
}

// D-02: with logical IDs.
#[test]
fn mixed_scopes_with_logical_id() {
    let e = run(&spec(D01), 1, Some("mgr1"), &Slots::default());
    assert_eq!(e.files.keys().collect::<Vec<_>>(), ["default_dedicated_mgr1", "instance-1", "managers_global"]);
    res(&e, "instance-1", "another-default", "mgr1-another-default-name");
    res(&e, "default_dedicated_mgr1", "softlayer_file_storage", "default-mgr1-worker_fs");
    res(&e, "default_dedicated_mgr1", "another-dedicated", "default-mgr1-another-dedicated-name");
}

// E-01, E-02: VM only, and several default-scope resources in the instance file; no attach tag.
#[test]
fn default_scope_only() {
    let e = run(
        &spec(
            r#"{"Properties": {"resource": {"softlayer_virtual_guest": {"host": {"p1": "v1"}},
            "softlayer_file_storage": {"worker_fs": {"fsp1": "x"}}, "softlayer_block_storage": {"worker_bs": {}}}}}"#,
        ),
        1234,
        None,
        &Slots::default(),
    );
    assert_eq!(e.files.len(), 1);
    assert_eq!(e.dedicated_key, None);
    let vm = res(&e, "instance-1234", "softlayer_virtual_guest", "instance-1234");
    assert_eq!(vm["tags"], json!(["infrakit.instance.name:instance-1234"]));
    assert_eq!(vm["hostname"], "instance-1234");
    res(&e, "instance-1234", "softlayer_file_storage", "instance-1234-worker_fs");
    res(&e, "instance-1234", "softlayer_block_storage", "instance-1234-worker_bs");
}

// E-04: a named dedicated scope with a logical ID, SoftLayer list tags.
#[test]
fn named_dedicated_scope_with_logical_id() {
    let e = run(
        &spec(
            r#"{"Properties": {"resource": {"softlayer_virtual_guest": {"host": {}},
            "softlayer_file_storage": {"worker_fs": {"@scope": "@dedicated-workers"}},
            "softlayer_block_storage": {"worker_bs": {"@scope": "@dedicated-workers"}}}}}"#,
        ),
        1234,
        Some("mgr1"),
        &Slots::default(),
    );
    let vm = res(&e, "instance-1234", "softlayer_virtual_guest", "instance-1234");
    assert!(vm["tags"].as_array().unwrap().contains(&json!("infrakit.attach:workers_dedicated_mgr1")));
    res(&e, "workers_dedicated_mgr1", "softlayer_file_storage", "workers-mgr1-worker_fs");
    res(&e, "workers_dedicated_mgr1", "softlayer_block_storage", "workers-mgr1-worker_bs");
}

fn slots(existing: &[&str], attached: &[&str]) -> Slots {
    Slots {
        existing: existing.iter().map(|s| s.to_string()).collect(),
        attached: attached.iter().map(|s| s.to_string()).collect(),
        ..Slots::default()
    }
}

fn choose(scopes: &[&str], existing: &[&str], attached: &[&str]) -> String {
    choose_slot(&scopes.iter().copied().collect(), &slots(existing, attached))
}

// F-01, N-04, N-05, D-11 and the fixes of bugs 1-3.
#[test]
fn slot_choice_is_deterministic() {
    assert_eq!(choose(&["default"], &[], &[]), "1");
    // N-05: gaps are filled.
    assert_eq!(
        choose(
            &["default"],
            &["default_dedicated_1", "default_dedicated_3"],
            &["default_dedicated_1", "default_dedicated_3"]
        ),
        "2"
    );
    // N-04: the lowest orphan, always.
    assert_eq!(choose(&["default"], &["default_dedicated_2", "default_dedicated_5"], &[]), "2");
    // An orphan beats a lower free slot: a rolling update re-attaches its volume.
    assert_eq!(choose(&["w"], &["w_dedicated_2", "w_dedicated_3"], &["w_dedicated_3"]), "2");
    assert_eq!(choose(&["w"], &["w_dedicated_8", "w_dedicated_9", "w_dedicated_10"], &["w_dedicated_8"]), "9");
    // Logical-ID slots are neither candidates nor orphans (bug 3).
    assert_eq!(choose(&["w"], &["w_dedicated_mgr1"], &[]), "1");
    // Scope IDs with digits, case and `-` work (bug 2 / N-03); other scopes do not interfere.
    assert_eq!(choose(&["my-Group2"], &["my-Group2_dedicated_1"], &["my-Group2_dedicated_1"]), "2");
    assert_eq!(choose(&["a"], &["a-b_dedicated_1", "ab_dedicated_1"], &["a-b_dedicated_1", "ab_dedicated_1"]), "1");
    // One key for every dedicated scope of the spec.
    assert_eq!(choose(&["a", "b"], &["a_dedicated_1", "b_dedicated_2"], &["a_dedicated_1"]), "2");
}

// Every directory state over slots 1..=3 of two scopes, consistent or not (an instance may be
// attached to a slot whose file is gone): the choice is never attached, and is the lowest
// orphan when there is one, else the lowest slot no instance is attached to.
#[test]
fn slot_choice_is_total() {
    let scopes = ["a", "b"];
    let bases: Vec<String> = scopes.iter().flat_map(|s| (1..=3).map(move |k| format!("{s}_dedicated_{k}"))).collect();
    let subset = |mask: u32| -> Vec<&str> {
        bases.iter().enumerate().filter(|(i, _)| mask >> i & 1 == 1).map(|(_, b)| b.as_str()).collect()
    };
    for e in 0..1 << bases.len() {
        for a in 0..1 << bases.len() {
            let (existing, attached) = (subset(e), subset(a));
            let has =
                |set: &[&str], k: u64| scopes.iter().any(|s| set.contains(&format!("{s}_dedicated_{k}").as_str()));
            let got: u64 = choose(&scopes, &existing, &attached).parse().unwrap();
            let want = (1..=3)
                .find(|&k| has(&existing, k) && !has(&attached, k))
                .or_else(|| (1..).find(|&k| !has(&attached, k)))
                .unwrap();
            assert_eq!(got, want, "existing {existing:?}, attached {attached:?}");
        }
    }
}

// Keys at the edge of u64, and names that are not slots of the scope, neither panic nor hang.
#[test]
fn slot_choice_handles_odd_keys() {
    let max = format!("w_dedicated_{}", u64::MAX);
    assert_eq!(choose(&["w"], &[&max], &[&max]), "1");
    assert_eq!(choose(&["w"], &[&max], &[]), u64::MAX.to_string());
    assert_eq!(choose(&["w"], &[], &[&max, "w_dedicated_1"]), "2");
    let odd = ["w_dedicated_0", "w_dedicated_01", "w_dedicated_99999999999999999999", "w_dedicated_x", "v_dedicated_1"];
    assert_eq!(choose(&["w"], &odd, &odd), "1");
    // An instance attached to slot 1 whose file is gone: slot 1 stays its own.
    assert_eq!(choose(&["web"], &[], &["web_dedicated_1"]), "2");
}

// D-03 / D-11: a rolling update leaves an orphan; the replacement re-attaches slot 2, and its
// dedicated file is rewritten from the (new) spec.
#[test]
fn replacement_reattaches_the_orphan() {
    let s = spec(
        r#"{"Properties": {"resource": {"aws_instance": {"host": {}},
           "file_storage": {"worker_fs": {"v": "updated", "@scope": "@dedicated"}}}},
           "Init": "ID={{ var `/self/instId` }} DedicatedAttachId={{ var `/self/dedicated/attachId` }}"}"#,
    );
    let existing = ["default_dedicated_1", "default_dedicated_2", "default_dedicated_3"];
    let e = run(&s, 4, None, &slots(&existing, &["default_dedicated_1", "default_dedicated_3"]));
    let vm = res(&e, "instance-4", "aws_instance", "instance-4");
    assert_eq!(vm["tags"]["infrakit.attach"], "default_dedicated_2");
    assert_eq!(vm["user_data"], b64("ID=instance-4 DedicatedAttachId=2"));
    assert_eq!(res(&e, "default_dedicated_2", "file_storage", "default-2-worker_fs"), &json!({"v": "updated"}));
}

// D-04: template variables in every scope, SoftLayer/IBM specifics; the attach list keeps its
// case (bug 4 fixed) while the other tags are lowercased.
#[test]
fn templates_render_in_every_scope() {
    let s = spec(
        r#"{"Properties": {"resource": {
            "ibm_compute_vm_instance": {"host": {"self-instid": "{{ var `/self/instId` }}", "self-logicalid": "{{ var `/self/logicalId` }}"}},
            "softlayer_file_storage": {"worker_fs": {"nfs-vm-instid": "{{ var `/self/instId` }}", "nfs-vm-logicalid": "{{ var `/self/logicalId` }}", "@scope": "@dedicated"}},
            "softlayer_block_storage": {"worker_bs": {"bs-vm-instid": "{{ var `/self/instId` }}", "@scope": "managers"}}}},
          "Tags": {"Team": "{{ var `/self/logicalId` }}"}}"#,
    );
    let e = run(&s, 7, Some("LID1"), &Slots::default());
    let vm = res(&e, "instance-7", "ibm_compute_vm_instance", "instance-7");
    assert_eq!(
        (vm["self-instid"].as_str(), vm["self-logicalid"].as_str(), vm["hostname"].as_str()),
        (Some("instance-7"), Some("LID1"), Some("LID1"))
    );
    assert_eq!(
        vm["tags"],
        json!([
            "infrakit.attach:default_dedicated_LID1 managers_global",
            "infrakit.instance.name:instance-7",
            "infrakit.logical_id:LID1",
            "team:lid1"
        ])
    );
    assert!(vm.get("user_metadata").is_none(), "no Init, nothing injected (bug 8)");
    assert_eq!(
        res(&e, "default_dedicated_LID1", "softlayer_file_storage", "default-LID1-worker_fs"),
        &json!({"nfs-vm-instid": "instance-7", "nfs-vm-logicalid": "LID1"})
    );
    assert_eq!(
        res(&e, "managers_global", "softlayer_block_storage", "managers-worker_bs"),
        &json!({"bs-vm-instid": "instance-7"})
    );
}

// C-05, C-06, C-09, N-01: Init per VM type, appended to existing user data, base64 for AWS/DO only.
#[test]
fn init_goes_where_each_profile_says() {
    let cases = [
        ("aws_instance", "user_data", true),
        ("digitalocean_droplet", "user_data", true),
        ("softlayer_virtual_guest", "user_metadata", false),
        ("ibm_compute_vm_instance", "user_metadata", false),
        ("google_compute_instance", "metadata_startup_script", false),
    ];
    for (vm_type, key, base64) in cases {
        let plain = run(
            &spec(&format!(r#"{{"Properties": {{"resource": {{"{vm_type}": {{"h": {{}}}}}}}}, "Init": "pwd\nls"}}"#)),
            1,
            None,
            &Slots::default(),
        );
        let appended = run(
            &spec(&format!(
                r#"{{"Properties": {{"resource": {{"{vm_type}": {{"h": {{"{key}": "set\nifconfig"}}}}}}}}, "Init": "pwd\nls"}}"#
            )),
            1,
            None,
            &Slots::default(),
        );
        let enc = |s: &str| if base64 { b64(s) } else { s.to_string() };
        assert_eq!(res(&plain, "instance-1", vm_type, "instance-1")[key], enc("pwd\nls"), "{vm_type}");
        assert_eq!(
            res(&appended, "instance-1", vm_type, "instance-1")[key],
            enc("set\nifconfig\npwd\nls"),
            "{vm_type}"
        );
    }
    let az = run(
        &spec(r#"{"Properties": {"resource": {"azurerm_virtual_machine": {"h": {}}}}, "Init": "x"}"#),
        1,
        None,
        &Slots::default(),
    );
    assert_eq!(
        res(&az, "instance-1", "azurerm_virtual_machine", "instance-1")["os_profile"],
        json!({"custom_data": "x"})
    );
    // Azure's block-list form is descended into rather than skipped (bug 8).
    let az = run(
        &spec(
            r#"{"Properties": {"resource": {"azurerm_virtual_machine": {"h": {"os_profile": [{"admin": "a"}]}}}}, "Init": "x"}"#,
        ),
        1,
        None,
        &Slots::default(),
    );
    assert_eq!(
        res(&az, "instance-1", "azurerm_virtual_machine", "instance-1")["os_profile"],
        json!([{"admin": "a", "custom_data": "x"}])
    );
    let td = run(
        &spec(r#"{"Properties": {"resource": {"terraform_data": {"h": {"input": {"size": 1}}}}}, "Init": "boot"}"#),
        1,
        None,
        &Slots::default(),
    );
    assert_eq!(
        res(&td, "instance-1", "terraform_data", "instance-1"),
        &json!({"input": {"size": 1, "user_data": "boot", "tags": {"infrakit.instance.name": "instance-1"}}})
    );
}

// C-08: platform-specific updates.
#[test]
fn platform_rules() {
    let aws = r#"{"Properties": {"resource": {"aws_instance": {"h": {"private_ip": "INSTANCE_LOGICAL_ID"}}}}}"#;
    let e = run(&spec(aws), 1234, Some("10.0.0.1"), &Slots::default());
    assert_eq!(res(&e, "instance-1234", "aws_instance", "instance-1234")["private_ip"], "10.0.0.1");
    let e = run(&spec(aws), 1234, None, &Slots::default());
    assert!(res(&e, "instance-1234", "aws_instance", "instance-1234").get("private_ip").is_none());
    let az =
        r#"{"Properties": {"resource": {"azurerm_virtual_machine": {"h": {"private_ip": "INSTANCE_LOGICAL_ID"}}}}}"#;
    let e = run(&spec(az), 1234, Some("10.0.0.1"), &Slots::default());
    assert_eq!(
        res(&e, "instance-1234", "azurerm_virtual_machine", "instance-1234")["private_ip"],
        "INSTANCE_LOGICAL_ID"
    );

    let sl = |prefix: &str| {
        format!(
            r#"{{"Properties": {{"resource": {{"softlayer_virtual_guest": {{"h": {{"hostname": "old"{prefix}}}}}}}}}}}"#
        )
    };
    let host = |text: String, lid: Option<&str>| {
        let e = run(&spec(&text), 1234, lid, &Slots::default());
        let vm = res(&e, "instance-1234", "softlayer_virtual_guest", "instance-1234").clone();
        assert!(vm.get("@hostname_prefix").is_none());
        vm["hostname"].as_str().unwrap().to_string()
    };
    assert_eq!(host(sl(""), None), "instance-1234");
    assert_eq!(host(sl(""), Some("logical-id")), "logical-id");
    assert_eq!(host(sl(r#", "@hostname_prefix": "prefix""#), None), "prefix-1234");
    assert_eq!(host(sl(r#", "@hostname_prefix": "prefix""#), Some("logical-id")), "prefix-logical-id");
    assert_eq!(host(sl(r#", "@hostname_prefix": 1"#), Some("logical-id")), "logical-id");
    assert_eq!(host(sl(r#", "@hostname_prefix": "   ""#), None), "instance-1234");
}

// C-01..C-04, D-08: the name tag is added unless given; spec tags win over property tags.
#[test]
fn tag_precedence() {
    let e = run(
        &spec(
            r#"{"Properties": {"resource": {"aws_instance": {"h": {"tags": {"infrakit.instance.name": "web4", "InstancePlugin": "terraform"}}}}},
                  "Tags": {"label1": "value1"}}"#,
        ),
        2,
        Some("logical-id-2"),
        &Slots::default(),
    );
    assert_eq!(
        res(&e, "instance-2", "aws_instance", "instance-2")["tags"],
        json!({"InstancePlugin": "terraform", "label1": "value1", "infrakit.instance.name": "instance-2", "infrakit.logical_id": "logical-id-2"})
    );
    let e = run(
        &spec(
            r#"{"Properties": {"resource": {"aws_instance": {"h": {}}}}, "Tags": {"infrakit.instance.name": "existing-name", "foo": "bar"}}"#,
        ),
        2,
        None,
        &Slots::default(),
    );
    assert_eq!(
        res(&e, "instance-2", "aws_instance", "instance-2")["tags"],
        json!({"infrakit.instance.name": "existing-name", "foo": "bar"})
    );
}

#[test]
fn names_terraform_rejects_are_errors() {
    let s = spec(r#"{"Properties": {"resource": {"aws_instance": {"h": {}}, "aws_eip": {"ip": {}}}}}"#);
    let err = try_run(&s, 1, Some("logical:id-2"), &Slots::default()).unwrap_err();
    assert!(err.contains("`logical:id-2-ip`, which Terraform rejects"), "{err}");
    // A VM-only spec takes any path-safe logical ID.
    let vm_only = spec(r#"{"Properties": {"resource": {"aws_instance": {"h": {}}}}}"#);
    assert!(try_run(&vm_only, 1, Some("logical:id-2"), &Slots::default()).is_ok());
}

#[test]
fn address_collisions_are_errors() {
    let s = spec(
        r#"{"Properties": {"resource": {"aws_instance": {"h": {}}, "x": {"b-c": {"@scope": "a"}, "c": {"@scope": "a-b"}}}}}"#,
    );
    assert!(try_run(&s, 1, None, &Slots::default()).unwrap_err().contains("`x.a-b-c`"));
}

#[test]
fn undefined_template_variables_are_errors() {
    let s = spec(r#"{"Properties": {"resource": {"aws_instance": {"h": {"name": "{{ var `/self/logicalId` }}"}}}}}"#);
    let err = try_run(&s, 1, None, &Slots::default()).unwrap_err();
    assert_eq!(err, "`aws_instance.h` at `/name`: `/self/logicalId` is undefined: this instance has no logical ID (give --logical-id or LogicalID)");
}

// Two resources of one type that can be looked up, in one file, would carry the same tags:
// each also gets its own name (`infrakit.resource`), so that the look-up after a cut apply
// tells them apart. A resource alone of its type in its file (the VM) is left as the plugin
// wrote it.
#[test]
fn resources_of_one_type_in_one_file_are_told_apart_by_their_names() {
    let s = spec(
        r#"{"Properties": {"resource": {
            "aws_instance": {"vm": {"ami": "a"}},
            "aws_ebs_volume": {"logs": {"size": 1}, "data": {"size": 2}}}},
          "Tags": {"infrakit.group": "web"}}"#,
    );
    let e = run(&s, 7, None, &Slots::default());
    let vm = res(&e, "instance-7", "aws_instance", "instance-7");
    assert!(vm["tags"].get("infrakit.resource").is_none(), "{vm}");
    for name in ["instance-7-logs", "instance-7-data"] {
        let tags = &res(&e, "instance-7", "aws_ebs_volume", name)["tags"];
        assert_eq!(tags["infrakit.resource"], name, "{tags}");
        assert_eq!(tags["infrakit.instance.name"], "instance-7", "{tags}");
    }
}
