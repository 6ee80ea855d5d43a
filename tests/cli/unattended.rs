//! Unattended runs (README "Running unattended"): terraform runs that fail with a transient
//! error are run again, with a backoff, and every run that writes leaves Prometheus metrics.
//! The faults are real: the fakecloud provider's creates fail as a throttled cloud API's do
//! (`throttle-creates`), or for good (`fail-create`); terraform is the real one.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;
use crate::support::specs::web;

/// A cloud whose directory retries after `base_delay` (infrakit-tf.json's `retries`).
fn cloud(base_delay: &str) -> Cloud {
    let c = Cloud::new();
    let mut config: Value = c.s.read("infrakit-tf.json");
    config["retries"] = serde_json::json!({"base_delay": base_delay});
    c.s.write("infrakit-tf.json", &config.to_string());
    c
}

/// The next `n` creates in the cloud fail with a throttling error.
fn throttle(c: &Cloud, n: u32) {
    std::fs::write(c.cloud.join("throttle-creates"), format!("{n}\n")).unwrap();
}

fn retry_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("failed with a transient error")).collect()
}

/// Parsed metrics: (family, sorted labels) -> value.
type Metrics = HashMap<(String, Vec<(String, String)>), f64>;

/// The metrics file, parsed by a Prometheus parser: (family, labels) -> value. Every family
/// has its `# HELP` and `# TYPE` (gauge) lines.
fn metrics(path: &Path) -> Metrics {
    let text = std::fs::read_to_string(path).unwrap();
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    let mut out = HashMap::new();
    for s in scrape.samples {
        assert!(s.metric.starts_with("infrakit_tf_"), "{}", s.metric);
        assert!(scrape.docs.contains_key(&s.metric), "no # HELP for {}: {text}", s.metric);
        assert!(text.contains(&format!("# TYPE {} gauge\n", s.metric)), "no # TYPE for {}: {text}", s.metric);
        let prometheus_parse::Value::Gauge(v) = s.value else { panic!("{} is not a gauge: {text}", s.metric) };
        let mut labels: Vec<(String, String)> = s.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        labels.sort();
        out.insert((s.metric, labels), v);
    }
    out
}

/// One value of `m`: `family` with `labels` (beside `directory`, which is checked to be `dir`).
fn value(m: &Metrics, dir: &Path, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut want: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    want.push(("directory".into(), dir.to_str().unwrap().into()));
    want.sort();
    m.get(&(format!("infrakit_tf_{family}"), want)).copied()
}

// The issue's first scenario: throttled creates, then success, within one reconcile.
#[test]
fn a_throttled_reconcile_succeeds_after_retries() {
    let c = cloud("200ms");
    let id = c.run(&["provision", "--no-apply", &c.spec()]).ok().stdout.trim().to_string();
    throttle(&c, 2);
    let m = c.s.root.path().join("infrakit.prom");
    let run = c.run(&["reconcile", "--output", "json", "--metrics-file", m.to_str().unwrap()]).ok();
    let report = run.json();
    let lines = retry_lines(&run.stderr);
    assert!(!lines.is_empty(), "no retry: {}", run.stderr);
    for (i, line) in lines.iter().enumerate() {
        assert!(line.starts_with("warning: `terraform apply"), "{line}");
        assert!(line.contains("ThrottlingException: Rate exceeded"), "which error: {line}");
        assert!(line.contains(&format!("retry {} of 3 in ", i + 1)), "which attempt, how long: {line}");
    }
    assert_eq!(report["retries"], lines.len(), "{report}");
    assert_eq!(std::fs::read_to_string(c.cloud.join("throttle-creates")).unwrap().trim(), "0");
    assert_eq!(c.machines_per_instance().get(&id), Some(&1), "one machine, made once");
    let m = metrics(&m);
    let dir = c.s.dir.as_path();
    let reconcile = [("command", "reconcile")];
    assert_eq!(value(&m, dir, "last_exit_code", &reconcile), Some(0.0));
    assert_eq!(value(&m, dir, "last_run_retries", &reconcile), Some(lines.len() as f64));
    assert!(value(&m, dir, "last_run_terraform_runs", &reconcile).unwrap() >= 2.0 + lines.len() as f64);
    assert_eq!(value(&m, dir, "instances", &[("group", "web"), ("status", "created")]), Some(1.0));
    let success = value(&m, dir, "last_success_timestamp_seconds", &reconcile).unwrap();
    assert_eq!(Some(success), value(&m, dir, "last_run_timestamp_seconds", &reconcile));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((now - success).abs() < 120.0, "a Unix time: {success}");
}

#[test]
fn a_failure_that_matches_no_pattern_is_not_retried() {
    let c = cloud("200ms");
    std::fs::write(c.cloud.join("fail-create"), "").unwrap();
    let run = c.run(&["provision", &c.spec()]).code(Code::TerraformFailed);
    assert!(run.stderr.contains("create refused"), "{}", run.stderr);
    assert!(retry_lines(&run.stderr).is_empty(), "retried: {}", run.stderr);
}

