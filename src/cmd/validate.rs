//! `validate SPEC`: every problem of a spec, with its location; exit 0 when there is none.

use anyhow::Result;
use serde::Serialize;

use crate::cli::ValidateArgs;
use crate::cmd::{problems_error, read_spec};
use crate::context::Ctx;
use crate::names::Scope;
use crate::profile::Profiles;
use crate::spec::{self, Problem};

#[derive(Serialize)]
struct Report {
    spec: String,
    valid: bool,
    problems: Vec<Problem>,
    /// `type.name` of the VM, when valid.
    vm: Option<String>,
    resources: usize,
}

pub fn run(args: ValidateArgs, ctx: &Ctx) -> Result<()> {
    // The directory's configuration file may declare VM types; a missing directory is fine.
    let profiles = Profiles::load(&ctx.dir, &ctx.vm_types)?;
    let (label, text) = read_spec(&args.spec)?;
    let parsed = spec::parse(&text, &profiles).and_then(|s| {
        // The checks expansion makes (names Terraform accepts, one address per resource), with a
        // stand-in ID: a spec that validates also provisions.
        // A spec for pets names `/self/logicalId` and gets its logical ID at provision time.
        let stand_in = text.contains("/self/logicalId").then_some("logical-id");
        let id = crate::names::InstanceId::new(1);
        let no_tags = Default::default();
        let request = crate::expand::Request {
            spec: &s,
            profiles: &profiles,
            id: &id,
            logical_id: s.logical_id.as_deref().or(stand_in),
            tags: &no_tags,
        };
        match crate::expand::expand(&request, &Default::default()) {
            Ok(_) => Ok(s),
            Err(message) => Err(vec![spec::Problem { pointer: String::new(), message }]),
        }
    });
    let report = match &parsed {
        Ok(s) => Report {
            spec: label.trim_matches('`').to_string(),
            valid: true,
            problems: vec![],
            vm: Some(format!("{}.{}", s.vm().rtype, s.vm().name)),
            resources: s.resources.len(),
        },
        Err(problems) => Report {
            spec: label.trim_matches('`').to_string(),
            valid: false,
            problems: problems.clone(),
            vm: None,
            resources: 0,
        },
    };
    if ctx.printer.json_output() {
        ctx.printer.json(&report)?;
    }
    match parsed {
        Ok(s) => {
            let count = |f: fn(&Scope) -> bool| s.resources.iter().filter(|r| f(&r.scope)).count();
            ctx.printer.status(&format!(
                "{label} is valid: VM {}, {} resources ({} dedicated, {} global)",
                report.vm.as_deref().unwrap_or_default(),
                s.resources.len(),
                count(|s| matches!(s, Scope::Dedicated(_))),
                count(|s| matches!(s, Scope::Global(_))),
            ));
            Ok(())
        }
        Err(problems) => Err(problems_error(&label, &problems, &ctx.printer)),
    }
}
