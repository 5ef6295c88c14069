//! Loading checkpoints, and time travel: the state at any checkpoint,
//! forking a run from one, and writing a state update as if a node ran.
//! (What a checkpoint shows, `get_state` and the histories, is
//! `state_view.rs`.)

use std::sync::Arc;

use serde_json::Value;

use tollgate_checkpoint::{
    Codec, Owner, RunId, RunStatus, StepRecord, StoreError, TaskKey, TaskUpdate, Transition,
};

use crate::event::Event;
use crate::graph::CompiledGraph;
use crate::hitl::BREAKPOINT;
use crate::state::{State, Write};
use crate::START;

use super::config::RunConfig;
use super::emit::{node_id, Emitter, Live};
use super::error::json_error;
use super::error::RunError;
use super::executor::Executor;
use super::handle::RunHandle;
use super::load::{load, Loaded};
use super::plan::Frontier;
use super::record::{CheckpointSource, ForkOrigin, TaskOutputRecord, FRONTIER_VERSION};
use super::setup::{check_graph, emit_run_started};
use super::task::{encode_checked, encode_output};

impl Executor {
    /// The run's state at checkpoint `step` (0 is the input).
    pub async fn state_at<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        step: u64,
    ) -> Result<S, RunError> {
        check_graph(&*self.store, graph, run).await?;
        Ok(load(&*self.store, graph, run, Some(step)).await?.state)
    }

    /// Starts a new run from checkpoint `step` of `run`: its state (with
    /// `edit` merged through the reducers, as if written by a node named
    /// `__fork__`) and what was to run next. The source run is unchanged.
    pub async fn fork<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        step: u64,
        edit: Option<S::Update>,
        config: RunConfig,
    ) -> Result<RunHandle<S>, RunError> {
        check_graph(&*self.store, graph, run).await?;
        let Loaded { mut state, mut frontier, .. } =
            load(&*self.store, graph, run, Some(step)).await?;
        frontier.source = Some(CheckpointSource::Fork);
        frontier.by = config.by.clone();
        let before = edit.is_some().then(|| state_json(&state));
        if let Some(update) = edit {
            let write = Write { node: Arc::from("__fork__"), update };
            state
                .apply(graph.schema(), vec![write])
                .map_err(|source| RunError::InvalidUpdate { step, source })?;
        }
        let changed = before.map(|before| ForkOrigin::changed_fields(&before, &state_json(&state)));
        frontier.origin = Some(Arc::new(ForkOrigin {
            run,
            step,
            by: config.by.clone(),
            changed: changed.unwrap_or_default(),
        }));
        Ok(self.start_from(graph, state, frontier, config).await?.spawn())
    }

    /// Which node wrote checkpoint `step` of `run`: the one node its step
    /// ran (several tasks of one node through `Send` count as one), or
    /// `__start__` for the input (step 0). Ambiguous when the step ran
    /// several nodes ([`RunError::AmbiguousWriter`]), as LangGraph infers
    /// `as_node`.
    async fn writer_of<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        step: u64,
    ) -> Result<String, RunError> {
        if step == 0 {
            return Ok(START.to_owned());
        }
        // What was planned at step - 1 is what ran at `step`.
        let before = load(&*self.store, graph, run, Some(step - 1)).await?;
        let mut nodes: Vec<String> = before
            .frontier
            .tasks
            .iter()
            .map(|task| graph.node(task.node).name.to_string())
            .collect();
        nodes.sort();
        nodes.dedup();
        match nodes.as_slice() {
            [only] => Ok(only.clone()),
            _ => Err(RunError::AmbiguousWriter { run, step, nodes }),
        }
    }

    /// The frontier after `update` is written as `as_node` into `state`
    /// (already applied): `as_node`'s successors (joins it is a source of
    /// included: see `Frontier::after_update`), or the graph's entry for
    /// `__start__`. Its checkpoint's source is `update`.
    fn after_writer<S: State>(
        graph: &CompiledGraph<S>,
        state: &S,
        frontier: Frontier,
        as_node: &str,
    ) -> Result<Frontier, RunError> {
        if as_node == START {
            let mut next = Frontier::start(graph, state)?;
            next.settings = frontier.settings;
            next.origin = frontier.origin;
            next.source = Some(CheckpointSource::Update);
            return Ok(next);
        }
        let node = graph
            .index_of(as_node)
            .ok_or_else(|| RunError::UnknownNode { node: as_node.to_owned() })?;
        frontier.after_update(graph, state, node)
    }

    /// Writes `update` on the run's latest checkpoint as a new checkpoint,
    /// as if `as_node` had run: the update goes through the reducers and
    /// the next tasks are `as_node`'s successors. Without `as_node`, the
    /// node that wrote the latest checkpoint is taken (`__start__` for the
    /// input; refused when that step ran several nodes). The run must not
    /// be running or terminal; it is left `interrupted`, ready to be
    /// continued, and a step that was in flight (with its interrupts) is
    /// superseded. Returns the new step. To edit a past checkpoint, see
    /// [`Executor::update_state_at`].
    pub async fn update_state<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        update: S::Update,
        as_node: Option<&str>,
        config: RunConfig,
    ) -> Result<u64, RunError> {
        let written =
            self.write_checkpoint(graph, run, Some(update), as_node, None, Then::Stop, config);
        Ok(written.await?.step)
    }

    /// Sends the run elsewhere from its latest checkpoint (LangGraph's
    /// `Command(goto=…)` given from outside the run): a new checkpoint
    /// with `update` (if any) written as `__start__`, whose next step runs
    /// `nodes` instead of what was planned (join arrivals and visit counts
    /// stay; an empty list plans nothing, so the run completes when
    /// continued). As with [`Executor::update_state`], the run must not be
    /// running or finished, a step in flight (with its interrupts) is
    /// superseded, and the run is left `interrupted`, ready to be
    /// continued. Returns the new step. An unknown node is
    /// [`RunError::UnknownNode`].
    pub async fn goto<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        update: Option<S::Update>,
        nodes: &[&str],
        config: RunConfig,
    ) -> Result<u64, RunError> {
        let targets = targets(graph, nodes)?;
        let written = self.write_checkpoint(
            graph,
            run,
            update,
            Some(START),
            Some(targets),
            Then::Stop,
            config,
        );
        Ok(written.await?.step)
    }

    /// What [`Executor::update_state`] and [`Executor::goto`] (and their
    /// `_and_continue` forms) share: a checkpoint written on the run's
    /// latest with `update` as `as_node`, its next step `as_node`'s
    /// successors or, given, `goto`'s nodes. With [`Then::Continue`] the
    /// run stays claimed by this process (`running`, under its lease)
    /// instead of left `interrupted`.
    #[allow(clippy::too_many_arguments)] // The two public forms' inputs, and what follows.
    pub(super) async fn write_checkpoint<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        update: Option<S::Update>,
        as_node: Option<&str>,
        goto: Option<Vec<usize>>,
        then: Then,
        config: RunConfig,
    ) -> Result<Written, RunError> {
        let record = check_graph(&*self.store, graph, run).await?;
        if record.status == RunStatus::Running {
            return Err(RunError::RunOwned {
                run,
                owner: record.owner.map_or_else(|| "unknown".to_owned(), |owner| owner.to_string()),
            });
        }
        let as_node = self.named_writer(graph, run, record.step, as_node).await?;
        let as_node = as_node.as_str();
        let epoch =
            self.store.claim(run, record.epoch, Owner::current(), config.lease_until()).await?;
        let Loaded { mut state, frontier, step, .. } = load(&*self.store, graph, run, None).await?;
        let step = step + 1;
        let output = TaskOutputRecord { update, goto: Vec::new() };
        let (output, blob) = encode_output(config.codec, output, run, step)?;
        let event_update =
            serde_json::to_value(&output.update).map_err(|e| json_error(run, step, e))?;
        if let Some(update) = output.update {
            let write = Write { node: Arc::from(as_node), update };
            state
                .apply(graph.schema(), vec![write])
                .map_err(|source| RunError::InvalidUpdate { step, source })?;
        }
        let mut next = match goto {
            Some(targets) => frontier.goto(graph, targets)?,
            None => Self::after_writer(graph, &state, frontier, as_node)?,
        };
        next.by = config.by.clone();
        if record.status == RunStatus::AwaitingHitl {
            self.honour_paused_breakpoints(graph, run, &mut next).await?;
        }
        let frontier_blob = Codec::Json
            .encode(&next.to_record(graph), FRONTIER_VERSION)
            .map_err(|source| RunError::Encode { run, step, source })?;
        let snapshot = encode_checked::<S, S>(config.codec, &state, "state", run, step)?;

        let emitter = Emitter::new(run, record.last_seq, Arc::clone(&config.clock), None);
        emit_run_started(&emitter, graph, step - 1, run, Live::Now, &config.announce)?;
        emit_written(&emitter, run, step, as_node, event_update)?;
        let task = TaskKey { step, index: 0, node: as_node.to_owned() };
        let events = emitter.take_batch();
        let last_seq = events.last().map_or(record.last_seq, |event| event.seq);
        let (status, lease_until_ms) = match then {
            Then::Stop => (RunStatus::Interrupted, None),
            Then::Continue => (RunStatus::Running, Some(config.lease_until())),
        };
        let transition = Transition {
            run,
            epoch,
            step: Some(StepRecord {
                step,
                updates: vec![TaskUpdate { task, update: blob }],
                snapshot: Some(snapshot),
                frontier: frontier_blob,
            }),
            status,
            failure: None,
            events,
            at_ms: emitter.now_ms(),
            lease_until_ms,
            interrupts: Vec::new(),
        };
        self.store.commit(transition).await?;
        Ok(Written { step, epoch, last_seq })
    }

    /// The node an update is written as: `as_node` when the graph has it
    /// (or it is `START`), else the writer of checkpoint `step`.
    async fn named_writer<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        step: u64,
        as_node: Option<&str>,
    ) -> Result<String, RunError> {
        match as_node {
            Some(name) if name != START && graph.index_of(name).is_none() => {
                Err(RunError::UnknownNode { node: name.to_owned() })
            }
            Some(name) => Ok(name.to_owned()),
            None => self.writer_of(graph, run, step).await,
        }
    }

    /// A breakpoint the superseded step paused at does not pause the next
    /// step again ("fix it and go on", as in LangGraph): the tasks of
    /// `next` at a node paused before are marked honoured. Only a paused
    /// run has a step in flight with interrupts to read.
    async fn honour_paused_breakpoints<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        next: &mut Frontier,
    ) -> Result<(), RunError> {
        let paused_before: Vec<String> = self
            .store
            .interrupts(run)
            .await?
            .into_iter()
            .filter(|i| i.kind == BREAKPOINT && i.payload["when"] == "before")
            .map(|i| i.node)
            .collect();
        next.honoured = next
            .tasks
            .iter()
            .map(|task| graph.node(task.node).name.to_string())
            .filter(|name| paused_before.contains(name))
            .collect();
        Ok(())
    }

    /// Moves a run of an older version of a graph onto `to`, a newer one
    /// (runs are pinned to the graph name and version they started with;
    /// continuing one with another version is refused with
    /// [`RunError::GraphMismatch`]). A new run of `to` is stored `queued`
    /// from the run's latest checkpoint: its state, and what was to run
    /// next (nodes, `Send` inputs, join arrivals and visit counts matched by
    /// node name; a node `to` lacks is refused with
    /// [`RunError::UnknownStoredNode`]). The state must decode as `S`.
    /// The source must be `interrupted`, `failed` or `queued` (a queued one
    /// is cancelled, so no worker drives it); a paused run must be decided
    /// first. Continue the new run with [`Executor::continue_run`] on `to`,
    /// or let a worker take it. Returns its id; it keeps the source's
    /// thread.
    pub async fn migrate<S: State>(
        &self,
        from: &CompiledGraph<S>,
        to: &CompiledGraph<S>,
        run: RunId,
        config: RunConfig,
    ) -> Result<RunId, RunError> {
        let record = check_graph(&*self.store, from, run).await?;
        match record.status {
            RunStatus::Interrupted | RunStatus::Failed | RunStatus::Queued => {}
            RunStatus::AwaitingHitl => {
                let interrupts = self.store.interrupts(run).await?;
                let pending = interrupts
                    .iter()
                    .filter(|i| i.decision.is_none())
                    .map(|i| i.id.clone())
                    .collect();
                return Err(RunError::AwaitingDecision { run, pending });
            }
            RunStatus::Running => {
                let owner = record.owner.map_or_else(|| "unknown".to_owned(), |o| o.to_string());
                return Err(RunError::RunOwned { run, owner });
            }
            status => return Err(StoreError::RunTerminal { run, status }.into()),
        }
        let Loaded { state, frontier, step, .. } = load(&*self.store, from, run, None).await?;
        let mut frontier = Frontier::from_record(frontier.to_record(from), to, run, step)?;
        frontier.source = Some(CheckpointSource::Fork);
        frontier.by = config.by.clone();
        let config = match (&record.thread, config.thread.is_none()) {
            (Some(thread), true) => config.thread(thread.clone()),
            _ => config,
        };
        let migrated = self.enqueue_from(to, state, frontier, config).await?;
        if record.status == RunStatus::Queued {
            self.cancel_run(run).await?;
        }
        Ok(migrated)
    }

    /// Edits a past checkpoint: a new run (a fork; the source run is
    /// unchanged) starts from checkpoint `step` of `run` with `update`
    /// written as `as_node` (inferred as in [`Executor::update_state`]
    /// from the node that wrote that checkpoint), its next tasks
    /// `as_node`'s successors. It is stored `queued`: continue it with
    /// [`Executor::continue_run`] (or let a worker take it). Returns its
    /// id (`config.run_id` when set); the thread and attachment come from
    /// `config`.
    pub async fn update_state_at<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        step: u64,
        update: S::Update,
        as_node: Option<&str>,
        config: RunConfig,
    ) -> Result<RunId, RunError> {
        let (state, next) = self.edited_at(graph, run, step, update, as_node, &config).await?;
        self.enqueue_from(graph, state, next, config).await
    }

    /// As [`Executor::update_state_at`], but the new run is started here at
    /// once (a handle to drive, as [`Executor::fork`] gives) instead of
    /// being stored `queued`: no worker can take it first. With `as_node`
    /// `__start__` the update is the new run's input at that checkpoint,
    /// and it starts again from the graph's entry.
    pub async fn fork_as<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        step: u64,
        update: S::Update,
        as_node: Option<&str>,
        config: RunConfig,
    ) -> Result<RunHandle<S>, RunError> {
        let (state, next) = self.edited_at(graph, run, step, update, as_node, &config).await?;
        Ok(self.start_from(graph, state, next, config).await?.spawn())
    }

    /// The state at checkpoint `step` of `run` with `update` written as
    /// `as_node` (inferred when `None`), and the frontier after it.
    async fn edited_at<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        step: u64,
        update: S::Update,
        as_node: Option<&str>,
        config: &RunConfig,
    ) -> Result<(S, Frontier), RunError> {
        check_graph(&*self.store, graph, run).await?;
        let as_node = match as_node {
            Some(name) => name.to_owned(),
            None => self.writer_of(graph, run, step).await?,
        };
        let Loaded { mut state, frontier, .. } = load(&*self.store, graph, run, Some(step)).await?;
        let before = state_json(&state);
        let write = Write { node: Arc::from(as_node.as_str()), update };
        state
            .apply(graph.schema(), vec![write])
            .map_err(|source| RunError::InvalidUpdate { step, source })?;
        let mut next = Self::after_writer(graph, &state, frontier, &as_node)?;
        next.by = config.by.clone();
        // A new run from `run`'s checkpoint: it says so.
        let changed = ForkOrigin::changed_fields(&before, &state_json(&state));
        next.origin = Some(Arc::new(ForkOrigin { run, step, by: config.by.clone(), changed }));
        Ok((state, next))
    }
}

