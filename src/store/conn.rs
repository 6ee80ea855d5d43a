//! One connection to the store's server, and nothing else: every call is bounded in time, so
//! that a network that freezes (packets dropped, no reset: the server never answers and the
//! kernel never says so) costs a known wait, never a hang. A call that does not answer in time
//! leaves the connection broken, and the caller decides whether to open another.
//!
//! It is tokio-postgres driven by a runtime of its own (one thread: this one), as the
//! `postgres` crate does, but with a deadline on every call, which that crate cannot give.
//!
//! A URL may name several hosts (`postgresql://h1:5432,h2:5432/db`, libpq's failover form):
//! they are tried in order, one at a time, so that we know which one answered
//! ([`Conn::reached`]) and terraform, whose driver takes one host, is given that one.
//!
//! The session's settings go in the startup packet (`options`), which costs no round trip; a
//! connection pooler refuses that parameter (PgBouncer: `unsupported startup parameter:
//! options`) or drops it (`ignore_startup_parameters`), so behind one they are made by a
//! statement after connecting instead ([`Setup`], see `pooler`).

use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio_postgres::config::Host;

use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config};

use super::tls::{Mode, Tls};

/// The store's server: where it is and who we are there (`pg`: the URL and libpq's
/// environment, all but TLS), and how TLS is made (`tls`). One value, resolved once
/// (`config`), that every connection is opened from ([`Conn::open`]).
#[derive(Clone)]
pub(super) struct Server {
    pub(super) pg: Config,
    pub(super) tls: Tls,
}

/// How PgBouncer's refusal of a parameter of the startup packet begins (then `: NAME`).
pub(super) const REFUSED: &str = "unsupported startup parameter";

/// Whether `e` is a pooler refusing a parameter of the startup packet. PgBouncer says so
/// with a protocol violation (`08P01`) and no other code; PostgreSQL itself never does
/// (an unknown setting is `42704`).
fn refused_startup(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| db.code() == &SqlState::PROTOCOL_VIOLATION && db.message().starts_with(REFUSED))
}

/// How a call failed.
#[derive(Debug)]
pub(super) enum Fault {
    /// The connection is gone, or did not answer in time (it is broken from now on): what the
    /// call did on the server is not known, unless it was refused before it began.
    Lost(String),
    /// The server answered with an error (the connection is still usable).
    Db(tokio_postgres::Error),
}

impl Fault {
    fn from(e: tokio_postgres::Error) -> Fault {
        let lost = match e.as_db_error() {
            None => std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()),
            // FATAL: the server ends the session; 08 (connection exception), 57 (operator
            // intervention: a shutdown, `pg_terminate_backend`, an idle timeout).
            Some(db) => db.severity() == "FATAL" || ["08", "57"].iter().any(|c| db.code().code().starts_with(c)),
        };
        if e.is_closed() || lost {
            Fault::Lost(reason(&e))
        } else {
            Fault::Db(e)
        }
    }

    /// What went wrong, in one line.
    pub(super) fn why(&self) -> String {
        match self {
            Fault::Lost(why) => why.clone(),
            Fault::Db(e) => reason(e),
        }
    }
}

/// What went wrong, in one line: the server's message, or the I/O error and its causes.
pub(super) fn reason(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => {
            let mut why = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                let next = s.to_string();
                if !why.ends_with(&next) {
                    why = format!("{why}: {next}");
                }
                source = s.source();
            }
            why
        }
    }
}

pub(super) type Outcome<T> = std::result::Result<T, Fault>;

/// A statement's parameter with its type named, for tokio-postgres's `query_typed`: the
/// statement is parsed, bound and run in one round trip, where `query` prepares it first (two).
/// The store's statements run once each, so a prepared one is never reused: half the round
/// trips (on loopback the difference was within the bench's noise; a distant server gains).
pub(super) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// An open connection.
pub(super) struct Conn {
    rt: tokio::runtime::Runtime,
    /// `None` once dropped ([`Drop`]).
    client: Option<Client>,
    /// The connection's I/O, which ends when the client is dropped.
    io: tokio::task::JoinHandle<()>,
    /// Which host of the URL answered, and its port.
    reached: (Host, u16),
    /// Whether the server knows `idle_session_timeout` (PostgreSQL 14 and later).
    idle_sessions: bool,
    /// How long the session may sit idle in a transaction (asked, not necessarily in effect:
    /// see [`Conn::set_session`]).
    in_transaction: Duration,
    /// Whether the connection is over TLS.
    tls: bool,
    broken: bool,
}

