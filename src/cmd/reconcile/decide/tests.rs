//! The decisions of a converging run, case by case: which members a run destroys, creates,
//! keeps and replaces, and in what order. Values in, values out: no directory, no terraform.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::group::{CONFIG_TAG, GROUP_TAG};
use crate::names::Suffix;
use crate::profile::Profiles;
use crate::tfconfig::LOGICAL_ID_TAG;
use crate::tfoutput::ResourceChange;

/// A group `web` of `allocation`; `dedicated`: its members have a dedicated volume; `props`:
/// more of the group's `Properties` (`"Updating": ...`, `"Healing": ...`).
fn group(allocation: &str, dedicated: bool, props: &str) -> Group {
    let volume = if dedicated { r#", "aws_ebs_volume": {"data": {"@scope": "@dedicated", "size": 5}}"# } else { "" };
    let text = format!(
        r#"{{"ID": "web", "Properties": {{"Allocation": {allocation}, {props}
            "Instance": {{"Properties": {{"resource": {{"aws_instance": {{"vm": {{"ami": "ami-1"}}}}{volume}}}}}}}}}}}"#
    );
    let (members, spec) = crate::cmd::parse_spec(&text, &Profiles::builtin()).unwrap_or_else(|p| panic!("{p:?}"));
    let spec = spec.expect("a group spec");
    let heal = crate::group::Heal::resolve(spec.healing.as_ref(), &crate::group::Healing::default());
    Group { asked: spec.config_hash.clone(), spec, members, drain: None, heal }
}

/// How a member is found.
#[derive(Clone, Copy, PartialEq)]
enum Is {
    Current,
    Outdated,
}

/// Member `n` of `g` (its VM `aws_instance.vm_n`), a pet when `lid` is given.
fn member(g: &Group, n: u64, is: Is, lid: Option<&str>) -> Instance {
    let hash = if is == Is::Current { g.spec.config_hash.clone() } else { "bootstrap".into() };
    let mut tags = BTreeMap::from([(GROUP_TAG.to_string(), "web".to_string()), (CONFIG_TAG.to_string(), hash)]);
    if let Some(lid) = lid {
        tags.insert(LOGICAL_ID_TAG.to_string(), lid.to_string());
    }
    let vm = format!("vm_{n}");
    Instance {
        id: InstanceId::new(n),
        file: format!("instance-{n}.tf.json"),
        suffix: Suffix::Live,
        doc: Ok(json!({"resource": {"aws_instance": {vm.clone(): {}}, "aws_eip": {format!("ip_{n}"): {}}}})),
        vm: Some(("aws_instance".into(), vm)),
        tags,
        attachments: BTreeSet::new(),
    }
}

/// A plan that found the VMs of `vanished` deleted, and creates those of `creating`.
fn plan(vanished: &[u64], creating: &[u64]) -> Plan {
    let change = |action: Action| {
        move |n: &u64| ResourceChange { address: format!("aws_instance.vm_{n}"), action: action.clone() }
    };
    Plan {
        drift: vanished.iter().map(change(Action::Delete)).collect(),
        changes: creating.iter().map(change(Action::Create)).collect(),
        ..Plan::default()
    }
}

fn numbers(ids: &[InstanceId]) -> Vec<u64> {
    ids.iter().map(InstanceId::number).collect()
}

/// Decides one group: (doomed, decision).
fn decide_one(g: &Group, instances: &[Instance], plan: &Plan, record: &HealthRecord) -> (Vec<u64>, Decision) {
    let found = Found { instances, plan, record, unsettled: &BTreeSet::new() };
    let Decided { doomed, mut decisions, .. } = decide(std::slice::from_ref(g), &found);
    (doomed.iter().map(|(i, _)| i.id.number()).collect(), decisions.remove(0).1)
}

/// Members kept: neither pruned nor terminated.
fn kept(instances: &[Instance], doomed: &[u64], d: &Decision) -> Vec<u64> {
    let gone: Vec<u64> = doomed.iter().copied().chain(numbers(&d.terminate)).collect();
    instances.iter().map(|i| i.id.number()).filter(|n| !gone.contains(n)).collect()
}

