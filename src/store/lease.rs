//! The lease on a store directory, as its table holds it: the statements that take it, say who
//! holds it, renew it, fence a write with it and give it back. It says who may change the
//! directory, fenced so that a host that lost it can change nothing more. After Kubernetes'
//! leader election (client-go `leaderelection`) and the fencing-token argument (a lock is only
//! safe if what it guards checks a token).
//!
//! - **The record** is a row of `infrakit_tf.leases`: the directory, its `epoch` (the fencing
//!   token: a new number from a sequence at every acquisition, so that even a row deleted by
//!   hand never gives two holders one token), the holder, and `expires`, set from the *server's*
//!   clock (`clock_timestamp()`), never a host's. A host takes the lease only when it is free:
//!   released, or expired.
//! - **Held**, it is renewed by a heartbeat (`heartbeat`), which publishes what it learns to
//!   the process-wide view the terraform runner asks (`crate::lease`: lost or not, and why;
//!   the timings and their guarantee).
//! - **Fencing**: every store commit first renews the lease in its own transaction, comparing
//!   the epoch ([`fence`]): a host that lost it cannot commit. Terraform's own state writes
//!   carry the epoch too (`infrakit_tf.lease` in its connection, and its `application_name`,
//!   which a session pooler passes on; see `config`), and a trigger
//!   on its state table refuses the write of a lease no longer held (`schema`): even a
//!   terraform that somehow outlived its lease (a frozen process) cannot write a stale state.
//! - **Taking over** a lease that expired without being released (its host died, or lost the
//!   server): the new holder ends the old holder's terraform sessions, whose advisory state
//!   lock PostgreSQL would otherwise keep until TCP keepalive notices (two hours by default).

use std::time::Duration;

use tokio_postgres::types::Type;
use tokio_postgres::Client;

use super::conn::{Conn, Outcome, Param};
use crate::lease::Timing;

/// A lease just acquired.
pub(super) struct Acquired {
    pub(super) epoch: i64,
    /// Who held it before, when they neither released it nor renewed it in time (a host
    /// died, or lost the server): their holder string.
    pub(super) took_over: Option<String>,
}

/// Tries once to take the lease of `directory`: free (released, expired or never taken), or
/// ours already (`owner`: a retry after an answer we did not get). `None`: held by another.
/// `key` is the directory's advisory-lock key of the infrakit-tf before leases, which is
/// honoured too: a host not yet upgraded holds the directory while it holds that lock.
pub(super) fn try_acquire(
    conn: &mut Conn,
    limit: Duration,
    directory: &str,
    holder: &str,
    owner: &str,
    key: (i32, i32),
    timing: Timing,
) -> Outcome<Option<Acquired>> {
    let ms = millis(timing.duration);
    conn.call(limit, async |c| {
        let row = c
            .query_typed_opt(
                "WITH prev AS (SELECT holder, released, expires <= clock_timestamp() AS expired, \
                                      released OR expires <= clock_timestamp() OR owner = $3 AS free \
                               FROM infrakit_tf.leases WHERE directory = $1) \
                 INSERT INTO infrakit_tf.leases AS l \
                     (directory, epoch, holder, owner, acquired, renewed, expires, released) \
                 SELECT $1, nextval('infrakit_tf.lease_epochs'), $2, $3, clock_timestamp(), clock_timestamp(), \
                        clock_timestamp() + $4 * interval '1 millisecond', false \
                 WHERE coalesce((SELECT free FROM prev), true) AND pg_try_advisory_xact_lock($5, $6) \
                 ON CONFLICT (directory) DO UPDATE SET epoch = excluded.epoch, holder = excluded.holder, \
                     owner = excluded.owner, acquired = excluded.acquired, renewed = excluded.renewed, \
                     expires = excluded.expires, released = false \
                 WHERE l.released OR l.expires <= clock_timestamp() OR l.owner = excluded.owner \
                 RETURNING l.epoch, (SELECT holder FROM prev), (SELECT NOT released AND expired FROM prev)",
                &[
                    (&directory, Type::TEXT),
                    (&holder, Type::TEXT),
                    (&owner, Type::TEXT),
                    (&ms, Type::FLOAT8),
                    (&key.0, Type::INT4),
                    (&key.1, Type::INT4),
                ],
            )
            .await?;
        Ok(row.map(|r| {
            let expired: Option<bool> = r.get(2);
            let took_over = expired.unwrap_or(false).then(|| r.get::<_, Option<String>>(1).unwrap_or_default());
            Acquired { epoch: r.get(0), took_over }
        }))
    })
}

