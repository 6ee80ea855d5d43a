//! The lease as the terraform runner sees it: whether this process holds a store directory's
//! lease, whether it lost it and why, and what the watchdog of a terraform run reads. The
//! store publishes into it (it takes the lease, its heartbeat renews it, its commits renew it
//! and learn when the server took it back: `store/`); the runner (`terraform/`) only asks
//! ([`lost`], [`watch`], [`claim_interrupt`]) and knows nothing of PostgreSQL or heartbeats.
//!
//! - **Lost** means the server said the lease is no longer ours, or no renewal succeeded for
//!   [`Timing::renew_deadline`] (half the lease). Then our terraform is interrupted, and killed
//!   after [`Timing::kill_grace`] (a quarter): it is dead before the lease can expire
//!   (`renew_deadline + kill_grace < duration`, counted from when the last successful renewal
//!   was *sent*, which is before the server set its expiry), so no other host ever runs
//!   terraform while ours may.
//! - **The watchdog** of a terraform run (`terraform/watchdog.rs`) is a process of its own: it
//!   reads the last renewal from a [`Page`] of memory shared with it, so that it still knows
//!   when our process is frozen or dead.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The lease's timings, all from its duration (`store.lease` in infrakit-tf.json).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) duration: Duration,
}

impl Timing {
    /// How often the heartbeat renews it (client-go's retry period).
    pub(crate) fn renew_every(self) -> Duration {
        self.duration / 6
    }

    /// How long without a successful renewal before it counts as lost (client-go's renew
    /// deadline: shorter than the lease, so that we stop before another host may start).
    pub(crate) fn renew_deadline(self) -> Duration {
        self.duration / 2
    }

    /// How long terraform has to stop after the interrupt before it is killed.
    pub(crate) fn kill_grace(self) -> Duration {
        self.duration / 4
    }

    /// The longest a store call may take while the lease is held.
    pub(crate) fn call_limit(self) -> Duration {
        self.duration / 2
    }
}

/// A lease this process holds, as the store publishes it (its heartbeat, its commits) and the
/// terraform runner reads it.
pub(crate) struct Held {
    directory: String,
    epoch: i64,
    timing: Timing,
    renewals: Mutex<Renewals>,
}

/// How the lease has fared since it was taken: its renewals, its loss, its release.
struct Renewals {
    /// When the last successful renewal was sent (not answered: the server's expiry is later).
    renewed: Instant,
    /// The server said it is no longer ours: why.
    gone: Option<String>,
    /// The last renewal's error, for the message when it is lost.
    last_error: Option<String>,
    released: bool,
}

impl Held {
    /// Publishes `epoch` of `directory`, acquired just now (`sent`: when the acquiring
    /// statement was sent), as the lease this process holds.
    pub(crate) fn publish(directory: &str, epoch: i64, timing: Timing, sent: Instant) -> Arc<Held> {
        let held = Arc::new(Held {
            directory: directory.to_string(),
            epoch,
            timing,
            renewals: Mutex::new(Renewals { renewed: sent, gone: None, last_error: None, released: false }),
        });
        if let Some(page) = page() {
            page.gone.store(0, Ordering::SeqCst);
            page.renewed.store(0, Ordering::SeqCst);
        }
        held.renewed(sent);
        *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(held.clone());
        held
    }

    pub(crate) fn directory(&self) -> &str {
        &self.directory
    }

    pub(crate) fn epoch(&self) -> i64 {
        self.epoch
    }

    pub(crate) fn timing(&self) -> Timing {
        self.timing
    }

    /// A renewal sent at `sent` succeeded.
    pub(crate) fn renewed(&self, sent: Instant) {
        let mut state = self.renewals.lock().unwrap_or_else(|e| e.into_inner());
        state.renewed = state.renewed.max(sent);
        state.last_error = None;
        if let Some(page) = page() {
            let ns = monotonic_ns().saturating_sub(sent.elapsed().as_nanos() as u64);
            page.renewed.fetch_max(ns, Ordering::SeqCst);
        }
    }

