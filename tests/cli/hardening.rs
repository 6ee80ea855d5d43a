//! What an adversarial run against the tool found (full disks, closed pipes, killed runs,
//! readers beside writers), each on a real terraform: a stderr that cannot be written, a
//! relative `XDG_CACHE_HOME`, temporary directories of killed runs, a change half done that
//! readers must show, and readers that must see one moment while writers run. And what already
//! held, kept holding.
#![allow(clippy::disallowed_methods)] // spawns the binary with its own stdio, and strace

use std::collections::BTreeSet;
use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;
use crate::support::{command, Scratch, BIN};

/// The example's spec (in the managed directory; runs start in the scratch root).
fn web(s: &Scratch) -> String {
    s.dir.join("web.json").to_str().unwrap().to_string()
}

/// Runs infrakit-tf ARGS in `s` with `stdout` and `stderr` as given: what it returned.
fn run_to(s: &Scratch, args: &[&str], stdout: Stdio, stderr: Stdio) -> i32 {
    let mut cmd = command(&s.cli_config());
    cmd.arg("--dir").arg(&s.dir).args(args).current_dir(s.root.path());
    let status = cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr).status().unwrap();
    status.code().unwrap_or(-1)
}

fn dev_full() -> Stdio {
    Stdio::from(File::options().write(true).open("/dev/full").unwrap())
}

/// The writing end of a pipe whose reading end is closed.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills two descriptors, which we own from here on.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    drop(unsafe { OwnedFd::from_raw_fd(fds[0]) });
    Stdio::from(unsafe { OwnedFd::from_raw_fd(fds[1]) })
}

// A stderr that cannot be written (`2>/dev/full`, a closed pipe) loses the messages, nothing
// more: exit codes and stdout are what they would be, and no record of a running terraform
// is left behind (before, each of these exited 101, a panic in a message).
#[test]
fn a_stderr_that_cannot_be_written_loses_messages_not_the_run() {
    for (what, stderr) in [("/dev/full", dev_full as fn() -> Stdio), ("a closed pipe", closed_pipe)] {
        let s = Scratch::example();
        let out = s.root.path().join("out");
        let to_file = || Stdio::from(File::create(&out).unwrap());
        assert_eq!(run_to(&s, &["provision", &web(&s)], to_file(), stderr()), 0, "provision, stderr on {what}");
        let id = std::fs::read_to_string(&out).unwrap().trim().to_string();
        assert!(id.starts_with("instance-"), "the ID on stdout, stderr on {what}: {id:?}");
        assert_eq!(run_to(&s, &["describe", "--output", "json"], to_file(), stderr()), 0, "describe, {what}");
        let rows: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!(rows[0]["status"], "created", "{what}");
        assert_eq!(run_to(&s, &["destroy", "--yes", &id], Stdio::null(), stderr()), 0, "destroy, {what}");
        assert!(!s.dir.join(".infrakit-tf-terraform.json").exists(), "no record of a terraform left ({what})");
        assert_eq!(
            run_to(&s, &["destroy", "--yes", "instance-1"], Stdio::null(), stderr()),
            4,
            "exit codes stay ({what})"
        );
    }
}

// What already held: stdout on /dev/full is an error (exit 1), a closed stdout pipe is not.
#[test]
fn a_full_stdout_is_an_error_and_a_closed_one_is_not() {
    let s = Scratch::example();
    s.run(&["provision", &web(&s)]).ok();
    assert_eq!(run_to(&s, &["describe"], dev_full(), Stdio::null()), 1);
    assert_eq!(run_to(&s, &["describe"], closed_pipe(), Stdio::null()), 0);
}

