//! Which machines still exist, at a cost that does not grow with the group
//! (docs/what-a-reconcile-reads.md). A refreshing plan reads every resource of the directory, one
//! cloud call
//! or more each, every run; yet what `reconcile` needs every run is *presence*, and the cloud
//! answers that for a whole group in one call: the look-up data sources that adoption declares
//! (`profile::Lookup`) list every object carrying our tags.
//!
//! So a resource of a type with a look-up, recorded in the state and declared by a live file
//! whose tags name it, is *listed*: one data-source read per look-up type and group
//! ([`Listing`]) shows whether it still exists. One the list does not show is refreshed
//! alone, to confirm, before anything decides it is gone (a list lags behind a create, and
//! tags edited by hand hide a machine). Drift is not ignored for ever: each run also refreshes
//! a rotating slice of the listed resources ([`Slice`], the position kept in
//! [`RefreshRecord`]). Everything else (types without a look-up, your own configuration's
//! resources) is refreshed every run, as a full plan would.
//!
//! Pure: what to list and refresh ([`plan`]), the data sources that list ([`listing_document`]),
//! what they showed ([`Presence::unlisted`]), the files a targeted plan needs ([`needed_files`]).
//! The workspace runs terraform (`workspace::look`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::group::GROUP_TAG;
use crate::names;
use crate::profile::Profiles;
use crate::spec::lookup;

/// The name prefix of the listing data sources (`data.<type>.infrakit_tf_list_<n>`).
pub const LISTING_PREFIX: &str = "infrakit_tf_list_";

/// What share of the listed resources each run refreshes: `1/N`, all of them within N runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    pub of: u32,
}

impl Default for Slice {
    fn default() -> Self {
        Slice { of: 12 }
    }
}

impl Slice {
    /// `1/N`, N from 1 to 1000.
    pub fn parse(text: &str) -> Result<Slice, String> {
        let bad = || format!("invalid refresh slice `{text}`: expected 1/N, N from 1 to 1000 (e.g. 1/12: all within 12 runs)");
        let (one, of) = text.trim().split_once('/').ok_or_else(bad)?;
        let of: u32 = of.trim().parse().map_err(|_| bad())?;
        if one.trim() != "1" || !(1..=1000).contains(&of) {
            return Err(bad());
        }
        Ok(Slice { of })
    }

    /// How many of `n` listed resources a run refreshes.
    fn size(self, n: usize) -> usize {
        n.div_ceil(self.of as usize)
    }
}

impl fmt::Display for Slice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1/{}", self.of)
    }
}

/// Where the rotating slice stopped: the last listed address it refreshed. One file of the
/// directory, `names::REFRESH_RECORD`, kept with the other records (in the store with several
/// hosts), so that any host goes on from there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl RefreshRecord {


}

/// A managed resource of the state (`tfoutput::raw_state_resources`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// `type.name`, with its module's path in front when it is in one.
    pub address: String,
    pub rtype: String,
    /// Whether it is in the root module (ours always are).
    pub root: bool,
    /// The `id` of each of its instances.
    pub ids: Vec<String>,
    /// Whether it holds a deposed object (a create-before-destroy cut short): forgetting the
    /// address would forget that object too.
    pub deposed: bool,
    /// Whether it holds an object that is not deposed (`terraform show` lists it then).
    pub current: bool,
    /// Whether a current object is tainted (terraform replaces it at the next apply).
    pub tainted: bool,
}

/// One data source that lists the objects of one type (and group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The resource type it lists.
    pub rtype: String,
    pub data_source: String,
    pub arguments: Value,
    /// Where it lists the IDs (`profile::Lookup::ids`).
    pub ids: String,
}

impl Listing {
    /// Which listing (its index) the data source at `address` is.
    pub fn index_of(address: &str) -> Option<usize> {
        address.rsplit_once(&format!(".{LISTING_PREFIX}")).and_then(|(_, i)| i.parse().ok())
    }

    /// The data source's address in the listing document.
    pub fn address(&self, i: usize) -> String {
        format!("data.{}.{LISTING_PREFIX}{i}", self.data_source)
    }
}

/// A resource whose presence a listing shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub address: String,
    pub id: String,
    /// Its [`Listing`], by index.
    pub listing: usize,
}

