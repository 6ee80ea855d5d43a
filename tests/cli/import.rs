//! `import`: adopting objects that already exist in the (fake) cloud.

use serde_json::{json, Value};

use crate::cloud::Cloud;

/// An InfraKit group spec for managers: a VM and a dedicated data volume.
const MANAGERS: &str = r##"{"ID": "managers", "Properties": {
    "Allocation": {"LogicalIDs": ["mgr1", "mgr2"]},
    "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": {
        "fakecloud_instance": {"vm": {"name": "manager", "user_data": "#!/bin/sh\necho new init", "tags": {"role": "manager"}}},
        "fakecloud_volume": {"data": {"@scope": "@dedicated", "size": 10}}}}},
    "Flavor": {"Plugin": "flavor-vanilla", "Properties": {"Init": ["echo never run on an adopted machine"], "Tags": {"tier": "control"}}}}}"##;

/// The first manager, made by hand before any automation: a machine and its volume.
fn hand_made(c: &Cloud) {
    let write = |id: &str, v: Value| {
        infrakit_tf::fsio::write_atomic(
            &c.cloud.join(format!("{id}.json")),
            v.to_string().as_bytes(),
            infrakit_tf::fsio::Mode::Public,
        )
        .unwrap()
    };
    write(
        "i-0000abcd",
        json!({"type": "fakecloud_instance", "id": "i-0000abcd", "ip": "10.0.9.9", "name": "manager",
        "tags": {"owner": "ops"}, "user_data": "#!/bin/sh\necho booted by hand"}),
    );
    write("vol-0000beef", json!({"type": "fakecloud_volume", "id": "vol-0000beef", "size": 20, "tags": {}}));
}

fn import(c: &Cloud, extra: &[&str]) -> crate::support::Run {
    let spec = c.s.write_outside("managers.json", MANAGERS);
    let url = format!("file://{spec}");
    let mut args =
        vec!["import", url.as_str(), "--group-id", "managers", "--resource", "fakecloud_instance=i-0000abcd"];
    args.extend_from_slice(extra);
    c.run(&args)
}

#[test]
fn adopts_a_hand_made_manager_and_its_volume() {
    let c = Cloud::new();
    hand_made(&c);
    let out = import(&c, &["--resource", "fakecloud_volume=vol-0000beef", "--output", "json"]).ok().json();
    let id = out["ID"].as_str().unwrap().to_string();
    assert_eq!((out["status"].as_str(), out["LogicalID"].as_str()), (Some("imported"), Some("mgr1")), "{out}");
    assert_eq!(out["created"], json!([]), "everything of the spec was adopted");
    assert_eq!(out["imported"][0]["file"], format!("{id}.tf.json"), "the live name: {out}");

    // In state under the new instance's name, with the original cloud IDs; nothing re-created.
    let state = c.state();
    assert_eq!(state[&format!("fakecloud_instance.{id}")], "i-0000abcd");
    assert_eq!(state["fakecloud_volume.default-mgr1-data"], "vol-0000beef", "the volume went into the pet's slot");
    let objects = c.objects();
    assert_eq!(objects.len(), 2, "no new object: {objects:?}");
    let vm = &objects["i-0000abcd"];
    assert_eq!(vm["user_data"], "#!/bin/sh\necho booted by hand", "no Init injected, the machine not replaced");
    assert_eq!(vm["ip"], "10.0.9.9");
    assert_eq!(objects["vol-0000beef"]["size"], 20, "live values kept for the keys the spec names");
    for (k, v) in
        [("owner", "ops"), ("infrakit.group", "managers"), ("infrakit.logical_id", "mgr1"), ("tier", "control")]
    {
        assert_eq!(vm["tags"][k], v, "tag {k}: {vm}");
    }
    assert_eq!(vm["tags"]["infrakit.instance.name"], id.as_str());
    assert_eq!(vm["tags"]["infrakit.attach"], "default_dedicated_mgr1");
    assert!(!c.s.files().iter().any(|f| f.contains("import")), "the import blocks are gone: {:?}", c.s.files());

    // describe lists it; a reconcile afterwards changes nothing and replaces nothing.
    let rows = c.describe();
    assert_eq!(
        (rows.len(), rows[0]["status"].as_str(), rows[0]["LogicalID"].as_str()),
        (1, Some("created"), Some("mgr1"))
    );
    let out = c.run(&["reconcile", "--output", "json"]).ok().json();
    assert_eq!(out["destroyed"], 0, "{out}");
    assert_eq!(c.state()[&format!("fakecloud_instance.{id}")], "i-0000abcd");

    // A second identical import is a no-op.
    let before = (c.s.snapshot(), c.objects());
    let again = import(&c, &["--resource", "fakecloud_volume=vol-0000beef", "--output", "json"]).ok().json();
    assert_eq!((again["status"].as_str(), again["ID"].as_str()), (Some("already-imported"), Some(id.as_str())));
    assert!((c.s.snapshot(), c.objects()) == before, "a repeated import changed something");
}

