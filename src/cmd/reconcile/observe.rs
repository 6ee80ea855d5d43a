//! Reading the cloud, and what it found. [`Run::observe`] promotes the queue and looks: with
//! a look-up that lists the directory's machines, a look (`workspace::look`: the listings, the
//! rotating slice, the confirmation of what no listing showed, the whole configuration planned
//! without refreshing unless nothing changed since such a plan found nothing to do); else (or
//! `--full-refresh`) one refreshing plan of everything. What it found gone is weighed
//! (`absence`), the strays it showed adopted or reported, and the machines a cut apply made
//! imported first ([`adopt_first`]). Before an apply that does not refresh, what the look found
//! is brought into the state ([`Run::bring_state_to_look`]). The health checks of the groups that heal
//! ([`Run::heal`]) are read here too: their verdicts join the decisions.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde::Serialize;

use super::absence::{self, Reading, Unconfirmed};
use super::decide::{self, Decisions};
use super::Run;
use crate::cloud_record::{Classified, StrayKind};
use crate::cmd::heal::Verdict;
use crate::directory::Instance;
use crate::exit::{Code, Failure};
use crate::look::{RefreshRecord, Slice};
use crate::names;
use crate::output::Printer;
use crate::profile::Profiles;
use crate::terraform::{Apply, Plan};
use crate::tfoutput::Changes;
use crate::workspace::{ChangeSet, SavedPlan, Workspace};

/// Imports the machines adopted after a cut apply (a targeted plan of their addresses,
/// applied) before anything is decided: a scale-down could otherwise remove the instance whose
/// machine is being adopted, and its import block, left without an address, would leak the
/// machine. Their import blocks go once carried out (a scale-down may remove their addresses);
/// those of an import that did not finish stay for the whole apply that follows. A plan that
/// would destroy anything (an adopted machine replaced) is not applied here: it is left to
/// the whole apply, which `--max-destroy` checks.
/// What it applied, if it did.
pub(super) fn adopt_first(
    ws: &mut Workspace<'_>,
    printer: &Printer,
    adopted: &[crate::lookup::Adopted],
) -> Result<Option<Changes>> {
    let targets: Vec<String> = adopted.iter().map(|a| a.address.clone()).collect();
    let saved = ws.plan_targets(&targets)?;
    if saved.plan.totals.remove > 0 {
        printer.status(&format!(
            "importing the adopted machines would destroy {}: left to this run's apply, which --max-destroy checks",
            saved.plan.totals.remove
        ));
        return Ok(None);
    }
    let c = ws.apply(saved.to_apply())?;
    ws.imports_done(&targets)?;
    Ok(Some(c))
}

/// The line that reports a stray.
fn stray_line(s: &Classified) -> String {
    let whose = s.file.as_deref().map_or_else(
        || format!("the tags of group `{}`, naming no file here", s.group.as_deref().unwrap_or("(none)")),
        |f| format!("the tags of `{f}`"),
    );
    match s.kind {
        StrayKind::Twin => format!(
            "stray {} {}: it carries {whose}, whose {} is another machine, and is in no state (a twin a lost answer made, or a leak): `infrakit-tf sweep-orphans --strays` destroys it",
            s.rtype,
            s.id,
            s.address.as_deref().unwrap_or("resource")
        ),
        _ => format!(
            "stray {} {}: it carries {whose} and is in no state; another directory's? it is left alone (delete it, or take the tags off, if it is nobody's)",
            s.rtype, s.id
        ),
    }
}

