//! The store: for several hosts, the managed files and the directory's lease live in
//! PostgreSQL, keyed by the logical directory's name (`store.directory` in `infrakit-tf.json`).
//! The local directory keeps the user's own configuration and is terraform's working
//! directory; its managed files are a copy of the store's (see `Workspace::writer`, which brings
//! it up to date).
//!
//! One room per mechanism:
//!
//! - `conn`: one connection, every call bounded in time; several hosts tried in order;
//! - `lease`: who may change the directory, fenced (an epoch every commit compares, and that
//!   terraform's state writes carry): the statements of its table;
//! - `heartbeat`: a lease held, renewed by a thread of its own, published to the process-wide
//!   view (`crate::lease`); the terraform runner asks that view, commands and the workspace
//!   get an error, and none of them knows of heartbeats;
//! - `schema`: the tables, their migration, the role's privileges, the state table's fence;
//! - `config`: where the store is (the URL, libpq's environment, the password file), and
//!   what terraform's `backend "pg"` gets;
//! - `pooler`: a connection pooler in front of the server (PgBouncer): known, and refused
//!   unless it pools by session;
//! - `relay`: terraform's connections to a pooler that refuses its driver's startup packet
//!   (Debian's PgBouncer), on loopback, that packet's `extra_float_digits` dropped.
//!
//! Here: [`Store`], which connects, takes the lease, and reads and commits the files. A
//! change ([`Store::commit`]) is one transaction that first renews the lease by its epoch: all
//! files of one change, or none, and never from a host that lost the lease. A reader
//! ([`Store::files`]) gets one statement's snapshot, without the lease. A call whose
//! connection broke is made again once on a new one: under the lease nobody else writes, so
//! a commit whose answer was lost is made again to the same effect.

mod config;
mod conn;
mod heartbeat;
mod lease;
mod pooler;
pub(crate) mod relay;
mod schema;
mod state;
pub(crate) mod tls;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio_postgres::types::Type;
use tokio_postgres::Client;

pub(crate) use self::config::{hostname, StoreConfig};
use self::conn::{Conn, Fault, Param, Setup};
use self::heartbeat::Lease;
use crate::exit::{Code, Failure};
use crate::journal::FileOp;
use crate::lease::Noticed;
use crate::lock::wait::{Polite, Wait};
use crate::lookup::Evidence;
use crate::output::Printer;

/// How often a held lease is tried again.
const POLL: Duration = Duration::from_millis(200);

/// A connection to the store, for one logical directory.
pub(crate) struct Store {
    /// `None` once broken: the next call opens another.
    conn: Option<Conn>,
    config: StoreConfig,
    /// `user@host:port/db`, for messages.
    display: String,
    /// The lease, once taken ([`Store::take_lease`]).
    lease: Option<Lease>,
    /// Who we are in the lease's record: this process, uniquely (`HOST/PID/NANOS`).
    owner: String,
    /// The configuration records as [`Store::files`] read them under the lease, by part.
    configs: Option<BTreeMap<String, ConfigRecord>>,
    /// Configuration records to write with the first write (see [`Store::set_config`]).
    pending: Vec<(String, String, String)>,
    /// Why an apply may have been cut short, as the store says under the lease.
    unsettled: Option<String>,
}

/// One file as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredFile {
    pub(crate) content: Vec<u8>,
    pub(crate) mode: u32,
}

/// A part of the configuration as the store last ran it (see [`Store::config`]).
#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct ConfigRecord {
    /// Each file's hash (of a group: its spec's).
    pub(crate) files: BTreeMap<String, String>,
    /// `HOST:DIRECTORY` that ran it.
    pub(crate) host: String,
    /// When, UTC.
    pub(crate) at: String,
}

/// The logical directory as the store holds it.
pub(crate) struct StoredDir {
    /// Its row: which directory of this name a host's files are a copy of (see `workspace::sync`).
    pub(crate) id: i64,
    /// Drawn anew by every commit of files: the same revision, the same files.
    pub(crate) revision: String,
    /// Its files, by name; empty when `unchanged`.
    pub(crate) files: BTreeMap<String, StoredFile>,
    /// Whether it is still at the revision the caller knew ([`Store::files_since`]), its files
    /// then not read.
    pub(crate) unchanged: bool,
}

