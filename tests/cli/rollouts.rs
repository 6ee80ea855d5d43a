//! Rollouts that pause at checkpoints (docs/groups-and-rollouts.md): a changed spec is
//! rolled out up to each checkpoint, then nothing is replaced for the rollout until its
//! `CheckpointDelay` has passed, run after run; where it stands is a record, in the report,
//! the cron line and the metrics. On the fakecloud provider, with the real terraform.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::Value;

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;

/// A group of `size` VMs named `name` (surge: no dedicated resource), with `updating`.
fn spec(c: &Cloud, size: u64, name: &str, updating: &str) -> String {
    let text = format!(
        r#"{{"ID": "web", "Properties": {{"Allocation": {{"Size": {size}}}, "Updating": {updating},
  "Instance": {{"Properties": {{"resource": {{"fakecloud_instance": {{"vm": {{"name": "{name}"}}}}}}}}}}}}}}"#
    );
    c.s.write_outside(&format!("{name}.json"), &text)
}

fn reconcile(c: &Cloud, spec: &str, extra: &[&str]) -> Value {
    let mut args = vec!["reconcile", "--group", spec, "--output", "json"];
    args.extend_from_slice(extra);
    c.run(&args).ok().json()
}

/// The fakecloud machines in the cloud now (their objects' files).
fn machines(cloud: &std::path::Path) -> usize {
    std::fs::read_dir(cloud)
        .map(|d| d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with("i-")).count())
        .unwrap_or(0)
}

#[test]
fn a_rollout_pauses_at_each_checkpoint_and_replaces_nothing_meanwhile() {
    let c = Cloud::new();
    let updating = r#"{"MaxUnavailable": 2, "Checkpoints": [20, 50], "CheckpointDelay": "1h"}"#;
    let v1 = spec(&c, 10, "v1", updating);
    reconcile(&c, &v1, &[]);
    assert_eq!(machines(&c.cloud), 10);
    // The cloud sampled every 100 ms for the whole rollout: never fewer than 10 machines (a
    // surge makes the replacements first).
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (done, cloud) = (done.clone(), c.cloud.clone());
        std::thread::spawn(move || {
            let mut fewest = usize::MAX;
            while !done.load(Ordering::Relaxed) {
                fewest = fewest.min(machines(&cloud));
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            fewest
        })
    };
    let v2 = spec(&c, 10, "v2", updating);
    let metrics = c.s.root.path().join("metrics.prom");
    let first = reconcile(&c, &v2, &["--metrics-file", metrics.to_str().unwrap()]);
    let g = &first["groups"][0];
    assert_eq!((g["current"].as_u64(), g["replaced"].as_array().map(Vec::len)), (Some(2), Some(2)), "{g}");
    let r = &g["rollout"];
    assert_eq!(
        (r["state"].as_str(), r["replaced"].as_u64(), r["of"].as_u64()),
        (Some("paused"), Some(2), Some(10)),
        "{r}"
    );
    assert!(r["paused_until"].is_string() && r["from"] != r["to"], "{r}");
    assert_eq!(g["pending"], true);
    let prom = std::fs::read_to_string(&metrics).unwrap();
    for line in ["infrakit_tf_group_rollout{", "state=\"paused\"} 1", "infrakit_tf_group_rollout_replaced{"] {
        assert!(prom.contains(line), "{line}: {prom}");
    }

    // Paused: the next runs replace nothing for it, and say so; --check says it is pending.
    let cron = c.run(&["reconcile", "--group", &v2]).ok();
    assert!(
        cron.stdout.contains("rollout paused until ") && cron.stdout.contains("(2/10 on the new spec)"),
        "{}",
        cron.stdout
    );
    let again = reconcile(&c, &v2, &[]);
    assert_eq!(again["groups"][0]["current"], 2, "{again}");
    assert_eq!(again["groups"][0]["replaced"], Value::Array(vec![]));
    let check = c.run(&["reconcile", "--group", &v2, "--check", "--output", "json"]).code(Code::Pending);
    assert_eq!(check.json()["groups"][0]["rollout"]["state"], "paused");

    // A pause lasts the run's CheckpointDelay: a short one has passed after it, and the rollout
    // goes on to the next checkpoint (5 of 10), where it pauses again.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let second = reconcile(&c, &v2, &["--checkpoint-delay", "1s"]);
    let g = &second["groups"][0];
    assert_eq!((g["current"].as_u64(), g["rollout"]["state"].as_str()), (Some(5), Some("paused")), "{g}");
    assert_eq!(reconcile(&c, &v2, &[])["groups"][0]["current"], 5, "the spec's hour holds again");

    // Past the last checkpoint: all the rest, then done.
    let last = reconcile(&c, &v2, &["--checkpoint-delay", "0s"]);
    let g = &last["groups"][0];
    assert_eq!((g["current"].as_u64(), g["outdated"].as_u64()), (Some(10), Some(0)), "{g}");
    assert_eq!((g["rollout"]["state"].as_str(), g["pending"].as_bool()), (Some("done"), Some(false)), "{g}");
    c.run(&["reconcile", "--group", &v2, "--check"]).ok();
    done.store(true, Ordering::Relaxed);
    let fewest = sampler.join().unwrap();
    assert!(fewest >= 10, "at one sample only {fewest} machines");
    assert_eq!(machines(&c.cloud), 10, "nothing leaked");

    // A spec changed again rolls anew, from its first checkpoint.
    let v3 = spec(&c, 10, "v3", updating);
    let third = reconcile(&c, &v3, &[]);
    let r = &third["groups"][0]["rollout"];
    assert_eq!((r["state"].as_str(), r["replaced"].as_u64()), (Some("paused"), Some(2)), "{r}");
    assert_eq!(r["from"], last["groups"][0]["rollout"]["to"], "{r}");
}

