//! Waiting politely for a lock another run holds (STYLE 10), the one loop the directory lock
//! and the store's lease both wait in: it says once who is waited for, then polls until the
//! lock is free or `--lock-timeout` has passed, and then fails with exit 5, naming the holder.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::exit::{Code, Failure};
use crate::output::Printer;
use crate::text;

/// How long a command waits for its locks: `--lock-timeout`, counted once from when it began
/// to wait, for every lock it takes (with a store: the store's, then the directory's).
/// Messages name the timeout as given.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    pub(crate) timeout: Duration,
    pub(crate) deadline: Instant,
}

impl Wait {
    pub(crate) fn new(timeout: Duration) -> Self {
        Wait { timeout, deadline: Instant::now() + timeout }
    }
}

/// One wait for one lock: `what` names it in messages (`` `./infra` ``, ``store directory
/// `web` ``), `poll` is how often it is tried.
pub(crate) struct Polite<'a> {
    wait: Wait,
    printer: &'a Printer,
    what: String,
    poll: Duration,
    said: bool,
}

impl<'a> Polite<'a> {
    pub(crate) fn new(wait: Wait, printer: &'a Printer, what: String, poll: Duration) -> Self {
        Polite { wait, printer, what, poll, said: false }
    }

    /// The lock is held by `holder`: past the deadline, the failure that names it (exit 5);
    /// else, the first time, the message that we wait, and one poll's sleep.
    pub(crate) fn wait_for(&mut self, holder: &str) -> Result<()> {
        self.wait_for_since(Instant::now(), holder)
    }

    /// [`Polite::wait_for`] as of `now`: when the lock was found held, before the holder was
    /// asked for (a store's answer may take a while; the deadline is judged as of the try).
    pub(crate) fn wait_for_since(&mut self, now: Instant, holder: &str) -> Result<()> {
        let Wait { timeout, deadline } = self.wait;
        if now >= deadline {
            return Err(Failure::new(Code::Locked, format!("{} is locked by {holder}", self.what))
                .hint(format!("wait for it to finish, or give --lock-timeout more than {}", text::duration(timeout)))
                .into());
        }
        if !self.said {
            self.printer.status(&format!(
                "waiting up to {} for {holder} to release {} (--lock-timeout)",
                text::duration(timeout),
                self.what
            ));
            self.said = true;
        }
        std::thread::sleep(self.poll.min(deadline - now));
        Ok(())
    }

    /// Before the deadline, one poll's sleep, and `true`: a fault worth waiting out (a server
    /// that restarts) is tried again; after it, `false`.
    pub(crate) fn pause(&self) -> bool {
        let now = Instant::now();
        if now >= self.wait.deadline {
            return false;
        }
        std::thread::sleep(self.poll.min(self.wait.deadline - now));
        true
    }
}
