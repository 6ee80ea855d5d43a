//! Machines an apply cut short made but never recorded: the whole process group is SIGKILLed
//! (the OOM killer, `systemctl stop`, a reboot) as soon as the cloud holds a new object, while
//! the provider waits for it to boot (`boot-ms`: the object exists, terraform has not been
//! told). The next run looks the machines up by their tags (fakecloud's data sources, declared
//! as a user would) and adopts them: one machine per instance and per slot, the very ones the
//! killed run made, nothing leaked.

use std::collections::BTreeSet;

use serde_json::Value;

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;

/// A cloud whose fakecloud types can be looked up.
fn cloud() -> Cloud {
    let c = Cloud::new();
    c.with_lookups();
    c
}

/// The cloud IDs a report's `adopted` lists.
fn adopted(report: &Value) -> BTreeSet<String> {
    report["adopted"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap().to_string()).collect()
}

/// The cloud IDs the state manages.
fn managed(c: &Cloud) -> BTreeSet<String> {
    c.state().into_values().filter(|id| !id.is_empty()).collect()
}

/// What must hold after recovery: every instance one VM, every object of the cloud managed
/// (nothing leaked, nothing twice), the killed run's objects among them (adopted, not made
/// again), and nothing left to do.
fn whole(c: &Cloud, made_by_the_killed_run: &BTreeSet<String>) {
    let machines = c.machines_per_instance();
    assert!(machines.values().all(|n| *n == 1), "one machine per instance: {machines:?}");
    let cloud: BTreeSet<String> = c.objects().into_keys().collect();
    assert_eq!(cloud, managed(c), "the cloud holds what the state manages, nothing more");
    assert!(
        made_by_the_killed_run.is_subset(&cloud),
        "the killed run's machines were adopted: {made_by_the_killed_run:?}"
    );
    c.run(&["reconcile", "--check"]).ok();
}

// A provision of a third instance, with two more queued, killed with its terraform while the
// machines boot: the next reconcile adopts what it made.
#[test]
fn a_provision_killed_with_its_terraform_while_machines_boot_is_adopted() {
    let c = cloud();
    c.run(&["provision", &c.spec()]).ok();
    c.run(&["provision", &c.spec()]).ok();
    c.run(&["provision", "--no-apply", &c.spec()]).ok();
    c.run(&["provision", "--no-apply", &c.spec()]).ok();
    let made = c.kill_while_booting(&["provision", &c.spec()]);
    assert!(!made.is_empty());
    let run = c.run(&["reconcile", "--output", "json"]).ok();
    assert!(run.stderr.contains("an apply was cut short"), "{}", run.stderr);
    // The adoption's targeted import is expected to be targeted: terraform's notes about
    // -target are not shown (README).
    for note in ["Resource targeting is in effect", "not suitable for routine use", "Applied changes may be incomplete"]
    {
        assert!(!run.stderr.contains(note), "{}", run.stderr);
    }
    let report = run.json();
    let adopted = adopted(&report);
    assert_eq!(adopted, made, "adopted exactly what the killed run made: {}", run.stderr);
    for id in &made {
        assert!(run.stderr.contains(&format!(" = {id}: made by the apply that was cut short")), "{}", run.stderr);
    }
    assert_eq!(c.machines_per_instance().len(), 5);
    whole(&c, &made);
}

// A reconcile promoting queued instances, killed likewise: the next one adopts.
#[test]
fn a_reconcile_killed_while_queued_machines_boot_is_adopted() {
    let c = cloud();
    c.run(&["provision", &c.spec()]).ok();
    c.run(&["provision", "--no-apply", &c.spec()]).ok();
    c.run(&["provision", "--no-apply", &c.spec()]).ok();
    let made = c.kill_while_booting(&["reconcile"]);
    let run = c.run(&["reconcile"]).ok();
    assert!(run.stdout.contains(&format!("adopted={}", made.len())), "{}", run.stdout);
    assert_eq!(c.machines_per_instance().len(), 3);
    whole(&c, &made);
}

