//! `validate SPEC`: every problem of a spec, with its location; exit 0 when there is none.

use anyhow::Result;
use serde::Serialize;

use crate::cli::ValidateArgs;
use crate::cmd::{parse_spec, problems_error, read_spec, spec_name};
use crate::context::Ctx;
use crate::names::Scope;
use crate::spec::{self, Problem};

#[derive(Serialize)]
struct Report {
    spec: String,
    valid: bool,
    problems: Vec<Problem>,
    /// `type.name` of the VM, when valid.
    vm: Option<String>,
    resources: usize,
    /// The group's ID, for a group spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<String>,
}

impl Report {
    fn invalid(spec: String, problems: Vec<Problem>) -> Self {
        Report { spec, valid: false, problems, vm: None, resources: 0, group: None }
    }
}

/// The report on stdout with `--output json`; the default output is the messages on stderr.
fn print_report(ctx: &Ctx, report: &Report) -> Result<()> {
    if ctx.printer.json_output() {
        ctx.printer.json(report)?;
    }
    Ok(())
}

pub(crate) fn run(args: ValidateArgs, ctx: &Ctx) -> Result<()> {
    // The directory's configuration file may declare VM types; a missing directory is fine.
    let profiles = ctx.profiles()?;
    let (label, text) = match read_spec(&args.spec) {
        Ok(read) => read,
        Err(e) => {
            // A spec that cannot be read is reported like one that does not parse: scripts
            // get their report, and the exit code still says which (missing, invalid).
            let problem = Problem { pointer: String::new(), message: format!("{e:#}") };
            print_report(ctx, &Report::invalid(spec_name(&args.spec), vec![problem]))?;
            return Err(e);
        }
    };
    let parsed = parse_spec(&text, &profiles).and_then(|(s, group)| {
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
            logical_id: s.logical_id.as_deref().or(first_logical_id(group.as_ref())).or(stand_in),
            tags: &no_tags,
        };
        match crate::expand::expand(&request, &Default::default()) {
            Ok(_) => Ok((s, group)),
            Err(message) => Err(vec![spec::Problem { pointer: String::new(), message }]),
        }
    });
    let report = match &parsed {
        Ok((s, group)) => Report {
            spec: spec_name(&args.spec),
            valid: true,
            problems: vec![],
            vm: Some(format!("{}.{}", s.vm().rtype, s.vm().name)),
            resources: s.resources.len(),
            group: group.as_ref().map(|g| g.id.clone()),
        },
        Err(problems) => Report::invalid(spec_name(&args.spec), problems.clone()),
    };
    print_report(ctx, &report)?;
    match parsed {
        Ok((s, group)) => {
            let count = |f: fn(&Scope) -> bool| s.resources.iter().filter(|r| f(&r.scope)).count();
            let group = group.map(|g| format!("group `{}` of {}, ", g.id, g.desired())).unwrap_or_default();
            ctx.printer.status(&format!(
                "{label} is valid: {group}VM {}, {} resources ({} dedicated, {} global)",
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

/// A group of pets is checked with its first logical ID.
fn first_logical_id(group: Option<&crate::group::GroupSpec>) -> Option<&str> {
    match &group?.allocation {
        crate::group::Allocation::LogicalIds(ids) => ids.first().map(String::as_str),
        crate::group::Allocation::Size(_) => None,
    }
}
