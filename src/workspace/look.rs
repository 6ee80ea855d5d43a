//! What a reconcile reads from the cloud, at a cost that does not grow with the group (the
//! decisions are `crate::look`'s; this is running them). One targeted plan in a mirror
//! holding only the files it needs, with the listing data sources: it lists every look-up
//! type's machines (one read per type and group), refreshes the rotating slice and every
//! resource no listing shows, and saves nothing. A machine a listing does not show is then
//! refreshed alone, to confirm, before anything may decide it is gone.
//!
//! The whole configuration is planned as well (without refreshing: no cloud read but your data
//! sources) unless the configuration and the state are exactly those of a whole plan that
//! found nothing to do ([`Workspace::planned_before`]): a file written, a state saved, your
//! `main.tf` edited, and the next run plans everything again.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use super::{mirror, ChangeSet, FileWrite, Workspace};
use crate::fsio::{self, Perms};
use crate::look::{self, Presence, RefreshRecord, Slice};
use crate::names;
use crate::terraform::{Plan, PlanOptions};
use crate::tfoutput::{Action, Changes, ResourceChange};

/// The listing data sources, written in a mirror only.
const LISTING_FILE: &str = "infrakit-tf-listing.tf.json";

/// This host's mark of the last whole plan that found nothing to do: the digest of the
/// configuration and the state it planned. Local: another host's files (its `main.tf`) may
/// differ.
const PLANNED: &str = ".infrakit-tf-planned";

/// What the look found.
pub(crate) struct Look {
    /// Drift (the slice, what is refreshed every run, the confirmation), and what the targeted
    /// plan would change.
    pub(crate) plan: Plan,
    /// Listed resources the listings did not show: refreshed to confirm.
    pub(crate) unlisted: Vec<String>,
    /// Listed resources their listing showed.
    pub(crate) shown: BTreeSet<String>,
    /// Every address a refresh of this look read.
    pub(crate) read: BTreeSet<String>,
    /// What could not be read (a read throttled past its retries, a read that failed), and
    /// why: kept as it is, unconfirmed; the next run reads it again.
    pub(crate) unread: Vec<(String, String)>,
    /// Where the slice stopped; `None`: the slice was not read (a read failed), and the next
    /// run reads it again.
    pub(crate) cursor: Option<String>,
    /// What the listings showed that the state does not record (type, ID): strays, perhaps.
    pub(crate) unknown: Vec<(String, String)>,
}

/// A listing that could not be read: which (`what`), whether the cloud's error was transient
/// (a throttled API: a full refresh would be throttled too), and terraform's error.
pub(crate) struct ListingFailed {
    pub(crate) what: String,
    pub(crate) transient: bool,
    pub(crate) error: anyhow::Error,
}

/// What the look's plan found: the plan, the listings' and reads' values by address, and the
/// machines it could not read, each with why.
type Listed = (Plan, BTreeMap<String, Value>, Vec<(String, String)>);

