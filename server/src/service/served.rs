//! Graphs the run service serves, whatever their state type: a blueprint
//! run's graph rebuilt from its attachment, or a typed Rust graph of the
//! process's registry ([`Graphs`]). Each is driven through
//! [`ServedGraph`], which speaks JSON at its edges (input, state) and
//! hands back legs as [`Leg`]s, whatever `S` is inside.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::watch;
use tollgate_checkpoint::{RunId, RunRecord, RunStatus, ScheduleRecord};
use tollgate_engine::{
    CancelToken, CompiledGraph, DecisionRequest, Executor, Resumed, RunConfig, RunError, RunHandle,
    Schedule, State, StatePage, StateSnapshot, ThreadHistoryPage, Workload, Write, WriteContinued,
};

use super::outline::Outline;
use crate::error::ServiceError;

/// A leg of a run this process drives, whatever its graph's state type:
/// what a caller waits for, cancels or releases.
pub struct Leg {
    run: RunId,
    cancel: CancelToken,
    outcome: Pin<Box<dyn Future<Output = Result<RunStatus, RunError>> + Send>>,
}

impl std::fmt::Debug for Leg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leg").field("run", &self.run).finish_non_exhaustive()
    }
}

impl Leg {
    /// The leg of `handle`.
    pub(crate) fn of<S: State>(handle: RunHandle<S>) -> Self {
        let (run, cancel) = (handle.run_id(), handle.cancel_token());
        let outcome = Box::pin(async move { handle.wait().await.map(|outcome| outcome.status) });
        Self { run, cancel, outcome }
    }

    /// The run.
    pub fn run_id(&self) -> RunId {
        self.run
    }

    /// Stops and releases the leg (see `RunHandle::cancel_token`).
    pub(crate) fn cancel_token(&self) -> CancelToken {
        self.cancel.clone()
    }

    /// Waits for the leg to end: the run's status then.
    pub(crate) async fn wait(self) -> Result<RunStatus, RunError> {
        self.outcome.await
    }
}

/// A state write given from outside the run.
pub(crate) enum StateWrite<'a> {
    /// `update` (JSON of the state's update) as if `as_node` ran (the
    /// node that wrote the latest checkpoint when `None`), the next step
    /// its successors.
    Update {
        /// The update.
        update: Value,
        /// As which node.
        as_node: Option<&'a str>,
    },
    /// `update` (if any) written as `__start__`, the next step `nodes`
    /// (none: the run completes when continued).
    Goto {
        /// The update.
        update: Option<Value>,
        /// Where the run goes.
        nodes: &'a [&'a str],
    },
}

/// A state write continued at once (`Runs::write_and_continue`).
pub(crate) struct Continuing {
    /// The step the write made.
    pub(crate) step: u64,
    /// The run's last event sequence number after the write (the leg's
    /// events follow it).
    pub(crate) last_seq: u64,
    /// The leg that continues the run.
    pub(crate) leg: Leg,
}

/// What a decision led to, for a graph that continues here.
pub(crate) enum Continued {
    /// The run continues in this leg.
    Leg(Leg),
    /// It waits for other decisions, or ended rejected.
    Settled,
}

