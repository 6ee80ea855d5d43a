//! `import SPEC --resource TYPE=ID[:NAME]...`: adopt existing objects into a new instance. In
//! the order `run` takes them:
//!
//! 1. **Request** ([`read_request`]): the spec (an instance spec, or a group spec read as one)
//!    without Init (an adopted machine has already booted), each request matched to a spec
//!    resource.
//! 2. **Already managed?** ([`already_imported`]): objects in Terraform's state are recognised
//!    by cloud ID: all of them → nothing to do (exit 0); some of them → an error (never adopted
//!    twice). A logical ID in use is refused too.
//! 3. **Plan** ([`ImportPlan::new`], no I/O): the spec expanded as a provision would, with a
//!    new ID; each request's target address and file; the import blocks; the unrequested
//!    resources, which are created. An adopted dedicated object gets a fresh slot, never an
//!    orphaned one; a target address that already holds an object is refused.
//! 4. **Discover** (`Workspace::discover_imports`): a plan in a mirror (expanded files plus
//!    the import blocks) reads each object's live values; a wrong cloud ID fails here, before
//!    anything is written.
//! 5. **Adopt** ([`ImportPlan::adopt`], no I/O): each adopted resource keeps its live values
//!    for the keys the spec names (less `--exclude-prop`); the VM gets the instance's tags on
//!    top.
//! 6. **Commit or roll back**: the files and the import blocks ([`IMPORT_FILE`]) are written
//!    and applied (import, tag update, creation of the unrequested resources); a successful
//!    apply removes the import blocks. When the apply fails, `Workspace::undo_import` removes
//!    the adopted addresses from state (the machines themselves are left alone), puts the
//!    files back, and applies again to remove what the failed apply created. If an adopted
//!    address cannot be removed from state, the files stay (removing them would destroy the
//!    machine) for `reconcile` to finish the import.
//!
//! A leftover import-blocks file (a killed import) is finished by the next apply
//! (`Workspace::carry_out_imports`); until then, import refuses to start.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde::Serialize;
use serde_json::{json, Value};

use crate::cli::ImportArgs;
use crate::cmd::{problems_error, read_slots, read_spec};
use crate::context::Ctx;
use crate::directory::Directory;
use crate::exit::invalid;
use crate::expand::{self, Expansion, Request, Slots};
use crate::import_match::{self, Matched};
use crate::names::{self, InstanceId, Scope, IMPORT_FILE};
use crate::profile::Profiles;
use crate::spec::{self, Spec};
use crate::terraform::State;
use crate::text::short;
use crate::tfconfig::{self, ATTACH_TAG, LOGICAL_ID_TAG, NAME_TAG};
use crate::workspace::{ChangeSet, CommitMode, Committed, FileWrite, Outcome, Workspace};

#[derive(Debug, Serialize)]
struct Adopted {
    address: String,
    cloud_id: String,
    file: String,
}

#[derive(Debug, Serialize)]
struct Report {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "LogicalID")]
    logical_id: Option<String>,
    /// `imported`, `already-imported`, or (`--dry-run`) `would-import`.
    status: &'static str,
    imported: Vec<Adopted>,
    /// Resources of the spec that were not requested: created, as a provision would.
    created: Vec<String>,
    #[serde(flatten)]
    outcome: Option<Outcome>,
}

