//! What the CLI and the server show of runs: summaries, listings, a
//! run's state and its history.

use futures_util::StreamExt as _;
use serde::Serialize;
use serde_json::Value;
use tollgate_checkpoint::{
    Cursor, DamagedRun, HistoryPage, PageRequest, RunFailure, RunFilter, RunId, RunRecord,
    RunStatus,
};
use tollgate_engine::{
    format_rfc3339, Event, ForkOrigin, RunConfig, StatePage, StateSnapshot, ThreadHistoryPage,
};

use crate::error::ServiceError;

use super::{parse_event, Continuing, Outline, Rebuilt, Runs, StateWrite};

/// One interrupt in a summary.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct InterruptView {
    /// Its id (`RUN.STEP.TASK.ORDINAL`).
    pub id: String,
    /// The node that raised it.
    pub node: String,
    /// What kind of question (`tool_approval`, ...).
    pub kind: String,
    /// What it asks about.
    pub payload: Value,
    /// The decisions it accepts.
    pub decisions: Vec<&'static str>,
    /// JSON Schema an `edit` or `respond` value must satisfy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// When it was raised (RFC 3339).
    pub raised_at: String,
}

/// The run summary (docs/cli.md, JSON).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct RunSummary {
    /// The run's id.
    pub id: RunId,
    /// Its graph's name.
    pub graph: String,
    /// The thread the run was started on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// Its status.
    pub status: RunStatus,
    /// Its last step.
    pub step: u64,
    /// When it was created (Unix milliseconds; RFC 3339 `created_at` in
    /// JSON).
    #[serde(rename = "created_at", serialize_with = "rfc3339")]
    pub created_at_ms: i64,
    /// When it last changed (Unix milliseconds; RFC 3339 `updated_at` in
    /// JSON).
    #[serde(rename = "updated_at", serialize_with = "rfc3339")]
    pub updated_at_ms: i64,
    /// A queued run not to be taken before this time (Unix milliseconds;
    /// RFC 3339 `wakes_at` in JSON): a sleeping workflow's wake-up.
    #[serde(
        rename = "wakes_at",
        skip_serializing_if = "Option::is_none",
        serialize_with = "rfc3339_opt"
    )]
    pub wakes_at_ms: Option<i64>,
    /// What it waits for.
    pub interrupts: Vec<InterruptView>,
    /// The final state of a completed run.
    pub result: Value,
    /// Why it failed or was rejected.
    pub error: Option<FailureView>,
    /// Where it was forked from (`{"run", "step", "by", "changed"}`), in
    /// [`Runs::show`]'s view of one run; absent elsewhere and for runs
    /// that are no fork.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
}

/// Why a run failed or was rejected, as a summary shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FailureView {
    /// What kind of failure (`node_failed`, `rejected`, ...).
    pub kind: String,
    /// The error's class, else its kind.
    pub class: String,
    /// The node it happened in, if one.
    pub node: Option<String>,
    /// What happened.
    pub message: String,
}

impl FailureView {
    fn of(failure: &RunFailure) -> Self {
        Self {
            kind: failure.kind.clone(),
            class: failure.class_or_kind().to_owned(),
            node: failure.node.clone(),
            message: failure.message.clone(),
        }
    }
}

/// Unix milliseconds as RFC 3339, in JSON.
fn rfc3339<S: serde::Serializer>(ms: &i64, to: S) -> Result<S::Ok, S::Error> {
    to.serialize_str(&format_rfc3339(*ms))
}

fn rfc3339_opt<S: serde::Serializer>(ms: &Option<i64>, to: S) -> Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => rfc3339(ms, to),
        None => to.serialize_none(),
    }
}

impl RunSummary {
    /// The last assistant message of an agent run's result, if any.
    pub fn final_text(&self) -> Option<&str> {
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

/// A thread ([`Runs::thread`]): its latest run, and the state the next run
/// starts from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ThreadView {
    /// The thread.
    pub thread: String,
    /// Its latest run.
    pub latest: RunSummary,
    /// The step of the latest run's last checkpoint.
    pub step: u64,
    /// The state there, when the latest run's graph is one this process
    /// has (`None` otherwise).
    pub values: Option<Value>,
}

/// A page of a run's history ([`Runs::history`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum RunHistory {
    /// Each checkpoint's place (when, how many tasks, whether a snapshot),
    /// without its state.
    Checkpoints(HistoryPage),
    /// Each checkpoint with the state there.
    States(StatePage<Value>),
}

