//! Committing a change to the directory: the one place where file writes, promotion of the
//! queue, `init` and `apply` happen in order. Commands build a [`ChangeSet`] (pure) and hand it
//! here with a [`Mode`]:
//!
//! - `Queue` (`--no-apply`): write and remove files; new files stay queued as `.tf.json.new`.
//! - `Apply`: the same, then promote every queued file to `.tf.json` and run one
//!   `apply -auto-approve -input=false -json -refresh=false` (refreshing is reconcile's job, so
//!   one provision into a large directory does not refresh every machine).
//! - `DryRun`: nothing is written; terraform plans the would-be directory in a mirror (a
//!   temporary directory of symlinks to the real files, with the changed files written there).
//!
//! The file change itself is all or nothing (`journal`): written together, or not at all,
//! whatever kills the process. Before anything is written for an apply, the queued files it
//! would promote must be readable and the state must not be lost (`state_guard`), so a
//! refused apply changes nothing.
//!
//! After a failed apply the directory keeps what was asked for, promoted: the files describe
//! the wanted state and terraform's state holds what it managed to do (a failed create is
//! marked tainted). Re-running `terraform apply` through any infrakit-tf command, or
//! `reconcile`, converges; nothing is rolled back or deleted behind the user's back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::context::Ctx;
use crate::directory::Directory;
use crate::fsio::{self, Perms};
use crate::journal::{self, FileOp};
use crate::names::{self, Kind, Suffix};
use crate::progress::Progress;
use crate::terraform::{Report, Terraform};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Queue,
    Apply,
    DryRun,
}

impl Mode {
    pub fn from_flags(no_apply: bool, dry_run: bool) -> Self {
        match (dry_run, no_apply) {
            (true, _) => Mode::DryRun,
            (false, true) => Mode::Queue,
            (false, false) => Mode::Apply,
        }
    }
}

/// Files to write (name → document, mode) and files to remove.
#[derive(Debug, Default)]
pub struct ChangeSet {
    pub writes: Vec<(String, Value, Perms)>,
    pub removals: Vec<String>,
}

impl ChangeSet {
    /// Provider prefixes of what the next apply will see that the last `init` may not have:
    /// the files written and the queued files it promotes. For deciding whether `init` must run.
    fn providers(&self, dir: &Directory) -> BTreeSet<String> {
        let queued: Vec<Value> = dir
            .managed()
            .filter(|(_, _, _, suffix)| *suffix == Suffix::Queued)
            .filter_map(|(name, ..)| dir.read_doc(name).ok())
            .collect();
        providers_of(self.writes.iter().map(|(_, doc, _)| doc).chain(&queued))
    }
}

/// Provider prefixes (`aws` of `aws_instance`) of the resource types the documents declare.
pub fn providers_of<'a>(docs: impl IntoIterator<Item = &'a Value>) -> BTreeSet<String> {
    docs.into_iter()
        .filter_map(|doc| doc.get("resource")?.as_object())
        .flat_map(|types| types.keys())
        .filter_map(|t| t.split('_').next())
        .filter(|p| *p != "terraform")
        .map(str::to_string)
        .collect()
}

#[derive(Debug, Serialize)]
pub struct FileChange {
    pub name: String,
    /// `created`, `updated`, `unchanged` or `removed` (`would ...` is not used: the report's
    /// `dry_run` says so).
    pub action: &'static str,
}

