//! The executor: starts and continues runs on a store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::task::JoinHandle;
use tollgate_checkpoint::{
    CodecError, GraphRef, NewRun, Owner, PageRequest, RunFilter, RunId, RunStatus, Store,
    StoreError, Transition,
};

use crate::event::Event;
use crate::graph::CompiledGraph;
use crate::state::{State, Write};

use super::config::RunConfig;
use super::driver::{encode_checked, Leg, SnapshotTracker};
use super::emit::{Emitter, Live};
use super::error::RunError;
use super::plan::Frontier;
use super::record::{FrontierRecord, TaskOutputRecord, FRONTIER_VERSION};

/// Runs graphs on a [`Store`]. Cheap to clone; share one per process.
///
/// ```
/// use std::sync::Arc;
/// use tollgate_checkpoint::{MemoryStore, RunStatus};
/// use tollgate_engine::{DynReducer, DynSchema, DynState, Executor, RunConfig, StateGraph, END, START};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let graph = StateGraph::<DynState>::with_schema("count", 1, DynSchema::new().field("n", DynReducer::Sum))
///     .node("add", |_s: Arc<DynState>, _ctx| async move {
///         Ok(serde_json::json!({"n": 2}).as_object().cloned().unwrap_or_default())
///     })
///     .edge(START, "add")
///     .edge("add", END)
///     .compile()
///     .unwrap();
/// let executor = Executor::new(MemoryStore::new());
/// let outcome = executor.run(&graph, DynState::default(), RunConfig::new()).await.unwrap();
/// assert_eq!(outcome.status, RunStatus::Completed);
/// assert_eq!(outcome.state.get("n"), Some(&serde_json::json!(2)));
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct Executor {
    store: Arc<dyn Store>,
}

/// How a run (or leg) that did not fail ended.
#[derive(Debug, Clone)]
pub struct RunOutcome<S> {
    /// The run.
    pub run_id: RunId,
    /// `completed` or `interrupted`.
    pub status: RunStatus,
    /// Last committed step.
    pub step: u64,
    /// The state at that step.
    pub state: S,
}

/// A run in progress: wait for it, or cancel it at the next step boundary.
#[derive(Debug)]
pub struct RunHandle<S> {
    run_id: RunId,
    cancel: Arc<AtomicBool>,
    join: JoinHandle<Result<RunOutcome<S>, RunError>>,
}

impl<S> RunHandle<S> {
    /// The run's id.
    pub fn run_id(&self) -> RunId {
        self.run_id
    }

    /// Asks the run to stop at the next step boundary; it ends
    /// `interrupted` and can be continued later. Tasks already running
    /// finish first and their step is committed.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }

    /// Waits for the leg to end: `Ok` when it completed or was interrupted,
    /// `Err` when it failed.
    pub async fn wait(self) -> Result<RunOutcome<S>, RunError> {
        let run = self.run_id;
        self.join.await.unwrap_or(Err(RunError::DriverLost { run }))
    }
}

impl Executor {
    /// An executor persisting through `store`.
    pub fn new(store: impl Store) -> Self {
        Self { store: Arc::new(store) }
    }

    /// An executor sharing an existing store.
    pub fn with_store(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Starts a run of `graph` from `input`. The run exists in the store
    /// (status `running`) when this returns; it proceeds on a tokio task.
    pub async fn start<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        input: S,
        config: RunConfig,
    ) -> Result<RunHandle<S>, RunError> {
        let run = config.run_id.unwrap_or_default();
        let frontier = Frontier::start(graph, &input)?;
        let encode_error = |source| RunError::Encode { run, step: 0, source };
        let snapshot = encode_checked::<S, S>(config.codec, &input, "state", run, 0)?;
        let frontier_blob = tollgate_checkpoint::Codec::Json
            .encode(&frontier.to_record(graph), FRONTIER_VERSION)
            .map_err(encode_error)?;
        let mut emitter = Emitter::new(run, 0, Arc::clone(&config.clock), config.events.clone());
        emit_run_started(&mut emitter, graph, 0, run)?;
        let created_at_ms = emitter.now_ms();
        let snapshots =
            SnapshotTracker { last_size: snapshot.stored_len(), ..SnapshotTracker::default() };
        let epoch = self
            .store
            .create_run(NewRun {
                id: run,
                graph: graph_ref(graph),
                thread: config.thread.clone(),
                created_at_ms,
                snapshot,
                frontier: frontier_blob,
                events: emitter.take_batch(),
                owner: Owner::current(),
                lease_until_ms: config.lease_until(),
            })
            .await?;
        emitter.committed();
        let leg = Leg {
            graph: graph.clone(),
            store: Arc::clone(&self.store),
            run,
            epoch,
            config,
            state: Arc::new(input),
            step: 0,
            frontier,
            frontier_blob: None,
            reused: HashMap::new(),
            emitter,
            cancel: Arc::new(AtomicBool::new(false)),
            snapshots,
        };
        Ok(spawn(leg))
    }

