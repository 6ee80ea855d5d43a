//! The store's tables (schema `infrakit_tf`), created on first use and brought from an older
//! layout to this one, under a transaction-level advisory lock so that hosts starting at once
//! do not race; what the role must be allowed, checked before anything is created; and the
//! fence on terraform's state table.
//!
//! ```sql
//! infrakit_tf.schema_version (version integer)                      -- SCHEMA_VERSION
//! infrakit_tf.directories    (id bigserial primary key, name text unique, created timestamptz,
//!                             config_fingerprint text, config_host text,   -- version 1, unused
//!                             config jsonb,                 -- what each part was last run with
//!                             state_lineage text, state_serial bigint,  -- terraform's state, as
//!                                                                       -- our last run left it
//!                             errored text,   -- the host holding a state terraform could not save
//!                             unsettled text, -- an apply was cut short: look up what it made
//!                             revision text) -- drawn anew by every commit of files (version 3)
//! infrakit_tf.files          (directory bigint references directories on delete cascade,
//!                             name text, content bytea, mode integer, updated timestamptz,
//!                             primary key (directory, name))
//! infrakit_tf.leases         (directory text primary key, epoch bigint, holder text,
//!                             owner text, acquired, renewed, expires timestamptz,
//!                             released boolean)                             -- see `lease`
//! infrakit_tf.lease_epochs   -- a sequence: every acquisition's epoch, never twice
//! infrakit_tf.fence()        -- the trigger function on each state table (see `fence_state`),
//!                               its comment the revision (FENCE)
//! ```

use std::time::Duration;

use super::conn::{Conn, Outcome};

/// The layout of the `infrakit_tf` schema this build reads and writes. An older one is brought
/// to this on first use, and a host still on an infrakit-tf that knows only the older one
/// then refuses to run: version 1 had no leases (it would not honour them), version 2 no
/// revision (it would commit without drawing one, and a host that trusted its copy at that
/// revision would miss the change).
pub(super) const SCHEMA_VERSION: i32 = 3;

/// The fence's revision, its function's comment: a store whose fence is another is given this
/// one by [`create`] (compatible both ways, so no new [`SCHEMA_VERSION`]: hosts of the release
/// before, whose terraforms carry `infrakit_tf.lease`, run on beside this one). Revision 2
/// also reads the epoch from terraform's `application_name`, which a session pooler passes on.
pub(super) const FENCE: &str = "infrakit-tf fence 2";

/// First key of our advisory locks (`iktf`).
pub(super) const CLASS: i32 = 0x696b_7466;

/// What [`probe`] found.
pub(super) struct Probe {
    /// The layout's version; `None`: no schema yet.
    pub(super) version: Option<i32>,
    /// A privilege the role lacks, as the `GRANT` that gives it.
    pub(super) missing: Option<String>,
    /// Whether terraform's pg backend's shared sequence (`public.global_states_id_seq`) and
    /// this directory's state table exist: see [`create_state_table`].
    pub(super) state_table: bool,
    /// Whether the fence is this build's ([`FENCE`]).
    pub(super) fence: bool,
    /// The session's `idle_in_transaction_session_timeout` in milliseconds: not the one the
    /// startup packet asked for when a pooler refused or dropped it.
    pub(super) in_transaction: i64,
}