#[test]
fn checkpoints_that_are_not_percentages_change_nothing() {
    let c = Cloud::new();
    for (updating, says) in [
        (r#"{"Checkpoints": [50, 20]}"#, "checkpoints must increase"),
        (r#"{"Checkpoints": [0, 50]}"#, "from 1 to 99, not 0"),
        (r#"{"Checkpoints": "20,50"}"#, "a list of percentages"),
        (r#"{"CheckpointDelay": "1 hour"}"#, "CheckpointDelay"),
        (r#"{"AutoRollback": "yes"}"#, "`AutoRollback` must be true or false"),
        (r#"{"MinReady": 5}"#, "MinReady"),
    ] {
        let bad = spec(&c, 2, "bad", updating);
        let run = c.run(&["reconcile", "--group", &bad]).code(Code::Invalid);
        assert!(run.stderr.contains(says), "{updating}: {}", run.stderr);
        assert_eq!(machines(&c.cloud), 0, "{updating}");
    }
    let ok = spec(&c, 2, "ok", "{}");
    let run = c.run(&["reconcile", "--group", &ok, "--checkpoints", "20,120"]).code(Code::Usage);
    assert!(run.stderr.contains("from 1 to 99, not 120"), "{}", run.stderr);
}

#[test]
fn two_hosts_on_a_store_go_on_with_one_rollout() {
    let db = crate::support::store::Db::new();
    let (a, b) = crate::support::store::hosts_at(&db.url());
    let updating = r#"{"Checkpoints": [50], "CheckpointDelay": "1h"}"#;
    reconcile(&a, &spec(&a, 4, "v1", updating), &[]);
    // A new spec, on one host: the store's configuration check asks that it be accepted.
    let first = reconcile(&a, &spec(&a, 4, "v2", updating), &["--accept-config"]);
    assert_eq!(first["groups"][0]["rollout"]["state"], "paused", "{first}");
    // The other host finds the pause where the first left it, and replaces nothing.
    let v2 = spec(&b, 4, "v2", updating);
    let paused = reconcile(&b, &v2, &[]);
    let g = &paused["groups"][0];
    assert_eq!((g["current"].as_u64(), g["rollout"]["state"].as_str()), (Some(2), Some("paused")), "{g}");
    assert_eq!(g["rollout"]["paused_until"], first["groups"][0]["rollout"]["paused_until"]);
    // It goes on once the pause is over (for its run), and the first host finds it done.
    let done = reconcile(&b, &v2, &["--checkpoint-delay", "0s"]);
    assert_eq!(done["groups"][0]["current"], 4, "{done}");
    let after = reconcile(&a, &spec(&a, 4, "v2", updating), &[]);
    let g = &after["groups"][0];
    assert_eq!(
        (g["replaced"].as_array().map(Vec::len), g["rollout"]["state"].as_str()),
        (Some(0), Some("done")),
        "{g}"
    );
    assert_eq!(machines(&a.cloud), 4);
}

#[test]
fn a_rollout_killed_mid_batch_goes_on_and_makes_nothing_twice() {
    let c = Cloud::new();
    let updating = r#"{"MaxUnavailable": 1, "Checkpoints": [50], "CheckpointDelay": "1h"}"#;
    reconcile(&c, &spec(&c, 6, "v1", updating), &[]);
    let v2 = spec(&c, 6, "v2", updating);
    // SIGKILL to the whole process group while a replacement is being made (terraform has
    // begun to create it).
    c.delay_creates(1500);
    let args = ["reconcile", "--group", v2.as_str()];
    c.kill_during(&args, "creating fakecloud_instance");
    c.delay_creates(0);
    // The next runs finish the work up to the checkpoint: 3 of 6 on the new spec, 6 machines,
    // one each.
    let out = reconcile(&c, &v2, &[]);
    let g = &out["groups"][0];
    assert_eq!((g["current"].as_u64(), g["members"].as_u64()), (Some(3), Some(6)), "{g}");
    assert_eq!(g["rollout"]["state"], "paused", "{g}");
    assert_eq!(machines(&c.cloud), 6, "nothing leaked");
    assert!(c.machines_per_instance().values().all(|n| *n == 1), "{:?}", c.machines_per_instance());
    let last = reconcile(&c, &v2, &["--checkpoint-delay", "0s"]);
    assert_eq!((last["groups"][0]["current"].as_u64(), machines(&c.cloud)), (Some(6), 6), "{last}");
}

#[test]
fn a_destroy_first_rollout_killed_after_a_removal_stops_at_its_checkpoint() {
    let c = Cloud::new();
    // Each member has a dedicated volume: its replacement is made after it is destroyed.
    let spec = |name: &str| {
        let text = format!(
            r#"{{"ID": "web", "Properties": {{"Allocation": {{"Size": 4}},
  "Updating": {{"MaxUnavailable": 1, "Checkpoints": [50], "CheckpointDelay": "1h"}},
  "Instance": {{"Properties": {{"resource": {{"fakecloud_instance": {{"vm": {{"name": "{name}"}}}},
    "fakecloud_volume": {{"data": {{"@scope": "@dedicated", "size": 5}}}}}}}}}}}}}}"#
        );
        c.s.write_outside(&format!("{name}.json"), &text)
    };
    reconcile(&c, &spec("v1"), &[]);
    let v2 = spec("v2");
    // Killed while the first replacement is being made, its old member destroyed (not while
    // terraform writes its local state: a SIGKILL then can leave it empty, which the next run
    // refuses, exit 13, as "Crashes and recovery" says).
    c.delay_creates(1500);
    c.kill_during(&["reconcile", "--group", v2.as_str()], "creating fakecloud_instance");
    c.delay_creates(0);
    let out = reconcile(&c, &v2, &[]);
    let g = &out["groups"][0];
    assert_eq!((g["current"].as_u64(), g["members"].as_u64()), (Some(2), Some(4)), "{g}");
    assert_eq!(g["rollout"]["state"], "paused", "{g}");
    assert_eq!(machines(&c.cloud), 4);
    let volumes = c.objects().values().filter(|o| o["type"] == "fakecloud_volume").count();
    assert_eq!(volumes, 4, "each slot keeps its volume");
}

#[test]
fn min_ready_holds_the_next_batch_until_the_replacements_stay_healthy() {
    let c = Cloud::new();
    let updating = r#"{"MaxUnavailable": 1, "MinReady": "2s"}"#;
    reconcile(&c, &spec(&c, 3, "v1", updating), &[]);
    let log = c.s.root.path().join("checks");
    let cmd = format!("echo \"$INFRAKIT_TF_ID\" >> {}", log.display());
    let out = reconcile(&c, &spec(&c, 3, "v2", updating), &["--health-cmd", &cmd]);
    let replaced: Vec<String> = out["groups"][0]["replaced"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["new"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(replaced.len(), 3, "{out}");
    let checks = std::fs::read_to_string(&log).unwrap();
    let checks: Vec<&str> = checks.lines().collect();
    let count = |id: &str| checks.iter().filter(|l| **l == id).count();
    // Each replacement but the last was checked again after its gate (MinReady), and the next
    // batch began only after: its checks come after all of the one before's.
    for pair in replaced.windows(2) {
        assert!(count(&pair[0]) >= 2, "{} checked {} time(s): {checks:?}", pair[0], count(&pair[0]));
        let last_of_before = checks.iter().rposition(|l| *l == pair[0]).unwrap();
        let first_of_next = checks.iter().position(|l| *l == pair[1]).unwrap();
        assert!(last_of_before < first_of_next, "{checks:?}");
    }
    assert_eq!(count(&replaced[2]), 1, "the last batch is not waited for: {checks:?}");

    // A replacement healthy at its gate, then not: the update stops there (exit 15).
    let flaky = c.s.root.path().join("seen");
    let cmd = format!("f={}-$INFRAKIT_TF_ID; if [ -e $f ]; then exit 1; fi; touch $f", flaky.display());
    let v3 = spec(&c, 3, "v3", updating);
    let run = c.run(&["reconcile", "--group", &v3, "--health-cmd", &cmd, "--output", "json"]).code(Code::UpdateStopped);
    assert!(run.stderr.contains("is not healthy"), "{}", run.stderr);
    assert_eq!(run.json()["groups"][0]["current"], 1, "one replaced, the next never begun");
    assert_eq!(machines(&c.cloud), 3);
}

/// A group of `size` members named `name`, each with a dedicated volume (a rollout destroys
/// first and re-attaches the slot's volume), with `updating`.
fn volume_spec(c: &Cloud, size: u64, name: &str, updating: &str) -> String {
    let text = format!(
        r#"{{"ID": "web", "Properties": {{"Allocation": {{"Size": {size}}}, "Updating": {updating},
  "Instance": {{"Properties": {{"resource": {{"fakecloud_instance": {{"vm": {{"name": "{name}"}}}},
    "fakecloud_volume": {{"data": {{"@scope": "@dedicated", "size": 5}}}}}}}}}}}}}}"#
    );
    c.s.write_outside(&format!("{name}.json"), &text)
}

