//! A cloud that lags and throttles (README "A cloud that lags"): the test provider made
//! eventually consistent (a listing that omits machines newer than N ms, `list-lag-ms`; a
//! describe that answers "not found" for machines newer than N ms, `read-lag-ms`; a listing
//! that drops given IDs, `list-drop`, or keeps showing them, `list-ghosts`; reads throttled,
//! `throttle-ids`; a data source that fails when nothing matches, `empty-fails`), against real
//! terraform. Each ends with every machine of the cloud in the state exactly once, none
//! destroyed that existed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use infrakit_tf::exit::Code;
use serde_json::{json, Value};

use crate::support::cloud::Cloud;

/// How far the listings (and, where a test says, the reads) lag behind creates in these tests:
/// long enough that a run "at once" starts within it on a loaded machine.
const LAG_MS: u64 = 15_000;
/// The settle time these tests give: longer than the lag, as README says it must be.
const SETTLE: Duration = Duration::from_secs(20);

fn settle_env() -> [(&'static str, &'static str); 1] {
    [("INFRAKIT_TF_SETTLE", "20s")]
}

/// A cloud whose fakecloud types are looked up by their tags, its retries quick.
fn lagging(retries: u32) -> Cloud {
    let c = Cloud::new();
    c.with_lookups();
    let mut config: Value = c.s.read("infrakit-tf.json");
    config["retries"] = json!({"max": retries, "base_delay": "100ms"});
    c.s.write("infrakit-tf.json", &config.to_string());
    c
}

/// A group of `size` VMs alone (no dedicated resource: a rolling update surges), its VMs'
/// user data `version`.
fn group(c: &Cloud, size: u64, version: &str) -> String {
    c.s.write_outside(
        "group.json",
        &format!(
            r#"{{"ID": "web", "Properties": {{"Allocation": {{"Size": {size}}},
  "Instance": {{"Properties": {{"resource": {{"fakecloud_instance": {{"vm": {{"name": "web", "user_data": "{version}"}}}}}}}}}}}}}}"#
        ),
    )
}

fn knob(c: &Cloud, name: &str, text: &str) {
    std::fs::write(c.cloud.join(name), text).unwrap();
}

fn unknob(c: &Cloud, name: &str) {
    let _ = std::fs::remove_file(c.cloud.join(name));
}

fn run(c: &Cloud, args: &[&str]) -> crate::support::Run {
    c.run_env(args, &settle_env())
}

/// The cloud IDs the state manages.
fn managed(c: &Cloud) -> BTreeSet<String> {
    c.state().into_values().filter(|id| !id.is_empty()).collect()
}

/// Every machine of the cloud is in the state exactly once, and each instance has one.
#[track_caller]
fn exactly_once(c: &Cloud, machines: usize) {
    let ids: Vec<String> = c.state().into_values().filter(|id| !id.is_empty()).collect();
    exactly_once_in(c, &ids, machines);
}

/// [`exactly_once`], the state's cloud IDs being `ids`.
#[track_caller]
fn exactly_once_in(c: &Cloud, ids: &[String], machines: usize) {
    let unique: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(ids.len(), unique.len(), "no object twice in the state: {ids:?}");
    let cloud: BTreeSet<String> = c.objects().into_keys().collect();
    assert_eq!(cloud, unique, "the cloud holds what the state manages, nothing more");
    let per = c.machines_per_instance();
    assert_eq!(per.len(), machines, "{per:?}");
    assert!(per.values().all(|n| *n == 1), "one machine per instance: {per:?}");
}

/// Sleeps until `d` has passed since `since`.
fn until(since: Instant, d: Duration) {
    let left = d.saturating_sub(since.elapsed());
    std::thread::sleep(left + Duration::from_millis(300));
}

fn unconfirmed(report: &Value) -> Vec<String> {
    report["unconfirmed"].as_array().unwrap().iter().map(|u| u["address"].as_str().unwrap().to_string()).collect()
}

