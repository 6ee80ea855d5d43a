//! VM profiles: which resource types are VMs, where their tags go (a map, or a `k:v` list) and
//! where Init goes (an attribute path, base64 or not). This is data: the built-in table below,
//! `--vm-type` (shaped like `aws_instance` without base64), and the `vm_types` section of the
//! directory's configuration file `infrakit-tf.json` (parsed by `config`, handed here). With
//! them, how the objects of a type that an apply cut short may have made are looked up (built
//! in, and the file's `lookups`). Expansion consults a profile; no other code names a VM type.
//!
//! Where comments cite the reference (the infrakit plugin, `docs/reference/`): case IDs
//! (`D-01`, `N-04`, ...) are those of `infrakit-cases.md`; "§N" is a section of
//! `infrakit-behaviour.md`, and "bug N" item N of its §14 (known bugs, fixed here).

use std::collections::BTreeMap;

use serde::Deserialize;

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
/// made but never recorded (see `workspace::lookup`): a data source, given the tags infrakit-tf
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

/// How long after a create, or after an apply that failed or was cut short, the cloud's
/// "not there" is believed, when neither `--settle` nor the type's `settle` says
/// (docs/what-a-reconcile-reads.md): EC2 documents its eventual consistency as lasting "a few
/// minutes" at
/// worst, and its advice is to confirm by backing off up to that.
pub const DEFAULT_SETTLE: std::time::Duration = std::time::Duration::from_secs(120);

/// What a data source says when it matches nothing, where it fails rather than return an
/// empty list: understood as "nothing there" by every look-up (case-insensitive regular
/// expressions). EC2's data sources (`Your query returned no results`), and the singular
/// look-ups of most providers (`no matching EC2 Instance found`, `no matching instances found`).
pub const EMPTY_ERRORS: &[&str] = &[r"your query returned no results", r"no matching [^\n]{0,60}found"];

/// One entry of infrakit-tf.json's `lookups`: a look-up (`data_source`, `arguments`, `ids`,
/// `tags`), and how far its answers are trusted: `settle` (a Go duration) and `empty_errors`
/// (what its data source says when it matches nothing). An entry for a type with a built-in
/// look-up, or without any, may give `settle` and `empty_errors` alone.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawLookup")]
pub struct LookupEntry {
    pub lookup: Option<Lookup>,
    pub settle: Option<std::time::Duration>,
    pub empty_errors: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLookup {
    data_source: Option<String>,
    arguments: Option<serde_json::Value>,
    ids: Option<String>,
    #[serde(default)]
    tags: Option<String>,
    settle: Option<String>,
    #[serde(default)]
    empty_errors: Vec<String>,
}

impl TryFrom<RawLookup> for LookupEntry {
    type Error = String;

    fn try_from(raw: RawLookup) -> Result<Self, String> {
        let settle = raw
            .settle
            .as_deref()
            .map(|s| crate::text::parse_duration(s).map_err(|e| format!("`settle`: {e}")))
            .transpose()?;
        for p in &raw.empty_errors {
            let re = regex::RegexBuilder::new(p)
                .case_insensitive(true)
                .build()
                .map_err(|e| format!("`empty_errors`: `{p}` is not a regular expression: {e}"))?;
            // One that matches anything would take every failure (a throttled call, a typo)
            // for "nothing there", and make machines twice.
            if re.is_match("") {
                return Err(format!("`empty_errors`: `{p}` matches every text; give words the data source says"));
            }
        }
        let lookup = match (raw.data_source, raw.arguments, raw.ids) {
            (Some(data_source), Some(arguments), Some(ids)) => {
                Some(Lookup { data_source, arguments, ids, tags: raw.tags })
            }
            (None, None, None) if raw.tags.is_none() => None,
            _ => {
                return Err("a look-up needs `data_source`, `arguments` and `ids` together (or none of them, with \
                            `settle` or `empty_errors` alone)"
                    .into())
            }
        };
        Ok(LookupEntry { lookup, settle, empty_errors: raw.empty_errors })
    }
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
    /// Each type's settle time, where `lookups` gives one.
    settles: BTreeMap<String, std::time::Duration>,
    /// `--settle`: every type's settle time for this run.
    settle_override: Option<std::time::Duration>,
    /// Each type's own `empty_errors`.
    empty_errors: BTreeMap<String, Vec<String>>,
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
        Profiles {
            by_type,
            lookups: Lookup::builtin(),
            settles: BTreeMap::new(),
            settle_override: None,
            empty_errors: BTreeMap::new(),
        }
    }

