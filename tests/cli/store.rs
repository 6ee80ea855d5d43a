//! Several hosts, one group: the managed files and the lock in PostgreSQL, the state in
//! terraform's `backend "pg"`. Two directories (different paths, the same `main.tf` and
//! `infrakit-tf.json`) stand for two hosts of one fakecloud; each test has a database of its
//! own on the throwaway server `.ci/test` starts (`.ci/postgres`), whose URL is
//! `INFRAKIT_TF_TEST_PG`. Without it these tests fail: they are never skipped.
#![allow(clippy::disallowed_methods)] // the tests start and stop their own server too

use std::collections::BTreeSet;

use serde_json::{json, Value};

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;
use crate::support::store::{
    census, declared, hostname, hosts_at, lease, point_at, provisioning, server, use_store, Db, OwnServer,
};
use crate::support::Run;

/// A second directory (`db`) of its own cloud in the store `db`, beside `web`.
fn other_directory(db: &Db) -> Cloud {
    let other = Cloud::new();
    use_store(&other, &db.url());
    name_in(&other, &db.url(), "db");
    other
}

fn name_in(host: &Cloud, url: &str, directory: &str) {
    let config = json!({"vm_types": {"fakecloud_instance": {}}, "store": {"postgres": url, "directory": directory}});
    host.s.write("infrakit-tf.json", &config.to_string());
}

/// Two hosts of one cloud, sharing the store `db`.
fn hosts(db: &Db) -> (Cloud, Cloud) {
    hosts_at(&db.url())
}

fn ids(rows: &[Value]) -> BTreeSet<String> {
    rows.iter().map(|r| r["ID"].as_str().unwrap().to_string()).collect()
}

#[test]
fn provisions_from_two_hosts_at_once_share_one_directory() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    // Ten each, both hosts at once: every provision waits its turn for the store's lock.
    let provision = |h: &Cloud| -> Vec<String> {
        (0..10)
            .map(|_| h.run(&["--lock-timeout", "10m", "provision", &h.spec()]).ok().stdout.trim().to_string())
            .collect()
    };
    let (from_a, from_b) = std::thread::scope(|s| {
        let on_a = s.spawn(|| provision(&a));
        let on_b = s.spawn(|| provision(&b));
        (on_a.join().unwrap(), on_b.join().unwrap())
    });
    let all: BTreeSet<String> = from_a.iter().chain(&from_b).cloned().collect();
    assert_eq!(all.len(), 20, "unique IDs: {from_a:?} {from_b:?}");

    // Both hosts describe all 20, created, each on a slot of its own.
    for host in [&a, &b] {
        let rows = host.describe();
        assert_eq!(ids(&rows), all);
        assert!(rows.iter().all(|r| r["status"] == "created"), "{rows:#?}");
        let slots: BTreeSet<&str> = rows
            .iter()
            .flat_map(|r| r["attachments"].as_array().unwrap())
            .filter_map(Value::as_str)
            .filter(|a| a.contains("_dedicated_"))
            .collect();
        assert_eq!(slots.len(), 20, "one slot each: {rows:#?}");
    }
    assert_eq!(census(&a), (20, 20, 1), "all applied, nothing twice");
    // The state in PostgreSQL is what the store's files declare.
    let files = db.files();
    assert_eq!(files.keys().filter(|n| n.starts_with("instance-")).count(), 20);
    assert_eq!(db.state(), declared(&files));
}

#[test]
fn a_host_that_dies_mid_apply_is_taken_over_by_the_other() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    lease(&[&a, &b], "4s");
    a.run(&["provision", &a.spec()]).ok();
    a.delay_creates(2000);
    // Host A dies (infrakit-tf and its terraform, SIGKILL) while its creates are under way.
    a.kill_during(&["provision", &a.spec()], "creating");
    // Its lease stops being renewed: B waits for it to expire, takes over, and converges.
    let run = b.run(&["--lock-timeout", "10m", "reconcile"]).ok();
    assert!(run.stderr.contains("its lease expires in"), "{}", run.stderr);
    let took = format!("warning: took over store directory `web` from infrakit-tf {} pid", hostname());
    assert!(run.stderr.contains(&took), "{}", run.stderr);
    assert!(run.stderr.contains("whose lease expired without being released"), "{}", run.stderr);
    assert_eq!(census(&b), (2, 2, 1), "both instances, nothing twice");
    let rows = a.describe();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["status"] == "created"), "{rows:#?}");
    a.delay_creates(0);
    a.run(&["reconcile", "--check"]).ok();
    assert_eq!(db.state(), declared(&db.files()));
}

/// Waits until no process works in `host`'s directory (its terraform, its watchdog, plugins).
fn gone_from(host: &Cloud) {
    crate::support::wait_until_idle(&host.s.dir);
}

// Infrakit-tf alone is killed (cron's timeout, the OOM killer) while its terraform creates
// machines one after another: its terraform is interrupted (it dies with infrakit-tf, which
// renews no lease any more), stops gracefully and saves what it made; the other host takes
// over once the lease has expired, and makes nothing twice.
#[test]
fn infrakit_tf_killed_alone_lets_its_terraform_save_then_the_other_host_takes_over() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    // A terraform stopped too slowly under load is killed before the lease expires, and the
    // create it had in flight is then in no state: the look-ups find it (as in life they must).
    a.with_lookups();
    b.with_lookups();
    lease(&[&a, &b], "12s");
    let mut on_a = provisioning(&a, 3, 2000);
    on_a.kill(false);
    on_a.finish();
    gone_from(&a);
    a.delay_creates(0);
    let run = b.run(&["--lock-timeout", "10m", "reconcile"]).ok();
    assert!(run.stderr.contains("took over store directory `web`"), "{}", run.stderr);
    assert_eq!(census(&b), (3, 3, 1), "created once: {}", run.stderr);
    assert!(b.machines_per_instance().values().all(|n| *n == 1));
    assert_eq!(db.state(), declared(&db.files()));
    assert_eq!(a.objects().into_keys().collect::<BTreeSet<_>>(), db.managed_ids(), "nothing leaked");
    b.run(&["reconcile", "--check"]).ok();
}

// Infrakit-tf alone is frozen (SIGSTOP, swapped out) while its terraform applies: it renews
// nothing, so its watchdog stops terraform before the lease can expire; the other host takes
// over and makes nothing twice; resumed, infrakit-tf says it lost the lease (exit 16).
#[test]
fn infrakit_tf_frozen_alone_has_its_terraform_stopped_before_the_lease_expires() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    // A terraform stopped too slowly under load is killed before the lease expires, and the
    // create it had in flight is then in no state: the look-ups find it (as in life they must).
    a.with_lookups();
    b.with_lookups();
    // Eleven creates of 2 s one after another: what remains after the freeze outlasts the lease.
    lease(&[&a, &b], "12s");
    let on_a = provisioning(&a, 5, 2000);
    let pid = on_a.pid() as i32;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let run = b.run(&["--lock-timeout", "10m", "reconcile"]);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let run = run.ok();
    assert!(run.stderr.contains("took over store directory `web`"), "{}", run.stderr);
    let on_a = on_a.finish().code(Code::StoreUnavailable);
    assert!(on_a.stderr.contains("error: lost the lease on store directory `web`"), "{}", on_a.stderr);
    assert_eq!(census(&b), (5, 5, 1), "created once: {}", run.stderr);
    assert!(b.machines_per_instance().values().all(|n| *n == 1));
    assert_eq!(db.state(), declared(&db.files()));
    b.run(&["reconcile", "--check"]).ok();
}