// The XDG Base Directory spec: a relative XDG_CACHE_HOME is invalid and ignored (before, the
// cache was written under the working directory: `relcache/` wherever cron ran). An absolute
// one is honoured; a damaged entry, an unwritable or an unset HOME are worked around.
#[test]
fn the_version_cache_honours_xdg_and_ignores_a_relative_one() {
    let s = Scratch::example();
    let home = s.root.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let home = home.to_str().unwrap();
    let run = s.run_with(&["validate", &web(&s)], None, &[("HOME", home), ("XDG_CACHE_HOME", "relcache")]);
    run.ok();
    s.run_with(&["provision", "--dry-run", &web(&s)], None, &[("HOME", home), ("XDG_CACHE_HOME", "relcache")]).ok();
    assert!(!s.root.path().join("relcache").exists(), "nothing under the working directory");
    assert!(!s.dir.join("relcache").exists());
    assert!(
        Path::new(home).join(".cache/infrakit-tf/terraform-version").is_dir(),
        "the relative one ignored: ~/.cache"
    );
    let cache = s.root.path().join("cache");
    let cache_str = cache.to_str().unwrap();
    s.run_with(&["provision", "--dry-run", &web(&s)], None, &[("HOME", home), ("XDG_CACHE_HOME", cache_str)]).ok();
    let entries: Vec<_> = std::fs::read_dir(cache.join("infrakit-tf/terraform-version")).unwrap().collect();
    assert_eq!(entries.len(), 1, "an absolute XDG_CACHE_HOME is honoured");
    let entry = entries[0].as_ref().unwrap().path();
    std::fs::write(&entry, b"{damaged").unwrap();
    s.run_with(&["provision", "--dry-run", &web(&s)], None, &[("HOME", home), ("XDG_CACHE_HOME", cache_str)]).ok();
    for env in [[("HOME", "/proc/unwritable"), ("XDG_CACHE_HOME", "")], [("HOME", ""), ("XDG_CACHE_HOME", "")]] {
        s.run_with(&["provision", "--dry-run", &web(&s)], None, &env).ok();
    }
}

/// The entries of `tmp` that are ours.
fn ours(tmp: &Path) -> BTreeSet<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("infrakit-tf-"))
        .collect()
}

// Runs killed in the middle (cron's timeout) leave their temporary directories in TMPDIR; the
// next run, whatever it is, removes them. Normal and failed runs leave nothing.
#[test]
fn temporary_directories_of_killed_runs_are_removed_by_the_next_run() {
    let c = Cloud::new();
    let tmp = c.s.root.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let tmpdir = [("TMPDIR", tmp.to_str().unwrap())];
    c.run_env(&["provision", &c.spec()], &tmpdir).ok();
    c.run_env(&["provision", "--no-apply", &c.spec()], &tmpdir).ok();
    c.delay_creates(60_000);
    for args in [["reconcile", "--check"], ["reconcile", "--no-wait"]] {
        let mut run = c.start(&args, &tmpdir);
        assert!(run.wait_for("plan:").is_some(), "{:?}", run.seen);
        run.kill(true);
        run.finish();
        crate::support::wait_until_idle(&c.s.dir);
        assert!(!ours(&tmp).is_empty(), "the killed `{}` left its temporary directory", args.join(" "));
    }
    c.delay_creates(0);
    c.run_env(&["describe"], &tmpdir).ok();
    assert!(ours(&tmp).is_empty(), "the next run removed them: {:?}", ours(&tmp));
    c.run_env(&["reconcile", "--check"], &tmpdir).code(Code::Pending);
    c.run_env(&["reconcile"], &tmpdir).ok();
    c.run_env(&["provision", "--dry-run", &c.spec()], &tmpdir).ok();
    c.run_env(&["destroy", "--yes", "instance-1"], &tmpdir).code(Code::NotFound);
    assert!(ours(&tmp).is_empty(), "normal and failed runs leave nothing: {:?}", ours(&tmp));
}

