//! Machines that an apply cut short made but terraform never recorded. A cloud creates a
//! machine at once and reports it running later; terraform records it only then. Killed in
//! between (the OOM killer, `systemctl stop`, a host that dies), the machine is in the cloud,
//! carrying our tags, and in no state: the next apply would create it again, the first one
//! leaked (docker/deploykit#791). So the run after an interrupted apply looks up, through
//! terraform itself, every resource the live files declare that the state does not hold, by
//! the tags infrakit-tf writes on it (`tfconfig::identity`), and adopts what it finds with
//! import blocks into the addresses the files define. More than one match, or a match whose
//! group tag names another group, is never guessed at.
//!
//! A cloud is eventually consistent: a look-up taken seconds after the apply it judges may
//! not list what that apply made. So the evidence carries when it was noted ([`Evidence`]),
//! and a look-up concludes that a machine does not exist only when it began at least the
//! type's settle time after that ([`unsettled`]); until then what it covers is not created
//! again ([`holding_back`]): the next look decides.
//!
//! Pure: what to look up ([`candidates`]), the data sources that do it ([`lookup_document`]),
//! what they found ([`found`]), and the verdicts ([`judge`]); whether absence may be concluded
//! ([`unsettled`]) and what an apply must leave alone meanwhile ([`holding_back`]). The
//! workspace runs terraform.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::group::GROUP_TAG;
use crate::names;
use crate::look::ids_at;
use crate::profile::Profiles;
use crate::spec::lookup;
use crate::tfconfig::RESOURCE_TAG;

/// The evidence that machines may exist in no state (an apply that failed while creating, or
/// was cut short; a host that lost its lease): why, and when it was noted, in milliseconds
/// since the epoch by the clock the hosts share (the store's; without one, this host's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    pub why: String,
    pub noted_ms: u64,
}

impl Evidence {
    /// The evidence as it is kept (the marker's bytes, the store's column): why, then a line
    /// `@<ms>`, when it was noted.
    pub fn text(why: &str, noted_ms: u64) -> String {
        format!("{why}\n@{noted_ms}")
    }

    /// The evidence kept as `text` ([`Evidence::text`]); `undated`: when it was noted if the
    /// text does not say (a marker written before the time was kept).
    pub fn parse(text: &str, undated: u64) -> Evidence {
        let text = text.trim();
        match text.rsplit_once('\n').and_then(|(why, at)| Some((why, at.strip_prefix('@')?.parse().ok()?))) {
            Some((why, noted_ms)) => Evidence { why: why.trim().to_string(), noted_ms },
            None => Evidence { why: text.to_string(), noted_ms: undated },
        }
    }
}

/// A resource to look up: declared by a live file, not in the state.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// `type.name`.
    pub address: String,
    /// The file's base name (`instance-1`, `web_dedicated_1`).
    pub file: String,
    /// The data source and its arguments, rendered.
    pub data_source: String,
    pub arguments: Value,
    /// Where the data source lists the IDs.
    pub ids: String,
    /// Where the resource's tags are (to check a match's group), when the look-up has one.
    pub tags: Option<Vec<String>>,
    /// The group tag the resource's file gives it, if any.
    pub group: Option<String>,
}

/// An object adopted (or, in `reconcile --check`, that would be).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Adopted {
    pub address: String,
    pub id: String,
}

/// What the look-up says of one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not in the cloud: the apply creates it.
    Absent,
    /// One object: adopt it (after its group is checked, [`judge`]).
    One(String),
    /// Several objects: which one is ours is not guessed.
    Several(Vec<String>),
}

