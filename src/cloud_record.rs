//! The cloud record: what the cloud answered that a later run must weigh before it believes a
//! "not there" (docs/what-a-reconcile-reads.md). A cloud is eventually consistent: a describe by ID
//! can answer "not found" for a machine created a moment ago, and a listing by tags can miss it
//! or keep showing one that is gone. So:
//!
//! - **when each machine was created** ([`CloudRecord::created`]), while that is more recent
//!   than its type's settle time: a read that calls it gone before then is not believed;
//! - **when a read first called a machine gone while its listing still showed it**
//!   ([`CloudRecord::gone`]): the listing and the read disagree, and the machine is kept until
//!   a read and the listing agree, or two reads at least the settle time apart do;
//! - **strays** ([`CloudRecord::strays`]): machines a listing showed with this directory's tags
//!   that no state holds, each read once to learn its tags, then remembered.
//!
//! One file of the directory, [`crate::names::CLOUD_RECORD`], written all or nothing with the
//! other records (with a store, in the store: every host weighs the same answers). Times are
//! milliseconds since the epoch by the clock the hosts share (the store's; without one, this
//! host's). Pure: bytes in, bytes out, and the decisions ([`CloudRecord::weigh`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::group::GROUP_TAG;
use crate::tfconfig::{GLOBAL_TAG, NAME_TAG, RESOURCE_TAG, SLOT_TAG};

/// A machine as one answer saw it: its cloud ID, and when (ms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sighting {
    pub id: String,
    pub at: u64,
}

/// What a stray is to this directory (see [`classify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StrayKind {
    /// Its tags name a resource of this directory that has a machine already: a twin (a lost
    /// answer made it twice) or a leak. `sweep-orphans --strays` destroys it.
    Twin,
    /// Its tags name a resource of this directory that has no machine: it is adopted.
    Adoptable,
    /// Its tags name one of this directory's groups but no file here (another directory's,
    /// perhaps, or a file removed since): reported, never destroyed.
    Unknown,
    /// Its tags name nothing of this directory (another directory's machine, listed by an
    /// identifying tag with any value): neither reported nor touched.
    Foreign,
}

impl StrayKind {
    /// As the JSON reports say it.
    pub fn as_str(self) -> &'static str {
        match self {
            StrayKind::Twin => "twin",
            StrayKind::Adoptable => "adoptable",
            StrayKind::Unknown => "unknown",
            StrayKind::Foreign => "foreign",
        }
    }
}

/// A machine a listing showed that no state holds, as the record keeps it: read once, then
/// remembered, so that it is not read again every run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stray {
    /// Its resource type.
    #[serde(rename = "type")]
    pub rtype: String,
    /// The tags that say whose it is (`infrakit.instance.name`, `infrakit.slot`,
    /// `infrakit.global`, `infrakit.group`, `infrakit.resource`), as it carries them.
    pub tags: BTreeMap<String, String>,
    /// When a listing first showed it (ms).
    pub first_seen: u64,
}

/// A stray as this directory now sees it (the report's, `describe`'s, `sweep-orphans`').
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Classified {
    /// Its cloud ID.
    pub id: String,
    #[serde(rename = "type")]
    pub rtype: String,
    pub kind: StrayKind,
    /// The managed file its tags name, if this directory has it.
    pub file: Option<String>,
    /// The address its tags name in that file, if one does.
    pub address: Option<String>,
    /// Its group tag.
    pub group: Option<String>,
    pub tags: BTreeMap<String, String>,
    /// When a listing first showed it (RFC 3339).
    pub first_seen: String,
}

/// The tags that say whose a machine is: the ones infrakit-tf writes to find it again.
pub const WHOSE: [&str; 5] = [NAME_TAG, SLOT_TAG, GLOBAL_TAG, GROUP_TAG, RESOURCE_TAG];