pub(crate) fn run(args: ImportArgs, ctx: &Ctx) -> Result<()> {
    let profiles = ctx.profiles_of_existing_dir()?;
    let (spec, requests) = read_request(&args, &profiles, ctx)?;

    let mut ws = if args.dry_run { Workspace::read(ctx)? } else { Workspace::writer(ctx, ctx.lock_timeout)? };
    if ws.dir().has(IMPORT_FILE) {
        return Err(invalid(format!("a previous import did not finish: `{IMPORT_FILE}` is still in the directory"))
            .hint("run `infrakit-tf reconcile` to finish it (it adopts what that import wrote), then import again")
            .into());
    }
    if !args.dry_run {
        ws.refuse_until_looked_up("import")?;
    }
    let state = ws.state()?;
    if let Some(report) = already_imported(&spec, &requests, &state, ws.dir())? {
        ctx.printer.status(&format!("already imported: {} manages these objects; nothing to do", report.id));
        return print(ctx, &report);
    }
    if let Some(lid) = &spec.logical_id {
        names::check_logical_id(lid).map_err(invalid)?;
        ws.dir().check_logical_id_free(&profiles, lid)?;
    }
    let slots = if spec.needs_slot() {
        read_slots(ws.dir(), &ws.dir().instances(&profiles), &ctx.printer)?
    } else {
        Slots::default()
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let id = ws.dir().next_id(now)?;
    let plan = ImportPlan::new(&spec, &requests, &profiles, &id, slots, &state)?;

    // Discover the live values in a mirror; adopt them into the expanded files.
    let live = ws.discover_imports(&plan.changes(ws.dir(), &plan.expansion.files))?;
    let (files, mut imported) = plan.adopt(&live, &args.exclude, &profiles, ws.dir());
    let changes = plan.changes(ws.dir(), &files);
    let report = |status, imported, outcome| Report {
        id: id.to_string(),
        logical_id: spec.logical_id.clone(),
        status,
        imported,
        created: plan.created.clone(),
        outcome: Some(outcome),
    };
    if args.dry_run {
        let outcome = ws.commit(changes, CommitMode::DryRun)?.outcome;
        return print(ctx, &report("would-import", imported, outcome));
    }

    // Write and apply; all or nothing.
    let before = ws.save_files(&changes.writes.iter().map(|w| w.name.clone()).collect::<Vec<_>>());
    let Committed { mut outcome, failure } = ws.commit(changes, CommitMode::Apply)?;
    outcome.files.retain(|f| f.name != IMPORT_FILE);
    if let Some(err) = failure {
        let adopted: Vec<&str> = imported.iter().map(|a| a.address.as_str()).collect();
        let undone = ws.undo_import(&adopted, &before);
        let what = if undone { "what it wrote was removed" } else { "it could not be undone (see the warnings)" };
        return Err(err.context(format!("import of {id} failed; {what}")));
    }
    // The files are live now.
    for a in &mut imported {
        if let Some(base) = a.file.strip_suffix(names::QUEUED) {
            a.file = format!("{base}{}", names::LIVE);
        }
    }
    ctx.printer.status(&format!(
        "imported {id}: {} object(s) adopted, {} resource(s) created",
        imported.len(),
        plan.created.len()
    ));
    print(ctx, &report("imported", imported, outcome))
}

/// The spec (an instance spec, or a group spec read as one) and the `--resource` requests
/// matched to its resources.
fn read_request(args: &ImportArgs, profiles: &Profiles, ctx: &Ctx) -> Result<(Spec, Vec<Matched>)> {
    let path = std::path::PathBuf::from(args.spec.strip_prefix("file://").unwrap_or(&args.spec));
    let (label, text) = read_spec(&path)?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| invalid(format!("spec {label}: not valid JSON: {e}")))?;
    let doc = import_match::instance_spec(doc, args.group_id.as_deref()).map_err(invalid)?;
    let mut spec = spec::parse(&doc.to_string(), profiles).map_err(|p| problems_error(&label, &p, &ctx.printer))?;
    spec.init.clear(); // an adopted machine has already booted
    let requests = import_match::match_requests(&spec, &args.resources).map_err(invalid)?;
    Ok((spec, requests))
}

/// Objects already in Terraform's state are recognised by cloud ID: all of them, under an
/// instance of this directory → the report that there is nothing to do; some of them → an
/// error (an object is never adopted twice); none → `None`, go on.
fn already_imported(spec: &Spec, requests: &[Matched], state: &State, dir: &Directory) -> Result<Option<Report>> {
    let managed: Vec<Option<&String>> = requests
        .iter()
        .map(|m| {
            let rtype = &spec.resources[m.index].rtype;
            state
                .iter()
                .find(|(_, r)| &r.rtype == rtype && r.values.get("id").and_then(Value::as_str) == Some(&m.cloud_id))
                .map(|(a, _)| a)
        })
        .collect();
    if managed.iter().all(Option::is_some) {
        let vm_addr = managed[requests.iter().position(|m| m.index == spec.vm).expect("VM requested")].expect("all");
        let id = vm_addr.rsplit('.').next().unwrap_or_default().to_string();
        if !dir.twins(&id).is_empty() {
            let imported = requests
                .iter()
                .zip(&managed)
                .map(|(m, a)| Adopted {
                    address: a.expect("all").clone(),
                    cloud_id: m.cloud_id.clone(),
                    file: String::new(),
                })
                .collect();
            return Ok(Some(Report {
                id,
                logical_id: spec.logical_id.clone(),
                status: "already-imported",
                imported,
                created: vec![],
                outcome: None,
            }));
        }
    }
    if let Some((m, Some(addr))) = requests.iter().zip(&managed).find(|(_, a)| a.is_some()) {
        let r = &spec.resources[m.index];
        return Err(invalid(format!(
            "{} `{}` is already managed as `{}`: it is not adopted twice",
            short(&r.rtype),
            short(&m.cloud_id),
            short(addr)
        ))
        .hint("import only objects Terraform does not manage yet")
        .into());
    }
    Ok(None)
}

/// What an import will write, decided before terraform runs: the spec expanded as a provision
/// would (with a new ID, no Init), each request's target address and file, the import blocks,
/// and the spec's unrequested resources, which are created.
struct ImportPlan<'s> {
    spec: &'s Spec,
    requests: &'s [Matched],
    expansion: Expansion,
    import_doc: Value,
    /// Addresses of the spec's resources that are not requested and not in state.
    created: Vec<String>,
}

