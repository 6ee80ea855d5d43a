//! infrakit-tf: manage groups of machines through Terraform.
//!
//! `main` parses the command line and calls [`run`]; [`run`] dispatches to one module per
//! subcommand (`cmd/`), prints the error if there is one, and returns the exit code. Nothing
//! else exits the process.
//!
//! Mechanisms, each in one place: `fsio` (atomic writes), `lock` (the directory lock),
//! `output` (stdout, stderr, prompts), `directory` (reading the managed directory). Pure
//! logic: `spec` (parsing and checks), `expand` (a spec into file documents), `tfconfig`,
//! `template`, `names`, `profile`, `text` (user values as messages quote them).

pub mod adopt;
pub mod apply;
pub mod cli;
pub mod cmd;
pub mod context;
pub mod directory;
pub mod exit;
pub mod expand;
pub mod fault;
pub mod fsio;
pub mod journal;
pub mod lock;
pub mod names;
pub mod output;
pub mod profile;
pub mod progress;
pub mod signals;
pub mod spec;
pub mod state_guard;
pub mod template;
pub mod terraform;
pub mod text;
pub mod tfconfig;
pub mod tfoutput;

use std::process::ExitCode;

use cli::{Cli, Command};
use context::Ctx;

/// Runs one command and returns its exit code.
pub fn run(cli: Cli) -> ExitCode {
    let ctx = Ctx::new(cli.global);
    let result = match cli.command {
        Command::Validate(args) => cmd::validate::run(args, &ctx),
        Command::Provision(args) => cmd::provision::run(args, &ctx),
        Command::Destroy(args) => cmd::destroy::run(args, &ctx),
        Command::Label(args) => cmd::label::run(args, &ctx),
        Command::Describe(args) => cmd::describe::run(args, &ctx),
        Command::Reconcile(args) => cmd::reconcile::run(args, &ctx),
        Command::SweepOrphans(args) => cmd::sweep_orphans::run(args, &ctx),
        Command::Import(args) => cmd::import::run(args, &ctx),
    };
    match result {
        Ok(()) => exit::Code::Ok.into(),
        Err(err) => {
            ctx.printer.error(&err);
            exit::code_for(&err).into()
        }
    }
}
