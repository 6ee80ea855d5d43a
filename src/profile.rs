//! VM profiles: which resource types are VMs, where their tags go (a map, or a `k:v` list) and
//! where Init goes (an attribute path, base64 or not). This is data: the built-in table below,
//! `--vm-type` (shaped like `aws_instance` without base64), and the `vm_types` section of the
//! directory's configuration file `infrakit-tf.json`. Expansion consults a profile; no other
//! code names a VM type.
//!
//! Where comments cite the reference (the infrakit plugin, `docs/reference/`): case IDs
//! (`D-01`, `N-04`, ...) are those of `infrakit-cases.md`; "§N" is a section of
//! `infrakit-behaviour.md`, and "bug N" item N of its §14 (known bugs, fixed here).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::exit::invalid;

/// The configuration file, in the managed directory. Terraform ignores it (not `*.tf.json`).
pub const CONFIG_FILE: &str = "infrakit-tf.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TagFormat {
    /// `{"k": "v"}`.
    Map,
    /// `["k:v"]`, sorted (the reference's order was random).
    List,
}

/// How one VM type takes tags and Init.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmProfile {
    /// Attribute path of the tags, e.g. `["tags"]` or `["input", "tags"]`.
    pub tags: Vec<String>,
    pub tag_format: TagFormat,
    /// Lowercase list tags (SoftLayer/IBM do; the attach list keeps its case so that
    /// termination finds the files, which fixes reference bug 4).
    pub lowercase_tags: bool,
    /// Attribute path of the Init script, e.g. `["os_profile", "custom_data"]`.
    pub init: Vec<String>,
    pub init_base64: bool,
    /// SoftLayer/IBM: `hostname` from `@hostname_prefix` and the logical ID or instance ID.
    pub hostname: bool,
    /// AWS: `private_ip = "INSTANCE_LOGICAL_ID"` is replaced by the logical ID.
    pub private_ip_placeholder: bool,
}

impl VmProfile {
    fn new(tags: &str, tag_format: TagFormat, init: &str, init_base64: bool) -> Self {
        VmProfile {
            tags: path(tags),
            tag_format,
            lowercase_tags: false,
            init: path(init),
            init_base64,
            hostname: false,
            private_ip_placeholder: false,
        }
    }

    /// The shape `--vm-type` declares: like `aws_instance` without base64.
    pub fn aws_like() -> Self {
        VmProfile::new("tags", TagFormat::Map, "user_data", false)
    }
}

fn path(dotted: &str) -> Vec<String> {
    dotted.split('.').map(str::to_string).collect()
}

/// How to find, through terraform, the objects of one resource type that an apply cut short
/// made but never recorded (see `workspace::adoption`): a data source, given the tags infrakit-tf
/// writes on every resource of the type, that lists the matching objects' IDs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lookup {
    /// The data source's type, e.g. `aws_instances`.
    pub data_source: String,
    /// Its arguments. A string `"{{tags}}"` stands for the identifying tags (an object);
    /// `{{instance}}`, `{{slot}}`, `{{global}}` for those tags' values and `{{name}}` for the
    /// resource's own `name` attribute, within strings.
    pub arguments: serde_json::Value,
    /// Where the data source lists the IDs: an attribute (`ids`), or a path through a list of
    /// objects (`droplets.*.id`).
    pub ids: String,
    /// Where the resource takes tags (dotted path, a map): the identifying tags are added there
    /// when the spec leaves room (no value there, or a map). `null`: the type is looked up by
    /// something else (a name).
    #[serde(default)]
    pub tags: Option<String>,
}

impl Lookup {
    /// [`Lookup::tags`] as the steps of its path.
    pub fn tag_path(&self) -> Option<Vec<String>> {
        self.tags.as_deref().map(|p| p.split('.').map(str::to_string).collect())
    }

    fn new(data_source: &str, arguments: serde_json::Value, ids: &str, tags: Option<&str>) -> Self {
        Lookup { data_source: data_source.into(), arguments, ids: ids.into(), tags: tags.map(str::to_string) }
    }