// 1. A create whose answer is lost (a 503 after the cloud acted), retried in the same run
// while the listing lags: the retry's look-up lists nothing, and must not conclude that the
// machine does not exist. It is not made again, in that run nor the next one at once; once the
// settle time has passed, it is adopted.
#[test]
fn a_lost_create_retried_while_the_listing_lags_is_not_made_twice() {
    let c = lagging(3);
    let spec = group(&c, 6, "v1");
    c.lag_lists(LAG_MS);
    knob(&c, "lose-creates", "1 503\n");
    let failed_at = Instant::now();
    let first = run(&c, &["reconcile", "--group", &spec, "--output", "json"]);
    assert_eq!(c.objects().len(), 6, "six machines made, none twice: {:?}", c.objects().keys());
    // The apply failed, and what it may have made is not confirmed: the run fails (the rest was
    // applied), and says when to look again.
    let first = first.code(Code::TerraformFailed);
    assert!(first.stderr.contains("failed with a transient error"), "{}", first.stderr);
    assert!(first.stderr.contains("not listed yet"), "{}", first.stderr);
    assert!(first.stderr.contains("so it was not made again (the rest was applied)"), "{}", first.stderr);
    let report = first.json();
    let held = unconfirmed(&report);
    assert_eq!(held.len(), 1, "{report}");
    assert_eq!(managed(&c).len(), 5, "the lost one is in no state yet");
    let rows = c.describe();
    assert_eq!(rows.iter().filter(|r| r["status"] == "unconfirmed").count(), 1, "{rows:?}");

    // At once again, the listing still lagging: nothing made twice.
    let again = run(&c, &["reconcile", "--group", &spec, "--output", "json"]).ok();
    assert_eq!(unconfirmed(&again.json()), held, "{}", again.stderr);
    assert_eq!(c.objects().len(), 6, "{:?}", c.objects().keys());

    // Once settled: adopted, and two reconciles leave every machine in the state once.
    until(failed_at, SETTLE);
    let adopted = run(&c, &["reconcile", "--group", &spec, "--output", "json"]).ok();
    assert_eq!(adopted.json()["adopted"].as_array().map(Vec::len), Some(1), "{}", adopted.stderr);
    run(&c, &["reconcile", "--group", &spec]).ok();
    exactly_once(&c, 6);
    let check = run(&c, &["reconcile", "--check", "--group", &spec, "--output", "json"]).ok().json();
    assert_eq!(check["lookup_pending"], Value::Null, "{check}");
}

// With --settle-wait, a retry whose wait for the settle time is short enough waits, looks
// again, and adopts what the lost answer made: the command succeeds, nothing made twice.
#[test]
fn a_retry_waits_for_a_short_settle_time_when_asked() {
    let c = lagging(3);
    let spec = group(&c, 3, "v1");
    c.lag_lists(2500);
    knob(&c, "lose-creates", "1 503\n");
    let env = [("INFRAKIT_TF_SETTLE", "5s"), ("INFRAKIT_TF_SETTLE_WAIT", "10s")];
    let run = c.run_env(&["reconcile", "--group", &spec, "--output", "json"], &env).ok();
    // The retry's look-up runs within the settle time: it waits for the rest of it, unless the
    // machine is listed already (a loaded machine took longer than the lag to get there), when
    // it is adopted at once. Either way, within this one run.
    assert!(
        run.stderr.contains("waiting 5s for the cloud's answer to settle")
            || run.stderr.contains("(--settle-wait)")
            || run.stderr.contains("found by its tags"),
        "{}",
        run.stderr
    );
    assert_eq!(run.json()["unconfirmed"], json!([]), "{}", run.stderr);
    exactly_once(&c, 3);
}

// The same after a reconcile killed (its whole process group, SIGKILL) while its replacement
// boots, run again at once with the listing lagging: the replacement is not made twice.
#[test]
fn a_reconcile_killed_while_its_replacement_boots_then_run_at_once_makes_nothing_twice() {
    let c = lagging(0);
    let v1 = group(&c, 6, "v1");
    run(&c, &["reconcile", "--group", &v1]).ok();
    c.lag_lists(LAG_MS);
    let v2 = group(&c, 6, "v2");
    c.boot(3000);
    let before: BTreeSet<String> = c.objects().into_keys().collect();
    let mut started = c.start(&["reconcile", "--group", &v2], &settle_env());
    let deadline = Instant::now() + Duration::from_secs(120);
    while c.objects().keys().all(|k| before.contains(k)) {
        assert!(Instant::now() < deadline, "no replacement made: {:?}", started.seen);
        std::thread::sleep(Duration::from_millis(5));
    }
    started.kill(true);
    started.finish();
    crate::support::wait_until_idle(&c.s.dir);
    let killed_at = Instant::now();
    c.boot(0);
    let made: BTreeSet<String> = c.objects().into_keys().filter(|k| !before.contains(k)).collect();
    assert_eq!(made.len(), 1, "{made:?}");

    let at_once = run(&c, &["reconcile", "--group", &v2, "--output", "json"]);
    let per = c.machines_per_instance();
    assert!(per.values().all(|n| *n == 1), "nothing made twice: {per:?}");
    assert!(at_once.stderr.contains("not listed yet"), "{}", at_once.stderr);
    assert!(made.iter().all(|id| c.objects().contains_key(id)), "the booting replacement is not destroyed");

    until(killed_at, SETTLE);
    for _ in 0..4 {
        run(&c, &["reconcile", "--group", &v2]).ok();
    }
    exactly_once(&c, 6);
    let rows = c.describe();
    assert!(rows.iter().all(|r| r["status"] == "created"), "{rows:?}");
    assert!(made.iter().all(|id| managed(&c).contains(id)), "the replacement made by the killed run was adopted");
}

