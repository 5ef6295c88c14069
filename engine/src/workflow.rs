//! Durable workflows: plain async functions whose tasks are checkpointed.
//!
//! A [`Workflow`] compiles into a graph of one node (its function), so it
//! runs, pauses, resumes, lists and streams like any graph, on any store,
//! driven by the executor, workers and the server. Inside, each
//! [`WorkflowContext::task`] stores its result once it finishes
//! (`exec/workflow.rs`); when the run is continued the function runs again
//! from the top and every finished task returns its stored result at
//! once.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};
use tollgate_checkpoint::RunId;
use tracing::Instrument;

use crate::event::Event;
use crate::exec::workflow::{self as durable, Stored};
use crate::exec::Live;
use crate::graph::{CompileError, CompiledGraph, StateGraph};
use crate::hitl::{Decision, Interrupt};
use crate::node::{splitmix64, EmitError, NodeContext, NodeError, RetryPolicy};
use crate::route::{END, START};
use crate::state::{DynReducer, DynSchema, DynState, State};

/// The state field holding a workflow's input.
pub const WORKFLOW_INPUT: &str = "input";
/// The state field holding a workflow's output once it returned.
pub const WORKFLOW_OUTPUT: &str = "output";

/// An async function made durable: registered under a name and a version,
/// taking a JSON input `I` and returning a JSON output `O`, its tasks
/// ([`WorkflowContext::task`]) stored as they finish.
///
/// Its [`graph`](Workflow::graph) is an ordinary compiled graph with one
/// node, named after the workflow, and the state fields `input` and
/// `output`: start it with the executor, hand it to a worker, register it
/// with the server.
///
/// ```
/// use tollgate_checkpoint::{MemoryStore, RunStatus};
/// use tollgate_engine::{Executor, RunConfig, Workflow};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let refund = Workflow::new("refund", 1, |ctx, amount: u32| async move {
///     let charge = ctx.task("look_up", || async { Ok(format!("ch_{amount}")) }).await?;
///     let refunded: bool = ctx.task("refund", || async { Ok(true) }).await?;
///     Ok(serde_json::json!({"charge": charge, "refunded": refunded}))
/// })
/// .unwrap();
/// let executor = Executor::new(MemoryStore::new());
/// let outcome = executor.run(refund.graph(), refund.input(&20).unwrap(), RunConfig::new()).await.unwrap();
/// assert_eq!(outcome.status, RunStatus::Completed);
/// let output = refund.output(&outcome.state).unwrap().unwrap();
/// assert_eq!(output["charge"], "ch_20");
/// # });
/// ```
pub struct Workflow<I, O> {
    graph: CompiledGraph<DynState>,
    /// The function, for callers that run it inline
    /// ([`WorkflowContext::call_workflow`]).
    body: Arc<Body<I, O>>,
    types: PhantomData<fn(I) -> O>,
}

/// A workflow's function, its future boxed.
type Body<I, O> = dyn Fn(WorkflowContext, I) -> Pin<Box<dyn Future<Output = Result<O, NodeError>> + Send>>
    + Send
    + Sync;

impl<I, O> std::fmt::Debug for Workflow<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workflow").field("graph", &self.graph).finish_non_exhaustive()
    }
}

impl<I, O> Clone for Workflow<I, O> {
    fn clone(&self) -> Self {
        Self { graph: self.graph.clone(), body: Arc::clone(&self.body), types: PhantomData }
    }
}

