//! Record types that cross the [`Store`](crate::Store) boundary.
//!
//! These are the stored shapes, converted by hand from the engine's runtime
//! types: changing a runtime type never silently changes what is on disk.
//! Payloads (state, updates, frontiers) travel as [`Blob`]s that carry their
//! own codec and schema version.

use serde::{Deserialize, Serialize};

use crate::codec::Blob;
pub(crate) use crate::event::EventRecord;
use crate::ids::{RunId, TaskKey};
use crate::owner::Owner;
use crate::status::RunStatus;

/// The graph a run is pinned to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GraphRef {
    /// Graph name.
    pub name: String,
    /// Graph version; a run only continues on the same name and version.
    pub version: u32,
}

impl std::fmt::Display for GraphRef {
    /// `` `chat` version 2 ``, as messages name a graph.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` version {}", self.name, self.version)
    }
}

/// Why a run failed, as stored: rendered once so any process can show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFailure {
    /// Stable snake_case name of the error variant (`node_failed`,
    /// `step_limit_exceeded`, ...).
    pub kind: String,
    /// What a program can act on: for a node that failed, its error's
    /// class (`auth`, `rate_limited`, `invalid_request`, `timeout`,
    /// `server`, `network`, `protocol`, `tool`, ...); otherwise the same as
    /// `kind`. `None` in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Node involved, if any.
    pub node: Option<String>,
    /// Human-readable message with the cause chain.
    pub message: String,
    /// Each task of the failed step that failed, in task order (the first
    /// is the run's failure; siblings may have failed too). Empty when the
    /// run did not fail in a task, and in records written before it
    /// existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskFailure>,
}

/// One failed task of a run's failed step ([`RunFailure::tasks`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TaskFailure {
    /// The task's position in the step.
    pub task: u32,
    /// Its node.
    pub node: String,
    /// Its error's class (as [`RunFailure::class`]).
    pub class: String,
    /// Its error, with the cause chain.
    pub message: String,
}

impl TaskFailure {
    /// Task `task` of node `node` failed with `class` and `message`.
    pub fn new(
        task: u32,
        node: impl Into<String>,
        class: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self { task, node: node.into(), class: class.into(), message: message.into() }
    }
}

impl RunFailure {
    /// A failure of this kind; its class is the kind.
    pub fn new(kind: impl Into<String>, node: Option<String>, message: impl Into<String>) -> Self {
        let kind = kind.into();
        Self { class: Some(kind.clone()), kind, node, message: message.into(), tasks: Vec::new() }
    }

    /// The class, or the kind for records that have none.
    pub fn class_or_kind(&self) -> &str {
        self.class.as_deref().unwrap_or(&self.kind)
    }
}

/// A finished task's update, addressed by its deterministic key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskUpdate {
    /// Which task produced it.
    pub task: TaskKey,
    /// The encoded update (the engine's record).
    pub update: Blob,
}

/// What one super-step leaves behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecord {
    /// The step number (1 for the first step after the input).
    pub step: u64,
    /// The step's updates in merge order: the delta from the previous step.
    pub updates: Vec<TaskUpdate>,
    /// The full state after this step, written every few steps so loading
    /// replays a bounded number of deltas.
    pub snapshot: Option<Blob>,
    /// What runs next (the engine's frontier record).
    pub frontier: Blob,
}