/// What terraform did (or, for a dry run, plans to do).
#[derive(Debug, Default, Serialize)]
pub struct TfSummary {
    pub added: u64,
    pub changed: u64,
    pub destroyed: u64,
    pub elapsed_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlannedChange {
    pub address: String,
    pub action: String,
}

impl PlannedChange {
    pub fn list(changes: &[(String, String)]) -> Vec<PlannedChange> {
        changes.iter().map(|(a, c)| PlannedChange { address: a.clone(), action: c.clone() }).collect()
    }
}

#[derive(Debug, Default, Serialize)]
pub struct Outcome {
    pub files: Vec<FileChange>,
    /// Whether terraform applied the change.
    pub applied: bool,
    pub dry_run: bool,
    /// Present when terraform ran (apply or dry-run plan).
    pub terraform: Option<TfSummary>,
    /// A dry run's planned changes, `{address, action}`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub planned: Vec<PlannedChange>,
    /// The error, in the JSON report, when terraform failed after the files were written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Commits `changes`. `Err` means nothing was applied; an apply that failed after the files
/// were written comes back as `(outcome, Some(error))` so the command can still report what is
/// in the directory.
pub fn commit(ctx: &Ctx, dir: &Directory, changes: ChangeSet, mode: Mode) -> Result<(Outcome, Option<anyhow::Error>)> {
    let mut outcome = Outcome { dry_run: mode == Mode::DryRun, ..Outcome::default() };
    if mode == Mode::DryRun {
        outcome.files = preview_files(dir, &changes)?;
        let tf = ctx.terraform(dir)?;
        let started = Instant::now();
        let report = plan_mirror(ctx, dir, &tf, &changes, false)?;
        outcome.terraform = Some(summary(report.planned.unwrap_or_default(), started));
        outcome.planned = PlannedChange::list(&report.changes);
        return Ok((outcome, None));
    }
    // Everything that can refuse the apply comes before the first write: a missing terraform,
    // a queued file that would break every apply, a lost state. Refused, nothing changes.
    let tf = if mode == Mode::Apply { Some(ctx.terraform(dir)?) } else { None };
    let providers = match tf {
        Some(_) => {
            let queued = preflight(dir, &changes)?;
            providers_of(changes.writes.iter().map(|(_, doc, _)| doc).chain(&queued))
        }
        None => BTreeSet::new(),
    };
    let (ops, files) = file_ops(dir, changes)?;
    journal::commit(dir.path(), &ops)?;
    for f in &files {
        ctx.printer.detail(&format!("{} {}", f.action, f.name));
    }
    outcome.files = files;
    let Some(tf) = tf else { return Ok((outcome, None)) };
    promote(ctx, dir.path())?;
    settle_imports(dir.path())?;
    // The queued files written above are live now: report the names they have.
    for f in outcome.files.iter_mut().filter(|f| f.action != "removed") {
        if let Some(base) = f.name.strip_suffix(names::QUEUED) {
            f.name = format!("{base}{}", names::LIVE);
        }
    }
    let result = (|| -> Result<TfSummary> {
        init_if_needed(ctx, dir.path(), &tf, &providers)?;
        let started = Instant::now();
        let mut progress = Progress::new(ctx.printer.quiet(), ctx.printer.verbose());
        ctx.printer.detail(&format!("running {}", tf.display(APPLY)));
        let report = tf.stream(APPLY, &mut |e| progress.on_event(e));
        progress.finish();
        let report = report?;
        Ok(summary(report.applied.unwrap_or_default(), started))
    })();
    match result {
        Ok(s) => {
            // Every import block has been carried out.
            dir.remove(names::IMPORT_FILE)?;
            ctx.printer.status(&format!(
                "applied: {} added, {} changed, {} destroyed in {:.2}s",
                s.added, s.changed, s.destroyed, s.elapsed_seconds
            ));
            outcome.applied = true;
            outcome.terraform = Some(s);
            Ok((outcome, None))
        }
        Err(e) => {
            outcome.error = Some(format!("{e:#}"));
            Ok((outcome, Some(e)))
        }
    }
}

/// The checks an apply must pass before anything is written: every queued file it would
/// promote (those `changes` does not replace) is a readable document, and the state is not
/// lost (`state_guard`). Returns those queued documents (for `init`'s provider check).
pub fn preflight(dir: &Directory, changes: &ChangeSet) -> Result<Vec<Value>> {
    let replaced: BTreeSet<&str> =
        changes.writes.iter().map(|(n, ..)| n.as_str()).chain(changes.removals.iter().map(String::as_str)).collect();
    let mut queued = Vec::new();
    for (name, ..) in dir.managed().filter(|(n, _, _, s)| *s == Suffix::Queued && !replaced.contains(n)) {
        let readable = dir.read_doc(name).and_then(|doc| {
            if doc.is_object() {
                Ok(doc)
            } else {
                Err(anyhow::anyhow!("it is not a JSON object"))
            }
        });
        match readable {
            Ok(doc) => queued.push(doc),
            Err(e) => {
                return Err(crate::exit::invalid(format!(
                    "queued file `{name}` cannot be applied ({e:#}): promoting it would make every apply fail"
                ))
                .hint("fix it, or remove it (it was never applied), then re-run")
                .into())
            }
        }
    }
    crate::state_guard::check(dir)?;
    Ok(queued)
}

/// The file operations of `changes` (unchanged documents left out) and what each does. A
/// change that removes instance files raises the ID record past them, in the same all or
/// nothing change, so that their IDs (whose machines may still be in state) are never reused.
fn file_ops(dir: &Directory, changes: ChangeSet) -> Result<(Vec<FileOp>, Vec<FileChange>)> {
    // Each file is read once, and all before any write: one that cannot be replaced (a link,
    // not JSON) leaves all as it was.
    let existing: Vec<Option<Value>> =
        changes.writes.iter().map(|(name, ..)| dir.replaceable(name)).collect::<Result<_>>()?;
    let mut ops = Vec::new();
    let mut files = Vec::new();
    for ((name, doc, file_mode), old) in changes.writes.into_iter().zip(existing) {
        let action = if old.as_ref() == Some(&doc) {
            "unchanged"
        } else {
            ops.push(FileOp { name: name.clone(), after: Some((crate::tfconfig::to_bytes(&doc), file_mode)) });
            if dir.has(&name) {
                "updated"
            } else {
                "created"
            }
        };
        files.push(FileChange { name, action });
    }
    let mut highest_removed = None;
    for name in changes.removals.into_iter().filter(|n| dir.has(n)) {
        if let Some(Kind::Instance(id)) = names::split_file_name(&name).and_then(|(b, _)| names::classify(b)) {
            highest_removed = highest_removed.max(Some(id.number()));
        }
        ops.push(FileOp { name: name.clone(), after: None });
        files.push(FileChange { name, action: "removed" });
    }
    if let Some(n) = highest_removed.filter(|n| !matches!(dir.last_issued(), Some(last) if last >= *n)) {
        ops.push(FileOp {
            name: crate::directory::LAST_ID.to_string(),
            after: Some((format!("{n}\n").into_bytes(), Perms::Public)),
        });
    }
    Ok((ops, files))
}

const APPLY: &[&str] = &["apply", "-auto-approve", "-input=false", "-json", "-refresh=false"];

fn summary(c: crate::tfoutput::Changes, started: Instant) -> TfSummary {
    TfSummary {
        added: c.add,
        changed: c.change,
        destroyed: c.remove,
        elapsed_seconds: round2(started.elapsed().as_secs_f64()),
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Renames every queued `.tf.json.new` to `.tf.json` (atomically replacing a live twin).
pub fn promote(ctx: &Ctx, dir: &Path) -> Result<usize> {
    let listing = Directory::open(dir)?;
    let mut promoted = 0;
    for (name, base, _, suffix) in listing.managed() {
        if suffix == Suffix::Queued {
            fsio::rename(&dir.join(name), &dir.join(format!("{base}{}", names::LIVE)))?;
            ctx.printer.detail(&format!("promoted {name}"));
            promoted += 1;
        }
    }
    Ok(promoted)
}

/// Settles a leftover import-blocks file ([`names::IMPORT_FILE`]) in `path` before terraform
/// runs there: one left by an import that was interrupted, or whose failure could not be
/// undone. A block whose target a managed file declares is kept, so that the next apply adopts
/// that object rather than create a second one (a block whose object is already in state does
/// nothing). A block whose target is gone is dropped: terraform refuses it. Returns how many
/// blocks are kept.
pub fn settle_imports(path: &Path) -> Result<usize> {
    let file = path.join(names::IMPORT_FILE);
    let Ok(bytes) = std::fs::read(&file) else { return Ok(0) };
    let blocks: Vec<Value> = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|doc| doc.get("import")?.as_array().cloned())
        .unwrap_or_default();
    let listing = Directory::open(path)?;
    let mut declared = BTreeSet::new();
    for (name, ..) in listing.managed() {
        let Ok(doc) = listing.read_doc(name) else { continue };
        for (rtype, by_name) in doc.get("resource").and_then(Value::as_object).into_iter().flatten() {
            declared.extend(by_name.as_object().into_iter().flat_map(|m| m.keys()).map(|n| format!("{rtype}.{n}")));
        }
    }
    let total = blocks.len();
    let kept: Vec<Value> = blocks
        .into_iter()
        .filter(|b| b.get("to").and_then(Value::as_str).is_some_and(|to| declared.contains(to)))
        .collect();
    if kept.is_empty() {
        fsio::remove(&file)?;
    } else if kept.len() < total {
        let doc = serde_json::json!({ "import": kept });
        fsio::write_atomic(&file, &crate::tfconfig::to_bytes(&doc), Perms::Public)?;
    }
    Ok(kept.len())
}

/// What `init` last saw, kept in `.terraform/infrakit-tf-init.json`.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct InitMarker {
    /// Name, size and mtime of each of the user's configuration files.
    config: BTreeMap<String, (u64, u64)>,
    /// Provider prefixes of the resource types infrakit-tf has written.
    providers: BTreeSet<String>,
}

const MARKER: &str = ".terraform/infrakit-tf-init.json";
const LOCK_FILE: &str = ".terraform.lock.hcl";

/// Runs `init` on first use, when the user's configuration changed, or when a new provider
/// prefix appears; not on every command.
pub fn init_if_needed(ctx: &Ctx, dir: &Path, tf: &Terraform, providers: &BTreeSet<String>) -> Result<()> {
    let marker_path = dir.join(MARKER);
    let old = read_marker(dir);
    if !init_needed(dir, old.as_ref(), providers)? {
        return Ok(());
    }
    ctx.printer.status("running terraform init (first use, new provider or changed configuration)");
    tf.init()?;
    let mut all = old.map(|m| m.providers).unwrap_or_default();
    all.extend(providers.iter().cloned());
    fsio::create_dir_all(&dir.join(".terraform"))?;
    let marker = InitMarker { config: user_config(dir)?, providers: all };
    fsio::write_atomic(&marker_path, &serde_json::to_vec_pretty(&marker)?, Perms::Public)?;
    Ok(())
}

fn read_marker(dir: &Path) -> Option<InitMarker> {
    std::fs::read(dir.join(MARKER)).ok().and_then(|b| serde_json::from_slice(&b).ok())
}

fn init_needed(dir: &Path, marker: Option<&InitMarker>, providers: &BTreeSet<String>) -> Result<bool> {
    Ok(match marker {
        None => true,
        Some(m) => m.config != user_config(dir)? || !providers.is_subset(&m.providers),
    })
}

fn user_config(dir: &Path) -> Result<BTreeMap<String, (u64, u64)>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("failed to list `{}`", dir.display()))? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        let is_config =
            [".tf", ".tf.json", ".tofu", ".tofu.json"].iter().any(|s| name.ends_with(s)) || name == LOCK_FILE;
        let managed = names::split_file_name(&name).and_then(|(b, _)| names::classify(b)).is_some();
        if is_config && !managed && name != names::IMPORT_FILE {
            let meta = entry.metadata()?;
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            out.insert(name, (meta.len(), mtime));
        }
    }
    Ok(out)
}

