//! A connection pooler (PgBouncer) between us and PostgreSQL: how we know one is there, and
//! whether it keeps a server session for each client while it is connected (session
//! pooling: what terraform's `backend "pg"` needs) or hands one to several clients between
//! their transactions or statements (transaction or statement pooling: terraform's state
//! lock, a session-level advisory lock, would stay on a server session another client then
//! gets, and its driver's unnamed prepared statements go astray).
//!
//! Terraform's driver (lib/pq) sends `extra_float_digits` in every startup packet, which
//! PgBouncer refuses unless its `ignore_startup_parameters` names it (Debian's file does not):
//! found out here, when we connect, and then terraform's connections go through our relay,
//! which drops that parameter (`relay`).
//!
//! A pooler is suspected when the session's settings sent in the startup packet are not in
//! effect: refused (PgBouncer: `unsupported startup parameter: options`) or dropped
//! (`ignore_startup_parameters`). Connected directly, nothing here runs: no round trip.
//! Knowing that refusal is `conn`'s (it connects again without them): this file uses
//! `conn`, never the other way round.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};

use super::conn::{Conn, Fault, Outcome, Server, Setup, REFUSED};
use super::tls::Tls;
use crate::exit::{Code, Failure};

/// Why a pooler in front of the server cannot serve the store.
pub(super) enum Refusal {
    /// It pools by transaction or statement ([`hands_over`]).
    HandsOver,
}

impl Refusal {
    /// The error (exit 16): one line naming what the pooler does, and the fix.
    pub(super) fn error(&self, display: &str) -> anyhow::Error {
        let (why, fix) = match self {
            Refusal::HandsOver => (
                "it is behind a pooler in transaction or statement pooling mode (PgBouncer's pool_mode), which hands one server session to several clients: terraform's state lock and statements need one of their own",
                "have the pooler pool this database by session (PgBouncer: `pool_mode = session`, or `pool_mode=session` on its line in [databases]), or point the store's URL at PostgreSQL itself",
            ),
        };
        Failure::new(Code::StoreUnavailable, format!("cannot use the store at {display}: {why}"))
            .hint(format!("{fix}; nothing was changed"))
            .into()
    }
}

/// Whether the pooler behind `conn` can serve the store (it pools by session, else the
/// refusal), and when it can, whether terraform's connections need the relay (`Ok(true)`: it
/// refuses lib/pq's startup packet). Behind a pooler only.
pub(super) fn check(conn: &mut Conn, server: &Server, limit: Duration) -> Outcome<Result<bool, Refusal>> {
    if hands_over(conn, server, limit)? {
        return Ok(Err(Refusal::HandsOver));
    }
    Ok(Ok(refuses_terraform(conn, server, limit)?))
}

/// Whether the pooler behind `conn` hands its server session to another client once a
/// statement is done (transaction or statement pooling): a second client's first statement,
/// right after ours, runs in the server session ours ran in (PgBouncer gives the server
/// session used last, `server_round_robin = 0`, its default). A session pooler never does
/// (ours is kept for us until we disconnect), and neither does a server. Costs a connection
/// and three round trips, behind a pooler only. The second connection makes no setting (a
/// transaction pooler would leave it on a pooled session).
fn hands_over(conn: &mut Conn, server: &Server, limit: Duration) -> Outcome<bool> {
    let ours = backend(conn, limit)?;
    let mut other = Conn::open(server, limit, conn.in_transaction(), Setup::Bare)?;
    Ok(backend(&mut other, limit)? == ours)
}

/// The server process running the session's statements now.
fn backend(conn: &mut Conn, limit: Duration) -> Outcome<i32> {
    conn.call(limit, async |c| Ok(c.query_typed_one("SELECT pg_backend_pid()", &[]).await?.get(0)))
}

/// What terraform's driver (lib/pq) puts in every startup packet beside the connection's own
/// keys, which PgBouncer refuses unless `ignore_startup_parameters` names it.
const TERRAFORMS: &str = "extra_float_digits";

