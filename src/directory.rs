//! The managed directory as the commands see it: the names in it, the instances its files
//! define, the dedicated slots they hold. A listing, read from the disk or from a reader's
//! view held in memory (`workspace::view`); nothing here locks, journals or writes but the
//! removal of stale temporary files (`fsio`). The workspace writes, and never follows or
//! replaces a symbolic link, nor replaces a file that is not JSON
//! ([`Directory::check_replaceable`]).
//!
//! Only our own names are ever opened (`instance-<digits>`, `*_dedicated_*`, `*_global`, each
//! `.tf.json` or `.tf.json.new`); user files are listed but never parsed, changed or deleted.
//! Where an instance has both a live file and a queued twin, the queued one is its current
//! definition: it is what terraform will see next.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

use crate::exit::invalid;
use crate::expand::Slots;
use crate::fsio;
use crate::names::{self, InstanceId, Kind, Suffix, LAST_ID};
use crate::profile::Profiles;
use crate::record::Record;
use crate::tfconfig;

pub(crate) struct Directory {
    path: PathBuf,
    /// The directory messages name: `path`, or the user's directory a store's view stands
    /// for.
    shown: PathBuf,
    /// Each listed name, and its inode as the listing found it (no `stat`: the kernel gives
    /// it) or as `note` saw it; 0 where it is not known.
    names: BTreeMap<String, u64>,
    /// A reader's view (`workspace::view`): the managed files' bytes as of one moment, read
    /// from here rather than from the disk.
    contents: Option<BTreeMap<String, Vec<u8>>>,
    /// A reader's copy of terraform's local state, as of that moment.
    state: Option<Vec<u8>>,
}

/// One managed file of the listing.
#[derive(Debug, Clone)]
pub(crate) struct ManagedFile<'a> {
    /// Its name in the directory: `instance-1.tf.json.new`.
    pub(crate) name: &'a str,
    /// Its name without the suffix: `instance-1`.
    pub(crate) base: &'a str,
    pub(crate) kind: Kind,
    /// Live (`.tf.json`) or queued (`.tf.json.new`).
    pub(crate) suffix: Suffix,
}

/// One instance as its current file defines it.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    pub(crate) id: InstanceId,
    /// The current file's name (queued twin first).
    pub(crate) file: String,
    pub(crate) suffix: Suffix,
    /// Parsed document, or the parse error.
    pub(crate) doc: Result<Value, String>,
    /// (type, name) of its VM, if the document has one.
    pub(crate) vm: Option<(String, String)>,
    pub(crate) tags: BTreeMap<String, String>,
    /// Files named by `infrakit.attach` in any of its files (live and queued).
    pub(crate) attachments: BTreeSet<String>,
}

impl Instance {
    /// The address of its VM (`type.name`), when its file has one.
    pub(crate) fn vm_address(&self) -> Option<String> {
        self.vm.as_ref().map(|(t, n)| format!("{t}.{n}"))
    }

    pub(crate) fn logical_id(&self) -> Option<&str> {
        self.tags.get(tfconfig::LOGICAL_ID_TAG).map(String::as_str)
    }

    /// Why nothing can be said about what this instance uses (its attachments, its VM): a file
    /// that does not parse, or one with no VM of a known type. `None` when it is readable.
    pub(crate) fn unreadable(&self) -> Option<String> {
        match &self.doc {
            Err(e) => Some(e.clone()),
            Ok(_) if self.vm.is_none() => Some(format!(
                "`{}` has no VM of a known type (declare it with --vm-type or in infrakit-tf.json)",
                self.file
            )),
            Ok(_) => None,
        }
    }

    pub(crate) fn vm_props(&self) -> Option<&serde_json::Map<String, Value>> {
        let (t, n) = self.vm.as_ref()?;
        tfconfig::resource(self.doc.as_ref().ok()?, t, n)
    }
}

