//! `reconcile` and `sweep-orphans` with the real terraform on `terraform_data` (which never
//! vanishes). Machines deleted behind Terraform's back are tested with fakecloud in
//! `fakecloud.rs`.

use std::fs::File;

use fs4::fs_std::FileExt;
use serde_json::Value;

use infrakit_tf::exit::Code;

use crate::support::terraform::state;
use crate::support::Scratch;

fn spec(s: &Scratch) -> String {
    s.dir.join("web.json").to_str().unwrap().to_string()
}

#[test]
fn promotes_the_queue_then_does_nothing_in_one_terraform_run() {
    let s = Scratch::example();
    s.run(&["provision", "--no-apply", &spec(&s)]).ok();
    let first = s.run(&["reconcile", "--output", "json"]).ok().json();
    assert_eq!(first["promoted"].as_array().unwrap().len(), 3, "{first}");
    assert_eq!((first["applied"].as_bool(), first["added"].as_u64()), (Some(true), Some(4)), "{first}");
    assert_eq!(first["terraform_runs"], 2, "a plan, then its saved plan applied: {first}");
    let second = s.run(&["reconcile", "--output", "json"]).ok().json();
    assert_eq!((second["applied"].as_bool(), second["terraform_runs"].as_u64()), (Some(false), Some(1)), "{second}");
    // Without a terminal, the report is one timestamped line: `tests/cmd/reconcile-cron-line.toml`.
}

// What --check prints is the case `tests/cmd/reconcile-check.toml`; here, its JSON report.
#[test]
fn check_changes_nothing_and_says_what_is_pending() {
    let s = Scratch::example();
    s.run(&["provision", &spec(&s)]).ok();
    let out = s.run(&["reconcile", "--check", "--output", "json"]).ok().json();
    assert_eq!(out["pending"], false);
    s.run(&["provision", "--no-apply", &spec(&s)]).ok();
    let before = s.snapshot();
    let run = s.run(&["reconcile", "--check", "--output", "json"]).code(Code::Pending);
    let out = run.json();
    assert_eq!(out["pending"], true);
    assert_eq!(out["promoted"].as_array().unwrap().len(), 2, "the queued instance and slot: {out}");
    assert!(s.snapshot() == before, "--check changed files");
}