/// A run to create, with its input checkpoint (step 0).
#[derive(Debug, Clone)]
pub struct NewRun {
    /// The run's id.
    pub id: RunId,
    /// The graph it is pinned to.
    pub graph: GraphRef,
    /// Optional thread (conversation) the run belongs to.
    pub thread: Option<String>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// The input state: the snapshot of step 0.
    pub snapshot: Blob,
    /// The first frontier.
    pub frontier: Blob,
    /// Events emitted before the first step (`run_started`).
    pub events: Vec<EventRecord>,
    /// The owner and its lease (milliseconds since the Unix epoch): the
    /// creating process, which drives the run (status `running`). `None`
    /// queues the run instead (status `queued`, no owner): a worker claims
    /// it at epoch 1 and drives it from step 0.
    pub claim: Option<(Owner, i64)>,
    /// JSON text kept with the run and never changed, read back with
    /// [`RunStore::attachment`](crate::RunStore::attachment): what another
    /// process needs to rebuild the graph (a blueprint run stores its
    /// blueprint).
    pub attachment: Option<String>,
    /// For a run that continues its thread: what the caller built on. The
    /// run is created only if the thread's latest run is still
    /// `ThreadTurn::after` and is not `running`, `queued` or
    /// `awaiting_hitl` (a thread runs one leg at a time); otherwise
    /// [`StoreError::ThreadMoved`](crate::StoreError::ThreadMoved) or
    /// [`StoreError::ThreadBusy`](crate::StoreError::ThreadBusy), nothing
    /// written. `None`: no check (the thread is a label).
    pub thread_turn: Option<ThreadTurn>,
    /// The trace the run belongs to (a W3C `traceparent`), kept with the
    /// run and never changed, so that every later leg, in any process,
    /// joins the same trace. `None` when the creating process traces
    /// nothing.
    pub trace: Option<String>,
}

/// The state of a thread a new run of it was built on (see
/// [`NewRun::thread_turn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadTurn {
    /// The thread's latest run when the caller read it; `None` when the
    /// thread had no run.
    pub after: Option<RunId>,
}

impl ThreadTurn {
    /// [`ThreadTurn::check`] with the latest run as a store keeps it (id
    /// and status as text); text that does not parse is a backend error.
    pub fn check_stored(
        self,
        thread: &str,
        latest: Option<(&str, &str)>,
    ) -> Result<(), crate::StoreError> {
        let latest = match latest {
            Some((id, status)) => {
                let bad = |what: String| crate::StoreError::Backend { source: what.into() };
                let parsed: RunId =
                    id.parse().map_err(|_| bad(format!("bad run id `{id}` in runs")))?;
                let status: RunStatus =
                    status.parse().map_err(|_| bad(format!("run {id}: bad status `{status}`")))?;
                Some((parsed, status))
            }
            None => None,
        };
        self.check(thread, latest)
    }

    /// For stores: whether a run built on this turn may be created on
    /// `thread`, whose latest run is `latest` (id and status) now.
    pub fn check(
        self,
        thread: &str,
        latest: Option<(RunId, RunStatus)>,
    ) -> Result<(), crate::StoreError> {
        let found = latest.map(|(id, _)| id);
        if found != self.after {
            return Err(crate::StoreError::ThreadMoved {
                thread: thread.to_owned(),
                expected: self.after,
                found,
            });
        }
        match latest {
            Some((run, status)) if status.holds_thread() => {
                Err(crate::StoreError::ThreadBusy { thread: thread.to_owned(), run, status })
            }
            _ => Ok(()),
        }
    }
}

/// One atomic write: a step record (or a status change alone), the run's
/// new status and that transition's events.
#[derive(Debug, Clone)]
pub struct Transition {
    /// The run.
    pub run: RunId,
    /// The writer's ownership epoch; a stale epoch is refused.
    pub epoch: u64,
    /// The step that finished, if any.
    pub step: Option<StepRecord>,
    /// The run's status after this transition.
    pub status: RunStatus,
    /// Why the run failed, when `status` is `failed`.
    pub failure: Option<RunFailure>,
    /// Events of this transition, continuing the run's sequence.
    pub events: Vec<EventRecord>,
    /// When the transition happened, milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// The renewed lease while the run stays `running`. For a run going
    /// back to `queued`: the earliest time it may be claimed again (a
    /// sleeping workflow's wake-up; `None`: at once). A run in any other
    /// status has no owner and no lease.
    pub lease_until_ms: Option<i64>,
    /// Interrupts raised by the step in flight (status `awaiting_hitl`),
    /// stored in the same transaction as the checkpoint that raised them.
    pub interrupts: Vec<InterruptRecord>,
}

