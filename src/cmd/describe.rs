//! `describe`: one row per instance (queued or not), filtered by tags (all must match; a
//! missing key never matches). JSON keeps the reference's field names `ID`, `LogicalID`,
//! `Tags`, `Properties`, plus `status`, `file` and `attachments`.

use std::collections::BTreeMap;

use anyhow::Result;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::Serialize;
use serde_json::Value;

use crate::cli::DescribeArgs;
use crate::context::Ctx;
use crate::directory::Instance;
use crate::names::Suffix;
use crate::tfdoc::{ATTACH_TAG, LOGICAL_ID_TAG, NAME_TAG};

#[derive(Serialize)]
pub struct Row {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "LogicalID")]
    logical_id: Option<String>,
    #[serde(rename = "Tags")]
    tags: BTreeMap<String, String>,
    #[serde(rename = "Properties", skip_serializing_if = "Option::is_none")]
    properties: Option<Value>,
    /// `queued` (terraform has not seen its file), `configured` (live file), `invalid`.
    status: &'static str,
    file: String,
    /// `type.name` of the VM, if the file has one.
    vm: Option<String>,
    attachments: Vec<String>,
}

fn row(inst: Instance, properties: bool) -> Row {
    let status = match (&inst.doc, inst.suffix) {
        (Err(_), _) => "invalid",
        (Ok(_), Suffix::Queued) => "queued",
        (Ok(_), Suffix::Live) => "configured",
    };
    Row {
        id: inst.id.to_string(),
        logical_id: inst.logical_id().map(str::to_string),
        properties: properties.then(|| inst.vm_props().map_or(Value::Null, |p| Value::Object(p.clone()))),
        status,
        file: inst.file.clone(),
        vm: inst.vm.as_ref().map(|(t, n)| format!("{t}.{n}")),
        attachments: inst.attachments.iter().cloned().collect(),
        tags: inst.tags,
    }
}

pub fn run(args: DescribeArgs, ctx: &Ctx) -> Result<()> {
    let dir = ctx.directory()?;
    let profiles = ctx.profiles(&dir)?;
    let filter: BTreeMap<String, String> = args.tags.into_iter().collect();
    let rows: Vec<Row> = dir
        .instances(&profiles)
        .into_iter()
        .inspect(|i| {
            if let Err(e) = &i.doc {
                ctx.printer.warn(e);
            }
        })
        .filter(|i| filter.iter().all(|(k, v)| i.tags.get(k) == Some(v)))
        .map(|i| row(i, args.properties))
        .collect();
    if ctx.printer.json_output() {
        return ctx.printer.json(&rows);
    }
    if rows.is_empty() {
        ctx.printer.status(&format!("no instances in `{}`", dir.path().display()));
        return Ok(());
    }
    ctx.printer.data(&table(&rows).to_string())
}

/// ID, logical ID, status, attachments, and the tags that are not infrakit's own bookkeeping.
fn table(rows: &[Row]) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(["ID", "LOGICAL ID", "STATUS", "ATTACHMENTS", "TAGS"]);
    for r in rows {
        let tags: Vec<String> = r
            .tags
            .iter()
            .filter(|(k, _)| ![NAME_TAG, ATTACH_TAG, LOGICAL_ID_TAG].contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        table.add_row([
            r.id.clone(),
            r.logical_id.clone().unwrap_or_else(|| "-".into()),
            r.status.to_string(),
            if r.attachments.is_empty() { "-".into() } else { r.attachments.join("\n") },
            if tags.is_empty() { "-".into() } else { tags.join("\n") },
        ]);
    }
    table
}
