//! The directory lock: one exclusive `flock(2)` on the managed directory itself, taken by every
//! command that writes. Locking the directory (not a lock file inside it) means a failed
//! command leaves no file behind, and the lock is released by the kernel when the process
//! exits, however it exits. Files are opened close-on-exec, so terraform never inherits it.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use fs4::fs_std::FileExt;

use crate::exit::{Code, Failure};
use crate::output::Printer;

/// Held while alive.
#[derive(Debug)]
pub struct DirLock {
    _dir: File,
}

const POLL: Duration = Duration::from_millis(100);

/// Takes the lock, waiting up to `timeout` and saying so once when it has to wait.
pub fn lock(dir: &Path, timeout: Duration, printer: &Printer) -> Result<DirLock> {
    let file = match File::open(dir) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(crate::directory::missing(dir).into()),
        Err(e) => return Err(e).with_context(|| format!("failed to open `{}` to lock it", dir.display())),
    };
    let deadline = Instant::now() + timeout;
    let mut said = false;
    loop {
        if FileExt::try_lock_exclusive(&file).with_context(|| format!("failed to lock `{}`", dir.display()))? {
            return Ok(DirLock { _dir: file });
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Failure::new(
                Code::Locked,
                format!("`{}` is locked by another infrakit-tf run", dir.display()),
            )
            .hint(format!("wait for it to finish, or give --lock-timeout more than {}", human(timeout)))
            .into());
        }
        if !said {
            printer.status(&format!(
                "waiting up to {} for another infrakit-tf run to release `{}` (--lock-timeout)",
                human(timeout),
                dir.display()
            ));
            said = true;
        }
        std::thread::sleep(POLL.min(deadline - now));
    }
}

fn human(d: Duration) -> String {
    if d.subsec_millis() != 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs())
    }
}
