//! Where the store is: `"store": {"postgres": URL, "directory": NAME}` in `infrakit-tf.json`,
//! the URL overridden by `--store` / `INFRAKIT_TF_STORE`; and the connection settings libpq
//! users expect from it: a `postgresql://` URL or `key=value` string, then `PGHOST`, `PGPORT`,
//! `PGUSER`, `PGDATABASE`, and the password from the URL, `PGPASSWORD` or the password file
//! (`PGPASSFILE`, else `~/.pgpass`). The password is never printed: [`StoreConfig::display`]
//! leaves it out.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use std::sync::{Arc, Mutex, OnceLock};

use crate::config::StoreSection;
use crate::exit::{invalid, Code, Failure};
use crate::lease::Timing;
use anyhow::Result;
use tokio_postgres::config::Host;

use super::conn::{Server, Setup};
use super::lease;
use super::tls::{Mode, Settings, Tls};

/// A store to use: the connection and the logical directory's name.
#[derive(Clone)]
pub(crate) struct StoreConfig {
    pub(crate) name: String,
    /// The server, TLS as the settings ask (libpq's `sslmode` and its files).
    pub(super) server: Server,
    /// The lease's duration, and the timings that follow from it (`store.lease`).
    pub(crate) timing: Timing,
    /// What the first connection found (see [`StoreConfig::connected`]).
    session: Arc<OnceLock<Session>>,
}

/// What connecting found out, for terraform's connection.
struct Session {
    /// The host that answered (of several: the one terraform must use) and its port.
    host: Host,
    port: u16,
    /// Whether the server knows `idle_session_timeout` (PostgreSQL 14 and later).
    idle_sessions: bool,
    /// Whether the connection is over TLS (`allow` and `prefer` may or may not be).
    tls: bool,
    /// Whether a pooler (session pooling) is in front of the server: it passes no setting of
    /// the startup packet but `application_name` (see `pooler`).
    pooled: bool,
    /// Whether that pooler refuses terraform's driver's startup packet: terraform then
    /// connects through the relay (`relay`), started the first time it is asked for and
    /// listening on this port until we exit.
    relayed: bool,
    relay: Mutex<Option<PathBuf>>,
}

/// The lease when `store.lease` does not say.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The shortest lease: renewed every sixth of it, a shorter one would mostly renew.
const MIN_LEASE: Duration = Duration::from_secs(3);

/// The longest a logical directory name may be (its state schema's name, with
/// [`STATE_SCHEMA_PREFIX`], stays within PostgreSQL's 63 bytes).
const MAX_NAME: usize = 40;

/// Terraform's state of store directory NAME is in schema `infrakit_tf_state_NAME`.
const STATE_SCHEMA_PREFIX: &str = "infrakit_tf_state_";

impl StoreConfig {
    /// The store `section` (from `config_file`) names, with `--store` (`flag`) overriding its
    /// URL; `None` when neither asks for one.
    pub(crate) fn resolve(
        section: Option<StoreSection>,
        flag: Option<&str>,
        config_file: &Path,
    ) -> Result<Option<Self>> {
        let (url, name, lease, plaintext) = match (section, flag) {
            (None, None) => return Ok(None),
            (section, flag) => {
                let section =
                    section.unwrap_or(StoreSection { postgres: None, directory: None, lease: None, plaintext: false });
                (flag.map(str::to_string).or(section.postgres), section.directory, section.lease, section.plaintext)
            }
        };
        let Some(url) = url.filter(|u| !u.trim().is_empty()) else {
            return Err(invalid(format!("`store` in `{}` has no `postgres` URL", config_file.display()))
                .hint("add \"postgres\": \"postgresql://user@host/db\", or give --store (or INFRAKIT_TF_STORE)")
                .into());
        };
        let Some(name) = name else {
            return Err(invalid(format!(
                "a store needs the directory's name in it: `store.directory` is not set in `{}`",
                config_file.display()
            ))
            .hint("add \"store\": {\"directory\": \"<name>\"} there, the same on every host")
            .into());
        };
        let allowed = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
        if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(allowed) {
            return Err(invalid(format!(
                "`store.directory` in `{}` must be 1 to {MAX_NAME} letters, digits, `_`, `.` or `-`",
                config_file.display()
            ))
            .into());
        }
        let duration = match lease.as_deref() {
            None => DEFAULT_LEASE,
            Some(text) => crate::cli::parse_duration(text).ok().filter(|d| *d >= MIN_LEASE).ok_or_else(|| {
                invalid(format!(
                    "`store.lease` in `{}` must be a duration of at least {}s (like \"30s\"), not `{text}`",
                    config_file.display(),
                    MIN_LEASE.as_secs()
                ))
            })?,
        };
        let (pg, mut tls) = connection(&url, &Env::process())?;
        insist_on_tls(&pg, &mut tls, plaintext)?;
        let server = Server { pg, tls };
        Ok(Some(StoreConfig { name, server, timing: Timing { duration }, session: Arc::default() }))
    }