impl Run<'_> {
    /// Promotes the queue, carries out an import that did not finish, and looks at the cloud
    /// ([`Run::look`]): what it found, weighed, its strays adopted or reported. Writes nothing
    /// but the promotion and the adoptions.
    pub(super) fn observe(&self, ws: &mut Workspace<'_>, instances: &[Instance]) -> Result<Observed> {
        let promoted = ws.promote()?;
        // An import that did not finish: its blocks are applied now (see `Workspace::carry_out_imports`).
        let importing = ws.carry_out_imports()?;
        ws.keep_configuration()?;
        ws.init_if_needed(&ws.providers(instances))?;
        let read_at = ws.now_ms()?;
        let (mut seen, reads) = self.look(ws)?;
        let unconfirmed = seen.weigh(ws, read_at, self.profiles, &self.ctx.printer, false)?;
        let mut strays = Strays::default();
        if let Seen::Looked { strays: found, whole, unchanged, .. } = &mut seen {
            strays = self.strays(ws, found)?;
            // A stray adopted changes the state: a whole plan saved before is stale (planned
            // again when the run applies anything).
            if !strays.adopted.is_empty() {
                *whole = None;
                *unchanged = false;
            }
        }
        Ok(Observed { seen, importing, promoted, reads, unconfirmed, strays })
    }

    /// Looks at the cloud (see the module doc): a look when a look-up lists machines of the
    /// directory, else (or `--full-refresh`) a refreshing plan of everything, saved. A listing
    /// the cloud throttles fails the run (a full refresh would be throttled too, and cost
    /// more); one that fails otherwise (a mistake in `lookups`) makes it refresh everything.
    /// What it read goes with it, for the report.
    fn look(&self, ws: &mut Workspace<'_>) -> Result<(Seen, Reads)> {
        let slice = Slice { of: self.args.refresh_slice };
        let listed = if self.args.full_refresh { None } else { ws.presence(slice)? };
        let refresh_all = |ws: &mut Workspace<'_>| {
            let saved = ws.plan()?;
            Ok((Seen::Refreshed(saved), Reads { full_refresh: true, ..Reads::default() }))
        };
        let Some((state, presence)) = listed else { return refresh_all(ws) };
        let digest = ws.digest(&state);
        let whole = if ws.planned_before(&digest) { None } else { Some(ws.plan_unrefreshed()?) };
        let look = match ws.look(&presence)? {
            Ok(look) => look,
            Err(failed) if failed.transient => {
                return Err(Failure::new(
                    Code::TerraformFailed,
                    format!("{} failed: {:#}", failed.what, failed.error),
                )
                .hint("the cloud refused the listing for now (throttled, or briefly away); nothing was pruned or applied, and nothing more was read (a full refresh would be refused too): the next run looks again")
                .into());
            }
            // A look-up that cannot list (a mistake in `lookups`) must not stop cron: this run
            // refreshes everything, as before.
            Err(failed) => {
                self.ctx.printer.warn(&format!(
                    "{} could not be read, so this run refreshes everything (check `lookups` in infrakit-tf.json): {:#}",
                    failed.what, failed.error
                ));
                return refresh_all(ws);
            }
        };
        let addresses: BTreeSet<String> =
            presence.listed.iter().map(|l| l.address.clone()).chain(presence.always.iter().cloned()).collect();
        let (strays, strays_read) = ws.strays(&look.unknown, &addresses)?;
        // Each listing, one listing again after a read failed, the slice, each confirmation,
        // and two calls for each stray read: each tried as often as retries allow.
        let tries = u64::from(ws.terraform()?.retries()) + 1;
        let reads = presence.listings.len() + 1 + presence.slice.len() + look.unlisted.len() + 2 * strays_read;
        let reads = Reads {
            slice: Some(slice.to_string()),
            whole_plan: whole.is_some(),
            unlisted: look.unlisted,
            bound: Some(tries * reads as u64),
            ..Reads::default()
        };
        let plan = crate::workspace::merge(whole.as_ref().map(|w| &w.plan), look.plan, None);
        let seen = Seen::Looked {
            plan,
            unchanged: whole.is_none(),
            whole,
            digest,
            cursor: look.cursor,
            deposed: presence.deposed,
            shown: look.shown,
            read: look.read,
            unread: look.unread,
            strays,
            ids: presence.ids,
        };
        Ok((seen, reads))
    }

    /// After a look, before the configuration applies without refreshing: the objects it
    /// confirmed gone are forgotten (no cloud call), and those that drifted are read into the
    /// state again (`-refresh-only` of them alone), so that the apply sees what the look saw.
    /// One gone that holds a deposed object is read again too: forgetting its address would
    /// forget that object, and leak it.
    pub(super) fn bring_state_to_look(ws: &mut Workspace<'_>, plan: &Plan, deposed: &[String]) -> Result<()> {
        let (kept, gone): (Vec<String>, Vec<String>) = crate::workspace::gone(plan)
            .into_iter()
            .partition(|a| deposed.iter().any(|d| a.split('[').next() == Some(d.as_str())));
        let mut drifted = crate::workspace::drifted(plan);
        drifted.extend(kept);
        if !gone.is_empty() {
            ws.forget(&gone)?;
        }
        if !drifted.is_empty() {
            ws.apply(Apply::RefreshOnly(&drifted))?;
        }
        Ok(())
    }

    /// The strays the look found (`workspace::strays`): one that stands for a resource without
    /// a machine (and carries its group tag: `cloud_record::classify`) is adopted at once
    /// (imported, as after a cut apply); the others are reported, one line each, and left alone (a plain run
    /// still succeeds; `reconcile --check` says so; `sweep-orphans --strays` destroys twins).
    fn strays(&self, ws: &mut Workspace<'_>, strays: &[Classified]) -> Result<Strays> {
        let (mut adopting, mut reported) = (Vec::new(), Vec::new());
        for s in strays {
            match (s.kind, &s.address) {
                (StrayKind::Adoptable, Some(address)) => {
                    self.ctx.printer.status(&format!(
                        "adopted {address} = {}: a machine the listing shows with its tags, in no state",
                        s.id
                    ));
                    adopting.push(crate::lookup::Adopted { address: address.clone(), id: s.id.clone() });
                }
                _ => {
                    self.ctx.printer.warn(&stray_line(s));
                    reported.push(s.clone());
                }
            }
        }
        if adopting.is_empty() {
            return Ok(Strays { reported, ..Strays::default() });
        }
        let existing = ws.dir().read_doc(names::IMPORT_FILE).ok();
        let blocks = crate::lookup::import_blocks(existing.as_ref(), &adopting);
        ws.write(ChangeSet::writing(vec![crate::workspace::FileWrite::managed(names::IMPORT_FILE.into(), blocks)]))?;
        let applied = adopt_first(ws, &self.ctx.printer, &adopting)?;
        Ok(Strays { reported, adopted: adopting, applied })
    }

    /// Checks the members of the groups that heal (`cmd::heal`) and writes the health record;
    /// the verdict of each, with its index among the groups.
    pub(super) fn heal(
        &self,
        ws: &mut Workspace<'_>,
        instances: &[Instance],
        decisions: &Decisions,
    ) -> Result<Vec<(usize, Verdict)>> {
        let healed = decide::healed(self.groups, instances, decisions, &self.placing.borrow().held);
        let verdicts = crate::cmd::heal::check(
            ws,
            &self.ctx.printer,
            instances,
            self.record.clone(),
            &healed.iter().map(|(_, h)| h).collect::<Vec<_>>(),
        )?;
        for ((_, h), verdict) in healed.iter().zip(&verdicts) {
            if let Some(why) = &verdict.halted {
                self.ctx.printer.warn(&format!("group {}: repairs halted: {why}", h.group));
            }
            for id in &verdict.repair {
                self.ctx.printer.event(&format!("group {}: {id} is unhealthy: repairing it", h.group));
            }
        }
        Ok(healed.iter().map(|(i, _)| *i).zip(verdicts).collect())
    }
}

