//! The subcommands: a module each (`reconcile/` a directory of its own), and the parts several
//! of them share: `instances.rs` (new instances' files), `drain.rs` and `heal.rs` (a member
//! drained before it goes, and the health checks and repairs of `reconcile`). Each `run`
//! orchestrates: it reads the spec, opens the
//! `Workspace` (which locks and lists the directory), builds a `ChangeSet` with the pure core
//! (expansion, names), decides, hands the change to the workspace, and gives its report to the
//! output layer. It spawns nothing, writes no file and prints nothing itself.

pub(crate) mod describe;
pub(crate) mod destroy;
pub(crate) mod drain;
pub(crate) mod heal;
pub(crate) mod import;
pub(crate) mod instances;
pub(crate) mod label;
pub(crate) mod migrate;
pub(crate) mod provision;
pub(crate) mod reconcile;
pub(crate) mod sweep_orphans;
pub(crate) mod validate;

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};

use crate::context::Ctx;
use crate::directory::Directory;
use crate::exit::{invalid, not_found};
use crate::expand::Slots;
use crate::group::{self, GroupSpec};
use crate::names::LIVE;
use crate::output::Printer;
use crate::profile::Profiles;
use crate::spec::{self, Problem, Spec};
use crate::text::short;

/// How a spec is named in reports: its path, or `<stdin>` for `-`.
pub(crate) fn spec_name(path: &Path) -> String {
    if path == Path::new("-") {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    }
}

/// "spec file ... does not exist", saying where a relative path was looked for: the current
/// directory, which a user who gave `--dir` may not expect.
fn missing_spec(path: &Path, label: &str) -> String {
    match std::env::current_dir() {
        Ok(cwd) if path.is_relative() => format!(
            "spec file {label} does not exist in the current directory `{}` (a spec path is not relative to --dir)",
            short(&cwd.display().to_string())
        ),
        _ => format!("spec file {label} does not exist"),
    }
}

/// Reads a spec from a path or `-` (stdin). Returns (how to name it in messages, text).
pub(crate) fn read_spec(path: &Path) -> Result<(String, String)> {
    let (label, bytes) = if path == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).context("failed to read the spec from stdin")?;
        (spec_name(path), bytes)
    } else {
        let label = format!("`{}`", short(&spec_name(path)));
        if path.is_dir() {
            return Err(invalid(format!("spec {label} is a directory, not a file")).into());
        }
        match std::fs::read(path) {
            Ok(bytes) => (label, bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(not_found(missing_spec(path, &label)).into())
            }
            Err(e) => return Err(e).with_context(|| format!("failed to read spec {label}")),
        }
    };
    match String::from_utf8(bytes) {
        Ok(text) => Ok((label, text)),
        Err(_) => Err(invalid(format!("spec {label} is not UTF-8 text")).into()),
    }
}

/// Parses a spec; problems become one error (one problem) or a list on stderr and an error.
/// A group spec is read as its members' instance spec (see [`parse_spec`]).
pub(crate) fn load_spec(path: &Path, profiles: &Profiles, printer: &Printer) -> Result<(Spec, Option<GroupSpec>)> {
    let (label, text) = read_spec(path)?;
    parse_spec(&text, profiles).map_err(|problems| problems_error(&label, &problems, printer))
}

/// Parses spec text: an instance spec, or an InfraKit group spec, which gives its members'
/// instance spec (tagged with the group and its config hash) and the group. Every problem of
/// either, located in the document given.
pub(crate) fn parse_spec(text: &str, profiles: &Profiles) -> Result<(Spec, Option<GroupSpec>), Vec<Problem>> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(doc) if group::is_group_spec(&doc) => {
            let group = group::parse(&doc)?;
            let members = group.instance_spec(None).to_string();
            let spec = spec::parse(&members, profiles).map_err(|problems| {
                // The members' Properties are the group's `Instance.Properties`.
                let at = |p: Problem| Problem {
                    pointer: match p.pointer.strip_prefix("/Properties") {
                        Some(rest) => format!("/Properties/Instance/Properties{rest}"),
                        None => p.pointer,
                    },
                    message: p.message,
                };
                problems.into_iter().map(at).collect::<Vec<_>>()
            })?;
            Ok((spec, Some(group)))
        }
        _ => spec::parse(text, profiles).map(|spec| (spec, None)),
    }
}

