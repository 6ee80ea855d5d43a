//! The lease on a store directory: who may change it, fenced so that a host that lost it can
//! change nothing more. After Kubernetes' leader election (client-go `leaderelection`) and the
//! fencing-token argument (a lock is only safe if what it guards checks a token).
//!
//! - **The record** is a row of `infrakit_tf.leases`: the directory, its `epoch` (the fencing
//!   token: a new number from a sequence at every acquisition, so that even a row deleted by
//!   hand never gives two holders one token), the holder, and `expires`, set from the *server's*
//!   clock (`clock_timestamp()`), never a host's. A host takes the lease only when it is free:
//!   released, or expired.
//! - **The heartbeat** renews it every [`Timing::renew_every`] on a connection of its own
//!   (which also keeps that session from ever being idle), reconnecting as needed: a server
//!   restart or a dropped connection costs nothing while the lease has not expired.
//! - **Lost** means the server said the lease is no longer ours, or no renewal succeeded for
//!   [`Timing::renew_deadline`] (half the lease). Then our terraform is interrupted, and killed
//!   after [`Timing::kill_grace`] (a quarter): it is dead before the lease can expire
//!   (`renew_deadline + kill_grace < duration`, counted from when the last successful renewal
//!   was *sent*, which is before the server set its expiry), so no other host ever runs
//!   terraform while ours may. The terraform runner asks [`lost`]; nothing else here is its
//!   business.
//! - **Fencing**: every store commit first renews the lease in its own transaction, comparing
//!   the epoch ([`fence`]): a host that lost it cannot commit. Terraform's own state writes
//!   carry the epoch too (`infrakit_tf.lease` in its connection, and its `application_name`,
//!   which a session pooler passes on; see `config`), and a trigger
//!   on its state table refuses the write of a lease no longer held (`schema`): even a
//!   terraform that somehow outlived its lease (a frozen process) cannot write a stale state.
//! - **Taking over** a lease that expired without being released (its host died, or lost the
//!   server): the new holder ends the old holder's terraform sessions, whose advisory state
//!   lock PostgreSQL would otherwise keep until TCP keepalive notices (two hours by default).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, Config};

use tokio_postgres::types::Type;

use super::conn::{Conn, Outcome, Param, Setup};
use super::tls::Tls;

/// The lease's timings, all from its duration (`store.lease` in infrakit-tf.json).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) duration: Duration,
}

impl Timing {
    /// How often the heartbeat renews it (client-go's retry period).
    pub(super) fn renew_every(self) -> Duration {
        self.duration / 6
    }

    /// How long without a successful renewal before it counts as lost (client-go's renew
    /// deadline: shorter than the lease, so that we stop before another host may start).
    pub(super) fn renew_deadline(self) -> Duration {
        self.duration / 2
    }

    /// How long terraform has to stop after the interrupt before it is killed.
    pub(super) fn kill_grace(self) -> Duration {
        self.duration / 4
    }

    /// The longest a store call may take while the lease is held.
    pub(super) fn call_limit(self) -> Duration {
        self.duration / 2
    }
}

/// A lease this process holds, as the heartbeat and the terraform runner see it.
struct Shared {
    directory: String,
    epoch: i64,
    timing: Timing,
    state: Mutex<State>,
}

struct State {
    /// When the last successful renewal was sent (not answered: the server's expiry is later).
    renewed: Instant,
    /// The server said it is no longer ours: why.
    gone: Option<String>,
    /// The last renewal's error, for the message when it is lost.
    last_error: Option<String>,
    released: bool,
}

impl Shared {
    /// A renewal sent at `sent` succeeded.
    fn renewed(&self, sent: Instant) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.renewed = state.renewed.max(sent);
        state.last_error = None;
        if let Some(page) = page() {
            let ns = monotonic_ns().saturating_sub(sent.elapsed().as_nanos() as u64);
            page.renewed.fetch_max(ns, Ordering::SeqCst);
        }
    }

    /// The server said it is not ours any more.
    fn gone(&self, why: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !state.released {
            state.gone.get_or_insert_with(|| why.to_string());
            if let Some(page) = page() {
                page.gone.store(1, Ordering::SeqCst);
            }
        }
    }

    fn lost(&self) -> Option<String> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
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
}

