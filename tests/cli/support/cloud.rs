//! A scratch directory wired to the `fakecloud` provider (tests/fakecloud): a real provider
//! whose cloud is a directory of JSON files, so machines can vanish behind Terraform's back.
//! It is installed the way a user's provider is: from a filesystem mirror, by the `init` that
//! infrakit-tf runs on first use (no dev_overrides, so terraform prints no override warning).
#![allow(clippy::disallowed_methods)] // builds the provider with cargo

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use crate::support::{Run, Scratch};

/// Builds the provider once per test run; `.ci/test` has built it already.
fn provider() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "fakecloud"])
            .current_dir(root)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the fakecloud provider failed (it needs protoc: .ci/test installs it)");
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or(root.join("target"), PathBuf::from);
        target.join("debug/terraform-provider-fakecloud")
    })
}

pub struct Cloud {
    pub s: Scratch,
    pub cloud: PathBuf,
    rc: PathBuf,
}

/// The group's spec: a VM, a dedicated data volume and a shared (global) volume.
pub const WEB: &str = r##"{"Properties": {"resource": {
    "fakecloud_instance": {"vm": {"name": "web", "user_data": "#!/bin/sh\necho {{ var `/self/instId` }}"}},
    "fakecloud_volume": {"data": {"@scope": "@dedicated", "size": 5}, "nfs": {"@scope": "shared", "size": 50}}}},
  "Tags": {"infrakit.group": "web"}}"##;

