//! The local directory as the store's copy (several hosts, see `store`): brought up to
//! the store's content under the lock before a command reads it ([`pull`]), and the one move
//! of a local directory into the store ([`local_files`], for `migrate`). (Readers read the
//! store's files in memory instead: `view::store`.)

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::path::Path;

use anyhow::{Context, Result};

use crate::config::{Config, CONFIG_FILE};
use crate::directory::Directory;
use crate::exit::invalid;
use crate::fsio::{self, Perms};
use crate::journal::{self, FileOp};
use crate::output::Printer;
use crate::store::{self, Store, StoredDir, StoredFile};

/// Which store directory this directory is a copy of (`<name>:<id>`): a local file, never kept in
/// the store.
const COPY_OF: &str = ".infrakit-tf-store";

/// Which revision of it the managed files here are (`<name>:<id>:<revision>:<listing>`):
/// written only once they are exactly that revision's files (after a pull that changed them,
/// or after a change's local part), so that the next command under the lock reads one row,
/// not every file, when nothing changed since. The store draws a new random revision at every
/// commit of files, so a store restored from a backup, or another store with a directory of
/// the same name, never matches a note it did not make. `<listing>` is a fingerprint of the
/// managed files' names and inodes as listed then: a file removed, added or replaced (an
/// editor's save) here since means a full pull. Stale (a run killed between the store's
/// commit and this note, a change from another host) it only costs that full pull. In
/// `.terraform/`, never kept in the store.
const REVISION: &str = ".terraform/infrakit-tf-store-revision";

/// A fingerprint of the managed files' names and inodes in `dir`'s listing; `None` when one
/// was noted since without being listed.
/// SipHash (std's `DefaultHasher`, keys fixed), eight bytes at a time where FNV takes one:
/// at 10,000 instances it is hashed twice a command. Its algorithm may change with the Rust
/// release that builds us; a note written by another build then only costs one full pull.
fn listing(dir: &Directory) -> Option<String> {
    let mut hash = std::hash::DefaultHasher::new();
    for (name, inode) in dir.listed_inodes() {
        hash.write(name.as_bytes());
        hash.write_u8(0); // names never hold one: no two listings run into each other
        hash.write_u64(inode?);
    }
    Some(format!("{:016x}", hash.finish()))
}

/// The store directory row and revision the managed files here are, if known.
fn known_revision(dir: &Directory, name: &str) -> Option<(i64, String)> {
    let text = crate::fsio::read_to_string(dir.path().join(REVISION)).ok()?;
    let mut parts = text.trim_end().rsplitn(4, ':');
    (parts.next()? == listing(dir)?).then_some(())?;
    let revision = parts.next()?.to_string();
    let id = parts.next()?.parse().ok()?;
    (parts.next()? == name).then_some((id, revision))
}

/// Records that the managed files in `dir` are now revision `revision` of store directory
/// `name` (row `id`). Not synced to disk: lost in a crash, it is only stale, and the files it
/// vouches for were synced before it was written.
pub(super) fn synced(dir: &Directory, name: &str, id: i64, revision: &str) -> Result<()> {
    let Some(listing) = listing(dir) else { return Ok(()) };
    let note = dir.path().join(REVISION);
    fsio::create_dir_all(note.parent().expect("in .terraform"))?;
    fsio::write_unsynced(&note, format!("{name}:{id}:{revision}:{listing}\n").as_bytes(), Perms::Public)?;
    Ok(())
}

