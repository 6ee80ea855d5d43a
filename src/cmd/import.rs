//! `import SPEC --resource TYPE=ID[:NAME]...`: adopt existing objects into a new instance.
//!
//! 1. The spec (instance or group spec) is expanded as a provision would, with a new ID and no
//!    Init; each request is matched to a spec resource, hence to its address and file. An
//!    adopted dedicated object gets a fresh slot, never an orphaned one.
//! 2. Objects already in Terraform's state are recognised by cloud ID: all of them → nothing
//!    to do (exit 0); some of them → an error (never adopted twice). A logical ID in use, or a
//!    target address that already holds an object, is refused.
//! 3. A discovery plan in a mirror (expanded files plus an import-blocks file) reads each
//!    object's live values (`show -json` of the plan); a wrong cloud ID fails here, before
//!    anything is written.
//! 4. Each adopted resource keeps its live values for the keys the spec names (less
//!    `--exclude-prop`); the VM gets the instance's tags on top.
//! 5. The files and the import blocks ([`IMPORT_FILE`]) are written and applied (import, tag
//!    update, creation of the spec's unrequested resources); a successful apply removes the
//!    import blocks. A leftover import-blocks file (a killed import) is finished by the next
//!    apply (`apply::settle_imports`); until then, import refuses to start.
//!
//! All or nothing: when the apply fails, the adopted addresses are removed from state (the
//! machines themselves are left alone), the files written are removed or restored, and a
//! second apply removes what the failed one created. If an adopted address cannot be removed
//! from state, the files stay (removing them would destroy the machine).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::adopt::{self, Matched};
use crate::apply::{self, ChangeSet, Mode, Outcome};
use crate::cli::ImportArgs;
use crate::cmd::{problems_error, read_slots, read_spec};
use crate::context::Ctx;
use crate::exit::invalid;
use crate::expand::{self, Request, Slots};
use crate::fsio::Perms;
use crate::names::{self, Kind, Scope, IMPORT_FILE};
use crate::spec;
use crate::text::short;
use crate::tfconfig::{self, ATTACH_TAG, LOGICAL_ID_TAG, NAME_TAG};
use crate::tfoutput;

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

