//! A PostgreSQL failover under the store: a primary and a streaming standby of the test's own
//! (`.ci/postgres start-standby`: the shared test server serves every other test and is never
//! stopped), a store URL naming both with `target_session_attrs=read-write`, then the primary
//! stopped dead (`pg_ctl stop -m immediate`) and the standby promoted, while the directory is
//! idle or while an apply creates machines. Terraform is given one host (its driver takes one):
//! mid-apply it cannot save its state and leaves `errored.tfstate`, which the next run pushes
//! by itself when that is safe.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;
use crate::support::store::{census, declared, provisioning, use_store, Db, OwnServer};

/// A primary and its streaming standby.
struct Pair {
    primary: OwnServer,
    standby: OwnServer,
}

impl Pair {
    fn start() -> Self {
        let primary = OwnServer::start();
        let standby = OwnServer::standby_of(&primary);
        Pair { primary, standby }
    }

    /// Database `db`'s URL through both servers, the primary first, connecting to whichever
    /// accepts writes (libpq's failover URL, as a user writes it).
    fn url(&self, db: &Db) -> String {
        let port = |url: &str| url.rsplit_once(':').unwrap().1.split('/').next().unwrap().to_string();
        let (p1, p2) = (port(&self.primary.url), port(&self.standby.url));
        let url = db.url().replacen(&format!("@127.0.0.1:{p1}/"), &format!("@127.0.0.1:{p1},127.0.0.1:{p2}/"), 1);
        format!("{url}&target_session_attrs=read-write")
    }

