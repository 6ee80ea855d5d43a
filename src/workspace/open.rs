//! Opening the workspace, for each situation in one place: a command that writes takes the
//! locks (with a store, the store's lease first, then the local files brought up to the
//! store's content); a command that only reads opens a reader's view (`view`), the local
//! files' or the store's.

use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;

use super::{init, sync, view, CommitMode, Role, Workspace};
use crate::context::Ctx;
use crate::directory::Directory;
use crate::lock::{self, Wait};
use crate::store::Store;

impl<'a> Workspace<'a> {
    /// For a command that writes: takes the directory lock (waiting up to `timeout`), undoes
    /// what a killed run left half done, then lists the directory. With a store, its lock
    /// comes first, and the local files are brought up to its content (`sync::pull`).
    pub(crate) fn writer(ctx: &'a Ctx, timeout: Duration) -> Result<Self> {
        let mut ws = Self::writer_unsynced(ctx, timeout)?;
        if let Role::Shared { store, marked, .. } = &mut ws.role {
            *marked = sync::pull(store, &mut ws.dir, &ctx.printer)?;
            let base = sync::base_config(&ws.dir)?;
            sync::check_config(store, &ws.dir, sync::BASE, &base, ctx.accept_config, &ctx.printer)?;
            sync::check_migrated(store, &ws.dir)?;
        }
        ws.note_cut()?;
        ws.note_created()?;
        Ok(ws)
    }

    /// [`Workspace::writer`] without bringing the local files up to the store's (`migrate`).
    pub(super) fn writer_unsynced(ctx: &'a Ctx, timeout: Duration) -> Result<Self> {
        let wait = Wait::new(timeout); // one `--lock-timeout` for both locks
        let store = match ctx.store()? {
            Some(config) => {
                let mut store = Store::connect(config)?;
                store.take_lease(wait, &ctx.printer)?;
                Some((store, config))
            }
            None => None,
        };
        let _lock = ctx.lock_dir_within(wait)?;
        let dir = ctx.directory()?;
        let role = match store {
            Some((store, config)) => Role::Shared { store: Box::new(store), config, marked: false, _lock },
            None => Role::Local { _lock },
        };
        Ok(Workspace {
            ctx,
            dir,
            tf: OnceCell::new(),
            written_providers: BTreeSet::new(),
            role,
            evidence: None,
            held_back: BTreeSet::new(),
            held_until: None,
            runs: std::cell::Cell::new(0),
            check_only: false,
            created: Vec::new(),
        })
    }

    /// For a command that only reads (or plans in a mirror): no lock. With a store, it reads
    /// a snapshot of the store's files (`view::store`).
    pub(crate) fn read(ctx: &'a Ctx) -> Result<Self> {
        let mut evidence = None;
        let config = ctx.store()?;
        let (dir, view_dir) = match config {
            Some(config) => {
                let mut store = Store::connect(config)?;
                if init::needed(&ctx.dir, &BTreeSet::new())? {
                    // A host's first command may be this one: terraform's working directory
                    // is set up (`.terraform`, under the local lock, which a reader otherwise
                    // never takes) so that the state can be read from the backend. No managed
                    // file is written.
                    let _lock = ctx.lock_dir_only(Wait::new(ctx.lock_timeout))?;
                    let local = Directory::open(&ctx.dir)?;
                    ctx.terraform(&local)?.init()?;
                    init::record(&ctx.dir, &BTreeSet::new())?;
                }
                let (tmp, view) = view::store(&mut store, &ctx.dir, &ctx.printer)?;
                evidence = store.evidence();
                (view, Some(tmp))
            }
            None => {
                let view = view::local(&ctx.dir)?;
                if let Some(files) = view.half_done {
                    ctx.printer.warn(&format!(
                        "a change was left half done ({}: its run was killed, or could not undo it): shown as it was before; the next command that takes the lock (`infrakit-tf reconcile`) undoes it",
                        files.join(", ")
                    ));
                }
                (view.dir, None)
            }
        };
        // What this host's last apply left here, not in the store yet, counts as well.
        let evidence = evidence.or_else(|| lock::running::evidence(&ctx.dir));
        Ok(Workspace {
            ctx,
            dir,
            tf: OnceCell::new(),
            written_providers: BTreeSet::new(),
            role: Role::Reader { store: config, _view_dir: view_dir },
            evidence,
            held_back: BTreeSet::new(),
            held_until: None,
            runs: std::cell::Cell::new(0),
            check_only: false,
            created: Vec::new(),
        })
    }

    /// The directory for `mode`: locked unless it is a dry run.
    pub(crate) fn for_mode(ctx: &'a Ctx, mode: CommitMode) -> Result<Self> {
        if mode == CommitMode::DryRun {
            Self::read(ctx)
        } else {
            Self::writer(ctx, ctx.lock_timeout)
        }
    }
}
