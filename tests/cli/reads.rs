//! What a reconcile reads from the cloud (README "What a reconcile reads"): machines of a type
//! with a look-up are listed, one call per type and group; a rotating slice is refreshed; a
//! machine the list does not show is refreshed alone before anything may prune it. Counted by
//! the test provider itself (its `calls` file: one line per call it served).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use infrakit_tf::exit::Code;

use crate::support::cloud::Cloud;

/// A group `web` of `size` VMs (and, with `volume`, a dedicated volume each), its spec written
/// beside the directory.
fn group(c: &Cloud, size: u64, volume: bool) -> String {
    let mut resources = json!({"fakecloud_instance": {"vm": {"name": "web"}}});
    if volume {
        resources["fakecloud_volume"] = json!({"data": {"@scope": "@dedicated", "size": 5}});
    }
    let spec = json!({"ID": "web", "Properties": {
        "Allocation": {"Size": size},
        "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": resources}}}});
    c.s.write_outside(&format!("web-{size}.json"), &spec.to_string())
}

fn reconcile(c: &Cloud, args: &[&str]) -> Value {
    let mut argv = vec!["reconcile", "--output", "json"];
    argv.extend_from_slice(args);
    c.run(&argv).ok().json()
}

/// The group's members: instance ID → its machine's cloud ID.
fn members(c: &Cloud) -> BTreeMap<String, String> {
    c.describe()
        .into_iter()
        .filter(|r| r["Tags"]["infrakit.group"] == "web")
        .map(|r| (r["ID"].as_str().unwrap().to_string(), r["attributes"]["id"].as_str().unwrap_or("").to_string()))
        .collect()
}

/// How many calls of `verb` (on `rtype`, when given) `calls` holds.
fn count(calls: &[String], verb: &str, rtype: Option<&str>) -> usize {
    calls
        .iter()
        .filter(|l| {
            let mut words = l.split_whitespace();
            words.next() == Some(verb) && rtype.is_none_or(|t| words.next() == Some(t))
        })
        .count()
}

/// The cloud IDs `calls` read.
fn read_ids(calls: &[String]) -> BTreeSet<String> {
    calls
        .iter()
        .filter_map(|l| l.strip_prefix("read "))
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_reconcile_with_nothing_to_do_lists_the_group_once_and_refreshes_a_slice() {
    let c = Cloud::new();
    c.with_lookups();
    let spec = group(&c, 150, false);
    reconcile(&c, &["--group", &spec]);
    assert_eq!(members(&c).len(), 150);
    // The run after the creating apply plans the whole configuration once (the state changed).
    let first = reconcile(&c, &["--group", &spec]);
    assert_eq!(first["reads"]["whole_plan"], true, "{}", first["reads"]);

    c.count_calls();
    let metrics = c.s.root.path().join("metrics.prom");
    let out = reconcile(&c, &["--group", &spec, "--metrics-file", metrics.to_str().unwrap()]);
    let calls = c.calls();
    let reads = &out["reads"];
    assert_eq!(
        (count(&calls, "list", Some("fakecloud_instance")), count(&calls, "read", None), calls.len()),
        (1, 13, 14),
        "one listing, ceil(150/12) = 13 machines refreshed: {calls:?}"
    );
    assert!(calls.len() as f64 <= 2.0 + 13.0 + 0.02 * 150.0);
    assert_eq!(
        (reads["refreshed"].as_u64(), reads["lists"].as_u64(), reads["whole_plan"].as_bool()),
        (Some(13), Some(1), Some(false)),
        "the report says what the cloud served: {reads}"
    );
    assert_eq!((reads["slice"].as_str(), reads["full_refresh"].as_bool()), (Some("1/12"), Some(false)));
    assert_eq!((out["applied"].as_bool(), out["terraform_runs"].as_u64()), (Some(false), Some(1)), "{out}");
    let prom = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        prom.lines().any(|l| l.starts_with("infrakit_tf_last_run_resources_refreshed{") && l.ends_with(" 13")),
        "{prom}"
    );
    assert!(prom.lines().any(|l| l.starts_with("infrakit_tf_last_run_list_calls{") && l.ends_with(" 1")), "{prom}");

    // --full-refresh reads every machine, as a plain `terraform plan` does.
    let full = reconcile(&c, &["--group", &spec, "--full-refresh"]);
    let calls = c.calls();
    assert_eq!((count(&calls, "read", None), count(&calls, "list", None)), (150, 0));
    assert_eq!((full["reads"]["refreshed"].as_u64(), full["reads"]["full_refresh"].as_bool()), (Some(150), Some(true)));
}

