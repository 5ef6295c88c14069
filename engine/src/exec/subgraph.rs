//! Subgraphs: a compiled graph run as one node of another.
//!
//! The subgraph runs in its parent's task as a nested [`Leg`]: the same
//! driver, with its own state, frontier and step count, whose "commits"
//! are progress records ([`RunStore::put_task_progress`]): at each inner step
//! the subgraph's state, frontier, the outputs of its finished tasks of
//! the step in flight and the mapping of its interrupts to the parent
//! task's are written in one transaction, with the events since the run's
//! last write. A parent task that runs again (after a crash, a pause, a
//! cancel) reads the record back and continues inside. When the subgraph
//! ends, its output mapping turns its final state into the parent task's
//! update, and the parent step commits as usual (which drops the record).
//!
//! Subgraphs nest: the record stored under a task of the run is a tree,
//! each level's record with the records of its own subgraph tasks below
//! it (by task position), so that a subgraph two levels down is stored,
//! and continued, like one level down.
//!
//! A node may also call a compiled graph from its own code
//! ([`NodeContext::call`]): each call of a task attempt is numbered in
//! call order, and its nested leg's record sits in the same tree under
//! that number. A node that runs again (after a pause inside the child, a
//! crash, a retry) calls again in the same order: a call whose child
//! finished returns the stored final state at once (its record's frontier
//! is empty), an unfinished one continues its child where it stopped.
//! The child's interrupts are the calling task's, numbered from
//! `(call + 1) << 20` so that they never meet the node's own.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use tollgate_checkpoint::{Blob, Codec, CodecError, TaskKey, TaskProgress, TaskUpdate};
use tracing::Instrument;

use crate::graph::CompiledGraph;
use crate::hitl::{Decision, Interrupt, Raised};
use crate::node::{Namespace, NodeContext, NodeError, NodeFn, NodeOutput, Signal};
use crate::state::State;

use super::access::{Part, ProgressRoot, ProgressTree, SubgraphAccess};
use super::config::RunConfig;
use super::driver::{Leg, SnapshotTracker};
use super::emit::node_id;
use super::error::RunError;
use super::plan::Frontier;
use super::record::{FrontierRecord, TaskOutputRecord, TaskOutputRef};
use super::setup::breakpoints;
use super::task::encode_output;

/// Schema version of the progress record (2: calls beside children).
const PROGRESS_VERSION: u16 = 2;

/// Calls one task attempt may make ([`NodeContext::call`]); call `i`'s
/// interrupts are numbered from `(i + 1) << CALL_ORDINAL_SHIFT`.
const MAX_CALLS: u32 = 4094;
const CALL_ORDINAL_SHIFT: u32 = 20;

/// A nested leg's bookkeeping: where its progress goes and what it holds
/// besides the leg's own state.
#[derive(Debug)]
pub(crate) struct Nest {
    /// The tree its progress is part of.
    pub(crate) root: Arc<ProgressRoot>,
    /// Its place in the tree (task positions and calls below the root).
    pub(crate) path: Vec<Part>,
    /// Outputs of finished inner tasks of the inner step in flight.
    kept: Vec<KeptOutput>,
    /// The parent task's interrupt ordinals of the inner step's interrupts.
    interrupts: Vec<MappedInterrupt>,
    /// The next parent ordinal to hand out (never reused within the parent
    /// step: the parent's interrupt ids stay unique).
    next_ordinal: u32,
    /// What a pause hands to the parent task.
    raised: Vec<Raised>,
}

/// A finished inner task's output (the task output record, as JSON text).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct KeptOutput {
    pub(crate) task: u32,
    pub(crate) node: String,
    pub(crate) output: Box<RawValue>,
}

/// Inner interrupt (task, ordinal) as the parent task's ordinal.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct MappedInterrupt {
    pub(crate) ordinal: u32,
    pub(crate) task: u32,
    pub(crate) inner: u32,
}

