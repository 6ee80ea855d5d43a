//! With a real terraform: what infrakit-tf writes is configuration terraform accepts and
//! applies, on `examples/local` (built-in `terraform_data`, no provider download).
//!
//! This commands only queue files; here the test promotes the queue itself (renaming
//! `.tf.json.new` to `.tf.json`, as the apply step will) and runs terraform directly.
//! The terraform used is `$INFRAKIT_TF_TEST_TERRAFORM`, else `terraform` on PATH; `.ci/test`
//! provides one. Without one this test fails: it is never skipped silently.
#![allow(clippy::disallowed_methods)] // the test drives terraform and moves files itself

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::Scratch;

pub fn terraform_program() -> PathBuf {
    if let Some(p) = std::env::var_os("INFRAKIT_TF_TEST_TERRAFORM") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("terraform")).find(|p| p.is_file()));
    found.expect("no terraform: set INFRAKIT_TF_TEST_TERRAFORM or put terraform on PATH (`.ci/test` provides one)")
}

pub fn terraform(dir: &Path, args: &[&str]) -> String {
    let cli_config = dir.parent().unwrap().join("terraformrc");
    if !cli_config.exists() {
        std::fs::File::create(&cli_config).unwrap();
    }
    let out = Command::new(terraform_program())
        .args(args)
        .current_dir(dir)
        .env("TF_CLI_CONFIG_FILE", &cli_config)
        .env("TF_IN_AUTOMATION", "1")
        .env("TF_INPUT", "0")
        .env("CHECKPOINT_DISABLE", "1")
        .env_remove("TF_CLI_ARGS")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "terraform {args:?} failed: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

fn promote(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if let Some(live) = p.to_str().unwrap().strip_suffix(".new") {
            std::fs::rename(&p, live).unwrap();
        }
    }
}

pub fn state(dir: &Path) -> Vec<String> {
    let shown: serde_json::Value = serde_json::from_str(&terraform(dir, &["show", "-json"])).unwrap();
    let mut addrs: Vec<String> = shown["values"]["root_module"]["resources"]
        .as_array()
        .map(|rs| rs.iter().map(|r| r["address"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    addrs.sort();
    addrs
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