impl Store {
    /// Connects and makes sure the schema is there. A server that cannot be reached, refuses
    /// us, lacks a privilege we need, or has a newer schema is an error; nothing is written.
    /// So is a pooler that does not keep a server session for each client (see `pooler`).
    pub(crate) fn connect(config: &StoreConfig) -> Result<Self> {
        let display = config.display();
        let limit = config.connect_limit();
        let unavailable = |f: Fault| unavailable(&display, &f.why());
        let mut conn =
            Conn::open(&config.server, limit, config.timing.call_limit(), Setup::Startup).map_err(unavailable)?;
        let probe = schema::probe(&mut conn, limit, &config.state_schema()).map_err(unavailable)?;
        // The startup packet's settings not in effect: a pooler refused or dropped them.
        let pooled = probe.in_transaction != conn.in_transaction().as_millis() as i64;
        let mut relayed = false;
        if pooled {
            relayed = pooler::check(&mut conn, &config.server, limit)
                .map_err(unavailable)?
                .map_err(|refusal| refusal.error(&display))?;
            conn.set_session(limit).map_err(unavailable)?;
        }
        config.connected(conn.reached(), conn.idle_sessions(), conn.tls(), pooled, relayed);
        if let Some(grant) = probe.missing {
            return Err(Failure::new(
                Code::StoreUnavailable,
                format!("the store at {display} refuses what infrakit-tf and terraform need: `{grant}` is missing"),
            )
            .hint(format!("have the database's owner run `{grant};`, then re-run; nothing was changed"))
            .into());
        }
        match probe.version {
            Some(schema::SCHEMA_VERSION) if probe.fence => {}
            Some(schema::SCHEMA_VERSION) => match schema::upgrade_fence(&mut conn, limit) {
                Ok(()) => {}
                // Not the fence's owner (another role made the store): the fence before
                // holds where terraform carries `infrakit_tf.lease`, that is, not behind a pooler.
                Err(Fault::Db(e))
                    if !pooled && e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {}
                Err(f) => return Err(unavailable(f)),
            },
            Some(v) if v > schema::SCHEMA_VERSION => {
                return Err(Failure::new(
                    Code::Invalid,
                    format!(
                        "the store at {display} has schema version {v}, newer than the {} this infrakit-tf knows",
                        schema::SCHEMA_VERSION
                    ),
                )
                .hint("upgrade infrakit-tf on this host")
                .into())
            }
            _ => schema::create(&mut conn, limit).map_err(unavailable)?,
        }
        if !probe.state_table {
            schema::create_state_table(&mut conn, limit, &config.state_schema()).map_err(unavailable)?;
        }
        let owner = format!(
            "{}/{}/{}",
            hostname(),
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos()
        );
        Ok(Store {
            conn: Some(conn),
            config: config.clone(),
            display,
            lease: None,
            owner,
            configs: None,
            pending: Vec::new(),
            unsettled: None,
        })
    }

