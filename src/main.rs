use std::process::ExitCode;

use clap::FromArgMatches;

fn main() -> ExitCode {
    if let Some(code) = infrakit_tf::relay() {
        return code;
    }
    let matches = infrakit_tf::cli::command().get_matches();
    infrakit_tf::run(infrakit_tf::cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit()))
}
