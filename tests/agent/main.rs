//! Agent harness tests: the model/tool loop, tool safety, structured
//! output, retries, middleware, memory, blueprints and recovery.
//!
//! - `support`: scripted agents, counting tools, runtimes.
//! - `agent_loop`: trajectories, concurrent tool calls, limits.
//! - `safety`: allowlist, malformed arguments, the approval gate.
//! - `structured`: every structured-output mode and its re-asks.
//! - `retry`: which failures are retried, Retry-After, exhaustion.
//! - `middleware`: hook order and events.
//! - `memory`: threads remember their conversation.
//! - `blueprint`: validation, command tools, continuing from a stored
//!   blueprint in a fresh process, recovery after a crash between turns.
//! - `workflow`: an agent called from a durable workflow, its tool
//!   approval pausing the workflow's run.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod agent_loop;
mod blueprint;
mod memory;
mod middleware;
mod retry;
mod safety;
mod structured;
mod support;
mod workflow;
