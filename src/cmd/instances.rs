//! The file changes of adding and removing instances, shared by `provision`, `destroy` and
//! `reconcile`'s groups: which files a new instance writes (its ID issued and its dedicated
//! slot chosen as `provision` does), and which files removing instances takes away.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;

use crate::cli::Reason;
use crate::cmd::read_slots_without;
use crate::directory::{Directory, Instance};
use crate::exit::invalid;
use crate::expand::{self, Request, Slots};
use crate::names::{self, InstanceId, Kind};
use crate::output::Printer;
use crate::profile::Profiles;
use crate::spec::Spec;
use crate::workspace::FileWrite;

/// New instances for one change: each gets the next ID and, for cattle with a dedicated
/// resource, the lowest orphaned or free slot, as that many `provision`s in a row would.
pub(crate) struct NewInstances<'a> {
    dir: &'a Directory,
    profiles: &'a Profiles,
    printer: &'a Printer,
    next: Option<InstanceId>,
    slots: Option<Slots>,
    /// Instances removed in the same change: their slots are free to take.
    leaving: BTreeSet<InstanceId>,
    /// The files to write, in order.
    pub(crate) writes: Vec<FileWrite>,
}

impl<'a> NewInstances<'a> {
    pub(crate) fn new(dir: &'a Directory, profiles: &'a Profiles, printer: &'a Printer) -> Self {
        NewInstances { dir, profiles, printer, next: None, slots: None, leaving: BTreeSet::new(), writes: Vec::new() }
    }

    /// The same, in a change that also removes the instances `leaving`.
    pub(crate) fn replacing(mut self, leaving: &BTreeSet<InstanceId>) -> Self {
        self.leaving = leaving.clone();
        self
    }

    /// Adds one instance of `spec` (a pet when `logical_id` is given); returns its ID.
    pub(crate) fn add(
        &mut self,
        spec: &Spec,
        logical_id: Option<&str>,
        tags: &BTreeMap<String, String>,
    ) -> Result<InstanceId> {
        let id = match &self.next {
            Some(id) => id.clone(),
            None => {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
                self.dir.next_id(now)?
            }
        };
        let needs_slot =
            logical_id.is_none() && spec.resources.iter().any(|r| matches!(r.scope, names::Scope::Dedicated(_)));
        if needs_slot && self.slots.is_none() {
            self.slots = Some(read_slots_without(self.dir, self.profiles, &self.leaving, self.printer)?);
        }
        let no_slots = Slots::default();
        let expansion = expand::expand(
            &Request { spec, profiles: self.profiles, id: &id, logical_id, tags },
            if needs_slot { self.slots.as_ref().expect("read above") } else { &no_slots },
        )
        .map_err(invalid)?;
        for (base, doc) in expansion.files {
            if let (Some(slots), Some(Kind::Dedicated { .. })) = (self.slots.as_mut(), names::classify(&base)) {
                slots.attached.insert(base.clone()); // taken by this instance
            }
            self.writes.push(FileWrite::managed(self.dir.target(&base), doc));
        }
        let following = id.number().checked_add(1).map(InstanceId::new);
        self.next = following;
        Ok(id)
    }
}

/// The files that removing `ids` takes away: each instance's own files and, for a
/// termination, the dedicated and global files it is attached to that no remaining instance
/// refers to (a rolling update keeps them, for the replacement to re-attach). Refuses when a
/// remaining instance cannot be read: it may use any of them.
pub(crate) fn removals(
    dir: &Directory,
    instances: &[Instance],
    ids: &BTreeSet<InstanceId>,
    reason: Reason,
    printer: &Printer,
) -> Result<Vec<String>> {
    let mut doomed: Vec<String> = ids.iter().flat_map(|id| dir.twins(&id.to_string())).collect();
    if reason == Reason::RollingUpdate {
        return Ok(doomed);
    }
    let (leaving, staying): (Vec<&Instance>, Vec<&Instance>) = instances.iter().partition(|i| ids.contains(&i.id));
    // An instance we cannot read may use any dedicated or global file: removing one would
    // pull it from under that instance. Refuse, as slot choice does.
    if let Some((blind, why)) = staying.iter().find_map(|i| Some((i, i.unreadable()?))) {
        return Err(invalid(format!("cannot tell which files {} still uses: {why}", blind.id))
            .hint("fix that instance file, or destroy with --reason rolling-update (removes only the instance file)")
            .into());
    }
    let still_used: BTreeSet<&String> = staying.iter().flat_map(|i| &i.attachments).collect();
    let attached: BTreeSet<&String> = leaving.iter().flat_map(|i| &i.attachments).collect();
    for base in attached.difference(&still_used) {
        // Only ever our dedicated and global files, whatever a tag says.
        let ours = names::check_path_component(base, "attachment").is_ok()
            && matches!(names::classify(base), Some(Kind::Dedicated { .. } | Kind::Global { .. }));
        if !ours {
            printer.warn(&format!(
                "ignoring attachment `{}`: not a dedicated or global file name",
                crate::text::short(base)
            ));
            continue;
        }
        doomed.extend(dir.twins(base));
    }
    Ok(doomed)
}
