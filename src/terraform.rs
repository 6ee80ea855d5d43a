//! The Terraform runner: the only place that spawns a process (clippy bans
//! `Command::new` elsewhere). It finds the program, checks its version, cleans the environment,
//! streams `-json` output live to a sink while keeping a tail of stderr for errors, and turns
//! every way a run can end into a typed outcome: spawn failure, non-zero exit (state lock held
//! or not), death by signal, interrupt.
//!
//! Everything it decides on comes from machine-readable output (`-json`, `show -json`,
//! `version -json`); human text is only shown, never parsed, except the one diagnostic summary
//! Terraform gives a held state lock, which has no code of its own.
#![allow(clippy::disallowed_methods)]

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::exit::{Code, Failure};
use crate::signals::{self, ChildRunning};
use crate::tfjson::{self, Changes, Diagnostic, Event, StateResource};

/// How long to wait for terraform to stop after an interrupt before leaving it to finish on
/// its own (it keeps its state lock until then; nothing is killed, so no state is lost).
const STOP_GRACE: Duration = Duration::from_secs(120);
/// Lines of stderr kept for error messages.
const TAIL: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Terraform,
    OpenTofu,
}

pub struct Terraform {
    program: PathBuf,
    pub version: String,
    pub flavor: Flavor,
    dir: PathBuf,
    env: Vec<(String, String)>,
}

/// What a streamed run reported.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// The plan's totals (`operation: plan`).
    pub planned: Option<Changes>,
    /// The apply's totals, when it completed.
    pub applied: Option<Changes>,
    pub diagnostics: Vec<Diagnostic>,
    pub drift: Vec<(String, String)>,
    pub changes: Vec<(String, String)>,
    pub errored: Vec<String>,
    /// `plan -detailed-exitcode`: true when there are changes (exit 2).
    pub has_changes: bool,
}

/// Finds the program: `--terraform`/`INFRAKIT_TF_TERRAFORM`, else `terraform` on PATH, else
/// `tofu`.
pub fn discover(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return find_program(p.as_os_str()).ok_or_else(|| {
            missing(format!("terraform program `{}` not found", p.display()))
                .hint("give --terraform (or INFRAKIT_TF_TERRAFORM) the path of a terraform or tofu binary")
                .into()
        });
    }
    ["terraform", "tofu"].iter().find_map(|name| find_program(name.as_ref())).ok_or_else(|| {
        missing("terraform not found: neither `terraform` nor `tofu` is on PATH")
            .hint("install Terraform 1.x (or OpenTofu), or give --terraform PATH (INFRAKIT_TF_TERRAFORM)")
            .into()
    })
}

fn missing(message: impl Into<String>) -> Failure {
    Failure::new(Code::TerraformMissing, message)
}

fn find_program(name: &std::ffi::OsStr) -> Option<PathBuf> {
    let p = Path::new(name);
    if p.components().count() > 1 {
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|c| c.is_file())
}

impl Terraform {
    /// Probes `version -json` and refuses anything before 1.0.
    pub fn open(program: PathBuf, dir: &Path, env: Vec<(String, String)>) -> Result<Self> {
        let flavor = match program.file_name().and_then(|n| n.to_str()) {
            Some(n) if n.contains("tofu") => Flavor::OpenTofu,
            _ => Flavor::Terraform,
        };
        let mut tf = Terraform { program, version: String::new(), flavor, dir: dir.to_path_buf(), env };
        let out = tf.output(&["version", "-json"])?;
        let version = tfjson::parse_version(&out).ok_or_else(|| {
            missing(format!("`{} version -json` did not print a version: is it terraform?", tf.program.display()))
        })?;
        let major: u64 = version.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
        if major < 1 {
            return Err(missing(format!("terraform {version} is too old: infrakit-tf needs 1.0 or later"))
                .hint("install Terraform 1.x or OpenTofu")
                .into());
        }
        tf.version = version;
        Ok(tf)
    }

    /// The same program, run in another directory (a dry-run mirror).
    pub fn in_dir(&self, dir: &Path) -> Terraform {
        Terraform {
            program: self.program.clone(),
            version: self.version.clone(),
            flavor: self.flavor,
            dir: dir.to_path_buf(),
            env: self.env.clone(),
        }
    }

