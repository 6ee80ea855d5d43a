//! The user's commands about one instance: `--health-cmd`, the check that a replacement made
//! by a rolling update is healthy; the healing check (`Healing.Command`, `--heal-cmd`) of every
//! created member of a healed group; and the drain (`Lifecycle.Drain`, `--drain-cmd`) that runs
//! before a member is destroyed. Each runs with `sh -c` and the instance in its environment,
//! bounded by its timeout.
//!
//! A command is a process group of its own (`sh` runs the command as its child: killing `sh`
//! alone would leave it running): at its timeout, on Ctrl-C or SIGTERM, the whole group is
//! killed, and it counts as ended only once nothing of the group runs. It inherits the
//! operator's environment but the store's secrets ([`store_secret`]: `INFRAKIT_TF_STORE`,
//! `PG_CONN_STR` and every `PG*` variable). Its output goes to our stderr (stdout is our data)
//! once it has ended, through a file in memory read as it runs: the first and last
//! [`KEPT`] bytes are kept, what lies between is dropped (a line says how much), so that our
//! memory stays bounded whatever it prints; a stderr that cannot be written drops it, and
//! never fails the command. Besides the terraform runner, the one place that spawns a program
//! that is not ours (the relay, `store/relay.rs`, is our own binary): [`run`], clippy's ban on
//! `Command::new` lifted there alone.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Which of the user's commands runs: its name in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hook {
    /// `--health-cmd`, and the healing check (`Healing.Command`, `--heal-cmd`).
    Health,
    /// `Lifecycle.Drain`, `--drain-cmd`.
    Drain,
}

impl Hook {
    fn name(self) -> &'static str {
        match self {
            Hook::Health => "health",
            Hook::Drain => "drain",
        }
    }
}

/// How many drains (or checks) of one batch run at once, at most.
const AT_ONCE: usize = 8;

/// How much of a command's output is kept at its start, and at its end.
const KEPT: usize = 64 * 1024;

/// The environment a command does not inherit: the store's connection and its secrets (the
/// password, the URL that may hold one, and whatever else libpq and terraform's pg backend
/// read), whatever the operator's shell has. A command that needs one sets it itself.
fn store_secret(name: &str) -> bool {
    name == "INFRAKIT_TF_STORE" || name == "PG_CONN_STR" || name.starts_with("PG")
}

/// The instance a command is about.
pub(crate) struct Subject<'a> {
    pub(crate) id: &'a str,
    pub(crate) logical_id: Option<&'a str>,
    pub(crate) group: &'a str,
    /// Its VM's key attributes from the state (`id`, addresses).
    pub(crate) attributes: &'a BTreeMap<String, String>,
}

/// One command to run for one instance (see [`run_all`]).
pub(crate) struct Job<'a> {
    pub(crate) command: &'a str,
    pub(crate) subject: Subject<'a>,
    pub(crate) timeout: Duration,
}

/// Runs every job, [`AT_ONCE`] at a time (each as [`run`] does); the results in the jobs'
/// order. A slow job holds one place, not the others.
pub(crate) fn run_all(hook: Hook, jobs: &[Job<'_>]) -> Vec<Result<Option<String>>> {
    let _running = crate::signals::ChildRunning::start();
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<Result<Option<String>>>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs.len().min(AT_ONCE) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let result = run_one(hook, job.command, &job.subject, job.timeout);
                *results[i].lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(result);
            });
        }
    });
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .unwrap_or_else(|| Err(anyhow::anyhow!("the {} command did not run", hook.name())))
        })
        .collect()
}

/// Runs `command` for `subject`: `Ok(None)` when it exits 0, `Ok(Some(why))` when it fails or
/// runs over `timeout` (it is killed then). `why` names the command (`the drain command
/// exited 1`). Ctrl-C or SIGTERM while it runs stops it (it is killed, with what it started)
/// and fails with exit 130: the caller changes nothing more.
pub(crate) fn run(hook: Hook, command: &str, subject: &Subject<'_>, timeout: Duration) -> Result<Option<String>> {
    let _running = crate::signals::ChildRunning::start();
    run_one(hook, command, subject, timeout)
}