// 2. A machine created seconds ago, read again by the next run while a describe by ID still
// says "not found", its listing showing it: the listing and the read disagree, and the machine
// is kept, not pruned and made again.
#[test]
fn a_machine_its_listing_shows_is_not_pruned_on_a_read_that_says_not_found() {
    let c = lagging(0);
    let spec = group(&c, 6, "v1");
    knob(&c, "read-lag-ms", &LAG_MS.to_string());
    run(&c, &["reconcile", "--group", &spec]).ok();
    let made_at = Instant::now();
    let before: BTreeMap<String, Value> = c.objects();
    let report = run(&c, &["reconcile", "--group", &spec, "--refresh-slice", "1/1", "--output", "json"]).ok().json();
    assert_eq!(report["pruned"], json!([]), "{report}");
    assert_eq!(unconfirmed(&report).len(), 6, "{report}");
    assert_eq!(c.objects().keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>(), "nothing made or destroyed");
    let rows = c.describe();
    assert_eq!(rows.iter().filter(|r| r["status"] == "unconfirmed").count(), 6, "{rows:?}");
    // Once the reads see them: nothing to do, and nothing is unconfirmed any more.
    until(made_at, Duration::from_millis(LAG_MS));
    let report = run(&c, &["reconcile", "--group", &spec, "--refresh-slice", "1/1", "--output", "json"]).ok().json();
    assert_eq!((report["pruned"].clone(), report["unconfirmed"].clone()), (json!([]), json!([])), "{report}");
    assert!(c.describe().iter().all(|r| r["status"] == "created"));
    exactly_once(&c, 6);
}

// The same when the listing lags too: the listing and the read agree, but both began less
// than the settle time after the machines were made. Kept until then.
#[test]
fn a_machine_created_less_than_the_settle_time_ago_is_not_pruned_when_both_miss_it() {
    let c = lagging(0);
    let spec = group(&c, 3, "v1");
    knob(&c, "read-lag-ms", &LAG_MS.to_string());
    knob(&c, "list-lag-ms", &LAG_MS.to_string());
    run(&c, &["reconcile", "--group", &spec]).ok();
    let made_at = Instant::now();
    let report = run(&c, &["reconcile", "--group", &spec, "--output", "json"]).ok().json();
    assert_eq!(report["pruned"], json!([]), "{report}");
    assert_eq!(unconfirmed(&report).len(), 3, "{report}");
    assert_eq!(c.objects().len(), 3);
    until(made_at, SETTLE);
    let report = run(&c, &["reconcile", "--group", &spec, "--output", "json"]).ok().json();
    assert_eq!((report["pruned"].clone(), report["unconfirmed"].clone()), (json!([]), json!([])), "{report}");
    exactly_once(&c, 3);
}

// A listing that keeps showing a machine that was deleted must not keep its slot empty for
// ever: two reads at least the settle time apart that call it gone are believed.
#[test]
fn two_reads_the_settle_time_apart_prune_a_machine_the_listing_still_shows() {
    let c = lagging(0);
    let spec = group(&c, 2, "v1");
    run(&c, &["reconcile", "--group", &spec]).ok();
    let rows = c.describe();
    let (gone_id, gone_vm) = (rows[0]["ID"].as_str().unwrap().to_string(), c.machine(rows[0]["ID"].as_str().unwrap()));
    c.vanish(&gone_vm);
    knob(&c, "list-ghosts", &gone_vm);
    let args = ["reconcile", "--group", &spec, "--refresh-slice", "1/1", "--output", "json"];
    let first_read = Instant::now();
    let report = run(&c, &args).ok().json();
    assert_eq!(report["pruned"], json!([]), "{report}");
    assert_eq!(unconfirmed(&report), [format!("fakecloud_instance.{gone_id}")], "{report}");
    let report = run(&c, &args).ok().json();
    assert_eq!(report["pruned"], json!([]), "a second read at once is not enough: {report}");
    until(first_read, SETTLE);
    let report = run(&c, &args).ok().json();
    assert_eq!(report["pruned"][0]["ID"], gone_id.as_str(), "{report}");
    unknob(&c, "list-ghosts");
    exactly_once(&c, 2);
}

// 3. A look-up data source that fails when nothing matches ("no matching instances found"),
// after an apply cut short before any create landed: understood as empty, and the group is
// made.
#[test]
fn a_look_up_that_fails_on_nothing_found_is_empty_for_the_adoption() {
    let c = lagging(0);
    let spec = group(&c, 3, "v1");
    knob(&c, "empty-fails", "");
    c.delay_creates(3000);
    c.kill_during(&["reconcile", "--group", &spec], "creating fakecloud_instance");
    c.delay_creates(0);
    assert!(c.objects().is_empty(), "no create landed: {:?}", c.objects());
    let report = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok();
    assert!(report.stderr.contains("looking up the machines it may have made"), "{}", report.stderr);
    exactly_once(&c, 3);
    c.run(&["reconcile", "--check", "--group", &spec]).ok();
    // The listing of a group whose every machine vanished fails the same way: empty, and the
    // group is made again (not a refresh of everything).
    for id in c.objects().into_keys() {
        c.vanish(&id);
    }
    let run = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok();
    assert!(!run.stderr.contains("refreshes everything"), "{}", run.stderr);
    assert_eq!(run.json()["pruned"].as_array().map(Vec::len), Some(3), "{}", run.stderr);
    exactly_once(&c, 3);
}