    /// Built-ins, then the VM types and look-ups declared in the configuration file (its
    /// `vm_types` and `lookups`, see `config`), then `--vm-type` names (`flags`) and `--settle`
    /// (`settle`: every type's settle time).
    pub fn load(
        vm_types: &BTreeMap<String, DeclaredVm>,
        lookups: &BTreeMap<String, LookupEntry>,
        flags: &[String],
        settle: Option<std::time::Duration>,
    ) -> Self {
        let mut profiles = Profiles::builtin();
        for (name, declared) in vm_types {
            profiles.by_type.insert(name.clone(), declared.to_profile());
        }
        for (rtype, entry) in lookups {
            if let Some(lookup) = &entry.lookup {
                profiles.lookups.insert(rtype.clone(), lookup.clone());
            }
            if let Some(settle) = entry.settle {
                profiles.settles.insert(rtype.clone(), settle);
            }
            if !entry.empty_errors.is_empty() {
                profiles.empty_errors.insert(rtype.clone(), entry.empty_errors.clone());
            }
        }
        for name in flags {
            profiles.by_type.entry(name.clone()).or_insert_with(VmProfile::aws_like);
        }
        profiles.settle_override = settle;
        profiles
    }

    /// How long after a create, or an apply that failed or was cut short, the cloud's "not
    /// there" is believed for objects of `resource_type`: `--settle`, else its `lookups`
    /// entry's `settle`, else [`DEFAULT_SETTLE`].
    pub fn settle(&self, resource_type: &str) -> std::time::Duration {
        self.settle_override.or_else(|| self.settles.get(resource_type).copied()).unwrap_or(DEFAULT_SETTLE)
    }

    /// Whether every answer is trusted at once (`--settle 0s`): no time needs keeping.
    pub fn settles_at_once(&self) -> bool {
        self.settle_override == Some(std::time::Duration::ZERO)
    }

    /// What the data source of `resource_type`'s look-up says when it matches nothing:
    /// [`EMPTY_ERRORS`] and the type's own `empty_errors`.
    pub fn empty_errors(&self, resource_type: &str) -> Vec<String> {
        EMPTY_ERRORS
            .iter()
            .map(|p| p.to_string())
            .chain(self.empty_errors.get(resource_type).into_iter().flatten().cloned())
            .collect()
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

/// A VM type as the configuration file declares it (its `vm_types`), shaped like
/// `aws_instance` where it says nothing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredVm {
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
    fn to_profile(&self) -> VmProfile {
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
        let config = crate::config::Config::parse(
            r#"{"vm_types": {"libvirt_domain": {"tags": "metadata.tags", "tags_format": "list", "init": "cloudinit", "init_base64": true}}}"#,
            std::path::Path::new(crate::config::CONFIG_FILE),
        )
        .unwrap();
        let p = Profiles::load(&config.vm_types, &config.lookups, &["fakecloud_instance".into()], None);
        let lv = p.get("libvirt_domain").unwrap();
        assert_eq!(
            (lv.tags.clone(), lv.tag_format, lv.init_base64),
            (vec!["metadata".into(), "tags".into()], TagFormat::List, true)
        );
        assert_eq!(p.get("fakecloud_instance").unwrap(), &VmProfile::aws_like());
    }

    // A look-up entry gives its settle time and what its data source says of nothing, as a Go
    // duration; for a built-in type, they may come alone; `--settle` overrides every type's.
    #[test]
    fn settle_times_and_empty_errors_come_from_the_lookups_entries() {
        let file = std::path::Path::new(crate::config::CONFIG_FILE);
        let config = crate::config::Config::parse(
            r#"{"lookups": {"aws_instance": {"settle": "1m30s"},
                            "x_vm": {"data_source": "x_vms", "arguments": {"t": "{{tags}}"}, "ids": "ids", "tags": "tags",
                                     "settle": "10s", "empty_errors": ["nothing here"]}}}"#,
            file,
        )
        .unwrap();
        let p = Profiles::load(&config.vm_types, &config.lookups, &[], None);
        assert_eq!(p.settle("aws_instance"), std::time::Duration::from_secs(90));
        assert_eq!(p.lookup("aws_instance").unwrap().data_source, "aws_instances", "the built-in look-up stays");
        assert_eq!(p.settle("x_vm"), std::time::Duration::from_secs(10));
        assert_eq!(p.settle("aws_ebs_volume"), DEFAULT_SETTLE);
        assert_eq!(p.empty_errors("x_vm").last().map(String::as_str), Some("nothing here"));
        assert_eq!(p.empty_errors("aws_instance").len(), EMPTY_ERRORS.len());
        let p = Profiles::load(&config.vm_types, &config.lookups, &[], Some(std::time::Duration::ZERO));
        assert_eq!(p.settle("aws_instance"), std::time::Duration::ZERO);
        for bad in [
            r#"{"lookups": {"aws_instance": {"settle": "soon"}}}"#,
            r#"{"lookups": {"x_vm": {"data_source": "x_vms"}}}"#,
            r#"{"lookups": {"x_vm": {"settle": "1m", "empty_errors": ["("]}}}"#,
            r#"{"lookups": {"x_vm": {"empty_errors": ["|"]}}}"#,
            r#"{"lookups": {"x_vm": {"empty_errors": [".*"]}}}"#,
            r#"{"lookups": {"x_vm": {"settel": "1m"}}}"#,
        ] {
            assert!(crate::config::Config::parse(bad, file).is_err(), "{bad}");
        }
    }
}
