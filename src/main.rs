use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    infrakit_tf::run(infrakit_tf::cli::Cli::parse())
}
