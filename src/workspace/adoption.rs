//! After an apply that was cut short: the machines it made that terraform never recorded are
//! looked up through terraform and adopted (the decisions are `crate::lookup`'s; this is
//! running them). Only when one was cut short: the look-up costs nothing otherwise.
//!
//! The evidence that one was (`lock::running::UNSETTLED`: a terraform apply that did not end; with a
//! store, a lease taken over from a host that did not release it) is kept until the look-up
//! has been done: in the store, for whichever host runs next, or in a local marker.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde_json::Value;

use super::{ChangeSet, FileWrite, Workspace};
use crate::exit::{Code, Failure};
use crate::fsio::{self, Perms};
use crate::lock::running::UNSETTLED;
use crate::lookup::{self, Adopted, Verdict};
use crate::names;
use crate::terraform::PlanOptions;

/// The data sources of a look-up, written in a mirror only.
const LOOKUP_FILE: &str = "infrakit-tf-lookup.tf.json";

impl Workspace<'_> {
    /// Learns whether an apply was cut short before (the lock's marker, `lock::running::UNSETTLED`;
    /// with a store, the store's record, into which a local marker is moved for every host):
    /// [`Workspace::find_unrecorded`] looks up what it made.
    /// Also after every run that may have changed the state: an apply that failed while it was
    /// creating left the marker (`lock::running::note_unsettled`), which goes to the store at once.
    pub(super) fn note_cut(&mut self) -> Result<()> {
        let marker = self.dir.path().join(UNSETTLED);
        let local = crate::lock::running::unsettled(self.dir.path());
        if local.is_some() && !self.dir.has(UNSETTLED) {
            self.dir.note(UNSETTLED, true);
            if self.unsettled.is_none() {
                self.ctx.printer.warn(&format!(
                    "{}: the machines it was creating may exist in no state; they are looked up by their tags before anything applies again",
                    local.as_deref().unwrap_or_default()
                ));
            }
        }
        match self.role.store() {
            Some(store) => {
                if let Some(why) = &local {
                    store.set_unsettled(Some(why))?;
                    fsio::remove(&marker)?;
                    self.dir.note(UNSETTLED, false);
                }
                self.unsettled = store.unsettled().map(str::to_string);
            }
            None => self.unsettled = local,
        }
        Ok(())
    }

    /// After an apply that was cut short: looks up, through terraform, every resource of the
    /// live files that a look-up can find (`profile::Lookup`) and that the state does not hold,
    /// by its tags, and adopts what it finds (import blocks into the addresses the files
    /// define, applied by the next apply), saying so. With `check` (`reconcile --check`),
    /// nothing is written: what would be adopted is returned. Several matches for one
    /// resource, or a match of another group, is refused (exit 13), as is adopting into a file
    /// that `removing` names (a destroy would leave the machine behind). Nothing to do, and no
    /// terraform run, when no apply was cut short.
    pub(crate) fn find_unrecorded(&mut self, check: bool, removing: &[String]) -> Result<Vec<Adopted>> {
        let Some(why) = self.unsettled.clone() else { return Ok(Vec::new()) };
        self.ctx.printer.status(&format!("an apply was cut short ({why}): looking up the machines it may have made"));
        let state = self.state()?;
        let recorded: BTreeSet<(String, String)> =
            state.values().filter_map(|r| Some((r.rtype.clone(), r.attribute("id")?))).collect();
        let state = state.into_keys().collect();
        let files: Vec<(String, Value)> = self
            .dir
            .managed()
            .filter(|f| f.suffix == names::Suffix::Live)
            .filter_map(|f| Some((f.name.to_string(), self.dir.read_doc(f.name).ok()?)))
            .collect();
        let candidates = lookup::candidates(&files, &state, &self.ctx.profiles()?);
        let mut adopted = Vec::new();
        if !candidates.is_empty() {
            let (doc, targets) = lookup::lookup_document(&candidates);
            let changes = ChangeSet::writing(vec![FileWrite { name: LOOKUP_FILE.into(), doc, perms: Perms::Private }]);
            let mirror = super::mirror::build(&self.dir, &changes)?;
            let plan = mirror.path().join(".infrakit-tf-lookup.plan");
            let options = PlanOptions { refresh: Some(false), lock: false, out: Some(&plan), targets: &targets };
            self.plan_in_mirror(mirror.path(), &changes, &[], options)?;
            let reads = self.terraform()?.in_dir(mirror.path()).show_plan_reads(&plan)?;
            let verdicts = lookup::found(&candidates, &reads, &recorded);
            // The single matches, imported in a mirror: their live tags (a group's), and a
            // check that each can be imported, before anything is written.
            let ones: Vec<Adopted> = candidates
                .iter()
                .zip(&verdicts)
                .filter_map(|(c, v)| match v {
                    Verdict::One(id) => Some(Adopted { address: c.address.clone(), id: id.clone() }),
                    _ => None,
                })
                .collect();
            let existing = self.dir.read_doc(names::IMPORT_FILE).ok();
            let live = if ones.is_empty() {
                BTreeMap::new()
            } else {
                let blocks = lookup::import_blocks(existing.as_ref(), &ones);
                self.discover_imports(&ChangeSet::writing(vec![FileWrite::managed(names::IMPORT_FILE.into(), blocks)]))?
            };
            adopted = lookup::judge(&candidates, &verdicts, &live).map_err(|r| refusal(&r.lines))?;
            let into_removed: Vec<String> = adopted
                .iter()
                .filter(|a| {
                    candidates.iter().any(|c| {
                        c.address == a.address
                            && removing.iter().any(|r| names::split_file_name(r).is_some_and(|(b, _)| b == c.file))
                    })
                })
                .map(|a| format!("{} ({})", a.address, a.id))
                .collect();
            if !into_removed.is_empty() {
                return Err(reconcile_first(format!(
                    "refusing to remove what an apply cut short made without recording: {}",
                    into_removed.join(", ")
                )));
            }
            if check {
                return Ok(adopted);
            }
            if !adopted.is_empty() {
                let blocks = lookup::import_blocks(existing.as_ref(), &adopted);
                self.write(ChangeSet::writing(vec![FileWrite::managed(names::IMPORT_FILE.into(), blocks)]))?;
                for a in &adopted {
                    self.ctx.printer.status(&format!(
                        "adopted {} = {}: made by the apply that was cut short, found by its tags (imported by this run's apply)",
                        a.address, a.id
                    ));
                }
            }
        }
        if !check {
            self.settle_cut()?;
        }
        Ok(adopted)
    }

    /// Why the machines of an apply that was cut short (or failed while creating) are still to
    /// be looked up, if they are: then a live file whose resources are not in the state may
    /// have its machine in the cloud.
    pub(crate) fn awaiting_lookup(&self) -> Option<&str> {
        self.unsettled.as_deref()
    }

    /// Refuses `what` while an apply that was cut short has not been looked up (exit 13): it
    /// would write import blocks of its own over the adoption's, or make again what the cut
    /// apply made. `reconcile` looks up and adopts first.
    pub(crate) fn refuse_while_unsettled(&self, what: &str) -> Result<()> {
        let Some(why) = &self.unsettled else { return Ok(()) };
        Err(reconcile_first(format!(
            "refusing to {what}: an apply was cut short ({why}) and what it made has not been looked up yet"
        )))
    }

    /// The machines of the cut apply have been looked up (and are adopted by the import
    /// blocks, if any): forgets that it was cut.
    fn settle_cut(&mut self) -> Result<()> {
        match self.role.store() {
            Some(store) => store.set_unsettled(None)?,
            None => {
                if self.dir.has(UNSETTLED) {
                    fsio::remove(&self.dir.path().join(UNSETTLED))?;
                    self.dir.note(UNSETTLED, false);
                }
            }
        }
        self.unsettled = None;
        Ok(())
    }
}

/// A refusal (exit 13) until `reconcile` has looked up and adopted what a cut apply made.
fn reconcile_first(message: String) -> anyhow::Error {
    Failure::new(Code::StateLost, message)
        .hint("run `infrakit-tf reconcile` first (it adopts what that apply made), then this command again; nothing was changed")
        .into()
}

/// The refusal of a look-up that found what must not be guessed at (exit 13).
fn refusal(lines: &[String]) -> anyhow::Error {
    Failure::new(
        Code::StateLost,
        format!(
            "refusing to apply: an apply was cut short, and which machine is this directory's is not clear: {}",
            lines.join("; ")
        ),
    )
    .hint("look at those machines (their tags, when they were made); delete the ones that are not this directory's, or take this directory's tags off them, then re-run (the one left is adopted); nothing was applied")
    .into()
}
