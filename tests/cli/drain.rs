//! Drain hooks (`Lifecycle.Drain`, `--drain-cmd`): before any member of a group is destroyed
//! (scale-in, rolling update, `destroy`), its drain runs, while the member's files and machine
//! are still there; `abandon` keeps a member whose drain failed (exit 17), `continue` destroys
//! it; a run killed during a drain leaves the member for the next run, which drains it again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;
use crate::support::write_executable;

/// A group of `size` VMs named `name` (`dedicated`: with a dedicated volume each, so that a
/// rolling update destroys first), with `lifecycle` as its `Properties.Lifecycle`.
fn spec(size: u64, name: &str, dedicated: bool, lifecycle: Option<Value>) -> String {
    let mut resource = json!({"fakecloud_instance": {"vm": {"name": name}}});
    if dedicated {
        resource["fakecloud_volume"] = json!({"data": {"@scope": "@dedicated", "size": 5}});
    }
    let mut spec = json!({"ID": "api", "Properties": {
        "Allocation": {"Size": size},
        "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": resource}}}});
    if let Some(l) = lifecycle {
        spec["Properties"]["Lifecycle"] = l;
    }
    spec.to_string()
}

/// A drain script: appends `ID EPOCH-NS` to `drained`, and fails (appending `EARLY ID`) unless
/// the member's instance file and its machine still exist at that moment.
fn logging_drain(c: &Cloud) -> (String, PathBuf) {
    let log = c.s.root.path().join("drained");
    let script = c.s.root.path().join("drain.sh");
    write_executable(
        &script,
        &format!(
            "#!/bin/sh\necho \"$INFRAKIT_TF_ID $(date +%s%N)\" >> {log}\n\
             if ! test -f {dir}/$INFRAKIT_TF_ID.tf.json || ! test -f {cloud}/$INFRAKIT_TF_ATTR_ID.json; then\n\
             echo \"EARLY $INFRAKIT_TF_ID\" >> {log}; exit 1\nfi\n",
            log = log.display(),
            dir = c.s.dir.display(),
            cloud = c.cloud.display()
        ),
    );
    (script.to_str().unwrap().to_string(), log)
}

/// The IDs the drain log names, in order.
fn drained(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(!text.contains("EARLY"), "a member was drained after its file or machine went: {text}");
    text.lines().map(|l| l.split_whitespace().next().unwrap().to_string()).collect()
}

/// The group's members: ID → cloud ID of its machine.
fn members(c: &Cloud) -> std::collections::BTreeMap<String, String> {
    c.describe()
        .into_iter()
        .filter(|r| r["Tags"]["infrakit.group"] == "api")
        .map(|r| (r["ID"].as_str().unwrap().to_string(), r["attributes"]["id"].as_str().unwrap_or("").to_string()))
        .collect()
}

fn in_state(c: &Cloud, id: &str) -> bool {
    c.state().contains_key(&format!("fakecloud_instance.{id}"))
}

#[test]
fn scale_in_drains_the_terminated_member_before_it_goes() {
    let c = Cloud::new();
    let (drain, log) = logging_drain(&c);
    let lifecycle = json!({"Drain": drain, "DrainTimeout": "1m"});
    let three = c.s.write_outside("three.json", &spec(3, "a", false, Some(lifecycle.clone())));
    c.run(&["reconcile", "--group", &three]).ok();
    assert_eq!(drained(&log), Vec::<String>::new(), "creating drains nothing");
    let before = members(&c);

    let two = c.s.write_outside("two.json", &spec(2, "a", false, Some(lifecycle)));
    let out = c.run(&["reconcile", "--group", &two, "--output", "json"]).ok();
    let report = out.json();
    let gone: Vec<String> = serde_json::from_value(report["groups"][0]["terminated"].clone()).unwrap();
    assert_eq!(gone.len(), 1, "{report}");
    assert_eq!(drained(&log), gone, "the terminated member, and it alone, was drained");
    assert!(out.stderr.contains(&format!("draining {}", gone[0])), "{}", out.stderr);
    assert_eq!(report["groups"][0]["abandoned"], json!([]), "{report}");
    assert!(!c.s.dir.join(format!("{}.tf.json", gone[0])).exists());
    assert!(!in_state(&c, &gone[0]));
    let after = members(&c);
    let mut kept = before.clone();
    kept.remove(&gone[0]);
    assert_eq!(after, kept, "the others keep their machines");
}