impl Directory {
    /// Opens and lists a directory that must exist.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let abs = std::path::absolute(path).with_context(|| format!("failed to resolve `{}`", path.display()))?;
        let entries = match std::fs::read_dir(&abs) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(crate::exit::missing_directory(path).into()),
            Err(e) => return Err(e).with_context(|| format!("failed to list `{}`", abs.display())),
        };
        let mut names = BTreeMap::new();
        for entry in entries {
            let entry = entry.with_context(|| format!("failed to list `{}`", abs.display()))?;
            if let Ok(name) = entry.file_name().into_string() {
                refuse_special(&abs, &name, &entry)?;
                names.insert(name, std::os::unix::fs::DirEntryExt::ino(&entry));
            }
        }
        Ok(Directory { shown: abs.clone(), path: abs, names, contents: None, state: None })
    }

    /// A reader's copy of terraform's local state (`workspace::view`), if it has one.
    pub(crate) fn state_copy(&self) -> Option<&[u8]> {
        self.state.as_deref()
    }

    /// A file's bytes: from the reader's view if there is one, else from the disk.
    pub(crate) fn bytes(&self, name: &str) -> io::Result<Vec<u8>> {
        match &self.contents {
            Some(contents) => contents.get(name).cloned().ok_or_else(|| io::ErrorKind::NotFound.into()),
            None => crate::fsio::read(self.path.join(name)),
        }
    }

    /// A reader's view of this listing (`workspace::view`): it stands for `shown` (named in
    /// messages), and the managed files are `contents`, held in memory (listed here if they
    /// were not), with `state` its copy of terraform's local state.
    pub(crate) fn into_view(
        mut self,
        shown: &Path,
        contents: BTreeMap<String, Vec<u8>>,
        state: Option<Vec<u8>>,
    ) -> Self {
        for name in contents.keys() {
            self.names.entry(name.clone()).or_insert(0);
        }
        Directory {
            shown: std::path::absolute(shown).unwrap_or_else(|_| shown.to_path_buf()),
            contents: Some(contents),
            state,
            ..self
        }
    }

    /// The names and inodes (see `workspace::sync::synced`) of the managed files and of any
    /// other `*.tf.json` (a quick superset of `names::is_ours`): as listed, or looked up for a
    /// name noted since; `None` for one that cannot be.
    pub(crate) fn listed_inodes(&self) -> impl Iterator<Item = (&str, Option<u64>)> + '_ {
        let wanted = |n: &str| {
            n.ends_with(names::LIVE)
                || n.ends_with(names::QUEUED)
                || n == LAST_ID
                || n == names::HEALTH_RECORD
                || n == names::REFRESH_RECORD
                || n == names::CLOUD_RECORD
                || n == names::ROLLOUT_RECORD
                || n == names::PLACEMENT_RECORD
        };
        self.names.iter().filter(move |(n, _)| wanted(n)).map(|(n, ino)| {
            let looked_up =
                || std::fs::symlink_metadata(self.path.join(n)).ok().map(|m| std::os::unix::fs::MetadataExt::ino(&m));
            (n.as_str(), Some(*ino).filter(|i| *i != 0).or_else(looked_up))
        })
    }

    /// The directory to name in messages.
    pub(crate) fn shown(&self) -> &Path {
        &self.shown
    }

    /// Removes the temporary files a killed write left (see `fsio::is_temp`), from the
    /// directory and from this listing. Only under the directory lock.
    pub(crate) fn remove_stale_temps(&mut self) -> Result<()> {
        let stale: Vec<String> = self.names.keys().filter(|n| fsio::is_temp(n)).cloned().collect();
        for name in stale {
            fsio::remove(&self.path.join(&name))?;
            self.names.remove(&name);
        }
        Ok(())
    }

    /// Keeps the listing up to date with a change the workspace made: `name` now exists or
    /// not. (Listing a large directory again costs as much as a small command.)
    pub(crate) fn note(&mut self, name: &str, exists: bool) {
        if exists {
            self.names.insert(name.to_string(), 0); // its inode is looked up if asked for
        } else {
            self.names.remove(name);
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether Terraform may hold state for this directory: a local state file or workspace
    /// states, or a backend recorded by `init` (remote state). When none is there, nothing can
    /// be in state and `terraform show` need not run.
    pub(crate) fn may_have_state(&self) -> bool {
        self.has("terraform.tfstate")
            || self.has("terraform.tfstate.d")
            || self.path.join(".terraform/terraform.tfstate").exists()
    }

    /// Every entry name in the directory.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.names.keys().map(String::as_str)
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// The managed files, in name order.
    pub(crate) fn managed(&self) -> impl Iterator<Item = ManagedFile<'_>> + '_ {
        self.names.keys().filter_map(|name| {
            let (base, suffix) = names::split_file_name(name)?;
            Some(ManagedFile { name: name.as_str(), base, kind: names::classify(base)?, suffix })
        })
    }

    /// How many live instance files (`instance-<digits>.tf.json`) there are: instances whose
    /// machines terraform's state must know.
    pub(crate) fn live_instances(&self) -> usize {
        self.managed().filter(|f| f.suffix == Suffix::Live && matches!(f.kind, Kind::Instance(_))).count()
    }

    /// The names of the queued files (`.tf.json.new`), in name order.
    pub(crate) fn queued(&self) -> impl Iterator<Item = &str> + '_ {
        self.managed().filter(|f| f.suffix == Suffix::Queued).map(|f| f.name)
    }

    /// The existing names of `base` (live, queued), in that order.
    pub(crate) fn twins(&self, base: &str) -> Vec<String> {
        [Suffix::Live, Suffix::Queued]
            .iter()
            .map(|s| format!("{base}{}", s.as_str()))
            .filter(|n| self.names.contains_key(n))
            .collect()
    }

    /// The current file of `base`: the queued twin if there is one, else the live file.
    pub(crate) fn current(&self, base: &str) -> Option<String> {
        self.twins(base).pop()
    }

    /// The name to write `base` to: its current file, or a new queued file.
    pub(crate) fn target(&self, base: &str) -> String {
        self.current(base).unwrap_or_else(|| format!("{base}{}", names::QUEUED))
    }

    pub(crate) fn instance_ids(&self) -> BTreeSet<InstanceId> {
        self.managed()
            .filter_map(|f| match f.kind {
                Kind::Instance(id) => Some(id),
                _ => None,
            })
            .collect()
    }

    /// A fresh ID: the current Unix time, or one past the highest ID any file holds or this
    /// directory ever issued (`.infrakit-tf-last-id`), whichever is larger. So an ID whose file
    /// was removed but whose machine may still be in Terraform's state is never reused, and
    /// nothing waits for the clock.
    pub(crate) fn next_id(&self, now_secs: u64) -> Result<InstanceId> {
        let highest = self.instance_ids().into_iter().map(|id| id.number()).chain(self.last_issued()).max();
        let next = match highest {
            None => 0,
            Some(n) => n.checked_add(1).ok_or_else(|| {
                invalid(format!("no instance ID is left after `instance-{n}` in `{}`", self.path.display()))
                    .hint("rename or remove that file")
            })?,
        };
        Ok(InstanceId::new(now_secs.max(next)))
    }

    /// The ID record: the highest instance number whose file was ever removed (an ID whose
    /// file exists needs no record: the file holds it). See [`Directory::next_id`].
    pub(crate) fn last_issued(&self) -> Option<u64> {
        let bytes = self.bytes(LAST_ID).ok()?;
        String::from_utf8_lossy(&bytes).trim().parse::<u64>().ok()
    }

    /// A record (`record::Record`: the health, refresh, cloud, rollout or placement record):
    /// empty when there is none; why not when it cannot be read or is not valid.
    pub(crate) fn record<R: Record>(&self) -> Result<R, String> {
        match self.bytes(R::FILE) {
            Ok(bytes) => R::parse(&bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(R::default()),
            Err(e) => Err(format!("failed to read `{}`: {e}", self.path.join(R::FILE).display())),
        }
    }

    /// Reads and parses one managed file.
    pub(crate) fn read_doc(&self, name: &str) -> Result<Value> {
        let path = self.path.join(name);
        let text = self.bytes(name).with_context(|| format!("failed to read `{}`", path.display()))?;
        serde_json::from_slice(&text)
            .map_err(|e| invalid(format!("`{}` is not valid JSON: {e}", path.display())).into())
    }

    /// Every instance, in ID order, each read from its current file. Files are read in
    /// parallel: this is the hot path of `describe` on large directories.
    pub(crate) fn instances(&self, profiles: &Profiles) -> Vec<Instance> {
        let mut by_id: BTreeMap<InstanceId, Vec<(String, Suffix)>> = BTreeMap::new();
        for f in self.managed() {
            if let Kind::Instance(id) = f.kind {
                by_id.entry(id).or_default().push((f.name.to_string(), f.suffix));
            }
        }
        let work: Vec<(InstanceId, Vec<(String, Suffix)>)> = by_id.into_iter().collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
        let chunk = work.len().div_ceil(threads).max(256);
        std::thread::scope(|scope| {
            let handles: Vec<_> = work
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        part.iter().map(|(id, files)| self.load_instance(id, files, profiles)).collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().expect("reader thread panicked")).flatten().collect()
        })
    }

    /// Reads one instance from its current file. A file that vanished since the listing (a
    /// concurrent promotion or destroy) falls back to its twin; an instance whose files are all
    /// gone is skipped.
    fn load_instance(&self, id: &InstanceId, files: &[(String, Suffix)], profiles: &Profiles) -> Option<Instance> {
        let parse = |name: &str| self.read_doc(name).map_err(|e| format!("{e:#}"));
        let mut candidates: Vec<&(String, Suffix)> = files.iter().collect();
        candidates.sort_by_key(|(_, s)| std::cmp::Reverse(*s));
        // One read per file, no stat: this is describe's hot path.
        let (file, suffix, doc) = candidates.iter().find_map(|(name, suffix)| {
            let path = self.path.join(name);
            let doc = match self.bytes(name) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
                Err(e) => Err(format!("failed to read `{}`: {e}", path.display())),
                Ok(bytes) => {
                    serde_json::from_slice(&bytes).map_err(|e| format!("`{}` is not valid JSON: {e}", path.display()))
                }
            };
            Some((name.clone(), *suffix, doc))
        })?;
        let id_text = id.to_string();
        let vm_and_tags = |doc: &Value| {
            let (t, n) = tfconfig::find_vm(doc, profiles, &id_text)?;
            let props = tfconfig::resource(doc, t, n)?;
            let tags = tfconfig::read_tags(props, profiles.get(t)?);
            Some(((t.to_string(), n.to_string()), tags))
        };
        let (vm, tags) = match doc.as_ref().ok().and_then(vm_and_tags) {
            Some((vm, tags)) => (Some(vm), tags),
            None => (None, BTreeMap::new()),
        };
        let mut attachments: BTreeSet<String> = tfconfig::attachments(&tags).into_iter().collect();
        // A live twin may still name attachments the queued file dropped.
        for (other, _) in files.iter().filter(|(n, _)| *n != file) {
            if let Some((_, tags)) = parse(other).ok().as_ref().and_then(vm_and_tags) {
                attachments.extend(tfconfig::attachments(&tags));
            }
        }
        Some(Instance { id: id.clone(), file, suffix, doc, vm, tags, attachments })
    }

    /// Refuses a logical ID another instance already has: two pets with one logical ID would
    /// define the same resources twice, and every apply of the directory would fail.
    pub(crate) fn check_logical_id_free(&self, profiles: &Profiles, lid: &str) -> Result<()> {
        match self.instances(profiles).iter().find(|i| i.logical_id() == Some(lid)) {
            None => Ok(()),
            Some(twin) => {
                Err(invalid(format!("logical ID `{}` is already used by {}", crate::text::short(lid), twin.id))
                    .hint(format!(
                        "destroy {} first (a rolling update keeps its slot), or pick another logical ID",
                        twin.id
                    ))
                    .into())
            }
        }
    }

    /// Which dedicated slots exist and which are attached, for slot choice. An instance file
    /// that cannot be read is an error here: its slot could otherwise be handed out twice.
    /// `instances` are those that stay: one that leaves in the same change is left out, and
    /// its slot is an orphan then.
    pub(crate) fn slots(&self, instances: &[Instance]) -> Result<Slots> {
        let existing: BTreeSet<String> =
            self.managed().filter(|f| matches!(f.kind, Kind::Dedicated { .. })).map(|f| f.base.to_string()).collect();
        let mut attached = BTreeSet::new();
        let mut missing = Vec::new();
        for inst in instances {
            if let Err(e) = &inst.doc {
                return Err(invalid(format!("cannot tell which dedicated slots are free: {e}"))
                    .hint("fix or remove that instance file, then re-run")
                    .into());
            }
            for base in &inst.attachments {
                if matches!(names::classify(base), Some(Kind::Dedicated { .. })) && !existing.contains(base) {
                    missing.push((inst.id.clone(), base.clone()));
                }
            }
            attached.extend(inst.attachments.iter().cloned());
        }
        Ok(Slots { existing, attached, missing, take: None })
    }

    /// Checks that a write may replace `name`: it is absent, or a regular file of JSON. A
    /// symbolic link is never followed nor replaced (it may point at anything, ours or not),
    /// and a file that is not JSON is not overwritten: it may be a hand edit gone wrong, or
    /// not ours. Commands check every file they will write before writing any.
    pub(crate) fn check_replaceable(&self, name: &str) -> Result<()> {
        self.replaceable(name).map(drop)
    }

    /// The document `name` holds, `None` when it is absent; an error where a write must not
    /// replace it (see [`Directory::check_replaceable`]). A write whose document equals it,
    /// whatever its layout, is unchanged: files written by the reference plugin are
    /// Go-indented and are left as they are.
    pub(crate) fn replaceable(&self, name: &str) -> Result<Option<Value>> {
        let path = self.path.join(name);
        let refuse = |why: String| -> Result<Option<Value>> {
            Err(invalid(format!("`{}` {why}", path.display()))
                .hint("restore it as a regular file of JSON, or remove it to have infrakit-tf write it afresh")
                .into())
        };
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("failed to read `{}`", path.display())),
            Ok(meta) if meta.file_type().is_symlink() => {
                refuse("is a symbolic link: infrakit-tf neither follows nor replaces it".into())
            }
            Ok(meta) if !meta.is_file() => refuse("is not a regular file: infrakit-tf does not replace it".into()),
            Ok(_) => {
                let bytes = crate::fsio::read(&path).with_context(|| format!("failed to read `{}`", path.display()))?;
                match serde_json::from_slice(&bytes) {
                    Ok(old) => Ok(Some(old)),
                    Err(e) => refuse(format!("is not valid JSON ({e}): infrakit-tf does not replace it")),
                }
            }
        }
    }
}

