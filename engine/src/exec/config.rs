//! Per-run settings.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tollgate_checkpoint::{Codec, RunId};

use crate::event::{Clock, EventSink, SystemClock};
use crate::node::NodeError;

use super::emit::DEFAULT_EVENT_CAP;
use super::token::CancelToken;

/// Default super-step budget of a run: generous for agents, small enough
/// that a runaway cycle fails in well under a second of engine time.
pub const DEFAULT_MAX_STEPS: u64 = 1_000;

/// Default ownership lease of a running run. The owner renews it at every
/// step and every third of the lease while a step runs. Another process
/// takes over (`Executor::recover`) once the lease has expired, or at once
/// when the owner was a process of the same host that no longer exists.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// When a checkpoint carries a full state snapshot besides the step's
/// delta. Loading a run reads the newest snapshot and replays the deltas
/// after it.
///
/// A snapshot is written once the deltas since the last one add up to at
/// least the last snapshot's size (and at least `min_delta_bytes`), or after
/// `max_steps_between` steps. Because snapshots are spaced by the bytes they
/// summarise, all snapshots together cost at most about twice the deltas:
/// storage grows linearly with the updates, never with steps x state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotPolicy {
    /// Deltas smaller than this in total never trigger a snapshot by size.
    pub min_delta_bytes: usize,
    /// Upper bound on the deltas replayed when loading.
    pub max_steps_between: u64,
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        Self { min_delta_bytes: 16 * 1024, max_steps_between: 1_000 }
    }
}

/// Settings of one run (or of one leg, when continuing a run).
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub(crate) max_steps: u64,
    pub(crate) thread: Option<String>,
    pub(crate) events: Option<EventSink>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) run_id: Option<RunId>,
    pub(crate) snapshots: SnapshotPolicy,
    pub(crate) codec: Codec,
    pub(crate) lease: Duration,
    pub(crate) break_before: Vec<String>,
    pub(crate) break_after: Vec<String>,
    pub(crate) attachment: Option<String>,
    pub(crate) event_cap: u64,
    pub(crate) announce: Vec<crate::Event>,
    /// Set by [`Executor::run_on_thread`](crate::Executor::run_on_thread):
    /// the thread's latest run the new one is built on.
    pub(crate) turn: Option<tollgate_checkpoint::ThreadTurn>,
    /// Which stored settings this config sets itself (over the run's).
    pub(crate) explicit: Explicit,
    /// The leg's stop flag, when made beforehand
    /// ([`RunConfig::cancel_token`]).
    pub(crate) stop: Option<CancelToken>,
    /// Long-term memory for the leg's nodes (the executor's when unset).
    pub(crate) memory: Option<tollgate_checkpoint::Memory>,
    /// Results given to workflow tasks instead of running them (tests).
    pub(crate) task_script: Option<Arc<dyn TaskScript>>,
    /// Who asks for a state update or fork ([`RunConfig::by`]).
    pub(crate) by: Option<String>,
}

/// Which of the run's stored settings a config overrides.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Explicit {
    pub(crate) max_steps: bool,
    pub(crate) event_cap: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            max_steps: DEFAULT_MAX_STEPS,
            thread: None,
            events: None,
            clock: Arc::new(SystemClock),
            run_id: None,
            snapshots: SnapshotPolicy::default(),
            codec: Codec::Json,
            lease: DEFAULT_LEASE,
            break_before: Vec::new(),
            break_after: Vec::new(),
            attachment: None,
            event_cap: DEFAULT_EVENT_CAP,
            announce: Vec::new(),
            turn: None,
            explicit: Explicit::default(),
            stop: None,
            memory: None,
            task_script: None,
            by: None,
        }
    }
}

impl RunConfig {
    /// Default settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Who asks (a person's or a service's name): recorded with the
    /// checkpoint a state update ([`Executor::update_state`],
    /// [`Executor::update_state_at`]), a fork ([`Executor::fork`]) or a
    /// migration writes, and shown as [`StateSnapshot::by`]. A run's own
    /// steps record nobody.
    ///
    /// [`Executor::update_state`]: crate::Executor::update_state
    /// [`Executor::update_state_at`]: crate::Executor::update_state_at
    /// [`Executor::fork`]: crate::Executor::fork
    /// [`StateSnapshot::by`]: crate::StateSnapshot::by
    pub fn by(mut self, name: impl Into<String>) -> Self {
        self.by = Some(name.into());
        self
    }

    /// The leg obeys `token` as it does its handle
    /// ([`RunHandle::cancel_token`](crate::RunHandle::cancel_token) returns
    /// it): it can be cancelled, released or told to renew its lease
    /// ([`CancelToken::renew_now`]) before the leg has a handle. Not stored
    /// with the run; every leg started with this config (or a clone) obeys
    /// the same token, so give each leg its own.
    pub fn cancel_token(mut self, token: CancelToken) -> Self {
        self.stop = Some(token);
        self
    }

    /// The token given with [`RunConfig::cancel_token`], if any: a
    /// [`Workload`](crate::Workload) that drives a leg with settings of its
    /// own passes on the one its worker gave it.
    pub fn given_cancel_token(&self) -> Option<CancelToken> {
        self.stop.clone()
    }

