//! CLI cases as data (STYLE 16): each `tests/cmd/<name>.toml` is one command a user runs, read
//! like a page of the manual. A case is
//!
//! - `<name>.in/`: the directory the command starts in (copied to a scratch directory first;
//!   `input = [...]` lists shared ones instead, copied in order), and the working directory, or
//!   `cwd` in it;
//! - `given`: commands run there first, each of which must succeed (what the user did before);
//! - `args` (after `infrakit-tf`), `stdin`, `env` (a value `""` removes the variable) and
//!   `code`, the exit code (default 0);
//! - `<name>.stdout` and `<name>.stderr`: exactly what it prints (a missing file: nothing);
//! - `<name>.out/`: the resulting directory. Every file in it must be there with that content,
//!   and no other file may be, except under the `ignore` prefixes (terraform's own state and
//!   `.terraform/`). Without `<name>.out/` the command must change nothing at all: every file's
//!   bytes and mode in the scratch tree are compared before and after.
//!
//! In expected text, `[..]` matches within a line, a `...` line matches any lines, `[ROOT]` is
//! the scratch directory and `[TIME]` a timestamp (`2026-01-02T03:04:05Z`). Nothing else is
//! redacted: instance IDs are deterministic because
//! each input directory that provisions records a last issued ID (`.infrakit-tf-last-id`,
//! `1999999999`), so the next one is `instance-2000000000` whatever the clock says.
//!
//! The cases run with the terraform the rest of the suite uses (`INFRAKIT_TF_TEST_TERRAFORM`,
//! passed as `INFRAKIT_TF_TERRAFORM`), no other `INFRAKIT_TF_*` variable, and an empty
//! terraform CLI configuration beside the scratch directory, as `support::Scratch::run` does.
//!
//! Run one or some: `CASES=validate cargo test --test cli cases` (a substring of the name).
//! Rewrite the expected files from what the binary does now: `SNAPSHOTS=overwrite`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use snapbox::Data;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    args: Vec<String>,
    #[serde(default)]
    code: i32,
    stdin: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    given: Vec<Vec<String>>,
    /// Input directories, relative to `tests/cmd`, copied in this order (default: `<name>.in`).
    #[serde(default)]
    input: Vec<String>,
    /// The working directory inside the scratch directory.
    cwd: Option<String>,
    /// Path prefixes (relative to the scratch directory) left out of the `.out/` comparison.
    #[serde(default)]
    ignore: Vec<String>,
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cmd")
}

#[test]
fn cases() {
    let filter = std::env::var("CASES").unwrap_or_default();
    let mut names: Vec<String> = std::fs::read_dir(cases_dir())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok()?.strip_suffix(".toml").map(str::to_string))
        .filter(|n| n.contains(&filter))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no case matches `{filter}` in {}", cases_dir().display());
    // Two workers: some cases run terraform, and the rest of the suite runs meanwhile.
    let queue = std::sync::Mutex::new(names.iter());
    let failed: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut failed = Vec::new();
                    while let Some(name) = { queue.lock().unwrap().next() } {
                        if std::panic::catch_unwind(|| run_case(name)).is_err() {
                            failed.push(name.clone());
                        }
                    }
                    failed
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    assert!(failed.is_empty(), "{} of {} cases failed (see above): {failed:?}", failed.len(), names.len());
}

fn run_case(name: &str) {
    let dir = cases_dir();
    let text = std::fs::read_to_string(dir.join(format!("{name}.toml"))).unwrap();
    let case: Case = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}.toml: {e}"));
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("case");
    std::fs::create_dir(&root).unwrap();
    let inputs = if case.input.is_empty() { vec![format!("{name}.in")] } else { case.input.clone() };
    for input in inputs.iter().map(|i| dir.join(i)).filter(|i| i.exists()) {
        copy_tree(&input, &root);
    }
    let cwd = case.cwd.as_ref().map_or_else(|| root.clone(), |c| root.join(c));
    let rc = scratch.path().join("terraformrc");
    std::fs::File::create(&rc).unwrap();
    let run = |args: &[String], stdin: Option<&str>| {
        let mut cmd = crate::support::command(&rc);
        cmd.args(args).current_dir(&cwd);
        crate::support::finish(cmd, case.env.iter().map(|(k, v)| (k.as_str(), v.as_str())), stdin)
    };
    for step in &case.given {
        let out = run(step, None);
        assert!(
            out.status.success(),
            "{name}: given `{}` failed: {}",
            step.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let before = crate::support::tree(scratch.path());
    let out = run(&case.args, case.stdin.as_deref());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("case {name}: infrakit-tf {}", case.args.join(" "));
    assert_eq!(out.status.code(), Some(case.code), "{name}: exit code\n--- stdout\n{stdout}--- stderr\n{stderr}");
    let assert = crate::support::snapshots(&root);
    for (stream, actual) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let expected = dir.join(format!("{name}.{stream}"));
        let expected =
            if expected.exists() || !actual.is_empty() { Data::read_from(&expected, None) } else { Data::new() };
        assert.eq(actual.clone(), expected);
    }
    let out_dir = dir.join(format!("{name}.out"));
    if out_dir.exists() {
        assert.subset_matches(&out_dir, &root);
        let ignored = |rel: &str| case.ignore.iter().any(|p| rel.starts_with(p.as_str()));
        let extra: Vec<String> = crate::support::tree(&root)
            .into_keys()
            .filter(|p| !p.is_dir())
            .filter_map(|p| p.strip_prefix(&root).ok().map(|r| r.to_string_lossy().into_owned()))
            .filter(|rel| !ignored(rel) && !out_dir.join(rel).exists())
            .collect();
        if std::env::var("SNAPSHOTS").as_deref() == Ok("overwrite") {
            for rel in &extra {
                std::fs::create_dir_all(out_dir.join(rel).parent().unwrap()).unwrap();
                std::fs::copy(root.join(rel), out_dir.join(rel)).unwrap();
            }
        } else {
            assert!(extra.is_empty(), "{name}: files not in {name}.out/: {extra:?}");
        }
    } else {
        assert!(crate::support::tree(scratch.path()) == before, "{name}: changed files (it has no {name}.out/)");
    }
}

/// Copies a case's input directory (`.keep` files only make their directory exist).
fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&e.path(), &target);
        } else if e.file_name() != ".keep" {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}
