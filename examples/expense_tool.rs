//! A team's own command line: every `tollgate` command, for blueprints
//! and for the team's Rust graphs (`expenses`, `slow`).
//!
//! ```sh
//! cargo run --example expense_tool -- --db team.db run --graph expenses --input '{"amount": 500}'
//! cargo run --example expense_tool -- --db team.db runs resume RUN_ID --approve
//! cargo run --example expense_tool -- --db team.db serve
//! ```

#[path = "shared/expenses.rs"]
mod expenses;

fn main() -> std::process::ExitCode {
    let graphs = tollgate_server::Graphs::new()
        .graph_with_input_schema(expenses::expenses(), expenses::input_schema())
        .graph(expenses::slow());
    tollgate_cli::main_with(graphs)
}
