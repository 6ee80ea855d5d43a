//! Exit codes are API: scripts and cron branch on them. This is the one table; the guide and the
//! man pages mirror it, and a test checks the guide's table (docs/exit-codes-and-environment.md)
//! against it row by row.
//!
//! Commands fail with `anyhow::Error`. The few failures a caller must tell apart carry a typed
//! [`Failure`] somewhere in their chain; [`code_for`] walks the chain once, at the top, to pick
//! the exit code. Anything unclassified is exit 1.

use std::fmt;
use std::process::ExitCode;

/// Declares the exit codes once: each variant with its value and its one-line meaning (the
/// row the guide's table must have, word for word; a test checks it). The macro makes the enum,
/// [`Code::ALL`] and [`Code::meaning`], an exhaustive `match`: a new code cannot lack a row.
macro_rules! exit_codes {
    ($($(#[doc = $doc:literal])* $name:ident = $value:literal => $meaning:literal,)*) => {
        /// A documented exit code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Code {
            $($(#[doc = $doc])* $name = $value,)*
        }

        impl Code {
            /// Every code, in order.
            pub const ALL: &'static [Code] = &[$(Code::$name),*];

            /// The one-line meaning, as the guide's table says it (Markdown backticks included).
            pub fn meaning(self) -> &'static str {
                match self {
                    $(Code::$name => $meaning,)*
                }
            }
        }
    };
}

exit_codes! {
    /// Success.
    Ok = 0 => "success",
    /// Unexpected error (I/O, a bug): the message says what.
    Error = 1 => "unexpected error (I/O, internal); the message says what",
    /// Bad command line: unknown flag, malformed `K=V`, malformed instance ID (clap's code).
    Usage = 2 => "bad command line: unknown flag, malformed `K=V` or instance ID",
    /// Invalid input: the spec, a template, a scope or name that would escape the directory.
    Invalid = 3 => "invalid input: spec, template, scope or name; nothing was changed",
    /// Not found: an unknown instance ID, a missing spec file or directory.
    NotFound = 4 => "not found: unknown instance ID, missing spec file or directory",
    /// The directory is locked by another infrakit-tf run and `--lock-timeout` ran out (or
    /// `reconcile --no-wait` found it busy).
    Locked = 5 => "directory locked by another infrakit-tf run (see `--lock-timeout`; `reconcile --no-wait`: busy)",
    /// Confirmation needed (no terminal and no `--yes`) or declined.
    NotConfirmed = 6 => "confirmation needed: re-run with `--yes`, or it was declined",
    /// Terraform ran and failed: its diagnostics say why.
    TerraformFailed = 7 => "terraform failed; its errors are shown (see \"When terraform fails\")",
    /// The Terraform state is locked by another terraform process.
    StateLocked = 8 => "the Terraform state is locked by another terraform process",
    /// No usable terraform: not found, or older than 1.0.
    TerraformMissing = 9 => "no usable terraform: not found, or older than 1.0",
    /// `reconcile --check`: drift or changes are pending.
    Pending = 10 => "`reconcile --check`: drift or changes are pending",
    /// `reconcile`: the run would destroy more than `--max-destroy` resources; nothing applied.
    TooManyDestroys = 11 => "`reconcile` would destroy more than `--max-destroy` resources; nothing applied",
    /// The directory cannot be written: read-only, full, or no permission. Nothing was changed.
    Unwritable = 12 => "the directory cannot be written (read-only, full disk, permissions); nothing was changed",
    /// Terraform's state cannot be trusted: missing, empty, unreadable, of another lineage or
    /// older than the last run recorded while the directory has live instances; or a state
    /// terraform could not save waits to be pushed; or machines an apply cut short made cannot
    /// be told apart. Nothing was planned or applied.
    StateLost = 13 => "Terraform's state cannot be trusted (missing, empty, of another lineage or older than the last run while live instances exist; an unsaved state waits to be pushed; a cut apply's machines cannot be told apart, or are still to be looked up by `reconcile`: `sweep-orphans` waits for that look-up too); nothing applied (see \"Crashes and recovery\")",
    /// Terraform ran longer than `--terraform-timeout`: it was interrupted, then killed.
    TerraformTimeout = 14 => "terraform ran longer than `--terraform-timeout`: it was interrupted, then killed",
    /// `reconcile`: a rolling update stopped because a replacement was not healthy
    /// (`--health-cmd`); nothing more was destroyed.
    UpdateStopped = 15 => "`reconcile`: a rolling update stopped: a replacement was not healthy (`--health-cmd`); nothing more was destroyed",
    /// The store (PostgreSQL, `store` in infrakit-tf.json) cannot be reached, refused the
    /// connection or what we need, is behind a pooler that does not pool by session
    /// (PgBouncer's transaction or statement pooling), or this host lost its lease on the
    /// directory (terraform, if it ran, was stopped): the change under way was not made, here
    /// or in the store.
    StoreUnavailable = 16 => "the store (PostgreSQL) cannot be reached or refused us (a pooler that does not pool by session included), or this host lost its lease (terraform was stopped); the change under way was not made",
    /// A drain (`Lifecycle.Drain`, `--drain-cmd`) failed or ran out of time, and its member
    /// was kept, not destroyed (`OnDrainFailure: abandon`, the default); everything else the
    /// run had to do was done.
    DrainAbandoned = 17 => "a drain failed and its member was kept (`OnDrainFailure: abandon`)",
    /// `reconcile`: the circuit breaker halted a group's repairs: more of its members were
    /// unhealthy than `Healing.MaxUnhealthy` allows, and none was repaired; everything else the
    /// run had to do was done.
    RepairHalted = 18 => "`reconcile`: repairs halted: more members unhealthy than `MaxUnhealthy` (the circuit breaker); none was repaired",
    /// The look-up of the machines an apply that failed or was cut short may have made
    /// (`lookups` in infrakit-tf.json, or a built-in one) failed for a reason that is not "no
    /// match": which machines exist is not known, so nothing was applied.
    LookupFailed = 19 => "the look-up of what a failed or cut apply may have made failed (see `lookups` in infrakit-tf.json); nothing applied",
    /// `reconcile`: a group's rollout failed (or `--rollback` asked) and its members on the
    /// new spec were replaced by members on its last good spec; everything else the run had to
    /// do was done.
    RolledBack = 20 => "`reconcile`: a rollout was rolled back to the group's last good spec (`AutoRollback`, `--rollback`)",
    /// Interrupted (Ctrl-C or SIGTERM) while terraform ran; it stopped gracefully.
    Interrupted = 130 => "interrupted; terraform stopped gracefully and saved its state",
}

/// The exit-code table as help text (the end of `--help` and the man page), without the guide's
/// Markdown.
pub fn help_text() -> String {
    let mut text = String::from("Exit codes:\n");
    for code in Code::ALL {
        text.push_str(&format!("  {:>3}  {}\n", *code as u8, code.meaning().replace('`', "")));
    }
    text
}

impl From<Code> for ExitCode {
    fn from(code: Code) -> Self {
        ExitCode::from(code as u8)
    }
}

/// A classified failure. Attach one with `.context(Failure::...)` or return it directly; the
/// message shown to the user is its `Display`, preceded by the chain's outer contexts.
#[derive(Debug)]
pub struct Failure {
    pub code: Code,
    pub message: String,
    /// An optional second line: how to fix it.
    pub hint: Option<String>,
}

impl Failure {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Failure { code, message: message.into(), hint: None }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// Shorthand constructors used across commands.
pub fn invalid(message: impl Into<String>) -> Failure {
    Failure::new(Code::Invalid, message)
}

pub fn not_found(message: impl Into<String>) -> Failure {
    Failure::new(Code::NotFound, message)
}

/// The error for a managed directory that does not exist.
pub fn missing_directory(path: &std::path::Path) -> Failure {
    not_found(format!("directory `{}` does not exist", path.display()))
        .hint("create it, or point --dir (or INFRAKIT_TF_DIR) at your Terraform directory")
}

/// The exit code of an error: the first classified failure in its chain, else 1.
pub fn code_for(err: &anyhow::Error) -> Code {
    err.chain().find_map(|e| e.downcast_ref::<Failure>()).map_or(Code::Error, |f| f.code)
}

/// The hint of the first classified failure in the chain, if any.
pub fn hint_for(err: &anyhow::Error) -> Option<&str> {
    err.chain().find_map(|e| e.downcast_ref::<Failure>()).and_then(|f| f.hint.as_deref())
}