/// A health command that reads each machine's object in the cloud: a machine named `bad` is
/// not healthy.
fn health_cmd(c: &Cloud) -> String {
    format!("! grep -q '\"name\": \"bad\"' {}/\"$INFRAKIT_TF_ATTR_ID\".json", c.cloud.display())
}

/// The names of the VMs in the cloud, and how many carry each.
fn names(c: &Cloud) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for o in c.objects().values().filter(|o| o["type"] == "fakecloud_instance") {
        *out.entry(o["name"].as_str().unwrap_or_default().to_string()).or_default() += 1;
    }
    out
}

/// The cloud IDs of the volumes.
fn volumes(c: &Cloud) -> std::collections::BTreeSet<String> {
    c.objects().into_iter().filter(|(_, o)| o["type"] == "fakecloud_volume").map(|(id, _)| id).collect()
}

#[test]
fn a_failed_rollout_with_auto_rollback_goes_back_to_the_last_good_spec_and_stays() {
    let c = Cloud::new();
    let updating = r#"{"MaxUnavailable": 2, "AutoRollback": true}"#;
    let health = health_cmd(&c);
    let good = volume_spec(&c, 10, "good", updating);
    reconcile(&c, &good, &[]);
    // The run after finds it whole and current: that spec is its last good one.
    let settled = reconcile(&c, &good, &["--health-cmd", &health]);
    assert_eq!(settled["groups"][0]["current"], 10, "{settled}");
    let before = volumes(&c);
    assert_eq!(before.len(), 10);

    // A new spec whose machines are not healthy: its first batch fails the gate, and every
    // member made on it is replaced by one on the last good spec, in the same run (exit 20).
    let bad = volume_spec(&c, 10, "bad", updating);
    let run =
        c.run(&["reconcile", "--group", &bad, "--health-cmd", &health, "--output", "json"]).code(Code::RolledBack);
    assert!(run.stderr.contains("rolled back to the last good spec"), "{}", run.stderr);
    let out = run.json();
    let g = &out["groups"][0];
    let r = &g["rollout"];
    assert_eq!(
        (r["state"].as_str(), r["replaced"].as_u64(), r["of"].as_u64()),
        (Some("rolled_back"), Some(10), Some(10)),
        "{r}"
    );
    assert!(r["why"].as_str().is_some_and(|w| w.contains("is not healthy")), "{r}");
    assert_eq!(g["pending"], false, "whole on its last good spec: {g}");
    assert_eq!(names(&c), [("good".to_string(), 10)].into(), "every member back on the last good spec");
    assert!(c.machines_per_instance().values().all(|n| *n == 1), "{:?}", c.machines_per_instance());
    assert_eq!(volumes(&c), before, "each slot kept its volume, re-attached");

    // The same spec is not rolled out again: the next runs replace nothing, and say why.
    let again = c.run(&["reconcile", "--group", &bad, "--health-cmd", &health]).ok();
    assert!(again.stdout.contains("rollout rolled back to "), "{}", again.stdout);
    let again = reconcile(&c, &bad, &["--health-cmd", &health]);
    assert_eq!(again["groups"][0]["replaced"], Value::Array(vec![]), "{again}");
    c.run(&["reconcile", "--group", &bad, "--check"]).ok();
    let described = c.run(&["describe", "--group", &bad, "--output", "json"]).ok().json();
    let rows = described.as_array().unwrap();
    assert!(rows.iter().all(|r| r["current"] == true && r["rollout"]["state"] == "rolled_back"), "{described}");
    let table = c.run(&["describe", "--group", &bad]).ok();
    assert!(table.stdout.contains("group web: rollout rolled back to "), "{}", table.stdout);

    // A changed spec rolls.
    let fixed = volume_spec(&c, 10, "fixed", updating);
    let rolled = reconcile(&c, &fixed, &["--health-cmd", &health]);
    let g = &rolled["groups"][0];
    assert_eq!((g["current"].as_u64(), g["rollout"]["state"].as_str()), (Some(10), Some("done")), "{g}");
    assert_eq!(names(&c), [("fixed".to_string(), 10)].into());
    assert_eq!(volumes(&c), before);
}

