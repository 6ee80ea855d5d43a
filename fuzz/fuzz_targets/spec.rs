//! Spec parsing, then expansion: any text `spec::parse` accepts must expand (or be refused with
//! a message) without a panic, exactly as `validate` does it: a fixed stand-in ID, the built-in
//! VM profiles, an empty directory, and the logical-ID stand-in for specs that name one.
#![no_main]

use std::collections::BTreeMap;

use infrakit_tf::expand::{self, Request, Slots};
use infrakit_tf::names::InstanceId;
use infrakit_tf::profile::Profiles;
use infrakit_tf::{spec, tfconfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let profiles = Profiles::builtin();
    let spec = match spec::parse(text, &profiles) {
        Ok(spec) => spec,
        Err(problems) => {
            assert!(!problems.is_empty(), "a refused spec names at least one problem");
            for p in problems {
                let _ = p.to_string();
            }
            return;
        }
    };
    let _ = spec.needs_slot();
    let id = InstanceId::new(1);
    let tags = BTreeMap::new();
    let stand_in = text.contains("/self/logicalId").then_some("logical-id");
    let request = Request {
        spec: &spec,
        profiles: &profiles,
        id: &id,
        logical_id: spec.logical_id.as_deref().or(stand_in),
        tags: &tags,
    };
    if let Ok(expansion) = expand::expand(&request, &Slots::default()) {
        assert_eq!(expansion.placed.len(), spec.resources.len());
        for doc in expansion.files.values() {
            // The bytes provision would write.
            let _ = tfconfig::to_bytes(doc);
        }
    }
});