impl<I, O> Workflow<I, O>
where
    I: Serialize + DeserializeOwned + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
{
    /// The workflow `name` at `version`, running `body` with its context
    /// and the run's input. `body` runs again from its start whenever the
    /// run is continued (after a crash, a cancel, a decision): it must ask
    /// for the same tasks in the same order, keeping whatever is not
    /// deterministic (clocks, random numbers, IO) inside tasks.
    ///
    /// Fails as a graph would with an invalid name.
    pub fn new<F, Fut>(name: impl Into<String>, version: u32, body: F) -> Result<Self, CompileError>
    where
        F: Fn(WorkflowContext, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, NodeError>> + Send + 'static,
    {
        let name = name.into();
        let body: Arc<Body<I, O>> = Arc::new(move |ctx, input| Box::pin(body(ctx, input)));
        let run = Arc::clone(&body);
        let schema = DynSchema::new()
            .field(WORKFLOW_INPUT, DynReducer::LastValue)
            .field(WORKFLOW_OUTPUT, DynReducer::LastValue);
        let graph = StateGraph::<DynState>::with_schema(name.clone(), version, schema)
            .node(name.clone(), move |state: Arc<DynState>, ctx: NodeContext| {
                let body = Arc::clone(&run);
                async move { run_body(&*body, &state, ctx).await }
            })
            .edge(START, name.clone())
            .edge(name, END)
            .compile()?;
        Ok(Self { graph, body, types: PhantomData })
    }

    /// The graph the workflow runs as.
    pub fn graph(&self) -> &CompiledGraph<DynState> {
        &self.graph
    }

    /// The graph the workflow runs as, taken.
    pub fn into_graph(self) -> CompiledGraph<DynState> {
        self.graph
    }

    /// The state a run of `input` starts from.
    pub fn input(&self, input: &I) -> Result<DynState, serde_json::Error> {
        let value = serde_json::to_value(input)?;
        Ok(DynState::from(Map::from_iter([(WORKFLOW_INPUT.to_owned(), value)])))
    }

    /// The output in a run's final state; `None` before the workflow
    /// returned.
    pub fn output(&self, state: &DynState) -> Result<Option<O>, serde_json::Error> {
        match state.get(WORKFLOW_OUTPUT) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => O::deserialize(value).map(Some),
        }
    }
}

/// The workflow's node: decodes the input, runs `body`, stores the output.
async fn run_body<I, O>(
    body: &Body<I, O>,
    state: &DynState,
    ctx: NodeContext,
) -> Result<<DynState as State>::Update, NodeError>
where
    I: DeserializeOwned,
    O: Serialize,
{
    let workflow = ctx.node.to_string();
    if ctx.ns.is_some() {
        return Err(NodeError::fatal(WorkflowError::Nested { workflow }));
    }
    let input = state.get(WORKFLOW_INPUT).cloned().unwrap_or(Value::Null);
    let input = I::deserialize(input)
        .map_err(|source| NodeError::fatal(WorkflowError::Input { workflow, source }))?;
    let inner = Arc::new(Inner { node: ctx, next: AtomicU32::new(0) });
    let context = WorkflowContext { inner, scope: Arc::from("") };
    let workflow = context.node().node.to_string();
    let output = body(context, input).await?;
    let output = serde_json::to_value(output)
        .map_err(|source| NodeError::fatal(WorkflowError::Output { workflow, source }))?;
    Ok(Map::from_iter([(WORKFLOW_OUTPUT.to_owned(), output)]))
}

/// What a workflow's function sees: its tasks, interrupts, graph calls
/// and the run. Cheap to clone.
#[derive(Debug, Clone)]
pub struct WorkflowContext {
    inner: Arc<Inner>,
    /// Prefixed to task names: `""` for the run's workflow, `child/` for
    /// one it calls ([`WorkflowContext::call_workflow`]).
    scope: Arc<str>,
}

#[derive(Debug)]
struct Inner {
    node: NodeContext,
    /// The next task's position.
    next: AtomicU32,
}

/// How a task is run: its retry policy and a time limit per attempt.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TaskOptions {
    /// Retries of errors marked [`NodeError::retryable`] (a timed-out
    /// attempt is one). `None`: one attempt.
    pub retry: Option<RetryPolicy>,
    /// The longest one attempt may take.
    pub timeout: Option<Duration>,
}

impl TaskOptions {
    /// One attempt, no time limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Retries retryable errors with `policy`.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Fails an attempt (retryably) that takes longer than `limit`.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }
}

impl WorkflowContext {
    fn node(&self) -> &NodeContext {
        &self.inner.node
    }

    /// The run.
    pub fn run_id(&self) -> RunId {
        self.node().run_id()
    }