#[test]
fn retries_0_fails_at_the_first_transient_error() {
    let c = cloud("200ms");
    c.run(&["provision", "--no-apply", &c.spec()]).ok();
    throttle(&c, 1);
    let run = c.run(&["reconcile", "--retries", "0"]).code(Code::TerraformFailed);
    assert!(retry_lines(&run.stderr).is_empty(), "retried: {}", run.stderr);
    assert!(run.stderr.contains("ThrottlingException"), "{}", run.stderr);
    // It was transient: the next run goes through, without a retry.
    let run = c.run(&["reconcile", "--output", "json"]).ok();
    assert_eq!(run.json()["retries"], 0, "{}", run.stderr);
}

#[test]
fn an_interrupt_during_the_backoff_ends_the_run_at_once() {
    let c = cloud("60s");
    c.run(&["provision", "--no-apply", &c.spec()]).ok();
    throttle(&c, 1);
    let path = c.s.root.path().join("infrakit.prom");
    let mut run = c.start(&["reconcile", "--metrics-file", path.to_str().unwrap()], &[]);
    let announced = run.wait_for("retry 1 of 3 in").expect("a retry is announced");
    let line = &run.seen.last().expect("the announcement").1;
    let delay = line.rsplit_once(" in ").and_then(|(_, d)| d.strip_suffix('s')?.parse::<f64>().ok());
    let delay = Duration::from_secs_f64(delay.unwrap_or_else(|| panic!("no delay in `{line}`")));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(run.pid() as i32, libc::SIGINT) };
    let ended = run.wait_for("interrupted while waiting to retry");
    let run = run.finish();
    // "At once" is a bound on time, the point of this test: the run must end before the retry
    // it announced was due. The backoff (base 60 s, jittered down to half) leaves a slow
    // machine at least 30 s to deliver the signal and exit, not the 10 s it once had.
    let ended = ended.unwrap_or_else(|| panic!("never said it was interrupted: {}", run.stderr));
    assert!(ended.duration_since(announced) < delay, "waited out the {delay:?} backoff: {}", run.stderr);
    assert_eq!(run.code, Code::Interrupted as i32, "{}", run.stderr);
    assert!(run.stderr.contains("interrupted while waiting to retry"), "{}", run.stderr);
    // The metrics say so; nothing more ran to count the instances, so none are claimed.
    let m = metrics(&path);
    let dir = c.s.dir.as_path();
    assert_eq!(
        value(&m, dir, "last_exit_code", &[("command", "reconcile")]),
        Some(f64::from(Code::Interrupted as i32))
    );
    assert!(!m.keys().any(|(family, _)| family == "infrakit_tf_instances"), "{m:?}");
    // Nothing is left half done: the next run finishes the work.
    c.run(&["reconcile"]).ok();
    c.run(&["reconcile", "--check"]).ok();
}

