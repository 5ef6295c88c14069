//! What a checkpoint shows: `get_state` (values, next nodes, the source
//! that wrote it, each task of the step in flight with its error, its
//! finished output, its interrupts and the state of the graphs running
//! nested in it), a run's history and a thread's history across its runs.

use std::collections::HashMap;

use serde_json::Value;
use tollgate_checkpoint::{
    CheckpointInfo, InterruptRecord, PageRequest, RunFilter, RunId, RunRecord, RunStatus,
    TaskFailure,
};

use crate::graph::CompiledGraph;
use crate::hitl::PendingInterrupt;
use crate::state::State;

use super::access::ProgressTree;
use super::emit::node_id;
use super::error::RunError;
use super::executor::Executor;
use super::load::{decode, decode_state, Loaded};
use super::record::{CheckpointSource, ForkOrigin, FrontierRecord};
use super::setup::{check_graph, same_graph};
use super::subgraph::{KeptOutput, MappedInterrupt, ProgressRecord};

/// A run's state at one checkpoint, with what comes next
/// ([`Executor::get_state`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StateSnapshot<S> {
    /// The run.
    pub run: RunId,
    /// The checkpoint: the step it committed (0 is the input).
    pub step: u64,
    /// What wrote it: the run's input (step 0), its loop, a state update,
    /// or a fork's copy.
    pub source: CheckpointSource,
    /// Who asked for the state update or fork that wrote it, when they
    /// said ([`RunConfig::by`](crate::RunConfig::by)); `None` for the
    /// run's own steps.
    pub by: Option<String>,
    /// Where the run was forked from, and what the fork changed, when it
    /// was (every checkpoint of a forked run says so).
    pub forked_from: Option<ForkOrigin>,
    /// The run's status now.
    pub status: RunStatus,
    /// The state at that checkpoint.
    pub values: S,
    /// The nodes of the next step, in task order (empty when the run ends
    /// there).
    pub next: Vec<String>,
    /// The interrupts the run waits on (the last checkpoint of a paused
    /// run only), with their answer schemas.
    pub interrupts: Vec<PendingInterrupt>,
    /// Tasks of the next step that already finished and whose outputs are
    /// stored (the last checkpoint of an unfinished step only): (task
    /// position, node).
    pub pending_writes: Vec<(u32, String)>,
    /// The tasks of the next step, in task order, with what is known of
    /// each (at the last checkpoint: errors, finished outputs, interrupts,
    /// nested graphs in flight; at a past one, only what ran).
    pub tasks: Vec<TaskState>,
}

/// One task of the step after a checkpoint ([`StateSnapshot::tasks`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TaskState {
    /// Its position in the step.
    pub task: u32,
    /// Its node.
    pub node: String,
    /// Its id (`node:step.task`, inside a nested graph prefixed by the
    /// enclosing task's): the namespace of the graphs nested in it, as its
    /// events name them.
    pub id: String,
    /// Its error, when the run failed in it (the last checkpoint of a
    /// failed run).
    pub error: Option<TaskError>,
    /// The update it wrote, when it finished but its step did not commit
    /// (a sibling paused, failed or was stopped).
    pub writes: Option<Value>,
    /// The interrupts raised by it or inside the graphs nested in it, with
    /// their decisions so far.
    pub interrupts: Vec<PendingInterrupt>,
    /// The graphs running nested in it and not finished: a subgraph node's
    /// graph, or the graphs its code called ([`NodeContext::call`]),
    /// each at its last inner step.
    ///
    /// [`NodeContext::call`]: crate::NodeContext::call
    pub nested: Vec<NestedState>,
}

/// A task's failure ([`TaskState::error`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskError {
    /// What a program acts on: the node error's class (`auth`, `timeout`,
    /// a subgraph's inner class, ...) or `node_failed`.
    pub class: String,
    /// The error with its cause chain.
    pub message: String,
}