pub fn run(args: ImportArgs, ctx: &Ctx) -> Result<()> {
    let profiles = ctx.profiles_of_existing_dir()?;
    let path = std::path::PathBuf::from(args.spec.strip_prefix("file://").unwrap_or(&args.spec));
    let (label, text) = read_spec(&path)?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| invalid(format!("spec {label}: not valid JSON: {e}")))?;
    let doc = adopt::instance_spec(doc, args.group_id.as_deref()).map_err(invalid)?;
    let mut spec = spec::parse(&doc.to_string(), &profiles).map_err(|p| problems_error(&label, &p, &ctx.printer))?;
    spec.init.clear(); // an adopted machine has already booted
    let requests = adopt::match_requests(&spec, &args.resources).map_err(invalid)?;

    let _lock = if args.dry_run { None } else { Some(ctx.lock()?) };
    let dir = ctx.directory()?;
    if dir.has(IMPORT_FILE) {
        return Err(invalid(format!("a previous import did not finish: `{IMPORT_FILE}` is still in the directory"))
            .hint("run `infrakit-tf reconcile` to finish it (it adopts what that import wrote), then import again")
            .into());
    }
    let tf = ctx.terraform(&dir)?;
    let state = tf.show()?;
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
            ctx.printer.status(&format!("already imported: {id} manages these objects; nothing to do"));
            let imported = requests
                .iter()
                .zip(&managed)
                .map(|(m, a)| Adopted {
                    address: a.expect("all").clone(),
                    cloud_id: m.cloud_id.clone(),
                    file: String::new(),
                })
                .collect();
            let report = Report {
                id,
                logical_id: spec.logical_id.clone(),
                status: "already-imported",
                imported,
                created: vec![],
                outcome: None,
            };
            return print(ctx, &report);
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

    if let Some(lid) = &spec.logical_id {
        names::check_path_component(lid, "logical ID").map_err(invalid)?;
        dir.check_logical_id_free(&profiles, lid)?;
    }
    // 1. Expand as a provision would; but an adopted dedicated object gets a fresh slot, never
    //    an orphaned one (whose object is still in state).
    let mut slots = if spec.needs_slot() { read_slots(&dir, &profiles, &ctx.printer)? } else { Slots::default() };
    if requests.iter().any(|m| matches!(spec.resources[m.index].scope, Scope::Dedicated(_))) {
        slots.attached.extend(slots.existing.iter().cloned());
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let id = dir.next_id(now)?;
    let no_tags = BTreeMap::new();
    let expansion = expand::expand(
        &Request { spec: &spec, profiles: &profiles, id: &id, logical_id: spec.logical_id.as_deref(), tags: &no_tags },
        &slots,
    )
    .map_err(invalid)?;
    let target = |m: &Matched| {
        let (file, name) = &expansion.placed[m.index];
        (file.clone(), format!("{}.{name}", spec.resources[m.index].rtype), name.clone())
    };
    if let Some((m, addr)) = requests.iter().map(|m| (m, target(m).1)).find(|(_, a)| state.contains_key(a)) {
        return Err(invalid(format!(
            "cannot adopt {} `{}` as `{}`: that address already holds another object in Terraform's state",
            short(&spec.resources[m.index].rtype),
            short(&m.cloud_id),
            short(&addr)
        ))
        .hint("a shared (global) or pet (logical ID) resource exists already: import only what is new")
        .into());
    }
    let import_doc =
        json!({"import": requests.iter().map(|m| json!({"to": target(m).1, "id": m.cloud_id})).collect::<Vec<_>>()});
    let file_mode = |base: &str| {
        if matches!(names::classify(base), Some(Kind::Instance(_))) {
            Perms::Private
        } else {
            Perms::Public
        }
    };
    let writes_of = |files: &BTreeMap<String, Value>| -> Vec<(String, Value, Perms)> {
        let mut w: Vec<_> = files.iter().map(|(b, d)| (dir.target(b), d.clone(), file_mode(b))).collect();
        w.push((IMPORT_FILE.to_string(), import_doc.clone(), Perms::Public));
        w
    };

    // 2. Discover the live values in a mirror.
    let discovery = ChangeSet { writes: writes_of(&expansion.files), ..ChangeSet::default() };
    // Before anything runs: a file that cannot be replaced (a link, not JSON) stops the import.
    discovery.writes.iter().try_for_each(|(name, ..)| dir.check_replaceable(name))?;
    let mirror = apply::mirror(&dir, &discovery)?;
    let mtf = tf.in_dir(mirror.path());
    let plan_file = mirror.path().join(".infrakit-tf-import.plan");
    let out_arg = format!("-out={}", plan_file.display());
    apply::plan_in(ctx, &mtf, &dir, &discovery, false, &[&out_arg])?;
    let live =
        tfoutput::parse_plan_imports(&mtf.output(&["show", "-json", plan_file.to_str().context("plan path")?])?)
            .map_err(invalid)?;

    // 3. Adopted resources keep their live values; the VM gets the instance's tags.
    let mut files = expansion.files.clone();
    let vm = spec.vm();
    let profile = profiles.get(&vm.rtype).expect("VM profile");
    let mut imported = Vec::new();
    for m in &requests {
        let (file, addr, name) = target(m);
        let rtype = &spec.resources[m.index].rtype;
        let props = tfconfig::resource_mut(files.get_mut(&file).expect("expanded"), rtype, &name).expect("expanded");
        let empty = serde_json::Map::new();
        let live_props = live.get(&addr).and_then(Value::as_object).unwrap_or(&empty);
        let mut adopted = adopt::adopt_props(props, live_props, &args.exclude);
        if m.index == spec.vm {
            let expanded_tags = tfconfig::read_tags(props, profile);
            let ours = expanded_tags
                .into_iter()
                .filter(|(k, _)| {
                    spec.tags.contains_key(k) || [NAME_TAG, ATTACH_TAG, LOGICAL_ID_TAG].contains(&k.as_str())
                })
                .collect();
            tfconfig::merge_tags(&mut adopted, profile, &ours);
        }
        *props = adopted;
        imported.push(Adopted { address: addr, cloud_id: m.cloud_id.clone(), file: dir.target(&file) });
    }
    let adopted_addrs: Vec<&str> = imported.iter().map(|a| a.address.as_str()).collect();
    let created: Vec<String> = (0..spec.resources.len())
        .filter(|i| !requests.iter().any(|m| m.index == *i))
        .map(|i| format!("{}.{}", spec.resources[i].rtype, expansion.placed[i].1))
        .filter(|a| !adopted_addrs.contains(&a.as_str()) && !state.contains_key(a))
        .collect();
    let changes = || ChangeSet { writes: writes_of(&files), ..ChangeSet::default() };

    if args.dry_run {
        let (outcome, _) = apply::commit(ctx, &dir, changes(), Mode::DryRun)?;
        let report = Report {
            id: id.to_string(),
            logical_id: spec.logical_id.clone(),
            status: "would-import",
            imported,
            created,
            outcome: Some(outcome),
        };
        return print(ctx, &report);
    }

    // 4. Write and apply; all or nothing.
    let previous: Vec<(String, Option<Vec<u8>>)> =
        changes().writes.iter().map(|(n, _, _)| (n.clone(), std::fs::read(dir.path().join(n)).ok())).collect();
    let (mut outcome, failure) = apply::commit(ctx, &dir, changes(), Mode::Apply)?;
    outcome.files.retain(|f| f.name != IMPORT_FILE);
    if let Some(err) = failure {
        let undone = rollback(ctx, &dir, &tf, &adopted_addrs, &previous);
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
        created.len()
    ));
    let report = Report {
        id: id.to_string(),
        logical_id: spec.logical_id.clone(),
        status: "imported",
        imported,
        created,
        outcome: Some(outcome),
    };
    print(ctx, &report)
}

