//! Running terraform under supervision: every run, long or short, goes through [`supervise`].
//!
//! - Its stdout and stderr are unlinked temporary files that we follow ([`Followed`]), not
//!   pipes: if we die, terraform's next write does not kill it (a pipe without a reader would,
//!   and a terraform killed mid-write can leave a 0-byte state), so it finishes and saves its
//!   state. While it runs, `lock` records it, so the directory stays locked until it ends.
//! - What to do to it while it runs is [`Policy`]'s decision, from the clock and the signals
//!   we received: Ctrl-C reaches terraform from the terminal; SIGTERM is forwarded once as
//!   SIGINT; after either we wait up to [`STOP_GRACE`] for it to stop. `--terraform-timeout`:
//!   one SIGINT when the run is over time, then SIGKILL after a grace period as long as the
//!   timeout (at most a minute). A stop asked for before the run means it never starts.
//! - With a store (several hosts), terraform may not outlive its lease: its watchdog (a
//!   process of its own, `watchdog.rs`) interrupts it when the lease is not renewed in time,
//!   then kills it before the lease can expire and another host start, whether we are alive,
//!   frozen or dead; and when we die the kernel interrupts it (`PR_SET_PDEATHSIG`, SIGINT), so
//!   that it saves what it made before it goes.
//!
//! Terraform is spawned here alone ([`command`], clippy's ban on `Command::new` lifted there).

use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::follow::{Collected, Followed, Sink};
use super::watchdog::Watchdog;
use super::{Invocation, Terraform};
use crate::exit::{Code, Failure};
use crate::lease::{self, Noticed};
use crate::signals::{self, ChildRunning};
use crate::{fault, lock, state_guard};

/// How long to wait for terraform to stop after Ctrl-C or SIGTERM before leaving it to finish
/// on its own (the directory stays locked until then; nothing is killed, so no state is lost).
const STOP_GRACE: Duration = Duration::from_secs(120);
/// The longest grace between the timeout's interrupt and the kill.
const MAX_KILL_GRACE: Duration = Duration::from_secs(60);
/// The longest pause between two looks at terraform's output and exit.
const MAX_NAP: Duration = Duration::from_millis(10);

/// How a run ended, and what it said.
pub(super) struct Ran {
    pub(super) status: ExitStatus,
    pub(super) collected: Collected,
    pub(super) timed_out: bool,
    pub(super) killed: bool,
    /// The lease was lost while it ran: why (terraform was stopped).
    pub(super) fenced: Option<String>,
}

/// Waits `wait` before `failed` (`retry`) is run again, the directory lock and any lease
/// held. An interrupt (Ctrl-C, SIGTERM) ends the wait, and the run, at once (exit 130):
/// signals are recorded meanwhile (`_recorded`, taken before the retry is announced), not left
/// to their default action, so that the run ends as after an interrupted terraform (the lease
/// released, the metrics written). So does a lost lease.
pub(super) fn back_off(wait: Duration, failed: &str, _recorded: &ChildRunning) -> Result<()> {
    let until = Instant::now() + wait;
    loop {
        if signals::stop_requested() {
            return Err(Failure::new(
                Code::Interrupted,
                format!("interrupted while waiting to retry {failed}: nothing more was started"),
            )
            .hint("run the command again, or `infrakit-tf reconcile`, to finish the work")
            .into());
        }
        if let Some(why) = lease::lost() {
            return Err(lease::lost_error(Noticed::Runner, &format!("{why}; {failed} was not retried")));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(20)));
    }
}

