//! The workspace: the managed directory (listed under the lock when the command writes), its
//! terraform, and the output, with the operations every command uses. It is the one road from
//! a change to terraform: commands build a [`ChangeSet`] and decide; the workspace writes,
//! promotes, runs terraform and reports. Commands spawn nothing and write nothing themselves.
//!
//! The commit pipeline ([`Workspace::commit`]), by [`CommitMode`]:
//!
//! - `Queue` (`--no-apply`): write and remove files; new files stay queued as `.tf.json.new`.
//! - `Apply`: the same, then promote every queued file to `.tf.json` and run one apply without
//!   refreshing (refreshing is reconcile's job, so one provision into a large directory does
//!   not refresh every machine), of what changed only (`-target`, see [`Workspace::targets`]).
//! - `DryRun`: nothing is written; terraform plans the would-be directory in a mirror.
//!
//! The file change itself is all or nothing (`journal`): written together, or not at all,
//! whatever kills the process. Before anything is written for an apply, the queued files it
//! would promote must be readable and the state must not be lost (`state_guard`), so a refused
//! apply changes nothing.
//!
//! After a failed apply the directory keeps what was asked for, promoted: the files describe
//! the wanted state and terraform's state holds what it managed to do (a failed create is
//! marked tainted). `reconcile` (which applies everything) converges; nothing is rolled back
//! or deleted behind the user's back. The one
//! exception is `import`, whose failure is undone ([`Workspace::undo_import`]).
//!
//! Other operations: [`Workspace::promote`], [`Workspace::plan`] (the real directory, for
//! reconcile), [`Workspace::plan_after`] (a mirror), [`Workspace::apply`],
//! [`Workspace::discover_imports`], [`Workspace::state`].
//!
//! This file holds the workspace and its situation ([`Role`]); its operations are in a file an
//! idea: `commit.rs` (the pipeline above), `runs.rs` (init, plans, applies), `preview.rs` (plans
//! in a mirror), `records.rs` (what the cloud answered, by the shared clock), `undo.rs` (a
//! failed import undone), and the rest as the `mod` lines below name them.

mod changes;
mod commit;
mod errored_state;
mod imports;
mod init;
mod look;
mod lookup;
mod migrate;
mod mirror;
mod open;
mod preview;
mod records;
mod runs;
mod strays;
mod sync;
mod undo;
mod view;

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::Result;

pub(crate) use self::changes::{
    ChangeSet, CommitMode, Committed, FileAction, FileChange, FileWrite, Outcome, TfSummary,
};
pub(crate) use self::look::{drifted, gone, merge};
use crate::context::Ctx;
use crate::directory::Directory;
use crate::journal::FileOp;
use crate::lock::DirLock;
use crate::names::{self};
use crate::store::{Store, StoreConfig};
use crate::terraform::{Apply, Plan, State, Terraform};

pub(crate) struct Workspace<'a> {
    ctx: &'a Ctx,
    dir: Directory,
    /// Discovered and version-checked on first use: commands that never run terraform (a
    /// `--no-apply`) never look for it.
    tf: OnceCell<Terraform>,
    /// Provider prefixes of the documents [`Workspace::write`] wrote: [`Workspace::apply`] runs
    /// `init` first when one is new.
    written_providers: BTreeSet<String>,
    /// The situation it was opened for (`open.rs`), and what it holds for it.
    role: Role<'a>,
    /// Why an apply of this directory was cut short, and when that was noted, until what it
    /// made is looked up (see `workspace::lookup`); `None`: none was.
    evidence: Option<crate::lookup::Evidence>,
    /// What a look-up did not find yet may not conclude absent (see
    /// `Workspace::find_unrecorded`): held back from this run's applies.
    held_back: BTreeSet<String>,
    /// When the cloud's answer about `held_back` is believed (ms, the shared clock).
    held_until: Option<u64>,
    /// The command changes nothing though it holds the lock (`reconcile --check`): a state
    /// terraform could not save is not pushed (`errored_state`), only refused.
    check_only: bool,
    /// The addresses this workspace's applies created (noted as each ended): what a commit
    /// whose apply failed still made.
    created: Vec<String>,
    /// The terraform runs it started at its caller's asking (see [`Workspace::runs`]).
    runs: std::cell::Cell<u32>,
}