/// A graph running inside a task, at its last inner step
/// ([`TaskState::nested`]). Its state type is the nested graph's, so it is
/// shown as JSON.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NestedState {
    /// Its namespace: the enclosing task's id (`review:3.0`), with the
    /// call's number for a called graph (`plan:2.0~0`); nested levels are
    /// joined with `/`.
    pub namespace: String,
    /// Its graph, for a called graph (a subgraph node's is the node's).
    pub graph: Option<String>,
    /// Its last inner step.
    pub step: u64,
    /// Its state there.
    pub values: Value,
    /// Its next nodes (empty: it finished, and returned its state).
    pub next: Vec<String>,
    /// Its next step's tasks, as [`StateSnapshot::tasks`] (no errors:
    /// a nested failure is its enclosing task's).
    pub tasks: Vec<TaskState>,
}

/// One page of a run's history with the state at each checkpoint
/// ([`Executor::state_history`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StatePage<S> {
    /// Newest first: each checkpoint (when, tasks, snapshot) and its state.
    pub checkpoints: Vec<(CheckpointInfo, StateSnapshot<S>)>,
    /// Pass as `before` for the next page; `None` on the last page.
    pub next_before: Option<u64>,
}

/// One checkpoint of a thread's history ([`Executor::thread_history`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ThreadCheckpoint<S> {
    /// Its place in the thread, counted from 0 (the first run's input)
    /// across all the thread's runs, oldest first.
    pub number: u64,
    /// When it was committed, how many tasks its step ran, whether it
    /// holds a snapshot.
    pub info: CheckpointInfo,
    /// The state there (its run, step, source, values, next nodes). For a
    /// run of another version of the graph, only the values, source and
    /// next nodes are read.
    pub state: StateSnapshot<S>,
}

/// One page of a thread's history, newest first
/// ([`Executor::thread_history`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ThreadHistoryPage<S> {
    /// The checkpoints, newest first.
    pub checkpoints: Vec<ThreadCheckpoint<S>>,
    /// Pass as `before` for the next page; `None` on the last page.
    pub next_before: Option<u64>,
    /// Checkpoints the thread has in all.
    pub total: u64,
}

impl<S> StateSnapshot<S> {
    /// The same snapshot with its values turned by `f`: a service that
    /// serves graphs of several state types shows each as JSON.
    pub fn map_values<T>(self, f: impl FnOnce(S) -> T) -> StateSnapshot<T> {
        StateSnapshot {
            run: self.run,
            step: self.step,
            source: self.source,
            by: self.by,
            forked_from: self.forked_from,
            status: self.status,
            values: f(self.values),
            next: self.next,
            interrupts: self.interrupts,
            pending_writes: self.pending_writes,
            tasks: self.tasks,
        }
    }
}

impl<S> StatePage<S> {
    /// The same page with each checkpoint's values turned by `f`.
    pub fn map_values<T>(self, mut f: impl FnMut(S) -> T) -> StatePage<T> {
        StatePage {
            checkpoints: self
                .checkpoints
                .into_iter()
                .map(|(info, state)| (info, state.map_values(&mut f)))
                .collect(),
            next_before: self.next_before,
        }
    }
}

impl<S> ThreadHistoryPage<S> {
    /// The same page with each checkpoint's values turned by `f`.
    pub fn map_values<T>(self, mut f: impl FnMut(S) -> T) -> ThreadHistoryPage<T> {
        ThreadHistoryPage {
            checkpoints: self
                .checkpoints
                .into_iter()
                .map(|entry| ThreadCheckpoint {
                    number: entry.number,
                    info: entry.info,
                    state: entry.state.map_values(&mut f),
                })
                .collect(),
            next_before: self.next_before,
            total: self.total,
        }
    }
}

