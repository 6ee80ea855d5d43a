//! The store: for several hosts, the managed files and the directory lock live in PostgreSQL,
//! keyed by the logical directory's name (`store.directory` in `infrakit-tf.json`). The local
//! directory keeps the user's own configuration and is terraform's working directory; its
//! managed files are a mirror of the store (see `Workspace::lock`, which brings it up to date).
//!
//! - **The lock** is a session-level advisory lock (`pg_try_advisory_lock(CLASS, key)`, the
//!   two-key form, which never meets terraform's one-key locks on its own state): held while
//!   our connection lives, released by PostgreSQL when the process or its host dies or the
//!   connection drops. Waiting polls it, as the local lock does, up to `--lock-timeout`.
//! - **A change** ([`Store::commit`]) is one transaction: all files of one change, or none.
//!   It runs on the connection that holds the lock, so a writer that lost its lock (its
//!   connection) cannot commit.
//! - **A reader** ([`Store::files`]) gets one statement's snapshot, without the lock.
//!
//! The schema (`infrakit_tf`) is created on first use, under a transaction-level advisory
//! lock so that two hosts starting at once do not race; `schema_version` says which layout it
//! has ([`SCHEMA_VERSION`]), for later migrations:
//!
//! ```sql
//! infrakit_tf.schema_version (version integer)
//! infrakit_tf.directories    (id bigserial primary key, name text unique, created timestamptz,
//!                             config_fingerprint text, config_host text)
//! infrakit_tf.files          (directory bigint references directories on delete cascade,
//!                             name text, content bytea, mode integer, updated timestamptz,
//!                             primary key (directory, name))
//! ```

mod config;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use postgres::{Client, NoTls};

pub(crate) use self::config::{hostname, StoreConfig};
use crate::exit::{Code, Failure};
use crate::journal::FileOp;
use crate::lock::Wait;
use crate::output::Printer;

/// The layout of the `infrakit_tf` schema this build reads and writes.
const SCHEMA_VERSION: i32 = 1;

/// First key of our advisory locks (`iktf`); the second is the directory name's hash.
const CLASS: i32 = 0x696b_7466;

/// How often a held lock is tried again.
const POLL: Duration = Duration::from_millis(100);

/// A connection to the store, for one logical directory.
pub(crate) struct Store {
    client: Client,
    name: String,
    /// `user@host:port/db`, for messages.
    display: String,
    locked: bool,
}

/// One file as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredFile {
    pub(crate) content: Vec<u8>,
    pub(crate) mode: u32,
}

/// The logical directory as the store holds it.
pub(crate) struct StoredDir {
    /// Its row: which directory of this name a host mirrors (see `workspace::sync`).
    pub(crate) id: i64,
    /// Its files, by name.
    pub(crate) files: BTreeMap<String, StoredFile>,
}

impl Store {
    /// Connects and makes sure the schema is there. A server that cannot be reached, refuses
    /// us, or has a newer schema is an error; nothing is written.
    pub(crate) fn connect(config: &StoreConfig) -> Result<Self> {
        let display = config.display();
        let client = config.pg.connect(NoTls).map_err(|e| unavailable(&display, &e))?;
        let mut store = Store { client, name: config.name.clone(), display, locked: false };
        store.schema()?;
        Ok(store)
    }