#[test]
fn a_machine_deleted_out_of_band_is_pruned_and_replaced_in_one_run_without_a_second_refresh() {
    let c = Cloud::new();
    c.with_lookups();
    let spec = group(&c, 24, false);
    reconcile(&c, &["--group", &spec]);
    reconcile(&c, &["--group", &spec]);
    c.count_calls();
    reconcile(&c, &["--group", &spec]);
    let quiet = c.calls().len();

    let before = members(&c);
    let (victim, machine) = before.iter().next().map(|(i, m)| (i.clone(), m.clone())).unwrap();
    c.vanish(&machine);
    let out = reconcile(&c, &["--group", &spec]);
    let calls = c.calls();
    assert_eq!(out["pruned"][0]["ID"], victim.as_str(), "{out}");
    assert_eq!(out["reads"]["unlisted"], json!([format!("fakecloud_instance.{victim}")]), "{}", out["reads"]);
    // Nothing else changed since the last whole plan: the run plans and applies only what it
    // wrote (the pruned file, the new member's), not the whole configuration.
    assert_eq!(out["reads"]["whole_plan"], false, "{}", out["reads"]);
    let after = members(&c);
    assert_eq!(after.len(), 24, "its replacement was made in the same run");
    assert!(!after.contains_key(&victim));
    assert!(calls.len() <= quiet + 5, "{} calls, {quiet} with nothing to do: {calls:?}", calls.len());
    assert_eq!(count(&calls, "read", None), quiet - 1 + 1, "the slice and the one confirmation, nothing read twice");
    assert_eq!((count(&calls, "create", None), count(&calls, "delete", None)), (1, 0), "{calls:?}");
    assert!(!c.state().contains_key(&format!("fakecloud_instance.{victim}")));
    c.run(&["reconcile", "--group", &spec, "--check"]).ok();
    // Your configuration reads no data source: the directory as that apply left it counts as
    // planned, and the run after it plans nothing whole.
    assert_eq!(reconcile(&c, &["--group", &spec])["reads"]["whole_plan"], false);
}

#[test]
fn a_machine_the_list_does_not_show_yet_is_confirmed_and_kept() {
    let c = Cloud::new();
    c.with_lookups();
    reconcile(&c, &["--group", &group(&c, 3, false)]);
    c.lag_lists(600_000);
    let four = group(&c, 4, false);
    reconcile(&c, &["--group", &four]);
    assert_eq!(members(&c).len(), 4);

    c.count_calls();
    let out = reconcile(&c, &["--group", &four]);
    let unlisted = out["reads"]["unlisted"].as_array().unwrap().clone();
    assert_eq!(unlisted.len(), 1, "the new machine, written a moment ago: {}", out["reads"]);
    assert_eq!(out["pruned"], json!([]), "{out}");
    assert_eq!(members(&c).len(), 4);
    assert_eq!(c.objects().len(), 4, "nothing made twice, nothing lost");
}

#[test]
fn a_machine_whose_tags_were_edited_by_hand_is_not_pruned_and_gets_them_back() {
    let c = Cloud::new();
    c.with_lookups();
    let spec = group(&c, 3, false);
    reconcile(&c, &["--group", &spec]);
    let (id, machine) = members(&c).into_iter().next().unwrap();
    c.edit(&machine, |o| {
        o["tags"].as_object_mut().unwrap().remove("infrakit.group");
    });
    let out = reconcile(&c, &["--group", &spec]);
    assert_eq!(out["reads"]["unlisted"], json!([format!("fakecloud_instance.{id}")]), "{}", out["reads"]);
    assert_eq!(out["pruned"], json!([]));
    assert_eq!(out["drift"], json!([{"address": format!("fakecloud_instance.{id}"), "action": "update"}]));
    assert_eq!(members(&c)[&id], machine, "the same machine");
    assert_eq!(c.objects()[&machine]["tags"]["infrakit.group"], "web", "its tags are put back");
    c.run(&["reconcile", "--group", &spec, "--check"]).ok();
}

