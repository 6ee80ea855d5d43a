//! Mutating commands apply with the real terraform (`$INFRAKIT_TF_TEST_TERRAFORM`, else PATH),
//! on `examples/local` and variations of it.

use serde_json::Value;

use infrakit_tf::exit::Code;

use crate::support::terraform::{state, terraform, terraform_program};
use crate::support::Scratch;

fn spec(s: &Scratch) -> String {
    s.dir.join("web.json").to_str().unwrap().to_string()
}

fn resource_id(s: &Scratch, addr: &str) -> String {
    let shown: Value = serde_json::from_str(&terraform(&s.dir, &["show", "-json"])).unwrap();
    let rs = shown["values"]["root_module"]["resources"].as_array().unwrap();
    rs.iter().find(|r| r["address"] == addr).unwrap_or_else(|| panic!("{addr} not in state"))["values"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn managed_files(s: &Scratch) -> Vec<String> {
    s.files().into_iter().filter(|f| f.ends_with(".tf.json") || f.ends_with(".tf.json.new")).collect()
}

// The issue's end-to-end: provision two, describe, rolling-update one (its slot is re-attached
// to the replacement), terminate the rest: state and directory end empty of what we manage.
#[test]
fn lifecycle_on_the_local_example() {
    let s = Scratch::example();
    let run = s.run(&["provision", &spec(&s), "--output", "json"]).ok();
    let first = run.json();
    let a = first["ID"].as_str().unwrap().to_string();
    assert_eq!(first["applied"], true);
    assert_eq!(first["terraform"]["added"], 4, "vm, slot, global, and the user's network: {first}");
    assert!(first["files"].as_array().unwrap().iter().all(|f| f["name"].as_str().unwrap().ends_with(".tf.json")));
    assert!(run.stderr.contains("applied: 4 added, 0 changed, 0 destroyed"), "{}", run.stderr);
    let b = s.run(&["provision", &spec(&s)]).ok().stdout.trim().to_string();
    assert!(managed_files(&s).iter().all(|f| f.ends_with(".tf.json")), "nothing left queued: {:?}", s.files());

    let rows = s.run(&["describe", "--output", "json"]).ok().json();
    assert_eq!(rows.as_array().unwrap().len(), 2);
    for row in rows.as_array().unwrap() {
        assert_eq!(row["status"], "created", "{row}");
        assert!(row["attributes"]["id"].as_str().is_some_and(|id| !id.is_empty()), "{row}");
    }
    let table = s.run(&["describe"]).ok().stdout;
    assert!(table.contains("created") && table.contains("id="), "{table}");

    // Rolling update of `a`: its slot (1) stays in state and is re-attached to the replacement.
    let slot_id = resource_id(&s, "terraform_data.web-1-data");
    s.run(&["destroy", &a, "--reason", "rolling-update", "--yes"]).ok();
    assert!(state(&s.dir).contains(&"terraform_data.web-1-data".to_string()));
    let c = s.run(&["provision", &spec(&s)]).ok().stdout.trim().to_string();
    let vm = &s.read(&format!("{c}.tf.json"))["resource"]["terraform_data"][&c];
    assert_eq!(vm["input"]["tags"]["infrakit.attach"], "web_dedicated_1,web_global");
    assert_eq!(resource_id(&s, "terraform_data.web-1-data"), slot_id, "the slot was not re-created");

    let out = s.run(&["destroy", &b, &c, "--yes", "--output", "json"]).ok().json();
    assert_eq!(out["terraform"]["destroyed"], 5, "two VMs, two slots, the global: {out}");
    assert_eq!(state(&s.dir), ["terraform_data.network"]);
    assert!(managed_files(&s).is_empty(), "{:?}", s.files());
}

// A resource that really fails: exit 7 with terraform's error (summary, detail, address); the
// ID is still printed; the instance stays, promoted and tainted, and the next apply converges.
#[test]
fn failed_apply_is_reported_and_converges() {
    let s = Scratch::new();
    let flaky = s.write_outside(
        "flaky.json",
        &format!(
            r#"{{"Properties": {{"resource": {{"terraform_data": {{"vm": {{"input": {{}},
                "provisioner": [{{"local-exec": {{"command": "test ! -e {}/fail"}}}}]}}}}}}}}}}"#,
            s.root.path().display()
        ),
    );
    s.write_outside("fail", "");
    let run = s.run(&["provision", &flaky]).code(Code::TerraformFailed);
    // Its VM's create failed (tainted): no ID on stdout, where a script would take it for a
    // machine; stderr names it.
    assert_eq!(run.stdout, "", "an ID printed for an instance that was not provisioned");
    let id = run.not_provisioned();
    assert!(run.stderr.contains("terraform error: local-exec provisioner error"), "{}", run.stderr);
    assert!(run.stderr.contains(&format!("at terraform_data.{id}")), "{}", run.stderr);
    let error = run.error_lines();
    assert_eq!(error.len(), 1, "{run:#?}");
    assert!(
        error[0].contains(
            &format!("apply -auto-approve -input=false -json -refresh=false -target=terraform_data.{id}` failed (exit 1): local-exec provisioner error")
        ),
        "{}",
        error[0]
    );
    assert_eq!(managed_files(&s), [format!("{id}.tf.json")], "kept and promoted");
    let rows = s.run(&["describe", "--output", "json"]).ok().json();
    assert_eq!(rows[0]["status"], "tainted");

    std::fs::remove_file(s.root.path().join("fail")).unwrap();
    let out = s.run(&["label", &id, "retry=1", "--output", "json"]).ok().json();
    assert_eq!(out["applied"], true);
    assert_eq!(s.run(&["describe", "--output", "json"]).ok().json()[0]["status"], "created");
}

