//! `describe`: one row per instance (queued or not), filtered by tags (all must match; a
//! missing key never matches), with its status in Terraform's state (`show -json`, read only
//! when some instance file is live). JSON keeps the reference's field names `ID`, `LogicalID`,
//! `Tags`, `Properties`, plus `status`, `file`, `vm`, `attachments` and `attributes`; and
//! `health` (a HEALTH column), only for members the health record knows (`cmd::heal`): a
//! directory without healing describes as it did before healing existed; `rollout` for the
//! members of a group whose rollout the record has (the table: a line per group after it). A
//! group held back on its last good spec (a rollback) has its members current on that spec.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::Serialize;
use serde_json::Value;

use crate::cli::DescribeArgs;
use crate::cloud_record::CloudRecord;
use crate::context::Ctx;
use crate::directory::Instance;
use crate::group::CHECKPOINT_DELAY;
use crate::group::{is_current, GroupSpec, CONFIG_SHA_TAG, CONFIG_TAG, FAILURES_BEFORE_REPAIR, GROUP_TAG};
use crate::health_record::{Health, HealthRecord};
use crate::names::Suffix;
use crate::rollout_record::{RolloutRecord, RolloutReport};
use crate::terraform::State;
use crate::tfconfig::{ATTACH_TAG, LOGICAL_ID_TAG, NAME_TAG};
use crate::tfoutput::StateResource;
use crate::workspace::Workspace;

#[derive(Serialize)]
pub(crate) struct Row {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "LogicalID")]
    logical_id: Option<String>,
    #[serde(rename = "Tags")]
    tags: BTreeMap<String, String>,
    #[serde(rename = "Properties", skip_serializing_if = "Option::is_none")]
    properties: Option<Value>,
    /// `queued` (terraform has not seen its file), `pending` (live, not in state yet),
    /// `unconfirmed` (live, not in state, and an apply that was creating failed or was cut
    /// short: its machine may exist; the next run looks it up by its tags; or in state, and a
    /// read called its machine gone that the run did not believe yet: see the cloud record),
    /// `created` (in state), `tainted` (its create failed; the next apply replaces it),
    /// `configured` (live, state unknown: no terraform), `invalid` (not valid JSON); and, after
    /// the instances, `stray`: a machine the last reconcile's listing showed with this
    /// directory's tags, in no state (its cloud ID for an ID; `attributes.kind` says what it is).
    status: &'static str,
    file: String,
    /// `type.name` of the VM, if the file has one.
    vm: Option<String>,
    attachments: Vec<String>,
    /// The VM's key attributes from state (`id`, addresses), sensitive values masked.
    attributes: BTreeMap<String, String>,
    /// Its group (`infrakit.group`), if it is a member of one.
    group: Option<String>,
    /// Whether its config hash is its group spec's; `null` when no spec of its group is known
    /// (`--group`, or infrakit-tf.json's `groups`).
    current: Option<bool>,
    /// Its health as the health record has it (`healthy`, `failing N/K`, `unhealthy`, `not
    /// checked yet`); absent when the record does not know it.
    #[serde(skip_serializing_if = "Option::is_none")]
    health: Option<String>,
    /// Where its group's rollout stands, when its group spec is known and the rollout record
    /// has one for it (the same object as `reconcile`'s report).
    #[serde(skip_serializing_if = "Option::is_none")]
    rollout: Option<RolloutReport>,
}

/// The instances' statuses come from `state`, and whether the directory awaits a look-up
/// (`awaiting`, see `Workspace::awaiting_lookup`).
struct Seen<'a> {
    state: Option<&'a State>,
    awaiting: bool,
    /// The VMs a read called gone that a run did not believe yet (the cloud record's `gone`).
    doubted: BTreeSet<String>,
}

