//! No way in: what another local user, a caller's data or the operator's own commands can and
//! cannot do (README "Security").

use serde_json::Value;

use infrakit_tf::exit::Code;

use crate::support::users::{as_nobody, shared_tmp};
use crate::support::Scratch;

/// Terraform's state of `s`, `show -json`: the root module's resources by address.
fn state(s: &Scratch) -> std::collections::BTreeMap<String, Value> {
    let cli_config = s.cli_config();
    crate::support::terraform::shown_resources(&s.dir, &[("TF_CLI_CONFIG_FILE", cli_config.as_os_str())])
        .into_iter()
        .map(|r| (r["address"].as_str().unwrap().to_string(), r["values"].clone()))
        .collect()
}

// Data stays data: a value given on the command line (`--tag`, `label`'s values) that holds
// `${...}` or `%{...}` is written so that terraform reads it literally, and reads back as
// given; a logical ID that could be code is refused; what the spec says (its `${...}`) is
// still the user's terraform.
#[test]
fn values_from_the_command_line_are_never_evaluated_by_terraform() {
    let s = Scratch::example();
    let secret = s.root.path().join("secret");
    std::fs::write(&secret, "the host's secret").unwrap();
    let read = format!("${{file(\"{}\")}}", secret.display());
    let directive = "%{ if true }yes%{ endif }";
    let web = s.dir.join("web.json");
    let id = s
        .run(&[
            "provision",
            web.to_str().unwrap(),
            "--tag",
            &format!("read={read}"),
            "--tag",
            &format!("if={directive}"),
            "--tag",
            "tpl={{ var `/self/instId` }}",
            "--tag",
            "open={{",
        ])
        .ok()
        .stdout
        .trim()
        .to_string();
    // A logical ID is a name: one that could be code where a template renders it (inside the
    // spec's own expression, where no escape helps) is refused, and nothing is written.
    let pet = s.write_outside(
        "pet.json",
        r#"{"Properties": {"resource": {"terraform_data": {"vm": {"input": {"ip": "${lookup({a = \"1\"}, \"{{ var `/self/logicalId` }}\", \"none\")}"}}}}}}"#,
    );
    let files = s.files();
    for lid in ["web-${upper(\"x\")}", "x\",file(base64decode(\"L2V0Yy9ob3N0bmFtZQ==\")))}"] {
        let run = s.run(&["provision", &pet, "--logical-id", lid]).code(Code::Invalid);
        assert!(run.stderr.contains("letters, digits, `.`, `-`, `_`, `:` and `@` only"), "{}", run.stderr);
    }
    assert_eq!(s.files(), files, "nothing written");
    s.run(&["label", &id, &format!("later={read}")]).ok();
    let vm = state(&s)[&format!("terraform_data.{id}")].clone();
    let tags = &vm["input"]["tags"];
    assert_eq!(tags["read"], read.as_str(), "{vm}");
    assert_eq!(tags["later"], read.as_str(), "{vm}");
    assert_eq!(tags["if"], directive, "{vm}");
    assert_eq!(tags["tpl"], "{{ var `/self/instId` }}", "a tag is no template: {vm}");
    assert_eq!(tags["open"], "{{", "{vm}");
    assert!(!vm.to_string().contains("the host's secret"), "{vm}");
    // The spec's own references are still terraform's: the network's CIDR, interpolated.
    assert_eq!(vm["input"]["network"], "10.0.0.0/16", "{vm}");
    // describe reads the tags back as they were given.
    let rows = s.run(&["describe", "--output", "json"]).ok().json();
    let row = |id: &str| rows.as_array().unwrap().iter().find(|r| r["ID"] == id).unwrap().clone();
    assert_eq!(row(&id)["Tags"]["read"], read.as_str());
    let label = s.run(&["label", &id, "again=1", "--output", "json"]).ok().json();
    assert_eq!(label["Tags"]["later"], read.as_str(), "a round trip is exact: {label}");
}

