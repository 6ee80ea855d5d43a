//! Crash points, for the crash-point tests only (cargo feature `fault-injection`; a release
//! build has none and this module compiles to nothing).
//!
//! Every file-system mutation (`fsio`) and every terraform spawn calls [`point`]. With the
//! feature on, `INFRAKIT_TF_CRASH_LOG=FILE` appends one line per point reached (`N what`), so a
//! test learns how many points a command has, and `INFRAKIT_TF_CRASH_AT=N` makes the process
//! SIGKILL itself at the N-th point, before that mutation happens (after it, for a spawn: the
//! kill then lands while terraform runs). SIGKILL is what a crash, the OOM killer or a
//! reboot does: no destructor, no signal handler runs.

#[cfg(feature = "fault-injection")]
#[allow(clippy::disallowed_methods)] // the crash-point log is the tests', not the directory's
pub(crate) fn point(what: impl FnOnce() -> String) {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::SeqCst) + 1;
    if let Some(log) = std::env::var_os("INFRAKIT_TF_CRASH_LOG") {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("crash log");
        writeln!(f, "{n} {}", what()).expect("crash log");
    }
    let at = std::env::var("INFRAKIT_TF_CRASH_AT").ok().and_then(|s| s.parse::<u64>().ok());
    if at == Some(n) {
        // SAFETY: kill(2) on our own PID with a valid signal.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn point(_what: impl FnOnce() -> String) {}