/// Makes the managed files of `dir` what the store holds, all or nothing (`journal`): those
/// that differ are written, those the store no longer has removed. A command never removes
/// or replaces files the store has never seen: a store with no directory of this name yet
/// takes one whose managed files `migrate` moves in first, and a directory that has never
/// been a copy of this store directory ([`COPY_OF`]) is refused when its files differ (it is
/// another group's, or a stale copy).
/// Returns whether `dir` is marked as the store directory's copy (`false`: the store has no
/// directory of this name yet; the change that creates it marks it, see [`mark`]).
pub(super) fn pull(store: &mut Store, dir: &mut Directory, printer: &Printer) -> Result<bool> {
    let known = known_revision(dir, store.name());
    let stored = store.files_since(known)?;
    if stored.as_ref().is_some_and(|s| s.unchanged) {
        return Ok(true); // the files here are that revision's, and so marked as its copy
    }
    let local: Vec<String> = dir.names().filter(|n| crate::names::is_ours(n)).map(str::to_string).collect();
    let Some(stored) = stored else {
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
    let copy_of = format!("{}:{}\n", store.name(), stored.id);
    let marker = dir.path().join(COPY_OF);
    let follows = crate::fsio::read(&marker).is_ok_and(|m| m == copy_of.as_bytes());
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
    if !ops.is_empty() {
        journal::commit(dir.path(), &ops)?;
        for op in &ops {
            dir.note(&op.name, op.after.is_some());
        }
        printer.status(&format!("{} file(s) brought up to date from store directory `{}`", ops.len(), store.name()));
        // Only with a change: a command that is then refused has written nothing (the next
        // change notes its revision).
        synced(dir, store.name(), stored.id, &stored.revision)?;
    }
    Ok(true)
}

/// Records that `dir` is a copy of store directory `name` (row `id`) from now on.
pub(super) fn mark(dir: &mut Directory, name: &str, id: i64) -> Result<()> {
    fsio::write_atomic(&dir.path().join(COPY_OF), format!("{name}:{id}\n").as_bytes(), Perms::Public)?;
    dir.note(COPY_OF, true);
    Ok(())
}

/// Marks `dir` as the copy of what the store holds under its name, if anything (after
/// `migrate`).
pub(super) fn mark_copy_of(store: &mut Store, dir: &mut Directory) -> Result<()> {
    match store.files()? {
        Some(stored) => mark(dir, store.name(), stored.id),
        None => Ok(()),
    }
}

/// Refuses (exit 3) to let this host write with a configuration part (`base`: its `*.tf`, own
/// `*.tf.json`, `*.tfvars` and `infrakit-tf.json` but the URL; `group ID`: a group spec)
/// that differs from the one the store last ran with: each host applies its own copy, and two
/// copies would undo each other's changes on every run. `accept` (`--accept-config`) makes
/// this host's copy the one instead. The first run, and a run that matches, record it.
pub(super) fn check_config(
    store: &mut Store,
    dir: &Directory,
    part: &str,
    files: &BTreeMap<String, String>,
    accept: bool,
    printer: &Printer,
) -> Result<()> {
    let me = me(dir);
    let last = store.config(part)?;
    match &last {
        Some(last) if last.files == *files => {
            if last.host != me {
                store.set_config(part, files, &me)?;
            }
            Ok(())
        }
        Some(last) if !accept => {
            let (what, which) = match part {
                BASE => ("configuration".to_string(), format!(": {}", differences(files, &last.files))),
                group => (format!("spec of {group}"), String::new()),
            };
            Err(invalid(format!(
                "this host's {what} differs from the one store directory `{}` runs with, which `{}` ran last at {}{which}",
                store.name(),
                last.host,
                last.at,
            ))
            .hint("make this host's copy match that one; or, if this host's is the new one, re-run with --accept-config: every other host then refuses until its copy matches; nothing was changed")
            .into())
        }
        Some(_) => {
            printer.warn(&format!(
                "this host's {} is now the one store directory `{}` runs with (--accept-config): other hosts refuse to write until theirs match",
                if part == BASE { "configuration".to_string() } else { format!("spec of {part}") },
                store.name()
            ));
            store.set_config(part, files, &me)
        }
        None => store.set_config(part, files, &me),
    }
}

/// This host's directory as the store names it: `HOST:DIR`.
pub(super) fn me(dir: &Directory) -> String {
    format!("{}:{}", store::hostname(), dir.shown().display())
}

/// The configuration part every command checks.
pub(super) const BASE: &str = "base";

/// What differs between two parts, file by file: `` `main.tf` differs, `a.tf` only here ``.
fn differences(here: &BTreeMap<String, String>, there: &BTreeMap<String, String>) -> String {
    let mut out = Vec::new();
    for (name, hash) in here {
        match there.get(name) {
            Some(h) if h == hash => {}
            Some(_) => out.push(format!("`{name}` differs")),
            None => out.push(format!("`{name}` only here")),
        }
    }
    out.extend(there.keys().filter(|n| !here.contains_key(*n)).map(|n| format!("`{n}` only there")));
    out.join(", ")
}

/// The base part of this host's configuration, file by file: every `*.tf`, `*.tf.json` that
/// is not ours, `*.tfvars` and `*.tfvars.json` (terraform reads them all), and
/// `infrakit-tf.json` as parsed, less the store's URL (which may differ per host: a password,
/// a nearer replica), its `retries` and its `metrics_file` (this host's own).
pub(super) fn base_config(dir: &Directory) -> Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    for name in dir.names() {
        let terraform = [".tf", ".tf.json", ".tfvars", ".tfvars.json"].iter().any(|s| name.ends_with(s));
        if !(terraform && !crate::names::is_ours(name) || name == CONFIG_FILE) {
            continue;
        }
        let path = dir.path().join(name);
        let mut bytes = crate::fsio::read(&path).with_context(|| format!("failed to read `{}`", path.display()))?;
        if name == CONFIG_FILE {
            // As a JSON document, not a `Config`: hosts compare the document itself (its layout
            // aside), by the fingerprint earlier releases stored.
            if let Ok(mut doc) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                Config::remove_host_local(&mut doc);
                bytes = serde_json::to_vec(&doc)?;
            }
        }
        files.insert(name.to_string(), fingerprint(&bytes));
    }
    Ok(files)
}

/// A fingerprint (FNV-1a, 64 bits, hex) of some bytes.
pub(super) fn fingerprint(bytes: &[u8]) -> String {
    let mut hash = Fnv::default();
    hash.add(bytes);
    hash.hex()
}

/// FNV-1a, 64 bits, fed piece by piece.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn add(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

/// Refuses a store directory whose terraform state holds machines although the store holds
/// no live instance file and no run ever recorded its state: a `migrate` that moved the state,
/// then stopped before the files. Applying would destroy them all; `migrate`, run again where
/// the files are, finishes.
pub(super) fn check_migrated(store: &mut Store, dir: &Directory) -> Result<()> {
    if dir.live_instances() > 0 {
        return Ok(());
    }
    let machines = store.state_without_files()?;
    if machines == 0 {
        return Ok(());
    }
    Err(invalid(format!(
        "store directory `{}` holds no instance file, but terraform's state there holds {machines} instance(s): a `migrate` that moved the state and stopped before the files",
        store.name()
    ))
    .hint("on the host that has the files, run `infrakit-tf migrate` again (it finishes); nothing was changed")
    .into())
}

/// The managed files of `dir` as the store would keep them (for `migrate`).
pub(super) fn local_files(dir: &Directory) -> Result<BTreeMap<String, StoredFile>> {
    let mut files = BTreeMap::new();
    for name in dir.names().filter(|n| crate::names::is_ours(n)) {
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
            let content = crate::fsio::read(&path).with_context(|| format!("failed to read `{}`", path.display()))?;
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
pub(super) fn check_names(store: &Store, files: &BTreeMap<String, StoredFile>) -> Result<()> {
    match files.keys().find(|n| !crate::names::is_ours(n)) {
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