/// The schema's version and the privileges this role lacks: `CREATE` on schema `public`
/// (terraform's pg backend creates its `global_states_id_seq` there on every run, and
/// PostgreSQL 15 no longer grants it to every role), and `CREATE` on the database while our
/// schema or the state's (`state_schema`) does not exist yet.
pub(super) fn probe(conn: &mut Conn, limit: Duration, state_schema: &str) -> Outcome<Probe> {
    conn.call(limit, async |c| {
        // Sent together (one round trip): the second fails when there is no schema yet. The
        // CASE orders the table check after the schema's (a table of a schema we may not use,
        // or a version-1 store's missing `leases`, is an error, not false): `create` brings a
        // version 1 up, so its missing table is no missing privilege.
        let params = [
            (&state_schema as &(dyn tokio_postgres::types::ToSql + Sync), tokio_postgres::types::Type::TEXT),
            (&FENCE, tokio_postgres::types::Type::TEXT),
        ];
        let (privileges, version) = tokio::join!(
            c.query_typed_one(
                "SELECT has_schema_privilege('public', 'CREATE'), \
                        has_database_privilege(current_database(), 'CREATE'), \
                        to_regnamespace('infrakit_tf') IS NOT NULL AND to_regnamespace($1) IS NOT NULL, \
                        quote_ident(current_database()), quote_ident(current_user), \
                        CASE WHEN to_regnamespace('infrakit_tf') IS NULL THEN true \
                             WHEN NOT has_schema_privilege('infrakit_tf', 'USAGE') THEN false \
                             WHEN to_regclass('infrakit_tf.leases') IS NULL THEN true \
                             ELSE has_table_privilege('infrakit_tf.leases', 'SELECT, INSERT, UPDATE, DELETE') END, \
                        to_regclass('public.global_states_id_seq') IS NOT NULL \
                            AND to_regclass(quote_ident($1) || '.states') IS NOT NULL, \
                        obj_description(to_regprocedure('infrakit_tf.fence()'), 'pg_proc') IS NOT DISTINCT FROM $2, \
                        (SELECT setting::bigint FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout')",
                &params,
            ),
            c.query_typed_one("SELECT max(version) FROM infrakit_tf.schema_version", &[]),
        );
        let row = privileges?;
        let (public, database, schemas_exist): (bool, bool, bool) = (row.get(0), row.get(1), row.get(2));
        let (db, role): (String, String) = (row.get(3), row.get(4));
        let ours: bool = row.get(5);
        let (state_table, fence, in_transaction): (bool, bool, i64) = (row.get(6), row.get(7), row.get(8));
        let missing = if !database && !schemas_exist {
            Some(format!("GRANT CREATE ON DATABASE {db} TO {role}"))
        } else if !ours {
            // Another role created the store's schema: every host must be allowed its tables.
            Some(format!(
                "GRANT USAGE ON SCHEMA infrakit_tf TO {role}; GRANT ALL ON ALL TABLES IN SCHEMA infrakit_tf TO {role}; \
                 GRANT ALL ON ALL SEQUENCES IN SCHEMA infrakit_tf TO {role}"
            ))
        } else if !public {
            Some(format!("GRANT CREATE ON SCHEMA public TO {role}"))
        } else {
            None
        };
        let version = match version {
            Ok(row) => row.get(0),
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => None,
            // Told as the missing GRANT above.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => None,
            Err(e) => return Err(e),
        };
        Ok(Probe { version, missing, state_table, fence, in_transaction })
    })
}

/// Creates what terraform's pg backend needs, as its `configure` does, one host at a time: the
/// shared sequence (`public.global_states_id_seq`), then this directory's `state_schema` (when
/// it does not exist: `CREATE SCHEMA` asks for the privilege even when it does), its `states`
/// table and the table's index. Every terraform creates them on its first run (`IF NOT
/// EXISTS`), which is not safe against itself in PostgreSQL: two hosts' first `init` at once
/// fail one ("duplicate key value violates unique constraint pg_type_typname_nsp_index").
/// Made here first, under our lock, every terraform finds them.
pub(super) fn create_state_table(conn: &mut Conn, limit: Duration, state_schema: &str) -> Outcome<()> {
    let schema = quote(state_schema);
    let table = format!(
        "CREATE TABLE IF NOT EXISTS {schema}.states (
             id bigint NOT NULL DEFAULT nextval('public.global_states_id_seq') PRIMARY KEY,
             name text UNIQUE,
             data text);
         CREATE UNIQUE INDEX IF NOT EXISTS states_by_name ON {schema}.states (name)"
    );
    conn.call(limit, async |c| {
        let tx = c.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&CLASS]).await?;
        tx.batch_execute("CREATE SEQUENCE IF NOT EXISTS public.global_states_id_seq AS bigint").await?;
        let missing: bool = tx
            .query_typed_one(
                "SELECT to_regnamespace($1) IS NULL",
                &[(&state_schema, tokio_postgres::types::Type::TEXT)],
            )
            .await?
            .get(0);
        if missing {
            tx.batch_execute(&format!("CREATE SCHEMA {schema}")).await?;
        }
        tx.batch_execute(&table).await?;
        tx.commit().await
    })
}

/// Runs `sql` in a transaction under our advisory lock, so that hosts starting at once take
/// turns.
fn one_host_at_a_time(conn: &mut Conn, limit: Duration, sql: &str) -> Outcome<()> {
    conn.call(limit, async |c| {
        let tx = c.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&CLASS]).await?;
        tx.batch_execute(sql).await?;
        tx.commit().await
    })
}

