//! Creates whose answer is lost: the cloud makes the machine, then the call fails (a
//! connection reset on the way back, `context deadline exceeded` after the machine exists, a
//! gateway's 503 after the backend acted: fakecloud's `lose-creates`). Nothing is killed:
//! terraform ends with an error and records nothing of that machine. The failed apply leaves
//! the evidence a cut one does, so the next run (or the retry, before it applies again) looks
//! the machines up by their tags and adopts them: after the failed command and two
//! reconciles, every machine in the cloud is in the state exactly once.

use std::collections::BTreeSet;

use serde_json::Value;

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;

/// A cloud whose fakecloud types can be looked up, its retries `retries` after a short wait.
fn cloud(retries: u32) -> Cloud {
    let c = Cloud::new();
    c.with_lookups();
    let mut config: Value = c.s.read("infrakit-tf.json");
    config["retries"] = serde_json::json!({"max": retries, "base_delay": "100ms"});
    c.s.write("infrakit-tf.json", &config.to_string());
    c
}

/// A spec of a VM alone: every create lost is a machine's.
fn vm(c: &Cloud) -> String {
    c.s.write_outside(
        "vm.json",
        r#"{"Properties": {"resource": {"fakecloud_instance": {"vm": {"name": "web"}}}}, "Tags": {"infrakit.group": "web"}}"#,
    )
}

/// The next `n` creates make their object and then fail as `how` says (`reset`, `timeout`,
/// `503`).
fn lose(c: &Cloud, n: u32, how: &str) {
    std::fs::write(c.cloud.join("lose-creates"), format!("{n} {how}\n")).unwrap();
}

/// The cloud IDs the state manages.
fn managed(c: &Cloud) -> BTreeSet<String> {
    c.state().into_values().filter(|id| !id.is_empty()).collect()
}

/// The objects of the cloud the state does not manage.
fn unmanaged(c: &Cloud) -> BTreeSet<String> {
    let managed = managed(c);
    c.objects().into_keys().filter(|id| !managed.contains(id)).collect()
}

/// After the failed command: the evidence is there for everyone who looks. `describe` shows
/// the instance's machine as unconfirmed, `reconcile --check` says a look-up is pending (exit
/// 10), and `sweep-orphans` refuses (exit 13) with nothing removed.
fn evidence(c: &Cloud, lost: &BTreeSet<String>) {
    assert!(!lost.is_empty(), "the lost creates made machines");
    assert_eq!(&unmanaged(c), lost, "the lost creates' machines are in no state");
    // Every instance whose VM is not in state is unconfirmed: those whose machine was made
    // (lost), and those whose create failed otherwise or never began (throttled, or waiting
    // for a lost volume).
    let rows = c.describe();
    let unconfirmed = rows.iter().filter(|r| r["status"] == "unconfirmed").count();
    let machines = lost.iter().filter(|id| id.starts_with("i-")).count();
    assert!(unconfirmed >= machines, "describe: {rows:?}");
    let metrics = c.s.root.path().join("infrakit.prom");
    let check = c
        .run(&["reconcile", "--check", "--output", "json", "--metrics-file", metrics.to_str().unwrap()])
        .code(Code::Pending);
    let report = check.json();
    if unconfirmed > 0 {
        let text = std::fs::read_to_string(&metrics).unwrap();
        let counted = format!(r#"status="unconfirmed"}} {unconfirmed}"#);
        assert!(text.contains(&counted), "the metrics count them as describe does: {text}");
    }
    let why = report["lookup_pending"].as_str().unwrap_or_else(|| panic!("{report}"));
    assert!(why.contains("failed while creating"), "{why}");
    assert_eq!(report["pending"], true);
    let files = c.s.files();
    let sweep = c.run(&["sweep-orphans", "--yes"]).code(Code::StateLost);
    assert!(sweep.stderr.contains("refusing to sweep orphans"), "{}", sweep.stderr);
    assert_eq!(c.s.files(), files, "sweep-orphans changed nothing");
    c.run(&["sweep-orphans", "--dry-run"]).code(Code::StateLost);
}

/// After two reconciles: every object of the cloud is managed exactly once (nothing leaked,
/// nothing twice), the lost creates' machines among them (adopted, not made again), one
/// machine per instance, nothing pending.
fn healed(c: &Cloud, lost: &BTreeSet<String>, specs: &[&str]) {
    let mut args = vec!["reconcile"];
    for spec in specs {
        args.extend(["--group", spec]);
    }
    let first = c.run(&args).ok();
    assert!(first.stderr.contains("looking up the machines it may have made"), "{}", first.stderr);
    for note in ["Resource targeting is in effect", "not suitable for routine use", "Applied changes may be incomplete"]
    {
        assert!(!first.stderr.contains(note), "terraform's targeting notes are not shown: {}", first.stderr);
    }
    c.run(&args).ok();
    let state = c.state();
    let ids: Vec<&String> = state.values().filter(|id| !id.is_empty()).collect();
    let unique: BTreeSet<&String> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "no object twice in the state: {state:?}");
    let cloud: BTreeSet<String> = c.objects().into_keys().collect();
    assert_eq!(cloud, managed(c), "the cloud holds what the state manages, nothing more");
    assert!(lost.is_subset(&cloud), "the lost creates' machines were adopted: {lost:?}");
    let machines = c.machines_per_instance();
    assert!(machines.values().all(|n| *n == 1), "one machine per instance: {machines:?}");
    let mut check = vec!["reconcile", "--check", "--output", "json"];
    for spec in specs {
        check.extend(["--group", spec]);
    }
    let report = c.run(&check).ok().json();
    assert_eq!(report["lookup_pending"], Value::Null, "{report}");
    assert!(c.describe().iter().all(|r| r["status"] == "created"), "{:?}", c.describe());
}

