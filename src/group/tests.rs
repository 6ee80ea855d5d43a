//! The group spec, read as InfraKit read it.

use std::time::Duration;

use super::healing::{HEAL_TIMEOUT, MAX_UNHEALTHY};
use super::lifecycle::DRAIN_TIMEOUT;
use super::*;

fn parsed(text: &str) -> Result<GroupSpec, Vec<String>> {
    parse(&serde_json::from_str(text).unwrap()).map_err(|p| p.iter().map(ToString::to_string).collect())
}

#[test]
fn a_group_spec_becomes_its_members_instance_spec() {
    let g = parsed(
        r#"{"ID":"g","Properties":{"Allocation":{"Size":1},"Instance":{"Plugin":"p",
        "Properties":{"resource":{"aws_instance":{"vm":{"ami":"a"}}}}},"Flavor":{"Plugin":"f",
        "Properties":{"Init":["x", "y"], "Tags": {"role": "web"}}}}}"#,
    )
    .unwrap();
    assert_eq!(g.allocation, Allocation::Size(1));
    assert_eq!(
        g.instance_spec(None),
        serde_json::json!({"Properties": {"resource":{"aws_instance":{"vm":{"ami":"a"}}}}, "Init": "x\ny",
            "Tags": {"role": "web", "infrakit.group": "g", "infrakit.config.hash": g.config_hash, "infrakit.config_sha": g.config_hash}})
    );
    let pet = g.instance_spec(Some("db-1"));
    assert_eq!(pet["LogicalID"], "db-1");
    assert_eq!(pet["Tags"]["infrakit.logical_id"], "db-1");
}

#[test]
fn the_issue_vector_is_the_config_hash() {
    let g = parsed(
        r#"{"ID":"g","Properties":{"Allocation":{"Size":1},"Instance":{"Plugin":"p","Properties":{"resource":{"aws_instance":{"vm":{"ami":"a"}}}}},"Flavor":{"Plugin":"f","Properties":{"Init":["x"]}}}}"#,
    )
    .unwrap();
    assert_eq!(g.config_hash, "6uz6s7yo4cnw3r42wgqo2t3jmpkxzhkw");
    // Keys match case-insensitively, as Go's decoder does; the hash is of the documents.
    let lower = parsed(
        r#"{"id":"g","properties":{"allocation":{"size":1},"instance":{"plugin":"p","properties":{"resource":{"aws_instance":{"vm":{"ami":"a"}}}}},"flavor":{"plugin":"f","properties":{"Init":["x"]}}}}"#,
    )
    .unwrap();
    assert_eq!(lower.config_hash, g.config_hash);
}