impl Workspace<'_> {
    /// Terraform's state document, read without a terraform run where it can be (the local
    /// state file, the store's state row), else `terraform state pull`. Empty: no state yet.
    pub(super) fn state_document(&mut self) -> Result<String> {
        if let Some(store) = self.role.store() {
            return Ok(store.state_document()?.unwrap_or_default());
        }
        if let Some(path) = crate::state_guard::local_state_path(self.dir.path()) {
            return match crate::fsio::read_to_string(&path) {
                Ok(text) => Ok(text),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
                Err(e) => Err(anyhow::Error::new(e).context(format!("failed to read `{}`", path.display()))),
            };
        }
        self.terraform()?.state_pull()
    }

    /// What this run lists and refreshes (`look::plan`), from the live files, the state
    /// document (returned too) and the refresh record (a record that cannot be read starts the
    /// slice again). `None` when nothing can be listed (`look::may_list`; a file that cannot
    /// be read), or when your configuration names a path out of the directory (`../modules`):
    /// the look plans in a mirror elsewhere, where that path leads nowhere. The state is not
    /// read then.
    pub(crate) fn presence(&mut self, slice: Slice) -> Result<Option<(String, Presence)>> {
        let profiles = self.ctx.profiles()?;
        if self.yours().iter().any(|(_, text)| text.contains("\"../") || text.contains("/../")) {
            self.ctx
                .printer
                .detail("your configuration names a path out of the directory: this run refreshes everything");
            return Ok(None);
        }
        let Some(files) = self.live_docs().filter(|files| look::may_list(files, &profiles)) else {
            return Ok(None);
        };
        let state = self.state_document()?;
        let recorded = if state.trim().is_empty() {
            Vec::new()
        } else {
            crate::tfoutput::raw_state_resources(&state).map_err(crate::exit::invalid)?
        };
        let record = self.dir.record::<RefreshRecord>().unwrap_or_else(|why| {
            self.ctx.printer.warn(&format!("{why}: the refresh slice starts again"));
            RefreshRecord::default()
        });
        let presence = look::plan(&files, &recorded, &profiles, record.cursor.as_deref(), slice);
        Ok(presence.lists().then_some((state, presence)))
    }

    /// Lists, refreshes the slice and what no listing shows, and confirms what the listings
    /// did not show (see the module doc). Writes nothing. A read that fails (throttled past
    /// its retries) never widens into more reads: what it was to read is `unread`, kept as it
    /// is; a listing that fails saying it matched nothing (`profile::EMPTY_ERRORS`, the type's
    /// `empty_errors`) listed nothing; one that fails otherwise is [`ListingFailed`].
    pub(crate) fn look(&self, presence: &Presence) -> Result<Result<Look, ListingFailed>> {
        let files = self.live_docs();
        let profiles = self.ctx.profiles()?;
        let refreshed = presence.refreshed();
        let (looked, reads, mut unread) = match self.list_and_read(presence, files.as_deref(), &profiles, &refreshed)? {
            Ok(found) => found,
            Err(failed) => return Ok(Err(failed)),
        };
        let unlisted = presence.unlisted(&reads);
        for (data_source, n) in presence.blind(&unlisted) {
            self.ctx.printer.warn(&format!(
                "the look-up `{data_source}` listed none of the {n} machines it should show: each was refreshed to confirm it exists (does the data source take `*` in a tag's value? were the tags changed?)"
            ));
        }
        let mut read: BTreeSet<String> =
            if unread.is_empty() { refreshed.iter().cloned().collect() } else { BTreeSet::new() };
        let confirm: Vec<String> = unlisted.iter().filter(|a| !read.contains(*a)).cloned().collect();
        let confirmed = self.confirm(files.as_deref(), confirm, &mut read, &mut unread)?;
        let slice_read = !unread.iter().any(|(a, _)| presence.slice.contains(a));
        Ok(Ok(Look {
            plan: merge(None, looked, confirmed),
            shown: presence.shown(&unlisted),
            unlisted,
            read,
            unread,
            cursor: if slice_read { presence.cursor.clone() } else { None },
            unknown: presence.unknown(&reads),
        }))
    }

    /// The look's listings and the slice's reads, in one targeted plan: a listing a data
    /// source answers "none" to (an error, for some) is taken for empty and the plan made
    /// again without it; reads that fail leave their machines unread (kept, unconfirmed) and
    /// the plan is made again without them. What the plan found, what it read, and what it
    /// could not read; or the listing that failed.
    fn list_and_read(
        &self,
        presence: &Presence,
        files: Option<&[(String, Value)]>,
        profiles: &crate::profile::Profiles,
        refreshed: &[String],
    ) -> Result<Result<Listed, ListingFailed>> {
        let mut empty: BTreeSet<usize> = BTreeSet::new();
        let mut unread: Vec<(String, String)> = Vec::new();
        loop {
            let listings: Vec<String> = (0..presence.listings.len())
                .filter(|i| !empty.contains(i))
                .map(|i| presence.listings[i].address(i))
                .collect();
            let reading = if unread.is_empty() { refreshed } else { &[] };
            let targets: Vec<String> = reading.iter().chain(&listings).cloned().collect();
            if targets.is_empty() {
                return Ok(Ok((Plan::default(), BTreeMap::new(), unread)));
            }
            // Every listing found empty: none to write (an empty `data` block is not valid).
            let listing = (!listings.is_empty()).then(|| {
                let (doc, _) = look::listing_document(&presence.listings, &empty);
                FileWrite { name: LISTING_FILE.into(), doc, perms: Perms::Private }
            });
            let e = match self.targeted_plan(files, &targets, listing) {
                Ok((plan, reads)) => return Ok(Ok((plan, reads, unread))),
                Err(e) if crate::exit::code_for(&e) == crate::exit::Code::TerraformFailed => e,
                Err(e) => return Err(e),
            };
            let tf = self.terraform()?;
            let errors = tf.last_errors();
            let mut failed_reads = false;
            let mut progress = false;
            for d in &errors {
                let text = format!("{}\n{}", d.summary, d.detail);
                let which = d.address.as_deref().filter(|a| a.starts_with("data.")).and_then(look::Listing::index_of);
                let transient = tf.is_transient(&text);
                match which.and_then(|i| Some((i, presence.listings.get(i)?))) {
                    Some((i, l))
                        if !transient && crate::lookup::says_empty(&text, &profiles.empty_errors(&l.rtype)) =>
                    {
                        progress |= empty.insert(i);
                    }
                    Some((_, l)) => {
                        let what = format!("the listing `{}` of the {} machines", l.data_source, l.rtype);
                        return Ok(Err(ListingFailed { what, transient, error: e }));
                    }
                    None if d.address.is_some() && unread.is_empty() => failed_reads = true,
                    None => {}
                }
            }
            if failed_reads {
                let why = format!("{e:#}");
                unread = reading.iter().map(|a| (a.clone(), why.clone())).collect();
                self.ctx.printer.warn(&format!(
                    "the look's reads failed ({why}): the {} machine(s) it was to read are kept as they are, unconfirmed; the next run reads them again (nothing more is read now)",
                    reading.len()
                ));
                progress = true;
            }
            if !progress {
                let what = "the look-ups' listings".to_string();
                let text = errors.iter().map(|d| format!("{}\n{}", d.summary, d.detail)).collect::<Vec<_>>().join("\n");
                return Ok(Err(ListingFailed { what, transient: tf.is_transient(&text), error: e }));
            }
        }
    }

    /// Refreshes `confirm` (machines the listings did not show) to see whether they exist,
    /// adding them to `read`; a throttled (or failed) confirmation keeps them, in `unread`:
    /// the next run reads them again. It never widens into a refresh of everything.
    fn confirm(
        &self,
        files: Option<&[(String, Value)]>,
        confirm: Vec<String>,
        read: &mut BTreeSet<String>,
        unread: &mut Vec<(String, String)>,
    ) -> Result<Option<Plan>> {
        let mut confirmed = None;
        if !confirm.is_empty() {
            self.ctx
                .printer
                .status(&format!("{} machine(s) the look-ups did not list: refreshing them to confirm", confirm.len()));
            match self.targeted_plan(files, &confirm, None) {
                Ok((plan, _)) => {
                    read.extend(confirm);
                    confirmed = Some(plan);
                }
                // A throttled (or failed) confirmation keeps the machines: the next run reads
                // them again. It never widens into a refresh of everything.
                Err(e) if crate::exit::code_for(&e) == crate::exit::Code::TerraformFailed => {
                    let why = format!("{e:#}");
                    self.ctx.printer.warn(&format!(
                        "the read that confirms {} failed ({why}): kept as they are, unconfirmed; the next run reads them again",
                        confirm.join(", ")
                    ));
                    unread.extend(confirm.into_iter().map(|a| (a, why.clone())));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(confirmed)
    }

    /// A refreshing plan of `targets` in a mirror holding the files they need (all of them
    /// when `files` could not all be read), with `listing` written there: what it found, and the
    /// data sources it read (when it lists).
    fn targeted_plan(
        &self,
        files: Option<&[(String, Value)]>,
        targets: &[String],
        listing: Option<FileWrite>,
    ) -> Result<(Plan, BTreeMap<String, Value>)> {
        // Your override files (`*_override.tf`) name managed resources by block: all files then.
        let yours = self.yours();
        let overrides = yours.iter().any(|(name, _)| {
            let base = name.strip_suffix(".json").unwrap_or(name).strip_suffix(".tf").unwrap_or(name);
            base == "override" || base.ends_with("_override")
        });
        let mentioned: Vec<String> = yours.iter().flat_map(|(_, text)| look::mentioned(text)).collect();
        let only = files.filter(|_| !overrides).and_then(|f| look::needed_files(f, targets, &mentioned));
        let lists = listing.is_some();
        let changes = ChangeSet::writing(listing.into_iter().collect());
        let mirror = mirror::build_with(&self.dir, &changes, only.as_ref())?;
        let saved = mirror.path().join(".infrakit-tf-look.plan");
        let options = PlanOptions { refresh: Some(true), lock: false, out: lists.then_some(saved.as_path()), targets };
        self.started_run();
        let plan = self.plan_in_mirror(mirror.path(), &changes, &[], options)?;
        let reads =
            if lists { self.terraform()?.in_dir(mirror.path()).show_plan_reads(&saved)? } else { BTreeMap::new() };
        Ok((plan, reads))
    }

    /// Your own configuration files (`*.tf`, `*.tf.json` that infrakit-tf does not manage),
    /// name and text: they are always in a targeted plan's configuration, so the managed files
    /// they refer to (`look::mentioned`) must be too.
    fn yours(&self) -> Vec<(String, String)> {
        self.dir
            .names()
            .filter(|n| (n.ends_with(".tf") || n.ends_with(".tf.json")) && !names::is_ours(n))
            .filter_map(|n| Some((n.to_string(), crate::fsio::read_to_string(self.dir.path().join(n)).ok()?)))
            .collect()
    }

    /// The live managed files and their documents; `None` when one cannot be read (a targeted
    /// plan then takes every file, and terraform says what is wrong).
    pub(super) fn live_docs(&self) -> Option<Vec<(String, Value)>> {
        self.dir
            .managed()
            .filter(|f| f.suffix == names::Suffix::Live)
            .map(|f| Some((f.name.to_string(), self.dir.read_doc(f.name).ok()?)))
            .collect()
    }

    /// The live managed files that can be read, and their documents (one that cannot is left
    /// out: terraform says what is wrong with it when it runs).
    pub(super) fn readable_live_docs(&self) -> Vec<(String, Value)> {
        self.dir
            .managed()
            .filter(|f| f.suffix == names::Suffix::Live)
            .filter_map(|f| Some((f.name.to_string(), self.dir.read_doc(f.name).ok()?)))
            .collect()
    }

    /// Whether `digest` (see [`Workspace::digest`]) is that of the last whole plan on this
    /// host that found nothing to do: then a whole plan without refreshing would find nothing
    /// either (what your data sources read aside: the slice sees that within its period).
    pub(crate) fn planned_before(&self, digest: &str) -> bool {
        crate::fsio::read_to_string(self.dir.path().join(PLANNED)).is_ok_and(|d| d.trim() == digest)
    }

    /// Marks `digest`, taken before a whole plan that found nothing to do, as planned (see
    /// [`Workspace::planned_before`]).
    pub(crate) fn note_planned(&self, digest: &str) -> Result<()> {
        fsio::write_atomic(&self.dir.path().join(PLANNED), format!("{digest}\n").as_bytes(), Perms::Public).map(drop)
    }

    /// After an apply that did all a plan of only a run's own files found, on a configuration
    /// and state in which a whole plan had found nothing to do (`reconcile`'s `Next::Change`):
    /// the configuration and state as they are now are marked planned too. Whatever the run
    /// did not write is as that plan left it, and what it wrote is applied: a whole plan would
    /// find nothing, and the next run need not make one to learn it.
    /// Unless the apply held something back (`Workspace::holding_back`): then it did not do
    /// all that was planned. Nor when any configuration here declares a data source, or the
    /// directory uses modules: what the run made may change what one reads (a listing of the
    /// group's machines, and a record `count`ed over it), and only a whole plan sees that.
    /// (One of your files that cannot be read is not in `yours`: terraform would fail on it.)
    pub(crate) fn note_planned_now(&mut self) -> Result<()> {
        if !self.held_back.is_empty() || self.may_read_data() {
            return Ok(());
        }
        let state = self.state_document()?;
        let digest = self.digest(&state);
        self.note_planned(&digest)
    }

    /// Whether the configuration may read a data source: one of your files declares one (a
    /// `data` block, or a `data` key in JSON), a managed file does, or modules are installed
    /// (whose files are not looked into). Errs towards yes: a managed file that cannot be read,
    /// or JSON that does not parse, says so.
    fn may_read_data(&self) -> bool {
        let declares = |(name, text): &(String, String)| {
            if name.ends_with(".json") {
                serde_json::from_str::<Value>(text).map_or(true, |doc| doc.get("data").is_some())
            } else {
                text.lines().map(str::trim_start).any(|l| l.starts_with("data ") || l.starts_with("data\""))
            }
        };
        self.dir.path().join(".terraform/modules/modules.json").exists()
            || self.yours().iter().any(declares)
            || self.live_docs().is_none_or(|docs| docs.iter().any(|(_, doc)| doc.get("data").is_some()))
    }

    /// The digest of what a whole plan depends on here: every configuration file terraform
    /// reads (`*.tf`, `*.tf.json`, variable files, the lock file, local modules' files, the
    /// installed modules' record), `TF_VAR_*` and every `--env`, the terraform binary and
    /// version, and `state` (its document). Taken before the plan: a file changed while it
    /// runs makes the next run plan again.
    pub(crate) fn digest(&self, state: &str) -> String {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        config_files(self.dir.path(), &mut h);
        let modules = self.dir.path().join(".terraform/modules/modules.json");
        crate::fsio::read(modules).unwrap_or_default().hash(&mut h);
        let mut vars: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k.starts_with("TF_VAR_")).collect();
        vars.sort();
        vars.hash(&mut h);
        self.ctx.tf_env.hash(&mut h);
        self.terraform().map(|tf| tf.describe()).unwrap_or_default().hash(&mut h);
        state.hash(&mut h);
        format!("{:016x}", h.finish())
    }

    /// Forgets `gone` (objects a refresh confirmed deleted outside terraform) from the state,
    /// with no cloud call: the apply that follows need not read them again.
    pub(crate) fn forget(&mut self, gone: &[String]) -> Result<()> {
        if gone.is_empty() {
            return Ok(());
        }
        let addresses: Vec<&str> = gone.iter().map(String::as_str).collect();
        let tf = self.terraform()?;
        self.started_run();
        let forgotten = tf.state_rm(&addresses);
        self.recorded(forgotten)
    }
}

/// Hashes the names and bytes of the configuration files terraform reads for `dir`: those of
/// `dir` itself, then those of each local module `init` recorded (`.terraform/modules/
/// modules.json`, a module linked into the directory included), each directory once, in name
/// order. Nothing else is followed (a link to `.` or to `/` costs nothing), and only regular
/// files are read (a FIFO is never opened).
fn config_files(dir: &Path, h: &mut impl Hasher) {
    let mut seen: BTreeSet<std::path::PathBuf> = BTreeSet::new();
    let modules = crate::fsio::read(dir.join(".terraform/modules/modules.json")).unwrap_or_default();
    let listed: Vec<String> = serde_json::from_slice::<Value>(&modules)
        .ok()
        .and_then(|v| v.get("Modules").and_then(Value::as_array).cloned())
        .into_iter()
        .flatten()
        .filter_map(|m| Some(m.get("Dir")?.as_str()?.to_string()))
        .collect();
    for sub in std::iter::once(".".to_string()).chain(listed) {
        let path = dir.join(&sub);
        let Ok(real) = std::fs::canonicalize(&path) else { continue };
        if seen.insert(real) {
            sub.hash(h);
            files_in(&path, h);
        }
    }
}

/// [`config_files`] of one directory: its configuration files, not its subdirectories.
fn files_in(dir: &Path, h: &mut impl Hasher) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut names: Vec<String> =
        entries.filter_map(Result::ok).filter_map(|e| e.file_name().into_string().ok()).collect();
    names.sort();
    for name in names {
        let wanted =
            [".tf", ".tf.json", ".tfvars", ".tfvars.json", ".terraform.lock.hcl"].iter().any(|s| name.ends_with(s));
        let path = dir.join(&name);
        if wanted && std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            name.hash(h);
            crate::fsio::read(&path).unwrap_or_default().hash(h);
        }
    }
}