// Any other failure of the adoption's look-up says which look-up failed, that the apply was
// cut, and what to do, with an exit code of its own; nothing is applied.
#[test]
fn a_look_up_that_fails_otherwise_names_itself_and_applies_nothing() {
    let c = lagging(0);
    let spec = group(&c, 2, "v1");
    let mut config: Value = c.s.read("infrakit-tf.json");
    config["lookups"]["fakecloud_instance"]["arguments"] = json!({"tagz": "{{tags}}"});
    c.s.write("infrakit-tf.json", &config.to_string());
    c.delay_creates(3000);
    c.kill_during(&["reconcile", "--group", &spec], "creating fakecloud_instance");
    c.delay_creates(0);
    let files = c.s.files();
    let run = c.run(&["reconcile", "--group", &spec]).code(Code::LookupFailed);
    let error = run.error_lines().join("\n");
    assert!(error.contains("an apply was cut short"), "{}", run.stderr);
    assert!(error.contains("by `fakecloud_instances` (lookups.fakecloud_instance)"), "{}", run.stderr);
    assert!(run.stderr.contains("fix the look-up (`lookups` in infrakit-tf.json"), "{}", run.stderr);
    assert!(c.objects().is_empty(), "nothing applied: {:?}", c.objects());
    assert_eq!(c.s.files(), files);
}

// 4. One unlisted machine whose confirmation read is throttled, in a group of 200: the
// machine is kept (unconfirmed), the run reads no more than its bound, and nothing widens into
// a refresh of everything.
#[test]
fn a_throttled_confirmation_read_keeps_the_machine_and_reads_within_the_bound() {
    let c = lagging(3);
    let spec = group(&c, 200, "v1");
    c.run(&["reconcile", "--group", &spec, "--parallelism", "50"]).ok();
    // The last machine in address order: not in the first run's slice.
    let rows = c.describe();
    let last = rows.iter().map(|r| r["ID"].as_str().unwrap().to_string()).max().unwrap();
    let vm = c.machine(&last);
    knob(&c, "list-drop", &vm);
    knob(&c, "throttle-ids", &vm);
    c.count_calls();
    let run = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok();
    let calls = c.calls();
    let report = run.json();
    assert_eq!(report["pruned"], json!([]), "{report}");
    assert_eq!(unconfirmed(&report), [format!("fakecloud_instance.{last}")], "{report}");
    assert!(run.stderr.contains(&format!("the read that confirms fakecloud_instance.{last} failed")), "{}", run.stderr);
    assert!(!run.stderr.contains("refreshes everything"), "{}", run.stderr);
    // (retries + 1) × (2 + ⌈200/12⌉ + 1 unlisted) = 4 × 20.
    let reads = calls.iter().filter(|l| l.starts_with("read ") || l.starts_with("list ")).count() as u64;
    assert_eq!(report["reads"]["bound"], 80, "{report}");
    assert!(reads <= 80, "{reads} cloud reads: {calls:?}");
    assert_eq!(c.objects().len(), 200);
    unknob(&c, "throttle-ids");
    unknob(&c, "list-drop");
    let report = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok().json();
    assert_eq!((report["pruned"].clone(), report["unconfirmed"].clone()), (json!([]), json!([])), "{report}");
}

/// Puts a machine in the cloud behind terraform's back: a copy of `like`'s object under `id`,
/// its tags edited by `tags`.
fn plant(c: &Cloud, like: &str, id: &str, tags: impl FnOnce(&mut Value)) {
    let mut object: Value =
        serde_json::from_slice(&std::fs::read(c.cloud.join(format!("{like}.json"))).unwrap()).unwrap();
    object["id"] = json!(id);
    tags(&mut object["tags"]);
    std::fs::write(c.cloud.join(format!("{id}.json")), object.to_string()).unwrap();
}