/// Starts `cmd` with no input and its output dropped.
fn quiet(mut cmd: std::process::Command) -> std::process::Child {
    use std::process::Stdio;
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

/// The processes whose command line holds `marker`.
fn running(marker: &str) -> Vec<String> {
    let out = std::process::Command::new("ps").args(["-eo", "pid=,stat=,args="]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(marker) && !l.split_whitespace().nth(1).is_some_and(|s| s.starts_with('Z')))
        .map(str::to_string)
        .collect()
}

/// A directory with one instance of the local example: its ID.
fn one_instance(s: &Scratch) -> String {
    let web = s.dir.join("web.json");
    s.run(&["provision", web.to_str().unwrap()]).ok().stdout.trim().to_string()
}

// A drain that outlives its timeout is killed whole, with what it started (`sh` runs the
// command as a child: killing `sh` alone left it running), before the member is destroyed
// under `continue`; nothing of it runs afterwards.
#[test]
fn a_drain_that_hangs_is_killed_whole_before_its_member_is_destroyed() {
    let s = Scratch::example();
    let id = one_instance(&s);
    let marker = format!("30{}", std::process::id());
    let drain = format!("sleep {marker}; true");
    let run = s.run(&[
        "destroy",
        &id,
        "--yes",
        "--drain-cmd",
        &drain,
        "--drain-timeout",
        "1s",
        "--on-drain-failure",
        "continue",
    ]);
    run.ok();
    assert!(running(&format!("sleep {marker}")).is_empty(), "left running: {:?}", running(&marker));
    let run = s.run(&["describe", "--output", "json"]).ok().json();
    assert_eq!(run.as_array().map(Vec::len), Some(0), "destroyed: {run}");
}

// A health check that hangs is killed whole at its Timeout, with what it started: before, only
// its `sh` was, and the command it ran stayed (one orphan per member per run).
#[test]
fn a_health_check_that_hangs_leaves_nothing_running() {
    let c = crate::support::cloud::Cloud::new();
    let marker = format!("31{}", std::process::id());
    let spec = crate::support::specs::healed_api(
        &c,
        2,
        serde_json::json!({"Command": format!("sleep {marker}; true"), "Timeout": "1s"}),
    );
    c.run(&["reconcile", "--group", &spec]).ok();
    // The members the first run made are checked by the second: both checks time out.
    let run = c.run(&["reconcile", "--group", &spec]).ok();
    assert!(run.stderr.contains("check failed"), "{}", run.stderr);
    assert!(running(&format!("sleep {marker}")).is_empty(), "left running: {:?}", running(&marker));
}

// A hangup (the terminal closed) while a drain runs stops the run and the drain's whole group:
// before, infrakit-tf died of it and left the drain running (its own group no longer gets the
// terminal's hangup).
#[test]
fn a_hangup_during_a_drain_leaves_nothing_running() {
    let s = Scratch::example();
    let id = one_instance(&s);
    let marker = format!("33{}", std::process::id());
    let drain = format!("trap '' TERM INT HUP; sleep {marker}");
    let mut cmd = crate::support::command(&s.cli_config());
    cmd.arg("--dir").arg(&s.dir).args(["destroy", &id, "--yes", "--no-apply", "--drain-cmd", &drain]);
    let mut child = quiet(cmd);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // The drain's own `sleep` (not infrakit-tf, nor `sh`, whose arguments hold the same text):
    // then infrakit-tf is in the drain, its signals taken.
    let sleeping = || {
        let args = |l: &String| l.split_whitespace().skip(2).collect::<Vec<_>>().join(" ");
        running(&format!("sleep {marker}")).iter().any(|l| args(l) == format!("sleep {marker}"))
    };
    while !sleeping() {
        assert!(std::time::Instant::now() < deadline, "the drain never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(Code::Interrupted as i32), "{status:?}");
    assert!(running(&format!("sleep {marker}")).is_empty(), "left running: {:?}", running(&marker));
    assert!(s.dir.join(format!("{id}.tf.json")).exists(), "nothing destroyed");
}

// A hook's output is relayed bounded (its first and last 64 KiB, a line saying how much was
// left out), and infrakit-tf's memory stays bounded whatever it prints.
#[test]
fn a_hook_that_prints_50_mb_is_relayed_bounded_in_bounded_memory() {
    let s = Scratch::example();
    let id = one_instance(&s);
    let drain = "head -c 50000000 /dev/zero | tr '\\0' x; echo; echo the end; sleep 1; exit 1";
    let mut cmd = crate::support::command(&s.cli_config());
    cmd.arg("--dir").arg(&s.dir).args(["destroy", &id, "--yes", "--no-apply", "--drain-cmd", drain]);
    let mut child = crate::support::spawn_piped(&mut cmd);
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut text).unwrap();
        text
    });
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    while child.try_wait().unwrap().is_none() {
        if let Some(hwm) = std::fs::read_to_string(&status)
            .ok()
            .and_then(|t| t.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse::<u64>().ok())
        {
            peak_kb = peak_kb.max(hwm);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let said = reader.join().unwrap();
    assert!(said.len() < 200_000, "{} bytes relayed", said.len());
    let text = String::from_utf8_lossy(&said);
    assert!(text.contains("bytes of its output left out"), "{}", &text[text.len().saturating_sub(500)..]);
    assert!(text.contains("the end"), "the last words are kept");
    assert!(peak_kb > 0 && peak_kb < 40_000, "infrakit-tf's peak memory: {peak_kb} kB");
}

// A hook inherits the operator's environment and the member's variables, never the store's
// secrets (with a store: its URL and password in `INFRAKIT_TF_STORE`, `PGPASSWORD`, and
// every other `PG*` variable).
#[test]
fn a_hook_never_sees_the_stores_secrets() {
    let db = crate::support::store::Db::new();
    let (a, _) = crate::support::store::hosts_at(&db.url());
    let id = a.run(&["provision", &a.spec()]).ok().stdout.trim().to_string();
    let seen = a.s.root.path().join("env");
    let drain = format!("env > {}", seen.display());
    let url = db.url();
    let password = db.password();
    let env = [
        ("INFRAKIT_TF_STORE", url.as_str()),
        ("PGPASSWORD", password.as_str()),
        ("PGCONNECT_TIMEOUT", "7"),
        ("KUBECONFIG", "/etc/kube/ops"),
    ];
    a.run_env(&["destroy", &id, "--yes", "--drain-cmd", &drain], &env).ok();
    let env = std::fs::read_to_string(&seen).unwrap();
    assert!(env.contains("KUBECONFIG=/etc/kube/ops"), "the operator's environment: {env}");
    assert!(env.contains(&format!("INFRAKIT_TF_ID={id}")), "the member's: {env}");
    assert!(!env.contains(&password), "the store's password: {env}");
    assert!(!env.contains("INFRAKIT_TF_STORE=") && !env.contains("PGCONNECT_TIMEOUT="), "the store's variables: {env}");
}

/// The FNV-1a hash infrakit-tf names a directory's dump after (`state_guard`).
fn dump_hash(dir: &std::path::Path) -> String {
    let h = dir
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    format!("{h:016x}")
}

// Another local user cannot plant the emergency dump of a state in the shared temporary
// directory: one found there is trusted only when it is ours, in a directory of ours alone.
// (Before, any file at `$TMPDIR/infrakit-tf-errored-<hash>.tfstate` made every command exit 13,
// and with a store the next one pushed it.)
#[test]
fn a_dump_another_user_plants_in_the_temporary_directory_is_not_trusted() {
    let s = Scratch::example();
    let tmp = shared_tmp(&s);
    let hash = dump_hash(&s.dir);
    let planted = r#"{"version": 4, "lineage": "planted", "serial": 99, "resources": []}"#;
    let script = format!(
        "printf '%s' '{planted}' > infrakit-tf-errored-{hash}.tfstate; mkdir infrakit-tf-0 && printf '%s' '{planted}' > infrakit-tf-0/errored-{hash}.tfstate"
    );
    let (code, said) = as_nobody(&script, &tmp);
    assert_eq!(code, 0, "{said}");
    let web = s.dir.join("web.json");
    let run = s.run_with(&["provision", web.to_str().unwrap()], None, &[("TMPDIR", tmp.to_str().unwrap())]);
    assert!(run.is(Code::Ok), "the planted file is not ours: {run:?}");
}

// Temporary directories are this user's alone: another local user reads none of the plans
// (the state, sensitive values) a run saves there while it runs.
#[test]
fn another_user_reads_nothing_a_run_keeps_in_the_temporary_directory() {
    let s = Scratch::example();
    let tmp = shared_tmp(&s);
    // A configuration whose apply takes a while: its plan waits in the temporary directory.
    s.write(
        "slow.tf",
        "resource \"terraform_data\" \"slow\" {\n  provisioner \"local-exec\" {\n    command = \"sleep 3\"\n  }\n}\n",
    );
    let mut cmd = crate::support::command(&s.cli_config());
    cmd.arg("--dir").arg(&s.dir).args(["reconcile"]).env("TMPDIR", &tmp);
    let mut child = quiet(cmd);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = 0;
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        let (code, said) = as_nobody("for f in infrakit-tf-*/* infrakit-tf-*/.[!.]*; do test -e \"$f\" && cat \"$f\" >/dev/null 2>&1 && echo \"READ $f\"; done; ls -d infrakit-tf-* 2>/dev/null | wc -l", &tmp);
        assert_eq!(code, 0, "{said}");
        assert!(!said.contains("READ "), "another user read: {said}");
        seen = seen.max(said.lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or(0));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait().unwrap();
    assert!(seen > 0, "the run kept nothing in the temporary directory to try");
}

// The operator's umask is honoured for everything infrakit-tf writes: with 077, no file of
// the directory is readable by another user.
#[test]
fn the_umask_is_honoured() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::example();
    let web = s.dir.join("web.json");
    let script = "umask 077; exec \"$0\" --dir \"$1\" provision \"$2\"";
    let cmd = crate::support::command(&s.cli_config());
    let bin = crate::support::BIN;
    let out = std::process::Command::new("sh")
        .args(["-c", script, bin, s.dir.to_str().unwrap(), web.to_str().unwrap()])
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut checked = 0;
    for entry in std::fs::read_dir(&s.dir).unwrap().map(Result::unwrap) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = name.ends_with(".tf.json") || name.starts_with(".infrakit-tf-");
        if ours && entry.file_type().unwrap().is_file() {
            let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{name} is {mode:o} under umask 077");
            checked += 1;
        }
    }
    assert!(checked >= 3, "the instance, its slot and the global file at least");
}