// The issue's second scenario: the metrics after a success, a run that found drift, and a
// failure, each holding what that run had.
#[test]
fn metrics_hold_each_runs_values() {
    let c = cloud("100ms");
    let spec = c.s.write_outside("group.json", &web(r#"{"Size": 2}"#, "v1"));
    let path = c.s.root.path().join("textfile/infrakit.prom");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let m = path.to_str().unwrap();
    let dir = c.s.dir.as_path();

    // A success.
    let out = c.run(&["reconcile", "--group", &spec, "--output", "json", "--metrics-file", m]).ok().json();
    let after_success = metrics(&path);
    let reconcile = [("command", "reconcile")];
    assert_eq!(value(&after_success, dir, "last_exit_code", &reconcile), Some(0.0));
    assert_eq!(
        value(&after_success, dir, "last_run_resources_added", &reconcile),
        Some(out["added"].as_f64().unwrap())
    );
    assert_eq!(
        value(&after_success, dir, "last_run_resources_added", &reconcile),
        Some(5.0),
        "2 VMs, 2 slots, 1 shared"
    );
    assert_eq!(value(&after_success, dir, "instances", &[("group", "web"), ("status", "created")]), Some(2.0));
    assert_eq!(value(&after_success, dir, "group_members_outdated", &[("group", "web")]), Some(0.0));
    assert_eq!(value(&after_success, dir, "drift_resources", &[]), Some(0.0));
    let success = value(&after_success, dir, "last_success_timestamp_seconds", &reconcile).unwrap();

    // Drift found: a machine vanished behind terraform's back; the spec changed too.
    let member = c.describe().into_iter().find(|r| r["Tags"]["infrakit.group"] == "web").unwrap();
    c.vanish(&c.machine(member["ID"].as_str().unwrap()));
    let v2 = c.s.write_outside("group-v2.json", &web(r#"{"Size": 2}"#, "v2"));
    let check =
        c.run(&["reconcile", "--group", &v2, "--check", "--output", "json", "--metrics-file", m]).code(Code::Pending);
    let check = check.json();
    let after_check = metrics(&path);
    assert_eq!(value(&after_check, dir, "last_exit_code", &reconcile), Some(f64::from(Code::Pending as i32)));
    assert_eq!(check["drift"].as_array().unwrap().len(), 1, "{check}");
    assert_eq!(value(&after_check, dir, "drift_resources", &[]), Some(1.0));
    let outdated = check["groups"][0]["outdated"].as_f64().unwrap();
    assert!(outdated >= 1.0, "{check}");
    assert_eq!(value(&after_check, dir, "group_members_outdated", &[("group", "web")]), Some(outdated));
    assert_eq!(
        value(&after_check, dir, "last_success_timestamp_seconds", &reconcile),
        Some(success),
        "no success since"
    );

    // A failure: every create refused; the other command's series stay.
    std::fs::write(c.cloud.join("fail-create"), "").unwrap();
    c.run(&["provision", &c.spec(), "--metrics-file", m]).code(Code::TerraformFailed);
    let after_failure = metrics(&path);
    let provision = [("command", "provision")];
    assert_eq!(value(&after_failure, dir, "last_exit_code", &provision), Some(f64::from(Code::TerraformFailed as i32)));
    assert_eq!(value(&after_failure, dir, "last_success_timestamp_seconds", &provision), None, "never succeeded");
    assert!(value(&after_failure, dir, "last_run_duration_seconds", &provision).unwrap() > 0.0);
    assert_eq!(value(&after_failure, dir, "last_exit_code", &reconcile), Some(f64::from(Code::Pending as i32)), "kept");
    assert_eq!(value(&after_failure, dir, "drift_resources", &[]), Some(1.0), "kept: provision does not look");
    // Its apply failed while creating: its instance's machine may exist, unrecorded, until the
    // next run looks it up (README "When the cloud's answer is lost").
    assert!(
        value(&after_failure, dir, "instances", &[("group", "web"), ("status", "unconfirmed")]).is_some(),
        "{after_failure:?}"
    );

    // A file that cannot be written is a warning, not a failed run.
    std::fs::remove_file(c.cloud.join("fail-create")).unwrap();
    let run = c.run(&["reconcile", "--group", &spec, "--metrics-file", "/nonexistent/dir/x.prom"]).ok();
    assert!(run.stderr.contains("warning: metrics not written to `/nonexistent/dir/x.prom`"), "{}", run.stderr);
}

#[test]
fn a_bad_retry_pattern_is_refused_before_anything_is_written() {
    let c = Cloud::new();
    let mut config: Value = c.s.read("infrakit-tf.json");
    config["retries"] = serde_json::json!({"extra_errors": ["(unclosed"]});
    c.s.write("infrakit-tf.json", &config.to_string());
    let before = c.s.snapshot();
    let run = c.run(&["provision", &c.spec()]).code(Code::Invalid);
    assert!(run.stderr.contains("retryable error pattern `(unclosed` is not a regular expression"), "{}", run.stderr);
    assert!(c.s.snapshot() == before, "something was written");
}

#[test]
fn the_metrics_count_the_instances_without_another_terraform_run() {
    let c = cloud("200ms");
    // The real terraform, behind a wrapper that notes each subcommand it is asked to run.
    let log = c.s.root.path().join("terraform-runs.log");
    let wrapper = c.s.root.path().join("terraform-noted");
    let script = format!(
        "#!/bin/sh\necho \"$1\" >> '{}'\nexec '{}' \"$@\"\n",
        log.display(),
        crate::support::terraform::terraform_program().display()
    );
    crate::support::write_executable(&wrapper, &script);
    let path = c.s.root.path().join("infrakit.prom");
    let metered = ["--terraform", wrapper.to_str().unwrap(), "--metrics-file", path.to_str().unwrap()];
    let ids: Vec<String> = (0..2)
        .map(|_| c.run(&[&["provision", &c.spec()][..], &metered[..]].concat()).ok().stdout.trim().to_string())
        .collect();
    // Counting needs no terraform run of its own (before: a `terraform show` after each).
    let runs = std::fs::read_to_string(&log).unwrap();
    assert!(runs.lines().any(|l| l == "apply"), "{runs}");
    assert!(!runs.lines().any(|l| l == "show"), "{runs}");
    let m = metrics(&path);
    let dir = c.s.dir.as_path();
    assert_eq!(value(&m, dir, "instances", &[("group", "web"), ("status", "created")]), Some(2.0), "{m:?}");
    // One tainted by hand, and a third queued (written, not applied): counted as `describe`
    // shows them.
    c.terraform(&["taint", &format!("fakecloud_instance.{}", ids[0])]);
    c.run(&[&["provision", "--no-apply", &c.spec()][..], &metered[..]].concat()).ok();
    let m = metrics(&path);
    let mut described: BTreeMap<String, f64> = BTreeMap::new();
    for row in c.describe() {
        *described.entry(row["status"].as_str().unwrap().to_string()).or_default() += 1.0;
    }
    assert_eq!(described, BTreeMap::from([("created".into(), 1.0), ("tainted".into(), 1.0), ("queued".into(), 1.0)]));
    for (status, n) in described {
        assert_eq!(value(&m, dir, "instances", &[("group", "web"), ("status", &status)]), Some(n), "{status}: {m:?}");
    }
}
