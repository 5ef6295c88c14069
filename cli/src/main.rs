//! The `tollgate` command line.
//!
//! Its commands (`run`, `runs list|show|resume|reject|events|continue`,
//! `serve`) need the durable SQLite store and arrive with it; today the
//! binary answers `--version` and `--help` and refuses anything else with
//! exit code 2 (bad usage).

use std::process::ExitCode;

use clap::Parser;

/// Durable state-graph workflows for LLM agents.
#[derive(Parser, Debug)]
#[command(name = "tollgate", version, about, long_about = None)]
struct Cli {}

fn main() -> ExitCode {
    let _cli = Cli::parse();
    eprintln!("tollgate: no commands yet; `run` and `runs ...` arrive with the durable store");
    ExitCode::from(2)
}
