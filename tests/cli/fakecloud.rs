//! reconcile and sweep-orphans against a cloud where machines really vanish (fakecloud).

use std::collections::BTreeSet;

use serde_json::json;

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;

fn provision(c: &Cloud) -> String {
    c.run(&["provision", &c.spec()]).ok().stdout.trim().to_string()
}

// The issue's scenario, end to end.
#[test]
fn a_vanished_machine_is_pruned_and_its_slot_reattached() {
    let c = Cloud::new();
    let ids: Vec<String> = (0..3).map(|_| provision(&c)).collect();
    let machines: Vec<String> = ids.iter().map(|id| c.machine(id)).collect();
    assert_eq!(c.objects().len(), 3 + 3 + 1, "3 VMs, 3 slots, 1 shared volume");

    // Machine 2 vanishes behind Terraform's back.
    c.vanish(&machines[1]);
    let before = (c.s.snapshot(), c.objects());
    let run = c.run(&["reconcile", "--check", "--output", "json"]).code(Code::Pending);
    let check = run.json();
    assert_eq!(
        check["drift"],
        json!([{"address": format!("fakecloud_instance.{}", ids[1]), "action": "delete"}]),
        "{check}"
    );
    assert!((c.s.snapshot(), c.objects()) == before, "--check changed something");

    let out = c.run(&["reconcile", "--output", "json"]).ok().json();
    assert_eq!(
        out["pruned"],
        json!([{"ID": ids[1], "file": format!("{}.tf.json", ids[1]), "vm": format!("fakecloud_instance.{}", ids[1])}])
    );
    assert_eq!(out["destroyed"], 0, "the VM was already gone; its slot stays: {out}");
    let files = c.s.files();
    assert!(!files.contains(&format!("{}.tf.json", ids[1])));
    assert!(files.contains(&"default_dedicated_2.tf.json".to_string()), "the slot stays: {files:?}");
    assert!(files.contains(&"shared_global.tf.json".to_string()));
    // The other machines were not touched.
    assert_eq!((c.machine(&ids[0]), c.machine(&ids[2])), (machines[0].clone(), machines[2].clone()));
    c.run(&["reconcile", "--check"]).ok();

    // The next provision re-attaches the orphaned slot: the same volume, not a new one.
    let slot_volume = c.state()["fakecloud_volume.default-2-data"].clone();
    let d = provision(&c);
    let tags = &c.s.read(&format!("{d}.tf.json"))["resource"]["fakecloud_instance"][&d]["tags"];
    assert_eq!(tags["infrakit.attach"], "default_dedicated_2,shared_global");
    assert_eq!(c.state()["fakecloud_volume.default-2-data"], slot_volume);
    assert!(c.objects().contains_key(&slot_volume), "the slot's volume is still in the cloud");

    // A rolling update followed by a scale-down leaks slot 1; sweep-orphans takes it, file and
    // state and cloud, and leaves the rest alone.
    let leaked = c.state()["fakecloud_volume.default-1-data"].clone();
    c.run(&["destroy", &ids[0], "--reason", "rolling-update", "--yes"]).ok();
    let keep: BTreeSet<String> = c.objects().keys().filter(|k| **k != leaked).cloned().collect();
    let out = c.run(&["sweep-orphans", "--yes", "--output", "json"]).ok().json();
    assert_eq!(
        out["orphans"],
        json!([{"file": "default_dedicated_1.tf.json", "kind": "dedicated", "why": "no instance is attached to it"}])
    );
    assert!(!c.s.files().contains(&"default_dedicated_1.tf.json".to_string()));
    assert!(!c.state().contains_key("fakecloud_volume.default-1-data"));
    assert_eq!(c.objects().keys().cloned().collect::<BTreeSet<_>>(), keep, "only the leaked volume went");
}

