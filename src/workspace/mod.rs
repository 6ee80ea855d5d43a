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

mod adoption;
mod changes;
mod heal;
mod imports;
mod init;
mod look;
mod migrate;
mod mirror;
mod open;
mod strays;
mod sync;
mod view;

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::Value;

pub(crate) use self::changes::{
    ChangeSet, CommitMode, Committed, FileAction, FileChange, FileWrite, Outcome, TfSummary,
};
pub(crate) use self::look::{drifted, gone, merge};
use crate::cloud_record::CloudRecord;
use crate::context::Ctx;
use crate::directory::{Directory, Instance};
use crate::fsio::Perms;
use crate::health_record::HealthRecord;
use crate::journal::{self, FileOp};
use crate::lock::{self, DirLock};
use crate::names::LAST_ID;
use crate::names::{self, Kind};
use crate::store::{Store, StoreConfig};
use crate::terraform::{Apply, Plan, PlanOptions, State, Terraform};
use crate::tfoutput::Changes;

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
    /// made is looked up (see `workspace::adoption`); `None`: none was.
    unsettled: Option<crate::lookup::Evidence>,
    /// What a look-up did not find yet may not conclude absent (see
    /// `Workspace::find_unrecorded`): held back from this run's applies.
    held_back: BTreeSet<String>,
    /// When the cloud's answer about `held_back` is believed (ms, the shared clock).
    held_until: Option<u64>,
    /// The command changes nothing though it holds the lock (`reconcile --check`): a state
    /// terraform could not save is not pushed (`heal`), only refused.
    check_only: bool,
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
    /// Whether it refreshed (see [`PlanOptions::refresh`]).
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

    /// Commits `changes` (see the module doc). `Err` means nothing was applied; an apply that
    /// failed after the files were written comes back in [`Committed::failure`], so that the
    /// command can still report what is in the directory.
    pub(crate) fn commit(&mut self, changes: ChangeSet, mode: CommitMode) -> Result<Committed> {
        if mode == CommitMode::DryRun {
            return self.preview(&changes).map(|outcome| Committed { outcome, failure: None });
        }
        // Everything that can refuse the apply comes before the first write: a missing
        // terraform, a queued file that would break every apply, a lost state.
        // Each file to write is read once, and all before any write: one that cannot be
        // replaced (a link, not JSON) leaves all as it was.
        let existing = self.existing(&changes)?;
        if mode == CommitMode::Queue && !changes.removals.is_empty() {
            // The look-up runs with an apply: a file removed before it would leave behind the
            // machine that a cut apply made for it.
            self.refuse_while_unsettled(&format!("remove {} without an apply", changes.removals.join(", ")))?;
        }
        let mut adopted = Vec::new();
        let (providers, targets) = if mode == CommitMode::Apply {
            self.terraform()?;
            let queued = self.preflight(&changes)?;
            adopted = self.find_unrecorded(false, &changes.removals)?;
            (init::providers_of(changes.docs().chain(&queued)), self.targets(&changes, &existing, &queued)?)
        } else {
            (BTreeSet::new(), Vec::new())
        };
        let mut outcome = Outcome { files: self.write_read(changes, existing)?, adopted, ..Outcome::default() };
        if mode == CommitMode::Queue {
            return Ok(Committed { outcome, failure: None });
        }
        self.promote()?;
        // Import blocks left by a killed import are carried out by a whole apply only: a
        // targeted one would skip those of untargeted resources, and then lose them.
        let targets = if self.settle_imports()? { Vec::new() } else { targets };
        // The queued files written above are live now: report the names they have.
        for f in outcome.files.iter_mut().filter(|f| f.action != FileAction::Removed) {
            if let Some(base) = f.name.strip_suffix(names::QUEUED) {
                f.name = format!("{base}{}", names::LIVE);
            }
        }
        if !self.dir.may_have_state() && !self.dir.names().any(names::is_configuration) {
            // Nothing left to apply, and nothing applied before (a failed first provision
            // undone): terraform would refuse a directory without configuration.
            outcome.applied = true;
            return Ok(Committed { outcome, failure: None });
        }
        let started = Instant::now();
        let applied = self.init_if_needed(&providers).and_then(|()| {
            let what =
                if targets.is_empty() { Apply::Configuration { refresh: false } } else { Apply::Targets(&targets) };
            self.apply_adopting(what)
        });
        match applied.map(|changes| (changes, started.elapsed())) {
            Ok((changes, elapsed)) => {
                self.finish_imports()?; // every import block has been carried out
                let summary = TfSummary::new(changes, elapsed);
                self.ctx.printer.status(&format!(
                    "applied: {} added, {} changed, {} destroyed in {:.2}s",
                    summary.added, summary.changed, summary.destroyed, summary.elapsed_seconds
                ));
                outcome.applied = true;
                outcome.terraform = Some(summary);
                Ok(Committed { outcome, failure: None })
            }
            Err(e) => {
                outcome.error = Some(format!("{e:#}"));
                Ok(Committed { outcome, failure: Some(e) })
            }
        }
    }

    /// The checks an apply must pass before anything is written: every queued file it would
    /// promote (those `changes` does not replace) is a readable document, and the state is not
    /// lost (`state_guard`). Returns those queued documents (for `init`'s provider check).
    /// With a store, a state terraform could not save is pushed first when that is safe (see
    /// `heal`), unless the command changes nothing ([`Workspace::check_only`]).
    pub(crate) fn preflight(&mut self, changes: &ChangeSet) -> Result<Vec<Value>> {
        if self.role.writes_to_store() {
            // Before the change is in the store: a host whose state is not shared refuses
            // here, not after every host has the change.
            self.init_if_needed(&BTreeSet::new())?;
        }
        let mut queued = Vec::new();
        for name in self.dir.queued().filter(|n| !changes.touches(n)) {
            let readable = self.dir.read_doc(name).and_then(|doc| {
                if doc.is_object() {
                    Ok(doc)
                } else {
                    Err(anyhow::anyhow!("it is not a JSON object"))
                }
            });
            match readable {
                Ok(doc) => queued.push(doc),
                Err(e) => {
                    return Err(crate::exit::invalid(format!(
                        "queued file `{name}` cannot be applied ({e:#}): promoting it would make every apply fail"
                    ))
                    .hint("fix it, or remove it (it was never applied), then re-run")
                    .into())
                }
            }
        }
        if !self.check_only {
            self.heal_errored()?;
        }
        crate::state_guard::check(&self.dir, self.role.store_config().map(|s| s.shell_env()).as_deref())?;
        if let Role::Shared { store, config, .. } = &mut self.role {
            let facts = store.state_facts()?;
            let env = config.shell_env();
            let accept = store.forget_state_sql();
            let me = sync::me(&self.dir);
            match facts.errored {
                // Pushed and removed here (the local check above passed): every host goes on.
                Some(host) if host == me => store.record_state(&me, false)?,
                Some(host) => {
                    return Err(crate::state_guard::errored_elsewhere(&host, &env, &store.forget_errored_sql()))
                }
                None => {}
            }
            crate::state_guard::check_store(
                &self.dir,
                &facts.observed,
                facts.recorded.as_ref(),
                &config.state_schema(),
                &env,
                &accept,
            )?;
            // A state no run recorded yet (a store brought up from the release before the
            // stamp, before its first apply) is recorded now: from here on it is guarded.
            if facts.recorded.is_none() && matches!(facts.observed, crate::state_guard::Observed::State(_)) {
                store.record_state(&me, false)?;
            }
        }
        Ok(queued)
    }

    /// After a terraform run that may have changed the state: with a store, its stamp is
    /// recorded there (see `state_guard`), and so is the evidence of an apply that failed
    /// while it was creating (`workspace::adoption`). The run's own error comes first.
    fn recorded<T>(&mut self, ran: Result<T>) -> Result<T> {
        let errored = crate::state_guard::errored(self.dir.path()).is_some();
        let recorded = match self.role.store() {
            Some(store) => store.record_state(&sync::me(&self.dir), errored),
            None => Ok(()),
        };
        let noted = self.note_cut().and_then(|()| self.note_created());
        let value = ran?;
        recorded?;
        noted?;
        Ok(value)
    }

    /// The addresses a commit of `changes` applies (`-target`), so that its cost does not grow
    /// with the rest of the directory: every resource of a file it creates, changes (before and
    /// after) or removes, and of the queued files it promotes (`queued`). Empty (apply all)
    /// when it changes no file, or a file to remove cannot be read.
    fn targets(&self, changes: &ChangeSet, existing: &[Option<Value>], queued: &[Value]) -> Result<Vec<String>> {
        let mut addresses = BTreeSet::new();
        let mut add = |doc: &Value| {
            for (rtype, by_name) in doc.get("resource").and_then(Value::as_object).into_iter().flatten() {
                addresses
                    .extend(by_name.as_object().into_iter().flat_map(|m| m.keys()).map(|n| format!("{rtype}.{n}")));
            }
        };
        let mut changed = false;
        for (w, old) in changes.writes.iter().zip(existing) {
            if old.as_ref() != Some(&w.doc) {
                changed = true;
                add(&w.doc);
                old.iter().for_each(&mut add);
            }
        }
        for name in changes.removals.iter().filter(|n| self.dir.has(n)) {
            changed = true;
            match self.dir.read_doc(name) {
                Ok(doc) => add(&doc),
                Err(_) => return Ok(Vec::new()),
            }
        }
        if !changed {
            return Ok(Vec::new());
        }
        queued.iter().for_each(&mut add);
        Ok(addresses.into_iter().collect())
    }

    /// Writes and removes the files of `changes`, all or nothing (`journal`), and keeps the
    /// listing up to date. Returns what happened to each file.
    pub(crate) fn write(&mut self, changes: ChangeSet) -> Result<Vec<FileChange>> {
        let existing = self.existing(&changes)?;
        self.write_read(changes, existing)
    }

    /// The documents the files `changes` writes hold now (`None`: absent), each read once; an
    /// error where a write must not replace one (`Directory::replaceable`).
    fn existing(&self, changes: &ChangeSet) -> Result<Vec<Option<Value>>> {
        changes.writes.iter().map(|w| self.dir.replaceable(&w.name)).collect()
    }

    /// [`Workspace::write`], the files it replaces already read ([`Workspace::existing`]). A
    /// file that declares a resource held back (its machine may exist, unlisted yet: see
    /// [`Workspace::find_unrecorded`]) is never removed: its machine would be left behind.
    fn write_read(&mut self, changes: ChangeSet, existing: Vec<Option<Value>>) -> Result<Vec<FileChange>> {
        let holding: Vec<&String> = changes.removals.iter().filter(|n| self.holds(n)).collect();
        if !holding.is_empty() {
            let until = self.held_until.map(crate::text::utc_ms).unwrap_or_default();
            return Err(crate::exit::Failure::new(
                crate::exit::Code::StateLost,
                format!(
                    "refusing to remove {}: a machine of it that an apply may have made is not listed yet",
                    holding.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                ),
            )
            .hint(format!("run `infrakit-tf reconcile` from {until} (the settle time): it adopts what the cloud lists then; nothing was changed"))
            .into());
        }
        self.written_providers.extend(init::providers_of(changes.docs()));
        let (ops, files) = self.file_ops(changes, existing);
        self.change(&ops)?;
        for f in &files {
            self.ctx.printer.detail(&format!("{} {}", f.action.as_str(), f.name));
        }
        Ok(files)
    }

    /// Carries out `ops`, all or nothing: in the store first (one transaction: the commit
    /// point when there is a store), then in the directory (`journal`). A run killed between
    /// the two leaves the directory behind the store, and the next run brings it up to date.
    fn change(&mut self, ops: &[FileOp]) -> Result<()> {
        let committed = self.store_commit(ops)?;
        journal::commit(self.dir.path(), ops).map_err(|e| {
            if committed.is_some() {
                e.context("the change is in the store (every host's next run has it); this host's copy is behind, and terraform did not run here")
            } else {
                e
            }
        })?;
        for op in ops {
            self.dir.note(&op.name, op.after.is_some());
        }
        self.synced(committed);
        Ok(())
    }

    /// Commits `ops` to the store, if there is one (and marks the directory as its copy
    /// after the change that created the store directory): the store directory's row and
    /// its revision after it, `None` without a store.
    fn store_commit(&mut self, ops: &[FileOp]) -> Result<Option<(i64, String)>> {
        let Role::Shared { store, marked, .. } = &mut self.role else { return Ok(None) };
        let (id, revision) = store.commit(ops)?;
        if !*marked {
            sync::mark(&mut self.dir, store.name(), id)?;
            *marked = true;
        }
        Ok(Some((id, revision)))
    }

    /// After the local part of a change the store committed (`committed`): the files here are
    /// that revision's (`sync::synced`). Best effort: unrecorded, the next command reads
    /// every file from the store again.
    fn synced(&mut self, committed: Option<(i64, String)>) {
        if let (Some((id, revision)), Role::Shared { store, .. }) = (committed, &self.role) {
            let _ = sync::synced(&self.dir, store.name(), id, &revision);
        }
    }

    /// The file operations of `changes` (unchanged documents left out) and what each does. A
    /// change that removes instance files raises the ID record past them, in the same all or
    /// nothing change, so that their IDs (whose machines may still be in state) are never
    /// reused.
    fn file_ops(&self, changes: ChangeSet, existing: Vec<Option<Value>>) -> (Vec<FileOp>, Vec<FileChange>) {
        let dir = &self.dir;
        let mut ops = Vec::new();
        let mut files = Vec::new();
        for (FileWrite { name, doc, perms }, old) in changes.writes.into_iter().zip(existing) {
            let action = if old.as_ref() == Some(&doc) {
                FileAction::Unchanged
            } else {
                ops.push(FileOp { name: name.clone(), after: Some((crate::tfconfig::to_bytes(&doc), perms)) });
                if dir.has(&name) {
                    FileAction::Updated
                } else {
                    FileAction::Created
                }
            };
            files.push(FileChange { name, action });
        }
        let mut highest_removed = None;
        for name in changes.removals.into_iter().filter(|n| dir.has(n)) {
            if let Some(Kind::Instance(id)) = names::split_file_name(&name).and_then(|(b, _)| names::classify(b)) {
                highest_removed = highest_removed.max(Some(id.number()));
            }
            ops.push(FileOp { name: name.clone(), after: None });
            files.push(FileChange { name, action: FileAction::Removed });
        }
        if let Some(n) = highest_removed.filter(|n| !matches!(dir.last_issued(), Some(last) if last >= *n)) {
            ops.push(FileOp { name: LAST_ID.to_string(), after: Some((format!("{n}\n").into_bytes(), Perms::Public)) });
        }
        ops.extend(self.placeholder(&ops));
        (ops, files)
    }

    /// What `ops` call for of the empty configuration ([`names::EMPTY_FILE`]): written, in the
    /// same change, when they remove a file and leave no file terraform reads nor a managed one,
    /// and terraform may have state (the last instance of a directory without configuration of
    /// its own: terraform must still be able to destroy its machine); removed when a managed
    /// file is there again (a queued one is live before terraform next plans: `promote`). An
    /// empty state is still a state: the file stays, and a `reconcile` of the empty directory
    /// plans nothing rather than fail for want of configuration. Decided by the managed files alone once it
    /// is there, which every host of a store shares.
    fn placeholder(&self, ops: &[FileOp]) -> Option<FileOp> {
        let mut after: BTreeSet<&str> = self.dir.names().collect();
        for op in ops {
            match op.after {
                Some(_) => after.insert(&op.name),
                None => after.remove(op.name.as_str()),
            };
        }
        let has = after.contains(names::EMPTY_FILE);
        let removes = ops.iter().any(|op| op.after.is_none());
        let configured = after.iter().any(|n| *n != names::EMPTY_FILE && names::is_configuration(n));
        let managed =
            after.iter().any(|n| names::split_file_name(n).and_then(|(base, _)| names::classify(base)).is_some());
        if !has && removes && !configured && !managed && self.dir.may_have_state() {
            Some(FileOp { name: names::EMPTY_FILE.to_string(), after: Some((b"{}\n".to_vec(), Perms::Public)) })
        } else if has && managed {
            Some(FileOp { name: names::EMPTY_FILE.to_string(), after: None })
        } else {
            None
        }
    }

    /// Gives a directory that has no file terraform reads the empty configuration
    /// ([`names::EMPTY_FILE`]) before terraform plans or applies in it: one left so by a
    /// version before it, whose state still holds machines terraform would otherwise never
    /// plan to destroy, or a new one whose group has no member yet (terraform refuses to plan
    /// a directory without configuration).
    pub(crate) fn keep_configuration(&mut self) -> Result<()> {
        if self.dir.names().any(names::is_configuration) {
            return Ok(());
        }
        self.ctx
            .printer
            .status(&format!("the directory has no configuration: writing an empty `{}`", names::EMPTY_FILE));
        self.change(&[FileOp { name: names::EMPTY_FILE.to_string(), after: Some((b"{}\n".to_vec(), Perms::Public)) }])
    }

    /// Writes the health record (`health_record`) as the other records are written: all or
    /// nothing, in the store first when there is one, so that any host continues its counts.
    /// Nothing is written when its bytes are those the directory holds, or when it is empty
    /// and the directory has none.
    pub(crate) fn write_health_record(&mut self, record: &HealthRecord) -> Result<()> {
        let bytes = record.to_bytes();
        let unchanged = match self.dir.bytes(names::HEALTH_RECORD) {
            Ok(old) => old == bytes,
            Err(_) => record.members.is_empty(),
        };
        if unchanged {
            return Ok(());
        }
        self.change(&[FileOp { name: names::HEALTH_RECORD.to_string(), after: Some((bytes, Perms::Public)) }])
    }

    /// Renames every queued `.tf.json.new` to `.tf.json` (atomically replacing a live twin).
    /// Returns the names promoted.
    pub(crate) fn promote(&mut self) -> Result<Vec<String>> {
        let queued: Vec<String> = self.dir.queued().map(str::to_string).collect();
        let mut committed = None;
        if self.role.writes_to_store() {
            // In the store, one transaction; here, one rename each (a run killed in between
            // is brought up to the store's content by the next).
            let mut ops = Vec::new();
            for name in &queued {
                let file = sync::local_file(self.dir.path(), name)?
                    .with_context(|| format!("`{name}` vanished from `{}`", self.dir.shown().display()))?;
                ops.push(FileOp { name: live_name(name), after: Some((file.content, Perms::Exact(file.mode))) });
                ops.push(FileOp { name: name.clone(), after: None });
            }
            if !ops.is_empty() {
                committed = self.store_commit(&ops)?;
            }
        }
        let _changing = if queued.is_empty() { None } else { lock::generation::changing(self.dir.path())? };
        for name in &queued {
            let live = live_name(name);
            crate::fsio::rename(&self.dir.path().join(name), &self.dir.path().join(&live))?;
            self.dir.note(name, false);
            self.dir.note(&live, true);
            self.ctx.printer.detail(&format!("promoted {name}"));
        }
        self.synced(committed);
        Ok(queued)
    }

    /// Settles a leftover import-blocks file before terraform runs (see `imports::settle`).
    /// Whether import blocks remain for the next apply.
    pub(crate) fn settle_imports(&mut self) -> Result<bool> {
        if !self.dir.has(names::IMPORT_FILE) {
            return Ok(false);
        }
        let (kept, op) = imports::settled(self.dir.path())?;
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

    /// Runs `init` when the directory needs it for documents of `providers` (see `init`).
    pub(crate) fn init_if_needed(&self, providers: &BTreeSet<String>) -> Result<()> {
        let path = self.dir.path();
        if init::needed(path, providers)? {
            self.ctx.printer.status("running terraform init (first use, new provider or changed configuration)");
            self.terraform()?.init()?;
            init::record(path, providers)?;
        }
        self.check_shared_state()
    }

    /// Provider prefixes of every managed file's resource types (for reconcile's `init`),
    /// the instances' from their documents as already read.
    pub(crate) fn providers(&self, instances: &[Instance]) -> BTreeSet<String> {
        let others: Vec<Value> = self
            .dir
            .managed()
            .filter(|f| !matches!(f.kind, Kind::Instance(_)))
            .filter_map(|f| self.dir.read_doc(f.name).ok())
            .collect();
        init::providers_of(instances.iter().filter_map(|i| i.doc.as_ref().ok()).chain(&others))
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

    /// A refreshing plan of the directory as it is, saved for [`Workspace::apply`].
    pub(crate) fn plan(&self) -> Result<SavedPlan> {
        self.saved_plan(None, &[])
    }

    /// A plan of the directory as it is without refreshing (no cloud read but data sources),
    /// saved for [`Workspace::apply`]: what the configuration would change in the state.
    pub(crate) fn plan_unrefreshed(&self) -> Result<SavedPlan> {
        self.saved_plan(Some(false), &[])
    }

    /// A plan of `targets` (and their dependencies) without a refresh, saved for
    /// [`Workspace::apply`].
    pub(crate) fn plan_targets(&self, targets: &[String]) -> Result<SavedPlan> {
        self.saved_plan(Some(false), targets)
    }

    fn saved_plan(&self, refresh: Option<bool>, targets: &[String]) -> Result<SavedPlan> {
        let dir = crate::fsio::temp_dir("plan")?;
        let path = dir.path().join("plan");
        self.started_run();
        let plan = self.terraform()?.plan(PlanOptions { refresh, lock: true, out: Some(&path), targets })?;
        Ok(SavedPlan { plan, _dir: dir, path, targets: targets.to_vec(), refresh })
    }

    /// Applies the directory as it is, or a saved plan, after `init` if what was written
    /// needs it. Returns what terraform did.
    pub(crate) fn apply(&mut self, what: Apply<'_>) -> Result<Changes> {
        self.started_run();
        if !self.written_providers.is_empty() {
            self.init_if_needed(&self.written_providers)?;
        }
        self.apply_adopting(what)
    }

    /// Applies `what`. A try that failed after it began to create, with a transient error, is
    /// run again only after what it made has been looked up and adopted (the import blocks
    /// the next try carries out; dropped once it has); then it is recorded. What a look-up
    /// could not settle yet is held back (see [`Workspace::holding_back`]): the retry waits for
    /// the settle time when that is no longer than `--settle-wait`, and otherwise applies the
    /// rest, or, when nothing is left, fails as the try did.
    fn apply_adopting(&mut self, what: Apply<'_>) -> Result<Changes> {
        self.keep_configuration()?;
        let tf = self.terraform()?.clone();
        let held = self.holding_back(&what)?;
        let what = match &held {
            Some(targets) if targets.is_empty() => return Ok(Changes::default()),
            Some(targets) => Apply::Targets(targets),
            None => what,
        };
        let mut adopted: Vec<String> = Vec::new();
        // What the retry had to leave out (its look-up could not settle it): the command fails
        // all the same, once the rest is applied.
        let held_before = self.held_back.clone();
        let mut left_out: Vec<String> = Vec::new();
        let applied = tf.apply_adopting(what, &mut || {
            self.note_cut()?;
            // The failed try was creating: its marker may not have been written (a full disk
            // keeps terraform's running record instead); this retry looks up all the same.
            if self.unsettled.is_none() {
                let noted_ms = self.now_ms()?;
                let why = "terraform apply failed while creating".to_string();
                self.unsettled = Some(crate::lookup::Evidence { why, noted_ms });
            }
            adopted.extend(self.find_unrecorded(false, &[])?.into_iter().map(|a| a.address));
            if let Some(wait) = self.settle_wait()? {
                self.ctx.printer.status(&format!(
                    "waiting {} for the cloud's answer to settle (--settle-wait), then looking again",
                    crate::text::duration(wait)
                ));
                std::thread::sleep(wait);
                adopted.extend(self.find_unrecorded(false, &[])?.into_iter().map(|a| a.address));
            }
            left_out = self.held_back.difference(&held_before).cloned().collect();
            Ok(match self.holding_back(&what)? {
                None => crate::terraform::Next::Same,
                Some(targets) if targets.is_empty() => crate::terraform::Next::Nothing,
                Some(targets) => crate::terraform::Next::Only(targets),
            })
        });
        let applied = self.recorded(applied)?;
        if !adopted.is_empty() {
            self.imports_done(&adopted)?;
        }
        if !left_out.is_empty() {
            let until = self.held_until.map(crate::text::utc_ms).unwrap_or_default();
            return Err(crate::exit::Failure::new(
                crate::exit::Code::TerraformFailed,
                format!(
                    "terraform apply failed while creating {}, and the cloud does not list it yet: it may exist, so it was not made again (the rest was applied)",
                    left_out.join(", ")
                ),
            )
            .hint(format!("run `infrakit-tf reconcile` from {until} (the settle time): it adopts what the cloud lists then, and makes what it does not"))
            .into());
        }
        Ok(applied)
    }

    /// Records when the machines that applies created were made (`cloud_record`), from what
    /// they noted as they ended (`lock::running::CREATED`, this run's or a killed one's),
    /// stamped now (by the shared clock: no earlier than they were made): a read that calls
    /// one gone before its settle time has passed is not believed.
    pub(super) fn note_created(&mut self) -> Result<()> {
        let created = crate::lock::running::created(self.dir.path());
        if created.is_empty() {
            return Ok(());
        }
        let at = self.now_ms()?;
        let profiles = self.ctx.profiles()?;
        let mut record = self.cloud_record();
        record.note_created(&created, at, |t| profiles.settle(t));
        self.write_cloud_record(&record)?;
        crate::fsio::remove(&self.dir.path().join(crate::lock::running::CREATED)).map(drop)
    }

    /// The cloud record (`cloud_record`); one that cannot be read is a warning, and an empty
    /// record (every "not found" is then believed, as before there was one).
    pub(crate) fn cloud_record(&self) -> CloudRecord {
        self.dir.cloud_record().unwrap_or_else(|why| {
            self.ctx.printer.warn(&format!("{why}: it starts again"));
            CloudRecord::default()
        })
    }

    /// Writes the cloud record as the other records are written: all or nothing, in the store
    /// first when there is one. Nothing when its bytes are those the directory holds, or when
    /// it is empty and the directory has none.
    pub(crate) fn write_cloud_record(&mut self, record: &CloudRecord) -> Result<()> {
        let bytes = record.to_bytes();
        let unchanged = match self.dir.bytes(names::CLOUD_RECORD) {
            Ok(old) => old == bytes,
            Err(_) => *record == CloudRecord::default(),
        };
        if unchanged {
            return Ok(());
        }
        self.change(&[FileOp { name: names::CLOUD_RECORD.to_string(), after: Some((bytes, Perms::Public)) }])
    }

    /// How long to wait, before a retry, for what is held back to settle: `None` when nothing
    /// is, or when the wait would be longer than `--settle-wait`.
    fn settle_wait(&mut self) -> Result<Option<std::time::Duration>> {
        let Some(until) = self.held_until else { return Ok(None) };
        let now = self.now_ms()?;
        let wait = std::time::Duration::from_millis(until.saturating_sub(now));
        Ok((!wait.is_zero() && wait <= self.ctx.settle_wait).then_some(wait))
    }

    /// What an apply of `what` may touch while resources are held back (their machines may
    /// exist, unlisted yet: see [`Workspace::find_unrecorded`]): its targets, or every
    /// resource the live files declare or the state holds, without the held ones and what
    /// refers to them (`lookup::holding_back`). `None` when nothing is held back: `what` as it
    /// is. Empty: nothing is left to apply (said).
    fn holding_back(&self, what: &Apply<'_>) -> Result<Option<Vec<String>>> {
        if self.held_back.is_empty() || matches!(what, Apply::RefreshOnly(_)) {
            return Ok(None);
        }
        let files = self.readable_live_docs();
        let held = crate::lookup::holding_back(&files, &self.held_back);
        let wanted: BTreeSet<String> = match what {
            Apply::Targets(t) | Apply::Saved { targets: t, .. } if !t.is_empty() => t.iter().cloned().collect(),
            // Everything: what the files declare, and what the state holds that they do not
            // (to destroy).
            _ => crate::lookup::declared(&files).into_iter().chain(self.state()?.into_keys()).collect(),
        };
        let targets: Vec<String> = wanted.into_iter().filter(|a| !held.contains(a)).collect();
        let shown: Vec<&str> = held.iter().map(String::as_str).collect();
        self.ctx.printer.detail(&format!(
            "applying {} resource(s) only: {} wait(s) for the cloud to list what an earlier apply may have made ({})",
            targets.len(),
            held.len(),
            shown.join(", ")
        ));
        Ok(Some(targets))
    }

    /// Which of `imports` (address, cloud ID) the last failed terraform run's errors are about:
    /// the address a diagnostic names, or, where it names none (an import of an object that
    /// does not exist), the address or the ID its text quotes.
    pub(crate) fn failed_of(&self, imports: &[(String, String)]) -> Result<Vec<String>> {
        let mut out: Vec<String> = Vec::new();
        for d in self.terraform()?.last_errors() {
            let text = format!("{}\n{}", d.summary, d.detail);
            let names = |a: &String, id: &String| {
                d.address.as_ref() == Some(a)
                    || text.contains(&format!("\"{a}\""))
                    || text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_')).any(|w| w == id)
            };
            for (a, _) in imports.iter().filter(|(a, id)| names(a, id)) {
                if !out.contains(a) {
                    out.push(a.clone());
                }
            }
        }
        Ok(out)
    }

    /// Whether the file `name` declares a resource held back (see [`Workspace::holding_back`]).
    pub(crate) fn holds(&self, name: &str) -> bool {
        !self.held_back.is_empty()
            && self.dir.read_doc(name).is_ok_and(|doc| {
                crate::lookup::declared(&[(name.to_string(), doc)]).iter().any(|a| self.held_back.contains(a))
            })
    }

    /// The clock that times the evidence and the machines' creations: the store's when there
    /// is one (every host reads the same), else this host's. In milliseconds since the epoch.
    pub(crate) fn now_ms(&mut self) -> Result<u64> {
        match self.role.store() {
            Some(store) => store.now_ms(),
            None => Ok(crate::process::now_ms()),
        }
    }

    /// Plans the directory as it would be after `changes` and promotion, in a mirror: nothing
    /// in the real directory is written (a plan there takes no state lock, saves no refresh).
    pub(crate) fn plan_after(&self, changes: &ChangeSet, refresh: bool) -> Result<Plan> {
        let mirror = mirror::build(&self.dir, changes)?;
        let options = PlanOptions { refresh: Some(refresh), lock: false, out: None, targets: &[] };
        self.started_run();
        self.plan_in_mirror(mirror.path(), changes, &self.queued_docs(changes), options)
    }

    /// The queued files' documents that a promotion after `changes` would bring (those
    /// `changes` does not replace), for `init`'s provider check.
    fn queued_docs(&self, changes: &ChangeSet) -> Vec<Value> {
        self.dir.queued().filter(|n| !changes.touches(n)).filter_map(|n| self.dir.read_doc(n).ok()).collect()
    }

    /// What `changes` (files and an import-blocks file) would import: a plan in a mirror,
    /// saved, then `show -json` of it gives each imported object's live values, by address. A
    /// wrong cloud ID fails here, before anything is written.
    pub(crate) fn discover_imports(&self, changes: &ChangeSet) -> Result<BTreeMap<String, Value>> {
        // Before anything runs: a file that cannot be replaced (a link, not JSON) stops it.
        changes.writes.iter().try_for_each(|w| self.dir.check_replaceable(&w.name))?;
        let mirror = mirror::build(&self.dir, changes)?;
        let plan = mirror.path().join(".infrakit-tf-import.plan");
        let options = PlanOptions { refresh: Some(false), lock: false, out: Some(&plan), targets: &[] };
        self.plan_in_mirror(mirror.path(), changes, &self.queued_docs(changes), options)?;
        self.terraform()?.in_dir(mirror.path()).show_plan_imports(&plan)
    }

    /// Plans in `mirror`. When the real directory would need `init` first, `init` runs in the
    /// mirror: its lock file is its own copy, so yours is left alone (providers it installs go
    /// to the shared `.terraform`, which is a cache); the marker is not updated, so the next
    /// apply runs `init`.
    fn plan_in_mirror(
        &self,
        mirror: &Path,
        changes: &ChangeSet,
        queued: &[Value],
        options: PlanOptions<'_>,
    ) -> Result<Plan> {
        let tf = self.terraform()?.in_dir(mirror);
        if init::needed(self.dir.path(), &init::providers_of(changes.docs().chain(queued)))? {
            // `init` installs providers into the real `.terraform` (the mirror links it): that
            // is a write, so it happens under the directory lock, like every other.
            let _lock = if lock::held() { None } else { Some(self.ctx.lock_dir()?) };
            mirror::own_lock_file(mirror)?;
            self.ctx.printer.detail("running terraform init in the mirror");
            tf.init()?;
        }
        tf.plan(options)
    }

    /// What a dry run of `changes` would do: each file's action, and terraform's plan of the
    /// would-be directory. Nothing is written.
    fn preview(&self, changes: &ChangeSet) -> Result<Outcome> {
        // What a commit would say: the same documents compared, the same files refused.
        let existing = self.existing(changes)?;
        let mut files = Vec::new();
        for (w, old) in changes.writes.iter().zip(&existing) {
            let action = match old {
                Some(old) if *old == w.doc => FileAction::Unchanged,
                Some(_) => FileAction::Updated,
                None => FileAction::Created,
            };
            files.push(FileChange { name: w.name.clone(), action });
        }
        files.extend(
            changes
                .removals
                .iter()
                .filter(|n| self.dir.has(n))
                .map(|n| FileChange { name: n.clone(), action: FileAction::Removed }),
        );
        self.terraform()?;
        // The same scope the apply would have.
        let queued = self.queued_docs(changes);
        let targets =
            if self.dir.has(names::IMPORT_FILE) { Vec::new() } else { self.targets(changes, &existing, &queued)? };
        let started = Instant::now();
        let mirror = mirror::build(&self.dir, changes)?;
        let options = PlanOptions { refresh: Some(false), lock: false, out: None, targets: &targets };
        let plan = self.plan_in_mirror(mirror.path(), changes, &queued, options)?;
        Ok(Outcome {
            files,
            dry_run: true,
            terraform: Some(TfSummary::new(plan.totals, started.elapsed())),
            planned: plan.changes,
            ..Outcome::default()
        })
    }

    /// The files `names` name, as they are now (both twins of each), for
    /// [`Workspace::restore`].
    pub(crate) fn save_files(&self, names: &[String]) -> SavedFiles {
        let mut touched = BTreeSet::new();
        for name in names {
            let base = names::split_file_name(name).map_or(name.as_str(), |(base, _)| base);
            touched.insert(format!("{base}{}", names::LIVE));
            touched.insert(format!("{base}{}", names::QUEUED));
        }
        let files = touched
            .into_iter()
            .map(|name| {
                let path = self.dir.path().join(&name);
                let before = crate::fsio::read(&path).ok().zip(std::fs::metadata(&path).ok()).map(|(bytes, meta)| {
                    use std::os::unix::fs::PermissionsExt;
                    Saved { bytes, mode: meta.permissions().mode() & 0o7777 }
                });
                (name, before)
            })
            .collect();
        SavedFiles { files }
    }

    /// Undoes a failed import: forget the adopted objects (never destroy them), put the files
    /// back as they were (`before`, from [`Workspace::save_files`]), all or nothing, and apply
    /// to remove whatever the failed apply created. When an adopted object cannot be
    /// forgotten, or the files cannot be put back, nothing more is done: the files and the
    /// import blocks stay (removing them would make the next apply destroy what was adopted),
    /// so that `reconcile` finishes the import instead. Returns whether the import was undone.
    pub(crate) fn undo_import(&mut self, adopted: &[&str], before: &SavedFiles) -> bool {
        let stopped = "rollback stopped: the imported files are kept so that nothing adopted is destroyed; \
                       run `infrakit-tf reconcile` to finish the import";
        let ctx = self.ctx;
        let warn = |what: &str, e: &anyhow::Error| ctx.printer.warn(&format!("rollback: {what}: {e:#}"));
        // Every adopted address was checked to be absent from state before the import, so
        // each one in state now was put there by this import.
        let state = match self.state() {
            Ok(state) => state,
            Err(e) => {
                warn("cannot read the state", &e);
                return false;
            }
        };
        let tf = self.terraform().expect("found to read the state");
        let mut forgotten = true;
        for addr in adopted.iter().filter(|a| state.contains_key(**a)) {
            if let Err(e) = tf.state_rm(&[addr]) {
                warn(&format!("could not forget `{addr}`"), &e);
                forgotten = false;
            }
        }
        if let Err(e) = self.recorded(Ok(())) {
            warn("cannot record the state", &e);
            return false;
        }
        if !forgotten {
            ctx.printer.warn(stopped);
            return false;
        }
        if let Err(e) = self.restore(before) {
            warn("the files could not be put back", &e);
            ctx.printer.warn(stopped);
            return false;
        }
        let cleaned = self.terraform().and_then(|tf| tf.apply(Apply::Configuration { refresh: false }));
        if let Err(e) = self.recorded(cleaned) {
            warn("the cleaning apply failed", &e);
            return false;
        }
        // The failed apply began to create: what the files declare now is looked up at once
        // (nothing to find, as a rule), rather than leave every later command to wait for it.
        if let Err(e) = self.find_unrecorded(false, &[]) {
            warn("the look-up after the failed apply", &e);
        }
        true
    }

    /// Puts the files of `before` back as they were, all or nothing (`journal`).
    pub(crate) fn restore(&mut self, before: &SavedFiles) -> Result<()> {
        let ops: Vec<FileOp> = before
            .files
            .iter()
            .filter_map(|(name, was)| match was {
                Some(saved) => {
                    Some(FileOp { name: name.clone(), after: Some((saved.bytes.clone(), Perms::Exact(saved.mode))) })
                }
                None => self.dir.path().join(name).exists().then(|| FileOp { name: name.clone(), after: None }),
            })
            .collect();
        self.change(&ops)
    }
}

/// `instance-1.tf.json` of `instance-1.tf.json.new`.
fn live_name(queued: &str) -> String {
    format!("{}{}", queued.strip_suffix(names::QUEUED).expect("queued"), names::LIVE)
}