/// The directory's dedicated slots, for slot choice. An instance attached to a slot whose file
/// is gone keeps the slot (it may still hold the volume in Terraform's state); the directory is
/// inconsistent, and the user is told.
pub(crate) fn read_slots(
    dir: &Directory,
    instances: &[crate::directory::Instance],
    printer: &Printer,
) -> Result<Slots> {
    let slots = dir.slots(instances)?;
    for (id, base) in &slots.missing {
        printer.warn(&format!(
            "{id} is attached to `{base}{LIVE}`, which is missing (live and queued): its slot is not reused; restore the file, or destroy {id}"
        ));
    }
    Ok(slots)
}

pub(crate) fn problems_error(label: &str, problems: &[Problem], printer: &Printer) -> anyhow::Error {
    match problems {
        [one] => invalid(format!("spec {label}: {one}")).into(),
        many => {
            for p in many {
                printer.problem(&format!("spec {label}: {p}"));
            }
            invalid(format!("spec {label} has {} problems (listed above)", many.len())).into()
        }
    }
}

/// The group specs a command works on: `given` (`--group`), else those infrakit-tf.json lists
/// (`ctx.config()`, relative to `dir`). Every spec is read and checked, each with its members'
/// instance spec; two specs of one group ID are refused.
pub(crate) fn load_groups(
    ctx: &Ctx,
    given: &[std::path::PathBuf],
    dir: &Path,
    profiles: &Profiles,
) -> Result<Vec<(GroupSpec, Spec)>> {
    let configured = given.is_empty();
    let paths: Vec<std::path::PathBuf> =
        if configured { ctx.config()?.groups.iter().map(|p| dir.join(p)).collect() } else { given.to_vec() };
    let mut groups: Vec<(GroupSpec, Spec)> = Vec::new();
    for path in paths {
        // A spec infrakit-tf.json lists is a file of the directory's, read by every cron run:
        // only a regular file is (one given on the command line may be a pipe of yours).
        if configured && std::fs::metadata(&path).is_ok_and(|m| !m.is_file()) {
            return Err(invalid(format!(
                "group spec `{}` (listed in infrakit-tf.json) is not a regular file: it is never read",
                path.display()
            ))
            .hint("replace it with the spec's file")
            .into());
        }
        let (label, text) = read_spec(&path)?;
        let (members, group) = parse_spec(&text, profiles).map_err(|p| problems_error(&label, &p, &ctx.printer))?;
        let Some(spec) = group else {
            return Err(invalid(format!("spec {label} is an instance spec, not a group spec"))
                .hint("a group spec has `ID` and `Properties` with `Allocation`, `Instance` and `Flavor`")
                .into());
        };
        if groups.iter().any(|(g, _)| g.id == spec.id) {
            return Err(invalid(format!("group `{}` is given twice (again in {label})", spec.id)).into());
        }
        groups.push((spec, members));
    }
    Ok(groups)
}

/// Writes the metrics of a run that ended with `code` (`metrics`), where a metrics file is
/// configured: after every command that writes and every reconcile, failed or not. The
/// instances are counted as `describe` would show them now; when they cannot be (the store is
/// down, the state unreadable, the run interrupted), their series keep the last values. Never
/// fails the run: a warning says what went wrong.
pub(crate) fn record_metrics(ctx: &Ctx, command: &str, code: u8, started: std::time::SystemTime) {
    let path = match ctx.metrics_file() {
        Ok(Some(path)) => path,
        Ok(None) => return,
        Err(e) => return ctx.printer.warn(&format!("no metrics written: {e:#}")),
    };
    let duration = started.elapsed().unwrap_or_default();
    let counts = crate::metrics::taken();
    // After an interrupt, nothing more is run (not even `terraform show`): the counts stay.
    let instances = match (!crate::signals::stop_requested()).then(|| describe::census(ctx)) {
        Some(Ok(counts)) => Some(counts),
        Some(Err(e)) => {
            ctx.printer.detail(&format!("the metrics keep the last instance counts: {e:#}"));
            None
        }
        None => None,
    };
    let directory = std::fs::canonicalize(&ctx.dir)
        .or_else(|_| std::path::absolute(&ctx.dir))
        .unwrap_or_else(|_| ctx.dir.clone())
        .display()
        .to_string();
    let run = crate::metrics::Run { command, directory, exit_code: code, started, duration, instances, counts };
    let written = crate::lock::turn_at(&path, crate::lock::Wait::new(ctx.lock_timeout), &ctx.printer)
        .and_then(|_turn| crate::metrics::write(&path, &run));
    if let Err(e) = written {
        ctx.printer.warn(&format!("metrics not written to `{}`: {e:#}", path.display()));
    }
}