// A rolling update of a group, killed while a replacement boots: the next reconcile adopts it
// and finishes the update, the members' volumes kept.
#[test]
fn a_rolling_update_killed_while_a_replacement_boots_is_adopted() {
    let c = cloud();
    let group = |user_data: &str| c.s.write("web-group.json", &crate::support::specs::web(r#"{"Size": 2}"#, user_data));
    let spec = c.s.dir.join("web-group.json").to_str().unwrap().to_string();
    group("v1");
    c.run(&["reconcile", "--group", &spec]).ok();
    let volumes =
        |c: &Cloud| c.objects().values().filter(|o| o["type"] == "fakecloud_volume" && o["size"] == 5).count();
    group("v2");
    let made = c.kill_while_booting(&["reconcile", "--group", &spec]);
    let run = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok();
    let report = run.json();
    assert!(!report["adopted"].as_array().unwrap().is_empty(), "{}", run.stderr);
    assert_eq!(report["groups"][0]["current"], 2, "{report}");
    assert_eq!(c.machines_per_instance().len(), 2);
    assert_eq!(volumes(&c), 2, "the members' volumes kept through the update");
    c.run(&["reconcile", "--group", &spec, "--check"]).ok();
    whole(&c, &made);
}

// An instance with two volumes of one type: both carry the instance's tags, so each also
// carries its own name, and the look-up after a cut apply adopts each into its own address
// (before, each found both: exit 13, or one volume adopted twice).
#[test]
fn two_volumes_of_one_instance_are_each_adopted_as_themselves() {
    let c = cloud();
    let spec = c.s.write_outside(
        "disks.json",
        r##"{"Properties": {"resource": {
            "fakecloud_instance": {"vm": {"name": "web", "user_data": "#!/bin/sh"}},
            "fakecloud_volume": {"logs": {"size": 7}, "data": {"size": 8}}}},
          "Tags": {"infrakit.group": "web"}}"##,
    );
    c.run(&["provision", &spec]).ok();
    let made = c.kill_while_booting(&["provision", &spec]);
    let run = c.run(&["reconcile", "--output", "json"]).ok();
    let adopted = adopted(&run.json());
    assert_eq!(adopted, made, "{}", run.stderr);
    let volumes =
        |size: u64| c.objects().values().filter(|o| o["type"] == "fakecloud_volume" && o["size"] == size).count();
    assert_eq!((volumes(7), volumes(8)), (2, 2), "one of each per instance");
    whole(&c, &made);
}

