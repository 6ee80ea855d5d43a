//! The directory's configuration file, `infrakit-tf.json`: its schema and its parsing, from
//! text, and which of its keys are each host's own. Pure: the context (`context::Ctx`) reads
//! the file, once a command, and holds the one [`Config`] every reader takes its part from
//! (VM types and look-ups for `profile`, the store, retries, the metrics file, the groups).
//! Unknown keys are errors, so that a typo does not pass silently.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::exit::Failure;
use crate::profile::{DeclaredVm, LookupEntry};

/// The configuration file, in the managed directory. Terraform ignores it (not `*.tf.json`).
pub const CONFIG_FILE: &str = "infrakit-tf.json";

/// `infrakit-tf.json`. A directory without one has the default: every section empty.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// VM types declared over the built-in ones (see `profile`).
    #[serde(default)]
    pub vm_types: BTreeMap<String, DeclaredVm>,
    /// Group specs `reconcile` converges, relative to the directory.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Where the managed files and the lock live for several hosts (`store`).
    pub store: Option<StoreSection>,
    /// Look-ups of the objects an interrupted apply may have made, by resource type, over the
    /// built-in ones.
    #[serde(default)]
    pub lookups: BTreeMap<String, LookupEntry>,
    /// How failed terraform runs are run again (docs/running-unattended.md).
    pub retries: Option<RetrySection>,
    /// Where the metrics of each run go, relative to the directory (`--metrics-file`).
    pub metrics_file: Option<PathBuf>,
}

/// The `retries` section of `infrakit-tf.json`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySection {
    /// Retries after the first try (`--retries` wins); 0: none.
    pub max: Option<u32>,
    /// The first delay (`"2s"`); each retry doubles it.
    pub base_delay: Option<String>,
    /// Patterns that replace the default list.
    pub errors: Option<Vec<String>>,
    /// Patterns added to the list.
    #[serde(default)]
    pub extra_errors: Vec<String>,
}

/// The `store` section of `infrakit-tf.json` (see `store`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// A libpq connection URL (`postgresql://user@host:5432/db`) or `key=value` string.
    pub postgres: Option<String>,
    /// The logical directory's name in the store: the same on every host.
    pub directory: Option<String>,
    /// How long a host's lease on the directory lasts unless renewed (`"30s"`): how long a
    /// host that dies holds the others up.
    pub lease: Option<String>,
    /// Whether the store's connection may go unencrypted to a host that is not this machine
    /// (`sslmode=disable`, or `prefer`/`allow` with a server that declines TLS): the password
    /// then travels in the clear. Off unless asked for.
    #[serde(default)]
    pub plaintext: bool,
}

/// The keys of the document that are each host's own: how it retries and where it writes its
/// metrics change nothing made. (`store.postgres`, the URL, is one too: see
/// [`Config::remove_host_local`].)
const HOST_LOCAL: [&str; 2] = ["retries", "metrics_file"];

impl Config {
    /// Parses the text of `file` (named in the error, exit 3).
    pub fn parse(text: &str, file: &Path) -> Result<Config, Failure> {
        serde_json::from_str(text).map_err(|e| invalid(file, e))
    }

    /// Removes from a document of this file what may differ per host, leaving the
    /// configuration every host must share (`workspace::sync`): the store's URL (a password,
    /// a nearer replica), the retries and the metrics file.
    pub fn remove_host_local(doc: &mut serde_json::Value) {
        if let Some(store) = doc.get_mut("store").and_then(serde_json::Value::as_object_mut) {
            store.remove("postgres");
        }
        if let Some(doc) = doc.as_object_mut() {
            for key in HOST_LOCAL {
                doc.remove(key);
            }
        }
    }
}

/// The configuration file `file` is invalid: `detail` says why (exit 3).
pub fn invalid(file: &Path, detail: impl Display) -> Failure {
    crate::exit::invalid(format!("configuration file `{}` is invalid: {detail}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_typos_are_errors() {
        let err = anyhow::Error::from(Config::parse(r#"{"vm_type": {}}"#, Path::new(CONFIG_FILE)).unwrap_err());
        assert_eq!(crate::exit::code_for(&err), crate::exit::Code::Invalid);
        assert!(err.to_string().contains("unknown field `vm_type`"), "{err}");
    }

    #[test]
    fn host_local_keys_go_and_the_rest_stays() {
        let text = r#"{"groups": ["g.json"], "retries": {"max": 1}, "metrics_file": "m.prom",
                       "store": {"postgres": "postgresql://h/d", "directory": "web"}}"#;
        let config = Config::parse(text, Path::new(CONFIG_FILE)).unwrap();
        assert!(config.retries.is_some() && config.metrics_file.is_some());
        let mut doc: serde_json::Value = serde_json::from_str(text).unwrap();
        Config::remove_host_local(&mut doc);
        assert_eq!(doc, serde_json::json!({"groups": ["g.json"], "store": {"directory": "web"}}));
    }
}
