//! The readers' views, side by side: what a command that only reads (no lock) sees of the
//! directory, as of one moment, never half of a change. Without a store, the local files
//! ([`local`]); with one, the store's ([`store`]). Either way the managed files' bytes are
//! held in memory (`Directory::into_view`), and the command reads them from there.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use anyhow::{Context, Result};

use super::sync;
use crate::directory::Directory;
use crate::fsio;
use crate::journal;
use crate::lock;
use crate::names;
use crate::output::Printer;
use crate::state_guard;
use crate::store::Store;

/// What a reader's view of the local directory found besides the files.
pub(super) struct View {
    pub(super) dir: Directory,
    /// The files of a change half done (a pending journal), shown as they were before it.
    pub(super) half_done: Option<Vec<String>>,
}

/// For a command that only reads (no lock), without a store: the directory as of one moment,
/// never half of a change. Under the shared generation lock (`lock::generation::reading`:
/// writers hold it only while they change files), it is listed and every managed file is read into memory, and
/// terraform's local state is copied (retried while it does not parse: terraform rewrites
/// it in place during an apply). A change left half done (a pending journal: its writer
/// was killed, or its undo failed) is shown as it was before that change, the files it
/// touched named in `half_done`.
pub(super) fn local(path: &Path) -> Result<View> {
    let abs = std::path::absolute(path).with_context(|| format!("failed to resolve `{}`", path.display()))?;
    let reading = lock::generation::reading(&abs);
    let mut dir = Directory::open(path)?; // listed under the lock
    let mut contents = BTreeMap::new();
    for name in dir.names().filter(|n| names::is_ours(n)) {
        match crate::fsio::read(dir.path().join(name)) {
            Ok(bytes) => {
                contents.insert(name.to_string(), bytes);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", dir.path().join(name).display())),
        }
    }
    let pending = journal::pending(dir.path())?;
    let state = state_guard::local_state_path(dir.path()).and_then(|p| copy_state(&p));
    drop(reading);
    let half_done = pending.map(|files| {
        let mut names = Vec::new();
        for (name, before) in files {
            match before {
                Some(bytes) => {
                    dir.note(&name, true);
                    contents.insert(name.clone(), bytes);
                }
                None => {
                    dir.note(&name, false);
                    contents.remove(&name);
                }
            }
            names.push(name);
        }
        names
    });
    Ok(View { dir: dir.into_view(path, contents, state), half_done })
}

/// For a command that only reads, with a store: the directory as the store holds it (its
/// files as of one transaction), in place of the local copy, so that nothing local is
/// written without the lock. On disk, a temporary directory where terraform runs: your files (configuration,
/// `.terraform`) linked, and the store's few bookkeeping files (the ID record, the import
/// blocks); the instance, dedicated and global files stay in memory, where the command reads
/// them (terraform reads the state there, which needs none of them; a dry run's mirror writes
/// them from memory). Writing a thousand files only to read them back cost most of a reader's
/// time.
pub(super) fn store(store: &mut Store, dir: &Path, printer: &Printer) -> Result<(tempfile::TempDir, Directory)> {
    let local = Directory::open(dir)?;
    let stored = match store.files()? {
        Some(stored) => stored.files,
        None => {
            if local.names().any(crate::names::is_ours) {
                printer.warn(&format!(
                    "store directory `{}` does not exist yet: the managed files of `{}` are not in it (`infrakit-tf migrate`)",
                    store.name(),
                    dir.display()
                ));
            }
            BTreeMap::new()
        }
    };
    sync::check_names(store, &stored)?;
    let tmp = fsio::temp_dir("view")?;
    for name in local.names().filter(|n| !crate::names::is_ours(n)) {
        fsio::symlink(&local.path().join(name), &tmp.path().join(name))?;
    }
    let mut contents = BTreeMap::new();
    for (name, file) in stored {
        if crate::names::split_file_name(&name).is_none_or(|(base, _)| crate::names::classify(base).is_none()) {
            fsio::write_scratch(&tmp.path().join(&name), &file.content, file.mode)?;
        }
        contents.insert(name, file.content);
    }
    let view = Directory::open(tmp.path())?.into_view(dir, contents, None);
    Ok((tmp, view))
}

/// Terraform's local state at `path`, read whole. Terraform rewrites it in place (truncating
/// first) after each resource of an apply; one read mid-write does not parse. Then its backup
/// (`terraform.tfstate.backup`, the state as it was before the run that is writing began: an
/// earlier moment, whole) is read instead; while neither parses, both are read again, for up to
/// a second. `None` when there is none, or none parsed (then terraform reads it as it is).
fn copy_state(path: &Path) -> Option<Vec<u8>> {
    let mut backup = path.as_os_str().to_owned();
    backup.push(".backup");
    let whole =
        |p: &Path| crate::fsio::read(p).ok().filter(|b| serde_json::from_slice::<serde::de::IgnoredAny>(b).is_ok());
    if !path.exists() {
        return None;
    }
    for _ in 0..100 {
        if let Some(bytes) = whole(path).or_else(|| whole(Path::new(&backup))) {
            return Some(bytes);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}
