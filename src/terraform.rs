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
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::exit::{Code, Failure};
use crate::signals::{self, ChildRunning};
use crate::tfoutput::{self, Changes, Diagnostic, Event, StateResource};
use crate::{fault, lock, state_guard};

/// How long to wait for terraform to stop after Ctrl-C or SIGTERM before leaving it to finish
/// on its own (the directory stays locked until then; nothing is killed, so no state is lost).
const STOP_GRACE: Duration = Duration::from_secs(120);
/// The longest grace between the timeout's interrupt and the kill.
const MAX_KILL_GRACE: Duration = Duration::from_secs(60);
/// The longest pause between two looks at terraform's output and exit.
const MAX_NAP: Duration = Duration::from_millis(10);
/// Lines of stderr kept for error messages.
const TAIL: usize = 20;
/// Verbs after which the state may have changed, so its lineage and serial are recorded.
const WRITES_STATE: &[&str] = &["apply", "import", "state", "destroy", "refresh", "taint", "untaint"];

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
    /// `--terraform-timeout`.
    timeout: Duration,
    /// Whether runs here touch the real state (not a dry-run mirror): see `state_guard`.
    records_state: bool,
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
    pub fn open(program: PathBuf, dir: &Path, env: Vec<(String, String)>, timeout: Duration) -> Result<Self> {
        let flavor = match program.file_name().and_then(|n| n.to_str()) {
            Some(n) if n.contains("tofu") => Flavor::OpenTofu,
            _ => Flavor::Terraform,
        };
        let mut tf = Terraform {
            program,
            version: String::new(),
            flavor,
            dir: dir.to_path_buf(),
            env,
            timeout,
            records_state: true,
        };
        let out = tf.output(&["version", "-json"])?;
        let version = tfoutput::parse_version(&out).ok_or_else(|| {
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
            timeout: self.timeout,
            records_state: false,
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
        let mut stdout = Vec::new();
        let ran = self.run(args, Sink::Capture(&mut stdout))?;
        self.conclude(args, ran)?;
        Ok(String::from_utf8_lossy(&stdout).into_owned())
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
        tfoutput::parse_state(&out).map_err(|e| Failure::new(Code::TerraformFailed, e).into())
    }

    /// Runs a `-json` command, streaming each event to `sink` as it arrives.
    pub fn stream(&self, args: &[&str], sink: &mut dyn FnMut(&Event)) -> Result<Report> {
        let ran = self.run(args, Sink::Events(sink))?;
        let garbage = ran.garbage;
        let last_words = ran.tail.back().cloned().unwrap_or_default();
        let report = self.conclude(args, ran)?;
        if garbage > 0 && report.planned.is_none() && report.applied.is_none() {
            return Err(Failure::new(
                Code::TerraformFailed,
                format!(
                    "{} printed output that is not its JSON stream ({garbage} line(s)): {}",
                    self.display(args),
                    last_words
                ),
            )
            .into());
        }
        Ok(report)
    }

    /// Runs terraform under supervision: every run, long or short, goes through here.
    ///
    /// - Its stdout and stderr are unlinked temporary files that we follow, not pipes: if we
    ///   die, terraform's next write does not kill it (a pipe without a reader would, and a
    ///   terraform killed mid-write can leave a 0-byte state), so it finishes and saves its
    ///   state. While it runs, `lock` records it, so the directory stays locked until it ends.
    /// - Signals (see `signals`): Ctrl-C reaches terraform from the terminal; SIGTERM is
    ///   forwarded once as SIGINT; after either we wait up to [`STOP_GRACE`] for it to stop. A
    ///   stop asked for before the run means it never starts.
    /// - `--terraform-timeout`: one SIGINT when the run is over time, then SIGKILL after a
    ///   grace period as long as the timeout (at most a minute).
    fn run(&self, args: &[&str], mut sink: Sink<'_>) -> Result<Ran> {
        let display = self.display(args);
        if signals::stop_requested() {
            return Err(Failure::new(Code::Interrupted, format!("interrupted: {display} was not started"))
                .hint("run the command again, or `infrakit-tf reconcile`, to finish the work")
                .into());
        }
        let (mut stdout, stdout_w) = Followed::create()?;
        let (mut stderr, stderr_w) = Followed::create()?;
        // Signals are ours to record from before the spawn: terraform can run (and a terminal's
        // Ctrl-C reach us) before `spawn` returns, and with the default action we would die.
        let running = ChildRunning::start();
        let mut child =
            self.command(args).stdout(stdout_w).stderr(stderr_w).spawn().map_err(|e| self.spawn_error(e))?;
        let pid = child.id();
        fault::point(|| format!("spawned {display}"));
        // Best effort: without the record, terraform's own state lock still guards its state.
        // `version` touches neither the directory nor the state: no record to write and remove.
        let recorded = args.first() != Some(&"version");
        if recorded {
            let _ = lock::note_running(pid, &display);
        }

        let started = Instant::now();
        let grace = self.timeout.min(MAX_KILL_GRACE);
        let mut ran = Ran::default();
        let mut forwarded = false;
        let mut stop_deadline: Option<Instant> = None;
        let mut kill_at: Option<Instant> = None;
        let mut nap = Duration::from_millis(1);
        let status = loop {
            let got = ran.read(&mut stdout, &mut stderr, &mut sink)?;
            if let Some(status) = child.try_wait().context("failed to wait for terraform")? {
                // Terraform has exited: everything it wrote is in the files now.
                while ran.read(&mut stdout, &mut stderr, &mut sink)? {}
                ran.finish(&mut stdout, &mut stderr, &mut sink);
                break status;
            }
            if running.terminated() && !forwarded {
                signals::interrupt(pid);
                forwarded = true;
            }
            if signals::stop_requested() && stop_deadline.is_none() {
                stop_deadline = Some(Instant::now() + STOP_GRACE);
            }
            if stop_deadline.is_some_and(|d| Instant::now() > d) {
                return Err(Failure::new(
                    Code::Interrupted,
                    format!("interrupted: terraform (pid {pid}) is still stopping; the directory stays locked until it ends"),
                )
                .into());
            }
            if kill_at.is_none() && started.elapsed() >= self.timeout {
                signals::interrupt(pid);
                ran.timed_out = true;
                kill_at = Some(Instant::now() + grace);
            }
            if kill_at.is_some_and(|k| Instant::now() >= k) && !ran.killed {
                signals::kill(pid);
                ran.killed = true;
            }
            if got {
                nap = Duration::from_millis(1);
            } else {
                std::thread::sleep(nap);
                nap = (nap * 2).min(MAX_NAP);
            }
        };
        drop(running);
        if recorded {
            let _ = lock::note_done(); // a stale record names a dead process: the next lock drops it
        }
        if self.records_state && args.first().is_some_and(|verb| WRITES_STATE.contains(verb)) {
            // A failed write leaves an older record, which the check still accepts.
            let _ = state_guard::record(&self.dir);
        }
        ran.status = Some(status);
        Ok(ran)
    }

    /// How a finished run ended, as a typed outcome: success (with its report), interrupted,
    /// timed out, or failed.
    fn conclude(&self, args: &[&str], ran: Ran) -> Result<Report> {
        let status = ran.status.expect("a finished run has a status");
        let tail: Vec<String> = ran.tail.iter().cloned().collect();
        if ran.timed_out {
            let how = if ran.killed { "interrupted, then killed" } else { "interrupted" };
            return Err(Failure::new(
                Code::TerraformTimeout,
                format!(
                    "{} ran longer than --terraform-timeout ({:?}): it was {how}",
                    self.display(args),
                    self.timeout
                ),
            )
            .hint(format!("raise --terraform-timeout if it was just slow; {}", tail_hint(&tail)))
            .into());
        }
        let detailed_changes = args.contains(&"-detailed-exitcode") && status.code() == Some(2);
        let finished = status.success() || detailed_changes;
        // What terraform did decides, not the signal alone: an interrupt that reached only us
        // (`kill -INT <our pid>`), or came as terraform finished, changed nothing.
        if signals::stop_requested() && !finished {
            return Err(Failure::new(Code::Interrupted, "interrupted: terraform stopped and saved its state")
                .hint("run the command again, or `infrakit-tf reconcile`, to finish the work")
                .into());
        }
        if finished {
            let mut report = ran.report;
            report.has_changes = detailed_changes;
            return Ok(report);
        }
        Err(self.exit_error(args, status, &ran.report.diagnostics, &tail))
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
        // "Error acquiring the state lock" is also what a read-only directory gets; only a lock
        // held by another process comes with that holder's "Lock Info".
        let held =
            |d: &Diagnostic| d.summary.contains("Error acquiring the state lock") && d.detail.contains("Lock Info");
        if diagnostics.iter().any(held) {
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
        Event::Summary(c) if c.operation == tfoutput::Operation::Plan => report.planned = Some(*c),
        Event::Summary(c) => report.applied = Some(*c),
        Event::Drift { addr, action } => report.drift.push((addr.clone(), action.clone())),
        Event::PlannedChange { addr, action } => report.changes.push((addr.clone(), action.clone())),
        Event::ApplyErrored { addr, .. } => report.errored.push(addr.clone()),
        _ => {}
    }
}

fn push_tail(tail: &mut VecDeque<String>, line: String) {
    if tail.len() == TAIL {
        tail.pop_front();
    }
    tail.push_back(line);
}

/// Where a run's stdout goes.
enum Sink<'a> {
    /// `-json` events, one per line, as they arrive.
    Events(&'a mut dyn FnMut(&Event)),
    /// Kept whole (`show -json`, `version -json`).
    Capture(&'a mut Vec<u8>),
}

/// What a run produced so far, and how it ended.
#[derive(Default)]
struct Ran {
    status: Option<ExitStatus>,
    report: Report,
    tail: VecDeque<String>,
    /// Lines of stdout that are not terraform's JSON stream.
    garbage: usize,
    timed_out: bool,
    killed: bool,
}

impl Ran {
    /// Takes in what terraform appended to its stdout and stderr. Whether there was any.
    fn read(&mut self, stdout: &mut Followed, stderr: &mut Followed, sink: &mut Sink<'_>) -> Result<bool> {
        let got_out = match sink {
            Sink::Capture(buf) => stdout.read_into(buf)?,
            Sink::Events(events) => {
                let (report, tail, garbage) = (&mut self.report, &mut self.tail, &mut self.garbage);
                stdout.read_lines(&mut |line| on_stdout_line(line, report, tail, garbage, &mut **events))?
            }
        };
        let tail = &mut self.tail;
        let got_err = stderr.read_lines(&mut |line| push_tail(tail, line))?;
        Ok(got_out || got_err)
    }

    /// The last lines, when they lack a final newline.
    fn finish(&mut self, stdout: &mut Followed, stderr: &mut Followed, sink: &mut Sink<'_>) {
        if let Sink::Events(events) = sink {
            if let Some(line) = stdout.rest() {
                on_stdout_line(line, &mut self.report, &mut self.tail, &mut self.garbage, &mut **events);
            }
        }
        if let Some(line) = stderr.rest() {
            push_tail(&mut self.tail, line);
        }
    }
}

fn on_stdout_line(
    line: String,
    report: &mut Report,
    tail: &mut VecDeque<String>,
    garbage: &mut usize,
    sink: &mut dyn FnMut(&Event),
) {
    match tfoutput::parse_line(&line) {
        Some(event) => {
            record(report, &event);
            sink(&event);
        }
        None if line.trim().is_empty() => {}
        None => {
            *garbage += 1;
            push_tail(tail, line);
        }
    }
}

/// A file terraform writes (its stdout or stderr) and we follow, like `tail -f`. It is created
/// and at once unlinked: nothing is left behind, whoever dies first.
struct Followed {
    reader: File,
    partial: Vec<u8>,
}

impl Followed {
    /// The follower, and the handle to give terraform.
    fn create() -> Result<(Followed, File)> {
        let make = || -> io::Result<(Followed, File)> {
            let tmp = tempfile::Builder::new().prefix("infrakit-tf-terraform-").tempfile()?;
            // A second open file description: its own offset, independent of terraform's.
            let reader = tmp.reopen()?;
            let (writer, path) = tmp.into_parts();
            drop(path); // unlinks the name; both handles stay open
            Ok((Followed { reader, partial: Vec::new() }, writer))
        };
        make().context("failed to create a temporary file for terraform's output")
    }

    /// Appends what is new to `out`. Whether there was anything.
    fn read_into(&mut self, out: &mut Vec<u8>) -> Result<bool> {
        let n = self.reader.read_to_end(out).context("failed to read terraform's output")?;
        Ok(n > 0)
    }

    /// Calls `line` for each new complete line. Whether there was anything new.
    fn read_lines(&mut self, line: &mut dyn FnMut(String)) -> Result<bool> {
        let start = self.partial.len();
        if !self.read_into_partial()? {
            return Ok(false);
        }
        let mut from = 0;
        let mut search = start;
        while let Some(i) = self.partial[search..].iter().position(|b| *b == b'\n') {
            let end = search + i;
            line(String::from_utf8_lossy(&self.partial[from..end]).into_owned());
            from = end + 1;
            search = from;
        }
        self.partial.drain(..from);
        Ok(true)
    }

    fn read_into_partial(&mut self) -> Result<bool> {
        let mut buf = std::mem::take(&mut self.partial);
        let got = self.read_into(&mut buf);
        self.partial = buf;
        got
    }

    /// What is left after the last newline.
    fn rest(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.partial);
        (!rest.is_empty()).then(|| String::from_utf8_lossy(&rest).into_owned())
    }
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
