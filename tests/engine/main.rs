//! Engine integration tests: one binary, one module per feature.
//!
//! - `support`: the `Trace` state, node helpers and the `run` helper.
//! - `conformance`: the state-graph conformance cases of the testkit seed
//!   (linear, conditional, fork/merge, cycle guard, cancellation, errors).
//! - `cancel`: cancelling a run whose step is in flight (tasks dropped once
//!   the run was taken over; a plain cancel lets the step finish).
//! - `codec`: bincode round trips, and refusals at the first write.
//! - `compile`: one case per compile-time validation rule, and exports.
//! - `hitl`: interrupts, decisions, the double-resume race, breakpoints,
//!   fork and update_state.
//! - `properties`: random graphs against a reference model; runs stopped at
//!   any step and continued from a reopened database.
//! - `reducers`: derived reducers, conflicting updates, `Send` fan-out.
//! - `step_guard`: max steps at N-1 / N / N+1, remaining steps, visit limits.
//! - `determinism`: merges never depend on task timing.
//! - `retry`: per-node retry policy.
//! - `events`: sequence numbers, bookends, stored log equals live log.
//! - `durability`: continuing interrupted and failed runs, reused pending
//!   writes, corrupt checkpoints, graph pinning, fencing.
//! - `send_sync`: compile-time `Send`/`Sync` assertions.
//! - `sqlite`: the engine on the SQLite store: reopening, recovery, fencing,
//!   lease renewal.
//! - `store_calls`: what the engine asks of its store: one commit per step,
//!   five writes and one read per pause and resume.
//! - `store_model`: the SQLite store against the reference store on random
//!   sequences of calls, some through a second connection.
//! - `subgraph`: subgraphs: own state, namespaced events, pauses, crashes
//!   and cancels continued inside, `Send` instances, nested drawings.
//! - `workers`: queued runs and workers (claims, release at shutdown,
//!   decided and orphaned runs, foreign graphs).
//! - `schedules`: one run per tick with several workers, missed ticks
//!   after downtime, one-off schedules, schedules across processes.
//! - `workflow_calls`: graphs and workflows called from a workflow.
//! - `workflows`: durable workflows (finished tasks never run again,
//!   parallel tasks, interrupts, changed workflows refused, retries,
//!   cancels between tasks, graphs called as steps, workers).

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod breakpoints;
mod cache;
mod calls;
mod cancel;
mod codec;
mod compile;
mod conformance;
mod determinism;
mod durability;
mod events;
mod history;
mod hitl;
mod properties;
mod reducers;
mod retry;
mod schedules;
mod send_sync;
mod sqlite;
mod step_guard;
mod store_calls;
mod store_model;
mod subgraph;
mod subgraph_breaks;
mod support;
mod workers;
mod workflow_calls;
mod workflows;