/// Refuses (exit 3) a FIFO, a socket or a device (or a link to one) where infrakit-tf or
/// terraform reads a file: a managed file, any file of ours (`infrakit-tf*`, `.infrakit-tf*`:
/// records, markers, the configuration), a configuration file (`*.tf`, `*.tf.json`, variable
/// files, the lock file), terraform's state. Opening one would hang the command (a FIFO
/// nobody writes) or read what it should not; it is never opened. Under `.terraform`, where
/// only files and directories belong, any of them is refused.
fn refuse_special(dir: &Path, name: &str, entry: &std::fs::DirEntry) -> Result<()> {
    let read = names::is_ours(name)
        || name.starts_with("infrakit-tf")
        || name.starts_with(".infrakit-tf")
        || name.starts_with("terraform.tfstate")
        || name == "errored.tfstate"
        || [".tf", ".tf.json", ".tfvars", ".tfvars.json", ".terraform.lock.hcl"].iter().any(|s| name.ends_with(s));
    if name == ".terraform" && entry.file_type().is_ok_and(|t| t.is_dir()) {
        let inner = dir.join(name);
        for entry in std::fs::read_dir(&inner).into_iter().flatten().filter_map(Result::ok) {
            if let Ok(inner_name) = entry.file_name().into_string() {
                special(&inner, &inner_name, &entry)?;
            }
        }
        return Ok(());
    }
    if !read {
        return Ok(());
    }
    special(dir, name, entry)
}

