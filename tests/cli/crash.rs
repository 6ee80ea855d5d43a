//! Crash points: each command is killed with SIGKILL at every one of its file-system mutations
//! and terraform spawns (the binary is built with the `fault-injection` feature, see
//! `src/fault.rs`), then the user's recovery runs: `reconcile`, as cron would. Afterwards the
//! directory and the cloud must be whole: every managed file valid, every attachment present,
//! no machine duplicated or leaked, state matching the files, `reconcile --check` clean, no
//! temporary file or journal left, and the killed change done wholly or not at all.
//!
//! A killed run's terraform goes on (its output goes to files, not to our pipe): the recovery
//! starts once no process works in the directory any more, as the next cron run would find it.

use std::collections::BTreeSet;

use infrakit_tf::exit::Code;
use serde_json::Value;

use crate::support::cloud::Cloud;

/// How a scenario prepares its group and which command it then kills.
struct Scenario {
    name: &'static str,
    /// Prepares the template group; returns the command to kill.
    setup: fn(&Cloud) -> Vec<String>,
    /// Objects in the cloud that the directory does not manage, by design (a hand-made machine
    /// an import may or may not have adopted).
    unmanaged: &'static [&'static str],
    /// Whether the instances after recovery are an acceptable outcome of the killed command
    /// (all of it, or none of it), given those before.
    whole: fn(&BTreeSet<String>, &BTreeSet<String>) -> bool,
}

fn provision(c: &Cloud) -> String {
    c.run(&["provision", &c.spec()]).ok().stdout.trim().to_string()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(ToString::to_string).collect()
}

fn none_or_one_more(before: &BTreeSet<String>, after: &BTreeSet<String>) -> bool {
    after == before || (after.is_superset(before) && after.len() == before.len() + 1)
}

