//! The file-name scheme of a managed directory, and the checks on every name that becomes a
//! path or a Terraform address. Pure: strings in, strings out.
//!
//! Managed files are `<base>.tf.json` (live: terraform reads it) or `<base>.tf.json.new`
//! (queued: written, not yet seen by terraform), where `<base>` is one of
//! `instance-<digits>`, `<scopeID>_dedicated_<key>` or `<scope>_global`. Any other file is the
//! user's and is never parsed, changed or deleted.

use std::fmt;

use crate::text::short;

pub const LIVE: &str = ".tf.json";
pub const QUEUED: &str = ".tf.json.new";
/// Import blocks live in this file while an import runs (see `Workspace::carry_out_imports`). Not a
/// managed name: never listed, described or swept.
pub const IMPORT_FILE: &str = "infrakit-tf-import.tf.json";
/// While `sweep-orphans --strays` destroys twins, they are imported into addresses of their own
/// in this file (see `workspace::strays`). Not a managed name: never listed, described or swept.
pub const STRAYS_FILE: &str = "infrakit-tf-strays.tf.json";
/// An empty configuration (`{}`), kept while a directory has no other file terraform reads
/// but its state may still hold machines: without it terraform refuses to plan ("No
/// configuration files") and what the state holds could never be destroyed (see
/// `Workspace::keep_configuration`). Not a managed name: never listed, described or swept.
pub const EMPTY_FILE: &str = "infrakit-tf-empty.tf.json";
/// The highest instance number whose file was removed (see `Directory::last_issued`).
pub const LAST_ID: &str = ".infrakit-tf-last-id";
/// The health record: each healed member's failed checks in a row and when it was first seen
/// (see `health_record`). Not a `.tf.json`: terraform never reads it, and no command takes it
/// for an instance.
pub const HEALTH_RECORD: &str = ".infrakit-tf-health.json";
/// The refresh record: where reconcile's rotating refresh slice stopped (see `presence`).
pub const REFRESH_RECORD: &str = ".infrakit-tf-refresh.json";
/// The cloud record: when machines were created, reads the listing contradicted, strays (see
/// `cloud_record`).
pub const CLOUD_RECORD: &str = ".infrakit-tf-cloud.json";
/// The rollout record: where each group's rollout stands (see `rollout_record`).
pub const ROLLOUT_RECORD: &str = ".infrakit-tf-rollouts.json";
/// The placement record: the zones of each group without capacity now (see
/// `placement_record`).
pub const PLACEMENT_RECORD: &str = ".infrakit-tf-placement.json";

/// Whether a name is one of the files infrakit-tf keeps in a directory (and a store keeps for
/// every host): the managed files (live and queued), the ID record, the health and refresh
/// records and the import blocks.
/// Anything else in the directory is the user's, or local.
pub fn is_ours(name: &str) -> bool {
    if name.contains('/') || name.contains('\0') {
        return false;
    }
    name == LAST_ID
        || name == HEALTH_RECORD
        || name == REFRESH_RECORD
        || name == CLOUD_RECORD
        || name == ROLLOUT_RECORD
        || name == PLACEMENT_RECORD
        || name == IMPORT_FILE
        || name == STRAYS_FILE
        || name == EMPTY_FILE
        || split_file_name(name).and_then(|(base, _)| classify(base)).is_some()
}

/// Whether terraform reads `name` as configuration: `*.tf` or `*.tf.json` (and OpenTofu's
/// `*.tofu`, `*.tofu.json`), not hidden, not an editor's backup (terraform's
/// `configs.IsIgnoredFile`).
pub fn is_configuration(name: &str) -> bool {
    let ignored = name.starts_with('.') || name.ends_with('~') || (name.starts_with('#') && name.ends_with('#'));
    !ignored && [".tf", LIVE, ".tofu", ".tofu.json"].iter().any(|s| name.ends_with(s))
}

/// A cloud ID as part of a terraform name: every character but ASCII letters, digits, `-` and
/// `_` becomes `_`.
pub fn safe_id(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// Whether a managed file is live or queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Suffix {
    Live,
    Queued,
}

impl Suffix {
    pub fn as_str(self) -> &'static str {
        match self {
            Suffix::Live => LIVE,
            Suffix::Queued => QUEUED,
        }
    }
}

/// What a managed base name stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Instance(InstanceId),
    Dedicated { scope_id: String, key: String },
    Global { scope: String },
}

/// Splits a directory entry into its base name and suffix, or `None` for anything that is not a
/// `.tf.json`/`.tf.json.new` file.
pub fn split_file_name(name: &str) -> Option<(&str, Suffix)> {
    if let Some(base) = name.strip_suffix(QUEUED) {
        Some((base, Suffix::Queued))
    } else {
        name.strip_suffix(LIVE).map(|base| (base, Suffix::Live))
    }
}

