//! Plans of the directory as a change would leave it, in a mirror: dry runs, and the imports
//! a change would find.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use serde_json::Value;

use super::{init, mirror, ChangeSet, FileAction, FileChange, Outcome, TfSummary, Workspace};
use crate::terraform::{Plan, PlanOptions};
use crate::{lock, names};

impl Workspace<'_> {
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
    pub(super) fn queued_docs(&self, changes: &ChangeSet) -> Vec<Value> {
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
    pub(super) fn plan_in_mirror(
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
    pub(super) fn preview(&self, changes: &ChangeSet) -> Result<Outcome> {
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
}