fn row(inst: Instance, properties: bool, seen: &Seen<'_>, hashes: &BTreeMap<String, String>) -> Row {
    let state = seen.state;
    let in_state = inst.vm.as_ref().and_then(|(t, n)| state?.get(&format!("{t}.{n}")));
    let status = match (&inst.doc, inst.suffix, state, in_state) {
        (Err(_), ..) => "invalid",
        (Ok(_), Suffix::Queued, ..) => "queued",
        (Ok(_), Suffix::Live, None, _) => "configured",
        (Ok(_), Suffix::Live, Some(_), None) if seen.awaiting => "unconfirmed",
        (Ok(_), Suffix::Live, Some(_), None) => "pending",
        (Ok(_), Suffix::Live, Some(_), Some(_))
            if inst.vm.as_ref().is_some_and(|(t, n)| seen.doubted.contains(&format!("{t}.{n}"))) =>
        {
            "unconfirmed"
        }
        (Ok(_), Suffix::Live, Some(_), Some(r)) if r.tainted => "tainted",
        (Ok(_), Suffix::Live, Some(_), Some(_)) => "created",
    };
    let attributes = in_state.map(StateResource::key_attributes).unwrap_or_default();
    Row {
        id: inst.id.to_string(),
        logical_id: inst.logical_id().map(str::to_string),
        properties: properties.then(|| inst.vm_props().map_or(Value::Null, |p| Value::Object(p.clone()))),
        status,
        file: inst.file.clone(),
        vm: inst.vm.as_ref().map(|(t, n)| format!("{t}.{n}")),
        attachments: inst.attachments.iter().cloned().collect(),
        attributes,
        group: inst.tags.get(GROUP_TAG).cloned(),
        current: inst.tags.get(GROUP_TAG).and_then(|g| hashes.get(g)).map(|h| is_current(&inst.tags, h)),
        health: None,
        rollout: None,
        tags: inst.tags,
    }
}