/// Who holds the lease of `directory`, for messages: `another run (infrakit-tf HOST pid N)`,
/// and how long until it expires if it is not renewed.
pub(super) fn holder(conn: &mut Conn, limit: Duration, directory: &str) -> Outcome<String> {
    conn.call(limit, async |c| {
        let row = c
            .query_typed_opt(
                "SELECT holder, ceil(extract(epoch FROM expires - clock_timestamp()))::bigint, \
                        NOT released AND expires > clock_timestamp() \
                 FROM infrakit_tf.leases WHERE directory = $1",
                &[(&directory, Type::TEXT)],
            )
            .await?;
        Ok(match row {
            Some(r) if r.get::<_, bool>(2) => {
                let (who, left): (String, i64) = (r.get(0), r.get(1));
                format!("another run ({who}; its lease expires in {left}s unless renewed)")
            }
            // Free by its record: the advisory lock of an infrakit-tf before leases holds it.
            _ => "another run (an infrakit-tf older than this one: upgrade every host)".to_string(),
        })
    })
}

/// Ends the sessions of terraforms that ran under an earlier lease of `directory` (their
/// `application_name`, see [`terraform_session`]): their advisory lock on the state would
/// otherwise stay until the server notices they are gone. Sessions of another role may not be
/// ended (no `pg_signal_backend`): then terraform waits for the state's lock (`-lock-timeout`).
/// Returns how many were ended.
pub(super) fn end_stale_sessions(conn: &mut Conn, limit: Duration, directory: &str, epoch: i64) -> Outcome<i64> {
    let prefix = session_prefix(directory);
    let mine = terraform_session(directory, Some(epoch));
    conn.call(limit, async |c| {
        let row = c
            .query_typed_one(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = current_database() AND starts_with(application_name, $1) \
                 AND application_name <> $2",
                &[(&prefix, Type::TEXT), (&mine, Type::TEXT)],
            )
            .await?;
        Ok(row.get(0))
    })
}

/// The `application_name` of a terraform's connections: `infrakit-tf tf DIR#EPOCH` (a
/// reader's has no epoch). PostgreSQL keeps 63 bytes of it, enough for any directory name
/// and an epoch below ten million.
pub(crate) fn terraform_session(directory: &str, epoch: Option<i64>) -> String {
    match epoch {
        Some(epoch) => format!("{}{epoch}", session_prefix(directory)),
        None => format!("infrakit-tf tf {directory}"),
    }
}

fn session_prefix(directory: &str) -> String {
    format!("infrakit-tf tf {directory}#")
}

/// The common table expression that renews the lease if it is still ours (epoch, not
/// released, not expired), for a statement that writes under it: `WITH {RENEWED}, ...`, its
/// writes joined to `lease` so that they happen only if it was renewed, and its result's
/// first column `EXISTS (SELECT 1 FROM lease)`. One statement is one transaction: the
/// renewal locks the lease's row until it commits, so no other host takes the lease between
/// the check and the write. Parameters: `$1` the directory, `$2` the epoch, `$3` the lease
/// in milliseconds ([`fence_params`]).
pub(super) const RENEWED: &str = "lease AS (UPDATE infrakit_tf.leases SET renewed = clock_timestamp(), \
     expires = clock_timestamp() + $3 * interval '1 millisecond' \
     WHERE directory = $1 AND epoch = $2 AND NOT released AND expires > clock_timestamp() RETURNING 1)";

/// The lease in milliseconds, `$3` of [`RENEWED`].
pub(super) fn fence_params(timing: Timing) -> f64 {
    millis(timing.duration)
}

/// `$1` to `$3` of [`RENEWED`], typed.
pub(super) fn fence<'a>(directory: &'a &'a str, epoch: &'a i64, ms: &'a f64) -> Vec<Param<'a>> {
    vec![(directory, Type::TEXT), (epoch, Type::INT8), (ms, Type::FLOAT8)]
}

/// Renews the lease if it is still ours: `false` when it is not.
pub(super) async fn renew(
    c: &Client,
    directory: &str,
    epoch: i64,
    timing: Timing,
) -> Result<bool, tokio_postgres::Error> {
    let sql = format!("WITH {RENEWED} SELECT EXISTS (SELECT 1 FROM lease)");
    Ok(c.query_typed_one(sql.as_str(), &fence(&directory, &epoch, &fence_params(timing))).await?.get(0))
}

/// Gives the lease back: it expires now, and is marked released (another host takes it at
/// once, and the takeover's stale sessions are not looked for).
pub(super) fn release(conn: &mut Conn, limit: Duration, directory: &str, epoch: i64) -> Outcome<u64> {
    conn.call(limit, async |c| {
        c.execute_typed(
            "UPDATE infrakit_tf.leases SET expires = clock_timestamp(), released = true \
             WHERE directory = $1 AND epoch = $2",
            &[(&directory, Type::TEXT), (&epoch, Type::INT8)],
        )
        .await
    })
}

fn millis(d: Duration) -> f64 {
    d.as_millis() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terraform_session_names_its_lease_within_what_postgresql_keeps() {
        let longest = "d".repeat(40);
        assert_eq!(terraform_session("web", Some(42)), "infrakit-tf tf web#42");
        assert_eq!(terraform_session("web", None), "infrakit-tf tf web");
        assert!(terraform_session(&longest, Some(9_999_999)).len() <= 63);
        assert!(terraform_session("web", Some(7)).starts_with(&session_prefix("web")));
    }
}
