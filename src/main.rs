use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    if let Some(code) = infrakit_tf::relay() {
        return code;
    }
    infrakit_tf::run(infrakit_tf::cli::Cli::parse())
}