pub(crate) fn run(args: DescribeArgs, ctx: &Ctx) -> Result<()> {
    let ws = Workspace::read(ctx)?;
    let dir = ws.dir();
    let profiles = ctx.profiles()?;
    let filter: BTreeMap<String, String> = args.tags.into_iter().collect();
    // Each known group's config hash, to say whether its members are current.
    let specs: Vec<GroupSpec> = match crate::cmd::load_groups(ctx, &args.groups, dir.path(), &profiles) {
        Ok(groups) => groups.into_iter().map(|(g, _)| g).collect(),
        Err(e) if args.groups.is_empty() => {
            ctx.printer.warn(&format!("whether group members are current is not known: {e:#}"));
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    // A group whose rollout was rolled back is held on its last good spec: its members are
    // current on that one.
    let rollouts = ws.record::<RolloutRecord>();
    let hashes: BTreeMap<String, String> = specs
        .iter()
        .map(|g| {
            let held = rollouts.groups.get(&g.id).is_some_and(|r| r.to == g.config_hash && r.state.backing());
            let good = rollouts.good.get(&g.id).filter(|_| held);
            (g.id.clone(), good.map_or_else(|| g.config_hash.clone(), |good| good.hash.clone()))
        })
        .collect();
    // Failed checks in a row that make a member unhealthy, by group (the spec's, else the
    // default).
    let thresholds: BTreeMap<&str, u32> =
        specs.iter().filter_map(|g| Some((g.id.as_str(), g.healing.as_ref()?.failures_before_repair?))).collect();
    let record = dir.record::<HealthRecord>().unwrap_or_else(|why| {
        ctx.printer.warn(&format!("members' health is not known: {why}"));
        HealthRecord::default()
    });
    let instances = dir.instances(&profiles);
    let mut on_spec: BTreeMap<String, usize> = BTreeMap::new();
    for i in &instances {
        let group = i.tags.get(GROUP_TAG).filter(|g| hashes.get(*g).is_some_and(|h| is_current(&i.tags, h)));
        if let Some(g) = group {
            *on_spec.entry(g.clone()).or_default() += 1;
        }
    }
    let awaiting = ws.awaiting_lookup().is_some();
    let doubted = doubted(&ws, &ctx.printer);
    let state = state_of(&ws, &instances).unwrap_or_else(|e| {
        ctx.printer.warn(&format!("statuses come from the files only: {e:#}"));
        None
    });
    let seen = Seen { state: state.as_ref(), awaiting, doubted };
    let rows: Vec<Row> = instances
        .into_iter()
        .inspect(|i| {
            if let Err(e) = &i.doc {
                ctx.printer.warn(e);
            }
        })
        .filter(|i| filter.iter().all(|(k, v)| i.tags.get(k) == Some(v)))
        .map(|i| {
            // A member of a group whose spec heals is `not checked yet` until the record knows it.
            let threshold = i.tags.get(GROUP_TAG).and_then(|g| thresholds.get(g.as_str())).copied();
            let known = record.health(&i.id.to_string(), threshold.unwrap_or(FAILURES_BEFORE_REPAIR));
            let health = known.or(threshold.map(|_| Health::NotChecked));
            Row { health: health.map(Health::text), ..row(i, args.properties, &seen, &hashes) }
        })
        .collect();
    let mut rows = rows;
    let shown = group_rollouts(&specs, &rollouts, &on_spec);
    for row in &mut rows {
        row.rollout = row.group.as_ref().and_then(|g| shown.get(g)).cloned();
    }
    // The strays the last reconcile found (machines in no state that carry this directory's
    // tags), after the instances, when no tag filter leaves them out.
    let ids: BTreeMap<String, String> =
        seen.state.into_iter().flatten().map(|(a, r)| (a.clone(), r.attribute("id").unwrap_or_default())).collect();
    rows.extend(
        ws.known_strays(&ids)
            .into_iter()
            .filter(|s| filter.iter().all(|(k, v)| s.tags.get(k) == Some(v)))
            .map(stray_row),
    );
    if ctx.printer.json_output() {
        return ctx.printer.json(&rows);
    }
    if rows.is_empty() {
        ctx.printer.status(&format!("no instances in `{}`", dir.shown().display()));
        return Ok(());
    }
    let mut out = table(&rows).to_string();
    for (group, rollout) in &shown {
        out.push_str(&format!("\ngroup {group}: {}", rollout.words()));
    }
    ctx.printer.data(&out)
}

/// Each known group's rollout, as the rollout record has it for the spec its group spec asks
/// for, with the number of its members on the spec it goes to (`on_spec`).
fn group_rollouts(
    specs: &[GroupSpec],
    rollouts: &RolloutRecord,
    on_spec: &BTreeMap<String, usize>,
) -> BTreeMap<String, RolloutReport> {
    let mut shown = BTreeMap::new();
    for g in specs {
        let Some(r) = rollouts.groups.get(&g.id).filter(|r| r.to == g.config_hash) else { continue };
        let on = on_spec.get(&g.id).copied().unwrap_or(0);
        let delay = g.checkpoint_delay.unwrap_or(CHECKPOINT_DELAY);
        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        shown.insert(g.id.clone(), RolloutReport::new(r, (on, g.desired()), delay_ms));
    }
    shown
}

/// How many instances each group (`""`: none) has in each status, as `describe` shows them:
/// for the metrics after a run (`metrics`). Quietly: `describe`'s warnings were the run's to
/// give. A state that cannot be read is an error here, not statuses from the files alone.
pub(crate) fn census(ctx: &Ctx) -> Result<BTreeMap<(String, String), usize>> {
    let mut ws = Workspace::read(ctx)?;
    let profiles = ctx.profiles()?;
    let instances = ws.dir().instances(&profiles);
    // Only whether each VM is in the state, and tainted, counts here: the state document is
    // read as terraform stores it, with no terraform run.
    let live = instances.iter().any(|i| i.suffix == Suffix::Live);
    let state: Option<State> = if live && ws.dir().may_have_state() {
        let recorded = ws.state_resources()?.into_iter().filter(|r| r.root && r.current);
        Some(
            recorded
                .map(|r| {
                    let resource = StateResource {
                        rtype: r.rtype,
                        values: Value::Null,
                        sensitive: Value::Null,
                        tainted: r.tainted,
                    };
                    (r.address, resource)
                })
                .collect(),
        )
    } else {
        live.then(BTreeMap::new)
    };
    let doubted = ws.dir().record::<CloudRecord>().map(|r| r.gone.into_keys().collect()).unwrap_or_default();
    let seen = Seen { state: state.as_ref(), awaiting: ws.awaiting_lookup().is_some(), doubted };
    let mut counts = BTreeMap::new();
    for inst in instances {
        let row = row(inst, false, &seen, &BTreeMap::new());
        *counts.entry((row.group.unwrap_or_default(), row.status.to_string())).or_default() += 1;
    }
    Ok(counts)
}

/// A stray as a row: its cloud ID for an ID, status `stray`, the file and address its tags name.
fn stray_row(s: crate::cloud_record::Classified) -> Row {
    Row {
        id: s.id.clone(),
        logical_id: None,
        tags: s.tags,
        properties: None,
        status: "stray",
        file: s.file.unwrap_or_default(),
        vm: Some(s.address.unwrap_or(s.rtype)),
        attachments: Vec::new(),
        attributes: BTreeMap::from([("id".to_string(), s.id), ("kind".to_string(), s.kind.as_str().to_string())]),
        group: s.group,
        current: None,
        health: None,
        rollout: None,
    }
}

/// The VMs a read called gone that a run did not believe yet (the cloud record's `gone`).
fn doubted(ws: &Workspace, printer: &crate::output::Printer) -> BTreeSet<String> {
    match ws.dir().record::<CloudRecord>() {
        Ok(record) => record.gone.into_keys().collect(),
        Err(why) => {
            printer.warn(&format!("which machines are unconfirmed is not known: {why}"));
            BTreeSet::new()
        }
    }
}

/// Terraform's state, where an instance can be in it. Only a live file can be in state, and
/// only where state can exist: a directory of queued files, or one never applied, needs no
/// terraform (and then its live files are pending).
fn state_of(ws: &Workspace, instances: &[Instance]) -> Result<Option<State>> {
    let live = instances.iter().any(|i| i.suffix == Suffix::Live);
    if !ws.dir().may_have_state() {
        Ok(live.then(BTreeMap::new))
    } else if live {
        ws.state().map(Some)
    } else {
        Ok(None)
    }
}

/// ID, logical ID, status, attachments, and the tags that are not infrakit's own bookkeeping;
/// the health, when the health record knows some member.
fn table(rows: &[Row]) -> Table {
    let mut table = Table::new();
    let health = rows.iter().any(|r| r.health.is_some());
    let mut header = vec!["ID", "LOGICAL ID", "GROUP", "STATUS"];
    if health {
        header.push("HEALTH");
    }
    header.extend(["STATE", "ATTACHMENTS", "TAGS"]);
    table.load_preset(UTF8_FULL_CONDENSED).set_header(header);
    for r in rows {
        let tags: Vec<String> = r
            .tags
            .iter()
            .filter(|(k, _)| {
                ![NAME_TAG, ATTACH_TAG, LOGICAL_ID_TAG, GROUP_TAG, CONFIG_TAG, CONFIG_SHA_TAG].contains(&k.as_str())
            })
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut row = vec![
            r.id.clone(),
            r.logical_id.clone().unwrap_or_else(|| "-".into()),
            match (&r.group, r.current) {
                (None, _) => "-".to_string(),
                (Some(g), None) => g.clone(),
                (Some(g), Some(true)) => format!("{g} (current)"),
                (Some(g), Some(false)) => format!("{g} (outdated)"),
            },
            r.status.to_string(),
        ];
        if health {
            row.push(r.health.clone().unwrap_or_else(|| "-".into()));
        }
        row.extend([
            if r.attributes.is_empty() {
                "-".into()
            } else {
                r.attributes.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("\n")
            },
            if r.attachments.is_empty() { "-".into() } else { r.attachments.join("\n") },
            if tags.is_empty() { "-".into() } else { tags.join("\n") },
        ]);
        table.add_row(row);
    }
    table
}
