//! Threads: conversations that last. A run started on a thread begins
//! from the state its latest run left, with the new input applied through
//! the state's reducers, and a thread runs one leg at a time.

use std::sync::Arc;

use tollgate_checkpoint::{PageRequest, RunFilter, RunId, RunRecord, StoreError, ThreadTurn};

use crate::graph::CompiledGraph;
use crate::state::{State, Write};

use super::{Executor, RunConfig, RunError, RunHandle, RunOutcome, StateSnapshot};

/// The node name the input of a thread's run is written as.
pub const INPUT_NODE: &str = "__input__";

impl Executor {
    /// The latest run of `thread`, if it has one.
    pub async fn thread_latest(&self, thread: &str) -> Result<Option<RunRecord>, RunError> {
        let filter = RunFilter { thread: Some(thread.to_owned()), ..RunFilter::default() };
        let page = self.store.list_runs(&filter, &PageRequest { limit: 1, cursor: None }).await?;
        if let Some(damaged) = page.damaged.first() {
            return Err(damaged_run(thread, damaged));
        }
        Ok(page.runs.into_iter().next())
    }

    /// The thread's current state: its latest run's last checkpoint (the
    /// final state of a completed run), or `None` for a thread without
    /// runs. The latest run must be of `graph` (name and version).
    pub async fn thread_state<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        thread: &str,
    ) -> Result<Option<StateSnapshot<S>>, RunError> {
        match self.thread_latest(thread).await? {
            Some(record) => Ok(Some(self.get_state(graph, record.id, None).await?)),
            None => Ok(None),
        }
    }

    /// The state a new run of `thread` starts from before its input: the
    /// values at its latest run's last checkpoint, or `None` for a thread
    /// without runs. A latest run of another version of the same graph
    /// (same name) is read with `graph`'s state type and reducers: a thread
    /// moves to a new version of its graph. Another graph's run is
    /// [`RunError::GraphMismatch`].
    pub async fn thread_values<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        thread: &str,
    ) -> Result<Option<S>, RunError> {
        match self.thread_latest(thread).await? {
            Some(record) => Ok(Some(self.latest_values(graph, &record).await?)),
            None => Ok(None),
        }
    }

    /// The values at `record`'s last checkpoint, read with `graph` (of the
    /// same name; another version is read state-only, without its next
    /// nodes, which a new run does not need).
    async fn latest_values<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        record: &RunRecord,
    ) -> Result<S, RunError> {
        if record.graph.name == graph.name() && record.graph.version != graph.version() {
            let checkpoint = self.store.checkpoint(record.id, None).await?;
            return Ok(super::load::decode_state(graph, &checkpoint)?.0);
        }
        Ok(self.get_state(graph, record.id, None).await?.values)
    }

    /// Starts a run of `thread` and drives it in the calling task until its
    /// leg ends: from the state the thread's latest run left (its last
    /// checkpoint; `S::default()` for a new thread), with `input` applied
    /// through the state's reducers as a write of node `__input__` (so
    /// `messages` append and counters add, as a second invocation on a
    /// LangGraph thread does). A thread runs one leg at a time: while its
    /// latest run is `running`, `queued` or `awaiting_hitl` this is
    /// refused ([`StoreError::ThreadBusy`]), and when another run of the
    /// thread started meanwhile too ([`StoreError::ThreadMoved`]); the
    /// check and the creation are one transaction in every store.
    pub async fn run_on_thread<S: State + Default>(
        &self,
        graph: &CompiledGraph<S>,
        thread: &str,
        input: S::Update,
        config: RunConfig,
    ) -> Result<RunOutcome<S>, RunError> {
        let (state, config) = self.thread_turn(graph, thread, input, config).await?;
        self.run(graph, state, config).await
    }

    /// [`Executor::run_on_thread`], the leg going on in a task of its own.
    pub async fn start_on_thread<S: State + Default>(
        &self,
        graph: &CompiledGraph<S>,
        thread: &str,
        input: S::Update,
        config: RunConfig,
    ) -> Result<RunHandle<S>, RunError> {
        let (state, config) = self.thread_turn(graph, thread, input, config).await?;
        self.start(graph, state, config).await
    }

    /// [`Executor::run_on_thread`], stored `queued` for a worker
    /// ([`Executor::enqueue`]). The queued run holds the thread.
    pub async fn enqueue_on_thread<S: State + Default>(
        &self,
        graph: &CompiledGraph<S>,
        thread: &str,
        input: S::Update,
        config: RunConfig,
    ) -> Result<RunId, RunError> {
        let (state, config) = self.thread_turn(graph, thread, input, config).await?;
        self.enqueue(graph, state, config).await
    }

    /// The state a new run of `thread` starts from, and its config (the
    /// thread, and the latest run it is built on).
    async fn thread_turn<S: State + Default>(
        &self,
        graph: &CompiledGraph<S>,
        thread: &str,
        input: S::Update,
        config: RunConfig,
    ) -> Result<(S, RunConfig), RunError> {
        let latest = self.thread_latest(thread).await?;
        let mut state = match &latest {
            None => S::default(),
            Some(record) if record.status.holds_thread() => {
                return Err(StoreError::ThreadBusy {
                    thread: thread.to_owned(),
                    run: record.id,
                    status: record.status,
                }
                .into())
            }
            Some(record) => self.latest_values(graph, record).await?,
        };
        let write = Write { node: Arc::from(INPUT_NODE), update: input };
        state
            .apply(graph.schema(), vec![write])
            .map_err(|source| RunError::InvalidUpdate { step: 0, source })?;
        let mut config = config.thread(thread);
        config.turn = Some(ThreadTurn { after: latest.map(|record| record.id) });
        Ok((state, config))
    }
}

/// A run of `thread` whose stored rows do not read: the thread cannot be
/// read either.
pub(crate) fn damaged_run(thread: &str, damaged: &tollgate_checkpoint::DamagedRun) -> RunError {
    StoreError::Backend {
        source: format!("thread `{thread}`: run {} does not read: {}", damaged.id, damaged.reason)
            .into(),
    }
    .into()
}