    /// The logical directory's name, for messages.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn schema(&mut self) -> Result<()> {
        let found = self.client.query_opt("SELECT max(version) FROM infrakit_tf.schema_version", &[]);
        let version: Option<i32> = match found {
            Ok(row) => row.and_then(|r| r.get(0)),
            Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) => None,
            Err(e) => return Err(self.error(e)),
        };
        match version {
            Some(SCHEMA_VERSION) => Ok(()),
            Some(v) if v > SCHEMA_VERSION => Err(Failure::new(
                Code::Invalid,
                format!(
                    "the store at {} has schema version {v}, newer than the {SCHEMA_VERSION} this infrakit-tf knows",
                    self.display
                ),
            )
            .hint("upgrade infrakit-tf on this host")
            .into()),
            _ => self.create_schema(),
        }
    }

    fn create_schema(&mut self) -> Result<()> {
        let mut tx = self.client.transaction().map_err(|e| unavailable(&self.display, &e))?;
        let created = (|| {
            tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&CLASS])?;
            tx.batch_execute(
                "CREATE SCHEMA IF NOT EXISTS infrakit_tf;
                 CREATE TABLE IF NOT EXISTS infrakit_tf.schema_version (version integer NOT NULL);
                 CREATE TABLE IF NOT EXISTS infrakit_tf.directories (
                     id bigserial PRIMARY KEY,
                     name text NOT NULL UNIQUE,
                     created timestamptz NOT NULL DEFAULT now(),
                     config_fingerprint text,
                     config_host text);
                 CREATE TABLE IF NOT EXISTS infrakit_tf.files (
                     directory bigint NOT NULL REFERENCES infrakit_tf.directories (id) ON DELETE CASCADE,
                     name text NOT NULL,
                     content bytea NOT NULL,
                     mode integer NOT NULL,
                     updated timestamptz NOT NULL DEFAULT now(),
                     PRIMARY KEY (directory, name));",
            )?;
            let has: Option<i32> = tx.query_one("SELECT max(version) FROM infrakit_tf.schema_version", &[])?.get(0);
            if has.is_none() {
                tx.execute("INSERT INTO infrakit_tf.schema_version (version) VALUES ($1)", &[&SCHEMA_VERSION])?;
            }
            Ok::<_, postgres::Error>(())
        })();
        match created.and_then(|()| tx.commit()) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Takes the directory's lock, waiting until `wait`'s deadline and saying so once;
    /// `Locked` (exit 5) when it is still held then, naming who holds it.
    pub(crate) fn lock(&mut self, wait: Wait, printer: &Printer) -> Result<()> {
        let Wait { timeout, deadline } = wait;
        let mut said = false;
        loop {
            let got: bool = match self.client.query_one("SELECT pg_try_advisory_lock($1, $2)", &[&CLASS, &self.key()]) {
                Ok(row) => row.get(0),
                Err(e) => return Err(self.error(e)),
            };
            if got {
                self.locked = true;
                return Ok(());
            }
            let now = Instant::now();
            let holder = self.holder();
            if now >= deadline {
                return Err(Failure::new(
                    Code::Locked,
                    format!("store directory `{}` is locked by {holder}", self.name),
                )
                .hint(format!(
                    "wait for it to finish, or give --lock-timeout more than {}",
                    crate::lock::human(timeout)
                ))
                .into());
            }
            if !said {
                printer.status(&format!(
                    "waiting up to {} for {holder} to release store directory `{}` (--lock-timeout)",
                    crate::lock::human(timeout),
                    self.name
                ));
                said = true;
            }
            std::thread::sleep(POLL.min(deadline - now));
        }
    }

    /// Who holds our lock: the `application_name` its connection gave (host and PID).
    fn holder(&mut self) -> String {
        let sql = "SELECT a.application_name, host(a.client_addr) FROM pg_locks l \
                   JOIN pg_stat_activity a ON a.pid = l.pid \
                   WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 \
                   AND l.classid::bigint = $1 AND l.objid::bigint = $2";
        let key = i64::from(self.key());
        match self.client.query_opt(sql, &[&i64::from(CLASS), &key]) {
            Ok(Some(row)) => {
                let app: Option<String> = row.get(0);
                let addr: Option<String> = row.get(1);
                match (app.filter(|a| !a.is_empty()), addr) {
                    (Some(app), Some(addr)) => format!("another run ({app}, from {addr})"),
                    (Some(app), None) => format!("another run ({app})"),
                    (None, _) => "another run".into(),
                }
            }
            _ => "another run".into(),
        }
    }

    /// The second key of the directory's lock: FNV-1a of its name, made non-negative (two
    /// names that meet only share a lock, never a directory).
    fn key(&self) -> i32 {
        let hash = self.name.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
        (hash & 0x7fff_ffff) as i32
    }

    /// The directory and its files, as of one snapshot; `None` when the store has no
    /// directory of this name yet.
    pub(crate) fn files(&mut self) -> Result<Option<StoredDir>> {
        let sql = "SELECT d.id, f.name, f.content, f.mode FROM infrakit_tf.directories d \
                   LEFT JOIN infrakit_tf.files f ON f.directory = d.id WHERE d.name = $1";
        let rows = match self.client.query(sql, &[&self.name]) {
            Ok(rows) => rows,
            Err(e) => return Err(self.error(e)),
        };
        let Some(id) = rows.first().map(|r| r.get::<_, i64>(0)) else { return Ok(None) };
        let mut files = BTreeMap::new();
        for row in rows {
            let Some(name) = row.get::<_, Option<String>>(1) else { continue };
            let mode: i32 = row.get(3);
            files.insert(name, StoredFile { content: row.get(2), mode: self::mode(mode as u32) });
        }
        Ok(Some(StoredDir { id, files }))
    }

    /// Whether schema `schema` holds a terraform state (its pg backend's `default` one).
    pub(crate) fn has_state(&mut self, schema: &str) -> Result<bool> {
        let sql = format!("SELECT count(*) FROM \"{}\".states WHERE name = 'default'", schema.replace('"', "\"\""));
        match self.client.query_one(sql.as_str(), &[]) {
            Ok(row) => Ok(row.get::<_, i64>(0) > 0),
            Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) => Ok(false),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Notes the fingerprint of the configuration this host runs with (its `main.tf` and the
    /// like), and returns the host that ran last with another one, if it differs: hosts that
    /// apply different copies undo each other's changes. Nothing for a directory not created
    /// yet. Only under the lock.
    pub(crate) fn note_config(&mut self, fingerprint: &str, host: &str) -> Result<Option<String>> {
        let sql = "UPDATE infrakit_tf.directories new SET config_fingerprint = $2, config_host = $3                    FROM infrakit_tf.directories old WHERE new.id = old.id AND new.name = $1                    RETURNING old.config_fingerprint, old.config_host";
        let row = match self.client.query_opt(sql, &[&self.name, &fingerprint, &host]) {
            Ok(row) => row,
            Err(e) => return Err(self.error(e)),
        };
        Ok(row.and_then(|r| {
            let (before, by): (Option<String>, Option<String>) = (r.get(0), r.get(1));
            (before.is_some_and(|b| b != fingerprint)).then(|| by.unwrap_or_default())
        }))
    }

    /// Writes and removes the files of `ops` in one transaction (the directory is created if
    /// it is new): all or none. Only under the lock. Returns the directory's ID.
    pub(crate) fn commit(&mut self, ops: &[FileOp]) -> Result<i64> {
        assert!(self.locked, "a store change needs the lock");
        // The last operation on a name is what stands.
        let last: BTreeMap<&str, &FileOp> = ops.iter().map(|op| (op.name.as_str(), op)).collect();
        let (mut names, mut contents, mut modes, mut gone) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (name, op) in last {
            match &op.after {
                Some((bytes, perms)) => {
                    names.push(name);
                    contents.push(bytes.as_slice());
                    modes.push(mode(perms.bits()) as i32);
                }
                None => gone.push(name),
            }
        }
        let name = self.name.clone();
        let done = (|| {
            let mut tx = self.client.transaction()?;
            let id: i64 = tx
                .query_one(
                    "INSERT INTO infrakit_tf.directories (name) VALUES ($1) \
                     ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id",
                    &[&name],
                )?
                .get(0);
            if !gone.is_empty() {
                tx.execute("DELETE FROM infrakit_tf.files WHERE directory = $1 AND name = ANY($2)", &[&id, &gone])?;
            }
            if !names.is_empty() {
                tx.execute(
                    "INSERT INTO infrakit_tf.files (directory, name, content, mode) \
                     SELECT $1, * FROM unnest($2::text[], $3::bytea[], $4::int[]) \
                     ON CONFLICT (directory, name) DO UPDATE \
                     SET content = excluded.content, mode = excluded.mode, updated = now()",
                    &[&id, &names, &contents, &modes],
                )?;
            }
            tx.commit().map(|()| id)
        })();
        let id = done.map_err(|e| self.error(e))?;
        crate::fault::point(|| format!("store commit {} file(s)", ops.len()));
        Ok(id)
    }

    /// An error of the store once connected. A lost connection (closed, or ended by the
    /// server: a restart, `pg_terminate_backend`, classes 08 and 57) is `StoreUnavailable`:
    /// the change under way was not committed, and what earlier steps committed stands.
    fn error(&self, e: postgres::Error) -> anyhow::Error {
        let lost = match e.as_db_error() {
            None => std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()),
            Some(db) => db.severity() == "FATAL" || ["08", "57"].iter().any(|c| db.code().code().starts_with(c)),
        };
        if e.is_closed() || lost {
            return Failure::new(Code::StoreUnavailable, format!("lost the store at {}: {}", self.display, reason(&e)))
                .hint("the change under way was not made (unless the connection went as it committed: the next run sees); what earlier steps committed stands, and the next run carries on from the store")
                .into();
        }
        anyhow::Error::new(e).context(format!("the store at {} failed", self.display))
    }
}

