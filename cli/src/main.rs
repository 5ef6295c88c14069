//! The `tollgate` binary: every command of `tollgate_cli`, for blueprints.

fn main() -> std::process::ExitCode {
    tollgate_cli::main_with(tollgate_server::Graphs::new())
}
