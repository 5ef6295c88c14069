//! Loading a run's checkpoint and decoding it against a graph: the state
//! (snapshot plus deltas), the frontier, and what the next step already
//! has (finished tasks' outputs, subgraphs' progress, a workflow's task
//! results).

use std::collections::HashMap;
use std::sync::Arc;

use tollgate_checkpoint::{Blob, CodecError, RunId, Store, StoreError, StoredCheckpoint};

use crate::graph::CompiledGraph;
use crate::state::{State, Write};

use super::access::TaskResults;
use super::driver::SnapshotTracker;
use super::error::RunError;
use super::plan::Frontier;
use super::record::{FrontierRecord, TaskOutputRecord};

/// A run's checkpoint, decoded against a graph.
pub(crate) struct Loaded<S: State> {
    pub(crate) state: S,
    pub(crate) step: u64,
    pub(crate) frontier: Frontier,
    pub(crate) reused: HashMap<u32, (TaskOutputRecord<S::Update>, Blob)>,
    /// Progress records of subgraph tasks of the next step, by task.
    pub(crate) progress: HashMap<u32, Blob>,
    /// A workflow's finished tasks, in the next step.
    pub(crate) tasks: Arc<TaskResults>,
    pub(crate) snapshots: SnapshotTracker,
}

/// Rebuilds the state at step `at` (the last when `None`): newest snapshot
/// at or before it, plus the deltas after it; the frontier; and, for the
/// last step, the stored outputs of the next step's finished tasks.
pub(crate) async fn load<S: State>(
    store: &dyn Store,
    graph: &CompiledGraph<S>,
    run: RunId,
    at: Option<u64>,
) -> Result<Loaded<S>, RunError> {
    decode(graph, store.checkpoint(run, at).await?)
}

/// Decodes a checkpoint read from the store against `graph`.
/// The state of `checkpoint` alone (snapshot and deltas through `graph`'s
/// reducers), with the bytes of deltas read; no frontier, so it reads the
/// state of a run of another version of the graph as well.
pub(crate) fn decode_state<S: State>(
    graph: &CompiledGraph<S>,
    checkpoint: &StoredCheckpoint,
) -> Result<(S, usize), RunError> {
    let run = checkpoint.run.id;
    let decode_error = |step| move |source| decode_failure(run, step, source);
    let mut state: S =
        checkpoint.snapshot.decode().map_err(decode_error(checkpoint.snapshot_step))?;
    let mut delta_bytes = 0;
    for (delta_step, updates) in &checkpoint.deltas {
        let mut writes = Vec::with_capacity(updates.len());
        for update in updates {
            delta_bytes += update.update.stored_len();
            let output: TaskOutputRecord<S::Update> =
                update.update.decode().map_err(decode_error(*delta_step))?;
            if let Some(value) = output.update {
                writes.push(Write { node: Arc::from(update.task.node.as_str()), update: value });
            }
        }
        state
            .apply(graph.schema(), writes)
            .map_err(|source| RunError::InvalidUpdate { step: *delta_step, source })?;
    }
    Ok((state, delta_bytes))
}

pub(crate) fn decode<S: State>(
    graph: &CompiledGraph<S>,
    checkpoint: StoredCheckpoint,
) -> Result<Loaded<S>, RunError> {
    let (run, step) = (checkpoint.run.id, checkpoint.run.step);
    let decode_error = |step| move |source| decode_failure(run, step, source);
    let (state, delta_bytes) = decode_state(graph, &checkpoint)?;
    let frontier_record: FrontierRecord =
        checkpoint.frontier.decode().map_err(decode_error(step))?;
    let frontier = Frontier::from_record(frontier_record, graph, run, step)?;
    let mut reused = HashMap::new();
    for pending in checkpoint.pending {
        let task = frontier.tasks.get(pending.task.index as usize);
        let matches = task.is_some_and(|task| *graph.node(task.node).name == pending.task.node);
        if !matches {
            // A write that does not match the frontier is ignored: the task
            // runs again rather than taking someone else's output.
            tracing::warn!(%run, task = ?pending.task, "ignoring a pending write that does not match the frontier");
            continue;
        }
        let output: TaskOutputRecord<S::Update> =
            pending.update.decode().map_err(decode_error(step + 1))?;
        reused.insert(pending.task.index, (output, pending.update));
    }
    let mut records = checkpoint.progress;
    let tasks = Arc::new(TaskResults::split(&mut records));
    let mut progress = HashMap::new();
    for record in records {
        let task = frontier.tasks.get(record.task.index as usize);
        if task.is_some_and(|task| *graph.node(task.node).name == record.task.node) {
            progress.insert(record.task.index, record.update);
        } else {
            tracing::warn!(%run, task = ?record.task, "ignoring a subgraph's progress that does not match the frontier");
        }
    }
    let snapshots = SnapshotTracker {
        last_size: checkpoint.snapshot.stored_len(),
        delta_bytes,
        steps: checkpoint.deltas.len() as u64,
    };
    Ok(Loaded { state, step, frontier, reused, progress, tasks, snapshots })
}

/// A damaged blob is corruption of that run; an intact one that does not
/// decode means the types changed.
fn decode_failure(run: RunId, step: u64, source: CodecError) -> RunError {
    match source {
        CodecError::ChecksumMismatch { .. }
        | CodecError::Truncated { .. }
        | CodecError::PartMissing { .. } => {
            StoreError::CorruptCheckpoint { run, step, source }.into()
        }
        source => RunError::StateDecode { run, step, source },
    }
}
