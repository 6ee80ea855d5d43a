//! One module per subcommand. Each `run` orchestrates: it resolves, calls the mechanisms
//! (directory, expansion, lock, output) and builds its report; it spawns nothing and writes no
//! file itself.

pub mod describe;
pub mod destroy;
pub mod label;
pub mod provision;
pub mod reconcile;
pub mod sweep_orphans;
pub mod validate;

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};

use crate::exit::{invalid, not_found};
use crate::output::Printer;
use crate::profile::Profiles;
use crate::spec::{self, Problem, Spec};

/// Reads a spec from a path or `-` (stdin). Returns (how to name it in messages, text).
pub fn read_spec(path: &Path) -> Result<(String, String)> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("failed to read the spec from stdin")?;
        return Ok(("<stdin>".into(), text));
    }
    let label = format!("`{}`", path.display());
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((label, text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(not_found(format!("spec file {label} does not exist")).into())
        }
        Err(e) => Err(e).with_context(|| format!("failed to read spec {label}")),
    }
}

/// Parses a spec; problems become one error (one problem) or a list on stderr and an error.
pub fn load_spec(path: &Path, profiles: &Profiles, printer: &Printer) -> Result<Spec> {
    let (label, text) = read_spec(path)?;
    spec::parse(&text, profiles).map_err(|problems| problems_error(&label, &problems, printer))
}

pub fn problems_error(label: &str, problems: &[Problem], printer: &Printer) -> anyhow::Error {
    match problems {
        [one] => invalid(format!("spec {label}: {one}")).into(),
        many => {
            for p in many {
                printer.problem(&format!("spec {label}: {p}"));
            }
            invalid(format!("spec {label} has {} problems (listed above)", many.len())).into()
        }
    }
}