/// What a run read from the cloud (README "What a reconcile reads").
#[derive(Debug, Default, Serialize)]
pub(super) struct Reads {
    /// Whether every resource was refreshed (no look-up lists any, `--full-refresh`, `--check`).
    pub(super) full_refresh: bool,
    /// The share of the listed machines refreshed (`1/N`); `null` with a full refresh.
    pub(super) slice: Option<String>,
    /// Resources terraform refreshed, in every terraform run of this reconcile.
    pub(super) refreshed: u64,
    /// Look-up listings read (one data-source read each).
    pub(super) lists: u64,
    /// Other data sources read (your configuration's).
    pub(super) data_sources: u64,
    /// Listed machines the listings did not show, each refreshed to confirm.
    pub(super) unlisted: Vec<String>,
    /// Whether the whole configuration was planned (without refreshing): the configuration or
    /// the state changed since the last whole plan that found nothing to do.
    pub(super) whole_plan: bool,
    /// The most cloud reads this run could take: `(retries + 1) × (listings + 1 + slice +
    /// unlisted + 2 × strays read)` (`slice`: the listed machines the slice refreshes); `null`
    /// with a full refresh.
    pub(super) bound: Option<u64>,
}

/// What a converging run found before deciding ([`Run::observe`]).
pub(super) struct Observed {
    pub(super) seen: Seen,
    /// Whether import blocks remain for the apply (`Workspace::carry_out_imports`).
    pub(super) importing: bool,
    /// The queued files promoted.
    pub(super) promoted: Vec<String>,
    /// What it read from the cloud.
    pub(super) reads: Reads,
    /// The machines it keeps as they are until a later run knows.
    pub(super) unconfirmed: Vec<Unconfirmed>,
    pub(super) strays: Strays,
}

/// The strays a look found: those reported and left alone, and those adopted (imported at
/// once: what that applied, when it did).
#[derive(Default)]
pub(super) struct Strays {
    pub(super) reported: Vec<Classified>,
    pub(super) adopted: Vec<crate::lookup::Adopted>,
    pub(super) applied: Option<Changes>,
}