impl Cloud {
    pub fn new() -> Self {
        let s = Scratch::new();
        let root = s.root.path().to_path_buf();
        let cloud = root.join("cloud");
        std::fs::create_dir_all(&cloud).unwrap();
        // Also as `hashicorp/fakecloud`: what a configuration that never declares the provider
        // gets, from resource types alone.
        for namespace in ["infrakit", "hashicorp"] {
            let pkg = root.join(format!("mirror/registry.terraform.io/{namespace}/fakecloud/0.0.1/linux_amd64"));
            std::fs::create_dir_all(&pkg).unwrap();
            std::os::unix::fs::symlink(provider(), pkg.join("terraform-provider-fakecloud")).unwrap();
        }
        let rc = root.join("fakecloud.tfrc");
        let config = format!(
            "provider_installation {{\n  filesystem_mirror {{\n    path    = \"{}\"\n    include = [\"infrakit/fakecloud\", \"hashicorp/fakecloud\"]\n  }}\n  direct {{\n    exclude = [\"infrakit/fakecloud\", \"hashicorp/fakecloud\"]\n  }}\n}}\n",
            root.join("mirror").display()
        );
        s.write_outside("fakecloud.tfrc", &config);
        // The cloud directory comes from FAKECLOUD_DIR (see `run`), so that a copy of this
        // scratch tree (`Cloud::copy`) is a separate cloud with the same configuration.
        s.write(
            "main.tf",
            "terraform {\n  required_providers {\n    fakecloud = { source = \"infrakit/fakecloud\" }\n  }\n}\n\nprovider \"fakecloud\" {}\n",
        );
        // The VM type is declared in the directory's configuration file, as a user would.
        s.write("infrakit-tf.json", r#"{"vm_types": {"fakecloud_instance": {}}}"#);
        s.write_outside("web.json", WEB);
        Cloud { s, cloud, rc }
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.run_env(args, &[])
    }

    /// Runs infrakit-tf ARGS with extra environment variables.
    pub fn run_env(&self, args: &[&str], extra: &[(&str, &str)]) -> Run {
        let mut env =
            vec![("TF_CLI_CONFIG_FILE", self.rc.to_str().unwrap()), ("FAKECLOUD_DIR", self.cloud.to_str().unwrap())];
        env.extend_from_slice(extra);
        self.s.run_with(args, None, &env)
    }

    /// An independent copy of this scratch tree (directory, state, `.terraform`, cloud), as it
    /// is now: each crash point starts from the same prepared group without re-creating it.
    #[cfg(feature = "fault-injection")]
    pub fn copy(&self) -> Cloud {
        let root = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", self.s.root.path().display()))
            .arg(root.path())
            .status()
            .unwrap();
        assert!(status.success(), "cp -a failed");
        let s = Scratch { dir: root.path().join("dir"), root };
        Cloud { cloud: s.root.path().join("cloud"), rc: s.root.path().join("fakecloud.tfrc"), s }
    }

    /// A second host of the same cloud: a directory of its own (another path) with copies of
    /// this one's `main.tf` and `infrakit-tf.json`, as a user distributes them; the same cloud,
    /// provider and spec. Nothing else is shared: no state, no `.terraform`.
    pub fn another_host(&self) -> Cloud {
        let s = Scratch::new();
        for name in ["main.tf", "infrakit-tf.json"] {
            std::fs::copy(self.s.dir.join(name), s.dir.join(name)).unwrap();
        }
        std::fs::copy(self.s.root.path().join("web.json"), s.root.path().join("web.json")).unwrap();
        Cloud { s, cloud: self.cloud.clone(), rc: self.rc.clone() }
    }

    /// Runs infrakit-tf ARGS in its own process group until a line of its stderr contains
    /// `needle`, then kills the whole group (infrakit-tf and its terraform) with SIGKILL: a
    /// crash, or a machine losing power. Returns the stderr read until then.
    pub fn kill_during(&self, args: &[&str], needle: &str) -> String {
        self.kill_at(args, needle, true)
    }

    /// Like `kill_during`, but SIGKILL reaches infrakit-tf alone when `group` is false (cron's
    /// timeout, the OOM killer).
    pub fn kill_at(&self, args: &[&str], needle: &str, group: bool) -> String {
        let mut run = self.start(args, &[]);
        let found = run.wait_for(needle);
        run.kill(group);
        let seen = run.finish().stderr;
        assert!(found.is_some(), "never saw `{needle}`: {seen}");
        seen
    }

    /// Starts infrakit-tf ARGS (with extra environment) in its own process group, in the
    /// background: its stderr can be watched line by line as it runs.
    pub fn start(&self, args: &[&str], extra: &[(&str, &str)]) -> Started {
        use std::io::{BufRead, Read};
        use std::os::unix::process::CommandExt;
        let mut cmd = crate::support::command(&self.rc);
        cmd.arg("--dir").arg(&self.s.dir).args(args).process_group(0).env("FAKECLOUD_DIR", &self.cloud);
        cmd.envs(extra.iter().copied());
        let mut child = crate::support::spawn_piped(&mut cmd);
        let (tx, lines) = std::sync::mpsc::channel();
        let err = std::io::BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                let _ = tx.send((std::time::Instant::now(), line));
            }
        });
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = out.read_to_string(&mut text);
            text
        });
        Started { child, lines, stdout: Some(stdout), seen: Vec::new() }
    }

    /// Declares the fakecloud types' look-ups in `infrakit-tf.json` (by the tags infrakit-tf
    /// writes, through the provider's data sources), as a user of another provider would.
    pub fn with_lookups(&self) {
        let mut config: Value = self.s.read("infrakit-tf.json");
        for (rtype, data_source) in
            [("fakecloud_instance", "fakecloud_instances"), ("fakecloud_volume", "fakecloud_volumes")]
        {
            config["lookups"][rtype] = serde_json::json!({"data_source": data_source, "arguments": {"tags": "{{tags}}"}, "ids": "ids", "tags": "tags"});
        }
        self.s.write("infrakit-tf.json", &config.to_string());
    }

    /// Runs infrakit-tf ARGS in its own process group and SIGKILLs the whole group as soon as
    /// the cloud holds an object it did not hold before (with a boot delay, `boot`, terraform
    /// has not recorded it yet). Returns the objects the killed run made.
    pub fn kill_at_first_new_object(&self, args: &[&str]) -> std::collections::BTreeSet<String> {
        let before: std::collections::BTreeSet<String> = self.objects().into_keys().collect();
        let mut run = self.start(args, &[]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let now: std::collections::BTreeSet<String> = self.objects().into_keys().collect();
            if now.difference(&before).next().is_some() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no new object in 120 s: {:?}", run.seen);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        run.kill(true);
        run.finish();
        crate::support::wait_until_idle(&self.s.dir);
        let after: std::collections::BTreeSet<String> = self.objects().into_keys().collect();
        after.difference(&before).cloned().collect()
    }

    /// `kill_at_first_new_object` while every create takes 3 s to report its machine: the
    /// killed terraform never recorded what it made. Creates report at once again afterwards.
    pub fn kill_while_booting(&self, args: &[&str]) -> std::collections::BTreeSet<String> {
        self.boot(3000);
        let made = self.kill_at_first_new_object(args);
        self.boot(0);
        made
    }

    /// Makes every create report its machine `ms` milliseconds after it exists (0: at once).
    pub fn boot(&self, ms: u64) {
        let knob = self.cloud.join("boot-ms");
        if ms == 0 {
            let _ = std::fs::remove_file(&knob);
        } else {
            std::fs::write(&knob, ms.to_string().as_bytes()).unwrap();
        }
    }

    /// How many VMs in the cloud carry each instance's name tag.
    pub fn machines_per_instance(&self) -> std::collections::BTreeMap<String, usize> {
        let mut out = std::collections::BTreeMap::new();
        for o in self.objects().values().filter(|o| o["type"] == "fakecloud_instance") {
            *out.entry(o["tags"]["infrakit.instance.name"].as_str().unwrap_or_default().to_string()).or_default() += 1;
        }
        out
    }

    /// Makes every create sleep `ms` milliseconds (0: no delay).
    pub fn delay_creates(&self, ms: u64) {
        let knob = self.cloud.join("delay-ms");
        if ms == 0 {
            std::fs::remove_file(&knob).unwrap();
        } else {
            std::fs::write(&knob, ms.to_string().as_bytes()).unwrap();
        }
    }

    /// Makes the next `n` creates of `rtype` wait for one another (the provider's `together`
    /// knob; 0: none do): a run that creates them one after the other fails, so a run that
    /// succeeds started every one before any finished. An order, not a stopwatch.
    pub fn creates_together(&self, rtype: &str, n: usize) {
        let _ = std::fs::remove_file(self.cloud.join("together-started"));
        let knob = self.cloud.join("together");
        if n == 0 {
            std::fs::remove_file(&knob).unwrap();
        } else {
            std::fs::write(&knob, format!("{rtype} {n}")).unwrap();
        }
    }

    pub fn spec(&self) -> String {
        self.s.root.path().join("web.json").to_str().unwrap().to_string()
    }

    /// The objects in the cloud, by cloud ID.
    pub fn objects(&self) -> std::collections::BTreeMap<String, Value> {
        std::fs::read_dir(&self.cloud)
            .unwrap()
            .filter_map(|e| {
                let p = e.unwrap().path();
                let name = p.file_name()?.to_str()?.strip_suffix(".json")?.to_string();
                Some((name, serde_json::from_slice(&std::fs::read(&p).ok()?).ok()?))
            })
            .collect()
    }

    /// Starts counting the calls the cloud serves (the provider's `calls` file), from none.
    pub fn count_calls(&self) {
        std::fs::write(self.cloud.join("calls"), b"").unwrap();
    }

    /// The calls served since [`Cloud::count_calls`], one `<verb> <type> [<id>]` each, and
    /// counts afresh.
    pub fn calls(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.cloud.join("calls")).unwrap();
        self.count_calls();
        text.lines().map(str::to_string).collect()
    }

    /// Makes the listings hide every object written less than `ms` ago (0: none), as a cloud's
    /// list lags behind its creates; the objects there now are made an hour old.
    pub fn lag_lists(&self, ms: u64) {
        std::fs::write(self.cloud.join("list-lag-ms"), ms.to_string()).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for id in self.objects().keys() {
            let file = std::fs::File::options().write(true).open(self.cloud.join(format!("{id}.json"))).unwrap();
            file.set_modified(old).unwrap();
        }
    }

    /// Rewrites one object in the cloud, behind Terraform's back.
    pub fn edit(&self, cloud_id: &str, edit: impl FnOnce(&mut Value)) {
        let path = self.cloud.join(format!("{cloud_id}.json"));
        let mut object: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut object);
        std::fs::write(&path, serde_json::to_vec_pretty(&object).unwrap()).unwrap();
    }

    /// A machine vanishes behind Terraform's back.
    pub fn vanish(&self, cloud_id: &str) {
        std::fs::remove_file(self.cloud.join(format!("{cloud_id}.json"))).unwrap();
    }

    /// describe's JSON rows.
    pub fn describe(&self) -> Vec<Value> {
        self.describe_with(&[])
    }

    /// `describe` with extra environment variables.
    pub fn describe_with(&self, env: &[(&str, &str)]) -> Vec<Value> {
        self.run_env(&["describe", "--output", "json"], env).ok().json().as_array().unwrap().clone()
    }

    /// Cloud ID of an instance's VM, from describe.
    pub fn machine(&self, id: &str) -> String {
        let rows = self.describe();
        let row = rows.iter().find(|r| r["ID"] == id).unwrap_or_else(|| panic!("{id} not described"));
        row["attributes"]["id"].as_str().unwrap_or_else(|| panic!("{id} has no machine: {row}")).to_string()
    }

    /// Runs the real terraform ARGS in the directory, as you would by hand (with this cloud's
    /// provider set-up); its stdout. Panics when it fails.
    pub fn terraform(&self, args: &[&str]) -> String {
        let out = std::process::Command::new(crate::support::terraform::terraform_program())
            .args(args)
            .current_dir(&self.s.dir)
            .env("TF_CLI_CONFIG_FILE", &self.rc)
            .env("FAKECLOUD_DIR", &self.cloud)
            .output()
            .unwrap();
        assert!(out.status.success(), "terraform {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Terraform's state: address → the object's cloud ID.
    pub fn state(&self) -> std::collections::BTreeMap<String, String> {
        let env = [("TF_CLI_CONFIG_FILE", self.rc.as_os_str()), ("FAKECLOUD_DIR", self.cloud.as_os_str())];
        crate::support::terraform::shown_resources(&self.s.dir, &env)
            .iter()
            .map(|r| {
                (r["address"].as_str().unwrap().to_string(), r["values"]["id"].as_str().unwrap_or_default().to_string())
            })
            .collect()
    }
}

/// infrakit-tf running in the background (see [`Cloud::start`]).
pub struct Started {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<(std::time::Instant, String)>,
    stdout: Option<std::thread::JoinHandle<String>>,
    /// The stderr lines read so far, with when they were read.
    pub seen: Vec<(std::time::Instant, String)>,
}

impl Started {
    /// Reads stderr until a line contains `needle` (`None`: it ended first, or 5 minutes
    /// passed); returns when that line came.
    pub fn wait_for(&mut self, needle: &str) -> Option<std::time::Instant> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let Ok((at, line)) = self.lines.recv_timeout(left) else { return None };
            let found = line.contains(needle);
            self.seen.push((at, line));
            if found {
                return Some(at);
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL to infrakit-tf's whole process group (`group`), or to infrakit-tf alone.
    pub fn kill(&mut self, group: bool) {
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) on our own child, or its process group.
        unsafe { libc::kill(if group { -pid } else { pid }, libc::SIGKILL) };
    }

    /// Waits for it to end: what it printed and returned.
    pub fn finish(mut self) -> Run {
        let status = self.child.wait().unwrap();
        self.seen.extend(self.lines.iter());
        let stdout = self.stdout.take().unwrap().join().unwrap();
        let stderr: String = self.seen.iter().map(|(_, l)| format!("{l}\n")).collect();
        let code =
            status.code().unwrap_or_else(|| -std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0));
        Run { code, stdout, stderr }
    }
}
