//! Strays: machines a reconcile's listings showed that no state records (the decisions are
//! `cloud_record::classify`'s; this is running them). A listing shows every machine carrying a
//! group's tag, so a twin that a lost answer made, or a leak, shows up there; each is read once
//! to learn whose it is (its tags, through an import planned in a mirror: terraform reads it,
//! nothing is written), then remembered in the cloud record, so that a run reads only what is
//! new. `sweep-orphans --strays` destroys the twins ([`Workspace::destroy_strays`]): imported
//! into addresses of their own (their type's configuration copied, its changes ignored), then
//! destroyed, by two targeted applies.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde_json::{json, Map, Value};

use super::{mirror, ChangeSet, FileWrite, Workspace};
use crate::cloud_record::CloudRecord;
use crate::cloud_record::{classify, Classified, Stray, StrayKind, WHOSE};
use crate::fsio::Perms;
use crate::group::GROUP_TAG;
use crate::names::{self, STRAYS_FILE};
use crate::terraform::{Apply, PlanOptions};
use crate::tfoutput::Changes;

impl Workspace<'_> {
    /// What the listings showed that the state does not record (`unknown`: type and cloud ID),
    /// as this directory sees it (foreign machines left out): those not known yet are read
    /// (their tags), and the cloud record remembers them; those no longer listed are
    /// forgotten. `addresses`: every address the state holds. A read that fails is a warning:
    /// the next run reads again. With how many were read (each costs the cloud two calls: the
    /// import's and its read).
    pub(crate) fn strays(
        &mut self,
        unknown: &[(String, String)],
        addresses: &BTreeSet<String>,
    ) -> Result<(Vec<Classified>, usize)> {
        let mut record = self.record::<CloudRecord>();
        let listed: BTreeSet<&str> = unknown.iter().map(|(_, id)| id.as_str()).collect();
        record.strays.retain(|id, _| listed.contains(id.as_str()));
        let new: Vec<&(String, String)> = unknown.iter().filter(|(_, id)| !record.strays.contains_key(id)).collect();
        let read = new.len();
        if !new.is_empty() {
            match self.read_whose(&new) {
                Ok(tags) => {
                    let now = self.now_ms()?;
                    // One that could not be read is read again by the next run.
                    for ((rtype, id), tags) in new.into_iter().zip(tags) {
                        if let Some(tags) = tags {
                            record.strays.insert(id.clone(), Stray { rtype: rtype.clone(), tags, first_seen: now });
                        }
                    }
                }
                Err(e) => self.ctx.printer.warn(&format!(
                    "the listings show {} machine(s) that no state records, and reading whose they are failed ({e:#}): the next run reads them again",
                    new.len()
                )),
            }
        }
        self.save(&record)?;
        Ok((self.classified(&record.strays, addresses), read))
    }

    /// The strays the cloud record remembers, as this directory sees them now (foreign ones,
    /// and those in the state since (`state`: its addresses and IDs), left out): for
    /// `describe`, `reconcile --check` and `sweep-orphans`, which list nothing.
    pub(crate) fn known_strays(&self, state: &BTreeMap<String, String>) -> Vec<Classified> {
        let mut record = self.dir.record::<CloudRecord>().unwrap_or_default();
        let ids: BTreeSet<&String> = state.values().collect();
        record.strays.retain(|id, _| !ids.contains(id));
        let addresses: BTreeSet<String> = state.keys().cloned().collect();
        self.classified(&record.strays, &addresses)
    }

    fn classified(&self, strays: &BTreeMap<String, Stray>, addresses: &BTreeSet<String>) -> Vec<Classified> {
        let profiles = self.ctx.profiles().ok();
        let files = self.readable_live_docs();
        let groups: BTreeSet<String> = files
            .iter()
            .flat_map(|(_, doc)| doc.get("resource").and_then(Value::as_object).into_iter().flatten())
            .flat_map(|(_, by_name)| by_name.as_object().into_iter().flatten())
            .filter_map(|(_, props)| props.pointer("/tags").or_else(|| props.pointer("/input/tags")))
            .filter_map(|tags| tags.get(GROUP_TAG)?.as_str().map(str::to_string))
            .collect();
        strays
            .iter()
            .map(|(id, s)| {
                let path = profiles.as_ref().and_then(|p| p.lookup(&s.rtype)?.tag_path());
                classify(id, s, &files, (addresses, &groups), path.as_deref().unwrap_or(&["tags".to_string()]))
            })
            .filter(|c| c.kind != StrayKind::Foreign)
            .collect()
    }

    /// Each object's tags that say whose it is (`cloud_record::WHOSE`), read by importing it
    /// in a mirror ([`stray_document`]): one read each, nothing written. One that cannot be read
    /// (gone since it was listed: a listing that lags) is left out, and the others read again
    /// without it: `None` for it.
    fn read_whose(&self, objects: &[&(String, String)]) -> Result<Vec<Option<BTreeMap<String, String>>>> {
        let profiles = self.ctx.profiles()?;
        let files = self.readable_live_docs();
        let (_, addresses) = stray_document(&files, objects);
        let mut unreadable: BTreeSet<String> = BTreeSet::new();
        let values = loop {
            let readable: Vec<&(String, String)> =
                objects.iter().zip(&addresses).filter(|(_, a)| !unreadable.contains(*a)).map(|(o, _)| *o).collect();
            if readable.is_empty() {
                break BTreeMap::new();
            }
            let (doc, targets) = stray_document(&files, &readable);
            let changes = ChangeSet::writing(vec![FileWrite { name: STRAYS_FILE.into(), doc, perms: Perms::Private }]);
            let mirror = mirror::build(&self.dir, &changes)?;
            let plan = mirror.path().join(".infrakit-tf-strays.plan");
            let options = PlanOptions { refresh: Some(false), lock: false, out: Some(&plan), targets: &targets };
            match self.plan_in_mirror(mirror.path(), &changes, &[], options) {
                Ok(_) => break self.terraform()?.in_dir(mirror.path()).show_plan_imports(&plan)?,
                Err(e) if crate::exit::code_for(&e) == crate::exit::Code::TerraformFailed => {
                    let imports: Vec<(String, String)> =
                        targets.iter().cloned().zip(readable.iter().map(|(_, id)| id.clone())).collect();
                    let failed = self.failed_of(&imports)?;
                    if failed.is_empty() {
                        return Err(e);
                    }
                    unreadable.extend(failed);
                }
                Err(e) => return Err(e),
            }
        };
        Ok(objects
            .iter()
            .zip(&addresses)
            .map(|((rtype, _), address)| {
                let path = profiles.lookup(rtype).and_then(|l| l.tag_path()).unwrap_or_else(|| vec!["tags".into()]);
                let tags = values
                    .get(address)?
                    .as_object()
                    .and_then(|v| crate::spec::lookup(v, &path).ok().flatten())
                    .and_then(Value::as_object);
                Some(WHOSE.iter().filter_map(|k| Some((k.to_string(), tags?.get(*k)?.as_str()?.to_string()))).collect())
            })
            .collect())
    }

    /// Destroys the twins among `strays` (`StrayKind::Twin`; the others are left alone): the
    /// strays file ([`names::STRAYS_FILE`]) imports each into an address of its own, applied;
    /// then the file goes and the next apply destroys them. Killed in between, the file
    /// stays (the machines imported, kept as they are), and the next `sweep-orphans --strays`
    /// finishes ([`Workspace::finish_strays`]). What terraform did.
    pub(crate) fn destroy_strays(&mut self, strays: &[Classified]) -> Result<Changes> {
        let files = self.readable_live_docs();
        let objects: Vec<(String, String)> =
            strays.iter().filter(|s| s.kind == StrayKind::Twin).map(|s| (s.rtype.clone(), s.id.clone())).collect();
        let refs: Vec<&(String, String)> = objects.iter().collect();
        let (doc, targets) = stray_document(&files, &refs);
        self.write(ChangeSet::writing(vec![FileWrite::managed(STRAYS_FILE.into(), doc)]))?;
        // Whatever the import did (one may be gone already: it fails), what it imported is
        // destroyed and the file goes: none is left imported and kept.
        let imported = self.apply(Apply::Targets(&targets));
        let destroyed = self.finish_strays()?;
        imported?;
        Ok(destroyed)
    }

    /// A sweep of strays cut short left its file (`reconcile`, before anything applies): what it
    /// imported is forgotten again (left alone in the cloud: strays again, reported, for the
    /// next `sweep-orphans --strays`), and the file goes, so that no import of a machine gone
    /// since can make every apply fail. Whether there was one.
    pub(crate) fn forget_strays_sweep(&mut self) -> Result<bool> {
        if !self.dir.has(STRAYS_FILE) {
            return Ok(false);
        }
        let doc = self.dir.read_doc(STRAYS_FILE)?;
        let targets = crate::lookup::declared(&[(STRAYS_FILE.to_string(), doc)]);
        let state = self.state()?;
        let imported: Vec<String> = targets.into_iter().filter(|a| state.contains_key(a)).collect();
        self.ctx.printer.warn(&format!(
            "a sweep of strays was cut short: the {} machine(s) it imported are left alone, strays again (`infrakit-tf sweep-orphans --strays` destroys them)",
            imported.len()
        ));
        self.forget(&imported)?;
        self.write(ChangeSet::removing(vec![STRAYS_FILE.to_string()]))?;
        Ok(true)
    }

    /// Removes the strays file, if one is there, and destroys what it imported: the second
    /// half of [`Workspace::destroy_strays`].
    pub(crate) fn finish_strays(&mut self) -> Result<Changes> {
        if !self.dir.has(STRAYS_FILE) {
            return Ok(Changes::default());
        }
        let doc = self.dir.read_doc(STRAYS_FILE)?;
        let targets = crate::lookup::declared(&[(STRAYS_FILE.to_string(), doc)]);
        self.write(ChangeSet::removing(vec![STRAYS_FILE.to_string()]))?;
        let destroyed = self.apply(Apply::Targets(&targets))?;
        let mut record = self.record::<CloudRecord>();
        let state = self.state()?;
        let gone: BTreeSet<String> =
            targets.iter().filter(|a| !state.contains_key(*a)).filter_map(|a| stray_id(a)).collect();
        record.strays.retain(|id, _| !gone.contains(&names::safe_id(id)));
        self.save(&record)?;
        Ok(destroyed)
    }
}

