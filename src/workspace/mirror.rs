//! A mirror: a temporary directory that looks like the managed directory after a change and
//! promotion, where terraform plans without writing anything in the real one (dry runs,
//! `reconcile --check`, import discovery).

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde_json::Value;

use super::changes::ChangeSet;
use super::imports;
use crate::directory::Directory;
use crate::fsio::{self, Perms};
use crate::names;

/// Builds the mirror of `dir` after `changes`: symlinks to every other entry of the real
/// directory (your config, `.terraform`, the state), managed files copied in their promoted
/// form, changed files written, leftover import blocks settled.
pub(super) fn build(dir: &Directory, changes: &ChangeSet) -> Result<tempfile::TempDir> {
    let mirror = tempfile::Builder::new()
        .prefix("infrakit-tf-mirror-")
        .tempdir()
        .context("failed to create a temporary directory")?;
    let m = mirror.path();
    let written: BTreeMap<&str, &Value> = changes.writes.iter().map(|w| (w.name.as_str(), &w.doc)).collect();
    // Listed afresh: terraform may have made entries since the command listed the directory
    // (`init` writes `.terraform` and the lock file), and the mirror needs them all.
    let dir = &Directory::open(dir.path())?;
    for name in dir.names() {
        if changes.touches(name) {
            continue;
        }
        let src = dir.path().join(name);
        match names::split_file_name(name).filter(|(b, _)| names::classify(b).is_some()) {
            None => fsio::symlink(&src, &m.join(name))?,
            Some((base, _)) => {
                // A queued twin wins over the live file, as promotion would have it.
                if name.ends_with(names::QUEUED) || !dir.has(&format!("{base}{}", names::QUEUED)) {
                    fsio::copy(&src, &m.join(format!("{base}{}", names::LIVE)))?;
                }
            }
        }
    }
    for (name, doc) in written {
        let base = names::split_file_name(name).map_or(name, |(b, _)| b);
        let live = m.join(format!("{base}{}", names::LIVE));
        fsio::write_atomic(&live, &crate::tfconfig::to_bytes(doc), Perms::Private)?;
    }
    imports::settle(m)?;
    Ok(mirror)
}

/// Makes the mirror's `.terraform.lock.hcl` its own copy, so that an `init` run there leaves
/// yours alone (the link is removed, not your file).
pub(super) fn own_lock_file(mirror: &std::path::Path) -> Result<()> {
    let lock = mirror.join(super::init::LOCK_FILE);
    if lock.is_symlink() {
        let bytes = std::fs::read(&lock).with_context(|| format!("failed to read `{}`", super::init::LOCK_FILE))?;
        fsio::remove(&lock)?;
        fsio::write_atomic(&lock, &bytes, Perms::Public)?;
    }
    Ok(())
}