/// A question a run asked a person, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptRecord {
    /// Stable, distinct id: `RUN.STEP.TASK.ORDINAL`.
    pub id: String,
    /// The step whose task raised it (the step in flight).
    pub step: u64,
    /// The task's position in that step.
    pub task: u32,
    /// Which interrupt of the task (0, 1, ... in the order the node raised
    /// them; breakpoints use their own ordinals).
    pub ordinal: u32,
    /// The node.
    pub node: String,
    /// What is asked (`approval`, `question`, `breakpoint`, ...).
    pub kind: String,
    /// What the person is shown.
    pub payload: serde_json::Value,
    /// Decisions accepted (`approve`, `edit`, `respond`, `reject`).
    pub decisions: Vec<String>,
    /// JSON Schema an `edit` or `respond` value must satisfy.
    pub schema: Option<serde_json::Value>,
    /// Whether the graph routes a rejection of this interrupt somewhere
    /// (otherwise a rejection ends the run `rejected`).
    pub rejection_routed: bool,
    /// The recorded decision, once there is one.
    pub decision: Option<serde_json::Value>,
    /// When it was raised, milliseconds since the Unix epoch.
    pub raised_at_ms: i64,
}

/// One interrupt's decision in a [`DecisionWrite`].
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The interrupt.
    pub interrupt: String,
    /// The decision (the engine's JSON form).
    pub decision: serde_json::Value,
}

/// Decisions on interrupts of one pause, recorded together with
/// compare-and-set on the run's version (its epoch).
#[derive(Debug, Clone)]
pub struct DecisionWrite {
    /// The run.
    pub run: RunId,
    /// The version the decider read; another decision or claim since then
    /// makes this one fail with [`StoreError::Fenced`](crate::StoreError::Fenced).
    pub expected_epoch: u64,
    /// The interrupts answered, each with its decision (the engine's JSON
    /// form): all recorded, or none (an unknown or already answered one
    /// refuses the whole write).
    pub answers: Vec<Answer>,
    /// The run's status afterwards: `awaiting_hitl` while other interrupts
    /// are open, `queued` when it can continue, `rejected` when it ends.
    pub status: RunStatus,
    /// Events to append (a rejection that ends the run closes a leg).
    pub events: Vec<EventRecord>,
    /// Why the run ended, when the decision ends it (`rejected`: kind
    /// `rejected`, the node, the reason); recorded as the run's failure.
    pub failure: Option<RunFailure>,
    /// When, milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// When the run becomes `queued`, take it over at once (status
    /// `running` under this owner until this lease) in the same
    /// transaction: the decider continues the run itself.
    pub claim: Option<(Owner, i64)>,
}

/// Finished tasks' updates stored before their step commits, so a crash
/// re-runs only the step's unfinished tasks. Tasks that finish together are
/// written together (one transaction).
#[derive(Debug, Clone)]
pub struct TaskWrite {
    /// The run.
    pub run: RunId,
    /// The writer's ownership epoch.
    pub epoch: u64,
    /// The updates, all of the step after the run's last committed one.
    pub updates: Vec<TaskUpdate>,
}

