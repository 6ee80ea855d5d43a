//! Health-based repair (`Healing`, `--heal-*`): every reconcile run checks each created member;
//! one that failed `FailuresBeforeRepair` checks in a row is replaced in its slot, at most
//! `MaxRepairsPerRun` a run; with more unhealthy members than `MaxUnhealthy`, nothing is
//! repaired and the run exits 18. The health command reads a marker file per member.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Value};

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;
use crate::support::specs::{healed_api, healed_api_text};

fn sick(c: &Cloud, id: &str) -> PathBuf {
    let marker = c.s.root.path().join(format!("sick-{id}"));
    std::fs::write(&marker, b"").unwrap();
    marker
}

/// The group's members: ID → (cloud ID of its machine, its dedicated slot).
fn members(c: &Cloud) -> BTreeMap<String, (String, String)> {
    c.describe()
        .into_iter()
        .filter(|r| r["Tags"]["infrakit.group"] == "api")
        .map(|r| {
            let slot = r["attachments"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .find(|a| a.contains("_dedicated_"));
            (
                r["ID"].as_str().unwrap().to_string(),
                (r["attributes"]["id"].as_str().unwrap_or("").to_string(), slot.unwrap_or("").to_string()),
            )
        })
        .collect()
}

fn volumes(c: &Cloud) -> Vec<String> {
    c.objects().into_iter().filter(|(_, o)| o["type"] == "fakecloud_volume").map(|(k, _)| k).collect()
}

fn checked(c: &Cloud) -> Vec<String> {
    let text = std::fs::read_to_string(c.s.root.path().join("checked")).unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

fn reconcile(c: &Cloud, spec: &str, code: Code) -> Value {
    let run = c.run(&["reconcile", "--group", spec, "--output", "json"]).code(code);
    run.json()["groups"][0].clone()
}

#[test]
fn a_sick_member_is_repaired_in_its_slot_after_exactly_failures_before_repair_runs() {
    let c = Cloud::new();
    let spec = healed_api(&c, 3, json!({"FailuresBeforeRepair": 3, "Timeout": "5s"}));
    let g = reconcile(&c, &spec, Code::Ok);
    assert_eq!(g["unhealthy"], json!([]), "{g}");
    assert_eq!(g["repair_halted"], Value::Null, "{g}");
    assert_eq!(checked(&c), Vec::<String>::new(), "members the run creates are not checked by it");
    let before = members(&c);
    let vols = volumes(&c);
    let patient = before.keys().nth(1).unwrap().clone();
    sick(&c, &patient);

    for run in 1..=2 {
        let g = reconcile(&c, &spec, Code::Ok);
        assert_eq!(g["unhealthy"], json!([]), "run {run}: {g}");
        assert_eq!(g["repaired"], json!([]), "run {run}: {g}");
        assert_eq!(members(&c), before, "run {run}: nothing touched");
        let described = c.describe().into_iter().find(|r| r["ID"] == patient.as_str()).unwrap();
        assert_eq!(described["health"], format!("failing {run}/3"), "{described}");
    }
    assert_eq!(checked(&c).len(), 6, "every member checked once a run");

    let run = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok();
    let g = run.json()["groups"][0].clone();
    assert_eq!(g["unhealthy"], json!([patient]), "{g}");
    let new = g["repaired"][0]["new"].as_str().unwrap_or_else(|| panic!("not repaired: {g}")).to_string();
    assert_eq!(g["repaired"], json!([{"old": patient, "new": new}]), "{g}");
    assert_eq!(g["replaced"], json!([]), "a repair is not an update: {g}");
    assert!(run.stderr.contains(&format!("{patient} is unhealthy: repairing it")), "{}", run.stderr);
    let after = members(&c);
    assert!(!after.contains_key(&patient));
    assert_eq!(after[&new].1, before[&patient].1, "the replacement has the slot: {after:?}");
    assert_ne!(after[&new].0, before[&patient].0, "on a new machine");
    assert_eq!(volumes(&c), vols, "the volume was re-attached, not re-created");
    for (id, m) in &before {
        if *id != patient {
            assert_eq!(&after[id], m, "{id} untouched");
        }
    }
    let rows = c.run(&["describe", "--group", &spec, "--output", "json"]).ok().json();
    let described = rows.as_array().unwrap().iter().find(|r| r["ID"] == new.as_str()).unwrap().clone();
    assert_eq!(
        described["health"], "not checked yet",
        "a member of a healed group the record does not know yet: {described}"
    );
    let table = c.run(&["describe", "--group", &spec]).ok().stdout;
    assert!(table.contains("HEALTH") && table.contains("not checked yet") && table.contains("healthy"), "{table}");
    // The replacement is healthy: nothing is pending, and the next run repairs nothing.
    c.run(&["reconcile", "--group", &spec, "--check"]).ok();
    let g = reconcile(&c, &spec, Code::Ok);
    assert_eq!((g["unhealthy"].clone(), g["repaired"].clone()), (json!([]), json!([])), "{g}");
    assert_eq!(members(&c), after);
}

#[test]
fn a_member_younger_than_the_initial_delay_is_not_checked() {
    let c = Cloud::new();
    let spec = healed_api(&c, 2, json!({"FailuresBeforeRepair": 1, "InitialDelay": "1h"}));
    reconcile(&c, &spec, Code::Ok);
    let before = members(&c);
    for id in before.keys() {
        sick(&c, id);
    }
    for _ in 0..2 {
        let g = reconcile(&c, &spec, Code::Ok);
        assert_eq!(g["unhealthy"], json!([]), "{g}");
    }
    assert_eq!(checked(&c), Vec::<String>::new());
    assert_eq!(members(&c), before);
    let rows = c.describe();
    assert!(rows.iter().all(|r| r["health"] == "not checked yet"), "{rows:?}");
    // The flag overrides the spec: checked now, unhealthy after one failure, the two of two
    // more than the 50% default allows (1 of 2): halted.
    let run = c
        .run(&["reconcile", "--group", &spec, "--heal-initial-delay", "0s", "--output", "json"])
        .code(Code::RepairHalted);
    assert_eq!(checked(&c).len(), 2);
    assert_eq!(run.json()["groups"][0]["unhealthy"].as_array().unwrap().len(), 2);
}

#[test]
fn a_sick_member_that_recovers_before_the_threshold_is_not_repaired() {
    let c = Cloud::new();
    let spec = healed_api(&c, 2, json!({"FailuresBeforeRepair": 3}));
    reconcile(&c, &spec, Code::Ok);
    let before = members(&c);
    let patient = before.keys().next().unwrap().clone();
    let marker = sick(&c, &patient);
    reconcile(&c, &spec, Code::Ok);
    reconcile(&c, &spec, Code::Ok);
    std::fs::remove_file(&marker).unwrap();
    reconcile(&c, &spec, Code::Ok); // a pass resets the count
    let described = c.describe().into_iter().find(|r| r["ID"] == patient.as_str()).unwrap();
    assert_eq!(described["health"], "healthy", "{described}");
    sick(&c, &patient);
    reconcile(&c, &spec, Code::Ok);
    let g = reconcile(&c, &spec, Code::Ok);
    assert_eq!((g["unhealthy"].clone(), g["repaired"].clone()), (json!([]), json!([])), "{g}");
    assert_eq!(members(&c), before, "nothing repaired: 2 failures in a row, not 3");
}

#[test]
fn more_sick_than_max_unhealthy_repairs_nothing_and_exits_18() {
    let c = Cloud::new();
    let spec = healed_api(&c, 3, json!({"FailuresBeforeRepair": 1, "MaxUnhealthy": 1}));
    reconcile(&c, &spec, Code::Ok);
    let before = members(&c);
    let ids: Vec<String> = before.keys().cloned().collect();
    sick(&c, &ids[0]);
    let marker = sick(&c, &ids[1]);
    let metrics = c.s.root.path().join("metrics.prom");
    let run = c
        .run(&["reconcile", "--group", &spec, "--output", "json", "--metrics-file", metrics.to_str().unwrap()])
        .code(Code::RepairHalted);
    let g = run.json()["groups"][0].clone();
    assert_eq!(g["unhealthy"], json!([ids[0], ids[1]]), "{g}");
    let prom = std::fs::read_to_string(&metrics).unwrap();
    for (family, value) in
        [("group_members_unhealthy", 2), ("group_repairs", 0), ("group_repairs_halted", 1), ("last_exit_code", 18)]
    {
        let line = prom
            .lines()
            .find(|l| l.starts_with(&format!("infrakit_tf_{family}{{")))
            .unwrap_or_else(|| panic!("{prom}"));
        assert!(line.ends_with(&format!(" {value}")), "{line}");
    }
    assert_eq!(g["repaired"], json!([]), "{g}");
    assert!(g["repair_halted"].as_str().unwrap().contains("more than MaxUnhealthy 1"), "{g}");
    assert!(run.stderr.contains("group api: repairs halted"), "{}", run.stderr);
    assert!(run.error_lines().iter().any(|l| l.contains("repairs halted by the circuit breaker")), "{}", run.stderr);
    assert_eq!(members(&c), before, "nothing repaired");
    // `--check` reports the halt without a repair pending.
    c.run(&["reconcile", "--group", &spec, "--check"]).ok();

    // One recovers: repairs resume, one a run; the one left is pending for `--check`.
    std::fs::remove_file(&marker).unwrap();
    let g = reconcile(&c, &spec, Code::Ok);
    assert_eq!(g["repair_halted"], Value::Null, "{g}");
    assert_eq!(g["repaired"][0]["old"], ids[0].as_str(), "{g}");
    assert_eq!(members(&c).len(), 3);

    sick(&c, &ids[1]);
    sick(&c, &ids[2]);
    let g = reconcile(&c, &spec, Code::RepairHalted);
    assert_eq!(g["unhealthy"], json!([ids[1], ids[2]]), "{g}");
    assert!(g["repair_halted"].is_string(), "{g}");
    let line = c.run(&["reconcile", "--group", &spec]).code(Code::RepairHalted).stdout;
    assert!(line.contains(&format!("unhealthy=2 ({} {})", ids[1], ids[2])), "{line}");
    assert!(line.contains("repair_halted: 2 member(s) unhealthy, more than MaxUnhealthy 1 (1 of 3)"), "{line}");
    let run = c.run(&["reconcile", "--group", &spec, "--heal-max-unhealthy", "100%", "--check"]).code(Code::Pending);
    assert!(run.stderr.contains("group api: 1 to repair"), "{}", run.stderr);
}

#[test]
fn scale_in_gives_up_an_unhealthy_member_first() {
    let c = Cloud::new();
    // MaxUnhealthy 0: the breaker holds every repair, so the member stays unhealthy.
    let three = healed_api(&c, 3, json!({"FailuresBeforeRepair": 1, "MaxUnhealthy": 0}));
    reconcile(&c, &three, Code::Ok);
    let ids: Vec<String> = members(&c).keys().cloned().collect();
    sick(&c, &ids[2]);
    let g = reconcile(&c, &three, Code::RepairHalted);
    assert_eq!(g["unhealthy"], json!([ids[2]]), "{g}");
    let two = healed_api(&c, 2, json!({"FailuresBeforeRepair": 1, "MaxUnhealthy": 0}));
    // The breaker still counts it while it goes (it is as much evidence against the check):
    // it halts repairs, never a scale-in.
    let g = reconcile(&c, &two, Code::RepairHalted);
    assert_eq!(g["terminated"], json!([ids[2]]), "the unhealthy member goes, not the lowest ID: {g}");
    assert!(g["repair_halted"].is_string(), "{g}");
    assert_eq!(members(&c).keys().cloned().collect::<Vec<_>>(), ids[..2]);
    let g = reconcile(&c, &two, Code::Ok);
    assert_eq!(g["repair_halted"], Value::Null, "once it is gone, nothing is unhealthy: {g}");
}

// A member on its way out counts for the breaker: with more unhealthy members than
// MaxUnhealthy, a scale-in that terminates some of them repairs none of the others.
#[test]
fn members_on_their_way_out_count_for_the_breaker() {
    let c = Cloud::new();
    let healing = json!({"FailuresBeforeRepair": 1, "MaxUnhealthy": 1});
    let four = healed_api(&c, 4, healing.clone());
    reconcile(&c, &four, Code::Ok);
    let ids: Vec<String> = members(&c).keys().cloned().collect();
    for id in &ids[1..] {
        sick(&c, id);
    }
    // Three unhealthy of four: halted.
    reconcile(&c, &four, Code::RepairHalted);
    let two = healed_api(&c, 2, healing);
    let g = reconcile(&c, &two, Code::RepairHalted);
    assert_eq!(g["repaired"], json!([]), "{g}");
    assert!(g["repair_halted"].is_string(), "{g}");
    assert_eq!(g["terminated"].as_array().map(Vec::len), Some(2), "{g}");
}

// With --health-cmd too, the member being repaired is not held against its own repair by
// the rolling update's health gate.
#[test]
fn a_repair_is_not_stopped_by_the_health_gate_of_the_member_it_replaces() {
    let c = Cloud::new();
    let three = healed_api(&c, 3, json!({"FailuresBeforeRepair": 1}));
    reconcile(&c, &three, Code::Ok);
    let ids: Vec<String> = members(&c).keys().cloned().collect();
    let marker = sick(&c, &ids[1]);
    let gate = format!("test ! -e {}/sick-$INFRAKIT_TF_ID", marker.parent().unwrap().display());
    let run = c.run(&["reconcile", "--group", &three, "--health-cmd", &gate, "--output", "json"]).ok();
    let g = &run.json()["groups"][0];
    assert_eq!(g["repaired"][0]["old"], json!(ids[1]), "{g}");
}

#[test]
fn a_zero_timeout_is_refused() {
    let c = Cloud::new();
    let three = healed_api(&c, 3, json!({}));
    let run = c.run(&["reconcile", "--group", &three, "--heal-timeout", "0s"]).code(Code::Usage);
    assert!(run.stderr.contains("must be longer than 0"), "{}", run.stderr);
}

#[test]
fn two_hosts_on_a_store_continue_each_others_counts() {
    let db = crate::support::store::Db::new();
    let (a, b) = crate::support::store::hosts_at(&db.url());
    let text = healed_api_text(&a, 3, json!({"FailuresBeforeRepair": 3}));
    let (on_a, on_b) = (a.s.write_outside("api.json", &text), b.s.write_outside("api.json", &text));
    reconcile(&a, &on_a, Code::Ok);
    let before = members(&a);
    let patient = before.keys().next().unwrap().clone();
    sick(&a, &patient);
    reconcile(&a, &on_a, Code::Ok);
    reconcile(&b, &on_b, Code::Ok);
    let rows = b.run(&["describe", "--group", &on_b, "--output", "json"]).ok().json();
    let row = rows.as_array().unwrap().iter().find(|r| r["ID"] == patient.as_str()).unwrap().clone();
    assert_eq!(row["health"], "failing 2/3", "b continued a's count: {row}");
    let g = reconcile(&a, &on_a, Code::Ok);
    assert_eq!(g["repaired"][0]["old"], patient.as_str(), "the third failure, on a, repairs: {g}");
    assert_eq!(members(&b).len(), 3);
}

#[test]
fn a_sick_pet_is_repaired_under_its_logical_id() {
    let c = Cloud::new();
    let root = c.s.root.path().display();
    let spec = json!({"ID": "api", "Properties": {
        "Allocation": {"LogicalIDs": ["db-a", "db-b"]},
        "Healing": {"Command": format!("test ! -e {root}/sick-$INFRAKIT_TF_LOGICAL_ID"), "FailuresBeforeRepair": 1},
        "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": {
            "fakecloud_instance": {"vm": {"name": "a"}}}}}}});
    let spec = c.s.write_outside("pets.json", &spec.to_string());
    reconcile(&c, &spec, Code::Ok);
    let pets = |c: &Cloud| -> BTreeMap<String, String> {
        c.describe()
            .into_iter()
            .map(|r| (r["LogicalID"].as_str().unwrap().to_string(), r["ID"].as_str().unwrap().to_string()))
            .collect()
    };
    let before = pets(&c);
    sick(&c, "db-b");
    let g = reconcile(&c, &spec, Code::Ok);
    assert_eq!(g["repaired"][0]["old"], before["db-b"].as_str(), "{g}");
    std::fs::remove_file(c.s.root.path().join("sick-db-b")).unwrap();
    let after = pets(&c);
    assert_eq!(after["db-a"], before["db-a"], "the healthy pet is untouched");
    assert_eq!(g["repaired"][0]["new"], after["db-b"].as_str(), "the replacement is db-b: {after:?}");
    assert_ne!(after["db-b"], before["db-b"]);
}

