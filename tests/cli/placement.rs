//! Placement (docs/groups-and-rollouts.md, "Placement"): members spread across zones, and a
//! zone without capacity answered in the same run. On the fakecloud provider (its `zone` and
//! `size` arguments, its `no-capacity` knob), with the real terraform.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::cloud::Cloud;

/// A group of `size` VMs over zones a, b and c (each sets the VM's `zone`), of size `large`
/// unless a fallback (`small`) is needed, with `placement` keys added.
fn spec(c: &Cloud, size: u64, placement: &str) -> String {
    let text = format!(
        r#"{{"ID": "web", "Properties": {{"Allocation": {{"Size": {size}}},
  "Placement": {{"Zones": [{{"Name": "a", "Properties": {{"zone": "za"}}}}, {{"Name": "b", "Properties": {{"zone": "zb"}}}},
                          {{"Name": "c", "Properties": {{"zone": "zc"}}}}],
                "Fallback": [{{"Properties": {{"size": "small"}}}}]{placement}}},
  "Instance": {{"Properties": {{"resource": {{"fakecloud_instance": {{"vm": {{"size": "large"}}}}}}}}}}}}}}"#
    );
    c.s.write_outside("web.json", &text)
}

fn reconcile(c: &Cloud, spec: &str) -> Value {
    c.run(&["reconcile", "--group", spec, "--output", "json"]).ok().json()
}

/// The machines in the cloud by (zone, size).
fn machines(c: &Cloud) -> BTreeMap<(String, String), usize> {
    let mut out = BTreeMap::new();
    for o in c.objects().values().filter(|o| o["type"] == "fakecloud_instance") {
        let key = (o["zone"].as_str().unwrap_or("").to_string(), o["size"].as_str().unwrap_or("").to_string());
        *out.entry(key).or_default() += 1;
    }
    out
}

fn count(pairs: &[(&str, &str, usize)]) -> BTreeMap<(String, String), usize> {
    pairs.iter().map(|(z, s, n)| ((z.to_string(), s.to_string()), *n)).collect()
}

#[test]
fn members_are_spread_across_the_zones_each_tagged_with_its_own() {
    let c = Cloud::new();
    let web = spec(&c, 6, "");
    let out = reconcile(&c, &web);
    let p = &out["groups"][0]["placement"];
    assert_eq!(p["zones"], serde_json::json!({"a": 2, "b": 2, "c": 2}), "{out}");
    assert_eq!(machines(&c), count(&[("za", "large", 2), ("zb", "large", 2), ("zc", "large", 2)]));
    let rows = c.run(&["describe", "--output", "json"]).ok().json();
    let zones: Vec<&str> =
        rows.as_array().unwrap().iter().filter_map(|r| r["Tags"]["infrakit.zone"].as_str()).collect();
    assert_eq!(zones.len(), 6, "{rows}");
    // Grown by one, then three: the emptiest zone first, the first listed among equals.
    reconcile(&c, &spec(&c, 7, ""));
    assert_eq!(machines(&c)[&("za".to_string(), "large".to_string())], 3);
    reconcile(&c, &spec(&c, 9, ""));
    assert_eq!(machines(&c), count(&[("za", "large", 3), ("zb", "large", 3), ("zc", "large", 3)]));
}

