//! Typed run events, their envelope, and the live event channel.

mod clock;
mod sink;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tollgate_checkpoint::{RunFailure, RunId, RunStatus};

pub(crate) use self::clock::push_padded;
pub use self::clock::{format_rfc3339, Clock, SystemClock};
pub use self::sink::{EventSink, EventStream, StreamMode};

use crate::hitl::PendingInterrupt;

/// Version of the event envelope; bumped on incompatible changes.
pub const EVENT_VERSION: u32 = 1;

/// One event with its envelope. Serialized as one flat JSON object:
/// `{"v":1,"run_id":…,"seq":…,"ts":…,"node":…,"node_id":…,"event_type":…, …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventEnvelope {
    /// Envelope version ([`EVENT_VERSION`]).
    pub v: u32,
    /// The run.
    pub run_id: RunId,
    /// Per-run sequence number: 1, 2, 3, ... with no gaps, across legs.
    pub seq: u64,
    /// When it happened, RFC 3339 UTC with milliseconds.
    pub ts: String,
    /// The node, for node events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The node instance (`name:step.task`), distinct for concurrent
    /// instances of one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The event.
    #[serde(flatten)]
    pub event: Event,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event_type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// A leg of the run began (first event of every leg).
    RunStarted {
        /// Graph name.
        graph: String,
        /// Graph version.
        graph_version: u32,
        /// The checkpoint the leg starts from (0 for a new run).
        from_step: u64,
    },
    /// A task began.
    NodeStarted {
        /// Super-step.
        step: u64,
        /// Task position in the step.
        task: u32,
    },
    /// A task finished; its update is merged at the step's barrier.
    NodeCompleted {
        /// Super-step.
        step: u64,
        /// Task position in the step.
        task: u32,
        /// The partial update, as JSON (null when a command wrote none).
        update: Value,
        /// Targets a command chose, if any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        goto: Vec<String>,
        /// The update was stored before a crash or pause and reused, not
        /// recomputed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reused: bool,
        /// The output came from the node's cache (`StateGraph::cache`):
        /// the node did not run.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cached: bool,
    },
    /// A workflow's task began (it had no stored result).
    TaskStarted {
        /// Super-step (the workflow's).
        step: u64,
        /// The task's position in the workflow (0 is the first asked for).
        task: u32,
        /// Its name.
        name: String,
    },
    /// A workflow's task finished; its result is stored with this event.
    TaskCompleted {
        /// Super-step (the workflow's).
        step: u64,
        /// The task's position in the workflow.
        task: u32,
        /// Its name.
        name: String,
        /// Its result.
        output: Value,
    },
    /// An attempt of a workflow's task failed: it runs again in
    /// `retry_in_ms` when that is given, else the failure is the task's.
    TaskFailed {
        /// Super-step (the workflow's).
        step: u64,
        /// The task's position in the workflow.
        task: u32,
        /// Its name.
        name: String,
        /// The attempt that failed (1 is the first).
        attempt: u32,
        /// Why.
        error: String,
        /// When it is tried again, if it is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_in_ms: Option<u64>,
    },
    /// A task failed for good (its retries, if any, are spent).
    NodeFailed {
        /// Super-step.
        step: u64,
        /// Task position in the step.
        task: u32,
        /// Attempts made.
        attempts: u32,
        /// The error.
        error: String,
    },
    /// A retryable task error will be retried after a delay.
    RetryScheduled {
        /// Super-step.
        step: u64,
        /// Task position in the step.
        task: u32,
        /// The attempt that failed.
        attempt: u32,
        /// Delay before the next attempt.
        delay_ms: u64,
        /// The error.
        error: String,
        /// The model or tool call retried, when the harness retries a call
        /// inside a node (the node itself is not retried then).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
    },
    /// A task asked a person; the run pauses at the end of the step.
    InterruptRaised {
        /// Super-step.
        step: u64,
        /// Task position in the step.
        task: u32,
        /// The interrupt.
        interrupt: PendingInterrupt,
    },
    /// A leg continues a paused run with these decisions.
    RunResumed {
        /// The step resumed.
        step: u64,
        /// The interrupts answered, with their decisions.
        decisions: Vec<PendingInterrupt>,
    },
    /// A step's checkpoint was committed (with this event in it).
    CheckpointSaved {
        /// The step.
        step: u64,
        /// Tasks the step ran.
        tasks: u32,
        /// Whether the checkpoint carries a full state snapshot.
        snapshot: bool,
    },
    /// The leg ended (last event of every leg).
    RunEnded {
        /// The run's status now.
        status: RunStatus,
        /// Last committed step.
        step: u64,
        /// The final state, when completed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        /// Why it failed, when failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<RunFailure>,
        /// What the run waits for, when `awaiting_hitl`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        interrupts: Vec<PendingInterrupt>,
    },
    /// An agent called its chat model.
    ModelStarted {
        /// The agent.
        agent: String,
        /// This call (unique in the run; retries of it share it).
        call_id: String,
        /// The model's name.
        model: String,
        /// 1 on the first attempt, 2 on the first retry, ...
        attempt: u32,
    },
    /// A piece of a streamed model reply.
    ModelDelta {
        /// The agent.
        agent: String,
        /// The call.
        call_id: String,
        /// The attempt it belongs to (as in `model_started`). A retry
        /// starts the reply again: text of an earlier attempt is void.
        #[serde(default = "first_attempt")]
        attempt: u32,
        /// Text to append to the reply so far.
        text: String,
    },
    /// A model call returned.
    ModelCompleted {
        /// The agent.
        agent: String,
        /// The call.
        call_id: String,
        /// The model's name.
        model: String,
        /// The assistant message it produced.
        message: Value,
        /// Token usage, when the provider reports it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Value>,
        /// Wall time of the call, retries included.
        duration_ms: u64,
    },
    /// An agent called a tool.
    ToolStarted {
        /// The agent.
        agent: String,
        /// The model's tool-call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// The arguments.
        args: Value,
        /// When, RFC 3339 UTC.
        started_at: String,
    },
    /// Progress of a running tool (a command tool's output lines).
    ToolDelta {
        /// The agent.
        agent: String,
        /// The model's tool-call id.
        call_id: String,
        /// `stdout` or `stderr`.
        stream: String,
        /// One line, without its line break.
        line: String,
    },
    /// A tool call ended; its result went back to the model.
    ToolCompleted {
        /// The agent.
        agent: String,
        /// The model's tool-call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// Whether the tool succeeded (false: the model got an error).
        ok: bool,
        /// The result or error, shortened.
        summary: String,
        /// Wall time of the call.
        duration_ms: u64,
    },
    /// A middleware hook began.
    MiddlewareStarted {
        /// The agent.
        agent: String,
        /// The middleware's name.
        middleware: String,
        /// `before_model`, `after_model`, `wrap_model_call` or `wrap_tool_call`.
        hook: String,
    },
    /// A middleware hook returned.
    MiddlewareCompleted {
        /// The agent.
        agent: String,
        /// The middleware's name.
        middleware: String,
        /// The hook.
        hook: String,
        /// Whether it returned without error.
        ok: bool,
    },
    /// An application-defined event.
    Custom {
        /// Its name.
        name: String,
        /// Its payload.
        payload: Value,
    },
    /// The leg runs a blueprint from a pack: which bundle, and what was
    /// verified before anything ran (the first event after `run_started`
    /// of every leg of a pack run).
    PackRun {
        /// SHA-256 of the pack's manifest, hex.
        bundle_hash: String,
        /// Whether a trusted key's signature over the bundle hash verified.
        signature_verified: bool,
        /// The signing key's id, when the pack is signed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_id: Option<String>,
        /// Whether the pack was found already extracted and intact.
        cache_hit: bool,
        /// Whether this was only a verification (no run follows).
        dry_run_verify: bool,
    },
    /// An agent took, finished or handed on the work (agents that hand
    /// work to each other: a timeline shows who held it).
    PersonaStage {
        /// The agent.
        persona: String,
        /// Where: the node the agent runs in (for a handoff, the node of
        /// the agent taking over).
        stage: String,
        /// `started`, `completed` or `handoff`.
        transition: String,
    },
    /// The run reached its cap of stored events: from here on this leg
    /// drops detail events (`model_delta`, `tool_delta`, `middleware_*`,
    /// `custom`); every other event is still stored and sent.
    EventsCapped {
        /// The cap ([`RunConfig::event_cap`](crate::RunConfig::event_cap)).
        cap: u64,
    },
}

