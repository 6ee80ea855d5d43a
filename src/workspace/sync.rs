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
use crate::store::{self, Store, StoredDir, StoredFile};

/// Which store directory this directory mirrors (`<name>:<id>`): a local file, never kept in
/// the store.
const MIRRORS: &str = ".infrakit-tf-store";

/// Makes the managed files of `dir` what the store holds, all or nothing (`journal`): those
/// that differ are written, those the store no longer has removed. A command never removes
/// or replaces files the store has never seen: a store with no directory of this name yet
/// takes one whose managed files `migrate` moves in first, and a directory that has never
/// mirrored this store directory ([`MIRRORS`]) is refused when its files differ (it is
/// another group's, or a stale copy).
/// Returns whether `dir` is marked as the store directory's mirror (`false`: the store has no
/// directory of this name yet; the change that creates it marks it, see [`mark`]).
pub(super) fn pull(store: &mut Store, dir: &mut Directory, printer: &Printer) -> Result<bool> {
    let local: Vec<String> = dir.names().filter(|n| store::keeps(n)).map(str::to_string).collect();
    let Some(stored) = store.files()? else {
        if let Some(first) = local.first() {
            return Err(invalid(format!(
                "store directory `{}` does not exist yet, and `{}` has managed files ({first}, ...)",
                store.name(),
                dir.shown().display()
            ))
            .hint("move them into the store once with `infrakit-tf migrate`, on this host")
            .into());
        }
        return Ok(false);
    };
    check_names(store, &stored.files)?;
    let mut ops = Vec::new();
    let mut replaced = Vec::new();
    for (name, file) in &stored.files {
        let differs = match local_entry(dir.path(), name)? {
            Local::Absent => false,
            Local::File(here) if here == *file => continue,
            // A link or a directory is not what the store holds: replaced by its file.
            Local::File(_) | Local::NotAFile => true,
        };
        if differs {
            replaced.push(name.clone());
        }
        ops.push(FileOp { name: name.clone(), after: Some((file.content.clone(), Perms::Exact(file.mode))) });
    }
    for name in local.into_iter().filter(|n| !stored.files.contains_key(n)) {
        replaced.push(name.clone());
        ops.push(FileOp { name, after: None });
    }
    let mirrors = format!("{}:{}\n", store.name(), stored.id);
    let marker = dir.path().join(MIRRORS);
    let follows = std::fs::read(&marker).is_ok_and(|m| m == mirrors.as_bytes());
    if !follows {
        if let Some(first) = replaced.first() {
            return Err(invalid(format!(
                "`{}` has managed files that store directory `{}` does not hold as they are ({first}, ...), and it has never mirrored it",
                dir.shown().display(),
                store.name()
            ))
            .hint("another group's directory: give it its own `store.directory` and `infrakit-tf migrate` it; a stale copy of this one: remove its managed files; nothing was changed")
            .into());
        }
        mark(dir, store.name(), stored.id)?;
    }
    if ops.is_empty() {
        return Ok(true);
    }
    journal::commit(dir.path(), &ops)?;
    for op in &ops {
        dir.note(&op.name, op.after.is_some());
    }
    printer.status(&format!("{} file(s) brought up to date from store directory `{}`", ops.len(), store.name()));
    Ok(true)
}

/// Records that `dir` mirrors store directory `name` (row `id`) from now on.
pub(super) fn mark(dir: &mut Directory, name: &str, id: i64) -> Result<()> {
    fsio::write_atomic(&dir.path().join(MIRRORS), format!("{name}:{id}\n").as_bytes(), Perms::Public)?;
    dir.note(MIRRORS, true);
    Ok(())
}

/// Marks `dir` as the mirror of what the store holds under its name, if anything (after
/// `migrate`).
pub(super) fn mirror_of(store: &mut Store, dir: &mut Directory) -> Result<()> {
    match store.files()? {
        Some(stored) => mark(dir, store.name(), stored.id),
        None => Ok(()),
    }
}

/// Warns when this host's configuration differs from the one the last command (on another
/// host) ran with: each host applies its own copy of `main.tf`, so different copies undo each
/// other's changes.
pub(super) fn check_config(store: &mut Store, dir: &Directory, printer: &Printer) -> Result<()> {
    let me = format!("{}:{}", store::hostname(), dir.shown().display());
    if let Some(host) = store.note_config(&fingerprint(dir)?, &me)? {
        let other = if host == me { "an earlier run here".to_string() } else { format!("`{host}`") };
        printer.warn(&format!(
            "this host's configuration (`*.tf`, `*.tf.json` in `{}`) differs from the one {other} ran with last: each host applies its own copy, and they undo each other's changes",
            dir.shown().display()
        ));
    }
    Ok(())
}

/// A fingerprint (FNV-1a, 64 bits) of the user's configuration files in `dir`: names and
/// bytes of every `*.tf` and `*.tf.json` that is not ours.
fn fingerprint(dir: &Directory) -> Result<String> {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for name in dir.names() {
        // Not `.terraform.lock.hcl`: `init` writes it after this check, on a host's first run.
        let config = name.ends_with(".tf") || name.ends_with(".tf.json");
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
        Some(stored) => stored.files,
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
        fsio::write_scratch(&tmp.path().join(name), &file.content, file.mode)?;
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

/// A managed name as it is in the local directory.
enum Local {
    Absent,
    /// A regular file: its bytes and mode, as the store keeps them.
    File(StoredFile),
    /// A symbolic link, a directory: never followed, never put in the store.
    NotAFile,
}

fn local_entry(dir: &Path, name: &str) -> Result<Local> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Local::Absent),
        Err(e) => Err(e).with_context(|| format!("failed to read `{}`", path.display())),
        Ok(meta) if !meta.is_file() => Ok(Local::NotAFile),
        Ok(meta) => {
            let content = std::fs::read(&path).with_context(|| format!("failed to read `{}`", path.display()))?;
            Ok(Local::File(StoredFile { content, mode: store::mode(meta.permissions().mode()) }))
        }
    }
}

/// A local file's bytes and mode (as the store keeps them), to put in the store; `None`
/// when it is absent. A link or a directory is refused: it is never followed, and the store
/// holds regular files only.
pub(super) fn local_file(dir: &Path, name: &str) -> Result<Option<StoredFile>> {
    match local_entry(dir, name)? {
        Local::Absent => Ok(None),
        Local::File(file) => Ok(Some(file)),
        Local::NotAFile => Err(invalid(format!("`{}` is not a regular file", dir.join(name).display()))
            .hint("restore it as a regular file of JSON, or remove it, then re-run; nothing was changed")
            .into()),
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

/// Whether what the store holds differs from `local`: `migrate` is refused then.
pub(super) fn differs(stored: &Option<StoredDir>, local: &BTreeMap<String, StoredFile>) -> Option<usize> {
    let stored = stored.as_ref().map(|s| &s.files).filter(|f| !f.is_empty())?;
    let differ = stored.keys().chain(local.keys()).collect::<std::collections::BTreeSet<_>>();
    let n = differ.into_iter().filter(|name| stored.get(*name) != local.get(*name)).count();
    (n > 0).then_some(n)
}