// A host's terraform could not save its state (here the database refuses the write; in life, a
// failover to a host terraform was not told of): that host has `errored.tfstate`, and every
// other host refuses to plan or apply (exit 13) until it is pushed there, rather than make its
// machines again.
#[test]
fn a_state_one_host_could_not_save_stops_every_host_until_it_is_pushed() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    a.run(&["provision", &a.spec()]).ok();
    db.client()
        .batch_execute(
            "ALTER TABLE infrakit_tf_state_web.states ADD CONSTRAINT refuse CHECK (length(data) < 10) NOT VALID",
        )
        .unwrap();
    a.run(&["provision", &a.spec()]).code(Code::TerraformFailed);
    assert!(a.s.dir.join("errored.tfstate").exists());
    db.client().batch_execute("ALTER TABLE infrakit_tf_state_web.states DROP CONSTRAINT refuse").unwrap();
    let before = census(&a);
    let refused = b.run(&["reconcile"]).code(Code::StateLost);
    let me = format!("{}:{}", hostname(), a.s.dir.display());
    assert_eq!(
        refused.error_lines(),
        [format!("error: refusing to run terraform: `errored.tfstate` on `{me}` holds a state terraform could not save there; applying here would make what it made again").as_str()]
    );
    assert!(
        refused.stderr.contains("terraform state push errored.tfstate`, remove it, and run any command there"),
        "{}",
        refused.stderr
    );
    assert_eq!(census(&a), before);
    // Pushed on A (with the environment the hint gives), and A runs: every host goes on.
    let env = [
        ("PG_CONN_STR", format!("host=127.0.0.1 port={} user=infrakit dbname={} sslmode=disable", db.port(), db.name)),
        ("PG_SCHEMA_NAME", "infrakit_tf_state_web".to_string()),
        ("PGPASSWORD", db.password()),
        ("TF_CLI_CONFIG_FILE", a.s.cli_config().to_str().unwrap().to_string()),
    ];
    let pushed = std::process::Command::new(crate::support::terraform::terraform_program())
        .args(["state", "push", "errored.tfstate"])
        .current_dir(&a.s.dir)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(pushed.status.success(), "{}", String::from_utf8_lossy(&pushed.stderr));
    std::fs::remove_file(a.s.dir.join("errored.tfstate")).unwrap();
    a.run(&["reconcile"]).ok();
    b.run(&["reconcile"]).ok();
    assert_eq!(census(&b), (2, 2, 1), "nothing twice");
    assert_eq!(db.state(), declared(&db.files()));
}

// A command given --accept-config that fails before it writes (an unknown instance) records
// nothing: the other host's configuration stays the one.
#[test]
fn accept_config_on_a_command_that_fails_records_nothing() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    a.run(&["provision", &a.spec()]).ok();
    let main = std::fs::read_to_string(b.s.dir.join("main.tf")).unwrap();
    b.s.write("main.tf", &format!("{main}\n# only on B\n"));
    b.run(&["--accept-config", "destroy", "--yes", "instance-123"]).code(Code::NotFound);
    b.run(&["--accept-config", "reconcile", "--check"]).ok();
    a.run(&["reconcile"]).ok();
    b.run(&["reconcile"]).code(Code::Invalid);
}

#[test]
fn reconcile_no_wait_on_both_hosts_at_once_runs_one() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    a.run(&["provision", "--no-apply", &a.spec()]).ok();
    a.delay_creates(1500);
    // The one that is refused reads at once, while the other holds the lock: readers take none.
    let run_and_read = |h: &Cloud| {
        let run = h.run(&["reconcile", "--no-wait"]);
        let read = run.is(Code::Locked).then(|| h.run(&["describe", "--output", "json"]));
        (run, read)
    };
    let (runs, reads): (Vec<Run>, Vec<Option<Run>>) = std::thread::scope(|s| {
        let on_a = s.spawn(|| run_and_read(&a));
        let on_b = s.spawn(|| run_and_read(&b));
        [on_a.join().unwrap(), on_b.join().unwrap()].into_iter().unzip()
    });
    let read = reads.into_iter().flatten().next().expect("one was refused").ok();
    assert!(!read.stderr.contains("waiting"), "{}", read.stderr);
    assert_eq!(read.json().as_array().unwrap().len(), 1, "the queued instance: {}", read.stdout);
    let mut codes: Vec<i32> = runs.iter().map(|r| r.code).collect();
    codes.sort();
    assert_eq!(codes, [Code::Ok as i32, Code::Locked as i32], "{runs:#?}");
    let busy = runs.iter().find(|r| r.is(Code::Locked)).unwrap();
    assert_eq!(busy.error_lines().len(), 1, "{busy:#?}");
    assert!(busy.stderr.contains("error: store directory `web` is locked by another run"), "{}", busy.stderr);
    assert!(busy.stderr.contains("the next cron run tries again"), "{}", busy.stderr);
    assert_eq!(census(&a), (1, 1, 1));
}

// Two hosts' first command on a store nobody has used: both create terraform's state table at
// once in `terraform init` (`CREATE TABLE IF NOT EXISTS`, not safe against itself in
// PostgreSQL: "duplicate key value violates unique constraint pg_type_typname_nsp_index"),
// unless the store made it first, one host at a time. Twenty new stores, each run once by both.
#[test]
fn two_hosts_first_reconcile_on_a_new_store_never_races() {
    for round in 0..20 {
        let db = Db::new();
        let (a, b) = hosts(&db);
        // Each host's first reconcile, and a describe on each (a reader sets terraform's
        // working directory up too, without the lease).
        let (runs, reads): (Vec<Run>, Vec<Run>) = std::thread::scope(|s| {
            let hosts = [&a, &b];
            let runs = hosts.map(|h| s.spawn(move || h.run(&["reconcile", "--no-wait"])));
            let reads = hosts.map(|h| s.spawn(move || h.run(&["describe"])));
            (
                runs.into_iter().map(|t| t.join().unwrap()).collect(),
                reads.into_iter().map(|t| t.join().unwrap()).collect(),
            )
        });
        // Refused only by the other's lock (a describe that sets `.terraform` up holds its
        // host's directory lock a moment): the next cron run goes on.
        for run in &runs {
            assert!(run.is(Code::Ok) || run.is(Code::Locked), "round {round}: {run:#?}");
        }
        for read in reads {
            read.ok();
        }
        a.run(&["reconcile"]).ok();
        b.run(&["reconcile"]).ok();
    }
}

