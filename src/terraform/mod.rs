//! The Terraform runner: the only place that spawns terraform (clippy bans `Command::new`
//! elsewhere, lifted on one function each for the two other spawns: `health.rs`, the user's
//! `--health-cmd`, and `store/relay.rs`, our own binary as the relay). It finds the program and
//! checks its version, and gives each verb infrakit-tf
//! uses one typed method ([`Terraform::plan`], [`Terraform::apply`], [`Terraform::show_state`],
//! ...) that builds its command line, shows its progress, and interprets its exit code and
//! output. Callers never see an argument list.
//!
//! - `supervise`: how a run is spawned, followed, interrupted or killed;
//! - `follow`: how its output is read and decoded;
//! - `conclude`: how its end is classified (success, interrupted, timed out, failed).
//!
//! What it decides on comes from machine-readable output (`-json`, `show -json`,
//! `version -json`), but for what terraform says only in words, in a diagnostic's summary and
//! detail (diagnostics have no codes): a held state lock (`conclude`), whether a failed run's
//! error is transient (`retry`'s patterns), and which import a failed run's error names
//! (`Workspace::failed_of`, by the address or ID it quotes). Any other text is only shown.

mod conclude;
mod follow;
mod probe_cache;
pub(crate) mod retry;
mod supervise;
mod watchdog;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use self::conclude::{conclude, Finished};
use self::follow::Sink;
use self::retry::Retry;
use crate::exit::{Code, Failure};
use crate::output::{Printer, Progress};
use crate::tfoutput::{self, Changes, Event, ResourceChange, StateResource};

/// Terraform's state, by resource address (`show -json`).
pub(crate) type State = BTreeMap<String, StateResource>;

#[derive(Clone)]
pub(crate) struct Terraform {
    program: PathBuf,
    version: String,
    dir: PathBuf,
    env: Vec<(String, String)>,
    /// Variables of ours that terraform must not inherit (see `without_env`).
    without: &'static [&'static str],
    /// `--terraform-timeout`.
    timeout: Duration,
    /// Whether runs here touch the real state (not a dry-run mirror): see `state_guard`.
    records_state: bool,
    /// Where progress and `--verbose` detail go.
    printer: Printer,
    /// `--parallelism`, for plans and applies.
    parallelism: Option<u32>,
    /// How long a run waits for the state's lock (`-lock-timeout`); `None`: not at all.
    state_lock_timeout: Option<Duration>,
    /// Several hosts: terraform runs under a lease, and may not outlive it, nor us (see
    /// `supervise`).
    dies_with_us: bool,
    /// Which failed runs of init, plan and apply are run again (`retry`).
    retry: Retry,
    /// What runs told that a caller asks afterwards, shared by every copy of this runner
    /// ([`Terraform::in_dir`] included).
    observed: std::rc::Rc<std::cell::RefCell<Observed>>,
}

/// What terraform's runs told beyond their result (see [`Terraform::last_errors`]).
#[derive(Default)]
struct Observed {
    /// The error diagnostics of the last run that failed.
    errors: Vec<tfoutput::Diagnostic>,
}

/// What a retry applies after a failed try that began to create, once what that try made has
/// been looked up and adopted ([`Terraform::apply_adopting`]).
pub(crate) enum Next {
    /// The same as the failed try.
    Same,
    /// Only these addresses (`-target`, without refreshing): others wait for a later run.
    Only(Vec<String>),
    /// Nothing: the failed try's error stands.
    Nothing,
}

/// How to plan.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanOptions<'a> {
    /// Refresh the state first (`Some(true)`), or not (`Some(false)`: a commit's dry run, since
    /// refreshing every machine is reconcile's job), or as terraform does by default (`None`:
    /// it refreshes; reconcile's plan).
    pub(crate) refresh: Option<bool>,
    /// Take terraform's state lock. A plan in a dry-run mirror does not: it writes nothing.
    pub(crate) lock: bool,
    /// Save the plan there, for [`Apply::Saved`] or [`Terraform::show_plan_imports`].
    pub(crate) out: Option<&'a Path>,
    /// Plan only these addresses and their dependencies (`-target`); empty: everything.
    pub(crate) targets: &'a [String],
}