/// The resources of the live `files` (file name, document) that a look-up can find and that
/// `state` (addresses) does not hold.
pub fn candidates(files: &[(String, Value)], state: &BTreeSet<String>, profiles: &Profiles) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (name, doc) in files {
        let Some((base, _)) = names::split_file_name(name) else { continue };
        let Some(kind) = names::classify(base) else { continue };
        let file_identity = crate::tfconfig::identity(&kind);
        for (rtype, by_name) in doc.get("resource").and_then(Value::as_object).into_iter().flatten() {
            let Some(rule) = profiles.lookup(rtype) else { continue };
            for (rname, props) in by_name.as_object().into_iter().flatten() {
                let address = format!("{rtype}.{rname}");
                if state.contains(&address) {
                    continue;
                }
                let props = props.as_object().cloned().unwrap_or_default();
                let tags = rule.tag_path();
                let written = tags.as_deref().and_then(|p| lookup(&props, p).ok().flatten());
                let group = written.and_then(|t| t.get(GROUP_TAG)).and_then(Value::as_str).map(str::to_string);
                // The resource's own tag, where it carries it (files written before it was
                // added are looked up by their file's tags alone).
                let mut identity = file_identity.clone();
                if let Some(own) = written.and_then(|t| t.get(RESOURCE_TAG)).and_then(Value::as_str) {
                    identity.insert(RESOURCE_TAG.to_string(), own.to_string());
                }
                let Some(arguments) = render(&rule.arguments, &identity, &props) else { continue };
                out.push(Candidate {
                    address,
                    file: base.to_string(),
                    data_source: rule.data_source.clone(),
                    arguments,
                    ids: rule.ids.clone(),
                    tags,
                    group,
                });
            }
        }
    }
    out
}

/// A look-up's arguments for one resource: `"{{tags}}"` (the whole string) becomes the
/// identifying tags; `{{instance}}`, `{{slot}}`, `{{global}}` in strings their values, `{{name}}`
/// the resource's `name`. `None` when a variable has no value for it (a global's
/// `{{instance}}`, a resource without a literal `name`): it cannot be looked up this way.
fn render(args: &Value, identity: &BTreeMap<String, String>, props: &Map<String, Value>) -> Option<Value> {
    use crate::tfconfig::{GLOBAL_TAG, NAME_TAG, SLOT_TAG};
    Some(match args {
        Value::String(s) if s == "{{tags}}" => {
            Value::Object(identity.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect())
        }
        Value::String(s) => {
            let mut out = s.clone();
            for (var, value) in [
                ("{{instance}}", identity.get(NAME_TAG).map(String::as_str)),
                ("{{slot}}", identity.get(SLOT_TAG).map(String::as_str)),
                ("{{global}}", identity.get(GLOBAL_TAG).map(String::as_str)),
                ("{{name}}", props.get("name").and_then(Value::as_str).filter(|n| !n.contains("${"))),
            ] {
                if out.contains(var) {
                    out = out.replace(var, value?);
                }
            }
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| render(v, identity, props)).collect::<Option<_>>()?),
        Value::Object(map) => Value::Object(
            map.iter().map(|(k, v)| Some((k.clone(), render(v, identity, props)?))).collect::<Option<_>>()?,
        ),
        other => other.clone(),
    })
}

/// The name of the data source that looks up candidate `i`.
fn lookup_name(i: usize) -> String {
    format!("infrakit_tf_lookup_{i}")
}

/// The address of the data source that looks candidate `i` up.
pub fn lookup_address(candidates: &[Candidate], i: usize) -> String {
    format!("data.{}.{}", candidates[i].data_source, lookup_name(i))
}

/// Which candidate (its index) the data source at `address` looks up.
pub fn looked_up_by(address: &str) -> Option<usize> {
    address.rsplit_once(".infrakit_tf_lookup_").and_then(|(_, i)| i.parse().ok())
}

/// Whether `error` (a failed data source's summary and detail) says that it matched nothing,
/// by one of `patterns` (case-insensitive regular expressions, `profile::EMPTY_ERRORS` and the
/// type's `empty_errors`, checked when the configuration was read).
pub fn says_empty(error: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| {
        regex::RegexBuilder::new(p).case_insensitive(true).build().is_ok_and(|re| re.is_match(error))
    })
}

/// The document of data sources that look `candidates` up (but those `skip` names, by index),
/// and their addresses (in order).
pub fn lookup_document(candidates: &[Candidate], skip: &BTreeSet<usize>) -> (Value, Vec<String>) {
    let mut data: Map<String, Value> = Map::new();
    let mut addresses = Vec::new();
    for (i, c) in candidates.iter().enumerate().filter(|(i, _)| !skip.contains(i)) {
        let by_name = data.entry(c.data_source.clone()).or_insert_with(|| Value::Object(Map::new()));
        by_name.as_object_mut().expect("an object").insert(lookup_name(i), c.arguments.clone());
        addresses.push(format!("data.{}.{}", c.data_source, lookup_name(i)));
    }
    (serde_json::json!({ "data": data }), addresses)
}