    /// A renewal failed (no answer, a connection lost): why, for the message if it is lost.
    pub(crate) fn failed(&self, why: String) {
        self.renewals.lock().unwrap_or_else(|e| e.into_inner()).last_error = Some(why);
    }

    /// The server said it is not ours any more.
    pub(crate) fn gone(&self, why: &str) {
        let mut state = self.renewals.lock().unwrap_or_else(|e| e.into_inner());
        if !state.released {
            state.gone.get_or_insert_with(|| why.to_string());
            if let Some(page) = page() {
                page.gone.store(1, Ordering::SeqCst);
            }
        }
    }

    /// Why it is lost, if it is.
    pub(crate) fn lost(&self) -> Option<String> {
        let state = self.renewals.lock().unwrap_or_else(|e| e.into_inner());
        if state.released {
            return None;
        }
        if let Some(gone) = &state.gone {
            return Some(gone.clone());
        }
        let since = state.renewed.elapsed();
        (since > self.timing.renew_deadline()).then(|| {
            let why = state.last_error.as_deref().unwrap_or("no answer");
            format!("not renewed for {} ({why})", crate::text::duration(Duration::from_secs(since.as_secs())))
        })
    }

    /// Takes it out of the view (released: never lost from now on, and this process holds no
    /// lease any more); returns whether it was lost before.
    pub(crate) fn withdraw(&self) -> bool {
        let lost = self.lost().is_some();
        self.renewals.lock().unwrap_or_else(|e| e.into_inner()).released = true;
        *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = None;
        lost
    }
}

/// The lease this process holds, if any (one per process: one directory per command).
static CURRENT: Mutex<Option<Arc<Held>>> = Mutex::new(None);

/// The lease as the watchdog sees it (`terraform/watchdog.rs`): a page of memory shared with
/// the processes this one forks, so that a watchdog whose parent is frozen or dead still
/// knows when the lease was last renewed.
#[repr(C)]
pub(crate) struct Page {
    /// `CLOCK_MONOTONIC` nanoseconds when the last successful renewal was sent.
    pub(crate) renewed: AtomicU64,
    /// Set when the server said the lease is not ours any more.
    pub(crate) gone: AtomicU32,
    /// Set when the running terraform was interrupted already (by us, or a terminal's
    /// Ctrl-C): never twice, or it exits at once, unsaved.
    pub(crate) interrupted: AtomicU32,
}

/// The page, mapped once (shared, anonymous) on first use; `None` if it could not be.
fn page() -> Option<&'static Page> {
    static PAGE: OnceLock<usize> = OnceLock::new();
    let at = *PAGE.get_or_init(|| {
        // SAFETY: a new anonymous shared mapping of one page, zero-filled, never unmapped.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Page>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            0
        } else {
            p as usize
        }
    });
    // SAFETY: zero-filled memory is a valid `Page` (atomics of 0), mapped for the process's life.
    (at != 0).then(|| unsafe { &*(at as *const Page) })
}

/// The time of `CLOCK_MONOTONIC` (which `Instant` reads too), in nanoseconds.
pub(crate) fn monotonic_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// What the watchdog of a terraform run needs: the page, and the lease's timings.
pub(crate) struct Watch {
    pub(crate) page: &'static Page,
    /// No renewal for this long: the lease counts as lost.
    pub(crate) deadline: Duration,
    /// From the interrupt to the kill, when the lease was not renewed in time.
    pub(crate) grace: Duration,
    /// From infrakit-tf's death (the kernel's interrupt) to the kill: the lease was renewed at
    /// most a sixth of it before, so half of it still ends terraform by two thirds.
    pub(crate) orphan_grace: Duration,
}

/// Claims the one interrupt the running terraform may get (see [`Page::interrupted`]):
/// `false` when the watchdog (or a terminal's Ctrl-C, [`note_interrupted`]) took it already.
/// Without a lease there is no watchdog: always `true`.
pub(crate) fn claim_interrupt() -> bool {
    match current().and(page()) {
        Some(page) => page.interrupted.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).is_ok(),
        None => true,
    }
}

