//! The operations the CLI and the server share: opening the database,
//! starting, deciding, continuing, cancelling and deleting runs, workers,
//! events. What is shown of runs (summaries, listings, state, history) is
//! in [`view`]; how a leg this process drives is waited for, in [`leg`];
//! graphs whatever their state type in [`served`]; finding a run's graph
//! and starting registered graphs in [`graphs`]; workers in [`worker`].

mod access;
mod admission;
mod dispatch;
mod driver;
mod follow;
mod graphs;
mod input;
mod keys;
mod leg;
mod legs;
mod memory;
mod open;
mod outbox;
mod outline;
mod pending;
mod registry;
mod retention;
mod schedules;
mod served;
mod target;
mod threads;
mod view;
mod webhooks;
mod worker;

pub(crate) use access::InScope;
pub(crate) use admission::Admission;
pub(crate) use dispatch::spawn_dispatcher;
pub(crate) use driver::Driver;
pub(crate) use follow::{Follow, Hub, Item, Logged, Until};
pub use graphs::InvalidBlueprint;
use input::input_state;
pub use input::{user_message, UserInput};
pub use keys::DEFAULT_KEY_TTL;
pub(crate) use keys::{Made, Makes, RequestKey};
pub(crate) use leg::leg_result;
pub(crate) use legs::Legs;
pub(crate) use memory::{
    index_fields, search_op, shelved, shelved_query, unshelved, unshelved_namespace,
};
pub(crate) use outbox::{OutboxWork, Retry, StartRefused};
pub(crate) use outline::{GraphListing, ListingKind, Outline, OutlineNode};
pub(crate) use pending::{Pending, PendingEnd, PendingState, PENDING_KIND};
pub use registry::Graphs;
pub use retention::PruneStrategy;
pub use schedules::MAX_SCHEDULES_LISTED;
use served::Continued;
pub use served::Leg;
pub(crate) use served::{Continuing, ServedGraph, StateWrite};
pub(crate) use target::check as webhook_target;
pub(crate) use threads::{thread_not_found, IfExists, Multitask};
pub use tollgate_checkpoint::DamagedRun;
pub use view::{FailureView, InterruptView, Listing, RunHistory, RunSummary, ThreadView};
pub(crate) use webhooks::WEBHOOK_KIND;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use tollgate_checkpoint::{
    Embedder, EventRecord, PageRequest, RunFilter, RunId, RunStatus, SqliteStore, Store, StoreError,
};

use tollgate_engine::{
    Decision, DecisionError, DecisionRequest, EventEnvelope, EventSink, Executor, RunConfig,
    RunError, RunHandle,
};
use tollgate_nodes::{AgentState, AgentStateUpdate, Blueprint, CompiledAgent, ModelRegistry};
use tollgate_postgres::PostgresStore;

use crate::error::ServiceError;

/// What recording a decision led to.
#[derive(Debug)]
pub enum Decided {
    /// Recorded; the process that has the run's graph continues it.
    Recorded,
    /// Recorded on a run whose graph this process has (a blueprint's, or
    /// one of its registered graphs), which now waits for other decisions
    /// or ended rejected.
    Settled,
    /// Recorded on a run whose graph this process has, which it now
    /// continues in this leg.
    Continuing(Leg),
}

/// A run's graph as this process has it: rebuilt from a blueprint run's
/// attachment (with the blueprint's run settings, `max_steps`), or the
/// registered graph of the run's name and version.
pub(crate) struct Rebuilt {
    pub(crate) graph: Arc<dyn ServedGraph>,
    pub(crate) config: RunConfig,
}

/// A decision on `interrupt` (the only pending one when `None`), recorded
/// as made by `by`.
pub fn decision_request(
    interrupt: Option<String>,
    decision: Decision,
    by: Option<String>,
) -> DecisionRequest {
    let request = match interrupt {
        Some(id) => DecisionRequest::on(id, decision),
        None => DecisionRequest::new(decision),
    };
    match by.filter(|by| !by.trim().is_empty()) {
        Some(by) => request.by(by.trim()),
        None => request,
    }
}

