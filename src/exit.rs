//! Exit codes are API: scripts and cron branch on them. This is the one table; README and the
//! man pages mirror it, and a test checks that README lists every code.
//!
//! Commands fail with `anyhow::Error`. The few failures a caller must tell apart carry a typed
//! [`Failure`] somewhere in their chain; [`code_for`] walks the chain once, at the top, to pick
//! the exit code. Anything unclassified is exit 1.

use std::fmt;
use std::process::ExitCode;

/// A documented exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Success.
    Ok = 0,
    /// Unexpected error (I/O, a bug): the message says what.
    Error = 1,
    /// Bad command line: unknown flag, malformed `K=V`, malformed instance ID (clap's code).
    Usage = 2,
    /// Invalid input: the spec, a template, a scope or name that would escape the directory.
    Invalid = 3,
    /// Not found: an unknown instance ID, a missing spec file or directory.
    NotFound = 4,
    /// The directory is locked by another infrakit-tf run and `--lock-timeout` ran out (or
    /// `reconcile --no-wait` found it busy).
    Locked = 5,
    /// Confirmation needed (no terminal and no `--yes`) or declined.
    NotConfirmed = 6,
    /// Terraform ran and failed: its diagnostics say why.
    TerraformFailed = 7,
    /// The Terraform state is locked by another terraform process.
    StateLocked = 8,
    /// No usable terraform: not found, or older than 1.0.
    TerraformMissing = 9,
    /// `reconcile --check`: drift or changes are pending.
    Pending = 10,
    /// `reconcile`: the run would destroy more than `--max-destroy` resources, or re-create
    /// more than `--max-create` that should already exist; nothing applied.
    TooManyDestroys = 11,
    /// The directory cannot be written: read-only, full, or no permission. Nothing was changed.
    Unwritable = 12,
    /// Terraform's state is missing, empty, unreadable, of another lineage or older than the
    /// last run recorded, while the directory has live instances: nothing was planned or applied.
    StateLost = 13,
    /// Terraform ran longer than `--terraform-timeout`: it was interrupted, then killed.
    TerraformTimeout = 14,
    /// Interrupted (Ctrl-C or SIGTERM) while terraform ran; it stopped gracefully.
    Interrupted = 130,
}

impl Code {
    /// Every code with its one-line meaning, in order: the table README mirrors.
    pub const TABLE: &'static [(Code, &'static str)] = &[
        (Code::Ok, "success"),
        (Code::Error, "unexpected error (I/O, internal); the message says what"),
        (Code::Usage, "bad command line: unknown flag, malformed K=V or instance ID"),
        (Code::Invalid, "invalid input: spec, template, scope or name; nothing was changed"),
        (Code::NotFound, "not found: unknown instance ID, missing spec file or directory"),
        (Code::Locked, "directory locked by another infrakit-tf run (see --lock-timeout)"),
        (Code::NotConfirmed, "confirmation needed: re-run with --yes, or it was declined"),
        (Code::TerraformFailed, "terraform failed; its errors are shown; see README for what the directory holds"),
        (Code::StateLocked, "the Terraform state is locked by another terraform process"),
        (Code::TerraformMissing, "no usable terraform: not found, or older than 1.0"),
        (Code::Pending, "reconcile --check: drift or changes are pending"),
        (Code::TooManyDestroys, "reconcile would destroy more than --max-destroy (or re-create more than --max-create) resources; nothing applied"),
        (Code::Unwritable, "the directory cannot be written (read-only, full disk, permissions); nothing was changed"),
        (Code::StateLost, "Terraform's state is missing, empty, of another lineage or older than the last run; nothing applied"),
        (Code::TerraformTimeout, "terraform ran longer than --terraform-timeout and was stopped"),
        (Code::Interrupted, "interrupted; terraform stopped gracefully and saved its state"),
    ];
}

/// The exit-code table as help text (the end of `--help` and the man page).
pub fn help_text() -> String {
    let mut text = String::from("Exit codes:\n");
    for (code, meaning) in Code::TABLE {
        text.push_str(&format!("  {:>3}  {meaning}\n", *code as u8));
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

/// The exit code of an error: the first classified failure in its chain, else 1.
pub fn code_for(err: &anyhow::Error) -> Code {
    err.chain().find_map(|e| e.downcast_ref::<Failure>()).map_or(Code::Error, |f| f.code)
}

/// The hint of the first classified failure in the chain, if any.
pub fn hint_for(err: &anyhow::Error) -> Option<&str> {
    err.chain().find_map(|e| e.downcast_ref::<Failure>()).and_then(|f| f.hint.as_deref())
}
