//! With a real terraform: what infrakit-tf writes is configuration terraform accepts and
//! applies, on `examples/local` (built-in `terraform_data`, no provider download).
//!
//! This commands only queue files; here the test promotes the queue itself (renaming
//! `.tf.json.new` to `.tf.json`, as the apply step will) and runs terraform directly.
//! The terraform used is `$INFRAKIT_TF_TEST_TERRAFORM`, else `terraform` on PATH; `.ci/test`
//! provides one. Without one this test fails: it is never skipped silently.
#![allow(clippy::disallowed_methods)] // the test drives terraform and moves files itself

use std::path::Path;

use crate::support::terraform::{state, terraform};
use crate::support::Scratch;

fn promote(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if let Some(live) = p.to_str().unwrap().strip_suffix(".new") {
            std::fs::rename(&p, live).unwrap();
        }
    }
}

#[test]
fn terraform_applies_what_we_write() {
    let s = Scratch::example();
    let spec = s.dir.join("web.json");
    let spec = spec.to_str().unwrap();
    let cattle = s.run(&["provision", spec, "--no-apply"]).ok().stdout.trim().to_string();
    let pet = s.run(&["provision", spec, "--no-apply", "--logical-id", "pet1"]).ok().stdout.trim().to_string();
    promote(&s.dir);
    terraform(&s.dir, &["init", "-input=false", "-no-color"]);
    terraform(&s.dir, &["apply", "-auto-approve", "-input=false", "-no-color"]);
    assert_eq!(
        state(&s.dir),
        [
            format!("terraform_data.{cattle}"),
            format!("terraform_data.{pet}"),
            "terraform_data.network".into(),
            "terraform_data.web-1-data".into(),
            "terraform_data.web-nfs".into(),
            "terraform_data.web-pet1-data".into(),
        ]
    );
    // Terminate the cattle: its slot goes, the shared global stays for the pet.
    s.run(&["destroy", &cattle, "--yes", "--no-apply"]).ok();
    terraform(&s.dir, &["apply", "-auto-approve", "-input=false", "-no-color"]);
    assert_eq!(
        state(&s.dir),
        [
            format!("terraform_data.{pet}"),
            "terraform_data.network".into(),
            "terraform_data.web-nfs".into(),
            "terraform_data.web-pet1-data".into()
        ]
    );
    s.run(&["destroy", &pet, "--yes"]).ok();
    terraform(&s.dir, &["apply", "-auto-approve", "-input=false", "-no-color"]);
    assert_eq!(state(&s.dir), ["terraform_data.network"]);
}