    /// Super-steps the run may take ([`DEFAULT_MAX_STEPS`] by default). A
    /// run that needs exactly this many completes; one that needs more
    /// fails with [`RunError::StepLimitExceeded`](crate::RunError::StepLimitExceeded).
    /// Stored with the run: a later leg (resume, continue, recovery, a
    /// worker) uses the run's unless its own config sets it (so does
    /// [`RunConfig::event_cap`]).
    pub fn max_steps(mut self, max_steps: u64) -> Self {
        self.max_steps = max_steps;
        self.explicit.max_steps = true;
        self
    }

    /// The thread (conversation) the run belongs to, for listing.
    pub fn thread(mut self, thread: impl Into<String>) -> Self {
        self.thread = Some(thread.into());
        self
    }

    /// Sends every event to `sink` as it happens.
    pub fn events(mut self, sink: EventSink) -> Self {
        self.events = Some(sink);
        self
    }

    /// Uses `clock` for event timestamps and record times.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The run id set with [`RunConfig::run_id`], if any.
    pub fn id(&self) -> Option<RunId> {
        self.run_id
    }

    /// Uses this id for a new run instead of a fresh ULID.
    pub fn run_id(mut self, run_id: RunId) -> Self {
        self.run_id = Some(run_id);
        self
    }

    /// When checkpoints carry full snapshots.
    pub fn snapshots(mut self, policy: SnapshotPolicy) -> Self {
        self.snapshots = policy;
        self
    }

    /// How long this process's ownership of the run lasts without renewal
    /// ([`DEFAULT_LEASE`] by default).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    pub(crate) fn lease_until(&self) -> i64 {
        self.clock.now_ms().saturating_add(self.lease.as_millis() as i64)
    }

    /// Breakpoints for this run (or leg), besides the graph's: pause before
    /// these nodes run.
    pub fn interrupt_before<T: Into<String>>(mut self, nodes: impl IntoIterator<Item = T>) -> Self {
        self.break_before.extend(nodes.into_iter().map(Into::into));
        self
    }

    /// Long-term memory the leg's nodes and tools reach through their
    /// context ([`NodeContext::memory`](crate::NodeContext::memory)),
    /// instead of the executor's ([`Executor::with_memory`](crate::Executor::with_memory)).
    /// Not stored with the run.
    pub fn memory(mut self, memory: tollgate_checkpoint::Memory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Workflow tasks of this leg take their results from `script` where
    /// it has one, instead of running (the testkit's `ScriptedTasks`);
    /// those results are stored as real ones are. Not stored with the run.
    pub fn task_script(mut self, script: Arc<dyn TaskScript>) -> Self {
        self.task_script = Some(script);
        self
    }

    /// Breakpoints for this run (or leg): pause after these nodes ran.
    pub fn interrupt_after<T: Into<String>>(mut self, nodes: impl IntoIterator<Item = T>) -> Self {
        self.break_after.extend(nodes.into_iter().map(Into::into));
        self
    }

    /// Stores `attachment` with a new run, for any process to read back
    /// with [`Executor::attachment`](crate::Executor::attachment) (a
    /// blueprint run keeps its blueprint here). Ignored when continuing.
    pub fn attach(mut self, attachment: &serde_json::Value) -> Self {
        self.attachment = Some(attachment.to_string());
        self
    }

    /// An event the leg records right after its `run_started` (in the
    /// same commit), before any node runs: what the caller established
    /// about the leg, such as the pack it runs ([`Event::PackRun`](crate::Event::PackRun)).
    /// Run, node, checkpoint and interrupt events are the executor's own
    /// and are not taken.
    pub fn announce(mut self, event: crate::Event) -> Self {
        if event.is_node_emittable() || matches!(event, crate::Event::PackRun { .. }) {
            self.announce.push(event);
        } else {
            tracing::warn!(
                kind = event.kind(),
                "RunConfig::announce ignores the executor's own events"
            );
        }
        self
    }

    /// Stored events after which detail events are dropped
    /// ([`DEFAULT_EVENT_CAP`]).
    pub fn event_cap(mut self, cap: u64) -> Self {
        self.event_cap = cap;
        self.explicit.event_cap = true;
        self
    }

    /// The settings stored with the run: `max_steps` and `event_cap`
    /// (per-run breakpoints hold for their leg only, as in LangGraph).
    pub(crate) fn settings(&self) -> super::record::RunSettings {
        super::record::RunSettings { max_steps: self.max_steps, event_cap: self.event_cap }
    }

    /// This config with the run's stored settings where it sets none of
    /// its own (a leg continuing a run started elsewhere).
    pub(crate) fn settled(mut self, stored: Option<&super::record::RunSettings>) -> Self {
        let Some(stored) = stored else { return self };
        if !self.explicit.max_steps {
            self.max_steps = stored.max_steps;
        }
        if !self.explicit.event_cap {
            self.event_cap = stored.event_cap;
        }
        self
    }

    /// The codec for state, updates and frontiers.
    pub fn codec(mut self, codec: Codec) -> Self {
        self.codec = codec;
        self
    }
}

/// Results a test gives workflow tasks instead of running them (set with
/// [`RunConfig::task_script`]; the
/// testkit's `ScriptedTasks` is one).
pub trait TaskScript: Send + Sync + std::fmt::Debug {
    /// The result of the task named `name` (as its events name it:
    /// `child/task` inside a called workflow) at attempt `attempt` (from
    /// 1), as JSON; `None` runs the task.
    fn result(&self, name: &str, attempt: u32) -> Option<Result<Value, NodeError>>;
}