/// What one run lists and refreshes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Presence {
    pub listings: Vec<Listing>,
    /// Sorted by address.
    pub listed: Vec<Listed>,
    /// Refreshed every run: the recorded resources that no listing shows (no look-up, tags the
    /// file does not write, your own configuration's).
    pub always: Vec<String>,
    /// The listed resources this run's slice refreshes.
    pub slice: Vec<String>,
    /// Where the slice stops: the next run starts after it.
    pub cursor: Option<String>,
    /// The recorded resources holding a deposed object (see [`Recorded::deposed`]).
    pub deposed: Vec<String>,
    /// Every object the state records: its type and ID.
    pub recorded: BTreeSet<(String, String)>,
    /// The ID of every resource the state records with one object, by address.
    pub ids: BTreeMap<String, String>,
}

/// Whether any resource `files` declare is of a type whose look-up lists by tags: otherwise
/// nothing can be listed, and the state need not be read to know it.
pub fn may_list(files: &[(String, Value)], profiles: &Profiles) -> bool {
    files.iter().any(|(_, doc)| {
        doc.get("resource")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .any(|(rtype, _)| profiles.lookup(rtype).is_some_and(|l| l.tag_path().is_some()))
    })
}

/// What to list and refresh: `files` are the live managed files (name, document), `state` the
/// recorded managed resources. The slice takes the next [`Slice::size`] listed addresses
/// after `cursor`, in address order, wrapping around: with a group whose size holds, every
/// listed resource is refreshed once within [`Slice::of`] runs.
pub fn plan(
    files: &[(String, Value)],
    state: &[Recorded],
    profiles: &Profiles,
    cursor: Option<&str>,
    slice: Slice,
) -> Presence {
    let declared = declared(files);
    let mut listings: Vec<Listing> = Vec::new();
    let mut listed = Vec::new();
    let mut always = Vec::new();
    for r in state {
        let listing = match (r.root, r.ids.as_slice(), declared.get(r.address.as_str())) {
            (true, [id], Some((kind, props))) => listing_of(&r.rtype, kind, props, profiles).map(|l| (id, l)),
            _ => None,
        };
        let Some((id, listing)) = listing else {
            always.push(r.address.clone());
            continue;
        };
        let i = listings.iter().position(|l| *l == listing).unwrap_or_else(|| {
            listings.push(listing);
            listings.len() - 1
        });
        listed.push(Listed { address: r.address.clone(), id: id.clone(), listing: i });
    }
    listed.sort_by(|a, b| a.address.cmp(&b.address));
    always.sort();
    let (slice, cursor) = rotate(&listed, cursor, slice);
    let deposed = state.iter().filter(|r| r.deposed).map(|r| r.address.clone()).collect();
    let recorded = state.iter().flat_map(|r| r.ids.iter().map(|id| (r.rtype.clone(), id.clone()))).collect();
    let ids = state
        .iter()
        .filter_map(|r| match r.ids.as_slice() {
            [id] => Some((r.address.clone(), id.clone())),
            _ => None,
        })
        .collect();
    Presence { listings, listed, always, slice, cursor, deposed, recorded, ids }
}

/// The slice after `cursor`, and where it stops.
fn rotate(listed: &[Listed], cursor: Option<&str>, slice: Slice) -> (Vec<String>, Option<String>) {
    let size = slice.size(listed.len());
    if size == 0 {
        return (Vec::new(), cursor.map(str::to_string));
    }
    let start = cursor.map_or(0, |c| listed.partition_point(|l| l.address.as_str() <= c));
    let taken: Vec<String> = listed.iter().cycle().skip(start).take(size).map(|l| l.address.clone()).collect();
    let cursor = taken.last().cloned();
    (taken, cursor)
}

/// Every resource the live files declare, by address: its file's kind and its properties.
fn declared(files: &[(String, Value)]) -> BTreeMap<String, (names::Kind, &Map<String, Value>)> {
    let mut out = BTreeMap::new();
    for (name, doc) in files {
        let Some(kind) = names::split_file_name(name).and_then(|(base, _)| names::classify(base)) else { continue };
        for (rtype, by_name) in doc.get("resource").and_then(Value::as_object).into_iter().flatten() {
            for (rname, props) in by_name.as_object().into_iter().flatten() {
                if let Some(props) = props.as_object() {
                    out.insert(format!("{rtype}.{rname}"), (kind.clone(), props));
                }
            }
        }
    }
    out
}