/// What a new blueprint run starts from.
enum Opening<'t> {
    /// A fresh conversation: the input alone.
    Fresh(AgentState),
    /// The next turn of a thread: the input through the reducers.
    Thread(&'t str, AgentStateUpdate),
}

/// The runs of one database.
#[derive(Clone)]
pub struct Runs {
    executor: Arc<Executor>,
    models: ModelRegistry,
    /// Notified when a run is queued (Postgres only).
    wake: Option<Arc<Notify>>,
    /// The store behind the executor, by kind.
    backend: Backend,
    /// Started on first use: woken by commits of any process.
    changes: Arc<std::sync::OnceLock<Option<Arc<Notify>>>>,
    /// Started on first use: woken when runs change status (Postgres; on
    /// SQLite the commit signal serves).
    statuses: Arc<std::sync::OnceLock<Option<Arc<Notify>>>>,
    /// Variables of this process's environment that programs of the
    /// blueprints it drives may see (`--pass-env`).
    pass_env: Arc<Vec<String>>,
    /// The typed graphs this process can run besides blueprints.
    graphs: Arc<Graphs>,
    /// The time to live of thread records made without one
    /// ([`Runs::with_thread_ttl`]).
    thread_ttl: Option<Duration>,
}

impl std::fmt::Debug for Runs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let store = match &self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        };
        f.debug_struct("Runs").field("store", &store).finish_non_exhaustive()
    }
}

/// Which store the runs live in (the same one the executor holds).
#[derive(Clone)]
enum Backend {
    /// A SQLite file: runs are driven by the processes that start them.
    Sqlite(Arc<SqliteStore>),
    /// PostgreSQL: runs are shared with workers; streams register what
    /// they watch.
    Postgres(Arc<PostgresStore>),
}

/// How long a stream's registration of its run lasts (Postgres); renewed
/// at a third of it.
pub(crate) const WATCH_LEASE: Duration = Duration::from_secs(60);

/// The statuses `runs prune` deletes unless told others: runs that ended.
/// Paused and queued runs wait for a person or a worker; they go only
/// when `--status` names them.
pub(crate) const PRUNED_BY_DEFAULT: [RunStatus; 4] =
    [RunStatus::Completed, RunStatus::Failed, RunStatus::Rejected, RunStatus::Interrupted];

/// What a run started over the API is started with, besides its blueprint
/// and input.
#[derive(Debug, Default)]
pub(crate) struct Launch {
    pub(crate) thread: Option<String>,
    pub(crate) max_steps: Option<u64>,
    /// Nodes this run's first leg pauses before and after, besides the
    /// graph's own breakpoints (stored with a run queued for a worker).
    pub(crate) breakpoints: (Vec<String>, Vec<String>),
    /// Where its agents' long-term memory lies (the caller's shelf,
    /// [`Caller::shelf`](crate::Caller::shelf)); none: where their
    /// blueprint says.
    pub(crate) memory_shelf: Vec<String>,
}

impl Launch {
    /// `config` with the launch's step budget and breakpoints.
    pub(crate) fn configure(&self, mut config: RunConfig) -> RunConfig {
        if let Some(steps) = self.max_steps {
            config = config.max_steps(steps);
        }
        let (before, after) = &self.breakpoints;
        config.interrupt_before(before.clone()).interrupt_after(after.clone())
    }
}

impl Runs {
    /// Starts a run of `blueprint` on `input` with the id `run`: stored
    /// `queued` for a worker when runs are shared (Postgres), else driven
    /// here in a task of its own (its handle returned). Returns once the
    /// run is stored.
    pub(crate) async fn launch(
        &self,
        blueprint: &Blueprint,
        input: &UserInput,
        launch: Launch,
        run: RunId,
        events: Option<EventSink>,
    ) -> Result<Option<Leg>, ServiceError> {
        let shelved;
        let blueprint = match launch.memory_shelf.is_empty() {
            true => blueprint,
            false => {
                shelved = blueprint.clone().with_memory_shelf(launch.memory_shelf.clone());
                &shelved
            }
        };
        // A run queued for a worker needs the graph, not the MCP servers:
        // the worker starts them.
        let agent = if self.shared() {
            blueprint.compile_unstarted(&self.models)?
        } else {
            blueprint.start(&self.models).await?
        };
        let config = launch.configure(blueprint.run_config().run_id(run));
        self.assign_reviewers(launch.thread.as_deref(), &blueprint.reviewers()).await?;
        let opening = self.opening(&agent, input, launch.thread.as_deref(), run).await?;
        if self.shared() {
            self.queue(&agent, opening, config).await?;
            return Ok(None);
        }
        Ok(Some(Leg::of(self.drive(&agent, opening, with_events(config, events)).await?)))
    }

