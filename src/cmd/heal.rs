//! Health-based repair: every `reconcile` run checks each created member of a group whose spec
//! has `Healing.Command` (or `--heal-cmd`), counts its consecutive failed checks across runs,
//! and replaces a member that failed `FailuresBeforeRepair` in a row, through the rolling
//! update's road, unless the circuit breaker (`MaxUnhealthy`) halts the group's repairs.

use crate::cli::HealArgs;
use crate::group::Healing;

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