#[test]
fn scaling_adds_the_missing_and_gives_up_outdated_then_uncreated_then_the_lowest() {
    use Is::{Current as C, Outdated as O};
    struct Case {
        what: &'static str,
        size: u64,
        members: &'static [(u64, Is)],
        /// The members whose VM the plan creates (not created yet).
        creating: &'static [u64],
        /// Terminated, in this order.
        terminated: &'static [u64],
        kept: &'static [u64],
        added: usize,
    }
    let case = |what, size, members, creating, terminated, kept, added| Case {
        what,
        size,
        members,
        creating,
        terminated,
        kept,
        added,
    };
    let cases = [
        case("scale up from one", 3, &[(1, C)], &[], &[], &[1], 2),
        case("scale up from none", 2, &[], &[], &[], &[], 2),
        case("at size: nothing", 2, &[(1, C), (2, C)], &[], &[], &[1, 2], 0),
        case("scale in: the lowest IDs go first", 2, &[(3, C), (1, C), (2, C), (4, C)], &[], &[1, 2], &[3, 4], 0),
        case("scale in: the outdated first", 2, &[(1, C), (2, O), (3, C)], &[], &[2], &[1, 3], 0),
        case("scale in: the uncreated before the lowest", 2, &[(1, C), (2, C), (3, C)], &[3], &[3], &[1, 2], 0),
        case(
            "scale in: outdated, uncreated, lowest",
            2,
            &[(1, C), (2, O), (3, C), (4, C), (5, C)],
            &[4],
            &[2, 4, 1],
            &[3, 5],
            0,
        ),
    ];
    for Case { what, size, members, creating, terminated, kept: staying, added } in cases {
        let g = group(&format!(r#"{{"Size": {size}}}"#), false, "");
        let instances: Vec<Instance> = members.iter().map(|(n, is)| member(&g, *n, *is, None)).collect();
        let (doomed, d) = decide_one(&g, &instances, &plan(&[], creating), &HealthRecord::default());
        assert!(doomed.is_empty(), "{what}");
        assert_eq!(numbers(&d.terminate), terminated, "{what}: terminated");
        assert_eq!(kept(&instances, &doomed, &d), staying, "{what}: kept");
        assert_eq!(d.add, vec![None; added], "{what}: added");
    }
}

#[test]
fn scale_in_gives_up_an_unhealthy_member_after_the_outdated_before_the_uncreated() {
    let g = group(r#"{"Size": 2}"#, false, r#""Healing": {"Command": "true", "FailuresBeforeRepair": 2},"#);
    let instances: Vec<Instance> =
        [(1, Is::Current), (2, Is::Current), (3, Is::Outdated), (4, Is::Current), (5, Is::Current)]
            .iter()
            .map(|(n, is)| member(&g, *n, *is, None))
            .collect();
    let mut record = HealthRecord::default();
    for (id, failures) in [("instance-4", 2), ("instance-2", 1)] {
        record.seen(id, 0);
        (0..failures).for_each(|_| record.note(id, false));
    }
    let (_, d) = decide_one(&g, &instances, &plan(&[], &[5]), &record);
    // 4 failed twice (unhealthy); 2 once (failing, not unhealthy yet): it counts as healthy.
    assert_eq!(numbers(&d.terminate), [3, 4, 5], "outdated, unhealthy, not created");
    assert_eq!(kept(&instances, &[], &d), [1, 2]);
}

#[test]
fn pets_have_one_member_per_logical_id() {
    let g = group(r#"{"LogicalIDs": ["a", "b", "c", "d"]}"#, false, "");
    let instances = [
        member(&g, 1, Is::Current, Some("a")),
        member(&g, 2, Is::Current, Some("a")),    // a twin: the lowest ID stays
        member(&g, 3, Is::Current, Some("gone")), // its logical ID left the list
        member(&g, 4, Is::Outdated, Some("b")),   // stays, replaced in its slot
        member(&g, 5, Is::Current, None),         // no logical ID: not a pet of this group
        member(&g, 6, Is::Outdated, Some("d")),
        member(&g, 7, Is::Current, Some("d")), // of twins, the current one stays
    ];
    let (_, d) = decide_one(&g, &instances, &plan(&[], &[]), &HealthRecord::default());
    assert_eq!(d.add, [Some("c".to_string())]);
    assert_eq!(BTreeSet::from_iter(numbers(&d.terminate)), BTreeSet::from([2, 3, 5, 6]));
    assert_eq!(kept(&instances, &[], &d), [1, 4, 7]);
    assert_eq!(numbers(&d.replace), [4]);
}

#[test]
fn a_vanished_member_is_pruned_and_made_again_but_never_a_queued_one() {
    let g = group(r#"{"Size": 3}"#, false, "");
    let mut queued = member(&g, 3, Is::Current, None);
    queued.suffix = Suffix::Queued;
    let instances = [member(&g, 1, Is::Current, None), member(&g, 2, Is::Current, None), queued];
    let (doomed, d) = decide_one(&g, &instances, &plan(&[2, 3], &[3]), &HealthRecord::default());
    assert_eq!(doomed, [2], "a queued member's VM was never made: not pruned");
    assert_eq!(d.add, [None], "the pruned member is made again");
    assert!(d.terminate.is_empty() && d.replace.is_empty());
}

#[test]
fn outdated_members_are_replaced_max_unavailable_at_a_time_in_the_groups_order() {
    let ids: Vec<InstanceId> = (1..=5).map(InstanceId::new).collect();
    let batches = |r: &Rollout<'_>| r.batches.iter().map(|b| numbers(b)).collect::<Vec<_>>();
    let updating = r#""Updating": {"MaxUnavailable": 2},"#;
    struct Case {
        what: &'static str,
        allocation: &'static str,
        /// Whether its members have a dedicated volume.
        dedicated: bool,
        /// More of the group's `Properties`.
        props: &'static str,
        /// `--max-unavailable`.
        flag: Option<u64>,
        order: Order,
        batches: &'static [&'static [u64]],
    }
    let case = |what, allocation, dedicated, props, flag, order, batches| Case {
        what,
        allocation,
        dedicated,
        props,
        flag,
        order,
        batches,
    };
    let (size, pets) = (r#"{"Size": 5}"#, r#"{"LogicalIDs": ["a"]}"#);
    let cases = [
        case("cattle surge, one at a time", size, false, "", None, Order::Surge, &[&[1], &[2], &[3], &[4], &[5]]),
        case("the spec's MaxUnavailable", size, false, updating, None, Order::Surge, &[&[1, 2], &[3, 4], &[5]]),
        case("the flag over the spec", size, false, updating, Some(3), Order::Surge, &[&[1, 2, 3], &[4, 5]]),
        case(
            "a dedicated slot: destroy first",
            size,
            true,
            updating,
            None,
            Order::DestroyFirst,
            &[&[1, 2], &[3, 4], &[5]],
        ),
        case("pets: destroy first", pets, false, "", Some(5), Order::DestroyFirst, &[&[1, 2, 3, 4, 5]]),
    ];
    for Case { what, allocation, dedicated, props, flag, order, batches: expected } in cases {
        let g = group(allocation, dedicated, props);
        let road = rollout(&g, &ids, flag);
        assert_eq!(road.order, order, "{what}");
        assert_eq!(batches(&road), expected.iter().map(|b| b.to_vec()).collect::<Vec<_>>(), "{what}");
    }
}

#[test]
fn unhealthy_members_are_repaired_after_the_outdated_unless_the_breaker_halts() {
    struct Case {
        what: &'static str,
        /// `MaxUnhealthy`, as the spec writes it.
        max_unhealthy: &'static str,
        max_repairs: u64,
        unhealthy: &'static [u64],
        /// Replaced by the rolling update, in this order.
        replaced: &'static [u64],
        halted: bool,
    }
    let case = |what, max_unhealthy, max_repairs, unhealthy, replaced, halted| Case {
        what,
        max_unhealthy,
        max_repairs,
        unhealthy,
        replaced,
        halted,
    };
    let cases = [
        case("none unhealthy", "1", 5, &[], &[2], false),
        case("one of one allowed", "1", 5, &[3], &[2, 3], false),
        case("an outdated one is replaced once", "1", 5, &[2], &[2], false),
        case("two, more than one allowed: none", "1", 5, &[3, 4], &[2], true),
        case("two of 50% of 4", r#""50%""#, 5, &[3, 4], &[2, 3, 4], false),
        case("MaxRepairsPerRun", r#""50%""#, 1, &[3, 4], &[2, 3], false),
    ];
    for Case { what, max_unhealthy, max_repairs, unhealthy, replaced, halted } in cases {
        let healing = format!(
            r#""Healing": {{"Command": "true", "FailuresBeforeRepair": 1, "MaxUnhealthy": {max_unhealthy}, "MaxRepairsPerRun": {max_repairs}}},"#
        );
        let g = group(r#"{"Size": 4}"#, false, &healing);
        let is = |n| if n == 2 { Is::Outdated } else { Is::Current };
        let instances: Vec<Instance> = (1..=4).map(|n| member(&g, n, is(n), None)).collect();
        let mut record = HealthRecord::default();
        for n in unhealthy {
            let id = InstanceId::new(*n).to_string();
            record.seen(&id, 0);
            record.note(&id, false);
        }
        let groups = [g];
        let found =
            Found { instances: &instances, plan: &plan(&[], &[]), record: &record, unsettled: &BTreeSet::new() };
        let mut decisions = decide(&groups, &found).decisions;
        let verdicts: Vec<(usize, Verdict)> = healed(&groups, &instances, &decisions, &BTreeSet::new())
            .iter()
            .map(|(i, h)| (*i, crate::cmd::heal::verdict(&record, h)))
            .collect();
        let [(0, verdict)] = verdicts.as_slice() else { panic!("{what}: one healed group") };
        repair(&mut decisions[0].1, verdict);
        assert_eq!(numbers(&decisions[0].1.replace), replaced, "{what}");
        assert_eq!(verdict.halted.is_some(), halted, "{what}: {:?}", verdict.halted);
        assert!(decisions[0].1.terminate.is_empty(), "{what}");
        // A member held (waiting for its zone) is never repaired, nor takes another's turn.
        if what == "MaxRepairsPerRun" {
            let held = BTreeSet::from([InstanceId::new(3)]);
            let healed = healed(&groups, &instances, &decide(&groups, &found).decisions, &held);
            let verdict = crate::cmd::heal::verdict(&record, &healed[0].1);
            assert_eq!(numbers(&verdict.repair), [4], "{what}, 3 held");
        }
    }
}

#[test]
fn max_destroy_refuses_a_run_that_destroys_more() {
    let g = group(r#"{"Size": 2}"#, false, "");
    let instances =
        [member(&g, 1, Is::Current, None), member(&g, 2, Is::Current, None), member(&g, 3, Is::Current, None)];
    // Each member's file declares two resources: pruning 1 and 2 destroys 4.
    let found = plan(&[1, 2], &[]);
    let groups = [g];
    let decided = decide(
        &groups,
        &Found { instances: &instances, plan: &found, record: &HealthRecord::default(), unsettled: &BTreeSet::new() },
    );
    assert_eq!(decided.doomed.len(), 2);
    let check = |max, planned| check_max_destroy(&groups, max, &found, &decided.doomed, planned, &decided.decisions);
    // (what, --max-destroy, planned destroys, refused)
    let cases: &[(&str, Option<u64>, Option<u64>, bool)] = &[
        ("4 within the default 10", None, None, false),
        ("4, more than 3", Some(3), None, true),
        ("4, no more than 4", Some(4), None, false),
        ("a plan of 11 over the default", None, Some(11), true),
        ("a plan of 11 allowed", Some(11), Some(11), false),
    ];
    for (what, max, planned, refused) in cases {
        match check(*max, *planned) {
            Ok(()) => assert!(!refused, "{what}: allowed"),
            Err(e) => {
                assert!(refused, "{what}: {e:#}");
                assert_eq!(crate::exit::code_for(&e), Code::TooManyDestroys, "{what}");
                let text = format!("{e:#}");
                assert!(text.contains("instance-1, instance-2"), "{what}: names the vanished: {text}");
            }
        }
    }
}

#[test]
fn emptying_a_group_needs_max_destroy() {
    let g = group(r#"{"Size": 0}"#, false, "");
    let instances = [member(&g, 1, Is::Current, None)];
    let found = plan(&[], &[]);
    let groups = [g];
    let decided = decide(
        &groups,
        &Found { instances: &instances, plan: &found, record: &HealthRecord::default(), unsettled: &BTreeSet::new() },
    );
    assert_eq!(numbers(&decided.decisions[0].1.terminate), [1]);
    let check = |max| check_max_destroy(&groups, max, &found, &decided.doomed, Some(2), &decided.decisions);
    let refused = check(None).expect_err("no --max-destroy");
    assert!(format!("{refused:#}").contains("refusing to empty group `web` (1 member(s))"), "{refused:#}");
    assert!(check(Some(2)).is_ok(), "--max-destroy given");
}

#[test]
fn the_next_apply() {
    let cfg = |refresh| Next::Configuration { refresh };
    let a = Applying::default();
    // (what, found, next apply)
    let cases: &[(&str, Applying, Next)] = &[
        ("a refresh that found nothing", a, Next::Nothing),
        ("a refresh with changes: its plan", Applying { changes: true, ..a }, Next::Saved),
        ("a refresh that found drift: its plan saves it", Applying { drift: true, ..a }, Next::Saved),
        ("pruned after a refresh: afresh, refreshing", Applying { pruned: true, ..a }, cfg(true)),
        ("scaled, no drift: no second refresh", Applying { scaling: true, changes: true, ..a }, cfg(false)),
        ("scaled with drift: refreshing", Applying { scaling: true, drift: true, ..a }, cfg(true)),
        ("unconfirmed machines: never refreshing", Applying { unconfirmed: true, pruned: true, ..a }, cfg(false)),
        ("unconfirmed, nothing to do", Applying { unconfirmed: true, ..a }, Next::Nothing),
        ("a look, nothing to do", Applying { looked: true, whole: true, ..a }, Next::Nothing),
        ("a look, changes: the whole plan", Applying { looked: true, whole: true, changes: true, ..a }, Next::Saved),
        ("a look, changes, no whole plan", Applying { looked: true, changes: true, ..a }, cfg(false)),
        (
            "a look that found drift",
            Applying { looked: true, whole: true, drift: true, changes: true, ..a },
            cfg(false),
        ),
        ("a look, scaled", Applying { looked: true, whole: true, scaling: true, ..a }, cfg(false)),
        (
            "a look, pruned, only ours",
            Applying { looked: true, pruned: true, changes: true, narrow: true, ..a },
            Next::Change,
        ),
        ("a look, scaled, only ours", Applying { looked: true, scaling: true, narrow: true, ..a }, Next::Change),
    ];
    for (what, applying, next) in cases {
        assert_eq!(applying.next(), *next, "{what}");
        assert_eq!(applying.careful(), applying.looked || applying.unconfirmed, "{what}");
    }
}

#[test]
fn a_run_applies_only_what_it_writes_when_nothing_else_changed() {
    let groups = [group(r#"{"Size": 3}"#, false, "")];
    let g = &groups[0];
    let record = HealthRecord::default();
    struct Case {
        what: &'static str,
        /// Nothing changed since a whole plan found nothing to do.
        unchanged: bool,
        /// The destroys a plan of replacements or terminations counted.
        planned: Option<u64>,
        vanished: &'static [u64],
        creating: &'static [u64],
        /// Member 1's machine changed outside terraform.
        drifted: bool,
        /// Member 1's address gone (its machine, not pruned: kept unconfirmed, say).
        neighbour_gone: bool,
        /// The group is one member too big.
        shrinking: bool,
        /// The members are on an older spec (to be replaced).
        outdated: bool,
        ours: bool,
    }
    let a = Case {
        what: "",
        unchanged: true,
        planned: None,
        vanished: &[],
        creating: &[],
        drifted: false,
        neighbour_gone: false,
        shrinking: false,
        outdated: false,
        ours: true,
    };
    let cases = [
        Case { what: "scale up, nothing found", ..a },
        Case { what: "a member's machine gone: pruned, its making again dropped", vanished: &[2], creating: &[2], ..a },
        Case { what: "a whole plan was due (a file or the state changed)", unchanged: false, ours: false, ..a },
        Case { what: "members replaced: their destroys were planned", planned: Some(2), ours: false, ..a },
        Case { what: "a machine drifted (not gone)", drifted: true, ours: false, ..a },
        Case { what: "a resource gone that is not pruned", neighbour_gone: true, ours: false, ..a },
        Case { what: "a member terminated", shrinking: true, ours: false, ..a },
        Case { what: "a machine not pruned is to be made", creating: &[1], ours: false, ..a },
        Case { what: "outdated members to replace", outdated: true, ours: false, ..a },
    ];
    for c in cases {
        let mut plan = plan(c.vanished, c.creating);
        if c.drifted {
            plan.drift.push(ResourceChange { address: "aws_instance.vm_1".into(), action: Action::Update });
        }
        if c.neighbour_gone {
            plan.drift.push(ResourceChange { address: "aws_eip.ip_1".into(), action: Action::Delete });
        }
        let is = if c.outdated { Is::Outdated } else { Is::Current };
        let mut instances = vec![member(g, 1, is, None), member(g, 2, is, None)];
        if c.shrinking {
            instances.extend((3..=4).map(|n| member(g, n, is, None)));
        }
        let decided = decide(
            &groups,
            &Found { instances: &instances, plan: &plan, record: &record, unsettled: &BTreeSet::new() },
        );
        let ours = only_ours(c.unchanged, c.planned, &decided.decisions, &plan, &decided.doomed);
        assert_eq!(ours, c.ours, "{}", c.what);
    }
}

#[test]
fn a_plan_of_the_runs_own_change_may_only_make_what_it_wrote_and_destroy_what_it_removed() {
    let set = |a: &[&str]| a.iter().map(|s| (*s).to_string()).collect::<BTreeSet<String>>();
    let written = set(&["aws_instance.vm_3", "aws_ebs_volume.data_1"]);
    let removed = set(&["aws_instance.vm_2", "aws_eip.ip_2", "aws_ebs_volume.data_4"]);
    let written = written.union(&set(&["aws_ebs_volume.data_4"])).cloned().collect::<BTreeSet<String>>();
    let change = |address: &str, action: Action| ResourceChange { address: address.into(), action };
    // (what, the plan's change, beyond the run's change)
    let cases = [
        ("the new member made", change("aws_instance.vm_3", Action::Create), false),
        ("an instance of a new resource with count", change("aws_instance.vm_3[0]", Action::Create), false),
        ("the pruned file's sibling destroyed", change("aws_eip.ip_2", Action::Delete), false),
        ("a data source read", change("data.aws_ami.latest", Action::Read), false),
        (
            "a written volume replaced (re-attached, its snapshot newer)",
            change("aws_ebs_volume.data_1", Action::Replace),
            true,
        ),
        (
            "a file written in place of one removed: its resource made again (a new slot moved)",
            change("aws_ebs_volume.data_4", Action::Replace),
            false,
        ),
        ("a written resource updated", change("aws_ebs_volume.data_1", Action::Update), true),
        ("a written resource destroyed", change("aws_instance.vm_3", Action::Delete), true),
        ("a removed resource made again", change("aws_eip.ip_2", Action::Create), true),
        ("a resource of yours changed", change("aws_lb.front", Action::Update), true),
        ("a resource of yours made", change("aws_route53_record.web", Action::Create), true),
    ];
    for (what, c, beyond) in cases {
        let changes = [c];
        assert_eq!(!beyond_change(&changes, &written, &removed).is_empty(), beyond, "{what}");
    }
}

#[test]
fn a_rollout_replaces_up_to_its_next_checkpoint_and_only_repairs_while_paused() {
    use crate::rollout_record::{Allowance, GroupRollout, RolloutState};
    let groups = [group(r#"{"Size": 10}"#, false, "")];
    let g = &groups[0];
    let hash = g.spec.config_hash.clone();
    // Member 1 is on the new spec; 2 to 10 are not.
    let instances: Vec<Instance> =
        (1..=10).map(|n| member(g, n, if n == 1 { Is::Current } else { Is::Outdated }, None)).collect();
    let record = HealthRecord::default();
    let paused = GroupRollout {
        from: "bootstrap".into(),
        to: hash.clone(),
        state: RolloutState::Paused,
        reached: 2,
        paused_at_ms: Some(0),
        why: None,
    };
    let delay = 1_000;
    // (what, the record, now, a repair of member 1 too, members added, replaced this run)
    type Case<'a> = (&'a str, Option<&'a GroupRollout>, u64, bool, usize, &'a [u64]);
    let cases: &[Case] = &[
        ("to the first checkpoint (2 of 10): one more", None, 0, false, 0, &[2]),
        ("a member added on the new spec counts: none", None, 0, false, 1, &[]),
        ("paused: nothing for the rollout", Some(&paused), 500, false, 0, &[]),
        ("paused: a repair still goes", Some(&paused), 500, true, 0, &[1]),
        ("the pause over: up to the second (5 of 10)", Some(&paused), 1_000, false, 0, &[2, 3, 4, 5]),
        ("the pause over, two added: to 5 with them", Some(&paused), 1_000, false, 2, &[2, 3]),
    ];
    for (what, rollout, now, repair, added, replaced) in cases {
        let decided = decide(
            &groups,
            &Found { instances: &instances, plan: &plan(&[], &[]), record: &record, unsettled: &BTreeSet::new() },
        );
        let (members, mut decision) = decided.decisions.into_iter().next().unwrap();
        if *repair {
            decision.replace.insert(0, InstanceId::new(1));
        }
        decision.add.extend(std::iter::repeat_n(None, *added));
        let step = rollout_step((&members, &mut decision), &instances, (*rollout, &hash, &[2, 5]), (*now, delay))
            .expect("members are outdated");
        assert_eq!(numbers(&decision.replace), *replaced, "{what}");
        assert_eq!(step.from, "bootstrap", "{what}");
    }
    // Where it stands after the run.
    let go = Step { from: "bootstrap".into(), allowance: Allowance::Go { up_to: Some(2), reached: 0 } };
    let pause = Step { from: "bootstrap".into(), allowance: Allowance::Pause { since_ms: 3, reached: 2 } };
    let after = |step: &Step, current, left, stopped: Option<&str>| {
        rollout_after(step, &hash, (current, left, stopped.map(str::to_string)), 7)
    };
    let state = |r: GroupRollout| (r.state, r.reached, r.paused_at_ms);
    assert_eq!(state(after(&go, 2, true, None)), (RolloutState::Paused, 2, Some(7)), "the checkpoint reached");
    assert_eq!(state(after(&go, 1, true, None)), (RolloutState::Rolling, 0, None), "short of it");
    assert_eq!(state(after(&go, 1, true, Some("unhealthy"))), (RolloutState::Stopped, 0, None), "stopped");
    assert_eq!(after(&go, 1, true, Some("unhealthy")).why.as_deref(), Some("unhealthy"));
    assert_eq!(state(after(&go, 10, false, None)), (RolloutState::Done, 0, None), "all on the new spec");
    assert_eq!(state(after(&pause, 2, true, None)), (RolloutState::Paused, 2, Some(3)), "still paused");
    // A repair that fails during a pause stops the run, and the pause goes on.
    let stopped = after(&pause, 2, true, Some("unhealthy"));
    assert_eq!(state(stopped.clone()), (RolloutState::Stopped, 2, Some(3)));
    let next = crate::rollout_record::allowance(Some(&stopped), &hash, &[2, 5], (2, 8, delay));
    assert_eq!(next, Allowance::Pause { since_ms: 3, reached: 2 }, "the pause outlives the stop");
    // No member outdated: no rollout.
    let current: Vec<Instance> = (1..=10).map(|n| member(g, n, Is::Current, None)).collect();
    let decided = decide(
        &groups,
        &Found { instances: &current, plan: &plan(&[], &[]), record: &record, unsettled: &BTreeSet::new() },
    );
    let (members, mut decision) = decided.decisions.into_iter().next().unwrap();
    assert!(rollout_step((&members, &mut decision), &current, (None, &hash, &[2, 5]), (0, delay)).is_none());
}