    /// Waits until the standby has replayed everything the primary wrote so far (streaming
    /// is asynchronous: a failover may lose its last moments, which a test of "nothing lost"
    /// must not depend on).
    fn caught_up(&self) {
        let mut primary = postgres::Client::connect(&self.primary.url, postgres::NoTls).unwrap();
        let lsn: String = primary.query_one("SELECT pg_current_wal_lsn()::text", &[]).unwrap().get(0);
        let mut standby = postgres::Client::connect(&self.standby.url, postgres::NoTls).unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let row = standby.query_one("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", &[&lsn]).unwrap();
            if row.get::<_, bool>(0) {
                return;
            }
            assert!(Instant::now() < deadline, "the standby never replayed up to {lsn}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The primary dies (as in a crash), the standby is promoted: `db` is on the standby now.
    /// What the primary wrote until then is on the standby first (see [`Pair::caught_up`]).
    fn fail_over(&self, db: Db) -> Db {
        self.caught_up();
        self.primary.stop();
        self.standby.promote();
        db.moved_to(self.standby.url.clone())
    }
}

/// Every machine in the cloud is in terraform's state exactly once, and the state holds
/// nothing else: the cloud's object files against the state's IDs (a list: twice is seen).
fn each_machine_in_the_state_once(host: &Cloud, db: &Db) {
    let objects: BTreeSet<String> = host.objects().into_keys().collect();
    let mut ids: Vec<String> = db
        .resources()
        .iter()
        .flat_map(|r| r["instances"].as_array().cloned().unwrap_or_default())
        .filter_map(|i| i["attributes"]["id"].as_str().map(str::to_string))
        .collect();
    ids.sort();
    assert_eq!(ids, objects.into_iter().collect::<Vec<_>>(), "the state's IDs, the cloud's objects");
    assert!(host.machines_per_instance().values().all(|n| *n == 1), "{:?}", host.machines_per_instance());
    assert_eq!(db.state(), declared(&db.files()));
}

// The primary fails while nothing runs: the next commands go to the promoted standby, with
// nothing lost and nothing made twice.
#[test]
fn a_failover_while_idle_goes_on_on_the_standby() {
    let pair = Pair::start();
    let db = Db::on(pair.primary.url.clone());
    let a = Cloud::new();
    use_store(&a, &pair.url(&db));
    a.run(&["provision", "--count", "2", &a.spec()]).ok();
    let db = pair.fail_over(db);
    a.run(&["reconcile"]).ok();
    a.run(&["provision", &a.spec()]).ok();
    a.run(&["reconcile", "--check"]).ok();
    assert_eq!(census(&a), (3, 3, 1), "nothing lost, nothing twice");
    each_machine_in_the_state_once(&a, &db);
}

// The primary fails while an apply creates machines one after another: terraform, given the
// primary, cannot save its state and writes `errored.tfstate` (exit 7). Readers and
// `reconcile --check` leave it alone; the next `reconcile` pushes it to the promoted standby
// (same lineage, a serial not older), looks up what the apply was making, and converges:
// within two reconciles every machine in the cloud is in the state once, nothing pending.
#[test]
fn a_failover_during_an_apply_heals_within_two_reconciles() {
    let pair = Pair::start();
    let db = Db::on(pair.primary.url.clone());
    let a = Cloud::new();
    a.with_lookups();
    use_store(&a, &pair.url(&db));
    a.run(&["provision", &a.spec()]).ok();
    // Six creates of 2 s, one at a time; the failover comes after two, a third in flight.
    let on_a = provisioning(&a, 3, 2000);
    let db = pair.fail_over(db);
    let failed = on_a.finish().code(Code::TerraformFailed);
    let errored = a.s.dir.join("errored.tfstate");
    assert!(errored.exists(), "{}", failed.stderr);
    a.delay_creates(0);

    // Neither a reader nor a check pushes it.
    a.describe();
    let checked = a.run(&["reconcile", "--check"]).code(Code::StateLost);
    assert!(checked.stderr.contains("holds a state terraform could not save"), "{}", checked.stderr);
    assert!(errored.exists());

    let first = a.run(&["reconcile"]).ok();
    assert!(first.stderr.contains("pushed `errored.tfstate`"), "{}", first.stderr);
    assert!(first.stderr.contains("an apply was cut short"), "it looked up what the apply made: {}", first.stderr);
    let second = a.run(&["reconcile"]).ok();
    assert!(!second.stderr.contains("pushed"), "{}", second.stderr);
    assert!(!errored.exists());
    a.run(&["reconcile", "--check"]).ok();
    let rows = a.describe();
    assert_eq!(rows.len(), 4, "{rows:#?}");
    assert!(rows.iter().all(|r| r["status"] == "created"), "{rows:#?}");
    assert_eq!(census(&a), (4, 4, 1), "nothing lost, nothing twice");
    each_machine_in_the_state_once(&a, &db);
}

// An `errored.tfstate` that pushing would not be safe with (another state's lineage, or a
// serial older than the store's state) is refused (exit 13) as before, saying why; nothing is
// pushed and the file stays. One whose objects the store's state holds already, a serial
// later (a run stopped between its push and the file's removal), is removed.
#[test]
fn a_state_that_cannot_be_pushed_safely_is_refused_saying_why() {
    let db = Db::new();
    let a = Cloud::new();
    use_store(&a, &db.url());
    a.run(&["provision", &a.spec()]).ok();
    let older = db.state_data();
    a.run(&["provision", &a.spec()]).ok();
    let now = db.state_data();
    let top = |state: &str| serde_json::from_str::<serde_json::Value>(state).unwrap();
    let lineage = top(&now)["lineage"].as_str().unwrap().to_string();
    let other = now.replace(&lineage, "00000000-0000-0000-0000-000000000000");
    let cases = [
        (
            older.clone(),
            format!("its serial {} is older than the store's state's {}", top(&older)["serial"], top(&now)["serial"]),
        ),
        (other, format!("its lineage `00000000-0000-0000-0000-000000000000` is not the store's state's `{lineage}`")),
    ];
    for (file, why) in cases {
        a.s.write("errored.tfstate", &file);
        let run = a.run(&["reconcile"]).code(Code::StateLost);
        assert_eq!(run.error_lines().len(), 1, "{run:#?}");
        let line = run.error_lines()[0];
        assert!(line.contains("holds a state terraform could not save"), "{line}");
        assert!(line.contains(&why), "{line}");
        assert_eq!(db.state_data(), now, "nothing pushed");
        assert!(a.s.dir.join("errored.tfstate").exists());
    }
    let serial = top(&now)["serial"].as_u64().unwrap();
    let pushed = now.replacen(&format!("\"serial\": {serial},"), &format!("\"serial\": {},", serial - 1), 1);
    assert_ne!(pushed, now);
    a.s.write("errored.tfstate", &pushed);
    let run = a.run(&["reconcile"]).ok();
    assert!(run.stderr.contains("removed `errored.tfstate`, a state terraform could not save"), "{}", run.stderr);
    assert!(run.stderr.contains("holds it already"), "{}", run.stderr);
    assert!(!a.s.dir.join("errored.tfstate").exists());
    a.run(&["reconcile", "--check"]).ok();
    assert_eq!(census(&a), (2, 2, 1));
}