/// The listing that shows a resource of `rtype`, declared with `props` in a file of `kind`:
/// its look-up's data source, `{{tags}}` standing for the group's tag when the resource
/// carries one (an exact match), else the file kind's identifying tag with any value (`*`, as
/// EC2's tag filters take it). `None` when it cannot be listed: no look-up, a look-up by
/// another variable (a name), or tags the file does not write.
fn listing_of(rtype: &str, kind: &names::Kind, props: &Map<String, Value>, profiles: &Profiles) -> Option<Listing> {
    let rule = profiles.lookup(rtype)?;
    let written = lookup(props, &rule.tag_path()?).ok().flatten()?.as_object()?;
    let tags: Map<String, Value> = match written.get(GROUP_TAG).and_then(Value::as_str) {
        Some(group) => Map::from_iter([(GROUP_TAG.to_string(), Value::String(group.to_string()))]),
        None => {
            let (key, _) = crate::tfconfig::identity(kind).into_iter().next()?;
            written.get(&key)?.as_str()?;
            Map::from_iter([(key, Value::String("*".into()))])
        }
    };
    let arguments = render(&rule.arguments, &Value::Object(tags))?;
    Some(Listing { rtype: rtype.to_string(), data_source: rule.data_source.clone(), arguments, ids: rule.ids.clone() })
}

/// A look-up's arguments with `"{{tags}}"` (the whole string) as `tags`; `None` when another
/// variable appears (it names one resource: no listing).
fn render(args: &Value, tags: &Value) -> Option<Value> {
    Some(match args {
        Value::String(s) if s == "{{tags}}" => tags.clone(),
        Value::String(s) if s.contains("{{") => return None,
        Value::Array(items) => Value::Array(items.iter().map(|v| render(v, tags)).collect::<Option<_>>()?),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| Some((k.clone(), render(v, tags)?))).collect::<Option<_>>()?)
        }
        other => other.clone(),
    })
}

/// The document of the listing data sources (but those `skip` names, by index), and their
/// addresses (in order).
pub fn listing_document(listings: &[Listing], skip: &BTreeSet<usize>) -> (Value, Vec<String>) {
    let mut data: Map<String, Value> = Map::new();
    let mut addresses = Vec::new();
    for (i, l) in listings.iter().enumerate().filter(|(i, _)| !skip.contains(i)) {
        let by_name = data.entry(l.data_source.clone()).or_insert_with(|| Value::Object(Map::new()));
        by_name.as_object_mut().expect("an object").insert(format!("{LISTING_PREFIX}{i}"), l.arguments.clone());
        addresses.push(l.address(i));
    }
    (serde_json::json!({ "data": data }), addresses)
}

impl Presence {
    /// Whether anything is listed: otherwise a run refreshes everything, as a full plan.
    pub fn lists(&self) -> bool {
        !self.listed.is_empty()
    }

    /// What a run refreshes at first: every resource no listing shows, and the slice.
    pub fn refreshed(&self) -> Vec<String> {
        let mut out: Vec<String> = self.always.iter().chain(&self.slice).cloned().collect();
        out.sort();
        out.dedup();
        out
    }

    /// The listed resources whose listing (`reads`: the data sources' values, by address)
    /// does not show their ID: to confirm by a refresh. A listing that was not read shows none.
    pub fn unlisted(&self, reads: &BTreeMap<String, Value>) -> Vec<String> {
        let shown: Vec<BTreeSet<String>> = self
            .listings
            .iter()
            .enumerate()
            .map(|(i, l)| reads.get(&l.address(i)).map(|v| ids_at(v, &l.ids).into_iter().collect()).unwrap_or_default())
            .collect();
        self.listed.iter().filter(|l| !shown[l.listing].contains(&l.id)).map(|l| l.address.clone()).collect()
    }