/// Classifies a base name by our scheme, or `None` for a user file.
pub fn classify(base: &str) -> Option<Kind> {
    if let Ok(id) = base.parse::<InstanceId>() {
        return Some(Kind::Instance(id));
    }
    if let Some((scope_id, key)) = base.split_once("_dedicated_") {
        if is_scope_chars(scope_id) && !key.is_empty() {
            return Some(Kind::Dedicated { scope_id: scope_id.into(), key: key.into() });
        }
        return None;
    }
    let scope = base.strip_suffix("_global")?;
    is_scope_chars(scope).then(|| Kind::Global { scope: scope.into() })
}

pub fn dedicated_base(scope_id: &str, key: &str) -> String {
    format!("{scope_id}_dedicated_{key}")
}

pub fn global_base(scope: &str) -> String {
    format!("{scope}_global")
}

/// An instance ID, `instance-<digits>`. Ordered by its number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(u64);

impl InstanceId {
    pub fn new(n: u64) -> Self {
        InstanceId(n)
    }

    pub fn number(&self) -> u64 {
        self.0
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "instance-{}", self.0)
    }
}

impl std::str::FromStr for InstanceId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{}` is not an instance ID: IDs look like `instance-<digits>`", short(s));
        let digits = s.strip_prefix("instance-").ok_or_else(bad)?;
        // Leading zeros would give two spellings of one number, hence two files for one ID.
        if digits.is_empty()
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || (digits.len() > 1 && digits.starts_with('0'))
        {
            return Err(bad());
        }
        digits.parse().map(InstanceId).map_err(|_| bad())
    }
}

/// The scope of a resource in a spec (`@scope`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Default,
    /// `@dedicated` (scope ID `default`) or `@dedicated-<scopeID>`.
    Dedicated(String),
    /// Any other name: one shared file per name.
    Global(String),
}

impl Scope {
    /// Parses an `@scope` value. Unlike the reference, an unknown `@word` is an error (it is
    /// almost always a typo of `@default` or `@dedicated`), and every scope must be usable as
    /// a file name and a Terraform name prefix.
    pub fn parse(s: &str) -> Result<Scope, String> {
        if s == "@default" {
            return Ok(Scope::Default);
        }
        if s == "@dedicated" {
            return Ok(Scope::Dedicated("default".into()));
        }
        if let Some(id) = s.strip_prefix("@dedicated-") {
            check_scope_name(id, "dedicated scope ID")?;
            return Ok(Scope::Dedicated(id.into()));
        }
        if s.starts_with('@') {
            return Err(format!(
                "unknown scope `{}`: use `@default`, `@dedicated`, `@dedicated-<id>` or a global scope name",
                short(s)
            ));
        }
        check_scope_name(s, "global scope")?;
        Ok(Scope::Global(s.into()))
    }
}

fn is_scope_chars(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Longest logical ID or scope name: a file name (at most 255 bytes) is built from one of them
/// plus a scope ID, a slot and a suffix.
pub const MAX_NAME: usize = 200;

fn check_scope_name(s: &str, what: &str) -> Result<(), String> {
    if s.len() > MAX_NAME {
        return Err(format!("{what} is too long ({} bytes, at most {MAX_NAME})", s.len()));
    }
    if !is_scope_chars(s) {
        return Err(format!(
            "{what} `{}` must be letters, digits, `-` or `_` (it becomes part of a file name)",
            short(s)
        ));
    }
    if s.contains("_dedicated_") || s.ends_with("_global") {
        return Err(format!("{what} `{}` must not contain `_dedicated_` or end in `_global`", short(s)));
    }
    Ok(())
}

/// Checks a name that becomes part of a path: no `/`, no `..`, no NUL, no leading `.`, not
/// empty, no white space.
pub fn check_path_component(s: &str, what: &str) -> Result<(), String> {
    let problem = if s.is_empty() {
        Some("must not be empty")
    } else if s.len() > MAX_NAME {
        Some("is too long (at most 200 bytes)")
    } else if s.contains('/') || s.contains('\\') {
        Some("must not contain `/` or `\\`")
    } else if s.contains("..") {
        Some("must not contain `..`")
    } else if s.contains('\0') {
        Some("must not contain NUL")
    } else if s.starts_with('.') {
        Some("must not start with `.`")
    } else if s.chars().any(char::is_whitespace) {
        Some("must not contain white space")
    } else {
        None
    };
    match problem {
        Some(p) => Err(format!("{what} `{}` {p} (it becomes part of a file name)", short(s))),
        None => Ok(()),
    }
}

/// Checks a logical ID: a path component ([`check_path_component`]) of ASCII letters,
/// digits, `.`, `-`, `_`, `:` and `@` only (names, IP addresses). A template may render it
/// anywhere in a spec, inside a terraform expression too, where no escape keeps a quote, a
/// brace or a parenthesis from being code.
pub fn check_logical_id(s: &str) -> Result<(), String> {
    check_path_component(s, "logical ID")?;
    match s.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '@'))) {
        Some(c) => Err(format!(
            "logical ID `{}` must not contain `{c}`: letters, digits, `.`, `-`, `_`, `:` and `@` only",
            short(s)
        )),
        None => Ok(()),
    }
}

/// Terraform 1.x resource names: a letter or `_`, then letters, digits, `_` or `-`.
pub fn is_terraform_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_are_the_managed_files_the_records_and_the_import_blocks() {
        for kept in [
            "instance-1.tf.json",
            "instance-1.tf.json.new",
            "web_dedicated_1.tf.json",
            "web_global.tf.json.new",
            ".infrakit-tf-last-id",
            ".infrakit-tf-health.json",
            ".infrakit-tf-refresh.json",
            ".infrakit-tf-cloud.json",
            "infrakit-tf-import.tf.json",
            "infrakit-tf-strays.tf.json",
            "infrakit-tf-empty.tf.json",
        ] {
            assert!(is_ours(kept), "{kept}");
        }
        for local in [
            "main.tf",
            "infrakit-tf.json",
            "terraform.tfstate",
            ".infrakit-tf-journal.json",
            ".infrakit-tf-terraform.json",
            "web_dedicated_../../etc.tf.json",
            "a_dedicated_x/y.tf.json",
        ] {
            assert!(!is_ours(local), "{local}");
        }
    }

    #[test]
    fn configuration_is_what_terraform_reads() {
        for read in ["main.tf", "instance-1.tf.json", "net.tofu", "infrakit-tf-empty.tf.json", "a#b.tf"] {
            assert!(is_configuration(read), "{read}");
        }
        for ignored in ["instance-1.tf.json.new", ".hidden.tf", "main.tf~", "#main.tf#", "vars.tfvars", "x.tf.bak"] {
            assert!(!is_configuration(ignored), "{ignored}");
        }
    }

    #[test]
    fn file_names_split_by_suffix() {
        assert_eq!(split_file_name("instance-1.tf.json"), Some(("instance-1", Suffix::Live)));
        assert_eq!(split_file_name("a_global.tf.json.new"), Some(("a_global", Suffix::Queued)));
        assert_eq!(split_file_name("main.tf"), None);
        assert_eq!(split_file_name("x.tf.json.bak"), None);
    }

    #[test]
    fn bases_classify_by_scheme() {
        assert_eq!(classify("instance-42"), Some(Kind::Instance(InstanceId(42))));
        assert_eq!(
            classify("my_group_dedicated_1"),
            Some(Kind::Dedicated { scope_id: "my_group".into(), key: "1".into() })
        );
        assert_eq!(
            classify("Workers2_dedicated_mgr1"),
            Some(Kind::Dedicated { scope_id: "Workers2".into(), key: "mgr1".into() })
        );
        assert_eq!(classify("managers_global"), Some(Kind::Global { scope: "managers".into() }));
        assert_eq!(classify("main"), None);
        assert_eq!(classify("instance-"), None);
        assert_eq!(classify("instance-01"), None);
        assert_eq!(classify("_global"), None);
    }

    #[test]
    fn instance_ids_parse_strictly() {
        assert_eq!("instance-1500000000".parse(), Ok(InstanceId(1_500_000_000)));
        for bad in ["../x", "instance-", "instance-1a", "Instance-1", "instance-01", "1"] {
            assert!(bad.parse::<InstanceId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn scopes_parse_like_the_reference_with_checks() {
        assert_eq!(Scope::parse("@default"), Ok(Scope::Default));
        assert_eq!(Scope::parse("@dedicated"), Ok(Scope::Dedicated("default".into())));
        assert_eq!(Scope::parse("@dedicated-a-b"), Ok(Scope::Dedicated("a-b".into())));
        assert_eq!(Scope::parse("@dedicated-Work_2"), Ok(Scope::Dedicated("Work_2".into())));
        assert_eq!(Scope::parse("managers"), Ok(Scope::Global("managers".into())));
        for bad in ["@Default", "@dedicated-", "../x", "", "a/b", "@dedicatedX", "x_global"] {
            assert!(Scope::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn path_components_cannot_escape() {
        for bad in ["", "a/b", "..", "a..b", ".hidden", "nul\0", "a b"] {
            assert!(check_path_component(bad, "logical ID").is_err(), "{bad:?}");
        }
        for good in ["mgr1", "logical:id-2", "logical.id-1", "LID1"] {
            assert!(check_path_component(good, "logical ID").is_ok(), "{good}");
        }
    }

    #[test]
    fn logical_ids_are_names_never_code() {
        for good in ["mgr1", "10.0.0.1", "fe80::1", "w_1-a", "db@east"] {
            assert_eq!(check_logical_id(good), Ok(()), "{good}");
        }
        for bad in ["x\",file(\"/etc/hostname\")}", "a${b}", "a%{b}", "a'b", "a(b)", "a,b", "a=b", "../x", ""] {
            assert!(check_logical_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn terraform_names() {
        assert!(is_terraform_name("instance-1-data"));
        assert!(is_terraform_name("_x"));
        assert!(!is_terraform_name("1-data"));
        assert!(!is_terraform_name("logical:id-2-fs"));
        assert!(!is_terraform_name(""));
    }
}