// Several machines vanish at once (a provider's bad minute): beyond --max-destroy, nothing is
// pruned or applied.
#[test]
fn mass_vanishing_is_refused() {
    let c = Cloud::new();
    let ids: Vec<String> = (0..3).map(|_| provision(&c)).collect();
    for id in &ids[..2] {
        c.vanish(&c.machine(id));
    }
    let before = (c.s.snapshot(), c.objects(), c.state());
    let run = c.run(&["reconcile", "--max-destroy", "1"]).code(Code::TooManyDestroys);
    c.s.assert_stderr(&run, snapbox::str![[r#"
[TIME] plan: 2 to add, 0 to change, 0 to destroy
error: refusing to destroy 2 resources (more than --max-destroy 1): 2 vanished machine(s) (instance-[..], instance-[..]); nothing was applied
hint: check the provider and the cloud; if this is wanted, run again with a higher --max-destroy

"#]]);
    assert!((c.s.snapshot(), c.objects(), c.state()) == before, "something was pruned or applied");
    // With a limit that allows it, the same run converges.
    let out = c.run(&["reconcile", "--max-destroy", "5", "--output", "json"]).ok().json();
    assert_eq!(out["pruned"].as_array().unwrap().len(), 2);
}

// A reconcile killed with SIGKILL in the middle of an apply (with its terraform): the next
// reconcile converges and nothing the user asked for is lost.
#[test]
fn sigkill_mid_apply_then_converge() {
    let c = Cloud::new();
    for _ in 0..2 {
        c.run(&["provision", "--no-apply", &c.spec()]).ok();
    }
    c.delay_creates(3000);
    c.kill_during(&["reconcile"], "creating fakecloud_instance");
    c.delay_creates(0);

    let out = c.run(&["reconcile", "--output", "json"]).ok().json();
    assert!(out["applied"].as_bool().unwrap(), "{out}");
    let rows = c.describe();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["status"] == "created"), "{rows:?}");
    assert_eq!(c.objects().len(), 2 + 2 + 1, "two VMs, two slots, the shared volume; no duplicate");
    c.run(&["reconcile", "--check"]).ok();
}

// A queued file brings a provider the configuration never declares (`fakecloud_*` resources
// alone: terraform resolves `hashicorp/fakecloud`). The next apply of anything, or a dry run,
// promotes or plans it and so runs `init` first; a dry run leaves the lock file alone.
#[test]
fn a_queued_file_with_a_new_provider_gets_init() {
    let c = Cloud::new();
    c.s.write("main.tf", "resource \"terraform_data\" \"network\" {}\n");
    let plain = c.s.write_outside("plain.json", r#"{"Properties": {"resource": {"terraform_data": {"vm": {}}}}}"#);
    c.run(&["provision", &plain]).ok();
    let lock = || std::fs::read_to_string(c.s.dir.join(".terraform.lock.hcl")).unwrap_or_default();
    assert!(!lock().contains("fakecloud"), "not yet: {}", lock());
    c.run(&["provision", "--no-apply", &c.spec()]).ok();

    let before = lock();
    let dry = c.run(&["provision", "--dry-run", &plain, "--output", "json"]).ok().json();
    assert_eq!(dry["terraform"]["added"], 1 + 3, "the plain VM, and the queued VM, slot and shared volume: {dry}");
    assert_eq!(lock(), before, "a dry run does not change the lock file");

    c.run(&["provision", &plain]).ok();
    assert!(lock().contains("registry.terraform.io/hashicorp/fakecloud"), "{}", lock());
    assert_eq!(c.objects().len(), 3, "the queued VM, its slot and the shared volume were created");
    assert_eq!(c.describe().len(), 3);
}

// `provision --count N`: N instances, each its own ID and slot, in one apply (created in
// parallel); stdout lists the IDs, `--output json` an array. Bad counts change nothing.
#[test]
fn provision_count_makes_n_instances_in_one_apply() {
    let c = Cloud::new();
    // The three VMs' creates wait for one another: the run succeeds only if each started
    // before any finished (in parallel, not one after the other).
    c.creates_together("fakecloud_instance", 3);
    let run = c.run(&["provision", &c.spec(), "--count", "3"]).ok();
    c.creates_together("fakecloud_instance", 0);
    let ids: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(ids.len(), 3, "{run:#?}");
    assert_eq!(run.stderr.matches("plan: ").count(), 1, "one apply: {}", run.stderr);
    let rows = c.describe();
    assert_eq!(rows.len(), 3);
    let slots: std::collections::BTreeSet<String> = rows
        .iter()
        .flat_map(|r| r["attachments"].as_array().unwrap().clone())
        .filter_map(|a| a.as_str().map(str::to_string))
        .filter(|a| a.contains("_dedicated_"))
        .collect();
    assert_eq!(slots.len(), 3, "three slots: {slots:?}");
    assert_eq!(c.objects().keys().filter(|k| k.starts_with("i-")).count(), 3, "three VMs");

    let json = c.run(&["provision", &c.spec(), "--count", "2", "--no-apply", "--output", "json"]).ok().json();
    assert_eq!(json.as_array().unwrap().len(), 2, "{json}");
    assert!(json[0]["ID"].is_string() && json[0]["ID"] != json[1]["ID"], "{json}");

    let before = c.s.snapshot();
    for bad in ["0", "-1", "1001", "many"] {
        let run = c.run(&["provision", &c.spec(), "--count", bad]);
        assert!(run.is(Code::Usage), "--count {bad}: {run:#?}");
    }
    let run = c.run(&["provision", &c.spec(), "--count", "2", "--logical-id", "a"]);
    assert!(run.is(Code::Usage), "{run:#?}");
    assert!(c.s.snapshot() == before, "refused: nothing changed");
    // Several logical IDs: one pet each.
    let pets = c.run(&["provision", &c.spec(), "--logical-id", "a", "--logical-id", "b", "--no-apply"]).ok();
    assert_eq!(pets.stdout.lines().count(), 2, "{pets:#?}");
}

// A targeted destroy removes exactly the destroyed instance's resources: its VM and slot
// volume; the shared volume goes with the last instance attached to it.
#[test]
fn destroy_removes_exactly_the_instance_resources() {
    let c = Cloud::new();
    let ids: Vec<String> =
        c.run(&["provision", &c.spec(), "--count", "2"]).ok().stdout.lines().map(str::to_string).collect();
    let kinds = |c: &Cloud| {
        let mut v: Vec<String> = c.objects().values().map(|o| o["type"].as_str().unwrap().to_string()).collect();
        v.sort();
        v
    };
    assert_eq!(
        kinds(&c),
        ["fakecloud_instance", "fakecloud_instance", "fakecloud_volume", "fakecloud_volume", "fakecloud_volume"]
    );
    let out = c.run(&["destroy", &ids[0], "--yes", "--output", "json"]).ok().json();
    assert_eq!(out["terraform"]["destroyed"], 2, "its VM and its slot's volume: {out}");
    assert_eq!(kinds(&c), ["fakecloud_instance", "fakecloud_volume", "fakecloud_volume"]);
    let out = c.run(&["destroy", &ids[1], "--yes", "--output", "json"]).ok().json();
    assert_eq!(out["terraform"]["destroyed"], 3, "the last one takes the shared volume: {out}");
    assert!(c.objects().is_empty(), "{:?}", c.objects());
}