/// Whether the pooler `conn` reached refuses terraform's connections as lib/pq makes them (then
/// they go through the relay): its answer to a startup packet as lib/pq sends it (with
/// [`TERRAFORMS`]), over TLS if ours is. PgBouncer answers before any password is asked for,
/// and nothing more is sent: one connection, three round trips with TLS (one without), behind
/// a pooler only.
fn refuses_terraform(conn: &Conn, server: &Server, limit: Duration) -> Outcome<bool> {
    let Server { pg, tls } = server;
    let (host, port) = conn.reached().clone();
    let user = pg.get_user().unwrap_or_default().to_string();
    let db = pg.get_dbname().map_or_else(|| user.clone(), str::to_string);
    let mut packet = 196_608_i32.to_be_bytes().to_vec(); // protocol 3.0
    for text in ["user", &user, "database", &db, TERRAFORMS, "2", ""] {
        packet.extend_from_slice(text.as_bytes());
        packet.push(0);
    }
    packet.splice(0..0, (packet.len() as i32 + 4).to_be_bytes());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Fault::Lost(format!("cannot start the connection's runtime: {e}")))?;
    let exchange = async { first_answer(raw(&host, port, conn.tls().then_some(tls)).await?, &packet).await };
    let answer = rt.block_on(async { tokio::time::timeout(limit, exchange).await });
    match answer {
        Ok(Ok(refused)) => Ok(refused),
        Ok(Err(e)) => Err(Fault::Lost(e.to_string())),
        Err(_) => Err(Fault::Lost(format!("no answer within {}", crate::text::duration(limit)))),
    }
}

/// A byte stream to the server or pooler, plain or TLS.
pub(super) trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Duplex for S {}

/// A connection to `host` and `port` as ours reached it, before any message of the protocol:
/// over TLS when `tls` is given (an SSLRequest, then the handshake ours made). For a raw
/// startup packet: the check above, and the relay (`relay`).
pub(super) async fn raw(host: &Host, port: u16, tls: Option<&Tls>) -> std::io::Result<Box<dyn Duplex>> {
    match host {
        Host::Unix(dir) => Ok(Box::new(tokio::net::UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).await?)),
        Host::Tcp(name) => {
            let mut socket = tokio::net::TcpStream::connect((name.as_str(), port)).await?;
            socket.set_nodelay(true)?;
            let Some(tls) = tls else { return Ok(Box::new(socket)) };
            socket.write_all(&[0, 0, 0, 8, 4, 210, 22, 47]).await?;
            if socket.read_u8().await? != b'S' {
                return Err(std::io::Error::other("the pooler no longer offers TLS"));
            }
            let handshake = MakeTlsConnect::<tokio::net::TcpStream>::make_tls_connect(
                &mut tls.connector(Arc::new(AtomicBool::new(false))),
                name,
            )?;
            Ok(Box::new(handshake.connect(socket).await?))
        }
    }
}

/// Sends the startup `packet` and reads the first answer: whether it is PgBouncer's refusal of
/// a parameter (not: anything else, a password asked for).
async fn first_answer(mut socket: impl AsyncRead + AsyncWrite + Unpin, packet: &[u8]) -> std::io::Result<bool> {
    socket.write_all(packet).await?;
    let kind = socket.read_u8().await?;
    let len = socket.read_i32().await?;
    if kind != b'E' || !(4..=65_536).contains(&len) {
        return Ok(false);
    }
    let mut body = vec![0; len as usize - 4];
    socket.read_exact(&mut body).await?;
    // Fields: a type byte, then a NUL-terminated text; `C` the code, `M` the message.
    let field = |kind: u8| {
        body.split(|b| *b == 0)
            .find(|f| f.first() == Some(&kind))
            .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
    };
    Ok(field(b'C').as_deref() == Some(SqlState::PROTOCOL_VIOLATION.code())
        && field(b'M').is_some_and(|m| m.starts_with(REFUSED)))
}
