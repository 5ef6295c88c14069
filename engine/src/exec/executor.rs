//! The executor: starts and continues runs on a store.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tollgate_checkpoint::{
    Blob, Codec, InterruptRecord, NewRun, Owner, PageRequest, RunFilter, RunId, RunStatus, Store,
    StoreError, StoredCheckpoint, Transition,
};
use tracing::Instrument;

use crate::event::Event;
use crate::graph::CompiledGraph;
use crate::hitl::{Decision, PendingInterrupt, BEFORE};
use crate::state::State;
use crate::telemetry;

use super::config::RunConfig;
use super::driver::{Leg, SnapshotTracker};
use super::emit::{Emitter, Live};
use super::error::{json_error, RunError};
use super::handle::{RunHandle, RunOutcome};
use super::load::{decode, Loaded};
use super::plan::Frontier;
use super::record::{LegBreakpoints, FRONTIER_VERSION};
use super::setup::{breakpoints, check_graph, emit_run_started, graph_ref, Breakpoints};
use super::task::encode_checked;

/// A run this process has just taken over, and where its leg starts.
pub(crate) struct Claimed {
    pub(crate) run: RunId,
    /// The run's epoch after the claim.
    pub(crate) epoch: u64,
    /// The run's last event sequence number.
    pub(crate) last_seq: u64,
    /// Its last checkpoint, when it was read before the claim and the
    /// claim's compare-and-set on the epoch vouches it is still the last
    /// (a decision: nothing commits to a paused run). `None`: read it after
    /// the claim.
    pub(crate) checkpoint: Option<StoredCheckpoint>,
}

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
    pub(crate) store: Arc<dyn Store>,
    /// Long-term memory handed to nodes ([`Executor::with_memory`]).
    pub(crate) memory: Option<tollgate_checkpoint::Memory>,
}

impl Executor {
    /// An executor persisting through `store`.
    pub fn new(store: impl Store) -> Self {
        Self { store: Arc::new(store), memory: None }
    }

    /// An executor sharing an existing store.
    pub fn with_store(store: Arc<dyn Store>) -> Self {
        Self { store, memory: None }
    }

    /// Nodes and tools of every run reach `memory` through their context
    /// ([`NodeContext::memory`](crate::NodeContext::memory)); a run's
    /// [`RunConfig::memory`] takes its place.
    pub fn with_memory(mut self, memory: tollgate_checkpoint::Memory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// The long-term memory given to runs, if any.
    pub fn memory(&self) -> Option<&tollgate_checkpoint::Memory> {
        self.memory.as_ref()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// What the run was created with by [`RunConfig::attach`], if anything.
    pub async fn attachment(&self, run: RunId) -> Result<Option<serde_json::Value>, RunError> {
        let Some(text) = self.store.attachment(run).await? else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| RunError::AttachmentDecode { run, source })
    }

    /// Starts a run of `graph` from `input`. The run exists in the store
    /// (status `running`) when this returns; it proceeds on a tokio task.
    pub async fn start<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        input: S,
        config: RunConfig,
    ) -> Result<RunHandle<S>, RunError> {
        let frontier = Frontier::start(graph, &input)?;
        Ok(self.start_from(graph, input, frontier, config).await?.spawn())
    }