/// Runs infrakit-tf ARGS in `s` under strace with `faults` (its options: what to trace,
/// what to inject, on which paths), following terraform too: what it printed and returned.
fn under_strace(s: &Scratch, faults: &[String], args: &[&str]) -> (i32, String) {
    let out = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null"])
        .args(faults)
        .arg(BIN)
        .arg("--dir")
        .arg(&s.dir)
        .args(args)
        .env("TF_CLI_CONFIG_FILE", s.cli_config())
        .env("INFRAKIT_TF_TERRAFORM", crate::support::terraform::terraform_program())
        .stdin(Stdio::null())
        .output()
        .expect("strace (Debian's strace; .ci/test installs it)");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs infrakit-tf ARGS in `s` under strace, every `rename` from the `from`-th on failing
/// with ENOSPC (a disk that fills up as the change is written): what it printed and returned.
fn with_full_disk_from_rename(s: &Scratch, from: u32, args: &[&str]) -> (i32, String) {
    let renames = "rename,renameat,renameat2";
    under_strace(
        s,
        &["-e".into(), format!("trace={renames}"), "-e".into(), format!("inject={renames}:error=ENOSPC:when={from}+")],
        args,
    )
}

// The tool's own write fails (ENOSPC) during a rolling update's destroy, and so does its undo
// (the disk still full): the instance's file is gone, its machine in the state, the undo
// journal pending. Every reader shows the instance as it was, and says that a change is half
// done and how it will be finished; `reconcile --check` is not clean (before, describe exited
// 0 without the instance and without a word).
#[test]
fn a_change_whose_undo_failed_is_shown_as_it_was_by_every_reader() {
    let s = Scratch::example();
    let id = s.run(&["provision", &web(&s)]).ok().stdout.trim().to_string();
    // The first rename is the journal's; from the second on, every write fails, the undo's too.
    let (code, stderr) =
        with_full_disk_from_rename(&s, 2, &["destroy", "--yes", "--no-apply", "--reason", "rolling-update", &id]);
    assert_eq!(code, Code::Unwritable as i32, "{stderr}");
    assert!(stderr.contains("could not be undone"), "{stderr}");
    assert!(s.dir.join(".infrakit-tf-journal.json").exists(), "the undo journal is pending");
    assert!(!s.dir.join(format!("{id}.tf.json")).exists(), "the instance's file is gone");

    let run = s.run(&["describe", "--output", "json"]).ok();
    let rows = run.json();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{}", run.stdout);
    assert_eq!(rows[0]["ID"], id.as_str());
    assert_eq!(rows[0]["status"], "created");
    assert!(run.stderr.contains(&format!("warning: a change was left half done ({id}.tf.json")), "{}", run.stderr);
    assert!(
        run.stderr.contains("the next command that takes the lock (`infrakit-tf reconcile`) undoes it"),
        "{}",
        run.stderr
    );
    let sweep = s.run(&["sweep-orphans", "--dry-run", "--output", "json"]).ok();
    assert!(sweep.json()["orphans"].as_array().unwrap().is_empty(), "its slot is not an orphan: {}", sweep.stdout);
    // The disk still full: a check cannot finish the change, and says so.
    let (code, stderr) = with_full_disk_from_rename(&s, 1, &["reconcile", "--check"]);
    assert_eq!(code, Code::Unwritable as i32, "{stderr}");
    // Space again: the next command undoes it, and everything is as before the destroy.
    s.run(&["reconcile", "--check"]).ok();
    assert!(!s.dir.join(".infrakit-tf-journal.json").exists());
    assert!(s.dir.join(format!("{id}.tf.json")).exists());
}

/// Runs infrakit-tf ARGS in `s` under strace, each of terraform's writes to its state file
/// held up 300 ms: terraform rewrites it in place, so it stays truncated that long each time
/// (what a reader meets on a busy disk, made wide).
fn with_slow_state_writes(s: &Scratch, args: &[&str]) {
    let state = s.dir.join("terraform.tfstate").to_str().unwrap().to_string();
    let faults =
        ["-P".into(), state, "-e".into(), "trace=write".into(), "-e".into(), "inject=write:delay_enter=300000".into()];
    let mut all = vec!["--lock-timeout", "5m"];
    all.extend_from_slice(args);
    let (code, stderr) = under_strace(s, &faults, &all);
    assert_eq!(code, Code::Ok as i32, "{args:?}: {stderr}");
}

// Readers beside writers (describe, sweep-orphans --dry-run while other instances are
// provisioned and destroyed in the same directory): each sees one moment, the files and the
// state as of one committed change. Instances created long before are always `created`, never
// orphans, their slots neither; the state is never read half written (before, such reads
// showed them `pending`, or listed them as orphans, or fell back to the files only).
#[test]
fn readers_beside_writers_see_one_moment() {
    let s = Scratch::example();
    let old: BTreeSet<String> =
        (0..3).map(|_| s.run(&["provision", &web(&s)]).ok().stdout.trim().to_string()).collect();
    let rows = s.run(&["describe", "--output", "json"]).ok().json();
    let old_files: BTreeSet<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["attachments"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()))
        .chain(old.iter().cloned())
        .collect();
    // An orphan (a slot file nothing attaches), so that every `sweep-orphans --dry-run` plans
    // its destroy in a mirror, with the state as of its moment.
    s.write(
        "stray_dedicated_1.tf.json",
        r#"{"resource": {"terraform_data": {"stray-1-data": {"input": {"size_gb": 1}}}}}"#,
    );
    s.run(&["reconcile"]).ok();
    let done = std::sync::atomic::AtomicBool::new(false);
    let (reads, bad) = std::thread::scope(|scope| {
        scope.spawn(|| {
            for _ in 0..4 {
                let spec = web(&s);
                let out = s.run(&["provision", "--count", "2", "--no-apply", &spec]).ok().stdout;
                with_slow_state_writes(&s, &["reconcile"]);
                let mut args = vec!["destroy", "--yes", "--no-apply"];
                args.extend(out.split_whitespace());
                s.run(&args).ok();
                with_slow_state_writes(&s, &["reconcile"]);
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let (mut reads, mut bad) = (0, Vec::new());
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            reads += 1;
            let run = s.run(&["describe", "--output", "json"]);
            if !run.is(Code::Ok) || run.stderr.contains("files only") {
                bad.push(format!("describe: {run:?}"));
                continue;
            }
            for row in run.json().as_array().unwrap() {
                if old.contains(row["ID"].as_str().unwrap()) && row["status"] != "created" {
                    bad.push(format!("describe: {} is {}", row["ID"], row["status"]));
                }
            }
            let sweep = s.run(&["sweep-orphans", "--dry-run", "--output", "json"]);
            if !sweep.is(Code::Ok) {
                bad.push(format!("sweep-orphans: {sweep:?}"));
                continue;
            }
            let orphans = sweep.json()["orphans"].as_array().unwrap().clone();
            if !orphans.iter().any(|o| o["file"] == "stray_dedicated_1.tf.json") {
                bad.push(format!("sweep-orphans: the stray slot is not listed: {orphans:?}"));
            }
            for orphan in &orphans {
                let file = orphan["file"].as_str().unwrap();
                if old_files.iter().any(|f| file.starts_with(&format!("{f}.tf.json"))) {
                    bad.push(format!("sweep-orphans: a live file listed as an orphan: {file}"));
                }
            }
        }
        (reads, bad)
    });
    assert!(reads >= 10, "only {reads} reads");
    assert!(bad.is_empty(), "{} of {reads} reads saw half a change: {bad:#?}", bad.len());
}

/// Runs infrakit-tf ARGS in `s` under strace, terraform's every write to its state, its backup
/// and `errored.tfstate` failing with ENOSPC (a full disk, as terraform meets it): what it
/// printed and returned.
fn with_terraform_unable_to_save(s: &Scratch, args: &[&str]) -> (i32, String) {
    let mut faults = Vec::new();
    for name in ["terraform.tfstate", "terraform.tfstate.backup", "errored.tfstate"] {
        faults.extend(["-P".to_string(), s.dir.join(name).to_str().unwrap().to_string()]);
    }
    faults.extend(["-e", "trace=write", "-e", "inject=write:error=ENOSPC"].map(String::from));
    under_strace(s, &faults, args)
}

// Terraform cannot save its state (nor its backup, nor `errored.tfstate`): it prints the whole
// state as its last resort, which the tool's capture of its output swallowed (exit 7, and what
// it had just made or destroyed recorded nowhere). Now the dump is kept, in a file the message
// names, and the next run refuses (exit 13) until it is pushed. For a provision and for a
// rolling update's destroy.
#[test]
fn a_state_terraform_could_not_save_is_kept_and_stops_the_next_run() {
    let s = Scratch::example();
    let id = s.run(&["provision", &web(&s)]).ok().stdout.trim().to_string();
    let cases: [Vec<&str>; 2] =
        [vec!["provision", "--output", "json"], vec!["destroy", "--yes", "--reason", "rolling-update", &id]];
    for mut args in cases {
        let spec = web(&s);
        if args[0] == "provision" {
            args.push(&spec);
        }
        let (code, stderr) = with_terraform_unable_to_save(&s, &args);
        assert_eq!(code, Code::TerraformFailed as i32, "{args:?}: {stderr}");
        let kept = s.dir.join("errored.tfstate");
        assert!(stderr.contains("could not save terraform's state"), "{stderr}");
        assert!(stderr.contains(&format!("it is kept in `{}`", kept.display())), "{stderr}");
        let dump: Value = serde_json::from_slice(&std::fs::read(&kept).unwrap()).unwrap();
        assert!(dump["lineage"].is_string() && dump["serial"].is_u64(), "a whole state: {dump}");
        // The next run refuses until it is pushed.
        let refused = s.run(&["reconcile"]).code(Code::StateLost);
        assert!(refused.stderr.contains("holds a state terraform could not save"), "{}", refused.stderr);
        // The dump is the newer state, though its serial may be the one on disk.
        crate::support::terraform::terraform(&s.dir, &["state", "push", "-force", "errored.tfstate"]);
        std::fs::remove_file(&kept).unwrap();
        s.run(&["reconcile"]).ok();
    }
    // Everything the runs did is in the state: nothing to do, nothing made twice.
    s.run(&["reconcile", "--check"]).ok();
}

// A disk that fills up during an apply, for real (a small tmpfs): terraform cannot write its
// state's backup, nor `errored.tfstate`, and prints the state instead. It is kept (in the
// directory if terraform's failure left room there, else in the state directory of the XDG
// spec), the message names where, and the next run finds it and refuses (exit 13).
#[test]
fn a_dump_on_a_full_disk_is_kept_where_there_is_room_and_found() {
    let s = Scratch::example();
    let state_home = s.root.path().join("state-home");
    let script = format!(
        r#"set -e
        cp -a "$DIR/." /tmp/keep; mount -t tmpfs -o size=2m tmpfs "$DIR"; cp -a /tmp/keep/. "$DIR/"
        "$BIN" --dir "$DIR" provision "$DIR/web.json" >/dev/null 2>&1
        "$BIN" --dir "$DIR" provision --no-apply "$DIR/web.json" >/dev/null 2>&1
        # Two pages left: the record of the running terraform and terraform's lock info, none
        # for the state's backup, the state, nor errored.tfstate.
        avail=$(df --output=avail -B1 "$DIR" | tail -1)
        head -c $((avail - 9000)) /dev/zero > "$DIR/filler" 2>/dev/null || true
        set +e
        XDG_STATE_HOME={home} "$BIN" --dir "$DIR" reconcile 2>&1; echo "exit=$?"
        XDG_STATE_HOME={home} "$BIN" --dir "$DIR" reconcile 2>&1; echo "exit=$?"
        test -e "$DIR/errored.tfstate" && echo "in the directory""#,
        home = state_home.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "sh", "-c", &script])
        .env("BIN", BIN)
        .env("DIR", &s.dir)
        .env("TF_CLI_CONFIG_FILE", s.cli_config())
        .env("INFRAKIT_TF_TERRAFORM", crate::support::terraform::terraform_program())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.contains("the raw state data is printed above"), "terraform dumped its state: {out}");
    let exits: Vec<&str> = out.lines().filter(|l| l.starts_with("exit=")).collect();
    assert_eq!(exits, ["exit=7", "exit=13"], "{out}");
    let kept = if out.contains("in the directory") {
        s.dir.join("errored.tfstate")
    } else {
        let found: Vec<_> = std::fs::read_dir(state_home.join("infrakit-tf/errored")).unwrap().collect();
        found[0].as_ref().unwrap().path()
    };
    assert!(out.contains(&format!("it is kept in `{}`", kept.display())), "{out}");
    assert!(out.contains("holds a state terraform could not save"), "the next run found it: {out}");
}