/// A level's progress record, written (JSON, whatever the run's codec: it
/// holds `Send` inputs) at each of its steps.
#[derive(Serialize)]
struct ProgressRef<'a, S> {
    step: u64,
    state: &'a S,
    frontier: FrontierRecord,
    kept: &'a [KeptOutput],
    interrupts: &'a [MappedInterrupt],
    next_ordinal: u32,
}

/// The progress record, read back.
#[derive(Deserialize)]
pub(crate) struct ProgressRecord<S> {
    pub(crate) step: u64,
    pub(crate) state: S,
    pub(crate) frontier: FrontierRecord,
    pub(crate) kept: Vec<KeptOutput>,
    pub(crate) interrupts: Vec<MappedInterrupt>,
    pub(crate) next_ordinal: u32,
}

/// How a nested leg ended.
enum NestedEnd<S> {
    Done(S),
    Paused(Vec<Raised>),
    Stopped,
    /// Its failure, with its node path.
    Failed((String, RunError)),
}

/// Maps the parent's state (and a `Send`'s input) to the subgraph's input.
pub(crate) type InputMap<P, T> =
    Arc<dyn Fn(&P, Option<&Value>) -> Result<T, NodeError> + Send + Sync>;
/// Maps the subgraph's final state to the parent task's update.
pub(crate) type OutputMap<P, T> =
    Arc<dyn Fn(&P, T) -> Result<<P as State>::Update, NodeError> + Send + Sync>;

fn unshared<S: Clone>(state: Arc<S>) -> S {
    Arc::try_unwrap(state).unwrap_or_else(|shared| (*shared).clone())
}

/// The node function that runs `graph` as a subgraph.
pub(crate) fn subgraph_node<P: State, T: State>(
    graph: CompiledGraph<T>,
    input: InputMap<P, T>,
    output: OutputMap<P, T>,
) -> NodeFn<P> {
    Arc::new(move |state: Arc<P>, ctx: NodeContext| {
        let (graph, input, output) = (graph.clone(), Arc::clone(&input), Arc::clone(&output));
        Box::pin(async move {
            let first = |parent: &P| input(parent, ctx.send_input());
            let leg = nested_leg(&graph, first, &state, &ctx, None).await?;
            let last = leg.drive_nested().await.into_result()?;
            output(&state, last).map(NodeOutput::Update)
        })
    })
}

impl<S> NestedEnd<S> {
    /// The final state, or the node error that carries how the nested leg
    /// stopped to the driver. A failure keeps the class of the nested
    /// run's error (a node's own class, `step_limit_exceeded`, ...).
    fn into_result(self) -> Result<S, NodeError> {
        match self {
            NestedEnd::Done(last) => Ok(last),
            NestedEnd::Paused(raised) => Err(NodeError::signal(Signal::Paused(raised))),
            NestedEnd::Stopped => Err(NodeError::signal(Signal::Stopped)),
            NestedEnd::Failed((_, error @ RunError::Store(_))) => {
                Err(NodeError::signal(Signal::Halted(error)))
            }
            NestedEnd::Failed((path, source)) => {
                let class = source.class().to_owned();
                Err(NodeError::fatal(SubgraphFailed { subgraph: path, source: Box::new(source) })
                    .with_class(class))
            }
        }
    }
}