    /// Notes where the first connection went and what it found.
    pub(super) fn connected(&self, reached: &(Host, u16), idle_sessions: bool, tls: bool, pooled: bool, relayed: bool) {
        let (host, port, relay) = (reached.0.clone(), reached.1, Mutex::default());
        let _ = self.session.set(Session { host, port, idle_sessions, tls, pooled, relayed, relay });
    }

    /// How the next connections get their settings: as the first one found.
    pub(super) fn setup(&self) -> Setup {
        if self.session.get().is_some_and(|s| s.pooled) {
            Setup::Pooled
        } else {
            Setup::Startup
        }
    }

    /// The longest a connection may take to open: `connect_timeout`, else 10 s.
    pub(super) fn connect_limit(&self) -> Duration {
        self.server.pg.get_connect_timeout().copied().unwrap_or(Duration::from_secs(10))
    }

    /// `user@host:port/db`, without the password, for messages.
    pub(crate) fn display(&self) -> String {
        display(&self.server.pg)
    }

    /// What terraform's `backend "pg" {}` gets, so that its state lives in the store's
    /// database, in a schema of this directory's own (two directories never share a state):
    /// `PG_CONN_STR`, `PGPASSWORD`, `PG_SCHEMA_NAME`. The connection is ours: the host that
    /// answered us (lib/pq takes one host), TLS as ours negotiated it ([`Tls::for_terraform`]), no password
    /// (terraform's errors may print it); then what its session needs (lib/pq passes keys it
    /// does not know to the server as settings): never ended for being idle while it holds
    /// the state's lock through a long apply (`idle_session_timeout=0`, from PostgreSQL 14;
    /// `idle_in_transaction_session_timeout=0`), named (`application_name`, so that a host
    /// taking over an expired lease can end its sessions, and carrying the lease's epoch),
    /// and the lease's epoch (`infrakit_tf.lease`), which the state table's fence checks on
    /// every write. Behind a pooler, only `application_name`: PgBouncer refuses other keys
    /// (or drops them), and passes that one on, epoch and all, to the fence. Behind one that
    /// refuses lib/pq's startup packet, the connection is our relay's (`relay`), started here
    /// the first time, in `dir` (terraform's): `host=` its socket's directory, `sslmode=disable`
    /// (the relay makes the TLS connection ours made); an error when it cannot start.
    pub(crate) fn terraform_env(&self, dir: &Path) -> Result<Vec<(String, String)>> {
        let mut conn = self.base_conn(self.relay(dir)?);
        let epoch = crate::lease::epoch();
        conn.push(("application_name", lease::terraform_session(&self.name, epoch)));
        if self.session.get().is_some_and(|s| s.pooled) {
            return Ok(self.env_with(conn));
        }
        if let Some(epoch) = epoch {
            conn.push(("infrakit_tf.lease", epoch.to_string()));
        }
        conn.push(("idle_in_transaction_session_timeout", "0".into()));
        if self.session.get().is_some_and(|s| s.idle_sessions) {
            conn.push(("idle_session_timeout", "0".into()));
        }
        Ok(self.env_with(conn))
    }

