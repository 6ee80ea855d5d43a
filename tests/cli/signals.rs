//! Ctrl-C and SIGTERM while terraform runs a slow resource: terraform gets exactly one
//! interrupt, stops gracefully and releases its state lock; infrakit-tf exits 130.
#![allow(clippy::disallowed_methods)] // the test spawns the binary in its own process group

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Scratch, BIN};
use crate::terraform::terraform;

const SLOW: &str = r#"{"Properties": {"resource": {"terraform_data": {"vm": {"provisioner": [{"local-exec": {"command": "sleep 60"}}]}}}}}"#;

/// Starts a provision of a slow VM in a new process group, waits until terraform is creating
/// it, sends `signal` (to the group, as a terminal does, or to our PID only), and returns the
/// exit code, stderr and how long the exit took.
fn interrupt(s: &Scratch, signal: i32, to_group: bool) -> (i32, String, Duration) {
    let spec = s.write_outside("slow.json", SLOW);
    let mut cmd = Command::new(BIN);
    cmd.args(["--dir", s.dir.to_str().unwrap(), "provision", &spec]).process_group(0);
    if let Some(tf) = std::env::var_os("INFRAKIT_TF_TEST_TERRAFORM") {
        cmd.env("INFRAKIT_TF_TERRAFORM", tf);
    }
    let mut child =
        cmd.env("TF_CLI_CONFIG_FILE", s.cli_config()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
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
    std::thread::sleep(Duration::from_millis(500)); // the provisioner's sleep is running
    let pid = child.id() as i32;
    let start = Instant::now();
    // SAFETY: kill(2) on our own child (or its group).
    unsafe { libc::kill(if to_group { -pid } else { pid }, signal) };
    let status = child.wait().unwrap();
    let elapsed = start.elapsed();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    (status.code().unwrap_or(-1), seen + &rest, elapsed)
}

#[test]
fn ctrl_c_lets_terraform_stop_and_release_its_lock() {
    let s = Scratch::new();
    let (code, stderr, elapsed) = interrupt(&s, libc::SIGINT, true);
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("error: interrupted: terraform stopped and saved its state"), "{stderr}");
    assert!(elapsed < Duration::from_secs(30), "did not wait for the 60 s sleep: {elapsed:?}");
    // The state lock is free: another terraform can plan at once.
    terraform(&s.dir, &["plan", "-lock-timeout=0s", "-input=false", "-no-color"]);
}

#[test]
fn sigterm_is_forwarded_once() {
    let s = Scratch::new();
    let (code, stderr, elapsed) = interrupt(&s, libc::SIGTERM, false);
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
    terraform(&s.dir, &["plan", "-lock-timeout=0s", "-input=false", "-no-color"]);
}
