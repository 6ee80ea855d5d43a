//! The directory lock: a held lock makes writers wait, then fail with exit 5 and nothing written.

use std::fs::File;

use fs4::fs_std::FileExt;

use infrakit_tf::exit::Code;

use crate::support::{Scratch, VM_ONLY};

/// What a run that will not wait for the directory lock says (`--lock-timeout 0`, `--no-wait`).
fn locked_at_once() -> impl snapbox::IntoData {
    snapbox::str![[r#"
error: `[ROOT]/dir` is locked by another infrakit-tf run
hint: wait for it to finish, or give --lock-timeout more than 0s

"#]]
}

#[test]
fn held_lock_fails_after_the_timeout_and_writes_nothing() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", VM_ONLY);
    let holder = File::open(&s.dir).unwrap();
    assert!(FileExt::try_lock_exclusive(&holder).unwrap());
    let before = s.snapshot();
    let run = s.run(&["provision", "--no-apply", &spec, "--lock-timeout", "0"]).code(Code::Locked);
    assert_eq!(run.error_lines().len(), 1);
    s.assert_stderr(&run, locked_at_once());
    let run = s.run(&["destroy", "--no-apply", "instance-1", "--yes", "--lock-timeout", "300ms"]).code(Code::Locked);
    s.assert_stderr(
        &run,
        snapbox::str![[r#"
waiting up to 300ms for another infrakit-tf run to release `[ROOT]/dir` (--lock-timeout)
error: `[ROOT]/dir` is locked by another infrakit-tf run
hint: wait for it to finish, or give --lock-timeout more than 300ms

"#]],
    );
    assert!(s.snapshot() == before);
    // Readers do not need the lock.
    s.run(&["describe"]).ok();
    s.run(&["validate", &spec]).ok();
}

#[test]
fn waits_for_the_lock_to_be_released() {
    use std::io::BufRead;
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", VM_ONLY);
    let holder = File::open(&s.dir).unwrap();
    assert!(FileExt::try_lock_exclusive(&holder).unwrap());
    let mut cmd = std::process::Command::new(crate::support::BIN);
    cmd.args(["--dir", s.dir.to_str().unwrap(), "provision", "--no-apply", &spec, "--lock-timeout", "120s"]);
    let mut child = crate::support::spawn_piped(&mut cmd);
    // Release the lock once the command says it waits: no guess at how long it takes to start.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("waiting up to 120s for another infrakit-tf run"), "{line}");
    drop(holder);
    assert!(child.wait().unwrap().success());
    assert_eq!(s.files().len(), 1);
}