/// Where a requested object goes: its file (base name), address and resource name.
struct Target {
    file: String,
    address: String,
    name: String,
}

impl<'s> ImportPlan<'s> {
    fn new(
        spec: &'s Spec,
        requests: &'s [Matched],
        profiles: &Profiles,
        id: &InstanceId,
        mut slots: Slots,
        state: &State,
    ) -> Result<Self> {
        // An adopted dedicated object gets a fresh slot, never an orphaned one (whose object
        // is still in state).
        if requests.iter().any(|m| matches!(spec.resources[m.index].scope, Scope::Dedicated(_))) {
            slots.attached.extend(slots.existing.iter().cloned());
        }
        let no_tags = BTreeMap::new();
        let expansion = expand::expand(
            &Request { spec, profiles, id, logical_id: spec.logical_id.as_deref(), tags: &no_tags },
            &slots,
        )
        .map_err(invalid)?;
        let mut plan = ImportPlan { spec, requests, expansion, import_doc: Value::Null, created: Vec::new() };
        if let Some(m) = requests.iter().find(|m| state.contains_key(&plan.target(m).address)) {
            return Err(invalid(format!(
                "cannot adopt {} `{}` as `{}`: that address already holds another object in Terraform's state",
                short(&spec.resources[m.index].rtype),
                short(&m.cloud_id),
                short(&plan.target(m).address)
            ))
            .hint("a shared (global) or pet (logical ID) resource exists already: import only what is new")
            .into());
        }
        plan.import_doc = json!({"import": requests.iter().map(|m| json!({"to": plan.target(m).address, "id": crate::tfconfig::literal(&m.cloud_id)})).collect::<Vec<_>>()});
        let adopted: Vec<String> = requests.iter().map(|m| plan.target(m).address).collect();
        plan.created = (0..spec.resources.len())
            .filter(|i| !requests.iter().any(|m| m.index == *i))
            .map(|i| format!("{}.{}", spec.resources[i].rtype, plan.expansion.placed[i].1))
            .filter(|a| !adopted.contains(a) && !state.contains_key(a))
            .collect();
        Ok(plan)
    }

    fn target(&self, m: &Matched) -> Target {
        let (file, name) = &self.expansion.placed[m.index];
        let address = format!("{}.{name}", self.spec.resources[m.index].rtype);
        Target { file: file.clone(), address, name: name.clone() }
    }

    /// The change writing `files` (base name → document) and the import blocks.
    fn changes(&self, dir: &Directory, files: &BTreeMap<String, Value>) -> ChangeSet {
        let mut writes: Vec<FileWrite> =
            files.iter().map(|(base, doc)| FileWrite::managed(dir.target(base), doc.clone())).collect();
        writes.push(FileWrite::managed(IMPORT_FILE.to_string(), self.import_doc.clone()));
        ChangeSet::writing(writes)
    }

    /// The expanded files with each adopted resource keeping its live values (for the keys
    /// the spec names, less `exclude`), the VM with the instance's tags on top; and what was
    /// adopted where.
    fn adopt(
        &self,
        live: &BTreeMap<String, Value>,
        exclude: &[String],
        profiles: &Profiles,
        dir: &Directory,
    ) -> (BTreeMap<String, Value>, Vec<Adopted>) {
        let mut files = self.expansion.files.clone();
        let vm = self.spec.vm();
        let profile = profiles.get(&vm.rtype).expect("VM profile");
        let mut imported = Vec::new();
        for m in self.requests {
            let Target { file, address, name } = self.target(m);
            let rtype = &self.spec.resources[m.index].rtype;
            let props =
                tfconfig::resource_mut(files.get_mut(&file).expect("expanded"), rtype, &name).expect("expanded");
            let empty = serde_json::Map::new();
            let live_props = live.get(&address).and_then(Value::as_object).unwrap_or(&empty);
            let mut adopted = import_match::adopt_props(props, live_props, exclude);
            if m.index == self.spec.vm {
                let ours = tfconfig::read_tags(props, profile)
                    .into_iter()
                    .filter(|(k, _)| {
                        self.spec.tags.contains_key(k) || [NAME_TAG, ATTACH_TAG, LOGICAL_ID_TAG].contains(&k.as_str())
                    })
                    .collect();
                tfconfig::merge_tags(&mut adopted, profile, &ours);
            }
            *props = adopted;
            imported.push(Adopted { address, cloud_id: m.cloud_id.clone(), file: dir.target(&file) });
        }
        (files, imported)
    }
}

fn print(ctx: &Ctx, report: &Report) -> Result<()> {
    if ctx.printer.json_output() {
        ctx.printer.json(report)
    } else {
        ctx.printer.data(&report.id)
    }
}