#[test]
fn malformed_group_specs_list_every_problem() {
    let problems = parsed(
        r#"{"ID":"../x","Properties":{"Allocation":{"Size":-1,"LogicalIDs":["a"]},"Instance":{},
        "Flavor":{"Properties":{"Init":3}},"Updating":{"MaxUnavailable":0}}}"#,
    )
    .unwrap_err();
    assert_eq!(problems.len(), 5, "{problems:#?}");
    assert!(problems[0].contains("group ID `../x`"), "{problems:#?}");
    assert!(problems[1].contains("not both"), "{problems:#?}");
    assert!(problems[2].contains("Instance.Properties"), "{problems:#?}");
    assert!(problems[3].contains("`Init` must be"), "{problems:#?}");
    assert!(problems[4].contains("at least 1"), "{problems:#?}");
    let ids = parsed(
        r#"{"ID":"g","Properties":{"Allocation":{"LogicalIDs":["a", 1, "a"]},"Instance":{"Properties":{"resource":{}}}}}"#,
    )
    .unwrap_err();
    assert_eq!(ids.len(), 2, "{ids:#?}");
    assert!(ids[0].contains("must be a string") && ids[1].contains("listed twice"), "{ids:#?}");
    let size = parsed(r#"{"ID":"g","Properties":{"Allocation":{"Size":1.5},"Instance":{"Properties":{"resource":{}}}}}"#);
    assert!(size.unwrap_err()[0].contains("whole number"));
    let huge = parsed(r#"{"ID":"g","Properties":{"Allocation":{"Size":18446744073709551615},"Instance":{"Properties":{"resource":{}}}}}"#);
    assert!(huge.unwrap_err()[0].contains("at most 10000"));
    let reserved = parsed(
        r#"{"ID":"g","Properties":{"Allocation":{"Size":1},"Instance":{"Properties":{"resource":{}}},"Flavor":{"Properties":{"Tags":{"infrakit.logical_id":"x"}}}}}"#,
    );
    assert!(reserved.unwrap_err()[0].contains("infrakit-tf's own tag"));
    let neither = parsed(r#"{"ID":"g","Properties":{"Allocation":{},"Instance":{"Properties":{"resource":{}}}}}"#);
    assert!(neither.unwrap_err()[0].contains("`Size` (cattle) or `LogicalIDs` (pets)"));
}

#[test]
fn members_infrakit_made_are_current_and_bootstrap_is_not() {
    let tags = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert!(is_current(&tags(&[(CONFIG_TAG, "abc")]), "abc"), "InfraKit's tag alone");
    assert!(is_current(&tags(&[(CONFIG_TAG, "abc"), (CONFIG_SHA_TAG, "abc")]), "abc"));
    assert!(!is_current(&tags(&[(CONFIG_TAG, "bootstrap")]), "abc"));
    assert!(!is_current(&tags(&[]), "abc"));
}

#[test]
fn a_lifecycle_is_read_checked_and_overridden_by_the_flags() {
    let base = r#"{"ID":"g","Properties":{"Allocation":{"Size":1},"Instance":{"Properties":{"resource":{}}}}}"#;
    let plain = parsed(base).unwrap();
    assert_eq!(plain.lifecycle, None);
    // A group without a lifecycle has the fingerprint it had before lifecycles existed.
    assert_eq!(
        plain.fingerprint_input(),
        r#"{"Allocation":{"Size":1},"ID":"g","Instance":{"Properties":{"resource":{}},"Tags":{"infrakit.config.hash":"3cxos73jkapke6rprxhm56ynnoa2fu7g","infrakit.config_sha":"3cxos73jkapke6rprxhm56ynnoa2fu7g","infrakit.group":"g"}},"MaxUnavailable":null}"#
    );
    let with = |lifecycle: &str| {
        parsed(&base.replace(r#""Instance""#, &format!(r#""Lifecycle":{lifecycle},"Instance""#)))
    };
    // Go's duration grammar, as InfraKit's specs are read.
    let go = with(r#"{"Drain":"true","DrainTimeout":"2m30.5s"}"#).unwrap();
    assert_eq!(go.lifecycle.unwrap().drain_timeout, Some(Duration::from_millis(150_500)));
    let g = with(r#"{"Drain":"kubectl drain $INFRAKIT_TF_ID","DrainTimeout":"1m30s","OnDrainFailure":"Continue"}"#)
        .unwrap();
    let l = g.lifecycle.clone().unwrap();
    assert_eq!(l.drain.as_deref(), Some("kubectl drain $INFRAKIT_TF_ID"));
    assert_eq!(l.drain_timeout, Some(Duration::from_secs(90)));
    assert_eq!(l.on_drain_failure, Some(OnDrainFailure::Continue));
    assert_eq!(g.config_hash, plain.config_hash, "a lifecycle replaces no member");
    assert_ne!(g.fingerprint_input(), plain.fingerprint_input());

    let none = Lifecycle::default();
    let drain = Drain::resolve(Some(&l), &none).unwrap();
    assert_eq!((drain.timeout, drain.on_failure), (Duration::from_secs(90), OnDrainFailure::Continue));
    let flags = Lifecycle {
        drain: Some("true".into()),
        drain_timeout: None,
        on_drain_failure: Some(OnDrainFailure::Abandon),
    };
    let drain = Drain::resolve(Some(&l), &flags).unwrap();
    assert_eq!(
        (drain.command.as_str(), drain.timeout, drain.on_failure),
        ("true", Duration::from_secs(90), OnDrainFailure::Abandon)
    );
    let only_flags = Drain::resolve(None, &flags).unwrap();
    assert_eq!(only_flags.timeout, DRAIN_TIMEOUT);
    assert_eq!(Drain::resolve(None, &none), None);
    let no_command = with(r#"{"DrainTimeout":"1m"}"#).unwrap().lifecycle.unwrap();
    assert_eq!(Drain::resolve(Some(&no_command), &none), None, "no command, no drain");

    let bad = with(r#"{"Drain":"","DrainTimeout":"soon","OnDrainFailure":"ignore"}"#).unwrap_err();
    assert_eq!(bad.len(), 3, "{bad:#?}");
    assert!(bad[0].contains("`Drain` must be a shell command"), "{bad:#?}");
    assert!(bad[1].contains("not a duration"), "{bad:#?}");
    assert!(bad[2].contains("`abandon` (keep the member) or `continue`"), "{bad:#?}");
    assert!(with(r#""drain it""#).unwrap_err()[0].contains("`Lifecycle` must be an object"));
    assert!(with(r#"{"DrainTimeout":"0s"}"#).unwrap_err()[0].contains("longer than 0"));
}

#[test]
fn healing_is_read_checked_and_overridden_by_the_flags() {
    let base = r#"{"ID":"g","Properties":{"Allocation":{"Size":4},"Instance":{"Properties":{"resource":{}}}}}"#;
    let plain = parsed(base).unwrap();
    assert_eq!(plain.healing, None);
    let with = |healing: &str| parsed(&base.replace(r#""Instance""#, &format!(r#""Healing":{healing},"Instance""#)));
    let g = with(
        r#"{"Command":"curl -fsS $INFRAKIT_TF_ATTR_IP","Timeout":"5s","InitialDelay":"10m","FailuresBeforeRepair":2,
        "MaxUnhealthy":"40%","MaxRepairsPerRun":3}"#,
    )
    .unwrap();
    let h = g.healing.clone().unwrap();
    assert_eq!(h.command.as_deref(), Some("curl -fsS $INFRAKIT_TF_ATTR_IP"));
    assert_eq!((h.timeout, h.initial_delay), (Some(Duration::from_secs(5)), Some(Duration::from_secs(600))));
    assert_eq!((h.failures_before_repair, h.max_repairs_per_run), (Some(2), Some(3)));
    assert_eq!(h.max_unhealthy, Some(MaxUnhealthy::Percent(40)));
    assert_eq!(g.config_hash, plain.config_hash, "healing replaces no member");
    assert_ne!(g.fingerprint_input(), plain.fingerprint_input());
    assert!(g.fingerprint_input().contains(r#""Healing":{"Command":"curl"#), "{}", g.fingerprint_input());

    let none = Healing::default();
    let heal = Heal::resolve(Some(&h), &none).unwrap();
    assert_eq!((heal.failures_before_repair, heal.max_repairs_per_run), (2, 3));
    let flags = Healing {
        command: Some("true".into()),
        max_unhealthy: Some(MaxUnhealthy::Count(1)),
        ..Healing::default()
    };
    let heal = Heal::resolve(Some(&h), &flags).unwrap();
    assert_eq!((heal.command.as_str(), heal.max_unhealthy, heal.timeout), ("true", MaxUnhealthy::Count(1), Duration::from_secs(5)));
    let defaults = Heal::resolve(None, &flags).unwrap();
    assert_eq!(
        (defaults.timeout, defaults.initial_delay, defaults.failures_before_repair, defaults.max_repairs_per_run),
        (HEAL_TIMEOUT, Duration::ZERO, 3, 1)
    );
    assert_eq!(Heal::resolve(None, &none), None);
    let no_command = with(r#"{"FailuresBeforeRepair":5}"#).unwrap().healing.unwrap();
    assert_eq!(Heal::resolve(Some(&no_command), &none), None, "no command, no healing");
    assert_eq!(with(r#"{"MaxUnhealthy":2}"#).unwrap().healing.unwrap().max_unhealthy, Some(MaxUnhealthy::Count(2)));

    let bad = with(
        r#"{"Command":"","Timeout":"0s","InitialDelay":"soon","FailuresBeforeRepair":0,"MaxUnhealthy":"140%","MaxRepairsPerRun":-1}"#,
    )
    .unwrap_err();
    assert_eq!(bad.len(), 6, "{bad:#?}");
    assert!(bad[0].contains("`Command` must be a shell command"), "{bad:#?}");
    assert!(bad[1].contains("`Timeout` must be longer than 0"), "{bad:#?}");
    assert!(bad[2].contains("not a duration"), "{bad:#?}");
    assert!(bad[3].contains("`FailuresBeforeRepair` must be a whole number of at least 1"), "{bad:#?}");
    assert!(bad[4].contains("`MaxRepairsPerRun` must be"), "{bad:#?}");
    assert!(bad[5].contains("at most 100%"), "{bad:#?}");
    assert!(with(r#""heal""#).unwrap_err()[0].contains("`Healing` must be an object"));
    assert!(with(r#"{"MaxUnhealthy":"many"}"#).unwrap_err()[0].contains("not a count or a percentage"));
}

#[test]
fn the_breaker_counts_or_takes_a_percentage_rounded_down_but_at_least_one() {
    assert_eq!(parse_max_unhealthy("40%"), Ok(MaxUnhealthy::Percent(40)));
    assert_eq!(parse_max_unhealthy("3"), Ok(MaxUnhealthy::Count(3)));
    assert!(parse_max_unhealthy("-1").is_err());
    assert_eq!(MaxUnhealthy::Percent(40).allowed(5), 2);
    assert_eq!(MaxUnhealthy::Percent(40).allowed(4), 1, "1.6 rounds down: 2 of 4 is more than 40%");
    assert_eq!(MAX_UNHEALTHY.allowed(1), 1, "a lone member is repaired by default");
    assert_eq!(MAX_UNHEALTHY.allowed(3), 1, "2 of 3 is more than half");
    assert_eq!(MAX_UNHEALTHY.allowed(4), 2);
    assert_eq!(MaxUnhealthy::Percent(0).allowed(10), 0);
    assert_eq!(MaxUnhealthy::Count(2).allowed(100), 2);
    assert_eq!(MaxUnhealthy::Percent(40).text(), "40%");
}

#[test]
fn group_specs_are_told_from_instance_specs() {
    assert!(is_group_spec(&serde_json::json!({"ID": "g", "Properties": {"Instance": {}}})));
    assert!(is_group_spec(&serde_json::json!({"properties": {"allocation": {}}})));
    assert!(!is_group_spec(&serde_json::json!({"Properties": {"resource": {}}})));
    assert!(!is_group_spec(&serde_json::json!([])));
}

#[test]
fn a_group_on_its_last_good_members_keeps_all_else_and_their_hash() {
    let spec = |ami: &str, rollback: &str| {
        parsed(&format!(
            r#"{{"ID":"g","Properties":{{"Allocation":{{"Size":3}},"Updating":{{"MaxUnavailable":2{rollback}}},
            "Instance":{{"Plugin":"p","Properties":{{"resource":{{"aws_instance":{{"vm":{{"ami":"{ami}"}}}}}}}}}},
            "Flavor":{{"Plugin":"f","Properties":{{"Init":["x"],"Tags":{{"role":"web"}}}}}}}}}}"#
        ))
    };
    let old = spec("a", "").unwrap();
    let new = spec("b", r#","AutoRollback":true"#).unwrap();
    assert!(new.auto_rollback && !old.auto_rollback);
    assert_ne!(old.config_hash, new.config_hash);
    let back = new.with_members(&old.members_spec).unwrap();
    // The old members, with their hash and tags; the group's own keys as the new spec has them.
    assert_eq!((back.config_hash.as_str(), back.instance_spec(None)), (old.config_hash.as_str(), old.instance_spec(None)));
    assert_eq!((back.max_unavailable, back.auto_rollback, back.desired()), (Some(2), true, 3));
    // Without a flavor, as with one that has no properties.
    let bare: GroupSpec = parsed(
        r#"{"ID":"g","Properties":{"Allocation":{"Size":1},"Instance":{"Properties":{"resource":{"aws_instance":{"vm":{}}}}}}}"#,
    )
    .unwrap();
    assert_eq!(new.with_members(&bare.members_spec).unwrap().config_hash, bare.config_hash);
    assert_eq!(spec("a", r#","AutoRollback":1"#).unwrap_err(), vec!["/Properties/Updating/AutoRollback: `AutoRollback` must be true or false".to_string()]);
}
