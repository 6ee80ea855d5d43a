//! `import`: adopting objects that already exist in the (fake) cloud.

use serde_json::json;

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;
use crate::support::specs::{hand_made, MANAGERS};

fn import(c: &Cloud, extra: &[&str]) -> crate::support::Run {
    import_spec(c, MANAGERS, extra)
}

/// `import` with another group spec.
fn import_spec(c: &Cloud, spec: &str, extra: &[&str]) -> crate::support::Run {
    let spec = c.s.write_outside("managers.json", spec);
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

// `--exclude-prop` leaves a key out of the adopted resource, and the spec's meta-arguments
// (here `lifecycle { ignore_changes }`) survive adoption: together they keep the hand-made
// name, which the excluded key alone would have cleared.
#[test]
fn excluded_props_stay_out_and_lifecycle_survives() {
    let c = Cloud::new();
    hand_made(&c);
    let ignoring = MANAGERS.replace(
        r#""tags": {"role": "manager"}}"#,
        r#""tags": {"role": "manager"}, "lifecycle": {"ignore_changes": ["name"]}}"#,
    );
    assert_ne!(ignoring, MANAGERS);
    let out = import_spec(&c, &ignoring, &["--exclude-prop", "name", "--output", "json"]).ok().json();
    let id = out["ID"].as_str().unwrap();
    let vm = &c.s.read(&format!("{id}.tf.json"))["resource"]["fakecloud_instance"][id];
    assert!(vm.get("name").is_none(), "the excluded key is not written: {vm}");
    assert_eq!(vm["lifecycle"], json!({"ignore_changes": ["name"]}), "{vm}");
    let machine = &c.objects()["i-0000abcd"];
    assert_eq!(machine["name"], "manager", "the hand-made name is kept: {machine}");
    assert_eq!(machine["tags"]["infrakit.instance.name"], id);
    let out = c.run(&["reconcile", "--check", "--output", "json"]).ok().json();
    assert_eq!(out["pending"], false, "nothing left to converge: {out}");
}

#[test]
fn a_wrong_cloud_id_leaves_nothing_behind() {
    let c = Cloud::new();
    hand_made(&c);
    c.run(&["reconcile"]).ok(); // initialise the directory, as a live group would be
    let spec = c.s.write_outside("managers.json", MANAGERS);
    let before = (c.s.snapshot(), c.objects(), c.state());
    let run = c.run(&["import", &spec, "--resource", "fakecloud_instance=i-nothere"]);
    assert!(run.is(Code::TerraformFailed), "{run:#?}");
    c.s.assert_stderr(&run, snapbox::str![[r#"
[TIME] plan: 1 to add, 0 to change, 0 to destroy
[TIME] terraform error: fakecloud: no object i-nothere
error: `terraform plan -json -input=false -refresh=false -lock=false -detailed-exitcode -out=[..]/.infrakit-tf-import.plan` failed (exit 1): fakecloud: no object i-nothere

"#]]);
    assert!((c.s.snapshot(), c.objects(), c.state()) == before, "a failed import left something behind");
}

#[test]
fn bad_requests_are_clear() {
    let c = Cloud::new();
    let run = import(&c, &["--group-id", "workers"]);
    assert!(run.is(Code::Usage), "--group-id twice is a usage error: {run:#?}");
    let spec = c.s.write_outside("managers.json", MANAGERS);
    let run =
        c.run(&["import", &spec, "--group-id", "workers", "--resource", "fakecloud_instance=i-1"]).code(Code::Invalid);
    c.s.assert_stderr(
        &run,
        snapbox::str![[r#"
error: the group spec's ID `managers` does not match --group-id `workers`

"#]],
    );
    let run = c.run(&["import", &spec, "--resource", "fakecloud_disk=d-1"]).code(Code::Invalid);
    c.s.assert_stderr(
        &run,
        snapbox::str![[r#"
error: --resource fakecloud_disk=d-1: the spec has no resource of type `fakecloud_disk`

"#]],
    );
    let run = c.run(&["import", &spec, "--resource", "fakecloud_volume=vol-1"]).code(Code::Invalid);
    c.s.assert_stderr(
        &run,
        snapbox::str![[r#"
error: no request for the VM `fakecloud_instance.vm`: import adopts a machine, give --resource fakecloud_instance=ID

"#]],
    );
    let run = c.run(&["import", &spec, "--resource", "nonsense"]).code(Code::Usage);
    c.s.assert_stderr(
        &run,
        snapbox::str![[r#"
error: invalid value 'nonsense' for '--resource <TYPE=ID[:NAME]>': expected TYPE=ID or TYPE=ID:NAME, got `nonsense`

For more information, try '--help'.

"#]],
    );
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
    std::fs::write(c.cloud.join("fail-create"), b"").unwrap();
    let before = (c.s.snapshot(), c.objects(), c.state());
    let run = c.run(&["import", &spec, "--resource", "fakecloud_instance=i-0000abcd"]);
    assert!(run.is(Code::TerraformFailed), "{run:#?}");
    c.s.assert_stderr(&run, snapbox::str![[r#"
[TIME] plan: 2 to add, 0 to change, 1 to destroy
running terraform init (first use, new provider or changed configuration)
[TIME] plan: 1 to add, 1 to change, 0 to destroy
...
[TIME] terraform error: fakecloud: create refused (fail-create is set)
  at fakecloud_volume.default-mgr1-data
  remove [ROOT]/cloud/fail-create to allow creates again
warning: terraform apply failed while creating fakecloud_volume.default-mgr1-data: the machines it was creating may exist in no state; they are looked up by their tags before anything applies again
[TIME] plan: 0 to add, 0 to change, 0 to destroy
an apply was cut short (terraform apply failed while creating fakecloud_volume.default-mgr1-data): looking up the machines it may have made
error: import of instance-[..] failed; what it wrote was removed: `terraform apply -auto-approve -input=false -json -refresh=false` failed (exit 1): fakecloud: create refused (fail-create is set): remove [ROOT]/cloud/fail-create to allow creates again (at fakecloud_volume.default-mgr1-data)

"#]]);
    // Terraform's own bookkeeping (`.terraform`, the state file, the backup `state rm` makes)
    // aside, with our record of the state's serial and the remembered last ID: the state's
    // content is compared below.
    // The cloud's objects are compared below: the adopted machine keeps tags the apply set.
    let ours = |p: &std::path::PathBuf| {
        let name = p.file_name().unwrap().to_string_lossy();
        p.starts_with(&c.s.dir)
            && !p.starts_with(c.s.dir.join(".terraform"))
            && !name.starts_with("terraform.tfstate")
            && name != ".infrakit-tf-last-id"
            && name != ".infrakit-tf-state.json"
    };
    let mut after = c.s.snapshot();
    after.retain(|p, _| ours(p));
    let mut expected = before.0.clone();
    expected.retain(|p, _| ours(p));
    let differ: Vec<_> = after.keys().chain(expected.keys()).filter(|p| after.get(*p) != expected.get(*p)).collect();
    assert!(differ.is_empty(), "files changed by the failed import: {differ:?}");
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

// An import killed mid-apply (with its terraform) leaves its files and its import blocks: a
// second import is refused until `reconcile` finishes the first, which adopts the machine
// rather than create a second one.
#[test]
fn a_crashed_import_is_finished_by_reconcile() {
    let c = Cloud::new();
    hand_made(&c);
    c.run(&["reconcile"]).ok();
    c.delay_creates(30_000); // the unrequested volume's create hangs
    let spec = c.s.write_outside("managers.json", MANAGERS);
    c.kill_during(&["import", &spec, "--resource", "fakecloud_instance=i-0000abcd"], "creating fakecloud_volume");
    c.delay_creates(0);
    assert!(c.s.files().contains(&"infrakit-tf-import.tf.json".to_string()), "{:?}", c.s.files());

    // The killed run's record of its terraform is dropped by the next run that takes the lock
    // (that terraform is dead), and kept as the record that an apply was cut short (so that
    // the run that applies next looks up what it made): that is the only change the refused
    // import makes.
    let running = c.s.dir.join(".infrakit-tf-terraform.json");
    assert!(running.exists(), "the killed run recorded its terraform");
    let mut before = c.s.snapshot();
    before.remove(&running);
    let run = c.run(&["import", &spec, "--resource", "fakecloud_instance=i-0000abcd"]).code(Code::Invalid);
    // The killed terraform may still be on its way out: then the import first says it waits.
    c.s.assert_stderr(
        &run,
        snapbox::str![[r#"
...
error: a previous import did not finish: `infrakit-tf-import.tf.json` is still in the directory
hint: run `infrakit-tf reconcile` to finish it (it adopts what that import wrote), then import again

"#]],
    );
    let mut after = c.s.snapshot();
    assert!(after.remove(&c.s.dir.join(".infrakit-tf-unsettled")).is_some(), "the cut apply is remembered");
    assert!(after == before, "the refused import changed something");

    let out = c.run(&["reconcile", "--output", "json"]).ok().json();
    assert!(out["applied"].as_bool().unwrap(), "{out}");
    let rows = c.describe();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let id = rows[0]["ID"].as_str().unwrap();
    assert_eq!(c.state()[&format!("fakecloud_instance.{id}")], "i-0000abcd", "adopted, not re-created");
    let vms = c.objects().values().filter(|o| o["type"] == "fakecloud_instance").count();
    assert_eq!(vms, 1, "no second machine");
    assert!(!c.s.files().contains(&"infrakit-tf-import.tf.json".to_string()), "the import blocks are gone");
    c.run(&["reconcile", "--check"]).ok();
}

// The logical ID a group spec gives (its first) is taken: a second machine is not adopted
// under it.
#[test]
fn a_logical_id_in_use_is_refused() {
    let c = Cloud::new();
    hand_made(&c);
    import(&c, &[]).ok();
    let mut second = c.objects()["i-0000abcd"].clone();
    second["id"] = json!("i-0000f00d");
    std::fs::write(c.cloud.join("i-0000f00d.json"), second.to_string().as_bytes()).unwrap();
    let before = (c.s.snapshot(), c.state());
    let spec = c.s.write_outside("managers.json", MANAGERS);
    let run = c.run(&["import", &spec, "--resource", "fakecloud_instance=i-0000f00d"]).code(Code::Invalid);
    c.s.assert_stderr(
        &run,
        snapbox::str![[r#"
error: logical ID `mgr1` is already used by instance-[..]
hint: destroy instance-[..] first (a rolling update keeps its slot), or pick another logical ID

"#]],
    );
    assert!((c.s.snapshot(), c.state()) == before);
}

/// A cattle spec (no logical ID): a VM and a dedicated data volume.
const WORKERS: &str = r##"{"Properties": {"resource": {
    "fakecloud_instance": {"vm": {"name": "worker"}},
    "fakecloud_volume": {"data": {"@scope": "@dedicated", "size": 10}}}},
  "Tags": {"infrakit.group": "workers"}}"##;

// An orphaned slot (left by a rolling update) still holds its volume: an adopted volume gets a
// fresh slot, and the orphan keeps its own.
#[test]
fn an_adopted_volume_never_takes_an_orphaned_slot() {
    let c = Cloud::new();
    let spec = c.s.write_outside("workers.json", WORKERS);
    let first = c.run(&["provision", &spec]).ok().stdout.trim().to_string();
    c.run(&["destroy", &first, "--reason", "rolling-update", "--yes"]).ok();
    let orphan = c.state()["fakecloud_volume.default-1-data"].clone();
    hand_made(&c);
    let out = c
        .run(&[
            "import",
            &spec,
            "--resource",
            "fakecloud_instance=i-0000abcd",
            "--resource",
            "fakecloud_volume=vol-0000beef",
            "--output",
            "json",
        ])
        .ok()
        .json();
    assert_eq!(out["imported"][1]["address"], "fakecloud_volume.default-2-data", "{out}");
    let state = c.state();
    assert_eq!(state["fakecloud_volume.default-2-data"], "vol-0000beef");
    assert_eq!(state["fakecloud_volume.default-1-data"], orphan, "the orphan's volume is untouched");
}

// When the rollback cannot forget an adopted machine (`state rm` fails: injected with a
// wrapper around the real terraform), removing its file would have the next apply destroy
// it. So the files and the import blocks stay, and `reconcile` finishes the import.
#[test]
fn a_rollback_that_cannot_forget_keeps_the_machine() {
    let c = Cloud::new();
    hand_made(&c);
    c.run(&["reconcile"]).ok();
    let wrapper = c.s.root.path().join("terraform-no-state-rm");
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = state ]; then echo 'state rm refused' >&2; exit 1; fi\nexec '{}' \"$@\"\n",
        crate::support::terraform::terraform_program().display()
    );
    crate::support::write_executable(&wrapper, &script);
    std::fs::write(c.cloud.join("fail-create"), b"").unwrap();

    let spec = c.s.write_outside("managers.json", MANAGERS);
    let tf = wrapper.to_str().unwrap();
    let run = c
        .run(&["import", &spec, "--resource", "fakecloud_instance=i-0000abcd", "--terraform", tf])
        .code(Code::TerraformFailed);
    c.s.assert_stderr(&run, snapbox::str![[r#"
[TIME] plan: 2 to add, 0 to change, 1 to destroy
running terraform init (first use, new provider or changed configuration)
[TIME] plan: 1 to add, 1 to change, 0 to destroy
...
[TIME] terraform error: fakecloud: create refused (fail-create is set)
  at fakecloud_volume.default-mgr1-data
  remove [ROOT]/cloud/fail-create to allow creates again
warning: terraform apply failed while creating fakecloud_volume.default-mgr1-data: the machines it was creating may exist in no state; they are looked up by their tags before anything applies again
warning: rollback: could not forget `fakecloud_instance.instance-[..]`: `terraform-no-state-rm state rm -no-color fakecloud_instance.instance-[..]` failed (exit 1): state rm refused
warning: rollback stopped: the imported files are kept so that nothing adopted is destroyed; run `infrakit-tf reconcile` to finish the import
error: import of instance-[..] failed; it could not be undone (see the warnings): `terraform-no-state-rm apply -auto-approve -input=false -json -refresh=false` failed (exit 1): fakecloud: create refused (fail-create is set): remove [ROOT]/cloud/fail-create to allow creates again (at fakecloud_volume.default-mgr1-data)

"#]]);
    let id = c.describe()[0]["ID"].as_str().unwrap().to_string();
    assert_eq!(c.state()[&format!("fakecloud_instance.{id}")], "i-0000abcd", "still adopted");
    assert!(c.s.files().contains(&"infrakit-tf-import.tf.json".to_string()));

    std::fs::remove_file(c.cloud.join("fail-create")).unwrap();
    c.run(&["reconcile"]).ok();
    assert_eq!(c.state()[&format!("fakecloud_instance.{id}")], "i-0000abcd", "never destroyed");
    assert_eq!(c.objects()["i-0000abcd"]["ip"], "10.0.9.9", "never replaced");
    assert!(!c.s.files().contains(&"infrakit-tf-import.tf.json".to_string()));
    c.run(&["reconcile", "--check"]).ok();
}
