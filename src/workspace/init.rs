//! When `terraform init` must run: on first use, when the user's configuration changed, or
//! when a resource type of a new provider appears; not on every command. What `init` last saw
//! is kept in `.terraform/infrakit-tf-init.json`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fsio::{self, Perms};
use crate::names;

#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct InitMarker {
    /// Name, size and mtime of each of the user's configuration files.
    config: BTreeMap<String, (u64, u64)>,
    /// Provider prefixes of the resource types infrakit-tf has written.
    providers: BTreeSet<String>,
}

const MARKER: &str = ".terraform/infrakit-tf-init.json";
pub(super) const LOCK_FILE: &str = ".terraform.lock.hcl";

/// Provider prefixes (`aws` of `aws_instance`) of the resource types the documents declare.
pub(super) fn providers_of<'a>(docs: impl IntoIterator<Item = &'a Value>) -> BTreeSet<String> {
    docs.into_iter()
        .filter_map(|doc| doc.get("resource")?.as_object())
        .flat_map(|types| types.keys())
        .filter_map(|t| t.split('_').next())
        .filter(|p| *p != "terraform")
        .map(str::to_string)
        .collect()
}

/// Whether `dir` needs `init` before terraform sees documents of `providers`.
pub(super) fn needed(dir: &Path, providers: &BTreeSet<String>) -> Result<bool> {
    Ok(match read_marker(dir) {
        None => true,
        Some(m) => m.config != user_config(dir)? || !providers.is_subset(&m.providers),
    })
}

/// Records that `init` ran in `dir` for `providers` (and those it had seen).
pub(super) fn record(dir: &Path, providers: &BTreeSet<String>) -> Result<()> {
    let mut all = read_marker(dir).map(|m| m.providers).unwrap_or_default();
    all.extend(providers.iter().cloned());
    fsio::create_dir_all(&dir.join(".terraform"))?;
    let marker = InitMarker { config: user_config(dir)?, providers: all };
    fsio::write_atomic(&dir.join(MARKER), &serde_json::to_vec_pretty(&marker)?, Perms::Public).map(drop)
}

fn read_marker(dir: &Path) -> Option<InitMarker> {
    crate::fsio::read(dir.join(MARKER)).ok().and_then(|b| serde_json::from_slice(&b).ok())
}

fn user_config(dir: &Path) -> Result<BTreeMap<String, (u64, u64)>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("failed to list `{}`", dir.display()))? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        let is_config =
            [".tf", ".tf.json", ".tofu", ".tofu.json"].iter().any(|s| name.ends_with(s)) || name == LOCK_FILE;
        if is_config && !names::is_ours(&name) {
            let meta = entry.metadata()?;
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            out.insert(name, (meta.len(), mtime));
        }
    }
    Ok(out)
}
