//! The real terraform under test, run directly (not through infrakit-tf): to set a directory
//! up, push a state, or read what terraform's state holds. It is `$INFRAKIT_TF_TEST_TERRAFORM`,
//! else `terraform` on PATH; `.ci/test` provides one. Without one the tests that need it fail:
//! they are never skipped silently.

use std::path::{Path, PathBuf};
use std::process::Command;

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

pub fn state(dir: &Path) -> Vec<String> {
    let shown: serde_json::Value = serde_json::from_str(&terraform(dir, &["show", "-json"])).unwrap();
    let mut addrs: Vec<String> = shown["values"]["root_module"]["resources"]
        .as_array()
        .map(|rs| rs.iter().map(|r| r["address"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    addrs.sort();
    addrs
}

/// The root module's resources in the state of `dir`, as `terraform show -json` prints them,
/// run with `env` (the CLI configuration, a provider's variables).
pub fn shown_resources(dir: &Path, env: &[(&str, &std::ffi::OsStr)]) -> Vec<serde_json::Value> {
    let out = Command::new(terraform_program())
        .args(["show", "-json"])
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    shown["values"]["root_module"]["resources"].as_array().cloned().unwrap_or_default()
}
