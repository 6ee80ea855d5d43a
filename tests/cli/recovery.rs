//! What survives which failure (README "Crashes and recovery"): infrakit-tf killed alone while
//! terraform applies, a lost or rolled-back state, a hung terraform, a full or read-only disk,
//! drift whose file is already gone, an interrupt that reached only us.

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;
use crate::support::fake_terraform::fake;
use crate::support::{Scratch, BIN};

const VM: &str = r#"{"Properties": {"resource": {"terraform_data": {"vm": {}}}}}"#;

// Killed alone (not its process group) while terraform creates a slow machine: terraform goes
// on and saves its state; the next run waits for it as for a held lock, then finds everything
// created once.
#[test]
fn terraform_outlives_a_killed_infrakit_tf() {
    let c = Cloud::new();
    c.delay_creates(2000);
    c.kill_at(&["provision", &c.spec()], "creating fakecloud_instance", false);
    c.delay_creates(0);
    let run = c.run(&["reconcile", "--output", "json", "--lock-timeout", "120s"]).ok();
    assert!(run.stderr.contains("left running by an earlier infrakit-tf run"), "it waited: {run:#?}");
    let rows = c.describe();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "created", "{rows:?}");
    let state: std::collections::BTreeSet<String> = c.state().into_values().collect();
    let cloud: std::collections::BTreeSet<String> = c.objects().into_keys().collect();
    assert_eq!(state, cloud, "every machine in state, none twice");
    assert_eq!(cloud.len(), 3, "the VM, its slot and the shared volume");
    c.run(&["reconcile", "--check"]).ok();
}

