//! `destroy` and `label`, including directories written by the reference plugin.
//! Reference case IDs (`D-01`, `N-09`, ...) are those of `docs/reference/infrakit-cases.md`.

use serde_json::json;

use infrakit_tf::exit::Code;

use crate::support::{Scratch, SCOPED};

fn provision(s: &Scratch, spec: &str, extra: &[&str]) -> String {
    let mut args = vec!["provision", "--no-apply", spec];
    args.extend_from_slice(extra);
    s.run(&args).ok().stdout.trim().to_string()
}

// D-01: two instances share a global file; terminating the first keeps it, the last takes it.
#[test]
fn terminate_removes_slot_and_last_global() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", SCOPED);
    let id1 = provision(&s, &spec, &[]);
    let id2 = provision(&s, &spec, &[]);
    assert_eq!(s.files().len(), 5);
    let out = s.run(&["destroy", "--no-apply", &id1, "--yes", "--output", "json"]).ok().json();
    assert_eq!(out["destroyed"], json!([id1]));
    assert_eq!(out["reason"], "terminate");
    assert_eq!(
        out["files"],
        json!([{"name": format!("{id1}.tf.json.new"), "action": "removed"}, {"name": "default_dedicated_1.tf.json.new", "action": "removed"}])
    );
    assert_eq!(out["applied"], false);
    assert_eq!(
        s.files(),
        [
            "default_dedicated_2.tf.json.new".to_string(),
            format!("{id2}.tf.json.new"),
            "managers_global.tf.json.new".into()
        ]
    );
    let run = s.run(&["destroy", "--no-apply", &id2, "--yes"]).ok();
    assert_eq!(run.stdout, format!("{id2}\n"));
    assert!(s.files().is_empty(), "{:?}", s.files());
}

// Several IDs at once: attachments shared only among them go too.
#[test]
fn destroy_many_at_once() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", SCOPED);
    let ids: Vec<String> = (0..3).map(|_| provision(&s, &spec, &[])).collect();
    s.run(&["destroy", "--no-apply", &ids[0], &ids[2], "--yes"]).ok();
    assert_eq!(
        s.files(),
        [
            "default_dedicated_2.tf.json.new".to_string(),
            format!("{}.tf.json.new", ids[1]),
            "managers_global.tf.json.new".into()
        ]
    );
    s.run(&["destroy", "--no-apply", &ids[1], "--reason", "terminate", "--yes"]).ok();
    assert!(s.files().is_empty());
}

// D-10: a pet's rolling update keeps its slot byte-identical, and the new pet reuses it.
#[test]
fn pet_rolling_update_keeps_its_slot() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", SCOPED);
    let id1 = provision(&s, &spec, &["--logical-id", "mgr1"]);
    let slot = std::fs::read(s.dir.join("default_dedicated_mgr1.tf.json.new")).unwrap();
    s.run(&["destroy", "--no-apply", &id1, "--reason", "rolling_update", "--yes"]).ok();
    assert_eq!(s.files(), ["default_dedicated_mgr1.tf.json.new", "managers_global.tf.json.new"]);
    let id2 = provision(&s, &spec, &["--logical-id", "mgr1"]);
    assert_eq!(std::fs::read(s.dir.join("default_dedicated_mgr1.tf.json.new")).unwrap(), slot);
    let tags = &s.read(&format!("{id2}.tf.json.new"))["resource"]["aws_instance"][&id2]["tags"];
    assert_eq!(tags["infrakit.attach"], "default_dedicated_mgr1,managers_global");
}

// D-05 (SoftLayer): list tags merged, sorted and lowercased; describe filters follow.
#[test]
fn label_softlayer_tags() {
    let s = Scratch::new();
    let spec = s.write_outside(
        "spec.json",
        r#"{"Properties": {"resource": {"softlayer_virtual_guest": {"host": {"@hostname_prefix": "softlayer-hostname",
             "tags": ["terraform_demo_swarm_mgr_sl"], "user_metadata": "echo {{ var `/self/instId` }}"}}}},
            "Tags": {"label1": "value1", "label2": "value2"},
            "Init": "apt-get update -y\n\napt-get install -y software"}"#,
    );
    let id = provision(&s, &spec, &["--logical-id", "logical-id-2"]);
    let vm = s.read(&format!("{id}.tf.json.new"))["resource"]["softlayer_virtual_guest"][&id].clone();
    assert_eq!(vm["hostname"], "softlayer-hostname-logical-id-2");
    assert_eq!(vm["user_metadata"], format!("echo {id}\napt-get update -y\n\napt-get install -y software"));
    assert!(vm.get("@hostname_prefix").is_none());
    let out = s.run(&["label", "--no-apply", &id, "label1=changed1", "LABEL3=Value3", "--output", "json"]).ok().json();
    assert_eq!(out["changed"], true);
    let vm = s.read(&format!("{id}.tf.json.new"))["resource"]["softlayer_virtual_guest"][&id].clone();
    assert_eq!(
        vm["tags"],
        json!([
            "infrakit.instance.name:".to_string() + &id,
            "infrakit.logical_id:logical-id-2",
            "label1:changed1",
            "label2:value2",
            "label3:value3",
            "terraform_demo_swarm_mgr_sl"
        ])
    );
    let found = s.run(&["describe", "--tag", "label1=changed1", "--output", "json"]).ok().json();
    assert_eq!(found[0]["ID"], id.as_str());
    assert_eq!(s.run(&["describe", "--tag", "label1=value1", "--output", "json"]).ok().json(), json!([]));
    // Labelling again with the same values changes nothing.
    let again = s.run(&["label", "--no-apply", &id, "label1=changed1", "--output", "json"]).ok().json();
    assert_eq!(again["changed"], false);
}

