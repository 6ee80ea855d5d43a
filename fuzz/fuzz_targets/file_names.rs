//! File names of a managed directory: each line of the input is one directory entry, taken the
//! way `Directory` does (split the suffix, classify the base, parse instance IDs). A name we
//! classify is spelled only one way, so that one instance never has two files. Then the slot
//! choice `provision` makes from such a listing: dedicated files found there, and attachments
//! (lines `attach:<tag value>`, as an `infrakit.attach` tag of some instance) that name slots in
//! use. The chosen slot must be free, and found without walking every number up to the largest.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use infrakit_tf::expand::{choose_slot, Slots};
use infrakit_tf::names::{self, InstanceId, Kind, Scope};
use infrakit_tf::tfconfig::{self, ATTACH_TAG};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut slots = Slots::default();
    let mut scope_ids: BTreeSet<String> = ["default".to_string()].into();
    for line in text.lines() {
        if let Some(value) = line.strip_prefix("attach:") {
            let tags: BTreeMap<String, String> = [(ATTACH_TAG.to_string(), value.to_string())].into();
            slots.attached.extend(tfconfig::attachments(&tags));
        }
        let _ = names::check_path_component(line, "name");
        let _ = names::is_terraform_name(line);
        let _ = Scope::parse(line);
        if let Ok(id) = line.parse::<InstanceId>() {
            assert_eq!(id.to_string(), line, "an instance ID has one spelling");
        }
        let Some((base, suffix)) = names::split_file_name(line) else { continue };
        assert_eq!(format!("{base}{}", suffix.as_str()), line);
        match names::classify(base) {
            None => {}
            Some(Kind::Instance(id)) => assert_eq!(id.to_string(), base, "an instance ID has one spelling"),
            Some(Kind::Dedicated { scope_id, key }) => {
                assert_eq!(names::dedicated_base(&scope_id, &key), base);
                scope_ids.insert(scope_id);
                slots.existing.insert(base.to_string());
            }
            Some(Kind::Global { scope }) => assert_eq!(names::global_base(&scope), base),
        }
    }
    let scope_ids: BTreeSet<&str> = scope_ids.iter().map(String::as_str).collect();
    let key = choose_slot(&scope_ids, &slots);
    for scope_id in &scope_ids {
        let base = names::dedicated_base(scope_id, &key);
        assert!(!slots.attached.contains(&base), "slot {key} is taken by an attachment to {base}");
    }
});
