//! The lease's watchdog: with a store, every terraform run under the lease has a small
//! process of its own beside it that stops terraform when the lease may be lost, whatever
//! becomes of infrakit-tf: dead (SIGKILL, the OOM killer), or frozen (SIGSTOP, swapped out)
//! while its terraform goes on. It reads the lease's last renewal from memory shared with
//! infrakit-tf (`lease::Page`) and, when no renewal has succeeded for the lease's
//! renew deadline (or the server said the lease is gone), interrupts terraform once, then kills
//! it after the grace: terraform is gone before the lease can expire and another host start.
//!
//! When infrakit-tf dies, terraform is interrupted by the kernel (`PR_SET_PDEATHSIG`, SIGINT:
//! it stops gracefully and saves its state, rather than lose what it made since its last
//! save), and the watchdog only enforces the kill at the grace's end, counted from then.
//! Terraform is never interrupted twice (a second interrupt makes it exit at once).
//!
//! The watchdog is forked, not spawned (no exec, no second binary): between `fork` and
//! `_exit` the child makes only async-signal-safe calls (`getppid`, `kill`, `clock_gettime`,
//! `nanosleep`, `sigaction`), as a child of a threaded process must.

use std::time::Duration;

use crate::lease::{monotonic_ns, Watch};

/// How often the watchdog looks.
const TICK: Duration = Duration::from_millis(50);

/// A running watchdog.
pub(super) struct Watchdog {
    pid: libc::pid_t,
}

impl Watchdog {
    /// Starts watching terraform (`terraform`, our child) under `watch`. `None` when the
    /// fork failed: terraform may not run unwatched, so `supervise` stops it and fails.
    pub(super) fn start(terraform: u32, watch: Watch) -> Option<Watchdog> {
        let parent = std::process::id() as libc::pid_t;
        let times = Times {
            deadline: watch.deadline.as_nanos() as u64,
            grace: watch.grace.as_nanos() as u64,
            orphan_grace: watch.orphan_grace.as_nanos() as u64,
        };
        // SAFETY: the child runs `watch_loop` (async-signal-safe calls only) and `_exit`s.
        match unsafe { libc::fork() } {
            -1 => None,
            0 => unsafe { watch_loop(parent, terraform as libc::pid_t, watch.page, times) },
            pid => Some(Watchdog { pid }),
        }
    }

    /// Stops and reaps it (terraform has ended).
    pub(super) fn stop(self) {
        drop(self);
    }
}

