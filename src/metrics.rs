//! Metrics of the last runs, for Prometheus (docs/running-unattended.md): `--metrics-file
//! PATH` (or `metrics_file` in infrakit-tf.json) is rewritten after every command that writes
//! and every `reconcile`, failed ones included, in Prometheus's text exposition format, at once
//! (a temporary file renamed over it: node_exporter's textfile collector never reads half a
//! file). A file that cannot be written is a warning, never a failed run.
//!
//! What a run counts is gathered here as it happens ([`note_terraform_run`], [`note_retry`],
//! [`note_applied`], [`note_reconciled`]): one process, one command. Each series carries the
//! directory; those of a command carry it too, so that a `provision` does not hide a failing
//! `reconcile`. Series this run has no value for (another command's, the last success of a
//! command that failed now, the groups of a run that stopped before it looked) are kept from
//! the file as it was.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::{LazyLock, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use anyhow::Result;
use regex::Regex;

use crate::fsio::{self, Perms};
use crate::tfoutput::Changes;

/// What a run counted (see [`counts`]).
#[derive(Default, Clone)]
pub(crate) struct Counts {
    terraform_runs: u64,
    retries: u64,
    /// What its applies did, failed tries included.
    applied: Changes,
    /// Set by reconcile once it planned: resources changed outside terraform.
    drift: Option<usize>,
    /// Set by reconcile once it looked: strays it reported.
    strays: Option<usize>,
    /// Set by reconcile once it decided: members still to be replaced, by group.
    outdated: Option<BTreeMap<String, usize>>,
    /// Set by reconcile: each group's rollout, when it has one: its state and the members on
    /// the new spec.
    rollouts: Option<BTreeMap<String, (crate::rollout_record::RolloutState, usize)>>,
    /// Set by reconcile once it checked: the healed groups' health, by group.
    healing: Option<BTreeMap<String, Healing>>,
    /// Set by reconcile: each placed group's zones (by name): members, and whether the zone
    /// is skipped for want of capacity.
    zones: Option<BTreeMap<String, Zones>>,
    /// What its terraform runs read from the cloud.
    reads: Reads,
}

/// A placed group's zones, by name: members in each, and whether it is skipped for want of
/// capacity.
pub(crate) type Zones = BTreeMap<String, (usize, bool)>;

/// What a run's terraform runs read from the cloud, counted from their events: resources
/// refreshed (`refresh_start`), look-up listings and other data sources read (`apply_start`
/// with action `read`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Reads {
    pub(crate) refreshed: u64,
    pub(crate) lists: u64,
    pub(crate) data_sources: u64,
}

/// One read of [`Reads`].
pub(crate) enum Read {
    Refresh,
    Listing,
    DataSource,
}

/// A healed group's health, as one reconcile run left it.
#[derive(Default, Clone, Copy)]
pub(crate) struct Healing {
    /// Members unhealthy.
    pub(crate) unhealthy: usize,
    /// Members repaired by the run.
    pub(crate) repaired: usize,
    /// Whether the circuit breaker halted its repairs.
    pub(crate) halted: bool,
}

static COUNTS: LazyLock<Mutex<Counts>> = LazyLock::new(Mutex::default);

fn counts() -> std::sync::MutexGuard<'static, Counts> {
    COUNTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// What this run has counted so far: taken when the command ends, before the instances are
/// counted for the metrics (which may run terraform too).
pub(crate) fn taken() -> Counts {
    counts().clone()
}

/// A terraform run started (not the version probe).
pub(crate) fn note_terraform_run() {
    counts().terraform_runs += 1;
}

/// A failed terraform run is being run again.
pub(crate) fn note_retry() {
    counts().retries += 1;
}

/// A terraform run read from the cloud.
pub(crate) fn note_read(read: Read) {
    let reads = &mut counts().reads;
    match read {
        Read::Refresh => reads.refreshed += 1,
        Read::Listing => reads.lists += 1,
        Read::DataSource => reads.data_sources += 1,
    }
}

/// What this run read so far, for reconcile's report.
pub(crate) fn reads() -> Reads {
    counts().reads
}

/// Retries so far in this run, for the JSON reports.
pub(crate) fn retries() -> u64 {
    counts().retries
}

/// An apply finished, or failed: what it added, changed and destroyed.
pub(crate) fn note_applied(c: Changes) {
    counts().applied += c;
}