/// Runs `inv` with `tf`, its stdout to `sink`, until terraform exits.
pub(super) fn supervise(tf: &Terraform, inv: &Invocation, mut sink: Sink<'_>) -> Result<Ran> {
    let display = tf.display(&inv.args);
    may_start(&display)?;
    let ((stdout, stdout_w), (stderr, stderr_w)) = (Followed::create()?, Followed::create()?);
    let mut streams = Streams { stdout, stderr };
    // Signals are ours to record from before the spawn: terraform can run (and a terminal's
    // Ctrl-C reach us) before `spawn` returns, and with the default action we would die.
    let running = ChildRunning::start();
    let (mut child, watchdog) = start(tf, inv, &display, (stdout_w, stderr_w))?;
    let mut policy = Policy::new(Instant::now(), tf.timeout);
    policy.must_end = tf.dies_with_us;
    let mut collected = Collected::default();
    let (status, mut fenced) = follow(tf, &mut child, &running, &mut policy, &mut streams, &mut collected, &mut sink)?;
    drop(running);
    if let Some(watchdog) = watchdog {
        watchdog.stop();
    }
    if fenced.is_none() && tf.dies_with_us {
        fenced = lease::lost(); // lost while we were frozen: terraform was stopped meanwhile
    }
    note_ending(tf, inv, &status, &collected);
    Ok(Ran { status, collected, timed_out: policy.timed_out, killed: policy.killed, fenced })
}

/// Terraform's stdout and stderr, followed as it writes them.
struct Streams {
    stdout: Followed,
    stderr: Followed,
}

/// Refuses to start a run after an interrupt, or once the lease is lost.
fn may_start(display: &str) -> Result<()> {
    if signals::stop_requested() {
        return Err(Failure::new(Code::Interrupted, format!("interrupted: {display} was not started"))
            .hint("run the command again, or `infrakit-tf reconcile`, to finish the work")
            .into());
    }
    if let Some(why) = lease::lost() {
        return Err(lease::lost_error(Noticed::Runner, &format!("{why}; {display} was not started")));
    }
    Ok(())
}

/// Spawns terraform writing to `outputs` (its stdout and stderr), with its watchdog when it
/// must die with us, and records it as running.
fn start(
    tf: &Terraform,
    inv: &Invocation,
    display: &str,
    (stdout, stderr): (std::fs::File, std::fs::File),
) -> Result<(Supervised, Option<Watchdog>)> {
    let child: std::process::Child =
        command(tf, &inv.args).stdout(stdout).stderr(stderr).spawn().map_err(|e| tf.spawn_error(e))?;
    let pid = child.id();
    // With a lease, terraform is never left running unwatched: if this supervision ends
    // before terraform did (an error), it is killed and reaped (see `Supervised`).
    let child = Supervised { child, must_end: tf.dies_with_us };
    let watchdog = match tf.dies_with_us.then(lease::watch).flatten() {
        Some(watch) => match Watchdog::start(pid, watch) {
            Some(dog) => Some(dog),
            // Nothing would stop it if we froze or died: it must not run.
            None => {
                return Err(lease::lost_error(
                    Noticed::Runner,
                    &format!("the watchdog of {display} could not be started; it was stopped"),
                ))
            }
        },
        None => None,
    };
    fault::point(|| format!("spawned {display}"));
    // Best effort: without the record, terraform's own state lock still guards its state.
    if inv.touches_dir {
        let _ = lock::running::note_running(pid, display);
        crate::metrics::note_terraform_run();
    }
    Ok((child, watchdog))
}

/// Follows terraform until it exits, reading what it writes and acting on signals and
/// deadlines as `policy` says; its exit status, and whether the lease was lost meanwhile.
fn follow(
    tf: &Terraform,
    child: &mut Supervised,
    running: &ChildRunning,
    policy: &mut Policy,
    streams: &mut Streams,
    collected: &mut Collected,
    sink: &mut Sink<'_>,
) -> Result<(ExitStatus, Option<String>)> {
    let pid = child.child.id();
    let (stdout, stderr) = (&mut streams.stdout, &mut streams.stderr);
    let mut fenced = None;
    let mut nap = Duration::from_millis(1);
    loop {
        let got = collected.read(stdout, stderr, sink)?;
        if let Some(status) = child.child.try_wait().context("failed to wait for terraform")? {
            // Terraform has exited: everything it wrote is in the files now.
            while collected.read(stdout, stderr, sink)? {}
            collected.finish(stdout, stderr, sink);
            return Ok((status, fenced));
        }
        if fenced.is_none() && tf.dies_with_us {
            fenced = lease::lost(); // the watchdog stops terraform
        }
        let seen = Seen { terminated: running.terminated(), stop_requested: signals::stop_requested() };
        if seen.stop_requested {
            lease::note_interrupted(); // a terminal's Ctrl-C reached terraform
        }
        match policy.next(Instant::now(), seen) {
            Action::Wait => {}
            // Never a second interrupt: the watchdog may have sent one (a lost lease).
            Action::Interrupt => {
                if lease::claim_interrupt() {
                    signals::interrupt(pid);
                }
            }
            Action::Kill => signals::kill(pid),
            Action::GiveUp => {
                return Err(Failure::new(
                    Code::Interrupted,
                    format!(
                    "interrupted: terraform (pid {pid}) is still stopping; the directory stays locked until it ends"
                ),
                )
                .into())
            }
        }
        if got {
            nap = Duration::from_millis(1);
        } else {
            std::thread::sleep(nap);
            nap = (nap * 2).min(MAX_NAP);
        }
    }
}

