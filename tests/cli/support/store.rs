//! The store (PostgreSQL) the multi-host tests share: a database per test on the throwaway
//! server `.ci/test` starts (`.ci/postgres`), whose URL is `INFRAKIT_TF_TEST_PG`, or a server of
//! the test's own ([`OwnServer`]) to stop, restart or fail over; and hosts of one fakecloud wired
//! to it. Without `INFRAKIT_TF_TEST_PG` these tests fail: they are never skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{json, Value};

use crate::support::cloud::{Cloud, Started};

/// The test server's URL (`postgresql://user:password@127.0.0.1:PORT/postgres`).
pub fn server() -> String {
    std::env::var("INFRAKIT_TF_TEST_PG").expect(
        "INFRAKIT_TF_TEST_PG is not set: the store tests need a PostgreSQL server (`.ci/test` starts one with `.ci/postgres start DIR`)",
    )
}

/// One test's database on a server, dropped at the end.
pub struct Db {
    pub server: String,
    pub name: String,
}

impl Db {
    pub fn new() -> Self {
        Self::on(server())
    }

    pub fn on(server: String) -> Self {
        Self::create(server, "")
    }

    /// The same database, on the server `server` now (a standby promoted): dropped there.
    pub fn moved_to(self, server: String) -> Self {
        let moved = Db { server, name: self.name.clone() };
        std::mem::forget(self); // its server is gone
        moved
    }

    /// A copy of this database (store and state), as it is now.
    #[cfg(feature = "fault-injection")]
    pub fn copy(&self) -> Self {
        Self::create(self.server.clone(), &format!(" TEMPLATE {}", self.name))
    }

    fn create(server: String, template: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!("store_{}_{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let mut admin = postgres::Client::connect(&server, postgres::NoTls).expect("the test server");
        admin.batch_execute(&format!("CREATE DATABASE {name}{template}")).unwrap();
        Db { server, name }
    }

    /// The database's URL, as a user writes it (`sslmode=disable`: the test server has no TLS).
    pub fn url(&self) -> String {
        let base = self.server.rsplit_once('/').unwrap().0;
        format!("{base}/{}?sslmode=disable", self.name)
    }

    /// The same without the password (it then comes from `PGPASSWORD`).
    pub fn url_without_password(&self) -> String {
        let url = self.url();
        let (scheme_user, rest) = url.split_once('@').unwrap();
        let user = scheme_user.rsplit_once(':').unwrap().0;
        format!("{user}@{rest}")
    }

    pub fn password(&self) -> String {
        let creds = self.server.split_once("://").unwrap().1.split_once('@').unwrap().0;
        creds.split_once(':').unwrap().1.to_string()
    }

    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url(), postgres::NoTls).unwrap()
    }

    /// The store's files of directory `web`: name → document.
    pub fn files(&self) -> BTreeMap<String, Value> {
        let rows = self
            .client()
            .query(
                "SELECT f.name, f.content FROM infrakit_tf.files f JOIN infrakit_tf.directories d ON d.id = f.directory \
                 WHERE d.name = 'web'",
                &[],
            )
            .unwrap();
        rows.iter()
            .map(|r| {
                let content: Vec<u8> = r.get(1);
                (r.get(0), serde_json::from_slice(&content).unwrap_or(Value::Null))
            })
            .collect()
    }

    /// Terraform's state as its pg backend keeps it (in the directory's own schema): its resources.
    pub fn resources(&self) -> Vec<Value> {
        let row = self.client().query_one("SELECT data FROM infrakit_tf_state_web.states WHERE name = 'default'", &[]);
        let data: String = row.unwrap().get(0);
        let state: Value = serde_json::from_str(&data).unwrap();
        state["resources"].as_array().cloned().unwrap_or_default()
    }

    /// Terraform's state document as its pg backend keeps it.
    pub fn state_data(&self) -> String {
        self.client()
            .query_one("SELECT data FROM infrakit_tf_state_web.states WHERE name = 'default'", &[])
            .unwrap()
            .get(0)
    }

    /// Puts a state document back in place (as a restored backup would).
    pub fn set_state_data(&self, data: &str) {
        self.client()
            .execute("UPDATE infrakit_tf_state_web.states SET data = $1 WHERE name = 'default'", &[&data])
            .unwrap();
    }

    /// The server's port.
    pub fn port(&self) -> String {
        self.server.rsplit_once(':').unwrap().1.split('/').next().unwrap().to_string()
    }

    /// The cloud IDs of the objects terraform's state manages.
    pub fn managed_ids(&self) -> BTreeSet<String> {
        let resources = self.resources();
        let instances = resources.iter().flat_map(|r| r["instances"].as_array().cloned().unwrap_or_default());
        instances.filter_map(|i| i["attributes"]["id"].as_str().map(str::to_string)).collect()
    }

    /// The resource addresses of terraform's state.
    pub fn state(&self) -> BTreeSet<String> {
        let resources = self.resources();
        resources.iter().map(|r| format!("{}.{}", r["type"].as_str().unwrap(), r["name"].as_str().unwrap())).collect()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&self.server, postgres::NoTls) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string()
}