/// What each candidate's data source found, from the values of the data sources read (by
/// address, as terraform's saved plan holds them). An object the state already records
/// (`recorded`: resource type and ID) is another resource's, never a match: a resource the
/// look-up cannot tell from another of its file (written before `infrakit.resource`) finds it.
pub fn found(
    candidates: &[Candidate],
    read: &BTreeMap<String, Value>,
    recorded: &BTreeSet<(String, String)>,
) -> Vec<Verdict> {
    candidates
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let address = format!("data.{}.{}", c.data_source, lookup_name(i));
            let mut ids = read.get(&address).map(|v| ids_at(v, &c.ids)).unwrap_or_default();
            let rtype = c.address.split_once('.').map_or(c.address.as_str(), |(t, _)| t);
            ids.retain(|id| !recorded.contains(&(rtype.to_string(), id.clone())));
            ids.sort();
            ids.dedup();
            match ids.len() {
                0 => Verdict::Absent,
                1 => Verdict::One(ids.remove(0)),
                _ => Verdict::Several(ids),
            }
        })
        .collect()
}

/// Why the look-up cannot be acted on: each ambiguous candidate, one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub lines: Vec<String>,
}

/// The objects to adopt, or why none may be: several matches for one resource, or a match
/// whose group tag (`live`: the imported objects' values, by address) is not the one its file
/// gives. An object found for two resources is not adopted twice either.
pub fn judge(
    candidates: &[Candidate],
    verdicts: &[Verdict],
    live: &BTreeMap<String, Value>,
) -> Result<Vec<Adopted>, Refusal> {
    let mut adopted = Vec::new();
    let mut lines = Vec::new();
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (c, v) in candidates.iter().zip(verdicts) {
        match v {
            Verdict::Absent => {}
            Verdict::Several(ids) => lines.push(format!("{}: {} objects carry its tags: {}", c.address, ids.len(), ids.join(", "))),
            Verdict::One(id) => {
                let theirs = c
                    .tags
                    .as_deref()
                    .and_then(|p| live.get(&c.address).and_then(Value::as_object).and_then(|v| lookup(v, p).ok().flatten()))
                    .and_then(|t| t.get(GROUP_TAG))
                    .and_then(Value::as_str);
                if c.tags.is_some() && live.contains_key(&c.address) && theirs != c.group.as_deref() {
                    lines.push(format!(
                        "{}: the object {id} that carries its tags belongs to group `{}`, not `{}`",
                        c.address,
                        theirs.unwrap_or("(none)"),
                        c.group.as_deref().unwrap_or("(none)")
                    ));
                } else if let Some(other) = seen.insert(id, &c.address) {
                    lines.push(format!("{}: the object {id} was found for {other} too", c.address));
                } else {
                    adopted.push(Adopted { address: c.address.clone(), id: id.clone() });
                }
            }
        }
    }
    if lines.is_empty() {
        Ok(adopted)
    } else {
        Err(Refusal { lines })
    }
}

/// The candidates a look-up found nothing for, and that it may not yet conclude absent: it
/// `started` (ms) less than their type's `settle` time after the evidence was `noted` (ms). Each
/// with when it may (ms). A candidate whose look-up `failed` is one of them, whatever its age.
pub fn unsettled<'c>(
    candidates: &'c [Candidate],
    verdicts: &[Verdict],
    noted: u64,
    started: u64,
    settle: impl Fn(&str) -> std::time::Duration,
) -> Vec<(&'c Candidate, u64)> {
    candidates
        .iter()
        .zip(verdicts)
        .filter(|(_, v)| **v == Verdict::Absent)
        .filter_map(|(c, _)| {
            let rtype = c.address.split_once('.').map_or(c.address.as_str(), |(t, _)| t);
            let until = noted.saturating_add(u64::try_from(settle(rtype).as_millis()).unwrap_or(u64::MAX));
            (started < until).then_some((c, until))
        })
        .collect()
}