/// What a run leaves for the next, once terraform has ended: the evidence of an apply that
/// failed while creating, what an apply created, that it is done, the state's stamp.
fn note_ending(tf: &Terraform, inv: &Invocation, status: &ExitStatus, collected: &Collected) {
    // An apply that failed (whatever the error: a create whose answer was lost leaves its
    // machine in the cloud and in no state) after it began to create: its creates are
    // looked up before anything applies again. Noted before its record goes, so that a kill
    // in between still leaves the record, which the next lock takes for the same evidence;
    // so does a marker that cannot be written (a full disk): the record is kept instead.
    // Not when terraform printed its state, unable to write any file: what room is left is
    // the dump's (`state_guard::keep_dump`), which every later run refuses to go past.
    let mut noted = true;
    let failed_apply = inv.is_apply() && tf.records_state && !status.success() && collected.dump.is_none();
    if failed_apply && !collected.creating.is_empty() {
        noted = lock::running::note_evidence(&unfinished_creates(&collected.creating, &collected.created)).is_ok();
    }
    // What an apply created, noted as it ended, before its record goes (the same way): the
    // workspace moves it into the cloud record with the time (a read that calls one of those
    // machines gone before its settle time is not believed), whatever kills us in between.
    // Not when terraform printed its state: the room left is the dump's, as above.
    if inv.is_apply() && tf.records_state && !collected.created.is_empty() && collected.dump.is_none() {
        noted &= lock::running::note_created(&collected.created).is_ok();
    }
    // A stale record names a dead process: the next lock drops it, and takes a killed apply
    // for one that was cut short (`lock::running::EVIDENCE`).
    if noted && inv.touches_dir && std::os::unix::process::ExitStatusExt::signal(status).is_none() {
        let _ = lock::running::note_done();
    }
    if inv.writes_state && tf.records_state {
        // A failed write leaves an older record, which the check still accepts.
        let _ = state_guard::record(&tf.dir);
    }
}

/// Terraform under a lease, while supervised: dropped before it was reaped (an error ended
/// the supervision), it is killed with its process tree and reaped, never left to run after
/// the lease is released. Without a lease it is left alone, as after a stop's grace.
struct Supervised {
    child: std::process::Child,
    must_end: bool,
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if self.must_end && matches!(self.child.try_wait(), Ok(None)) {
            signals::kill(self.child.id());
            let _ = self.child.wait();
        }
    }
}

/// The process, its environment cleaned: never let inherited arguments or a workspace change
/// what runs.
#[expect(clippy::disallowed_methods, reason = "the terraform runner: terraform is spawned here")]
fn command(tf: &Terraform, args: &[String]) -> Command {
    let mut cmd = Command::new(&tf.program);
    cmd.args(args).current_dir(&tf.dir).stdin(std::process::Stdio::null());
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("TF_CLI_ARGS") || k == "TF_WORKSPACE" {
            cmd.env_remove(&key);
        }
    }
    for key in tf.without {
        cmd.env_remove(key);
    }
    cmd.env("TF_IN_AUTOMATION", "1").env("TF_INPUT", "0").env("CHECKPOINT_DISABLE", "1");
    cmd.envs(tf.env.iter().map(|(k, v)| (k, v)));
    if tf.dies_with_us {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid, _exit).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // We died before the prctl: nobody would stop it then.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    cmd
}