/// What reconcile found: the drift, and each group's outdated members.
pub(crate) fn note_reconciled(drift: usize, outdated: impl IntoIterator<Item = (String, usize)>) {
    let mut counts = counts();
    counts.drift = Some(drift);
    counts.outdated = Some(outdated.into_iter().collect());
}

/// Each group's rollout as reconcile left it: its state and the members on the new spec.
pub(crate) fn note_rollouts(
    rollouts: impl IntoIterator<Item = (String, (crate::rollout_record::RolloutState, usize))>,
) {
    counts().rollouts = Some(rollouts.into_iter().collect());
}

/// Each placed group's zones as reconcile left them: members in each, and whether it is
/// skipped for want of capacity (any of its fallbacks).
pub(crate) fn note_zones(zones: impl IntoIterator<Item = (String, Zones)>) {
    counts().zones = Some(zones.into_iter().collect());
}

/// How many strays reconcile reported (machines a listing showed with this directory's tags,
/// in no state, not adopted).
pub(crate) fn note_strays(strays: usize) {
    counts().strays = Some(strays);
}

/// What reconcile's health checks found, by healed group.
pub(crate) fn note_healing(groups: impl IntoIterator<Item = (String, Healing)>) {
    counts().healing = Some(groups.into_iter().collect());
}

/// One run, as it ended.
pub(crate) struct Run<'a> {
    pub(crate) command: &'a str,
    /// The directory (`--dir`), canonical.
    pub(crate) directory: String,
    pub(crate) exit_code: u8,
    pub(crate) started: SystemTime,
    pub(crate) duration: Duration,
    /// Instances by group (`""`: none) and status (describe's), when they could be read.
    pub(crate) instances: Option<BTreeMap<(String, String), usize>>,
    /// What it counted ([`taken`]).
    pub(crate) counts: Counts,
}

/// The families, all gauges, in the file's order: name, help, and whether each sample carries
/// the command.
const FAMILIES: &[(&str, &str, bool)] = &[
    ("infrakit_tf_last_run_timestamp_seconds", "When the command's last run ended (Unix time).", true),
    (
        "infrakit_tf_last_success_timestamp_seconds",
        "When the command's last successful run (exit 0) ended (Unix time).",
        true,
    ),
    ("infrakit_tf_last_exit_code", "The exit code of the command's last run (docs/exit-codes-and-environment.md).", true),
    ("infrakit_tf_last_run_duration_seconds", "How long the command's last run took.", true),
    ("infrakit_tf_last_run_terraform_runs", "Terraform runs the command's last run started.", true),
    (
        "infrakit_tf_last_run_retries",
        "Terraform runs the command's last run started again after a transient error.",
        true,
    ),
    ("infrakit_tf_last_run_resources_added", "Resources terraform created in the command's last run.", true),
    ("infrakit_tf_last_run_resources_changed", "Resources terraform changed in the command's last run.", true),
    (
        "infrakit_tf_last_run_resources_destroyed",
        "Resources terraform destroyed in the command's last run.",
        true,
    ),
    (
        "infrakit_tf_last_run_resources_refreshed",
        "Resources terraform read from the cloud (refreshed) in the command's last run.",
        true,
    ),
    (
        "infrakit_tf_last_run_list_calls",
        "Look-up listings (one data-source read each) that showed which machines exist, in the command's last run.",
        true,
    ),
    (
        "infrakit_tf_last_run_data_sources_read",
        "Other data sources terraform read in the command's last run.",
        true,
    ),
    (
        "infrakit_tf_instances",
        "Instances after the last run, by group (empty: none) and status (created, pending, unconfirmed, queued, tainted, configured, invalid).",
        false,
    ),
    (
        "infrakit_tf_group_members_outdated",
        "Members of the group still to be replaced by a rolling update, as the last reconcile found.",
        false,
    ),
    (
        "infrakit_tf_group_rollout",
        "1 for the state the group's rollout is in (rolling, paused, stopped, done, rolling_back, rolled_back), else 0, as the last reconcile left it.",
        false,
    ),
    (
        "infrakit_tf_group_rollout_replaced",
        "Members of the group on the spec its rollout goes to, as the last reconcile left it.",
        false,
    ),
    (
        "infrakit_tf_group_zone_members",
        "Members of the group in the zone (its Name in Placement.Zones), as the last reconcile left it.",
        false,
    ),
    (
        "infrakit_tf_group_zone_unavailable",
        "1 when the zone (or a fallback in it) is skipped for want of capacity until its backoff passes, else 0, as the last reconcile left it.",
        false,
    ),
    (
        "infrakit_tf_group_members_unhealthy",
        "Members of the group whose health checks failed FailuresBeforeRepair times in a row, as the last reconcile found.",
        false,
    ),
    ("infrakit_tf_group_repairs", "Unhealthy members of the group the last reconcile replaced.", false),
    (
        "infrakit_tf_group_repairs_halted",
        "1 when the circuit breaker (MaxUnhealthy) halted the group's repairs in the last reconcile, else 0.",
        false,
    ),
    (
        "infrakit_tf_drift_resources",
        "Resources changed or deleted outside terraform, as the last reconcile found.",
        false,
    ),
    (
        "infrakit_tf_strays",
        "Machines a listing showed with this directory's tags that no state holds and that were not adopted, as the last reconcile found.",
        false,
    ),
];

