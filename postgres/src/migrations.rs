//! The PostgreSQL schema, as the migrations that build it.
//!
//! Every write of the [`Store`](tollgate_checkpoint::Store) contract is one
//! SQL function call: one round trip, one transaction (steps of running
//! runs committing at the same moment share one: `commit.rs`). A function
//! checks the writer (row lock, status, epoch, step, event sequence) before
//! it writes anything and raises one of the `TG...` SQLSTATEs (mapped by
//! `store::Refusal`) when it refuses, so a refused call changes nothing
//! (`tollgate_commit_steps` instead leaves the steps it refuses unwritten
//! and says which it wrote).

/// Migrations in order: `MIGRATIONS[i]` takes the schema from version `i`
/// to `i + 1`, one numbered file each in `postgres/migrations/` (what it
/// does and why, at its top). Never edit one that has shipped; add the
/// next file and name it here.
pub(crate) const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_runs_steps_and_writes.sql"),
    include_str!("../migrations/0002_decision_failure.sql"),
    include_str!("../migrations/0003_watchers.sql"),
    include_str!("../migrations/0004_decisions_answer_several.sql"),
    include_str!("../migrations/0005_node_cache.sql"),
    include_str!("../migrations/0006_task_progress.sql"),
    include_str!("../migrations/0007_run_trace.sql"),
    include_str!("../migrations/0008_interrupts_function.sql"),
    include_str!("../migrations/0009_compact_event_lines.sql"),
    include_str!("../migrations/0010_event_line_fields.sql"),
    include_str!("../migrations/0011_frontier_in_full.sql"),
    include_str!("../migrations/0012_commit_steps.sql"),
    include_str!("../migrations/0013_announce_status.sql"),
    include_str!("../migrations/0014_announce_streams.sql"),
    include_str!("../migrations/0015_interrupt_ordinals.sql"),
    include_str!("../migrations/0016_threads.sql"),
    include_str!("../migrations/0017_items.sql"),
    include_str!("../migrations/0018_queued_wake.sql"),
    include_str!("../migrations/0019_schedules.sql"),
    include_str!("../migrations/0020_outbox.sql"),
    include_str!("../migrations/0021_outbox_gates.sql"),
    include_str!("../migrations/0022_thread_search.sql"),
    include_str!("../migrations/0023_request_keys.sql"),
    include_str!("../migrations/0024_thread_ttl.sql"),
    include_str!("../migrations/0025_thread_owner.sql"),
    include_str!("../migrations/0026_thread_reviewers.sql"),
    include_str!("../migrations/0027_thread_owner_status.sql"),
];
