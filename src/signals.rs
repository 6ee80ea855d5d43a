//! Ctrl-C and SIGTERM (and SIGHUP, taken as SIGTERM). While terraform runs, the interrupt belongs
//! to it: a terminal's Ctrl-C already reaches terraform (same process group), so SIGINT is only
//! recorded here, never sent again (a second interrupt makes terraform exit at once and can lose
//! state). SIGTERM is recorded and forwarded to terraform once, as the graceful SIGINT. With no
//! child running, both signals keep their default action: the process ends at once, which is safe
//! because every write is atomic and the directory lock dies with the process.
//!
//! A stop, once asked for, stays asked for: the flags are never reset, and no further
//! terraform run starts in this process ([`stop_requested`] is checked before each spawn). So
//! a SIGINT that reached only our process during a plan (terraform never saw it and finished
//! normally) still prevents the apply that would have followed.
//!
//! The pattern follows uv's `child.rs` and just's `signal_handler.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

struct Flags {
    /// No child is running: signals take their default action.
    idle: Arc<AtomicBool>,
    interrupted: Arc<AtomicBool>,
    terminated: Arc<AtomicBool>,
}

static FLAGS: OnceLock<Flags> = OnceLock::new();

fn flags() -> &'static Flags {
    FLAGS.get_or_init(|| {
        let flags = Flags {
            idle: Arc::new(AtomicBool::new(true)),
            interrupted: Arc::new(AtomicBool::new(false)),
            terminated: Arc::new(AtomicBool::new(false)),
        };
        // Registration only fails for forbidden signals; these are not. A hangup (the
        // terminal closed) is a SIGTERM: what runs is stopped, hooks' groups included (they
        // are no longer in the terminal's group to get it themselves).
        for (signal, flag) in [(SIGINT, &flags.interrupted), (SIGTERM, &flags.terminated), (SIGHUP, &flags.terminated)]
        {
            signal_hook::flag::register_conditional_default(signal, flags.idle.clone()).expect("register");
            signal_hook::flag::register(signal, flag.clone()).expect("register");
        }
        flags
    })
}

/// How many [`ChildRunning`] are alive: the signals take their default action only when none
/// is (checks and drains run in parallel, each marking its own; the first to end must not
/// leave the others unguarded).
static RUNNING: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// Marks a child as running until dropped.
pub(crate) struct ChildRunning(());

impl ChildRunning {
    pub(crate) fn start() -> Self {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        *running += 1;
        flags().idle.store(false, Ordering::SeqCst);
        ChildRunning(())
    }

    pub(crate) fn terminated(&self) -> bool {
        flags().terminated.load(Ordering::SeqCst)
    }
}

impl Drop for ChildRunning {
    fn drop(&mut self) {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        *running -= 1;
        if *running == 0 {
            flags().idle.store(true, Ordering::SeqCst);
        }
    }
}

/// Whether SIGINT or SIGTERM arrived at any time during this process's life.
pub(crate) fn stop_requested() -> bool {
    let f = flags();
    f.interrupted.load(Ordering::SeqCst) || f.terminated.load(Ordering::SeqCst)
}

/// Sends SIGINT to one process (terraform's PID, not its group).
pub(crate) fn interrupt(pid: u32) {
    send(pid, libc::SIGINT);
}

/// Sends SIGKILL to a terraform that did not stop within its grace period, and to the
/// processes it started (its provider plugins, which would otherwise linger, orphaned).
pub(crate) fn kill(pid: u32) {
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        tree.extend(crate::process::children(tree[i]));
        i += 1;
    }
    // Terraform first: it starts nothing more once it is stopped.
    for pid in tree {
        send(pid, libc::SIGKILL);
    }
}

fn send(pid: u32, signal: i32) {
    // SAFETY: kill(2) with a valid signal number has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}
