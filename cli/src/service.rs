//! The operations the CLI and the server share: summaries, listing,
//! decisions, continuing blueprint runs, events.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{watch, Notify};

use serde::Serialize;
use serde_json::{json, Value};
use tollgate_checkpoint::{
    Cursor, DamagedRun, EventRecord, PageRequest, RunFailure, RunFilter, RunId, RunRecord,
    RunStatus, SqliteStore, Store, StoreError,
};
use tollgate_engine::{
    drive_leg, format_rfc3339, Decision, DecisionError, DecisionRequest, Event, EventEnvelope,
    EventSink, Executor, Resumed, RunConfig, RunError, RunHandle, Worker, Workload,
};
use tollgate_nodes::{AgentState, Blueprint, CompiledAgent, Message, ModelRegistry};
use tollgate_postgres::PostgresStore;

use crate::error::CliError;

/// One interrupt in a summary.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct InterruptView {
    pub(crate) id: String,
    pub(crate) node: String,
    pub(crate) kind: String,
    pub(crate) payload: Value,
    pub(crate) decisions: Vec<&'static str>,
}

/// The run summary (docs/cli.md, JSON).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunSummary {
    pub(crate) id: String,
    pub(crate) graph: String,
    pub(crate) status: RunStatus,
    pub(crate) step: u64,
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
    pub(crate) interrupts: Vec<InterruptView>,
    /// The final state of a completed run.
    pub(crate) result: Value,
    /// Why it failed or was rejected.
    pub(crate) error: Value,
}

impl RunSummary {
    /// The last assistant message of an agent run's result, if any.
    pub(crate) fn final_text(&self) -> Option<&str> {
        self.result["messages"]
            .as_array()?
            .iter()
            .rev()
            .find(|m| {
                m["role"] == "assistant" && m["content"].as_str().is_some_and(|c| !c.is_empty())
            })
            .and_then(|m| m["content"].as_str())
    }
}

/// One page of runs, and the rows of it that could not be read.
pub(crate) struct Listing {
    pub(crate) runs: Vec<RunSummary>,
    pub(crate) damaged: Vec<DamagedRun>,
    pub(crate) next: Option<String>,
}

impl Listing {
    /// `{"runs", "damaged": [{"id", "error"}], "next_cursor"}`.
    pub(crate) fn json(&self) -> Value {
        let damaged: Vec<Value> =
            self.damaged.iter().map(|row| json!({"id": row.id, "error": row.reason})).collect();
        json!({"runs": self.runs, "damaged": damaged, "next_cursor": self.next})
    }
}

/// What recording a decision led to.
pub(crate) enum Decided {
    /// Recorded; the process that has the run's graph continues it.
    Recorded,
    /// Recorded on a blueprint run, which now waits for other decisions or
    /// ended rejected.
    Settled,
    /// Recorded on a blueprint run, which this process now continues.
    Continuing(RunHandle<AgentState>),
}

/// A blueprint run's graph, rebuilt from what the run stored, and the
/// blueprint's run settings (`max_steps`).
pub(crate) struct Rebuilt {
    pub(crate) agent: CompiledAgent,
    pub(crate) config: RunConfig,
}

/// `url` with its password (if any) replaced by `***`, for messages.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else { return url.to_owned() };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => match rest[..at].find(':') {
            Some(colon) => {
                format!("{}{}:***{}", &url[..scheme_end + 3], &rest[..colon], &rest[at..])
            }
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// The runs of one database.
#[derive(Clone)]
pub(crate) struct Runs {
    executor: Arc<Executor>,
    models: ModelRegistry,
    /// Notified when a run is queued or changes status (Postgres only).
    wake: Option<Arc<Notify>>,
    /// The Postgres store, when the database is one (runs are shared with
    /// workers; streams register what they watch).
    postgres: Option<Arc<PostgresStore>>,
    /// Started on first use: woken by commits of any process.
    changes: Arc<std::sync::OnceLock<Option<Arc<Notify>>>>,
    /// The SQLite file, when the database is one.
    sqlite: Option<std::path::PathBuf>,
}

/// How often the SQLite change watcher looks at `PRAGMA data_version`.
const SQLITE_CHANGE_CHECK: Duration = Duration::from_millis(5);

/// How long a stream's registration of its run lasts (Postgres); renewed
/// at a third of it.
pub(crate) const WATCH_LEASE: Duration = Duration::from_secs(60);