/// One page of runs, and the rows of it that could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub struct Listing {
    /// The runs, newest first.
    pub runs: Vec<RunSummary>,
    /// Rows that could not be read, each with why.
    pub damaged: Vec<DamagedRun>,
    /// The cursor of the next page, if there is one.
    pub next: Option<String>,
}

impl Runs {
    /// The graph of a run this process has (a blueprint's, or a
    /// registered one), for what only its graph can decode (`what`); any
    /// other run is refused, naming the Rust API to use.
    pub(crate) async fn blueprint_graph(
        &self,
        run: RunId,
        what: &str,
    ) -> Result<Rebuilt, ServiceError> {
        let record = self.store().run(run).await?;
        self.rebuild(&record).await?.ok_or_else(|| {
            ServiceError::invalid(format!(
                "run {run} is of a graph this process does not have: {what} in the process that has it"
            ))
        })
    }

    /// A thread: its latest run and the state its next run starts from.
    /// Not found when it has no run.
    pub async fn thread(&self, thread: &str) -> Result<ThreadView, ServiceError> {
        let Some(record) = self.executor.thread_latest(thread).await? else {
            return Err(ServiceError::missing(format!("thread `{thread}` has no runs")));
        };
        let run = record.id;
        let rebuilt = self.rebuild(&record).await?;
        let latest = self.summarize(record, true).await?;
        let (step, values) = match rebuilt {
            Some(rebuilt) => {
                let state = rebuilt.graph.state(&self.executor, run, None).await?;
                (state.step, Some(state.values))
            }
            None => (latest.step, None),
        };
        Ok(ThreadView { thread: thread.to_owned(), latest, step, values })
    }

    /// The run's graph: its outline at the run's version.
    pub(crate) async fn graph(&self, run: RunId) -> Result<Outline, ServiceError> {
        let rebuilt = self.blueprint_graph(run, "draw it from the process that has it").await?;
        Ok(rebuilt.graph.outline())
    }

    /// The run's state at checkpoint `at` (the last when `None`), for
    /// runs whose graph this process has: values, next nodes, open
    /// interrupts with their schemas, finished tasks of the step in flight.
    pub async fn state(
        &self,
        run: RunId,
        at: Option<u64>,
    ) -> Result<StateSnapshot<Value>, ServiceError> {
        let rebuilt = self.blueprint_graph(run, "read its state with Executor::get_state").await?;
        rebuilt.graph.state(&self.executor, run, at).await
    }

    /// The stored record of `run` (its status, step, last event, owner).
    pub(crate) async fn record(&self, run: RunId) -> Result<RunRecord, ServiceError> {
        Ok(self.store().run(run).await?)
    }

    /// Whether the database answers: one cheap read.
    pub(crate) async fn probe(&self) -> Result<(), ServiceError> {
        self.store().waiting().await?;
        Ok(())
    }

    /// The Prometheus text of `metrics` with the store's gauges now.
    pub(crate) async fn metrics_text(&self, metrics: &tollgate_telemetry::Metrics) -> String {
        use tollgate_engine::Clock as _;
        metrics.render(self.store().as_ref(), tollgate_engine::SystemClock.now_ms()).await
    }

    /// The summary of `run`: status, step, open interrupts, result or
    /// error.
    pub async fn summary(&self, run: RunId) -> Result<RunSummary, ServiceError> {
        let record = self.store().run(run).await?;
        self.summarize(record, true).await
    }

    /// [`Runs::summary`] with where the run was forked from, for a view of
    /// one run (`GET /runs/{id}`, `runs show`, a fork's answer). Not in
    /// every summary: it reads the run's last checkpoint, and the origin
    /// never changes over a run's life. A checkpoint that does not read
    /// leaves it out rather than fail the rest.
    pub async fn show(&self, run: RunId) -> Result<RunSummary, ServiceError> {
        let mut summary = self.summary(run).await?;
        summary.forked_from = self.executor.forked_from(run).await.ok().flatten();
        Ok(summary)
    }