/// Runs `args`, which fail with the lost create's error: the objects it made.
fn failing(c: &Cloud, args: &[&str], error: &str) -> BTreeSet<String> {
    let before: BTreeSet<String> = c.objects().into_keys().collect();
    let run = c.run(args).code(Code::TerraformFailed);
    assert!(run.stderr.contains(error), "{}", run.stderr);
    assert!(run.stderr.contains("looked up by their tags before anything applies again"), "{}", run.stderr);
    c.objects().into_keys().filter(|id| !before.contains(id)).collect()
}

#[test]
fn a_provision_whose_answer_is_lost_is_adopted_not_made_again() {
    let c = cloud(0);
    let spec = vm(&c);
    c.run(&["provision", &spec]).ok();
    lose(&c, 1, "reset");
    let lost = failing(&c, &["provision", &spec], "connection reset by peer");
    assert_eq!(lost.len(), 1, "{lost:?}");
    evidence(&c, &lost);
    healed(&c, &lost, &[]);
    assert_eq!(c.machines_per_instance().len(), 2);
}

#[test]
fn a_count_with_retries_whose_answers_time_out_is_adopted_not_made_again() {
    let c = cloud(3);
    lose(&c, 2, "timeout");
    let made = failing(&c, &["provision", "--count", "3", &vm(&c)], "context deadline exceeded");
    // A timeout after the machine exists may have acted: the apply is not retried blindly.
    let lost: BTreeSet<String> = made.difference(&managed(&c)).cloned().collect();
    assert_eq!(lost.len(), 2, "two creates lost: {made:?}");
    evidence(&c, &lost);
    healed(&c, &lost, &[]);
    assert_eq!(c.machines_per_instance().len(), 3);
}

#[test]
fn a_group_with_a_throttled_and_a_lost_create_in_one_apply_is_whole_after_two_reconciles() {
    let c = cloud(3);
    let spec = c.s.write_outside("group.json", &crate::support::specs::web(r#"{"Size": 3}"#, "v1"));
    std::fs::write(c.cloud.join("throttle-creates"), "1\n").unwrap();
    lose(&c, 1, "reset");
    let made = failing(&c, &["reconcile", "--group", &spec], "connection reset by peer");
    let lost: BTreeSet<String> = made.difference(&managed(&c)).cloned().collect();
    assert_eq!(lost.len(), 1, "{made:?}");
    evidence(&c, &lost);
    healed(&c, &lost, &[&spec]);
    assert_eq!(c.machines_per_instance().len(), 3);
}

#[test]
fn dedicated_and_global_resources_whose_answers_are_lost_are_adopted() {
    let c = cloud(0);
    // The first creates of the apply: volumes and machines alike.
    lose(&c, 3, "reset");
    let lost = failing(&c, &["provision", "--count", "2", &c.spec()], "connection reset by peer");
    let lost: BTreeSet<String> = lost.difference(&managed(&c)).cloned().collect();
    assert!(lost.iter().any(|id| id.starts_with("vol-")), "volumes among them: {lost:?}");
    evidence(&c, &lost);
    healed(&c, &lost, &[]);
    let objects = c.objects();
    let volumes = objects.values().filter(|o| o["type"] == "fakecloud_volume").count();
    assert_eq!(volumes, 3, "two dedicated volumes and one shared: {objects:?}");
}

// A gateway that answered 503 after the backend acted: the apply is retried (503 says the
// call was refused), and the retry adopts what the failed try made before it applies again.
#[test]
fn a_retry_after_a_503_that_acted_adopts_before_it_applies_again() {
    let c = cloud(3);
    lose(&c, 1, "503");
    let run = c.run(&["provision", "--output", "json", &vm(&c)]).ok();
    let retried: Vec<&str> = run.stderr.lines().filter(|l| l.contains("failed with a transient error")).collect();
    assert_eq!(retried.len(), 1, "{}", run.stderr);
    assert!(run.stderr.contains("adopted fakecloud_instance.instance-"), "{}", run.stderr);
    assert!(unmanaged(&c).is_empty(), "nothing leaked: {:?}", c.objects());
    let machines = c.machines_per_instance();
    assert_eq!(machines.values().copied().collect::<Vec<_>>(), [1], "one machine, made once: {machines:?}");
    assert!(
        !c.s.files().iter().any(|f| f.contains("import")),
        "the import blocks went once applied: {:?}",
        c.s.files()
    );
    let report = c.run(&["reconcile", "--check", "--output", "json"]).ok().json();
    assert_eq!(report["lookup_pending"], Value::Null);
}

// Without retries, the same 503 leaves the evidence like any other failure.
#[test]
fn a_503_without_retries_leaves_the_evidence() {
    let c = cloud(0);
    lose(&c, 1, "503");
    let lost = failing(&c, &["provision", &vm(&c)], "status code: 503");
    assert_eq!(lost.len(), 1, "{lost:?}");
    evidence(&c, &lost);
    healed(&c, &lost, &[]);
}

// An apply that failed before it began to create leaves nothing to look up: the next run
// pays no look-up.
#[test]
fn a_failure_before_any_create_leaves_no_look_up() {
    let c = cloud(0);
    c.run(&["provision", &c.spec()]).ok();
    std::fs::write(c.s.dir.join("broken.tf"), "resource \"fakecloud_instance\" \"x\" { nonsense = 1 }\n").unwrap();
    c.run(&["provision", &c.spec()]).code(Code::TerraformFailed);
    std::fs::remove_file(c.s.dir.join("broken.tf")).unwrap();
    let run = c.run(&["reconcile"]).ok();
    assert!(!run.stderr.contains("looking up"), "{}", run.stderr);
}