/// What a run started over the API is started with, besides its blueprint
/// and input.
#[derive(Debug, Default)]
pub(crate) struct Launch {
    pub(crate) thread: Option<String>,
    pub(crate) max_steps: Option<u64>,
}

impl Runs {
    /// Opens the database `db` names: a `postgres://` (or `postgresql://`)
    /// URL selects PostgreSQL, anything else is a SQLite file's path.
    pub(crate) async fn open(db: &Path, create: bool) -> Result<Self, CliError> {
        let text = db.to_string_lossy();
        if !create && !PostgresStore::is_url(&text) && !db.exists() {
            return Err(CliError::NotFound {
                message: format!(
                    "no database at {text} (check --db or TOLLGATE_DB; `tollgate run` creates one)"
                ),
            });
        }
        let opened = if PostgresStore::is_url(&text) {
            PostgresStore::connect(&text).await.map(|store| {
                let store = Arc::new(store);
                let executor = Executor::with_store(Arc::clone(&store) as Arc<dyn Store>);
                (Some(store.run_notifications()), Some(store), executor)
            })
        } else {
            SqliteStore::open(db).map(|store| (None, None, Executor::new(store)))
        };
        let (wake, postgres, executor) = opened.map_err(|error| {
            let message = format!("cannot open database {}: {error}", redact(&text));
            match error {
                StoreError::InvalidSettings { .. }
                | StoreError::ForeignDatabase { .. }
                | StoreError::UnknownSchemaVersion { .. } => CliError::Invalid { message },
                _ => CliError::Failed { message },
            }
        })?;
        let sqlite = postgres.is_none().then(|| db.to_owned());
        Ok(Self {
            executor: Arc::new(executor),
            models: models(),
            wake,
            postgres,
            changes: Arc::default(),
            sqlite,
        })
    }

    /// Whether runs are shared with worker processes (Postgres): runs
    /// started over the API are then queued for them.
    pub(crate) fn shared(&self) -> bool {
        self.postgres.is_some()
    }

    /// A signal woken by commits of any process (of watched runs, on
    /// Postgres), or `None` where there is none and readers poll.
    pub(crate) fn changes(&self) -> Option<Arc<Notify>> {
        self.changes
            .get_or_init(|| match (&self.postgres, &self.sqlite) {
                (Some(postgres), _) => Some(postgres.event_notifications()),
                (None, Some(path)) => SqliteStore::open(path)
                    .and_then(|store| store.changes(SQLITE_CHANGE_CHECK))
                    .map_err(|error| tracing::warn!(%error, "no change signal; streams poll"))
                    .ok(),
                (None, None) => None,
            })
            .clone()
    }

    /// Registers `run` as streamed, so that its commits wake
    /// [`Runs::changes`] (Postgres; a no-op on SQLite, where every commit
    /// does).
    pub(crate) async fn watch(&self, run: RunId) -> Result<(), CliError> {
        if let Some(postgres) = &self.postgres {
            postgres.watch(run, WATCH_LEASE).await?;
        }
        Ok(())
    }

    /// Starts a run of `blueprint` on `input` with the id `run`: stored
    /// `queued` for a worker when runs are shared (Postgres), else driven
    /// here in a task of its own (its handle returned). Returns once the
    /// run is stored.
    pub(crate) async fn launch(
        &self,
        blueprint: &Blueprint,
        input: &str,
        launch: Launch,
        run: RunId,
        events: Option<EventSink>,
    ) -> Result<Option<RunHandle<AgentState>>, CliError> {
        let agent = blueprint.compile(&self.models)?;
        let mut config = blueprint.run_config().run_id(run);
        if let Some(thread) = launch.thread {
            config = config.thread(thread);
        }
        if let Some(steps) = launch.max_steps {
            config = config.max_steps(steps);
        }
        if self.shared() {
            self.executor.enqueue(agent.graph(), input_state(input), config).await?;
            return Ok(None);
        }
        let config = with_events(config, events);
        Ok(Some(self.executor.start(agent.graph(), input_state(input), config).await?))
    }

    /// The run's state at checkpoint `at` (the last when `None`), for
    /// blueprint runs: values, next nodes, open interrupts with their
    /// schemas, finished tasks of the step in flight.
    pub(crate) async fn state(&self, run: RunId, at: Option<u64>) -> Result<Value, CliError> {
        self.store().run(run).await?;
        let Some(rebuilt) = self.rebuild(run).await? else {
            return Err(CliError::invalid(format!(
                "run {run} was not started from a blueprint: its state needs its graph (Executor::get_state in the process that has it)"
            )));
        };
        self.state_of(&rebuilt.agent, run, at).await
    }

