//! The terraform runs a workspace makes for its commands: init, plans and applies (holding back
//! what the cloud may not list yet, see `adoption`), and what a failed one was about.

use std::collections::BTreeSet;

use anyhow::Result;
use serde_json::Value;

use super::{init, SavedPlan, Workspace};
use crate::directory::Instance;
use crate::names::Kind;
use crate::terraform::{Apply, PlanOptions};
use crate::tfoutput::Changes;

impl Workspace<'_> {
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
    /// [`Workspace::apply`]; after `init` if what was written needs it (a new provider).
    pub(crate) fn plan_targets(&self, targets: &[String]) -> Result<SavedPlan> {
        if !self.written_providers.is_empty() {
            self.init_if_needed(&self.written_providers)?;
        }
        self.saved_plan(Some(false), targets)
    }

    pub(super) fn saved_plan(&self, refresh: Option<bool>, targets: &[String]) -> Result<SavedPlan> {
        let dir = crate::fsio::temp_dir("plan")?;
        let path = dir.path().join("plan");
        let tf = self.terraform()?;
        self.started_run();
        let plan = tf.plan(PlanOptions { refresh, lock: true, out: Some(&path), targets })?;
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
    pub(super) fn apply_adopting(&mut self, what: Apply<'_>) -> Result<Changes> {
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
            if self.evidence.is_none() {
                let noted_ms = self.now_ms()?;
                let why = "terraform apply failed while creating".to_string();
                self.evidence = Some(crate::lookup::Evidence { why, noted_ms });
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

    /// How long to wait, before a retry, for what is held back to settle: `None` when nothing
    /// is, or when the wait would be longer than `--settle-wait`.
    pub(super) fn settle_wait(&mut self) -> Result<Option<std::time::Duration>> {
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
    pub(super) fn holding_back(&self, what: &Apply<'_>) -> Result<Option<Vec<String>>> {
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
}
