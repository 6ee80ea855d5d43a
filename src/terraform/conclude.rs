//! How a finished run ended, as a typed outcome: success (what its output said), interrupted,
//! timed out, or failed, with the failure classified for the exit code (state lock held,
//! killed by a signal, terraform's first error diagnostic, else its last words).

use std::process::ExitStatus;

use super::follow::Collected;
use super::supervise::Ran;
use super::{Invocation, Terraform};
use crate::exit::{Code, Failure};
use crate::lease::{self, Noticed};
use crate::signals;
use crate::tfoutput::Diagnostic;

/// A run that finished as its verb expects.
pub(super) struct Finished {
    pub(super) collected: Collected,
    /// `plan -detailed-exitcode` exited 2: there are changes.
    pub(super) has_changes: bool,
}

pub(super) fn conclude(tf: &Terraform, inv: &Invocation, ran: Ran) -> anyhow::Result<Finished> {
    let Ran { status, collected, timed_out, killed, fenced } = ran;
    let cmd = tf.display(&inv.args);
    if let Some(state) = collected.dump.as_ref().filter(|_| tf.records_state) {
        return Err(dumped(tf, &cmd, state));
    }
    if let Some(why) = fenced {
        let how = if killed { "interrupted, then killed" } else { "interrupted" };
        return Err(lease::lost_error(Noticed::Runner, &format!("{why}; {cmd} was {how}")));
    }
    if timed_out {
        let how = if killed { "interrupted, then killed" } else { "interrupted" };
        return Err(Failure::new(
            Code::TerraformTimeout,
            format!("{cmd} ran longer than --terraform-timeout ({:?}): it was {how}", tf.timeout),
        )
        .hint(format!("raise --terraform-timeout if it was just slow; {}", tail_hint(&collected.last_words())))
        .into());
    }
    let has_changes = inv.detailed_exitcode && status.code() == Some(2);
    let finished = status.success() || has_changes;
    // What terraform did decides, not the signal alone: an interrupt that reached only us
    // (`kill -INT <our pid>`), or came as terraform finished, changed nothing.
    if signals::stop_requested() && !finished {
        return Err(Failure::new(Code::Interrupted, "interrupted: terraform stopped and saved its state")
            .hint("run the command again, or `infrakit-tf reconcile`, to finish the work")
            .into());
    }
    if finished {
        return Ok(Finished { collected, has_changes });
    }
    Err(failure(&cmd, status, &collected.diagnostics, &collected.last_words()).into())
}

/// A run that failed: killed by a signal, the state lock held by another process, or
/// terraform's first error (else its last words on stderr).
fn failure(cmd: &str, status: ExitStatus, diagnostics: &[Diagnostic], tail: &[String]) -> Failure {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        return Failure::new(
            Code::TerraformFailed,
            format!("{cmd} was killed by signal {signal}{}", signal_name(signal)),
        )
        .hint(tail_hint(tail));
    }
    let code = status.code().unwrap_or(-1);
    // "Error acquiring the state lock" is also what a read-only directory gets; only a lock
    // held by another process comes with that holder's "Lock Info".
    let held = |d: &Diagnostic| d.summary.contains("Error acquiring the state lock") && d.detail.contains("Lock Info");
    if diagnostics.iter().any(held) {
        return Failure::new(
            Code::StateLocked,
            format!("{cmd} failed: the Terraform state is locked by another process"),
        )
        .hint("wait for the other terraform run to finish; `terraform force-unlock` only if it is dead");
    }
    let first = diagnostics.iter().find(|d| d.is_error());
    let what = match first {
        Some(d) => {
            let at = d.address.as_ref().map(|a| format!(" (at {a})")).unwrap_or_default();
            let detail =
                d.detail.lines().next().filter(|l| !l.is_empty()).map(|l| format!(": {l}")).unwrap_or_default();
            format!(": {}{detail}{at}", d.summary)
        }
        None => tail.iter().rev().find(|l| !l.trim().is_empty()).map(|l| format!(": {}", l.trim())).unwrap_or_default(),
    };
    let failure = Failure::new(Code::TerraformFailed, format!("{cmd} failed (exit {code}){what}"));
    if first.is_none() && tail.len() > 1 {
        failure.hint(tail_hint(tail))
    } else {
        failure
    }
}

/// Terraform could not save its state anywhere and printed it instead (its emergency dump): it
/// is the only record of what the run did. Kept where the next run finds it and refuses until
/// it is pushed (`state_guard::keep_dump`), or, when nowhere can hold it, printed whole.
fn dumped(tf: &Terraform, cmd: &str, state: &serde_json::Value) -> anyhow::Error {
    use crate::state_guard::Kept;
    let failure = Failure::new(Code::TerraformFailed, format!("{cmd} could not save terraform's state"));
    match crate::state_guard::keep_dump(&tf.dir, state) {
        Kept::File(path) => failure
            .hint(format!(
                "terraform printed the state instead; it is kept in `{}`: push it where the state belongs (`terraform state push {}`; `-force` when terraform says the serial is the same: this one is the newer), then remove it; until then every plan or apply here is refused",
                path.display(),
                path.display()
            ))
            .into(),
        Kept::Nowhere(text) => {
            tf.printer.block(&format!(
                "-----BEGIN TERRAFORM STATE (could not be saved anywhere)-----\n{text}\n-----END TERRAFORM STATE-----"
            ));
            failure
                .hint("terraform printed the state instead, and no place could hold it: it is above, between the BEGIN and END lines; save it to a file and push it (`terraform state push FILE`) before anything else runs here")
                .into()
        }
    }
}

pub(super) fn tail_hint(tail: &[String]) -> String {
    let lines: Vec<&str> = tail.iter().map(String::as_str).filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        "terraform printed nothing on stderr".into()
    } else {
        format!("terraform's last words:\n  {}", lines.join("\n  "))
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => " (SIGKILL)",
        libc::SIGSEGV => " (SIGSEGV)",
        libc::SIGABRT => " (SIGABRT)",
        libc::SIGTERM => " (SIGTERM)",
        libc::SIGINT => " (SIGINT)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn diag(summary: &str, detail: &str) -> Diagnostic {
        Diagnostic { severity: "error".into(), summary: summary.into(), detail: detail.into(), address: None }
    }

    #[test]
    fn failures_are_classified() {
        let exit1 = ExitStatus::from_raw(1 << 8);
        let lock = diag("Error acquiring the state lock", "Lock Info:\n  ID: x");
        assert_eq!(failure("`terraform apply`", exit1, &[lock], &[]).code, Code::StateLocked);
        let read_only = diag("Error acquiring the state lock", "open terraform.tfstate: read-only file system");
        let f = failure("`terraform apply`", exit1, &[read_only], &[]);
        assert_eq!(f.code, Code::TerraformFailed, "no Lock Info: not another process's lock");
        assert_eq!(
            f.message,
            "`terraform apply` failed (exit 1): Error acquiring the state lock: open terraform.tfstate: read-only file system"
        );
        let killed = failure("`terraform apply`", ExitStatus::from_raw(libc::SIGKILL), &[], &[]);
        assert_eq!(killed.message, "`terraform apply` was killed by signal 9 (SIGKILL)");
        let words = ["panic: boom".to_string(), "goroutine 1".to_string()];
        let f = failure("`terraform plan`", ExitStatus::from_raw(2 << 8), &[], &words);
        assert_eq!(f.message, "`terraform plan` failed (exit 2): goroutine 1");
        assert_eq!(f.hint.as_deref(), Some("terraform's last words:\n  panic: boom\n  goroutine 1"));
    }
}