    /// What new run `run` of `agent` starts from: `input` as a fresh
    /// conversation, or as the next turn of `thread`.
    async fn opening<'t>(
        &self,
        agent: &CompiledAgent,
        input: &UserInput,
        thread: Option<&'t str>,
        run: RunId,
    ) -> Result<Opening<'t>, ServiceError> {
        Ok(match thread {
            Some(thread) => {
                let mut update =
                    agent.thread_input(&self.executor, thread, run, &input.message).await?;
                if !input.context.is_empty() {
                    update = update.context(input.context.clone());
                }
                Opening::Thread(thread, update)
            }
            None => Opening::Fresh(input_state(input)),
        })
    }

    /// Creates the run and drives it here, in a task of its own.
    async fn drive(
        &self,
        agent: &CompiledAgent,
        opening: Opening<'_>,
        config: RunConfig,
    ) -> Result<RunHandle<AgentState>, ServiceError> {
        let graph = agent.graph();
        Ok(match opening {
            Opening::Thread(thread, update) => {
                self.executor.start_on_thread(graph, thread, update, config).await?
            }
            Opening::Fresh(state) => self.executor.start(graph, state, config).await?,
        })
    }

    /// Stores the run `queued` for a worker.
    async fn queue(
        &self,
        agent: &CompiledAgent,
        opening: Opening<'_>,
        config: RunConfig,
    ) -> Result<RunId, ServiceError> {
        let graph = agent.graph();
        Ok(match opening {
            Opening::Thread(thread, update) => {
                self.executor.enqueue_on_thread(graph, thread, update, config).await?
            }
            Opening::Fresh(state) => self.executor.enqueue(graph, state, config).await?,
        })
    }

    /// The store behind the runs.
    pub fn store(&self) -> &Arc<dyn Store> {
        self.executor.store()
    }

    /// Records a decision. A run whose graph this process has is then
    /// taken over by it in the same transaction ([`Decided::Continuing`]);
    /// any other run is left for the process that has its graph.
    pub async fn decide(
        &self,
        run: RunId,
        request: DecisionRequest,
        events: Option<EventSink>,
    ) -> Result<Decided, ServiceError> {
        let record = self.store().run(run).await?;
        let decided = match self.rebuild(&record).await? {
            None => self
                .executor
                .decide(run, request)
                .await
                .map(|_| Decided::Recorded)
                .map_err(RunError::from),
            Some(rebuilt) => {
                // The blueprint's settings (its step budget) hold for every leg.
                let config = with_events(rebuilt.config, events);
                rebuilt.graph.resume(&self.executor, run, request, config).await.map(|continued| {
                    match continued {
                        Continued::Leg(leg) => Decided::Continuing(leg),
                        Continued::Settled => Decided::Settled,
                    }
                })
            }
        };
        match decided {
            Ok(decided) => Ok(decided),
            Err(RunError::Decision(DecisionError::NotPaused { status, .. })) => {
                Err(self.not_paused(run, status).await)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Why a decision found nothing to decide, in the run's own terms.
    async fn not_paused(&self, run: RunId, status: RunStatus) -> ServiceError {
        let message = match status {
            RunStatus::Queued | RunStatus::Running => {
                format!("run {run} is {status}: someone decided first (`tollgate runs show {run}`)")
            }
            RunStatus::Failed => {
                let why = self.store().run(run).await.ok().and_then(|record| record.failure);
                match why {
                    Some(failure) => format!(
                        "run {run} failed ({}: {}); there is nothing to decide",
                        failure.kind, failure.message
                    ),
                    None => format!("run {run} failed; there is nothing to decide"),
                }
            }
            status => format!("run {run} is {status}; there is nothing to decide"),
        };
        ServiceError::conflict(message)
    }

    /// Continues a blueprint run that was interrupted, failed or lost its
    /// owner.
    pub async fn continue_run(
        &self,
        run: RunId,
        events: Option<EventSink>,
    ) -> Result<RunSummary, ServiceError> {
        self.wait(self.continue_leg(run, events).await?).await?;
        self.summary(run).await
    }

    /// Takes a blueprint run that was interrupted, failed or lost its owner
    /// over; its leg runs in a task of its own.
    pub(crate) async fn continue_leg(
        &self,
        run: RunId,
        events: Option<EventSink>,
    ) -> Result<Leg, ServiceError> {
        let record = self.store().run(run).await?;
        if record.status.is_terminal() {
            // As `resume` on a finished run: a conflict with its state.
            return Err(ServiceError::conflict(format!(
                "run {run} is {}; there is nothing to continue",
                record.status
            )));
        }
        let Some(rebuilt) = self.rebuild(&record).await? else {
            return Err(ServiceError::invalid(format!(
                "run {run} is of a graph this process does not have: continue it from the process that has its graph (Executor::continue_run or recover)"
            )));
        };
        let config = with_events(rebuilt.config, events);
        Ok(rebuilt.graph.continue_run(&self.executor, run, config).await?)
    }

    /// Waits until no leg of `run` is in flight or queued (a worker of any
    /// process drives it).
    pub(crate) async fn settled(&self, run: RunId) -> Result<(), ServiceError> {
        let changes = self.changes();
        let mut watched = std::time::Instant::now();
        self.watch(run).await?;
        loop {
            let notified = changes.as_deref().map(Notify::notified);
            tokio::pin!(notified);
            if let Some(notified) = notified.as_mut().as_pin_mut() {
                notified.enable();
            }
            let record = self.store().run(run).await?;
            if !matches!(record.status, RunStatus::Queued | RunStatus::Running) {
                return Ok(());
            }
            if watched.elapsed() > WATCH_LEASE / 3 {
                self.watch(run).await?;
                watched = std::time::Instant::now();
            }
            // The run is watched: each of its commits wakes the signal.
            let changed = async {
                match notified.as_pin_mut() {
                    Some(notified) => notified.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
    }

    /// Waits for a leg this process drives, stopping it on Ctrl-C, and at
    /// once when it is cancelled elsewhere on Postgres.
    pub async fn wait(&self, leg: Leg) -> Result<(), ServiceError> {
        let changes = match &self.backend {
            Backend::Postgres(store) => Some(store.run_changes()),
            Backend::Sqlite(_) => None,
        };
        leg::wait(&self.executor, leg, changes).await
    }

    /// Cancels a running or queued run, wherever it is driven
    /// ([`Executor::cancel_run`]).
    pub async fn cancel(&self, run: RunId) -> Result<RunSummary, ServiceError> {
        self.executor.cancel_run(run).await?;
        self.summary(run).await
    }

    /// Deletes a run that is not running, every row of it.
    pub async fn delete(&self, run: RunId) -> Result<(), ServiceError> {
        Ok(self.store().delete_run(run).await?)
    }

    /// Deletes the runs last updated before `before_ms` whose status is
    /// one of `statuses` (when empty, the ended ones: completed, failed,
    /// rejected, interrupted), never a running one; returns the runs
    /// deleted, or with `dry_run` those that would be, deleting nothing.
    pub async fn prune(
        &self,
        before_ms: i64,
        statuses: &[RunStatus],
        dry_run: bool,
    ) -> Result<Vec<(RunId, RunStatus)>, ServiceError> {
        let statuses = if statuses.is_empty() { &PRUNED_BY_DEFAULT[..] } else { statuses };
        let mut doomed = Vec::new();
        for status in statuses.iter().filter(|status| **status != RunStatus::Running) {
            let filter = RunFilter { status: Some(*status), ..RunFilter::default() };
            let mut cursor = None;
            loop {
                let page = PageRequest { limit: 500, cursor };
                let found = self.store().list_runs(&filter, &page).await?;
                doomed.extend(
                    found
                        .runs
                        .iter()
                        .filter(|run| run.updated_at_ms < before_ms && run.status == *status)
                        .map(|run| (run.id, run.status)),
                );
                match found.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        doomed.sort_by_key(|(run, _)| std::cmp::Reverse(*run));
        doomed.dedup_by_key(|(run, _)| *run);
        if dry_run {
            return Ok(doomed);
        }
        let mut deleted = Vec::new();
        for (run, status) in doomed {
            match self.store().delete_run(run).await {
                Ok(()) => deleted.push((run, status)),
                // Started or removed meanwhile: not ours to delete now.
                Err(StoreError::RunInFlight { .. } | StoreError::RunNotFound { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(deleted)
    }

    /// Starts a blueprint run on `input` (a message, or a [`UserInput`]
    /// with the run's values) and waits for its leg to end.
    pub async fn start(
        &self,
        blueprint: &Blueprint,
        input: impl Into<UserInput>,
        thread: Option<&str>,
        events: Option<EventSink>,
    ) -> Result<RunSummary, ServiceError> {
        let agent = blueprint.start(&self.models).await?;
        let run = RunId::new();
        let opening = self.opening(&agent, &input.into(), thread, run).await?;
        let config = with_events(blueprint.run_config().run_id(run), events);
        let leg = Leg::of(self.drive(&agent, opening, config).await?);
        let run = leg.run_id();
        self.wait(leg).await?;
        self.summary(run).await
    }

    /// Stores a blueprint run on `input`, `queued` for a worker.
    pub async fn enqueue(
        &self,
        blueprint: &Blueprint,
        input: impl Into<UserInput>,
        thread: Option<&str>,
    ) -> Result<RunSummary, ServiceError> {
        // The worker starts the MCP servers; queuing needs only the graph.
        let agent = blueprint.compile_unstarted(&self.models)?;
        let run = RunId::new();
        let opening = self.opening(&agent, &input.into(), thread, run).await?;
        self.queue(&agent, opening, blueprint.run_config().run_id(run)).await?;
        self.summary(run).await
    }

    /// Stored events after `after`, at most `limit`.
    pub async fn events(
        &self,
        run: RunId,
        after: u64,
        limit: u64,
    ) -> Result<Vec<EventRecord>, ServiceError> {
        Ok(self.store().events(run, after, limit).await?)
    }
}

fn with_events(config: RunConfig, events: Option<EventSink>) -> RunConfig {
    match events {
        Some(sink) => config.events(sink),
        None => config,
    }
}

/// The embedder a spec names: `openai:MODEL` (OPENAI_BASE_URL and
/// OPENAI_API_KEY, as the chat provider reads them), asking for vectors of
/// `dims` dimensions.
pub fn embedder(spec: &str, dims: usize) -> Result<Arc<dyn Embedder>, ServiceError> {
    match spec.split_once(':') {
        Some(("openai", model)) if !model.is_empty() => {
            let embedder = tollgate_nodes::OpenAiEmbedder::from_env(model)?.dimensions(dims);
            Ok(Arc::new(embedder))
        }
        _ => Err(ServiceError::invalid(format!(
            "embedder `{spec}`: give `openai:MODEL` (an OpenAI-compatible /v1/embeddings)"
        ))),
    }
}

/// A stored event line as its envelope; a damaged line is named.
pub fn parse_event(record: &EventRecord) -> Result<EventEnvelope, ServiceError> {
    serde_json::from_str(&record.json).map_err(|error| {
        ServiceError::failed(format!("stored event {} is not valid JSON: {error}", record.seq))
            .with_source(error)
    })
}

/// Providers a blueprint may name besides `scripted:`: `openai:MODEL`
/// (`OPENAI_BASE_URL`, `OPENAI_API_KEY`) and `anthropic:MODEL`
/// (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`).
pub(crate) fn models() -> ModelRegistry {
    ModelRegistry::new().with_openai().with_anthropic()
}
