//! Reading a managed instance file: arbitrary bytes go the way `Directory::load_instance` takes
//! them (JSON, its VM, the VM's tags by profile, its attachments), then the way `label` edits
//! them (merge tags, lowercase list tags, the bytes written back). Files on disk may be written
//! by hand, by older tools, or half by a crash: none of this may panic.
#![no_main]

use std::collections::BTreeMap;

use infrakit_tf::profile::Profiles;
use infrakit_tf::tfconfig;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const ID: &str = "instance-1";

fuzz_target!(|data: &[u8]| {
    let Ok(mut doc) = serde_json::from_slice::<Value>(data) else { return };
    let profiles = Profiles::builtin();
    let Some((rtype, name)) = tfconfig::find_vm(&doc, &profiles, ID) else { return };
    let (rtype, name) = (rtype.to_string(), name.to_string());
    let profile = profiles.get(&rtype).expect("find_vm returns VM types");
    // `label` takes the VM's props for granted once find_vm has found it.
    let props = tfconfig::resource(&doc, &rtype, &name).expect("find_vm returns a resource with props");
    let tags = tfconfig::read_tags(props, profile);
    let attachments = tfconfig::attachments(&tags);
    assert!(attachments.iter().all(|a| !a.is_empty() && !a.contains(',')), "{attachments:?}");

    let labels: BTreeMap<String, String> = [("fuzz".to_string(), "Label".to_string())].into();
    let props = tfconfig::resource_mut(&mut doc, &rtype, &name).expect("found above");
    tfconfig::merge_tags(props, profile, &labels);
    if profile.lowercase_tags {
        tfconfig::lowercase_list_tags(props, profile);
    }
    let _ = tfconfig::read_tags(props, profile);
    let _ = tfconfig::to_bytes(&doc);
});
