//! Every console example of README.md and of the guide (`docs/*.md`) is run here, so that an
//! example that drifts from what the binary prints fails CI (STYLE 21).
//!
//! A ```` ```console ```` block is a shell session: a `$ ` line is a command (a line ending in
//! `\` goes on to the next), an optional `? N` line under it its exit code (default 0, as in
//! trycmd), and the lines below, up to the next command, what it prints on stdout and stderr
//! together, as a terminal shows them. `[..]` matches within a line and a `...` line matches any
//! lines (snapbox's wildcards). Before the comparison, both sides have what changes from run to
//! run replaced alike: timestamps, instance IDs (`instance-` and ten digits), UUIDs and durations
//! (`0.05s`, `elapsed_seconds`), so that the examples read as real output.
//!
//! The commands of one file run in order in one session: each in its own `bash`, which gets
//! the working directory and the variables the previous one left (`id=$(...)` carries over).
//! A block that cannot run in a test says so, with its reason, on the line before it:
//! `<!-- not run: REASON -->` (a cargo build, PostgreSQL, a real cloud, a benchmark).
//!
//! - README.md runs as a new user follows it: in a scratch copy of the parts of the checkout
//!   it uses, with an empty environment but `HOME` (a scratch one) and a `PATH` on which there
//!   is no terraform, so its set-up must provide one (`.ci/terraform/ensure`). The already
//!   built binary stands in for `cargo run --release` (a second, release, build would take
//!   minutes and test nothing more) and for `cargo install`: it is on `PATH`.
//! - Each page of the guide runs in a fresh copy of `examples/local` at `~/web` (`HOME` a
//!   scratch directory, shown as `/home/you`), with the terraform the rest of the suite uses.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use regex::Regex;

use crate::support::BIN;

/// One command of a console block, and what it must print and return.
#[derive(Debug)]
struct Step {
    /// Where it is: `README.md:57`.
    at: String,
    command: String,
    code: i32,
    expected: String,
}

/// The commands of every console block of `markdown` that runs, in order; and the reasons of
/// the blocks that do not.
fn steps(name: &str, markdown: &str) -> (Vec<Step>, Vec<String>) {
    let lines: Vec<&str> = markdown.lines().collect();
    let (mut steps, mut skipped) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < lines.len() {
        if lines[i] != "```console" {
            i += 1;
            continue;
        }
        let before = lines[..i].iter().rev().find(|l| !l.trim().is_empty()).copied().unwrap_or("");
        let not_run = before.strip_prefix("<!-- not run: ").and_then(|r| r.strip_suffix(" -->"));
        let start = i + 1;
        let end = start
            + lines[start..].iter().position(|l| *l == "```").unwrap_or_else(|| panic!("{name}:{i}: unclosed block"));
        i = end + 1;
        if let Some(reason) = not_run {
            assert!(!reason.trim().is_empty(), "{name}:{start}: `not run` needs a reason");
            skipped.push(format!("{name}:{start}: {reason}"));
            continue;
        }
        let mut j = start;
        while j < end {
            let at = format!("{name}:{}", j + 1);
            let mut command = lines[j]
                .strip_prefix("$ ")
                .unwrap_or_else(|| panic!("{at}: a console block's output must follow a `$ ` command"))
                .to_string();
            j += 1;
            while command.ends_with('\\') && j < end {
                command = format!("{command}\n{}", lines[j]);
                j += 1;
            }
            let mut code = 0;
            if let Some(c) = lines.get(j).filter(|_| j < end).and_then(|l| l.strip_prefix("? ")) {
                code = c.parse().unwrap_or_else(|_| panic!("{at}: `? {c}` is no exit code"));
                j += 1;
            }
            let out_end = (j..end).find(|&k| lines[k].starts_with("$ ")).unwrap_or(end);
            let expected: String = lines[j..out_end].iter().map(|l| format!("{l}\n")).collect();
            j = out_end;
            steps.push(Step { at, command, code, expected });
        }
    }
    (steps, skipped)
}

/// A shell session: a scratch root, the environment each command starts with, and the
/// working directory and variables the last command left.
struct Session {
    root: tempfile::TempDir,
    env: Vec<(String, String)>,
    /// Literal texts of the output shown otherwise in the examples (the scratch home).
    shown_as: Vec<(String, String)>,
}

impl Session {
    fn new(cwd: &Path, env: Vec<(String, String)>, shown_as: Vec<(String, String)>, root: tempfile::TempDir) -> Self {
        std::fs::write(root.path().join(".session-cwd"), cwd.as_os_str().as_encoded_bytes()).unwrap();
        std::fs::write(root.path().join(".session-env"), "").unwrap();
        Session { root, env, shown_as }
    }