    /// The directory it runs in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(args).current_dir(&self.dir).stdin(Stdio::null());
        // Environment hygiene: never let inherited arguments or workspace change what runs.
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("TF_CLI_ARGS") || k == "TF_WORKSPACE" {
                cmd.env_remove(&key);
            }
        }
        cmd.env("TF_IN_AUTOMATION", "1").env("TF_INPUT", "0").env("CHECKPOINT_DISABLE", "1");
        cmd.envs(self.env.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
        cmd
    }

    /// The command line, for messages and `--verbose`.
    pub fn display(&self, args: &[&str]) -> String {
        let name =
            self.program.file_name().map_or_else(|| self.program.display().to_string(), |n| n.to_string_lossy().into());
        format!("`{name} {}`", args.join(" "))
    }

    /// Runs to completion and returns stdout; stderr's tail goes into the error.
    pub fn output(&self, args: &[&str]) -> Result<String> {
        let out = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| self.spawn_error(e))?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        let tail: Vec<String> = String::from_utf8_lossy(&out.stderr).lines().map(str::to_string).collect();
        Err(self.exit_error(args, out.status, &[], &tail))
    }

    fn spawn_error(&self, e: std::io::Error) -> anyhow::Error {
        if e.kind() == std::io::ErrorKind::NotFound {
            missing(format!("terraform program `{}` not found", self.program.display())).into()
        } else {
            anyhow::Error::new(e).context(format!("failed to run `{}`", self.program.display()))
        }
    }

    /// `init`, quietly unless it fails.
    pub fn init(&self) -> Result<()> {
        self.output(&["init", "-input=false", "-no-color"]).map(drop)
    }

    /// `show -json`: the state, by address.
    pub fn show(&self) -> Result<std::collections::BTreeMap<String, StateResource>> {
        let out = self.output(&["show", "-json", "-no-color"])?;
        tfjson::parse_state(&out).map_err(|e| Failure::new(Code::TerraformFailed, e).into())
    }

    /// Runs a `-json` command, streaming each event to `sink` as it arrives.
    pub fn stream(&self, args: &[&str], sink: &mut dyn FnMut(&Event)) -> Result<Report> {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| self.spawn_error(e))?;
        let running = ChildRunning::start();
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL)));
        let (tx, rx) = mpsc::channel::<String>();
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let tail_w = tail.clone();
        let (stderr_done_tx, stderr_done) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            keep_tail(stderr, &tail_w);
            let _ = stderr_done_tx.send(());
        });

        let mut report = Report::default();
        let mut garbage = 0usize;
        let mut handle = |line: String, report: &mut Report| match tfjson::parse_line(&line) {
            Some(event) => {
                record(report, &event);
                sink(&event);
            }
            None if line.trim().is_empty() => {}
            None => {
                garbage += 1;
                push_tail(&tail, line);
            }
        };
        let mut stop_deadline: Option<Instant> = None;
        let mut forwarded = false;
        let status = loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => handle(line, &mut report),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break wait(&mut child)?,
            }
            if running.terminated() && !forwarded {
                signals::interrupt(child.id());
                forwarded = true;
            }
            if (running.interrupted() || running.terminated()) && stop_deadline.is_none() {
                stop_deadline = Some(Instant::now() + STOP_GRACE);
            }
            if let Some(status) = child.try_wait().context("failed to wait for terraform")? {
                // Drain what is left of stdout (bounded: a grandchild may hold the pipe).
                while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                    handle(line, &mut report);
                }
                break status;
            }
            if stop_deadline.is_some_and(|d| Instant::now() > d) {
                return Err(Failure::new(
                    Code::Interrupted,
                    format!(
                        "interrupted: terraform (pid {}) is still stopping and keeps its state lock until it ends",
                        child.id()
                    ),
                )
                .into());
            }
        };
        // Let the stderr reader reach the end, so a crash's last words make it into the error
        // (bounded: a grandchild may hold the pipe open).
        let _ = stderr_done.recv_timeout(Duration::from_millis(500));
        let detailed_changes = args.contains(&"-detailed-exitcode") && status.code() == Some(2);
        let finished = status.success() || detailed_changes;
        // What terraform did decides, not the signal alone: an interrupt that reached only us
        // (`kill -INT <our pid>`), or came as terraform finished, changed nothing.
        if (running.interrupted() || running.terminated()) && !finished {
            return Err(Failure::new(Code::Interrupted, "interrupted: terraform stopped and saved its state")
                .hint("run the command again, or `infrakit-tf reconcile`, to finish the work")
                .into());
        }
        let tail: Vec<String> = tail.lock().expect("tail lock").iter().cloned().collect();
        if finished {
            report.has_changes = detailed_changes;
            if garbage > 0 && report.planned.is_none() && report.applied.is_none() {
                return Err(Failure::new(
                    Code::TerraformFailed,
                    format!(
                        "{} printed output that is not its JSON stream ({garbage} line(s)): {}",
                        self.display(args),
                        tail.last().map_or("", String::as_str)
                    ),
                )
                .into());
            }
            return Ok(report);
        }
        Err(self.exit_error(args, status, &report.diagnostics, &tail))
    }

    fn exit_error(
        &self,
        args: &[&str],
        status: ExitStatus,
        diagnostics: &[Diagnostic],
        tail: &[String],
    ) -> anyhow::Error {
        use std::os::unix::process::ExitStatusExt;
        let cmd = self.display(args);
        if let Some(signal) = status.signal() {
            return Failure::new(
                Code::TerraformFailed,
                format!("{cmd} was killed by signal {signal}{}", signal_name(signal)),
            )
            .hint(tail_hint(tail))
            .into();
        }
        let code = status.code().unwrap_or(-1);
        let first = diagnostics.iter().find(|d| d.is_error());
        if diagnostics.iter().any(|d| d.summary.contains("Error acquiring the state lock")) {
            return Failure::new(
                Code::StateLocked,
                format!("{cmd} failed: the Terraform state is locked by another process"),
            )
            .hint("wait for the other terraform run to finish; `terraform force-unlock` only if it is dead")
            .into();
        }
        let what = match first {
            Some(d) => {
                let at = d.address.as_ref().map(|a| format!(" (at {a})")).unwrap_or_default();
                let detail =
                    d.detail.lines().next().filter(|l| !l.is_empty()).map(|l| format!(": {l}")).unwrap_or_default();
                format!(": {}{detail}{at}", d.summary)
            }
            None => {
                tail.iter().rev().find(|l| !l.trim().is_empty()).map(|l| format!(": {}", l.trim())).unwrap_or_default()
            }
        };
        let failure = Failure::new(Code::TerraformFailed, format!("{cmd} failed (exit {code}){what}"));
        if first.is_none() && tail.len() > 1 { failure.hint(tail_hint(tail)) } else { failure }.into()
    }
}