#[test]
fn a_store_that_cannot_be_reached_changes_nothing() {
    // Stopped halfway.
    let server = OwnServer::start();
    let db = Db::on(server.url.clone());
    let (a, _b) = hosts(&db);
    let id = a.run(&["provision", &a.spec()]).ok().stdout.trim().to_string();
    server.stop();

    let before = a.s.snapshot();
    for args in [
        vec!["provision", &a.spec()],
        vec!["destroy", "--yes", &id],
        vec!["reconcile"],
        vec!["describe"],
        vec!["migrate"],
    ] {
        let run = a.run(&args).code(Code::StoreUnavailable);
        assert_eq!(run.error_lines().len(), 1, "{run:#?}");
        let line = run.error_lines()[0];
        assert!(line.starts_with("error: cannot use the store at postgresql://infrakit@127.0.0.1:"), "{line}");
        assert!(!run.stderr.contains(&db.password()), "the password is never printed: {}", run.stderr);
        assert_eq!(a.s.snapshot(), before, "{args:?} wrote nothing");
    }
    std::mem::forget(db); // its server is gone: nothing to drop
}

#[test]
fn a_group_converged_from_alternating_hosts() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    // The group spec is the user's configuration: each host has its copy.
    let write = |size: u64, user_data: &str| {
        let spec = crate::support::specs::web(&format!("{{\"Size\": {size}}}"), user_data);
        a.s.write("web-group.json", &spec);
        b.s.write("web-group.json", &spec);
    };
    let spec = |h: &Cloud| h.s.dir.join("web-group.json").to_str().unwrap().to_string();
    // A change of the spec, made on every host, is made the one by the first run after it.
    let reconcile = |h: &Cloud| {
        let run = h.run(&["--accept-config", "reconcile", "--group", &spec(h), "--output", "json"]);
        run.ok().json()["groups"][0].clone()
    };
    write(2, "v1");
    assert_eq!(reconcile(&a)["provisioned"].as_array().unwrap().len(), 2);
    write(3, "v1");
    assert_eq!(reconcile(&b)["provisioned"].as_array().unwrap().len(), 1);
    write(3, "v2");
    let rolled = reconcile(&a);
    assert_eq!(rolled["replaced"].as_array().unwrap().len(), 3, "{rolled}");
    assert_eq!(rolled["current"], 3, "{rolled}");
    b.run(&["reconcile", "--group", &spec(&b), "--check"]).ok();
    let rows = b.describe();
    assert_eq!(rows.len(), 3, "{rows:#?}");
    assert!(rows.iter().all(|r| r["status"] == "created"), "{rows:#?}");
    assert_eq!(census(&a), (3, 3, 1), "three members, their volumes kept through the update");
    assert_eq!(db.state(), declared(&db.files()));
}

/// A rolling update of two members on host A, in which the health check of each replacement
/// runs `sql` on the store's database.
fn roll_with(db: &Db, a: &Cloud, b: &Cloud, sql: &str) -> Run {
    let spec = |h: &Cloud| h.s.dir.join("web-group.json").to_str().unwrap().to_string();
    let write = |user_data: &str| {
        let group = crate::support::specs::web(r#"{"Size": 2}"#, user_data);
        a.s.write("web-group.json", &group);
        b.s.write("web-group.json", &group);
    };
    write("v1");
    a.run(&["reconcile", "--group", &spec(a)]).ok();
    write("v2");
    let health = format!("psql '{}' -qAtc \"{sql}\" >/dev/null", db.url());
    a.run(&["--accept-config", "reconcile", "--group", &spec(a), "--max-unavailable", "1", "--health-cmd", &health])
}

// The server ends our connections mid-run (a restart, as the store sees it, or a pooler):
// they are opened again under the same lease, and the run finishes.
#[test]
fn connections_ended_mid_run_are_opened_again_under_the_same_lease() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    let cut = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'infrakit-tf %' AND datname = current_database()";
    let run = roll_with(&db, &a, &b, cut).ok();
    assert!(!run.stderr.contains(&db.password()), "{}", run.stderr);
    let spec = b.s.dir.join("web-group.json");
    b.run(&["reconcile", "--group", spec.to_str().unwrap(), "--check"]).ok();
    assert_eq!(census(&a), (2, 2, 1));
    assert_eq!(db.state(), declared(&db.files()));
}

// Another host took the lease mid-run (as after ours expired): the run stops at its next
// commit, exit 16, and the next run carries on.
#[test]
fn a_lease_taken_mid_run_stops_it_and_the_next_run_carries_on() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    let take = "UPDATE infrakit_tf.leases SET epoch = epoch + 1, owner = 'elsewhere', holder = 'infrakit-tf elsewhere pid 1', expires = clock_timestamp() + interval '1 hour'";
    let run = roll_with(&db, &a, &b, take).code(Code::StoreUnavailable);
    assert_eq!(run.error_lines().len(), 1, "{run:#?}");
    assert!(
        run.stderr.contains("error: lost the lease on store directory `web` at postgresql://infrakit@127.0.0.1:"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("it expired, or another host holds it now"), "{}", run.stderr);
    assert!(!run.stderr.contains(&db.password()), "{}", run.stderr);
    // The other holder is done: the other host finishes the update; everything is whole.
    db.client().batch_execute("UPDATE infrakit_tf.leases SET released = true").unwrap();
    let spec = b.s.dir.join("web-group.json");
    let spec = spec.to_str().unwrap();
    let done = b.run(&["reconcile", "--group", spec, "--output", "json"]).ok().json();
    assert_eq!(done["groups"][0]["current"], 2, "{done}");
    b.run(&["reconcile", "--group", spec, "--check"]).ok();
    assert_eq!(census(&a), (2, 2, 1));
    assert_eq!(db.state(), declared(&db.files()));
}

// A store made by the release before leases (schema version 1: no `leases` table, no
// state stamp) is brought to this version by the first command that uses it.
#[test]
fn a_store_of_the_release_before_leases_is_brought_up_on_first_use() {
    let db = Db::new();
    db.client()
        .batch_execute(
            "CREATE SCHEMA infrakit_tf;
             CREATE TABLE infrakit_tf.schema_version (version integer NOT NULL);
             INSERT INTO infrakit_tf.schema_version VALUES (1);
             CREATE TABLE infrakit_tf.directories (id bigserial PRIMARY KEY, name text NOT NULL UNIQUE,
                 created timestamptz NOT NULL DEFAULT now(), config_fingerprint text, config_host text);
             CREATE TABLE infrakit_tf.files (
                 directory bigint NOT NULL REFERENCES infrakit_tf.directories (id) ON DELETE CASCADE,
                 name text NOT NULL, content bytea NOT NULL, mode integer NOT NULL,
                 updated timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (directory, name));",
        )
        .unwrap();
    let (a, b) = hosts(&db);
    a.run(&["provision", &a.spec()]).ok();
    b.run(&["reconcile", "--check"]).ok();
    let version: Option<i32> =
        db.client().query_one("SELECT max(version) FROM infrakit_tf.schema_version", &[]).unwrap().get(0);
    assert_eq!(version, Some(3));
    assert_eq!(census(&a), (1, 1, 1));
}

