//! The commit pipeline: a change written all or nothing (to the store first, when there is
//! one), the queue promoted, terraform applied to what changed (see the module above).

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::Value;

use super::{
    init, live_name, sync, ChangeSet, CommitMode, Committed, FileAction, FileChange, FileWrite, Outcome, Role,
    TfSummary, Workspace,
};
use crate::fsio::Perms;
use crate::journal::{self, FileOp};
use crate::lock;
use crate::names::{self, Kind, LAST_ID};
use crate::terraform::Apply;

impl Workspace<'_> {
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
            self.refuse_until_looked_up(&format!("remove {} without an apply", changes.removals.join(", ")))?;
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
        let targets = if self.carry_out_imports()? { Vec::new() } else { targets };
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
        self.created.clear(); // what a killed run made is not this apply's
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
                outcome.created = std::mem::take(&mut self.created);
                Ok(Committed { outcome, failure: Some(e) })
            }
        }
    }

    /// The checks an apply must pass before anything is written: every queued file it would
    /// promote (those `changes` does not replace) is a readable document, and the state is not
    /// lost (`state_guard`). Returns those queued documents (for `init`'s provider check).
    /// With a store, a state terraform could not save is pushed first when that is safe (see
    /// `errored_state`), unless the command changes nothing ([`Workspace::check_only`]).
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
            self.push_errored_state()?;
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
    /// while it was creating (`workspace::lookup`). The run's own error comes first.
    pub(super) fn recorded<T>(&mut self, ran: Result<T>) -> Result<T> {
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
    pub(super) fn targets(
        &self,
        changes: &ChangeSet,
        existing: &[Option<Value>],
        queued: &[Value],
    ) -> Result<Vec<String>> {
        let mut addresses = BTreeSet::new();
        let mut add = |doc: &Value| addresses.extend(crate::tfconfig::addresses(doc));
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
    pub(super) fn existing(&self, changes: &ChangeSet) -> Result<Vec<Option<Value>>> {
        changes.writes.iter().map(|w| self.dir.replaceable(&w.name)).collect()
    }

    /// [`Workspace::write`], the files it replaces already read ([`Workspace::existing`]). A
    /// file that declares a resource held back (its machine may exist, unlisted yet: see
    /// [`Workspace::find_unrecorded`]) is never removed: its machine would be left behind.
    pub(super) fn write_read(&mut self, changes: ChangeSet, existing: Vec<Option<Value>>) -> Result<Vec<FileChange>> {
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
    pub(super) fn change(&mut self, ops: &[FileOp]) -> Result<()> {
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
    pub(super) fn store_commit(&mut self, ops: &[FileOp]) -> Result<Option<(i64, String)>> {
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
    pub(super) fn synced(&mut self, committed: Option<(i64, String)>) {
        if let (Some((id, revision)), Role::Shared { store, .. }) = (committed, &self.role) {
            let _ = sync::synced(&self.dir, store.name(), id, &revision);
        }
    }

    /// The file operations of `changes` (unchanged documents left out) and what each does. A
    /// change that removes instance files raises the ID record past them, in the same all or
    /// nothing change, so that their IDs (whose machines may still be in state) are never
    /// reused.
    pub(super) fn file_ops(&self, changes: ChangeSet, existing: Vec<Option<Value>>) -> (Vec<FileOp>, Vec<FileChange>) {
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
    pub(super) fn placeholder(&self, ops: &[FileOp]) -> Option<FileOp> {
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
}
