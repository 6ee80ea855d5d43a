//! What a command asks of the directory (a [`ChangeSet`]), and what committing it did (an
//! [`Outcome`], part of every writing command's JSON report).

use serde::Serialize;
use serde_json::Value;

use crate::fsio::Perms;
use crate::names::{self, Kind};
use crate::tfoutput::{Changes, ResourceChange};

/// Files to write and files to remove: a command's whole change, committed all or nothing.
#[derive(Debug, Default, Clone)]
pub(crate) struct ChangeSet {
    pub(crate) writes: Vec<FileWrite>,
    /// Names of files to remove (those absent are skipped).
    pub(crate) removals: Vec<String>,
}

/// One file to write: its name in the directory, its document, who may read it.
#[derive(Debug, Clone)]
pub(crate) struct FileWrite {
    pub(crate) name: String,
    pub(crate) doc: Value,
    pub(crate) perms: Perms,
}

impl FileWrite {
    /// A file of the directory, by name: instance files carry Init (user data, which often
    /// holds secrets) and are private; the others are not.
    pub(crate) fn managed(name: String, doc: Value) -> Self {
        let perms = match names::split_file_name(&name).and_then(|(base, _)| names::classify(base)) {
            Some(Kind::Instance(_)) => Perms::Private,
            _ => Perms::Public,
        };
        FileWrite { name, doc, perms }
    }
}

impl ChangeSet {
    pub(crate) fn writing(writes: Vec<FileWrite>) -> Self {
        ChangeSet { writes, removals: Vec::new() }
    }

    pub(crate) fn removing(removals: Vec<String>) -> Self {
        ChangeSet { writes: Vec::new(), removals }
    }

    /// Whether `name` is written or removed by this change.
    pub(crate) fn touches(&self, name: &str) -> bool {
        self.writes.iter().any(|w| w.name == name) || self.removals.iter().any(|r| r == name)
    }

    /// The documents it writes.
    pub(crate) fn docs(&self) -> impl Iterator<Item = &Value> + '_ {
        self.writes.iter().map(|w| &w.doc)
    }
}

/// How a change is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitMode {
    /// `--no-apply`: write and remove files; new files stay queued as `.tf.json.new`.
    Queue,
    /// Write, promote the queue, apply.
    Apply,
    /// `--dry-run`: nothing is written; terraform plans the would-be directory in a mirror.
    DryRun,
}

impl CommitMode {
    pub(crate) fn from_flags(no_apply: bool, dry_run: bool) -> Self {
        match (dry_run, no_apply) {
            (true, _) => CommitMode::DryRun,
            (false, true) => CommitMode::Queue,
            (false, false) => CommitMode::Apply,
        }
    }
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FileAction {
    Created,
    Updated,
    /// Written with the document it already held: left alone.
    Unchanged,
    Removed,
}

impl FileAction {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FileAction::Created => "created",
            FileAction::Updated => "updated",
            FileAction::Unchanged => "unchanged",
            FileAction::Removed => "removed",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct FileChange {
    pub(crate) name: String,
    /// `created`, `updated`, `unchanged` or `removed` (a dry run's report says `dry_run`; the
    /// actions are what it would do).
    pub(crate) action: FileAction,
}

/// What terraform did (or, for a dry run, plans to do).
#[derive(Debug, Default, Serialize)]
pub(crate) struct TfSummary {
    pub(crate) added: u64,
    pub(crate) changed: u64,
    pub(crate) destroyed: u64,
    pub(crate) elapsed_seconds: f64,
    /// Terraform runs started again after a transient error (docs/running-unattended.md).
    pub(crate) retries: u64,
}

impl TfSummary {
    pub(crate) fn new(c: Changes, elapsed: std::time::Duration) -> Self {
        TfSummary {
            added: c.add,
            changed: c.change,
            destroyed: c.remove,
            elapsed_seconds: (elapsed.as_secs_f64() * 100.0).round() / 100.0,
            retries: crate::metrics::retries(),
        }
    }
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Outcome {
    pub(crate) files: Vec<FileChange>,
    /// Whether terraform applied the change.
    pub(crate) applied: bool,
    pub(crate) dry_run: bool,
    /// Present when terraform ran (apply or dry-run plan).
    pub(crate) terraform: Option<TfSummary>,
    /// A dry run's planned changes, `{address, action}`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) planned: Vec<ResourceChange>,
    /// Machines an apply cut short had made without recording them, adopted by this one
    /// (`{address, id}`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) adopted: Vec<crate::lookup::Adopted>,
    /// What an apply that failed still created (addresses), as terraform reported each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) created: Vec<String>,
    /// The error, in the JSON report, when terraform failed after the files were written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

impl Outcome {
    /// Whether any file changed.
    pub(crate) fn changed(&self) -> bool {
        self.files.iter().any(|f| f.action != FileAction::Unchanged)
    }
}

/// A committed change: its outcome, and the error when the apply failed after the files were
/// written (the command still reports what is in the directory, then fails with it).
pub(crate) struct Committed {
    pub(crate) outcome: Outcome,
    pub(crate) failure: Option<anyhow::Error>,
}
