//! Health-based repair: every `reconcile` run checks each created member of a group whose spec
//! has `Healing.Command` (or `--heal-cmd`) and counts its failed checks in a row across runs in
//! the health record (`health_record`, written all or nothing, with a store in the store). A
//! member whose last `FailuresBeforeRepair` checks failed is unhealthy, and is replaced in its
//! slot through the rolling update's road (`reconcile::rollout`: its order, its drains, its
//! health gate, `--max-destroy`), at most `MaxRepairsPerRun` a group a run. The circuit breaker:
//! with more unhealthy members than `MaxUnhealthy`, the group repairs none (then the checker or
//! the network is the likelier fault), and the run exits 18 once all else is done.
//!
//! A member is first checked `InitialDelay` after a run first saw it created (the record's
//! `first_seen`): a machine that boots slowly is not counted against. `--check` runs no check:
//! it reads the record, and a repair the record calls for is pending (exit 10).

use std::collections::BTreeSet;

use anyhow::Result;

use crate::cli::HealArgs;
use crate::directory::Instance;
use crate::exit::{Code, Failure};
use crate::group::{Heal, Healing};
use crate::health::{Hook, Job, Subject};
use crate::health_record::{Health, HealthRecord};
use crate::names::InstanceId;
use crate::output::Printer;
use crate::workspace::Workspace;

/// The command line's `--heal-*` flags, as the healing they put over each group spec's.
pub(crate) fn flags(args: &HealArgs) -> Healing {
    Healing {
        command: args.heal_cmd.clone(),
        timeout: args.heal_timeout,
        initial_delay: args.heal_initial_delay,
        failures_before_repair: args.heal_failures,
        max_unhealthy: args.heal_max_unhealthy,
        max_repairs_per_run: args.heal_max_repairs,
    }
}

/// One healed group, as a run sees it.
pub(crate) struct Healed<'a> {
    /// Its ID.
    pub(crate) group: &'a str,
    pub(crate) heal: &'a Heal,
    /// Its desired size (`MaxUnhealthy`'s percentage is of it).
    pub(crate) desired: usize,
    /// Its created members: those checked.
    pub(crate) created: Vec<&'a Instance>,
    /// Members the run replaces or terminates anyway: never repaired besides.
    pub(crate) going: BTreeSet<InstanceId>,
}

/// What the record says of one group: its unhealthy members, those this run repairs, and why
/// its repairs are halted (the circuit breaker), if they are.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) unhealthy: Vec<InstanceId>,
    pub(crate) repair: Vec<InstanceId>,
    pub(crate) halted: Option<String>,
}

