//! The local directory as a mirror of the store (several hosts, see `store`): brought up to
//! the store's content under the lock before a command reads it ([`pull`]); for readers, a
//! private snapshot of it instead ([`snapshot`]); and the one move of a local directory into
//! the store ([`local_files`], for `migrate`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use crate::directory::Directory;
use crate::exit::invalid;
use crate::fsio::{self, Perms};
use crate::journal::{self, FileOp};
use crate::output::Printer;
use crate::store::{self, Files, Store, StoredFile};

/// Makes the managed files of `dir` what the store holds, all or nothing (`journal`): those
/// that differ are written, those the store no longer has removed. A store with no directory
/// of this name yet takes one whose managed files `migrate` moves in first: a command never
/// removes files the store has never seen.
pub(super) fn pull(store: &mut Store, dir: &mut Directory, printer: &Printer) -> Result<()> {
    let local: Vec<String> = dir.names().filter(|n| store::keeps(n)).map(str::to_string).collect();
    let Some(stored) = store.files()? else {
        if let Some(first) = local.first() {
            return Err(invalid(format!(
                "store directory `{}` does not exist yet, and `{}` has managed files ({first}, ...)",
                store.name(),
                dir.path().display()
            ))
            .hint("move them into the store once with `infrakit-tf migrate`, on this host")
            .into());
        }
        return Ok(());
    };
    check_names(store, &stored)?;
    let mut ops = Vec::new();
    for (name, file) in &stored {
        if local_file(dir.path(), name)?.as_ref() != Some(file) {
            ops.push(FileOp { name: name.clone(), after: Some((file.content.clone(), Perms::Exact(file.mode))) });
        }
    }
    ops.extend(local.into_iter().filter(|n| !stored.contains_key(n)).map(|name| FileOp { name, after: None }));
    if ops.is_empty() {
        return Ok(());
    }
    journal::commit(dir.path(), &ops)?;
    for op in &ops {
        dir.note(&op.name, op.after.is_some());
    }
    printer.status(&format!("{} file(s) brought up to date from store directory `{}`", ops.len(), store.name()));
    Ok(())
}

/// Warns when this host's configuration differs from the one the last command (on another
/// host) ran with: each host applies its own copy of `main.tf`, so different copies undo each
/// other's changes.
pub(super) fn check_config(store: &mut Store, dir: &Directory, printer: &Printer) -> Result<()> {
    let me = format!("{}:{}", store::hostname(), dir.shown().display());
    if let Some(host) = store.note_config(&fingerprint(dir)?, &me)? {
        let other = if host == me { "an earlier run here".to_string() } else { format!("`{host}`") };
        printer.warn(&format!(
            "this host's configuration (`*.tf`, `*.tf.json`, `.terraform.lock.hcl` in `{}`) differs from the one {other} ran with last: each host applies its own copy, and they undo each other's changes",
            dir.shown().display()
        ));
    }
    Ok(())
}

/// A fingerprint (FNV-1a, 64 bits) of the user's configuration files in `dir`: names and
/// bytes of every `*.tf` and `*.tf.json` that is not ours, and `.terraform.lock.hcl`.
fn fingerprint(dir: &Directory) -> Result<String> {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for name in dir.names() {
        let config = name.ends_with(".tf") || name.ends_with(".tf.json") || name == ".terraform.lock.hcl";
        if !config || store::keeps(name) {
            continue;
        }
        let path = dir.path().join(name);
        let bytes = std::fs::read(&path).with_context(|| format!("failed to read `{}`", path.display()))?;
        feed(name.as_bytes());
        feed(&[0]);
        feed(&bytes);
        feed(&[0]);
    }
    Ok(format!("{hash:016x}"))
}

/// For a command that only reads: a temporary directory that looks like `dir` with the
/// store's managed files (one snapshot of them) in place of its own, so that nothing local is
/// written without the lock. Your other files (configuration, `.terraform`) are linked.
pub(super) fn snapshot(store: &mut Store, dir: &Path, printer: &Printer) -> Result<tempfile::TempDir> {
    let local = Directory::open(dir)?;
    let stored = match store.files()? {
        Some(files) => files,
        None => {
            if local.names().any(store::keeps) {
                printer.warn(&format!(
                    "store directory `{}` does not exist yet: the managed files of `{}` are not in it (`infrakit-tf migrate`)",
                    store.name(),
                    dir.display()
                ));
            }
            BTreeMap::new()
        }
    };
    check_names(store, &stored)?;
    let tmp = tempfile::Builder::new()
        .prefix("infrakit-tf-snapshot-")
        .tempdir()
        .context("failed to create a temporary directory")?;
    for name in local.names().filter(|n| !store::keeps(n)) {
        fsio::symlink(&local.path().join(name), &tmp.path().join(name))?;
    }
    for (name, file) in &stored {
        fsio::write_atomic(&tmp.path().join(name), &file.content, Perms::Exact(file.mode))?;
    }
    Ok(tmp)
}

/// The managed files of `dir` as the store would keep them (for `migrate`).
pub(super) fn local_files(dir: &Directory) -> Result<BTreeMap<String, StoredFile>> {
    let mut files = BTreeMap::new();
    for name in dir.names().filter(|n| store::keeps(n)) {
        if let Some(file) = local_file(dir.path(), name)? {
            files.insert(name.to_string(), file);
        }
    }
    Ok(files)
}

/// A local file's bytes and mode; `None` when it is absent.
fn local_file(dir: &Path, name: &str) -> Result<Option<StoredFile>> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("failed to read `{}`", path.display())),
        // A link or a directory is not what the store holds: replaced by the store's file.
        Ok(meta) if !meta.is_file() => Ok(Some(StoredFile { content: Vec::new(), mode: u32::MAX })),
        Ok(meta) => {
            let content = std::fs::read(&path).with_context(|| format!("failed to read `{}`", path.display()))?;
            Ok(Some(StoredFile { content, mode: meta.permissions().mode() & 0o7777 }))
        }
    }
}

/// Every name the store holds must be one of ours: anything else (a path, a user's file)
/// would be written outside what the store may change.
fn check_names(store: &Store, files: &BTreeMap<String, StoredFile>) -> Result<()> {
    match files.keys().find(|n| !store::keeps(n)) {
        None => Ok(()),
        Some(bad) => Err(invalid(format!(
            "store directory `{}` holds `{}`, which is not a file infrakit-tf manages",
            store.name(),
            crate::text::short(bad)
        ))
        .hint("remove that row from infrakit_tf.files; nothing was changed here")
        .into()),
    }
}

/// Whether `files` (what the store holds) differ from `local`: `migrate` is refused then.
pub(super) fn differs(files: &Files, local: &BTreeMap<String, StoredFile>) -> Option<usize> {
    let stored = files.as_ref().filter(|f| !f.is_empty())?;
    let differ = stored.keys().chain(local.keys()).collect::<std::collections::BTreeSet<_>>();
    let n = differ.into_iter().filter(|name| stored.get(*name) != local.get(*name)).count();
    (n > 0).then_some(n)
}