    /// Runs one step of the workflow durably: `run` is called, and its
    /// result stored before it is returned. When the run is continued
    /// and the workflow runs again, a task that finished returns its
    /// stored result without being called.
    ///
    /// Tasks are numbered in the order they are asked for (when this
    /// method is called, not when the future is first polled): tasks
    /// joined together (`tokio::join!`, `futures::future::join_all`) run
    /// in parallel, each stored as it finishes. A run that asks, at a
    /// position, for another task than the one it stored there fails with
    /// [`RunError::TaskMismatch`](crate::RunError::TaskMismatch).
    ///
    /// At least once for the task in flight: a task that finished but
    /// whose result was not stored (a crash in between) runs again; its
    /// stored result is written exactly once.
    pub fn task<'a, T, F, Fut>(
        &'a self,
        name: &str,
        run: F,
    ) -> impl Future<Output = Result<T, NodeError>> + Send + 'a
    where
        T: Serialize + DeserializeOwned + Send + 'a,
        F: FnOnce() -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, NodeError>> + Send + 'a,
    {
        let mut run = Some(run);
        self.run_task(name, TaskOptions::new(), move || run.take().map(|run| run()))
    }

    /// [`WorkflowContext::task`] with a retry policy and a time limit:
    /// `run` is called once per attempt.
    pub fn task_with<'a, T, F, Fut>(
        &'a self,
        name: &str,
        options: TaskOptions,
        mut run: F,
    ) -> impl Future<Output = Result<T, NodeError>> + Send + 'a
    where
        T: Serialize + DeserializeOwned + Send + 'a,
        F: FnMut() -> Fut + Send + 'a,
        Fut: Future<Output = Result<T, NodeError>> + Send + 'a,
    {
        self.run_task(name, options, move || Some(run()))
    }

    /// Runs the next task: its stored result, else `run()` (`None`
    /// when it has no attempt left) with `options`, its result stored.
    fn run_task<'a, T, F, Fut>(
        &'a self,
        name: &str,
        options: TaskOptions,
        mut run: F,
    ) -> impl Future<Output = Result<T, NodeError>> + Send + 'a
    where
        T: Serialize + DeserializeOwned + Send + 'a,
        F: FnMut() -> Option<Fut> + Send + 'a,
        Fut: Future<Output = Result<T, NodeError>> + Send + 'a,
    {
        let position = self.inner.next.fetch_add(1, Ordering::SeqCst);
        let name = format!("{}{name}", self.scope);
        let span = tracing::info_span!(
            "task",
            otel.name = %format_args!("task {name}"),
            tollgate.run_id = %self.run_id(),
            tollgate.task = position,
        );
        async move {
            let ctx = self.node();
            match durable::stored::<T>(ctx, position, &name)? {
                Stored::Done(result) => return Ok(result),
                Stored::Missing => {}
            }
            durable::stopping(ctx)?;
            let step = ctx.step;
            let started = Event::TaskStarted { step, task: position, name: name.clone() };
            durable::emit(ctx, started, Live::Now)?;
            let policy = options
                .retry
                .clone()
                .unwrap_or(RetryPolicy { max_attempts: 1, ..RetryPolicy::default() });
            let mut attempt = 1;
            let result = loop {
                let error = match attempt_task(ctx, &name, attempt, &mut run, options.timeout).await
                {
                    Ok(result) => break Ok(result),
                    Err(error) if error.signal.is_some() => return Err(error),
                    Err(error) => error,
                };
                let retry = error.is_retryable() && attempt < policy.max_attempts;
                let delay = retry.then(|| retry_delay(ctx, position, attempt, &policy));
                let event = Event::TaskFailed {
                    step,
                    task: position,
                    name: name.clone(),
                    attempt,
                    error: error.to_string(),
                    retry_in_ms: delay.map(|delay| delay.as_millis() as u64),
                };
                durable::emit(ctx, event, Live::Now)?;
                let Some(delay) = delay else { break Err(error) };
                tokio::time::sleep(delay).await;
                durable::stopping(ctx)?;
                attempt += 1;
            };
            let result = result?;
            let json = serde_json::to_value(&result).map_err(|source| {
                NodeError::fatal(WorkflowError::TaskResult { task: name.clone(), source })
            })?;
            let event = Event::TaskCompleted {
                step,
                task: position,
                name: name.clone(),
                output: json.clone(),
            };
            durable::emit(ctx, event, Live::AfterCommit)?;
            durable::store(ctx, position, &name, &json).await?;
            Ok(result)
        }
        .instrument(span)
    }

    /// Sleeps `duration`, durably: the wake-up time (now plus `duration`,
    /// from the run's clock) is stored as a task named `sleep`, and until
    /// it has come the run goes back to the queue (status `queued`, its
    /// record's [`wakes_at_ms`](tollgate_checkpoint::RunRecord::wakes_at_ms)
    /// set): no process holds it, and any worker (or `recover`) takes it
    /// once the time has come, also after every process was restarted. The
    /// workflow then runs again from its start, its finished tasks return
    /// their stored results, and this call returns. Return its error with
    /// `?`, as with [`WorkflowContext::interrupt`].
    pub async fn sleep(&self, duration: Duration) -> Result<(), NodeError> {
        let now = self.now_ms();
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        let wake =
            self.task("sleep", move || async move { Ok(now.saturating_add(millis)) }).await?;
        self.park_until(wake)
    }

    /// Sleeps until `at_ms` (milliseconds since the Unix epoch), durably,
    /// as [`WorkflowContext::sleep`] does.
    pub async fn sleep_until(&self, at_ms: i64) -> Result<(), NodeError> {
        let wake = self.task("sleep", move || async move { Ok(at_ms) }).await?;
        self.park_until(wake)
    }

    /// Returns at once when `wake` has come, else parks the run until then.
    fn park_until(&self, wake: i64) -> Result<(), NodeError> {
        match self.now_ms() >= wake {
            true => Ok(()),
            false => Err(durable::sleep(wake)),
        }
    }

    /// Asks a person, pausing the run durably: returns the decision once
    /// one is recorded, else an error to return with `?`, which pauses the
    /// run (`awaiting_hitl`). Once decided, the workflow runs again from
    /// its start (its finished tasks return their stored results) and the
    /// same call returns the decision. Interrupts are matched by order, as
    /// in a node ([`NodeContext::interrupt`]).
    pub fn interrupt(&self, request: Interrupt) -> Result<Decision, NodeError> {
        self.node().interrupt(request)
    }

    /// Runs `graph` from `input` as one durable step and returns its final
    /// state: its steps are checkpointed with the workflow, so a crash
    /// inside it continues it where it was, and once it finished the call
    /// returns its stored final state. Calls are matched by order
    /// ([`NodeContext::call`]).
    pub async fn call<T: State>(&self, graph: &CompiledGraph<T>, input: T) -> Result<T, NodeError> {
        self.node().call(graph, input).await
    }

    /// Runs `workflow` on `input` as a part of this one, and returns its
    /// output. It runs inline, in this run: its tasks are numbered in this
    /// workflow's sequence and stored with its tasks, named after it
    /// (`child/task`), so that when the run continues, its finished tasks
    /// return their stored results and it resumes where it was, as this
    /// workflow does; its interrupts and sleeps pause this run. Its
    /// version plays no part (this run is pinned to this workflow's).
    pub async fn call_workflow<I2, O2>(
        &self,
        workflow: &Workflow<I2, O2>,
        input: I2,
    ) -> Result<O2, NodeError> {
        let child = WorkflowContext {
            inner: Arc::clone(&self.inner),
            scope: Arc::from(format!("{}{}/", self.scope, workflow.graph.name())),
        };
        let span = tracing::info_span!(
            "workflow",
            otel.name = %format_args!("workflow {}", workflow.graph.name()),
            tollgate.run_id = %self.run_id(),
        );
        (workflow.body)(child, input).instrument(span).await
    }

    /// Long-term memory, when the executor or the run has one.
    pub fn memory(&self) -> Option<&tollgate_checkpoint::Memory> {
        self.node().memory()
    }

    /// Milliseconds since the Unix epoch, from the run's clock. Not
    /// deterministic: read it inside a task when the workflow's path
    /// depends on it.
    pub fn now_ms(&self) -> i64 {
        self.node().now_ms()
    }

    /// Records a harness event (`custom` and the like) in the run's log
    /// ([`NodeContext::emit`]).
    pub fn emit(&self, event: Event) -> Result<(), EmitError> {
        self.node().emit(event)
    }

    /// Tasks asked for so far in this attempt (the next one's position).
    pub fn tasks_asked(&self) -> u32 {
        self.inner.next.load(Ordering::SeqCst)
    }
}