impl Executor {
    /// The run's checkpoints before step `before` (all when `None`),
    /// newest first, at most `limit`, each with its values and next nodes
    /// (a [`StateSnapshot`] as [`Executor::get_state`] gives it).
    pub async fn state_history<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        before: Option<u64>,
        limit: u64,
    ) -> Result<StatePage<S>, RunError> {
        check_graph(&*self.store, graph, run).await?;
        let page = self.store.history(run, before, limit).await?;
        let mut checkpoints = Vec::with_capacity(page.checkpoints.len());
        for info in page.checkpoints {
            let state = self.get_state(graph, run, Some(info.step)).await?;
            checkpoints.push((info, state));
        }
        Ok(StatePage { checkpoints, next_before: page.next_before })
    }

    /// Where `run` was forked from and what the fork changed, when it was
    /// ([`StateSnapshot::forked_from`]), read from its last checkpoint
    /// without its graph.
    pub async fn forked_from(&self, run: RunId) -> Result<Option<ForkOrigin>, RunError> {
        let checkpoint = self.store.checkpoint(run, None).await?;
        let step = checkpoint.run.step;
        let frontier: FrontierRecord = checkpoint
            .frontier
            .decode()
            .map_err(|source| RunError::StateDecode { run, step, source })?;
        Ok(frontier.origin.and_then(ForkOrigin::from_record))
    }

    /// The run's state at checkpoint `at` (the last when `None`): values,
    /// next nodes, the source that wrote it, open interrupts, and each
    /// task of the next step with its error, finished output, interrupts
    /// and nested graphs in flight.
    pub async fn get_state<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        at: Option<u64>,
    ) -> Result<StateSnapshot<S>, RunError> {
        // The checkpoint read carries the run's record: its graph is
        // checked there rather than in a read of its own.
        let mut checkpoint = self.store.checkpoint(run, at).await?;
        same_graph(graph, &checkpoint.run)?;
        let record = checkpoint.run.clone();
        let last = at.is_none_or(|at| at == record.step);
        let interrupts = std::mem::take(&mut checkpoint.interrupts);
        let loaded = decode(graph, checkpoint)?;
        let step = loaded.step;
        let source = CheckpointSource::of(step, loaded.frontier.source);
        let by = loaded.frontier.by.clone();
        let forked_from = loaded.frontier.origin.as_deref().cloned();
        let name = |task: &super::plan::Task| graph.node(task.node).name.to_string();
        let next: Vec<String> = loaded.frontier.tasks.iter().map(name).collect();
        let mut pending_writes: Vec<(u32, String)> = loaded
            .reused
            .keys()
            .map(|index| (*index, name(&loaded.frontier.tasks[*index as usize])))
            .collect();
        pending_writes.sort();
        let failures = match (&record.failure, last) {
            (Some(failure), true) => failure.tasks.clone(),
            _ => Vec::new(),
        };
        let tasks = next
            .iter()
            .enumerate()
            .map(|(index, node)| {
                task_state(&loaded, run, index as u32, node, &failures, &interrupts)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StateSnapshot {
            run,
            step,
            source,
            by,
            forked_from,
            status: record.status,
            values: loaded.state,
            next,
            interrupts: interrupts
                .iter()
                .filter(|interrupt| interrupt.decision.is_none())
                .map(PendingInterrupt::from_record)
                .collect(),
            pending_writes,
            tasks,
        })
    }

    /// A thread's history: the checkpoints of all its runs as one list,
    /// newest first, numbered from 0 (the first run's input) across the
    /// runs in the order they were created; the checkpoints numbered below
    /// `before` (all when `None`), at most `limit`. Each carries its run,
    /// step, source and the state at it. Runs of another version of
    /// `graph` (a thread moves to new versions) are read with `graph`'s
    /// state type: their values, source and next nodes; a run of another
    /// graph is [`RunError::GraphMismatch`]. Reads the thread's run
    /// records (one listing) and the page's checkpoints.
    pub async fn thread_history<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        thread: &str,
        before: Option<u64>,
        limit: u64,
    ) -> Result<ThreadHistoryPage<S>, RunError> {
        let runs = self.thread_runs(thread).await?;
        // Oldest first, each with the number of its input checkpoint.
        let mut first = Vec::with_capacity(runs.len());
        let mut total = 0u64;
        for record in runs.iter().rev() {
            first.push(total);
            total += record.step + 1;
        }
        let end = before.map_or(total, |before| before.min(total));
        let mut checkpoints = Vec::new();
        let mut number = end;
        for (record, &offset) in runs.iter().zip(first.iter().rev()) {
            if checkpoints.len() as u64 >= limit || number == 0 {
                break;
            }
            if offset >= number {
                continue;
            }
            // Steps of this run below `number`, newest first.
            let below = number - offset;
            let want = limit - checkpoints.len() as u64;
            let page = self.store.history(record.id, Some(below), want).await?;
            for info in page.checkpoints {
                let state = self.thread_state_at(graph, record, info.step).await?;
                checkpoints.push(ThreadCheckpoint { number: offset + info.step, info, state });
            }
            number = offset;
        }
        let next_before = checkpoints.last().map(|last| last.number).filter(|&number| number > 0);
        let next_before = if checkpoints.len() as u64 >= limit { next_before } else { None };
        Ok(ThreadHistoryPage { checkpoints, next_before, total })
    }

    /// Every run of `thread`, newest first.
    pub(super) async fn thread_runs(&self, thread: &str) -> Result<Vec<RunRecord>, RunError> {
        let filter = RunFilter { thread: Some(thread.to_owned()), ..RunFilter::default() };
        let mut page = PageRequest { limit: 500, cursor: None };
        let mut runs = Vec::new();
        loop {
            let found = self.store.list_runs(&filter, &page).await?;
            if let Some(damaged) = found.damaged.first() {
                return Err(super::thread::damaged_run(thread, damaged));
            }
            runs.extend(found.runs);
            match found.next {
                Some(cursor) => page.cursor = Some(cursor),
                None => return Ok(runs),
            }
        }
    }

    /// The state at `step` of a run of the thread: in full for a run of
    /// `graph`, else (another version) its values, source and next nodes.
    async fn thread_state_at<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        record: &RunRecord,
        step: u64,
    ) -> Result<StateSnapshot<S>, RunError> {
        if record.graph.name == graph.name() && record.graph.version == graph.version() {
            return self.get_state(graph, record.id, Some(step)).await;
        }
        if record.graph.name != graph.name() {
            return Err(RunError::GraphMismatch {
                run: record.id,
                stored: record.graph.clone(),
                graph: super::setup::graph_ref(graph),
            });
        }
        let checkpoint = self.store.checkpoint(record.id, Some(step)).await?;
        let (values, _) = decode_state(graph, &checkpoint)?;
        let frontier: FrontierRecord = checkpoint
            .frontier
            .decode()
            .map_err(|source| RunError::StateDecode { run: record.id, step, source })?;
        Ok(StateSnapshot {
            run: record.id,
            step,
            source: CheckpointSource::of(step, frontier.source),
            by: frontier.by,
            forked_from: frontier.origin.and_then(ForkOrigin::from_record),
            status: record.status,
            values,
            next: frontier.tasks.into_iter().map(|task| task.node).collect(),
            interrupts: Vec::new(),
            pending_writes: Vec::new(),
            tasks: Vec::new(),
        })
    }
}

