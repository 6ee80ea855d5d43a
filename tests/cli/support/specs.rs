//! Group specs several areas converge on the fakecloud provider (a web group, a healed API
//! group, managers to import), and the hand-made machines an import adopts.

use serde_json::{json, Value};

use crate::support::cloud::Cloud;

/// A group spec of `allocation` whose members have a VM (with `user_data`), a dedicated data
/// volume and a shared volume, like [`crate::support::cloud::WEB`].
pub fn web(allocation: &str, user_data: &str) -> String {
    format!(
        r##"{{"ID": "web", "Properties": {{
  "Allocation": {allocation},
  "Instance": {{"Plugin": "instance-terraform", "Properties": {{"resource": {{
    "fakecloud_instance": {{"vm": {{"name": "web", "user_data": "{user_data}"}}}},
    "fakecloud_volume": {{"data": {{"@scope": "@dedicated", "size": 5}}, "nfs": {{"@scope": "shared", "size": 50}}}}}}}}}},
  "Flavor": {{"Plugin": "flavor-vanilla", "Properties": {{"Init": ["echo hello"], "Tags": {{"role": "web"}}}}}}}}}}"##
    )
}

/// A group `api` of `size` VMs, each with a dedicated volume, healed by a check that fails
/// while `sick-<ID>` exists (and logs `ID` to `checked`), with `healing` over that command;
/// written beside the directory, its path returned.
pub fn healed_api(c: &Cloud, size: u64, healing: Value) -> String {
    c.s.write_outside("api.json", &healed_api_text(c, size, healing))
}

/// [`healed_api`]'s text (the markers and the log in `c`'s scratch directory).
pub fn healed_api_text(c: &Cloud, size: u64, healing: Value) -> String {
    let root = c.s.root.path().display();
    let mut h =
        json!({"Command": format!("echo $INFRAKIT_TF_ID >> {root}/checked; test ! -e {root}/sick-$INFRAKIT_TF_ID")});
    for (k, v) in healing.as_object().unwrap() {
        h[k] = v.clone();
    }
    let spec = json!({"ID": "api", "Properties": {
        "Allocation": {"Size": size},
        "Healing": h,
        "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": {
            "fakecloud_instance": {"vm": {"name": "a"}},
            "fakecloud_volume": {"data": {"@scope": "@dedicated", "size": 5}}}}}}});
    spec.to_string()
}

/// An InfraKit group spec for managers: a VM and a dedicated data volume.
pub const MANAGERS: &str = r##"{"ID": "managers", "Properties": {
    "Allocation": {"LogicalIDs": ["mgr1", "mgr2"]},
    "Instance": {"Plugin": "instance-terraform", "Properties": {"resource": {
        "fakecloud_instance": {"vm": {"name": "manager", "user_data": "#!/bin/sh\necho new init", "tags": {"role": "manager"}}},
        "fakecloud_volume": {"data": {"@scope": "@dedicated", "size": 10}}}}},
    "Flavor": {"Plugin": "flavor-vanilla", "Properties": {"Init": ["echo never run on an adopted machine"], "Tags": {"tier": "control"}}}}}"##;

/// The first manager, made by hand before any automation: a machine and its volume.
pub fn hand_made(c: &Cloud) {
    let write =
        |id: &str, v: Value| std::fs::write(c.cloud.join(format!("{id}.json")), v.to_string().as_bytes()).unwrap();
    write(
        "i-0000abcd",
        json!({"type": "fakecloud_instance", "id": "i-0000abcd", "ip": "10.0.9.9", "name": "manager",
        "tags": {"owner": "ops"}, "user_data": "#!/bin/sh\necho booted by hand"}),
    );
    write("vol-0000beef", json!({"type": "fakecloud_volume", "id": "vol-0000beef", "size": 20, "tags": {}}));
}