/// What a plan found.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Totals: to add, change, destroy.
    pub(crate) totals: Changes,
    /// Objects changed outside Terraform (`delete`: vanished).
    pub(crate) drift: Vec<ResourceChange>,
    /// What applying would do, resource by resource.
    pub(crate) changes: Vec<ResourceChange>,
    /// Whether applying would change anything (`-detailed-exitcode` exit 2).
    pub(crate) has_changes: bool,
}

/// What to apply.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Apply<'a> {
    /// The configuration as it is in the directory, refreshed first or not (see
    /// [`PlanOptions::refresh`]).
    Configuration { refresh: bool },
    /// A plan saved by [`Terraform::plan`] (`out`): exactly what was planned, no second plan.
    /// Its `targets` and the resources it `destroys` are what a retry plans and checks again.
    Saved { plan: &'a Path, refresh: Option<bool>, targets: &'a [String], destroys: u64 },
    /// Only these addresses and their dependencies (`-target`), without refreshing: what a
    /// commit changed. Terraform's "targeting is in effect" warnings are expected, not shown.
    Targets(&'a [String]),
    /// `-refresh-only` of these addresses alone: their objects read again and the state
    /// brought up to what the cloud says (a reconcile's drift, before it applies the
    /// configuration without refreshing).
    RefreshOnly(&'a [String]),
}

/// One terraform command line and what its run means.
#[derive(Clone)]
struct Invocation {
    args: Vec<String>,
    /// It may be run again after a transient error (`retry`).
    retryable: bool,
    /// Exit 2 means "succeeded, with changes" (`plan -detailed-exitcode`).
    detailed_exitcode: bool,
    /// It may change the state: lineage and serial are recorded after it (`state_guard`).
    writes_state: bool,
    /// It reads or writes the directory or its state: recorded as running while it runs, so
    /// the directory stays locked until it ends (`lock`). `version` does not.
    touches_dir: bool,
    /// It has `-target`s: terraform's warnings about targeting are expected.
    targeted: bool,
    /// A failed try that began to create may be run again: what it made is looked up and
    /// adopted first (see [`Terraform::apply_adopting`]). Without it, such a try is never
    /// run again: its machines may exist, and a second create would make them twice.
    adopts: bool,
}

impl Invocation {
    fn new(args: &[&str]) -> Self {
        Invocation {
            args: args.iter().map(|a| a.to_string()).collect(),
            retryable: false,
            detailed_exitcode: false,
            writes_state: false,
            touches_dir: true,
            targeted: false,
            adopts: false,
        }
    }

    fn writes_state(mut self) -> Self {
        self.writes_state = true;
        self
    }

    /// Safe to run again as it is after a transient error: terraform re-plans from the state
    /// the failed try saved.
    fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    fn is_apply(&self) -> bool {
        self.args.first().is_some_and(|a| a == "apply")
    }
}

/// Finds the program: `--terraform`/`INFRAKIT_TF_TERRAFORM`, else `terraform` on PATH, else
/// `tofu`.
pub(crate) fn discover(explicit: Option<&Path>) -> Result<PathBuf> {
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
    /// Probes `version -json` (or remembers what this very binary said: `probe_cache`) and
    /// refuses anything before 1.0.
    pub(crate) fn open(
        program: PathBuf,
        dir: &Path,
        env: Vec<(String, String)>,
        timeout: Duration,
        printer: Printer,
    ) -> Result<Self> {
        let mut tf = Terraform {
            program,
            version: String::new(),
            dir: dir.to_path_buf(),
            env,
            without: &[],
            timeout,
            records_state: true,
            printer,
            parallelism: None,
            state_lock_timeout: None,
            dies_with_us: false,
            retry: Retry::none(),
            observed: Default::default(),
        };
        let cached = probe_cache::lookup(&tf.program);
        let version = match &cached {
            Some(version) => version.clone(),
            None => {
                let probe = Invocation { touches_dir: false, ..Invocation::new(&["version", "-json"]) };
                let out = tf.capture(&probe)?;
                tfoutput::parse_version(&out).ok_or_else(|| {
                    missing(format!(
                        "`{} version -json` did not print a version: is it terraform?",
                        tf.program.display()
                    ))
                })?
            }
        };
        let major: u64 = version.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
        if major < 1 {
            return Err(missing(format!("terraform {version} is too old: infrakit-tf needs 1.0 or later"))
                .hint("install Terraform 1.x or OpenTofu")
                .into());
        }
        if cached.is_none() {
            probe_cache::store(&tf.program, &version);
        }
        tf.version = version;
        Ok(tf)
    }

    /// The same program, run in another directory (a dry-run mirror): its runs never record
    /// the state (`state_guard`), which is not theirs to change.
    pub(crate) fn in_dir(&self, dir: &Path) -> Terraform {
        Terraform {
            program: self.program.clone(),
            version: self.version.clone(),
            dir: dir.to_path_buf(),
            env: self.env.clone(),
            without: self.without,
            timeout: self.timeout,
            records_state: false,
            printer: self.printer.clone(),
            parallelism: self.parallelism,
            state_lock_timeout: self.state_lock_timeout,
            dies_with_us: self.dies_with_us,
            retry: self.retry.clone(),
            observed: self.observed.clone(),
        }
    }

    /// Whether `error` (what a failed run said) is transient, as the retry policy sees it: the
    /// cloud throttled or was briefly away, so a later run will do better.
    pub(crate) fn is_transient(&self, error: &str) -> bool {
        self.retry.transient(error, false).is_some()
    }

    /// How many times a failed run is run again (`retry`).
    pub(crate) fn retries(&self) -> u32 {
        self.retry.max
    }

    /// The error diagnostics of the last run that failed (by address: which data source or
    /// resource failed, and what it said).
    pub(crate) fn last_errors(&self) -> Vec<tfoutput::Diagnostic> {
        self.observed.borrow().errors.clone()
    }

    /// The same, running init, plan and apply again after a transient error as `retry` says.
    pub(crate) fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// The same, with terraform's `-parallelism` for plans and applies (`None`: its default).
    pub(crate) fn with_parallelism(mut self, parallelism: Option<u32>) -> Self {
        self.parallelism = parallelism;
        self
    }

    /// The same, waiting up to `timeout` for the state's lock (`-lock-timeout`).
    pub(crate) fn with_state_lock_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.state_lock_timeout = timeout;
        self
    }

    /// The same, with `vars` of our environment left out of terraform's (the store's TLS
    /// settings, which it gets in `PG_CONN_STR`, and what its PostgreSQL driver panics on).
    pub(crate) fn without_env(mut self, vars: &'static [&'static str]) -> Self {
        self.without = vars;
        self
    }

    /// The same, run under a store's lease (several hosts): stopped when the lease is lost,
    /// and never outliving us.
    pub(crate) fn under_lease(mut self, leased: bool) -> Self {
        self.dies_with_us = leased;
        self
    }

    /// `-lock-timeout=…` when runs wait for the state's lock.
    fn lock_wait(&self) -> Option<String> {
        self.state_lock_timeout.map(|t| format!("-lock-timeout={}ms", t.as_millis()))
    }

    /// `path version`, for `--verbose`.
    pub(crate) fn describe(&self) -> String {
        format!("{} {}", self.program.display(), self.version)
    }

    /// `init`, quietly unless it fails.
    pub(crate) fn init(&self) -> Result<()> {
        self.capture(&Invocation::new(&["init", "-input=false", "-no-color"]).retryable()).map(drop)
    }

    /// `init -migrate-state -force-copy`: moves the state into the backend the configuration
    /// now declares (a local state into `backend "pg"`), without asking.
    pub(crate) fn init_migrating_state(&self) -> Result<()> {
        let inv = Invocation::new(&["init", "-input=false", "-no-color", "-migrate-state", "-force-copy"]);
        self.capture(&inv.writes_state()).map(drop)
    }

    /// `plan -json -detailed-exitcode`, its progress shown as it runs.
    pub(crate) fn plan(&self, options: PlanOptions<'_>) -> Result<Plan> {
        let mut args = vec!["plan".to_string(), "-json".into(), "-input=false".into()];
        if let Some(refresh) = options.refresh {
            args.push(format!("-refresh={refresh}"));
        }
        if !options.lock {
            args.push("-lock=false".into());
        } else {
            args.extend(self.lock_wait());
        }
        args.push("-detailed-exitcode".into());
        args.extend(self.parallelism.map(|n| format!("-parallelism={n}")));
        args.extend(options.targets.iter().map(|t| format!("-target={t}")));
        if let Some(out) = options.out {
            args.push(format!("-out={}", out.display()));
        }
        let inv =
            Invocation { args, detailed_exitcode: true, targeted: !options.targets.is_empty(), ..Invocation::new(&[]) };
        let finished = self.stream(&inv.retryable())?;
        let c = finished.collected;
        Ok(Plan {
            totals: c.planned.unwrap_or_default(),
            drift: c.drift,
            changes: c.changes,
            has_changes: finished.has_changes,
        })
    }

    /// `apply -auto-approve -json`, its progress shown as it runs. Returns what it did. A try
    /// that failed after it began to create is not run again (see [`Invocation::adopts`]).
    pub(crate) fn apply(&self, what: Apply<'_>) -> Result<Changes> {
        self.apply_run(what, None)
    }

    /// [`Terraform::apply`], where a try that failed after it began to create may be run
    /// again (when its error is transient): `adopt` is called first, to look up and adopt
    /// what that try made (`workspace::lookup`), so that the next try imports it rather
    /// than create it a second time.
    pub(crate) fn apply_adopting(&self, what: Apply<'_>, adopt: &mut dyn FnMut() -> Result<Next>) -> Result<Changes> {
        self.apply_run(what, Some(adopt))
    }

    fn apply_run(&self, what: Apply<'_>, mut adopt: Option<&mut dyn FnMut() -> Result<Next>>) -> Result<Changes> {
        let mut args: Vec<String> = ["apply", "-auto-approve", "-input=false", "-json"].map(String::from).into();
        args.extend(self.parallelism.map(|n| format!("-parallelism={n}")));
        args.extend(self.lock_wait());
        let base = args.clone();
        match what {
            Apply::Configuration { refresh: false } => args.push("-refresh=false".into()),
            Apply::Configuration { refresh: true } => {}
            Apply::Saved { plan, .. } => args.push(path_arg(plan)?),
            Apply::Targets(targets) => {
                args.push("-refresh=false".into());
                args.extend(targets.iter().map(|t| format!("-target={t}")));
            }
            Apply::RefreshOnly(targets) => {
                args.push("-refresh-only".into());
                args.extend(targets.iter().map(|t| format!("-target={t}")));
            }
        }
        let targeted = match what {
            Apply::Targets(targets) | Apply::RefreshOnly(targets) | Apply::Saved { targets, .. } => !targets.is_empty(),
            Apply::Configuration { .. } => false,
        };
        let inv =
            Invocation { args, targeted, adopts: adopt.is_some(), ..Invocation::new(&[]) }.writes_state().retryable();
        // Before a try after one that began to create: what it made, looked up and adopted;
        // then what the retry may apply.
        let mut adopting = |creating: bool| match (&mut adopt, creating) {
            (Some(adopt), true) => adopt(),
            _ => Ok(Next::Same),
        };
        // The retry of what it may apply, targeted (`Next::Only`), without refreshing.
        let only = |inv: &Invocation, targets: &[String]| {
            let mut args = base.clone();
            args.push("-refresh=false".into());
            args.extend(targets.iter().map(|t| format!("-target={t}")));
            Invocation { args, targeted: true, ..inv.clone() }
        };
        let finished = match what {
            // A saved plan is stale once the failed try saved a state: the retry plans again,
            // as the first plan did (its targets, its refresh) but from that state, and applies
            // that plan only if, with what the failed tries destroyed, it destroys no more than
            // the plan that was checked (`--max-destroy`, adoption's "nothing destroyed") did.
            Apply::Saved { plan, refresh, targets, destroys } => {
                let mut n = 0;
                self.retrying(&inv, |inv| self.stream_once(inv), |inv, done, creating| {
                    let limited = match adopting(creating)? {
                        Next::Nothing => return Ok(None),
                        Next::Same => None,
                        Next::Only(only) => Some(only),
                    };
                    let targets = limited.as_deref().unwrap_or(targets);
                    n += 1;
                    let fresh = plan.with_file_name(format!("retry-{n}.plan"));
                    let options = PlanOptions { refresh, lock: true, out: Some(&fresh), targets };
                    let replanned = self.plan(options)?;
                    if replanned.totals.remove + done.remove > destroys {
                        return Err(Failure::new(
                            Code::TerraformFailed,
                            format!(
                                "the retry's plan would destroy {} after the failed tries destroyed {}, more than the {destroys} of the plan that was checked: it was not applied",
                                replanned.totals.remove, done.remove
                            ),
                        )
                        .hint("run the command again: it plans and checks afresh")
                        .into());
                    }
                    let mut args = base.clone();
                    args.push(path_arg(&fresh)?);
                    Ok(Some(Invocation { args, targeted: !targets.is_empty(), ..inv.clone() }))
                })?
            }
            _ => self.retrying(
                &inv,
                |inv| self.stream_once(inv),
                |inv, _, creating| {
                    Ok(match adopting(creating)? {
                        Next::Same => Some(inv.clone()),
                        Next::Only(targets) => Some(only(inv, &targets)),
                        Next::Nothing => None,
                    })
                },
            )?,
        };
        let applied = finished.collected.applied.unwrap_or_default();
        crate::metrics::note_applied(applied);
        Ok(applied)
    }

    /// `show -json`: the state, by address.
    pub(crate) fn show_state(&self) -> Result<State> {
        let out = self.capture(&Invocation::new(&["show", "-json", "-no-color"]))?;
        tfoutput::parse_state(&out).map_err(|e| Failure::new(Code::TerraformFailed, e).into())
    }

    /// `show -json FILE` of a copy of a state file: the state, by address.
    pub(crate) fn show_state_file(&self, file: &Path) -> Result<State> {
        let file = file.to_str().context("state path is not UTF-8")?;
        let out = self.capture(&Invocation::new(&["show", "-json", "-no-color", file]))?;
        tfoutput::parse_state(&out).map_err(|e| Failure::new(Code::TerraformFailed, e).into())
    }

    /// `show -json PLAN` of a saved plan: the live values of the objects its import blocks
    /// read, by address.
    pub(crate) fn show_plan_imports(&self, plan: &Path) -> Result<BTreeMap<String, Value>> {
        let plan = plan.to_str().context("plan path is not UTF-8")?;
        let out = self.capture(&Invocation::new(&["show", "-json", plan]))?;
        tfoutput::parse_plan_imports(&out).map_err(|e| crate::exit::invalid(e).into())
    }

    /// `show -json PLAN` of a saved plan: the values of the data sources it read, by address.
    pub(crate) fn show_plan_reads(&self, plan: &Path) -> Result<BTreeMap<String, Value>> {
        let plan = plan.to_str().context("plan path is not UTF-8")?;
        let out = self.capture(&Invocation::new(&["show", "-json", plan]))?;
        tfoutput::parse_plan_reads(&out).map_err(|e| Failure::new(Code::TerraformFailed, e).into())
    }

    /// `state pull`: the state document, from whatever backend holds it.
    pub(crate) fn state_pull(&self) -> Result<String> {
        self.capture(&Invocation::new(&["state", "pull"]))
    }

    /// `state rm ADDRESS...`: forget objects, leaving them alone.
    pub(crate) fn state_rm(&self, addresses: &[&str]) -> Result<()> {
        let mut inv = Invocation::new(&["state", "rm", "-no-color"]).writes_state();
        inv.args.extend(self.lock_wait());
        inv.args.extend(addresses.iter().map(|a| a.to_string()));
        self.capture(&inv).map(drop)
    }

    /// `state push FILE`: a state terraform could not save, put where the state belongs.
    /// `force` (`-force`) only when its serial is the backend's: terraform refuses a different
    /// state of the same serial without it. The caller has checked the lineage and serial.
    pub(crate) fn state_push(&self, file: &Path, force: bool) -> Result<()> {
        let mut inv = Invocation::new(&["state", "push", "-no-color"]).writes_state();
        inv.args.extend(self.lock_wait());
        if force {
            inv.args.push("-force".into());
        }
        inv.args.push(file.to_str().context("state path is not UTF-8")?.to_string());
        self.capture(&inv).map(drop)
    }

    /// Runs to completion and returns stdout; stderr's tail goes into the error.
    fn capture(&self, inv: &Invocation) -> Result<String> {
        let once = |inv: &Invocation| {
            let mut stdout = Vec::new();
            let ran = supervise::supervise(self, inv, Sink::Capture(&mut stdout)).map_err(Failed::plain)?;
            let transient = self.transient(inv, &ran);
            conclude(self, inv, ran).map_err(|error| Failed::plain(error).transient(transient))?;
            Ok(String::from_utf8_lossy(&stdout).into_owned())
        };
        self.retrying(inv, once, |inv, _, _| Ok(Some(inv.clone())))
    }

    /// Runs a `-json` command, its events shown as progress as they arrive.
    fn stream(&self, inv: &Invocation) -> Result<Finished> {
        self.retrying(inv, |inv| self.stream_once(inv), |inv, _, _| Ok(Some(inv.clone())))
    }

    /// Runs `inv` by `once`, and again while it fails with a transient error, up to the
    /// retries `retry` allows, after a backoff: one line on stderr per retry, counted for the
    /// reports and the metrics. `once` gives a failure with the transient error's line, if it
    /// was one; `next` makes the next try's invocation from the last one's, what the failed
    /// tries completed, and whether the last one began to create. Nothing else is run again:
    /// an interrupt, a timeout, a held state lock, a lost lease, a terraform killed by a
    /// signal or unable to save its state (see [`Terraform::transient`]), an apply that began
    /// to create unless what it made is adopted first ([`Invocation::adopts`]). `next` giving
    /// no invocation ends it with the failed try's error.
    fn retrying<T>(
        &self,
        inv: &Invocation,
        mut once: impl FnMut(&Invocation) -> Result<T, Failed>,
        mut next: impl FnMut(&Invocation, &Changes, bool) -> Result<Option<Invocation>>,
    ) -> Result<T> {
        let mut this = inv.clone();
        let mut done = Changes::default();
        for attempt in 1.. {
            let failed = match once(&this) {
                Ok(finished) => return Ok(finished),
                Err(failed) => failed,
            };
            // What a failed apply completed is done, and counted.
            crate::metrics::note_applied(failed.done);
            done += failed.done;
            let why = match failed.transient {
                Some(why) if inv.retryable && attempt <= self.retry.max && (inv.adopts || !failed.creating) => why,
                _ => return Err(failed.error),
            };
            if crate::exit::code_for(&failed.error) != Code::TerraformFailed {
                return Err(failed.error);
            }
            // Signals are recorded from before the retry is announced: one sent on seeing the
            // announcement must end the run as an interrupt, not kill it.
            let recorded = crate::signals::ChildRunning::start();
            let wait = self.retry.delay(attempt);
            let shown = self.display(&this.args);
            self.printer.warn(&format!(
                "{shown} failed with a transient error ({why}): retry {attempt} of {} in {:.1}s",
                self.retry.max,
                wait.as_secs_f64()
            ));
            crate::metrics::note_retry();
            supervise::back_off(wait, &shown, &recorded)?;
            drop(recorded);
            match next(&this, &done, failed.creating)? {
                Some(inv) => this = inv,
                None => return Err(failed.error),
            }
        }
        unreachable!("the loop returns")
    }

    /// The line of a failed run's errors that makes it transient (`retry`), if one does. A run
    /// that succeeded, timed out, lost its lease, was killed by a signal, or had terraform
    /// print its state (it could not save it) is never transient.
    fn transient(&self, inv: &Invocation, ran: &supervise::Ran) -> Option<String> {
        use std::os::unix::process::ExitStatusExt;
        if self.retry.max == 0
            || ran.status.success()
            || ran.status.signal().is_some()
            || ran.timed_out
            || ran.fenced.is_some()
            || ran.collected.dump.is_some()
            || crate::state_guard::errored(&self.dir).is_some()
        {
            return None;
        }
        self.retry.transient(&ran.collected.error_text(), inv.is_apply())
    }

    /// One run of a `-json` command (see [`Terraform::stream`]).
    fn stream_once(&self, inv: &Invocation) -> Result<Finished, Failed> {
        self.printer.detail(&format!("running {}", self.display(&inv.args)));
        let mut progress = Progress::new(&self.printer);
        let mut expected = 0;
        let ran = supervise::supervise(
            self,
            inv,
            Sink::Events(&mut |e| match e {
                Event::Diagnostic(d) if inv.targeted && is_targeting_warning(d) => expected += 1,
                _ => progress.on_event(e),
            }),
        );
        progress.finish();
        if expected > 0 {
            self.printer.detail("terraform's run was limited to the resources named (-target), as intended");
        }
        let ran = ran.map_err(Failed::plain)?;
        if !ran.status.success() {
            self.observed.borrow_mut().errors =
                ran.collected.diagnostics.iter().filter(|d| d.is_error()).cloned().collect();
        }
        let garbage = ran.collected.garbage;
        let transient = self.transient(inv, &ran);
        let done = ran.collected.done;
        let creating = !ran.collected.creating.is_empty();
        let finished = conclude(self, inv, ran).map_err(|error| Failed { error, transient, done, creating })?;
        let c = &finished.collected;
        if garbage > 0 && c.planned.is_none() && c.applied.is_none() {
            return Err(Failed::plain(
                Failure::new(
                    Code::TerraformFailed,
                    format!(
                        "{} printed output that is not its JSON stream ({garbage} line(s)): {}",
                        self.display(&inv.args),
                        c.tail.back().cloned().unwrap_or_default()
                    ),
                )
                .into(),
            ));
        }
        Ok(finished)
    }

    fn spawn_error(&self, e: std::io::Error) -> anyhow::Error {
        if e.kind() == std::io::ErrorKind::NotFound {
            missing(format!("terraform program `{}` not found", self.program.display())).into()
        } else {
            anyhow::Error::new(e).context(format!("failed to run `{}`", self.program.display()))
        }
    }

    /// The command line, for messages and `--verbose`; of many `-target`s, the first is shown
    /// and the others counted (a thousand would be a wall of text).
    fn display(&self, args: &[String]) -> String {
        let name =
            self.program.file_name().map_or_else(|| self.program.display().to_string(), |n| n.to_string_lossy().into());
        let targets = args.iter().filter(|a| a.starts_with("-target=")).count();
        let mut shown: Vec<String> = Vec::new();
        for arg in args {
            if arg.starts_with("-target=") && shown.iter().any(|a| a.starts_with("-target=")) {
                continue;
            }
            shown.push(arg.clone());
            if arg.starts_with("-target=") && targets > 1 {
                shown.push(format!("(and {} more -target)", targets - 1));
            }
        }
        format!("`{name} {}`", shown.join(" "))
    }
}

/// A try that failed (see [`Terraform::retrying`]).
struct Failed {
    error: anyhow::Error,
    /// The transient error's line, if it was one.
    transient: Option<String>,
    /// What it completed before it failed (an apply's).
    done: Changes,
    /// It began to create (an apply's): what it made may be in no state.
    creating: bool,
}

impl Failed {
    /// A failure that is not transient, and completed and began nothing.
    fn plain(error: anyhow::Error) -> Failed {
        Failed { error, transient: None, done: Changes::default(), creating: false }
    }

    fn transient(self, transient: Option<String>) -> Failed {
        Failed { transient, ..self }
    }
}

/// A path as a command-line argument.
fn path_arg(path: &Path) -> Result<String> {
    Ok(path.to_str().context("plan path is not UTF-8")?.to_string())
}

impl fmt::Debug for Terraform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Terraform's warnings that `-target` is in effect: expected when a commit targets what it
/// changed.
fn is_targeting_warning(d: &tfoutput::Diagnostic) -> bool {
    !d.is_error()
        && (d.summary == "Resource targeting is in effect" || d.summary == "Applied changes may be incomplete")
}
