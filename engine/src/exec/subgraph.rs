//! Subgraphs: a compiled graph run as one node of another.
//!
//! The subgraph runs in its parent's task as a nested [`Leg`]: the same
//! driver, with its own state, frontier and step count, whose "commits"
//! are progress records ([`Store::put_task_progress`]): at each inner step
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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use tollgate_checkpoint::{Blob, Codec, CodecError, Store, TaskKey, TaskProgress, TaskUpdate};
use tracing::Instrument;

use crate::graph::CompiledGraph;
use crate::hitl::{Decision, Interrupt, Raised};
use crate::node::{Namespace, NodeContext, NodeError, NodeFn, NodeOutput, Signal};
use crate::state::State;

use super::cancel::Stop;
use super::config::RunConfig;
use super::driver::{Leg, SnapshotTracker};
use super::emit::node_id;
use super::error::RunError;
use super::executor::breakpoints;
use super::plan::Frontier;
use super::record::{FrontierRecord, TaskOutputRecord, TaskOutputRef};
use super::task::encode_output;

/// Schema version of the progress record.
const PROGRESS_VERSION: u16 = 1;

/// What a subgraph node's context carries: how to write its progress, and
/// the progress stored by an earlier attempt.
#[derive(Debug)]
pub(crate) struct SubgraphAccess {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) epoch: u64,
    pub(crate) config: RunConfig,
    pub(crate) cancel: Arc<Stop>,
    /// A task of the run itself: its stored progress tree, if any.
    pub(crate) progress: Option<Blob>,
    /// A task of a subgraph: the tree it belongs to and the path of the
    /// subgraph it is a task of.
    pub(crate) within: Option<(Arc<ProgressRoot>, Vec<u32>)>,
}

/// The progress tree of one task of the run, shared by every subgraph
/// below it; each write stores the whole tree.
#[derive(Debug)]
pub(crate) struct ProgressRoot {
    store: Arc<dyn Store>,
    run: tollgate_checkpoint::RunId,
    epoch: u64,
    /// The run's task the tree is stored under.
    key: TaskKey,
    emitter: Arc<super::emit::Emitter>,
    tree: tokio::sync::Mutex<ProgressTree>,
}

/// One level's progress record (JSON of [`ProgressRef`], kept as its text
/// so that writing the tree copies the other levels' records rather than
/// serialising them again) and those of its subgraph tasks, by task
/// position.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ProgressTree {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    record: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    children: BTreeMap<u32, ProgressTree>,
}

impl ProgressTree {
    fn at(&mut self, path: &[u32]) -> &mut ProgressTree {
        path.iter().fold(self, |tree, task| tree.children.entry(*task).or_default())
    }
}

/// A nested leg's bookkeeping: where its progress goes and what it holds
/// besides the leg's own state.
#[derive(Debug)]
pub(crate) struct Nest {
    /// The tree its progress is part of.
    pub(crate) root: Arc<ProgressRoot>,
    /// Its place in the tree (task positions below the root).
    pub(crate) path: Vec<u32>,
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
struct KeptOutput {
    task: u32,
    node: String,
    output: Box<RawValue>,
}

/// Inner interrupt (task, ordinal) as the parent task's ordinal.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct MappedInterrupt {
    ordinal: u32,
    task: u32,
    inner: u32,
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
struct ProgressRecord<S> {
    step: u64,
    state: S,
    frontier: FrontierRecord,
    kept: Vec<KeptOutput>,
    interrupts: Vec<MappedInterrupt>,
    next_ordinal: u32,
}

/// How a nested leg ended.
enum NestedEnd<S> {
    Done(S),
    Paused(Vec<Raised>),
    Stopped,
    Failed(RunError),
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
            let leg = nested_leg(&graph, &input, &state, &ctx).await?;
            let path = leg.ns.as_ref().map_or_else(String::new, |ns| ns.path.clone());
            match leg.drive_nested().await {
                NestedEnd::Done(last) => output(&state, last).map(NodeOutput::Update),
                NestedEnd::Paused(raised) => Err(NodeError::signal(Signal::Paused(raised))),
                NestedEnd::Stopped => Err(NodeError::signal(Signal::Stopped)),
                NestedEnd::Failed(error @ RunError::Store(_)) => {
                    Err(NodeError::signal(Signal::Halted(error)))
                }
                NestedEnd::Failed(source) => Err(NodeError::fatal(SubgraphFailed {
                    subgraph: path,
                    source: Box::new(source),
                })),
            }
        })
    })
}

/// A subgraph's run failed; the parent task fails with it.
#[derive(Debug, thiserror::Error)]
#[error("subgraph `{subgraph}` failed: {source}")]
struct SubgraphFailed {
    subgraph: String,
    #[source]
    source: Box<RunError>,
}