    /// The logical directory's name, for messages.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// Takes the directory's lease, waiting until `wait`'s deadline and saying so once;
    /// `Locked` (exit 5) when it is still held then, naming who holds it. A lease that expired
    /// without being released is taken over (its host died or lost the server): the stale
    /// holder's terraform sessions are ended, and that is said.
    pub(crate) fn take_lease(&mut self, wait: Wait, printer: &Printer) -> Result<()> {
        let mut polite = Polite::new(wait, printer, format!("store directory `{}`", self.config.name), POLL);
        let holder = format!("infrakit-tf {} pid {}", hostname(), std::process::id());
        let (timing, key) = (self.config.timing, (schema::CLASS, self.key()));
        loop {
            let sent = Instant::now();
            let (name, owner) = (self.config.name.clone(), self.owner.clone());
            let got = self.try_with(|conn, limit| lease::try_acquire(conn, limit, &name, &holder, &owner, key, timing));
            let acquired = match got {
                Ok(acquired) => acquired,
                // While we wait, a server that restarts or a dropped connection is waited out.
                Err(Fault::Lost(_)) if polite.pause() => continue,
                Err(fault) => return Err(self.failed(fault)),
            };
            if let Some(acquired) = acquired {
                let setup = self.config.setup();
                self.lease = Some(Lease::hold(&self.config.server, setup, &name, acquired.epoch, timing, sent));
                if let Some(previous) = acquired.took_over {
                    let ended = self
                        .with(|conn, limit| lease::end_stale_sessions(conn, limit, &name, acquired.epoch))
                        .unwrap_or(0);
                    let sessions =
                        if ended > 0 { format!("; {ended} of its terraform session(s) ended") } else { String::new() };
                    printer.warn(&format!(
                        "took over store directory `{name}` from {previous}, whose lease expired without being released (its host died or lost the server){sessions}"
                    ));
                    // It may have been applying: what it was making is looked up before the
                    // next plan or apply, by whichever host runs next (see `workspace::lookup`).
                    self.set_evidence(Some(&format!("{previous} lost its lease")))?;
                }
                return Ok(());
            }
            let now = Instant::now();
            let holder =
                self.with(|conn, limit| lease::holder(conn, limit, &name)).unwrap_or_else(|_| "another run".into());
            polite.wait_for_since(now, &holder)?;
        }
    }

    /// The second key of the advisory lock an infrakit-tf before leases took: FNV-1a of the
    /// name, made non-negative.
    fn key(&self) -> i32 {
        let hash = self.config.name.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
        (hash & 0x7fff_ffff) as i32
    }

    /// The directory and its files, as of one snapshot; `None` when the store has no
    /// directory of this name yet.
    /// Under the lease, the configuration records read with them are kept for
    /// [`Store::config`] (nobody else writes them meanwhile).
    pub(crate) fn files(&mut self) -> Result<Option<StoredDir>> {
        self.files_since(None)
    }

    /// [`Store::files`], but the files themselves only if the directory is no longer row
    /// `id` at `revision` (`known`): a copy that has them already costs one short row, not
    /// every file (10,000 instances are megabytes).
    pub(crate) fn files_since(&mut self, known: Option<(i64, String)>) -> Result<Option<StoredDir>> {
        let name = self.config.name.clone();
        let (id, revision) = known.unwrap_or((-1, String::new()));
        let (dir, config, unsettled) = self.query(async |c| {
            let rows = c
                .query_typed(
                    // The files in a lateral subquery kept apart (`OFFSET 0`): the revision's
                    // check is then a one-time filter, and an unchanged directory's files are
                    // not read at all (a join's filter reads all, 2 ms at 10,000, to drop them).
                    "SELECT d.id, f.name, f.content, f.mode, d.config::text, d.unsettled, d.revision, \
                            (d.id = $2 AND d.revision = $3) FROM infrakit_tf.directories d \
                     LEFT JOIN LATERAL (SELECT name, content, mode FROM infrakit_tf.files \
                         WHERE directory = d.id AND NOT (d.id = $2 AND d.revision = $3) OFFSET 0) f ON true \
                     WHERE d.name = $1",
                    &[(&name, Type::TEXT), (&id, Type::INT8), (&revision, Type::TEXT)],
                )
                .await?;
            let Some(first) = rows.first() else { return Ok((None, None, None)) };
            let (id, config, unsettled, revision, unchanged): (i64, Option<String>, Option<String>, String, bool) =
                (first.get(0), first.get(4), first.get(5), first.get(6), first.get(7));
            let mut files = BTreeMap::new();
            for row in rows {
                let Some(name) = row.get::<_, Option<String>>(1) else { continue };
                let mode: i32 = row.get(3);
                files.insert(name, StoredFile { content: row.get(2), mode: self::mode(mode as u32) });
            }
            Ok((Some(StoredDir { id, revision, files, unchanged }), config, unsettled))
        })?;
        if self.lease.is_some() {
            self.configs = Some(config.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default());
        }
        // A reader shows what awaits a look-up too (`describe`, `sweep-orphans --dry-run`).
        self.unsettled = self.unsettled.take().or(unsettled);
        Ok(dir)
    }