/// The lease this process holds, if any (one per process: one directory per command).
static CURRENT: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

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
    let shared = current()?;
    let timing = shared.timing;
    let page = page()?;
    page.interrupted.store(0, Ordering::SeqCst);
    Some(Watch {
        page,
        deadline: timing.renew_deadline(),
        grace: timing.kill_grace(),
        orphan_grace: timing.renew_deadline(),
    })
}

fn current() -> Option<Arc<Shared>> {
    CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Whether this process held a lease and lost it, and why. The terraform runner stops
/// terraform then; a store call refuses.
pub(crate) fn lost() -> Option<String> {
    current().and_then(|s| s.lost())
}

/// The error of a lease lost while terraform ran or was about to (exit 16); `why` says what
/// happened to terraform.
pub(crate) fn lost_error(why: &str) -> anyhow::Error {
    let directory = current().map(|s| s.directory.clone()).unwrap_or_default();
    crate::exit::Failure::new(
        crate::exit::Code::StoreUnavailable,
        format!("lost the lease on store directory `{directory}`: {why}"),
    )
    .hint("another host may hold it now: nothing more was changed here; what earlier steps committed stands, and the next run (here or on another host) carries on from the store")
    .into()
}

/// The epoch of the lease this process holds: terraform's state writes carry it.
pub(crate) fn epoch() -> Option<i64> {
    current().map(|s| s.epoch)
}

/// A lease just acquired.
pub(super) struct Acquired {
    pub(super) epoch: i64,
    /// Who held it before, when they neither released it nor renewed it in time (a host
    /// died, or lost the server): their holder string.
    pub(super) took_over: Option<String>,
}

/// Tries once to take the lease of `directory`: free (released, expired or never taken), or
/// ours already (`owner`: a retry after an answer we did not get). `None`: held by another.
/// `key` is the directory's advisory-lock key of the infrakit-tf before leases, which is
/// honoured too: a host not yet upgraded holds the directory while it holds that lock.
pub(super) fn try_acquire(
    conn: &mut Conn,
    limit: Duration,
    directory: &str,
    holder: &str,
    owner: &str,
    key: (i32, i32),
    timing: Timing,
) -> Outcome<Option<Acquired>> {
    let ms = millis(timing.duration);
    conn.call(limit, async |c| {
        let row = c
            .query_typed_opt(
                "WITH prev AS (SELECT holder, released, expires <= clock_timestamp() AS expired, \
                                      released OR expires <= clock_timestamp() OR owner = $3 AS free \
                               FROM infrakit_tf.leases WHERE directory = $1) \
                 INSERT INTO infrakit_tf.leases AS l \
                     (directory, epoch, holder, owner, acquired, renewed, expires, released) \
                 SELECT $1, nextval('infrakit_tf.lease_epochs'), $2, $3, clock_timestamp(), clock_timestamp(), \
                        clock_timestamp() + $4 * interval '1 millisecond', false \
                 WHERE coalesce((SELECT free FROM prev), true) AND pg_try_advisory_xact_lock($5, $6) \
                 ON CONFLICT (directory) DO UPDATE SET epoch = excluded.epoch, holder = excluded.holder, \
                     owner = excluded.owner, acquired = excluded.acquired, renewed = excluded.renewed, \
                     expires = excluded.expires, released = false \
                 WHERE l.released OR l.expires <= clock_timestamp() OR l.owner = excluded.owner \
                 RETURNING l.epoch, (SELECT holder FROM prev), (SELECT NOT released AND expired FROM prev)",
                &[
                    (&directory, Type::TEXT),
                    (&holder, Type::TEXT),
                    (&owner, Type::TEXT),
                    (&ms, Type::FLOAT8),
                    (&key.0, Type::INT4),
                    (&key.1, Type::INT4),
                ],
            )
            .await?;
        Ok(row.map(|r| {
            let expired: Option<bool> = r.get(2);
            let took_over = expired.unwrap_or(false).then(|| r.get::<_, Option<String>>(1).unwrap_or_default());
            Acquired { epoch: r.get(0), took_over }
        }))
    })
}

/// Who holds the lease of `directory`, for messages: `another run (infrakit-tf HOST pid N)`,
/// and how long until it expires if it is not renewed.
pub(super) fn holder(conn: &mut Conn, limit: Duration, directory: &str) -> Outcome<String> {
    conn.call(limit, async |c| {
        let row = c
            .query_typed_opt(
                "SELECT holder, ceil(extract(epoch FROM expires - clock_timestamp()))::bigint, \
                        NOT released AND expires > clock_timestamp() \
                 FROM infrakit_tf.leases WHERE directory = $1",
                &[(&directory, Type::TEXT)],
            )
            .await?;
        Ok(match row {
            Some(r) if r.get::<_, bool>(2) => {
                let (who, left): (String, i64) = (r.get(0), r.get(1));
                format!("another run ({who}; its lease expires in {left}s unless renewed)")
            }
            // Free by its record: the advisory lock of an infrakit-tf before leases holds it.
            _ => "another run (an infrakit-tf older than this one: upgrade every host)".to_string(),
        })
    })
}

/// Ends the sessions of terraforms that ran under an earlier lease of `directory` (their
/// `application_name`, see [`terraform_session`]): their advisory lock on the state would
/// otherwise stay until the server notices they are gone. Sessions of another role may not be
/// ended (no `pg_signal_backend`): then terraform waits for the state's lock (`-lock-timeout`).
/// Returns how many were ended.
pub(super) fn end_stale_sessions(conn: &mut Conn, limit: Duration, directory: &str, epoch: i64) -> Outcome<i64> {
    let prefix = session_prefix(directory);
    let mine = terraform_session(directory, Some(epoch));
    conn.call(limit, async |c| {
        let row = c
            .query_typed_one(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = current_database() AND starts_with(application_name, $1) \
                 AND application_name <> $2",
                &[(&prefix, Type::TEXT), (&mine, Type::TEXT)],
            )
            .await?;
        Ok(row.get(0))
    })
}

/// The `application_name` of a terraform's connections: `infrakit-tf tf DIR#EPOCH` (a
/// reader's has no epoch). PostgreSQL keeps 63 bytes of it, enough for any directory name
/// and an epoch below ten million.
pub(crate) fn terraform_session(directory: &str, epoch: Option<i64>) -> String {
    match epoch {
        Some(epoch) => format!("{}{epoch}", session_prefix(directory)),
        None => format!("infrakit-tf tf {directory}"),
    }
}

fn session_prefix(directory: &str) -> String {
    format!("infrakit-tf tf {directory}#")
}

/// The common table expression that renews the lease if it is still ours (epoch, not
/// released, not expired), for a statement that writes under it: `WITH {RENEWED}, ...`, its
/// writes joined to `lease` so that they happen only if it was renewed, and its result's
/// first column `EXISTS (SELECT 1 FROM lease)`. One statement is one transaction: the
/// renewal locks the lease's row until it commits, so no other host takes the lease between
/// the check and the write. Parameters: `$1` the directory, `$2` the epoch, `$3` the lease
/// in milliseconds ([`fence_params`]).
pub(super) const RENEWED: &str = "lease AS (UPDATE infrakit_tf.leases SET renewed = clock_timestamp(), \
     expires = clock_timestamp() + $3 * interval '1 millisecond' \
     WHERE directory = $1 AND epoch = $2 AND NOT released AND expires > clock_timestamp() RETURNING 1)";

/// The lease in milliseconds, `$3` of [`RENEWED`].
pub(super) fn fence_params(timing: Timing) -> f64 {
    millis(timing.duration)
}

/// `$1` to `$3` of [`RENEWED`], typed.
pub(super) fn fence<'a>(directory: &'a &'a str, epoch: &'a i64, ms: &'a f64) -> Vec<Param<'a>> {
    vec![(directory, Type::TEXT), (epoch, Type::INT8), (ms, Type::FLOAT8)]
}

/// Renews the lease if it is still ours: `false` when it is not.
async fn renew(c: &Client, directory: &str, epoch: i64, timing: Timing) -> Result<bool, tokio_postgres::Error> {
    let sql = format!("WITH {RENEWED} SELECT EXISTS (SELECT 1 FROM lease)");
    Ok(c.query_typed_one(sql.as_str(), &fence(&directory, &epoch, &fence_params(timing))).await?.get(0))
}

fn millis(d: Duration) -> f64 {
    d.as_millis() as f64
}

/// A lease held: its heartbeat runs until it is released or dropped.
pub(super) struct Lease {
    shared: Arc<Shared>,
    stop: mpsc::Sender<()>,
}

impl Lease {
    /// Starts holding `epoch` of `directory`, acquired just now (`sent`: when the acquiring
    /// statement was sent). The heartbeat connects on its first renewal, so a short command
    /// costs a thread, not a connection.
    /// `setup`: how its connections get their settings (behind a pooler or not).
    pub(super) fn hold(
        pg: &Config,
        tls: &Tls,
        setup: Setup,
        directory: &str,
        epoch: i64,
        timing: Timing,
        sent: Instant,
    ) -> Lease {
        let shared = Arc::new(Shared {
            directory: directory.to_string(),
            epoch,
            timing,
            state: Mutex::new(State { renewed: sent, gone: None, last_error: None, released: false }),
        });
        if let Some(page) = page() {
            page.gone.store(0, Ordering::SeqCst);
            page.renewed.store(0, Ordering::SeqCst);
        }
        shared.renewed(sent);
        let (stop, stopped) = mpsc::channel();
        let beat = Heartbeat { pg: pg.clone(), tls: tls.clone(), setup, shared: shared.clone() };
        // Detached: at release it is told to stop, and a renewal after the release cannot
        // revive the lease (it renews only one not released).
        let _ = std::thread::Builder::new().name("lease".into()).spawn(move || beat.run(&stopped));
        *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some(shared.clone());
        Lease { shared, stop }
    }

    pub(super) fn epoch(&self) -> i64 {
        self.shared.epoch
    }

    pub(super) fn timing(&self) -> Timing {
        self.shared.timing
    }

    /// Why it is lost, if it is.
    pub(super) fn lost(&self) -> Option<String> {
        self.shared.lost()
    }

    /// A commit renewed it (its statement was sent at `sent`).
    pub(super) fn renewed(&self, sent: Instant) {
        self.shared.renewed(sent);
    }

    /// The server said it is not ours any more.
    pub(super) fn gone(&self, why: &str) {
        self.shared.gone(why);
    }

    /// Gives it back (best effort: unreleased, it expires): `conn` runs the release.
    pub(super) fn release(&self, conn: Option<&mut Conn>) {
        let _ = self.stop.send(());
        let lost = self.shared.lost().is_some();
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner()).released = true;
        *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if lost {
            return;
        }
        let Some(conn) = conn else { return };
        let (directory, epoch) = (self.shared.directory.as_str(), self.shared.epoch);
        let _ = conn.call(self.shared.timing.call_limit(), async |c| {
            c.execute_typed(
                "UPDATE infrakit_tf.leases SET expires = clock_timestamp(), released = true \
                 WHERE directory = $1 AND epoch = $2",
                &[(&directory, Type::TEXT), (&epoch, Type::INT8)],
            )
            .await
        });
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = self.stop.send(());
    }
}

