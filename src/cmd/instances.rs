//! The file changes of adding and removing instances, shared by `provision`, `destroy` and
//! `reconcile`'s groups: which files a new instance writes (its ID issued and its dedicated
//! slot chosen as `provision` does), and which files removing instances takes away.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;

use crate::cli::Reason;
use crate::cmd::read_slots;
use crate::directory::{Directory, Instance};
use crate::exit::invalid;
use crate::expand::{self, Request, Slots};
use crate::names::{self, InstanceId, Kind};
use crate::output::Printer;
use crate::profile::Profiles;
use crate::spec::Spec;
use crate::text::short;
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
    /// The instances that stay, read once (on the first instance that needs them).
    staying: Option<Vec<Instance>>,
    /// Logical IDs in use, with their instance.
    logical_ids: Option<BTreeMap<String, InstanceId>>,
    /// The files to write, in order.
    pub(crate) writes: Vec<FileWrite>,
}

impl<'a> NewInstances<'a> {
    pub(crate) fn new(dir: &'a Directory, profiles: &'a Profiles, printer: &'a Printer) -> Self {
        NewInstances {
            dir,
            profiles,
            printer,
            next: None,
            slots: None,
            leaving: BTreeSet::new(),
            staying: None,
            logical_ids: None,
            writes: Vec::new(),
        }
    }

    /// The same, issuing IDs after `last` (instances another change adds first).
    pub(crate) fn after(mut self, last: Option<&InstanceId>) -> Self {
        if let Some(last) = last {
            self.next = last.number().checked_add(1).map(InstanceId::new);
        }
        self
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
        if let Some(lid) = logical_id {
            self.claim_logical_id(lid, &id)?;
        }
        let dedicated = spec.resources.iter().any(|r| matches!(r.scope, names::Scope::Dedicated(_)));
        if dedicated {
            self.slots()?;
        }
        let no_slots = Slots::default();
        let expansion = expand::expand(
            &Request { spec, profiles: self.profiles, id: &id, logical_id, tags },
            self.slots.as_ref().unwrap_or(&no_slots),
        )
        .map_err(invalid)?;
        // A dedicated file is attached to one instance at a time: a pet's slot (named by its
        // logical ID, which may look like a cattle slot number) must not be another's.
        let taken: Vec<&String> = expansion
            .files
            .keys()
            .filter(|base| matches!(names::classify(base), Some(Kind::Dedicated { .. })))
            .filter(|base| self.slots.as_ref().is_some_and(|s| s.attached.contains(*base)))
            .collect();
        if let Some(base) = taken.first() {
            return Err(invalid(format!("dedicated slot `{}` is attached to another instance", short(base)))
                .hint("a volume is never attached to two machines: pick another logical ID, or destroy that instance first")
                .into());
        }
        for (base, doc) in expansion.files {
            if let (Some(slots), Some(Kind::Dedicated { .. })) = (self.slots.as_mut(), names::classify(&base)) {
                slots.attached.insert(base.clone()); // taken by this instance
            }
            self.writes.push(FileWrite::managed(self.dir.target(&base), doc));
        }
        if let Some(slots) = self.slots.as_mut() {
            slots.take = None; // that instance's alone
        }
        let following = id.number().checked_add(1).map(InstanceId::new);
        self.next = following;
        Ok(id)
    }

    /// The dedicated files (base names) the next instance of `spec` would take (a pet for
    /// `logical_id`): its slot's, one per dedicated scope; none without a dedicated scope.
    pub(crate) fn next_slot(&mut self, spec: &Spec, logical_id: Option<&str>) -> Result<Vec<String>> {
        if !spec.resources.iter().any(|r| matches!(r.scope, names::Scope::Dedicated(_))) {
            return Ok(Vec::new());
        }
        let slots = self.slots()?;
        Ok(expand::dedicated_bases(spec, logical_id, slots))
    }

    /// Keeps the dedicated files `bases` from the instances added after: a slot whose member
    /// waits (its zone has no room) is not another's.
    pub(crate) fn reserve(&mut self, bases: &[String]) -> Result<()> {
        if bases.is_empty() {
            return Ok(()); // no slot: the slots are not read
        }
        self.slots()?.attached.extend(bases.iter().cloned());
        Ok(())
    }

    /// The next instance, cattle, takes slot `key` (its own, when it is made again), not the
    /// lowest orphaned or free one; `None`: the usual choice again.
    pub(crate) fn taking(&mut self, key: Option<&str>) -> Result<()> {
        self.slots()?.take = key.map(str::to_string);
        Ok(())
    }

    /// Gives back the dedicated files `bases` [`NewInstances::reserve`] kept.
    pub(crate) fn release(&mut self, bases: &[String]) -> Result<()> {
        if bases.is_empty() {
            return Ok(());
        }
        let slots = self.slots()?;
        for base in bases {
            slots.attached.remove(base);
        }
        Ok(())
    }

    /// What the directory says of the slots, read once; each instance added takes its own.
    fn slots(&mut self) -> Result<&mut Slots> {
        if self.slots.is_none() {
            let (dir, printer) = (self.dir, self.printer);
            self.slots = Some(read_slots(dir, self.staying(), printer)?);
        }
        Ok(self.slots.as_mut().expect("read above"))
    }

    /// The instances that stay (all but those `leaving`), read once.
    fn staying(&mut self) -> &[Instance] {
        let (dir, profiles, leaving) = (self.dir, self.profiles, &self.leaving);
        self.staying
            .get_or_insert_with(|| dir.instances(profiles).into_iter().filter(|i| !leaving.contains(&i.id)).collect())
    }

    /// Refuses a logical ID another instance has (one staying, or one added before in this
    /// change): two pets with one logical ID would declare the same resources twice.
    fn claim_logical_id(&mut self, lid: &str, id: &InstanceId) -> Result<()> {
        if self.logical_ids.is_none() {
            let used =
                self.staying().iter().filter_map(|i| Some((i.logical_id()?.to_string(), i.id.clone()))).collect();
            self.logical_ids = Some(used);
        }
        let used = self.logical_ids.as_mut().expect("read above");
        if let Some(twin) = used.get(lid) {
            return Err(invalid(format!("logical ID `{}` is already used by {twin}", short(lid)))
                .hint(format!("destroy {twin} first (a rolling update keeps its slot), or pick another logical ID"))
                .into());
        }
        used.insert(lid.to_string(), id.clone());
        Ok(())
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