    /// Runs one command as its own `bash`, stdout and stderr into one pipe; returns the exit
    /// code and what it printed.
    fn run(&self, command: &str) -> (i32, String) {
        let state = self.root.path().join(".session-env");
        let cwd = self.root.path().join(".session-cwd");
        let script = format!(
            "exec 2>&1 </dev/null\nset -a\n. '{state}'\ncd \"$(cat '{cwd}')\" || exit 99\n{command}\n__rc=$?\nset +a\nexport -n __rc\nexport -p > '{state}'\npwd > '{cwd}'\nexit $__rc\n",
            state = state.display(),
            cwd = cwd.display(),
        );
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("bash");
        let mut out = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
        let status = child.wait().unwrap();
        (status.code().unwrap_or(-1), String::from_utf8_lossy(&out).into_owned())
    }

    /// Runs `steps` in order, stopping at the first that does not do what its file shows.
    fn check(&self, steps: &[Step], rewrite: impl Fn(&str) -> String) -> Result<(), String> {
        for step in steps {
            let (code, actual) = self.run(&rewrite(&step.command));
            let shown = |text: &str| {
                let mut text = text.to_string();
                for (from, to) in &self.shown_as {
                    text = text.replace(from.as_str(), to);
                }
                volatile(&text)
            };
            let (actual, expected) = (shown(&actual), shown(&step.expected));
            let matched = crate::support::snapshots(self.root.path()).try_eq(
                Some(&step.at),
                actual.clone().into(),
                expected.into(),
            );
            if code != step.code || matched.is_err() {
                let state = std::fs::read_to_string(self.root.path().join(".session-env")).unwrap_or_default();
                return Err(format!(
                    "{}: `$ {}` exited {code} (the example says {}), printing:\n{actual}{}\nwith variables:\n{state}",
                    step.at,
                    step.command,
                    step.code,
                    matched.err().map(|e| e.to_string()).unwrap_or_default()
                ));
            }
        }
        Ok(())
    }
}

/// What changes from run to run, replaced alike in the output and in the example.
fn volatile(text: &str) -> String {
    static PATTERNS: std::sync::OnceLock<Vec<(Regex, &str)>> = std::sync::OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        [
            (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "[TIME]"),
            (r"instance-\d{10}\b", "instance-[ID]"),
            (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "[UUID]"),
            (r#""(elapsed|duration)_seconds": [0-9.]+"#, r#""${1}_seconds": [S]"#),
            (r"\b\d+(\.\d+)?s\b", "[S]s"),
        ]
        .into_iter()
        .map(|(re, to)| (Regex::new(re).unwrap(), to))
        .collect()
    });
    patterns.iter().fold(text.to_string(), |t, (re, to)| re.replace_all(&t, *to).into_owned())
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Copies `from` (a file or a directory) to `to`, keeping modes (scripts stay executable) and
/// times (`ensure` rebuilds its terraform shim when `shim.rs` is newer than the shim).
fn copy(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            copy(&e.path(), &to.join(e.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        let modified = std::fs::metadata(from).unwrap().modified().unwrap();
        std::fs::File::options().write(true).open(to).unwrap().set_modified(modified).unwrap();
    }
}

/// The directory of the binary under test, which holds no terraform.
fn bin_dir() -> PathBuf {
    Path::new(BIN).parent().unwrap().to_path_buf()
}

/// README, followed literally by a new user: a fresh checkout (the parts it uses), no
/// terraform on PATH, nothing in the environment but HOME and PATH. Its set-up must leave a
/// terraform found for the quick start.
#[test]
fn readme_examples_run_as_a_new_user_runs_them() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let (steps, _) = steps("README.md", &readme);
    assert!(steps.len() >= 10, "README shows fewer commands than expected: {steps:?}");
    let root = tempfile::tempdir().unwrap();
    let checkout = root.path().join("infrakit-tf");
    for part in [".ci/terraform/ensure", ".ci/terraform/shim.rs", "examples/local", "man", "completions"] {
        std::fs::create_dir_all(checkout.join(part).parent().unwrap()).unwrap();
        copy(&repo().join(part), &checkout.join(part));
    }
    let home = root.path().join("home");
    std::fs::create_dir(&home).unwrap();
    // PATH as the user's, less every directory that holds a terraform (or tofu); `ensure` needs
    // rustc and python3 only when it installs, `man` reads the pages README installs.
    let has_terraform = |d: &Path| d.join("terraform").exists() || d.join("tofu").exists();
    let mut path = vec![bin_dir(), home.join(".cargo/bin")];
    path.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).filter(|d| !has_terraform(d)));
    let path = std::env::join_paths(path).unwrap().into_string().unwrap();
    // Where `ensure` keeps the terraform it installs: the one `.ci/test` installed already (a
    // new user's is ~/.cache/infrakit-tf), so that each run does not download it again.
    // And the user's Rust toolchain, which `ensure` builds its shim with when it must: rustup
    // finds it under the real home.
    let real_home = std::env::var("HOME").expect("HOME");
    let cache = std::env::var("INFRAKIT_TF_CACHE").unwrap_or_else(|_| format!("{real_home}/.cache/infrakit-tf"));
    let rustup = std::env::var("RUSTUP_HOME").unwrap_or_else(|_| format!("{real_home}/.rustup"));
    let env = vec![
        ("HOME".to_string(), home.display().to_string()),
        ("PATH".to_string(), path),
        ("INFRAKIT_TF_CACHE".to_string(), cache),
        ("RUSTUP_HOME".to_string(), rustup),
    ];
    let shown_as = vec![
        (checkout.display().to_string(), "/home/you/infrakit-tf".to_string()),
        (home.display().to_string(), "/home/you".to_string()),
    ];
    let session = Session::new(&checkout, env, shown_as, root);
    // The binary under test stands in for `cargo run --release` (see the module's comment).
    let rewrite = |c: &str| c.replace("cargo run --release -- ", "infrakit-tf ");
    session.check(&steps, rewrite).unwrap_or_else(|e| panic!("{e}"));
}

