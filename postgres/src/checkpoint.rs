//! A run's checkpoint read in one round trip (`RunStore::checkpoint`).
//!
//! The read is a transaction whose statements are sent together
//! (pipelined, in this order) and answered from one snapshot. There are two
//! sets of statements: at the run's last step (the step is read from
//! `runs` inside each statement) and at a step the caller names (`$2`).
//! Two sets rather than one with `coalesce($2, last)`: a statement whose
//! plan depends on whether a parameter is null is planned again at every
//! execution (PostgreSQL keeps choosing a custom plan for it, measured
//! with `pg_prepared_statements.custom_plans`), where these settle on
//! their generic plan after five.

use tollgate_checkpoint::{RunId, StoreError, StoredCheckpoint};

use crate::conn::client_error;
use crate::rows::{
    blob_at, column, damaged, deltas_from_rows, frontier_from_row, interrupt_from_row,
    pending_from_rows, run_from_row, sql_int, Params, RUN_BY_ID,
};
use crate::sql::Sql;
use crate::store::PostgresStore;

/// The statements of one checkpoint read, besides the run's row.
struct Reads {
    /// The newest snapshot at or before the step read.
    snapshot: &'static str,
    /// The steps after that snapshot up to the step read.
    deltas: &'static str,
    /// The step read's frontier (with the one it refers to).
    frontier: &'static str,
    /// The pending writes of the step after it (and progress records),
    /// read only when it is the run's last.
    pending: &'static str,
    /// The interrupts of the step after it, only when it is the last.
    interrupts: &'static str,
}

/// [`Reads`] of the step `$step` (an SQL expression), which is the run's
/// last when `$last` holds.
macro_rules! reads {
    ($step:literal, $last:literal) => {
        Reads {
            snapshot: concat!(
                "SELECT step, payload FROM snapshots WHERE run = $1 AND step <= ",
                $step,
                " ORDER BY step DESC LIMIT 1"
            ),
            deltas: concat!(
                "SELECT step, tasks, nodes, updates FROM steps WHERE run = $1 AND step <= ",
                $step,
                " AND step > (SELECT max(step) FROM snapshots WHERE run = $1 AND step <= ",
                $step,
                ") ORDER BY step"
            ),
            frontier: concat!(
                "SELECT s.frontier, tollgate_referred(s.frontier), f.frontier FROM steps s \
                 LEFT JOIN steps f ON f.run = s.run AND f.step = tollgate_referred(s.frontier) \
                 WHERE s.run = $1 AND s.step = ",
                $step
            ),
            pending: concat!(
                "SELECT task, node, payload FROM pending_writes WHERE run = $1 AND step = ",
                $step,
                " + 1 AND ",
                $last,
                " ORDER BY task"
            ),
            interrupts: concat!(
                "SELECT id, step, task, ordinal, node, kind, payload, decisions, schema, \
                 rejection_routed, decision, raised_at_ms \
                 FROM interrupts WHERE run = $1 AND step = ",
                $step,
                " + 1 AND ",
                $last,
                " ORDER BY task, ordinal"
            ),
        }
    };
}

/// At the run's last step; `$1` the run.
const AT_LAST: Reads = reads!("(SELECT step FROM runs WHERE id = $1)", "true");

/// At step `$2` of run `$1`.
const AT_STEP: Reads = reads!("$2::bigint", "$2::bigint = (SELECT step FROM runs WHERE id = $1)");

/// `run`'s checkpoint at step `at` (its last when `None`).
pub(crate) async fn read_checkpoint(
    store: &PostgresStore,
    run: RunId,
    at: Option<u64>,
) -> Result<StoredCheckpoint, StoreError> {
    let reads = if at.is_some() { &AT_STEP } else { &AT_LAST };
    let unnamed = store.unnamed;
    let client = store.client().await?;
    let (select_run, snapshot, deltas, frontier, pending, interrupts) = tokio::try_join!(
        client.statement(RUN_BY_ID, unnamed),
        client.statement(reads.snapshot, unnamed),
        client.statement(reads.deltas, unnamed),
        client.statement(reads.frontier, unnamed),
        client.statement(reads.pending, unnamed),
        client.statement(reads.interrupts, unnamed),
    )
    .map_err(client_error)?;
    let id = run.to_string();
    let asked = at.map(sql_int);
    let at_step: Params<'_> = [&id, &asked];
    let by_id: Params<'_, 1> = [&id];
    let params: &[_] = if at.is_some() { &at_step } else { &by_id };
    let (_, row, snapshot, deltas, frontier, pending_rows, interrupts, _) = tokio::try_join!(
        client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
        client.row_opt(&select_run, &by_id),
        client.row_opt(&snapshot, params),
        client.rows(&deltas, params),
        client.row_opt(&frontier, params),
        client.rows(&pending, params),
        client.rows(&interrupts, params),
        client.batch_execute("COMMIT"),
    )
    .map_err(client_error)?;
    let mut record = run_from_row(&row.ok_or(StoreError::RunNotFound { run })?)?;
    let current = record.step;
    let step = at.unwrap_or(current);
    if step > current {
        return Err(StoreError::CheckpointNotFound { run, step });
    }
    let missing = |what: &str| damaged(format!("run {run}: step {step} has no {what}"));
    let snapshot = snapshot.ok_or_else(|| missing("snapshot at or before it"))?;
    let frontier = frontier.ok_or_else(|| missing("steps row"))?;
    let snapshot_step = column::<i64>(&snapshot, 0)? as u64;
    let snapshot = blob_at(run, snapshot_step, column(&snapshot, 1)?)?;
    let deltas = deltas_from_rows(run, &deltas)?;
    let frontier = frontier_from_row(run, step, &frontier)?;
    let (pending, progress) = pending_from_rows(run, step, &pending_rows)?;
    let interrupts = interrupts
        .iter()
        .map(|row| interrupt_from_row(run, row))
        .collect::<Result<Vec<_>, StoreError>>()?;
    record.step = step;
    Ok(StoredCheckpoint {
        run: record,
        snapshot_step,
        snapshot,
        deltas,
        frontier,
        pending,
        progress,
        interrupts,
    })
}
