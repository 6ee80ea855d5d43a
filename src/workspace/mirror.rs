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
/// directory (your config, `.terraform`, the state, or a reader's own copy of it), managed
/// files copied in their promoted form, changed files written, leftover import blocks settled.
pub(super) fn build(dir: &Directory, changes: &ChangeSet) -> Result<tempfile::TempDir> {
    build_with(dir, changes, None)
}

/// [`build`], with only the managed files `only` names (by their live name), when given: a
/// targeted plan's configuration, whatever else the directory holds (`look::needed_files`).
pub(super) fn build_with(
    dir: &Directory,
    changes: &ChangeSet,
    only: Option<&std::collections::BTreeSet<String>>,
) -> Result<tempfile::TempDir> {
    let mirror = fsio::temp_dir("mirror")?;
    let m = mirror.path();
    let written: BTreeMap<&str, &Value> = changes.writes.iter().map(|w| (w.name.as_str(), &w.doc)).collect();
    fn managed(name: &str) -> Option<(&str, names::Suffix)> {
        names::split_file_name(name).filter(|(b, _)| names::classify(b).is_some())
    }
    // Your files, listed afresh: terraform may have made entries since the command listed the
    // directory (`init` writes `.terraform` and the lock file), and the mirror needs them all.
    let fresh = Directory::open(dir.path())?;
    // A reader's view holds its own copy of the local state, as of the files' moment: the
    // mirror plans with that copy, never the live state terraform may be rewriting.
    let state = dir.state_copy().and_then(|bytes| {
        let path = crate::state_guard::local_state_path(dir.path())?;
        let name = path.strip_prefix(dir.path()).ok()?.to_str()?.to_string();
        (!name.contains('/')).then_some((name, bytes))
    });
    for name in fresh.names().filter(|n| managed(n).is_none() && !changes.touches(n)) {
        match &state {
            Some((state_name, bytes)) if state_name == name => fsio::write_scratch(&m.join(name), bytes, 0o600)?,
            _ => fsio::symlink(&fresh.path().join(name), &m.join(name))?,
        }
    }
    // The managed files as the command saw them (a reader's view: one moment, never half a
    // change), each in its promoted form: a queued twin wins over the live file.
    for name in dir.names().filter(|n| !changes.touches(n)) {
        let Some((base, _)) = managed(name) else { continue };
        if only.is_some_and(|only| !only.contains(&format!("{base}{}", names::LIVE))) {
            continue;
        }
        if name.ends_with(names::QUEUED) || !dir.has(&format!("{base}{}", names::QUEUED)) {
            let bytes =
                dir.bytes(name).with_context(|| format!("failed to read `{}`", dir.path().join(name).display()))?;
            fsio::write_scratch(&m.join(format!("{base}{}", names::LIVE)), &bytes, 0o600)?;
        }
    }
    for (name, doc) in written {
        let base = names::split_file_name(name).map_or(name, |(b, _)| b);
        let live = m.join(format!("{base}{}", names::LIVE));
        fsio::write_atomic(&live, &crate::tfconfig::to_bytes(doc), Perms::Private)?;
    }
    imports::carry_out(m)?;
    // A directory left with no configuration (its last file removed by `changes`, or none
    // ever): terraform plans the empty one, as the real directory would get it
    // (`Workspace::placeholder`), rather than refuse.
    let listed = std::fs::read_dir(m).with_context(|| format!("failed to list `{}`", m.display()))?;
    if !listed.filter_map(Result::ok).any(|e| e.file_name().to_str().is_some_and(names::is_configuration)) {
        fsio::write_scratch(&m.join(names::EMPTY_FILE), b"{}\n", 0o600)?;
    }
    Ok(mirror)
}

/// Makes the mirror's `.terraform.lock.hcl` its own copy, so that an `init` run there leaves
/// yours alone (the link is removed, not your file).
pub(super) fn own_lock_file(mirror: &std::path::Path) -> Result<()> {
    let lock = mirror.join(super::init::LOCK_FILE);
    if lock.is_symlink() {
        let bytes = crate::fsio::read(&lock).with_context(|| format!("failed to read `{}`", super::init::LOCK_FILE))?;
        fsio::remove(&lock)?;
        fsio::write_atomic(&lock, &bytes, Perms::Public)?;
    }
    Ok(())
}