/// What an apply must leave alone while `held` (addresses whose machines may exist, unlisted
/// yet) is unsettled: those resources, and every resource of the live `files` that refers to
/// one of them (a reference `${type.name...}` or a `depends_on` entry), and so on, since
/// terraform creates what a target depends on.
pub fn holding_back(files: &[(String, Value)], held: &BTreeSet<String>) -> BTreeSet<String> {
    let mut refs: Vec<(String, Vec<String>)> = Vec::new();
    for (_, doc) in files {
        for (rtype, by_name) in doc.get("resource").and_then(Value::as_object).into_iter().flatten() {
            for (rname, props) in by_name.as_object().into_iter().flatten() {
                let mut mentions = Vec::new();
                crate::look::references(props, &mut mentions);
                refs.push((format!("{rtype}.{rname}"), mentions));
            }
        }
    }
    let mut out = held.clone();
    loop {
        let more: Vec<String> = refs
            .iter()
            .filter(|(address, mentions)| !out.contains(address) && mentions.iter().any(|m| out.contains(m)))
            .map(|(address, _)| address.clone())
            .collect();
        if more.is_empty() {
            return out;
        }
        out.extend(more);
    }
}

/// Every resource address the live `files` declare.
pub fn declared(files: &[(String, Value)]) -> Vec<String> {
    files
        .iter()
        .flat_map(|(_, doc)| doc.get("resource").and_then(Value::as_object).into_iter().flatten())
        .flat_map(|(rtype, by_name)| by_name.as_object().into_iter().flatten().map(move |(n, _)| format!("{rtype}.{n}")))
        .collect()
}