    /// What the listings showed (`reads`: the data sources' values, by address) that the state
    /// does not record: each object's type and ID, once. Candidates for strays.
    pub fn unknown(&self, reads: &BTreeMap<String, Value>) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for (i, l) in self.listings.iter().enumerate() {
            for id in reads.get(&l.address(i)).map(|v| ids_at(v, &l.ids)).unwrap_or_default() {
                let object = (l.rtype.clone(), id);
                if !self.recorded.contains(&object) && !out.contains(&object) {
                    out.push(object);
                }
            }
        }
        out
    }

    /// The listed resources whose listing showed them (those `unlisted` does not name).
    pub fn shown(&self, unlisted: &[String]) -> BTreeSet<String> {
        let unlisted: BTreeSet<&str> = unlisted.iter().map(String::as_str).collect();
        self.listed.iter().filter(|l| !unlisted.contains(l.address.as_str())).map(|l| l.address.clone()).collect()
    }

    /// The listings that showed none of at least two of the resources they list: each of
    /// those is refreshed to confirm, every run (the data source may not take `*` in a tag, or
    /// the tags were changed): `(data source, how many)`.
    pub fn blind(&self, unlisted: &[String]) -> Vec<(String, usize)> {
        let unlisted: BTreeSet<&str> = unlisted.iter().map(String::as_str).collect();
        (0..self.listings.len())
            .filter_map(|i| {
                let mine: Vec<&Listed> = self.listed.iter().filter(|l| l.listing == i).collect();
                (mine.len() >= 2 && mine.iter().all(|l| unlisted.contains(l.address.as_str())))
                    .then(|| (self.listings[i].data_source.clone(), mine.len()))
            })
            .collect()
    }
}

/// The live files a plan targeting `targets` needs, with every file they refer to (a
/// reference `${type.name...}`, a `depends_on` entry), and so on: the others are left out of
/// the plan's configuration, so that terraform validates and plans only what it must. `also`:
/// what your own configuration files mention ([`mentioned`]): the files declaring those are
/// needed too, since yours are always in. `None` when a file declares more than resources and
/// data sources (a provider, a variable, ...): then every file is needed.
pub fn needed_files(files: &[(String, Value)], targets: &[String], also: &[String]) -> Option<BTreeSet<String>> {
    let mut by_address: BTreeMap<String, usize> = BTreeMap::new();
    for (i, (_, doc)) in files.iter().enumerate() {
        let top = doc.as_object()?;
        if top.keys().any(|k| k != "resource" && k != "data") {
            return None;
        }
        for (mode, prefix) in [("resource", ""), ("data", "data.")] {
            for (rtype, by_name) in top.get(mode).and_then(Value::as_object).into_iter().flatten() {
                for rname in by_name.as_object().into_iter().flatten().map(|(n, _)| n) {
                    by_address.insert(format!("{prefix}{rtype}.{rname}"), i);
                }
            }
        }
    }
    let mut needed: BTreeSet<usize> = targets.iter().chain(also).filter_map(|t| by_address.get(t).copied()).collect();
    let mut todo: Vec<usize> = needed.iter().copied().collect();
    while let Some(i) = todo.pop() {
        let mut refs = Vec::new();
        references(&files[i].1, &mut refs);
        for r in refs {
            if let Some(&j) = by_address.get(&r) {
                if needed.insert(j) {
                    todo.push(j);
                }
            }
        }
    }
    Some(needed.into_iter().map(|i| files[i].0.clone()).collect())
}

/// The IDs at `path` of a data source's values: `ids`, or `droplets.*.id` (`*`: every item).
pub fn ids_at(value: &Value, path: &str) -> Vec<String> {
    let mut here = vec![value];
    for step in path.split('.') {
        here = here
            .into_iter()
            .flat_map(|v| match (step, v) {
                ("*", Value::Array(items)) => items.iter().collect::<Vec<_>>(),
                (key, Value::Object(map)) => map.get(key).into_iter().collect(),
                _ => Vec::new(),
            })
            .collect();
    }
    here.into_iter()
        .flat_map(|v| match v {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        })
        .filter_map(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .collect()
}

/// Every `type.name` and `data.type.name` a text (one of your configuration files, in HCL or
/// JSON) may refer to: a superset, which costs a file more in a plan at most.
pub fn mentioned(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for chain in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')) {
        let parts: Vec<&str> = chain.split('.').collect();
        if parts.len() >= 2 {
            out.push(format!("{}.{}", parts[0], parts[1]));
        }
        if parts.len() >= 3 && parts[0] == "data" {
            out.push(format!("data.{}.{}", parts[1], parts[2]));
        }
    }
    out
}