#[test]
fn a_failed_drain_keeps_the_member_under_abandon_and_not_under_continue() {
    let c = Cloud::new();
    let three = c.s.write_outside("three.json", &spec(3, "a", false, Some(json!({"Drain": "echo busy >&2; exit 3"}))));
    c.run(&["reconcile", "--group", &three]).ok();
    let before = members(&c);
    let lowest = before.keys().next().unwrap().clone();

    // abandon, the default: kept, reported, exit 17; the others are untouched.
    let two = c.s.write_outside("two.json", &spec(2, "a", false, Some(json!({"Drain": "echo busy >&2; exit 3"}))));
    let run = c.run(&["reconcile", "--group", &two, "--output", "json"]).code(Code::DrainAbandoned);
    let report = run.json();
    assert_eq!(report["groups"][0]["abandoned"], json!([lowest]), "{report}");
    assert_eq!(report["groups"][0]["terminated"], json!([]), "{report}");
    assert!(
        run.stderr.contains(&format!("the drain of {lowest} failed (the drain command exited 3)")),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("busy"), "the drain's output is on stderr: {}", run.stderr);
    assert!(run.error_lines().iter().any(|l| l.contains("a drain failed and its member was kept")), "{}", run.stderr);
    assert_eq!(members(&c), before, "nothing destroyed");
    assert!(in_state(&c, &lowest));

    // A timeout is a failure too.
    let run = c
        .run(&["reconcile", "--group", &two, "--drain-cmd", "sleep 30", "--drain-timeout", "500ms"])
        .code(Code::DrainAbandoned);
    assert!(run.stderr.contains("the drain command ran longer than 500ms"), "{}", run.stderr);
    assert_eq!(members(&c), before);

    // continue: destroyed anyway, with a warning.
    let run = c.run(&["reconcile", "--group", &two, "--on-drain-failure", "continue", "--output", "json"]).ok();
    assert!(run.stderr.contains(&format!("warning: the drain of {lowest} failed")), "{}", run.stderr);
    assert!(run.stderr.contains("destroying it anyway"), "{}", run.stderr);
    assert_eq!(run.json()["groups"][0]["terminated"], json!([lowest]));
    assert!(!members(&c).contains_key(&lowest));
    assert!(!in_state(&c, &lowest));
}