// Strays: a twin of a member (its tags, another machine) and a machine that names the group but
// no file here. Every reconcile that lists reports them (JSON, one line each on stderr, the
// metrics) and still succeeds; --check exits 10; describe shows them; sweep-orphans --strays
// destroys the twin only, dry run first, asked for, counted by --max-destroy.
#[test]
fn strays_are_reported_checked_described_and_the_twins_swept() {
    let c = lagging(0);
    let spec = group(&c, 2, "v1");
    c.run(&["reconcile", "--group", &spec]).ok();
    let member = c.describe()[0]["ID"].as_str().unwrap().to_string();
    let vm = c.machine(&member);
    plant(&c, &vm, "i-7717", |_| {});
    plant(&c, &vm, "i-0999", |tags| tags["infrakit.instance.name"] = json!("instance-999"));
    let metrics = c.s.root.path().join("infrakit.prom");
    let metrics_flag = metrics.to_str().unwrap();
    let run = c.run(&["reconcile", "--group", &spec, "--output", "json", "--metrics-file", metrics_flag]).ok();
    let report = run.json();
    let strays: BTreeMap<String, String> = report["strays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_string(), s["kind"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(strays, BTreeMap::from([("i-0999".into(), "unknown".into()), ("i-7717".into(), "twin".into())]));
    assert_eq!(
        run.stderr.lines().filter(|l| l.starts_with("warning: stray fakecloud_instance")).count(),
        2,
        "{}",
        run.stderr
    );
    assert!(std::fs::read_to_string(&metrics).unwrap().contains("infrakit_tf_strays{"), "the metrics count them");
    assert!(std::fs::read_to_string(&metrics).unwrap().contains("} 2\n"));
    let check = c.run(&["reconcile", "--check", "--group", &spec]).code(Code::Pending);
    assert!(check.stderr.contains("2 stray machine(s) in no state"), "{}", check.stderr);
    let rows = c.describe();
    let described: BTreeSet<&str> =
        rows.iter().filter(|r| r["status"] == "stray").map(|r| r["ID"].as_str().unwrap()).collect();
    assert_eq!(described, BTreeSet::from(["i-0999", "i-7717"]), "{rows:?}");

    let before = (c.s.snapshot(), c.objects());
    let dry = c.run(&["sweep-orphans", "--strays", "--dry-run", "--output", "json"]).ok().json();
    assert_eq!(dry["destroyed"], 1, "{dry}");
    c.run(&["sweep-orphans", "--strays"]).code(Code::NotConfirmed);
    c.run(&["sweep-orphans", "--strays", "--yes", "--max-destroy", "0"]).code(Code::TooManyDestroys);
    assert!((c.s.snapshot(), c.objects()) == before, "refused: nothing changed");
    let swept = c.run(&["sweep-orphans", "--strays", "--yes", "--output", "json"]).ok().json();
    assert_eq!(swept["destroyed"], 1, "{swept}");
    let objects = c.objects();
    assert!(!objects.contains_key("i-7717"), "the twin is destroyed");
    assert!(objects.contains_key("i-0999"), "the machine that names no file here is never destroyed");
    assert!(!c.s.files().iter().any(|f| f.contains("strays")), "{:?}", c.s.files());
    let report = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok().json();
    assert_eq!(report["strays"].as_array().map(Vec::len), Some(1), "{report}");
    c.vanish("i-0999");
    c.run(&["reconcile", "--group", &spec]).ok();
    c.run(&["reconcile", "--check", "--group", &spec]).ok();
    exactly_once(&c, 2);
}

// A stray that stands for a resource without a machine (its record lost, with no evidence
// left to look it up) is adopted, not made again.
#[test]
fn a_stray_that_stands_for_a_resource_without_a_machine_is_adopted() {
    let c = lagging(0);
    let spec = group(&c, 2, "v1");
    c.run(&["reconcile", "--group", &spec]).ok();
    let member = c.describe()[1]["ID"].as_str().unwrap().to_string();
    let vm = c.machine(&member);
    let status = std::process::Command::new(crate::support::terraform::terraform_program())
        .args(["state", "rm", &format!("fakecloud_instance.{member}")])
        .current_dir(&c.s.dir)
        .env("TF_CLI_CONFIG_FILE", c.s.root.path().join("fakecloud.tfrc"))
        .env("FAKECLOUD_DIR", &c.cloud)
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let run = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok();
    assert!(run.stderr.contains(&format!("adopted fakecloud_instance.{member} = {vm}")), "{}", run.stderr);
    assert_eq!(run.json()["strays"], json!([]));
    exactly_once(&c, 2);
    assert_eq!(c.machine(&member), vm, "its own machine, adopted");
}

/// libfaketime, which `.ci/test` installs (Debian's `faketime`): a host whose clock is off.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

// With a store, the hosts share one clock, the store's. Host A is killed (its whole process
// group) while its replacement boots; host B, whose own clock is an hour ahead, takes over at
// once while the listing lags. The evidence was noted by the store's clock, and B's look-up is
// timed by it too: it is as young as it is, and concludes nothing. No twin; once settled,
// every machine is in the state exactly once.
#[test]
fn two_hosts_on_a_store_share_one_clock() {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: .ci/test installs Debian's faketime"
    );
    let db = crate::support::store::Db::new();
    let (a, b) = crate::support::store::hosts_at(&db.url());
    for host in [&a, &b] {
        host.with_lookups();
        let mut config: Value = host.s.read("infrakit-tf.json");
        config["store"]["lease"] = json!("3s");
        host.s.write("infrakit-tf.json", &config.to_string());
    }
    let v1 = group(&a, 3, "v1");
    group(&b, 3, "v1");
    run(&a, &["reconcile", "--group", &v1]).ok();
    a.lag_lists(LAG_MS);
    let (v2, v2_on_b) = (group(&a, 3, "v2"), group(&b, 3, "v2"));
    a.boot(3000);
    let before: BTreeSet<String> = a.objects().into_keys().collect();
    // A new spec: this host's copy becomes the one the store runs with.
    let mut started = a.start(&["reconcile", "--group", &v2, "--accept-config"], &settle_env());
    let deadline = Instant::now() + Duration::from_secs(120);
    while a.objects().keys().all(|k| before.contains(k)) {
        assert!(Instant::now() < deadline, "no replacement made: {:?}", started.finish());
        std::thread::sleep(Duration::from_millis(5));
    }
    started.kill(true);
    started.finish();
    let killed_at = Instant::now();
    a.boot(0);
    let ahead = [
        ("INFRAKIT_TF_SETTLE", "20s"),
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME", "+1h"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        // The cloud and terraform keep the true time: only this host's infrakit-tf is off.
        ("FAKETIME_SKIP_CMDS", "terraform,terraform-provider-fakecloud,tofu"),
    ];
    let on_b = b.run_env(&["reconcile", "--group", &v2_on_b, "--output", "json"], &ahead);
    assert!(on_b.stderr.contains("took over store directory"), "{}", on_b.stderr);
    let per = b.machines_per_instance();
    assert!(per.values().all(|n| *n == 1), "nothing made twice: {per:?}");
    assert!(on_b.stderr.contains("not listed yet"), "{}", on_b.stderr);

    until(killed_at, SETTLE);
    for _ in 0..2 {
        b.run_env(&["reconcile", "--group", &v2_on_b], &ahead).ok();
        run(&a, &["reconcile", "--group", &v2]).ok();
    }
    let ids: Vec<String> = db
        .resources()
        .iter()
        .flat_map(|r| r["instances"].as_array().cloned().unwrap_or_default())
        .filter_map(|i| i["attributes"]["id"].as_str().map(str::to_string))
        .collect();
    exactly_once_in(&b, &ids, 3);
}