/// The nested leg of a subgraph task: from its stored progress when an
/// earlier attempt left some, else from the input mapping.
async fn nested_leg<P: State, T: State>(
    graph: &CompiledGraph<T>,
    input: &InputMap<P, T>,
    parent: &P,
    ctx: &NodeContext,
) -> Result<Leg<T>, NodeError> {
    let access = ctx.subgraph.clone().ok_or_else(|| {
        NodeError::fatal(format!("node `{}` runs a subgraph outside a run's driver", ctx.node))
    })?;
    let (run, step) = (ctx.run_id, ctx.step);
    let id = node_id(&ctx.node, ctx.step, ctx.task);
    let (path, id) = match &ctx.ns {
        Some(ns) => ns.qualify(&ctx.node, &id),
        None => (ctx.node.to_string(), id),
    };
    let ns = Arc::new(Namespace { id, path });
    let fatal = |error: RunError| NodeError::fatal(error);
    let decode_error = |source| fatal(RunError::StateDecode { run, step, source });
    let (root, path) = match &access.within {
        Some((root, path)) => {
            let mut path = path.clone();
            path.push(ctx.task);
            (Arc::clone(root), path)
        }
        None => {
            let tree = match &access.progress {
                Some(blob) => blob.decode::<ProgressTree>().map_err(decode_error)?,
                None => ProgressTree::default(),
            };
            let root = ProgressRoot {
                store: Arc::clone(&access.store),
                run,
                epoch: access.epoch,
                key: TaskKey { step, index: ctx.task, node: ctx.node.to_string() },
                emitter: Arc::clone(&ctx.emitter),
                tree: tokio::sync::Mutex::new(tree),
            };
            (Arc::new(root), Vec::new())
        }
    };
    let stored = root.tree.lock().await.at(&path).record.clone();
    let mut nest = Nest {
        root,
        path,
        kept: Vec::new(),
        interrupts: Vec::new(),
        next_ordinal: 0,
        raised: Vec::new(),
    };
    let (state, inner_step, frontier, reused, decisions) = match stored {
        None => {
            let state = input(parent, ctx.send_input())?;
            let frontier = Frontier::start(graph, &state).map_err(fatal)?;
            (state, 0, frontier, HashMap::new(), HashMap::new())
        }
        Some(raw) => {
            let record: ProgressRecord<T> = serde_json::from_str(raw.get()).map_err(|source| {
                decode_error(CodecError::Decode { codec: Codec::Json, source: Box::new(source) })
            })?;
            let frontier =
                Frontier::from_record(record.frontier, graph, run, record.step).map_err(fatal)?;
            let mut reused = HashMap::new();
            for kept in &record.kept {
                let task = frontier.tasks.get(kept.task as usize);
                if task.is_none_or(|task| *graph.node(task.node).name != kept.node) {
                    continue;
                }
                let output: TaskOutputRecord<T::Update> = serde_json::from_str(kept.output.get())
                    .map_err(|source| {
                    decode_error(CodecError::Decode {
                        codec: Codec::Json,
                        source: Box::new(source),
                    })
                })?;
                let encoded =
                    encode_output(access.config.codec, output, run, step).map_err(fatal)?;
                reused.insert(kept.task, encoded);
            }
            // The parent's decisions, by the inner task and ordinal they
            // answer.
            let mut decisions: HashMap<u32, BTreeMap<u32, Decision>> = HashMap::new();
            for mapped in &record.interrupts {
                if let Some(decision) = ctx.decisions.get(&mapped.ordinal) {
                    decisions
                        .entry(mapped.task)
                        .or_default()
                        .insert(mapped.inner, decision.clone());
                }
            }
            nest.kept = record.kept;
            nest.interrupts = record.interrupts;
            nest.next_ordinal = record.next_ordinal;
            (record.state, record.step, frontier, reused, decisions)
        }
    };
    let points = breakpoints(graph, &RunConfig::new()).map_err(fatal)?;
    Ok(Leg {
        graph: graph.clone(),
        store: Arc::clone(&access.store),
        run,
        epoch: access.epoch,
        config: access.config.clone(),
        state: Arc::new(state),
        step: inner_step,
        frontier,
        frontier_blob: None,
        reused,
        emitter: Arc::clone(&ctx.emitter),
        cancel: Arc::clone(&access.cancel),
        snapshots: SnapshotTracker::default(),
        decisions: decisions.into_iter().map(|(task, map)| (task, Arc::new(map))).collect(),
        no_decisions: Arc::default(),
        breakpoints: Arc::new(points),
        raised: Vec::new(),
        origins: Vec::new(),
        paused: Vec::new(),
        progress: HashMap::new(),
        ns: Some(ns),
        nest: Some(Box::new(nest)),
        span: tracing::Span::none(),
    })
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
                    Err(error) => return NestedEnd::Failed(error),
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