/// Notes that the running terraform was interrupted by a terminal's Ctrl-C.
pub(crate) fn note_interrupted() {
    if let Some(page) = current().and(page()) {
        page.interrupted.store(1, Ordering::SeqCst);
    }
}

/// The watch of the lease this process holds, if any, for a terraform run about to start (not
/// interrupted yet).
pub(crate) fn watch() -> Option<Watch> {
    let held = current()?;
    let timing = held.timing;
    let page = page()?;
    page.interrupted.store(0, Ordering::SeqCst);
    Some(Watch {
        page,
        deadline: timing.renew_deadline(),
        grace: timing.kill_grace(),
        orphan_grace: timing.renew_deadline(),
    })
}

fn current() -> Option<Arc<Held>> {
    CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Whether this process held a lease and lost it, and why. The terraform runner stops
/// terraform then; a store call refuses.
pub(crate) fn lost() -> Option<String> {
    current().and_then(|h| h.lost())
}

/// Why a lease is no longer ours when the server says so (a renewal or a fence found another
/// epoch): the one text the heartbeat and the store's commits give.
pub(crate) const TAKEN: &str = "it expired, or another host holds it now";

/// Who noticed that the lease was lost: what its error says besides why.
pub(crate) enum Noticed<'a> {
    /// The terraform runner, of the lease this process holds (the directory is the view's):
    /// `why` says what became of terraform (not started, not retried, stopped).
    Runner,
    /// A store call on `directory`, refused, at `server` (`user@host:port/db`).
    Store { directory: &'a str, server: &'a str },
}

/// The error of a lease this process held and lost (exit 16), whoever noticed: the one for it.
pub(crate) fn lost_error(noticed: Noticed<'_>, why: &str) -> anyhow::Error {
    let (directory, at, hint) = match noticed {
        Noticed::Runner => (
            current().map(|h| h.directory.clone()).unwrap_or_default(),
            String::new(),
            "another host may hold it now: nothing more was changed here; what earlier steps committed stands, and the next run (here or on another host) carries on from the store",
        ),
        Noticed::Store { directory, server } => (
            directory.to_string(),
            format!(" at {server}"),
            "another host may hold it now: nothing more was changed here (terraform, if it ran, was stopped); what earlier steps committed stands, and the next run carries on from the store",
        ),
    };
    crate::exit::Failure::new(
        crate::exit::Code::StoreUnavailable,
        format!("lost the lease on store directory `{directory}`{at}: {why}"),
    )
    .hint(hint)
    .into()
}

/// The epoch of the lease this process holds: terraform's state writes carry it.
pub(crate) fn epoch() -> Option<i64> {
    current().map(|h| h.epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terraform_is_gone_before_the_lease_can_expire() {
        for secs in [3, 10, 30, 300] {
            let t = Timing { duration: Duration::from_secs(secs) };
            assert!(t.renew_every() < t.renew_deadline(), "several renewals before it counts as lost");
            assert!(t.renew_deadline() + t.kill_grace() < t.duration, "{secs}s: killed before it expires");
        }
    }

    #[test]
    fn a_lost_lease_is_one_error_saying_who_noticed() {
        let server = "postgresql://ops@db:5432/infra";
        let store = lost_error(Noticed::Store { directory: "web", server }, "it expired, or another host holds it now");
        assert_eq!(
            store.to_string(),
            "lost the lease on store directory `web` at postgresql://ops@db:5432/infra: it expired, or another host holds it now"
        );
        assert_eq!(crate::exit::code_for(&store), crate::exit::Code::StoreUnavailable);
        assert!(crate::exit::hint_for(&store).unwrap().contains("(terraform, if it ran, was stopped)"));
        // No lease held in this test process: the runner's names no directory.
        let runner = lost_error(Noticed::Runner, "not renewed for 15s (no answer); `terraform apply` was interrupted");
        assert_eq!(
            runner.to_string(),
            "lost the lease on store directory ``: not renewed for 15s (no answer); `terraform apply` was interrupted"
        );
        assert_eq!(crate::exit::code_for(&runner), crate::exit::Code::StoreUnavailable);
        assert!(crate::exit::hint_for(&runner).unwrap().contains("the next run (here or on another host)"));
    }
}