/// What `stray` (cloud ID `id`) is to this directory: `files`, the live managed files (name,
/// document); `recorded`, the addresses the state holds; `groups`, this directory's groups (the
/// group tags its files write); `tag_path`, where its type takes tags. A stray whose group tag
/// is not the one the file gives the resource it names is not that resource's (as adoption
/// never guesses): unknown.
pub fn classify(
    id: &str,
    stray: &Stray,
    files: &[(String, serde_json::Value)],
    (recorded, groups): (&BTreeSet<String>, &BTreeSet<String>),
    tag_path: &[String],
) -> Classified {
    let base = stray
        .tags
        .get(NAME_TAG)
        .or_else(|| stray.tags.get(SLOT_TAG))
        .cloned()
        .or_else(|| stray.tags.get(GLOBAL_TAG).map(|g| format!("{g}_global")));
    let file = base.map(|b| format!("{b}{}", crate::names::LIVE)).filter(|f| files.iter().any(|(n, _)| n == f));
    let group = stray.tags.get(GROUP_TAG).cloned();
    let address = file.as_deref().and_then(|f| {
        let doc = &files.iter().find(|(n, _)| n == f)?.1;
        let by_name = doc.get("resource")?.get(&stray.rtype)?.as_object()?;
        let names: Vec<&String> = by_name.keys().collect();
        let name = match stray.tags.get(RESOURCE_TAG) {
            Some(own) => names.into_iter().find(|n| *n == own)?,
            None if names.len() == 1 => names[0],
            None => return None,
        };
        let theirs = by_name
            .get(name)
            .and_then(serde_json::Value::as_object)
            .and_then(|props| crate::spec::lookup(props, tag_path).ok().flatten())
            .and_then(|tags| tags.get(GROUP_TAG))
            .and_then(serde_json::Value::as_str);
        (theirs == group.as_deref()).then(|| format!("{}.{name}", stray.rtype))
    });
    let kind = match (&address, &group) {
        (Some(a), _) if recorded.contains(a) => StrayKind::Twin,
        (Some(_), _) => StrayKind::Adoptable,
        (None, Some(g)) if groups.contains(g) => StrayKind::Unknown,
        (None, _) if file.is_some() => StrayKind::Unknown,
        (None, _) => StrayKind::Foreign,
    };
    Classified {
        id: id.to_string(),
        rtype: stray.rtype.clone(),
        kind,
        file,
        address,
        group,
        tags: stray.tags.clone(),
        first_seen: crate::text::utc_ms(stray.first_seen),
    }
}

/// The whole record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudRecord {
    /// By address: the machine an apply created there, and when the apply ended.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub created: BTreeMap<String, Sighting>,
    /// By address: the machine a read called gone while its listing showed it, and when that
    /// read began.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gone: BTreeMap<String, Sighting>,
    /// By cloud ID.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub strays: BTreeMap<String, Stray>,
    /// When the evidence of the last apply that failed or was cut short was noted, once its
    /// look-up found everything (and so settled it early): what that apply made may be in the
    /// state with no creation on record, so reads younger than its settle time are not
    /// believed (see [`CloudRecord::weigh`]'s `cut`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<u64>,
}

/// One object a refresh found gone (`resource_drift` delete), as [`CloudRecord::weigh`] needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoneRead {
    pub address: String,
    /// The ID the state had for it.
    pub id: String,
    /// Whether its listing showed that ID in the same run.
    pub listed: bool,
}

/// What to do with an object a read called gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Absence {
    /// Believed: it is gone.
    Prune,
    /// Not believed yet: kept, unconfirmed; `until` (ms): when the answer may be believed.
    Keep { why: String, until: u64 },
}

impl CloudRecord {


    /// Notes that an apply that ended at `at` created `created` (address, ID), for the types
    /// whose settle time is not zero; and forgets the creations older than their settle time,
    /// which no read can be too early for any more.
    pub fn note_created(&mut self, created: &[(String, String)], at: u64, settle: impl Fn(&str) -> Duration) {
        for (address, id) in created {
            if !settle(rtype(address)).is_zero() {
                self.created.insert(address.clone(), Sighting { id: id.clone(), at });
                self.gone.remove(address);
            }
        }
        self.created.retain(|address, s| at < s.at.saturating_add(ms(settle(rtype(address)))));
    }

    /// Decides, for each object a refresh that began at `read_at` found gone, whether that is
    /// believed (see the module doc), noting the first read that the listing contradicts. A
    /// settle time of zero believes every read. `refreshed`: every address the run read; the
    /// `gone` entries of those it found present, and of addresses no longer `in_state`, are
    /// forgotten. `cut`: when the evidence of an apply that failed or was cut short was noted,
    /// if it still stands: what it made may be in the state with no creation on record (a
    /// killed apply records nothing), so no read younger than it is believed either.
    pub fn weigh(
        &mut self,
        reads: &[GoneRead],
        (refreshed, in_state): (&BTreeSet<String>, &BTreeSet<String>),
        read_at: u64,
        cut: Option<u64>,
        settle: impl Fn(&str) -> Duration,
    ) -> Vec<(String, Absence)> {
        let gone: BTreeSet<&str> = reads.iter().map(|r| r.address.as_str()).collect();
        self.gone.retain(|a, _| in_state.contains(a) && (gone.contains(a.as_str()) || !refreshed.contains(a)));
        let mut out = Vec::new();
        for r in reads {
            let settle = ms(settle(rtype(&r.address)));
            let created = self.created.get(&r.address).filter(|c| c.id == r.id).map(|c| c.at);
            let after_cut = cut.map(|noted| noted.saturating_add(settle)).filter(|until| read_at < *until);
            let absence = if settle == 0 {
                Absence::Prune
            } else if let Some(until) = after_cut {
                Absence::Keep {
                    why: "an apply that failed or was cut short may have made it, and a read so soon after is not believed"
                        .into(),
                    until,
                }
            } else if r.listed {
                let first = self.gone.get(&r.address).filter(|g| g.id == r.id).map_or(read_at, |g| g.at);
                if read_at >= first.saturating_add(settle) {
                    Absence::Prune
                } else {
                    self.gone.insert(r.address.clone(), Sighting { id: r.id.clone(), at: first });
                    Absence::Keep {
                        why: "its listing shows it, but a read said it is gone".into(),
                        until: first.saturating_add(settle),
                    }
                }
            } else {
                match created.filter(|at| read_at < at.saturating_add(settle)) {
                    Some(at) => {
                        self.gone.insert(r.address.clone(), Sighting { id: r.id.clone(), at: read_at });
                        Absence::Keep {
                            why: "created less than its settle time ago, and a read said it is gone".into(),
                            until: at.saturating_add(settle),
                        }
                    }
                    None => Absence::Prune,
                }
            };
            if absence == Absence::Prune {
                self.gone.remove(&r.address);
                self.created.remove(&r.address);
            }
            out.push((r.address.clone(), absence));
        }
        out
    }
}