#[test]
fn a_rolling_update_drains_every_old_member_before_its_removal() {
    for dedicated in [false, true] {
        let c = Cloud::new();
        let (drain, log) = logging_drain(&c);
        let v1 = c.s.write_outside("v1.json", &spec(2, "a", dedicated, None));
        c.run(&["reconcile", "--group", &v1]).ok();
        let old: BTreeSet<String> = members(&c).into_keys().collect();
        let v2 = c.s.write_outside("v2.json", &spec(2, "b", dedicated, Some(json!({"Drain": drain}))));
        let report = c.run(&["reconcile", "--group", &v2, "--output", "json"]).ok().json();
        let replaced: BTreeSet<String> = report["groups"][0]["replaced"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["old"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(replaced, old, "dedicated={dedicated}: {report}");
        let drained: BTreeSet<String> = drained(&log).into_iter().collect();
        assert_eq!(drained, old, "dedicated={dedicated}: each old member drained while it still existed");
        let now: BTreeSet<String> = members(&c).into_keys().collect();
        assert!(now.is_disjoint(&old), "dedicated={dedicated}: {now:?}");
        assert_eq!(now.len(), 2);
    }
}

#[test]
fn destroy_drains_a_member_of_a_group_with_a_drain() {
    let c = Cloud::new();
    let (drain, log) = logging_drain(&c);
    let group = c.s.write_outside("api.json", &spec(2, "a", false, Some(json!({"Drain": drain}))));
    c.run(&["reconcile", "--group", &group]).ok();
    let ids: Vec<String> = members(&c).into_keys().collect();

    c.run(&["destroy", &ids[0], "--group", &group, "--yes"]).ok();
    assert_eq!(drained(&log), vec![ids[0].clone()]);
    assert!(!in_state(&c, &ids[0]));
    // --dry-run drains nothing.
    c.run(&["destroy", &ids[1], "--group", &group, "--dry-run"]).ok();
    assert_eq!(drained(&log).len(), 1);
    // A failed drain keeps the member (exit 17).
    let run =
        c.run(&["destroy", &ids[1], "--drain-cmd", "exit 1", "--yes", "--output", "json"]).code(Code::DrainAbandoned);
    assert_eq!(run.json()["abandoned"], json!([ids[1]]), "{run:#?}");
    assert!(in_state(&c, &ids[1]));
}

/// A group of three scaled in to two with `drain` (given the file it should write its first
/// line to) as the drain, started in the background once `started` exists: the run, the
/// members before, the member to go (the lowest ID) and the two-member spec.
fn scale_in_with(
    c: &Cloud,
    drain: impl Fn(&Path) -> String,
) -> (crate::support::cloud::Started, std::collections::BTreeMap<String, String>, String, String) {
    let three = c.s.write_outside("three.json", &spec(3, "a", false, None));
    c.run(&["reconcile", "--group", &three]).ok();
    let before = members(c);
    let lowest = before.keys().next().unwrap().clone();
    let started = c.s.root.path().join("started");
    let two = c.s.write_outside("two.json", &spec(2, "a", false, None));
    let run = c.start(&["reconcile", "--group", &two, "--drain-cmd", &drain(&started)], &[]);
    crate::support::wait_for(&started, "the drain started");
    (run, before, lowest, two)
}

#[test]
fn a_run_killed_during_a_drain_drains_again_before_destroying() {
    let c = Cloud::new();
    let (mut run, before, lowest, two) =
        scale_in_with(&c, |started| format!("echo \"$INFRAKIT_TF_ID\" > {}; sleep 600", started.display()));
    let started = c.s.root.path().join("started");
    run.kill(true);
    run.finish();
    crate::support::wait_until_idle(&c.s.dir);
    assert_eq!(std::fs::read_to_string(&started).unwrap().trim(), lowest);
    assert!(c.s.dir.join(format!("{lowest}.tf.json")).exists(), "the member's file stays");
    assert!(in_state(&c, &lowest), "and its machine");
    assert_eq!(members(&c), before);

    let (drain, log) = logging_drain(&c);
    let out = c.run(&["reconcile", "--group", &two, "--drain-cmd", &drain, "--output", "json"]).ok();
    assert_eq!(drained(&log), vec![lowest.clone()], "drained again, before its removal");
    assert_eq!(out.json()["groups"][0]["terminated"], json!([lowest]));
    assert!(!in_state(&c, &lowest));
}

// Cron's timeout sends SIGTERM while a drain runs: the drain is stopped (the command and what
// it started), the run exits 130 with nothing destroyed, and the next run drains again.
#[test]
fn sigterm_during_a_drain_stops_it_and_destroys_nothing() {
    let c = Cloud::new();
    let (run, before, lowest, two) =
        scale_in_with(&c, |started| format!("sleep 600 & echo $! > {}; wait", started.display()));
    let pid = c.s.root.path().join("started");
    // SAFETY: kill(2) on our own child alone, as a service manager would.
    unsafe { libc::kill(run.pid() as i32, libc::SIGTERM) };
    let out = run.finish().code(Code::Interrupted);
    assert!(out.stderr.contains("interrupted while the drain command ran"), "{}", out.stderr);
    let sleeper = std::fs::read_to_string(&pid).unwrap().trim().to_string();
    // Gone, or dead and not yet reaped by init (a zombie runs nothing).
    let running = || {
        std::fs::read_to_string(format!("/proc/{sleeper}/stat"))
            .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!running(), "what the drain started was stopped too");
    assert!(c.s.dir.join(format!("{lowest}.tf.json")).exists(), "the member's file stays");
    assert_eq!(members(&c), before, "nothing destroyed");

    let (drain, log) = logging_drain(&c);
    c.run(&["reconcile", "--group", &two, "--drain-cmd", &drain]).ok();
    assert_eq!(drained(&log), vec![lowest.clone()], "drained again, then destroyed");
    assert!(!in_state(&c, &lowest));
}