// The metrics file's lock is never opened through a link another user planted (root would
// create whatever it points to).
#[test]
fn the_metrics_lock_is_never_opened_through_a_link() {
    let s = Scratch::example();
    let metrics = s.root.path().join("m.prom");
    let target = s.root.path().join("created-by-root");
    std::os::unix::fs::symlink(&target, s.root.path().join("m.prom.lock")).unwrap();
    let web = s.dir.join("web.json");
    let run = s.run(&["provision", web.to_str().unwrap(), "--metrics-file", metrics.to_str().unwrap()]);
    assert!(run.is(Code::Ok), "a metrics file that cannot be written is a warning: {run:?}");
    assert!(!target.exists(), "the link was followed");
}

// A metrics file in a directory every user may write (as /tmp is): what another user plants
// there (a FIFO, a link to /dev/zero, a lock held for ever) costs the metrics, with a
// warning, never the run (before: it hung for ever, or read until memory ran out).
#[test]
fn a_metrics_file_another_user_plants_never_holds_a_run_up() {
    let s = Scratch::example();
    let tmp = shared_tmp(&s);
    let marker = format!("32{}", std::process::id());
    let (code, said) = as_nobody(
        &format!(
            "mkfifo fifo.prom && ln -s /dev/zero zero.prom && (flock held.prom.lock sleep {marker} >/dev/null 2>&1 &)"
        ),
        &tmp,
    );
    assert_eq!(code, 0, "{said}");
    let minute = std::time::Duration::from_secs(60);
    for name in ["fifo.prom", "zero.prom", "held.prom"] {
        let metrics = tmp.join(name);
        let args = ["reconcile", "--lock-timeout", "1s", "--metrics-file", metrics.to_str().unwrap()];
        let run = within(&s, &args, &[], minute).unwrap_or_else(|| panic!("{name}: the run hung"));
        assert!(run.is(Code::Ok), "{name}: {run:?}");
        assert!(run.stderr.contains("metrics not written"), "{name}: {}", run.stderr);
    }
    let _ = std::process::Command::new("pkill").args(["-f", &format!("sleep {marker}")]).status();
}