/// What writing `changes` would do to each file, without writing.
fn preview_files(dir: &Directory, changes: &ChangeSet) -> Result<Vec<FileChange>> {
    let mut files = Vec::new();
    for (name, doc, _) in &changes.writes {
        let action = match std::fs::read(dir.path().join(name)) {
            Ok(old) if old == crate::tfconfig::to_bytes(doc) => "unchanged",
            Ok(_) => "updated",
            Err(_) => "created",
        };
        files.push(FileChange { name: name.clone(), action });
    }
    files.extend(
        changes.removals.iter().filter(|n| dir.has(n)).map(|n| FileChange { name: n.clone(), action: "removed" }),
    );
    Ok(files)
}

/// Plans the directory as it would be after `changes` and promotion, in a [`mirror`]. Nothing
/// in the real directory is written (`-lock=false`; a plan does not save its refresh).
pub fn plan_mirror(ctx: &Ctx, dir: &Directory, tf: &Terraform, changes: &ChangeSet, refresh: bool) -> Result<Report> {
    let mirror = mirror(dir, changes)?;
    plan_in(ctx, &tf.in_dir(mirror.path()), dir, changes, refresh, &[])
}

/// Runs `plan -json -lock=false -detailed-exitcode` with `tf` in a [`mirror`] of `dir` after
/// `changes`, plus `extra` arguments. When the real directory would need `init` first (see
/// [`init_if_needed`]), `init` runs in the mirror: the lock file is copied there first, so
/// your `.terraform.lock.hcl` is left alone (providers it installs go to the shared
/// `.terraform`, which is a cache); the marker is not updated, so the next apply runs `init`.
pub fn plan_in(
    ctx: &Ctx,
    tf: &Terraform,
    dir: &Directory,
    changes: &ChangeSet,
    refresh: bool,
    extra: &[&str],
) -> Result<Report> {
    if init_needed(dir.path(), read_marker(dir.path()).as_ref(), &changes.providers(dir))? {
        // `init` installs providers into the real `.terraform` (the mirror links it): that is
        // a write, so it happens under the directory lock, like every other.
        let _lock = if crate::lock::held() { None } else { Some(ctx.lock()?) };
        let lock = tf.dir().join(LOCK_FILE);
        if lock.is_symlink() {
            let bytes = std::fs::read(&lock).with_context(|| format!("failed to read `{LOCK_FILE}`"))?;
            fsio::remove(&lock)?; // the link, not your file
            fsio::write_atomic(&lock, &bytes, Perms::Public)?;
        }
        ctx.printer.detail("running terraform init in the mirror");
        tf.init()?;
    }
    let mut progress = Progress::new(ctx.printer.quiet(), ctx.printer.verbose());
    let refresh = if refresh { "-refresh=true" } else { "-refresh=false" };
    let mut args = vec!["plan", "-json", "-input=false", refresh, "-lock=false", "-detailed-exitcode"];
    args.extend_from_slice(extra);
    let report = tf.stream(&args, &mut |e| progress.on_event(e));
    progress.finish();
    report
}

