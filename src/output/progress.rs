//! Progress of a terraform run, from its `-json` stream. On a terminal: a bar (total from the
//! plan's summary, a tick per finished resource, "still creating… 40s" for slow ones). Without
//! one: plain UTC-timestamped lines on stderr, fit for cron logs. `--quiet` silences progress;
//! `--verbose` adds terraform's own messages. Diagnostics are always shown.

use std::io::IsTerminal;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use indicatif::{ProgressBar, ProgressStyle};

use crate::tfoutput::{Action, Diagnostic, Event};

pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    plain: bool,
    verbose: bool,
    /// The diagnostics shown: terraform repeats some (an interrupted apply says "execution
    /// halted" once per graph walk), and each is shown once.
    shown: std::collections::HashSet<String>,
}

impl Progress {
    #[expect(clippy::disallowed_methods, reason = "the output layer alone asks whether it writes to a terminal")]
    pub(crate) fn new(printer: &super::Printer) -> Self {
        let (quiet, verbose) = (printer.quiet(), printer.verbose());
        let tty = std::io::stderr().is_terminal();
        let bar = (tty && !quiet).then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}")
                    .expect("valid template"),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Progress { bar, plain: !tty && !quiet, verbose, shown: Default::default() }
    }

    pub(crate) fn on_event(&mut self, event: &Event) {
        match event {
            Event::Diagnostic(d) => {
                let text = render_diagnostic(d);
                if self.shown.insert(text.clone()) {
                    self.println(&text);
                }
            }
            Event::Summary(c) if c.operation == crate::tfoutput::Operation::Plan => {
                if let Some(bar) = &self.bar {
                    bar.set_length(c.total());
                }
                self.line(&format!("plan: {} to add, {} to change, {} to destroy", c.add, c.change, c.remove));
            }
            Event::ApplyStart { address, action } => self.step(&format!("{} {address}", ing(action)), false),
            Event::ApplyProgress { address, action, elapsed } => {
                self.step(&format!("still {} {address}… {elapsed}s", ing(action)), false)
            }
            Event::ApplyComplete { address, action, elapsed, .. } => {
                self.step(&format!("{} {address} ({elapsed}s)", done(action)), true)
            }
            Event::ApplyErrored { address, action, elapsed } => {
                self.step(&format!("failed {} {address} ({elapsed}s)", ing(action)), true)
            }
            Event::Message { text, .. } | Event::Refresh { text, .. } if self.verbose => {
                self.println(&format!("terraform: {text}"))
            }
            _ => {}
        }
    }

    /// Ends the bar; a finished run's summary line is the caller's.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    fn step(&self, message: &str, finished: bool) {
        if let Some(bar) = &self.bar {
            bar.set_message(message.to_string());
            if finished {
                bar.inc(1);
            }
        }
        self.line(message);
    }

    /// A timestamped line in plain (non-terminal) mode.
    fn line(&self, message: &str) {
        if self.plain {
            super::say(&format!("{} {message}", utc_now()));
        }
    }

    /// Always shown, above the bar when there is one.
    fn println(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| super::say(text)),
            None if self.plain => super::say(&format!("{} {text}", utc_now())),
            None => super::say(text),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

fn ing(action: &Action) -> &str {
    match action {
        Action::Create => "creating",
        Action::Update => "updating",
        Action::Delete => "destroying",
        Action::Replace => "replacing",
        Action::Read => "reading",
        other => other.as_str(),
    }
}

fn done(action: &Action) -> &str {
    match action {
        Action::Create => "created",
        Action::Update => "updated",
        Action::Delete => "destroyed",
        Action::Replace => "replaced",
        Action::Read => "read",
        other => other.as_str(),
    }
}

/// `terraform error: <summary>` then indented detail and address.
pub(crate) fn render_diagnostic(d: &Diagnostic) -> String {
    let mut text = format!("terraform {}: {}", d.severity, d.summary);
    if let Some(addr) = &d.address {
        text.push_str(&format!("\n  at {addr}"));
    }
    for line in d.detail.lines().filter(|l| !l.trim().is_empty()) {
        text.push_str(&format!("\n  {line}"));
    }
    text
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ` (UTC), without a date crate: days since the epoch to a civil
/// date, after Howard Hinnant's `civil_from_days`.
pub(crate) fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    crate::text::utc(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnostics_read_well() {
        let d = Diagnostic {
            severity: "error".into(),
            summary: "local-exec provisioner error".into(),
            detail: "Error running command 'false': exit status 1.\n".into(),
            address: Some("terraform_data.bad".into()),
        };
        assert_eq!(
            render_diagnostic(&d),
            "terraform error: local-exec provisioner error\n  at terraform_data.bad\n  Error running command 'false': exit status 1."
        );
    }
}