/// What went wrong, in one line: the server's message, or the I/O error and its causes.
fn reason(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => {
            let mut why = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                why = format!("{why}: {s}");
                source = s.source();
            }
            why
        }
    }
}

/// The error for a store that cannot be reached or refused us.
fn unavailable(display: &str, e: &postgres::Error) -> anyhow::Error {
    Failure::new(Code::StoreUnavailable, format!("cannot use the store at {display}: {}", reason(e)))
        .hint("check that PostgreSQL runs there and the URL is right (`store.postgres` in infrakit-tf.json, --store or INFRAKIT_TF_STORE); nothing was changed")
        .into()
}

/// The permission bits a file has in the store and, through it, on every host: never more
/// than rw-r--r-- (no setuid, exec or write but the owner's), whatever a row or a local file
/// says. One rule on both sides, so that a file compares equal to its copy.
pub(crate) fn mode(bits: u32) -> u32 {
    bits & 0o644
}

/// Whether the store keeps a file of this name: the managed files (live and queued), the ID
/// record and the import blocks. Anything else in the directory is the user's, or local.
pub(crate) fn keeps(name: &str) -> bool {
    if name.contains('/') || name.contains('\0') {
        return false;
    }
    name == crate::directory::LAST_ID
        || name == crate::names::IMPORT_FILE
        || crate::names::split_file_name(name).and_then(|(base, _)| crate::names::classify(base)).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_keeps_managed_files_and_the_id_record_only() {
        for kept in [
            "instance-1.tf.json",
            "instance-1.tf.json.new",
            "web_dedicated_1.tf.json",
            "web_global.tf.json.new",
            ".infrakit-tf-last-id",
            "infrakit-tf-import.tf.json",
        ] {
            assert!(keeps(kept), "{kept}");
        }
        for local in [
            "main.tf",
            "infrakit-tf.json",
            "terraform.tfstate",
            ".infrakit-tf-journal.json",
            ".infrakit-tf-terraform.json",
            "web_dedicated_../../etc.tf.json",
            "a_dedicated_x/y.tf.json",
        ] {
            assert!(!keeps(local), "{local}");
        }
    }
}