/// Each page of the guide, in a fresh copy of `examples/local` at `~/web`. `DOCS=<part of a
/// name>` runs only the pages whose name has it.
#[test]
fn guide_examples_run() {
    let filter = std::env::var("DOCS").unwrap_or_default();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    assert!(pages.len() >= 8, "the guide has fewer pages than expected: {pages:?}");
    let mut failed = Vec::new();
    let (mut ran, mut skipped) = (0, Vec::new());
    for page in &pages {
        let name = format!("docs/{}", page.file_name().unwrap().to_string_lossy());
        if !name.contains(&filter) {
            continue;
        }
        let (steps, not_run) = steps(&name, &std::fs::read_to_string(page).unwrap());
        skipped.extend(not_run);
        if steps.is_empty() {
            continue;
        }
        ran += steps.len();
        let root = tempfile::tempdir().unwrap();
        let web = root.path().join("web");
        std::fs::create_dir(&web).unwrap();
        for f in ["main.tf", "web.json", "group.json"] {
            copy(&repo().join("examples/local").join(f), &web.join(f));
        }
        let rc = root.path().join(".terraformrc-empty");
        std::fs::write(&rc, "").unwrap();
        let path = std::env::join_paths(
            std::iter::once(bin_dir()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .unwrap();
        let mut env = vec![
            ("HOME".to_string(), root.path().display().to_string()),
            ("PATH".to_string(), path.into_string().unwrap()),
            ("TF_CLI_CONFIG_FILE".to_string(), rc.display().to_string()),
        ];
        if let Ok(tf) = std::env::var("INFRAKIT_TF_TEST_TERRAFORM") {
            env.push(("INFRAKIT_TF_TERRAFORM".to_string(), tf));
        }
        let shown_as = vec![(root.path().display().to_string(), "/home/you".to_string())];
        let session = Session::new(&web, env, shown_as, root);
        if let Err(e) = session.check(&steps, str::to_string) {
            eprintln!("{e}");
            failed.push(name);
        }
    }
    eprintln!("ran {ran} commands of {} pages; not run: {skipped:#?}", pages.len());
    assert!(failed.is_empty(), "examples that do not do what their page shows (above): {failed:?}");
}

/// The parser reads what the pages mean: commands, exit codes, output, markers.
#[test]
fn console_blocks_parse() {
    let md =
        "text\n```console\n$ a \\\n  b\n? 3\nout\n...\n$ c\n```\n<!-- not run: needs X -->\n\n```console\n$ d\n```\n";
    let (steps, skipped) = steps("t.md", md);
    assert_eq!(steps.len(), 2);
    assert_eq!((steps[0].command.as_str(), steps[0].code, steps[0].expected.as_str()), ("a \\\n  b", 3, "out\n...\n"));
    assert_eq!((steps[1].command.as_str(), steps[1].code, steps[1].expected.as_str()), ("c", 0, ""));
    assert_eq!(skipped, ["t.md:12: needs X"]);
    assert_eq!(volatile("2026-11-22T19:40:45Z instance-1795376445 in 0.05s"), "[TIME] instance-[ID] in [S]s");
}

/// Every relative link of README.md and the guide names a file that exists and, after `#`, a
/// heading of it (GitHub's anchors: lowercase, punctuation dropped, spaces as `-`).
#[test]
fn links_resolve() {
    let anchor = |heading: &str| -> String {
        heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    };
    let headings = |path: &Path| -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        let mut in_block = false;
        let mut out = Vec::new();
        for line in text.lines() {
            in_block ^= line.starts_with("```");
            if let Some(h) =
                line.trim_start_matches('#').strip_prefix(' ').filter(|_| !in_block && line.starts_with('#'))
            {
                out.push(anchor(h));
            }
        }
        out
    };
    let link = Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut files = vec![repo().join("README.md")];
    files.extend(
        std::fs::read_dir(repo().join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "md")),
    );
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let prose: String = text.split("```").step_by(2).collect();
        for target in link.captures_iter(&prose).map(|c| c[1].to_string()).filter(|t| !t.contains("://")) {
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let path = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            if !path.exists() || (!fragment.is_empty() && !headings(&path).iter().any(|h| h == fragment)) {
                broken.push(format!("{}: {target}", file.strip_prefix(repo()).unwrap().display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing: {broken:#?}");
}
