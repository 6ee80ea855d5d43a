//! After an apply that was cut short: the machines it made that terraform never recorded are
//! looked up through terraform and adopted (the decisions are `crate::lookup`'s; this is
//! running them). Only when one was cut short: the look-up costs nothing otherwise.
//!
//! The evidence that one was (`lock::running::EVIDENCE`: a terraform apply that did not end; with a
//! store, a lease taken over from a host that did not release it) is kept until the look-up
//! has been done: in the store, for whichever host runs next, or in a local marker.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde_json::Value;

use super::{ChangeSet, FileWrite, Workspace};
use crate::cloud_record::CloudRecord;
use crate::exit::{Code, Failure};
use crate::fsio::{self, Perms};
use crate::lock::running::EVIDENCE;
use crate::lookup::{self, Adopted, Verdict};
use crate::names;
use crate::terraform::PlanOptions;
use crate::text::utc_ms;

/// The data sources of a look-up, written in a mirror only.
const LOOKUP_FILE: &str = "infrakit-tf-lookup.tf.json";

impl Workspace<'_> {
    /// Learns whether an apply was cut short before (the lock's marker, `lock::running::EVIDENCE`;
    /// with a store, the store's record, into which a local marker is moved for every host,
    /// noted by the store's clock):
    /// [`Workspace::find_unrecorded`] looks up what it made.
    /// Also after every run that may have changed the state: an apply that failed while it was
    /// creating left the marker (`lock::running::note_evidence`), which goes to the store at once.
    pub(super) fn note_cut(&mut self) -> Result<()> {
        let marker = self.dir.path().join(EVIDENCE);
        let local = crate::lock::running::evidence(self.dir.path());
        if let Some(evidence) = local.as_ref().filter(|_| !self.dir.has(EVIDENCE)) {
            self.dir.note(EVIDENCE, true);
            if self.evidence.is_none() {
                self.ctx.printer.warn(&format!(
                    "{}: the machines it was creating may exist in no state; they are looked up by their tags before anything applies again",
                    evidence.why
                ));
            }
        }
        match self.role.store() {
            Some(store) => {
                if let Some(evidence) = &local {
                    store.set_evidence(Some(&evidence.why))?;
                    fsio::remove(&marker)?;
                    self.dir.note(EVIDENCE, false);
                }
                self.evidence = store.evidence();
            }
            None => self.evidence = local,
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
    ///
    /// A look-up that began less than a type's settle time after the evidence was noted
    /// concludes nothing of what it did not find (`lookup::unsettled`): the evidence stays,
    /// and those resources are held back from every apply of this run
    /// ([`Workspace::holding_back`]), so that a machine the cloud does not list yet is not
    /// made a second time. The next run looks again.
    pub(crate) fn find_unrecorded(&mut self, check: bool, removing: &[String]) -> Result<Vec<Adopted>> {
        let Some(evidence) = self.evidence.clone() else { return Ok(Vec::new()) };
        self.ctx
            .printer
            .status(&format!("an apply was cut short ({}): looking up the machines it may have made", evidence.why));
        let started = self.now_ms()?;
        let state = self.state()?;
        let recorded: BTreeSet<(String, String)> =
            state.values().filter_map(|r| Some((r.rtype.clone(), r.attribute("id")?))).collect();
        let state = state.into_keys().collect();
        let files = self.readable_live_docs();
        let profiles = self.ctx.profiles()?;
        let candidates = lookup::candidates(&files, &state, &profiles);
        let mut adopted = Vec::new();
        let mut young: Vec<(String, String, u64)> = Vec::new();
        if !candidates.is_empty() {
            let reads = self.look_up(&candidates, &profiles, &evidence.why)?;
            let mut verdicts = lookup::found(&candidates, &reads, &recorded);
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
            let (live, unreadable) = self.import_readable(&ones, existing.as_ref())?;
            for (c, v) in candidates.iter().zip(verdicts.iter_mut()) {
                if unreadable.contains(&c.address) {
                    *v = Verdict::Absent;
                }
            }
            adopted = lookup::judge(&candidates, &verdicts, &live).map_err(|r| refusal(&r.lines))?;
            young = lookup::unsettled(&candidates, &verdicts, evidence.noted_ms, started, |t| profiles.settle(t))
                .into_iter()
                .map(|(c, until)| (c.address.clone(), c.file.clone(), until))
                .collect();
            for c in candidates.iter().filter(|c| unreadable.contains(&c.address)) {
                if !young.iter().any(|(a, _, _)| *a == c.address) {
                    let settle =
                        u64::try_from(profiles.settle(c.address.split_once('.').map_or("", |(t, _)| t)).as_millis());
                    young.push((c.address.clone(), c.file.clone(), started.saturating_add(settle.unwrap_or(u64::MAX))));
                }
            }
            refuse_into_removed(&candidates, &adopted, &young, removing)?;
            self.hold_back(&young);
            if check {
                return Ok(adopted);
            }
            self.write_adopted(existing.as_ref(), &adopted)?;
        }
        if young.is_empty() && !check {
            self.look_up_cut()?;
        }
        Ok(adopted)
    }

    /// The live values of `ones` (single matches), from their imports planned in a mirror (over
    /// the `existing` import blocks); and the addresses of those a read cannot find yet. A
    /// match the listing shows but a read cannot find (eventual consistency) is not adopted
    /// now, nor made again: held back, as the listing and the read disagree.
    fn import_readable(
        &mut self,
        ones: &[Adopted],
        existing: Option<&Value>,
    ) -> Result<(BTreeMap<String, Value>, Vec<String>)> {
        let mut unreadable: Vec<String> = Vec::new();
        loop {
            let readable: Vec<Adopted> = ones.iter().filter(|a| !unreadable.contains(&a.address)).cloned().collect();
            if readable.is_empty() {
                return Ok((BTreeMap::new(), unreadable));
            }
            let blocks = lookup::import_blocks(existing, &readable);
            match self
                .discover_imports(&ChangeSet::writing(vec![FileWrite::managed(names::IMPORT_FILE.into(), blocks)]))
            {
                Ok(live) => return Ok((live, unreadable)),
                Err(e) if crate::exit::code_for(&e) == Code::TerraformFailed => {
                    let imports: Vec<(String, String)> =
                        readable.iter().map(|r| (r.address.clone(), r.id.clone())).collect();
                    let failed = self.failed_of(&imports)?;
                    if failed.is_empty() {
                        return Err(e);
                    }
                    unreadable.extend(failed);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes the import blocks that adopt `adopted` (beside the `existing` ones), for this
    /// run's apply, and says so.
    fn write_adopted(&mut self, existing: Option<&Value>, adopted: &[Adopted]) -> Result<()> {
        if adopted.is_empty() {
            return Ok(());
        }
        let blocks = lookup::import_blocks(existing, adopted);
        self.write(ChangeSet::writing(vec![FileWrite::managed(names::IMPORT_FILE.into(), blocks)]))?;
        for a in adopted {
            self.ctx.printer.status(&format!(
                "adopted {} = {}: made by the apply that was cut short, found by its tags (imported by this run's apply)",
                a.address, a.id
            ));
        }
        Ok(())
    }

    /// Reads the look-ups of `candidates` in a mirror: the data sources' values, by address.
    /// A data source that fails saying it matched nothing (`profile::EMPTY_ERRORS`, the type's
    /// `empty_errors`) matched nothing, and the others are read again without it; any other
    /// failure is the look-up's (exit 19), naming it.
    fn look_up(
        &self,
        candidates: &[lookup::Candidate],
        profiles: &crate::profile::Profiles,
        why: &str,
    ) -> Result<BTreeMap<String, Value>> {
        let mut empty: BTreeSet<usize> = BTreeSet::new();
        loop {
            if empty.len() == candidates.len() {
                return Ok(BTreeMap::new());
            }
            let (doc, targets) = lookup::lookup_document(candidates, &empty);
            let changes = ChangeSet::writing(vec![FileWrite { name: LOOKUP_FILE.into(), doc, perms: Perms::Private }]);
            let mirror = super::mirror::build(&self.dir, &changes)?;
            let plan = mirror.path().join(".infrakit-tf-lookup.plan");
            let options = PlanOptions { refresh: Some(false), lock: false, out: Some(&plan), targets: &targets };
            match self.plan_in_mirror(mirror.path(), &changes, &[], options) {
                Ok(_) => return self.terraform()?.in_dir(mirror.path()).show_plan_reads(&plan),
                Err(e) if crate::exit::code_for(&e) == Code::TerraformFailed => {
                    let tf = self.terraform()?;
                    let errors = tf.last_errors();
                    let mut found_empty = Vec::new();
                    for d in &errors {
                        let which =
                            d.address.as_deref().and_then(lookup::looked_up_by).filter(|i| *i < candidates.len());
                        let rtype = which.and_then(|i| candidates[i].address.split_once('.')).map(|(t, _)| t);
                        let text = format!("{}\n{}", d.summary, d.detail);
                        // A throttled call is never "nothing there", whatever it says besides.
                        let transient = tf.is_transient(&text);
                        match (which, rtype) {
                            (Some(i), Some(rtype))
                                if !transient && lookup::says_empty(&text, &profiles.empty_errors(rtype)) =>
                            {
                                found_empty.push(i);
                            }
                            _ => return Err(lookup_failed(candidates, which, why, transient, e)),
                        }
                    }
                    if found_empty.is_empty() {
                        return Err(lookup_failed(candidates, None, why, false, e));
                    }
                    empty.extend(found_empty);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Holds `young` (address, file, when it settles) back from this run's applies: their
    /// machines may exist, unlisted yet. Says so, and when the next look may conclude.
    fn hold_back(&mut self, young: &[(String, String, u64)]) {
        self.held_back = young.iter().map(|(address, _, _)| address.clone()).collect();
        self.held_until = young.iter().map(|(_, _, until)| *until).max();
        if let Some(until) = self.held_until {
            let shown: Vec<&str> = young.iter().map(|(a, _, _)| a.as_str()).collect();
            self.ctx.printer.warn(&format!(
                "{} machine(s) that apply may have made are not listed yet ({}): they are not made again; the cloud's answer is believed from {} (the settle time), and the next run looks again",
                shown.len(),
                shown.join(", "),
                utc_ms(until)
            ));
        }
    }

    /// Why the machines of an apply that was cut short (or failed while creating) are still to
    /// be looked up, if they are: then a live file whose resources are not in the state may
    /// have its machine in the cloud.
    pub(crate) fn awaiting_lookup(&self) -> Option<&str> {
        self.evidence.as_ref().map(|e| e.why.as_str())
    }

    /// When the evidence of an apply that failed or was cut short was noted, while it stands.
    pub(crate) fn evidence_noted(&self) -> Option<u64> {
        self.evidence.as_ref().map(|e| e.noted_ms)
    }

    /// The resources held back from this run's applies (see [`Workspace::find_unrecorded`]),
    /// and when the cloud's answer about them is believed (ms).
    pub(crate) fn held_back(&self) -> (&BTreeSet<String>, Option<u64>) {
        (&self.held_back, self.held_until)
    }

    /// Refuses `what` while an apply that was cut short has not been looked up (exit 13): it
    /// would write import blocks of its own over the adoption's, or make again what the cut
    /// apply made. `reconcile` looks up and adopts first.
    pub(crate) fn refuse_until_looked_up(&self, what: &str) -> Result<()> {
        let Some(evidence) = &self.evidence else { return Ok(()) };
        Err(reconcile_first(format!(
            "refusing to {what}: an apply was cut short ({}) and what it made has not been looked up yet",
            evidence.why
        )))
    }

    /// The machines of the cut apply have been looked up (and are adopted by the import
    /// blocks, if any): forgets that it was cut, but for when (the cloud record's `cut`): what
    /// it made may be in the state with no creation on record.
    fn look_up_cut(&mut self) -> Result<()> {
        let at_once = self.ctx.profiles()?.settles_at_once();
        if let Some(noted) = self.evidence.as_ref().map(|e| e.noted_ms).filter(|_| !at_once) {
            let mut record = self.record::<CloudRecord>();
            if record.cut.is_none_or(|cut| cut < noted) {
                record.cut = Some(noted);
                self.save(&record)?;
            }
        }
        match self.role.store() {
            Some(store) => store.set_evidence(None)?,
            None => {
                if self.dir.has(EVIDENCE) {
                    fsio::remove(&self.dir.path().join(EVIDENCE))?;
                    self.dir.note(EVIDENCE, false);
                }
            }
        }
        self.evidence = None;
        self.held_back.clear();
        self.held_until = None;
        Ok(())
    }
}

/// The look-up that failed (exit 19): which one (candidate `which`, when terraform said), why
/// it ran (`why`, the evidence), and what to do (`transient`: the cloud refused it for now).
fn lookup_failed(
    candidates: &[lookup::Candidate],
    which: Option<usize>,
    why: &str,
    transient: bool,
    e: anyhow::Error,
) -> anyhow::Error {
    let what = match which {
        Some(i) => format!(
            "`{}` (the look-up `{}` of {}, lookups.{})",
            lookup::lookup_address(candidates, i),
            candidates[i].data_source,
            candidates[i].address,
            rtype(&candidates[i].address)
        ),
        None => {
            let by: BTreeSet<String> =
                candidates.iter().map(|c| format!("`{}` (lookups.{})", c.data_source, rtype(&c.address))).collect();
            format!("of the machines it may have made, by {},", by.into_iter().collect::<Vec<_>>().join(", "))
        }
    };
    let hint = if transient {
        "the cloud refused the look-up for now (throttled, or briefly away): which machines that apply made is not known, so nothing was applied; the next run looks again"
    } else {
        "which machines that apply made is not known, so nothing was applied; fix the look-up (`lookups` in infrakit-tf.json: its `data_source`, `arguments`, `ids`), or, if its data source fails when nothing matches, add what it says to its `empty_errors`; then re-run"
    };
    Failure::new(Code::LookupFailed, format!("an apply was cut short ({why}), and the look-up {what} failed: {e:#}"))
        .hint(hint)
        .into()
}

/// A refusal (exit 13) until `reconcile` has looked up and adopted what a cut apply made.
fn reconcile_first(message: String) -> anyhow::Error {
    Failure::new(Code::StateLost, message)
        .hint("run `infrakit-tf reconcile` first (it adopts what that apply made), then this command again; nothing was changed")
        .into()
}

/// The resource type of `address` (`type.name`).
fn rtype(address: &str) -> &str {
    address.split_once('.').map_or(address, |(t, _)| t)
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

/// Refuses a change that removes a file holding what a cut apply made without recording:
/// `adopted` (found), or `young` (not listed yet, within its settle time).
fn refuse_into_removed(
    candidates: &[lookup::Candidate],
    adopted: &[Adopted],
    young: &[(String, String, u64)],
    removing: &[String],
) -> Result<()> {
    let in_removed = |file: &str| removing.iter().any(|r| names::split_file_name(r).is_some_and(|(b, _)| b == file));
    let mut into_removed: Vec<String> = adopted
        .iter()
        .filter(|a| candidates.iter().any(|c| c.address == a.address && in_removed(&c.file)))
        .map(|a| format!("{} ({})", a.address, a.id))
        .collect();
    into_removed.extend(
        young
            .iter()
            .filter(|(_, file, _)| in_removed(file))
            .map(|(address, _, until)| format!("{address} (not listed yet; settled at {})", utc_ms(*until))),
    );
    if into_removed.is_empty() {
        return Ok(());
    }
    Err(reconcile_first(format!(
        "refusing to remove what an apply cut short made without recording: {}",
        into_removed.join(", ")
    )))
}