    /// The built-in look-ups, for the types a cloud can make twice (a create retried after a
    /// crash makes a second object: IDs are the cloud's, names need not be unique). Not built
    /// in, because a second create fails instead of making a twin: `google_compute_instance`
    /// (names are unique in a project's zone), `azurerm_virtual_machine` (unique in a resource
    /// group; the provider refuses an existing one); `softlayer_virtual_guest` and
    /// `ibm_compute_vm_instance` can be made twice but have no data source that lists by
    /// tags: declare one in `infrakit-tf.json`; `terraform_data` is not in a cloud.
    fn builtin() -> BTreeMap<String, Lookup> {
        use serde_json::json;
        BTreeMap::from([
            (
                "aws_instance".into(),
                Lookup::new(
                    "aws_instances",
                    json!({"instance_tags": "{{tags}}",
                           "instance_state_names": ["pending", "running", "shutting-down", "stopping", "stopped"]}),
                    "ids",
                    Some("tags"),
                ),
            ),
            ("aws_ebs_volume".into(), Lookup::new("aws_ebs_volumes", json!({"tags": "{{tags}}"}), "ids", Some("tags"))),
            (
                // Droplet tags cannot hold `.` or `=`: by name, which a spec makes unique with
                // `{{ var "/self/instId" }}` (a name shared by several droplets is ambiguous:
                // refused, never guessed).
                "digitalocean_droplet".into(),
                Lookup::new(
                    "digitalocean_droplets",
                    json!({"filter": [{"key": "name", "values": ["{{name}}"]}]}),
                    "droplets.*.id",
                    None,
                ),
            ),
        ])
    }
}

/// The set of VM profiles (and look-ups) in force for one run.
#[derive(Debug, Clone)]
pub struct Profiles {
    by_type: BTreeMap<String, VmProfile>,
    lookups: BTreeMap<String, Lookup>,
}

impl Profiles {
    /// The reference's six types, plus `terraform_data` (tags and Init inside `input`).
    pub fn builtin() -> Self {
        use TagFormat::*;
        let softlayer =
            VmProfile { lowercase_tags: true, hostname: true, ..VmProfile::new("tags", List, "user_metadata", false) };
        let by_type = [
            (
                "aws_instance",
                VmProfile { private_ip_placeholder: true, ..VmProfile::new("tags", Map, "user_data", true) },
            ),
            ("azurerm_virtual_machine", VmProfile::new("tags", Map, "os_profile.custom_data", false)),
            ("digitalocean_droplet", VmProfile::new("tags", Map, "user_data", true)),
            ("google_compute_instance", VmProfile::new("tags", Map, "metadata_startup_script", false)),
            ("softlayer_virtual_guest", softlayer.clone()),
            ("ibm_compute_vm_instance", softlayer),
            ("terraform_data", VmProfile::new("input.tags", Map, "input.user_data", false)),
        ]
        .into_iter()
        .map(|(t, p)| (t.to_string(), p))
        .collect();
        Profiles { by_type, lookups: Lookup::builtin() }
    }

    /// Built-ins, then the configuration file in `dir` (if any), then `--vm-type` names.
    pub fn load(dir: &Path, declared: &[String]) -> Result<Self> {
        let mut profiles = Profiles::builtin();
        let config = read_config(dir)?;
        for (name, declared) in config.as_ref().map(|c| c.vm_types.clone()).unwrap_or_default() {
            profiles.by_type.insert(name, declared.into_profile());
        }
        profiles.lookups.extend(config.map(|c| c.lookups).unwrap_or_default());
        for name in declared {
            profiles.by_type.entry(name.clone()).or_insert_with(VmProfile::aws_like);
        }
        Ok(profiles)
    }

    pub fn get(&self, resource_type: &str) -> Option<&VmProfile> {
        self.by_type.get(resource_type)
    }

    pub fn is_vm(&self, resource_type: &str) -> bool {
        self.by_type.contains_key(resource_type)
    }

    /// How objects of `resource_type` are looked up, if they can be.
    pub fn lookup(&self, resource_type: &str) -> Option<&Lookup> {
        self.lookups.get(resource_type)
    }
}

/// `infrakit-tf.json`. Unknown keys are errors, so a typo does not pass silently.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    vm_types: BTreeMap<String, DeclaredVm>,
    /// Group specs `reconcile` converges, relative to the directory.
    #[serde(default)]
    groups: Vec<String>,
    /// Where the managed files and the lock live for several hosts (`store`).
    store: Option<StoreSection>,
    /// Look-ups of the objects an interrupted apply may have made, by resource type, over the
    /// built-in ones.
    #[serde(default)]
    lookups: BTreeMap<String, Lookup>,
    /// How failed terraform runs are run again (README "Running unattended").
    retries: Option<RetrySection>,
    /// Where the metrics of each run go, relative to the directory (`--metrics-file`).
    metrics_file: Option<PathBuf>,
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

