//! Rollbacks (docs/groups-and-rollouts.md, "AutoRollback"): a group's members on a spec that
//! failed are replaced by members on its last good spec (the rollout record's
//! [`GoodSpec`](crate::rollout_record::GoodSpec): the last under which it was whole and
//! current), through the rolling road (`rollout.rs`: drains, `MaxUnavailable`, the health
//! gate, slots kept, `--max-destroy`), and the group stays there: while its record says
//! `rolling_back` or `rolled_back` for the spec it asks, the run converges it to the last good
//! spec ([`hold`]), until the spec changes or `--retry-rollout`. A rollback begins when a
//! group with `AutoRollback` fails its rollout ([`calls_for`], and a repair of a member on the
//! new spec before that spec was found good), or on `--rollback`. The record says
//! `rolling_back` before the first member goes back: a run killed anywhere leaves the next to
//! go on with it, and no member is replaced twice (the members' config hashes say which are
//! back).

use anyhow::Result;

use super::groups::Group;
use crate::cli::ReconcileArgs;
use crate::exit::{Code, Failure};
use crate::profile::Profiles;
use crate::rollout_record::{GroupRollout, RolloutRecord, RolloutState};
use crate::terraform::retry::Retry;

/// Why a rollback asked by `--rollback` happens, in the record and the report.
const ASKED: &str = "asked: reconcile --rollback";

/// The groups as this run converges them: those whose rollout was rolled back (or is rolling
/// back) held back on their last good spec (`Group::back_on`). First, `--retry-rollout`
/// forgets a group's rollback, and `--rollback` begins one (in `record`, written by the run
/// before its first batch). A flag that names no group, a retry of a group that was not rolled
/// back, or a rollback without a last good spec to go to, is refused: nothing changed.
pub(super) fn hold(
    groups: Vec<Group>,
    record: &mut RolloutRecord,
    args: &ReconcileArgs,
    profiles: &Profiles,
) -> Result<Vec<Group>> {
    for (flag, ids) in [("--rollback", &args.rollback), ("--retry-rollout", &args.retry_rollout)] {
        if let Some(id) = ids.iter().find(|id| !groups.iter().any(|g| &g.spec.id == *id)) {
            return Err(Failure::new(Code::Usage, format!("{flag} {id}: no group `{id}` is converged by this run"))
                .hint("name a group by its spec's `ID`, one given with --group or listed in infrakit-tf.json")
                .into());
        }
    }
    for id in &args.retry_rollout {
        let group = groups.iter().find(|g| &g.spec.id == id).expect("checked above");
        match record.groups.get(id) {
            Some(r) if r.to == group.asked && r.state.backing() => {
                record.groups.remove(id);
            }
            r => {
                let state = r.filter(|r| r.to == group.asked).map_or("none", |r| r.state.as_str());
                return Err(Failure::new(
                    Code::Invalid,
                    format!("--retry-rollout {id}: the rollout of its spec was not rolled back (its rollout: {state}); nothing was changed"),
                )
                .hint("--retry-rollout rolls out again a spec whose rollout was rolled back")
                .into());
            }
        }
    }
    for id in &args.rollback {
        let group = groups.iter().find(|g| &g.spec.id == id).expect("checked above");
        let entry = record.groups.get(id).filter(|r| r.to == group.asked);
        if entry.is_some_and(|r| r.state.backing()) {
            continue;
        }
        let Some(good) = record.good.get(id).filter(|g| g.hash != group.asked) else {
            let why = if record.good.contains_key(id) {
                "its spec is its last good spec (the group was whole and current on it)"
            } else {
                "no last good spec is known (the group has not been whole and current on any spec yet)"
            };
            return Err(Failure::new(
                Code::Invalid,
                format!("--rollback {id}: nothing to roll back to: {why}; nothing was changed"),
            )
            .hint("to go back to an earlier spec, put it back in the group spec's file and run `infrakit-tf reconcile`")
            .into());
        };
        record.groups.insert(id.clone(), backing(&good.hash, &group.asked, ASKED.into()));
    }
    let mut held = Vec::with_capacity(groups.len());
    for group in groups {
        let backing = record.groups.get(&group.spec.id).is_some_and(|r| r.to == group.asked && r.state.backing());
        match record.good.get(&group.spec.id).filter(|_| backing) {
            Some(good) => held.push(group.back_on(good, profiles)?),
            None => held.push(group),
        }
    }
    Ok(held)
}

/// The record of the rollout to `to` as it rolls back (`why`) to the last good spec `good`
/// (its `from` from then on: where the group goes back to).
pub(super) fn backing(good: &str, to: &str, why: String) -> GroupRollout {
    GroupRollout {
        from: good.to_string(),
        to: to.to_string(),
        state: RolloutState::RollingBack,
        reached: 0,
        paused_at_ms: None,
        why: Some(why),
    }
}

/// Whether `failure`, of a replacement's health gate or of the apply that created it, says
/// the new spec failed, so that `AutoRollback` rolls it back: a replacement that was not
/// healthy (or not ready within `MinReady`), or an apply that failed for a reason that is not
/// transient (`retry`'s patterns: a throttled or cut call is tried again by the next run, not
/// rolled back) nor the runner's (a state that could not be saved, missing credentials). Not
/// an interrupt, a lost lock or lease, a timeout, a refusal.
pub(super) fn calls_for(failure: &anyhow::Error, retry: &Retry) -> bool {
    let text = format!("{failure:#}");
    match crate::exit::code_for(failure) {
        Code::UpdateStopped => true,
        Code::TerraformFailed => retry.transient(&text, false).is_none() && !retry.vetoed(&text),
        _ => false,
    }
}

/// The error that ends a run that rolled back `groups` (each with why), once all else is done
/// (exit 20).
pub(super) fn rolled_back(groups: &[(String, String)]) -> anyhow::Error {
    let what: Vec<String> = groups.iter().map(|(id, why)| format!("group `{id}` ({why})")).collect();
    Failure::new(Code::RolledBack, format!("rolled back to the last good spec: {}", what.join(", ")))
        .hint("fix the spec and change it (or run `infrakit-tf reconcile --retry-rollout ID`) to roll it out again")
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollout_that_failed_rolls_back_unless_the_failure_was_not_the_specs() {
        let retry = Retry::default();
        let failed = |code, message: &str| -> anyhow::Error { Failure::new(code, message.to_string()).into() };
        let cases = [
            ("an unhealthy replacement", failed(Code::UpdateStopped, "web-3 is not healthy"), true),
            ("an apply the spec broke", failed(Code::TerraformFailed, "Error: InvalidAMIID.NotFound"), true),
            ("a throttled apply", failed(Code::TerraformFailed, "Error: Throttling: Rate exceeded"), false),
            ("a call cut mid-way", failed(Code::TerraformFailed, "Error: read: connection reset by peer"), false),
            ("a state not saved", failed(Code::TerraformFailed, "Error: Failed to save state: disk full"), false),
            ("an interrupt", failed(Code::Interrupted, "interrupted"), false),
            ("a lost lease", failed(Code::StoreUnavailable, "lease lost"), false),
            ("too many destroys", failed(Code::TooManyDestroys, "refusing"), false),
            ("a timeout", failed(Code::TerraformTimeout, "terraform ran longer"), false),
        ];
        for (what, failure, rolls_back) in cases {
            assert_eq!(calls_for(&failure, &retry), rolls_back, "{what}");
        }
    }
}