/// What a run saw of the cloud and the configuration before deciding.
#[expect(clippy::large_enum_variant, reason = "one per run: boxing the larger variant saves nothing")]
pub(super) enum Seen {
    /// Every resource refreshed: the saved refreshing plan.
    Refreshed(SavedPlan),
    /// A look (`workspace::look`): what it found, merged with the whole plan (saved, not
    /// refreshed) when one ran; the state document it looked at, and where its slice stopped.
    /// `unchanged`: the configuration and the state were those of the last whole plan that
    /// found nothing to do (`Workspace::planned_before`), so none ran.
    /// `digest`: what the whole plan planned (`Workspace::digest`); `deposed`: the resources
    /// holding a deposed object, which are not forgotten (that would forget the object).
    /// `shown`: the listed machines their listing showed; `read`: every address a refresh
    /// read; `unread`: what could not be read, and why; `strays`: what the listings showed that
    /// no state records (`workspace::strays`); `ids`: the ID the state holds for each address.
    Looked {
        plan: Plan,
        unchanged: bool,
        whole: Option<SavedPlan>,
        digest: String,
        cursor: Option<String>,
        deposed: Vec<String>,
        shown: BTreeSet<String>,
        read: BTreeSet<String>,
        unread: Vec<(String, String)>,
        strays: Vec<Classified>,
        ids: BTreeMap<String, String>,
    },
}

impl Seen {
    /// The plan saved for an apply (`decide::Next::Saved`): the refreshing plan, or after a
    /// look the whole plan when one ran.
    pub(super) fn saved(&self) -> Option<&SavedPlan> {
        match self {
            Seen::Refreshed(saved) => Some(saved),
            Seen::Looked { whole, .. } => whole.as_ref(),
        }
    }

    /// After a look, nothing changed since a whole plan found nothing to do, and none ran.
    pub(super) fn unchanged(&self) -> bool {
        matches!(self, Seen::Looked { unchanged: true, .. })
    }

    /// The resources holding a deposed object (a look's; none after a full refresh).
    pub(super) fn deposed(&self) -> &[String] {
        match self {
            Seen::Looked { deposed, .. } => deposed,
            Seen::Refreshed(_) => &[],
        }
    }

    /// Once the state holds what a look found (and `applied`, or not): the next run, on any host,
    /// goes on after the slice read (a slice that could not be read is read again), and a
    /// whole plan that found nothing to apply is noted, so that the next run skips it while
    /// nothing changes.
    pub(super) fn record_progress(&self, ws: &mut Workspace<'_>, applied: bool) -> Result<()> {
        let Seen::Looked { digest, cursor, whole, .. } = self else { return Ok(()) };
        if cursor.is_some() {
            ws.save(&RefreshRecord { cursor: cursor.clone() })?;
        }
        if !applied && whole.is_some() {
            ws.note_planned(digest)?;
        }
        Ok(())
    }

    pub(super) fn plan(&self) -> &Plan {
        match self {
            Seen::Refreshed(saved) => &saved.plan,
            Seen::Looked { plan, .. } => plan,
        }
    }

    /// Weighs what the run's reads (begun at `at`) found gone (`absence::weigh`): what is not
    /// believed leaves the plan. With what the run held back or could not read, the machines
    /// it leaves unconfirmed.
    pub(super) fn weigh(
        &mut self,
        ws: &mut Workspace<'_>,
        at: u64,
        profiles: &Profiles,
        printer: &Printer,
        check: bool,
    ) -> Result<Vec<Unconfirmed>> {
        let none = BTreeSet::new();
        let (plan, reading, unread) = match self {
            Seen::Refreshed(saved) => (&mut saved.plan, Reading { shown: &none, read: None, ids: None, at }, &[][..]),
            Seen::Looked { plan, shown, read, unread, ids, .. } => {
                (plan, Reading { shown: &*shown, read: Some(&*read), ids: Some(&*ids), at }, unread.as_slice())
            }
        };
        let mut unconfirmed = absence::weigh(ws, plan, &reading, profiles, printer, check)?;
        unconfirmed.extend(absence::held_and_unread(ws, unread));
        Ok(unconfirmed)
    }

    /// After a look that skipped the whole plan: plans the whole configuration (without
    /// refreshing) when the run will apply anything (`anything`, or what the look found), and
    /// merges it in, so that `--max-destroy` counts all that the apply will do. Whether it did.
    pub(super) fn plan_whole(&mut self, ws: &mut Workspace<'_>, anything: bool) -> Result<bool> {
        let Seen::Looked { plan, whole: whole @ None, .. } = self else { return Ok(false) };
        if !anything && !plan.has_changes && plan.drift.is_empty() {
            return Ok(false);
        }
        let planned = ws.plan_unrefreshed()?;
        *plan = crate::workspace::merge(Some(&planned.plan), std::mem::take(plan), None);
        *whole = Some(planned);
        Ok(true)
    }
}