/// The resources the store's files declare.
pub fn declared(files: &BTreeMap<String, Value>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for doc in files.values() {
        for (rtype, by_name) in doc.get("resource").and_then(Value::as_object).into_iter().flatten() {
            out.extend(by_name.as_object().unwrap().keys().map(|n| format!("{rtype}.{n}")));
        }
    }
    out
}

/// Makes `host` use the store at `url` under the name `web`, with terraform's state in
/// `backend "pg"` (which connects where the store is).
pub fn use_store(host: &Cloud, url: &str) {
    let main = std::fs::read_to_string(host.s.dir.join("main.tf")).unwrap();
    host.s.write("main.tf", &format!("{main}\nterraform {{\n  backend \"pg\" {{}}\n}}\n"));
    point_at(host, url);
}

/// Points `host`'s `infrakit-tf.json` at the store `url` (directory `web`, unless it names
/// another), the rest as it is.
pub fn point_at(host: &Cloud, url: &str) {
    let mut config: Value = host.s.read("infrakit-tf.json");
    if config.get("store").is_none() {
        config["store"] = json!({"directory": "web"});
    }
    config["store"]["postgres"] = json!(url);
    host.s.write("infrakit-tf.json", &config.to_string());
}

/// Gives the hosts' leases `lease` (`store.lease`), so that a test waits that long, not the
/// default 30 s, for a dead host's lease to expire. Every host's configuration must match.
pub fn lease(hosts: &[&Cloud], lease: &str) {
    for host in hosts {
        let mut config: Value = host.s.read("infrakit-tf.json");
        config["store"]["lease"] = json!(lease);
        host.s.write("infrakit-tf.json", &config.to_string());
    }
}

/// Two hosts of one cloud, sharing the store at `url`.
pub fn hosts_at(url: &str) -> (Cloud, Cloud) {
    let a = Cloud::new();
    use_store(&a, url);
    let b = a.another_host();
    (a, b)
}

/// The cloud's objects by kind: (VMs, dedicated volumes of size 5, shared volumes of size 50).
pub fn census(c: &Cloud) -> (usize, usize, usize) {
    let objects = c.objects();
    let count = |f: &dyn Fn(&Value) -> bool| objects.values().filter(|o| f(o)).count();
    (
        count(&|o| o["type"] == "fakecloud_instance"),
        count(&|o| o["type"] == "fakecloud_volume" && o["size"] == 5),
        count(&|o| o["type"] == "fakecloud_volume" && o["size"] == 50),
    )
}

/// Starts `provision --count N` on `host`, one create at a time (each `ms` long), and waits
/// until two resources have been created.
pub fn provisioning(host: &Cloud, count: u32, ms: u64) -> Started {
    host.delay_creates(ms);
    let count = count.to_string();
    let mut run = host.start(&["--parallelism", "1", "provision", "--count", &count, &host.spec()], &[]);
    for _ in 0..2 {
        assert!(run.wait_for("created fakecloud_").is_some(), "{:?}", run.seen);
    }
    run
}

/// A server of the test's own (`.ci/postgres`), to restart or stop: the shared one serves the
/// other tests.
pub struct OwnServer {
    root: tempfile::TempDir,
    pub url: String,
}

impl OwnServer {
    pub fn start() -> Self {
        let root = tempfile::tempdir().unwrap();
        let url = Self::ctl("start", &[root.path()]);
        OwnServer { root, url }
    }

    /// A streaming standby of `primary` (`.ci/postgres start-standby`): read-only until
    /// [`OwnServer::promote`]d.
    pub fn standby_of(primary: &OwnServer) -> Self {
        let root = tempfile::tempdir().unwrap();
        let url = Self::ctl("start-standby", &[root.path(), primary.root.path()]);
        OwnServer { root, url }
    }

    fn ctl(verb: &str, dirs: &[&Path]) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/postgres");
        let out = std::process::Command::new(&script).arg(verb).args(dirs).output().unwrap();
        assert!(out.status.success(), "{verb}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// `pg_ctl restart -m fast`: every session ends; back when this returns.
    pub fn restart(&self) {
        Self::ctl("restart", &[self.root.path()]);
    }

    /// `pg_ctl stop -m immediate`: the server dies as in a crash.
    pub fn stop(&self) {
        Self::ctl("stop", &[self.root.path()]);
    }

    /// A standby becomes a primary (`pg_ctl promote`): writable when this returns.
    pub fn promote(&self) {
        Self::ctl("promote", &[self.root.path()]);
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.stop();
    }
}