/// Every `type.name` and `data.type.name` a document's strings may refer to.
pub fn references(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.extend(mentioned(s)),
        Value::Array(items) => items.iter().for_each(|v| references(v, out)),
        Value::Object(map) => map.values().for_each(|v| references(v, out)),
        _ => {}
    }
}


impl crate::record::Record for RefreshRecord {
    const FILE: &'static str = crate::names::REFRESH_RECORD;
    const WHAT: &'static str = "the refresh record";
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn profiles() -> Profiles {
        let lookups = BTreeMap::from([(
            "fakecloud_instance".to_string(),
            serde_json::from_value(
                json!({"data_source": "fakecloud_instances", "arguments": {"tags": "{{tags}}"}, "ids": "ids", "tags": "tags"}),
            )
            .unwrap(),
        )]);
        Profiles::load(&BTreeMap::new(), &lookups, &[], None)
    }

    fn vm(id: &str, group: Option<&str>) -> (String, Value) {
        let mut tags = json!({"infrakit.instance.name": id});
        if let Some(g) = group {
            tags["infrakit.group"] = json!(g);
        }
        (format!("{id}.tf.json"), json!({"resource": {"fakecloud_instance": {id: {"tags": tags}}}}))
    }

    fn recorded(address: &str, id: &str) -> Recorded {
        Recorded {
            address: address.into(),
            rtype: address.split('.').next().unwrap().into(),
            root: true,
            ids: vec![id.into()],
            deposed: false,
            current: true,
            tainted: false,
        }
    }

    #[test]
    fn groups_are_listed_by_their_tag_and_the_rest_by_the_identifying_tag_with_any_value() {
        let files = vec![vm("instance-1", Some("web")), vm("instance-2", Some("web")), vm("instance-3", None)];
        let mut state: Vec<Recorded> =
            (1..=3).map(|n| recorded(&format!("fakecloud_instance.instance-{n}"), &format!("i-{n}"))).collect();
        state.push(recorded("aws_vpc.main", "vpc-1"));
        let p = plan(&files, &state, &profiles(), None, Slice { of: 12 });
        assert_eq!(
            p.listings.iter().map(|l| l.arguments.clone()).collect::<Vec<_>>(),
            [json!({"tags": {"infrakit.group": "web"}}), json!({"tags": {"infrakit.instance.name": "*"}})]
        );
        assert_eq!(p.listed.iter().map(|l| l.listing).collect::<Vec<_>>(), [0, 0, 1]);
        assert_eq!(p.always, ["aws_vpc.main"], "a type without a look-up is refreshed every run");
        let (doc, addresses) = listing_document(&p.listings, &BTreeSet::new());
        assert_eq!(addresses, ["data.fakecloud_instances.infrakit_tf_list_0", "data.fakecloud_instances.infrakit_tf_list_1"]);
        assert_eq!(doc["data"]["fakecloud_instances"]["infrakit_tf_list_1"]["tags"]["infrakit.instance.name"], "*");
    }

    #[test]
    fn the_slice_rotates_through_every_listed_resource() {
        let files: Vec<_> = (1..=7).map(|n| vm(&format!("instance-{n}"), Some("web"))).collect();
        let state: Vec<Recorded> =
            (1..=7).map(|n| recorded(&format!("fakecloud_instance.instance-{n}"), &format!("i-{n}"))).collect();
        let mut cursor = None;
        let mut seen = BTreeSet::new();
        for run in 0..3 {
            let p = plan(&files, &state, &profiles(), cursor.as_deref(), Slice { of: 3 });
            assert_eq!(p.slice.len(), 3, "run {run}: ceil(7/3)");
            seen.extend(p.slice.clone());
            cursor = p.cursor;
        }
        assert_eq!(seen.len(), 7, "all within 3 runs: {seen:?}");
        // A cursor past every address (its resource gone) starts again from the first.
        let p = plan(&files, &state, &profiles(), Some("zzz"), Slice { of: 3 });
        assert_eq!(p.slice[0], "fakecloud_instance.instance-1");
    }

