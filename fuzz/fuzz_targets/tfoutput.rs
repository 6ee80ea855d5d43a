//! Terraform's machine-readable output: every line of the input through the `-json` stream
//! decoder (what the runner does with each line terraform prints), and the whole input as
//! `show -json` state, `show -json` of a plan and `version -json`. Terraform's output is not
//! ours: a new version, a provider's message or a crash mid-line must never panic us.
#![no_main]

use infrakit_tf::tfoutput::{self, Event};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for line in text.lines() {
        if let Some(Event::Summary(changes)) = tfoutput::parse_line(line) {
            let _ = changes.total();
        }
    }
    if let Ok(state) = tfoutput::parse_state(text) {
        for resource in state.values() {
            let _ = resource.key_attributes();
        }
    }
    let _ = tfoutput::parse_plan_imports(text);
    let _ = tfoutput::parse_version(text);
});