impl Drop for Watchdog {
    /// However the supervision ends (an error too), the watchdog is stopped and reaped: never
    /// left to signal a PID that has since been given to another process.
    fn drop(&mut self) {
        // SAFETY: our own child; kill then reap it.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// What the watchdog does next.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Wait,
    /// Interrupt terraform; kill it at the given time if it has not ended.
    Interrupt {
        kill_at: u64,
    },
    /// Terraform was interrupted already (infrakit-tf is gone, and the kernel did; or it
    /// did): kill it then.
    KillAt(u64),
    Kill,
}

/// The watchdog's decision, from the time, the lease's last renewal, and what it saw. Pure:
/// the rules can be tested alone.
fn decide(now: u64, lease: Lease, kill_at: Option<u64>, t: Times) -> Step {
    if let Some(at) = kill_at {
        return if now >= at { Step::Kill } else { Step::Wait };
    }
    let lost = lease.gone || now.saturating_sub(lease.renewed) > t.deadline;
    if lease.orphaned {
        // Half the lease to save, but never past the kill a lost lease would get: a death
        // after renewals had been failing leaves less.
        return Step::KillAt((now + t.orphan_grace).min(lease.renewed + t.deadline + t.grace));
    }
    if lost && lease.interrupted {
        return Step::KillAt(now + t.grace);
    }
    if lost {
        return Step::Interrupt { kill_at: now + t.grace };
    }
    Step::Wait
}

/// The watchdog's timings (nanoseconds): see `lease::Watch`.
#[derive(Debug, Clone, Copy)]
struct Times {
    deadline: u64,
    grace: u64,
    orphan_grace: u64,
}

/// What the watchdog reads at each look.
#[derive(Debug, Clone, Copy)]
struct Lease {
    /// When the last renewal was sent.
    renewed: u64,
    /// The server said it is not ours.
    gone: bool,
    /// Terraform was interrupted already.
    interrupted: bool,
    /// Infrakit-tf is dead (the kernel interrupted terraform).
    orphaned: bool,
}

/// The child's loop. Never returns.
///
/// # Safety
///
/// To be called only in the child of a `fork`: it calls nothing but async-signal-safe
/// functions, and ends with `_exit`.
unsafe fn watch_loop(
    parent: libc::pid_t,
    terraform: libc::pid_t,
    page: &'static crate::lease::Page,
    times: Times,
) -> ! {
    use std::sync::atomic::Ordering;
    // A terminal's Ctrl-C and our SIGTERM are terraform's and infrakit-tf's business.
    let mut ignore: libc::sigaction = std::mem::zeroed();
    ignore.sa_sigaction = libc::SIG_IGN;
    libc::sigaction(libc::SIGINT, &ignore, std::ptr::null_mut());
    libc::sigaction(libc::SIGTERM, &ignore, std::ptr::null_mut());
    let tick = libc::timespec { tv_sec: 0, tv_nsec: TICK.as_nanos() as libc::c_long };
    let mut kill_at = None;
    loop {
        libc::nanosleep(&tick, std::ptr::null_mut());
        // Ended (and reaped): nothing to watch. (Before being reaped it is a zombie, which
        // `kill` still reaches, harmlessly.)
        if libc::kill(terraform, 0) != 0 {
            libc::_exit(0);
        }
        let lease = Lease {
            renewed: page.renewed.load(Ordering::SeqCst),
            gone: page.gone.load(Ordering::SeqCst) != 0,
            interrupted: page.interrupted.load(Ordering::SeqCst) != 0,
            orphaned: libc::getppid() != parent,
        };
        let step = decide(monotonic_ns(), lease, kill_at, times);
        match step {
            Step::Wait => {}
            Step::Interrupt { kill_at: at } => {
                // The one interrupt: unless infrakit-tf took it meanwhile.
                if page.interrupted.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                    libc::kill(terraform, libc::SIGINT);
                }
                kill_at = Some(at);
            }
            Step::KillAt(at) => kill_at = Some(at),
            Step::Kill => {
                libc::kill(terraform, libc::SIGKILL);
                libc::_exit(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const FRESH: Lease = Lease { renewed: 90 * S, gone: false, interrupted: false, orphaned: false };
    const T: Times = Times { deadline: 15 * S, grace: 7 * S, orphan_grace: 15 * S };

    #[test]
    fn a_lease_not_renewed_in_time_interrupts_once_then_kills_after_the_grace() {
        assert_eq!(decide(100 * S, FRESH, None, T), Step::Wait);
        assert_eq!(decide(106 * S, FRESH, None, T), Step::Interrupt { kill_at: 113 * S });
        assert_eq!(decide(110 * S, FRESH, Some(113 * S), T), Step::Wait);
        assert_eq!(decide(113 * S, FRESH, Some(113 * S), T), Step::Kill);
    }

    #[test]
    fn a_lease_the_server_took_back_interrupts_at_once() {
        let gone = Lease { gone: true, ..FRESH };
        assert_eq!(decide(91 * S, gone, None, T), Step::Interrupt { kill_at: 98 * S });
    }

    #[test]
    fn terraform_interrupted_already_is_never_interrupted_again_only_killed() {
        // The kernel sent SIGINT (PR_SET_PDEATHSIG) when infrakit-tf died, or infrakit-tf did
        // (a timeout, a Ctrl-C): a second one would make terraform exit at once, unsaved.
        let orphaned = Lease { orphaned: true, ..FRESH };
        assert_eq!(decide(95 * S, orphaned, None, T), Step::KillAt(110 * S), "half the lease to save");
        assert_eq!(decide(110 * S, orphaned, Some(110 * S), T), Step::Kill);
        let interrupted = Lease { interrupted: true, ..FRESH };
        assert_eq!(decide(100 * S, interrupted, None, T), Step::Wait, "the lease still holds");
        assert_eq!(decide(106 * S, interrupted, None, T), Step::KillAt(113 * S));
    }

    #[test]
    fn terraform_is_killed_before_the_lease_can_expire() {
        // Renewed at 0 at the latest a sixth before a death; every kill comes before the
        // server's expiry, 6/6 after the renewal, whichever way it is reached.
        for lease in [3 * S, 30 * S, 300 * S] {
            let t = Times { deadline: lease / 2, grace: lease / 4, orphan_grace: lease / 2 };
            let renewed = Lease { renewed: 0, ..FRESH };
            let Step::Interrupt { kill_at } = decide(t.deadline + 1, renewed, None, t) else { panic!() };
            assert!(kill_at < lease);
            let death = lease / 6;
            let Step::KillAt(at) = decide(death, Lease { orphaned: true, ..renewed }, None, t) else { panic!() };
            assert!(at < lease);
            // Renewals failing since 0, then a death just before the renew deadline: the kill
            // is the lost lease's, not half a lease after the death.
            let late = t.deadline - 1;
            let Step::KillAt(at) = decide(late, Lease { orphaned: true, ..renewed }, None, t) else { panic!() };
            assert_eq!(at, t.deadline + t.grace);
            assert!(at <= lease * 3 / 4);
        }
    }
}