/// Undoes a failed import: forget the adopted objects (never destroy them), put the files
/// back as they were, and apply to remove whatever the failed apply created. When an adopted
/// object cannot be forgotten, nothing else is undone: removing its file would make the next
/// apply destroy it. The files and the import blocks stay, so that `reconcile` finishes the
/// import instead. Returns whether the import was undone.
fn rollback(
    ctx: &Ctx,
    dir: &crate::directory::Directory,
    tf: &crate::terraform::Terraform,
    adopted: &[&str],
    previous: &[(String, Option<Vec<u8>>)],
) -> bool {
    // Every adopted address was checked to be absent from state before the import, so each
    // one in state now was put there by this import.
    let state = match tf.show() {
        Ok(state) => state,
        Err(e) => {
            ctx.printer.warn(&format!("rollback: cannot read the state: {e:#}"));
            return false;
        }
    };
    let mut forgotten = true;
    for addr in adopted.iter().filter(|a| state.contains_key(**a)) {
        if let Err(e) = tf.output(&["state", "rm", "-no-color", addr]) {
            ctx.printer.warn(&format!("rollback: could not forget `{addr}`: {e:#}"));
            forgotten = false;
        }
    }
    if !forgotten {
        ctx.printer.warn(
            "rollback stopped: the imported files are kept so that nothing adopted is destroyed; \
             run `infrakit-tf reconcile` to finish the import",
        );
        return false;
    }
    let mut restored = true;
    for (name, old) in previous {
        let live = names::split_file_name(name).map_or(name.clone(), |(b, _)| format!("{b}{}", names::LIVE));
        let result = match old {
            Some(bytes) => crate::fsio::write_atomic(&dir.path().join(name), bytes, Perms::Private).map(drop),
            None => dir.remove(name).and(dir.remove(&live)).map(drop),
        };
        if let Err(e) = result {
            ctx.printer.warn(&format!("rollback: {e:#}"));
            restored = false;
        }
    }
    let mut progress = crate::progress::Progress::new(ctx.printer.quiet(), ctx.printer.verbose());
    let cleaned = tf
        .stream(&["apply", "-auto-approve", "-input=false", "-json", "-refresh=false"], &mut |e| progress.on_event(e));
    progress.finish();
    if let Err(e) = &cleaned {
        ctx.printer.warn(&format!("rollback: the cleaning apply failed: {e:#}"));
    }
    restored && cleaned.is_ok()
}

fn print(ctx: &Ctx, report: &Report) -> Result<()> {
    if ctx.printer.json_output() {
        ctx.printer.json(report)
    } else {
        ctx.printer.data(&report.id)
    }
}