#[test]
fn a_member_on_the_new_spec_found_unhealthy_by_healing_rolls_the_rollout_back() {
    let c = Cloud::new();
    // One batch, no gate: the new spec's members fail only the next run's health checks.
    let updating = r#"{"MaxUnavailable": 4, "AutoRollback": true}"#;
    let healing = format!(r#"{{"Command": "{}", "FailuresBeforeRepair": 1}}"#, health_cmd(&c).replace('"', "\\\""));
    let spec = |name: &str| {
        let text = format!(
            r#"{{"ID": "web", "Properties": {{"Allocation": {{"Size": 4}}, "Updating": {updating}, "Healing": {healing},
  "Instance": {{"Properties": {{"resource": {{"fakecloud_instance": {{"vm": {{"name": "{name}"}}}}}}}}}}}}}}"#
        );
        c.s.write_outside(&format!("{name}.json"), &text)
    };
    let good = spec("good");
    reconcile(&c, &good, &[]);
    reconcile(&c, &good, &[]);
    let bad = spec("bad");
    let rolled = reconcile(&c, &bad, &[]);
    assert_eq!(rolled["groups"][0]["rollout"]["state"], "done", "{rolled}");
    // The next run's checks find them unhealthy before the spec was ever found good: back.
    let run = c.run(&["reconcile", "--group", &bad, "--output", "json"]).code(Code::RolledBack);
    let r = &run.json()["groups"][0]["rollout"];
    assert_eq!(r["state"], "rolled_back", "{r}");
    assert!(r["why"].as_str().is_some_and(|w| w.contains("on the new spec is not healthy")), "{r}");
    assert_eq!(names(&c), [("good".to_string(), 4)].into());
    reconcile(&c, &bad, &[]);
    assert_eq!(names(&c), [("good".to_string(), 4)].into(), "not rolled out again");
}

