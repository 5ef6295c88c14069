//! Crash tests with real processes (docs/durability.md, how it is tested).
//!
//! This binary is both the parent and the child. Run plainly, it is the
//! parent: for each scenario it starts a child on a file database, kills it
//! (SIGKILL after a random delay, or a named failpoint that aborts it at a
//! precise place), restarts children that recover the run until it
//! completes, and checks:
//! - the final state equals an uncrashed run's;
//! - every checkpoint a child saw acknowledged is in the history;
//! - `PRAGMA integrity_check` is `ok`;
//! - no task whose output was acknowledged durable ran again;
//! - the run ends completed, with no owner.
//!
//! The same for a run inside a subgraph (`nested.rs`), killed at its
//! progress writes too: no inner task whose progress was acknowledged runs
//! again.
//!
//! Long-term memory's batches (`memory.rs`), killed inside a batch's
//! transaction and while writing, on SQLite and on Postgres: every batch
//! whole or absent, every acknowledged batch whole.
//!
//! A durable workflow of 50 tasks (`workflow.rs`), killed at failpoints
//! around a task result's write and at random moments, on SQLite and on
//! Postgres: every task ran, none ran again once its result was
//! acknowledged, at most the task in flight at each kill ran twice.
//!
//! Then 8 processes run 1,000 transitions each on one file: no busy error
//! reaches them and every run's steps are gap-free.
//!
//! With `TOLLGATE_CRASH_CHILD` set it is a child: `start`, `recover`,
//! `memory`, `workflow_start`, `workflow_recover` or `soak`.

#![allow(clippy::unwrap_used)] // Test code: a failure is the report.

mod child;
mod memory;
mod nested;
mod parent;
mod workflow;

fn main() {
    match std::env::var("TOLLGATE_CRASH_CHILD") {
        Ok(mode) => child::main(&mode),
        Err(_) => parent::main(),
    }
}
