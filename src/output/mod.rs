//! The output layer: data to stdout, messages to stderr, progress, confirmations. Commands
//! build a report and hand it here; nothing else prints (clippy's `print_stdout` and
//! `print_stderr` are denied everywhere else), and only this layer asks whether stdout or
//! stderr is a terminal. A closed stdout (`| head`) is not an error. Stderr that cannot be
//! written (`2>/dev/full`, a closed pipe) loses the messages, nothing more: the exit code and
//! stdout stay what they would be ([`say`]). Clippy's bans on `stdout()`, `stderr()` and
//! `is_terminal()` are lifted on the functions here that use them, one by one.
#![allow(clippy::print_stderr, clippy::print_stdout)]

mod progress;

pub(crate) use progress::{utc_now, Progress};

use std::io::{self, IsTerminal, Write};

use anyhow::Result;
use serde::Serialize;

use crate::cli::OutputFormat;
use crate::exit::{Code, Failure};

#[derive(Debug, Clone)]
pub(crate) struct Printer {
    pub(crate) format: OutputFormat,
    quiet: bool,
    verbose: bool,
}

impl Printer {
    pub(crate) fn new(format: OutputFormat, quiet: bool, verbose: bool) -> Self {
        Printer { format, quiet, verbose }
    }

    pub(crate) fn quiet(&self) -> bool {
        self.quiet
    }

    pub(crate) fn verbose(&self) -> bool {
        self.verbose
    }

    pub(crate) fn json_output(&self) -> bool {
        self.format == OutputFormat::Json
    }

    /// One line (or block) of data on stdout.
    #[expect(clippy::disallowed_methods, reason = "the output layer: data goes to stdout here")]
    pub(crate) fn data(&self, text: &str) -> Result<()> {
        let mut out = io::stdout().lock();
        let written =
            out.write_all(text.as_bytes()).and_then(
                |()| {
                    if text.ends_with('\n') {
                        Ok(())
                    } else {
                        out.write_all(b"\n")
                    }
                },
            );
        match written.and_then(|()| out.flush()) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            other => Ok(other?),
        }
    }

    /// Data on stdout for a person or for a log: `table` on a terminal, `line` otherwise (one
    /// timestamped line is what cron keeps).
    #[expect(clippy::disallowed_methods, reason = "the output layer alone asks whether it writes to a terminal")]
    pub(crate) fn table_or_line(&self, table: impl FnOnce() -> String, line: impl FnOnce() -> String) -> Result<()> {
        if io::stdout().is_terminal() {
            self.data(&table())
        } else {
            self.data(&line())
        }
    }

    /// A report as pretty JSON on stdout.
    pub(crate) fn json<T: Serialize>(&self, report: &T) -> Result<()> {
        self.data(&serde_json::to_string_pretty(report)?)
    }

    /// A progress or outcome message on stderr; silenced by `--quiet`.
    pub(crate) fn status(&self, message: &str) {
        if !self.quiet {
            say(message);
        }
    }

    /// An event of a long run, on stderr: as is on a terminal, UTC-timestamped otherwise (for
    /// cron logs); silenced by `--quiet`.
    #[expect(clippy::disallowed_methods, reason = "the output layer alone asks whether it writes to a terminal")]
    pub(crate) fn event(&self, message: &str) {
        if io::stderr().is_terminal() {
            self.status(message);
        } else {
            self.status(&format!("{} {message}", utc_now()));
        }
    }

    /// Extra detail on stderr, with `--verbose` only.
    pub(crate) fn detail(&self, message: &str) {
        if self.verbose {
            say(message);
        }
    }

    /// A block of text on stderr, whole, whatever `--quiet` says: the last place for a record
    /// that nothing else could keep.
    pub(crate) fn block(&self, text: &str) {
        say(text);
    }

    /// A warning on stderr; never silenced.
    pub(crate) fn warn(&self, message: &str) {
        say(&format!("warning: {message}"));
    }

    /// One problem of a list (spec problems); never silenced.
    pub(crate) fn problem(&self, message: &str) {
        say(&format!("problem: {message}"));
    }

    /// The final error: the chain on one line, then the hint if there is one.
    pub(crate) fn error(&self, err: &anyhow::Error) {
        say(&format!("error: {err:#}"));
        if let Some(hint) = crate::exit::hint_for(err) {
            say(&format!("hint: {hint}"));
        }
    }

    /// Asks before something destructive. Yes with `--yes`; an error without a terminal (never
    /// a prompt in cron); otherwise asks on the terminal, defaulting to no.
    #[expect(clippy::disallowed_methods, reason = "the output layer alone asks whether it writes to a terminal")]
    pub(crate) fn confirm(&self, assume_yes: bool, question: &str) -> Result<()> {
        if assume_yes {
            return Ok(());
        }
        if !io::stdin().is_terminal() || !io::stderr().is_terminal() {
            return Err(Failure::new(Code::NotConfirmed, format!("not confirmed: {question}"))
                .hint("there is no terminal to ask on: re-run with --yes")
                .into());
        }
        let answer = dialoguer::Confirm::new().with_prompt(question).default(false).interact();
        match answer {
            Ok(true) => Ok(()),
            Ok(false) | Err(_) => Err(Failure::new(Code::NotConfirmed, "cancelled: nothing was changed").into()),
        }
    }
}

/// Another program's output, as it is, on stderr; dropped if it cannot be written (see [`say`]).
#[expect(clippy::disallowed_methods, reason = "the output layer: messages go to stderr here")]
pub(crate) fn relay(bytes: &[u8]) {
    let mut err = io::stderr().lock();
    let _ = err.write_all(bytes).and_then(|()| err.flush());
}

/// One line on stderr. One that cannot be written (a full disk, a closed pipe) is dropped:
/// a message is never worth failing, or panicking (`eprintln!` would), over.
#[expect(clippy::disallowed_methods, reason = "the output layer: messages go to stderr here")]
pub(crate) fn say(line: &str) {
    let mut err = io::stderr().lock();
    let _ = err.write_all(line.as_bytes()).and_then(|()| err.write_all(b"\n")).and_then(|()| err.flush());
}

/// Our stderr, for another program to write to directly: its output as it is, where it
/// cannot be kept to be passed on whole ([`relay`]).
#[expect(clippy::disallowed_methods, reason = "the output layer: messages go to stderr here")]
pub(crate) fn stderr_for_child() -> std::process::Stdio {
    std::process::Stdio::from(io::stderr())
}