/// One plan of what `whole` (the whole configuration, not refreshed), `looked` (the targeted,
/// refreshing plan) and `confirmed` (the confirmation) found: the drift of the refreshing ones,
/// and each resource's change as the refreshing plans saw it, else as the whole plan did (an
/// object found gone that no file declares any more is forgotten, not destroyed). The
/// listings read are no change.
pub(crate) fn merge(whole: Option<&Plan>, looked: Plan, confirmed: Option<Plan>) -> Plan {
    let mut drift: BTreeMap<String, ResourceChange> = BTreeMap::new();
    let mut changes: BTreeMap<String, ResourceChange> = BTreeMap::new();
    for c in whole.iter().flat_map(|p| &p.changes) {
        changes.insert(c.address.clone(), c.clone());
    }
    let mut refreshed: BTreeSet<String> = BTreeSet::new();
    for plan in std::iter::once(looked).chain(confirmed) {
        drift.extend(plan.drift.into_iter().map(|d| (d.address.clone(), d)));
        let listing = |c: &ResourceChange| c.address.contains(&format!(".{}", look::LISTING_PREFIX));
        for c in plan.changes.into_iter().filter(|c| !listing(c)) {
            refreshed.insert(c.address.clone());
            changes.insert(c.address.clone(), c);
        }
    }
    changes.retain(|address, _| {
        refreshed.contains(address) || !drift.get(address).is_some_and(|d| d.action == Action::Delete)
    });
    let changes: Vec<ResourceChange> = changes.into_values().filter(|c| c.action != Action::NoOp).collect();
    let count = |a: &[Action]| changes.iter().filter(|c| a.contains(&c.action)).count() as u64;
    let totals = Changes {
        add: count(&[Action::Create, Action::Replace]),
        change: count(&[Action::Update]),
        remove: count(&[Action::Delete, Action::Replace]),
        ..Changes::default()
    };
    let has_changes = !changes.is_empty() || whole.is_some_and(|w| w.has_changes);
    Plan { totals, drift: drift.into_values().collect(), changes, has_changes }
}

