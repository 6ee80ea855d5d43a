//! The store behind PgBouncer (Debian's package, its settings): pooling by session, it works,
//! fence included, terraform's connections through our relay (Debian's PgBouncer refuses the
//! `extra_float_digits` of terraform's driver) or directly (one that lets it through);
//! pooling by transaction, it is refused before anything is written. The two PgBouncers
//! `.ci/test` starts (`.ci/pgbouncer`, Debian's settings as they are) stand in front of the
//! store tests' server, `INFRAKIT_TF_TEST_PGBOUNCER_SESSION` and
//! `INFRAKIT_TF_TEST_PGBOUNCER_TRANSACTION` their URLs; each test's database is made on the
//! server directly (`store::Db`) and reached through one of them, or through a PgBouncer of
//! the test's own ([`OwnPgBouncer`]; one requires TLS, with the certificates of the TLS
//! server's directory, `INFRAKIT_TF_TEST_PG_TLS_DIR`). Without them these tests fail: they
//! are never skipped.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;
use crate::support::store::{
    census, declared, hostname, hosts_at, lease, point_at, provisioning, server, use_store, Db,
};

/// The URL of the PgBouncer of `mode` that `.ci/test` started.
fn pgbouncer(mode: &str) -> String {
    let var = format!("INFRAKIT_TF_TEST_PGBOUNCER_{}", mode.to_uppercase());
    std::env::var(&var).unwrap_or_else(|_| {
        panic!("{var} is not set: the pooler tests need PgBouncer in front of INFRAKIT_TF_TEST_PG (`.ci/test` starts it with `.ci/pgbouncer start DIR URL {mode}`)")
    })
}

/// `db`'s URL through the PgBouncer of `mode` (or at URL `pooler`), and the pooler's port.
fn through(db: &Db, mode: &str) -> (String, String) {
    through_at(db, &pgbouncer(mode))
}

fn through_at(db: &Db, pooler: &str) -> (String, String) {
    let base = pooler.rsplit_once('/').unwrap().0;
    let port = base.rsplit_once(':').unwrap().1.to_string();
    (format!("{base}/{}?sslmode=disable", db.name), port)
}

/// How many schemas of the store (and of terraform's state) the database has.
fn store_schemas(db: &Db) -> i64 {
    let sql = "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'infrakit_tf%'";
    db.client().query_one(sql, &[]).unwrap().get(0)
}

#[test]
fn two_hosts_share_a_directory_through_a_session_pooler_and_one_takes_over_from_the_other() {
    let db = Db::new();
    let (a, b) = hosts_at(&through(&db, "session").0);
    lease(&[&a, &b], "4s");
    a.run(&["provision", &a.spec()]).ok();
    assert_eq!(b.describe().len(), 1, "B reads what A made");
    a.delay_creates(2000);
    // Host A dies (infrakit-tf and its terraform) while its create is under way.
    a.kill_during(&["provision", &a.spec()], "creating");
    let run = b.run(&["--lock-timeout", "10m", "reconcile"]).ok();
    let took = format!("warning: took over store directory `web` from infrakit-tf {} pid", hostname());
    assert!(run.stderr.contains(&took), "{}", run.stderr);
    assert_eq!(census(&b), (2, 2, 1), "both instances, nothing twice");
    a.delay_creates(0);
    a.run(&["reconcile", "--check"]).ok();
    assert_eq!(db.state(), declared(&db.files()));
}