impl NodeContext {
    /// Runs `graph` from `input` inside this node, durably, and returns its
    /// final state: its steps are checkpointed with this task (as a
    /// subgraph's are), so that
    ///
    /// - an interrupt inside `graph` pauses the run (return the error with
    ///   `?`, as with [`NodeContext::interrupt`]); once decided, this node
    ///   runs again from its start, and the same call continues the child
    ///   where it paused: its finished steps do not run again;
    /// - after a crash, a cancel or a retry of this node, a call whose
    ///   child already finished returns its stored final state at once.
    ///
    /// Calls are matched by order within the node, like interrupts: a node
    /// that runs again must make the same calls in the same order (a
    /// different graph at a position is refused as a fatal error). At most
    /// 4,094 calls per attempt. The child's events carry the namespace
    /// `NODE_ID~CALL` (`plan:2.0~0/search:1.0`), its state shows under
    /// this task in [`Executor::get_state`](crate::Executor::get_state).
    ///
    /// ```
    /// # use tollgate_engine::{CompiledGraph, DynState, NodeContext, NodeError};
    /// async fn plan(
    ///     research: CompiledGraph<DynState>,
    ///     ctx: NodeContext,
    /// ) -> Result<serde_json::Map<String, serde_json::Value>, NodeError> {
    ///     let found = ctx.call(&research, DynState::default()).await?;
    ///     let notes = found.get("notes").cloned().unwrap_or_default();
    ///     Ok(serde_json::Map::from_iter([("notes".to_owned(), notes)]))
    /// }
    /// ```
    pub async fn call<T: State>(&self, graph: &CompiledGraph<T>, input: T) -> Result<T, NodeError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        call_graph(self, graph, input, call).await
    }
}

/// Runs `graph` from `input` as call number `call` of the task `ctx`
/// belongs to ([`NodeContext::call`]).
pub(crate) async fn call_graph<T: State>(
    ctx: &NodeContext,
    graph: &CompiledGraph<T>,
    input: T,
    call: u32,
) -> Result<T, NodeError> {
    if call >= MAX_CALLS {
        return Err(NodeError::fatal(format!(
            "node `{}` called graphs more than {MAX_CALLS} times in one attempt",
            ctx.node
        )));
    }
    let mut input = Some(input);
    let first = move |_: &()| {
        input.take().ok_or_else(|| NodeError::fatal("a graph call's input was taken twice"))
    };
    let leg = nested_leg(graph, first, &(), ctx, Some(call)).await?;
    leg.drive_nested().await.into_result()
}

/// A node that ran again called another graph than the one its earlier
/// attempt called at that position.
#[derive(Debug, thiserror::Error)]
#[error(
    "node `{node}` called graph `{called}` as call {call}, where its earlier attempt called `{stored}`: a node that runs again must make the same calls in the same order"
)]
struct CallMismatch {
    node: String,
    call: u32,
    stored: String,
    called: String,
}

/// A subgraph's run failed; the parent task fails with it.
#[derive(Debug, thiserror::Error)]
#[error("subgraph `{subgraph}` failed: {source}")]
struct SubgraphFailed {
    subgraph: String,
    #[source]
    source: Box<RunError>,
}