#[test]
fn a_change_made_in_the_cloud_is_seen_within_the_slice_period() {
    let c = Cloud::new();
    c.with_lookups();
    let spec = group(&c, 6, false);
    reconcile(&c, &["--group", &spec]);
    let (id, machine) = members(&c).into_iter().next().unwrap();
    c.edit(&machine, |o| o["name"] = json!("renamed by hand"));
    let address = format!("fakecloud_instance.{id}");
    let mut seen = 0;
    let mut read = BTreeSet::new();
    c.count_calls();
    for run in 0..3 {
        let out = reconcile(&c, &["--group", &spec, "--refresh-slice", "1/3"]);
        let calls = c.calls();
        let drifted = out["drift"].as_array().unwrap().iter().any(|d| d["address"] == address.as_str());
        // The drifted machine is read once more, alone, into the state before the apply.
        assert_eq!(count(&calls, "read", None), 2 + usize::from(drifted), "run {run}: ceil(6/3): {calls:?}");
        read.extend(read_ids(&calls));
        seen += usize::from(drifted);
    }
    assert_eq!(seen, 1, "seen once within 3 runs of a 1/3 slice");
    assert_eq!(read.len(), 6, "every machine read within 3 runs: {read:?}");
    assert_eq!(c.objects()[&machine]["name"], "web", "the change was undone");
}

#[test]
fn a_type_without_a_look_up_is_refreshed_every_run() {
    let c = Cloud::new();
    // A look-up for the VMs only: the volumes are refreshed as a full plan does.
    let mut config: Value = c.s.read("infrakit-tf.json");
    config["lookups"]["fakecloud_instance"] =
        json!({"data_source": "fakecloud_instances", "arguments": {"tags": "{{tags}}"}, "ids": "ids", "tags": "tags"});
    c.s.write("infrakit-tf.json", &config.to_string());
    let spec = group(&c, 4, true);
    reconcile(&c, &["--group", &spec]);
    reconcile(&c, &["--group", &spec]);
    c.count_calls();
    reconcile(&c, &["--group", &spec]);
    let calls = c.calls();
    assert_eq!(count(&calls, "read", Some("fakecloud_volume")), 4, "every volume, every run: {calls:?}");
    assert_eq!(count(&calls, "read", Some("fakecloud_instance")), 1, "ceil(4/12) VMs");

    let volume = c.objects().into_iter().find(|(_, o)| o["type"] == "fakecloud_volume").unwrap().0;
    c.vanish(&volume);
    let out = reconcile(&c, &["--group", &spec]);
    let gone: Vec<&Value> = out["drift"].as_array().unwrap().iter().filter(|d| d["action"] == "delete").collect();
    assert_eq!(gone.len(), 1, "found by the first run: {out}");
    assert_eq!(out["added"], 1, "made again: {out}");
    assert_eq!(c.objects().values().filter(|o| o["type"] == "fakecloud_volume").count(), 4);
}

#[test]
fn two_hosts_on_a_store_continue_each_others_slices() {
    let db = crate::support::store::Db::new();
    let (a, b) = crate::support::store::hosts_at(&db.url());
    a.with_lookups();
    b.with_lookups();
    let text = std::fs::read_to_string(group(&a, 6, false)).unwrap();
    let (on_a, on_b) = (a.s.write_outside("g.json", &text), b.s.write_outside("g.json", &text));
    reconcile(&a, &["--group", &on_a]);
    a.count_calls();
    let mut slices = Vec::new();
    for (host, spec) in [(&a, &on_a), (&b, &on_b), (&a, &on_a)] {
        reconcile(host, &["--group", spec, "--refresh-slice", "1/3"]);
        slices.push(read_ids(&a.calls()));
    }
    let all: BTreeSet<String> = slices.iter().flatten().cloned().collect();
    assert!(slices.iter().all(|s| s.len() == 2), "{slices:?}");
    assert_eq!(all.len(), 6, "each host went on where the other stopped: {slices:?}");
}

/// Appends `text` to the directory's `main.tf`, as a user edits their own configuration.
fn append_to_main(c: &Cloud, text: &str) {
    let main = std::fs::read_to_string(c.s.dir.join("main.tf")).unwrap();
    c.s.write("main.tf", &format!("{main}\n{text}\n"));
}