#[test]
fn two_directories_in_one_database_have_states_of_their_own() {
    let db = Db::new();
    let (web, _) = hosts(&db);
    web.run(&["provision", &web.spec()]).ok();
    web.run(&["provision", &web.spec()]).ok();
    let other = other_directory(&db);
    other.run(&["provision", &other.spec()]).ok();
    let out = other.run(&["reconcile", "--output", "json"]).ok().json();
    assert_eq!((out["added"].as_u64(), out["destroyed"].as_u64()), (Some(0), Some(0)), "{out}");
    web.run(&["reconcile", "--check"]).ok();
    let schemas: BTreeSet<String> = db
        .client()
        .query("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'infrakit_tf_state_%'", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(schemas, BTreeSet::from(["infrakit_tf_state_db".to_string(), "infrakit_tf_state_web".to_string()]));
    assert_eq!(census(&web), (2, 2, 1));
    assert_eq!(census(&other), (1, 1, 1));
}

// Two directories' first applies at once in one database: each creates its state schema
// (terraform's pg backend also makes its shared sequence in `public`), neither fails.
#[test]
fn two_directories_first_applies_at_once_in_one_database() {
    let db = Db::new();
    let (web, _) = hosts(&db);
    let other = other_directory(&db);
    std::thread::scope(|s| {
        let one = s.spawn(|| web.run(&["provision", &web.spec()]));
        let two = s.spawn(|| other.run(&["provision", &other.spec()]));
        one.join().unwrap().ok();
        two.join().unwrap().ok();
    });
    assert_eq!(census(&web), (1, 1, 1));
    assert_eq!(census(&other), (1, 1, 1));
    web.run(&["reconcile", "--check"]).ok();
    other.run(&["reconcile", "--check"]).ok();
}

// The first host into a new store directory follows what the others change afterwards (it
// is the store's mirror from its first change on), and a state it could not save names the
// command that puts it where the store keeps it.
#[test]
fn the_first_host_follows_what_the_others_change() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    let id = a.run(&["provision", &a.spec()]).ok().stdout.trim().to_string();
    b.run(&["label", &id, "team=ops"]).ok();
    b.run(&["provision", &b.spec()]).ok();
    let run = a.run(&["provision", &a.spec()]).ok();
    assert!(run.stderr.contains("file(s) brought up to date from store directory `web`"), "{}", run.stderr);
    let rows = a.describe();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows.iter().find(|r| r["ID"] == id.as_str()).unwrap()["Tags"]["team"], "ops");
    b.run(&["destroy", "--yes", &id]).ok();
    a.run(&["reconcile", "--check"]).ok();

    std::fs::write(a.s.dir.join("errored.tfstate"), b"{}").unwrap();
    let refused = a.run(&["reconcile"]).code(Code::StateLost);
    let hint = format!(
        "cd {} && PG_CONN_STR='host=127.0.0.1 port={} user=infrakit dbname={} sslmode=disable' PG_SCHEMA_NAME='infrakit_tf_state_web' PGPASSWORD=<password> terraform state push errored.tfstate",
        a.s.dir.display(),
        db.server.rsplit_once(':').unwrap().1.split('/').next().unwrap(),
        db.name
    );
    assert!(refused.stderr.contains(&hint), "{}", refused.stderr);
    assert!(!refused.stderr.contains(&db.password()));
}

#[test]
fn managed_files_changed_here_by_hand_are_put_back_from_the_store() {
    // A command under the lock reads one row, not every file, while the store's generation
    // and this directory are as its last change left them; a file removed or replaced here
    // since moves the directory's time, and the next command reads the store in full.
    let db = Db::new();
    let (a, _b) = hosts(&db);
    let first = a.run(&["provision", &a.spec()]).ok().stdout.trim().to_string();
    let second = a.run(&["provision", &a.spec()]).ok().stdout.trim().to_string();
    let (gone, replaced) = (format!("{first}.tf.json"), format!("{second}.tf.json"));
    let stored = |name: &str| db.files()[name].clone();
    std::fs::remove_file(a.s.dir.join(&gone)).unwrap();
    let tmp = a.s.dir.join("edit.tmp");
    std::fs::write(&tmp, b"{\"resource\": {}}").unwrap();
    std::fs::rename(&tmp, a.s.dir.join(&replaced)).unwrap(); // as an editor saves
    let run = a.run(&["provision", "--no-apply", &a.spec()]).ok();
    assert!(run.stderr.contains("2 file(s) brought up to date from store directory `web`"), "{}", run.stderr);
    for name in [&gone, &replaced] {
        assert_eq!(a.s.read(name), stored(name), "{name} is the store's again");
    }
}

#[test]
fn a_mirror_pointed_at_another_store_reads_it_in_full() {
    // Two stores each with a directory `web` (row 1) and as many commits: a host whose mirror
    // noted the first store's revision, then pointed at the second (a restored backup looks
    // the same), must not take its own files for the second store's.
    let (one, two) = (Db::new(), Db::new());
    let (a, c) = hosts(&one);
    point_at(&c, &two.url());
    a.run(&["provision", "--no-apply", &a.spec()]).ok();
    let ys = c.run(&["provision", "--no-apply", "--count", "2", &c.spec()]).ok();
    let ys: BTreeSet<String> = ys.stdout.lines().map(str::to_string).collect();
    point_at(&a, &two.url());
    let run = a.run(&["reconcile"]).ok();
    assert!(run.stderr.contains("brought up to date from store directory `web`"), "{}", run.stderr);
    assert_eq!(ids(&a.describe()), ys, "the second store's group: {}", run.stderr);
    assert_eq!(census(&a).0, 2, "its two machines made, the first store's none: {}", run.stderr);
    assert_eq!(two.state(), declared(&two.files()));
}

// Hosts whose configurations differ would undo each other on every run: the one whose copy
// differs from what the store ran with last refuses, naming who ran what when, until its copy
// matches or it is made the one (`--accept-config`).
#[test]
fn a_host_whose_configuration_differs_refuses_until_it_matches_or_is_accepted() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    a.run(&["provision", &a.spec()]).ok();
    b.run(&["reconcile"]).ok();
    let main = std::fs::read_to_string(b.s.dir.join("main.tf")).unwrap();
    b.s.write("main.tf", &format!("{main}\n# a change on host B only\n"));
    b.s.write("extra.tf", "# only on B\n");
    let before = b.s.snapshot();
    let files = db.files();
    let refused = b.run(&["reconcile"]).code(Code::Invalid);
    assert_eq!(refused.error_lines().len(), 1, "{refused:#?}");
    let line = refused.error_lines()[0];
    let a_ran = format!("which `{}:{}` ran last at ", hostname(), b.s.dir.display());
    assert!(
        line.starts_with("error: this host's configuration differs from the one store directory `web` runs with, "),
        "{line}"
    );
    assert!(line.contains(&a_ran), "B ran it last (it matched then): {line}");
    assert!(line.ends_with(": `extra.tf` only here, `main.tf` differs"), "{line}");
    assert!(refused.stderr.contains("re-run with --accept-config"), "{}", refused.stderr);
    assert_eq!(b.s.snapshot(), before, "nothing written");
    assert_eq!(db.files(), files);
    // The URL may differ per host: it is not part of it.
    point_at(&a, &db.url_without_password());
    a.run_env(&["reconcile"], &[("PGPASSWORD", &db.password())]).ok();
    // B's copy made the one: B goes on, and now A refuses.
    let accepted = b.run(&["--accept-config", "reconcile"]).ok();
    assert!(
        accepted.stderr.contains(
            "warning: this host's configuration is now the one store directory `web` runs with (--accept-config)"
        ),
        "{}",
        accepted.stderr
    );
    let back = a.run_env(&["reconcile"], &[("PGPASSWORD", &db.password())]).code(Code::Invalid);
    let b_ran = format!("which `{}:{}` ran last at ", hostname(), b.s.dir.display());
    assert!(back.stderr.contains(&b_ran), "{}", back.stderr);
    assert!(back.stderr.contains(": `main.tf` differs, `extra.tf` only there"), "{}", back.stderr);
}