#[test]
fn rollback_on_demand_and_retry_rollout() {
    let c = Cloud::new();
    let updating = r#"{"MaxUnavailable": 2, "Checkpoints": [50], "CheckpointDelay": "1h"}"#;
    let v1 = spec(&c, 4, "v1", updating);
    // Nothing to roll back to yet: refused, nothing changed.
    reconcile(&c, &v1, &[]);
    let run = c.run(&["reconcile", "--group", &v1, "--rollback", "web"]).code(Code::Invalid);
    assert!(run.stderr.contains("nothing to roll back to"), "{}", run.stderr);
    reconcile(&c, &v1, &[]);
    let v2 = spec(&c, 4, "v2", updating);
    let paused = reconcile(&c, &v2, &[]);
    assert_eq!(paused["groups"][0]["rollout"]["state"], "paused", "{paused}");
    for (args, code, says) in [
        (vec!["--rollback", "db"], Code::Usage, "no group `db`"),
        (vec!["--retry-rollout", "web"], Code::Invalid, "was not rolled back"),
    ] {
        let mut all = vec!["reconcile", "--group", &v2];
        all.extend(args);
        let run = c.run(&all).code(code);
        assert!(run.stderr.contains(says), "{}", run.stderr);
        assert_eq!(names(&c), [("v1".to_string(), 2), ("v2".to_string(), 2)].into(), "nothing changed");
    }
    // Without AutoRollback, on demand: the members on v2 go back, and the group stays on v1.
    let run = c.run(&["reconcile", "--group", &v2, "--rollback", "web", "--output", "json"]).code(Code::RolledBack);
    let r = &run.json()["groups"][0]["rollout"];
    assert_eq!(
        (r["state"].as_str(), r["why"].as_str()),
        (Some("rolled_back"), Some("asked: reconcile --rollback")),
        "{r}"
    );
    assert_eq!(names(&c), [("v1".to_string(), 4)].into());
    reconcile(&c, &v2, &["--checkpoint-delay", "0s"]);
    assert_eq!(names(&c), [("v1".to_string(), 4)].into(), "held on v1");
    // --retry-rollout rolls v2 out again, from its first checkpoint.
    let retried = reconcile(&c, &v2, &["--retry-rollout", "web"]);
    let g = &retried["groups"][0];
    assert_eq!((g["current"].as_u64(), g["rollout"]["state"].as_str()), (Some(2), Some("paused")), "{g}");
}