    /// Why an apply of this directory may have been cut short (its machines not recorded), and
    /// when that was noted by the store's clock, as the store knew when its files were read
    /// (under this lease, for a writer); `None`: none was.
    pub(crate) fn evidence(&self) -> Option<Evidence> {
        // A record from before the time was kept: long ago.
        self.unsettled.as_deref().map(|text| Evidence::parse(text, 0))
    }

    /// Records that an apply may have been cut short (`Some`: why), noted now by the store's
    /// clock (the one every host reads), or that its machines have been looked up (`None`),
    /// for every host, under the lease.
    pub(crate) fn set_evidence(&mut self, why: Option<&str>) -> Result<()> {
        let why = why.map(str::to_string);
        let row = self.fenced(
            "rec AS (INSERT INTO infrakit_tf.directories AS d (name, unsettled) \
                     SELECT $1, $4 || E'\\n@' || floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM lease \
                 ON CONFLICT (name) DO UPDATE SET unsettled = excluded.unsettled RETURNING d.unsettled) \
             SELECT EXISTS (SELECT 1 FROM lease), (SELECT unsettled FROM rec)",
            &[(&why, Type::TEXT)],
        )?;
        self.unsettled = row.get(1);
        Ok(())
    }

    /// The store's clock, in milliseconds since the epoch: the one clock that every host
    /// reads, for what must be compared across hosts (when evidence was noted, when a machine
    /// was created).
    pub(crate) fn now_ms(&mut self) -> Result<u64> {
        let ms: i64 = self
            .query(async |c| {
                c.query_typed_one("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint", &[]).await
            })?
            .get(0);
        Ok(u64::try_from(ms).unwrap_or(0))
    }

    /// Whether schema `schema` holds a terraform state (its pg backend's `default` one).
    pub(crate) fn has_state(&mut self, schema: &str) -> Result<bool> {
        let sql = format!("SELECT count(*) FROM {}.states WHERE name = 'default'", schema::quote(schema));
        self.query(async |c| match c.query_typed_one(sql.as_str(), &[]).await {
            Ok(row) => Ok(row.get::<_, i64>(0) > 0),
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => Ok(false),
            Err(e) => Err(e),
        })
    }

