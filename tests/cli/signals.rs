//! Ctrl-C and SIGTERM while terraform runs a slow resource: terraform gets exactly one
//! interrupt, stops gracefully and releases its state lock; infrakit-tf exits 130. A SIGINT
//! that never reached terraform changes nothing.
#![allow(clippy::disallowed_methods)] // the test spawns the binary in its own process group

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{wait_for, Scratch, BIN};
use crate::terraform::terraform;

/// A VM whose create touches `started` beside the directory, then waits for `release` there
/// (at most `seconds`; terraform stops it sooner when interrupted).
fn slow(s: &Scratch, seconds: u32) -> String {
    let (started, release) = (s.root.path().join("started"), s.root.path().join("release"));
    let command = format!(
        "touch {}; i=0; while [ ! -e {} ] && [ $i -lt {} ]; do sleep 0.1; i=$((i+1)); done",
        started.display(),
        release.display(),
        seconds * 10
    );
    let spec = serde_json::json!({"Properties": {"resource": {"terraform_data": {"vm": {
        "provisioner": [{"local-exec": {"command": command}}]}}}}});
    s.write_outside("slow.json", &spec.to_string())
}

/// Starts a provision of a slow VM in a new process group, waits until its provisioner runs
/// (terraform said it is creating the VM, and the command touched `started`), sends `signal`
/// (to the group, as a terminal does, or to our PID only), then, when `release`, lets the
/// provisioner finish; returns the exit code, stderr and how long the exit took.
fn interrupt(s: &Scratch, seconds: u32, signal: i32, to_group: bool, release: bool) -> (i32, String, Duration) {
    let spec = slow(s, seconds);
    let mut cmd = crate::support::command(&s.cli_config());
    cmd.args(["--dir", s.dir.to_str().unwrap(), "provision", &spec]).process_group(0);
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
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
    let start = Instant::now();
    // SAFETY: kill(2) on our own child (or its group).
    unsafe { libc::kill(if to_group { -pid } else { pid }, signal) };
    if release {
        std::fs::File::create(s.root.path().join("release")).unwrap();
    }
    let status = child.wait().unwrap();
    let elapsed = start.elapsed();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    (status.code().unwrap_or(-1), seen + &rest, elapsed)
}

#[test]
fn ctrl_c_lets_terraform_stop_and_release_its_lock() {
    let s = Scratch::new();
    let (code, stderr, elapsed) = interrupt(&s, 60, libc::SIGINT, true, false);
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("error: interrupted: terraform stopped and saved its state"), "{stderr}");
    assert!(elapsed < Duration::from_secs(30), "did not wait for the 60 s sleep: {elapsed:?}");
    // The state lock is free: another terraform can plan at once.
    terraform(&s.dir, &["plan", "-lock-timeout=0s", "-input=false", "-no-color"]);
}

#[test]
fn sigterm_lets_terraform_stop_and_release_its_lock() {
    let s = Scratch::new();
    let (code, stderr, elapsed) = interrupt(&s, 60, libc::SIGTERM, false, false);
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
    terraform(&s.dir, &["plan", "-lock-timeout=0s", "-input=false", "-no-color"]);
}

// A SIGINT sent to our PID alone never reaches terraform: the apply finishes, and the command
// says what happened (success), not "interrupted".
#[test]
fn sigint_to_our_pid_alone_lets_the_apply_finish() {
    let s = Scratch::new();
    let (code, stderr, _) = interrupt(&s, 60, libc::SIGINT, false, true);
    assert_eq!(code, 0, "{stderr}");
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
        let tf = crate::faults::fake(&s, "1.9.0", apply);
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
        assert_eq!(out.status.code(), Some(130), "signal {signal}: {stderr}");
        let ints = std::fs::read_to_string(format!("{tf}.ints")).unwrap_or_default();
        assert_eq!(ints.lines().count(), 1, "signal {signal} (to the group: {to_group}): {ints:?}");
    }
}
