//! `Properties.Placement`: the zones a group's members are spread across, the fallbacks a
//! create tries when a zone has no capacity, and how long a zone (or a fallback in it) that had
//! none is skipped. Not part of the config hash: a member's zone is its own, never a reason to
//! replace it. Pure: the spec's values in, the choices out ([`choose`], [`backoff`],
//! [`is_capacity_error`]).

use std::collections::BTreeMap;
use std::time::Duration;

use regex::RegexBuilder;
use serde_json::{Map, Value};

use super::{duration_key, get_ci};

/// The tag naming a member's zone (its `Name` in `Placement.Zones`).
pub const ZONE_TAG: &str = "infrakit.zone";
/// The tag naming the fallback a member was made with (its index in `Placement.Fallback`);
/// absent: the spec's own properties.
pub const FALLBACK_TAG: &str = "infrakit.fallback";

/// How long a (zone, fallback) that had no capacity is skipped first, when the spec does not say.
pub(super) const BACKOFF: Duration = Duration::from_secs(5 * 60);
/// The longest it is skipped, however often it failed, when the spec does not say.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(30 * 60);

/// The capacity errors of the clouds, matched case-insensitively in a failed create's error
/// (each a regular expression): AWS EC2's, GCP's and Azure's texts for "no capacity there now".
pub(super) const CAPACITY_ERRORS: &[&str] = &[
    r"InsufficientInstanceCapacity",
    r"InsufficientHostCapacity",
    r"InsufficientCapacityOnOutpost",
    r"ZONE_RESOURCE_POOL_EXHAUSTED",
    r"does not have enough resources available to fulfill the request",
    r"SkuNotAvailable",
    r"ZonalAllocationFailed",
    r"AllocationFailed",
    r"OverconstrainedZonalAllocationRequest",
];

/// One zone: its name (the `infrakit.zone` tag, the metrics' label) and what it merges into
/// its members' VM and dedicated resources.
#[derive(Debug, Clone, PartialEq)]
pub struct Zone {
    pub name: String,
    pub properties: Map<String, Value>,
}

/// `Properties.Placement`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub zones: Vec<Zone>,
    /// What each fallback merges into the VM, tried in order after the spec's own.
    pub fallback: Vec<Map<String, Value>>,
    /// The user's capacity errors (regular expressions), besides [`CAPACITY_ERRORS`].
    pub capacity_errors: Vec<String>,
    pub backoff: Duration,
    pub max_backoff: Duration,
    pub rebalance: bool,
}

impl Placement {
    /// The canonical text of what decides placement, for the store's configuration check.
    pub fn fingerprint(&self) -> Value {
        serde_json::json!({
            "Zones": self.zones.iter().map(|z| serde_json::json!({"Name": z.name, "Properties": z.properties})).collect::<Vec<_>>(),
            "Fallback": self.fallback,
            "CapacityErrors": self.capacity_errors,
            "BackoffMs": self.backoff.as_millis() as u64,
            "MaxBackoffMs": self.max_backoff.as_millis() as u64,
            "Rebalance": self.rebalance,
        })
    }

    /// Whether `error` (a failed create's) says the cloud had no capacity: one of
    /// [`CAPACITY_ERRORS`] or the user's.
    pub fn is_capacity_error(&self, error: &str) -> bool {
        is_capacity_error(error, &self.capacity_errors)
    }
}

/// Whether `error` matches one of [`CAPACITY_ERRORS`] or of `mine` (case-insensitive).
pub(super) fn is_capacity_error(error: &str, mine: &[String]) -> bool {
    CAPACITY_ERRORS.iter().copied().chain(mine.iter().map(String::as_str)).any(|p| {
        RegexBuilder::new(p).case_insensitive(true).build().is_ok_and(|re| re.is_match(error))
    })
}

/// How long a (zone, fallback) is skipped after its `failures`-th capacity error in a row:
/// `base`, doubling, at most `max`.
pub fn backoff(failures: u32, base: Duration, max: Duration) -> Duration {
    base.saturating_mul(1u32 << failures.saturating_sub(1).min(16)).min(max)
}