#[test]
fn your_configuration_may_refer_to_a_managed_resource() {
    let c = Cloud::new();
    c.with_lookups();
    let spec = group(&c, 4, false);
    let spec_text: Value = serde_json::from_str(&std::fs::read_to_string(&spec).unwrap()).unwrap();
    let mut with_nfs = spec_text.clone();
    with_nfs["Properties"]["Instance"]["Properties"]["resource"]["fakecloud_volume"] =
        json!({"nfs": {"@scope": "shared", "size": 50}});
    let spec = c.s.write_outside("web-nfs.json", &with_nfs.to_string());
    reconcile(&c, &["--group", &spec]);
    // The look's plan leaves out the files it does not need: never one your main.tf refers to.
    append_to_main(&c, "output \"nfs\" {\n  value = fakecloud_volume.shared-nfs.id\n}");
    for _ in 0..2 {
        reconcile(&c, &["--group", &spec]);
    }
}

#[test]
fn a_drift_is_put_back_without_a_look_up_and_with_a_full_refresh() {
    for full in [false, true] {
        let c = Cloud::new();
        if full {
            c.with_lookups();
        }
        let spec = group(&c, 2, false);
        reconcile(&c, &["--group", &spec]);
        let machine = members(&c).into_values().next().unwrap();
        c.edit(&machine, |o| o["name"] = json!("renamed by hand"));
        let args: &[&str] = if full { &["--group", &spec, "--full-refresh"] } else { &["--group", &spec] };
        let out = reconcile(&c, args);
        assert_eq!(out["reads"]["full_refresh"], true);
        assert_eq!(out["drift"].as_array().unwrap().len(), 1, "{out}");
        assert_eq!(c.objects()[&machine]["name"], "web", "the change was undone (full: {full})");
    }
}

#[test]
fn a_change_to_your_configuration_during_a_run_is_planned_by_the_next() {
    let c = Cloud::new();
    c.with_lookups();
    let spec = group(&c, 3, false);
    reconcile(&c, &["--group", &spec]);
    reconcile(&c, &["--group", &spec]);
    assert_eq!(reconcile(&c, &["--group", &spec])["reads"]["whole_plan"], false);
    // A harmless edit: the next run plans the whole configuration, then looks (slowly).
    append_to_main(&c, "# a comment");
    std::fs::write(c.cloud.join("read-ms"), "3000").unwrap();
    let mut run = c.start(&["reconcile", "--group", &spec], &[]);
    assert!(run.wait_for("plan:").is_some(), "the whole plan");
    // The operator adds a resource while the run is looking.
    append_to_main(&c, "resource \"fakecloud_volume\" \"extra\" {\n  size = 1\n}");
    run.finish().ok();
    std::fs::remove_file(c.cloud.join("read-ms")).unwrap();
    let out = reconcile(&c, &["--group", &spec]);
    assert_eq!((out["reads"]["whole_plan"].as_bool(), out["added"].as_u64()), (Some(true), Some(1)), "{out}");
}

#[test]
fn a_variable_given_with_env_counts_as_a_change() {
    let c = Cloud::new();
    c.with_lookups();
    append_to_main(
        &c,
        "variable \"extra\" {\n  default = 0\n}\nresource \"fakecloud_volume\" \"extra\" {\n  count = var.extra\n  size = 1\n}",
    );
    let spec = group(&c, 2, false);
    reconcile(&c, &["--group", &spec]);
    reconcile(&c, &["--group", &spec]);
    let out = reconcile(&c, &["--env", "TF_VAR_extra=1", "--group", &spec]);
    assert_eq!((out["reads"]["whole_plan"].as_bool(), out["added"].as_u64()), (Some(true), Some(1)), "{out}");
}

#[test]
fn a_refresh_slice_is_one_in_n() {
    let c = Cloud::new();
    for bad in ["2/12", "1/0", "12"] {
        let run = c.run(&["reconcile", "--refresh-slice", bad]).code(Code::Usage);
        assert!(run.stderr.contains("expected 1/N"), "{bad}: {}", run.stderr);
    }
}