/// [`run`], while the caller holds the signals' [`crate::signals::ChildRunning`].
#[expect(
    clippy::disallowed_methods,
    reason = "the user's --health-cmd and drain command are spawned here, not by the terraform runner"
)]
fn run_one(hook: Hook, command: &str, subject: &Subject<'_>, timeout: Duration) -> Result<Option<String>> {
    use std::os::unix::process::CommandExt;
    let name = hook.name();
    let mut cmd = Command::new("sh");
    // A group of its own: killed whole (see the module doc).
    cmd.arg("-c").arg(command).stdin(Stdio::null()).process_group(0);
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(store_secret) {
            cmd.env_remove(key);
        }
    }
    // Where files in memory are not to be had, its output goes to our stderr directly.
    let memory = match hook {
        Hook::Health => c"infrakit-tf-health",
        Hook::Drain => c"infrakit-tf-drain",
    };
    let mut output = match crate::fsio::memory_file(memory) {
        Ok((output, writer)) => {
            cmd.stdout(writer.try_clone().with_context(|| format!("failed to run the {name} command"))?).stderr(writer);
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
    let mut child = cmd.spawn().with_context(|| format!("failed to run the {name} command `{command}`"))?;
    drop(cmd); // our copies of the writer
    let mut said = Said::default();
    let verdict = wait(name, &mut child, timeout, &mut |_| {
        if let Some(output) = &mut output {
            said.take(output);
        }
    });
    if let Some(output) = &mut output {
        said.take(output);
        crate::output::relay(&said.bytes());
    }
    verdict
}

/// What a command said: its first [`KEPT`] bytes, its last [`KEPT`], and how much between them
/// was dropped.
#[derive(Default)]
struct Said {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: u64,
}

impl Said {
    /// Takes in what the command wrote to `output` since the last time, and frees it there.
    fn take(&mut self, output: &mut std::fs::File) {
        let mut chunk = [0u8; 64 * 1024];
        while let Ok(n) = std::io::Read::read(output, &mut chunk) {
            if n == 0 {
                break;
            }
            let mut bytes = &chunk[..n];
            let room = KEPT - self.head.len();
            if room > 0 {
                let (first, rest) = bytes.split_at(room.min(bytes.len()));
                self.head.extend_from_slice(first);
                bytes = rest;
            }
            self.tail.extend(bytes);
            let over = self.tail.len().saturating_sub(KEPT);
            self.tail.drain(..over);
            self.dropped += over as u64;
        }
        crate::fsio::forget_read(output);
    }

    /// What is relayed: the head, a line saying what was dropped, the tail.
    fn bytes(&self) -> Vec<u8> {
        let mut out = self.head.clone();
        if self.dropped > 0 {
            if !out.ends_with(b"\n") {
                out.push(b'\n');
            }
            out.extend_from_slice(format!("[... {} bytes of its output left out ...]\n", self.dropped).as_bytes());
        }
        out.extend(self.tail.iter());
        out
    }
}

/// Waits for the `name` command (`tick` called meanwhile), killing its whole group after
/// `timeout`, or at once when Ctrl-C or SIGTERM asks this run to stop; it has ended once
/// nothing of its group runs.
fn wait(
    name: &str,
    child: &mut std::process::Child,
    timeout: Duration,
    tick: &mut dyn FnMut(()),
) -> Result<Option<String>> {
    let deadline = Instant::now() + timeout;
    let group = child.id();
    loop {
        tick(());
        if crate::signals::stop_requested() {
            kill_group(group, child);
            return Err(crate::exit::Failure::new(
                crate::exit::Code::Interrupted,
                format!("interrupted while the {name} command ran: it was stopped, and nothing more was changed"),
            )
            .hint("run the command again: a drain that did not finish runs again before its member is destroyed")
            .into());
        }
        if let Some(status) = child.try_wait().with_context(|| format!("failed to wait for the {name} command"))? {
            // What it left running in its group (a background job) does not outlive it.
            kill_group(group, child);
            return Ok((!status.success()).then(|| match status.code() {
                Some(code) => format!("the {name} command exited {code}"),
                None => format!("the {name} command was killed by a signal"),
            }));
        }
        if Instant::now() >= deadline {
            kill_group(group, child);
            return Ok(Some(format!("the {name} command ran longer than {timeout:?}")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills the process group `group` (its leader `child`) and waits until nothing of it runs
/// (bounded: a process that cannot die, in an uninterruptible sleep, is not waited for long).
fn kill_group(group: u32, child: &mut std::process::Child) {
    // SAFETY: kill(2) on a process group we made, with a valid signal.
    let killed = unsafe { libc::kill(-(group as libc::pid_t), libc::SIGKILL) } == 0;
    let _ = child.wait();
    let until = Instant::now() + Duration::from_secs(5);
    while killed && crate::process::group_runs(group) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_run_in_parallel_and_say_which_command_failed() {
        let attributes = BTreeMap::from([("public_ip".to_string(), "10.0.0.1".to_string())]);
        let job = |command, timeout| Job {
            command,
            timeout,
            subject: Subject { id: "instance-1", logical_id: None, group: "web", attributes: &attributes },
        };
        let second = Duration::from_secs(1);
        let jobs = [
            job("sleep 0.5; test \"$INFRAKIT_TF_ATTR_PUBLIC_IP $INFRAKIT_TF_GROUP\" = '10.0.0.1 web'", second * 10),
            job("sleep 0.5; exit 3", second * 10),
            job("sleep 10", Duration::from_millis(600)),
        ];
        let started = Instant::now();
        let results: Vec<Option<String>> = run_all(Hook::Drain, &jobs).into_iter().map(Result::unwrap).collect();
        assert!(started.elapsed() < Duration::from_millis(1400), "one after the other: {:?}", started.elapsed());
        assert_eq!(
            results,
            [None, Some("the drain command exited 3".into()), Some("the drain command ran longer than 600ms".into())]
        );
        let health = run(Hook::Health, "exit 1", &jobs[0].subject, second).unwrap();
        assert_eq!(health.as_deref(), Some("the health command exited 1"));
    }
}
