//! Reading what a running terraform writes: its stdout and stderr are files we follow like
//! `tail -f` ([`Followed`]), decoded line by line into events, a tail of its last words and a
//! count of lines that are not its JSON stream ([`Collected`]).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};

use anyhow::{Context, Result};

use crate::tfoutput::{self, Action, Changes, Diagnostic, Event, ResourceChange};

/// Lines of stderr (and stray stdout) kept for error messages.
const TAIL: usize = 20;

/// Where a run's stdout goes.
pub(super) enum Sink<'a> {
    /// `-json` events, one per line, each handed on as it arrives.
    Events(&'a mut dyn FnMut(&Event)),
    /// Kept whole (`show -json`, `version -json`).
    Capture(&'a mut Vec<u8>),
}

/// What a run's output said, so far.
#[derive(Default)]
pub(super) struct Collected {
    /// The plan's totals (`operation: plan`).
    pub(super) planned: Option<Changes>,
    /// The apply's totals, when it completed.
    pub(super) applied: Option<Changes>,
    pub(super) diagnostics: Vec<Diagnostic>,
    pub(super) drift: Vec<ResourceChange>,
    pub(super) changes: Vec<ResourceChange>,
    /// The last lines of stderr, and of stdout that is not the JSON stream.
    pub(super) tail: VecDeque<String>,
    /// Lines of stdout that are not terraform's JSON stream.
    pub(super) garbage: usize,
    /// The state terraform could not save and printed instead (see `state_guard::keep_dump`).
    pub(super) dump: Option<serde_json::Value>,
    /// What an apply completed, resource by resource (`apply_complete`): what a failed one
    /// did before it failed (its summary comes only when it succeeds).
    pub(super) done: Changes,
    /// The resources an apply began to create (or replace: `apply_start`). Until terraform
    /// has recorded them, their machines may exist in no state: a failed apply that began
    /// any leaves the evidence that has them looked up (`lock::running::note_evidence`).
    pub(super) creating: Vec<String>,
    /// What an apply created, with the new object's ID (`apply_complete` of a create or a
    /// replace): when each machine was made is recorded (`cloud_record`).
    pub(super) created: Vec<(String, String)>,
}

impl Collected {
    /// Takes in what terraform appended to its stdout and stderr. Whether there was any.
    pub(super) fn read(&mut self, stdout: &mut Followed, stderr: &mut Followed, sink: &mut Sink<'_>) -> Result<bool> {
        let got_out = match sink {
            Sink::Capture(buf) => stdout.read_into(buf)?,
            Sink::Events(events) => stdout.read_lines(&mut |line| self.on_stdout_line(line, &mut **events))?,
        };
        let got_err = stderr.read_lines(&mut |line| self.push_tail(line))?;
        Ok(got_out || got_err)
    }

    /// The last lines, when they lack a final newline.
    pub(super) fn finish(&mut self, stdout: &mut Followed, stderr: &mut Followed, sink: &mut Sink<'_>) {
        if let Sink::Events(events) = sink {
            if let Some(line) = stdout.rest() {
                self.on_stdout_line(line, &mut **events);
            }
        }
        if let Some(line) = stderr.rest() {
            self.push_tail(line);
        }
    }

    pub(super) fn last_words(&self) -> Vec<String> {
        self.tail.iter().cloned().collect()
    }

    /// What the run said of its failure, to match transient errors against (`retry`): its
    /// error diagnostics, summary and detail, then its last words.
    pub(super) fn error_text(&self) -> String {
        let errors = self.diagnostics.iter().filter(|d| d.is_error());
        let mut text: Vec<&str> = errors.flat_map(|d| [d.summary.as_str(), d.detail.as_str()]).collect();
        text.extend(self.tail.iter().map(String::as_str));
        text.join("\n")
    }

    fn on_stdout_line(&mut self, line: String, sink: &mut dyn FnMut(&Event)) {
        match tfoutput::parse_line(&line) {
            Some(event) => {
                self.record(&event);
                sink(&event);
            }
            None if line.trim().is_empty() => {}
            None => {
                self.garbage += 1;
                self.push_tail(line);
            }
        }
    }

    fn record(&mut self, event: &Event) {
        match event {
            Event::Diagnostic(d) => self.diagnostics.push(d.clone()),
            Event::Summary(c) if c.operation == tfoutput::Operation::Plan => self.planned = Some(*c),
            Event::Summary(c) => self.applied = Some(*c),
            Event::Drift(c) => self.drift.push(c.clone()),
            Event::PlannedChange(c) => self.changes.push(c.clone()),
            Event::StateDump(state) => self.dump = Some(state.clone()),
            Event::ApplyStart { address, action: Action::Create | Action::Replace } => {
                self.creating.push(address.clone())
            }
            Event::Refresh { .. } => crate::metrics::note_read(crate::metrics::Read::Refresh),
            Event::ApplyStart { address, action: Action::Read } => {
                crate::metrics::note_read(if address.contains(&format!(".{}", crate::look::LISTING_PREFIX)) {
                    crate::metrics::Read::Listing
                } else {
                    crate::metrics::Read::DataSource
                })
            }
            Event::ApplyComplete {
                address, action: action @ (Action::Create | Action::Replace), id: Some(id), ..
            } => {
                self.created.push((address.clone(), id.clone()));
                self.count_done(action);
            }
            Event::ApplyComplete { action, .. } => self.count_done(action),
            _ => {}
        }
    }

    fn count_done(&mut self, action: &Action) {
        match action {
            Action::Create => self.done.add += 1,
            Action::Update => self.done.change += 1,
            Action::Delete => self.done.remove += 1,
            Action::Replace => {
                self.done.add += 1;
                self.done.remove += 1;
            }
            _ => {}
        }
    }

    fn push_tail(&mut self, line: String) {
        if self.tail.len() == TAIL {
            self.tail.pop_front();
        }
        self.tail.push_back(line);
    }
}

/// A file terraform writes (its stdout or stderr) and we follow, like `tail -f`. It is created
/// and at once unlinked: nothing is left behind, whoever dies first.
pub(super) struct Followed {
    reader: File,
    partial: Vec<u8>,
}

impl Followed {
    /// The follower, and the handle to give terraform: a file in memory (`memfd_create`), so
    /// that terraform's output (its emergency state dump above all) is kept when the disk of
    /// the temporary directory is full; an unlinked temporary file where memory files are
    /// not to be had.
    pub(super) fn create() -> Result<(Followed, File)> {
        if let Ok((reader, writer)) = crate::fsio::memory_file(c"infrakit-tf-terraform") {
            return Ok((Followed { reader, partial: Vec::new() }, writer));
        }
        let make = || -> io::Result<(Followed, File)> {
            // Named for its owner: a kill before the unlink leaves it for the next run to remove
            // (`fsio::sweep_temp_dirs`).
            let prefix = format!("infrakit-tf-terraform-{}-", crate::process::me());
            let tmp = tempfile::Builder::new().prefix(&prefix).tempfile()?;
            // A second open file description: its own offset, independent of terraform's.
            let reader = tmp.reopen()?;
            let (writer, path) = tmp.into_parts();
            drop(path); // unlinks the name; both handles stay open
            Ok((Followed { reader, partial: Vec::new() }, writer))
        };
        make().context("failed to create a temporary file for terraform's output")
    }

    /// Appends what is new to `out`. Whether there was anything. What has been read is freed
    /// (a hole punched in the file, its size kept): a file in memory holds only what is still
    /// to be read, however much terraform prints (a `TF_LOG=trace` apply prints gigabytes).
    fn read_into(&mut self, out: &mut Vec<u8>) -> Result<bool> {
        let n = self.reader.read_to_end(out).context("failed to read terraform's output")?;
        if n > 0 {
            crate::fsio::forget_read(&mut self.reader);
        }
        Ok(n > 0)
    }

    /// Calls `line` for each new complete line. Whether there was anything new.
    fn read_lines(&mut self, line: &mut dyn FnMut(String)) -> Result<bool> {
        let start = self.partial.len();
        let mut buf = std::mem::take(&mut self.partial);
        let got = self.read_into(&mut buf);
        self.partial = buf;
        if !got? {
            return Ok(false);
        }
        let mut from = 0;
        let mut search = start;
        while let Some(i) = self.partial[search..].iter().position(|b| *b == b'\n') {
            let end = search + i;
            line(String::from_utf8_lossy(&self.partial[from..end]).into_owned());
            from = end + 1;
            search = from;
        }
        self.partial.drain(..from);
        Ok(true)
    }

    /// What is left after the last newline.
    fn rest(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.partial);
        (!rest.is_empty()).then(|| String::from_utf8_lossy(&rest).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn lines_are_decoded_as_they_arrive_and_the_rest_at_the_end() {
        let (mut out, mut out_w) = Followed::create().unwrap();
        let (mut err, mut err_w) = Followed::create().unwrap();
        let mut seen = Vec::new();
        let mut on_event = |e: &Event| seen.push(e.clone());
        let mut collected = Collected::default();
        let mut sink = Sink::Events(&mut on_event);
        assert!(!collected.read(&mut out, &mut err, &mut sink).unwrap(), "nothing written yet");
        let diag = r#"{"type":"diagnostic","@level":"error","diagnostic":{"severity":"error","summary":"boom"}}"#;
        write!(
            out_w,
            "{diag}\nnot json\n{{\"type\":\"change_summary\",\"changes\":{{\"add\":1,\"operation\":\"plan\"}}}}"
        )
        .unwrap();
        write!(err_w, "last words").unwrap();
        assert!(collected.read(&mut out, &mut err, &mut sink).unwrap());
        collected.finish(&mut out, &mut err, &mut sink);
        assert_eq!(seen.len(), 2, "the diagnostic, then the summary line without its newline");
        assert_eq!(collected.diagnostics[0].summary, "boom");
        assert_eq!(collected.planned.map(|c| c.add), Some(1));
        assert_eq!(collected.garbage, 1);
        assert_eq!(collected.last_words(), ["not json", "last words"]);
    }

    #[test]
    fn what_has_been_read_is_freed() {
        use std::os::unix::fs::MetadataExt;
        let (mut out, mut out_w) = Followed::create().unwrap();
        let line = [b'x'; 1023];
        let mut lines = 0;
        for _ in 0..8 {
            for _ in 0..1024 {
                out_w.write_all(&line).and_then(|()| out_w.write_all(b"\n")).unwrap();
            }
            out.read_lines(&mut |_| lines += 1).unwrap();
        }
        assert_eq!(lines, 8 * 1024);
        let meta = out_w.metadata().unwrap();
        assert_eq!(meta.len(), 8 << 20, "the size is kept");
        assert!(meta.blocks() * 512 <= 1 << 20, "8 MiB written, {} bytes still held", meta.blocks() * 512);
    }
}
