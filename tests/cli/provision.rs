//! `provision`: what a script and a person see, and what lands in the directory.
//! Reference case IDs (`D-01`, `N-09`, ...) are those of `docs/reference/infrakit-cases.md`.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;

use infrakit_tf::exit::Code;

use crate::support::{Scratch, SCOPED, VM_ONLY};

// What provision prints and queues is the case `tests/cmd/provision-no-apply.toml`; here, what
// a case's directory comparison cannot see: files carrying Init (instance files) are not
// world-readable.
#[test]
fn instance_files_are_not_world_readable() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", SCOPED);
    let id = s.run(&["provision", "--no-apply", &spec]).ok().stdout.trim_end().to_string();
    let mode = std::fs::metadata(s.dir.join(format!("{id}.tf.json.new"))).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
}

// IDs never repeat and never wait for the clock: many provisions in a row, all distinct.
#[test]
fn ids_are_unique_without_waiting() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", VM_ONLY);
    let ids = queue(&s, &spec, 100);
    let distinct: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), 100);
    assert_eq!(s.files().len(), 100);
    // IDs run ahead of the clock rather than waiting for it: the last is far past "now".
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let last: u64 = ids.last().unwrap().trim_start_matches("instance-").parse().unwrap();
    assert!(last > now + 50, "IDs waited for the clock: last {last}, now {now}");
}

// Concurrent provisions take turns on the lock: distinct IDs and distinct dedicated slots.
#[test]
fn concurrent_provisions_get_distinct_ids_and_slots() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", SCOPED);
    let ids: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> =
            (0..6).map(|_| scope.spawn(|| s.run(&["provision", "--no-apply", &spec]).ok().stdout)).collect();
        handles.into_iter().map(|h| h.join().unwrap().trim().to_string()).collect()
    });
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 6);
    let slots: BTreeSet<String> = s.files().into_iter().filter(|f| f.starts_with("default_dedicated_")).collect();
    let expected: BTreeSet<String> = (1..=6).map(|k| format!("default_dedicated_{k}.tf.json.new")).collect();
    assert_eq!(slots, expected);
}

// D-11: a rolling update leaves slot 2 orphaned; the replacement re-attaches it, and the
// other slots' files are untouched.
#[test]
fn rolling_update_reattaches_the_slot() {
    let s = Scratch::new();
    let spec = s.write_outside(
        "spec.json",
        r#"{"Properties": {"resource": {"aws_instance": {"host": {}}, "file_storage": {"worker_fs": {"@scope": "@dedicated"}}}},
            "Init": "ID={{ var `/self/instId` }} DedicatedAttachId={{ var `/self/dedicated/attachId` }}"}"#,
    );
    let ids = queue(&s, &spec, 3);
    let before = s.snapshot();
    s.run(&["destroy", "--no-apply", &ids[1], "--reason", "rolling-update", "--yes"]).ok();
    assert_eq!(s.files().len(), 5);
    let id4 = s.run(&["provision", "--no-apply", &spec]).ok().stdout.trim().to_string();
    let vm = &s.read(&format!("{id4}.tf.json.new"))["resource"]["aws_instance"][&id4];
    assert_eq!(vm["tags"]["infrakit.attach"], "default_dedicated_2");
    let user_data = base64_decode(vm["user_data"].as_str().unwrap());
    assert_eq!(user_data, format!("ID={id4} DedicatedAttachId=2"));
    let after = s.snapshot();
    for k in 1..=3 {
        let p = s.dir.join(format!("default_dedicated_{k}.tf.json.new"));
        assert_eq!(before[&p], after[&p], "slot {k} changed");
    }
}

// An instance attached to a slot whose file is gone keeps that slot: the next instance gets
// slot 2, and the inconsistency is named on stderr. No directory state makes provision panic.
#[test]
fn a_missing_slot_file_is_warned_about_and_not_reused() {
    let s = Scratch::example();
    let spec = s.dir.join("web.json").to_str().unwrap().to_string();
    let first = s.run(&["provision", &spec, "--no-apply"]).ok().stdout.trim().to_string();
    std::fs::remove_file(s.dir.join("web_dedicated_1.tf.json.new")).unwrap();
    let run = s.run(&["provision", &spec, "--no-apply"]);
    assert!(!run.stderr.contains("panicked"), "{run:#?}");
    let run = run.ok();
    let second = run.stdout.trim();
    let warnings: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("warning:")).collect();
    assert_eq!(warnings.len(), 1, "{run:#?}");
    assert!(warnings[0].contains(&first) && warnings[0].contains("`web_dedicated_1.tf.json`"), "{run:#?}");
    let vm = &s.read(&format!("{second}.tf.json.new"))["resource"]["terraform_data"][second];
    assert_eq!(vm["input"]["tags"]["infrakit.attach"], "web_dedicated_2,web_global");
    assert!(s.files().contains(&"web_dedicated_2.tf.json.new".to_string()), "{:?}", s.files());
    assert!(!s.files().contains(&"web_dedicated_1.tf.json.new".to_string()), "{:?}", s.files());
}