/// Task `index` (of node `node`) of the step after `loaded`'s: its error
/// among `failures`, its finished output, its interrupts among those of
/// the step, and the graphs nested in it.
fn task_state<S: State>(
    loaded: &Loaded<S>,
    run: RunId,
    index: u32,
    node: &str,
    failures: &[TaskFailure],
    interrupts: &[InterruptRecord],
) -> Result<TaskState, RunError> {
    let step = loaded.step;
    let id = node_id(node, step + 1, index);
    let writes = match loaded.reused.get(&index) {
        Some((output, _)) => Some(
            serde_json::to_value(&output.update)
                .map_err(|source| super::error::json_error(run, step, source))?,
        ),
        None => None,
    };
    let error = failures.iter().find(|failure| failure.task == index && failure.node == node).map(
        |failure| TaskError { class: failure.class.clone(), message: failure.message.clone() },
    );
    let raised: Vec<&InterruptRecord> =
        interrupts.iter().filter(|record| record.task == index).collect();
    let nested = match loaded.progress.get(&index) {
        Some(blob) => {
            let tree: ProgressTree =
                blob.decode().map_err(|source| RunError::StateDecode { run, step, source })?;
            let by_ordinal: HashMap<u32, &InterruptRecord> =
                raised.iter().map(|record| (record.ordinal, *record)).collect();
            nested_states(&tree, &id, &by_ordinal, run, step)?
        }
        None => Vec::new(),
    };
    Ok(TaskState {
        task: index,
        node: node.to_owned(),
        id,
        error,
        writes,
        interrupts: raised.into_iter().map(PendingInterrupt::from_record).collect(),
        nested,
    })
}