fn unchanged_or_gone(gone: &'static [usize]) -> impl Fn(&BTreeSet<String>, &BTreeSet<String>) -> bool {
    move |before, after| {
        let ids: Vec<&String> = before.iter().collect();
        let without: BTreeSet<String> =
            ids.iter().enumerate().filter(|(i, _)| !gone.contains(i)).map(|(_, id)| (*id).clone()).collect();
        after == before || *after == without
    }
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "provision (VM, dedicated and global)",
        setup: |c| {
            provision(c);
            vec!["provision".into(), c.spec()]
        },
        unmanaged: &[],
        whole: none_or_one_more,
    },
    Scenario {
        name: "destroy: terminate the last instance (its slot and the global go)",
        setup: |c| {
            let id = provision(c);
            args(&["destroy", &id, "--yes"])
        },
        unmanaged: &[],
        whole: |before, after| after == before || after.is_empty(),
    },
    Scenario {
        name: "destroy: rolling update",
        setup: |c| {
            provision(c);
            let id = provision(c);
            args(&["destroy", &id, "--reason", "rolling-update", "--yes"])
        },
        unmanaged: &[],
        whole: |b, a| unchanged_or_gone(&[1])(b, a),
    },
    Scenario {
        name: "destroy: several IDs at once",
        setup: |c| {
            let a = provision(c);
            let b = provision(c);
            provision(c);
            args(&["destroy", &a, &b, "--yes"])
        },
        unmanaged: &[],
        whole: |b, a| unchanged_or_gone(&[0, 1])(b, a),
    },
    Scenario {
        name: "label",
        setup: |c| {
            let id = provision(c);
            args(&["label", &id, "owner=ops", "tier=db"])
        },
        unmanaged: &[],
        whole: |before, after| before == after,
    },
    Scenario {
        name: "reconcile: a vanished machine and a queued instance",
        setup: |c| {
            let id = provision(c);
            provision(c);
            c.vanish(&c.machine(&id));
            c.run(&["provision", "--no-apply", &c.spec()]).ok();
            args(&["reconcile"])
        },
        unmanaged: &[],
        // The vanished one is pruned by the killed run or by the recovery: either way it goes.
        whole: |before, after| after.len() == before.len() - 1 && after.is_subset(before),
    },
    Scenario {
        name: "sweep-orphans",
        setup: |c| {
            let id = provision(c);
            provision(c);
            c.run(&["destroy", &id, "--reason", "rolling-update", "--yes"]).ok();
            args(&["sweep-orphans", "--yes"])
        },
        unmanaged: &[],
        whole: |before, after| before == after,
    },
    Scenario {
        name: "import",
        setup: |c| {
            crate::support::specs::hand_made(c);
            let spec = c.s.write_outside("managers.json", crate::support::specs::MANAGERS);
            args(&["import", &spec, "--resource", "fakecloud_instance=i-0000abcd"])
        },
        unmanaged: &["i-0000abcd", "vol-0000beef"],
        whole: none_or_one_more,
    },
    Scenario {
        name: "reconcile: a group scaled from 1 to 3 (VM, dedicated and global)",
        setup: |c| {
            group(c, 1, "v1");
            c.run(&["reconcile"]).ok();
            group(c, 3, "v1");
            args(&["reconcile"])
        },
        unmanaged: &[],
        // The recovery converges the group: the one member kept, two added.
        whole: |before, after| after.len() == 3 && after.is_superset(before),
    },
    Scenario {
        name: "reconcile: a rolling update of a group of 2 (dedicated: destroy first)",
        setup: |c| {
            group(c, 2, "v1");
            c.run(&["reconcile"]).ok();
            group(c, 2, "v2");
            args(&["reconcile"])
        },
        unmanaged: &[],
        // Replaced or not, two members (`reconcile --check` then says they are all current).
        whole: |_, after| after.len() == 2,
    },
    Scenario {
        name: "reconcile with look-ups: a vanished member (listed, confirmed, forgotten, replaced)",
        setup: |c| {
            group(c, 2, "v1");
            c.with_lookups();
            c.run(&["reconcile"]).ok();
            c.run(&["reconcile"]).ok(); // the whole plan that found nothing to do is noted
            let machine = c.describe()[0]["attributes"]["id"].as_str().unwrap().to_string();
            c.vanish(&machine);
            args(&["reconcile"])
        },
        unmanaged: &[],
        // The vanished member is pruned and replaced, by the killed run or by the recovery.
        whole: |before, after| after.len() == 2 && after != before,
    },
];