/// The import blocks that adopt `adopted`, over those of `existing` (an import-blocks file
/// already there), one per address.
pub fn import_blocks(existing: Option<&Value>, adopted: &[Adopted]) -> Value {
    let mut blocks: Vec<Value> =
        existing.and_then(|d| d.get("import")).and_then(Value::as_array).cloned().unwrap_or_default();
    for a in adopted {
        blocks.retain(|b| b.get("to").and_then(Value::as_str) != Some(&a.address));
        // An ID read from the cloud is data: terraform reads it literally.
        blocks.push(serde_json::json!({"to": a.address, "id": crate::tfconfig::literal(&a.id)}));
    }
    serde_json::json!({ "import": blocks })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn profiles() -> Profiles {
        Profiles::builtin()
    }

    fn files() -> Vec<(String, Value)> {
        vec![
            (
                "instance-7.tf.json".into(),
                json!({"resource": {"aws_instance": {"instance-7": {"tags": {"infrakit.instance.name": "instance-7", "infrakit.group": "web"}}}}}),
            ),
            (
                "web_dedicated_2.tf.json".into(),
                json!({"resource": {"aws_ebs_volume": {"web-2-data": {"tags": {"infrakit.slot": "web_dedicated_2", "infrakit.group": "web"}}}}}),
            ),
            (
                "instance-8.tf.json".into(),
                json!({"resource": {"digitalocean_droplet": {"instance-8": {"name": "instance-8"}}, "terraform_data": {"x": {}}}}),
            ),
        ]
    }

    #[test]
    fn what_the_state_lacks_and_a_look_up_can_find_is_looked_up_by_its_tags() {
        let state = BTreeSet::from(["aws_ebs_volume.web-2-data".to_string()]);
        let c = candidates(&files(), &state, &profiles());
        assert_eq!(c.iter().map(|c| c.address.as_str()).collect::<Vec<_>>(), ["aws_instance.instance-7", "digitalocean_droplet.instance-8"]);
        assert_eq!(c[0].arguments["instance_tags"], json!({"infrakit.instance.name": "instance-7"}));
        assert_eq!(c[0].group.as_deref(), Some("web"));
        assert_eq!(c[1].arguments, json!({"filter": [{"key": "name", "values": ["instance-8"]}]}));
        let (doc, addresses) = lookup_document(&c, &BTreeSet::new());
        assert_eq!(addresses, ["data.aws_instances.infrakit_tf_lookup_0", "data.digitalocean_droplets.infrakit_tf_lookup_1"]);
        assert_eq!(lookup_address(&c, 1), addresses[1]);
        assert_eq!(looked_up_by(&addresses[1]), Some(1));
        let (_, without) = lookup_document(&c, &BTreeSet::from([0]));
        assert_eq!(without, ["data.digitalocean_droplets.infrakit_tf_lookup_1"], "the others keep their names");
        assert_eq!(doc["data"]["aws_instances"]["infrakit_tf_lookup_0"]["instance_state_names"][0], "pending");
    }

    #[test]
    fn a_resource_that_carries_its_own_name_is_looked_up_by_it_too() {
        let volume = |name: &str| json!({"tags": {"infrakit.instance.name": "instance-7", "infrakit.resource": name}});
        let files = vec![(
            "instance-7.tf.json".to_string(),
            json!({"resource": {"aws_ebs_volume": {"instance-7-a": volume("instance-7-a"), "instance-7-b": volume("instance-7-b")}}}),
        )];
        let c = candidates(&files, &BTreeSet::new(), &profiles());
        let looked: Vec<&Value> = c.iter().map(|c| &c.arguments["tags"]["infrakit.resource"]).collect();
        assert_eq!(looked, [&json!("instance-7-a"), &json!("instance-7-b")]);
    }

    #[test]
    fn a_resource_without_a_literal_name_cannot_be_looked_up_by_name() {
        let files = vec![("instance-8.tf.json".to_string(), json!({"resource": {"digitalocean_droplet": {"instance-8": {"name": "${var.x}"}}}}))];
        assert!(candidates(&files, &BTreeSet::new(), &profiles()).is_empty());
    }

    #[test]
    fn the_look_up_answers_become_verdicts() {
        let c = candidates(&files(), &BTreeSet::new(), &profiles());
        let read = BTreeMap::from([
            ("data.aws_instances.infrakit_tf_lookup_0".to_string(), json!({"ids": ["i-2", "i-1"]})),
            ("data.aws_ebs_volumes.infrakit_tf_lookup_1".to_string(), json!({"ids": ["vol-1"]})),
            ("data.digitalocean_droplets.infrakit_tf_lookup_2".to_string(), json!({"droplets": []})),
        ]);
        assert_eq!(
            found(&c, &read, &BTreeSet::new()),
            [Verdict::Several(vec!["i-1".into(), "i-2".into()]), Verdict::One("vol-1".into()), Verdict::Absent]
        );
        // What the state records is some other resource's: i-2 and vol-1 are; an ID of
        // another type (a record named `vol-1`) is not.
        let recorded = BTreeSet::from([
            ("aws_instance".to_string(), "i-2".to_string()),
            ("aws_ebs_volume".to_string(), "vol-1".to_string()),
        ]);
        assert_eq!(found(&c, &read, &recorded), [Verdict::One("i-1".into()), Verdict::Absent, Verdict::Absent]);
        let other_type = BTreeSet::from([("aws_route53_record".to_string(), "vol-1".to_string())]);
        assert_eq!(found(&c, &read, &other_type)[1], Verdict::One("vol-1".into()));
        let droplets = json!({"droplets": [{"id": 4242, "name": "instance-8"}]});
        assert_eq!(ids_at(&droplets, "droplets.*.id"), ["4242"]);
    }

    #[test]
    fn several_matches_or_another_groups_object_are_refused_never_guessed() {
        let c = candidates(&files(), &BTreeSet::new(), &profiles());
        let verdicts = [Verdict::One("i-1".into()), Verdict::One("vol-1".into()), Verdict::Absent];
        let ours = json!({"tags": {"infrakit.group": "web"}});
        let live = BTreeMap::from([("aws_instance.instance-7".into(), ours.clone()), ("aws_ebs_volume.web-2-data".into(), ours)]);
        assert_eq!(
            judge(&c, &verdicts, &live).unwrap(),
            [
                Adopted { address: "aws_instance.instance-7".into(), id: "i-1".into() },
                Adopted { address: "aws_ebs_volume.web-2-data".into(), id: "vol-1".into() }
            ]
        );
        let theirs = BTreeMap::from([("aws_instance.instance-7".into(), json!({"tags": {"infrakit.group": "db"}}))]);
        let refused = judge(&c, &verdicts[..1], &theirs).unwrap_err();
        assert_eq!(refused.lines, ["aws_instance.instance-7: the object i-1 that carries its tags belongs to group `db`, not `web`"]);
        let several = [Verdict::Several(vec!["i-1".into(), "i-2".into()])];
        assert_eq!(judge(&c, &several, &live).unwrap_err().lines, ["aws_instance.instance-7: 2 objects carry its tags: i-1, i-2"]);
    }

    // A data source that fails when it matches nothing says so in words of its own.
    #[test]
    fn what_a_data_source_says_of_nothing_is_understood_as_empty() {
        let patterns: Vec<String> = crate::profile::EMPTY_ERRORS.iter().map(|p| p.to_string()).collect();
        assert!(says_empty("Your query returned no results. Please change your search criteria and try again.", &patterns));
        assert!(says_empty("fakecloud: no matching instances found\ntry a different search", &patterns));
        assert!(says_empty("no matching EC2 Instance found", &patterns));
        assert!(!says_empty("RequestLimitExceeded: Request limit exceeded.", &patterns));
        assert!(!says_empty("An argument named \"tagz\" is not expected here.", &patterns));
        assert!(says_empty("nothing here, sorry", &["nothing here".to_string()]));
    }

    // The evidence keeps when it was noted; a marker from before that is dated by the caller.
    #[test]
    fn evidence_says_when_it_was_noted() {
        let text = Evidence::text("terraform apply failed while creating a.b", 1_700_000_000_123);
        assert_eq!(
            Evidence::parse(&text, 5),
            Evidence { why: "terraform apply failed while creating a.b".into(), noted_ms: 1_700_000_000_123 }
        );
        assert_eq!(Evidence::parse("host-a lost its lease\n", 5), Evidence { why: "host-a lost its lease".into(), noted_ms: 5 });
    }

    // A look-up that began less than the settle time after the evidence concludes nothing of
    // what it did not find; one old enough does. Each type has its own settle time.
    #[test]
    fn absence_is_concluded_only_by_a_look_up_old_enough() {
        let c = candidates(&files(), &BTreeSet::new(), &profiles());
        let verdicts = [Verdict::Absent, Verdict::One("vol-1".into()), Verdict::Absent];
        let settle = |t: &str| std::time::Duration::from_secs(if t == "aws_instance" { 120 } else { 10 });
        let young = unsettled(&c, &verdicts, 1_000_000, 1_005_000, settle);
        let names: Vec<(&str, u64)> = young.iter().map(|(c, until)| (c.address.as_str(), *until)).collect();
        assert_eq!(names, [("aws_instance.instance-7", 1_120_000), ("digitalocean_droplet.instance-8", 1_010_000)]);
        let later = unsettled(&c, &verdicts, 1_000_000, 1_010_000, settle);
        assert_eq!(later.iter().map(|(c, _)| c.address.as_str()).collect::<Vec<_>>(), ["aws_instance.instance-7"]);
        assert!(unsettled(&c, &verdicts, 1_000_000, 1_120_000, settle).is_empty());
        assert!(unsettled(&c, &verdicts, 1_000_000, 1_000_000, |_| std::time::Duration::ZERO).is_empty(), "0s trusts at once");
    }

    // What refers to a held resource is held too, and what refers to that: an apply targeting
    // it would create what it depends on.
    #[test]
    fn what_refers_to_a_held_resource_is_held_back_with_it() {
        let files = vec![
            ("web_dedicated_1.tf.json".to_string(), json!({"resource": {"aws_ebs_volume": {"web-1-data": {"size": 5}}}})),
            (
                "instance-1.tf.json".to_string(),
                json!({"resource": {"aws_instance": {"instance-1": {"tags": {}}},
                                    "aws_volume_attachment": {"instance-1-data": {"volume_id": "${aws_ebs_volume.web-1-data.id}", "instance_id": "${aws_instance.instance-1.id}"}},
                                    "aws_route53_record": {"instance-1-dns": {"depends_on": ["aws_volume_attachment.instance-1-data"]}}}}),
            ),
            ("instance-2.tf.json".to_string(), json!({"resource": {"aws_instance": {"instance-2": {"tags": {}}}}})),
        ];
        let held = BTreeSet::from(["aws_ebs_volume.web-1-data".to_string()]);
        assert_eq!(
            holding_back(&files, &held).into_iter().collect::<Vec<_>>(),
            ["aws_ebs_volume.web-1-data", "aws_route53_record.instance-1-dns", "aws_volume_attachment.instance-1-data"]
        );
        assert_eq!(declared(&files).len(), 5);
    }

    #[test]
    fn import_blocks_join_those_already_there() {
        let existing = json!({"import": [{"to": "a.b", "id": "1"}, {"to": "c.d", "id": "old"}]});
        let blocks = import_blocks(Some(&existing), &[Adopted { address: "c.d".into(), id: "new".into() }]);
        assert_eq!(blocks, json!({"import": [{"to": "a.b", "id": "1"}, {"to": "c.d", "id": "new"}]}));
    }
}