// A state zeroed (or replaced, or rolled back) behind our back is never applied into: every
// machine would be created again. Nothing is written; the hint says how to accept a restore.
#[test]
fn a_lost_state_is_refused() {
    let s = Scratch::new();
    let vm = s.write_outside("vm.json", VM);
    s.run(&["provision", &vm]).ok();
    let state = s.dir.join("terraform.tfstate");
    let good = std::fs::read(&state).unwrap();

    std::fs::write(&state, b"").unwrap();
    let before = s.snapshot();
    let run = s.run(&["provision", &vm]).code(Code::StateLost);
    s.assert_stderr(&run, snapbox::str![[r#"
error: refusing to run terraform: the state `[ROOT]/dir/terraform.tfstate` does not match the live files: it is empty (0 bytes); applying would create every machine again
hint: restore `[ROOT]/dir/terraform.tfstate.backup` (or your backend's previous version), check it, then remove `.infrakit-tf-state.json` to accept it and re-run

"#]]);
    s.run(&["reconcile"]).code(Code::StateLost);
    assert!(s.snapshot() == before, "a refused run changed something");

    // Another lineage (a state from elsewhere), then an older serial.
    let mut other: serde_json::Value = serde_json::from_slice(&good).unwrap();
    other["lineage"] = "someone-else".into();
    std::fs::write(&state, other.to_string().as_bytes()).unwrap();
    let run = s.run(&["reconcile"]).code(Code::StateLost);
    s.assert_stderr(&run, snapbox::str![[r#"
error: refusing to run terraform: the state `[ROOT]/dir/terraform.tfstate` does not match the live files: its lineage is `someone-else`, but the last run left lineage `[..]`: it is another state; applying would create every machine again
hint: restore `[ROOT]/dir/terraform.tfstate.backup` (or your backend's previous version), check it, then remove `.infrakit-tf-state.json` to accept it and re-run

"#]]);
    let mut older: serde_json::Value = serde_json::from_slice(&good).unwrap();
    older["serial"] = (older["serial"].as_u64().unwrap() - 1).into();
    std::fs::write(&state, older.to_string().as_bytes()).unwrap();
    let run = s.run(&["reconcile"]).code(Code::StateLost);
    s.assert_stderr(&run, snapbox::str![[r#"
error: refusing to run terraform: the state `[ROOT]/dir/terraform.tfstate` does not match the live files: its serial is 0, older than the 1 the last run left: it was rolled back; applying would create every machine again
hint: restore `[ROOT]/dir/terraform.tfstate.backup` (or your backend's previous version), check it, then remove `.infrakit-tf-state.json` to accept it and re-run

"#]]);

    // Accepting the restored state is the operator's explicit step.
    std::fs::remove_file(s.dir.join(".infrakit-tf-state.json")).unwrap();
    s.run(&["reconcile"]).ok();
}

// A state terraform could not save (`errored.tfstate`: a full disk, a backend gone) stops
// every apply until it is pushed: applying again would make what it made again.
#[test]
fn a_state_terraform_could_not_save_is_refused() {
    let s = Scratch::new();
    let vm = s.write_outside("vm.json", VM);
    s.run(&["provision", &vm]).ok();
    std::fs::write(s.dir.join("errored.tfstate"), b"{}").unwrap();
    let before = s.snapshot();
    let run = s.run(&["provision", &vm]).code(Code::StateLost);
    s.assert_stderr(
        &run,
        snapbox::str![[r#"
error: refusing to run terraform: `errored.tfstate` in `[ROOT]/dir` holds a state terraform could not save
hint: push it where the state belongs (`terraform state push errored.tfstate`; `-force` when terraform says the serial is the same: the file is the newer), then remove it and re-run

"#]],
    );
    s.run(&["reconcile"]).code(Code::StateLost);
    assert!(s.snapshot() == before, "a refused run changed something");
    std::fs::remove_file(s.dir.join("errored.tfstate")).unwrap();
    s.run(&["reconcile"]).ok();
}

// A terraform that hangs (and ignores the interrupt) is killed after the timeout's grace, with
// its own exit code; the directory is free again at once.
#[test]
fn a_hung_terraform_is_stopped() {
    let s = Scratch::new();
    let tf = fake(&s, "1.9.0", "trap '' INT; sleep 60");
    let vm = s.write_outside("vm.json", VM);
    let run = s.run(&["provision", &vm, "--terraform", &tf, "--terraform-timeout", "1s"]).code(Code::TerraformTimeout);
    s.assert_stderr(&run, snapbox::str![[r#"
running terraform init (first use, new provider or changed configuration)
not provisioned yet (the apply failed before its VM was created) instance-[..]
error: `fake-terraform apply -auto-approve -input=false -json -refresh=false -target=terraform_data.instance-[..]` ran longer than --terraform-timeout (1s): it was interrupted, then killed
hint: raise --terraform-timeout if it was just slow; terraform printed nothing on stderr

"#]]);
    // The short runs too: a `version` that never answers.
    let hung = s.root.path().join("hung-terraform");
    crate::support::write_executable(&hung, "#!/bin/sh\nsleep 60\n");
    let run = s
        .run(&["reconcile", "--terraform", hung.to_str().unwrap(), "--terraform-timeout", "500ms"])
        .code(Code::TerraformTimeout);
    s.assert_stderr(
        &run,
        snapbox::str![[r#"
error: `hung-terraform version -json` ran longer than --terraform-timeout (500ms): it was interrupted, then killed
hint: raise --terraform-timeout if it was just slow; terraform printed nothing on stderr

"#]],
    );
    s.run(&["provision", "--no-apply", &vm, "--lock-timeout", "0"]).ok();
}

// An object whose file is already gone (destroyed with --no-apply) vanishes from the cloud:
// the refresh that notices is saved, and `--check` is clean afterwards.
#[test]
fn drift_of_an_unmanaged_object_is_settled() {
    let c = Cloud::new();
    let id = c.run(&["provision", &c.spec()]).ok().stdout.trim().to_string();
    let machine = c.machine(&id);
    c.run(&["destroy", &id, "--reason", "rolling-update", "--no-apply", "--yes"]).ok();
    c.vanish(&machine);
    c.run(&["reconcile"]).ok();
    c.run(&["reconcile", "--check"]).ok();
}

// A SIGINT that reached only infrakit-tf during the plan (terraform never saw it and finished)
// still stops the run: the apply that would follow never starts.
#[test]
fn an_interrupt_during_the_plan_prevents_the_apply() {
    let s = Scratch::new();
    let marker = s.root.path().join("applied");
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in\n  version) echo '{{\"terraform_version\":\"1.9.0\"}}' ;;\n  init) exit 0 ;;\n  plan) kill -INT $PPID; echo '{{\"type\":\"change_summary\",\"changes\":{{\"add\":1,\"change\":0,\"remove\":0,\"operation\":\"plan\"}}}}'; exit 2 ;;\n  apply) touch {} ;;\nesac\n",
        marker.display()
    );
    let tf = s.root.path().join("plan-interrupts");
    crate::support::write_executable(&tf, &script);
    let run = s.run(&["reconcile", "--terraform", tf.to_str().unwrap()]).code(Code::Interrupted);
    s.assert_stderr(
        &run,
        snapbox::str![[r#"
the directory has no configuration: writing an empty `infrakit-tf-empty.tf.json`
running terraform init (first use, new provider or changed configuration)
[TIME] plan: 1 to add, 0 to change, 0 to destroy
error: interrupted: `plan-interrupts apply -auto-approve -input=false -json [..]/plan` was not started
hint: run the command again, or `infrakit-tf reconcile`, to finish the work

"#]],
    );
    assert!(!marker.exists(), "the apply ran after the interrupt");
}

/// Runs `script` (sh) in a private mount namespace, with `$BIN` and `$DIR` set: a tmpfs can be
/// mounted over the managed directory without touching the machine's mounts.
fn in_namespace(s: &Scratch, script: &str) -> String {
    let out = std::process::Command::new("unshare")
        .args(["--mount", "sh", "-c", script])
        .env("BIN", BIN)
        .env("DIR", &s.dir)
        .env("TF_CLI_CONFIG_FILE", s.cli_config())
        .output()
        .unwrap();
    assert!(out.status.success(), "unshare: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

// A full disk: exit 12 with the reason and the fix, and nothing half-written (no instance,
// no temporary file).
#[test]
fn a_full_disk_changes_nothing() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", crate::support::SCOPED);
    let out = in_namespace(
        &s,
        r#"mount -t tmpfs -o size=64k tmpfs "$DIR" && head -c 100000 /dev/zero > "$DIR/filler" 2>/dev/null
        "$BIN" --dir "$DIR" provision --no-apply "$SPEC" 2>&1; echo "exit=$?"; ls -A "$DIR""#
            .replace("$SPEC", &spec)
            .as_str(),
    );
    assert!(out.contains(&format!("exit={}", Code::Unwritable as i32)), "{out}");
    assert!(out.contains("no storage space"), "{out}");
    assert!(out.contains("hint: free some space"), "{out}");
    let listing: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("exit=")).skip(1).collect();
    assert_eq!(listing, ["filler"], "{out}");
}

// A read-only directory: exit 12 before anything, never "locked by another process".
#[test]
fn a_read_only_directory_is_said_to_be_read_only() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", crate::support::VM_ONLY);
    let out = in_namespace(
        &s,
        r#"mount -t tmpfs tmpfs "$DIR" && mount -o remount,ro "$DIR"
        "$BIN" --dir "$DIR" provision --no-apply "$SPEC" 2>&1; echo "exit=$?"
        "$BIN" --dir "$DIR" reconcile 2>&1; echo "exit=$?""#
            .replace("$SPEC", &spec)
            .as_str(),
    );
    assert_eq!(out.matches(&format!("exit={}", Code::Unwritable as i32)).count(), 2, "{out}");
    assert!(out.contains("read-only"), "{out}");
    assert!(!out.contains("force-unlock"), "{out}");
}