// JSON output on failure still describes what is in the directory, with the error.
#[test]
fn failed_apply_json_report() {
    let s = Scratch::new();
    let bad = s.write_outside(
        "bad.json",
        r#"{"Properties": {"resource": {"terraform_data": {"vm": {"provisioner": [{"local-exec": {"command": "false"}}]}}}}}"#,
    );
    let out = s.run(&["provision", &bad, "--output", "json"]).code(Code::TerraformFailed).json();
    assert_eq!(out["applied"], false);
    assert!(out["error"].as_str().unwrap().contains("local-exec provisioner error"), "{out}");
    assert_eq!(out["files"][0]["action"], "created");
}

#[test]
fn dry_run_writes_nothing_and_shows_the_plan() {
    let s = Scratch::example();
    let id = s.run(&["provision", &spec(&s)]).ok().stdout.trim().to_string();
    let before = s.snapshot();
    let out = s.run(&["provision", &spec(&s), "--dry-run", "--output", "json"]).ok().json();
    assert_eq!((out["dry_run"].as_bool(), out["applied"].as_bool()), (Some(true), Some(false)));
    assert_eq!(out["terraform"]["added"], 2, "a new VM and its slot 2: {out}");
    let out = s.run(&["destroy", &id, "--dry-run", "--output", "json"]).ok().json();
    assert_eq!(out["terraform"]["destroyed"], 3, "vm, slot, global: {out}");
    assert_eq!(out["files"].as_array().unwrap().len(), 3);
    let out = s.run(&["label", &id, "a=b", "--dry-run", "--output", "json"]).ok().json();
    assert_eq!(out["terraform"]["changed"], 1, "{out}");
    assert!(s.snapshot() == before, "a dry run changed files");
}