/// Where a new member goes: among the zones (by index) and their fallbacks (`None`: the spec's
/// own properties, then each fallback by index), the first choice that `available` allows, in
/// the zone with the fewest members (`counts`, by zone index; ties to the zone listed first)
/// among those with any choice left. `None` when every choice of every zone is unavailable.
pub fn choose(
    zones: usize,
    fallbacks: usize,
    counts: &BTreeMap<usize, usize>,
    available: impl Fn(usize, Option<usize>) -> bool,
) -> Option<(usize, Option<usize>)> {
    let first_choice =
        |z: usize| std::iter::once(None).chain((0..fallbacks).map(Some)).find(|f| available(z, *f)).map(|f| (z, f));
    (0..zones).filter_map(first_choice).min_by_key(|(z, _)| (counts.get(z).copied().unwrap_or(0), *z))
}

/// The instance spec of a member in zone `zone` with fallback `fallback` (indexes into
/// `placement`): the zone's properties merged into the VM and the dedicated resources (a volume
/// lives in its machine's zone), the fallback's into the VM, as the flavor's tags are (a key
/// given replaces the spec's).
pub fn place(spec: &crate::spec::Spec, placement: &Placement, zone: usize, fallback: Option<usize>) -> crate::spec::Spec {
    let mut placed = spec.clone();
    let zone = &placement.zones[zone].properties;
    for (i, r) in placed.resources.iter_mut().enumerate() {
        if i == spec.vm || matches!(r.scope, crate::names::Scope::Dedicated(_)) {
            r.props.extend(zone.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    if let Some(f) = fallback.and_then(|f| placement.fallback.get(f)) {
        placed.resources[spec.vm].props.extend(f.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    placed
}

/// A member's (zone, fallback) as its tags say, as indexes into `placement`; `None` for a
/// member of no zone `placement` lists.
pub fn placed(tags: &BTreeMap<String, String>, placement: &Placement) -> Option<(usize, Option<usize>)> {
    let zone = placement.zones.iter().position(|z| tags.get(ZONE_TAG) == Some(&z.name))?;
    let fallback = tags.get(FALLBACK_TAG).and_then(|f| f.parse().ok()).filter(|f| *f < placement.fallback.len());
    Some((zone, fallback))
}

/// Which zone a dedicated file (a slot's) is in ([`zone_of`]): a slot keeps its zone while
/// its file exists (its volume lives there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotZone {
    /// In one of these zones (by index): those that write exactly what the file has for every
    /// key any zone sets (several only when they write the same: nothing tells them apart).
    In(Vec<usize>),
    /// In no zone: the file has what the spec alone writes for those keys (written before the
    /// group had `Placement`).
    Unzoned,
    /// In a zone the spec does not list (removed, or its properties changed): the file has
    /// other values for those keys.
    Unlisted,
}

/// Which zone the dedicated file `doc` is in, for a group whose members' spec is `spec`: the
/// zones whose properties, merged into the spec's dedicated resources as [`place`] merges them,
/// give each of the file's resources exactly the values it has for every key any zone sets
/// (absent where neither gives one). A zone without properties (the provider's default) writes
/// what the spec alone does.
pub fn zone_of(doc: &Value, placement: &Placement, spec: &crate::spec::Spec) -> SlotZone {
    let dedicated: Vec<(&str, &Map<String, Value>)> = spec
        .resources
        .iter()
        .filter(|r| matches!(r.scope, crate::names::Scope::Dedicated(_)))
        .map(|r| (r.rtype.as_str(), &r.props))
        .collect();
    slot_zone(doc, placement, &dedicated)
}

/// [`zone_of`], the spec's dedicated resources given as (type, properties).
pub(super) fn slot_zone(doc: &Value, placement: &Placement, dedicated: &[(&str, &Map<String, Value>)]) -> SlotZone {
    let keys: std::collections::BTreeSet<&String> = placement.zones.iter().flat_map(|z| z.properties.keys()).collect();
    let resources: Vec<(&str, &Value)> = crate::tfconfig::resources(doc).map(|(t, _, props)| (t, props)).collect();
    // What the spec alone gives a resource of type `rtype` for `key`.
    let own = |rtype: &str, key: &str| dedicated.iter().find(|(t, _)| *t == rtype).and_then(|(_, p)| p.get(key));
    let written = |zone: Option<&Zone>| {
        resources.iter().all(|(rtype, r)| {
            keys.iter().all(|k| r.get(k.as_str()) == zone.and_then(|z| z.properties.get(*k)).or_else(|| own(rtype, k)))
        })
    };
    let matching: Vec<usize> = placement.zones.iter().enumerate().filter(|(_, z)| written(Some(z))).map(|(i, _)| i).collect();
    if !matching.is_empty() {
        SlotZone::In(matching)
    } else if written(None) {
        SlotZone::Unzoned
    } else {
        SlotZone::Unlisted
    }
}

/// The zone (by index) a member leaves to balance the group: the fullest of the zones that
/// have room (`room`), the first listed among equals, when their member counts (`counts`)
/// differ by more than one; `None` when they are balanced.
pub fn overfull(counts: &[usize], room: &[bool]) -> Option<usize> {
    let with_room = || counts.iter().copied().enumerate().filter(|(z, _)| room.get(*z).copied().unwrap_or(false));
    let fewest = with_room().map(|(_, n)| n).min()?;
    let (zone, most) = with_room().fold(None, |best: Option<(usize, usize)>, (z, n)| match best {
        Some((_, m)) if m >= n => best,
        _ => Some((z, n)),
    })?;
    (most > fewest + 1).then_some(zone)
}

/// Parses `Properties.Placement`.
pub(super) fn placement(value: Option<&Value>, problem: &mut impl FnMut(&str, String)) -> Option<Placement> {
    const AT: &str = "/Properties/Placement";
    let p = match value {
        None | Some(Value::Null) => return None,
        Some(Value::Object(p)) => p,
        Some(_) => {
            problem(AT, "`Placement` must be an object: `{\"Zones\": [{\"Name\": \"a\", \"Properties\": {...}}]}`".into());
            return None;
        }
    };
    let properties = |item: &Value, at: &str, problem: &mut dyn FnMut(&str, String)| -> Map<String, Value> {
        match item.as_object().and_then(|o| get_ci(o, "Properties")) {
            Some(Value::Object(props)) => props.clone(),
            None | Some(Value::Null) => Map::new(),
            Some(_) => {
                problem(&format!("{at}/Properties"), "`Properties` must be an object of resource properties".into());
                Map::new()
            }
        }
    };
    let mut zones = Vec::new();
    match get_ci(p, "Zones") {
        Some(Value::Array(items)) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                let at = format!("{AT}/Zones/{i}");
                let name = item.as_object().and_then(|o| get_ci(o, "Name")).and_then(Value::as_str);
                let Some(name) = name else {
                    problem(&at, "each zone needs a `Name` (its tag and its metrics' label), such as \"a\"".into());
                    continue;
                };
                if let Err(e) = crate::names::check_path_component(name, "zone name") {
                    problem(&format!("{at}/Name"), e);
                } else if zones.iter().any(|z: &Zone| z.name == name) {
                    problem(&format!("{at}/Name"), format!("zone `{name}` is listed twice"));
                }
                zones.push(Zone { name: name.to_string(), properties: properties(item, &at, problem) });
            }
        }
        _ => problem(
            &format!("{AT}/Zones"),
            "`Zones` must list at least one zone: `[{\"Name\": \"a\", \"Properties\": {\"availability_zone\": \"us-east-1a\"}}]`".into(),
        ),
    }
    let fallback = match get_ci(p, "Fallback") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            items.iter().enumerate().map(|(i, item)| properties(item, &format!("{AT}/Fallback/{i}"), problem)).collect()
        }
        Some(_) => {
            problem(&format!("{AT}/Fallback"), "`Fallback` must be a list: `[{\"Properties\": {\"instance_type\": \"m5.large\"}}]`".into());
            Vec::new()
        }
    };
    let capacity_errors = match get_ci(p, "CapacityErrors") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut errors = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let at = format!("{AT}/CapacityErrors/{i}");
                match item.as_str() {
                    Some(p) => match RegexBuilder::new(p).case_insensitive(true).build() {
                        Ok(_) => errors.push(p.to_string()),
                        Err(e) => problem(&at, format!("not a regular expression: {e}")),
                    },
                    None => problem(&at, "a capacity error is a text (a regular expression)".into()),
                }
            }
            errors
        }
        Some(_) => {
            problem(&format!("{AT}/CapacityErrors"), "`CapacityErrors` must be a list of texts".into());
            Vec::new()
        }
    };
    let backoff = duration_key(p, AT, "Backoff", true, "`5m`", problem).unwrap_or(BACKOFF);
    let max_backoff = duration_key(p, AT, "MaxBackoff", true, "`30m`", problem).unwrap_or(MAX_BACKOFF.max(backoff));
    if max_backoff < backoff {
        problem(&format!("{AT}/MaxBackoff"), "`MaxBackoff` must not be shorter than `Backoff`".into());
    }
    let rebalance = match get_ci(p, "Rebalance") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            problem(&format!("{AT}/Rebalance"), "`Rebalance` must be true or false".into());
            false
        }
    };
    Some(Placement { zones, fallback, capacity_errors, backoff, max_backoff, rebalance })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_member_goes_to_the_emptiest_zone_that_has_room() {
        let counts = |c: &[usize]| c.iter().copied().enumerate().collect::<BTreeMap<_, _>>();
        let all = |_: usize, _: Option<usize>| true;
        // (what, counts per zone, the choice)
        assert_eq!(choose(3, 1, &counts(&[0, 0, 0]), all), Some((0, None)), "ties: the zone listed first");
        assert_eq!(choose(3, 1, &counts(&[2, 1, 1]), all), Some((1, None)));
        assert_eq!(choose(3, 1, &counts(&[2, 2, 1]), all), Some((2, None)));
        // Zone 0 has no capacity for the spec's own size: its first fallback there, as it is
        // the emptiest.
        let no_primary_in_0 = |z: usize, f: Option<usize>| !(z == 0 && f.is_none());
        assert_eq!(choose(3, 1, &counts(&[0, 1, 1]), no_primary_in_0), Some((0, Some(0))));
        // Zone 0 full for everything: the others.
        let zone_0_full = |z: usize, _: Option<usize>| z != 0;
        assert_eq!(choose(3, 1, &counts(&[0, 2, 1]), zone_0_full), Some((2, None)));
        assert_eq!(choose(2, 0, &counts(&[0, 0]), |_, _| false), None, "nowhere");
        assert_eq!(choose(1, 2, &BTreeMap::new(), |_, f| f == Some(1)), Some((0, Some(1))), "the second fallback");
    }

    #[test]
    fn a_dedicated_file_is_in_the_zone_that_writes_exactly_what_it_has() {
        let zone = |name: &str, props: Value| Zone { name: name.into(), properties: props.as_object().unwrap().clone() };
        let placement = |zones: Vec<Zone>| Placement {
            zones,
            fallback: Vec::new(),
            capacity_errors: Vec::new(),
            backoff: BACKOFF,
            max_backoff: MAX_BACKOFF,
            rebalance: true,
        };
        let abc = placement(vec![
            zone("a", serde_json::json!({"zone": "za"})),
            zone("b", serde_json::json!({"zone": "zb"})),
            zone("b2", serde_json::json!({"zone": "zb", "rack": "2"})),
        ]);
        let with_default =
            placement(vec![zone("default", serde_json::json!({})), zone("b", serde_json::json!({"zone": "zb"}))]);
        let alike = placement(vec![zone("x", serde_json::json!({"zone": "z"})), zone("y", serde_json::json!({"zone": "z"}))]);
        let own = serde_json::json!({"size": 5}).as_object().unwrap().clone();
        let own_zone = serde_json::json!({"size": 5, "zone": "zq"}).as_object().unwrap().clone();
        let file = |props: Value| serde_json::json!({"resource": {"fakecloud_volume": {"web_dedicated_1-data": props}}});
        // (the file's volume, the zones, the spec's volume, where the file is)
        let cases = [
            (serde_json::json!({"size": 5, "zone": "za"}), &abc, &own, SlotZone::In(vec![0])),
            (serde_json::json!({"zone": "zb"}), &abc, &own, SlotZone::In(vec![1])),
            (serde_json::json!({"zone": "zb", "rack": "2"}), &abc, &own, SlotZone::In(vec![2])),
            (serde_json::json!({"zone": "zb", "rack": "3"}), &abc, &own, SlotZone::Unlisted),
            (serde_json::json!({"zone": "zz"}), &abc, &own, SlotZone::Unlisted),
            (serde_json::json!({"size": 5}), &abc, &own, SlotZone::Unzoned),
            (serde_json::json!({"zone": "zq"}), &abc, &own_zone, SlotZone::Unzoned),
            (serde_json::json!({"size": 5}), &with_default, &own, SlotZone::In(vec![0])),
            (serde_json::json!({"zone": "zb"}), &with_default, &own, SlotZone::In(vec![1])),
            (serde_json::json!({"zone": "za"}), &with_default, &own, SlotZone::Unlisted),
            (serde_json::json!({"zone": "z"}), &alike, &own, SlotZone::In(vec![0, 1])),
        ];
        for (volume, zones, spec, want) in cases {
            let dedicated = [("fakecloud_volume", spec)];
            assert_eq!(slot_zone(&file(volume.clone()), zones, &dedicated), want, "{volume}");
        }
    }

    #[test]
    fn a_member_leaves_the_fullest_zone_with_room_until_they_differ_by_one_at_most() {
        let all = [true, true, true];
        assert_eq!(overfull(&[2, 2, 2], &all), None);
        assert_eq!(overfull(&[3, 2, 2], &all), None, "one apart is balanced");
        assert_eq!(overfull(&[0, 3, 3], &all), Some(1), "the first of the fullest");
        assert_eq!(overfull(&[1, 2, 3], &all), Some(2));
        assert_eq!(overfull(&[0, 3, 3], &[false, true, true]), None, "a zone without room is not filled");
        assert_eq!(overfull(&[5, 1, 1], &[false, true, true]), None, "nor emptied");
        assert_eq!(overfull(&[], &[]), None);
    }

    #[test]
    fn a_zone_without_capacity_waits_longer_each_time_up_to_the_most() {
        let (base, max) = (Duration::from_secs(300), Duration::from_secs(1800));
        let waits: Vec<u64> = (1..=5).map(|n| backoff(n, base, max).as_secs()).collect();
        assert_eq!(waits, [300, 600, 1200, 1800, 1800]);
        assert_eq!(backoff(u32::MAX, base, max), max);
    }

    #[test]
    fn the_clouds_capacity_errors_are_known_and_yours_added() {
        for e in [
            "Error: creating EC2 Instance: InsufficientInstanceCapacity: We currently do not have sufficient m5.large capacity",
            "Error: googleapi: Error 503: The zone 'projects/p/zones/us-east1-b' does not have enough resources available to fulfill the request., ZONE_RESOURCE_POOL_EXHAUSTED",
            "compute.VirtualMachinesClient#CreateOrUpdate: Code=\"SkuNotAvailable\"",
            "Code=\"AllocationFailed\" Message=\"Allocation failed.\"",
        ] {
            assert!(is_capacity_error(e, &[]), "{e}");
        }
        assert!(!is_capacity_error("InvalidAMIID.NotFound", &[]));
        assert!(is_capacity_error("fakecloud: no capacity in zone a", &["no capacity in zone".into()]));
    }

    #[test]
    fn placements_are_checked() {
        let parse = |text: &str| {
            let mut problems = Vec::new();
            let p = placement(Some(&serde_json::from_str(text).unwrap()), &mut |at: &str, m: String| {
                problems.push(format!("{at}: {m}"))
            });
            (p, problems)
        };
        let (p, problems) = parse(
            r#"{"Zones": [{"Name": "a", "Properties": {"zone": "a"}}, {"Name": "b"}],
                "Fallback": [{"Properties": {"size": "small"}}], "Backoff": "1m"}"#,
        );
        assert!(problems.is_empty(), "{problems:?}");
        let p = p.unwrap();
        assert_eq!((p.zones.len(), p.fallback.len(), p.backoff, p.max_backoff), (2, 1, Duration::from_secs(60), MAX_BACKOFF));
        for (text, says) in [
            (r#"{"Zones": []}"#, "at least one zone"),
            (r#"{"Zones": [{"Name": "a"}, {"Name": "a"}]}"#, "listed twice"),
            (r#"{"Zones": [{"Name": "../x"}]}"#, "zone name"),
            (r#"{"Zones": [{"Name": "a"}], "Backoff": "10m", "MaxBackoff": "5m"}"#, "not be shorter"),
            (r#"{"Zones": [{"Name": "a"}], "CapacityErrors": ["("]}"#, "not a regular expression"),
            (r#"{"Zones": [{"Name": "a"}], "Rebalance": "yes"}"#, "true or false"),
        ] {
            let (_, problems) = parse(text);
            assert!(problems.iter().any(|p| p.contains(says)), "{text}: {problems:?}");
        }
    }
}