/// Writes the group spec `web.json` (size `size`, the members' `user_data` `version`) and
/// lists it in infrakit-tf.json, so that a plain `reconcile` (the recovery) converges it.
fn group(c: &Cloud, size: u64, version: &str) {
    c.s.write_outside("group.json", &crate::support::specs::web(&format!(r#"{{"Size": {size}}}"#), version));
    c.s.write("infrakit-tf.json", r#"{"vm_types": {"fakecloud_instance": {}}, "groups": ["../group.json"]}"#);
}

#[test]
fn groups_survive_a_kill_at_every_point() {
    for scenario in &SCENARIOS[8..10] {
        crash_everywhere(scenario);
    }
}

#[test]
fn a_reconcile_that_lists_survives_a_kill_at_every_point() {
    crash_everywhere(&SCENARIOS[10]);
}

#[test]
fn provision_destroy_label_survive_a_kill_at_every_point() {
    for scenario in &SCENARIOS[..5] {
        crash_everywhere(scenario);
    }
}

#[test]
fn reconcile_sweep_import_survive_a_kill_at_every_point() {
    for scenario in &SCENARIOS[5..8] {
        crash_everywhere(scenario);
    }
}

fn crash_everywhere(scenario: &Scenario) {
    let template = Cloud::new();
    let command = (scenario.setup)(&template);
    let command: Vec<&str> = command.iter().map(String::as_str).collect();

    // Count the crash points of an undisturbed run.
    let counting = template.copy();
    let log = counting.s.root.path().join("crash.log");
    let run = counting.run_env(&command, &[("INFRAKIT_TF_CRASH_LOG", log.to_str().unwrap())]);
    assert!(run.is(Code::Ok), "{}: the undisturbed run fails: {run:#?}", scenario.name);
    let points = std::fs::read_to_string(&log).unwrap();
    let total = points.lines().count();
    assert!(total >= 2, "{}: too few crash points: {points}", scenario.name);

    for k in 1..=total {
        let c = template.copy();
        let before = instances(&c);
        let what = points.lines().nth(k - 1).unwrap();
        let at = k.to_string();
        let run = c.run_env(&command, &[("INFRAKIT_TF_CRASH_AT", &at)]);
        assert_eq!(run.code, -libc::SIGKILL, "{}: not killed at point {what}: {run:#?}", scenario.name);
        crate::support::wait_until_idle(&c.s.dir);
        let recovery = c.run(&["reconcile", "--output", "json"]);
        let context = format!("{}, killed at point {what}", scenario.name);
        assert!(recovery.is(Code::Ok), "{context}: recovery failed: {recovery:#?}");
        assert_whole(&c, scenario, &before, &context);
    }
}

/// The instance IDs the directory defines.
fn instances(c: &Cloud) -> BTreeSet<String> {
    c.describe().iter().map(|r| r["ID"].as_str().unwrap().to_string()).collect()
}

fn assert_whole(c: &Cloud, scenario: &Scenario, before: &BTreeSet<String>, context: &str) {
    let names: Vec<String> =
        std::fs::read_dir(&c.s.dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    for name in &names {
        assert!(!name.ends_with(".tmp"), "{context}: temporary file left: {name}");
        assert!(!name.ends_with(".tf.json.new"), "{context}: queued file not applied: {name}");
        assert_ne!(name, ".infrakit-tf-journal.json", "{context}: journal left");
        if name.ends_with(".tf.json") {
            let text = std::fs::read(c.s.dir.join(name)).unwrap();
            serde_json::from_slice::<Value>(&text).unwrap_or_else(|e| panic!("{context}: `{name}` is damaged: {e}"));
        }
    }
    let rows = c.describe();
    let after: BTreeSet<String> = rows.iter().map(|r| r["ID"].as_str().unwrap().to_string()).collect();
    assert!((scenario.whole)(before, &after), "{context}: half a change: {before:?} -> {after:?}");
    for row in &rows {
        assert_eq!(row["status"], "created", "{context}: {row}");
        for base in row["attachments"].as_array().unwrap().iter().map(|b| b.as_str().unwrap()) {
            assert!(names.contains(&format!("{base}.tf.json")), "{context}: {} lost its `{base}`", row["ID"]);
        }
    }
    // The cloud holds exactly what the state manages (plus what is unmanaged by design): no
    // machine made twice, none leaked, none lost.
    let managed: BTreeSet<String> = c.state().into_values().filter(|id| !id.is_empty()).collect();
    let cloud: BTreeSet<String> = c.objects().into_keys().collect();
    let extra: Vec<&String> =
        cloud.difference(&managed).filter(|id| !scenario.unmanaged.contains(&id.as_str())).collect();
    assert!(extra.is_empty(), "{context}: objects no state manages (leaked or duplicated): {extra:?}");
    assert!(managed.is_subset(&cloud), "{context}: state names objects the cloud lacks");
    let vms = c.objects().values().filter(|o| o["type"] == "fakecloud_instance").count();
    let adopted_or_not = scenario.unmanaged.iter().filter(|id| id.starts_with("i-") && !managed.contains(**id)).count();
    assert_eq!(vms, after.len() + adopted_or_not, "{context}: one VM per instance");
    let check = c.run(&["reconcile", "--check"]);
    assert!(check.is(Code::Ok), "{context}: not converged: {check:#?}");
}
