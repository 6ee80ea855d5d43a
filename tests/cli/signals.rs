//! Ctrl-C and SIGTERM while terraform runs a slow resource: terraform gets exactly one
//! interrupt, stops gracefully and releases its state lock; infrakit-tf exits 130. A SIGINT
//! that never reached terraform changes nothing.
#![allow(clippy::disallowed_methods)] // the test spawns the binary in its own process group

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use infrakit_tf::exit::Code;

use crate::support::terraform::terraform;
use crate::support::{wait_for, Scratch, BIN};

/// A VM whose create touches `started` beside the directory, then waits for `release` there
/// (at most `seconds`; terraform stops it sooner when interrupted), then touches `finished`:
/// a provisioner that was stopped never writes it.
fn slow(s: &Scratch, seconds: u32) -> String {
    slow_with(s, seconds, serde_json::json!({}), serde_json::json!({}))
}

/// [`slow`], with other resources beside the VM (`siblings`: name to body) and the VM's
/// `input` (through which it may wait for them).
fn slow_with(s: &Scratch, seconds: u32, siblings: serde_json::Value, input: serde_json::Value) -> String {
    let root = s.root.path();
    let (started, release, finished) = (root.join("started"), root.join("release"), root.join("finished"));
    let command = format!(
        "touch {}; i=0; while [ ! -e {} ] && [ $i -lt {} ]; do sleep 0.1; i=$((i+1)); done; touch {}",
        started.display(),
        release.display(),
        seconds * 10,
        finished.display()
    );
    let mut resources = siblings;
    resources["vm"] = serde_json::json!({"input": input, "provisioner": [{"local-exec": {"command": command}}]});
    let spec = serde_json::json!({"Properties": {"resource": {"terraform_data": resources}}});
    s.write_outside("slow.json", &spec.to_string())
}

/// Starts a provision of a slow VM in a new process group, waits until its provisioner runs
/// (terraform said it is creating the VM, and the command touched `started`), sends `signal`
/// (to the group, as a terminal does, or to our PID only), then, when `release`, lets the
/// provisioner finish; returns the exit code, stderr and whether the provisioner had finished
/// (written `finished`) when infrakit-tf exited.
fn interrupt(s: &Scratch, seconds: u32, signal: i32, to_group: bool, release: bool) -> (i32, String, bool) {
    let spec = slow(s, seconds);
    let (code, _, stderr, finished) = interrupt_spec(s, &spec, signal, to_group, release);
    (code, stderr, finished)
}

/// [`interrupt`] of a provision of `spec` (made by [`slow_with`]); also returns stdout.
fn interrupt_spec(s: &Scratch, spec: &str, signal: i32, to_group: bool, release: bool) -> (i32, String, String, bool) {
    let mut cmd = crate::support::command(&s.cli_config());
    cmd.args(["--dir", s.dir.to_str().unwrap(), "provision", spec]).process_group(0);
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap() > 0 {
        seen.push_str(&line);
        let creating = line.contains("creating terraform_data.instance-");
        line.clear();
        if creating {
            break;
        }
    }
    assert!(seen.contains("creating terraform_data.instance-"), "never started creating: {seen}");
    wait_for(&s.root.path().join("started"), "the provisioner never started");
    let pid = child.id() as i32;
    // SAFETY: kill(2) on our own child (or its group).
    unsafe { libc::kill(if to_group { -pid } else { pid }, signal) };
    if release {
        std::fs::File::create(s.root.path().join("release")).unwrap();
    }
    let status = child.wait().unwrap();
    let finished = s.root.path().join("finished").exists();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    (status.code().unwrap_or(-1), stdout, seen + &rest, finished)
}

