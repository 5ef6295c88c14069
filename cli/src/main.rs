//! The `tollgate` command line. Its commands (`run`, `runs list|show|
//! resume|reject|events|continue`, `serve`) need the durable store and
//! arrive with it; today the binary only reports its version.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|arg| arg == "--version" || arg == "-V") {
        println!("tollgate {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "tollgate {}: no commands yet; `run` and `runs ...` arrive with the durable store",
        env!("CARGO_PKG_VERSION")
    );
    ExitCode::from(2)
}