#[test]
fn migrate_moves_a_local_directory_into_the_store_once() {
    let db = Db::new();
    let a = Cloud::new();
    a.run(&["provision", &a.spec()]).ok();
    a.run(&["provision", &a.spec()]).ok();
    let local = ids(&a.describe());

    use_store(&a, &db.url());
    // Until it is moved, a command that writes refuses to start from an empty store.
    let before = a.s.snapshot();
    let refused = a.run(&["provision", &a.spec()]).code(Code::Invalid);
    assert!(refused.stderr.contains("`infrakit-tf migrate`"), "{}", refused.stderr);
    assert_eq!(a.s.snapshot(), before);

    let moved = a.run(&["migrate"]).ok();
    let files = db.files();
    assert_eq!(moved.stdout.lines().collect::<BTreeSet<_>>(), files.keys().map(String::as_str).collect());
    assert_eq!(files.keys().filter(|n| n.starts_with("instance-")).count(), 2);
    assert_eq!(db.state(), declared(&files), "the state moved into the pg backend");

    // Another host finds both, created, with nothing pending.
    let b = a.another_host();
    let rows = b.describe();
    assert_eq!(ids(&rows), local);
    assert!(rows.iter().all(|r| r["status"] == "created"), "{rows:#?}");
    b.run(&["reconcile", "--check"]).ok();
    assert_eq!(census(&a), (2, 2, 1));

    // Again: nothing to move. Another directory under the same name: refused.
    let again = a.run(&["migrate", "--output", "json"]).ok().json();
    assert_eq!(again["moved"], false, "{again}");
    let other = Cloud::new();
    other.run(&["provision", &other.spec()]).ok();
    use_store(&other, &db.url());
    let before = other.s.snapshot();
    let clash = other.run(&["migrate"]).code(Code::Invalid);
    assert!(clash.stderr.contains("store directory `web` already holds other files"), "{}", clash.stderr);
    // Nor does any other command take that directory over: its files are not the store's.
    let taken = other.run(&["reconcile"]).code(Code::Invalid);
    assert!(taken.stderr.contains("and it has never mirrored it"), "{}", taken.stderr);
    assert_eq!(other.s.snapshot(), before);
    assert_eq!(db.files(), files);

    // A store emptied by hand, its terraform state left: a new directory of that name is
    // refused too, rather than copy its state over the one there.
    db.client().batch_execute("DELETE FROM infrakit_tf.directories").unwrap();
    let over = other.run(&["migrate"]).code(Code::Invalid);
    assert!(
        over.stderr.contains("schema `infrakit_tf_state_web` of the store's database already holds a terraform state"),
        "{}",
        over.stderr
    );
    assert_eq!(other.s.snapshot(), before);
    assert_eq!(db.state(), declared(&files), "the state is as it was");
}

// A managed file that is a symbolic link is not moved into the store: it would be read
// through the link, or stored empty; the command says which and changes nothing.
#[test]
fn migrate_refuses_a_managed_file_that_is_a_link() {
    let db = Db::new();
    let a = Cloud::new();
    a.run(&["provision", &a.spec()]).ok();
    let global = a.s.dir.join("shared_global.tf.json");
    let outside = a.s.root.path().join("shared_global.tf.json");
    std::fs::rename(&global, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, &global).unwrap();
    use_store(&a, &db.url());
    let before = a.s.snapshot();
    let run = a.run(&["migrate"]).code(Code::Invalid);
    assert_eq!(run.error_lines(), [format!("error: `{}` is not a regular file", global.display()).as_str()]);
    assert_eq!(a.s.snapshot(), before);
    assert!(db.files().is_empty());
}

/// `migrate` killed after moving the state, before the files: run again, it finishes.
#[cfg(feature = "fault-injection")]
#[test]
fn an_interrupted_migrate_finishes_when_run_again() {
    let db = Db::new();
    let a = Cloud::new();
    a.run(&["provision", &a.spec()]).ok();
    let local = ids(&a.describe());
    use_store(&a, &db.url());
    let log = a.s.root.path().join("crash.log");
    let probe = a.copy();
    probe.run_env(&["migrate"], &[("INFRAKIT_TF_CRASH_LOG", log.to_str().unwrap())]);
    let points = std::fs::read_to_string(&log).unwrap();
    // The point after terraform moved the state: init's marker.
    let k = points.lines().position(|l| l.contains("infrakit-tf-init.json")).expect(&points) + 1;
    drop(probe);
    db.client()
        .batch_execute("DROP SCHEMA IF EXISTS infrakit_tf_state_web CASCADE; DROP SCHEMA IF EXISTS infrakit_tf CASCADE")
        .unwrap();
    let run = a.run_env(&["migrate"], &[("INFRAKIT_TF_CRASH_AT", &k.to_string())]);
    assert_eq!(run.code, -libc::SIGKILL, "{run:#?}");
    assert!(db.files().is_empty(), "killed before the files");
    // Meanwhile, another host: the state holds machines the store has no file for. Every
    // command but `migrate` refuses, rather than destroy them.
    let b = a.another_host();
    let before = census(&a);
    for args in [vec!["reconcile"], vec!["provision", "--no-apply", &a.spec()]] {
        let refused = b.run(&args).code(Code::Invalid);
        assert_eq!(refused.error_lines(), ["error: store directory `web` holds no instance file, but terraform's state there holds 1 instance(s): a `migrate` that moved the state and stopped before the files"], "{args:?}");
        assert!(refused.stderr.contains("run `infrakit-tf migrate` again (it finishes)"), "{}", refused.stderr);
    }
    assert_eq!(census(&a), before, "nothing destroyed");
    a.run(&["migrate"]).ok();
    assert_eq!(ids(&a.another_host().describe()), local);
    assert_eq!(db.state(), declared(&db.files()));
    a.run(&["reconcile", "--check"]).ok();
}