/// What to do to the running terraform now.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Wait,
    /// SIGINT: stop gracefully (a forwarded SIGTERM, the timeout).
    Interrupt,
    /// SIGKILL: the grace after the interrupt is over.
    Kill,
    /// A stop was asked for and terraform is still running after [`STOP_GRACE`]: leave it to
    /// finish on its own.
    GiveUp,
}

/// What the run's supervisor saw since the last look.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    /// SIGTERM arrived.
    terminated: bool,
    /// SIGINT or SIGTERM arrived.
    stop_requested: bool,
}

/// The signal and deadline policy of one run, decided from the time and the signals seen.
/// Pure: the caller passes the clock, so each rule can be tested alone.
struct Policy {
    started: Instant,
    timeout: Duration,
    grace: Duration,
    forwarded: bool,
    /// An interrupt was sent (never a second one: terraform would exit at once).
    interrupted: bool,
    timed_out: bool,
    stop_deadline: Option<Instant>,
    kill_at: Option<Instant>,
    killed: bool,
    /// Terraform may not outlive the run (a lease): after a stop's grace it is killed, not
    /// left to finish.
    must_end: bool,
}

impl Policy {
    fn new(started: Instant, timeout: Duration) -> Self {
        Policy {
            started,
            timeout,
            grace: timeout.min(MAX_KILL_GRACE),
            forwarded: false,
            interrupted: false,
            timed_out: false,
            stop_deadline: None,
            kill_at: None,
            killed: false,
            must_end: false,
        }
    }

    /// Interrupts (once) and kills at `kill` at the latest.
    fn interrupt(&mut self, kill: Option<Instant>) -> Action {
        if let Some(kill) = kill {
            self.kill_at = Some(self.kill_at.map_or(kill, |k| k.min(kill)));
        }
        if self.interrupted {
            return Action::Wait;
        }
        self.interrupted = true;
        Action::Interrupt
    }

    fn next(&mut self, now: Instant, seen: Seen) -> Action {
        if seen.stop_requested && self.stop_deadline.is_none() {
            self.stop_deadline = Some(now + STOP_GRACE);
        }
        if self.kill_at.is_some_and(|k| now >= k) && !self.killed {
            self.killed = true;
            return Action::Kill;
        }
        if self.stop_deadline.is_some_and(|d| now > d) {
            if !self.must_end {
                return Action::GiveUp;
            }
            if !self.killed {
                self.killed = true;
                return Action::Kill;
            }
        }
        if seen.terminated && !self.forwarded {
            // SIGTERM is ours, not terraform's: forwarded once as the graceful interrupt.
            self.forwarded = true;
            return self.interrupt(None);
        }
        if !self.timed_out && now.duration_since(self.started) >= self.timeout {
            self.timed_out = true;
            return self.interrupt(Some(now + self.grace));
        }
        Action::Wait
    }
}