    /// The socket directory of the relay terraform's connections go through, started now if
    /// it is not yet: `None` when they need none.
    fn relay(&self, dir: &Path) -> Result<Option<PathBuf>> {
        let Some(session) = self.session.get().filter(|s| s.relayed) else { return Ok(None) };
        let mut relay = session.relay.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if relay.is_none() {
            let upstream = super::relay::Upstream {
                host: session.host.clone(),
                port: session.port,
                tls: session.tls.then(|| self.server.tls.clone()),
                limit: self.connect_limit(),
                // The orphan grace (`crate::lease::watch`), and a margin.
                linger: self.timing.renew_deadline() + Duration::from_secs(10),
            };
            let socket = super::relay::start(upstream, dir).map_err(|e| {
                Failure::new(
                    Code::StoreUnavailable,
                    format!(
                        "cannot start the relay terraform's connections to the pooler at {} need: {e}",
                        self.display()
                    ),
                )
            })?;
            *relay = Some(socket);
        }
        Ok(relay.clone())
    }

    /// The connection as `key=value` pairs: where, who, which database; at the `relay`'s
    /// socket, plain, when there is one.
    fn base_conn(&self, relay: Option<PathBuf>) -> Vec<(&'static str, String)> {
        let mut conn = Vec::new();
        if let Some(socket) = relay {
            conn.push(("host", socket.display().to_string()));
            conn.push(("port", super::relay::PORT.to_string()));
            conn.extend(self.who());
            conn.push(("sslmode", "disable".to_string()));
            return conn;
        }
        let (host, port) = match self.session.get() {
            Some(s) => (Some(&s.host), Some(s.port)),
            None => (self.server.pg.get_hosts().first(), self.server.pg.get_ports().first().copied()),
        };
        match host {
            Some(Host::Tcp(h)) => conn.push(("host", h.clone())),
            Some(Host::Unix(p)) => conn.push(("host", p.display().to_string())),
            None => {}
        }
        if let Some(port) = port {
            conn.push(("port", port.to_string()));
        }
        conn.extend(self.who());
        let unix = matches!(host, Some(Host::Unix(_)));
        // Before connecting (`shell_env` may be asked first): TLS unless it is disabled (a
        // hint never suggests plain text that the connection might not have used).
        let tls = self.session.get().map_or(self.server.tls.mode != Mode::Disable, |s| s.tls);
        conn.extend(self.server.tls.for_terraform(tls && !unix));
        conn
    }

    /// Who connects to which database.
    fn who(&self) -> Vec<(&'static str, String)> {
        let user = self.server.pg.get_user().map(|u| ("user", u.to_string()));
        user.into_iter().chain(self.server.pg.get_dbname().map(|d| ("dbname", d.to_string()))).collect()
    }