    /// The configuration the store last ran with, for part `part` (`base`, `group ID`):
    /// what each of its files hashed to, who ran it and when. `None`: no run recorded one (or
    /// no directory yet).
    pub(crate) fn config(&mut self, part: &str) -> Result<Option<ConfigRecord>> {
        if let Some(configs) = &self.configs {
            return Ok(configs.get(part).cloned());
        }
        let (name, part) = (self.config.name.clone(), part.to_string());
        let text: Option<String> = self.query(async |c| {
            let row = c
                .query_typed_opt(
                    "SELECT (config -> $2)::text FROM infrakit_tf.directories WHERE name = $1",
                    &[(&name, Type::TEXT), (&part, Type::TEXT)],
                )
                .await?;
            Ok(row.and_then(|r| r.get(0)))
        })?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// Records that `host` runs part `part` of the configuration as `files` (the time is the
    /// server's), with the command's first write to the store (so that a command that fails
    /// before it writes, or only checks, records nothing); the directory's row is created if
    /// it is new, so that the first run's configuration is the one the next host compares with.
    pub(crate) fn set_config(&mut self, part: &str, files: &BTreeMap<String, String>, host: &str) -> Result<()> {
        self.pending.push((part.to_string(), serde_json::to_string(files)?, host.to_string()));
        Ok(())
    }

    /// Writes the configuration records [`Store::set_config`] keeps for the first write.
    fn write_configs(&mut self) -> Result<()> {
        for (part, files, host) in std::mem::take(&mut self.pending) {
            self.fenced_now(
            "rec AS (INSERT INTO infrakit_tf.directories AS d (name, config) \
                 SELECT $1, jsonb_build_object($4::text, jsonb_build_object('files', $5::text::jsonb, 'host', $6::text, \
                     'at', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'))) FROM lease \
                 ON CONFLICT (name) DO UPDATE SET config = coalesce(d.config, '{}'::jsonb) || excluded.config RETURNING 1) \
             SELECT EXISTS (SELECT 1 FROM lease)",
            &[(&part, Type::TEXT), (&files, Type::TEXT), (&host, Type::TEXT)],
            )?;
        }
        Ok(())
    }

    /// Writes and removes the files of `ops` in one transaction (the directory is created if
    /// it is new), first renewing the lease by its epoch: all or none, and nothing from a
    /// host that lost the lease. Returns the directory's ID and its revision after it (a new
    /// random one, unless `ops` is empty).
    pub(crate) fn commit(&mut self, ops: &[FileOp]) -> Result<(i64, String)> {
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
        let row = self.fenced(
            "rev AS (SELECT md5(random()::text || clock_timestamp()::text) AS new), \
             dir AS (INSERT INTO infrakit_tf.directories AS d (name, revision) SELECT $1, rev.new FROM lease, rev \
                 ON CONFLICT (name) DO UPDATE SET revision = CASE WHEN $8 THEN excluded.revision ELSE d.revision END \
                 RETURNING id, revision), \
             gone AS (DELETE FROM infrakit_tf.files f USING dir WHERE f.directory = dir.id AND f.name = ANY($4)), \
             put AS (INSERT INTO infrakit_tf.files (directory, name, content, mode) \
                 SELECT dir.id, u.name, u.content, u.mode \
                 FROM dir, unnest($5::text[], $6::bytea[], $7::int[]) AS u(name, content, mode) \
                 ON CONFLICT (directory, name) DO UPDATE \
                 SET content = excluded.content, mode = excluded.mode, updated = now()) \
             SELECT EXISTS (SELECT 1 FROM lease), (SELECT id FROM dir), (SELECT revision FROM dir)",
            &[
                (&gone, Type::TEXT_ARRAY),
                (&names, Type::TEXT_ARRAY),
                (&contents, Type::BYTEA_ARRAY),
                (&modes, Type::INT4_ARRAY),
                (&!ops.is_empty(), Type::BOOL),
            ],
        )?;
        let (id, revision): (i64, String) = (row.get(1), row.get(2));
        crate::fault::point(|| format!("store commit {} file(s)", ops.len()));
        Ok((id, revision))
    }

    /// Runs `WITH <renewal>, <sql>` ([`lease::RENEWED`]): one statement, so one transaction,
    /// that writes only if the lease is still ours, its result's first column saying whether it
    /// was. `params` are `$4` on. A host that lost the lease writes nothing (exit 16). Returns
    /// the result's row.
    fn fenced(&mut self, sql: &str, params: &[Param]) -> Result<tokio_postgres::Row> {
        self.write_configs()?;
        self.fenced_now(sql, params)
    }

    /// [`Store::fenced`], and nothing more.
    fn fenced_now(&mut self, sql: &str, params: &[Param]) -> Result<tokio_postgres::Row> {
        let lease = self.lease.as_ref().expect("a store change needs the lease");
        let (name, epoch, ms) = (self.config.name.clone(), lease.epoch(), lease::fence_params(lease.timing()));
        let name = name.as_str();
        let mut all = lease::fence(&name, &epoch, &ms);
        all.extend_from_slice(params);
        let sql = format!("WITH {}, {sql}", lease::RENEWED);
        let sent = Instant::now();
        let row = self.query(async |c| c.query_typed_one(sql.as_str(), &all).await)?;
        let lease = self.lease.as_ref().expect("held");
        if row.get::<_, bool>(0) {
            lease.renewed(sent);
            Ok(row)
        } else {
            lease.gone(crate::lease::TAKEN);
            Err(self.lease_lost())
        }
    }

    /// Runs a call on the connection ([`Store::with`]), its limit the lease's.
    fn query<T>(&mut self, f: impl AsyncFn(&mut Client) -> Result<T, tokio_postgres::Error>) -> Result<T> {
        self.with(|conn, limit| conn.call(limit, &f))
    }

    /// Runs `call` on the connection, opening a new one first if it broke, and once more on a
    /// new one if it breaks during the call. Refused when this process lost its lease.
    fn with<T>(&mut self, call: impl Fn(&mut Conn, Duration) -> conn::Outcome<T>) -> Result<T> {
        if self.lease.as_ref().is_some_and(|l| l.lost().is_some()) {
            return Err(self.lease_lost());
        }
        self.try_with(call).map_err(|fault| self.failed(fault))
    }

    /// [`Store::with`] without the lease's check, its fault typed: for a caller that waits
    /// some faults out ([`Store::take_lease`]). A connection that cannot be opened is lost.
    fn try_with<T>(&mut self, call: impl Fn(&mut Conn, Duration) -> conn::Outcome<T>) -> conn::Outcome<T> {
        let limit = self.config.timing.call_limit();
        let mut tries = 0;
        loop {
            tries += 1;
            let mut conn = match self.conn.take() {
                Some(conn) => conn,
                None => self.reconnect().map_err(|f| Fault::Lost(f.why()))?,
            };
            match call(&mut conn, limit) {
                Ok(value) => {
                    self.conn = Some(conn);
                    return Ok(value);
                }
                Err(Fault::Lost(_)) if tries < 2 => {} // a new connection is tried once
                Err(Fault::Lost(why)) => return Err(Fault::Lost(why)),
                Err(Fault::Db(e)) => {
                    self.conn = Some(conn);
                    return Err(Fault::Db(e));
                }
            }
        }
    }

    /// The command's error for a store call's `fault`: a lost connection is exit 16.
    fn failed(&self, fault: Fault) -> anyhow::Error {
        match fault {
            Fault::Lost(why) => lost(&self.display, &why),
            Fault::Db(e) => anyhow::Error::new(e).context(format!("the store at {} failed", self.display)),
        }
    }

    /// A new connection for the store's calls, its settings made as the first connection
    /// found they must be (behind a pooler or not).
    fn reconnect(&self) -> conn::Outcome<Conn> {
        Conn::open(
            &self.config.server,
            self.config.connect_limit(),
            self.config.timing.call_limit(),
            self.config.setup(),
        )
    }

    /// The error for a lease this process lost: exit 16.
    fn lease_lost(&self) -> anyhow::Error {
        let why = self.lease.as_ref().and_then(Lease::lost).unwrap_or_else(|| "it is no longer ours".into());
        crate::lease::lost_error(Noticed::Store { directory: &self.config.name, server: &self.display }, &why)
    }

    /// Gives the lease back, so that another host need not wait for it to expire (on a new
    /// connection if ours broke; unreleased, it expires).
    fn release(&mut self) {
        if let Some(lease) = self.lease.take() {
            if self.conn.is_none() && lease.lost().is_none() {
                self.conn = self.reconnect().ok();
            }
            lease.release(self.conn.as_mut());
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.release();
    }
}

/// The error for a connection lost mid-run (exit 16).
fn lost(display: &str, why: &str) -> anyhow::Error {
    Failure::new(Code::StoreUnavailable, format!("lost the store at {display}: {why}"))
        .hint("the change under way was not made (unless the connection went as it committed: the next run sees); what earlier steps committed stands, and the next run carries on from the store")
        .into()
}

/// The error for a store that cannot be reached or refused us (exit 16).
fn unavailable(display: &str, why: &str) -> anyhow::Error {
    let hint = if why.starts_with(conn::REFUSED) {
        // A pooler (PgBouncer) answered, and refuses a parameter ours still carries: the URL's.
        "a connection pooler (PgBouncer) answered there and refuses that parameter of the connection: take it out of the store's URL, or have the pooler let it through (`ignore_startup_parameters`); nothing was changed"
    } else {
        "check that PostgreSQL runs there and the URL is right (`store.postgres` in infrakit-tf.json, --store or INFRAKIT_TF_STORE); nothing was changed"
    };
    Failure::new(Code::StoreUnavailable, format!("cannot use the store at {display}: {why}")).hint(hint).into()
}

/// The permission bits a file has in the store and, through it, on every host: never more
/// than rw-r--r-- (no setuid, exec or write but the owner's), whatever a row or a local file
/// says. One rule on both sides, so that a file compares equal to its copy.
pub(crate) fn mode(bits: u32) -> u32 {
    bits & 0o644
}