// A slot file to re-attach that is garbage or a symbolic link is not silently replaced:
// provision refuses, names the file, says how to fix it, and writes nothing.
#[test]
fn a_broken_orphan_slot_is_refused() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", SCOPED);
    let ids = queue(&s, &spec, 2);
    s.run(&["destroy", "--no-apply", &ids[0], "--reason", "rolling-update", "--yes"]).ok();
    let slot = s.dir.join("default_dedicated_1.tf.json.new");
    let elsewhere = s.write_outside("elsewhere.json", r#"{"resource": {}}"#);
    let symlinked = snapbox::str![[r#"
error: `[ROOT]/dir/default_dedicated_1.tf.json.new` is a symbolic link: infrakit-tf neither follows nor replaces it
hint: restore it as a regular file of JSON, or remove it to have infrakit-tf write it afresh

"#]];
    let breakages: [(snapbox::data::Inline, &dyn Fn()); 3] = [
        (
            snapbox::str![[r#"
error: `[ROOT]/dir/default_dedicated_1.tf.json.new` is not valid JSON (expected ident at line 1 column 2): infrakit-tf does not replace it
hint: restore it as a regular file of JSON, or remove it to have infrakit-tf write it afresh

"#]],
            &|| drop(s.write("default_dedicated_1.tf.json.new", "not json {")),
        ),
        (symlinked.clone(), &|| {
            std::fs::remove_file(&slot).unwrap();
            std::os::unix::fs::symlink(&elsewhere, &slot).unwrap();
        }),
        (symlinked.clone(), &|| {
            std::fs::remove_file(&slot).unwrap();
            std::os::unix::fs::symlink(s.root.path().join("nowhere.json"), &slot).unwrap();
        }),
    ];
    for (says, breakage) in breakages {
        breakage();
        let before = s.snapshot();
        let run = s.run(&["provision", "--no-apply", &spec]).code(Code::Invalid);
        let errors = run.error_lines();
        assert_eq!(errors.len(), 1, "{run:#?}");
        s.assert_stderr(&run, says);
        assert!(s.snapshot() == before, "{}: files changed", run.stderr);
    }
}

// A managed file that is a symbolic link is never written through nor replaced.
#[test]
fn symlinked_managed_files_are_refused() {
    let s = Scratch::new();
    let spec = s.write_outside("spec.json", VM_ONLY);
    let id = queue(&s, &spec, 1).remove(0);
    let instance = format!("{id}.tf.json.new");
    let moved = s.root.path().join("instance.json");
    std::fs::copy(s.dir.join(&instance), &moved).unwrap();
    std::fs::remove_file(s.dir.join(&instance)).unwrap();
    std::os::unix::fs::symlink(&moved, s.dir.join(&instance)).unwrap();
    let shared = s.write_outside("shared.json", r#"{"resource": {}}"#);
    std::os::unix::fs::symlink(&shared, s.dir.join("managers_global.tf.json")).unwrap();
    let scoped = s.write_outside("scoped.json", SCOPED);
    let before = s.snapshot();
    for (args, says) in [
        (
            vec!["provision", "--no-apply", &scoped],
            snapbox::str![[r#"
error: `[ROOT]/dir/managers_global.tf.json` is a symbolic link: infrakit-tf neither follows nor replaces it
hint: restore it as a regular file of JSON, or remove it to have infrakit-tf write it afresh

"#]],
        ),
        (
            vec!["label", "--no-apply", &id, "a=b"],
            snapbox::str![[r#"
error: `[ROOT]/dir/instance-[..].tf.json.new` is a symbolic link: infrakit-tf neither follows nor replaces it
hint: restore it as a regular file of JSON, or remove it to have infrakit-tf write it afresh

"#]],
        ),
    ] {
        let run = s.run(&args).code(Code::Invalid);
        s.assert_stderr(&run, says);
        assert!(s.snapshot() == before, "{args:?} changed files");
    }
}

// User files are never parsed, changed or deleted, even when they are not valid JSON.
#[test]
fn user_files_are_left_alone() {
    let s = Scratch::new();
    s.write("main.tf.json", "not json at all");
    s.write("variables.tf", "variable \"x\" {}");
    s.write("extra.tf.json", "{}");
    let spec = s.write_outside("spec.json", SCOPED);
    let before = s.snapshot();
    let id = s.run(&["provision", "--no-apply", &spec]).ok().stdout;
    s.run(&["label", "--no-apply", id.trim(), "a=b"]).ok();
    s.run(&["describe"]).ok();
    s.run(&["destroy", "--no-apply", id.trim(), "--yes"]).ok();
    let mut after = s.snapshot();
    after.remove(&s.dir.join(".infrakit-tf-last-id")).expect("the issued ID is remembered");
    assert_eq!(after, before);
}

/// Provisions `n` instances of `spec`, queued; their IDs.
fn queue(s: &Scratch, spec: &str, n: usize) -> Vec<String> {
    (0..n).map(|_| s.run(&["provision", "--no-apply", spec]).ok().stdout.trim().to_string()).collect()
}

fn base64_decode(s: &str) -> String {
    use base64::Engine;
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(s).unwrap()).unwrap()
}
