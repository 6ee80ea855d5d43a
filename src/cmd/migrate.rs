//! `migrate`: move a local directory into the store (several hosts). The workspace does it
//! (`Workspace::migrate`); this reports: the files the store holds, on stdout.

use anyhow::Result;

use crate::context::Ctx;
use crate::workspace::Workspace;

pub(crate) fn run(ctx: &Ctx) -> Result<()> {
    let migrated = Workspace::migrate(ctx)?;
    if migrated.moved {
        ctx.printer.status(&format!(
            "moved {} file(s) into store directory `{}` at {}; terraform's state is in main.tf's backend",
            migrated.files.len(),
            migrated.store,
            migrated.url
        ));
    } else {
        ctx.printer.status(&format!(
            "store directory `{}` at {} already holds these {} file(s): nothing to move",
            migrated.store,
            migrated.url,
            migrated.files.len()
        ));
    }
    if ctx.printer.json_output() {
        return ctx.printer.json(&migrated);
    }
    if migrated.files.is_empty() {
        return Ok(());
    }
    ctx.printer.data(&migrated.files.join("\n"))
}