/// Go `json.MarshalIndent(v, "  ", "  ")`, no trailing newline: how the reference wrote files.
const GO_INSTANCE: &str = "{\n    \"resource\": {\n      \"aws_instance\": {\n        \"instance-1500000000\": {\n          \"ami\": \"ami-1\",\n          \"tags\": {\n            \"infrakit.attach\": \"workers_dedicated_1,workers_global\",\n            \"infrakit.instance.name\": \"instance-1500000000\",\n            \"infrakit.logical_id\": \"w1\",\n            \"tier\": \"web\"\n          },\n          \"user_data\": \"ZWNobyBoaQ==\"\n        }\n      }\n    }\n  }";

// A directory written by the reference plugin: describe, label and destroy all work.
#[test]
fn reference_written_directory() {
    let s = Scratch::new();
    s.write("instance-1500000000.tf.json", GO_INSTANCE);
    s.write(
        "workers_dedicated_1.tf.json",
        "{\n    \"resource\": {\n      \"aws_ebs_volume\": {\n        \"workers-1-data\": {}\n      }\n    }\n  }",
    );
    s.write(
        "workers_global.tf.json",
        "{\n    \"resource\": {\n      \"aws_security_group\": {\n        \"workers-sg\": {}\n      }\n    }\n  }",
    );
    // A queued twin (the reference's `.new`) of a second instance, SoftLayer-style.
    s.write(
        "instance-1500000001.tf.json.new",
        r#"{"resource": {"softlayer_virtual_guest": {"instance-1500000001": {"tags": ["infrakit.attach:workers_global", "tier:web"]}}}}"#,
    );
    let rows = s.run(&["describe", "--output", "json"]).ok().json();
    assert_eq!(rows.as_array().unwrap().len(), 2);
    assert_eq!(rows[0]["ID"], "instance-1500000000");
    assert_eq!(rows[0]["LogicalID"], "w1");
    assert_eq!(rows[0]["status"], "pending");
    assert_eq!(rows[0]["attachments"], json!(["workers_dedicated_1", "workers_global"]));
    assert_eq!(rows[1]["status"], "queued");
    assert_eq!(rows[1]["Tags"], json!({"infrakit.attach": "workers_global", "tier": "web"}));

    s.run(&["label", "--no-apply", "instance-1500000000", "owner=ops"]).ok();
    assert_eq!(
        s.read("instance-1500000000.tf.json")["resource"]["aws_instance"]["instance-1500000000"]["tags"]["owner"],
        "ops"
    );
    // The second instance still refers to the global file: terminating the first keeps it.
    s.run(&["destroy", "--no-apply", "instance-1500000000", "--yes"]).ok();
    assert_eq!(s.files(), ["instance-1500000001.tf.json.new", "workers_global.tf.json"]);
    s.run(&["destroy", "--no-apply", "instance-1500000001", "--yes"]).ok();
    assert!(s.files().is_empty());
}

// A live file and its queued twin: destroy removes both; the attachments named by either go.
#[test]
fn destroy_removes_both_twins() {
    let s = Scratch::new();
    s.write(
        "instance-5.tf.json",
        r#"{"resource": {"aws_instance": {"instance-5": {"tags": {"infrakit.attach": "a_global"}}}}}"#,
    );
    s.write("instance-5.tf.json.new", r#"{"resource": {"aws_instance": {"instance-5": {"tags": {}}}}}"#);
    s.write("a_global.tf.json", "{}");
    let out = s.run(&["destroy", "--no-apply", "instance-5", "--yes", "--output", "json"]).ok().json();
    let removed: Vec<&str> = out["files"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(removed, ["instance-5.tf.json", "instance-5.tf.json.new", "a_global.tf.json"]);
    assert!(s.files().is_empty());
}

// A neighbour whose file cannot be read may use the global file: termination refuses rather
// than pull it from under it; a rolling update (instance file only) still works.
#[test]
fn terminate_refuses_when_a_neighbour_cannot_be_read() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", SCOPED);
    let a = provision(&s, &spec, &[]);
    let b = provision(&s, &spec, &[]);
    s.write(&format!("{a}.tf.json.new"), "{broken");
    let before = s.snapshot();
    let run = s.run(&["destroy", "--no-apply", &b, "--yes"]).code(Code::Invalid);
    s.assert_stderr(&run, snapbox::str![[r#"
error: cannot tell which files instance-[..] still uses: `[ROOT]/dir/instance-[..].tf.json.new` is not valid JSON: key must be a string at line 1 column 2
hint: fix that instance file, or destroy with --reason rolling-update (removes only the instance file)

"#]]);
    assert!(s.snapshot() == before);
    s.run(&["destroy", "--no-apply", &b, "--reason", "rolling-update", "--yes"]).ok();
}

// Files the reference wrote (Go layout) are not rewritten when their content does not change.
#[test]
fn unchanged_reference_files_stay_byte_for_byte() {
    let s = Scratch::new();
    s.write("instance-1500000000.tf.json", GO_INSTANCE);
    let before = std::fs::read(s.dir.join("instance-1500000000.tf.json")).unwrap();
    let out = s.run(&["label", "--no-apply", "instance-1500000000", "tier=web", "--output", "json"]).ok().json();
    assert_eq!(out["changed"], false);
    assert_eq!(std::fs::read(s.dir.join("instance-1500000000.tf.json")).unwrap(), before);
}