/// How a connection's session gets its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Setup {
    /// In the startup packet (no round trip), unless refused there: then none (the caller
    /// finds them not in effect and asks for them with [`Conn::set_session`]).
    Startup,
    /// A pooler is known to be in front of the server: none in the startup packet, then one
    /// statement ([`Conn::set_session`]).
    Pooled,
    /// None at all (a connection that only looks at the pooler, see `pooler::hands_over`).
    Bare,
}

impl Conn {
    /// Connects to the first host of `server` that answers within `limit` (each), its session set
    /// up in the startup packet (no round trip): never ended for being idle
    /// (`idle_session_timeout = 0`: managed databases and poolers set one, and a lease holder
    /// is idle while terraform runs; a server before PostgreSQL 14, which does not know it,
    /// is asked again without it), and never left idle inside a transaction for longer than
    /// `in_transaction` (a host that froze mid-commit must not hold the lease's row for hours).
    /// TLS is as its `tls` says (libpq's `allow`: plain first, then TLS if the server refuses).
    /// Behind a pooler, `setup` says how the settings are made instead (see [`Setup`]).
    pub(super) fn open(server: &Server, limit: Duration, in_transaction: Duration, setup: Setup) -> Outcome<Conn> {
        let opened = match setup {
            Setup::Startup => match Self::open_with(server, limit, in_transaction, Some(true)) {
                Err(Fault::Db(e))
                    if e.as_db_error().is_some_and(|db| db.message().contains("idle_session_timeout")) =>
                {
                    Self::open_with(server, limit, in_transaction, Some(false))
                }
                // A pooler: the caller sees the settings are not in effect (`schema::probe`).
                Err(Fault::Db(e)) if refused_startup(&e) => Self::open_with(server, limit, in_transaction, None),
                opened => opened,
            },
            Setup::Pooled | Setup::Bare => Self::open_with(server, limit, in_transaction, None),
        };
        let mut conn = opened?;
        if setup == Setup::Pooled {
            conn.set_session(limit)?;
        }
        Ok(conn)
    }

    /// Makes the session's settings with one statement, for a session that could not get
    /// them in its startup packet (behind a pooler): as [`Conn::open`] says, and
    /// `idle_session_timeout` only where the server knows it. A session pooler keeps them for
    /// the client's whole session (and resets them, `DISCARD ALL`, when it ends).
    pub(super) fn set_session(&mut self, limit: Duration) -> Outcome<()> {
        let ms = self.in_transaction.as_millis().to_string();
        self.idle_sessions = self.call(limit, async |c| {
            let row = c
                .query_typed_one(
                    "SELECT set_config('idle_in_transaction_session_timeout', $1, false), \
                            CASE WHEN current_setting('idle_session_timeout', true) IS NULL THEN false \
                                 ELSE set_config('idle_session_timeout', '0', false) IS NOT NULL END",
                    &[(&ms, Type::TEXT)],
                )
                .await?;
            Ok(row.get(1))
        })?;
        Ok(())
    }