#[test]
fn the_password_may_come_from_pgpassword_and_is_never_printed() {
    let db = Db::new();
    let a = Cloud::new();
    use_store(&a, &db.url_without_password());
    let password = db.password();
    let with = [("PGPASSWORD", password.as_str())];
    let run = a.run_env(&["--verbose", "provision", &a.spec()], &with).ok();
    let described = a.run_env(&["--verbose", "describe"], &with).ok();
    let refused = a.run(&["provision", &a.spec()]).code(Code::StoreUnavailable);
    assert!(refused.stderr.contains("password"), "{}", refused.stderr);
    // From a password file, and the URL from INFRAKIT_TF_STORE over a wrong one in the file.
    let passfile = a.s.write_outside("pgpass", &format!("*:*:*:*:{password}\n"));
    point_at(&a, "postgresql://nobody@127.0.0.1:1/nothing");
    let url = db.url_without_password();
    // Readable by others (0644), it is refused, as libpq refuses it.
    let open = a
        .run_env(&["provision", &a.spec()], &[("PGPASSFILE", &passfile), ("INFRAKIT_TF_STORE", &url)])
        .code(Code::Invalid);
    assert!(open.stderr.contains(&format!("chmod 600 {passfile}")), "{}", open.stderr);
    std::fs::set_permissions(&passfile, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let from_file =
        a.run_env(&["provision", &a.spec()], &[("PGPASSFILE", &passfile), ("INFRAKIT_TF_STORE", &url)]).ok();
    for r in [&run, &described, &refused, &from_file] {
        assert!(!r.stdout.contains(&password) && !r.stderr.contains(&password), "{r:#?}");
    }
    assert_eq!(census(&a), (2, 2, 1));
}

// A PG_CONN_STR of the user's replaces infrakit-tf's (and its epoch): the run works, and
// says that terraform's state writes are then not fenced.
#[test]
fn a_pg_conn_str_of_the_users_is_warned_about() {
    let db = Db::new();
    let a = Cloud::new();
    use_store(&a, &db.url());
    let conn = format!("host=127.0.0.1 port={} user=infrakit dbname={} sslmode=disable", db.port(), db.name);
    let run = a.run_env(&["provision", &a.spec()], &[("PG_CONN_STR", &conn)]).ok();
    assert!(
        run.stderr.contains(
            "warning: your PG_CONN_STR replaces infrakit-tf's: terraform's state writes are not fenced by the lease"
        ),
        "{}",
        run.stderr
    );
    assert_eq!(census(&a), (1, 1, 1));
    let ours = a.run(&["provision", &a.spec()]).ok();
    assert!(!ours.stderr.contains("PG_CONN_STR"), "{}", ours.stderr);
}

/// Crash points with a store: a provision on host A is SIGKILLed at each of its points (its
/// writes, the store's commit, terraform's spawns; see `crash.rs`), then host B's `reconcile`
/// (cron on the other host) takes over at once, and host A's own next run catches up. Each
/// point starts from a copy of the same prepared directory and database.
#[cfg(feature = "fault-injection")]
#[test]
fn a_provision_killed_at_every_point_is_finished_by_the_other_host() {
    let db = Db::new();
    let template = Cloud::new();
    use_store(&template, &db.url());
    // Host B waits for A's lease to expire at every point: a short one.
    lease(&[&template], "3s");
    template.run(&["provision", &template.spec()]).ok();
    let fork = || {
        let c = template.copy();
        let copy = db.copy();
        point_at(&c, &copy.url());
        (c, copy)
    };
    let spec = template.spec();
    let command = ["provision", spec.as_str()];

    let (counting, _counting_db) = fork();
    let log = counting.s.root.path().join("crash.log");
    counting.run_env(&command, &[("INFRAKIT_TF_CRASH_LOG", log.to_str().unwrap())]).ok();
    let points = std::fs::read_to_string(&log).unwrap();
    assert!(points.contains("store commit"), "the store's commit is a crash point: {points}");

    for (k, what) in points.lines().enumerate() {
        let (a, db) = fork();
        let before: BTreeSet<String> = ids(&a.describe());
        let at = (k + 1).to_string();
        let run = a.run_env(&command, &[("INFRAKIT_TF_CRASH_AT", &at)]);
        let context = format!("provision killed at point {what}");
        assert_eq!(run.code, -libc::SIGKILL, "{context}: not killed: {run:#?}");
        let b = a.another_host();
        let recovery = b.run(&["--lock-timeout", "5m", "reconcile"]);
        assert!(recovery.is(Code::Ok), "{context}: host B's recovery failed: {recovery:#?}");
        crate::support::wait_until_idle(&a.s.dir);
        let caught_up = a.run(&["reconcile"]);
        assert!(caught_up.is(Code::Ok), "{context}: host A's next run failed: {caught_up:#?}");

        // The change is whole or absent; everything in it created once.
        let files = db.files();
        assert!(files.iter().all(|(n, doc)| !doc.is_null() && !n.ends_with(".new")), "{context}: {files:?}");
        let rows = b.describe();
        let after = ids(&rows);
        assert!(
            after == before || (after.is_superset(&before) && after.len() == before.len() + 1),
            "{context}: {before:?} -> {after:?}"
        );
        for row in &rows {
            assert_eq!(row["status"], "created", "{context}: {row}");
            for base in row["attachments"].as_array().unwrap() {
                assert!(files.contains_key(&format!("{}.tf.json", base.as_str().unwrap())), "{context}: {row}");
            }
        }
        let cloud: BTreeSet<String> = a.objects().into_keys().collect();
        assert_eq!(cloud, db.managed_ids(), "{context}: the cloud holds what the state manages, nothing twice");
        assert_eq!(census(&a).0, after.len(), "{context}: one VM per instance");
        // Host A's files are the store's again.
        for (name, doc) in &files {
            assert_eq!(&a.s.read(name), doc, "{context}: host A's `{name}`");
        }
        b.run(&["reconcile", "--check"]).ok();
    }
}

// The server restarts (every session ends: ours, the lease's heartbeat, terraform's with its
// state lock) while host A's terraform creates a machine; host B reconciles as soon as the
// server is back. The lease is a row, not a session: A's heartbeat renews it on a new
// connection, B waits for A, and nothing is made twice.
#[test]
fn a_server_restart_mid_apply_makes_nothing_twice() {
    let server = OwnServer::start();
    let db = Db::on(server.url.clone());
    let (a, b) = hosts(&db);
    a.run(&["provision", &a.spec()]).ok();
    a.delay_creates(8000);
    let mut on_a = a.start(&["provision", &a.spec()], &[]);
    assert!(on_a.wait_for("creating fakecloud_instance").is_some(), "{:?}", on_a.seen);
    server.restart();
    let on_b = b.run(&["--lock-timeout", "2m", "reconcile"]).ok();
    assert!(on_b.stderr.contains("waiting up to 120s for another run"), "B waited for A: {}", on_b.stderr);
    let on_a = on_a.finish().ok();
    assert!(!on_a.stderr.contains("warning"), "{}", on_a.stderr);
    let machines = a.machines_per_instance();
    assert_eq!(machines.len(), 2, "{machines:?}");
    assert!(machines.values().all(|n| *n == 1), "one machine per instance: {machines:?}");
    assert_eq!(census(&a), (2, 2, 1), "nothing twice");
    assert_eq!(db.state(), declared(&db.files()));
    assert_eq!(a.objects().into_keys().collect::<BTreeSet<_>>(), db.managed_ids(), "nothing leaked");
    b.run(&["reconcile", "--check"]).ok();
    std::mem::forget(db); // its server goes with the test
}

// The server ends sessions idle for 3 s (as managed databases and poolers do) while host A's
// apply takes 8 s: the long apply succeeds, terraform's session (which holds the state's
// lock, idle) is not ended, and host B, reconciling meanwhile, waits for A.
#[test]
fn an_idle_session_timeout_mid_apply_ends_no_session_and_makes_nothing_twice() {
    let db = Db::new();
    db.client().batch_execute(&format!("ALTER DATABASE {} SET idle_session_timeout = '3s'", db.name)).unwrap();
    let (a, b) = hosts(&db);
    a.run(&["provision", &a.spec()]).ok();
    a.delay_creates(8000);
    let mut on_a = a.start(&["provision", &a.spec()], &[]);
    let began = on_a.wait_for("creating fakecloud_instance").expect("creating");
    std::thread::sleep(
        (began + std::time::Duration::from_secs(5)).saturating_duration_since(std::time::Instant::now()),
    );
    // Terraform's sessions, named for the lease, idle for longer than the timeout, live on.
    let idle: Vec<(String, bool)> = db
        .client()
        .query(
            "SELECT application_name, now() - state_change > interval '3 seconds' FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name LIKE 'infrakit-tf tf web#%' AND state = 'idle'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let all: Vec<String> = db
        .client()
        .query(
            "SELECT format('%s %s %s', application_name, state, now() - state_change) FROM pg_stat_activity \
             WHERE datname = current_database()",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(idle.iter().any(|(_, long)| *long), "a terraform session idle for over 3 s: {idle:?} among {all:#?}");
    let on_b = b.run(&["--lock-timeout", "2m", "reconcile"]).ok();
    assert!(on_b.stderr.contains("waiting up to 120s for another run"), "B waited for A: {}", on_b.stderr);
    on_a.finish().ok();
    assert_eq!(census(&a), (2, 2, 1), "nothing twice");
    assert!(a.machines_per_instance().values().all(|n| *n == 1));
    assert_eq!(db.state(), declared(&db.files()));
    b.run(&["reconcile", "--check"]).ok();
}

// Host A's network to the server freezes 2 s into an 8 s create (a proxy that stops
// forwarding: no reset, the server keeps A's sessions and terraform's state lock). A's lease
// is no longer renewed: A stops its terraform before the lease expires (exit 16), and host B
// takes over once it has, ending A's stale sessions, within the lease time.
#[test]
fn a_frozen_network_holds_the_other_host_up_for_the_lease_only() {
    let db = Db::new();
    let port = db.server.rsplit_once(':').unwrap().1.split('/').next().unwrap().to_string();
    let proxy = crate::support::proxy::Proxy::to(&format!("127.0.0.1:{port}"));
    let (a, b) = hosts(&db);
    lease(&[&a, &b], "10s");
    a.with_lookups();
    b.with_lookups();
    let via_proxy = db.url().replace(&format!(":{port}/"), &format!(":{}/", proxy.port()));
    // The URL is not part of the configuration every host must share.
    point_at(&a, &via_proxy);
    a.run(&["provision", &a.spec()]).ok();
    a.delay_creates(8000);
    let mut on_a = a.start(&["provision", &a.spec()], &[]);
    let began = on_a.wait_for("creating fakecloud_instance").expect("creating");
    std::thread::sleep(
        (began + std::time::Duration::from_secs(2)).saturating_duration_since(std::time::Instant::now()),
    );
    proxy.freeze();
    let frozen = std::time::Instant::now();
    let mut on_b = b.start(&["--lock-timeout", "120s", "reconcile"], &[]);
    let took = on_b.wait_for("took over store directory `web`");
    let on_b = on_b.finish().ok();
    let took = took.unwrap_or_else(|| panic!("B never took over: {}", on_b.stderr));
    // A bound on time is the point here: B is held up for the lease (10 s), not until the
    // server's TCP keepalive gives A's frozen sessions up (hours). Generous, for a loaded
    // machine: the lease and a minute more.
    let waited = took.duration_since(frozen);
    assert!(
        waited < std::time::Duration::from_secs(10 + 60),
        "B got through after {waited:?}, lease 10 s: {}",
        on_b.stderr
    );
    let on_a = on_a.finish().code(Code::StoreUnavailable);
    assert!(on_a.stderr.contains("error: lost the lease on store directory `web`"), "{}", on_a.stderr);
    assert!(on_a.stderr.contains("was interrupted"), "A's terraform was stopped: {}", on_a.stderr);
    proxy.thaw();
    // Nothing A's terraform did after the freeze reached the state: it is B's, and whole. The
    // machine in flight when the network froze was made by A's terraform and never recorded:
    // B, taking over a lease that was not released, looked it up and adopted it.
    assert!(on_b.stderr.contains("an apply was cut short"), "{}", on_b.stderr);
    assert_eq!(db.state(), declared(&db.files()));
    b.run(&["reconcile", "--check"]).ok();
    assert!(b.machines_per_instance().values().all(|n| *n == 1), "nothing made twice: {:?}", b.machines_per_instance());
    assert_eq!(a.objects().into_keys().collect::<BTreeSet<_>>(), db.managed_ids(), "nothing leaked");
    assert_eq!(census(&a), (2, 2, 1));
}

// A host's whole process group is killed (its terraform with it) while the machines it
// creates boot: the cloud has them, no state does. The next host to take the lease (once it
// has expired) looks them up and adopts them, the very machines, nothing made twice.
#[test]
fn machines_a_dead_host_made_without_recording_are_adopted_by_the_next() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    lease(&[&a, &b], "4s");
    a.with_lookups();
    b.with_lookups();
    a.run(&["provision", &a.spec()]).ok();
    let made = a.kill_while_booting(&["provision", "--count", "2", &a.spec()]);
    let run = b.run(&["--lock-timeout", "10m", "reconcile", "--output", "json"]).ok();
    assert!(run.stderr.contains("took over store directory `web`"), "{}", run.stderr);
    let adopted: BTreeSet<String> =
        run.json()["adopted"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(adopted, made, "{}", run.stderr);
    assert!(b.machines_per_instance().values().all(|n| *n == 1), "{:?}", b.machines_per_instance());
    assert_eq!(census(&b), (3, 3, 1));
    assert_eq!(a.objects().into_keys().collect::<BTreeSet<_>>(), db.managed_ids(), "nothing leaked");
    b.run(&["reconcile", "--check"]).ok();
    a.run(&["reconcile", "--check"]).ok();
}

// Terraform's state row is deleted, or put back to an older serial, while instances are live:
// every command that would plan or apply refuses (exit 13) and creates nothing, saying how to
// push the state back.
#[test]
fn a_state_row_deleted_or_rolled_back_is_refused() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    a.run(&["provision", &a.spec()]).ok();
    a.run(&["provision", &a.spec()]).ok();
    let older = db.state_data();
    a.run(&["provision", &a.spec()]).ok();
    a.run(&["provision", &a.spec()]).ok();
    assert_eq!(census(&a), (4, 4, 1));
    let refused = |h: &Cloud, args: &[&str], why: &str| {
        let run = h.run(args).code(Code::StateLost);
        assert_eq!(run.error_lines().len(), 1, "{run:#?}");
        let line = run.error_lines()[0];
        assert!(line.starts_with("error: refusing to run terraform: the state in schema `infrakit_tf_state_web` of the store's database does not match the live files: "), "{line}");
        assert!(line.contains(why), "{line}");
        assert!(
            run.stderr
                .contains("PG_SCHEMA_NAME='infrakit_tf_state_web' PGPASSWORD=<password> terraform state push FILE"),
            "{}",
            run.stderr
        );
        assert!(!run.stderr.contains(&db.password()), "{}", run.stderr);
    };
    db.set_state_data(&older);
    refused(&b, &["reconcile"], "older than the");
    refused(&a, &["provision", &a.spec()], "older than the");
    db.client().batch_execute("DELETE FROM infrakit_tf_state_web.states").unwrap();
    refused(&b, &["reconcile"], "it is missing");
    assert_eq!(census(&a), (4, 4, 1), "nothing created again");
}

// A state no run recorded (a store brought up from the release before the stamp: its
// directories have none) is recorded by the first run that checks it, so that a state row
// deleted afterwards is refused, not taken for a first apply that saved nothing.
#[test]
fn a_state_never_recorded_is_guarded_from_the_first_run_on() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    a.run(&["provision", &a.spec()]).ok();
    a.run(&["provision", &a.spec()]).ok();
    db.client().batch_execute("UPDATE infrakit_tf.directories SET state_lineage = NULL, state_serial = NULL").unwrap();
    b.run(&["reconcile"]).ok();
    db.client().batch_execute("DELETE FROM infrakit_tf_state_web.states").unwrap();
    let run = a.run(&["reconcile"]).code(Code::StateLost);
    assert!(run.error_lines()[0].contains("it is missing"), "{run:#?}");
    assert_eq!(census(&a), (2, 2, 1), "nothing created again");
}

// Hosts whose group specs differ (Size 2 here, Size 1 there) converge once, then the other
// host refuses, rather than create and destroy a machine on every run for ever.
#[test]
fn group_specs_that_differ_between_hosts_converge_once_then_refuse() {
    let db = Db::new();
    let (a, b) = hosts(&db);
    a.s.write("web-group.json", &crate::support::specs::web(r#"{"Size": 2}"#, "v1"));
    b.s.write("web-group.json", &crate::support::specs::web(r#"{"Size": 1}"#, "v1"));
    let spec = |h: &Cloud| h.s.dir.join("web-group.json").to_str().unwrap().to_string();
    let mut counts = Vec::new();
    for (host, code) in [(&a, Code::Ok), (&b, Code::Invalid), (&a, Code::Ok), (&b, Code::Invalid)] {
        let run = host.run(&["reconcile", "--group", &spec(host)]).code(code);
        if code == Code::Invalid {
            let line = run.error_lines()[0];
            let a_ran = format!("which `{}:{}` ran last at ", hostname(), a.s.dir.display());
            assert!(
                line.starts_with(
                    "error: this host's spec of group web differs from the one store directory `web` runs with, "
                ),
                "{line}"
            );
            assert!(line.contains(&a_ran), "{line}");
        }
        counts.push(census(&a).0);
    }
    assert_eq!(counts, [2, 2, 2, 2], "one convergence, no undoing");
    b.run(&["--accept-config", "reconcile", "--group", &spec(&b)]).ok();
    a.run(&["reconcile", "--group", &spec(&a)]).code(Code::Invalid);
    assert_eq!(census(&a).0, 1, "the accepted spec, once");
}

// A libpq failover URL whose first host is down: our client reaches the second, and so does
// terraform (its driver takes one host: the one that answered).
#[test]
fn a_multi_host_url_reaches_terraform_through_the_host_that_answered() {
    let db = Db::new();
    let a = Cloud::new();
    let failover = db.url().replacen("@127.0.0.1:", "@127.0.0.1:1,127.0.0.1:", 1);
    use_store(&a, &failover);
    a.run(&["provision", &a.spec()]).ok();
    let rows = a.describe();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "created");
    a.run(&["reconcile", "--check"]).ok();
    assert_eq!(census(&a), (1, 1, 1));
    assert_eq!(db.state(), declared(&db.files()));
}

// PostgreSQL 15 grants no CREATE on schema `public`, nor on the database, to a new role:
// terraform's pg backend needs the first on every run, and the schemas are created with the
// second. Each missing privilege is one line naming the GRANT, before anything is written.
#[test]
fn a_role_without_the_privileges_it_needs_is_told_the_grant() {
    let db = Db::new();
    let role = format!("{}_role", db.name);
    db.client().batch_execute(&format!("CREATE ROLE {role} LOGIN PASSWORD 'secret-{role}'")).unwrap();
    let a = Cloud::new();
    let url = db.url().replacen(&format!("infrakit:{}@", db.password()), &format!("{role}:secret-{role}@"), 1);
    use_store(&a, &url);
    let before = a.s.snapshot();
    let grants =
        [format!("GRANT CREATE ON DATABASE {} TO {role}", db.name), format!("GRANT CREATE ON SCHEMA public TO {role}")];
    for grant in &grants {
        let run = a.run(&["provision", &a.spec()]).code(Code::StoreUnavailable);
        assert_eq!(
            run.error_lines(),
            [format!("error: the store at postgresql://{role}@127.0.0.1:{}/{} refuses what infrakit-tf and terraform need: `{grant}` is missing", db.port(), db.name).as_str()]
        );
        assert!(run.stderr.contains(&format!("hint: have the database's owner run `{grant};`")), "{}", run.stderr);
        assert_eq!(a.s.snapshot(), before);
        db.client().batch_execute(grant).unwrap();
    }
    a.run(&["provision", &a.spec()]).ok();
    assert_eq!(census(&a), (1, 1, 1));
    drop(db);
    if let Ok(mut admin) = postgres::Client::connect(&server(), postgres::NoTls) {
        let _ = admin.batch_execute(&format!("DROP ROLE IF EXISTS {role}"));
    }
}

// A create whose answer is lost on one host (the cloud made the machine, the call failed):
// the evidence is in the store at once, so the other host shows the instance unconfirmed,
// reports the look-up pending, then looks the machine up and adopts it: nothing made twice.
#[test]
fn a_create_whose_answer_is_lost_on_one_host_is_adopted_by_the_other() {
    let db = Db::new();
    let a = Cloud::new();
    a.with_lookups();
    use_store(&a, &db.url());
    let b = a.another_host();
    let vm = a.s.write_outside("vm.json", r#"{"Properties": {"resource": {"fakecloud_instance": {"vm": {}}}}}"#);
    a.run(&["provision", &vm]).ok();
    std::fs::write(a.cloud.join("lose-creates"), "1 reset\n").unwrap();
    let run = a.run(&["provision", &vm]).code(Code::TerraformFailed);
    assert!(run.stderr.contains("connection reset by peer"), "{}", run.stderr);
    let rows = b.describe();
    assert!(rows.iter().any(|r| r["status"] == "unconfirmed"), "{rows:#?}");
    b.run(&["reconcile", "--check"]).code(Code::Pending);
    let run = b.run(&["reconcile"]).ok();
    assert!(run.stderr.contains("looking up the machines it may have made"), "{}", run.stderr);
    b.run(&["reconcile"]).ok();
    assert_eq!(census(&b), (2, 0, 0), "both instances, nothing twice");
    assert_eq!(db.state(), declared(&db.files()));
    b.run(&["reconcile", "--check"]).ok();
    assert!(a.describe().iter().all(|r| r["status"] == "created"));
}
