//! No way in: what another local user, a caller's data or the operator's own commands can and
//! cannot do (README "Security").

use serde_json::Value;

use crate::support::Scratch;

/// Terraform's state of `s`, `show -json`: the root module's resources by address.
fn state(s: &Scratch) -> std::collections::BTreeMap<String, Value> {
    let out = std::process::Command::new(crate::terraform::terraform_program())
        .args(["show", "-json"])
        .current_dir(&s.dir)
        .env("TF_CLI_CONFIG_FILE", s.cli_config())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["values"]["root_module"]["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| (r["address"].as_str().unwrap().to_string(), r["values"].clone()))
        .collect()
}

// Data stays data: a value given on the command line (`--tag`, `label`'s values, a logical
// ID) that holds `${...}` or `%{...}` is written so that terraform reads it literally, and
// reads back as given; what the spec says (its `${...}`) is still the user's terraform.
#[test]
fn values_from_the_command_line_are_never_evaluated_by_terraform() {
    let s = Scratch::example();
    let secret = s.root.path().join("secret");
    std::fs::write(&secret, "the host's secret").unwrap();
    let read = format!("${{file(\"{}\")}}", secret.display());
    let directive = "%{ if true }yes%{ endif }";
    let web = s.dir.join("web.json");
    let id = s
        .run(&[
            "provision",
            web.to_str().unwrap(),
            "--tag",
            &format!("read={read}"),
            "--tag",
            &format!("if={directive}"),
        ])
        .ok()
        .stdout
        .trim()
        .to_string();
    // A pet whose logical ID holds an expression (a spec of a VM alone: no file is named by it).
    let pet = s.write_outside(
        "pet.json",
        r#"{"Properties": {"resource": {"terraform_data": {"vm": {"input": {"who": "{{ var `/self/logicalId` }}"}}}}}}"#,
    );
    let pet_id = s.run(&["provision", &pet, "--logical-id", "web-${upper(\"x\")}"]).ok().stdout.trim().to_string();
    s.run(&["label", &id, &format!("later={read}")]).ok();
    let vm = state(&s)[&format!("terraform_data.{id}")].clone();
    let tags = &vm["input"]["tags"];
    assert_eq!(tags["read"], read.as_str(), "{vm}");
    assert_eq!(tags["later"], read.as_str(), "{vm}");
    assert_eq!(tags["if"], directive, "{vm}");
    assert!(!vm.to_string().contains("the host's secret"), "{vm}");
    let pet_vm = state(&s)[&format!("terraform_data.{pet_id}")].clone();
    assert_eq!(pet_vm["input"]["tags"]["infrakit.logical_id"], "web-${upper(\"x\")}", "{pet_vm}");
    assert_eq!(pet_vm["input"]["who"], "web-${upper(\"x\")}", "rendered into the spec's string, literally: {pet_vm}");
    // The spec's own references are still terraform's: the network's CIDR, interpolated.
    assert_eq!(vm["input"]["network"], "10.0.0.0/16", "{vm}");
    // describe reads the tags back as they were given.
    let rows = s.run(&["describe", "--output", "json"]).ok().json();
    let row = |id: &str| rows.as_array().unwrap().iter().find(|r| r["ID"] == id).unwrap().clone();
    assert_eq!(row(&id)["Tags"]["read"], read.as_str());
    assert_eq!(row(&pet_id)["LogicalID"], "web-${upper(\"x\")}");
    let label = s.run(&["label", &id, "again=1", "--output", "json"]).ok().json();
    assert_eq!(label["Tags"]["later"], read.as_str(), "a round trip is exact: {label}");
}