/// Creates the schema, or brings an older one (or its fence) to this one. All or nothing, one
/// host at a time.
pub(super) fn create(conn: &mut Conn, limit: Duration) -> Outcome<()> {
    conn.call(limit, async |c| {
        let tx = c.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&CLASS]).await?;
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS infrakit_tf;
             CREATE TABLE IF NOT EXISTS infrakit_tf.schema_version (version integer NOT NULL);
             CREATE TABLE IF NOT EXISTS infrakit_tf.directories (
                 id bigserial PRIMARY KEY,
                 name text NOT NULL UNIQUE,
                 created timestamptz NOT NULL DEFAULT now(),
                 config_fingerprint text,
                 config_host text);
             ALTER TABLE infrakit_tf.directories
                 ADD COLUMN IF NOT EXISTS config jsonb,
                 ADD COLUMN IF NOT EXISTS state_lineage text,
                 ADD COLUMN IF NOT EXISTS state_serial bigint,
                 ADD COLUMN IF NOT EXISTS errored text,
                 ADD COLUMN IF NOT EXISTS unsettled text,
                 ADD COLUMN IF NOT EXISTS revision text NOT NULL DEFAULT '';
             CREATE TABLE IF NOT EXISTS infrakit_tf.files (
                 directory bigint NOT NULL REFERENCES infrakit_tf.directories (id) ON DELETE CASCADE,
                 name text NOT NULL,
                 content bytea NOT NULL,
                 mode integer NOT NULL,
                 updated timestamptz NOT NULL DEFAULT now(),
                 PRIMARY KEY (directory, name));
             CREATE SEQUENCE IF NOT EXISTS infrakit_tf.lease_epochs;
             CREATE TABLE IF NOT EXISTS infrakit_tf.leases (
                 directory text PRIMARY KEY,
                 epoch bigint NOT NULL,
                 holder text NOT NULL,
                 owner text NOT NULL,
                 acquired timestamptz NOT NULL,
                 renewed timestamptz NOT NULL,
                 expires timestamptz NOT NULL,
                 released boolean NOT NULL);
             {}",
            fence_sql()
        ))
        .await?;
        let has: Option<i32> = tx.query_one("SELECT max(version) FROM infrakit_tf.schema_version", &[]).await?.get(0);
        match has {
            None => tx.execute("INSERT INTO infrakit_tf.schema_version (version) VALUES ($1)", &[&SCHEMA_VERSION]),
            Some(_) => tx.execute("UPDATE infrakit_tf.schema_version SET version = $1", &[&SCHEMA_VERSION]),
        }
        .await?;
        tx.commit().await
    })
}

/// The fence (the trigger function on each state table), its revision as its comment.
fn fence_sql() -> String {
    format!(
        "CREATE OR REPLACE FUNCTION infrakit_tf.fence() RETURNS trigger LANGUAGE plpgsql AS $fence$
         DECLARE
             -- The lease's epoch, set directly (PG_CONN_STR's infrakit_tf.lease, which a
             -- pooler refuses or drops), else from the session's name (`infrakit-tf tf
             -- DIR#EPOCH`, which PgBouncer passes on), unless PostgreSQL may have cut it.
             token text := current_setting('infrakit_tf.lease', true);
             app text := current_setting('application_name');
             prefix text := 'infrakit-tf tf ' || TG_ARGV[0] || '#';
         BEGIN
             IF coalesce(token, '') = '' AND starts_with(app, prefix) AND octet_length(app) < 63 THEN
                 token := substr(app, length(prefix) + 1);
             END IF;
             -- Only terraforms run by infrakit-tf carry a lease; a state push by hand does not.
             IF coalesce(token, '') <> '' THEN
                 PERFORM 1 FROM infrakit_tf.leases
                  WHERE directory = TG_ARGV[0] AND epoch::text = token
                    AND NOT released AND expires > clock_timestamp()
                  FOR SHARE;
                 IF NOT FOUND THEN
                     RAISE EXCEPTION 'infrakit-tf: the lease (epoch %) on store directory % is no longer held: another host may hold it; this terraform''s state write is refused', token, TG_ARGV[0]
                         USING ERRCODE = 'lock_not_available';
                 END IF;
             END IF;
             IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
             RETURN NEW;
         END $fence$;
         COMMENT ON FUNCTION infrakit_tf.fence() IS '{FENCE}';"
    )
}

/// Brings the fence to this build's revision ([`FENCE`]), one host at a time.
pub(super) fn upgrade_fence(conn: &mut Conn, limit: Duration) -> Outcome<()> {
    one_host_at_a_time(conn, limit, &fence_sql())
}

/// Puts the fence on terraform's state table in `schema` (once: it stays), so that a state
/// write by a terraform whose lease was lost is refused by the database itself. Nothing when
/// the table does not exist (`create_state_table` makes it when a host connects). `directory` is the store directory the state belongs to.
pub(super) fn fence_state(conn: &mut Conn, limit: Duration, schema: &str, directory: &str) -> Outcome<()> {
    let table = format!("{}.states", quote(schema));
    let sql = format!(
        "CREATE TRIGGER infrakit_tf_fence BEFORE INSERT OR UPDATE OR DELETE ON {table} \
         FOR EACH ROW EXECUTE FUNCTION infrakit_tf.fence('{}')",
        directory.replace('\'', "''")
    );
    conn.call(limit, async |c| {
        let missing: bool = c
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL AND NOT EXISTS \
                 (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = 'infrakit_tf_fence')",
                &[&table],
            )
            .await?
            .get(0);
        if missing {
            c.batch_execute(&sql).await?;
        }
        Ok(())
    })
}

/// An identifier, quoted for SQL.
pub(super) fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}
