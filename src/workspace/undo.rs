//! Undoing a failed import: the files as they were, saved first and put back.

use std::collections::BTreeSet;

use anyhow::Result;

use super::{Saved, SavedFiles, Workspace};
use crate::fsio::Perms;
use crate::journal::FileOp;
use crate::names;
use crate::terraform::Apply;

impl Workspace<'_> {
    /// The files `names` name, as they are now (both twins of each), for
    /// [`Workspace::restore`].
    pub(crate) fn save_files(&self, names: &[String]) -> SavedFiles {
        let mut touched = BTreeSet::new();
        for name in names {
            let base = names::split_file_name(name).map_or(name.as_str(), |(base, _)| base);
            touched.insert(format!("{base}{}", names::LIVE));
            touched.insert(format!("{base}{}", names::QUEUED));
        }
        let files = touched
            .into_iter()
            .map(|name| {
                let path = self.dir.path().join(&name);
                let before = crate::fsio::read(&path).ok().zip(std::fs::metadata(&path).ok()).map(|(bytes, meta)| {
                    use std::os::unix::fs::PermissionsExt;
                    Saved { bytes, mode: meta.permissions().mode() & 0o7777 }
                });
                (name, before)
            })
            .collect();
        SavedFiles { files }
    }

    /// Undoes a failed import: forget the adopted objects (never destroy them), put the files
    /// back as they were (`before`, from [`Workspace::save_files`]), all or nothing, and apply
    /// to remove whatever the failed apply created. When an adopted object cannot be
    /// forgotten, or the files cannot be put back, nothing more is done: the files and the
    /// import blocks stay (removing them would make the next apply destroy what was adopted),
    /// so that `reconcile` finishes the import instead. Returns whether the import was undone.
    pub(crate) fn undo_import(&mut self, adopted: &[&str], before: &SavedFiles) -> bool {
        let stopped = "rollback stopped: the imported files are kept so that nothing adopted is destroyed; \
                       run `infrakit-tf reconcile` to finish the import";
        let ctx = self.ctx;
        let warn = |what: &str, e: &anyhow::Error| ctx.printer.warn(&format!("rollback: {what}: {e:#}"));
        // Every adopted address was checked to be absent from state before the import, so
        // each one in state now was put there by this import.
        let state = match self.state() {
            Ok(state) => state,
            Err(e) => {
                warn("cannot read the state", &e);
                return false;
            }
        };
        let tf = self.terraform().expect("found to read the state");
        let mut forgotten = true;
        for addr in adopted.iter().filter(|a| state.contains_key(**a)) {
            if let Err(e) = tf.state_rm(&[addr]) {
                warn(&format!("could not forget `{addr}`"), &e);
                forgotten = false;
            }
        }
        if let Err(e) = self.recorded(Ok(())) {
            warn("cannot record the state", &e);
            return false;
        }
        if !forgotten {
            ctx.printer.warn(stopped);
            return false;
        }
        if let Err(e) = self.restore(before) {
            warn("the files could not be put back", &e);
            ctx.printer.warn(stopped);
            return false;
        }
        let cleaned = self.terraform().and_then(|tf| tf.apply(Apply::Configuration { refresh: false }));
        if let Err(e) = self.recorded(cleaned) {
            warn("the cleaning apply failed", &e);
            return false;
        }
        // The failed apply began to create: what the files declare now is looked up at once
        // (nothing to find, as a rule), rather than leave every later command to wait for it.
        if let Err(e) = self.find_unrecorded(false, &[]) {
            warn("the look-up after the failed apply", &e);
        }
        true
    }

    /// Puts the files of `before` back as they were, all or nothing (`journal`).
    pub(crate) fn restore(&mut self, before: &SavedFiles) -> Result<()> {
        let ops: Vec<FileOp> = before
            .files
            .iter()
            .filter_map(|(name, was)| match was {
                Some(saved) => {
                    Some(FileOp { name: name.clone(), after: Some((saved.bytes.clone(), Perms::Exact(saved.mode))) })
                }
                None => self.dir.path().join(name).exists().then(|| FileOp { name: name.clone(), after: None }),
            })
            .collect();
        self.change(&ops)
    }
}