#[test]
fn a_rollback_killed_midway_is_finished_by_the_next_run() {
    let c = Cloud::new();
    let updating = r#"{"MaxUnavailable": 2, "AutoRollback": true}"#;
    let health = health_cmd(&c);
    let good = volume_spec(&c, 6, "good", updating);
    reconcile(&c, &good, &[]);
    reconcile(&c, &good, &[]);
    let before = volumes(&c);
    let bad = volume_spec(&c, 6, "bad", updating);
    // SIGKILL to the whole process group while the rollback makes its first member back.
    let mut run = c.start(&["reconcile", "--group", &bad, "--health-cmd", &health], &[]);
    assert!(run.wait_for("rolling back to").is_some());
    c.delay_creates(1500);
    assert!(run.wait_for("creating fakecloud_instance").is_some());
    run.kill(true);
    run.finish();
    c.delay_creates(0);
    // The next run goes on with the rollback (exit 20), and the group ends as one that was
    // never killed: all on the last good spec, each slot's volume kept, nothing twice.
    let out =
        c.run(&["reconcile", "--group", &bad, "--health-cmd", &health, "--output", "json"]).code(Code::RolledBack);
    assert_eq!(out.json()["groups"][0]["rollout"]["state"], "rolled_back", "{}", out.stdout);
    assert_eq!(names(&c), [("good".to_string(), 6)].into());
    assert!(c.machines_per_instance().values().all(|n| *n == 1), "{:?}", c.machines_per_instance());
    assert_eq!(volumes(&c), before);
    let again = reconcile(&c, &bad, &["--health-cmd", &health]);
    assert_eq!(again["groups"][0]["replaced"], Value::Array(vec![]), "{again}");
}