    /// [`Runs::state`] with the graph at hand.
    pub(crate) async fn state_of(
        &self,
        agent: &CompiledAgent,
        run: RunId,
        at: Option<u64>,
    ) -> Result<Value, CliError> {
        let state = self.executor.get_state(agent.graph(), run, at).await?;
        let interrupts: Vec<Value> = state
            .interrupts
            .iter()
            .map(|i| {
                json!({"id": i.id, "node": i.node, "kind": i.kind, "payload": i.payload,
                       "decisions": i.decisions, "schema": i.schema})
            })
            .collect();
        let pending: Vec<Value> = state
            .pending_writes
            .iter()
            .map(|(task, node)| json!({"task": task, "node": node}))
            .collect();
        Ok(json!({
            "id": run.to_string(),
            "step": state.step,
            "status": state.status,
            "values": serde_json::to_value(&state.values).unwrap_or(Value::Null),
            "next": state.next,
            "interrupts": interrupts,
            "pending_writes": pending,
        }))
    }

    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        self.executor.store()
    }

    pub(crate) async fn summary(&self, run: RunId) -> Result<RunSummary, CliError> {
        let record = self.store().run(run).await?;
        self.summarize(record, true).await
    }

    /// The summary of `record`. A completed run's result (its final state,
    /// possibly a whole conversation) is read only `with_result`: listings
    /// leave it null rather than load every run's state.
    async fn summarize(
        &self,
        record: RunRecord,
        with_result: bool,
    ) -> Result<RunSummary, CliError> {
        let interrupts = if record.pending_interrupts > 0 {
            self.store()
                .interrupts(record.id)
                .await?
                .iter()
                .filter(|i| i.decision.is_none())
                .map(|i| InterruptView {
                    id: i.id.clone(),
                    node: i.node.clone(),
                    kind: i.kind.clone(),
                    payload: i.payload.clone(),
                    decisions: allowed(&i.decisions),
                })
                .collect()
        } else {
            Vec::new()
        };
        // The closing event of the last leg carries the result (and the
        // reason of a rejection, for runs rejected before records kept it).
        let mut result = Value::Null;
        let mut error = record.failure.as_ref().map_or(Value::Null, failure_json);
        let wanted = match record.status {
            RunStatus::Completed => with_result,
            RunStatus::Rejected => error.is_null(),
            _ => false,
        };
        if wanted && record.last_seq > 0 {
            let last = self.store().events(record.id, record.last_seq - 1, 1).await?;
            if let Some(envelope) = last.first().and_then(|e| parse(e).ok()) {
                if let Event::RunEnded { result: value, error: failure, .. } = envelope.event {
                    result = value.unwrap_or(Value::Null);
                    if let (Value::Null, Some(failure)) = (&error, failure) {
                        error = failure_json(&failure);
                    }
                }
            }
        }
        Ok(RunSummary {
            id: record.id.to_string(),
            graph: record.graph.name.clone(),
            status: record.status,
            step: record.step,
            created_at: format_rfc3339(record.created_at_ms),
            updated_at: format_rfc3339(record.updated_at_ms),
            interrupts,
            result,
            error,
        })
    }

    pub(crate) async fn list(
        &self,
        filter: RunFilter,
        limit: u64,
        cursor: Option<String>,
    ) -> Result<Listing, CliError> {
        if limit == 0 || limit > 1000 {
            return Err(CliError::invalid("the page size (limit) must be between 1 and 1000"));
        }
        let page = PageRequest { limit, cursor: cursor.map(Cursor::from_text) };
        let found = self.store().list_runs(&filter, &page).await?;
        let mut runs = Vec::with_capacity(found.runs.len());
        let mut damaged = found.damaged;
        for record in found.runs {
            let id = record.id.to_string();
            match self.summarize(record, false).await {
                Ok(summary) => runs.push(summary),
                // A run whose stored rows do not read is reported, not fatal.
                Err(error) => damaged.push(DamagedRun { id, reason: error.to_string() }),
            }
        }
        Ok(Listing { runs, damaged, next: found.next.map(|cursor| cursor.to_string()) })
    }

    /// The blueprint graph of a run, if it was started from one.
    pub(crate) async fn rebuild(&self, run: RunId) -> Result<Option<Rebuilt>, CliError> {
        let Some(attachment) = self.executor.attachment(run).await? else {
            return Ok(None);
        };
        let blueprint = match Blueprint::from_attachment(&attachment) {
            Ok(blueprint) => blueprint,
            Err(tollgate_nodes::BlueprintError::NotABlueprintRun) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        let agent = blueprint.compile(&self.models)?;
        Ok(Some(Rebuilt { agent, config: blueprint.run_config() }))
    }

    /// Records a decision. A blueprint run is then taken over by this
    /// process in the same transaction ([`Decided::Continuing`]); any other
    /// run is left for the process that has its graph.
    pub(crate) async fn decide(
        &self,
        run: RunId,
        interrupt: Option<String>,
        decision: Decision,
        events: Option<EventSink>,
    ) -> Result<Decided, CliError> {
        let request = match interrupt {
            Some(id) => DecisionRequest::on(id, decision),
            None => DecisionRequest::new(decision),
        };
        self.store().run(run).await?;
        let decided = match self.rebuild(run).await? {
            None => self
                .executor
                .decide(run, request)
                .await
                .map(|_| Decided::Recorded)
                .map_err(RunError::from),
            Some(rebuilt) => {
                // The blueprint's settings (its step budget) hold for every leg.
                let config = with_events(rebuilt.config, events);
                self.executor.resume(rebuilt.agent.graph(), run, request, config).await.map(
                    |resumed| match resumed {
                        Resumed::Continuing(handle) => Decided::Continuing(handle),
                        Resumed::Waiting(_) | Resumed::Rejected(_) => Decided::Settled,
                    },
                )
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
    async fn not_paused(&self, run: RunId, status: RunStatus) -> CliError {
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
        CliError::Conflict { message }
    }

    /// A run's checkpoints, newest first, one page.
    pub(crate) async fn history(
        &self,
        run: RunId,
        before: Option<u64>,
        limit: u64,
        values: bool,
    ) -> Result<Value, CliError> {
        if limit == 0 || limit > 1000 {
            return Err(CliError::invalid("limit must be between 1 and 1000"));
        }
        let info = |c: &tollgate_checkpoint::CheckpointInfo| json!({"step": c.step, "at": format_rfc3339(c.at_ms), "tasks": c.tasks, "snapshot": c.snapshot});
        if !values {
            let page = self.store().history(run, before, limit).await?;
            let checkpoints: Vec<Value> = page.checkpoints.iter().map(info).collect();
            return Ok(json!({"checkpoints": checkpoints, "next_before": page.next_before}));
        }
        self.store().run(run).await?;
        let Some(rebuilt) = self.rebuild(run).await? else {
            return Err(CliError::invalid(format!(
                "run {run} was not started from a blueprint: its states need its graph (Executor::state_history in the process that has it)"
            )));
        };
        let page = self.executor.state_history(rebuilt.agent.graph(), run, before, limit).await?;
        let checkpoints: Vec<Value> = page
            .checkpoints
            .iter()
            .map(|(checkpoint, state)| {
                let mut entry = info(checkpoint);
                entry["values"] = serde_json::to_value(&state.values).unwrap_or(Value::Null);
                entry["next"] = json!(state.next);
                entry
            })
            .collect();
        Ok(json!({"checkpoints": checkpoints, "next_before": page.next_before}))
    }

    /// Continues a blueprint run that was interrupted, failed or lost its
    /// owner.
    pub(crate) async fn continue_run(
        &self,
        run: RunId,
        events: Option<EventSink>,
    ) -> Result<RunSummary, CliError> {
        wait(self.continue_leg(run, events).await?).await?;
        self.summary(run).await
    }

    /// Takes a blueprint run that was interrupted, failed or lost its owner
    /// over; its leg runs in a task of its own.
    pub(crate) async fn continue_leg(
        &self,
        run: RunId,
        events: Option<EventSink>,
    ) -> Result<RunHandle<AgentState>, CliError> {
        let record = self.store().run(run).await?;
        if record.status.is_terminal() {
            // As `resume` on a finished run: a conflict with its state.
            return Err(CliError::Conflict {
                message: format!("run {run} is {}; there is nothing to continue", record.status),
            });
        }
        let Some(rebuilt) = self.rebuild(run).await? else {
            return Err(CliError::invalid(format!(
                "run {run} was not started from a blueprint: continue it from the process that has its graph (Executor::continue_run or recover)"
            )));
        };
        let config = with_events(rebuilt.config, events);
        Ok(self.executor.continue_run(rebuilt.agent.graph(), run, config).await?)
    }

    /// Waits until no leg of `run` is in flight or queued (a worker of any
    /// process drives it).
    pub(crate) async fn settled(&self, run: RunId) -> Result<(), CliError> {
        let changes = self.changes();
        let wake = self.wake.clone();
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
            let status_change = async {
                match &wake {
                    Some(wake) => wake.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = async { match notified.as_pin_mut() { Some(n) => n.await, None => std::future::pending().await } } => {}
                () = status_change => {}
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
    }

    /// Cancels a running or queued run, wherever it is driven
    /// ([`Executor::cancel_run`]).
    pub(crate) async fn cancel(&self, run: RunId) -> Result<RunSummary, CliError> {
        self.executor.cancel_run(run).await?;
        self.summary(run).await
    }

    /// Deletes a run that is not running, every row of it.
    pub(crate) async fn delete(&self, run: RunId) -> Result<(), CliError> {
        Ok(self.store().delete_run(run).await?)
    }

    /// Deletes the runs last updated before `before_ms` (of `status`, when
    /// given), skipping running ones; returns the ids deleted.
    pub(crate) async fn prune(
        &self,
        before_ms: i64,
        status: Option<RunStatus>,
    ) -> Result<Vec<RunId>, CliError> {
        let filter = RunFilter { status, ..RunFilter::default() };
        let mut cursor = None;
        let mut doomed = Vec::new();
        loop {
            let page = PageRequest { limit: 500, cursor };
            let found = self.store().list_runs(&filter, &page).await?;
            doomed.extend(
                found
                    .runs
                    .iter()
                    .filter(|run| run.updated_at_ms < before_ms)
                    .filter(|run| run.status != RunStatus::Running)
                    .map(|run| run.id),
            );
            match found.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let mut deleted = Vec::new();
        for run in doomed {
            match self.store().delete_run(run).await {
                Ok(()) => deleted.push(run),
                // Started or removed meanwhile: not ours to delete now.
                Err(StoreError::RunInFlight { .. } | StoreError::RunNotFound { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(deleted)
    }

    /// Starts a blueprint run on `input` and waits for its leg to end.
    pub(crate) async fn start(
        &self,
        blueprint: &Blueprint,
        input: &str,
        events: Option<EventSink>,
    ) -> Result<RunSummary, CliError> {
        let agent = blueprint.compile(&self.models)?;
        let config = with_events(blueprint.run_config(), events);
        let handle = self.executor.start(agent.graph(), input_state(input), config).await?;
        let run = handle.run_id();
        wait(handle).await?;
        self.summary(run).await
    }

    /// Stores a blueprint run on `input`, `queued` for a worker.
    pub(crate) async fn enqueue(
        &self,
        blueprint: &Blueprint,
        input: &str,
    ) -> Result<RunSummary, CliError> {
        let agent = blueprint.compile(&self.models)?;
        let run = self
            .executor
            .enqueue(agent.graph(), input_state(input), blueprint.run_config())
            .await?;
        self.summary(run).await
    }

    /// Drives blueprint runs no process drives, `concurrency` legs at once,
    /// until `shutdown`; returns the worker's report as JSON.
    pub(crate) async fn work(
        &self,
        concurrency: usize,
        lease: Duration,
        max_lease_losses: u32,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Value {
        let mut worker = Worker::new((*self.executor).clone())
            .workload(Arc::new(BlueprintRuns { runs: self.clone(), lease }))
            .concurrency(concurrency)
            .max_lease_losses(max_lease_losses);
        if let Some(wake) = self.wake.clone() {
            worker = worker.wake_on(wake);
        }
        let report = worker.run(shutdown).await;
        json!({
            "legs": report.legs,
            "completed": report.completed,
            "failed": report.failed,
            "released": report.released,
            "lost_claims": report.lost_claims,
            "dead_lettered": report.dead_lettered,
        })
    }

    /// Stored events after `after`, at most `limit`.
    pub(crate) async fn events(
        &self,
        run: RunId,
        after: u64,
        limit: u64,
    ) -> Result<Vec<EventRecord>, CliError> {
        Ok(self.store().events(run, after, limit).await?)
    }
}

/// The user's message from `--input` or an API body's `input`: a JSON
/// string is its text; a JSON object gives its `message` field, else the
/// whole object as JSON text; anything else is taken as it is.
pub(crate) fn user_message(input: &Value) -> String {
    match input {
        Value::String(text) => text.clone(),
        Value::Object(object) => match object.get("message").and_then(Value::as_str) {
            Some(text) => text.to_owned(),
            None => input.to_string(),
        },
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A blueprint run's input: the user's message.
fn input_state(input: &str) -> AgentState {
    AgentState { messages: vec![Message::user("input.0", input)], ..AgentState::default() }
}

/// Blueprint runs, each rebuilt from what it stored: what `tollgate worker`
/// drives. A run that is not a blueprint run, or whose blueprint cannot be
/// rebuilt here (a model this build lacks), is left for other workers.
struct BlueprintRuns {
    runs: Runs,
    /// The lease of every leg.
    lease: Duration,
}

#[async_trait]
impl Workload for BlueprintRuns {
    async fn drive(
        &self,
        executor: &Executor,
        run: &RunRecord,
        _config: RunConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Option<Result<RunStatus, RunError>> {
        let rebuilt = match self.runs.rebuild(run.id).await {
            Ok(Some(rebuilt)) => rebuilt,
            Ok(None) => return None,
            Err(error) => {
                tracing::warn!(run = %run.id, %error, "worker: cannot rebuild the blueprint");
                return None;
            }
        };
        // Each leg runs with its blueprint's settings and the worker's lease.
        let config = rebuilt.config.lease(self.lease);
        let driven = match executor.continue_run(rebuilt.agent.graph(), run.id, config).await {
            Ok(handle) => drive_leg(handle, shutdown).await.map(|outcome| outcome.status),
            Err(error) => Err(error),
        };
        // One line per leg for whoever watches the worker.
        match &driven {
            Ok(status) => eprintln!("tollgate worker: run {}: {status}", run.id),
            Err(RunError::Store(StoreError::Fenced { .. } | StoreError::RunTerminal { .. }))
            | Err(RunError::RunOwned { .. }) => {}
            Err(error) => eprintln!("tollgate worker: run {}: {error}", run.id),
        }
        Some(driven)
    }
}

fn with_events(config: RunConfig, events: Option<EventSink>) -> RunConfig {
    match events {
        Some(sink) => config.events(sink),
        None => config,
    }
}

/// Waits for a leg, cancelling it at the next step on Ctrl-C (the run is
/// then `interrupted` and can be continued). A failed run is reported by
/// its summary, not as an error.
pub(crate) async fn wait<S: tollgate_engine::State>(handle: RunHandle<S>) -> Result<(), CliError> {
    let cancel = handle.cancel_token();
    let watcher = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupting at the next step boundary...");
            cancel.cancel();
        }
    });
    let result = handle.wait().await;
    watcher.abort();
    leg_result(result)
}

/// A leg's end as a command's result: a run that failed is reported by its
/// summary, not as an error; the store failing, or a conflict, is one.
pub(crate) fn leg_result<S>(
    result: Result<tollgate_engine::RunOutcome<S>, RunError>,
) -> Result<(), CliError> {
    match result {
        Ok(_) => Ok(()),
        Err(tollgate_engine::RunError::NodeFailed { .. })
        | Err(tollgate_engine::RunError::NodePanicked { .. })
        | Err(tollgate_engine::RunError::StepLimitExceeded { .. })
        | Err(tollgate_engine::RunError::VisitLimitExceeded { .. })
        | Err(tollgate_engine::RunError::InvalidUpdate { .. })
        | Err(tollgate_engine::RunError::UndeclaredTarget { .. })
        | Err(tollgate_engine::RunError::RouteFailed { .. })
        | Err(tollgate_engine::RunError::Cancelled { .. }) => Ok(()),
        Err(other) => Err(other.into()),
    }
}

fn failure_json(failure: &RunFailure) -> Value {
    json!({"kind": failure.kind, "class": failure.class_or_kind(), "node": failure.node,
           "message": failure.message})
}

fn allowed(decisions: &[String]) -> Vec<&'static str> {
    ["approve", "edit", "respond", "reject"]
        .into_iter()
        .filter(|kind| decisions.iter().any(|d| d == kind))
        .collect()
}

pub(crate) fn parse(record: &EventRecord) -> Result<EventEnvelope, CliError> {
    serde_json::from_str(&record.json).map_err(|error| CliError::Failed {
        message: format!("stored event {} is not valid JSON: {error}", record.seq),
    })
}

/// Providers a blueprint may name besides `scripted:`: `openai:MODEL`
/// (`OPENAI_BASE_URL`, `OPENAI_API_KEY`).
pub(crate) fn models() -> ModelRegistry {
    ModelRegistry::new().with_openai()
}