// Ctrl-C while the VM is still being created, after its siblings were: the summary names the
// create that did not finish and counts those that did, each error is shown once, and no ID
// is printed for the instance that was not provisioned (a script must not hold an ID of
// nothing). The next run finishes it.
#[test]
fn an_interrupt_says_what_was_created_and_prints_no_id_of_nothing() {
    let s = Scratch::new();
    let spec = slow_with(
        &s,
        60,
        serde_json::json!({"data": {"@scope": "@dedicated-web", "input": 1}, "nfs": {"@scope": "web", "input": 2}}),
        // The VM's create starts only once its siblings are created.
        serde_json::json!({"after": ["${terraform_data.web-1-data.id}", "${terraform_data.web-nfs.id}"]}),
    );
    let (code, stdout, stderr, _) = interrupt_spec(&s, &spec, libc::SIGINT, true, false);
    assert_eq!(code, Code::Interrupted as i32, "{stderr}");
    assert_eq!(stdout, "", "an ID was printed for an instance that was not provisioned");
    let warning =
        stderr.lines().find(|l| l.starts_with("warning: terraform apply failed")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(warning.contains("while creating terraform_data.instance-"), "{warning}");
    assert!(warning.contains("(2 others were created)"), "{warning}");
    assert!(stderr.contains("not provisioned yet (the apply failed before its VM was created) instance-"), "{stderr}");
    let halted = stderr.matches("execution halted").count();
    assert!(halted <= 1, "an error shown {halted} times: {stderr}");
    std::fs::File::create(s.root.path().join("release")).unwrap(); // the VM's create may end
    s.run(&["reconcile"]).ok();
    let rows = s.run(&["describe", "--output", "json"]).ok().json();
    assert_eq!(rows[0]["status"], "created", "{rows}");
}

/// The interrupted run did not wait for its provisioner (a 60 s wait): infrakit-tf exited
/// before the provisioner wrote its end marker, and once nothing works in the directory any
/// more the marker is still missing: terraform stopped the provisioner, it did not run on.
/// Orders of events, not durations: a slow machine cannot make this fail.
#[track_caller]
fn assert_provisioner_stopped(s: &Scratch, finished_at_exit: bool) {
    assert!(!finished_at_exit, "infrakit-tf waited for the provisioner to end");
    crate::support::wait_until_idle(&s.dir);
    assert!(!s.root.path().join("finished").exists(), "the provisioner ran on to its end");
}

#[test]
fn ctrl_c_lets_terraform_stop_and_release_its_lock() {
    let s = Scratch::new();
    let (code, stderr, finished) = interrupt(&s, 60, libc::SIGINT, true, false);
    assert_eq!(code, Code::Interrupted as i32, "{stderr}");
    assert!(stderr.contains("error: interrupted: terraform stopped and saved its state"), "{stderr}");
    assert_provisioner_stopped(&s, finished);
    // The state lock is free: another terraform can plan at once.
    terraform(&s.dir, &["plan", "-lock-timeout=0s", "-input=false", "-no-color"]);
}

#[test]
fn sigterm_lets_terraform_stop_and_release_its_lock() {
    let s = Scratch::new();
    let (code, stderr, finished) = interrupt(&s, 60, libc::SIGTERM, false, false);
    assert_eq!(code, Code::Interrupted as i32, "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_provisioner_stopped(&s, finished);
    terraform(&s.dir, &["plan", "-lock-timeout=0s", "-input=false", "-no-color"]);
}

// A SIGINT sent to our PID alone never reaches terraform: the apply finishes, and the command
// says what happened (success), not "interrupted".
#[test]
fn sigint_to_our_pid_alone_lets_the_apply_finish() {
    let s = Scratch::new();
    let (code, stderr, _) = interrupt(&s, 60, libc::SIGINT, false, true);
    assert_eq!(code, Code::Ok as i32, "{stderr}");
    assert!(stderr.contains("provisioned instance-"), "{stderr}");
    let rows = s.run(&["describe", "--output", "json"]).ok().json();
    assert_eq!(rows[0]["status"], "created", "{rows}");
}

// Terraform gets exactly one interrupt, whether a terminal sent it to the group (infrakit-tf
// does not send it again) or a service manager sent SIGTERM to infrakit-tf (forwarded once).
// A fake terraform counts them: a real one cannot say how many it got.
#[test]
fn terraform_gets_exactly_one_interrupt() {
    for (signal, to_group) in [(libc::SIGINT, true), (libc::SIGTERM, false)] {
        let s = Scratch::new();
        // The fake apply waits for its first interrupt (at most 60 s), then stays 1 s more so
        // that a second one, were it sent, would be counted too.
        let apply = r#"trap 'echo int >> "$0.ints"' INT; touch "$0.started"; i=0; while [ ! -s "$0.ints" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; sleep 1; [ -s "$0.ints" ] && exit 1; exit 0"#;
        let tf = crate::support::fake_terraform::fake(&s, "1.9.0", apply);
        let vm = s.write_outside("vm.json", r#"{"Properties": {"resource": {"terraform_data": {"vm": {}}}}}"#);
        let child = Command::new(BIN)
            .args(["--dir", s.dir.to_str().unwrap(), "provision", &vm, "--terraform", &tf])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(Path::new(&format!("{tf}.started")), "the fake apply never started");
        let pid = child.id() as i32;
        // SAFETY: kill(2) on our own child (or its group).
        unsafe { libc::kill(if to_group { -pid } else { pid }, signal) };
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(Code::Interrupted as i32), "signal {signal}: {stderr}");
        let ints = std::fs::read_to_string(format!("{tf}.ints")).unwrap_or_default();
        assert_eq!(ints.lines().count(), 1, "signal {signal} (to the group: {to_group}): {ints:?}");
    }
}
