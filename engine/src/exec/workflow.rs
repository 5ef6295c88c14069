//! Where a workflow's task results live: progress records of the step in
//! flight (`RunStore::put_task_progress`), one per finished task, under task
//! numbers from [`TASK_RESULTS`] up (the workflow's node is the step's
//! only task). Written once each, with the events since the run's last
//! write; read back with the checkpoint; dropped when the workflow's step
//! commits. A continued run thus reads every finished task's result in
//! the one checkpoint read, and a task costs one write.

use std::sync::Arc;

use tollgate_checkpoint::{Codec, TaskKey, TaskProgress, TaskUpdate};

use crate::event::Event;
use crate::node::{NodeContext, NodeError, Signal};

use super::access::{TaskResults, TASK_RESULTS};
use super::emit::{node_id, Live};
use super::error::json_error;
use super::error::RunError;
use super::token::stop;

/// Schema version of a stored task result (its JSON).
const RESULT_VERSION: u16 = 1;

/// What a stored task says about the task asked for at `position`.
pub(crate) enum Stored<T> {
    /// It finished: its result.
    Done(T),
    /// Nothing is stored: run it.
    Missing,
}

/// The task at `position` as stored, checked against the name asked for.
pub(crate) fn stored<T: serde::de::DeserializeOwned>(
    ctx: &NodeContext,
    position: u32,
    name: &str,
) -> Result<Stored<T>, NodeError> {
    let results = results(ctx)?;
    let guard = results.lock();
    let Some((stored, blob)) = guard.get(&position) else { return Ok(Stored::Missing) };
    if stored != name {
        return Err(NodeError::signal(Signal::Halted(RunError::TaskMismatch {
            run: ctx.run_id,
            position,
            stored: stored.clone(),
            asked: name.to_owned(),
        })));
    }
    blob.decode::<T>().map(Stored::Done).map_err(|source| {
        NodeError::fatal(RunError::StateDecode { run: ctx.run_id, step: ctx.step, source })
    })
}

/// The error that parks a run until `wake` (ms since the Unix epoch).
pub(crate) fn sleep(wake: i64) -> NodeError {
    NodeError::signal(Signal::Sleep(wake))
}

/// Whether the run was asked to stop (cancel, release): a workflow starts
/// no task after that, and its step ends unfinished.
pub(crate) fn stopping(ctx: &NodeContext) -> Result<(), NodeError> {
    let asked = match &ctx.subgraph {
        Some(access) => access.leg.cancel.asked(),
        None => stop::NONE,
    };
    match asked {
        stop::NONE => Ok(()),
        _ => Err(NodeError::signal(Signal::Stopped)),
    }
}

/// Emits one of a workflow's task events under its node.
pub(crate) fn emit(ctx: &NodeContext, event: Event, live: Live) -> Result<(), NodeError> {
    let id = node_id(&ctx.node, ctx.step, ctx.task);
    ctx.emitter.tick();
    ctx.emitter
        .emit(Some((&ctx.node, &id)), event, live)
        .map_err(|source| NodeError::fatal(json_error(ctx.run_id, ctx.step, source)))
}

/// Stores the result of the task at `position` (its `task_completed`
/// event already emitted) with the events since the run's last write.
pub(crate) async fn store(
    ctx: &NodeContext,
    position: u32,
    name: &str,
    result: &serde_json::Value,
) -> Result<(), NodeError> {
    let (run, step) = (ctx.run_id, ctx.step);
    let halted = |error: RunError| NodeError::signal(Signal::Halted(error));
    let blob = Codec::Json
        .encode(result, RESULT_VERSION)
        .map_err(|source| halted(RunError::Encode { run, step, source }))?;
    let access = ctx.subgraph.as_ref().ok_or_else(|| outside(ctx))?;
    let index = TASK_RESULTS.checked_add(position).filter(|index| *index < 1 << 30);
    let index =
        index.ok_or_else(|| NodeError::fatal(TooManyTasks { node: ctx.node.to_string() }))?;
    let key = TaskKey { step, index, node: name.to_owned() };
    {
        let _gate = ctx.emitter.writes.lock().await;
        let progress = TaskProgress {
            run,
            epoch: access.leg.epoch,
            progress: TaskUpdate { task: key, update: blob.clone() },
            events: ctx.emitter.take_batch(),
        };
        tollgate_checkpoint::__failpoint("task:before");
        access.leg.store.put_task_progress(progress).await.map_err(|error| {
            crate::telemetry::count_store_error("put_task_progress", &error);
            halted(RunError::Store(error))
        })?;
        ctx.emitter.committed();
    }
    tollgate_checkpoint::__failpoint("task:after");
    results(ctx)?.lock().insert(position, (name.to_owned(), blob));
    Ok(())
}

/// The node's task results (shared by its attempts).
/// The result the leg's task script gives task `name` at `attempt`, if any.
pub(crate) fn scripted(
    ctx: &NodeContext,
    name: &str,
    attempt: u32,
) -> Option<Result<serde_json::Value, NodeError>> {
    let script = ctx.subgraph.as_ref()?.leg.config.task_script.as_ref()?;
    script.result(name, attempt)
}

fn results(ctx: &NodeContext) -> Result<&Arc<TaskResults>, NodeError> {
    ctx.subgraph.as_ref().map(|access| &access.tasks).ok_or_else(|| outside(ctx))
}

fn outside(ctx: &NodeContext) -> NodeError {
    NodeError::fatal(format!("workflow `{}` runs outside a run's driver", ctx.node))
}

/// A workflow asked for more tasks than a run can store.
#[derive(Debug, thiserror::Error)]
#[error("workflow `{node}` asked for more than 536,870,911 tasks in one run")]
struct TooManyTasks {
    node: String,
}
