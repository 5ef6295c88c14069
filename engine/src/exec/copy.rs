//! Copying a thread whole (LangGraph's `threads.copy`): every run of it,
//! oldest first, as a new run of another thread holding the same
//! checkpoints (input, each step's updates and frontier, so their
//! sources, authors and next nodes; their times) and ending the same way
//! (status, failure, a paused step's open interrupts with the decisions
//! it has, its finished tasks' writes and its subgraphs' progress). The
//! copy's runs go on apart from the source's. Their logs are not copied:
//! a copied run has its checkpoints, not its events. Records are copied
//! as stored, so no graph is needed.

use tollgate_checkpoint::{
    InterruptRecord, NewRun, Owner, RunId, RunRecord, RunStatus, StepRecord, StoreError,
    TaskProgress, TaskWrite, Transition,
};

use super::error::RunError;
use super::executor::Executor;
use crate::event::{Clock, SystemClock};

/// How long the copying process holds a copied run until its last write.
const COPY_LEASE_MS: i64 = 60_000;

impl Executor {
    /// Copies every run of `thread`, oldest first, onto `into` (a thread
    /// of no runs). The new runs' ids, oldest first. A thread with a run
    /// in flight (`running` or `queued`) is refused
    /// ([`StoreError::ThreadBusy`]): copy it once it settles.
    pub async fn copy_thread(&self, thread: &str, into: &str) -> Result<Vec<RunId>, RunError> {
        let runs = self.thread_runs(thread).await?;
        if let Some(busy) =
            runs.iter().find(|run| matches!(run.status, RunStatus::Running | RunStatus::Queued))
        {
            return Err(StoreError::ThreadBusy {
                thread: thread.to_owned(),
                run: busy.id,
                status: busy.status,
            }
            .into());
        }
        let mut copies = Vec::with_capacity(runs.len());
        for source in runs.iter().rev() {
            copies.push(self.copy_run(source, into).await?);
        }
        Ok(copies)
    }

    /// Copies run `source` as a new run of `thread`.
    async fn copy_run(&self, source: &RunRecord, thread: &str) -> Result<RunId, RunError> {
        let store = &*self.store;
        let id = RunId::new();
        let lease = SystemClock.now_ms() + COPY_LEASE_MS;
        let input = store.checkpoint(source.id, Some(0)).await?;
        let times = store.history(source.id, None, source.step + 1).await?.checkpoints;
        let at = |step: u64| {
            times.iter().find(|info| info.step == step).map_or(source.updated_at_ms, |i| i.at_ms)
        };
        store
            .create_run(NewRun {
                id,
                graph: source.graph.clone(),
                thread: Some(thread.to_owned()),
                created_at_ms: source.created_at_ms,
                snapshot: input.snapshot,
                frontier: input.frontier,
                events: Vec::new(),
                claim: Some((Owner::current(), lease)),
                attachment: store.attachment(source.id).await?,
                thread_turn: None,
                trace: None,
            })
            .await?;
        for step in 1..=source.step {
            let checkpoint = store.checkpoint(source.id, Some(step)).await?;
            let updates = checkpoint
                .deltas
                .iter()
                .find(|(delta, _)| *delta == step)
                .map(|(_, updates)| updates.clone())
                .unwrap_or_default();
            let snapshot = (checkpoint.snapshot_step == step).then_some(checkpoint.snapshot);
            let record = StepRecord { step, updates, snapshot, frontier: checkpoint.frontier };
            store.commit(transition(id, Some(record), RunStatus::Running, at(step), lease)).await?;
        }
        // The step in flight, as the source left it.
        let last = store.checkpoint(source.id, None).await?;
        if !last.pending.is_empty() {
            store.put_task_writes(TaskWrite { run: id, epoch: 1, updates: last.pending }).await?;
        }
        for progress in last.progress {
            store
                .put_task_progress(TaskProgress { run: id, epoch: 1, progress, events: Vec::new() })
                .await?;
        }
        let mut end = transition(id, None, source.status, source.updated_at_ms, lease);
        end.lease_until_ms = None;
        end.failure = source.failure.clone();
        end.interrupts = last.interrupts.into_iter().map(|i| renamed(i, source.id, id)).collect();
        store.commit(end).await?;
        Ok(id)
    }
}

/// A transition of a copied run (held at epoch 1 by the copying process).
fn transition(
    run: RunId,
    step: Option<StepRecord>,
    status: RunStatus,
    at_ms: i64,
    lease: i64,
) -> Transition {
    Transition {
        run,
        epoch: 1,
        step,
        status,
        failure: None,
        events: Vec::new(),
        at_ms,
        lease_until_ms: Some(lease),
        interrupts: Vec::new(),
    }
}

/// An interrupt of run `from` as one of its copy `to`: its id names the
/// copy (ids are `RUN.STEP.TASK.N`).
fn renamed(mut interrupt: InterruptRecord, from: RunId, to: RunId) -> InterruptRecord {
    if let Some(rest) = interrupt.id.strip_prefix(&from.to_string()) {
        interrupt.id = format!("{to}{rest}");
    }
    interrupt
}
