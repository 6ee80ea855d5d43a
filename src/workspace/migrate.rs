//! `migrate`: the one move of a local directory into the store, under both locks.

use std::collections::BTreeSet;

use anyhow::Result;

use super::{init, sync, Workspace};
use crate::context::Ctx;
use crate::fsio::Perms;
use crate::journal::FileOp;

/// What [`Workspace::migrate`] did (`migrate --output json`).
#[derive(Debug, serde::Serialize)]
pub(crate) struct Migrated {
    /// The directory's name in the store.
    pub(crate) store: String,
    /// The store's URL, without its password.
    pub(crate) url: String,
    /// The managed files the store holds for it now (from this directory).
    pub(crate) files: Vec<String>,
    /// Whether this run moved them (`false`: the store already held them, unchanged).
    pub(crate) moved: bool,
}

impl<'a> Workspace<'a> {
    /// Moves this directory into the store (`migrate`), under both locks: its managed files,
    /// in one transaction, and terraform's state into the backend the configuration declares
    /// (`init -migrate-state`). Refused, with nothing changed, when no store is configured,
    /// when the store holds other files under this directory's name, or when the
    /// configuration declares no shared backend. Run again, it changes nothing.
    pub(crate) fn migrate(ctx: &'a Ctx) -> Result<Migrated> {
        let Some(config) = ctx.store()? else {
            return Err(crate::exit::invalid(format!("no store is configured for `{}`", ctx.dir.display()))
                .hint("add \"store\": {\"postgres\": \"<URL>\", \"directory\": \"<name>\"} to infrakit-tf.json")
                .into());
        };
        let (name, url, schema, env) =
            (config.name.clone(), config.display(), config.state_schema(), config.shell_env());
        let mut ws = Self::writer_unsynced(ctx, ctx.lock_timeout)?;
        let local = sync::local_files(&ws.dir)?;
        let stored = ws.role.store().expect("a store").files()?;
        if let Some(n) = sync::differs(&stored, &local) {
            return Err(crate::exit::invalid(format!(
                "store directory `{name}` already holds other files: {n} differ from `{}`",
                ctx.dir.display()
            ))
            .hint("give this directory another `store.directory` name; a host that needs the store's files as they are just runs its commands (they bring them here)")
            .into());
        }
        let moved = stored.as_ref().is_none_or(|s| s.files.is_empty());
        if moved {
            // The state goes first, the files after. Whether the directory's schema holds a
            // state already decides: a local state is moved only into an empty schema (one
            // that holds a state belongs to another directory of this name, or to what other
            // hosts did: copying over it would lose it); a state in a backend is taken as
            // moved only when it is in that schema (an earlier `migrate` that stopped before
            // the files), since `init -migrate-state` cannot move it from elsewhere.
            let has_state = ws.role.store().expect("a store").has_state(&schema)?;
            let local_state = crate::state_guard::is_local(ws.dir.path());
            if local_state && has_state {
                return Err(crate::exit::invalid(format!(
                    "schema `{schema}` of the store's database already holds a terraform state: another directory was named `{name}`"
                ))
                .hint("give this directory another `store.directory` name; nothing was changed")
                .into());
            }
            if !local_state && !has_state {
                return Err(crate::exit::invalid(format!(
                    "`{}` keeps terraform's state in a backend already; with a store it lives in schema `{schema}` of the store's database",
                    ctx.dir.display()
                ))
                .hint(format!("copy it there first (`terraform state pull > s.tfstate`, then `{env} terraform state push s.tfstate`), then re-run"))
                .into());
            }
            if local_state {
                ctx.printer
                    .status("running terraform init -migrate-state (the state goes where main.tf's backend says)");
                ws.terraform()?.init_migrating_state()?;
                init::record(ws.dir.path(), &BTreeSet::new())?;
            }
        }
        ws.init_if_needed(&BTreeSet::new())?; // and the state must be shared now
        if moved && !local.is_empty() {
            let ops: Vec<FileOp> = local
                .iter()
                .map(|(name, f)| FileOp { name: name.clone(), after: Some((f.content.clone(), Perms::Exact(f.mode))) })
                .collect();
            let committed = ws.store_commit(&ops)?;
            ws.synced(committed);
        }
        // The state's stamp goes in once the files are there: a `migrate` cut before them is
        // one that no run ever recorded (see `sync::check_migrated`).
        ws.recorded(Ok(()))?;
        sync::mark_copy_of(ws.role.store().expect("a store"), &mut ws.dir)?;
        Ok(Migrated { store: name, url, files: local.into_keys().collect(), moved })
    }
}