/// The situation a workspace is opened for (`open.rs`): the one answer to "is there a store".
enum Role<'a> {
    /// A command that writes, without a store: the directory lock.
    Local { _lock: DirLock },
    /// A command that writes, with a store (several hosts): connected, its lease held, then the
    /// directory lock. Every change goes to the store first, in one transaction, then to the
    /// local copy. `marked`: whether the directory is marked as the store's copy
    /// (`sync::mark`); the first change into a store directory that did not exist yet marks it.
    Shared { store: Box<Store>, config: &'a StoreConfig, marked: bool, _lock: DirLock },
    /// A command that only reads (or plans in a mirror): no lock, a view of the directory
    /// (`view`); with a store (`store`), the view's temporary directory (`view::store`).
    Reader { store: Option<&'a StoreConfig>, _view_dir: Option<tempfile::TempDir> },
}

impl Role<'_> {
    /// The store a writer changes, if there is one.
    fn store(&mut self) -> Option<&mut Store> {
        match self {
            Role::Shared { store, .. } => Some(store),
            _ => None,
        }
    }

    /// Whether the command writes to a store.
    fn writes_to_store(&self) -> bool {
        matches!(self, Role::Shared { .. })
    }

    /// The store configured for the directory, whoever opened it.
    fn store_config(&self) -> Option<&StoreConfig> {
        match self {
            Role::Shared { config, .. } => Some(config),
            Role::Reader { store, .. } => *store,
            Role::Local { .. } => None,
        }
    }
}

/// A plan saved for [`Workspace::apply`] ([`Apply::Saved`]), and what it found.
pub(crate) struct SavedPlan {
    pub(crate) plan: Plan,
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// What it was limited to (`-target`); empty: everything.
    targets: Vec<String>,
    /// Whether it refreshed (see [`crate::terraform::PlanOptions::refresh`]).
    refresh: Option<bool>,
}

/// Files as they were before a change.
pub(crate) struct SavedFiles {
    files: Vec<(String, Option<Saved>)>,
}

/// A file's bytes and permission bits.
struct Saved {
    bytes: Vec<u8>,
    mode: u32,
}

impl SavedPlan {
    /// Applying exactly this plan (its targets and destroys are what a retry checks again).
    pub(crate) fn to_apply(&self) -> Apply<'_> {
        Apply::Saved {
            plan: &self.path,
            refresh: self.refresh,
            targets: &self.targets,
            destroys: self.plan.totals.remove,
        }
    }
}

impl<'a> Workspace<'a> {
    /// With a store: refuses (exit 3) to go on when a group spec of this host's differs from
    /// the one the store last converged that group with (see `sync::check_config`). `specs`:
    /// each group's ID and what decides it (`GroupSpec::fingerprint_input`).
    pub(crate) fn check_groups(&mut self, specs: &[(String, String)]) -> Result<()> {
        let Some(store) = self.role.store() else { return Ok(()) };
        for (id, input) in specs {
            let files = BTreeMap::from([(format!("group {id}"), sync::fingerprint(input.as_bytes()))]);
            let part = format!("group {id}");
            sync::check_config(store, &self.dir, &part, &files, self.ctx.accept_config, &self.ctx.printer)?;
        }
        Ok(())
    }

    /// This command changes nothing, though it holds the lock (`reconcile --check`): see
    /// [`Workspace::preflight`].
    pub(crate) fn check_only(&mut self) {
        self.check_only = true;
    }

    /// The terraform runs this workspace started at its caller's asking, counted as each
    /// starts (whether it succeeds or not): every plan (saved, in a mirror with
    /// [`Workspace::plan_after`], each of a look's), apply and forget. Not what serves them
    /// (`init`, `show`, reading or pushing the state, the look-ups of what a cut apply made,
    /// the strays' reads) nor a retry (`metrics` counts every spawn and every retry).
    pub(crate) fn runs(&self) -> u32 {
        self.runs.get()
    }

    /// Counts one run (see [`Workspace::runs`]).
    fn started_run(&self) {
        self.runs.set(self.runs.get() + 1);
    }

    /// The directory as last listed.
    pub(crate) fn dir(&self) -> &Directory {
        &self.dir
    }

    /// Terraform, found and version-checked once.
    pub(crate) fn terraform(&self) -> Result<&Terraform> {
        if let Some(tf) = self.tf.get() {
            return Ok(tf);
        }
        let tf = self.ctx.terraform(&self.dir)?;
        Ok(self.tf.get_or_init(|| tf))
    }

