//! Everything the test modules share (the one place for fixtures): running the binary on a
//! scratch directory and reading what it left there; the submodules hold the fakecloud provider
//! (`cloud`), the store (`store`), the real and a fake terraform (`terraform`, `fake_terraform`),
//! shared group specs (`specs`), a freezing TCP proxy (`proxy`) and another local user (`users`).
//! A test module defines what only it uses, and takes everything shared from here.
//! Reference case IDs (`D-01`, `N-09`, ...) are those of `docs/reference/infrakit-cases.md`.
#![allow(dead_code)]

pub mod cloud;
pub mod fake_terraform;
pub mod proxy;
pub mod specs;
pub mod store;
pub mod terraform;
pub mod users;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use infrakit_tf::exit::Code;
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_infrakit-tf");

/// The binary under test with a clean environment: no `INFRAKIT_TF_*` variable but the
/// terraform under test (`.ci/test` runs the suite once per terraform) as
/// `INFRAKIT_TF_TERRAFORM`, and `cli_config` (an existing, empty file, so that terraform prints
/// no warning about a missing one) as terraform's CLI configuration. The test providers answer
/// at once and truthfully, so the cloud's answers are trusted at once (`INFRAKIT_TF_SETTLE=0s`);
/// the tests of a cloud that lags (`lag.rs`) set a settle time of their own.
#[allow(clippy::disallowed_methods)] // tests spawn the binary under test
pub fn command(cli_config: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    for (k, _) in std::env::vars() {
        if k.starts_with("INFRAKIT_TF_") {
            cmd.env_remove(k);
        }
    }
    if let Some(tf) = std::env::var_os("INFRAKIT_TF_TEST_TERRAFORM") {
        cmd.env("INFRAKIT_TF_TERRAFORM", tf);
    }
    cmd.env("TF_CLI_CONFIG_FILE", cli_config);
    cmd.env("INFRAKIT_TF_SETTLE", "0s");
    cmd
}

/// Runs `cmd` with `env` (an empty value removes the variable), `stdin` (else none), and stdout
/// and stderr captured.
pub fn finish<'a>(mut cmd: Command, env: impl IntoIterator<Item = (&'a str, &'a str)>, stdin: Option<&str>) -> Output {
    for (k, v) in env {
        if v.is_empty() {
            cmd.env_remove(k);
        } else {
            cmd.env(k, v);
        }
    }
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

/// Spawns `cmd` in the background with no stdin and stdout and stderr piped, to be read as it
/// runs.
pub fn spawn_piped(cmd: &mut Command) -> std::process::Child {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// A scratch tree: `root/` holds `root/dir/`, the managed directory, so that a test can check
/// that nothing outside the managed directory changed either.
pub struct Scratch {
    pub root: tempfile::TempDir,
    pub dir: PathBuf,
}

/// What one run printed and returned.
#[derive(Debug)]
pub struct Run {
    /// The exit code, or minus the signal that killed it.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts that it succeeded (`Code::Ok`).
    #[track_caller]
    pub fn ok(self) -> Self {
        self.code(Code::Ok)
    }

    /// Asserts that it exited with `code`, one of infrakit-tf's documented exit codes.
    #[track_caller]
    pub fn code(self, code: Code) -> Self {
        assert!(self.is(code), "expected exit {} ({code:?}), got {self:#?}", code as i32);
        self
    }

    /// Whether it exited with `code`.
    pub fn is(&self, code: Code) -> bool {
        self.code == code as i32
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:#?}"))
    }

    /// The lines that say `error:` (the summary line of a failure).
    pub fn error_lines(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| l.starts_with("error:")).collect()
    }

    /// The ID of the one instance a failed provision says it did not provision (stderr's
    /// `not provisioned yet (...) ID`).
    #[track_caller]
    pub fn not_provisioned(&self) -> String {
        let line = self.stderr.lines().find(|l| l.starts_with("not provisioned yet ("));
        let id = line.and_then(|l| l.split_whitespace().last()).unwrap_or_else(|| panic!("{self:#?}"));
        assert!(id.starts_with("instance-"), "{self:#?}");
        id.to_string()
    }
}

impl Scratch {
    /// The IDs `describe` lists, in its order.
    pub fn described_ids(&self) -> Vec<String> {
        let rows = self.run(&["describe", "--output", "json"]).ok().json();
        rows.as_array().unwrap().iter().map(|r| r["ID"].as_str().unwrap().to_string()).collect()
    }

    /// Checks what `run` printed on stderr against a snapshot (`snapbox::str![]`; rewrite with
    /// `SNAPSHOTS=overwrite`): `[ROOT]` is the scratch root, `[TIME]` a timestamp, `[..]` anything
    /// within a line.
    #[track_caller]
    pub fn assert_stderr(&self, run: &Run, expected: impl snapbox::IntoData) {
        snapshots(self.root.path()).eq(run.stderr.clone(), expected);
    }