// Dedicated and global resources too: creates whose answers are lost (volumes and machines
// alike), retried while the listing lags, with a refresh slice of 1/2: nothing is made twice,
// and once settled every object is adopted.
#[test]
fn dedicated_and_global_resources_lost_while_the_listing_lags_are_not_made_twice() {
    let c = lagging(3);
    c.run(&["provision", &c.spec()]).ok();
    c.lag_lists(LAG_MS);
    knob(&c, "lose-creates", "3 503\n");
    let failed_at = Instant::now();
    let first = run(&c, &["provision", "--count", "2", &c.spec()]);
    let objects = c.objects();
    let volumes = objects.values().filter(|o| o["type"] == "fakecloud_volume").count();
    assert_eq!((objects.len(), volumes), (3 + 4, 1 + 3), "none made twice: {objects:?}");
    let first = first.code(Code::TerraformFailed);
    assert!(first.stderr.contains("not listed yet"), "{}", first.stderr);
    for args in
        [&["reconcile", "--refresh-slice", "1/2"][..], &["reconcile", "--refresh-slice", "1/2", "--output", "json"]]
    {
        let again = run(&c, args);
        assert_eq!(c.objects().len(), objects.len(), "{}", again.stderr);
    }
    until(failed_at, SETTLE);
    for _ in 0..2 {
        run(&c, &["reconcile", "--refresh-slice", "1/2"]).ok();
    }
    exactly_once(&c, 3);
    let volumes = c.objects().values().filter(|o| o["type"] == "fakecloud_volume").count();
    assert_eq!(volumes, 4, "three dedicated volumes and one shared");
}

// The findings of an adversarial review, each a test that failed before its fix.

/// `group` under another ID.
fn group_named(c: &Cloud, id: &str, size: u64) -> String {
    c.s.write_outside(
        &format!("{id}.json"),
        &format!(
            r#"{{"ID": "{id}", "Properties": {{"Allocation": {{"Size": {size}}},
  "Instance": {{"Properties": {{"resource": {{"fakecloud_instance": {{"vm": {{"name": "{id}", "user_data": "v1"}}}}}}}}}}}}}}"#
        ),
    )
}