/// The resource type of `address` (`type.name`).
fn rtype(address: &str) -> &str {
    address.split_once('.').map_or(address, |(t, _)| t)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}


impl crate::record::Record for CloudRecord {
    const FILE: &'static str = crate::names::CLOUD_RECORD;
    const WHAT: &'static str = "the cloud record";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    const S: Duration = Duration::from_secs(120);

    fn read(address: &str, id: &str, listed: bool) -> GoneRead {
        GoneRead { address: address.into(), id: id.into(), listed }
    }

    fn all(addresses: &[&str]) -> BTreeSet<String> {
        addresses.iter().map(|a| a.to_string()).collect()
    }

    // A machine created a moment ago that a read calls gone is kept until its settle time has
    // passed; then the same answer is believed. One created long ago (or before the record)
    // is believed at once.
    #[test]
    fn a_young_machine_is_not_pruned_on_a_read_that_is_too_early() {
        let mut r = CloudRecord::default();
        r.note_created(&[("vm.a".into(), "i-1".into())], 1_000_000, |_| S);
        let state = all(&["vm.a", "vm.b"]);
        let reads = [read("vm.a", "i-1", false), read("vm.b", "i-2", false)];
        let v = r.weigh(&reads, (&state, &state), 1_005_000, None, |_| S);
        assert!(matches!(v[0].1, Absence::Keep { until: 1_120_000, .. }), "{v:?}");
        assert_eq!(v[1].1, Absence::Prune, "no creation on record: believed");
        let v = r.weigh(&reads[..1], (&state, &state), 1_120_000, None, |_| S);
        assert_eq!(v[0].1, Absence::Prune);
        assert!(r.gone.is_empty() && r.created.is_empty());
        // A machine of the same address made since (another ID) is not the young one.
        let mut r = CloudRecord::default();
        r.note_created(&[("vm.a".into(), "i-9".into())], 1_000_000, |_| S);
        assert_eq!(r.weigh(&reads[..1], (&state, &state), 1_005_000, None, |_| S)[0].1, Absence::Prune);
    }

    // The listing shows it, a read calls it gone: kept, whatever its age, until a read at
    // least the settle time after the first agrees.
    #[test]
    fn when_the_listing_and_a_read_disagree_the_machine_is_kept_until_two_reads_settle_apart() {
        let mut r = CloudRecord::default();
        let state = all(&["vm.a"]);
        let reads = [read("vm.a", "i-1", true)];
        let keep = |v: Vec<(String, Absence)>| matches!(v[0].1, Absence::Keep { until: 1_120_000, .. });
        assert!(keep(r.weigh(&reads, (&state, &state), 1_000_000, None, |_| S)));
        assert_eq!(r.gone["vm.a"], Sighting { id: "i-1".into(), at: 1_000_000 });
        assert!(keep(r.weigh(&reads, (&state, &state), 1_060_000, None, |_| S)), "the first read is kept");
        assert_eq!(r.weigh(&reads, (&state, &state), 1_120_000, None, |_| S)[0].1, Absence::Prune);
        assert!(r.gone.is_empty());
        // A read that finds it present in between forgets the disagreement.
        assert!(keep(r.weigh(&reads, (&state, &state), 1_000_000, None, |_| S)));
        r.weigh(&[], (&state, &state), 1_010_000, None, |_| S);
        assert!(r.gone.is_empty(), "found present: forgotten");
        // After an apply that failed or was cut short, no read younger than its evidence is
        // believed: what it made may be in the state with no creation on record.
        let unlisted = [read("vm.a", "i-1", false)];
        let v = r.weigh(&unlisted, (&state, &state), 1_060_000, Some(1_000_000), |_| S);
        assert!(matches!(v[0].1, Absence::Keep { until: 1_120_000, .. }), "{v:?}");
        assert_eq!(r.weigh(&unlisted, (&state, &state), 1_120_000, Some(1_000_000), |_| S)[0].1, Absence::Prune);
        // A settle time of zero trusts the first answer.
        assert_eq!(r.weigh(&reads, (&state, &state), 1_000_000, None, |_| Duration::ZERO)[0].1, Absence::Prune);
    }