impl Event {
    /// The `event_type` name.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStarted { .. } => "run_started",
            Event::NodeStarted { .. } => "node_started",
            Event::NodeCompleted { .. } => "node_completed",
            Event::NodeFailed { .. } => "node_failed",
            Event::TaskStarted { .. } => "task_started",
            Event::TaskCompleted { .. } => "task_completed",
            Event::TaskFailed { .. } => "task_failed",
            Event::RetryScheduled { .. } => "retry_scheduled",
            Event::InterruptRaised { .. } => "interrupt_raised",
            Event::RunResumed { .. } => "run_resumed",
            Event::CheckpointSaved { .. } => "checkpoint_saved",
            Event::RunEnded { .. } => "run_ended",
            Event::ModelStarted { .. } => "model_started",
            Event::ModelDelta { .. } => "model_delta",
            Event::ModelCompleted { .. } => "model_completed",
            Event::ToolStarted { .. } => "tool_started",
            Event::ToolDelta { .. } => "tool_delta",
            Event::ToolCompleted { .. } => "tool_completed",
            Event::MiddlewareStarted { .. } => "middleware_started",
            Event::MiddlewareCompleted { .. } => "middleware_completed",
            Event::Custom { .. } => "custom",
            Event::EventsCapped { .. } => "events_capped",
            Event::PackRun { .. } => "pack_run",
            Event::PersonaStage { .. } => "persona_stage",
        }
    }

    /// Whether it is a detail event, dropped once a run has reached its
    /// event cap: `model_delta`, `tool_delta`, `middleware_*`, `custom`.
    pub fn is_detail(&self) -> bool {
        matches!(
            self,
            Event::ModelDelta { .. }
                | Event::ToolDelta { .. }
                | Event::MiddlewareStarted { .. }
                | Event::MiddlewareCompleted { .. }
                | Event::Custom { .. }
        )
    }

    /// Whether a node may emit it through
    /// [`NodeContext::emit`](crate::NodeContext::emit): the harness events
    /// (model, tool, middleware, custom) and harness retries. Run, node,
    /// checkpoint and interrupt events belong to the executor.
    pub fn is_node_emittable(&self) -> bool {
        match self {
            Event::RetryScheduled { call_id, .. } => call_id.is_some(),
            Event::ModelStarted { .. }
            | Event::ModelDelta { .. }
            | Event::ModelCompleted { .. }
            | Event::ToolStarted { .. }
            | Event::ToolDelta { .. }
            | Event::ToolCompleted { .. }
            | Event::MiddlewareStarted { .. }
            | Event::MiddlewareCompleted { .. }
            | Event::PersonaStage { .. }
            | Event::Custom { .. } => true,
            _ => false,
        }
    }
}

/// `model_delta` lines written before deltas carried their attempt.
fn first_attempt() -> u32 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_is_one_flat_object_with_event_type() {
        let envelope = EventEnvelope {
            v: EVENT_VERSION,
            run_id: RunId::from_parts(1, 2),
            seq: 3,
            ts: format_rfc3339(0),
            node: Some("a".into()),
            node_id: Some("a:1.0".into()),
            event: Event::NodeStarted { step: 1, task: 0 },
        };
        let json = serde_json::to_value(&envelope).expect("serialize");
        assert_eq!(json["event_type"], "node_started");
        assert_eq!(json["step"], 1);
        assert_eq!(json["node_id"], "a:1.0");
        let back: EventEnvelope = serde_json::from_value(json).expect("deserialize");
        assert_eq!(back, envelope);
    }

    #[test]
    fn deltas_stored_before_attempts_read_as_the_first_attempt() {
        let old = r#"{"event_type":"model_delta","agent":"w","call_id":"c","text":"Hel"}"#;
        let event: Event = serde_json::from_str(old).expect("an old delta");
        assert_eq!(
            event,
            Event::ModelDelta {
                agent: "w".into(),
                call_id: "c".into(),
                attempt: 1,
                text: "Hel".into()
            }
        );
    }
}