// A resource of the spec that is not requested is created, as a provision would, and the
// report says so.
#[test]
fn unrequested_resources_are_created_and_said() {
    let c = Cloud::new();
    hand_made(&c);
    let out = import(&c, &["--output", "json"]).ok().json();
    assert_eq!(out["created"], json!(["fakecloud_volume.default-mgr1-data"]), "{out}");
    assert_eq!(c.objects().len(), 3, "the hand-made two, plus the slot's new volume");
    assert_eq!(c.objects()["vol-0000beef"]["tags"], json!({}), "the unrequested hand-made volume is left alone");
}

#[test]
fn a_wrong_cloud_id_leaves_nothing_behind() {
    let c = Cloud::new();
    hand_made(&c);
    c.run(&["reconcile"]).ok(); // initialise the directory, as a live group would be
    let spec = c.s.write_outside("managers.json", MANAGERS);
    let before = (c.s.snapshot(), c.objects(), c.state());
    let run = c.run(&["import", &spec, "--resource", "fakecloud_instance=i-nothere"]);
    assert_eq!(run.code, 7, "{run:#?}");
    assert!(run.stderr.contains("fakecloud: no object i-nothere"), "{run:#?}");
    assert!((c.s.snapshot(), c.objects(), c.state()) == before, "a failed import left something behind");
}

#[test]
fn bad_requests_are_clear() {
    let c = Cloud::new();
    let run = import(&c, &["--group-id", "workers"]);
    assert_eq!(run.code, 2, "--group-id twice is a usage error: {run:#?}");
    let spec = c.s.write_outside("managers.json", MANAGERS);
    let run = c.run(&["import", &spec, "--group-id", "workers", "--resource", "fakecloud_instance=i-1"]).code(3);
    assert!(
        run.error_lines()[0].contains("the group spec's ID `managers` does not match --group-id `workers`"),
        "{run:#?}"
    );
    let run = c.run(&["import", &spec, "--resource", "fakecloud_disk=d-1"]).code(3);
    assert!(run.error_lines()[0].contains("the spec has no resource of type `fakecloud_disk`"), "{run:#?}");
    let run = c.run(&["import", &spec, "--resource", "fakecloud_volume=vol-1"]).code(3);
    assert!(run.error_lines()[0].contains("no request for the VM"), "{run:#?}");
    let run = c.run(&["import", &spec, "--resource", "nonsense"]).code(2);
    assert!(run.error_lines()[0].contains("expected TYPE=ID or TYPE=ID:NAME"), "{run:#?}");
}

// A failure during the apply (the unrequested volume cannot be created): what the import wrote
// is removed, in files and in state, and the adopted machine is left running, neither
// destroyed nor replaced (tags the apply already set on it stay: see README).
#[test]
fn a_failed_apply_rolls_back() {
    let c = Cloud::new();
    hand_made(&c);
    c.run(&["reconcile"]).ok();
    let spec = c.s.write_outside("managers.json", MANAGERS);
    infrakit_tf::fsio::write_atomic(&c.cloud.join("fail-create"), b"", infrakit_tf::fsio::Mode::Public).unwrap();
    let before = (c.s.snapshot(), c.objects(), c.state());
    let run = c.run(&["import", &spec, "--resource", "fakecloud_instance=i-0000abcd"]);
    assert_eq!(run.code, 7, "{run:#?}");
    assert!(run.error_lines()[0].contains("import of instance-"), "{run:#?}");
    assert!(run.stderr.contains("create refused"), "{run:#?}");
    // Terraform's own bookkeeping (the state file, the backup `state rm` makes) aside, and the
    // remembered last ID: the state's content is compared below.
    let ours = |p: &std::path::PathBuf| {
        let name = p.file_name().unwrap().to_string_lossy();
        !name.starts_with("terraform.tfstate") && name != ".infrakit-tf-last-id"
    };
    let mut after = c.s.snapshot();
    after.retain(|p, _| ours(p));
    let mut expected = before.0.clone();
    expected.retain(|p, _| ours(p));
    let keys =
        |m: &std::collections::BTreeMap<std::path::PathBuf, (Vec<u8>, u32)>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&after), keys(&expected), "files");
    assert_eq!(c.state(), before.2, "state");
    let (now, then) = (&c.objects()["i-0000abcd"], &before.1["i-0000abcd"]);
    for key in ["id", "ip", "user_data", "name"] {
        assert_eq!(now[key], then[key], "the adopted machine was replaced or changed: {key}");
    }
    assert_eq!(c.objects().len(), 2, "nothing the failed apply created is left");
}

#[test]
fn dry_run_changes_nothing() {
    let c = Cloud::new();
    hand_made(&c);
    let spec = c.s.write_outside("managers.json", MANAGERS);
    let before = (c.s.snapshot(), c.objects());
    let out = c
        .run(&["import", &spec, "--resource", "fakecloud_instance=i-0000abcd", "--dry-run", "--output", "json"])
        .ok()
        .json();
    assert_eq!(out["status"], "would-import");
    assert_eq!(out["imported"][0]["cloud_id"], "i-0000abcd");
    assert_eq!(out["created"], json!(["fakecloud_volume.default-mgr1-data"]));
    assert_eq!(out["terraform"]["added"], 1, "{out}");
    assert!((c.s.snapshot(), c.objects()) == before);
}
