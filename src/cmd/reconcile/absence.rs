//! What a reconcile believes is gone (README "A cloud that lags"). A refresh that calls a
//! machine gone is weighed against its listing and its age (`cloud_record::CloudRecord::weigh`)
//! before anything prunes it: a machine the listing still shows, or one created less than its
//! settle time ago, is kept, unconfirmed, and left out of the plan (not pruned, not forgotten,
//! not made again); the next run reads it again. What the run could not read, and what a
//! look-up could not settle yet (`Workspace::find_unrecorded`), is unconfirmed too.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde::Serialize;

use crate::cloud_record::CloudRecord;
use crate::cloud_record::{Absence, GoneRead};
use crate::output::Printer;
use crate::profile::Profiles;
use crate::terraform::Plan;
use crate::text::utc_ms;
use crate::tfoutput::Action;
use crate::workspace::Workspace;

/// A machine the run did not believe gone, or could not read, or may not make yet: kept as it
/// is until a later run knows.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Unconfirmed {
    pub(super) address: String,
    pub(super) why: String,
    /// When the cloud's answer about it is believed (RFC 3339), where that is known.
    pub(super) until: Option<String>,
}

/// What the look saw of each machine it read (for [`weigh`]).
pub(super) struct Reading<'a> {
    /// The listed machines their listing showed.
    pub(super) shown: &'a BTreeSet<String>,
    /// Every address a refresh read; `None`: all of them (a full refresh).
    pub(super) read: Option<&'a BTreeSet<String>>,
    /// The ID the state holds for each address, where the look read the state already;
    /// `None`: the state is read here.
    pub(super) ids: Option<&'a BTreeMap<String, String>>,
    /// When the run's reads began (ms, the shared clock).
    pub(super) at: u64,
}

/// Weighs every object `plan` found gone (see the module doc): those not believed are taken
/// out of `plan` and returned. The cloud record is written with what it must remember
/// (unless `check`: then nothing is written).
pub(super) fn weigh(
    ws: &mut Workspace<'_>,
    plan: &mut Plan,
    reading: &Reading<'_>,
    profiles: &Profiles,
    printer: &Printer,
    check: bool,
) -> Result<Vec<Unconfirmed>> {
    let gone = crate::workspace::gone(plan);
    let mut record = ws.record::<CloudRecord>();
    if gone.is_empty() && record.gone.is_empty() {
        return Ok(Vec::new());
    }
    // The IDs the state holds (nothing was saved since the reads).
    let read_here;
    let ids = match reading.ids {
        Some(ids) => ids,
        None => {
            read_here = ws.state()?.into_iter().filter_map(|(a, r)| Some((a, r.attribute("id")?))).collect();
            &read_here
        }
    };
    let reads: Vec<GoneRead> = gone
        .iter()
        .filter_map(|a| {
            Some(GoneRead { address: a.clone(), id: ids.get(a)?.clone(), listed: reading.shown.contains(a) })
        })
        .collect();
    let in_state: BTreeSet<String> = ids.keys().cloned().collect();
    let read = reading.read.unwrap_or(&in_state);
    let cut = ws.evidence_noted().max(record.cut);
    let verdicts = record.weigh(&reads, (read, &in_state), reading.at, cut, |t| profiles.settle(t));
    if !check {
        ws.save(&record)?;
    }
    let kept: Vec<Unconfirmed> = verdicts
        .into_iter()
        .filter_map(|(address, absence)| match absence {
            Absence::Keep { why, until } => Some(Unconfirmed { address, why, until: Some(utc_ms(until)) }),
            Absence::Prune => None,
        })
        .collect();
    if !kept.is_empty() {
        let names: BTreeSet<&str> = kept.iter().map(|k| k.address.as_str()).collect();
        plan.drift.retain(|d| !names.contains(d.address.as_str()));
        plan.changes.retain(|c| !names.contains(c.address.as_str()));
        let count = |a: &[Action]| plan.changes.iter().filter(|c| a.contains(&c.action)).count() as u64;
        plan.totals.add = count(&[Action::Create, Action::Replace]);
        plan.totals.change = count(&[Action::Update]);
        plan.totals.remove = count(&[Action::Delete, Action::Replace]);
        plan.has_changes = !plan.changes.is_empty();
        for k in &kept {
            printer.warn(&format!(
                "{} was read as gone, but that is not believed yet ({}): kept, unconfirmed; believed from {}",
                k.address,
                k.why,
                k.until.as_deref().unwrap_or("the next run")
            ));
        }
    }
    Ok(kept)
}

/// What this run holds back because a look-up could not settle it yet, and what it could not
/// read: unconfirmed.
pub(super) fn held_and_unread(ws: &Workspace<'_>, unread: &[(String, String)]) -> Vec<Unconfirmed> {
    let (held, until) = ws.held_back();
    let mut out: Vec<Unconfirmed> = held
        .iter()
        .map(|address| Unconfirmed {
            address: address.clone(),
            why: "an apply that failed or was cut short may have made it, and the cloud does not list it yet".into(),
            until: until.map(utc_ms),
        })
        .collect();
    out.extend(unread.iter().map(|(address, why)| Unconfirmed {
        address: address.clone(),
        why: format!("it could not be read: {why}"),
        until: None,
    }));
    out
}