/// A state as JSON, to compare before and after a fork's edit (`Null`
/// when it does not serialise: then no field is named as changed).
fn state_json<S: State>(state: &S) -> Value {
    serde_json::to_value(state).unwrap_or(Value::Null)
}

/// What a written checkpoint leaves the run as.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Then {
    /// `interrupted`, ready to be continued.
    Stop,
    /// `running`, claimed by this process, which continues it at once.
    Continue,
}

/// A checkpoint written by [`Executor::write_checkpoint`].
pub(super) struct Written {
    /// Its step.
    pub(super) step: u64,
    /// The run's epoch (the claim the write was made under).
    pub(super) epoch: u64,
    /// The run's last event sequence number after the write.
    pub(super) last_seq: u64,
}

/// The nodes `names` name, by index (an unknown one is
/// [`RunError::UnknownNode`]).
pub(super) fn targets<S: State>(
    graph: &CompiledGraph<S>,
    names: &[&str],
) -> Result<Vec<usize>, RunError> {
    names
        .iter()
        .map(|name| {
            graph.index_of(name).ok_or_else(|| RunError::UnknownNode { node: (*name).to_owned() })
        })
        .collect()
}

/// The events of a written checkpoint after its `run_started`: the
/// writer's `node_completed`, `checkpoint_saved`, and the leg's end.
fn emit_written(
    emitter: &Emitter,
    run: RunId,
    step: u64,
    as_node: &str,
    update: serde_json::Value,
) -> Result<(), RunError> {
    let id = node_id(as_node, step, 0);
    let completed = Event::NodeCompleted {
        step,
        task: 0,
        update,
        goto: Vec::new(),
        reused: false,
        cached: false,
    };
    let ended = Event::RunEnded {
        status: RunStatus::Interrupted,
        step,
        result: None,
        error: None,
        interrupts: Vec::new(),
    };
    let events = [
        (Some((as_node, id.as_str())), completed),
        (None, Event::CheckpointSaved { step, tasks: 1, snapshot: true }),
        (None, ended),
    ];
    for (label, event) in events {
        emitter.emit(label, event, Live::Now).map_err(|source| json_error(run, step, source))?;
    }
    Ok(())
}
