//! The heartbeat of a lease held: a thread that renews it every [`Timing::renew_every`] on a
//! connection of its own (which also keeps that session from ever being idle), reconnecting
//! as needed: a server restart or a dropped connection costs nothing while the lease has not
//! expired. What it learns (renewed when, failing why, taken back by the server) it
//! publishes to the process-wide view the terraform runner asks (`crate::lease`); the
//! statements are `lease`'s.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::{Conn, Server, Setup};
use super::lease;
use crate::lease::{Held, Timing};

/// A lease held: its heartbeat runs until it is released or dropped.
pub(super) struct Lease {
    held: Arc<Held>,
    stop: mpsc::Sender<()>,
}

impl Lease {
    /// Starts holding `epoch` of `directory`, acquired just now (`sent`: when the acquiring
    /// statement was sent). The heartbeat connects on its first renewal, so a short command
    /// costs a thread, not a connection.
    /// `setup`: how its connections get their settings (behind a pooler or not).
    pub(super) fn hold(
        server: &Server,
        setup: Setup,
        directory: &str,
        epoch: i64,
        timing: Timing,
        sent: Instant,
    ) -> Lease {
        let held = Held::publish(directory, epoch, timing, sent);
        let (stop, stopped) = mpsc::channel();
        let beat = Heartbeat { server: server.clone(), setup, held: held.clone() };
        // Detached: at release it is told to stop, and a renewal after the release cannot
        // revive the lease (it renews only one not released).
        let _ = std::thread::Builder::new().name("lease".into()).spawn(move || beat.run(&stopped));
        Lease { held, stop }
    }

    pub(super) fn epoch(&self) -> i64 {
        self.held.epoch()
    }

    pub(super) fn timing(&self) -> Timing {
        self.held.timing()
    }

    /// Why it is lost, if it is.
    pub(super) fn lost(&self) -> Option<String> {
        self.held.lost()
    }

    /// A commit renewed it (its statement was sent at `sent`).
    pub(super) fn renewed(&self, sent: Instant) {
        self.held.renewed(sent);
    }

    /// The server said it is not ours any more.
    pub(super) fn gone(&self, why: &str) {
        self.held.gone(why);
    }

    /// Gives it back (best effort: unreleased, it expires): `conn` runs the release.
    pub(super) fn release(&self, conn: Option<&mut Conn>) {
        let _ = self.stop.send(());
        if self.held.withdraw() {
            return;
        }
        let Some(conn) = conn else { return };
        let _ = lease::release(conn, self.held.timing().call_limit(), self.held.directory(), self.held.epoch());
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = self.stop.send(());
    }
}

/// The renewing thread.
struct Heartbeat {
    server: Server,
    setup: Setup,
    held: Arc<Held>,
}

impl Heartbeat {
    fn run(self, stopped: &mpsc::Receiver<()>) {
        let timing = self.held.timing();
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
                    self.held.renewed(sent);
                    wait = every;
                }
                Ok(false) => {
                    self.held.gone(crate::lease::TAKEN);
                    return;
                }
                Err(why) => {
                    conn = None;
                    self.held.failed(why);
                    // Try again soon: a restarting server is back within seconds.
                    wait = (every / 4).max(Duration::from_millis(200));
                }
            }
        }
    }

    /// One renewal, connecting first if needed; each step bounded by `limit`.
    fn renew(&self, conn: &mut Option<Conn>, limit: Duration) -> Result<bool, String> {
        if conn.is_none() {
            *conn = Some(Conn::open(&self.server, limit, limit, self.setup).map_err(|f| f.why())?);
        }
        let c = conn.as_mut().expect("connected");
        let (directory, epoch, timing) = (self.held.directory(), self.held.epoch(), self.held.timing());
        c.call(limit, async |c| lease::renew(c, directory, epoch, timing).await).map_err(|f| f.why())
    }
}