/// Runs `args` in `s`, killed after `limit`: `None` when it did not end by then (it hung). A
/// hang is what its callers catch, so a bound on time is the point; they give a minute to what
/// takes a second.
fn within(s: &Scratch, args: &[&str], env: &[(&str, &str)], limit: std::time::Duration) -> Option<crate::support::Run> {
    let mut cmd = crate::support::command(&s.cli_config());
    cmd.arg("--dir").arg(&s.dir).args(args).envs(env.iter().copied());
    let mut child = crate::support::spawn_piped(&mut cmd);
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    Some(crate::support::Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Makes a FIFO at `path`.
fn fifo(path: &std::path::Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

// A FIFO where a managed file or a configuration file is expected is refused (exit 3) and never
// opened: before, it hung describe, a --no-apply and reconcile for ever.
#[test]
fn a_fifo_where_a_file_is_expected_is_refused_not_opened() {
    let s = Scratch::example();
    let id = one_instance(&s);
    let minute = std::time::Duration::from_secs(60);
    fifo(&s.dir.join("instance-9.tf.json"));
    for args in [&["describe"][..], &["reconcile", "--check"], &["destroy", &id, "--no-apply", "--yes"]] {
        let run = within(&s, args, &[], minute).unwrap_or_else(|| panic!("{args:?} hung"));
        assert_eq!(run.code, infrakit_tf::exit::Code::Invalid as i32, "{args:?}: {run:?}");
        assert!(run.stderr.contains("is a FIFO, not a file"), "{}", run.stderr);
    }
    std::fs::remove_file(s.dir.join("instance-9.tf.json")).unwrap();
    fifo(&s.dir.join("extra.tf"));
    let run = within(&s, &["reconcile"], &[], minute).expect("reconcile hung");
    assert_eq!(run.code, infrakit_tf::exit::Code::Invalid as i32, "{run:?}");
    // Where any other file of ours or terraform's is read: refused, the file as it was after.
    std::fs::remove_file(s.dir.join("extra.tf")).unwrap();
    std::fs::write(s.dir.join("infrakit-tf.json"), "{}").unwrap();
    for name in ["infrakit-tf.json", ".infrakit-tf-unsettled", "terraform.tfstate", ".terraform/terraform.tfstate"] {
        let path = s.dir.join(name);
        let kept = std::fs::read(&path).ok();
        let _ = std::fs::remove_file(&path);
        fifo(&path);
        for args in [&["describe"][..], &["reconcile"]] {
            let run = within(&s, args, &[], minute).unwrap_or_else(|| panic!("{args:?} hung on {name}"));
            assert_eq!(run.code, infrakit_tf::exit::Code::Invalid as i32, "{name}: {args:?}: {run:?}");
        }
        std::fs::remove_file(&path).unwrap();
        if let Some(bytes) = kept {
            std::fs::write(&path, bytes).unwrap();
        }
    }
    let socket = std::os::unix::net::UnixListener::bind(s.dir.join("instance-9.tf.json")).unwrap();
    let run = within(&s, &["describe"], &[], minute).expect("describe hung");
    assert_eq!(run.code, infrakit_tf::exit::Code::Invalid as i32, "{run:?}");
    assert!(run.stderr.contains("is a socket, not a file"), "{}", run.stderr);
    drop(socket);
    std::fs::remove_file(s.dir.join("instance-9.tf.json")).unwrap();
    // Nor in place of the lock file readers and writers share.
    let lock = s.dir.join(".infrakit-tf-generation.lock");
    let _ = std::fs::remove_file(&lock);
    fifo(&lock);
    for args in [&["describe"][..], &["label", &id, "k=v"]] {
        let run = within(&s, args, &[], minute).unwrap_or_else(|| panic!("{args:?} hung"));
        assert_eq!(run.code, infrakit_tf::exit::Code::Invalid as i32, "{args:?}: {run:?}");
    }
}

// Links to the directory itself cost the configuration's digest nothing more: before, each
// link multiplied the files it read (5 links: 27.6 s), and 7 never ended in practice.
#[test]
fn links_to_the_directory_do_not_multiply_the_digest() {
    let c = crate::support::cloud::Cloud::new();
    c.with_lookups();
    c.run(&["provision", &c.spec()]).ok();
    for n in 0..7 {
        std::os::unix::fs::symlink(".", c.s.dir.join(format!("loop{n}"))).unwrap();
    }
    std::os::unix::fs::symlink("/", c.s.dir.join("root")).unwrap();
    let mut cmd = crate::support::command(&c.s.cli_config());
    cmd.arg("--dir").arg(&c.s.dir).args(["reconcile", "--output", "json"]);
    cmd.env("TF_CLI_CONFIG_FILE", c.s.root.path().join("fakecloud.tfrc")).env("FAKECLOUD_DIR", &c.cloud);
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("reconcile never ended");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(out.status.success(), "{report}");
    assert_eq!(report["reads"]["whole_plan"], true, "the digest was taken: {report}");
}

/// A directory without configuration of its own, one instance provisioned from a spec that
/// needs nothing else: the scratch, the spec's path, the instance's ID.
fn alone() -> (Scratch, String, String) {
    let s = Scratch::new();
    let spec = s.write_outside(
        "alone.json",
        r#"{"Properties": {"resource": {"terraform_data": {"vm": {"input": {"size": "small"}}}}}}"#,
    );
    let id = s.run(&["provision", &spec]).ok().stdout.trim().to_string();
    (s, spec, id)
}

// A directory with no configuration of its own (a self-contained spec, no main.tf): destroying
// its last instance destroys its machine, and leaves nothing in the state (before, terraform
// found no configuration at all, exit 7, and the machine stayed, with no file to find it by).
#[test]
fn the_last_instance_of_a_directory_without_configuration_of_its_own_is_destroyed() {
    let (s, spec, id) = alone();
    s.run(&["destroy", &id, "--yes"]).ok();
    assert!(state(&s).is_empty(), "nothing left in the state: {:?}", state(&s));
    s.run(&["reconcile", "--check"]).ok();
    s.run(&["sweep-orphans", "--dry-run"]).ok();
    // The empty configuration that made it possible goes with the next managed file.
    assert!(s.files().contains(&"infrakit-tf-empty.tf.json".to_string()), "{:?}", s.files());
    s.run(&["provision", "--no-apply", &spec]).ok();
    assert!(!s.files().contains(&"infrakit-tf-empty.tf.json".to_string()), "{:?}", s.files());
}

// Destroyed without an apply, the last instance's machine stays in the state for the next
// apply: the directory keeps a configuration terraform can plan that destroy from.
#[test]
fn the_last_instance_destroyed_without_an_apply_is_destroyed_by_reconcile() {
    let (s, _, id) = alone();
    s.run(&["destroy", "--no-apply", &id, "--yes"]).ok();
    assert!(s.files().contains(&"infrakit-tf-empty.tf.json".to_string()), "kept while the state holds the machine");
    assert_eq!(state(&s).len(), 1);
    s.run(&["reconcile"]).ok();
    assert!(state(&s).is_empty(), "nothing left in the state: {:?}", state(&s));
    s.run(&["reconcile"]).ok();
}

// A directory an earlier version left with a machine in its state and no configuration at all:
// the next reconcile destroys that machine (before, every reconcile failed: "No configuration
// files", exit 7, and nothing could clean it up).
#[test]
fn a_directory_left_without_configuration_is_cleaned_up_by_reconcile() {
    let (s, _, id) = alone();
    std::fs::remove_file(s.dir.join(format!("{id}.tf.json"))).unwrap();
    s.run(&["reconcile"]).ok();
    assert!(state(&s).is_empty(), "the machine was destroyed: {:?}", state(&s));
}

// A first provision whose apply fails (here, the directory's own main.tf was forgotten and the
// spec references its network) keeps the instance's files and says what to fix and how to undo;
// the undo it names works.
#[test]
fn a_failed_first_provision_says_how_to_fix_or_undo() {
    let s = Scratch::new();
    let spec = s.write_outside(
        "web.json",
        r#"{"Properties": {"resource": {"terraform_data": {"vm": {"input": {"net": "${terraform_data.net.id}"}}}}}}"#,
    );
    let out = s.run(&["provision", &spec]).code(Code::TerraformFailed);
    assert_eq!(out.stdout, "", "an ID printed for an instance that was not provisioned");
    let id = out.not_provisioned();
    let undo = format!("infrakit-tf destroy {id} --yes");
    assert!(out.stderr.contains("hint: ") && out.stderr.contains("reconcile"), "{}", out.stderr);
    assert!(out.stderr.contains(&undo), "names the undo: {}", out.stderr);
    s.run(&["destroy", &id, "--yes"]).ok();
    assert!(!s.dir.join(format!("{id}.tf.json")).exists());
    assert!(state(&s).is_empty(), "{:?}", state(&s));
    s.run(&["reconcile"]).ok();
}

// A group in a directory without configuration of its own: its first reconcile makes its
// members (before, terraform refused to plan the empty directory: exit 7 on every run), a
// dry run of destroying them all plans, and scaled to zero it empties the state.
#[test]
fn a_group_in_a_directory_without_configuration_of_its_own_grows_and_empties() {
    let s = Scratch::new();
    let group = |size: u32| {
        serde_json::json!({"ID": "web", "Properties": {
            "Allocation": {"Size": size},
            "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": {
                "terraform_data": {"vm": {"input": {"size": "small"}}}}}}}})
        .to_string()
    };
    s.write("web.json", &group(2));
    s.write("infrakit-tf.json", r#"{"groups": ["web.json"]}"#);
    s.run(&["reconcile"]).ok();
    assert_eq!(state(&s).len(), 2);
    let ids = s.described_ids();
    let mut dry = vec!["destroy", "--dry-run", "--yes"];
    dry.extend(ids.iter().map(String::as_str));
    s.run(&dry).ok();
    s.write("web.json", &group(0));
    s.run(&["reconcile", "--max-destroy", "2"]).ok();
    assert!(state(&s).is_empty(), "{:?}", state(&s));
    s.run(&["reconcile", "--check"]).ok();
}