    // A machine no read looked at keeps its entry; one no longer in state loses it; old
    // creations are forgotten as new ones are noted; types settled at zero are not recorded.
    // What a stray's tags name decides what it is: a twin of a resource that has its machine,
    // adoptable for one that has none, unknown when it names a group of ours but no file,
    // foreign otherwise.
    #[test]
    fn strays_are_told_apart_by_what_their_tags_name() {
        use serde_json::json;
        let web = json!({"tags": {"infrakit.group": "web"}});
        let files = vec![
            ("instance-1.tf.json".to_string(), json!({"resource": {"fakecloud_instance": {"instance-1": web}}})),
            ("instance-2.tf.json".to_string(), json!({"resource": {"fakecloud_instance": {"instance-2": {}}}})),
            (
                "web_dedicated_1.tf.json".to_string(),
                json!({"resource": {"fakecloud_volume": {"web-1-a": {}, "web-1-b": {}}}}),
            ),
        ];
        let recorded = all(&["fakecloud_instance.instance-1", "fakecloud_volume.web-1-a"]);
        let groups = all(&["web"]);
        let stray = |rtype: &str, tags: &[(&str, &str)]| Stray {
            rtype: rtype.into(),
            tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            first_seen: 0,
        };
        let tags = vec!["tags".to_string()];
        let kind = |s: &Stray| classify("i-9", s, &files, (&recorded, &groups), &tags);
        let twin = kind(&stray("fakecloud_instance", &[(NAME_TAG, "instance-1"), (GROUP_TAG, "web")]));
        assert_eq!((twin.kind, twin.file.as_deref()), (StrayKind::Twin, Some("instance-1.tf.json")));
        assert_eq!(twin.address.as_deref(), Some("fakecloud_instance.instance-1"));
        assert_eq!(kind(&stray("fakecloud_instance", &[(NAME_TAG, "instance-2")])).kind, StrayKind::Adoptable);
        let volume = stray("fakecloud_volume", &[(SLOT_TAG, "web_dedicated_1"), (RESOURCE_TAG, "web-1-b")]);
        assert_eq!(kind(&volume).kind, StrayKind::Adoptable);
        let unnamed = stray("fakecloud_volume", &[(SLOT_TAG, "web_dedicated_1")]);
        assert_eq!((kind(&unnamed).kind, kind(&unnamed).address), (StrayKind::Unknown, None), "two volumes: which?");
        let gone = stray("fakecloud_instance", &[(NAME_TAG, "instance-9"), (GROUP_TAG, "web")]);
        assert_eq!(kind(&gone).kind, StrayKind::Unknown);
        let theirs = stray("fakecloud_instance", &[(NAME_TAG, "instance-9"), (GROUP_TAG, "db")]);
        assert_eq!(kind(&theirs).kind, StrayKind::Foreign);
        // A member's name with another group's tag is not that member's twin: never destroyed.
        let other_group = stray("fakecloud_instance", &[(NAME_TAG, "instance-1"), (GROUP_TAG, "db")]);
        assert_eq!((kind(&other_group).kind, kind(&other_group).address), (StrayKind::Unknown, None));
    }

    #[test]
    fn the_record_keeps_only_what_a_later_run_must_weigh() {
        let mut r = CloudRecord::default();
        let state = all(&["vm.a", "vm.b"]);
        r.weigh(&[read("vm.a", "i-1", true), read("vm.b", "i-2", true)], (&state, &state), 1_000, None, |_| S);
        r.weigh(&[], (&all(&[]), &all(&["vm.a"])), 2_000, None, |_| S);
        assert_eq!(r.gone.keys().collect::<Vec<_>>(), ["vm.a"]);
        r.note_created(&[("vm.c".into(), "i-3".into())], 0, |_| S);
        r.note_created(&[("disk.d".into(), "v-4".into())], 200_000, |t| if t == "disk" { Duration::ZERO } else { S });
        assert!(r.created.is_empty(), "{:?}", r.created);
        let bytes = r.to_bytes();
        assert_eq!(CloudRecord::parse(&bytes).unwrap(), r);
        assert_eq!(CloudRecord::parse(b"{}\n").unwrap(), CloudRecord::default());
        assert!(CloudRecord::parse(b"[").is_err());
    }
}