// `init` runs by itself on first use, not on every command.
#[test]
fn init_runs_only_when_needed() {
    let s = Scratch::new();
    let vm = s.write_outside("vm.json", r#"{"Properties": {"resource": {"terraform_data": {"vm": {}}}}}"#);
    let first = s.run(&["provision", &vm]).ok();
    assert!(first.stderr.contains("running terraform init"), "{}", first.stderr);
    let second = s.run(&["provision", &vm]).ok();
    assert!(!second.stderr.contains("running terraform init"), "{}", second.stderr);
    s.write("variables.tf", "variable \"region\" {\n  default = \"eu\"\n}\n");
    let third = s.run(&["provision", &vm]).ok();
    assert!(third.stderr.contains("running terraform init"), "user config changed: {}", third.stderr);
}

// Another terraform holds the state lock: its own exit code and message. That terraform's apply
// waits (at most 120 s) for the test to say it is done, so it holds the lock as long as needed.
#[test]
fn state_lock_held_by_another_terraform() {
    let s = Scratch::new();
    let vm = s.write_outside("vm.json", r#"{"Properties": {"resource": {"terraform_data": {"vm": {}}}}}"#);
    let id = s.run(&["provision", &vm]).ok().stdout.trim().to_string();
    let release = s.root.path().join("release");
    let hold = format!("i=0; while [ ! -e {} ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done", release.display());
    let slow = serde_json::json!({"resource": {"terraform_data": {"slow": {"provisioner": [{"local-exec": {"command": hold}}]}}}});
    s.write("slow.tf.json", &slow.to_string());
    #[allow(clippy::disallowed_methods)]
    let mut other = std::process::Command::new(terraform_program())
        .args(["apply", "-auto-approve", "-input=false", "-no-color"])
        .current_dir(&s.dir)
        .env("TF_CLI_CONFIG_FILE", s.cli_config())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // That terraform holds the lock once it writes the lock info file.
    crate::support::wait_for(&s.dir.join(".terraform.tfstate.lock.info"), "the other terraform never took the lock");
    let run = s.run(&["label", &id, "a=b"]).code(Code::StateLocked);
    s.assert_stderr(&run, snapbox::str![[r#"
running terraform init (first use, new provider or changed configuration)
[TIME] terraform error: Error acquiring the state lock
...
labelled instance-[..] in instance-[..].tf.json
error: `terraform apply -auto-approve -input=false -json -refresh=false -target=terraform_data.instance-[..]` failed: the Terraform state is locked by another process
hint: wait for the other terraform run to finish; `terraform force-unlock` only if it is dead

"#]]);
    std::fs::File::create(&release).unwrap();
    assert!(other.wait().unwrap().success());
}

// provision, destroy and label apply what they changed (`-target`), not the rest: a pending
// change of the user's main.tf is left for `reconcile`, which applies the whole directory.
#[test]
fn commits_apply_only_what_they_changed() {
    let s = Scratch::new();
    let main = |v: &str| format!("resource \"terraform_data\" \"unrelated\" {{\n  input = \"{v}\"\n}}\n");
    s.write("main.tf", &main("v1"));
    s.run(&["reconcile"]).ok();
    let input = |s: &Scratch| {
        let shown: Value = serde_json::from_str(&terraform(&s.dir, &["show", "-json"])).unwrap();
        let rs = shown["values"]["root_module"]["resources"].as_array().unwrap().clone();
        rs.iter().find(|r| r["address"] == "terraform_data.unrelated").unwrap()["values"]["input"].clone()
    };
    assert_eq!(input(&s), "v1");
    s.write("main.tf", &main("v2"));
    let vm = s.write_outside("vm.json", r#"{"Properties": {"resource": {"terraform_data": {"vm": {}}}}}"#);
    let run = s.run(&["provision", &vm, "--output", "json", "--verbose"]).ok();
    assert_eq!(run.json()["terraform"]["added"], 1, "the new VM only: {}", run.stdout);
    assert!(run.stderr.contains("-target=terraform_data.instance-"), "{}", run.stderr);
    assert!(
        !run.stderr.contains("Resource targeting is in effect"),
        "terraform's targeting warnings are not shown: {}",
        run.stderr
    );
    let id = run.json()["ID"].as_str().unwrap().to_string();
    s.run(&["label", &id, "owner=ops"]).ok();
    assert_eq!(input(&s), "v1", "main.tf's change is not applied by provision or label");
    s.run(&["reconcile", "--check"]).code(Code::Pending);
    s.run(&["reconcile"]).ok();
    assert_eq!(input(&s), "v2", "reconcile applies it");
    let dry = s.run(&["destroy", &id, "--dry-run", "--output", "json"]).ok().json();
    assert_eq!(dry["planned"].as_array().unwrap().len(), 1, "a dry run plans the same scope: {dry}");
    s.run(&["destroy", &id, "--yes"]).ok();
    assert_eq!(state(&s.dir), ["terraform_data.unrelated"]);
}