// A group scaled down right after a scale-up was cut while its new member booted: the new
// member's machine is adopted (imported) before anything is decided, so whichever member the
// scale-down removes, its machine goes with it. Before, the file of the member being adopted
// could be removed with its import block pending: the machine leaked.
#[test]
fn a_scale_down_after_a_cut_scale_up_leaks_nothing() {
    let c = cloud();
    let group =
        |size: u32| c.s.write("web-group.json", &crate::support::specs::web(&format!(r#"{{"Size": {size}}}"#), "v1"));
    let spec = c.s.dir.join("web-group.json").to_str().unwrap().to_string();
    group(1);
    c.run(&["reconcile", "--group", &spec]).ok();
    group(3);
    let made = c.kill_while_booting(&["reconcile", "--group", &spec]);
    assert!(!made.is_empty());
    group(1);
    let run = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok();
    assert!(!run.json()["adopted"].as_array().unwrap().is_empty(), "{}", run.stderr);
    assert_eq!(c.machines_per_instance().len(), 1, "{}", run.stderr);
    let cloud: BTreeSet<String> = c.objects().into_keys().collect();
    assert_eq!(cloud, managed(&c), "nothing leaked: {}", run.stderr);
    c.run(&["reconcile", "--group", &spec, "--check"]).ok();
}

// After a cut apply, what would skip the look-up is refused until `reconcile` has adopted
// what it made: an import (its import blocks would replace the adoption's) and a removal
// without an apply (the file gone, nothing would look its machine up). Exit 13, nothing
// changed.
#[test]
fn an_import_or_a_removal_without_apply_waits_for_the_look_up() {
    let c = cloud();
    let first = c.run(&["provision", &c.spec()]).ok().stdout.trim().to_string();
    let made = c.kill_while_booting(&["provision", &c.spec()]);
    // The first command to take the lock keeps the evidence of the cut apply (its record
    // becomes the marker); a check changes nothing else.
    c.run(&["reconcile", "--check"]).code(Code::Pending);
    let before = c.s.snapshot();
    let objects = c.objects();
    for args in [
        vec!["import", c.spec().as_str(), "--resource", "fakecloud_instance=i-0000abcd"],
        vec!["destroy", "--yes", "--no-apply", first.as_str()],
    ] {
        let run = c.run(&args).code(Code::StateLost);
        assert_eq!(run.error_lines().len(), 1, "{run:#?}");
        assert!(run.error_lines()[0].contains("an apply was cut short"), "{run:#?}");
        assert!(run.stderr.contains("run `infrakit-tf reconcile` first"), "{}", run.stderr);
        assert_eq!(c.s.snapshot(), before, "nothing changed: {args:?}");
        assert_eq!(c.objects(), objects);
    }
    c.run(&["reconcile"]).ok();
    c.run(&["destroy", "--yes", "--no-apply", &first]).ok();
    c.run(&["reconcile"]).ok();
    assert_eq!(c.machines_per_instance().len(), 1);
    whole(&c, &made);
}

// A terraform run under the lock before the look-up (a dry run whose plan needs `init`: the
// configuration changed) does not erase the evidence of the cut apply: the lock turned its
// record into the marker first (before, `init` rewrote the record and removed it, and the
// next reconcile made the machines again).
#[test]
fn a_dry_run_before_the_look_up_keeps_the_evidence() {
    let c = cloud();
    c.run(&["provision", &c.spec()]).ok();
    let made = c.kill_while_booting(&["provision", &c.spec()]);
    let main = std::fs::read_to_string(c.s.dir.join("main.tf")).unwrap();
    c.s.write("main.tf", &format!("{main}\n# changed: init runs again\n"));
    let dry = c.run(&["--verbose", "provision", "--dry-run", &c.spec()]).ok();
    assert!(dry.stderr.contains("running terraform init in the mirror"), "{}", dry.stderr);
    let run = c.run(&["reconcile", "--output", "json"]).ok();
    let adopted = adopted(&run.json());
    assert_eq!(adopted, made, "{}", run.stderr);
    whole(&c, &made);
}

// Two objects carry one resource's tags (a twin made by hand, or by another tool): which one
// is this directory's is not guessed. Exit 13, both listed, nothing applied.
#[test]
fn two_machines_with_one_resources_tags_are_refused_not_guessed() {
    let c = cloud();
    c.run(&["provision", &c.spec()]).ok();
    let made = c.kill_while_booting(&["provision", &c.spec()]);
    // The VM if the killed run made it, else the volume it made.
    let original = made.iter().find(|id| id.starts_with("i-")).unwrap_or_else(|| made.iter().next().unwrap()).clone();
    let twin = format!("{}-twin", original);
    std::fs::copy(c.cloud.join(format!("{original}.json")), c.cloud.join(format!("{twin}.json"))).unwrap();
    let before = c.objects();
    let state = c.state();
    let run = c.run(&["reconcile"]).code(Code::StateLost);
    assert_eq!(run.error_lines().len(), 1, "{run:#?}");
    let line = run.error_lines()[0];
    assert!(
        line.starts_with(
            "error: refusing to apply: an apply was cut short, and which machine is this directory's is not clear: "
        ),
        "{line}"
    );
    assert!(line.contains(&format!("2 objects carry its tags: {original}, {twin}")), "{line}");
    assert_eq!(c.objects(), before, "nothing applied");
    assert_eq!(c.state(), state);
    // The twin removed: the next run adopts the original.
    std::fs::remove_file(c.cloud.join(format!("{twin}.json"))).unwrap();
    c.run(&["reconcile"]).ok();
    whole(&c, &made);
}

// `reconcile --check` after a cut apply reports the unrecorded machines as drift (exit 10),
// changes nothing, and leaves the adoption to the next reconcile.
#[test]
fn reconcile_check_reports_an_unrecorded_machine_before_anything_is_applied() {
    let c = cloud();
    let made = c.kill_while_booting(&["provision", &c.spec()]);
    let before = c.objects();
    let check = c.run(&["reconcile", "--check", "--output", "json"]).code(Code::Pending);
    let unrecorded = adopted(&check.json());
    assert_eq!(unrecorded, made);
    assert!(check.stderr.contains("unrecorded machine(s) an apply cut short made"), "{}", check.stderr);
    assert_eq!(c.objects(), before, "a check changes nothing");
    c.run(&["reconcile", "--check"]).code(Code::Pending); // still pending: nothing was settled
    c.run(&["reconcile"]).ok();
    whole(&c, &made);
}

// A run after no interrupted apply looks nothing up: no message, no extra terraform run.
#[test]
fn a_run_after_no_cut_apply_looks_nothing_up() {
    let c = cloud();
    c.run(&["provision", &c.spec()]).ok();
    let run = c.run(&["--verbose", "provision", &c.spec()]).ok();
    assert!(!run.stderr.contains("looking up"), "{}", run.stderr);
    let runs: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("running `")).collect();
    assert_eq!(runs.len(), 1, "one terraform run, the apply: {runs:?}");
    let reconcile = c.run(&["--verbose", "reconcile"]).ok();
    assert!(!reconcile.stderr.contains("looking up"), "{}", reconcile.stderr);
}

// The tags that find a resource are on every resource of a type that can be looked up: the
// VM's instance name, the dedicated volume's slot, the global's scope, and the group.
#[test]
fn resources_that_can_be_looked_up_carry_the_tags_that_find_them() {
    let c = cloud();
    let id = c.run(&["provision", &c.spec()]).ok().stdout.trim().to_string();
    let tags = |file: &str, rtype: &str| -> Value {
        let doc = c.s.read(file);
        doc["resource"][rtype].as_object().unwrap().values().next().unwrap()["tags"].clone()
    };
    assert_eq!(tags(&format!("{id}.tf.json"), "fakecloud_instance")["infrakit.instance.name"], id.as_str());
    let slot = tags("default_dedicated_1.tf.json", "fakecloud_volume");
    assert_eq!(slot, serde_json::json!({"infrakit.slot": "default_dedicated_1", "infrakit.group": "web"}));
    let global = tags("shared_global.tf.json", "fakecloud_volume");
    assert_eq!(global, serde_json::json!({"infrakit.global": "shared", "infrakit.group": "web"}));
}