    /// The summary of `record`. A completed run's result (its final state,
    /// possibly a whole conversation) is read only `with_result`: listings
    /// leave it null rather than load every run's state.
    pub(super) async fn summarize(
        &self,
        record: RunRecord,
        with_result: bool,
    ) -> Result<RunSummary, ServiceError> {
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
                    schema: i.schema.clone(),
                    raised_at: format_rfc3339(i.raised_at_ms),
                })
                .collect()
        } else {
            Vec::new()
        };
        // The closing event of the last leg carries the result (and the
        // reason of a rejection, for runs rejected before records kept it).
        let mut result = Value::Null;
        let mut error = record.failure.as_ref().map(FailureView::of);
        let wanted = match record.status {
            RunStatus::Completed => with_result,
            RunStatus::Rejected => error.is_none(),
            _ => false,
        };
        if wanted && record.last_seq > 0 {
            let last = self.store().events(record.id, record.last_seq - 1, 1).await?;
            if let Some(envelope) = last.first().and_then(|e| parse_event(e).ok()) {
                if let Event::RunEnded { result: value, error: failure, .. } = envelope.event {
                    result = value.unwrap_or(Value::Null);
                    if let (None, Some(failure)) = (&error, failure) {
                        error = Some(FailureView::of(&failure));
                    }
                }
            }
        }
        Ok(RunSummary {
            id: record.id,
            graph: record.graph.name.clone(),
            thread: record.thread.clone(),
            status: record.status,
            step: record.step,
            created_at_ms: record.created_at_ms,
            updated_at_ms: record.updated_at_ms,
            wakes_at_ms: record.wakes_at_ms(),
            interrupts,
            result,
            error,
            forked_from: None,
        })
    }

    /// One page of runs matching `filter`, newest first, after `cursor`.
    pub async fn list(
        &self,
        filter: RunFilter,
        limit: u64,
        cursor: Option<String>,
    ) -> Result<Listing, ServiceError> {
        if limit == 0 || limit > 1000 {
            return Err(ServiceError::invalid("the page size (limit) must be between 1 and 1000"));
        }
        let page = PageRequest { limit, cursor: cursor.map(Cursor::from_text) };
        let found = self.store().list_runs(&filter, &page).await?;
        let mut runs = Vec::with_capacity(found.runs.len());
        let mut damaged = found.damaged;
        // A few runs summarised at once (their reads overlap on the
        // store's read connections), in the page's order.
        let summaries =
            futures_util::stream::iter(found.runs.into_iter().map(|record| async move {
                let id = record.id.to_string();
                (id, self.summarize(record, false).await)
            }))
            .buffered(SUMMARIES_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        for (id, summary) in summaries {
            match summary {
                Ok(summary) => runs.push(summary),
                // A run whose stored rows do not read is reported, not fatal.
                Err(error) => damaged.push(DamagedRun { id, reason: error.to_string() }),
            }
        }
        Ok(Listing { runs, damaged, next: found.next.map(|cursor| cursor.to_string()) })
    }

    /// A run's checkpoints, newest first, one page.
    pub async fn history(
        &self,
        run: RunId,
        before: Option<u64>,
        limit: u64,
        values: bool,
    ) -> Result<RunHistory, ServiceError> {
        if limit == 0 || limit > 1000 {
            return Err(ServiceError::invalid("limit must be between 1 and 1000"));
        }
        if !values {
            return Ok(RunHistory::Checkpoints(self.store().history(run, before, limit).await?));
        }
        let rebuilt =
            self.blueprint_graph(run, "read its states with Executor::state_history").await?;
        Ok(RunHistory::States(rebuilt.graph.history(&self.executor, run, before, limit).await?))
    }

    /// Writes `update` on the run's latest checkpoint as if `as_node` ran
    /// (see `Executor::update_state`), for runs whose graph this process
    /// has, recorded as asked for `by` someone when given; the new step.
    pub async fn update_state(
        &self,
        run: RunId,
        update: Value,
        as_node: Option<&str>,
        by: Option<&str>,
    ) -> Result<u64, ServiceError> {
        let rebuilt =
            self.blueprint_graph(run, "update its state with Executor::update_state").await?;
        let mut config = RunConfig::new();
        if let Some(by) = by {
            config = config.by(by);
        }
        rebuilt.graph.update_state(&self.executor, run, update, as_node, config).await
    }

    /// Writes `write` on the run's latest checkpoint and continues the run
    /// here at once, with `sink` (see `Executor::goto_and_continue`): the
    /// run is never seen stopped in between. For runs whose graph this
    /// process has, recorded as asked for `by` someone when given.
    pub(crate) async fn write_and_continue(
        &self,
        run: RunId,
        write: StateWrite<'_>,
        by: Option<&str>,
        sink: Option<tollgate_engine::EventSink>,
    ) -> Result<Continuing, ServiceError> {
        let rebuilt = self.blueprint_graph(run, "write its state and continue it").await?;
        let mut config = rebuilt.config;
        if let Some(by) = by {
            config = config.by(by);
        }
        if let Some(sink) = sink {
            config = config.events(sink);
        }
        rebuilt.graph.write_and_continue(&self.executor, run, write, config).await
    }

    /// A new run `into` on `thread` from checkpoint `step` of `run`: with
    /// `input` (JSON of the state's update) written there as the graph's
    /// input, so that it starts again from the graph's entry; without,
    /// going on with what was to run next there (`Executor::fork`).
    /// Driven here with `sink`, for runs whose graph this process has.
    pub(crate) async fn start_at(
        &self,
        run: RunId,
        step: u64,
        input: Option<Value>,
        thread: &str,
        into: RunId,
        sink: Option<tollgate_engine::EventSink>,
    ) -> Result<super::Leg, ServiceError> {
        let rebuilt = self.blueprint_graph(run, "start again from its checkpoint").await?;
        let mut config = rebuilt.config.thread(thread).run_id(into);
        if let Some(sink) = sink {
            config = config.events(sink);
        }
        match input {
            Some(input) => rebuilt.graph.restart_at(&self.executor, run, step, input, config).await,
            None => rebuilt.graph.fork(&self.executor, run, step, None, config).await,
        }
    }

    /// Copies every run of `thread` onto `into` (`Executor::copy_thread`:
    /// the same checkpoints, the same ends); no graph is needed.
    pub(crate) async fn copy_thread(&self, thread: &str, into: &str) -> Result<(), ServiceError> {
        self.executor.copy_thread(thread, into).await?;
        Ok(())
    }

    /// A new run `into` from checkpoint `step` of `run` (its latest when
    /// `None`): that checkpoint's state, with `edit` (JSON of the state's
    /// update) merged through the reducers, and what was to run next
    /// (`Executor::fork`), driven here with `sink`, for runs whose graph
    /// this process has, recorded as asked for `by` someone when given.
    /// The source run is unchanged.
    pub async fn fork(
        &self,
        run: RunId,
        step: Option<u64>,
        edit: Option<Value>,
        into: RunId,
        sink: Option<tollgate_engine::EventSink>,
        by: Option<&str>,
    ) -> Result<super::Leg, ServiceError> {
        let record = self.store().run(run).await?;
        let rebuilt = self.blueprint_graph(run, "fork it with Executor::fork").await?;
        let mut config = rebuilt.config.run_id(into);
        if let Some(sink) = sink {
            config = config.events(sink);
        }
        if let Some(by) = by {
            config = config.by(by);
        }
        let step = step.unwrap_or(record.step);
        rebuilt.graph.fork(&self.executor, run, step, edit, config).await
    }

    /// A thread's checkpoints across all its runs, newest first, numbered
    /// from its first run's input: one page, each with its run, step,
    /// source, values and next nodes. Read with the graph of the thread's
    /// latest run. Not found when the thread has no runs.
    pub async fn thread_history(
        &self,
        thread: &str,
        before: Option<u64>,
        limit: u64,
    ) -> Result<ThreadHistoryPage<Value>, ServiceError> {
        if limit == 0 || limit > 1000 {
            return Err(ServiceError::invalid("limit must be between 1 and 1000"));
        }
        let Some(record) = self.executor.thread_latest(thread).await? else {
            return Err(ServiceError::missing(format!("thread `{thread}` has no runs")));
        };
        let run = record.id;
        let rebuilt = self.rebuild(&record).await?.ok_or_else(|| {
            ServiceError::invalid(format!(
                "thread `{thread}`'s latest run {run} is of a graph this process does not have: read its history with Executor::thread_history in the process that has it"
            ))
        })?;
        rebuilt.graph.thread_history(&self.executor, thread, before, limit).await
    }
}

fn allowed(decisions: &[String]) -> Vec<&'static str> {
    ["approve", "edit", "respond", "reject"]
        .into_iter()
        .filter(|kind| decisions.iter().any(|d| d == kind))
        .collect()
}

/// How many runs of a listing's page are summarised at once.
const SUMMARIES_AT_ONCE: usize = 8;
