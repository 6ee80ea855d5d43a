//! A connection pooler (PgBouncer) between us and PostgreSQL: how we know one is there, and
//! whether it keeps a server session for each client while it is connected (session
//! pooling: what terraform's `backend "pg"` needs) or hands one to several clients between
//! their transactions or statements (transaction or statement pooling: terraform's state
//! lock, a session-level advisory lock, would stay on a server session another client then
//! gets, and its driver's unnamed prepared statements go astray).
//!
//! A pooler is suspected when the session's settings sent in the startup packet are not in
//! effect: refused (PgBouncer: `unsupported startup parameter: options`) or dropped
//! (`ignore_startup_parameters`). Connected directly, nothing here runs: no round trip.

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::Config;

use super::conn::{Conn, Outcome, Setup};
use super::tls::Tls;

/// How PgBouncer's refusal of a parameter of the startup packet begins (then `: NAME`).
pub(super) const REFUSED: &str = "unsupported startup parameter";

/// Whether `e` is a pooler refusing a parameter of the startup packet. PgBouncer says so
/// with a protocol violation (`08P01`) and no other code; PostgreSQL itself never does
/// (an unknown setting is `42704`).
pub(super) fn refused_startup(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| db.code() == &SqlState::PROTOCOL_VIOLATION && db.message().starts_with(REFUSED))
}

/// Whether the pooler behind `conn` hands its server session to another client once a
/// statement is done (transaction or statement pooling): a second client's first statement,
/// right after ours, runs in the server session ours ran in (PgBouncer gives the server
/// session used last, `server_round_robin = 0`, its default). A session pooler never does
/// (ours is kept for us until we disconnect), and neither does a server. Costs a connection
/// and three round trips, behind a pooler only. The second connection makes no setting (a
/// transaction pooler would leave it on a pooled session).
pub(super) fn hands_over(conn: &mut Conn, pg: &Config, tls: &Tls, limit: Duration) -> Outcome<bool> {
    let ours = backend(conn, limit)?;
    let mut other = Conn::open(pg, tls, limit, conn.in_transaction(), Setup::Bare)?;
    Ok(backend(&mut other, limit)? == ours)
}

/// The server process running the session's statements now.
fn backend(conn: &mut Conn, limit: Duration) -> Outcome<i32> {
    conn.call(limit, async |c| Ok(c.query_typed_one("SELECT pg_backend_pid()", &[]).await?.get(0)))
}