#[test]
fn a_zone_without_capacity_is_skipped_in_the_same_run_and_refilled_once_it_has_room() {
    let c = Cloud::new();
    std::fs::write(c.cloud.join("no-capacity"), "za\n").unwrap();
    let web = spec(&c, 6, r#", "Backoff": "30s", "MaxBackoff": "30s""#);
    // Skipped for 30 s from its failure in this run (not before it began).
    let failed_at = std::time::Instant::now();
    let metrics = c.s.root.path().join("metrics.prom");
    let run =
        c.run(&["reconcile", "--group", &web, "--output", "json", "--metrics-file", metrics.to_str().unwrap()]).ok();
    let prom = std::fs::read_to_string(&metrics).unwrap();
    for (family, zone, value) in
        [("zone_members", "b", 3), ("zone_members", "a", 0), ("zone_unavailable", "a", 1), ("zone_unavailable", "c", 0)]
    {
        let line = prom.lines().find(|l| {
            l.starts_with(&format!("infrakit_tf_group_{family}{{")) && l.contains(&format!("zone=\"{zone}\""))
        });
        assert!(line.is_some_and(|l| l.ends_with(&format!(" {value}"))), "{family} {zone}: {prom}");
    }
    assert!(run.stderr.contains("no capacity for"), "{}", run.stderr);
    let out = run.json();
    let p = &out["groups"][0]["placement"];
    assert_eq!(p["zones"], serde_json::json!({"a": 0, "b": 3, "c": 3}), "{out}");
    // Its fallback in the same zone was tried first, then the zones with room.
    let skipped: Vec<(&str, &Value)> =
        p["unavailable"].as_array().unwrap().iter().map(|u| (u["zone"].as_str().unwrap(), &u["fallback"])).collect();
    assert_eq!(skipped, [("a", &Value::Null), ("a", &Value::from(0))], "{p}");
    let moved: Vec<&str> = p["moved"].as_array().unwrap().iter().map(|m| m["to"].as_str().unwrap()).collect();
    assert_eq!(moved, ["a", "a", "b", "c"], "{p}");
    assert_eq!(out["groups"][0]["pending"], false, "{out}");
    assert_eq!(machines(&c), count(&[("zb", "large", 3), ("zc", "large", 3)]), "nothing made twice, none in a");
    assert!(c.machines_per_instance().values().all(|n| *n == 1));
    // Skipped while its backoff lasts: a new member goes to b or c.
    let grown = reconcile(&c, &spec(&c, 7, r#", "Backoff": "30s", "MaxBackoff": "30s""#));
    assert_eq!(grown["groups"][0]["placement"]["moved"], Value::Array(vec![]), "{grown}");
    assert_eq!(machines(&c)[&("zb".to_string(), "large".to_string())], 4);
    // Once it has room and its backoff has passed, new members go there, and clear it.
    std::fs::remove_file(c.cloud.join("no-capacity")).unwrap();
    std::thread::sleep(
        (failed_at + std::time::Duration::from_secs(31)).saturating_duration_since(std::time::Instant::now()),
    );
    let nine = spec(&c, 9, r#", "Backoff": "30s", "MaxBackoff": "30s""#);
    let refilled = reconcile(&c, &nine);
    let p = &refilled["groups"][0]["placement"];
    assert_eq!(p["zones"], serde_json::json!({"a": 2, "b": 4, "c": 3}), "{refilled}");
    assert_eq!(p["unavailable"], Value::Array(vec![]), "{p}");
    // Out of balance among the zones with room: --check says so, and the next run moves one
    // member of the fullest (its replacement made first, in a), then none.
    let check = c.run(&["reconcile", "--group", &nine, "--check"]).code(infrakit_tf::exit::Code::Pending);
    assert!(check.stderr.contains("to move to balance its zones"), "{}", check.stderr);
    let moved = reconcile(&c, &nine);
    let p = &moved["groups"][0]["placement"];
    assert_eq!(p["zones"], serde_json::json!({"a": 3, "b": 3, "c": 3}), "{moved}");
    assert_eq!((p["moved"][0]["from"].as_str(), p["moved"][0]["to"].as_str()), (Some("b"), Some("a")), "{p}");
    assert_eq!(moved["groups"][0]["replaced"].as_array().map(Vec::len), Some(1), "{moved}");
    assert_eq!(machines(&c).values().sum::<usize>(), 9, "the old one destroyed once its replacement was up");
    let rest = reconcile(&c, &nine);
    assert_eq!(rest["groups"][0]["replaced"], Value::Array(vec![]), "{rest}");
    c.run(&["reconcile", "--group", &nine, "--check"]).ok();
}

#[test]
fn without_rebalance_no_member_is_ever_moved() {
    let c = Cloud::new();
    std::fs::write(
        c.cloud.join("no-capacity"),
        "za
",
    )
    .unwrap();
    let still = r#", "Backoff": "1s", "MaxBackoff": "1s", "Rebalance": false"#;
    reconcile(&c, &spec(&c, 4, still));
    std::fs::remove_file(c.cloud.join("no-capacity")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let web = spec(&c, 4, still);
    c.run(&["reconcile", "--group", &web, "--check"]).ok();
    let out = reconcile(&c, &web);
    assert_eq!(out["groups"][0]["placement"]["zones"], serde_json::json!({"a": 0, "b": 2, "c": 2}), "{out}");
    assert_eq!(out["groups"][0]["replaced"], Value::Array(vec![]));
    // Grown, the new members fill a (the highest IDs); shrunk, the surplus leaves the fullest
    // zones, not the lowest IDs (all in b and c): balanced with no move.
    let grown = reconcile(&c, &spec(&c, 8, still));
    assert_eq!(grown["groups"][0]["placement"]["zones"], serde_json::json!({"a": 3, "b": 3, "c": 2}), "{grown}");
    let shrunk = reconcile(&c, &spec(&c, 6, still));
    assert_eq!(shrunk["groups"][0]["placement"]["zones"], serde_json::json!({"a": 2, "b": 2, "c": 2}), "{shrunk}");
}

#[test]
fn a_fallback_is_used_when_no_zone_has_the_spec_s_own_size() {
    let c = Cloud::new();
    std::fs::write(c.cloud.join("no-capacity"), "za large\nzb large\nzc large\n").unwrap();
    let web = spec(&c, 3, "");
    let out = reconcile(&c, &web);
    assert_eq!(out["groups"][0]["placement"]["zones"], serde_json::json!({"a": 1, "b": 1, "c": 1}), "{out}");
    assert_eq!(machines(&c), count(&[("za", "small", 1), ("zb", "small", 1), ("zc", "small", 1)]));
    // With no capacity anywhere at all, the run fails as the cloud says (exit 7), nothing made.
    std::fs::write(c.cloud.join("no-capacity"), "za\nzb\nzc\n").unwrap();
    let run = c.run(&["reconcile", "--group", &spec(&c, 4, "")]).code(infrakit_tf::exit::Code::TerraformFailed);
    assert!(run.stderr.contains("InsufficientInstanceCapacity"), "{}", run.stderr);
    assert_eq!(machines(&c).values().sum::<usize>(), 3);
}

#[test]
fn two_hosts_on_a_store_skip_the_same_zone() {
    let db = crate::support::store::Db::new();
    let (a, b) = crate::support::store::hosts_at(&db.url());
    std::fs::write(a.cloud.join("no-capacity"), "za\n").unwrap();
    let long = r#", "Backoff": "1h""#;
    let out = reconcile(&a, &spec(&a, 4, long));
    assert_eq!(out["groups"][0]["placement"]["zones"], serde_json::json!({"a": 0, "b": 2, "c": 2}), "{out}");
    // The other host knows zone a is skipped: its new member goes to b, not tried in a.
    std::fs::remove_file(a.cloud.join("no-capacity")).unwrap();
    let run = b.run(&["reconcile", "--group", &spec(&b, 5, long), "--accept-config", "--output", "json"]).ok();
    let p = &run.json()["groups"][0]["placement"];
    assert_eq!(p["zones"], serde_json::json!({"a": 0, "b": 3, "c": 2}), "{p}");
    assert_eq!(p["unavailable"][0]["zone"], "a", "{p}");
    assert!(!run.stderr.contains("no capacity"), "{}", run.stderr);
}

#[test]
fn a_move_killed_midway_is_finished_by_the_next_runs_with_nothing_made_twice() {
    let c = Cloud::new();
    std::fs::write(c.cloud.join("no-capacity"), "za\n").unwrap();
    let brief = r#", "Backoff": "1s", "MaxBackoff": "1s""#;
    reconcile(&c, &spec(&c, 6, brief));
    std::fs::remove_file(c.cloud.join("no-capacity")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // The move's replacement is being made in zone a when the whole process group is killed.
    let web = spec(&c, 6, brief);
    c.delay_creates(1500);
    c.kill_during(&["reconcile", "--group", web.as_str()], "creating fakecloud_instance");
    c.delay_creates(0);
    let mut zones = Value::Null;
    for _ in 0..4 {
        zones = reconcile(&c, &web)["groups"][0]["placement"]["zones"].clone();
    }
    assert_eq!(zones, serde_json::json!({"a": 2, "b": 2, "c": 2}));
    assert_eq!(machines(&c).values().sum::<usize>(), 6);
    assert!(c.machines_per_instance().values().all(|n| *n == 1), "{:?}", c.machines_per_instance());
}

#[test]
fn a_capacity_error_beside_a_lost_answer_makes_nothing_twice() {
    let c = Cloud::new();
    c.with_lookups();
    let mut config: Value = c.s.read("infrakit-tf.json");
    config["retries"] = serde_json::json!({"max": 0});
    c.s.write("infrakit-tf.json", &config.to_string());
    // One apply makes two members: zone a has no capacity for the first, and the second's
    // machine is made in b but the answer is lost.
    std::fs::write(c.cloud.join("no-capacity"), "za\n").unwrap();
    std::fs::write(c.cloud.join("lose-creates"), "1 reset\n").unwrap();
    let web = spec(&c, 2, "");
    let run = c.run(&["reconcile", "--group", &web]).code(infrakit_tf::exit::Code::TerraformFailed);
    assert!(run.stderr.contains("making instance-"), "the first was made again elsewhere: {}", run.stderr);
    // Only the first member's resources were applied again: the lost machine was not made a
    // second time, and the next run adopts it.
    assert_eq!(machines(&c).values().sum::<usize>(), 2, "{:?}", c.objects());
    let out = reconcile(&c, &web);
    assert_eq!(out["groups"][0]["placement"]["zones"], serde_json::json!({"a": 0, "b": 1, "c": 1}), "{out}");
    assert_eq!(machines(&c).values().sum::<usize>(), 2);
    let managed: std::collections::BTreeSet<String> =
        c.state().into_values().filter(|id| id.starts_with("i-")).collect();
    assert_eq!(managed.len(), 2, "every machine in the state once: {managed:?}");
}

/// Runs `reconcile --group spec` and SIGKILLs its whole process group while it makes a
/// member again after a capacity error (its create slowed down to be caught).
fn kill_while_made_again(c: &Cloud, spec: &str) {
    let mut run = c.start(&["reconcile", "--group", spec], &[]);
    assert!(run.wait_for("making instance-").is_some());
    c.delay_creates(1500);
    assert!(run.wait_for("creating fakecloud_instance").is_some());
    run.kill(true);
    run.finish();
    c.delay_creates(0);
}

#[test]
fn a_run_killed_while_it_makes_a_member_again_elsewhere_is_finished_by_the_next() {
    let c = Cloud::new();
    std::fs::write(c.cloud.join("no-capacity"), "za\n").unwrap();
    let web = spec(&c, 3, r#", "Backoff": "1h""#);
    // SIGKILL to the whole process group once the member refused in a is being made again.
    kill_while_made_again(&c, &web);
    let out = reconcile(&c, &web);
    let zones = &out["groups"][0]["placement"]["zones"];
    assert_eq!(zones["a"], 0, "{out}");
    assert_eq!(machines(&c).values().sum::<usize>(), 3);
    assert!(c.machines_per_instance().values().all(|n| *n == 1), "{:?}", c.machines_per_instance());
}

/// A group `db` of `size` VMs named `name` over zones a, b and c, each with a dedicated volume
/// (the zone's properties go into it too: a volume lives in its machine's zone).
fn with_volumes(c: &Cloud, size: u64, name: &str, placement: &str) -> String {
    with_volumes_updating(c, size, name, placement, "1")
}

/// The same, replacing `unavailable` members at a time in a rollout.
fn with_volumes_updating(c: &Cloud, size: u64, name: &str, placement: &str, unavailable: &str) -> String {
    let text = format!(
        r#"{{"ID": "db", "Properties": {{"Allocation": {{"Size": {size}}}, "Updating": {{"MaxUnavailable": {unavailable}}},
  "Placement": {{"Zones": [{{"Name": "a", "Properties": {{"zone": "za"}}}}, {{"Name": "b", "Properties": {{"zone": "zb"}}}},
                          {{"Name": "c", "Properties": {{"zone": "zc"}}}}]{placement}}},
  "Instance": {{"Properties": {{"resource": {{"fakecloud_instance": {{"vm": {{"name": "{name}", "size": "large"}}}},
    "fakecloud_volume": {{"data": {{"@scope": "@dedicated", "size": 5}}}}}}}}}}}}}}"#
    );
    c.s.write_outside(&format!("db-{name}.json"), &text)
}

/// The volumes in the cloud: ID → zone.
fn volumes(c: &Cloud) -> BTreeMap<String, String> {
    let objects = c.objects();
    let volumes = objects.iter().filter(|(_, o)| o["type"] == "fakecloud_volume");
    volumes.map(|(id, o)| (id.clone(), o["zone"].as_str().unwrap_or("").to_string())).collect()
}

#[test]
fn a_slot_with_a_dedicated_volume_in_the_full_zone_waits_and_is_never_moved() {
    let c = Cloud::new();
    let brief = r#", "Backoff": "20s", "MaxBackoff": "20s""#;
    let out = reconcile(&c, &with_volumes(&c, 3, "v1", brief));
    assert_eq!(out["groups"][0]["placement"]["zones"], serde_json::json!({"a": 1, "b": 1, "c": 1}), "{out}");
    let before = volumes(&c);
    let mut zones: Vec<&str> = before.values().map(String::as_str).collect();
    zones.sort_unstable();
    assert_eq!(zones, ["za", "zb", "zc"], "each volume in its machine's zone");
    // A rollout while zone a has no capacity: a's member is destroyed first (its volume kept),
    // its replacement refused; it cannot go elsewhere (its volume is in a), so it waits.
    std::fs::write(c.cloud.join("no-capacity"), "za\n").unwrap();
    let failed_at = std::time::Instant::now();
    let v2 = with_volumes(&c, 3, "v2", brief);
    let rolled = reconcile(&c, &v2);
    let g = &rolled["groups"][0];
    assert_eq!(
        (g["members"].as_u64(), g["current"].as_u64(), &g["pending"]),
        (Some(2), Some(2), &Value::Bool(true)),
        "{g}"
    );
    let waiting = &g["placement"]["waiting"];
    assert_eq!(waiting.as_array().map(Vec::len), Some(1), "{g}");
    assert_eq!(waiting[0]["zone"], "a", "{g}");
    assert!(waiting[0]["slot"].as_str().is_some_and(|s| s.contains("_dedicated_")), "{g}");
    assert_eq!(g["placement"]["moved"], Value::Array(vec![]), "{g}");
    assert_eq!(g["rollout"]["state"], "rolling", "not done while a member waits: {g}");
    assert_eq!(machines(&c), count(&[("zb", "large", 1), ("zc", "large", 1)]));
    assert_eq!(volumes(&c), before, "no volume made, moved or lost");
    // While a's backoff lasts, nothing is tried there: the run succeeds, still waiting, and
    // says so; --check exits 10. A new member takes a new slot in a zone with room.
    let check = c.run(&["reconcile", "--group", &v2, "--check"]).code(infrakit_tf::exit::Code::Pending);
    assert!(check.stderr.contains("waits for zone a"), "{}", check.stderr);
    let grown = c.run(&["reconcile", "--group", &with_volumes(&c, 4, "v2", brief)]).ok();
    assert!(grown.stdout.contains("waits for zone a") || grown.stderr.contains("waits for zone a"), "{grown:?}");
    let after = volumes(&c);
    assert_eq!(after.len(), 4);
    assert!(before.iter().all(|(id, zone)| after.get(id) == Some(zone)), "{before:?} {after:?}");
    assert_eq!(machines(&c).keys().filter(|(z, _)| z == "za").count(), 0);
    assert_eq!(machines(&c).values().sum::<usize>(), 3);
    // Once a has room and its backoff has passed, the slot's member is made there, on the
    // same volume.
    std::fs::remove_file(c.cloud.join("no-capacity")).unwrap();
    std::thread::sleep(
        (failed_at + std::time::Duration::from_secs(21)).saturating_duration_since(std::time::Instant::now()),
    );
    let whole = reconcile(&c, &with_volumes(&c, 4, "v2", brief));
    let g = &whole["groups"][0];
    assert_eq!(
        (g["members"].as_u64(), g["current"].as_u64(), &g["pending"]),
        (Some(4), Some(4), &Value::Bool(false)),
        "{g}"
    );
    assert_eq!(g["placement"]["waiting"], Value::Array(vec![]), "{g}");
    assert_eq!(volumes(&c), after, "the same volumes, where they were");
    assert_eq!(machines(&c).iter().filter(|((z, _), _)| z == "za").map(|(_, n)| *n).sum::<usize>(), 1);
    assert!(c.machines_per_instance().values().all(|n| *n == 1));
    c.run(&["reconcile", "--group", &with_volumes(&c, 4, "v2", brief), "--check"]).ok();
}

#[test]
fn members_whose_volumes_are_in_the_full_zone_wait_together_and_keep_their_own_slots() {
    let c = Cloud::new();
    let long = r#", "Backoff": "1h""#;
    reconcile(&c, &with_volumes(&c, 6, "v1", long));
    let before = volumes(&c);
    let in_a = before.values().filter(|z| *z == "za").count();
    assert_eq!((before.len(), in_a), (6, 2), "{before:?}");
    // One batch of all six: both of a's members are destroyed, their replacements refused at
    // once; each waits on its own slot (no two on one volume, none on another's).
    std::fs::write(c.cloud.join("no-capacity"), "za\n").unwrap();
    let out = reconcile(&c, &with_volumes_updating(&c, 6, "v2", long, "6"));
    let g = &out["groups"][0];
    assert_eq!((g["members"].as_u64(), g["current"].as_u64()), (Some(4), Some(4)), "{g}");
    let mut slots: Vec<&str> =
        g["placement"]["waiting"].as_array().unwrap().iter().map(|w| w["slot"].as_str().unwrap()).collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 2, "{g}");
    assert_eq!(volumes(&c), before, "no volume made, moved or lost");
    let rows = c.run(&["describe", "--output", "json"]).ok().json();
    let attached: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["attachments"].as_array())
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut unique = attached.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!((attached.len(), unique.len()), (4, 4), "one machine per volume: {rows}");
    assert!(slots.iter().all(|s| !attached.iter().any(|a| a.starts_with(s))), "{slots:?} {attached:?}");
    // A later rollout waits for a too: its members there are never destroyed.
    let v3 = reconcile(&c, &with_volumes_updating(&c, 6, "v3", long, "1"));
    let g = &v3["groups"][0];
    assert_eq!((g["members"].as_u64(), g["current"].as_u64()), (Some(4), Some(4)), "{g}");
    assert_eq!(volumes(&c), before);
    assert!(c.machines_per_instance().values().all(|n| *n == 1));
}

#[test]
fn a_new_slot_whose_machine_found_no_capacity_moves_with_its_new_volume() {
    let c = Cloud::new();
    std::fs::write(c.cloud.join("no-capacity"), "za\n").unwrap();
    let out = reconcile(&c, &with_volumes(&c, 3, "v1", r#", "Backoff": "1h""#));
    let g = &out["groups"][0];
    assert_eq!(g["placement"]["zones"], serde_json::json!({"a": 0, "b": 2, "c": 1}), "{g}");
    assert_eq!((g["members"].as_u64(), &g["pending"]), (Some(3), &Value::Bool(false)), "{g}");
    // The volume made for it in a, empty and never attached, went with it.
    let mut zones: Vec<String> = volumes(&c).into_values().collect();
    zones.sort_unstable();
    assert_eq!(zones, ["zb", "zb", "zc"]);
}

#[test]
fn a_run_killed_while_a_pinned_member_is_made_with_its_fallback_is_finished_by_the_next() {
    let c = Cloud::new();
    let fallback = r#", "Fallback": [{"Properties": {"size": "small"}}], "Backoff": "1h""#;
    reconcile(&c, &with_volumes(&c, 3, "v1", fallback));
    let before = volumes(&c);
    // Zone a has no `large`: a's member, destroyed first, is made again on its own slot with
    // the fallback size, and the whole process group is killed while that create runs.
    std::fs::write(c.cloud.join("no-capacity"), "za large\n").unwrap();
    let v2 = with_volumes(&c, 3, "v2", fallback);
    kill_while_made_again(&c, &v2);
    let mut out = Value::Null;
    for _ in 0..3 {
        out = reconcile(&c, &v2);
    }
    let g = &out["groups"][0];
    assert_eq!(
        (g["members"].as_u64(), g["current"].as_u64(), &g["pending"]),
        (Some(3), Some(3), &Value::Bool(false)),
        "{g}"
    );
    assert_eq!(volumes(&c), before, "the same volumes, where they were");
    assert_eq!(machines(&c), count(&[("za", "small", 1), ("zb", "large", 1), ("zc", "large", 1)]));
    assert!(c.machines_per_instance().values().all(|n| *n == 1), "{:?}", c.machines_per_instance());
}

#[test]
fn a_slot_in_a_zone_no_longer_listed_is_never_rewritten_and_provision_refuses_a_placed_group() {
    let c = Cloud::new();
    reconcile(&c, &with_volumes(&c, 3, "v1", ""));
    let before = volumes(&c);
    // provision cannot keep a slot in its zone: refused, nothing written.
    let files = || {
        let mut names: Vec<String> = std::fs::read_dir(&c.s.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort_unstable();
        names
    };
    let listed = files();
    let refused = c.run(&["provision", &with_volumes(&c, 3, "v1", "")]).code(infrakit_tf::exit::Code::Invalid);
    assert!(refused.stderr.contains("reconcile --group"), "{}", refused.stderr);
    assert_eq!(files(), listed);
    // Zone c dropped from the spec while a rollout runs: c's member keeps its volume where it
    // is and waits; the others roll.
    let mut spec: Value =
        serde_json::from_str(&std::fs::read_to_string(with_volumes(&c, 3, "v2", "")).unwrap()).unwrap();
    spec["Properties"]["Placement"]["Zones"].as_array_mut().unwrap().pop();
    let v2 = c.s.write_outside("db-v2-ab.json", &spec.to_string());
    let out = reconcile(&c, &v2);
    let g = &out["groups"][0];
    assert_eq!((g["members"].as_u64(), g["current"].as_u64()), (Some(3), Some(2)), "{g}");
    assert_eq!(g["placement"]["waiting"][0]["zone"], "unlisted", "{g}");
    assert_eq!(volumes(&c), before);
    let check = c.run(&["reconcile", "--group", &v2, "--check"]).code(infrakit_tf::exit::Code::Pending);
    assert!(check.stderr.contains("no longer lists"), "{}", check.stderr);
}