    /// Starts a run and waits for it.
    pub async fn run<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        input: S,
        config: RunConfig,
    ) -> Result<RunOutcome<S>, RunError> {
        self.start(graph, input, config).await?.wait().await
    }

    /// Continues a run that is not terminal (interrupted, failed, or
    /// running under an owner that died) from its last checkpoint. Takes
    /// ownership of the run: a previous owner still running is fenced off.
    /// Tasks of the next step whose outputs were already stored are not
    /// run again.
    pub async fn continue_run<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        config: RunConfig,
    ) -> Result<RunHandle<S>, RunError> {
        let record = self.store.run(run).await?;
        if record.graph != graph_ref(graph) {
            return Err(RunError::GraphMismatch {
                run,
                stored: record.graph,
                graph: graph_ref(graph),
            });
        }
        if record.status.is_terminal() {
            return Err(StoreError::RunTerminal { run, status: record.status }.into());
        }
        if record.status == RunStatus::Running && !record.is_orphaned(config.clock.now_ms()) {
            return Err(RunError::RunOwned {
                run,
                owner: record.owner.map_or_else(|| "unknown".to_owned(), |owner| owner.to_string()),
            });
        }
        // Claim first (compare-and-set on the epoch just read): from here on
        // no other process can commit to the run, so the checkpoint read
        // below is the one this leg continues from.
        let epoch =
            self.store.claim(run, record.epoch, Owner::current(), config.lease_until()).await?;
        let loaded = match load::<S>(&*self.store, graph, run).await {
            Ok(loaded) => loaded,
            Err(error) => {
                // Leave the run failed with the reason rather than
                // `running` under an owner that gave up.
                let failure = error.to_failure();
                let transition = Transition {
                    run,
                    epoch,
                    step: None,
                    status: RunStatus::Failed,
                    failure: Some(failure),
                    events: Vec::new(),
                    at_ms: config.clock.now_ms(),
                    lease_until_ms: None,
                };
                if let Err(store_error) = self.store.commit(transition).await {
                    tracing::warn!(%run, %store_error, "could not record a failed load");
                }
                return Err(error);
            }
        };
        let Loaded { state, step, frontier, reused, snapshots } = loaded;
        let mut emitter =
            Emitter::new(run, record.last_seq, Arc::clone(&config.clock), config.events.clone());
        emit_run_started(&mut emitter, graph, step, run)?;
        let leg = Leg {
            graph: graph.clone(),
            store: Arc::clone(&self.store),
            run,
            epoch,
            config,
            state: Arc::new(state),
            step,
            frontier,
            frontier_blob: None,
            reused,
            emitter,
            cancel: Arc::new(AtomicBool::new(false)),
            snapshots,
        };
        Ok(spawn(leg))
    }
}

/// A run's last checkpoint, decoded against a graph.
struct Loaded<S: State> {
    state: S,
    step: u64,
    frontier: Frontier,
    reused: HashMap<u32, (TaskOutputRecord<S::Update>, tollgate_checkpoint::Blob)>,
    snapshots: SnapshotTracker,
}