// Terraform's output (its emergency state dump with it) is followed through a file in memory,
// not a temporary file: a temporary directory that cannot be written (full, or gone) no longer
// stops a provision, nor loses what terraform printed (before: "failed to create a temporary
// file for terraform's output", exit 1).
#[test]
fn terraforms_output_does_not_need_the_temporary_directory() {
    let s = Scratch::example();
    let run = s.run_with(&["provision", &web(&s)], None, &[("TMPDIR", "/nonexistent/tmp")]).ok();
    assert!(run.stderr.contains("applied: "), "{}", run.stderr);
    assert_eq!(s.run(&["describe", "--output", "json"]).ok().json().as_array().unwrap().len(), 1);
}

// A health command's output goes to our stderr: when that cannot be written, its output is
// dropped, the check is what the command says (before, `echo` in the check hit the closed
// pipe, the check failed, and the rolling update stopped: exit 15).
#[test]
fn a_health_check_is_not_failed_by_a_stderr_that_cannot_be_written() {
    let group =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/local/group.json")).unwrap();
    for (what, stderr) in [("/dev/full", dev_full as fn() -> Stdio), ("a closed pipe", closed_pipe)] {
        let s = Scratch::example();
        let spec = s.root.path().join("group.json");
        std::fs::write(&spec, group.replace(r#""Size": 3"#, r#""Size": 1"#)).unwrap();
        let spec = spec.to_str().unwrap();
        s.run(&["reconcile", "--group", spec]).ok();
        std::fs::write(spec, group.replace(r#""Size": 3"#, r#""Size": 1"#).replace("hello from", "hello again from"))
            .unwrap();
        let args = ["reconcile", "--group", spec, "--health-cmd", "echo healthy; echo fine >&2"];
        assert_eq!(run_to(&s, &args, Stdio::null(), stderr()), 0, "the rolling update, stderr on {what}");
        s.run(&["reconcile", "--group", spec, "--check"]).ok();
    }
}