// One clock: the health record is shared through the store, and its times come from the
// store's clock. A host whose own clock is two hours ahead (libfaketime) never checks, nor
// repairs, a member inside its InitialDelay.
#[test]
fn a_host_two_hours_ahead_repairs_nothing_inside_the_initial_delay() {
    let lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    assert!(std::path::Path::new(lib).exists(), "{lib} is missing: .ci/test installs Debian's faketime");
    let db = crate::support::store::Db::new();
    let (a, b) = crate::support::store::hosts_at(&db.url());
    let text = healed_api_text(&a, 2, json!({"FailuresBeforeRepair": 1, "InitialDelay": "10m"}));
    let (on_a, on_b) = (a.s.write_outside("api.json", &text), b.s.write_outside("api.json", &text));
    reconcile(&a, &on_a, Code::Ok);
    // a sees them created: first seen now, by the store's clock.
    reconcile(&a, &on_a, Code::Ok);
    let before = members(&a);
    for id in before.keys() {
        sick(&a, id);
    }
    let ahead = [
        ("LD_PRELOAD", lib),
        ("FAKETIME", "+2h"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ("FAKETIME_SKIP_CMDS", "terraform,terraform-provider-fakecloud,tofu,sh"),
    ];
    let run = b.run_env(&["reconcile", "--group", &on_b, "--output", "json"], &ahead).ok();
    let report = run.json();
    assert_eq!(report["groups"][0]["replaced"], json!([]), "{report}");
    assert!(!a.s.root.path().join("checked").exists(), "nothing was checked: {}", run.stderr);
    assert_eq!(members(&a), before, "nothing repaired");
}