    pub fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("dir");
        std::fs::create_dir(&dir).unwrap();
        let s = Scratch { root, dir };
        s.cli_config();
        s
    }

    /// A scratch directory holding a copy of `examples/local`.
    pub fn example() -> Self {
        let s = Scratch::new();
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/local");
        for name in ["main.tf", "web.json"] {
            std::fs::copy(example.join(name), s.dir.join(name)).unwrap();
        }
        s
    }

    /// Runs `infrakit-tf --dir <dir> ARGS` with no terminal and a clean environment.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, None, &[])
    }

    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> Run {
        self.run_with(args, Some(stdin), &[])
    }

    #[allow(clippy::disallowed_methods)] // tests spawn the binary under test
    pub fn run_with(&self, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
        let mut cmd = command(&self.cli_config());
        cmd.arg("--dir").arg(&self.dir).args(args).current_dir(self.root.path());
        let Output { status, stdout, stderr } = finish(cmd, env.iter().copied(), stdin);
        Run {
            code: status.code().unwrap_or_else(|| -std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)),
            stdout: String::from_utf8(stdout).unwrap(),
            stderr: String::from_utf8(stderr).unwrap(),
        }
    }

    /// An empty terraform CLI configuration beside the managed directory.
    pub fn cli_config(&self) -> PathBuf {
        let path = self.root.path().join("terraformrc");
        if !path.exists() {
            std::fs::File::create(&path).unwrap();
        }
        path
    }

    /// Writes a file into the managed directory (test set-up).
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::File::create(&path).unwrap().write_all(text.as_bytes()).unwrap();
        path
    }

    /// Writes a file beside the managed directory (e.g. a spec).
    pub fn write_outside(&self, name: &str, text: &str) -> String {
        let path = self.root.path().join(name);
        std::fs::File::create(&path).unwrap().write_all(text.as_bytes()).unwrap();
        path.to_str().unwrap().to_string()
    }

    pub fn read(&self, name: &str) -> Value {
        let text = std::fs::read_to_string(self.dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        serde_json::from_str(&text).unwrap()
    }

    /// The visible names in the managed directory, sorted (not `.infrakit-tf-last-id`,
    /// `.terraform`; `snapshot` sees everything).
    pub fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        names
    }

    /// Every file under the scratch root with its bytes and mode: equal snapshots mean nothing
    /// was written, moved or deleted, inside or outside the managed directory.
    pub fn snapshot(&self) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
        tree(self.root.path())
    }
}

/// How the tests compare what users read with its snapshot: exactly, but for `[ROOT]` (the
/// scratch directory `root`), `[TIME]` (a timestamp) and the wildcards `[..]` and `...`.
pub fn snapshots(root: &Path) -> snapbox::Assert {
    let mut redactions = snapbox::Redactions::new();
    redactions.insert("[ROOT]", root.to_path_buf()).unwrap();
    redactions.insert("[TIME]", regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ").unwrap()).unwrap();
    snapbox::Assert::new().action_env("SNAPSHOTS").redact_with(redactions).normalize_paths(false)
}

/// Every file and directory under `root` with its bytes (a symbolic link: its target) and mode,
/// but the readers' lock (`.infrakit-tf-generation.lock`: empty, made once by the first change
/// that succeeded in a directory; a command that fails never makes it): a mechanism, not content.
pub fn tree(root: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().is_some_and(|n| n == ".infrakit-tf-generation.lock") {
                continue;
            }
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p.clone());
                out.insert(p, (Vec::new(), meta.permissions().mode()));
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&p).unwrap();
                out.insert(p, (target.into_os_string().into_encoded_bytes(), 0));
            } else {
                out.insert(p.clone(), (std::fs::read(&p).unwrap(), meta.permissions().mode()));
            }
        }
    }
    out
}

/// A spec with a VM, a dedicated and a global resource (reference case D-01, trimmed).
pub const SCOPED: &str = r#"{"Properties": {"resource": {
    "aws_instance": {"host": {"vmp1": "vmv1"}},
    "softlayer_file_storage": {"worker_fs": {"fsp1": "fsv1", "@scope": "@dedicated"}},
    "softlayer_block_storage": {"worker_bs": {"bsp1": "bsv1", "@scope": "managers"}},
    "another-default": {"another-default-name": {"kdef-1": "vdef-1"}}}},
  "Tags": {"tag1": "val1"}}"#;

pub const VM_ONLY: &str =
    r#"{"Properties": {"resource": {"aws_instance": {"host": {"ami": "x"}}}}, "Tags": {"tier": "web"}}"#;

/// Writes an executable script that tests run at once. Another process writes it: a file this
/// process had open for writing could still be open in a child forked meanwhile by a parallel
/// test (until that child execs), and running it would then fail with "Text file busy".
#[allow(clippy::disallowed_methods)] // test support, not terraform: a one-line `sh` writer
pub fn write_executable(path: &Path, script: &str) {
    let tmp = path.with_extension("tmp");
    let mut child = Command::new("sh")
        .args(["-c", r#"cat > "$1" && chmod 755 "$1" && mv "$1" "$2""#, "sh"])
        .arg(&tmp)
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh");
    child.stdin.take().expect("piped").write_all(script.as_bytes()).expect("write script");
    assert!(child.wait().expect("wait").success(), "could not write {}", path.display());
}

/// Waits until `path` exists (an event a test can observe, never a guess at how long something
/// takes), polling; fails loudly after a generous bound, for a busy machine.
#[track_caller]
pub fn wait_for(path: &Path, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !path.exists() {
        assert!(std::time::Instant::now() < deadline, "{what}: `{}` did not appear in 120 s", path.display());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether process `pid` is alive and is the one that started at `start` (clock ticks since
/// boot, `/proc/PID/stat` field 22), not a zombie.
pub fn alive(pid: u32, start: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().collect();
    fields[0] != "Z" && fields[19].parse::<u64>().ok() == Some(start)
}

/// Waits until no process works in `dir` (a killed run's terraform and its providers finish),
/// polling `/proc/*/cwd`; bounded.
pub fn wait_until_idle(dir: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let busy = || {
        std::fs::read_dir("/proc").unwrap().filter_map(Result::ok).any(|e| {
            e.file_name().to_string_lossy().chars().all(|ch| ch.is_ascii_digit())
                && std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd == dir)
        })
    };
    while busy() {
        assert!(std::time::Instant::now() < deadline, "a process still works in {} after 2 minutes", dir.display());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