/// One attempt of a task: the script's result when a test gives one,
/// else `run()`'s within `timeout` (`None` from `run`: no attempt left).
async fn attempt_task<T, F, Fut>(
    ctx: &NodeContext,
    name: &str,
    attempt: u32,
    run: &mut F,
    timeout: Option<Duration>,
) -> Result<T, NodeError>
where
    T: DeserializeOwned,
    F: FnMut() -> Option<Fut>,
    Fut: Future<Output = Result<T, NodeError>>,
{
    if let Some(scripted) = durable::scripted(ctx, name, attempt) {
        return scripted.and_then(|value| {
            T::deserialize(value).map_err(|source| {
                NodeError::fatal(WorkflowError::ScriptedResult { task: name.to_owned(), source })
            })
        });
    }
    let Some(future) = run() else {
        return Err(NodeError::fatal(WorkflowError::TaskTaken { task: name.to_owned() }));
    };
    match timeout {
        None => future.await,
        Some(limit) => tokio::time::timeout(limit, future).await.unwrap_or_else(|_| {
            Err(NodeError::retryable(WorkflowError::TaskTimedOut { task: name.to_owned(), limit }))
        }),
    }
}

/// The wait before attempt `attempt + 1` of task `position`, its jitter
/// seeded by the run and the task (the same on every replay).
fn retry_delay(ctx: &NodeContext, position: u32, attempt: u32, policy: &RetryPolicy) -> Duration {
    let run = ctx.run_id.to_string();
    let seed =
        run.bytes().fold(u64::from(position), |seed, byte| splitmix64(seed ^ u64::from(byte)));
    policy.backoff(attempt, seed)
}

