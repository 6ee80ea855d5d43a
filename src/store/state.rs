//! Terraform's state as the store sees it: a row of `<state schema>.states`, which terraform's
//! pg backend writes. The store reads its stamp (lineage and serial, from the top of the
//! document, without fetching it), records the stamp after every run that may change it (in
//! `directories`, under the lease), fences its table (see `schema::fence_state`), and tells a
//! state that holds machines while the store holds no file for them (a `migrate` cut short).

use anyhow::Result;

use super::{schema, Store};
use crate::state_guard::{Observed, Stamp};

/// The state row, as a check before a plan or an apply sees it.
pub(crate) struct StateFacts {
    pub(crate) observed: Observed,
    /// What the last run through the store left.
    pub(crate) recorded: Option<Stamp>,
}

impl Store {
    /// The state's stamp now and as recorded. Under the lease, its table is fenced first if
    /// it is not yet (terraform created it on its first run).
    pub(crate) fn state_facts(&mut self) -> Result<StateFacts> {
        let (name, table) = (self.config.name.clone(), self.state_table());
        let (exists, fenced, recorded) = self.query(async |c| {
            let row = c
                .query_one(
                    "SELECT to_regclass($2) IS NOT NULL, \
                            EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass($2) AND tgname = 'infrakit_tf_fence'), \
                            (SELECT state_lineage FROM infrakit_tf.directories WHERE name = $1), \
                            (SELECT state_serial FROM infrakit_tf.directories WHERE name = $1)",
                    &[&name, &table],
                )
                .await?;
            let recorded = match (row.get::<_, Option<String>>(2), row.get::<_, Option<i64>>(3)) {
                (Some(lineage), Some(serial)) => Some(Stamp { lineage, serial: serial as u64 }),
                _ => None,
            };
            Ok((row.get::<_, bool>(0), row.get::<_, bool>(1), recorded))
        })?;
        if !exists {
            return Ok(StateFacts { observed: Observed::Missing, recorded });
        }
        if !fenced && self.lease.is_some() {
            let (schema, name) = (self.config.state_schema(), self.config.name.clone());
            self.with(|conn, limit| schema::fence_state(conn, limit, &schema, &name))?;
        }
        let sql = format!(
            "SELECT btrim(data) = '', substring(left(data, 4096) FROM '\"lineage\":\\s*\"([^\"]*)\"'), \
                    substring(left(data, 4096) FROM '\"serial\":\\s*([0-9]+)')::bigint \
             FROM {table} WHERE name = 'default'"
        );
        let observed = self.query(async |c| {
            Ok(match c.query_opt(sql.as_str(), &[]).await? {
                None => Observed::Missing,
                Some(row) if row.get::<_, Option<bool>>(0).unwrap_or(true) => Observed::Empty,
                Some(row) => match (row.get::<_, Option<String>>(1), row.get::<_, Option<i64>>(2)) {
                    (Some(lineage), Some(serial)) => Observed::State(Stamp { lineage, serial: serial as u64 }),
                    _ => Observed::Unreadable("no lineage and serial at its top".into()),
                },
            })
        })?;
        Ok(StateFacts { observed, recorded })
    }

    /// Records the state's stamp as it is now (after a run that may have changed it), under
    /// the lease. Nothing when there is no state yet.
    pub(crate) fn record_state(&mut self) -> Result<()> {
        let (name, table) = (self.config.name.clone(), self.state_table());
        let sql = format!(
            "UPDATE infrakit_tf.directories d SET \
                 state_lineage = substring(left(s.data, 4096) FROM '\"lineage\":\\s*\"([^\"]*)\"'), \
                 state_serial = substring(left(s.data, 4096) FROM '\"serial\":\\s*([0-9]+)')::bigint \
             FROM {table} s WHERE d.name = $1 AND s.name = 'default' \
             AND left(s.data, 4096) ~ '\"lineage\":\\s*\"[^\"]+\"'"
        );
        let exists = self.query(async |c| {
            Ok(c.query_one("SELECT to_regclass($1) IS NOT NULL", &[&table]).await?.get::<_, bool>(0))
        })?;
        if exists {
            self.fenced(async |tx| tx.execute(sql.as_str(), &[&name]).await)?;
        }
        Ok(())
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
                .query_one(
                    "SELECT to_regclass($2) IS NOT NULL AND \
                     NOT EXISTS (SELECT 1 FROM infrakit_tf.directories WHERE name = $1 AND state_lineage IS NOT NULL)",
                    &[&name, &table],
                )
                .await?;
            if !row.get::<_, bool>(0) {
                return Ok(0);
            }
            Ok(c.query_one(sql.as_str(), &[]).await?.get::<_, i64>(0) as u64)
        })
    }

    /// The SQL that forgets the recorded stamp (to accept the state as it is), for hints.
    pub(crate) fn forget_state_sql(&self) -> String {
        format!(
            "UPDATE infrakit_tf.directories SET state_lineage = NULL, state_serial = NULL WHERE name = '{}'",
            self.config.name
        )
    }

    /// `"<schema>".states`.
    fn state_table(&self) -> String {
        format!("{}.states", schema::quote(&self.config.state_schema()))
    }
}