/// The nested leg of a subgraph task, or of call number `call` of a
/// task: from its stored progress when an earlier attempt left some, else
/// from `first` (the input mapping of the parent's state).
async fn nested_leg<P, T: State>(
    graph: &CompiledGraph<T>,
    first: impl FnOnce(&P) -> Result<T, NodeError>,
    parent: &P,
    ctx: &NodeContext,
    call: Option<u32>,
) -> Result<Leg<T>, NodeError> {
    let access = ctx.subgraph.clone().ok_or_else(|| {
        NodeError::fatal(format!("node `{}` runs a graph outside a run's driver", ctx.node))
    })?;
    let run = ctx.run_id;
    let fatal = |error: RunError| NodeError::fatal(error);
    let (root, path) = tree_position(ctx, &access, call)?;
    let stored = stored_level(&root, &path, ctx, graph, call).await?;
    let first_ordinal = call.map_or(0, |call| (call + 1) << CALL_ORDINAL_SHIFT);
    let mut nest = Nest {
        root,
        path,
        kept: Vec::new(),
        interrupts: Vec::new(),
        next_ordinal: first_ordinal,
        raised: Vec::new(),
    };
    let Resumed { state, step: inner_step, frontier, reused, decisions } = match stored {
        None => {
            let state = first(parent)?;
            let frontier = Frontier::start(graph, &state).map_err(fatal)?;
            let (reused, decisions) = (HashMap::new(), HashMap::new());
            Resumed { state, step: 0, frontier, reused, decisions }
        }
        Some(raw) => resumed(&raw, graph, ctx, &access, &mut nest)?,
    };
    let points = breakpoints(graph, &RunConfig::new()).map_err(fatal)?;
    Ok(Leg {
        graph: graph.clone(),
        store: Arc::clone(&access.leg.store),
        run,
        epoch: access.leg.epoch,
        config: access.leg.config.clone(),
        state: Arc::new(state),
        step: inner_step,
        frontier,
        frontier_blob: None,
        reused,
        emitter: Arc::clone(&ctx.emitter),
        cancel: Arc::clone(&access.leg.cancel),
        snapshots: SnapshotTracker::default(),
        decisions: decisions.into_iter().map(|(task, map)| (task, Arc::new(map))).collect(),
        no_decisions: Arc::default(),
        breakpoints: Arc::new(points),
        raised: Vec::new(),
        origins: Vec::new(),
        paused: Vec::new(),
        wake: None,
        progress: HashMap::new(),
        tasks: Arc::default(),
        access: None,
        ns: Some(Arc::new(namespace(ctx, call))),
        nest: Some(Box::new(nest)),
        span: tracing::Span::none(),
    })
}

/// Where a nested leg's events are: the task's id (with `~CALL` for a
/// call) and path, under the enclosing namespace.
fn namespace(ctx: &NodeContext, call: Option<u32>) -> Namespace {
    let mut id = node_id(&ctx.node, ctx.step, ctx.task);
    if let Some(call) = call {
        id = format!("{id}~{call}");
    }
    let (path, id) = match &ctx.ns {
        Some(ns) => ns.qualify(&ctx.node, &id),
        None => (ctx.node.to_string(), id),
    };
    Namespace { id, path }
}

/// The progress tree a nested leg's record is in, and its path there: the
/// enclosing subgraph's tree, or the task's own (read from its stored
/// progress the first time a nested leg of the task opens it).
fn tree_position(
    ctx: &NodeContext,
    access: &SubgraphAccess,
    call: Option<u32>,
) -> Result<(Arc<ProgressRoot>, Vec<Part>), NodeError> {
    let (run, step) = (ctx.run_id, ctx.step);
    let (root, mut path) = match &access.within {
        Some((root, path)) => {
            let mut path = path.clone();
            path.push(Part::Task(ctx.task));
            (Arc::clone(root), path)
        }
        None => {
            let root = match access.root.get() {
                Some(root) => Arc::clone(root),
                None => {
                    let tree = match &access.progress {
                        Some(blob) => blob.decode::<ProgressTree>().map_err(|source| {
                            NodeError::fatal(RunError::StateDecode { run, step, source })
                        })?,
                        None => ProgressTree::default(),
                    };
                    let root = Arc::new(ProgressRoot {
                        store: Arc::clone(&access.leg.store),
                        run,
                        epoch: access.leg.epoch,
                        key: TaskKey { step, index: ctx.task, node: ctx.node.to_string() },
                        emitter: Arc::clone(&ctx.emitter),
                        tree: tokio::sync::Mutex::new(tree),
                    });
                    Arc::clone(access.root.get_or_init(|| root))
                }
            };
            (root, Vec::new())
        }
    };
    if let Some(call) = call {
        path.push(Part::Call(call));
    }
    Ok((root, path))
}

/// The record stored at `path`, if any; a call whose position holds
/// another graph's record is refused.
async fn stored_level<T: State>(
    root: &ProgressRoot,
    path: &[Part],
    ctx: &NodeContext,
    graph: &CompiledGraph<T>,
    call: Option<u32>,
) -> Result<Option<Box<RawValue>>, NodeError> {
    let mut tree = root.tree.lock().await;
    let level = tree.at(path);
    if let (Some(call), Some(stored)) = (call, &level.graph) {
        if stored != graph.name() {
            return Err(NodeError::fatal(CallMismatch {
                node: ctx.node.to_string(),
                call,
                stored: stored.clone(),
                called: graph.name().to_owned(),
            }));
        }
    }
    Ok(level.record.clone())
}