#[test]
fn no_wait_exits_busy_at_once() {
    let s = Scratch::example();
    let holder = File::open(&s.dir).unwrap();
    assert!(FileExt::try_lock_exclusive(&holder).unwrap());
    // At once: the lock is held throughout, so a run that waited would have said `waiting up
    // to ... (--lock-timeout)` before it gave up; it says nothing but the refusal (the snapshot
    // is exact). An order of events, not a stopwatch.
    let run = s.run(&["reconcile", "--no-wait"]).code(Code::Locked);
    assert!(!run.stderr.contains("waiting"), "{}", run.stderr);
    s.assert_stderr(
        &run,
        snapbox::str![[r#"
error: `[ROOT]/dir` is locked by another infrakit-tf run
hint: another run is at work; the next cron run tries again (without --no-wait, reconcile waits up to --lock-timeout)

"#]],
    );
}

// Two reconciles at once: one runs, the other exits busy; the directory is consistent.
#[test]
fn concurrent_reconciles() {
    let s = Scratch::example();
    for _ in 0..3 {
        s.run(&["provision", "--no-apply", &spec(&s)]).ok();
    }
    let codes: Vec<i32> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..2).map(|_| scope.spawn(|| s.run(&["reconcile", "--no-wait"]).code)).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut sorted = codes.clone();
    sorted.sort();
    assert!(sorted == [0, 5] || sorted == [0, 0], "one runs, the other is busy (or came after): {codes:?}");
    let out = s.run(&["reconcile", "--output", "json"]).ok().json();
    assert_eq!(out["applied"], false, "converged: {out}");
    assert_eq!(state(&s.dir).len(), 3 + 3 + 1 + 1, "3 VMs, 3 slots, the global, the network");
}

#[test]
fn max_destroy_refuses_and_applies_nothing() {
    let s = Scratch::example();
    let id = s.run(&["provision", &spec(&s)]).ok().stdout.trim().to_string();
    s.run(&["provision", &spec(&s)]).ok();
    let before = state(&s.dir);
    // A file removed by hand: its VM would be destroyed.
    std::fs::remove_file(s.dir.join(format!("{id}.tf.json"))).unwrap();
    let run = s.run(&["reconcile", "--max-destroy", "0"]).code(Code::TooManyDestroys);
    s.assert_stderr(
        &run,
        snapbox::str![[r#"
[TIME] plan: 0 to add, 0 to change, 1 to destroy
error: refusing to destroy 1 resources (more than --max-destroy 0): 0 vanished machine(s); nothing was applied
hint: check the provider and the cloud; if this is wanted, run again with a higher --max-destroy

"#]],
    );
    assert_eq!(state(&s.dir), before, "nothing applied");
    let out = s.run(&["reconcile", "--output", "json"]).ok().json();
    assert_eq!(out["destroyed"], 1);
}

// After a rolling update followed by a scale-down, the slot leaks; sweep-orphans removes it
// (file and state) and leaves the rest alone.
#[test]
fn sweep_orphans_removes_a_leaked_slot() {
    let s = Scratch::example();
    let a = s.run(&["provision", &spec(&s)]).ok().stdout.trim().to_string();
    s.run(&["provision", &spec(&s)]).ok();
    s.run(&["destroy", &a, "--reason", "rolling-update", "--yes"]).ok();
    assert!(state(&s.dir).contains(&"terraform_data.web-1-data".to_string()));
    let before = s.snapshot();
    let dry = s.run(&["sweep-orphans", "--dry-run", "--output", "json"]).ok().json();
    assert_eq!(dry["orphans"][0]["file"], "web_dedicated_1.tf.json", "{dry}");
    assert_eq!(dry["destroys"][0]["address"], "terraform_data.web-1-data", "{dry}");
    assert!(s.snapshot() == before, "--dry-run changes nothing");
    // Its table, and an unconfirmed sweep: `tests/cmd/sweep-orphans-{dry-run,unconfirmed}.toml`.

    let out: Value = s.run(&["sweep-orphans", "--yes", "--output", "json"]).ok().json();
    assert_eq!(out["destroyed"], Value::Null);
    assert_eq!(out["terraform"]["destroyed"], 1, "{out}");
    assert!(!s.files().contains(&"web_dedicated_1.tf.json".to_string()));
    let st = state(&s.dir);
    assert!(!st.contains(&"terraform_data.web-1-data".to_string()));
    assert!(
        st.contains(&"terraform_data.web-2-data".to_string()) && st.contains(&"terraform_data.web-nfs".to_string()),
        "{st:?}"
    );
    let again = s.run(&["sweep-orphans", "--output", "json"]).ok().json();
    assert_eq!(again["orphans"], serde_json::json!([]));
}

// An instance file that cannot be read may use the leaked slot, or own a VM under a type we do
// not know: sweep-orphans refuses rather than sweep around it.
#[test]
fn sweep_orphans_refuses_around_an_unreadable_instance() {
    let s = Scratch::example();
    let a = s.run(&["provision", &spec(&s)]).ok().stdout.trim().to_string();
    let b = s.run(&["provision", &spec(&s)]).ok().stdout.trim().to_string();
    s.run(&["destroy", &a, "--reason", "rolling-update", "--yes"]).ok();
    let file = format!("{b}.tf.json");
    let good = std::fs::read_to_string(s.dir.join(&file)).unwrap();
    for (broken, why) in [
        (
            "{ not json".to_string(),
            snapbox::str![[r#"
error: cannot tell what instance-[..] owns: `[ROOT]/dir/instance-[..].tf.json` is not valid JSON: key must be a string at line 1 column 3
hint: fix or remove that instance file, then re-run sweep-orphans

"#]],
        ),
        (
            good.replace("terraform_data", "mystery_vm"),
            snapbox::str![[r#"
error: cannot tell what instance-[..] owns: `instance-[..].tf.json` has no VM of a known type (declare it with --vm-type or in infrakit-tf.json)
hint: fix or remove that instance file, then re-run sweep-orphans

"#]],
        ),
    ] {
        s.write(&file, &broken);
        let before = s.snapshot();
        let run = s.run(&["sweep-orphans", "--yes"]).code(Code::Invalid);
        s.assert_stderr(&run, why);
        assert!(s.snapshot() == before, "nothing swept");
    }
    s.write(&file, &good);
    assert!(state(&s.dir).contains(&"terraform_data.web-1-data".to_string()), "the slot is still there");
}