/// The progress of one task of the step in flight that runs a subgraph
/// (the subgraph's own checkpoint), with the events emitted since the
/// run's last write: replaced at each of the subgraph's steps, read back
/// with the checkpoint ([`StoredCheckpoint::progress`]), dropped when the
/// step commits.
#[derive(Debug, Clone)]
pub struct TaskProgress {
    /// The run.
    pub run: RunId,
    /// The writer's ownership epoch.
    pub epoch: u64,
    /// The task (of the step after the run's last committed one) and its
    /// progress record (the engine's).
    pub progress: TaskUpdate,
    /// Events to append to the run's log, numbered after its last one.
    pub events: Vec<EventRecord>,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// The run's id.
    pub id: RunId,
    /// The graph it is pinned to.
    pub graph: GraphRef,
    /// Thread, if any.
    pub thread: Option<String>,
    /// Current status.
    pub status: RunStatus,
    /// Last committed step (0 = only the input).
    pub step: u64,
    /// Ownership epoch; every claim increments it.
    pub epoch: u64,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Last transition time, milliseconds since the Unix epoch.
    pub updated_at_ms: i64,
    /// Why it failed, if it did.
    pub failure: Option<RunFailure>,
    /// Sequence number of the last stored event.
    pub last_seq: u64,
    /// The owning process while `running`.
    pub owner: Option<Owner>,
    /// Until when the owner's lease holds, while `running`.
    pub lease_until_ms: Option<i64>,
    /// Interrupts waiting for a decision.
    pub pending_interrupts: u32,
    /// Times the run was claimed while `running` (taken over from an owner
    /// that was gone) since its last leg ended: a run that keeps killing
    /// its owners counts up, and a worker (`tollgate_engine::Worker`) gives up on it
    /// past a limit. Back to 0 whenever a leg ends (pause, release, end).
    pub lease_losses: u32,
    /// The trace context stored when the run was created
    /// ([`NewRun::trace`]).
    pub trace: Option<String>,
}

impl RunRecord {
    /// A run a worker may take at `now_ms`: `queued` and due (a sleeping
    /// workflow's wake-up passed, or none), or orphaned.
    pub fn is_claimable(&self, now_ms: i64) -> bool {
        match self.status {
            RunStatus::Queued => self.lease_until_ms.is_none_or(|wake| wake <= now_ms),
            _ => self.is_orphaned(now_ms),
        }
    }

    /// A `queued` run's wake-up: not claimed before this time (a sleeping
    /// workflow).
    pub fn wakes_at_ms(&self) -> Option<i64> {
        match self.status {
            RunStatus::Queued => self.lease_until_ms,
            _ => None,
        }
    }

    /// A `running` run whose owner is gone: its lease expired at `now_ms`,
    /// or its owner is a dead process of this host.
    pub fn is_orphaned(&self, now_ms: i64) -> bool {
        self.status == RunStatus::Running
            && (self.lease_until_ms.is_none_or(|until| until < now_ms)
                || self.owner.as_ref().is_some_and(Owner::is_dead_here))
    }
}

/// One checkpoint in a run's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// The step (0 is the input).
    pub step: u64,
    /// When it was committed, milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// Tasks the step ran (0 for the input).
    pub tasks: u32,
    /// Whether it carries a full state snapshot.
    pub snapshot: bool,
}

/// One page of a run's history, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryPage {
    /// The checkpoints.
    pub checkpoints: Vec<CheckpointInfo>,
    /// Pass as `before` for the next page; `None` on the last page.
    pub next_before: Option<u64>,
}

/// Everything needed to continue a run from its last checkpoint.
#[derive(Debug, Clone)]
pub struct StoredCheckpoint {
    /// The run.
    pub run: RunRecord,
    /// Step of the newest snapshot.
    pub snapshot_step: u64,
    /// The newest snapshot.
    pub snapshot: Blob,
    /// Updates of each step after the snapshot, oldest first.
    pub deltas: Vec<(u64, Vec<TaskUpdate>)>,
    /// The frontier of the last committed step.
    pub frontier: Blob,
    /// Updates already stored for tasks of the next step.
    pub pending: Vec<TaskUpdate>,
    /// Progress records of unfinished tasks of the next step (subgraphs
    /// part way through), by task position; empty for a past checkpoint.
    pub progress: Vec<TaskUpdate>,
    /// Interrupts of the next step (the step in flight), answered or not,
    /// in the order they were raised; empty for a past checkpoint.
    pub interrupts: Vec<InterruptRecord>,
}