/// The configuration file's `retries` section, if it has one.
pub fn retry_section(dir: &Path) -> Result<Option<RetrySection>> {
    Ok(read_config(dir)?.and_then(|c| c.retries))
}

/// The configuration file's `metrics_file`, relative to `dir`, if it has one.
pub fn metrics_file(dir: &Path) -> Result<Option<PathBuf>> {
    Ok(read_config(dir)?.and_then(|c| c.metrics_file).map(|p| dir.join(p)))
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
}

/// The configuration file's `store` section, if it has one.
pub fn store_section(dir: &Path) -> Result<Option<StoreSection>> {
    Ok(read_config(dir)?.and_then(|c| c.store))
}

/// The group specs the configuration file lists (`"groups": [...]`), relative to `dir`.
pub fn configured_groups(dir: &Path) -> Result<Vec<String>> {
    Ok(read_config(dir)?.map(|c| c.groups).unwrap_or_default())
}

fn read_config(dir: &Path) -> Result<Option<Config>> {
    let file = dir.join(CONFIG_FILE);
    match std::fs::read_to_string(&file) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text)
                .map_err(|e| invalid(format!("configuration file `{}` is invalid: {e}", file.display())))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("failed to read `{}`", file.display())),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeclaredVm {
    /// Dotted attribute path of the tags; default `tags`.
    #[serde(default = "default_tags")]
    tags: String,
    #[serde(default = "default_format")]
    tags_format: TagFormat,
    #[serde(default)]
    lowercase_tags: bool,
    /// Dotted attribute path of Init; default `user_data`.
    #[serde(default = "default_init")]
    init: String,
    #[serde(default)]
    init_base64: bool,
}

fn default_tags() -> String {
    "tags".into()
}
fn default_format() -> TagFormat {
    TagFormat::Map
}
fn default_init() -> String {
    "user_data".into()
}

impl DeclaredVm {
    fn into_profile(self) -> VmProfile {
        VmProfile {
            lowercase_tags: self.lowercase_tags,
            ..VmProfile::new(&self.tags, self.tags_format, &self.init, self.init_base64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_matches_the_reference() {
        let p = Profiles::builtin();
        let aws = p.get("aws_instance").unwrap();
        assert_eq!((aws.init.join("."), aws.init_base64, aws.tag_format), ("user_data".into(), true, TagFormat::Map));
        assert!(p.get("digitalocean_droplet").unwrap().init_base64);
        assert_eq!(p.get("azurerm_virtual_machine").unwrap().init, ["os_profile", "custom_data"]);
        assert_eq!(p.get("google_compute_instance").unwrap().init, ["metadata_startup_script"]);
        for sl in ["softlayer_virtual_guest", "ibm_compute_vm_instance"] {
            let sl = p.get(sl).unwrap();
            assert_eq!((sl.tag_format, sl.lowercase_tags, sl.hostname), (TagFormat::List, true, true));
            assert_eq!(sl.init, ["user_metadata"]);
        }
        assert_eq!(p.get("terraform_data").unwrap().tags, ["input", "tags"]);
        assert!(!p.is_vm("aws_ebs_volume"));
    }

    #[test]
    fn config_file_and_flags_declare_more_types() {
        let dir = tempfile::tempdir().unwrap();
        crate::fsio::write_atomic(
            &dir.path().join(CONFIG_FILE),
            br#"{"vm_types": {"libvirt_domain": {"tags": "metadata.tags", "tags_format": "list", "init": "cloudinit", "init_base64": true}}}"#,
            crate::fsio::Perms::Public,
        )
        .unwrap();
        let p = Profiles::load(dir.path(), &["fakecloud_instance".into()]).unwrap();
        let lv = p.get("libvirt_domain").unwrap();
        assert_eq!(
            (lv.tags.clone(), lv.tag_format, lv.init_base64),
            (vec!["metadata".into(), "tags".into()], TagFormat::List, true)
        );
        assert_eq!(p.get("fakecloud_instance").unwrap(), &VmProfile::aws_like());
    }

    #[test]
    fn config_file_typos_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        crate::fsio::write_atomic(&dir.path().join(CONFIG_FILE), br#"{"vm_type": {}}"#, crate::fsio::Perms::Public)
            .unwrap();
        let err = Profiles::load(dir.path(), &[]).unwrap_err();
        assert_eq!(crate::exit::code_for(&err), crate::exit::Code::Invalid);
        assert!(err.to_string().contains("unknown field `vm_type`"), "{err}");
    }
}