/// [`refuse_special`] of one entry it reads.
fn special(dir: &Path, name: &str, entry: &std::fs::DirEntry) -> Result<()> {
    let kind = match entry.file_type() {
        Ok(t) if t.is_symlink() => std::fs::metadata(dir.join(name)).map(|m| m.file_type()),
        other => other,
    };
    let Ok(kind) = kind else { return Ok(()) }; // a dangling link: reading it says so
    use std::os::unix::fs::FileTypeExt;
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        return Ok(());
    };
    Err(invalid(format!("`{name}` in `{}` is {what}, not a file: it is never opened", dir.display()))
        .hint("remove it (or rename it); nothing was changed")
        .into())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // test set-up makes links and directories directly
mod tests {
    use super::*;
    use crate::exit::{code_for, Code};
    use crate::fsio::Perms;

    fn dir_with(setup: impl FnOnce(&Path)) -> (tempfile::TempDir, Directory) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("dir")).unwrap();
        setup(&tmp.path().join("dir"));
        let dir = Directory::open(&tmp.path().join("dir")).unwrap();
        (tmp, dir)
    }

    #[test]
    fn equal_documents_are_held_whatever_their_layout() {
        let (_tmp, dir) = dir_with(|d| {
            fsio::write_atomic(&d.join("a_global.tf.json"), b"{\"resource\":  {}}", Perms::Public).unwrap();
        });
        let held = |name: &str, doc: Value| dir.replaceable(name).unwrap().is_some_and(|old| old == doc);
        assert!(held("a_global.tf.json", serde_json::json!({"resource": {}})));
        assert!(!held("a_global.tf.json", serde_json::json!({"resource": {"x": {}}})));
        assert!(!held("b_global.tf.json.new", serde_json::json!({})));
    }

    // Links (to JSON, to garbage, dangling), garbage and directories are refused by name, and
    // left as they are, as is what a link points at.
    #[test]
    fn writes_never_follow_or_replace_links_or_garbage() {
        let (tmp, dir) = dir_with(|d| {
            let outside = d.parent().unwrap();
            fsio::write_atomic(&outside.join("json"), b"{}", Perms::Public).unwrap();
            fsio::write_atomic(&outside.join("garbage"), b"garbage", Perms::Public).unwrap();
            std::os::unix::fs::symlink(outside.join("json"), d.join("instance-1.tf.json")).unwrap();
            std::os::unix::fs::symlink(outside.join("garbage"), d.join("w_dedicated_1.tf.json.new")).unwrap();
            std::os::unix::fs::symlink(outside.join("nowhere"), d.join("w_global.tf.json")).unwrap();
            fsio::write_atomic(&d.join("w_dedicated_2.tf.json"), b"not json", Perms::Public).unwrap();
            std::fs::create_dir(d.join("v_global.tf.json")).unwrap();
        });
        for (name, says) in [
            ("instance-1.tf.json", "is a symbolic link"),
            ("w_dedicated_1.tf.json.new", "is a symbolic link"),
            ("w_global.tf.json", "is a symbolic link"),
            ("w_dedicated_2.tf.json", "is not valid JSON"),
            ("v_global.tf.json", "is not a regular file"),
        ] {
            let err = dir.check_replaceable(name).unwrap_err();
            assert_eq!(code_for(&err), Code::Invalid, "{err:#}");
            let message = format!("{err:#}");
            assert!(message.contains(&format!("{name}` {says}")), "{message}");
            assert!(crate::exit::hint_for(&err).is_some_and(|h| h.contains("remove it")), "{message}");
        }
        let kept = |p: &str| std::fs::symlink_metadata(dir.path().join(p)).unwrap().file_type().is_symlink();
        assert!(kept("instance-1.tf.json") && kept("w_dedicated_1.tf.json.new") && kept("w_global.tf.json"));
        assert_eq!(crate::fsio::read(tmp.path().join("json")).unwrap(), b"{}");
        assert_eq!(crate::fsio::read(dir.path().join("w_dedicated_2.tf.json")).unwrap(), b"not json");
        assert!(dir.check_replaceable("absent.tf.json").is_ok());
    }

    // A file that vanishes between listing and reading (a concurrent promotion or destroy) is
    // read from its twin, or the instance is skipped; it is never reported broken.
    #[test]
    fn files_vanishing_between_listing_and_reading() {
        let put = |d: &Path, name: &str, text: &str| {
            fsio::write_atomic(&d.join(name), text.as_bytes(), Perms::Public).unwrap()
        };
        let (_tmp, dir) = dir_with(|d| {
            put(
                d,
                "instance-1.tf.json",
                r#"{"resource": {"softlayer_virtual_guest": {"instance-1": {"tags": ["tag1:val1"]}}}}"#,
            );
            put(
                d,
                "instance-1.tf.json.new",
                r#"{"resource": {"softlayer_virtual_guest": {"instance-1": {"tags": ["tag1:queued"]}}}}"#,
            );
            put(
                d,
                "instance-2.tf.json",
                r#"{"resource": {"azurerm_virtual_machine": {"instance-2": {"tags": {"tag2": "val2"}}}}}"#,
            );
            put(d, "instance-3.tf.json.new", r#"{"resource": {"aws_instance": {"instance-3": {}}}}"#);
        });
        fsio::remove(&dir.path().join("instance-1.tf.json.new")).unwrap();
        fsio::remove(&dir.path().join("instance-3.tf.json.new")).unwrap();
        let found = dir.instances(&Profiles::builtin());
        let ids: Vec<String> = found.iter().map(|i| i.id.to_string()).collect();
        assert_eq!(ids, ["instance-1", "instance-2"]);
        assert!(found.iter().all(|i| i.doc.is_ok()));
        assert_eq!(found[0].tags.get("tag1").map(String::as_str), Some("val1"), "read from the live twin");
    }
}
