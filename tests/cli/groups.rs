//! Groups that `reconcile` keeps whole: InfraKit group specs converged on the fakecloud
//! provider (size, logical IDs, self-healing, rolling updates, limits).

use std::collections::BTreeSet;

use serde_json::Value;

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;
use crate::support::specs::web;

/// A group of VMs alone (no dedicated resource: rolling updates surge).
fn plain(id: &str, size: u64, name: &str) -> String {
    format!(
        r##"{{"ID": "{id}", "Properties": {{"Allocation": {{"Size": {size}}},
  "Instance": {{"Properties": {{"resource": {{"fakecloud_instance": {{"vm": {{"name": "{name}"}}}}}}}}}}}}}}"##
    )
}

fn reconcile(c: &Cloud, spec: &str, extra: &[&str]) -> Value {
    let mut args = vec!["reconcile", "--group", spec, "--output", "json"];
    args.extend_from_slice(extra);
    c.run(&args).ok().json()
}

/// The group's members as describe lists them: (ID, VM cloud ID, attachments).
fn members(c: &Cloud) -> Vec<Value> {
    c.describe().into_iter().filter(|r| r["Tags"]["infrakit.group"].is_string()).collect()
}

fn vms(c: &Cloud) -> usize {
    c.objects().values().filter(|o| o["type"] == "fakecloud_instance").count()
}

