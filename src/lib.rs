//! infrakit-tf: manage groups of machines through Terraform.
//!
//! `main` parses the command line and calls [`run`]; [`run`] dispatches to one module per
//! subcommand (`cmd/`), prints the error if there is one, and returns the exit code. Nothing
//! else exits the process. The modules are in tiers, from the pure core (no I/O) up through
//! the OS mechanisms, the locks and journal, the directory, the state guard and the store, the
//! terraform runner, the context and the workspace, to the commands; each uses only its own
//! tier and those below. ARCHITECTURE.md's table is the one statement of them, and a test
//! (`tests/cli/layers.rs`) checks every import against it.
//!
//! Only the CLI is public. The pure core is public to the fuzz targets alone (`fuzz/`, built
//! with `--cfg fuzzing`); everywhere else it is crate-private, so that dead code is reported.

pub mod cli;
pub mod exit;

mod cmd;
mod context;
mod directory;
mod fault;
mod fsio;
mod health;
mod journal;
mod lease;
mod lock;
mod metrics;
mod output;
mod process;
mod signals;
mod state_guard;
mod store;
mod terraform;
mod workspace;

/// The pure core: `pub` for the fuzz targets, crate-private otherwise.
macro_rules! core_modules {
    ($($name:ident),* $(,)?) => {
        $(
            #[cfg(fuzzing)]
            pub mod $name;
            #[cfg(not(fuzzing))]
            #[allow(unreachable_pub)] // their items are `pub` for the fuzz build
            mod $name;
        )*
    };
}
core_modules!(
    cloud_record,
    config,
    confighash,
    converge,
    expand,
    group,
    health_record,
    import_match,
    look,
    lookup,
    names,
    placement_record,
    profile,
    record,
    rollout_record,
    spec,
    template,
    text,
    tfconfig,
    tfoutput
);

use std::process::ExitCode;

use cli::{Cli, Command};
use context::Ctx;

/// The relay terraform's connections to a pooler go through (`store::relay`), when this
/// process was started as one (`infrakit-tf __relay`): not a command of the CLI, so that no
/// help, completion or man page shows it. `None`: it was not.
pub fn relay() -> Option<ExitCode> {
    (std::env::args_os().nth(1).as_deref() == Some(store::relay::COMMAND.as_ref())).then(store::relay::run)
}

/// Runs one command and returns its exit code.
pub fn run(cli: Cli) -> ExitCode {
    let started = std::time::SystemTime::now();
    fsio::note_umask(); // before any thread: the operator's umask, for every file we write
    let ctx = Ctx::new(cli.global);
    fsio::sweep_temp_dirs(); // what killed runs left in TMPDIR
    let measured = cli.command.measured();
    // A command that writes checks the retry policy first: a bad one in infrakit-tf.json
    // changes nothing.
    let checked = if measured.is_some() { ctx.retry().map(drop) } else { Ok(()) };
    let result = checked.and_then(|()| match cli.command {
        Command::Validate(args) => cmd::validate::run(args, &ctx),
        Command::Provision(args) => cmd::provision::run(args, &ctx),
        Command::Destroy(args) => cmd::destroy::run(args, &ctx),
        Command::Label(args) => cmd::label::run(args, &ctx),
        Command::Describe(args) => cmd::describe::run(args, &ctx),
        Command::Reconcile(args) => cmd::reconcile::run(*args, &ctx),
        Command::SweepOrphans(args) => cmd::sweep_orphans::run(args, &ctx),
        Command::Import(args) => cmd::import::run(args, &ctx),
        Command::Migrate => cmd::migrate::run(&ctx),
    });
    let code = match result {
        Ok(()) => exit::Code::Ok,
        Err(err) => {
            ctx.printer.error(&err);
            exit::code_for(&err)
        }
    };
    if let Some(command) = measured {
        cmd::record_metrics(&ctx, command, code as u8, started);
    }
    // Our terraform runs are over: the relay, if one was started, need not outlive us.
    store::relay::done();
    code.into()
}
