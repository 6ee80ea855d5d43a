//! After terraform could not save its state: with a store, the next writer pushes it by
//! itself when that is safe. The usual cause is a failover mid-apply: terraform's driver takes
//! one host, the server it was given is gone when the apply ends, and it writes
//! `errored.tfstate` instead (exit 7), while our own connections follow the URL to the
//! promoted standby. Everything the push needs is here, under the lease: the file, the
//! store's state row to judge it against (`state_guard::push_verdict`: the same lineage, a
//! serial not older), and a terraform whose connection carries the lease's epoch, so that the
//! state table's fence takes the write.
//!
//! Without a store the file stays refused (`state_guard::check`): a local state that could not
//! be saved is a disk that was full or read-only, for a person to look at.

use anyhow::Result;

use super::{sync, Role, Workspace};
use crate::fsio;
use crate::state_guard::{self, Observed, Push};

impl Workspace<'_> {
    /// With a store, under its lease: pushes the state terraform could not save
    /// (`errored.tfstate`, or where its emergency dump was kept) when that is safe, removes
    /// the file, records the state for every host, and leaves the evidence of a cut apply, so
    /// that this run looks up what the failed apply was making before it plans
    /// ([`Workspace::find_unrecorded`]). A file whose objects the store's state holds already
    /// (pushed by a run stopped before it removed it) is removed. Unsafe (another lineage, an
    /// older serial): refused (exit 13), saying why; nothing is pushed. Nothing to do without
    /// such a file, and left to the usual refusals when another host holds one too.
    pub(super) fn push_errored_state(&mut self) -> Result<()> {
        let Some(file) = state_guard::errored(self.dir.path()) else { return Ok(()) };
        let Role::Shared { store, config, .. } = &mut self.role else { return Ok(()) };
        let me = sync::me(&self.dir);
        let facts = store.state_facts()?;
        if facts.errored.as_ref().is_some_and(|host| *host != me) {
            return Ok(());
        }
        let (bytes, ours) = match crate::fsio::read(&file) {
            Ok(bytes) => {
                let ours = Observed::of(&bytes);
                (bytes, ours)
            }
            Err(e) => (Vec::new(), Observed::Unreadable(e.to_string())),
        };
        let push = match state_guard::push_verdict(&ours, &facts.observed, facts.recorded.as_ref()) {
            Ok(push) => Some(push),
            // Pushed already, by a run stopped before it removed the file: the store's state
            // is a later serial of the same objects.
            Err(_) if store.state_document()?.is_some_and(|doc| state_guard::same_objects(doc.as_bytes(), &bytes)) => {
                None
            }
            Err(why) => {
                return Err(state_guard::errored_refusal(&self.dir, &file, Some(&config.shell_env()), Some(&why)))
            }
        };
        // The evidence first: a run killed after the push still looks up what the apply made.
        let why = self.evidence.as_ref().map_or_else(|| "terraform could not save its state".into(), |e| e.why.clone());
        store.set_evidence(Some(&why))?;
        self.evidence = store.evidence();
        if let Some(push) = &push {
            self.terraform()?.state_push(&file, *push == Push::Force)?;
        }
        fsio::remove(&file)?;
        self.recorded(Ok(()))?;
        let stamp = |observed: &Observed| match observed {
            Observed::State(s) => format!("lineage {}, serial {}", s.lineage, s.serial),
            _ => "none".into(),
        };
        let shown = if file.parent() == Some(self.dir.path()) {
            file.file_name().map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into_owned())
        } else {
            file.display().to_string()
        };
        self.ctx.printer.warn(&match push {
            Some(_) => format!(
                "pushed `{shown}`, the state terraform could not save ({}; the store's was: {}), and removed it",
                stamp(&ours),
                stamp(&facts.observed)
            ),
            None => format!(
                "removed `{shown}`, a state terraform could not save ({}): the store's ({}) holds it already",
                stamp(&ours),
                stamp(&facts.observed)
            ),
        });
        Ok(())
    }
}