#[test]
fn a_group_is_created_in_one_apply_then_left_alone() {
    let c = Cloud::new();
    let spec = c.s.write_outside("web.json", &web(r#"{"Size": 3}"#, "v1"));
    // The three VMs' creates wait for one another: the run succeeds only if each started
    // before any finished (in parallel, not one after the other).
    c.creates_together("fakecloud_instance", 3);
    let out = reconcile(&c, &spec, &[]);
    let g = &out["groups"][0];
    assert_eq!(g["ID"], "web");
    assert_eq!(g["desired"], 3);
    assert_eq!(g["members"], 3);
    assert_eq!(g["current"], 3);
    assert_eq!(g["provisioned"].as_array().unwrap().len(), 3, "{out}");
    assert_eq!(out["terraform_runs"], 2, "one plan, one apply for all three: {out}");
    c.creates_together("fakecloud_instance", 0);
    assert_eq!(vms(&c), 3);
    let rows = members(&c);
    assert_eq!(rows.len(), 3);
    let hash = rows[0]["Tags"]["infrakit.config.hash"].as_str().unwrap().to_string();
    assert_eq!(hash.len(), 32, "{hash}");
    for r in &rows {
        assert_eq!(r["status"], "created", "{r}");
        assert_eq!(r["Tags"]["infrakit.group"], "web");
        assert_eq!(r["Tags"]["role"], "web", "the flavor's tags are merged");
        assert_eq!(r["Tags"]["infrakit.config.hash"], hash.as_str());
        assert_eq!(r["Tags"]["infrakit.config_sha"], hash.as_str(), "the same hash under both names");
        let file: Value =
            serde_json::from_str(&std::fs::read_to_string(c.s.dir.join(r["file"].as_str().unwrap())).unwrap()).unwrap();
        let id = r["ID"].as_str().unwrap();
        let user_data = file["resource"]["fakecloud_instance"][id]["user_data"].as_str().unwrap();
        assert!(
            user_data.starts_with("v1") && user_data.ends_with("echo hello"),
            "the flavor's Init is appended: {user_data:?}"
        );
    }
    assert_eq!(vms(&c), 3);
    let volumes = c.objects().values().filter(|o| o["type"] == "fakecloud_volume").count();
    assert_eq!(volumes, 3 + 1, "three data volumes, one shared");

    let again = reconcile(&c, &spec, &[]);
    assert_eq!(again["groups"][0]["provisioned"], Value::Array(vec![]), "{again}");
    assert_eq!(again["applied"], false, "{again}");
    assert_eq!(again["terraform_runs"], 1);
    c.run(&["reconcile", "--group", &spec, "--check"]).ok();
}

#[test]
fn a_vanished_member_is_replaced_on_its_volume() {
    let c = Cloud::new();
    let spec = c.s.write_outside("web.json", &web(r#"{"Size": 3}"#, "v1"));
    reconcile(&c, &spec, &[]);
    let before = members(&c);
    let gone = &before[1];
    let gone_cloud = gone["attributes"]["id"].as_str().unwrap().to_string();
    let slot: Vec<&str> = gone["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|a| a.contains("_dedicated_"))
        .collect();
    c.vanish(&gone_cloud);

    let out = reconcile(&c, &spec, &[]);
    assert_eq!(out["pruned"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(out["groups"][0]["provisioned"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(out["terraform_runs"], 2, "prune and replacement in one apply: {out}");
    let after = members(&c);
    assert_eq!(after.len(), 3);
    let new_id = out["groups"][0]["provisioned"][0].as_str().unwrap();
    let new = after.iter().find(|r| r["ID"] == new_id).unwrap();
    assert!(
        new["attachments"].as_array().unwrap().iter().any(|a| a.as_str() == Some(slot[0])),
        "re-attached {slot:?}: {new}"
    );
    for kept in [&before[0], &before[2]] {
        let now = after.iter().find(|r| r["ID"] == kept["ID"]).unwrap();
        assert_eq!(now["attributes"]["id"], kept["attributes"]["id"], "the others keep their machines");
    }
    assert_eq!(vms(&c), 3);
    c.run(&["reconcile", "--group", &spec, "--check"]).ok();
}

#[test]
fn a_changed_spec_rolls_one_at_a_time_and_a_failure_stops_it() {
    let c = Cloud::new();
    let v1 = c.s.write_outside("v1.json", &web(r#"{"Size": 3}"#, "v1"));
    reconcile(&c, &v1, &[]);
    let slots_before: BTreeSet<String> = members(&c)
        .iter()
        .flat_map(|r| r["attachments"].as_array().unwrap().clone())
        .filter_map(|a| a.as_str().map(str::to_string))
        .filter(|a| a.contains("_dedicated_"))
        .collect();
    let volumes_before: BTreeSet<String> =
        c.objects().into_iter().filter(|(_, o)| o["type"] == "fakecloud_volume").map(|(k, _)| k).collect();

    let v2 = c.s.write_outside("v2.json", &web(r#"{"Size": 3}"#, "v2"));
    let check = c.run(&["reconcile", "--group", &v2, "--check"]).code(Code::Pending);
    assert!(check.stderr.contains("group web: 3 outdated"), "{}", check.stderr);
    let current = |spec: &str| -> Vec<Value> {
        let rows = c.run(&["describe", "--group", spec, "--output", "json"]).ok().json();
        rows.as_array().unwrap().iter().map(|r| r["current"].clone()).collect()
    };
    assert_eq!(current(&v1), vec![Value::Bool(true); 3], "describe says who is current");
    assert_eq!(current(&v2), vec![Value::Bool(false); 3]);

    // One replacement fails: the update stops there, nothing more is destroyed.
    std::fs::write(c.cloud.join("fail-create"), b"").unwrap();
    let run = c.run(&["reconcile", "--group", &v2, "--max-unavailable", "1", "--output", "json"]);
    assert!(run.is(Code::TerraformFailed), "{run:#?}");
    let out = run.json();
    assert!(out["groups"][0]["stopped"].is_string(), "{out}");
    assert_eq!(out["groups"][0]["replaced"], Value::Array(vec![]));
    std::fs::remove_file(c.cloud.join("fail-create")).unwrap();
    let rows = members(&c);
    assert_eq!(rows.len(), 3, "the failed replacement stands in for the one destroyed: {rows:?}");
    assert_eq!(rows.iter().filter(|r| r["status"] == "created").count(), 2, "at least 2 running: {rows:?}");

    // The next run goes on from there: the tainted replacement is re-created, the other two
    // are replaced one by one; at no point are fewer than 2 running.
    let out = reconcile(&c, &v2, &["--max-unavailable", "1"]);
    assert_eq!(out["groups"][0]["replaced"].as_array().unwrap().len(), 2, "{out}");
    assert_eq!(out["groups"][0]["current"], 3, "{out}");
    let rows = members(&c);
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r["status"] == "created"), "{rows:?}");
    let slots_after: BTreeSet<String> = rows
        .iter()
        .flat_map(|r| r["attachments"].as_array().unwrap().clone())
        .filter_map(|a| a.as_str().map(str::to_string))
        .filter(|a| a.contains("_dedicated_"))
        .collect();
    assert_eq!(slots_after, slots_before, "each volume follows its slot");
    let volumes_after: BTreeSet<String> =
        c.objects().into_iter().filter(|(_, o)| o["type"] == "fakecloud_volume").map(|(k, _)| k).collect();
    assert_eq!(volumes_after, volumes_before, "no volume was re-created");
    assert_eq!(vms(&c), 3, "no machine leaked");
    assert_eq!(current(&v2), vec![Value::Bool(true); 3]);
    c.run(&["reconcile", "--group", &v2, "--check"]).ok();
}

#[test]
fn an_unhealthy_replacement_stops_the_update_across_runs() {
    // Surge (no dedicated resource): the unhealthy replacement is taken back; the old members
    // all stay, run after run.
    let c = Cloud::new();
    let v1 = c.s.write_outside("v1.json", &plain("api", 2, "a"));
    reconcile(&c, &v1, &[]);
    let old: BTreeSet<String> = members(&c).iter().map(|r| r["ID"].as_str().unwrap().to_string()).collect();
    let v2 = c.s.write_outside("v2.json", &plain("api", 2, "b"));
    let marker = c.s.root.path().join("checked");
    let cmd =
        format!("echo \"$INFRAKIT_TF_ID $INFRAKIT_TF_GROUP $INFRAKIT_TF_ATTR_ID\" >> {}; exit 1", marker.display());
    for run in 1..=2 {
        let out =
            c.run(&["reconcile", "--group", &v2, "--health-cmd", &cmd, "--output", "json"]).code(Code::UpdateStopped);
        assert!(out.stderr.contains("is not healthy (the health command exited 1)"), "{}", out.stderr);
        let now: BTreeSet<String> = members(&c).iter().map(|r| r["ID"].as_str().unwrap().to_string()).collect();
        assert_eq!(now, old, "run {run}: the old members all stay, the failed one is taken back");
        assert_eq!(vms(&c), 2, "run {run}");
    }
    let checked = std::fs::read_to_string(&marker).unwrap();
    let first: Vec<&str> = checked.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(first.len(), 3, "the instance, its group and its cloud ID: {checked}");
    assert_eq!(first[1], "api");
    assert!(first[2].starts_with("i-"), "{checked}");
    let out = reconcile(&c, &v2, &["--health-cmd", "true"]);
    assert_eq!(out["groups"][0]["members"], 2, "{out}");
    assert_eq!(out["groups"][0]["current"], 2, "{out}");
    assert_eq!(vms(&c), 2);

    // Destroy first (dedicated): one old member goes for an unhealthy replacement; the next
    // run checks that replacement first and destroys nothing more.
    let c = Cloud::new();
    let v1 = c.s.write_outside("v1.json", &web(r#"{"Size": 2}"#, "v1"));
    reconcile(&c, &v1, &[]);
    let v2 = c.s.write_outside("v2.json", &web(r#"{"Size": 2}"#, "v2"));
    for run in 1..=2 {
        let out = c
            .run(&["reconcile", "--group", &v2, "--health-cmd", "exit 1", "--output", "json"])
            .code(Code::UpdateStopped);
        let g = &out.json()["groups"][0];
        assert_eq!(g["outdated"], 1, "run {run}: one old member left: {g}");
        assert_eq!(vms(&c), 2, "run {run}");
    }
}

#[test]
fn scaling_down_terminates_outdated_and_lowest_first_within_max_destroy() {
    let c = Cloud::new();
    let five = c.s.write_outside("five.json", &plain("api", 5, "a"));
    reconcile(&c, &five, &[]);
    let ids: Vec<String> = members(&c).iter().map(|r| r["ID"].as_str().unwrap().to_string()).collect();
    let two = c.s.write_outside("two.json", &plain("api", 2, "a"));
    let before = c.s.snapshot();
    let run = c.run(&["reconcile", "--group", &two, "--max-destroy", "1"]).code(Code::TooManyDestroys);
    assert!(run.stderr.contains("3 member(s) to terminate"), "{}", run.stderr);
    assert!(c.s.snapshot() == before, "refused: nothing changed");
    let out = reconcile(&c, &two, &[]);
    assert_eq!(out["groups"][0]["terminated"], serde_json::json!(ids[..3]), "the lowest IDs first: {out}");
    assert_eq!(vms(&c), 2);

    // Emptying a group needs --max-destroy.
    let none = c.s.write_outside("none.json", &plain("api", 0, "a"));
    let run = c.run(&["reconcile", "--group", &none]).code(Code::TooManyDestroys);
    assert!(run.stderr.contains("refusing to empty group `api`"), "{}", run.stderr);
    reconcile(&c, &none, &["--max-destroy", "2"]);
    assert_eq!(vms(&c), 0);
}

#[test]
fn logical_ids_and_two_groups_in_one_directory() {
    let c = Cloud::new();
    let pets = |ids: &str| {
        format!(
            r##"{{"ID": "db", "Properties": {{"Allocation": {{"LogicalIDs": {ids}}},
  "Instance": {{"Properties": {{"resource": {{"fakecloud_instance": {{"vm": {{"name": "db"}}}},
    "fakecloud_volume": {{"data": {{"@scope": "@dedicated", "size": 1}}}}}}}}}}}}}}"##
        )
    };
    let db = c.s.write_outside("db.json", &pets(r#"["db-a", "db-b"]"#));
    let api = c.s.write_outside("api.json", &plain("api", 2, "a"));
    c.s.write(
        "infrakit-tf.json",
        r#"{"vm_types": {"fakecloud_instance": {}}, "groups": ["../db.json", "../api.json"]}"#,
    );
    let out = c.run(&["reconcile", "--output", "json"]).ok().json();
    assert_eq!(out["groups"].as_array().unwrap().len(), 2, "{out}");
    assert_eq!(out["terraform_runs"], 2, "both groups in one apply: {out}");
    let lids: BTreeSet<String> =
        members(&c).iter().filter_map(|r| r["LogicalID"].as_str().map(str::to_string)).collect();
    assert_eq!(lids, ["db-a".to_string(), "db-b".to_string()].into());
    assert_eq!(vms(&c), 4);

    let db2 = c.s.write_outside("db.json", &pets(r#"["db-b", "db-c"]"#));
    assert_eq!(db2, db);
    let out = c.run(&["reconcile", "--output", "json"]).ok().json();
    let g = out["groups"].as_array().unwrap().iter().find(|g| g["ID"] == "db").unwrap().clone();
    assert_eq!(g["provisioned"].as_array().unwrap().len(), 1, "{g}");
    assert_eq!(g["terminated"].as_array().unwrap().len(), 1, "{g}");
    let lids: BTreeSet<String> =
        members(&c).iter().filter_map(|r| r["LogicalID"].as_str().map(str::to_string)).collect();
    assert_eq!(lids, ["db-b".to_string(), "db-c".to_string()].into());
    assert!(
        c.s.files().contains(&"db-c_dedicated_db-c.tf.json".to_string())
            || c.s.files().iter().any(|f| f.contains("db-c")),
        "{:?}",
        c.s.files()
    );
    c.run(&["reconcile", "--check"]).ok();
    let _ = api;
}

#[test]
fn malformed_group_specs_change_nothing() {
    let c = Cloud::new();
    let bad = c.s.write_outside(
        "bad.json",
        r#"{"ID": "../x", "Properties": {"Allocation": {"Size": -1, "LogicalIDs": ["a", "a"]}, "Instance": {}}}"#,
    );
    let before = c.s.snapshot();
    for cmd in ["reconcile", "validate", "provision"] {
        let args: Vec<&str> = match cmd {
            "reconcile" => vec!["reconcile", "--group", &bad],
            other => vec![other, &bad],
        };
        let run = c.run(&args).code(Code::Invalid);
        assert!(run.stderr.contains("has 3 problems"), "{cmd}: {}", run.stderr);
        assert!(run.stderr.contains("group ID `../x`"), "{cmd}: {}", run.stderr);
    }
    assert!(c.s.snapshot() == before);
}

#[test]
fn provision_accepts_a_group_spec() {
    let c = Cloud::new();
    let spec = c.s.write_outside("api.json", &plain("api", 2, "a"));
    c.run(&["validate", &spec]).ok();
    let id = c.run(&["provision", &spec]).ok().stdout.trim().to_string();
    let row = members(&c).into_iter().find(|r| r["ID"] == id.as_str()).unwrap();
    assert_eq!(row["Tags"]["infrakit.group"], "api");
    assert_eq!(row["Tags"]["infrakit.config.hash"].as_str().unwrap().len(), 32);
    // reconcile counts it: one more makes two.
    let out = reconcile(&c, &spec, &[]);
    assert_eq!(out["groups"][0]["provisioned"].as_array().unwrap().len(), 1, "{out}");
}

// SIGTERM during a rolling update: terraform stops the create it runs, no further step starts
// (the second outdated member is not touched), exit 130; the next run goes on and converges.
#[test]
fn sigterm_stops_a_rolling_update_and_the_next_run_goes_on() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;

    let s = crate::support::Scratch::new();
    s.write("main.tf", "terraform {}\n");
    let (started, release) = (s.root.path().join("started"), s.root.path().join("release"));
    // A member's create waits for `release` the first time only (at most 60 s).
    let slow = format!(
        "if [ ! -e {started} ]; then touch {started}; i=0; while [ ! -e {release} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; fi",
        started = started.display(),
        release = release.display()
    );
    let spec = |version: &str, command: &str| {
        serde_json::json!({"ID": "api", "Properties": {"Allocation": {"Size": 2},
            "Instance": {"Properties": {"resource": {"terraform_data": {"vm": {"input": {"v": version},
                "provisioner": [{"local-exec": {"command": command}}]}}}}}}})
        .to_string()
    };
    let v1 = s.write_outside("v1.json", &spec("1", "true"));
    s.run(&["reconcile", "--group", &v1]).ok();
    let old = s.described_ids();
    let v2 = s.write_outside("v2.json", &spec("2", &slow));

    let mut cmd = crate::support::command(&s.cli_config());
    cmd.args(["--dir", s.dir.to_str().unwrap(), "reconcile", "--group", &v2]).process_group(0);
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader =
        std::thread::spawn(move || BufReader::new(stderr).lines().map(Result::unwrap).collect::<Vec<_>>().join("\n"));
    crate::support::wait_for(&started, "the replacement's create never started");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    assert_eq!(status.code(), Some(Code::Interrupted as i32), "{stderr}");
    assert_eq!(stderr.matches("replacing instance-").count(), 1, "no further step started: {stderr}");
    std::fs::File::create(&release).unwrap();

    let out = s.run(&["reconcile", "--group", &v2, "--output", "json"]).ok().json();
    assert_eq!(out["groups"][0]["members"], 2, "{out}");
    assert_eq!(out["groups"][0]["current"], 2, "{out}");
    let rows = s.run(&["describe", "--output", "json"]).ok().json();
    let now: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["ID"].as_str().unwrap()).collect();
    assert!(old.iter().all(|o| !now.contains(&o.as_str())), "both old members replaced: {old:?} -> {now:?}");
    assert!(rows.as_array().unwrap().iter().all(|r| r["status"] == "created"), "{rows}");
    s.run(&["reconcile", "--group", &v2, "--check"]).ok();
}

// A logical ID or a dedicated slot is never given to two instances: not by a pets group whose
// logical ID another instance has, not by two groups, not by a pet whose logical ID looks like
// a cattle slot number. Refused with nothing changed.
#[test]
fn logical_ids_and_slots_are_never_shared() {
    let c = Cloud::new();
    let pets = |id: &str, lids: &str| {
        c.s.write_outside(
            &format!("{id}.json"),
            &format!(
                r#"{{"ID": "{id}", "Properties": {{"Allocation": {{"LogicalIDs": {lids}}},
  "Instance": {{"Properties": {{"resource": {{"fakecloud_instance": {{"vm": {{"name": "db"}}}},
    "fakecloud_volume": {{"data": {{"@scope": "@dedicated", "size": 1}}}}}}}}}}}}}}"#
            ),
        )
    };
    // A cattle member takes slot 1; a pet with logical ID `1` would take the same file.
    let cattle = c.s.write_outside("cattle.json", &web(r#"{"Size": 1}"#, "v1"));
    reconcile(&c, &cattle, &[]);
    let (one, db1, db2) = (pets("one", r#"["1"]"#), pets("db1", r#"["a"]"#), pets("db2", r#"["a"]"#));
    let before = c.s.snapshot();
    let run = c.run(&["reconcile", "--group", &one]).code(Code::Invalid);
    assert!(
        run.stderr.contains("dedicated slot `default_dedicated_1` is attached to another instance"),
        "{}",
        run.stderr
    );
    assert!(c.s.snapshot() == before, "refused: nothing changed");
    let run = c.run(&["provision", &c.spec(), "--logical-id", "1", "--no-apply"]).code(Code::Invalid);
    assert!(run.stderr.contains("is attached to another instance"), "{}", run.stderr);

    // Two groups asking for one logical ID: the second is refused, nothing written.
    let run = c.run(&["reconcile", "--group", &db1, "--group", &db2]).code(Code::Invalid);
    assert!(run.stderr.contains("logical ID `a` is already used by"), "{}", run.stderr);
    assert!(c.s.snapshot() == before, "refused: nothing changed");
}

// `--max-destroy` counts what the run's new spec destroys, as terraform plans it: a spec that
// drops the dedicated volume destroys the three volumes with the three machines it replaces.
#[test]
fn max_destroy_counts_what_a_new_spec_destroys() {
    let c = Cloud::new();
    let v1 = c.s.write_outside("v1.json", &web(r#"{"Size": 3}"#, "v1"));
    reconcile(&c, &v1, &[]);
    let without_volume = web(r#"{"Size": 3}"#, "v2").replace(r#""data": {"@scope": "@dedicated", "size": 5}, "#, "");
    assert!(!without_volume.contains("@dedicated"), "{without_volume}");
    let v2 = c.s.write_outside("v2.json", &without_volume);
    let before = c.s.snapshot();
    let run = c.run(&["reconcile", "--group", &v2, "--max-destroy", "5"]).code(Code::TooManyDestroys);
    assert!(run.stderr.contains("refusing to destroy 6 resources"), "{}", run.stderr);
    assert!(c.s.snapshot() == before, "refused: nothing changed");
    let out = reconcile(&c, &v2, &["--max-destroy", "6"]);
    assert_eq!(out["groups"][0]["current"], 3, "{out}");
    let volumes = c.objects().values().filter(|o| o["type"] == "fakecloud_volume").count();
    assert_eq!(volumes, 1, "only the shared volume is left");
}

// A refused run changes nothing, not even the queue it promoted to plan it.
#[test]
fn a_refused_run_puts_the_queue_back() {
    let c = Cloud::new();
    let api = c.s.write_outside("api.json", &plain("api", 1, "a"));
    c.run(&["provision", "--no-apply", &api]).ok();
    let none = c.s.write_outside("none.json", &plain("api", 0, "a"));
    let before = c.s.snapshot();
    let run = c.run(&["reconcile", "--group", &none]).code(Code::TooManyDestroys);
    assert!(run.stderr.contains("refusing to empty group `api`"), "{}", run.stderr);
    let after = c.s.snapshot();
    // `.terraform` is terraform's own cache: the `init` a first plan needs may fill it.
    let changed: Vec<_> = after
        .keys()
        .chain(before.keys())
        .filter(|k| before.get(*k) != after.get(*k) && !k.to_string_lossy().contains("/.terraform"))
        .collect();
    assert!(changed.is_empty(), "refused, yet changed: {changed:?} (the queued file is queued again)");
    assert!(c.s.files().iter().any(|f| f.ends_with(".tf.json.new")), "{:?}", c.s.files());
}