/// The addresses a refresh found deleted outside terraform.
pub(crate) fn gone(plan: &Plan) -> Vec<String> {
    plan.drift.iter().filter(|d| d.action == Action::Delete).map(|d| d.address.clone()).collect()
}

/// The addresses a refresh found changed outside terraform (not deleted).
pub(crate) fn drifted(plan: &Plan) -> Vec<String> {
    let gone: BTreeSet<String> = gone(plan).into_iter().collect();
    plan.drift.iter().filter(|d| !gone.contains(&d.address)).map(|d| d.address.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(address: &str, action: Action) -> ResourceChange {
        ResourceChange { address: address.into(), action }
    }

    fn plan(drift: Vec<ResourceChange>, changes: Vec<ResourceChange>) -> Plan {
        Plan { has_changes: !changes.is_empty(), drift, changes, ..Plan::default() }
    }

    #[test]
    fn the_refreshing_plans_win_and_a_gone_object_no_file_declares_is_forgotten_not_destroyed() {
        let whole = plan(
            vec![],
            vec![change("a.orphan", Action::Delete), change("a.one", Action::Update), change("a.two", Action::Create)],
        );
        let looked = plan(
            vec![change("a.orphan", Action::Delete), change("a.one", Action::Delete)],
            vec![change("a.one", Action::Create), change("data.x.infrakit_tf_list_0", Action::Read)],
        );
        let confirmed = plan(vec![change("a.three", Action::Update)], vec![change("a.three", Action::Update)]);
        let m = merge(Some(&whole), looked, Some(confirmed));
        assert_eq!(
            m.changes,
            [change("a.one", Action::Create), change("a.three", Action::Update), change("a.two", Action::Create)]
        );
        assert_eq!((m.totals.add, m.totals.change, m.totals.remove), (2, 1, 0));
        assert_eq!(gone(&m), ["a.one", "a.orphan"]);
        assert_eq!(drifted(&m), ["a.three"]);
        assert!(m.has_changes);
        let quiet = merge(None, plan(vec![], vec![change("data.x.infrakit_tf_list_0", Action::Read)]), None);
        assert!(!quiet.has_changes && quiet.changes.is_empty());
    }
}
