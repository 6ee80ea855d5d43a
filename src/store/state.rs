//! Terraform's state as the store sees it: a row of `<state schema>.states`, which terraform's
//! pg backend writes. The store reads its stamp (lineage and serial, from the top of the
//! document, without fetching it), records the stamp after every run that may change it (in
//! `directories`, under the lease), fences its table (see `schema::fence_state`), and tells a
//! state that holds machines while the store holds no file for them (a `migrate` cut short).

use anyhow::Result;
use tokio_postgres::types::Type;

use super::{schema, Store};

/// Where a state document (terraform writes it pretty-printed, these at its top) says its
/// lineage and its serial: regular expressions for `substring(... FROM ...)`.
const LINEAGE: &str = r#"'"lineage":\s*"([^"]*)"'"#;
const SERIAL: &str = r#"'"serial":\s*([0-9]+)'"#;

/// Whether a store error is "the state's table does not exist" (terraform has not run yet).
fn no_table(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<tokio_postgres::Error>().and_then(|e| e.code())
            == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE)
    })
}
use crate::state_guard::{Observed, Stamp};

/// The state row, as a check before a plan or an apply sees it.
pub(crate) struct StateFacts {
    pub(crate) observed: Observed,
    /// What the last run through the store left.
    pub(crate) recorded: Option<Stamp>,
    /// The host (`HOST:DIR`) that holds a state terraform could not save, if any.
    pub(crate) errored: Option<String>,
}

impl Store {
    /// The state's stamp now and as recorded, in one query. Under the lease, its table is
    /// fenced first if it is not yet (`Store::connect` created it).
    pub(crate) fn state_facts(&mut self) -> Result<StateFacts> {
        let (name, table) = (self.config.name.clone(), self.state_table());
        let recorded = "(SELECT state_lineage FROM infrakit_tf.directories WHERE name = $1), \
                        (SELECT state_serial FROM infrakit_tf.directories WHERE name = $1), \
                        (SELECT errored FROM infrakit_tf.directories WHERE name = $1)";
        let sql = format!(
            "SELECT {recorded}, \
                    EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass($2) AND tgname = 'infrakit_tf_fence'), \
                    s.name IS NOT NULL, btrim(s.data) = '', \
                    substring(left(s.data, 4096) FROM {LINEAGE}), substring(left(s.data, 4096) FROM {SERIAL})::bigint \
             FROM (SELECT 1) one LEFT JOIN {table} s ON s.name = 'default'"
        );
        let stamp = |row: &tokio_postgres::Row, at: usize| match (
            row.get::<_, Option<String>>(at),
            row.get::<_, Option<i64>>(at + 1),
        ) {
            (Some(lineage), Some(serial)) => Some(Stamp { lineage, serial: serial as u64 }),
            _ => None,
        };
        let row = match self
            .query(async |c| c.query_typed_one(sql.as_str(), &[(&name, Type::TEXT), (&table, Type::TEXT)]).await)
        {
            Err(e) if no_table(&e) => {
                let only = format!("SELECT {recorded}");
                let row = self.query(async |c| c.query_typed_one(only.as_str(), &[(&name, Type::TEXT)]).await)?;
                return Ok(StateFacts { observed: Observed::Missing, recorded: stamp(&row, 0), errored: row.get(2) });
            }
            row => row?,
        };
        if !row.get::<_, bool>(3) && self.lease.is_some() {
            let (schema, name) = (self.config.state_schema(), self.config.name.clone());
            self.with(|conn, limit| schema::fence_state(conn, limit, &schema, &name))?;
        }
        let observed = match (row.get::<_, bool>(4), row.get::<_, Option<bool>>(5)) {
            (false, _) => Observed::Missing,
            (true, Some(true) | None) => Observed::Empty,
            (true, Some(false)) => match stamp(&row, 6) {
                Some(stamp) => Observed::State(stamp),
                None => Observed::Unreadable("no lineage and serial at its top".into()),
            },
        };
        Ok(StateFacts { observed, recorded: stamp(&row, 0), errored: row.get(2) })
    }

    /// Records the state's stamp as it is now (after a run that may have changed it), under
    /// the lease, and whether this host (`me`, `HOST:DIR`) holds a state terraform could not
    /// save (`errored`: `errored.tfstate`): then every other host refuses to plan or apply
    /// until it is pushed (see `state_guard::check_store`).
    pub(crate) fn record_state(&mut self, me: &str, errored: bool) -> Result<()> {
        let sql = format!(
            "rec AS (UPDATE infrakit_tf.directories d SET \
                 state_lineage = coalesce(substring(left(s.data, 4096) FROM {LINEAGE}), d.state_lineage), \
                 state_serial = coalesce(substring(left(s.data, 4096) FROM {SERIAL})::bigint, d.state_serial), \
                 errored = CASE WHEN $4 THEN $5 WHEN d.errored = $5 THEN NULL ELSE d.errored END \
             FROM lease LEFT JOIN {} s ON s.name = 'default' WHERE d.name = $1 RETURNING 1) \
             SELECT EXISTS (SELECT 1 FROM lease)",
            self.state_table()
        );
        match self.fenced(&sql, &[(&errored, Type::BOOL), (&me, Type::TEXT)]) {
            Err(e) if no_table(&e) => Ok(()),
            done => done.map(drop),
        }
    }

    /// Whether terraform's state holds machines (VMs of instances) although no run through the
    /// store ever recorded it: a `migrate` that moved the state, then stopped before the
    /// files. Asked when the store holds no live instance file.
    pub(crate) fn state_without_files(&mut self) -> Result<u64> {
        let (name, table) = (self.config.name.clone(), self.state_table());
        let sql = format!(
            "SELECT count(*) FROM {table} s, json_array_elements(s.data::json -> 'resources') r \
             WHERE s.name = 'default' AND r ->> 'mode' = 'managed' AND r ->> 'name' ~ '^instance-[0-9]+$'"
        );
        self.query(async |c| {
            let row = c
                .query_typed_one(
                    "SELECT to_regclass($2) IS NOT NULL AND \
                     NOT EXISTS (SELECT 1 FROM infrakit_tf.directories WHERE name = $1 AND state_lineage IS NOT NULL)",
                    &[(&name, Type::TEXT), (&table, Type::TEXT)],
                )
                .await?;
            if !row.get::<_, bool>(0) {
                return Ok(0);
            }
            Ok(c.query_typed_one(sql.as_str(), &[]).await?.get::<_, i64>(0) as u64)
        })
    }

    /// Terraform's state document as the store holds it (`None`: no state yet).
    pub(crate) fn state_document(&mut self) -> Result<Option<String>> {
        let sql = format!("SELECT data FROM {} WHERE name = 'default'", self.state_table());
        match self.query(async |c| c.query_typed(sql.as_str(), &[]).await) {
            Err(e) if no_table(&e) => Ok(None),
            rows => Ok(rows?.first().map(|r| r.get(0))),
        }
    }

    /// The SQL that forgets the recorded stamp (to accept the state as it is), for hints.
    pub(crate) fn forget_state_sql(&self) -> String {
        format!(
            "UPDATE infrakit_tf.directories SET state_lineage = NULL, state_serial = NULL WHERE name = '{}'",
            self.config.name
        )
    }

    /// The SQL that forgets which host holds an unsaved state (for hints).
    pub(crate) fn forget_errored_sql(&self) -> String {
        format!("UPDATE infrakit_tf.directories SET errored = NULL WHERE name = '{}'", self.config.name)
    }

    /// `"<schema>".states`.
    fn state_table(&self) -> String {
        format!("{}.states", schema::quote(&self.config.state_schema()))
    }
}