/// The name prefix of a stray's address of its own.
const STRAY_PREFIX: &str = "infrakit_tf_stray_";

/// The ID part of a stray's own address (as [`names::safe_id`] made it).
fn stray_id(address: &str) -> Option<String> {
    address.split_once('.').and_then(|(_, n)| n.strip_prefix(STRAY_PREFIX)).map(str::to_string)
}

/// A document that imports `objects` (type, cloud ID) into addresses of their own
/// (`<type>.infrakit_tf_stray_<id>`), each with its type's configuration copied from a
/// resource `files` declare and every change ignored (an import, nothing else); and those
/// addresses.
fn stray_document(files: &[(String, Value)], objects: &[&(String, String)]) -> (Value, Vec<String>) {
    let mut resources: Map<String, Value> = Map::new();
    let mut imports = Vec::new();
    let mut addresses = Vec::new();
    for (rtype, id) in objects {
        let mut config = files
            .iter()
            .find_map(|(_, doc)| doc.get("resource")?.get(rtype)?.as_object()?.values().next().cloned())
            .unwrap_or_else(|| json!({}));
        if let Some(props) = config.as_object_mut() {
            let lifecycle = props.entry("lifecycle").or_insert_with(|| json!({}));
            if let Some(lifecycle) = lifecycle.as_object_mut() {
                lifecycle.insert("ignore_changes".into(), json!("all"));
            }
        }
        let name = format!("{STRAY_PREFIX}{}", names::safe_id(id));
        let by_name = resources.entry(rtype.clone()).or_insert_with(|| json!({}));
        by_name.as_object_mut().expect("an object").insert(name.clone(), config);
        let address = format!("{rtype}.{name}");
        imports.push(json!({"to": address, "id": crate::tfconfig::literal(id)}));
        addresses.push(address);
    }
    (json!({"resource": resources, "import": imports}), addresses)
}