/// Writes the metrics of `run` to `path`, keeping the series it has no value for. Runs that
/// share the file take turns: call it during this process's turn (`lock::turn_at`), so that
/// none loses another's series.
pub(crate) fn write(path: &Path, run: &Run<'_>) -> Result<()> {
    let old = match crate::fsio::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("failed to read `{}`", path.display()))),
    };
    let text = render(&old, run);
    fsio::write_atomic(path, text.as_bytes(), Perms::Public)?;
    Ok(())
}

/// The file after `run`, from the file before it (`old`).
fn render(old: &str, run: &Run<'_>) -> String {
    let dir = format!("directory=\"{}\"", escape(&run.directory));
    let cmd = format!("{dir},command=\"{}\"", escape(run.command));
    let new = series(run, &dir, &cmd);
    let mut samples: BTreeMap<&str, BTreeMap<String, String>> = BTreeMap::new();
    for (family, labels, value) in old.lines().filter_map(sample) {
        if let Some(known) = FAMILIES.iter().find(|f| f.0 == family) {
            if !replaced(run, &new, &dir, &cmd, family, &labels) {
                samples.entry(known.0).or_default().insert(labels, value.to_string());
            }
        }
    }
    for (family, labels, value) in new {
        samples.entry(family).or_default().insert(labels, value);
    }
    let mut out = String::new();
    for (name, help, _) in FAMILIES {
        let Some(series) = samples.get(name) else { continue };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (labels, value) in series {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
    out
}

/// This run's samples (family, labels, value): its command's (`cmd` labels), and the
/// directory's (`dir` labels) that it measured.
fn series(run: &Run<'_>, dir: &str, cmd: &str) -> Vec<(&'static str, String, String)> {
    let counts = &run.counts;
    let seconds = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    let ended = run.started + run.duration;
    let per_command = [
        ("infrakit_tf_last_run_timestamp_seconds", number(seconds(ended))),
        ("infrakit_tf_last_exit_code", run.exit_code.to_string()),
        ("infrakit_tf_last_run_duration_seconds", number(run.duration.as_secs_f64())),
        ("infrakit_tf_last_run_terraform_runs", counts.terraform_runs.to_string()),
        ("infrakit_tf_last_run_retries", counts.retries.to_string()),
        ("infrakit_tf_last_run_resources_added", counts.applied.add.to_string()),
        ("infrakit_tf_last_run_resources_changed", counts.applied.change.to_string()),
        ("infrakit_tf_last_run_resources_destroyed", counts.applied.remove.to_string()),
        ("infrakit_tf_last_run_resources_refreshed", counts.reads.refreshed.to_string()),
        ("infrakit_tf_last_run_list_calls", counts.reads.lists.to_string()),
        ("infrakit_tf_last_run_data_sources_read", counts.reads.data_sources.to_string()),
    ];
    let mut new: Vec<(&str, String, String)> =
        per_command.into_iter().map(|(family, value)| (family, cmd.to_string(), value)).collect();
    if run.exit_code == 0 {
        new.push(("infrakit_tf_last_success_timestamp_seconds", cmd.to_string(), number(seconds(ended))));
    }
    for ((group, status), n) in run.instances.iter().flatten() {
        new.push((
            "infrakit_tf_instances",
            format!("{dir},group=\"{}\",status=\"{status}\"", escape(group)),
            n.to_string(),
        ));
    }
    for (group, n) in counts.outdated.iter().flatten() {
        new.push(("infrakit_tf_group_members_outdated", format!("{dir},group=\"{}\"", escape(group)), n.to_string()));
    }
    for (group, (state, replaced)) in counts.rollouts.iter().flatten() {
        let labels = format!("{dir},group=\"{}\"", escape(group));
        for s in crate::rollout_record::RolloutState::ALL {
            let value = u8::from(s == *state).to_string();
            new.push(("infrakit_tf_group_rollout", format!("{labels},state=\"{}\"", s.as_str()), value));
        }
        new.push(("infrakit_tf_group_rollout_replaced", labels, replaced.to_string()));
    }
    for (group, zones) in counts.zones.iter().flatten() {
        for (zone, (members, unavailable)) in zones {
            let labels = format!("{dir},group=\"{}\",zone=\"{}\"", escape(group), escape(zone));
            new.push(("infrakit_tf_group_zone_members", labels.clone(), members.to_string()));
            new.push(("infrakit_tf_group_zone_unavailable", labels, u8::from(*unavailable).to_string()));
        }
    }
    for (group, h) in counts.healing.iter().flatten() {
        let labels = format!("{dir},group=\"{}\"", escape(group));
        new.push(("infrakit_tf_group_members_unhealthy", labels.clone(), h.unhealthy.to_string()));
        new.push(("infrakit_tf_group_repairs", labels.clone(), h.repaired.to_string()));
        new.push(("infrakit_tf_group_repairs_halted", labels, u8::from(h.halted).to_string()));
    }
    if let Some(drift) = counts.drift {
        new.push(("infrakit_tf_drift_resources", dir.to_string(), drift.to_string()));
    }
    if let Some(strays) = counts.strays {
        new.push(("infrakit_tf_strays", dir.to_string(), strays.to_string()));
    }
    new
}

/// Whether an old sample (`family`, `labels`) is replaced by this run: a series of its
/// command that it wrote anew, or one of the directory's that it measured (all of them, so
/// that a group or status that is gone goes too).
fn replaced(run: &Run<'_>, new: &[(&str, String, String)], dir: &str, cmd: &str, family: &str, labels: &str) -> bool {
    let counts = &run.counts;
    let per_command = FAMILIES.iter().any(|f| f.0 == family && f.2);
    let ours = labels.starts_with(&format!("{dir},")) || labels == dir;
    match family {
        _ if per_command => labels == cmd && new.iter().any(|(f, _, _)| *f == family),
        "infrakit_tf_instances" => ours && run.instances.is_some(),
        "infrakit_tf_group_members_outdated" => ours && counts.outdated.is_some(),
        "infrakit_tf_group_rollout" | "infrakit_tf_group_rollout_replaced" => ours && counts.rollouts.is_some(),
        "infrakit_tf_group_zone_members" | "infrakit_tf_group_zone_unavailable" => ours && counts.zones.is_some(),
        "infrakit_tf_group_members_unhealthy" | "infrakit_tf_group_repairs" | "infrakit_tf_group_repairs_halted" => {
            ours && counts.healing.is_some()
        }
        "infrakit_tf_drift_resources" => ours && counts.drift.is_some(),
        "infrakit_tf_strays" => ours && counts.strays.is_some(),
        _ => false,
    }
}

/// A sample line as this module writes them: family, labels (between the braces), value.
/// Anything else (a line broken by hand, another tool's) is dropped, so that one bad line
/// cannot make the collector refuse the file for good.
fn sample(line: &str) -> Option<(&str, String, &str)> {
    static OURS: OnceLock<Regex> = OnceLock::new();
    let ours = OURS.get_or_init(|| {
        let value = r#""(?:[^"\\\n]|\\["\\n])*""#;
        Regex::new(&format!(
            r"^(infrakit_tf_[a-z_]+)\{{(directory={value}(?:,[a-z_]+={value})*)\}} (-?[0-9]+(?:\.[0-9]+)?)$"
        ))
        .expect("the sample pattern compiles")
    });
    let c = ours.captures(line)?;
    let (family, labels, value) = (c.get(1)?.as_str(), c.get(2)?.as_str(), c.get(3)?.as_str());
    Some((family, labels.to_string(), value))
}

/// A label value, escaped as the exposition format asks.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A float as Prometheus reads it, to the millisecond.
fn number(x: f64) -> String {
    format!("{:.3}", x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<'a>(command: &'a str, code: u8) -> Run<'a> {
        Run {
            command,
            directory: "/srv/web \"1\"".into(),
            exit_code: code,
            started: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            duration: Duration::from_millis(1500),
            instances: None,
            counts: Counts::default(),
        }
    }

    #[test]
    fn a_failed_run_keeps_the_last_success_and_other_commands() {
        let first = render("", &run("reconcile", 0));
        assert!(first.contains(
            "infrakit_tf_last_success_timestamp_seconds{directory=\"/srv/web \\\"1\\\"\",command=\"reconcile\"} 1800000001.500"
        ), "{first}");
        let second = render(&first, &run("provision", 0));
        let third = render(&second, &run("reconcile", 7));
        assert!(third.contains("command=\"reconcile\"} 1800000001.500"), "the last success stays: {third}");
        assert!(third.contains("infrakit_tf_last_exit_code{directory=\"/srv/web \\\"1\\\"\",command=\"reconcile\"} 7"));
        assert!(third.contains("infrakit_tf_last_exit_code{directory=\"/srv/web \\\"1\\\"\",command=\"provision\"} 0"));
        assert_eq!(third.matches("# TYPE infrakit_tf_last_exit_code gauge").count(), 1);
    }

    #[test]
    fn a_broken_or_foreign_line_is_dropped() {
        let good = render("", &run("reconcile", 0));
        let broken = format!(
            "{good}infrakit_tf_last_exit_code{{directory=\"/a}} 1\nnode_load1 3\ninfrakit_tf_last_exit_code{{directory=\"/b\",command=\"destroy\"}} 7\n\u{fffd}\n"
        );
        let next = render(&broken, &run("provision", 0));
        assert!(!next.contains("directory=\"/a}"), "{next}");
        assert!(!next.contains("node_load1"), "{next}");
        assert!(next.contains("infrakit_tf_last_exit_code{directory=\"/b\",command=\"destroy\"} 7"), "kept: {next}");
        assert!(next.contains("command=\"reconcile\"} 0"), "kept: {next}");
    }

    #[test]
    fn instances_are_replaced_whole_and_groups_kept_until_reconcile_says() {
        let mut r = run("reconcile", 0);
        r.counts = Counts { outdated: Some([("web".to_string(), 2)].into()), drift: Some(1), ..Counts::default() };
        r.instances = Some([(("web".to_string(), "created".to_string()), 3)].into());
        let first = render("", &r);
        let mut p = run("provision", 0);
        p.instances = Some([(("web".to_string(), "pending".to_string()), 1)].into());
        let second = render(&first, &p);
        assert!(!second.contains("status=\"created\""), "replaced whole: {second}");
        assert!(second.contains("status=\"pending\"} 1"));
        assert!(second.contains("infrakit_tf_group_members_outdated{directory=\"/srv/web \\\"1\\\"\",group=\"web\"} 2"));
        assert!(second.contains("infrakit_tf_drift_resources{directory=\"/srv/web \\\"1\\\"\"} 1"));
        assert!(!second.contains("unhealthy"), "no healing, no series: {second}");
    }

    #[test]
    fn healed_groups_count_their_unhealthy_members_and_repairs() {
        let mut r = run("reconcile", 18);
        let web = Healing { unhealthy: 3, repaired: 0, halted: true };
        r.counts = Counts { healing: Some([("web".to_string(), web)].into()), ..Counts::default() };
        let first = render("", &r);
        assert!(
            first.contains("infrakit_tf_group_members_unhealthy{directory=\"/srv/web \\\"1\\\"\",group=\"web\"} 3"),
            "{first}"
        );
        assert!(
            first.contains("infrakit_tf_group_repairs_halted{directory=\"/srv/web \\\"1\\\"\",group=\"web\"} 1"),
            "{first}"
        );
        let kept = render(&first, &run("provision", 0));
        assert!(kept.contains("infrakit_tf_group_repairs{directory=\"/srv/web \\\"1\\\"\",group=\"web\"} 0"), "{kept}");
        let mut next = run("reconcile", 0);
        next.counts = Counts { healing: Some(BTreeMap::new()), ..Counts::default() };
        assert!(!render(&kept, &next).contains("group_repairs"), "a group no longer healed loses its series");
    }
}