/// `terraform state rm ADDRESS` in the directory, as an operator would.
fn state_rm(c: &Cloud, address: &str) {
    let out = std::process::Command::new(crate::support::terraform::terraform_program())
        .args(["state", "rm", address])
        .current_dir(&c.s.dir)
        .env("TF_CLI_CONFIG_FILE", c.s.root.path().join("fakecloud.tfrc"))
        .env("FAKECLOUD_DIR", &c.cloud)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

// A run killed (whole process group) during a long apply, after terraform saved some of its
// creates to the state: those machines have no creation on record, and the next run's reads
// and listing miss them. Not pruned: the evidence of the cut apply is younger than the settle
// time, and no read younger than it is believed.
#[test]
fn machines_a_killed_apply_saved_are_not_pruned_while_its_evidence_is_young() {
    let c = lagging(0);
    let spec = group(&c, 4, "v1");
    c.delay_creates(6000);
    let mut started = c.start(&["reconcile", "--group", &spec, "--parallelism", "1"], &settle_env());
    let t0 = Instant::now();
    while !std::fs::read_to_string(c.s.dir.join("terraform.tfstate")).unwrap_or_default().contains("\"i-") {
        assert!(t0.elapsed() < Duration::from_secs(120), "terraform saved no create");
        std::thread::sleep(Duration::from_millis(100));
    }
    started.kill(true);
    started.finish();
    crate::support::wait_until_idle(&c.s.dir);
    c.delay_creates(0);
    knob(&c, "read-lag-ms", "600000");
    knob(&c, "list-lag-ms", "600000");
    let before: BTreeSet<String> = c.objects().into_keys().collect();
    let report = run(&c, &["reconcile", "--group", &spec, "--output", "json"]).json();
    assert_eq!(report["pruned"], json!([]), "{report}");
    let per = c.machines_per_instance();
    assert!(per.values().all(|n| *n == 1), "nothing made twice: {per:?}");
    assert!(before.iter().all(|id| c.objects().contains_key(id)), "no machine destroyed");
}

// A rolling update (surge) whose replacement's create is lost while the listing lags: the
// failed surge is taken back, but not the replacement whose machine may exist; once settled it
// is adopted, and nothing leaks.
#[test]
fn a_surge_taken_back_keeps_a_replacement_whose_machine_may_exist() {
    let c = lagging(3);
    let v1 = group(&c, 2, "v1");
    run(&c, &["reconcile", "--group", &v1]).ok();
    c.lag_lists(LAG_MS);
    let v2 = group(&c, 2, "v2");
    knob(&c, "lose-creates", "1 503\n");
    let failed_at = Instant::now();
    run(&c, &["reconcile", "--group", &v2]).code(Code::TerraformFailed);
    until(failed_at, SETTLE);
    for _ in 0..4 {
        run(&c, &["reconcile", "--group", &v2]).ok();
    }
    exactly_once(&c, 2);
}

// A machine that carries a member's name but another group's tag is not that member's twin:
// reported, never destroyed.
#[test]
fn a_stray_of_another_group_is_no_twin() {
    let c = lagging(0);
    let web = group(&c, 2, "v1");
    let db = group_named(&c, "db", 1);
    c.run(&["reconcile", "--group", &web, "--group", &db]).ok();
    let rows = c.describe();
    let member = rows.iter().find(|r| r["group"] == "web").unwrap()["ID"].as_str().unwrap().to_string();
    plant(&c, &c.machine(&member), "i-0db0", |tags| tags["infrakit.group"] = json!("db"));
    let report = c.run(&["reconcile", "--group", &web, "--group", &db, "--output", "json"]).ok().json();
    assert_eq!(report["strays"][0]["kind"], "unknown", "{report}");
    c.run(&["sweep-orphans", "--strays", "--yes"]).ok();
    assert!(c.objects().contains_key("i-0db0"), "not destroyed");
}

// An `empty_errors` pattern that matches every text is refused (it would take a throttled
// call for "nothing there"); a throttled look-up is never empty.
#[test]
fn an_empty_errors_pattern_that_matches_anything_is_refused() {
    let c = lagging(0);
    let spec = group(&c, 2, "v1");
    let mut config: Value = c.s.read("infrakit-tf.json");
    config["lookups"]["fakecloud_instance"]["empty_errors"] = json!(["|"]);
    c.s.write("infrakit-tf.json", &config.to_string());
    let run = c.run(&["reconcile", "--group", &spec]).code(Code::Invalid);
    assert!(run.stderr.contains("matches every text"), "{}", run.stderr);
    config["lookups"]["fakecloud_instance"]["empty_errors"] = json!(["Request limit"]);
    c.s.write("infrakit-tf.json", &config.to_string());
    c.kill_while_booting(&["reconcile", "--group", &spec]);
    knob(&c, "throttle-lists", "100");
    let run = c.run(&["reconcile", "--group", &spec]).code(Code::LookupFailed);
    assert!(run.stderr.contains("the cloud refused the look-up for now"), "{}", run.stderr);
    unknob(&c, "throttle-lists");
    c.run(&["reconcile", "--group", &spec]).ok();
    exactly_once(&c, 2);
}

// A listed machine that cannot be read (a listing that still shows one deleted) does not hide
// the other strays.
#[test]
fn an_unreadable_listed_machine_does_not_hide_the_strays() {
    let c = lagging(0);
    let spec = group(&c, 2, "v1");
    c.run(&["reconcile", "--group", &spec]).ok();
    let member = c.describe()[0]["ID"].as_str().unwrap().to_string();
    plant(&c, &c.machine(&member), "i-7717", |_| {});
    knob(&c, "list-ghosts", "i-0dead\n");
    let run = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok();
    let report = run.json();
    assert_eq!(report["strays"][0]["id"], "i-7717", "{report}\n{}", run.stderr);
    c.run(&["reconcile", "--check", "--group", &spec]).code(Code::Pending);
}

// A stray adopted by a reconcile is no stray to --check, describe or the sweep afterwards.
#[test]
fn an_adopted_stray_is_a_stray_no_more() {
    let c = lagging(0);
    let spec = group(&c, 2, "v1");
    c.run(&["reconcile", "--group", &spec]).ok();
    let member = c.describe()[1]["ID"].as_str().unwrap().to_string();
    state_rm(&c, &format!("fakecloud_instance.{member}"));
    c.run(&["reconcile", "--group", &spec]).ok();
    c.run(&["reconcile", "--check", "--group", &spec]).ok();
    assert!(c.describe().iter().all(|r| r["status"] == "created"), "{:?}", c.describe());
}

// A lost create while a describe by ID still says "not found" (the listing shows it): the
// adoption's import cannot read it yet; it is held back, not a failed run, and adopted once
// the reads see it.
#[test]
fn a_lost_create_the_reads_do_not_see_yet_is_held_back() {
    let c = lagging(3);
    let spec = group(&c, 4, "v1");
    knob(&c, "read-lag-ms", &LAG_MS.to_string());
    knob(&c, "lose-creates", "1 503\n");
    let failed_at = Instant::now();
    run(&c, &["reconcile", "--group", &spec]);
    let per = c.machines_per_instance();
    assert!(per.values().all(|n| *n == 1), "nothing made twice: {per:?}");
    let at_once = run(&c, &["reconcile", "--group", &spec, "--output", "json"]).ok();
    let report = at_once.json();
    assert_eq!(report["pruned"], json!([]), "{report}");
    assert!(at_once.stderr.contains("not listed yet"), "{}", at_once.stderr);
    assert!(!unconfirmed(&report).is_empty(), "{report}");
    until(failed_at, SETTLE);
    run(&c, &["reconcile", "--group", &spec]).ok();
    run(&c, &["reconcile", "--group", &spec]).ok();
    exactly_once(&c, 4);
}

// A sweep of strays killed between its two applies leaves its file: the next reconcile
// forgets what it imported (strays again, reported) and removes the file, so that a machine
// gone since cannot make every apply fail; the next sweep destroys the twin.
#[cfg(feature = "fault-injection")]
#[test]
fn a_sweep_of_strays_cut_short_is_undone_by_reconcile() {
    let c = lagging(0);
    let spec = group(&c, 2, "v1");
    c.run(&["reconcile", "--group", &spec]).ok();
    let member = c.describe()[0]["ID"].as_str().unwrap().to_string();
    plant(&c, &c.machine(&member), "i-7717", |_| {});
    c.run(&["reconcile", "--group", &spec]).ok();
    // The crash point right after the import's apply: the first point after its spawn, found
    // on a copy of this directory and cloud.
    let probe = c.copy();
    let log = probe.s.root.path().join("crash.log");
    probe.run_env(&["sweep-orphans", "--strays", "--yes"], &[("INFRAKIT_TF_CRASH_LOG", log.to_str().unwrap())]).ok();
    let points = std::fs::read_to_string(&log).unwrap();
    let spawn: u64 = points
        .lines()
        .find(|l| l.contains("spawned") && l.contains(" apply "))
        .and_then(|l| l.split_once(' ')?.0.parse().ok())
        .unwrap_or_else(|| panic!("no apply: {points}"));
    let at = (spawn + 1).to_string();
    let crashed = c.run_env(&["sweep-orphans", "--strays", "--yes"], &[("INFRAKIT_TF_CRASH_AT", at.as_str())]);
    assert!(!crashed.is(Code::Ok), "{crashed:?}");
    crate::support::wait_until_idle(&c.s.dir);
    assert!(c.s.dir.join("infrakit-tf-strays.tf.json").exists(), "the sweep was cut between its applies");
    let report = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok();
    assert!(report.stderr.contains("a sweep of strays was cut short"), "{}", report.stderr);
    assert!(!c.s.dir.join("infrakit-tf-strays.tf.json").exists());
    c.run(&["sweep-orphans", "--strays", "--yes"]).ok();
    exactly_once(&c, 2);
}