/// The renewing thread.
struct Heartbeat {
    pg: Config,
    tls: Tls,
    setup: Setup,
    shared: Arc<Shared>,
}

impl Heartbeat {
    fn run(self, stopped: &mpsc::Receiver<()>) {
        let timing = self.shared.timing;
        let every = timing.renew_every();
        let mut conn: Option<Conn> = None;
        let mut wait = every;
        loop {
            match stopped.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let sent = Instant::now();
            match self.renew(&mut conn, every) {
                Ok(true) => {
                    self.shared.renewed(sent);
                    wait = every;
                }
                Ok(false) => {
                    self.shared.gone("it expired, or another host holds it now");
                    return;
                }
                Err(why) => {
                    conn = None;
                    self.shared.state.lock().unwrap_or_else(|e| e.into_inner()).last_error = Some(why);
                    // Try again soon: a restarting server is back within seconds.
                    wait = (every / 4).max(Duration::from_millis(200));
                }
            }
        }
    }

    /// One renewal, connecting first if needed; each step bounded by `limit`.
    fn renew(&self, conn: &mut Option<Conn>, limit: Duration) -> Result<bool, String> {
        if conn.is_none() {
            *conn = Some(Conn::open(&self.pg, &self.tls, limit, limit, self.setup).map_err(|f| f.why())?);
        }
        let c = conn.as_mut().expect("connected");
        let (directory, epoch, timing) = (&self.shared.directory, self.shared.epoch, self.shared.timing);
        c.call(limit, async |c| renew(c, directory, epoch, timing).await).map_err(|f| f.why())
    }
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
    fn a_terraform_session_names_its_lease_within_what_postgresql_keeps() {
        let longest = "d".repeat(40);
        assert_eq!(terraform_session("web", Some(42)), "infrakit-tf tf web#42");
        assert_eq!(terraform_session("web", None), "infrakit-tf tf web");
        assert!(terraform_session(&longest, Some(9_999_999)).len() <= 63);
        assert!(terraform_session("web", Some(7)).starts_with(&session_prefix("web")));
    }
}