/// A module kept beside the directory (`../modules/extra`), or linked into it (`./modules`),
/// holding one volume; `main.tf` uses it from `source`.
fn with_module(c: &Cloud, source: &str) -> std::path::PathBuf {
    let module = c.s.root.path().join("modules/extra");
    std::fs::create_dir_all(&module).unwrap();
    std::fs::write(
        module.join("main.tf"),
        "terraform {\n  required_providers {\n    fakecloud = { source = \"infrakit/fakecloud\" }\n  }\n}\nresource \"fakecloud_volume\" \"one\" {\n  size = 1\n}\n",
    )
    .unwrap();
    if source.starts_with("./") {
        std::os::unix::fs::symlink(c.s.root.path().join("modules"), c.s.dir.join("modules")).unwrap();
    }
    append_to_main(c, &format!("module \"extra\" {{\n  source = \"{source}\"\n}}"));
    module
}

fn volumes(c: &Cloud) -> usize {
    c.objects().values().filter(|o| o["type"] == "fakecloud_volume").count()
}

#[test]
fn a_module_out_of_the_directory_makes_a_run_refresh_everything() {
    let c = Cloud::new();
    c.with_lookups();
    with_module(&c, "../modules/extra");
    let spec = group(&c, 2, false);
    reconcile(&c, &["--group", &spec]);
    let out = reconcile(&c, &["--group", &spec]);
    assert_eq!(out["reads"]["full_refresh"], true, "the look's mirror could not reach ../modules: {}", out["reads"]);
    let machine = members(&c).into_values().next().unwrap();
    c.vanish(&machine);
    let out = reconcile(&c, &["--group", &spec]);
    assert_eq!((out["pruned"].as_array().unwrap().len(), members(&c).len()), (1, 2), "{out}");
}

#[test]
fn a_resource_added_to_a_linked_module_is_planned() {
    let c = Cloud::new();
    c.with_lookups();
    let module = with_module(&c, "./modules/extra");
    let spec = group(&c, 2, false);
    reconcile(&c, &["--group", &spec]);
    reconcile(&c, &["--group", &spec]);
    assert_eq!(reconcile(&c, &["--group", &spec])["reads"]["whole_plan"], false);
    std::fs::write(module.join("two.tf"), "resource \"fakecloud_volume\" \"two\" {\n  size = 2\n}\n").unwrap();
    let out = reconcile(&c, &["--group", &spec]);
    assert_eq!((out["reads"]["whole_plan"].as_bool(), volumes(&c)), (Some(true), 2), "{out}");
}

#[test]
fn a_look_up_that_cannot_list_makes_a_run_refresh_everything() {
    let c = Cloud::new();
    let spec = group(&c, 2, false);
    reconcile(&c, &["--group", &spec]);
    let mut config: Value = c.s.read("infrakit-tf.json");
    config["lookups"]["fakecloud_instance"] =
        json!({"data_source": "fakecloud_instancez", "arguments": {"tags": "{{tags}}"}, "ids": "ids", "tags": "tags"});
    c.s.write("infrakit-tf.json", &config.to_string());
    let run = c.run(&["reconcile", "--group", &spec, "--output", "json"]).ok();
    assert!(run.stderr.contains("could not be read, so this run refreshes everything"), "{}", run.stderr);
    assert_eq!(run.json()["reads"]["full_refresh"], true);
}

#[test]
fn your_override_file_of_a_managed_resource_is_honoured() {
    let c = Cloud::new();
    c.with_lookups();
    let spec = group(&c, 2, true);
    reconcile(&c, &["--group", &spec]);
    let volume = c.state().into_keys().find(|a| a.starts_with("fakecloud_volume.")).unwrap();
    let name = volume.strip_prefix("fakecloud_volume.").unwrap();
    c.s.write("slot_override.tf", &format!("resource \"fakecloud_volume\" \"{name}\" {{\n  size = 5\n}}\n"));
    reconcile(&c, &["--group", &spec]);
    reconcile(&c, &["--group", &spec]);
}

/// Publishes an image in the cloud: a volume tagged `role = image`, which your data source lists.
fn publish_image(c: &Cloud, id: &str) {
    let object = json!({"type": "fakecloud_volume", "id": id, "size": 1, "tags": {"role": "image"}});
    std::fs::write(c.cloud.join(format!("{id}.json")), object.to_string()).unwrap();
}