/// The graphs nested in the task whose id is `id`, from its progress
/// tree: the subgraph at the tree's root, then its calls by number.
/// `raised`: the task's interrupts by their ordinal in its space.
fn nested_states(
    tree: &ProgressTree,
    id: &str,
    raised: &HashMap<u32, &InterruptRecord>,
    run: RunId,
    step: u64,
) -> Result<Vec<NestedState>, RunError> {
    let mut nested = Vec::new();
    if tree.record.is_some() {
        nested.push(nested_state(tree, id.to_owned(), raised, run, step)?);
    }
    for (call, level) in &tree.calls {
        nested.push(nested_state(level, format!("{id}~{call}"), raised, run, step)?);
    }
    Ok(nested)
}

/// One level of a progress tree as a [`NestedState`].
fn nested_state(
    level: &ProgressTree,
    namespace: String,
    raised: &HashMap<u32, &InterruptRecord>,
    run: RunId,
    step: u64,
) -> Result<NestedState, RunError> {
    let decode_error = |source: serde_json::Error| RunError::StateDecode {
        run,
        step,
        source: tollgate_checkpoint::CodecError::Decode {
            codec: tollgate_checkpoint::Codec::Json,
            source: Box::new(source),
        },
    };
    let Some(raw) = &level.record else {
        // A level only written below (a call that has not stepped yet).
        return Ok(NestedState {
            namespace,
            graph: level.graph.clone(),
            step: 0,
            values: Value::Null,
            next: Vec::new(),
            tasks: Vec::new(),
        });
    };
    let record: ProgressRecord<Value> = serde_json::from_str(raw.get()).map_err(decode_error)?;
    let inner_step = record.step;
    let mut tasks = Vec::with_capacity(record.frontier.tasks.len());
    for (index, task) in record.frontier.tasks.iter().enumerate() {
        let index = index as u32;
        let id = format!("{namespace}/{}", node_id(&task.node, inner_step + 1, index));
        let writes = record
            .kept
            .iter()
            .find(|kept: &&KeptOutput| kept.task == index && kept.node == task.node)
            .map(|kept| {
                serde_json::from_str::<Value>(kept.output.get())
                    .map(|output| output.get("update").cloned().unwrap_or(Value::Null))
            })
            .transpose()
            .map_err(decode_error)?;
        // This task's interrupts, by their ordinals in its own space.
        let inner: HashMap<u32, &InterruptRecord> = record
            .interrupts
            .iter()
            .filter(|mapped: &&MappedInterrupt| mapped.task == index)
            .filter_map(|mapped| raised.get(&mapped.ordinal).map(|found| (mapped.inner, *found)))
            .collect();
        let nested = match level.children.get(&index) {
            Some(child) => nested_states(child, &id, &inner, run, step)?,
            None => Vec::new(),
        };
        let mut interrupts: Vec<&InterruptRecord> = inner.values().copied().collect();
        interrupts.sort_by_key(|record| record.ordinal);
        tasks.push(TaskState {
            task: index,
            node: task.node.clone(),
            id,
            error: None,
            writes,
            interrupts: interrupts.into_iter().map(PendingInterrupt::from_record).collect(),
            nested,
        });
    }
    Ok(NestedState {
        namespace,
        graph: level.graph.clone(),
        step: inner_step,
        values: record.state,
        next: record.frontier.tasks.into_iter().map(|task| task.node).collect(),
        tasks,
    })
}