    /// Creates a run at step 0 with `state` and `frontier`, and drives it.
    pub(crate) async fn start_from<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        state: S,
        mut frontier: Frontier,
        config: RunConfig,
    ) -> Result<Leg<S>, RunError> {
        let run = config.run_id.unwrap_or_default();
        // A fork keeps its source's settings unless `config` sets its own.
        let config = config.settled(frontier.settings.as_ref());
        frontier.settings = Some(config.settings());
        let breakpoints = breakpoints(graph, &config)?;
        let (snapshot, frontier_blob) = encode_input(graph, run, &state, &frontier, &config)?;
        let emitter = Emitter::new(run, 0, Arc::clone(&config.clock), config.events.clone())
            .with_cap(config.event_cap);
        emit_run_started(&emitter, graph, 0, run, Live::AfterCommit, &config.announce)?;
        let created_at_ms = emitter.now_ms();
        let snapshots =
            SnapshotTracker { last_size: snapshot.stored_len(), ..SnapshotTracker::default() };
        // The first leg's span is the run's trace: stored, every later leg
        // joins it.
        let span = Leg::<S>::run_span(run, graph.name());
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
                claim: Some((Owner::current(), config.lease_until())),
                attachment: config.attachment.clone(),
                thread_turn: config.turn,
                trace: telemetry::inject(&span),
            })
            .await
            .inspect_err(|error| telemetry::count_store_error("create_run", error))?;
        metrics::counter!(telemetry::RUNS_STARTED, "graph" => graph.name().to_owned()).increment(1);
        emitter.committed();
        let loaded = Loaded {
            state,
            step: 0,
            frontier,
            reused: HashMap::new(),
            progress: HashMap::new(),
            tasks: Arc::default(),
            snapshots,
        };
        let leg = self.leg(graph, run, epoch, config, loaded, emitter, HashMap::new(), breakpoints);
        Ok(Leg { span, ..leg })
    }

    /// Stores a run of `graph` from `input` without driving it: status
    /// `queued`, no owner, for a [`Worker`](crate::Worker) of any process
    /// that has the graph to claim and drive from step 0. Returns its id
    /// (`config.run_id` when set). What the run is (id, thread,
    /// attachment, input) is stored, with its settings (`max_steps`,
    /// `event_cap`) and the breakpoints of its first leg
    /// ([`RunConfig::interrupt_before`], [`RunConfig::interrupt_after`]:
    /// the worker that claims it pauses there unless its own `RunConfig`
    /// names breakpoints; an unknown node is refused here); the lease and
    /// the event sink are the worker's.
    pub async fn enqueue<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        input: S,
        config: RunConfig,
    ) -> Result<RunId, RunError> {
        let frontier = Frontier::start(graph, &input)?;
        self.enqueue_from(graph, input, frontier, config).await
    }

    /// Stores a `queued` run at step 0 with `state` and `frontier`.
    pub(crate) async fn enqueue_from<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        input: S,
        frontier: Frontier,
        config: RunConfig,
    ) -> Result<RunId, RunError> {
        let run = config.run_id.unwrap_or_default();
        let (config, snapshot, frontier) = encode_queued(graph, run, &input, frontier, config)?;
        // The legs that workers drive join the trace of the enqueuing code.
        let span = tracing::info_span!(
            "enqueue",
            otel.name = %format_args!("enqueue {}", graph.name()),
            tollgate.run_id = %run,
            tollgate.graph = %graph.name(),
        );
        self.store
            .create_run(NewRun {
                id: run,
                graph: graph_ref(graph),
                thread: config.thread.clone(),
                created_at_ms: config.clock.now_ms(),
                snapshot,
                frontier,
                events: Vec::new(),
                claim: None,
                attachment: config.attachment.clone(),
                thread_turn: config.turn,
                trace: telemetry::inject(&span),
            })
            .instrument(span)
            .await
            .inspect_err(|error| telemetry::count_store_error("create_run", error))?;
        metrics::counter!(telemetry::RUNS_STARTED, "graph" => graph.name().to_owned()).increment(1);
        Ok(run)
    }

    /// Starts a run and drives it in the calling task until its leg ends.
    /// Dropping the future stops the run where it is: it stays `running`
    /// until its lease expires, and then `recover` continues it. Use
    /// [`Executor::start`] for a run that goes on in the background and
    /// can be cancelled.
    pub async fn run<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        input: S,
        config: RunConfig,
    ) -> Result<RunOutcome<S>, RunError> {
        // Driven in the caller's task: no spawn, no cross-thread wake-up.
        let frontier = Frontier::start(graph, &input)?;
        self.start_from(graph, input, frontier, config).await?.drive().await
    }

    /// Continues a run that is not terminal (interrupted, failed, decided
    /// after a pause, or running under an owner that died) from its last
    /// checkpoint. Takes ownership of the run: a previous owner still
    /// running is fenced off. Tasks of the next step whose outputs were
    /// already stored are not run again; interrupted tasks run again and
    /// see their decisions.
    pub async fn continue_run<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        config: RunConfig,
    ) -> Result<RunHandle<S>, RunError> {
        let record = check_graph(&*self.store, graph, run).await?;
        if record.status.is_terminal() {
            return Err(StoreError::RunTerminal { run, status: record.status }.into());
        }
        if record.status == RunStatus::Running && !record.is_orphaned(config.clock.now_ms()) {
            return Err(RunError::RunOwned {
                run,
                owner: record.owner.map_or_else(|| "unknown".to_owned(), |owner| owner.to_string()),
            });
        }
        if record.pending_interrupts > 0 {
            let interrupts = self.store.interrupts(run).await?;
            let waiting: Vec<String> =
                interrupts.iter().filter(|i| i.decision.is_none()).map(|i| i.id.clone()).collect();
            return Err(RunError::AwaitingDecision { run, pending: waiting });
        }
        let breakpoints = breakpoints(graph, &config)?;
        // Claim first (compare-and-set on the epoch just read): from here on
        // no other process can commit to the run, so the checkpoint read
        // after it is the one this leg continues from.
        let epoch =
            self.store.claim(run, record.epoch, Owner::current(), config.lease_until()).await?;
        let claimed = Claimed { run, epoch, last_seq: record.last_seq, checkpoint: None };
        Ok(self.continue_claimed(graph, claimed, breakpoints, config).await?.spawn())
    }

    /// The leg that continues a run this process has just claimed.
    pub(crate) async fn continue_claimed<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        claimed: Claimed,
        breakpoints: Breakpoints,
        config: RunConfig,
    ) -> Result<Leg<S>, RunError> {
        let Claimed { run, epoch, last_seq, checkpoint } = claimed;
        let checkpoint = match checkpoint {
            Some(checkpoint) => Ok(checkpoint),
            None => self.store.checkpoint(run, None).await.map_err(RunError::from),
        };
        let span = Leg::<S>::run_span(run, graph.name());
        if let Ok(checkpoint) = &checkpoint {
            telemetry::join(&span, checkpoint.run.trace.as_deref());
        }
        let loaded = checkpoint.and_then(|mut checkpoint| {
            let interrupts = std::mem::take(&mut checkpoint.interrupts);
            decode::<S>(graph, checkpoint).map(|loaded| (loaded, interrupts))
        });
        let (mut loaded, interrupts) = match loaded {
            Ok(loaded) => loaded,
            Err(error) => {
                self.fail_load(run, epoch, &error, config.clock.now_ms()).await;
                return Err(error);
            }
        };
        // The run's stored settings hold unless this leg's config sets its
        // own; the leg stores what it runs with.
        let config = config.settled(loaded.frontier.settings.as_ref());
        loaded.frontier.settings = Some(config.settings());
        // A queued run's first leg pauses where it was queued to, unless
        // this leg's config names breakpoints of its own.
        let (config, breakpoints) = match loaded.frontier.first_leg.take() {
            Some(first) if config.break_before.is_empty() && config.break_after.is_empty() => {
                let config = config.interrupt_before(first.before).interrupt_after(first.after);
                match self::breakpoints(graph, &config) {
                    Ok(points) => (config, points),
                    Err(_) => (config, breakpoints),
                }
            }
            _ => (config, breakpoints),
        };
        let emitter = Emitter::new(run, last_seq, Arc::clone(&config.clock), config.events.clone())
            .with_cap(config.event_cap);
        emit_run_started(&emitter, graph, loaded.step, run, Live::Now, &config.announce)?;
        let (mut decisions, answered) = decisions_of(&interrupts);
        if !answered.is_empty() {
            let event = Event::RunResumed { step: loaded.step + 1, decisions: answered };
            emitter
                .emit(None, event, Live::Now)
                .map_err(|source| json_error(run, loaded.step, source))?;
        }
        // Breakpoints a state update found already honoured: approved.
        let honoured = std::mem::take(&mut loaded.frontier.honoured);
        for (index, task) in loaded.frontier.tasks.iter().enumerate() {
            if honoured.iter().any(|name| *name == *graph.node(task.node).name) {
                decisions.entry(index as u32).or_default().insert(BEFORE, Decision::Approve);
            }
        }
        let decisions = decisions.into_iter().map(|(task, map)| (task, Arc::new(map))).collect();
        let leg = self.leg(graph, run, epoch, config, loaded, emitter, decisions, breakpoints);
        Ok(Leg { span, ..leg })
    }

    /// Leaves a run whose checkpoint did not load failed with the reason,
    /// rather than `running` under an owner that gave up.
    async fn fail_load(&self, run: RunId, epoch: u64, error: &RunError, at_ms: i64) {
        let transition = Transition {
            run,
            epoch,
            step: None,
            status: RunStatus::Failed,
            failure: Some(error.to_failure()),
            events: Vec::new(),
            at_ms,
            lease_until_ms: None,
            interrupts: Vec::new(),
        };
        if let Err(store_error) = self.store.commit(transition).await {
            tracing::warn!(%run, %store_error, "could not record a failed load");
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn leg<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        epoch: u64,
        config: RunConfig,
        loaded: Loaded<S>,
        emitter: Emitter,
        decisions: HashMap<u32, Arc<BTreeMap<u32, Decision>>>,
        breakpoints: Breakpoints,
    ) -> Leg<S> {
        let Loaded { state, step, frontier, reused, progress, tasks, snapshots } = loaded;
        let mut config = config;
        if config.memory.is_none() {
            config.memory = self.memory.clone();
        }
        let cancel = config.stop.as_ref().map_or_else(Arc::default, |token| Arc::clone(&token.0));
        Leg {
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
            emitter: Arc::new(emitter),
            cancel,
            snapshots,
            decisions,
            no_decisions: Arc::default(),
            breakpoints: Arc::new(breakpoints),
            raised: Vec::new(),
            origins: Vec::new(),
            paused: Vec::new(),
            wake: None,
            progress,
            tasks,
            access: None,
            ns: None,
            nest: None,
            span: tracing::Span::none(),
        }
    }

    /// Continues every run of `graph` (same name and version) that another
    /// process should pick up: `running` with an expired lease or an owner
    /// that was a process of this host and is gone, or `queued` (decided
    /// after a pause, by a process without the graph). Runs another process
    /// claims first are skipped. Returns a handle per run taken over.
    pub async fn recover<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        config: RunConfig,
    ) -> Result<Vec<RunHandle<S>>, RunError> {
        let mut ready = Vec::new();
        for status in [RunStatus::Running, RunStatus::Queued] {
            let filter = RunFilter {
                status: Some(status),
                graph: Some(graph.name().to_owned()),
                ..RunFilter::default()
            };
            let mut page = PageRequest { limit: 100, cursor: None };
            loop {
                let found = self.store.list_runs(&filter, &page).await?;
                let now = config.clock.now_ms();
                ready.extend(
                    found
                        .runs
                        .into_iter()
                        .filter(|run| run.graph == graph_ref(graph))
                        .filter(|run| run.is_claimable(now))
                        .map(|run| run.id),
                );
                match found.next {
                    Some(cursor) => page.cursor = Some(cursor),
                    None => break,
                }
            }
        }
        let mut handles = Vec::new();
        for run in ready {
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

/// A new run's step-0 snapshot and frontier, encoded.
/// What a queued run starts from (run `run`, or a schedule's runs): the
/// input checkpoint and the first frontier carrying `config`'s settings
/// (settled with those the frontier has), and that config.
pub(crate) fn encode_queued<S: State>(
    graph: &CompiledGraph<S>,
    run: RunId,
    input: &S,
    mut frontier: Frontier,
    config: RunConfig,
) -> Result<(RunConfig, Blob, Blob), RunError> {
    let config = config.settled(frontier.settings.as_ref());
    frontier.settings = Some(config.settings());
    // The breakpoints of its first leg go with it to its worker (checked
    // here, so that an unknown node is refused before anything is stored).
    breakpoints(graph, &config)?;
    if !config.break_before.is_empty() || !config.break_after.is_empty() {
        frontier.first_leg = Some(LegBreakpoints {
            before: config.break_before.clone(),
            after: config.break_after.clone(),
        });
    }
    let (snapshot, frontier) = encode_input(graph, run, input, &frontier, &config)?;
    Ok((config, snapshot, frontier))
}

fn encode_input<S: State>(
    graph: &CompiledGraph<S>,
    run: RunId,
    state: &S,
    frontier: &Frontier,
    config: &RunConfig,
) -> Result<(Blob, Blob), RunError> {
    let snapshot = encode_checked::<S, S>(config.codec, state, "state", run, 0)?;
    let frontier = Codec::Json
        .encode(&frontier.to_record(graph), FRONTIER_VERSION)
        .map_err(|source| RunError::Encode { run, step: 0, source })?;
    Ok((snapshot, frontier))
}

/// The decisions recorded on a paused step's `interrupts`, by task and
/// ordinal, and the interrupts they answer.
fn decisions_of(
    interrupts: &[InterruptRecord],
) -> (HashMap<u32, BTreeMap<u32, Decision>>, Vec<PendingInterrupt>) {
    let mut decisions: HashMap<u32, BTreeMap<u32, Decision>> = HashMap::new();
    let mut answered = Vec::new();
    for interrupt in interrupts {
        let pending = PendingInterrupt::from_record(interrupt);
        if let Some(decision) = pending.decision.clone() {
            decisions.entry(interrupt.task).or_default().insert(interrupt.ordinal, decision);
            answered.push(pending);
        }
    }
    (decisions, answered)
}