    fn env_with(&self, conn: Vec<(&'static str, String)>) -> Vec<(String, String)> {
        let conn: Vec<String> = conn.into_iter().map(|(k, v)| format!("{k}={}", quote(&v))).collect();
        let mut env =
            vec![("PG_CONN_STR".to_string(), conn.join(" ")), ("PG_SCHEMA_NAME".to_string(), self.state_schema())];
        if let Some(password) = self.server.pg.get_password() {
            env.push(("PGPASSWORD".into(), String::from_utf8_lossy(password).into_owned()));
        }
        env
    }

    /// The environment `terraform_env` gives terraform, as a shell prefix for a command you
    /// run yourself (`terraform state push ...`), the password left out; at the pooler itself,
    /// never at our relay, which is gone once we exit.
    pub(crate) fn shell_env(&self) -> String {
        let quote = |v: &str| format!("'{}'", v.replace('\'', "'\\''"));
        self.env_with(self.base_conn(None))
            .into_iter()
            .map(|(k, v)| if k == "PGPASSWORD" { format!("{k}=<password>") } else { format!("{k}={}", quote(&v)) })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The schema of this directory's terraform state.
    pub(crate) fn state_schema(&self) -> String {
        format!("{STATE_SCHEMA_PREFIX}{}", self.name)
    }
}

/// The environment variables libpq reads, as seen by [`connection`] (a test passes its own).
pub(super) struct Env {
    vars: Vec<(String, String)>,
    home: Option<PathBuf>,
}

impl Env {
    fn process() -> Self {
        let vars = std::env::vars().filter(|(k, _)| k.starts_with("PG")).collect();
        Env { vars, home: std::env::var_os("HOME").map(PathBuf::from) }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.vars.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
    }
}

/// A store on another host than this one gets the password over TLS, or not at all, unless
/// `store.plaintext` asks otherwise: `sslmode=disable` to such a host is refused (exit 3), and
/// `prefer` (libpq's default) or `allow` require TLS there (a server, or a man in the middle,
/// that declines it is not sent the password). On this machine (loopback, a Unix socket)
/// libpq's modes stand.
fn insist_on_tls(pg: &tokio_postgres::Config, tls: &mut Tls, plaintext: bool) -> Result<()> {
    let remote: Vec<String> = pg
        .get_hosts()
        .iter()
        .filter_map(|h| match h {
            Host::Tcp(name) if !super::tls::is_local(name) => Some(name.clone()),
            _ => None,
        })
        .collect();
    if plaintext || remote.is_empty() {
        return Ok(());
    }
    if tls.mode == super::tls::Mode::Disable {
        return Err(invalid(format!(
            "the store's sslmode is disable, and {} is not this machine: the password would travel in the clear",
            remote.join(", ")
        ))
        .hint("use sslmode=verify-full (docs/several-hosts.md, TLS), or, on a network you trust, set \"plaintext\": true in the store section of infrakit-tf.json; nothing was changed")
        .into());
    }
    tls.insist();
    Ok(())
}

/// The connection settings of `url`, completed from the environment as libpq would.
pub(super) fn connection(url: &str, env: &Env) -> Result<(tokio_postgres::Config, Tls)> {
    let (url, ssl) = take_ssl(url);
    let mut pg = tokio_postgres::Config::from_str(&url).map_err(|e| {
        invalid(format!("the store URL is not a PostgreSQL connection string: {}", super::conn::reason(&e)))
            .hint("write it as postgresql://user@host:5432/database (libpq's URL form)")
    })?;
    if pg.get_hosts().is_empty() {
        pg.host(env.get("PGHOST").unwrap_or("localhost"));
    }
    if pg.get_ports().is_empty() {
        if let Some(port) = env.get("PGPORT").and_then(|p| p.parse().ok()) {
            pg.port(port);
        }
    }
    if pg.get_user().is_none() {
        if let Some(user) = env.get("PGUSER") {
            pg.user(user);
        }
    }
    if pg.get_dbname().is_none() {
        if let Some(db) = env.get("PGDATABASE") {
            pg.dbname(db);
        }
    }
    if pg.get_password().is_none() {
        if let Some(password) = env.get("PGPASSWORD") {
            pg.password(password);
        } else if let Some(password) = passfile(&pg, env)? {
            pg.password(password);
        }
    }
    if pg.get_connect_timeout().is_none() {
        pg.connect_timeout(Duration::from_secs(10));
    }
    pg.application_name(format!("infrakit-tf {} pid {}", hostname(), std::process::id()));
    let tls = Tls::resolve(ssl, |key| env.get(key).map(str::to_string), env.home.as_deref())?;
    Ok((pg, tls))
}

/// `url` without its `ssl*` settings (tokio-postgres knows few of them), and those settings:
/// in a URL's query (`?sslmode=verify-full&sslrootcert=...`), or as `key=value` pairs.
fn take_ssl(url: &str) -> (String, Settings) {
    let mut ssl = Settings::default();
    if url.starts_with("postgresql://") || url.starts_with("postgres://") {
        let Some((base, query)) = url.split_once('?') else { return (url.to_string(), ssl) };
        let rest: Vec<&str> = query
            .split('&')
            .filter(|param| {
                let (key, value) = param.split_once('=').unwrap_or((param, ""));
                !ssl.take(&percent_decoded(key), &percent_decoded(value))
            })
            .collect();
        return if rest.is_empty() { (base.to_string(), ssl) } else { (format!("{base}?{}", rest.join("&")), ssl) };
    }
    let Some(pairs) = key_values(url) else { return (url.to_string(), ssl) };
    let rest: Vec<String> =
        pairs.into_iter().filter(|(k, v)| !ssl.take(k, v)).map(|(k, v)| format!("{k}={}", quote(&v))).collect();
    (rest.join(" "), ssl)
}

/// A `key=value` connection string's pairs (values quoted with `'`, `\` escaping), or
/// `None` when it is not one (tokio-postgres then says what is wrong).
fn key_values(text: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Some(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        chars.next_if_eq(&'=')?;
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next()? {
                    '\'' => break,
                    '\\' => value.push(chars.next()?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(chars.next()?);
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

/// A URL component with its `%XX` escapes decoded (bytes that are not UTF-8 replaced, as a
/// value in a message would be).
fn percent_decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned()
}

/// The password the password file gives for this connection: lines
/// `host:port:database:user:password`, `*` matching anything, `\:` and `\\` escaped; the first
/// match wins, as in libpq. A file that others may read or write is refused (exit 3), as libpq
/// and psql refuse it: whoever could read it has the password, whoever could write it chooses it.
fn passfile(pg: &tokio_postgres::Config, env: &Env) -> Result<Option<String>> {
    use std::os::unix::fs::PermissionsExt;
    let path = match (env.get("PGPASSFILE"), env.home.as_ref()) {
        (Some(p), _) => PathBuf::from(p),
        (None, Some(home)) => home.join(".pgpass"),
        (None, None) => return Ok(None),
    };
    let Ok(text) = crate::fsio::read_to_string(&path) else { return Ok(None) };
    let mode = std::fs::metadata(&path).map_or(0, |m| m.permissions().mode());
    if mode & 0o077 != 0 {
        return Err(invalid(format!(
            "the password file `{}` is readable or writable by others (mode {:o}): it is not used, as libpq does not use it",
            path.display(),
            mode & 0o777
        ))
        .hint(format!("make it yours alone: `chmod 600 {}`; nothing was changed", path.display()))
        .into());
    }
    Ok(passfile_match(pg, &text))
}

/// The password `text` (a password file) gives for this connection.
fn passfile_match(pg: &tokio_postgres::Config, text: &str) -> Option<String> {
    let host = match pg.get_hosts().first()? {
        Host::Tcp(h) => h.clone(),
        Host::Unix(_) => "localhost".to_string(),
    };
    let port = pg.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = pg.get_user().map(str::to_string).unwrap_or_else(os_user);
    let db = pg.get_dbname().map(str::to_string).unwrap_or_else(|| user.clone());
    let wanted = [host.as_str(), port.as_str(), db.as_str(), user.as_str()];
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let fields = split_escaped(line);
        let [h, p, d, u, password] = <[String; 5]>::try_from(fields).ok()?;
        [h, p, d, u].iter().zip(wanted).all(|(f, w)| f == "*" || f == w).then_some(password)
    })
}

/// A password-file line's fields.
fn split_escaped(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().expect("one").extend(chars.next()),
            ':' => fields.push(String::new()),
            c => fields.last_mut().expect("one").push(c),
        }
    }
    fields
}

fn os_user() -> String {
    std::env::var("USER").unwrap_or_else(|_| "postgres".into())
}

/// This host's name.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

/// A `key=value` connection-string value, quoted when it must be.
fn quote(value: &str) -> String {
    if !value.is_empty() && !value.contains([' ', '\'', '\\']) {
        return value.to_string();
    }
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `user@host:port/db`: the connection without its password.
pub(super) fn display(pg: &tokio_postgres::Config) -> String {
    let host = match pg.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = pg.get_ports().first().map_or(String::new(), |p| format!(":{p}"));
    let user = pg.get_user().map_or(String::new(), |u| format!("{u}@"));
    let db = pg.get_dbname().map_or(String::new(), |d| format!("/{d}"));
    format!("postgresql://{user}{host}{port}{db}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)], home: Option<&Path>) -> Env {
        Env {
            vars: vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            home: home.map(Path::to_path_buf),
        }
    }

    #[test]
    fn the_password_comes_from_the_url_then_pgpassword_then_the_password_file() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("pass");
        crate::fsio::write_atomic(
            &file,
            b"# comment\nother:5432:*:ops:wrong\ndb.example:5432:infra:ops:from\\:file\n*:*:*:*:fallback\n",
            crate::fsio::Perms::Private,
        )
        .unwrap();
        let passfile = file.to_str().unwrap();
        let password = |url: &str, vars: &[(&str, &str)]| {
            connection(url, &env(vars, None)).unwrap().0.get_password().map(|p| String::from_utf8(p.to_vec()).unwrap())
        };
        let url = "postgresql://ops@db.example:5432/infra";
        assert_eq!(password("postgresql://ops:inurl@db.example/infra", &[("PGPASSWORD", "env")]).unwrap(), "inurl");
        assert_eq!(password(url, &[("PGPASSWORD", "env"), ("PGPASSFILE", passfile)]).unwrap(), "env");
        assert_eq!(password(url, &[("PGPASSFILE", passfile)]).unwrap(), "from:file");
        assert_eq!(password("postgresql://x@elsewhere/y", &[("PGPASSFILE", passfile)]).unwrap(), "fallback");
        assert_eq!(password(url, &[]), None, "no HOME, no PGPASSFILE: no password");
        // ~/.pgpass when PGPASSFILE is not set.
        crate::fsio::write_atomic(&tmp.path().join(".pgpass"), b"*:*:*:*:home\n", crate::fsio::Perms::Private).unwrap();
        let (pg, _) = connection(url, &env(&[], Some(tmp.path()))).unwrap();
        assert_eq!(pg.get_password(), Some(&b"home"[..]));
        // One others may read is refused, as libpq refuses it; not when it is not needed.
        crate::fsio::write_atomic(&tmp.path().join(".pgpass"), b"*:*:*:*:theirs\n", crate::fsio::Perms::Exact(0o644))
            .unwrap();
        let refused = connection(url, &env(&[], Some(tmp.path()))).map(drop).unwrap_err();
        assert!(refused.to_string().contains("readable or writable by others (mode 644)"), "{refused}");
        assert!(connection(url, &env(&[("PGPASSWORD", "env")], Some(tmp.path()))).is_ok());
    }

    #[test]
    fn the_ssl_settings_are_taken_out_of_either_form() {
        let (rest, ssl) =
            take_ssl("postgresql://u@h/d?connect_timeout=5&sslmode=verify-full&sslrootcert=%2Fetc%2Fmy%20ca.crt");
        assert_eq!(rest, "postgresql://u@h/d?connect_timeout=5");
        let shown = format!("{ssl:?}");
        assert!(shown.contains("\"verify-full\"") && shown.contains("\"/etc/my ca.crt\""), "{shown}");
        let (rest, ssl) = take_ssl("postgresql://u@h/d?sslmode=require");
        assert_eq!(rest, "postgresql://u@h/d");
        assert!(format!("{ssl:?}").contains("\"require\""));
        let (rest, ssl) = take_ssl("host=h dbname = 'my db' sslcert='/a b/c\\'d.crt' sslmode=verify-ca");
        assert_eq!(rest, "host=h dbname='my db'");
        let shown = format!("{ssl:?}");
        assert!(shown.contains("verify-ca") && shown.contains("/a b/c'd.crt"), "{shown}");
        assert_eq!(take_ssl("postgresql://u@h/d").0, "postgresql://u@h/d");
    }

    #[test]
    fn messages_show_the_connection_without_its_password() {
        let (pg, _) = connection("postgresql://ops:s3cret@db.example:6543/infra", &env(&[], None)).unwrap();
        assert_eq!(display(&pg), "postgresql://ops@db.example:6543/infra");
        let (pg, _) = connection("host=db port=5433 user=u password=s3cret dbname=d", &env(&[], None)).unwrap();
        assert!(!display(&pg).contains("s3cret"));
        let (pg, _) = connection("postgresql:///infra", &env(&[("PGHOST", "h"), ("PGUSER", "u")], None)).unwrap();
        assert_eq!(display(&pg), "postgresql://u@h/infra");
    }

    // The password goes over TLS to a host that is not this machine, unless plain text is asked
    // for: sslmode=disable there is refused, and prefer (the default) requires TLS there.
    #[test]
    fn a_store_on_another_host_gets_the_password_over_tls_only() {
        use tokio_postgres::config::SslMode;
        let file = Path::new("infrakit-tf.json");
        let resolve = |url: &str, plaintext: bool| {
            let section =
                StoreSection { postgres: Some(url.into()), directory: Some("web".into()), lease: None, plaintext };
            StoreConfig::resolve(Some(section), None, file).map(|c| c.unwrap())
        };
        let refused = resolve("postgresql://u@db.example/d?sslmode=disable", false).err().unwrap();
        assert!(format!("{refused:#}").contains("the password would travel in the clear"), "{refused:#}");
        assert!(resolve("postgresql://u@db.example/d?sslmode=disable", true).is_ok(), "asked for");
        for local in ["127.0.0.1", "localhost", "[::1]"] {
            assert!(resolve(&format!("postgresql://u@{local}/d?sslmode=disable"), false).is_ok(), "{local}");
        }
        let remote = resolve("postgresql://u@db.example/d", false).unwrap();
        let host = tokio_postgres::config::Host::Tcp("db.example".into());
        assert_eq!(remote.server.tls.for_host(&host), SslMode::Require, "prefer requires TLS there");
        let local = resolve("postgresql://u@127.0.0.1/d", false).unwrap();
        let here = tokio_postgres::config::Host::Tcp("127.0.0.1".into());
        assert_eq!(local.server.tls.for_host(&here), SslMode::Prefer, "libpq's default on this machine");
    }

    #[test]
    fn a_store_needs_a_url_and_a_name() {
        let file = Path::new("infrakit-tf.json");
        let section = |url: Option<&str>, name: Option<&str>| {
            // Plain text allowed: these hosts are made up, and TLS is not the point here.
            Some(StoreSection {
                postgres: url.map(str::to_string),
                directory: name.map(str::to_string),
                lease: None,
                plaintext: true,
            })
        };
        assert!(StoreConfig::resolve(None, None, file).unwrap().is_none());
        let err = |s, f| format!("{:#}", StoreConfig::resolve(s, f, file).err().unwrap());
        assert!(err(None, Some("postgresql://h/d")).contains("`store.directory` is not set"));
        assert!(err(section(None, Some("web")), None).contains("has no `postgres` URL"));
        assert!(err(section(Some("postgresql://h/d"), Some("")), None).contains("1 to 40 letters"));
        assert!(err(section(Some("postgresql://h/d"), Some("a b")), None).contains("1 to 40 letters"));
        assert!(err(section(Some("nonsense=x=y"), Some("web")), None).contains("not a PostgreSQL connection"));
        assert!(err(section(Some("postgresql://h/d?sslmode=sure"), Some("web")), None).contains("is not one of"));
        let leased = |lease: &str| {
            let section = Some(StoreSection {
                postgres: Some("postgresql://h/d".into()),
                directory: Some("web".into()),
                lease: Some(lease.into()),
                plaintext: false,
            });
            StoreConfig::resolve(section, None, file).map(|c| c.unwrap().timing.duration)
        };
        assert_eq!(leased("45s").unwrap(), Duration::from_secs(45));
        assert!(format!("{:#}", leased("2s").unwrap_err()).contains("at least 3s"));
        assert!(format!("{:#}", leased("soon").unwrap_err()).contains("not `soon`"));
        let cfg = StoreConfig::resolve(section(Some("postgresql://a/d"), Some("web")), Some("postgresql://b/d"), file)
            .unwrap()
            .unwrap();
        assert!(cfg.display().starts_with("postgresql://b"), "--store wins: {}", cfg.display());
        assert_eq!(cfg.name, "web");
        let env = |url: &str| {
            let cfg = StoreConfig::resolve(section(Some(url), Some("web")), None, file).unwrap().unwrap();
            cfg.terraform_env(file).unwrap().into_iter().collect::<std::collections::BTreeMap<_, _>>()
        };
        // Terraform's session: named, never ended for being idle (no lease held here: no epoch).
        let session = "application_name='infrakit-tf tf web' idle_in_transaction_session_timeout=0";
        let tf = env("postgresql://ops:s%20cr'et@db:6543/infra?sslmode=disable");
        assert_eq!(
            tf["PG_CONN_STR"],
            format!("host=db port=6543 user=ops dbname=infra sslmode=disable {session}"),
            "no password"
        );
        assert_eq!(tf["PGPASSWORD"], "s cr'et");
        assert_eq!(tf["PG_SCHEMA_NAME"], "infrakit_tf_state_web");
        assert_eq!(
            env("host=/run/pg dbname='my db'")["PG_CONN_STR"],
            format!("host=/run/pg dbname='my db' sslmode=disable {session}")
        );
        // Of several hosts, the one that answered; from PostgreSQL 14, idle_session_timeout too.
        let cfg = StoreConfig::resolve(section(Some("postgresql://u@h1:5432,h2:6432/d"), Some("web")), None, file);
        let cfg = cfg.unwrap().unwrap();
        cfg.connected(&(Host::Tcp("h2".into()), 6432), true, false, false, false);
        let tf: std::collections::BTreeMap<_, _> = cfg.terraform_env(file).unwrap().into_iter().collect();
        assert_eq!(
            tf["PG_CONN_STR"],
            format!("host=h2 port=6432 user=u dbname=d sslmode=disable {session} idle_session_timeout=0")
        );
        // Behind a pooler: only what it passes on.
        let cfg =
            StoreConfig::resolve(section(Some("postgresql://u@h1:6432/d?sslmode=disable"), Some("web")), None, file);
        let cfg = cfg.unwrap().unwrap();
        cfg.connected(&(Host::Tcp("h1".into()), 6432), true, false, true, false);
        let tf: std::collections::BTreeMap<_, _> = cfg.terraform_env(file).unwrap().into_iter().collect();
        assert_eq!(
            tf["PG_CONN_STR"],
            "host=h1 port=6432 user=u dbname=d sslmode=disable application_name='infrakit-tf tf web'"
        );
        // Behind one that refuses lib/pq's startup packet: our relay, its Unix socket, plain; a
        // hint for a person names the pooler.
        let cfg = StoreConfig::resolve(section(Some("postgresql://u@h1:6432/d"), Some("web")), None, file);
        let cfg = cfg.unwrap().unwrap();
        cfg.connected(&(Host::Tcp("h1".into()), 6432), true, true, true, true);
        // (Started already: a test binary is no relay; tests/cli/pooler.rs runs it.)
        *cfg.session.get().unwrap().relay.lock().unwrap() = Some(PathBuf::from("/tmp/infrakit-tf-relay-1.2-abcdef"));
        let tf: std::collections::BTreeMap<_, _> = cfg.terraform_env(file).unwrap().into_iter().collect();
        assert_eq!(
            tf["PG_CONN_STR"],
            "host=/tmp/infrakit-tf-relay-1.2-abcdef port=5432 user=u dbname=d sslmode=disable application_name='infrakit-tf tf web'"
        );
        let again: std::collections::BTreeMap<_, _> = cfg.terraform_env(file).unwrap().into_iter().collect();
        assert_eq!(again["PG_CONN_STR"], tf["PG_CONN_STR"], "one relay");
        assert!(cfg.shell_env().starts_with("PG_CONN_STR='host=h1 port=6432 user=u dbname=d sslmode=require'"));
        let cfg = StoreConfig::resolve(section(Some("postgresql://ops:pw@db:6543/infra"), Some("web")), None, file);
        assert_eq!(
            cfg.unwrap().unwrap().shell_env(),
            "PG_CONN_STR='host=db port=6543 user=ops dbname=infra sslmode=require' PG_SCHEMA_NAME='infrakit_tf_state_web' PGPASSWORD=<password>"
        );
    }
}