    /// Terraform's state, by address. A reader reads the copy its view took (`view::local`:
    /// as of the same moment as the files, never half written), away from the live files.
    pub(crate) fn state(&self) -> Result<State> {
        if self.role.writes_to_store() {
            self.init_if_needed(&BTreeSet::new())?;
        } else {
            self.check_shared_state()?;
        }
        match self.dir.state_copy() {
            Some(bytes) => {
                // Read apart from the live configuration, which writers may be changing (a file
                // gone mid-read failed the read): a state file needs only the providers
                // (`.terraform` and the lock file) to be read.
                let tmp = crate::fsio::temp_dir("state")?;
                for name in [".terraform", init::LOCK_FILE] {
                    let real = self.dir.path().join(name);
                    if real.exists() {
                        crate::fsio::symlink(&real, &tmp.path().join(name))?;
                    }
                }
                let copy = tmp.path().join("terraform.tfstate");
                crate::fsio::write_scratch(&copy, bytes, 0o600)?;
                self.terraform()?.in_dir(tmp.path()).show_state_file(&copy)
            }
            None => self.terraform()?.show_state(),
        }
    }

    /// The managed resources of the state as terraform stores it, read without `terraform
    /// show` (whose JSON costs a run and about 0.3 s per 1,000 resources): a reader's copy, the
    /// local file, the store's row (a reader connects for it), else `state pull`. Addresses, IDs and taint only: what a
    /// count needs (`describe::census`), never values to show.
    pub(crate) fn state_resources(&mut self) -> Result<Vec<crate::look::Recorded>> {
        let text = match (self.dir.state_copy(), &self.role) {
            (Some(bytes), _) => String::from_utf8_lossy(bytes).into_owned(),
            // A reader holds no connection: one query, rather than a `terraform state pull`.
            (None, Role::Reader { store: Some(config), .. }) => {
                Store::connect(config)?.state_document()?.unwrap_or_default()
            }
            (None, _) => self.state_document()?,
        };
        if text.trim().is_empty() {
            return Ok(Vec::new());
        }
        crate::tfoutput::raw_state_resources(&text).map_err(|e| crate::exit::invalid(e).into())
    }

    /// With a store, terraform's state must be shared too (`backend "pg"`): a local state on
    /// each host would make every host create every machine. Checked where `init` left its
    /// backend record.
    fn check_shared_state(&self) -> Result<()> {
        if self.role.store_config().is_none() || !crate::state_guard::is_local(self.dir.path()) {
            return Ok(());
        }
        Err(crate::exit::invalid(format!(
            "`{}` keeps terraform's state on this host, but a store is configured: every host would have its own state",
            self.ctx.dir.display()
        ))
        .hint("declare `terraform { backend \"pg\" {} }` in main.tf (it connects to the store), then re-run")
        .into())
    }

    /// Settles a leftover import-blocks file before terraform runs (see `imports::carry_out`).
    /// Whether import blocks remain for the next apply.
    pub(crate) fn carry_out_imports(&mut self) -> Result<bool> {
        if !self.dir.has(names::IMPORT_FILE) {
            return Ok(false);
        }
        let (kept, op) = imports::carried_out(self.dir.path())?;
        self.change(&Vec::from_iter(op))?;
        Ok(kept > 0)
    }

    /// Removes the import-blocks file: its blocks were carried out.
    pub(crate) fn finish_imports(&mut self) -> Result<()> {
        if self.dir.has(names::IMPORT_FILE) {
            self.change(&[FileOp { name: names::IMPORT_FILE.to_string(), after: None }])?;
        }
        Ok(())
    }

    /// Drops the import blocks to `done` (carried out by a targeted apply); the file goes
    /// when none is left. Those of other addresses stay for the next whole apply.
    pub(crate) fn imports_done(&mut self, done: &[String]) -> Result<()> {
        let (_, op) = imports::keeping(self.dir.path(), |to| !done.iter().any(|d| d == to));
        self.change(&Vec::from_iter(op))
    }

    /// Whether the file `name` declares a resource held back (see [`Workspace::holding_back`]).
    pub(crate) fn holds(&self, name: &str) -> bool {
        !self.held_back.is_empty()
            && self.dir.read_doc(name).is_ok_and(|doc| {
                crate::lookup::declared(&[(name.to_string(), doc)]).iter().any(|a| self.held_back.contains(a))
            })
    }
}

/// `instance-1.tf.json` of `instance-1.tf.json.new`.
fn live_name(queued: &str) -> String {
    format!("{}{}", queued.strip_suffix(names::QUEUED).expect("queued"), names::LIVE)
}