fn record(report: &mut Report, event: &Event) {
    match event {
        Event::Diagnostic(d) => report.diagnostics.push(d.clone()),
        Event::Summary(c) if c.operation == tfjson::Operation::Plan => report.planned = Some(*c),
        Event::Summary(c) => report.applied = Some(*c),
        Event::Drift { addr, action } => report.drift.push((addr.clone(), action.clone())),
        Event::PlannedChange { addr, action } => report.changes.push((addr.clone(), action.clone())),
        Event::ApplyErrored { addr, .. } => report.errored.push(addr.clone()),
        _ => {}
    }
}

fn wait(child: &mut Child) -> Result<ExitStatus> {
    child.wait().context("failed to wait for terraform")
}

fn keep_tail(stream: impl Read, tail: &Mutex<VecDeque<String>>) {
    for line in BufReader::new(stream).lines().map_while(Result::ok) {
        push_tail(tail, line);
    }
}

fn push_tail(tail: &Mutex<VecDeque<String>>, line: String) {
    let mut t = tail.lock().expect("tail lock");
    if t.len() == TAIL {
        t.pop_front();
    }
    t.push_back(line);
}

fn tail_hint(tail: &[String]) -> String {
    let lines: Vec<&str> = tail.iter().map(String::as_str).filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        "terraform printed nothing on stderr".into()
    } else {
        format!("terraform's last words:\n  {}", lines.join("\n  "))
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => " (SIGKILL)",
        libc::SIGSEGV => " (SIGSEGV)",
        libc::SIGABRT => " (SIGABRT)",
        libc::SIGTERM => " (SIGTERM)",
        libc::SIGINT => " (SIGINT)",
        _ => "",
    }
}

impl fmt::Debug for Terraform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.program.display(), self.version)
    }
}
