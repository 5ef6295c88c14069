//! Typed run events, their envelope, and the live event channel.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;
use tollgate_checkpoint::{RunFailure, RunId, RunStatus};

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

/// A view of the one event stream (docs/events.md, stream modes): a
/// filter, not another stream. Every mode but `final` keeps the run's
/// bookends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// Model calls: `model_started`, `model_delta`, `model_completed`.
    Messages,
    /// Tool calls: `tool_started`, `tool_delta`, `tool_completed`.
    Tools,
    /// State changes: `node_completed`, `task_completed`,
    /// `checkpoint_saved`, `interrupt_raised`, `run_resumed`.
    Updates,
    /// Everything.
    Events,
    /// Only `run_ended`, with the result or error.
    Final,
}

impl StreamMode {
    /// Every mode.
    pub const ALL: [StreamMode; 5] = [
        StreamMode::Messages,
        StreamMode::Tools,
        StreamMode::Updates,
        StreamMode::Events,
        StreamMode::Final,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamMode::Messages => "messages",
            StreamMode::Tools => "tools",
            StreamMode::Updates => "updates",
            StreamMode::Events => "events",
            StreamMode::Final => "final",
        }
    }

    /// Whether this mode shows `event`.
    pub fn accepts(self, event: &Event) -> bool {
        let bookend = matches!(event, Event::RunStarted { .. } | Event::RunEnded { .. });
        match self {
            StreamMode::Events => true,
            StreamMode::Final => matches!(event, Event::RunEnded { .. }),
            StreamMode::Messages => {
                bookend
                    || matches!(
                        event,
                        Event::ModelStarted { .. }
                            | Event::ModelDelta { .. }
                            | Event::ModelCompleted { .. }
                    )
            }
            StreamMode::Tools => {
                bookend
                    || matches!(
                        event,
                        Event::ToolStarted { .. }
                            | Event::ToolDelta { .. }
                            | Event::ToolCompleted { .. }
                    )
            }
            StreamMode::Updates => {
                bookend
                    || matches!(
                        event,
                        Event::NodeCompleted { .. }
                            | Event::TaskCompleted { .. }
                            | Event::CheckpointSaved { .. }
                            | Event::InterruptRaised { .. }
                            | Event::RunResumed { .. }
                    )
            }
        }
    }
}

impl std::str::FromStr for StreamMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        StreamMode::ALL.into_iter().find(|mode| mode.as_str() == text).ok_or_else(|| {
            format!("unknown stream mode `{text}` (messages, tools, updates, events, final)")
        })
    }
}

/// Where a run sends its events live, as they happen. Create one with
/// [`EventSink::channel`] and pass it in the run's config.
#[derive(Debug, Clone)]
pub struct EventSink {
    sender: mpsc::UnboundedSender<EventEnvelope>,
}

/// The receiving end of an [`EventSink`].
#[derive(Debug)]
pub struct EventStream {
    receiver: mpsc::UnboundedReceiver<EventEnvelope>,
}

impl EventSink {
    /// A connected sink and stream. The stream ends when every run holding
    /// the sink has ended.
    pub fn channel() -> (EventSink, EventStream) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (EventSink { sender }, EventStream { receiver })
    }

    pub(crate) fn send(&self, event: EventEnvelope) {
        // A dropped stream means nobody listens; the run goes on.
        let _ = self.sender.send(event);
    }
}

impl EventStream {
    /// The next event; `None` once every sender is gone.
    pub async fn recv(&mut self) -> Option<EventEnvelope> {
        self.receiver.recv().await
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Option<EventEnvelope> {
        self.receiver.try_recv().ok()
    }
}

/// Source of wall-clock time for events and records; inject a fixed clock
/// for reproducible logs.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64)
    }
}

/// Formats milliseconds since the Unix epoch as RFC 3339 UTC
/// (`2026-11-30T07:39:48.123Z`).
pub fn format_rfc3339(ms: i64) -> String {
    let fields = civil(ms);
    if !(0..=9999).contains(&fields[0]) {
        // Outside four-digit years (never for a real clock).
        return with_format(fields);
    }
    // Written digit by digit: `format!` costs several times as much, and
    // every event carries a time.
    let mut text = String::with_capacity(24);
    let (widths, after) = ([4, 2, 2, 2, 2, 2, 3], ['-', '-', 'T', ':', ':', '.', 'Z']);
    for ((value, width), after) in fields.into_iter().zip(widths).zip(after) {
        push_padded(&mut text, value as u64, width);
        text.push(after);
    }
    text
}

/// Year, month, day, hour, minute, second and millisecond (UTC) of `ms`
/// milliseconds since the Unix epoch.
fn civil(ms: i64) -> [i64; 7] {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    // Civil-from-days (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    [year, month, day, of_day / 3600, of_day % 3600 / 60, of_day % 60, millis]
}

/// [`civil`]'s fields as RFC 3339, with `format!`.
fn with_format([year, month, day, hour, minute, second, millis]: [i64; 7]) -> String {
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
}

/// Appends `value` in decimal, zero-padded to `width` digits (at most 20).
pub(crate) fn push_padded(text: &mut String, mut value: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut at = digits.len();
    while value > 0 || at == digits.len() {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
    }
    let start = at.min(digits.len() - width.min(digits.len()));
    for &digit in &digits[start..] {
        text.push(char::from(digit));
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
    fn rfc3339_is_what_format_wrote() {
        // Field boundaries, the ends of the four-digit years, and random
        // instants in between.
        let mut instants = vec![0i64, 9, 99, 999, 1_000, 59_999, 3_599_999, 86_399_999];
        instants.extend([-62_167_219_200_000, 253_402_300_799_999, 951_868_799_999]);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..5_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            instants.push((state % 316_000_000_000_000) as i64 - 62_167_219_200_000);
        }
        for ms in instants {
            assert_eq!(format_rfc3339(ms), with_format(civil(ms)), "{ms}");
        }
        let mut padded = String::new();
        push_padded(&mut padded, 7, 3);
        push_padded(&mut padded, 0, 1);
        push_padded(&mut padded, 12_345, 2);
        push_padded(&mut padded, u64::MAX, 2);
        assert_eq!(padded, format!("007012345{}", u64::MAX));
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_795_937_988_123, "2026-11-29T07:39:48.123Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
        ];
        for (ms, text) in cases {
            assert_eq!(format_rfc3339(ms), text, "{ms}");
        }
    }

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
