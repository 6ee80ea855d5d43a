//! Faults a real terraform will not produce on demand, injected with a scripted fake: garbage
//! output, a crash mid-stream, a version too old. Everything else runs the real terraform.

use infrakit_tf::exit::Code;

use crate::support::fake_terraform::fake;
use crate::support::Scratch;

const VM: &str = r#"{"Properties": {"resource": {"terraform_data": {"vm": {}}}}}"#;

#[test]
fn garbage_output_is_an_error() {
    let s = Scratch::new();
    let tf = fake(&s, "1.9.0", "echo 'this is not json'; echo 'neither is this'; exit 0");
    let vm = s.write_outside("vm.json", VM);
    let run = s.run(&["provision", &vm, "--terraform", &tf]).code(Code::TerraformFailed);
    s.assert_stderr(&run, snapbox::str![[r#"
running terraform init (first use, new provider or changed configuration)
not provisioned yet (the apply failed before its VM was created) instance-[..]
error: `fake-terraform apply -auto-approve -input=false -json -refresh=false -target=terraform_data.instance-[..]` printed output that is not its JSON stream (2 line(s)): neither is this
hint: the files of instance-[..] were kept: fix the spec or the directory's configuration and run `infrakit-tf reconcile`, or undo with `infrakit-tf destroy instance-[..] --yes`

"#]]);
}

#[test]
fn crash_mid_stream_is_named() {
    let s = Scratch::new();
    let tf = fake(
        &s,
        "1.9.0",
        r#"echo '{"@level":"info","@message":"Plan: 1 to add","type":"change_summary","changes":{"add":1,"change":0,"remove":0,"operation":"plan"}}'; echo 'panic: runtime error' >&2; kill -9 $$"#,
    );
    let vm = s.write_outside("vm.json", VM);
    let run = s.run(&["provision", &vm, "--terraform", &tf]).code(Code::TerraformFailed);
    s.assert_stderr(
        &run,
        snapbox::str![[r#"
running terraform init (first use, new provider or changed configuration)
[TIME] plan: 1 to add, 0 to change, 0 to destroy
not provisioned yet (the apply failed before its VM was created) instance-[..]
error: `fake-terraform apply -auto-approve -input=false -json -refresh=false -target=terraform_data.instance-[..]` was killed by signal 9 (SIGKILL)
hint: terraform's last words:
  panic: runtime error

"#]],
    );
    assert_eq!(s.files().len(), 1, "the instance file stays for the next apply");
}

#[test]
fn old_terraform_is_refused_before_writing() {
    let s = Scratch::new();
    let tf = fake(&s, "0.12.31", "exit 0");
    let vm = s.write_outside("vm.json", VM);
    let before = s.snapshot();
    let run = s.run(&["provision", &vm, "--terraform", &tf]).code(Code::TerraformMissing);
    s.assert_stderr(
        &run,
        snapbox::str![[r#"
error: terraform 0.12.31 is too old: infrakit-tf needs 1.0 or later
hint: install Terraform 1.x or OpenTofu

"#]],
    );
    assert!(s.snapshot() == before);
}

/// Terraform's diagnostic when the state lock cannot be taken, with its detail as terraform
/// 1.11 words it (recorded from a real run).
fn lock_diagnostic(detail: &str) -> String {
    format!(
        r#"printf '%s\n' '{{"@level":"error","@message":"Error: Error acquiring the state lock","type":"diagnostic","diagnostic":{{"severity":"error","summary":"Error acquiring the state lock","detail":"{detail}"}}}}'; exit 1"#
    )
}

#[test]
fn state_lock_diagnostic_has_its_own_code() {
    let s = Scratch::new();
    let held = r"Error message: resource temporarily unavailable\nLock Info:\n  ID:        1e66a691\n  Path:      terraform.tfstate";
    let tf = fake(&s, "1.9.0", &lock_diagnostic(held));
    let vm = s.write_outside("vm.json", VM);
    let run = s.run(&["provision", &vm, "--terraform", &tf]).code(Code::StateLocked);
    s.assert_stderr(&run, snapbox::str![[r#"
running terraform init (first use, new provider or changed configuration)
[TIME] terraform error: Error acquiring the state lock
  Error message: resource temporarily unavailable
  Lock Info:
    ID:        1e66a691
    Path:      terraform.tfstate
not provisioned yet (the apply failed before its VM was created) instance-[..]
error: `fake-terraform apply -auto-approve -input=false -json -refresh=false -target=terraform_data.instance-[..]` failed: the Terraform state is locked by another process
hint: wait for the other terraform run to finish; `terraform force-unlock` only if it is dead

"#]]);
}

// The same summary without a holder's "Lock Info" is not a held lock (a read-only file system
// here): no force-unlock hint, terraform's own reason instead.
#[test]
fn a_lock_that_cannot_be_written_is_not_a_held_lock() {
    let s = Scratch::new();
    let tf = fake(&s, "1.9.0", &lock_diagnostic(r"Error message: open terraform.tfstate: read-only file system"));
    let vm = s.write_outside("vm.json", VM);
    let run = s.run(&["provision", &vm, "--terraform", &tf]).code(Code::TerraformFailed);
    s.assert_stderr(&run, snapbox::str![[r#"
running terraform init (first use, new provider or changed configuration)
[TIME] terraform error: Error acquiring the state lock
  Error message: open terraform.tfstate: read-only file system
not provisioned yet (the apply failed before its VM was created) instance-[..]
error: `fake-terraform apply -auto-approve -input=false -json -refresh=false -target=terraform_data.instance-[..]` failed (exit 1): Error acquiring the state lock: Error message: open terraform.tfstate: read-only file system
hint: the files of instance-[..] were kept: fix the spec or the directory's configuration and run `infrakit-tf reconcile`, or undo with `infrakit-tf destroy instance-[..] --yes`

"#]]);
}

/// An apply that changes nothing, as terraform's `-json` stream says it.
const NO_CHANGE: &str =
    r#"echo '{"type":"change_summary","changes":{"add":0,"change":0,"remove":0,"operation":"apply"}}'"#;

/// Has `fake` terraform at `tf` log the command lines it gets, from now on.
fn record(tf: &str) {
    std::fs::write(format!("{tf}.calls"), "").unwrap();
}

/// The command lines `fake` terraform at `tf` was given since `record`.
fn calls(tf: &str) -> Vec<String> {
    std::fs::read_to_string(format!("{tf}.calls")).unwrap().lines().map(str::to_string).collect()
}

// The version probe is remembered per binary, and a binary replaced in place is probed again.
#[test]
fn the_version_probe_is_cached_until_terraform_is_replaced() {
    let s = Scratch::new();
    let tf = fake(&s, "1.9.0", NO_CHANGE);
    record(&tf);
    let vm = s.write_outside("vm.json", VM);
    let versions = || calls(&tf).iter().filter(|l| l.starts_with("version")).count();
    s.run(&["provision", &vm, "--terraform", &tf]).ok();
    assert_eq!(versions(), 1);
    s.run(&["provision", &vm, "--terraform", &tf, "--verbose"]).ok();
    assert_eq!(versions(), 1, "the second run remembers 1.9.0");
    // An upgrade replaces the binary: probed again, and the new version is what is used.
    std::fs::remove_file(&tf).unwrap();
    fake(&s, "1.10.1", NO_CHANGE);
    let run = s.run(&["provision", &vm, "--terraform", &tf, "--verbose"]).ok();
    assert_eq!(versions(), 2);
    assert!(run.stderr.contains("1.10.1"), "{}", run.stderr);
}

// `--parallelism` reaches terraform's plans and applies.
#[test]
fn parallelism_is_passed_to_terraform() {
    let s = Scratch::new();
    let tf = fake(&s, "1.9.0", NO_CHANGE);
    record(&tf);
    let vm = s.write_outside("vm.json", VM);
    s.run(&["provision", &vm, "--terraform", &tf, "--parallelism", "25"]).ok();
    let calls = calls(&tf);
    let apply = calls.iter().find(|l| l.starts_with("apply")).unwrap();
    assert!(apply.contains("-parallelism=25"), "{calls:?}");
    s.run(&["provision", &vm, "--terraform", &tf, "--parallelism", "0"]).code(Code::Usage);
}