#[test]
fn a_change_your_data_source_brings_is_counted_against_max_destroy() {
    let c = Cloud::new();
    c.with_lookups();
    publish_image(&c, "vol-img1");
    append_to_main(&c, "data \"fakecloud_volumes\" \"img\" {\n  tags = { role = \"image\" }\n}");
    let spec = json!({"ID": "web", "Properties": {
        "Allocation": {"Size": 24},
        "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": {"fakecloud_instance": {"vm": {
            "name": "web", "user_data": "${join(\",\", data.fakecloud_volumes.img.ids)}"}}}}}}});
    let spec = c.s.write_outside("img.json", &spec.to_string());
    reconcile(&c, &["--group", &spec]);
    reconcile(&c, &["--group", &spec]);
    assert_eq!(reconcile(&c, &["--group", &spec])["reads"]["whole_plan"], false);
    let before = members(&c);
    // A new image is published: every machine would be replaced.
    publish_image(&c, "vol-img2");
    let run = c.run(&["reconcile", "--group", &spec, "--output", "json"]).code(Code::TooManyDestroys);
    assert!(run.stderr.contains("refusing to destroy 24"), "{}", run.stderr);
    assert_eq!(members(&c), before, "nothing was replaced");
}

#[test]
fn a_change_your_data_source_brings_mid_run_is_not_applied_with_the_runs_own() {
    let c = Cloud::new();
    c.with_lookups();
    publish_image(&c, "vol-img1");
    // A resource of yours that every member depends on, sized by what your data source reads.
    append_to_main(
        &c,
        "data \"fakecloud_volumes\" \"img\" {\n  tags = { role = \"image\" }\n}\n\
         resource \"fakecloud_volume\" \"shared\" {\n  size = length(data.fakecloud_volumes.img.ids)\n}",
    );
    let spec = |size: u64, check: &str| {
        let spec = json!({"ID": "web", "Properties": {
            "Allocation": {"Size": size},
            "Healing": {"Command": check},
            "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": {"fakecloud_instance": {"vm": {
                "name": "web", "user_data": "${fakecloud_volume.shared.id}"}}}}}}});
        c.s.write_outside(&format!("web-{size}.json"), &spec.to_string())
    };
    let eleven = spec(11, "true");
    reconcile(&c, &["--group", &eleven]);
    reconcile(&c, &["--group", &eleven]);
    // One more member, nothing else changed: only the new member's file is planned and applied.
    let quiet = spec(12, "true");
    let grew = reconcile(&c, &["--group", &quiet]);
    assert_eq!((grew["reads"]["whole_plan"].as_bool(), grew["added"].as_u64()), (Some(false), Some(1)), "{grew}");
    // Your configuration reads a data source, which what the run made may change: the next
    // run plans everything once.
    assert_eq!(reconcile(&c, &["--group", &quiet])["reads"]["whole_plan"], true);
    assert_eq!(reconcile(&c, &["--group", &quiet])["reads"]["whole_plan"], false);
    // One more member; the health check (run after the look, before the apply) publishes a new
    // image on the way, as the world outside may at any moment.
    let img2 = c.cloud.join("vol-img2.json");
    let publish = format!(
        "test -e {0} || echo '{{\"type\": \"fakecloud_volume\", \"id\": \"vol-img2\", \"size\": 1, \"tags\": {{\"role\": \"image\"}}}}' > {0}",
        img2.display()
    );
    let grown = spec(13, &publish);
    let run = c.run(&["reconcile", "--group", &grown, "--output", "json"]);
    assert!(img2.exists(), "the health check ran: {}", run.stderr);
    assert!(
        run.stderr.contains("applying this run's change would also change fakecloud_volume.shared: not applied"),
        "{}",
        run.stderr
    );
    let out = run.ok().json();
    assert_eq!((out["groups"][0]["pending"].as_bool(), out["applied"].as_bool()), (Some(true), Some(false)), "{out}");
    assert!(!c
        .state()
        .contains_key(&format!("fakecloud_instance.{}", out["groups"][0]["provisioned"][0].as_str().unwrap())));
    // The next run plans the whole configuration (its files changed) and applies it all.
    let next = reconcile(&c, &["--group", &grown]);
    assert_eq!(next["reads"]["whole_plan"], true, "{}", next["reads"]);
    assert_eq!(members(&c).values().filter(|m| !m.is_empty()).count(), 13);
    c.run(&["reconcile", "--group", &grown, "--check"]).ok();
}