    /// `startup`: the session's settings in the startup packet, `idle_session_timeout` with
    /// them or not (`Some(idle_sessions)`); or none (`None`).
    fn open_with(server: &Server, limit: Duration, in_transaction: Duration, startup: Option<bool>) -> Outcome<Conn> {
        let Server { pg, tls } = server;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Fault::Lost(format!("cannot start the connection's runtime: {e}")))?;
        let idle_sessions = startup == Some(true);
        let mut options = String::new();
        if startup.is_some() {
            options = format!("-c idle_in_transaction_session_timeout={}", in_transaction.as_millis());
        }
        if idle_sessions {
            options.push_str(" -c idle_session_timeout=0");
        }
        let mut last = None;
        for (i, host) in pg.get_hosts().iter().enumerate() {
            let port = pg.get_ports().get(i).or(pg.get_ports().first()).copied().unwrap_or(5432);
            let used = Arc::new(AtomicBool::new(false));
            let attempt = |mode| {
                let one = single(pg, host, port, &options, mode);
                let connector = tls.connector(used.clone());
                rt.block_on(async { tokio::time::timeout(limit, one.connect(connector)).await })
            };
            let mode = tls.for_host(host);
            let mut tried = attempt(mode);
            // `allow`: plain text refused by the server's rules (pg_hba.conf: `hostssl` only),
            // try again with TLS; a wrong password is not a reason to. If TLS fails without
            // the server's answer, the plain attempt's refusal says more.
            let refused =
                matches!(&tried, Ok(Err(e)) if e.code() == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION));
            if tls.mode == Mode::Allow && mode == SslMode::Disable && matches!(host, Host::Tcp(_)) && refused {
                let again = attempt(SslMode::Require);
                if !matches!(&again, Ok(Err(e)) if e.as_db_error().is_none()) {
                    tried = again;
                }
            }
            let name = match host {
                Host::Tcp(h) => h.as_str(),
                Host::Unix(_) => "",
            };
            match tried {
                Ok(Ok((client, connection))) => {
                    // The connection's I/O runs whenever a call is driven (`block_on`).
                    let io = rt.spawn(async move {
                        let _ = connection.await;
                    });
                    let tls = used.load(Ordering::Relaxed);
                    let (client, reached) = (Some(client), (host.clone(), port));
                    return Ok(Conn { rt, client, io, reached, idle_sessions, in_transaction, tls, broken: false });
                }
                // Refused for the setting: every host is the same server, or the same version;
                // or by a pooler, for the parameter (each host is tried again without it).
                Ok(Err(e))
                    if !options.is_empty()
                        && (e.as_db_error().is_some_and(|db| db.message().contains("idle_session_timeout"))
                            || refused_startup(&e)) =>
                {
                    return Err(Fault::Db(e))
                }
                Ok(Err(e)) => last = Some(tls.why(&e, name).map_or_else(|| Fault::from(e), Fault::Lost)),
                Err(_) => last = Some(Fault::Lost(format!("no answer within {}", crate::text::duration(limit)))),
            }
        }
        Err(last.unwrap_or_else(|| Fault::Lost("no host to connect to".into())))
    }

    /// Runs `f` on the connection, giving up after `limit` (the connection is then broken).
    pub(super) fn call<T>(
        &mut self,
        limit: Duration,
        f: impl AsyncFnOnce(&mut Client) -> Result<T, tokio_postgres::Error>,
    ) -> Outcome<T> {
        let Conn { rt, client: Some(client), .. } = self else { unreachable!("open until dropped") };
        if self.broken || client.is_closed() {
            self.broken = true;
            return Err(Fault::Lost("the connection was lost".into()));
        }
        match rt.block_on(async { tokio::time::timeout(limit, f(client)).await }) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                let fault = Fault::from(e);
                self.broken = matches!(fault, Fault::Lost(_));
                Err(fault)
            }
            Err(_) => {
                self.broken = true;
                Err(Fault::Lost(format!("the server did not answer within {}", crate::text::duration(limit))))
            }
        }
    }

    /// The host that answered, and its port.
    pub(super) fn reached(&self) -> &(Host, u16) {
        &self.reached
    }

    /// Whether the server knows `idle_session_timeout` (PostgreSQL 14 and later).
    pub(super) fn idle_sessions(&self) -> bool {
        self.idle_sessions
    }

    /// How long the session may sit idle in a transaction, as asked.
    pub(super) fn in_transaction(&self) -> Duration {
        self.in_transaction
    }

    /// Whether the connection is over TLS.
    pub(super) fn tls(&self) -> bool {
        self.tls
    }
}

/// Says goodbye to the server (`Terminate`, then TLS's `close_notify`), as libpq's `PQfinish`
/// does: a connection just cut is a `could not receive data from client` line in the server's
/// log for every command. Not for a broken connection, and never waiting long.
impl Drop for Conn {
    fn drop(&mut self) {
        drop(self.client.take());
        if !self.broken {
            let io = &mut self.io;
            let _ = self.rt.block_on(async { tokio::time::timeout(Duration::from_millis(100), io).await });
        }
    }
}

/// `pg` with one host, `options` after the URL's own (if any), TLS as `ssl` says.
fn single(pg: &Config, host: &Host, port: u16, options: &str, ssl: SslMode) -> Config {
    let mut one = Config::new();
    match host {
        Host::Tcp(h) => one.host(h),
        Host::Unix(p) => one.host_path(p),
    };
    one.port(port);
    if let Some(user) = pg.get_user() {
        one.user(user);
    }
    if let Some(password) = pg.get_password() {
        one.password(password);
    }
    if let Some(db) = pg.get_dbname() {
        one.dbname(db);
    }
    match (pg.get_options(), options) {
        (Some(yours), "") => one.options(yours),
        (Some(yours), ours) => one.options(format!("{yours} {ours}")),
        (None, "") => &mut one,
        (None, ours) => one.options(ours),
    };
    if let Some(name) = pg.get_application_name() {
        one.application_name(name);
    }
    if let Some(timeout) = pg.get_connect_timeout() {
        one.connect_timeout(*timeout);
    }
    if let Some(timeout) = pg.get_tcp_user_timeout() {
        one.tcp_user_timeout(*timeout);
    }
    one.ssl_mode(ssl)
        .keepalives(pg.get_keepalives())
        .keepalives_idle(pg.get_keepalives_idle())
        .target_session_attrs(pg.get_target_session_attrs())
        .channel_binding(pg.get_channel_binding());
    one
}