/// A temporary directory that looks like `dir` after `changes` and promotion: symlinks to every
/// other entry of the real directory (your config, `.terraform`, the state), managed files
/// copied in their promoted form, changed files written. Terraform plans there without
/// writing anything in `dir`.
pub fn mirror(dir: &Directory, changes: &ChangeSet) -> Result<tempfile::TempDir> {
    let mirror = tempfile::Builder::new()
        .prefix("infrakit-tf-mirror-")
        .tempdir()
        .context("failed to create a temporary directory")?;
    let m = mirror.path();
    let written: BTreeMap<&str, &Value> = changes.writes.iter().map(|(n, d, _)| (n.as_str(), d)).collect();
    for name in dir.names() {
        if changes.removals.iter().any(|r| r == name) || written.contains_key(name) {
            continue;
        }
        let src = dir.path().join(name);
        match names::split_file_name(name).filter(|(b, _)| names::classify(b).is_some()) {
            None => fsio::symlink(&src, &m.join(name))?,
            Some((base, _)) => {
                // A queued twin wins over the live file, as promotion would have it.
                if name.ends_with(names::QUEUED) || !dir.has(&format!("{base}{}", names::QUEUED)) {
                    let live = m.join(format!("{base}{}", names::LIVE));
                    fsio::copy(&src, &live)?;
                }
            }
        }
    }
    for (name, doc) in written {
        let base = names::split_file_name(name).map_or(name, |(b, _)| b);
        fsio::write_atomic(&m.join(format!("{base}{}", names::LIVE)), &crate::tfconfig::to_bytes(doc), Perms::Private)?;
    }
    settle_imports(m)?;
    Ok(mirror)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(dir: &Path, name: &str, doc: Value) {
        fsio::write_atomic(&dir.join(name), &crate::tfconfig::to_bytes(&doc), Perms::Public).unwrap();
    }

    fn blocks(dir: &Path) -> Option<Value> {
        std::fs::read(dir.join(names::IMPORT_FILE)).ok().map(|b| serde_json::from_slice(&b).unwrap())
    }

    #[test]
    fn settling_keeps_the_import_blocks_of_declared_resources_only() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let to = |addr: &str| serde_json::json!({"to": addr, "id": "x"});
        put(d, "instance-1.tf.json", serde_json::json!({"resource": {"aws_instance": {"instance-1": {}}}}));
        put(d, "main.tf.json", serde_json::json!({"resource": {"aws_vpc": {"net": {}}}}));
        put(
            d,
            names::IMPORT_FILE,
            serde_json::json!({"import": [to("aws_instance.instance-1"), to("aws_instance.instance-2"), to("aws_vpc.net")]}),
        );
        assert_eq!(settle_imports(d).unwrap(), 1, "only managed files declare what an import adopts");
        assert_eq!(blocks(d), Some(serde_json::json!({"import": [to("aws_instance.instance-1")]})));
        assert_eq!(settle_imports(d).unwrap(), 1, "settling again changes nothing");

        fsio::remove(&d.join("instance-1.tf.json")).unwrap();
        assert_eq!(settle_imports(d).unwrap(), 0);
        assert_eq!(blocks(d), None, "no block left: the file goes");
        assert_eq!(settle_imports(d).unwrap(), 0, "no file: nothing to do");
    }
}
