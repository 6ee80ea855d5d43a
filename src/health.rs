//! `--health-cmd`: the user's check that a replacement made by a rolling update is healthy,
//! run with `sh -c` and the instance in its environment, bounded by `--health-timeout`. Its
//! output goes to our stderr (stdout is our data) once it has ended, through a file in memory:
//! a stderr that cannot be written drops it, and never fails the check. Besides the terraform
//! runner, the one place that spawns a program that is not ours (the relay, `store/relay.rs`,
//! is our own binary): [`check`], clippy's ban on `Command::new` lifted there alone.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// The instance a check is about.
pub(crate) struct Subject<'a> {
    pub(crate) id: &'a str,
    pub(crate) logical_id: Option<&'a str>,
    pub(crate) group: &'a str,
    /// Its VM's key attributes from the state (`id`, addresses).
    pub(crate) attributes: &'a BTreeMap<String, String>,
}

/// Runs `command` for `subject`: `Ok(None)` when it exits 0, `Ok(Some(why))` when it fails or
/// runs over `timeout` (it is killed then).
#[expect(clippy::disallowed_methods, reason = "the user's --health-cmd is spawned here, not by the terraform runner")]
pub(crate) fn check(command: &str, subject: &Subject<'_>, timeout: Duration) -> Result<Option<String>> {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(command).stdin(Stdio::null());
    // Where files in memory are not to be had, its output goes to our stderr directly.
    let mut output = match crate::fsio::memory_file(c"infrakit-tf-health") {
        Ok((output, writer)) => {
            cmd.stdout(writer.try_clone().context("failed to run the health command")?).stderr(writer);
            Some(output)
        }
        Err(_) => {
            cmd.stdout(crate::output::stderr_for_child()).stderr(Stdio::inherit());
            None
        }
    };
    cmd.env("INFRAKIT_TF_ID", subject.id)
        .env("INFRAKIT_TF_LOGICAL_ID", subject.logical_id.unwrap_or_default())
        .env("INFRAKIT_TF_GROUP", subject.group);
    for (key, value) in subject.attributes {
        let name: String =
            key.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
        cmd.env(format!("INFRAKIT_TF_ATTR_{name}"), value);
    }
    let mut child = cmd.spawn().with_context(|| format!("failed to run the health command `{command}`"))?;
    drop(cmd); // our copies of the writer
    let verdict = wait(&mut child, timeout);
    if let Some(output) = &mut output {
        let mut said = Vec::new();
        let _ = std::io::Read::read_to_end(output, &mut said);
        crate::output::relay(&said);
    }
    verdict
}

/// Waits for the health command, killing it after `timeout`.
fn wait(child: &mut std::process::Child, timeout: Duration) -> Result<Option<String>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().context("failed to wait for the health command")? {
            return Ok((!status.success()).then(|| match status.code() {
                Some(code) => format!("the health command exited {code}"),
                None => "the health command was killed by a signal".to_string(),
            }));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Some(format!("the health command ran longer than {timeout:?}")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