#[test]
fn a_spec_that_fails_to_apply_is_rolled_back_and_never_applied_again() {
    let c = Cloud::new();
    let updating = r#"{"MaxUnavailable": 1, "AutoRollback": true}"#;
    let good = volume_spec(&c, 3, "good", updating);
    reconcile(&c, &good, &[]);
    reconcile(&c, &good, &[]);
    let before = volumes(&c);
    // The cloud refuses to make machines named `bad` (an image that does not exist): the first
    // replacement's create fails for a reason that is not transient, and the rollout rolls back.
    std::fs::write(c.cloud.join("fail-create"), "bad").unwrap();
    let bad = volume_spec(&c, 3, "bad", updating);
    let run = c.run(&["reconcile", "--group", &bad, "--output", "json"]).code(Code::RolledBack);
    let r = &run.json()["groups"][0]["rollout"];
    assert_eq!(r["state"], "rolled_back", "{r}");
    assert!(r["why"].as_str().is_some_and(|w| w.contains("fail-create")), "{r}");
    assert_eq!(names(&c), [("good".to_string(), 3)].into());
    assert_eq!(volumes(&c), before, "each slot kept its volume");
    reconcile(&c, &bad, &[]);

    // Without AutoRollback, the rollout stops on the failed create (exit 7), its replacement's
    // file left for the next apply to try again; `--rollback` goes back all the same: the
    // replacement that was never made is not applied again first.
    let updating = r#"{"MaxUnavailable": 1}"#;
    let good = volume_spec(&c, 3, "good", updating);
    reconcile(&c, &good, &[]);
    reconcile(&c, &good, &[]);
    let worse = volume_spec(&c, 3, "bad", r#"{"MaxUnavailable": 1, "Checkpoints": [50]}"#);
    c.run(&["reconcile", "--group", &worse]).code(Code::TerraformFailed);
    assert_eq!(names(&c), [("good".to_string(), 2)].into());
    c.run(&["reconcile", "--group", &worse]).code(Code::TerraformFailed);
    let run = c.run(&["reconcile", "--group", &worse, "--rollback", "web", "--output", "json"]).code(Code::RolledBack);
    assert_eq!(run.json()["groups"][0]["rollout"]["state"], "rolled_back", "{}", run.stdout);
    assert_eq!(names(&c), [("good".to_string(), 3)].into());
    assert_eq!(volumes(&c), before);
    reconcile(&c, &worse, &[]);
}

#[test]
fn a_last_batch_that_failed_its_gate_is_checked_again_and_never_taken_as_good() {
    let c = Cloud::new();
    let health = health_cmd(&c);
    // One member with a volume: its only batch destroys first, so the failed replacement stays.
    let good = volume_spec(&c, 1, "good", "{}");
    reconcile(&c, &good, &[]);
    reconcile(&c, &good, &[]);
    let bad = volume_spec(&c, 1, "bad", "{}");
    c.run(&["reconcile", "--group", &bad, "--health-cmd", &health]).code(Code::UpdateStopped);
    // Every member is on the new spec now; the next run checks them before calling the
    // rollout done, and it stays stopped.
    let run =
        c.run(&["reconcile", "--group", &bad, "--health-cmd", &health, "--output", "json"]).code(Code::UpdateStopped);
    let r = &run.json()["groups"][0]["rollout"];
    assert_eq!(r["state"], "stopped", "{r}");
    // The spec that failed never became the last good one: --rollback goes back to `good`.
    c.run(&["reconcile", "--group", &bad, "--health-cmd", &health, "--rollback", "web"]).code(Code::RolledBack);
    assert_eq!(names(&c), [("good".to_string(), 1)].into());
}