/// Checks every created member of `groups` due a check, in parallel (bounded, `health::run_all`),
/// updates the health record and writes it (all or nothing); the verdict of each group.
/// Ctrl-C or SIGTERM during the checks stops the run (exit 130), the record unchanged.
/// `instances`: the directory's, as the run listed them; `record`: the health record as the
/// run found it ([`read`]).
pub(crate) fn check(
    ws: &mut Workspace<'_>,
    printer: &Printer,
    instances: &[Instance],
    mut record: HealthRecord,
    groups: &[&Healed<'_>],
) -> Result<Vec<Verdict>> {
    if groups.is_empty() {
        return Ok(Vec::new());
    }
    // The clock the hosts share (the store's, with several hosts): the record is shared too.
    let now = ws.now_ms()? / 1000;
    // What the record keeps: the created members of the healed groups, and anything this run
    // does not converge (another group's members, kept for its own runs).
    let healed_members: BTreeSet<String> =
        groups.iter().flat_map(|g| g.created.iter().map(|i| i.id.to_string())).collect();
    let of_others = |i: &&Instance| {
        let group = i.tags.get(crate::group::GROUP_TAG).map(String::as_str);
        !groups.iter().any(|g| group == Some(g.group))
    };
    let others: BTreeSet<String> = instances.iter().filter(of_others).map(|i| i.id.to_string()).collect();
    record.retain(|id| healed_members.contains(id) || others.contains(id));

    let mut due = Vec::new();
    for g in groups {
        for inst in &g.created {
            let id = inst.id.to_string();
            record.seen(&id, now);
            if record.due(&id, now, g.heal.initial_delay) {
                due.push((g, *inst, id));
            }
        }
    }
    let state = if due.is_empty() { None } else { Some(ws.state()?) };
    let due: Vec<_> = due
        .into_iter()
        .map(|(g, inst, id)| {
            let vm = inst.vm.as_ref().zip(state.as_ref()).and_then(|((t, n), s)| s.get(&format!("{t}.{n}")));
            (g, inst, id, vm.map(|r| r.key_attributes()).unwrap_or_default())
        })
        .collect();
    let jobs: Vec<Job<'_>> = due
        .iter()
        .map(|(g, inst, id, attributes)| Job {
            command: &g.heal.command,
            timeout: g.heal.timeout,
            subject: Subject { id, logical_id: inst.logical_id(), group: g.group, attributes },
        })
        .collect();
    if !jobs.is_empty() {
        printer.status(&format!("checking the health of {} member(s)", jobs.len()));
    }
    let results = crate::health::run_all(Hook::Health, &jobs);
    // Stopped by Ctrl-C or SIGTERM: a check the signal killed says nothing of its member, and
    // the record stays as it was.
    if crate::signals::stop_requested() {
        return Err(crate::exit::Failure::new(
            Code::Interrupted,
            "interrupted while the health checks ran: the health record is unchanged",
        )
        .into());
    }
    for ((g, _, id, _), result) in due.iter().zip(results) {
        let failed = match result {
            Ok(None) => None,
            Ok(Some(why)) => Some(why),
            // Ours, not the member's (the check could not be started): no count either way.
            Err(e) => {
                printer.warn(&format!("{id} (group {}): not checked: {e:#}", g.group));
                continue;
            }
        };
        record.note(id, failed.is_none());
        if let Some(why) = failed {
            let health = record.health(id, g.heal.failures_before_repair).unwrap_or(Health::NotChecked);
            printer.warn(&format!("{id} (group {}): check failed ({why}): {}", g.group, health.text()));
        }
    }
    ws.save(&record)?;
    Ok(groups.iter().map(|g| verdict(&record, g)).collect())
}

/// The health record as the directory holds it; afresh (with a warning) when it is not valid:
/// the counts start again, which repairs nothing early.
pub(crate) fn read(ws: &Workspace<'_>, printer: &Printer) -> HealthRecord {
    ws.dir().record::<HealthRecord>().unwrap_or_else(|why| {
        printer.warn(&format!("{why}: the health counts start again"));
        HealthRecord::default()
    })
}

/// What `record` says of group `g`: which created members are unhealthy, which of them this run
/// repairs (up to `MaxRepairsPerRun`, in ID order, none it replaces or terminates anyway), and
/// whether the circuit breaker halts its repairs (counting the unhealthy members that stay).
pub(crate) fn verdict(record: &HealthRecord, g: &Healed<'_>) -> Verdict {
    let unhealthy: Vec<InstanceId> = g
        .created
        .iter()
        .filter(|i| record.health(&i.id.to_string(), g.heal.failures_before_repair) == Some(Health::Unhealthy))
        .map(|i| i.id.clone())
        .collect();
    // The breaker counts every unhealthy member, those the run terminates or replaces anyway
    // too: they are as much evidence that the check or the network is at fault.
    let sick = unhealthy.len();
    let allowed = g.heal.max_unhealthy.allowed(g.desired);
    if sick as u64 > allowed {
        let halted = format!(
            "{sick} member(s) unhealthy, more than MaxUnhealthy {} ({allowed} of {}): no member is repaired, as the check or the network is the likelier fault",
            g.heal.max_unhealthy.text(),
            g.desired
        );
        return Verdict { unhealthy, repair: Vec::new(), halted: Some(halted) };
    }
    let at_most = usize::try_from(g.heal.max_repairs_per_run).unwrap_or(usize::MAX);
    let repair = unhealthy.iter().filter(|id| !g.going.contains(*id)).take(at_most).cloned().collect();
    Verdict { unhealthy, repair, halted: None }
}

/// The failure a run ends with once everything else is done, when the circuit breaker halted
/// the repairs of `groups` (`(ID, why)`).
pub(crate) fn halted(groups: &[(String, String)]) -> anyhow::Error {
    let what: Vec<String> = groups.iter().map(|(id, why)| format!("group `{id}`: {why}")).collect();
    Failure::new(Code::RepairHalted, format!("repairs halted by the circuit breaker: {}", what.join("; ")))
        .hint("find why the checks fail (the machines, the check, the network); repairs resume once no more than MaxUnhealthy members are unhealthy (or raise --heal-max-unhealthy)")
        .into()
}