/// Why a failed apply that began creating leaves evidence: the creates it did not finish (those
/// may exist in no state), and how many it did; or, when it finished them all, that it failed
/// after them (their record may still be lost with the state terraform could not write).
fn unfinished_creates(creating: &[String], created: &[(String, String)]) -> String {
    let done = |address: &String| created.iter().any(|(a, _)| a == address);
    let (finished, unfinished): (Vec<&String>, Vec<&String>) = creating.iter().partition(|a| done(a));
    let some = |list: &[&String]| match list {
        [one] => one.to_string(),
        [first, rest @ ..] => format!("{first} and {} more", rest.len()),
        [] => String::new(),
    };
    match (unfinished.as_slice(), finished.len()) {
        ([], _) => format!("terraform apply failed after creating {}", some(&finished)),
        (left, 0) => format!("terraform apply failed while creating {}", some(left)),
        (left, made) => format!(
            "terraform apply failed while creating {} ({made} other{} created)",
            some(left),
            if made == 1 { " was" } else { "s were" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const QUIET: Seen = Seen { terminated: false, stop_requested: false };
    const INT: Seen = Seen { terminated: false, stop_requested: true };
    const TERM: Seen = Seen { terminated: true, stop_requested: true };

    #[test]
    fn the_evidence_names_the_creates_that_did_not_finish() {
        let addresses = |list: &[&str]| list.iter().map(ToString::to_string).collect::<Vec<_>>();
        let made = |list: &[&str]| list.iter().map(|a| (a.to_string(), "id".to_string())).collect::<Vec<_>>();
        let creating = addresses(&["d.nfs", "d.vm", "d.data", "d.extra"]);
        assert_eq!(
            unfinished_creates(&creating, &made(&["d.nfs", "d.data", "d.extra"])),
            "terraform apply failed while creating d.vm (3 others were created)"
        );
        assert_eq!(
            unfinished_creates(&creating, &made(&["d.nfs"])),
            "terraform apply failed while creating d.vm and 2 more (1 other was created)"
        );
        assert_eq!(unfinished_creates(&creating, &[]), "terraform apply failed while creating d.nfs and 3 more");
        assert_eq!(
            unfinished_creates(&addresses(&["d.vm"]), &made(&["d.vm"])),
            "terraform apply failed after creating d.vm"
        );
    }

    #[test]
    fn a_run_over_time_is_interrupted_once_then_killed_after_the_grace() {
        let t0 = Instant::now();
        let mut p = Policy::new(t0, 10 * S);
        assert_eq!(p.next(t0 + 9 * S, QUIET), Action::Wait);
        assert_eq!(p.next(t0 + 10 * S, QUIET), Action::Interrupt);
        assert!(p.timed_out);
        assert_eq!(p.next(t0 + 15 * S, QUIET), Action::Wait, "the grace is as long as the timeout");
        assert_eq!(p.next(t0 + 20 * S, QUIET), Action::Kill);
        assert_eq!(p.next(t0 + 21 * S, QUIET), Action::Wait, "killed once");
    }

    #[test]
    fn the_kill_grace_is_at_most_a_minute() {
        let t0 = Instant::now();
        let mut p = Policy::new(t0, 3600 * S);
        assert_eq!(p.next(t0 + 3600 * S, QUIET), Action::Interrupt);
        assert_eq!(p.next(t0 + 3659 * S, QUIET), Action::Wait);
        assert_eq!(p.next(t0 + 3660 * S, QUIET), Action::Kill);
    }

    #[test]
    fn sigterm_is_forwarded_once_and_a_stop_waits_its_grace_then_gives_up() {
        let t0 = Instant::now();
        let mut p = Policy::new(t0, 3600 * S);
        assert_eq!(p.next(t0, TERM), Action::Interrupt);
        assert_eq!(p.next(t0 + S, TERM), Action::Wait, "forwarded once");
        assert_eq!(p.next(t0 + STOP_GRACE, TERM), Action::Wait);
        assert_eq!(p.next(t0 + STOP_GRACE + S, TERM), Action::GiveUp);
        assert!(!p.timed_out);
    }

    #[test]
    fn ctrl_c_is_terraforms_own_and_never_sent_again() {
        let t0 = Instant::now();
        let mut p = Policy::new(t0, 3600 * S);
        // SIGINT reached terraform from the terminal: we only wait, bounded.
        assert_eq!(p.next(t0, INT), Action::Wait);
        assert_eq!(p.next(t0 + S, INT), Action::Wait);
        assert_eq!(p.next(t0 + STOP_GRACE + 2 * S, INT), Action::GiveUp);
    }

    #[test]
    fn a_terraform_that_may_not_outlive_us_is_killed_after_a_stops_grace() {
        let t0 = Instant::now();
        let mut p = Policy::new(t0, 3600 * S);
        p.must_end = true;
        assert_eq!(p.next(t0, TERM), Action::Interrupt);
        assert_eq!(p.next(t0 + STOP_GRACE + S, TERM), Action::Kill);
        assert_eq!(p.next(t0 + STOP_GRACE + 2 * S, TERM), Action::Wait);
    }
}