    #[test]
    fn unlisted_resources_are_those_their_listing_does_not_show() {
        let files = vec![vm("instance-1", None), vm("instance-2", None)];
        let state = vec![recorded("fakecloud_instance.instance-1", "i-1"), recorded("fakecloud_instance.instance-2", "i-2")];
        let p = plan(&files, &state, &profiles(), None, Slice::default());
        let reads = BTreeMap::from([(p.listings[0].address(0), json!({"ids": ["i-1", "i-9"]}))]);
        assert_eq!(p.unlisted(&reads), ["fakecloud_instance.instance-2"]);
        assert!(p.blind(&p.unlisted(&reads)).is_empty());
        let none = p.unlisted(&BTreeMap::new());
        assert_eq!(none.len(), 2, "a listing not read shows nothing");
        assert_eq!(p.blind(&none), [("fakecloud_instances".to_string(), 2)]);
    }

    #[test]
    fn what_cannot_be_listed_is_refreshed_every_run() {
        // Tags set by an expression, a look-up by name, a resource in no file.
        let files = vec![(
            "instance-1.tf.json".to_string(),
            json!({"resource": {"fakecloud_instance": {"instance-1": {"tags": "${var.tags}"}}}}),
        )];
        let state = vec![recorded("fakecloud_instance.instance-1", "i-1"), recorded("fakecloud_instance.gone", "i-2")];
        let p = plan(&files, &state, &profiles(), None, Slice::default());
        assert!(!p.lists());
        assert_eq!(p.always.len(), 2);
        let by_name = Profiles::builtin();
        let files = vec![(
            "instance-1.tf.json".to_string(),
            json!({"resource": {"digitalocean_droplet": {"instance-1": {"name": "a", "tags": {"infrakit.instance.name": "instance-1"}}}}}),
        )];
        let p = plan(&files, &[recorded("digitalocean_droplet.instance-1", "1")], &by_name, None, Slice::default());
        assert!(!p.lists(), "a look-up by name lists nothing");
    }

    #[test]
    fn a_targeted_plan_takes_the_files_its_targets_refer_to() {
        let files = vec![
            (
                "instance-1.tf.json".to_string(),
                json!({"resource": {"fakecloud_instance": {"instance-1": {"name": "${fakecloud_volume.shared-nfs.id}"}}}}),
            ),
            ("instance-2.tf.json".to_string(), json!({"resource": {"fakecloud_instance": {"instance-2": {}}}})),
            (
                "shared_global.tf.json".to_string(),
                json!({"resource": {"fakecloud_volume": {"shared-nfs": {"depends_on": ["fakecloud_volume.x"]}}}}),
            ),
            ("x_global.tf.json".to_string(), json!({"resource": {"fakecloud_volume": {"x": {}}}})),
        ];
        let needed = needed_files(&files, &["fakecloud_instance.instance-1".into(), "aws_vpc.main".into()], &[]).unwrap();
        assert_eq!(
            needed.into_iter().collect::<Vec<_>>(),
            ["instance-1.tf.json", "shared_global.tf.json", "x_global.tf.json"]
        );
        // Your main.tf mentions a managed resource: its file is needed, whatever is targeted.
        let yours = mentioned("output \"nfs\" {\n  value = fakecloud_instance.instance-2.id\n}\n");
        let needed = needed_files(&files, &[], &yours).unwrap();
        assert_eq!(needed.into_iter().collect::<Vec<_>>(), ["instance-2.tf.json"]);
        let mut odd = files.clone();
        odd.push(("y_global.tf.json".into(), json!({"output": {"o": {"value": 1}}})));
        assert_eq!(needed_files(&odd, &[], &[]), None);
    }

    #[test]
    fn slices_parse_as_one_in_n() {
        assert_eq!(Slice::parse("1/12"), Ok(Slice { of: 12 }));
        assert_eq!(Slice::parse("1/1").map(|s| s.to_string()), Ok("1/1".into()));
        for bad in ["2/12", "1/0", "12", "1/x", "1/1001"] {
            assert!(Slice::parse(bad).is_err(), "{bad}");
        }
    }
}
