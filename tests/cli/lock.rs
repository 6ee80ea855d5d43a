//! The directory lock: a held lock makes writers wait, then fail with exit 5 and nothing written.

use std::fs::File;
use std::time::Duration;

use fs4::fs_std::FileExt;

use crate::support::{Scratch, VM_ONLY};

const LOCKED: i32 = 5;

#[test]
fn held_lock_fails_after_the_timeout_and_writes_nothing() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", VM_ONLY);
    let holder = File::open(&s.dir).unwrap();
    assert!(FileExt::try_lock_exclusive(&holder).unwrap());
    let before = s.snapshot();
    let run = s.run(&["provision", "--no-apply", &spec, "--lock-timeout", "0"]).code(LOCKED);
    assert_eq!(run.error_lines().len(), 1);
    assert!(run.error_lines()[0].contains("is locked by another infrakit-tf run"), "{run:#?}");
    assert!(run.stderr.contains("--lock-timeout"), "the message names the flag: {run:#?}");
    let run = s.run(&["destroy", "--no-apply", "instance-1", "--yes", "--lock-timeout", "300ms"]).code(LOCKED);
    assert!(run.stderr.contains("waiting up to 300ms"), "{run:#?}");
    assert!(s.snapshot() == before);
    // Readers do not need the lock.
    s.run(&["describe"]).ok();
    s.run(&["validate", &spec]).ok();
}

#[test]
fn waits_for_the_lock_to_be_released() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", VM_ONLY);
    let holder = File::open(&s.dir).unwrap();
    assert!(FileExt::try_lock_exclusive(&holder).unwrap());
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        drop(holder);
    });
    let run = s.run(&["provision", "--no-apply", &spec, "--lock-timeout", "30s"]).ok();
    release.join().unwrap();
    assert!(run.stderr.contains("waiting up to 30s for another infrakit-tf run"), "{run:#?}");
    assert_eq!(s.files().len(), 1);
}