/// Where a nested leg starts: its state, step, frontier, the outputs its
/// step in flight already has, and the parent's decisions by the inner
/// task and ordinal they answer.
struct Resumed<T: State> {
    state: T,
    step: u64,
    frontier: Frontier,
    reused: HashMap<u32, (TaskOutputRecord<T::Update>, Blob)>,
    decisions: HashMap<u32, BTreeMap<u32, Decision>>,
}

/// A nested leg from its stored record (`nest` takes the record's kept
/// outputs, interrupt mapping and next ordinal).
fn resumed<T: State>(
    raw: &RawValue,
    graph: &CompiledGraph<T>,
    ctx: &NodeContext,
    access: &SubgraphAccess,
    nest: &mut Nest,
) -> Result<Resumed<T>, NodeError> {
    let (run, step) = (ctx.run_id, ctx.step);
    let fatal = |error: RunError| NodeError::fatal(error);
    let decode_error = |source: serde_json::Error| {
        let source = CodecError::Decode { codec: Codec::Json, source: Box::new(source) };
        fatal(RunError::StateDecode { run, step, source })
    };
    let record: ProgressRecord<T> = serde_json::from_str(raw.get()).map_err(decode_error)?;
    let frontier =
        Frontier::from_record(record.frontier, graph, run, record.step).map_err(fatal)?;
    let mut reused = HashMap::new();
    for kept in &record.kept {
        let task = frontier.tasks.get(kept.task as usize);
        if task.is_none_or(|task| *graph.node(task.node).name != kept.node) {
            continue;
        }
        let output: TaskOutputRecord<T::Update> =
            serde_json::from_str(kept.output.get()).map_err(decode_error)?;
        let encoded = encode_output(access.leg.config.codec, output, run, step).map_err(fatal)?;
        reused.insert(kept.task, encoded);
    }
    let mut decisions: HashMap<u32, BTreeMap<u32, Decision>> = HashMap::new();
    for mapped in &record.interrupts {
        if let Some(decision) = ctx.decisions.get(&mapped.ordinal) {
            decisions.entry(mapped.task).or_default().insert(mapped.inner, decision.clone());
        }
    }
    nest.kept = record.kept;
    nest.interrupts = record.interrupts;
    nest.next_ordinal = record.next_ordinal;
    Ok(Resumed { state: record.state, step: record.step, frontier, reused, decisions })
}