/// Rebuilds the state (newest snapshot + deltas), the frontier and the
/// stored outputs of the next step.
async fn load<S: State>(
    store: &dyn Store,
    graph: &CompiledGraph<S>,
    run: RunId,
) -> Result<Loaded<S>, RunError> {
    let checkpoint = store.checkpoint(run).await?;
    let step = checkpoint.run.step;
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
    let frontier_record: FrontierRecord =
        checkpoint.frontier.decode().map_err(decode_error(step))?;
    let frontier = Frontier::from_record(frontier_record, graph, run, step)?;
    let mut reused = HashMap::new();
    for pending in checkpoint.pending {
        let task = frontier.tasks.get(pending.task.index as usize);
        let matches = task.is_some_and(|task| *graph.node(task.node).name == pending.task.node);
        if !matches {
            // A write that does not match the frontier is ignored: the
            // task runs again rather than taking someone else's output.
            tracing::warn!(%run, task = ?pending.task, "ignoring a pending write that does not match the frontier");
            continue;
        }
        let output: TaskOutputRecord<S::Update> =
            pending.update.decode().map_err(decode_error(step + 1))?;
        reused.insert(pending.task.index, (output, pending.update));
    }

    let snapshots = SnapshotTracker {
        last_size: checkpoint.snapshot.stored_len(),
        delta_bytes,
        steps: checkpoint.deltas.len() as u64,
    };
    Ok(Loaded { state, step, frontier, reused, snapshots })
}

impl Executor {
    /// Continues every run of `graph` (same name and version) whose owner
    /// died: still `running`, with an expired lease or an owner that was a
    /// process of this host and is gone. Runs another process claims first
    /// are skipped. Returns a handle per run taken over.
    pub async fn recover<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        config: RunConfig,
    ) -> Result<Vec<RunHandle<S>>, RunError> {
        let filter = RunFilter {
            status: Some(RunStatus::Running),
            graph: Some(graph.name().to_owned()),
            thread: None,
        };
        let mut orphans = Vec::new();
        let mut page = PageRequest { limit: 100, cursor: None };
        loop {
            let found = self.store.list_runs(&filter, &page).await?;
            let now = config.clock.now_ms();
            orphans.extend(
                found
                    .runs
                    .into_iter()
                    .filter(|run| run.graph == graph_ref(graph) && run.is_orphaned(now))
                    .map(|run| run.id),
            );
            match found.next {
                Some(cursor) => page.cursor = Some(cursor),
                None => break,
            }
        }
        let mut handles = Vec::new();
        for run in orphans {
            match self.continue_run(graph, run, config.clone()).await {
                Ok(handle) => handles.push(handle),
                Err(RunError::Store(StoreError::Fenced { .. }))
                | Err(RunError::RunOwned { .. }) => {
                    tracing::debug!(%run, "another process recovered the run first");
                }
                Err(error) => return Err(error),
            }
        }
        Ok(handles)
    }
}

fn spawn<S: State>(leg: Leg<S>) -> RunHandle<S> {
    let run_id = leg.run;
    let cancel = Arc::clone(&leg.cancel);
    let join = tokio::spawn(leg.drive());
    RunHandle { run_id, cancel, join }
}

fn graph_ref<S: State>(graph: &CompiledGraph<S>) -> GraphRef {
    GraphRef { name: graph.name().to_owned(), version: graph.version() }
}

fn emit_run_started<S: State>(
    emitter: &mut Emitter,
    graph: &CompiledGraph<S>,
    from_step: u64,
    run: RunId,
) -> Result<(), RunError> {
    let event = Event::RunStarted {
        graph: graph.name().to_owned(),
        graph_version: graph.version(),
        from_step,
    };
    emitter.emit(None, event, Live::Now).map_err(|source| RunError::Encode {
        run,
        step: from_step,
        source: CodecError::Encode {
            codec: tollgate_checkpoint::Codec::Json,
            source: Box::new(source),
        },
    })
}

/// A damaged blob is corruption of that run; an intact one that does not
/// decode means the types changed.
fn decode_failure(run: RunId, step: u64, source: CodecError) -> RunError {
    match source {
        CodecError::ChecksumMismatch { .. } | CodecError::Truncated { .. } => {
            StoreError::CorruptCheckpoint { run, step, source }.into()
        }
        source => RunError::StateDecode { run, step, source },
    }
}