/// A graph the run service can start, continue and show, whatever its
/// state type.
#[async_trait]
pub(crate) trait ServedGraph: Send + Sync {
    /// Its name.
    fn name(&self) -> &str;
    /// Its version.
    fn version(&self) -> u32;
    /// Its nodes and edges, for drawing.
    fn outline(&self) -> Outline;
    /// Starts a run on `input` (JSON of the state's update, merged through
    /// the reducers into the default state, or into the thread's latest
    /// state), driven here; or with `queue`, stores it `queued` for a
    /// worker and returns no leg.
    async fn open(
        &self,
        executor: &Executor,
        input: Value,
        thread: Option<&str>,
        config: RunConfig,
        queue: bool,
    ) -> Result<Option<Leg>, ServiceError>;
    /// Adds `schedule`: runs on `input` (JSON of the state's update,
    /// merged into the default state) on its ticks.
    async fn schedule(
        &self,
        executor: &Executor,
        input: Value,
        schedule: Schedule,
    ) -> Result<ScheduleRecord, ServiceError>;
    /// Records the decision and takes the run over.
    async fn resume(
        &self,
        executor: &Executor,
        run: RunId,
        request: DecisionRequest,
        config: RunConfig,
    ) -> Result<Continued, RunError>;
    /// Continues an interrupted or failed run, or one whose owner died.
    async fn continue_run(
        &self,
        executor: &Executor,
        run: RunId,
        config: RunConfig,
    ) -> Result<Leg, RunError>;
    /// The run's state at checkpoint `at` (the last when `None`): values,
    /// next nodes, open interrupts, finished tasks of the step in flight.
    async fn state(
        &self,
        executor: &Executor,
        run: RunId,
        at: Option<u64>,
    ) -> Result<StateSnapshot<Value>, ServiceError>;
    /// A page of the run's checkpoints with the state at each, newest
    /// first.
    async fn history(
        &self,
        executor: &Executor,
        run: RunId,
        before: Option<u64>,
        limit: u64,
    ) -> Result<StatePage<Value>, ServiceError>;
    /// A new run from checkpoint `step` of `run` (`Executor::fork`), with
    /// `edit` (JSON of the state's update) merged through the reducers,
    /// driven here.
    async fn fork(
        &self,
        executor: &Executor,
        run: RunId,
        step: u64,
        edit: Option<Value>,
        config: RunConfig,
    ) -> Result<Leg, ServiceError>;
    /// Writes `update` (JSON of the state's update) on the run's latest
    /// checkpoint as if `as_node` ran (`Executor::update_state`, with
    /// `config`'s `by`), leaving the run `interrupted`; the new step.
    async fn update_state(
        &self,
        executor: &Executor,
        run: RunId,
        update: Value,
        as_node: Option<&str>,
        config: RunConfig,
    ) -> Result<u64, ServiceError>;
    /// Writes `write` and continues the run here at once, under the claim
    /// the write was made with (`Executor::update_state_and_continue` or
    /// `Executor::goto_and_continue`).
    async fn write_and_continue(
        &self,
        executor: &Executor,
        run: RunId,
        write: StateWrite<'_>,
        config: RunConfig,
    ) -> Result<Continuing, ServiceError>;
    /// A new run from checkpoint `step` of `run` with `input` (JSON of the
    /// state's update) written there as the graph's input, started again
    /// from the graph's entry (`Executor::fork_as` as `__start__`), driven
    /// here.
    async fn restart_at(
        &self,
        executor: &Executor,
        run: RunId,
        step: u64,
        input: Value,
        config: RunConfig,
    ) -> Result<Leg, ServiceError>;
    /// A page of the thread's history across its runs (see
    /// `Executor::thread_history`).
    async fn thread_history(
        &self,
        executor: &Executor,
        thread: &str,
        before: Option<u64>,
        limit: u64,
    ) -> Result<ThreadHistoryPage<Value>, ServiceError>;
    /// Drives a leg of `run` for a worker (see `Workload::drive`).
    async fn drive(
        &self,
        executor: &Executor,
        run: &RunRecord,
        config: RunConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Option<Result<RunStatus, RunError>>;
}

/// A state as JSON, the form the service shows every graph's state in
/// (null in the impossible case of a state that does not serialize).
fn as_json<S: serde::Serialize>(state: S) -> Value {
    serde_json::to_value(state).unwrap_or(Value::Null)
}

/// `update` (JSON) as an update of `graph`'s state.
fn update_of<S: State>(graph: &CompiledGraph<S>, update: Value) -> Result<S::Update, ServiceError> {
    let typed: S::Update = serde_json::from_value(update.clone()).map_err(|error| {
        ServiceError::invalid(format!(
            "the update does not fit graph `{}`'s state: {error}",
            graph.name()
        ))
    })?;
    // Fields the state does not have are dropped by the typed update: a
    // write of only those would change nothing, silently. Named instead.
    if let (Value::Object(given), Ok(Value::Object(kept))) = (&update, serde_json::to_value(&typed))
    {
        let unknown: Vec<&str> =
            given.keys().filter(|key| !kept.contains_key(*key)).map(String::as_str).collect();
        if !unknown.is_empty() {
            return Err(ServiceError::invalid(format!(
                "graph `{}`'s state has no field{} {}: nothing was written",
                graph.name(),
                if unknown.len() == 1 { "" } else { "s" },
                unknown.iter().map(|key| format!("`{key}`")).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    Ok(typed)
}

#[async_trait]
impl<S: State + Default> ServedGraph for CompiledGraph<S> {
    fn name(&self) -> &str {
        CompiledGraph::name(self)
    }

    fn version(&self) -> u32 {
        CompiledGraph::version(self)
    }

    fn outline(&self) -> Outline {
        outline(self)
    }

    async fn open(
        &self,
        executor: &Executor,
        input: Value,
        thread: Option<&str>,
        config: RunConfig,
        queue: bool,
    ) -> Result<Option<Leg>, ServiceError> {
        let update = decode_update(self, input)?;
        Ok(match (thread, queue) {
            (Some(thread), false) => {
                Some(Leg::of(executor.start_on_thread(self, thread, update, config).await?))
            }
            (Some(thread), true) => {
                executor.enqueue_on_thread(self, thread, update, config).await?;
                None
            }
            (None, queue) => {
                let state = state_from(self, update)?;
                if queue {
                    executor.enqueue(self, state, config).await?;
                    None
                } else {
                    Some(Leg::of(executor.start(self, state, config).await?))
                }
            }
        })
    }

    async fn schedule(
        &self,
        executor: &Executor,
        input: Value,
        schedule: Schedule,
    ) -> Result<ScheduleRecord, ServiceError> {
        let state = state_from(self, decode_update(self, input)?)?;
        Ok(executor.add_schedule(self, state, schedule, RunConfig::new()).await?)
    }

    async fn resume(
        &self,
        executor: &Executor,
        run: RunId,
        request: DecisionRequest,
        config: RunConfig,
    ) -> Result<Continued, RunError> {
        Ok(match executor.resume(self, run, request, config).await? {
            Resumed::Continuing(handle) => Continued::Leg(Leg::of(handle)),
            Resumed::Waiting(_) | Resumed::Rejected(_) => Continued::Settled,
        })
    }

    async fn continue_run(
        &self,
        executor: &Executor,
        run: RunId,
        config: RunConfig,
    ) -> Result<Leg, RunError> {
        Ok(Leg::of(executor.continue_run(self, run, config).await?))
    }

    async fn state(
        &self,
        executor: &Executor,
        run: RunId,
        at: Option<u64>,
    ) -> Result<StateSnapshot<Value>, ServiceError> {
        Ok(executor.get_state(self, run, at).await?.map_values(as_json))
    }

    async fn history(
        &self,
        executor: &Executor,
        run: RunId,
        before: Option<u64>,
        limit: u64,
    ) -> Result<StatePage<Value>, ServiceError> {
        Ok(executor.state_history(self, run, before, limit).await?.map_values(as_json))
    }

    async fn fork(
        &self,
        executor: &Executor,
        run: RunId,
        step: u64,
        edit: Option<Value>,
        config: RunConfig,
    ) -> Result<Leg, ServiceError> {
        let edit = edit.map(|edit| update_of(self, edit)).transpose()?;
        Ok(Leg::of(executor.fork(self, run, step, edit, config).await?))
    }

    async fn update_state(
        &self,
        executor: &Executor,
        run: RunId,
        update: Value,
        as_node: Option<&str>,
        config: RunConfig,
    ) -> Result<u64, ServiceError> {
        let update = update_of(self, update)?;
        Ok(executor.update_state(self, run, update, as_node, config).await?)
    }

    async fn write_and_continue(
        &self,
        executor: &Executor,
        run: RunId,
        write: StateWrite<'_>,
        config: RunConfig,
    ) -> Result<Continuing, ServiceError> {
        let continued = match write {
            StateWrite::Update { update, as_node } => {
                let update = update_of(self, update)?;
                executor.update_state_and_continue(self, run, update, as_node, config).await?
            }
            StateWrite::Goto { update, nodes } => {
                let update = update.map(|update| update_of(self, update)).transpose()?;
                executor.goto_and_continue(self, run, update, nodes, config).await?
            }
        };
        let WriteContinued { step, last_seq, leg } = continued;
        Ok(Continuing { step, last_seq, leg: Leg::of(leg) })
    }

    async fn restart_at(
        &self,
        executor: &Executor,
        run: RunId,
        step: u64,
        input: Value,
        config: RunConfig,
    ) -> Result<Leg, ServiceError> {
        let update = update_of(self, input)?;
        let started =
            executor.fork_as(self, run, step, update, Some(tollgate_engine::START), config).await?;
        Ok(Leg::of(started))
    }

    async fn thread_history(
        &self,
        executor: &Executor,
        thread: &str,
        before: Option<u64>,
        limit: u64,
    ) -> Result<ThreadHistoryPage<Value>, ServiceError> {
        Ok(executor.thread_history(self, thread, before, limit).await?.map_values(as_json))
    }

    async fn drive(
        &self,
        executor: &Executor,
        run: &RunRecord,
        config: RunConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Option<Result<RunStatus, RunError>> {
        Workload::drive(self, executor, run, config, shutdown).await
    }
}

/// A graph's outline: its shape at its version.
pub(crate) fn outline<S: State>(compiled: &CompiledGraph<S>) -> Outline {
    Outline::of(&compiled.shape(), Some(compiled.version()))
}

/// `input` as an update of `graph`'s state.
fn decode_update<S: State>(
    graph: &CompiledGraph<S>,
    input: Value,
) -> Result<S::Update, ServiceError> {
    serde_json::from_value(input).map_err(|error| {
        ServiceError::invalid(format!(
            "`input` is not an update of graph `{}`'s state: {error}",
            CompiledGraph::name(graph)
        ))
    })
}

/// The default state with `update` merged through the reducers.
fn state_from<S: State + Default>(
    graph: &CompiledGraph<S>,
    update: S::Update,
) -> Result<S, ServiceError> {
    let mut state = S::default();
    let write = Write { node: Arc::from("__input__"), update };
    state
        .apply(graph.schema(), vec![write])
        .map_err(|source| RunError::InvalidUpdate { step: 0, source })?;
    Ok(state)
}