impl<S: State> Leg<S> {
    /// Drives a subgraph's leg to its end, a pause or a stop.
    async fn drive_nested(mut self) -> NestedEnd<S> {
        let span = tracing::info_span!(
            "subgraph",
            graph = %self.graph.name(),
            ns = %self.ns.as_ref().map_or("", |ns| ns.id.as_str())
        );
        async move {
            if self.frontier.tasks.is_empty() {
                return NestedEnd::Done(unshared(self.state));
            }
            loop {
                match self.step_once().await {
                    Ok(None) => continue,
                    Ok(Some(tollgate_checkpoint::RunStatus::Completed)) => {
                        return NestedEnd::Done(unshared(self.state))
                    }
                    Ok(Some(tollgate_checkpoint::RunStatus::AwaitingHitl)) => {
                        let nest = self.nest.as_mut().expect("a nested leg has its nest");
                        return NestedEnd::Paused(std::mem::take(&mut nest.raised));
                    }
                    Ok(Some(_)) => return NestedEnd::Stopped,
                    Err(error) => {
                        let path = self.ns.as_ref().map_or_else(String::new, |ns| ns.path.clone());
                        return NestedEnd::Failed((path, error));
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Keeps finished inner tasks' outputs in the progress record and
    /// writes it.
    pub(crate) async fn keep_nested(
        &mut self,
        outputs: Vec<(u32, String, &TaskOutputRecord<S::Update>)>,
    ) -> Result<(), RunError> {
        let (run, step) = (self.run, self.step);
        let nest = self.nest.as_mut().expect("a nested leg has its nest");
        for (task, node, output) in outputs {
            let borrowed = TaskOutputRef { update: output.update.as_ref(), goto: &output.goto };
            let output = serde_json::value::to_raw_value(&borrowed).map_err(|source| {
                let source = CodecError::Encode { codec: Codec::Json, source: Box::new(source) };
                RunError::Encode { run, step, source }
            })?;
            nest.kept.retain(|kept| kept.task != task);
            nest.kept.push(KeptOutput { task, node, output });
        }
        self.write_progress(false).await
    }

    /// A nested leg's commit: its progress record, with the events since
    /// the run's last write. `advanced`: an inner step was committed (its
    /// kept outputs and interrupts are done with).
    pub(crate) async fn write_progress(&mut self, advanced: bool) -> Result<(), RunError> {
        let (run, step) = (self.run, self.step);
        let encode_error = |source| {
            let source = CodecError::Encode { codec: Codec::Json, source: Box::new(source) };
            RunError::Encode { run, step, source }
        };
        let nest = self.nest.as_mut().expect("a nested leg has its nest");
        if advanced {
            nest.kept.clear();
            nest.interrupts.clear();
        }
        nest.raised.clear();
        let records = std::mem::take(&mut self.raised);
        let origins = std::mem::take(&mut self.origins);
        for (record, origin) in records.into_iter().zip(origins) {
            let known = nest
                .interrupts
                .iter()
                .find(|mapped| mapped.task == record.task && mapped.inner == record.ordinal);
            let ordinal = match known {
                Some(mapped) => mapped.ordinal,
                None => {
                    let ordinal = nest.next_ordinal;
                    nest.next_ordinal += 1;
                    let mapped =
                        MappedInterrupt { ordinal, task: record.task, inner: record.ordinal };
                    nest.interrupts.push(mapped);
                    ordinal
                }
            };
            let request = Interrupt::from_record(&record);
            nest.raised.push(Raised { ordinal, request, origin: Some(origin) });
        }
        let record = ProgressRef {
            step,
            state: &*self.state,
            frontier: self.frontier.to_record(&self.graph),
            kept: &nest.kept,
            interrupts: &nest.interrupts,
            next_ordinal: nest.next_ordinal,
        };
        let record = serde_json::value::to_raw_value(&record).map_err(encode_error)?;
        // The whole tree, under the tree's lock until it is stored, so
        // that writes of one tree reach the store in order.
        let root = Arc::clone(&nest.root);
        let mut tree = root.tree.lock().await;
        let level = tree.at(&nest.path);
        level.record = Some(record);
        if matches!(nest.path.last(), Some(Part::Call(_))) && level.graph.is_none() {
            level.graph = Some(self.graph.name().to_owned());
        }
        if advanced {
            level.children.clear();
        }
        let blob = Codec::Json
            .encode(&*tree, PROGRESS_VERSION)
            .map_err(|source| RunError::Encode { run, step, source })?;
        let _gate = root.emitter.writes.lock().await;
        let progress = TaskProgress {
            run: root.run,
            epoch: root.epoch,
            progress: TaskUpdate { task: root.key.clone(), update: blob },
            events: root.emitter.take_batch(),
        };
        tollgate_checkpoint::__failpoint("progress:before");
        root.store
            .put_task_progress(progress)
            .await
            .inspect_err(|error| crate::telemetry::count_store_error("put_task_progress", error))?;
        root.emitter.committed();
        tollgate_checkpoint::__failpoint("progress:after");
        Ok(())
    }
}