// A terraform whose lease is gone (here: a `terraform state push` with the session name a
// run under that lease had, through the pooler, which passes no other setting) cannot write
// the state: the fence reads the epoch from the name; a fence of the release before (which
// read only `infrakit_tf.lease`) is brought up by the first command. The hosts' terraforms,
// each under its own lease, write through the pooler. A PgBouncer that lets terraform's
// `extra_float_digits` through needs no relay: terraform connects to it directly.
#[test]
fn a_stale_state_write_through_a_session_pooler_is_refused() {
    let bouncer = OwnPgBouncer::start("extra_float_digits");
    let db = Db::new();
    let (url, port) = through_at(&db, &bouncer.url);
    let (a, b) = hosts_at(&url);
    a.run(&["provision", &a.spec()]).ok();
    db.client()
        .batch_execute(
            "CREATE OR REPLACE FUNCTION infrakit_tf.fence() RETURNS trigger LANGUAGE plpgsql AS $$
             DECLARE token text := current_setting('infrakit_tf.lease', true);
             BEGIN
                 IF coalesce(token, '') <> '' THEN
                     PERFORM 1 FROM infrakit_tf.leases WHERE directory = TG_ARGV[0] AND epoch::text = token
                         AND NOT released AND expires > clock_timestamp() FOR SHARE;
                     IF NOT FOUND THEN RAISE EXCEPTION 'stale' USING ERRCODE = 'lock_not_available'; END IF;
                 END IF;
                 IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
                 RETURN NEW;
             END $$;
             COMMENT ON FUNCTION infrakit_tf.fence() IS NULL;",
        )
        .unwrap();
    b.run(&["provision", &b.spec()]).ok();
    let epoch: i64 = db.client().query_one("SELECT epoch FROM infrakit_tf.leases", &[]).unwrap().get(0);
    let conn = format!(
        "host=127.0.0.1 port={port} user=infrakit dbname={} sslmode=disable application_name='infrakit-tf tf web#{epoch}'",
        db.name
    );
    let terraform = |args: &[&str]| {
        let out = Command::new(crate::support::terraform::terraform_program())
            .args(args)
            .current_dir(&a.s.dir)
            .env("PG_CONN_STR", &conn)
            .env("PG_SCHEMA_NAME", "infrakit_tf_state_web")
            .env("PGPASSWORD", db.password())
            .env("TF_CLI_CONFIG_FILE", a.s.cli_config())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (pulled, state, stderr) = terraform(&["state", "pull"]);
    assert!(pulled, "{stderr}");
    // What it would save: the state, one serial on.
    let mut state: Value = serde_json::from_str(&state).unwrap();
    state["serial"] = (state["serial"].as_i64().unwrap() + 1).into();
    let newer = a.s.write_outside("newer.tfstate", &state.to_string());
    let before = db.state_data();
    let (pushed, _, stderr) = terraform(&["state", "push", &newer]);
    assert!(!pushed, "a stale state write went through: {stderr}");
    let refused = format!("the lease (epoch {epoch}) on store directory web is no longer held");
    assert!(stderr.contains(&refused), "{stderr}");
    assert_eq!(db.state_data(), before, "the state is as it was");
    a.run(&["provision", &a.spec()]).ok();
    assert_eq!(census(&b), (3, 3, 1));
    assert_eq!(db.state(), declared(&db.files()));
}

// Transaction pooling hands one server session to several clients: terraform's state lock
// and prepared statements would go astray. Refused at connect, one line naming it, exit 16,
// nothing written: no local file, no schema in a new database, no row in an existing store.
#[test]
fn a_transaction_pooler_is_refused_before_anything_is_written() {
    let db = Db::new();
    let (url, port) = through(&db, "transaction");
    let a = Cloud::new();
    use_store(&a, &url);
    let refused = |host: &Cloud, args: &[&str]| {
        let before = host.s.snapshot();
        let run = host.run(args).code(Code::StoreUnavailable);
        assert_eq!(
            run.error_lines(),
            [format!("error: cannot use the store at postgresql://infrakit@127.0.0.1:{port}/{}: it is behind a pooler in transaction or statement pooling mode (PgBouncer's pool_mode), which hands one server session to several clients: terraform's state lock and statements need one of their own", db.name).as_str()]
        );
        assert!(
            run.stderr
                .contains("hint: have the pooler pool this database by session (PgBouncer: `pool_mode = session`"),
            "{}",
            run.stderr
        );
        assert_eq!(host.s.snapshot(), before, "{args:?} wrote nothing here");
    };
    refused(&a, &["provision", &a.spec()]);
    refused(&a, &["describe"]);
    assert_eq!(store_schemas(&db), 0, "nothing written in the database");
    // A store made directly: a host behind the transaction pooler changes none of it.
    let direct = a.another_host();
    point_at(&direct, &db.url());
    direct.run(&["provision", &direct.spec()]).ok();
    let rows = |sql: &str| -> Vec<String> {
        db.client().query(sql, &[]).unwrap().iter().map(|r| r.get::<_, String>(0)).collect()
    };
    let store = "SELECT format('%s %s %s', d.name, d.revision, d.config) FROM infrakit_tf.directories d \
                 UNION ALL SELECT format('%s %s %s', l.directory, l.epoch, l.expires) FROM infrakit_tf.leases l";
    let (files, before) = (db.files(), rows(store));
    refused(&a, &["provision", &a.spec()]);
    assert_eq!((db.files(), rows(store)), (files, before), "the store as it was");
    assert_eq!(census(&direct), (1, 1, 1));
}

// A parameter of the user's URL the pooler refuses is told as the pooler's refusal, not as a
// server that is not there.
#[test]
fn a_parameter_a_pooler_refuses_is_said_to_be_the_poolers() {
    let db = Db::new();
    let (url, port) = through(&db, "session");
    let a = Cloud::new();
    use_store(&a, &format!("{url}&options=-c%20work_mem%3D8MB"));
    let run = a.run(&["describe"]).code(Code::StoreUnavailable);
    assert_eq!(
        run.error_lines(),
        [format!(
            "error: cannot use the store at postgresql://infrakit@127.0.0.1:{port}/{}: unsupported startup parameter: options",
            db.name
        )
        .as_str()]
    );
    assert!(run.stderr.contains("hint: a connection pooler (PgBouncer) answered there"), "{}", run.stderr);
    assert!(!run.stderr.contains("check that PostgreSQL runs there"), "{}", run.stderr);
}

/// A PgBouncer of the test's own in front of the test server, pooling by session, Debian's
/// settings but its `ignore_startup_parameters` (`-`: Debian's, none), and, with `tls` (a
/// directory of `.ci/postgres start-tls`'s certificates), TLS required of its clients.
struct OwnPgBouncer {
    dir: tempfile::TempDir,
    url: String,
}

impl OwnPgBouncer {
    fn start(ignored: &str) -> Self {
        Self::start_with(ignored, None)
    }

    fn start_with(ignored: &str, tls: Option<&Path>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = server();
        let mut args =
            vec!["start".as_ref(), dir.path().as_os_str(), server.as_ref(), "session".as_ref(), ignored.as_ref()];
        args.extend(tls.map(Path::as_os_str));
        let out = Command::new(Self::script()).args(&args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        OwnPgBouncer { dir, url: String::from_utf8(out.stdout).unwrap().trim().to_string() }
    }

    fn script() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/pgbouncer")
    }
}

impl Drop for OwnPgBouncer {
    fn drop(&mut self) {
        let _ = Command::new(Self::script()).arg("stop").arg(self.dir.path()).output();
    }
}

// PgBouncer as Debian's file has it refuses the parameter terraform's driver sends on every
// connection (lib/pq's `extra_float_digits`): terraform's connections go through infrakit-tf's
// relay, which drops it. Two hosts provision and reconcile through it, terraform's state is
// written through it, and the fence still refuses a write under a lease that is gone (the
// session's name, which the relay and the pooler pass on, carrying the old epoch).
#[test]
fn terraform_works_through_a_pooler_that_refuses_its_drivers_startup_parameter() {
    let bouncer = OwnPgBouncer::start("-");
    let db = Db::new();
    let (url, port) = through_at(&db, &bouncer.url);
    let (a, b) = hosts_at(&url);
    a.run(&["provision", &a.spec()]).ok();
    assert_eq!(b.describe().len(), 1, "B reads what A made");
    b.run(&["provision", &b.spec()]).ok();
    a.run(&["reconcile"]).ok();
    b.run(&["reconcile", "--check"]).ok();
    assert_eq!(census(&a), (2, 2, 1), "both instances, nothing twice");
    assert_eq!(db.state(), declared(&db.files()), "terraform's state written through the pooler");
    // A write under the epoch of a lease released since, through the same pooler.
    let epoch: i64 = db.client().query_one("SELECT epoch FROM infrakit_tf.leases", &[]).unwrap().get(0);
    let before = db.state_data();
    let stale = format!(
        "host=127.0.0.1 port={port} user=infrakit password={} dbname={} application_name='infrakit-tf tf web#{epoch}'",
        db.password(),
        db.name
    );
    let mut client = postgres::Client::connect(&stale, postgres::NoTls).unwrap();
    let refused = client
        .batch_execute("UPDATE infrakit_tf_state_web.states SET data = data || ' ' WHERE name = 'default'")
        .unwrap_err();
    let refused = refused.as_db_error().unwrap().message().to_string();
    assert!(
        refused.contains(&format!("the lease (epoch {epoch}) on store directory web is no longer held")),
        "{refused}"
    );
    assert_eq!(db.state_data(), before, "the state is as it was");
    no_relay_left(&[&a, &b]);
}

// Infrakit-tf alone is killed (the OOM killer) while its terraform creates machines behind
// Debian's PgBouncer: the relay, a process of its own, outlives it, so that its terraform,
// interrupted, saves what it made through it, as it does connected directly; then the relay
// ends. The other host takes over once the lease has expired, and makes nothing twice.
#[test]
fn infrakit_tf_killed_alone_behind_a_pooler_that_refuses_its_drivers_startup_parameter_loses_nothing() {
    let db = Db::new();
    let (a, b) = hosts_at(&through(&db, "session").0);
    // A terraform stopped too slowly under load is killed before the lease expires, and the
    // create it had in flight is then in no state: the look-ups find it (as in life they must).
    a.with_lookups();
    b.with_lookups();
    lease(&[&a, &b], "12s");
    let mut on_a = provisioning(&a, 3, 2000);
    on_a.kill(false);
    on_a.finish();
    // Its terraform, its plugins and its relay (which runs in the directory too) are gone.
    crate::support::wait_until_idle(&a.s.dir);
    a.delay_creates(0);
    let run = b.run(&["--lock-timeout", "10m", "reconcile"]).ok();
    assert!(run.stderr.contains("took over store directory `web`"), "{}", run.stderr);
    assert_eq!(census(&b), (3, 3, 1), "created once: {}", run.stderr);
    assert!(b.machines_per_instance().values().all(|n| *n == 1));
    assert_eq!(db.state(), declared(&db.files()), "the state holds every machine");
    b.run(&["reconcile", "--check"]).ok();
    no_relay_left(&[&a, &b]);
}

/// Waits (10 s at most) until no relay (`infrakit-tf __relay`) runs in the hosts' directories:
/// after a run that ended normally, it ends once terraform's connections are closed.
fn no_relay_left(hosts: &[&Cloud]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let relays = || -> Vec<String> {
        let proc = std::fs::read_dir("/proc").unwrap().filter_map(Result::ok);
        proc.filter(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cwd = std::fs::read_link(e.path().join("cwd"));
            cmdline.split(|b| *b == 0).any(|arg| arg == b"__relay")
                && cwd.is_ok_and(|cwd| hosts.iter().any(|h| cwd == h.s.dir))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
    };
    while !relays().is_empty() {
        assert!(std::time::Instant::now() < deadline, "relays still running: {:?}", relays());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

// Over TLS (the pooler requires it of its clients): the relay makes the TLS connection ours
// made (its checks, the URL's sslrootcert), terraform gets plain text on loopback only.
#[test]
fn terraform_reaches_a_tls_pooler_that_refuses_its_drivers_startup_parameter_through_the_relay() {
    let tls_dir = std::path::PathBuf::from(std::env::var("INFRAKIT_TF_TEST_PG_TLS_DIR").expect(
        "INFRAKIT_TF_TEST_PG_TLS_DIR is not set: this test uses the TLS server's certificates (`.ci/test` starts it with `.ci/postgres start-tls DIR`)",
    ))
    .join("tls");
    let bouncer = OwnPgBouncer::start_with("-", Some(&tls_dir));
    let db = Db::new();
    let port = through_at(&db, &bouncer.url).1;
    let url = format!(
        "postgresql://infrakit:{}@localhost:{port}/{}?sslmode=verify-full&sslrootcert={}",
        db.password(),
        db.name,
        tls_dir.join("ca.crt").display()
    );
    let (a, b) = hosts_at(&url);
    a.run(&["provision", &a.spec()]).ok();
    assert_eq!(b.describe().len(), 1, "B reads what A made");
    b.run(&["provision", &b.spec()]).ok();
    assert_eq!(census(&a), (2, 2, 1));
    assert_eq!(db.state(), declared(&db.files()), "terraform's state written through the pooler");
    no_relay_left(&[&a, &b]);
}

// No other local user reaches the store through the relay (which connects upstream with our
// credentials: with a pooler that authenticates by client certificate, a bare startup packet
// was enough): it listens on no port, only on a Unix socket in a directory of this user's
// alone, which another user can neither enter nor connect to.
#[test]
fn another_local_user_cannot_use_the_relay() {
    let db = Db::new();
    let (a, _) = hosts_at(&through(&db, "session").0);
    let tmp = crate::support::users::shared_tmp(&a.s);
    a.delay_creates(4000);
    let mut started = a.start(&["provision", &a.spec()], &[("TMPDIR", tmp.to_str().unwrap())]);
    assert!(started.wait_for("creating").is_some(), "{:?}", started.seen);
    let relay = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            cmdline.split(|b| *b == 0).any(|arg| arg == b"__relay")
                && std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd == a.s.dir)
        })
        .expect("the relay runs while terraform does");
    let inodes: Vec<String> = std::fs::read_dir(relay.path().join("fd"))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_string))
        .collect();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert!(
                !(f.get(3) == Some(&"0A") && f.get(9).is_some_and(|i| inodes.contains(&i.to_string()))),
                "the relay listens on a port: {line}"
            );
        }
    }
    let sockets: Vec<std::path::PathBuf> = std::fs::read_dir(&tmp)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("infrakit-tf-relay-"))
        .map(|e| e.path().join(".s.PGSQL.5432"))
        .collect();
    assert_eq!(sockets.len(), 1, "{sockets:?}");
    let script = format!(
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); print('CONNECTED')\"",
        sockets[0].display()
    );
    let (_, said) = crate::support::users::as_nobody(&script, &tmp);
    assert!(!said.contains("CONNECTED") && said.contains("Permission denied"), "another user: {said}");
    let run = started.finish();
    assert!(run.is(Code::Ok), "{run:?}");
}