/// A workflow could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkflowError {
    /// The run's input does not decode as the workflow's input type.
    #[error("workflow `{workflow}`: the run's input does not decode: {source}")]
    Input {
        /// The workflow.
        workflow: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The workflow's output does not encode as JSON.
    #[error("workflow `{workflow}`: its output does not encode as JSON: {source}")]
    Output {
        /// The workflow.
        workflow: String,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A task's result does not encode as JSON.
    #[error("task `{task}`: its result does not encode as JSON: {source}")]
    TaskResult {
        /// The task.
        task: String,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// An attempt of a task took longer than its limit.
    #[error("task `{task}` took longer than {limit:?}")]
    TaskTimedOut {
        /// The task.
        task: String,
        /// Its limit ([`TaskOptions::timeout`]).
        limit: Duration,
    },
    /// A task's function gave no attempt (a [`WorkflowContext::task`]
    /// closure is called at most once).
    #[error("task `{task}` has no attempt left to make")]
    TaskTaken {
        /// The task.
        task: String,
    },
    /// A scripted result ([`TaskScript`](crate::TaskScript)) does not decode as the task's
    /// result type.
    #[error("task `{task}`: its scripted result does not decode: {source}")]
    ScriptedResult {
        /// The task.
        task: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A workflow ran as a subgraph or a graph called from a node: it
    /// runs as a run of its own, or inside another workflow
    /// ([`WorkflowContext::call_workflow`]).
    #[error("workflow `{workflow}` runs as a run of its own or from another workflow (WorkflowContext::call_workflow), not inside a graph")]
    Nested {
        /// The workflow.
        workflow: String,
    },
}
