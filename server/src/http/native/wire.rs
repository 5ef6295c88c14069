//! The native API's JSON (docs/openapi.yaml) of what the service
//! returns about a run's state: a checkpoint's values, source, next
//! nodes, interrupts and the tasks of the step in flight (with their
//! errors, finished outputs and nested graphs), run and thread histories,
//! and a thread, and the UI shape of events (`?shape=ui`). The CLI's
//! `--json` prints the same.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tollgate_checkpoint::{CheckpointInfo, ScheduleRecord, ScheduleTiming};
use tollgate_engine::{
    format_rfc3339, CheckpointSource, Decision, DecisionKind, Event, EventEnvelope, ForkOrigin,
    NestedState, PendingInterrupt, StatePage, StateSnapshot, TaskState, ThreadHistoryPage,
};

use crate::service::{Listing, Outline, RunHistory, ThreadView};

/// `{"id", "step", "source", "by", "forked_from", "status", "values",
/// "next", "interrupts", "pending_writes", "tasks"}` (`by`: who asked for
/// the update or fork that wrote it, or null; `forked_from`: `{"run",
/// "step", "by", "changed"}` of a run forked from another, or null).
pub fn state_json(state: &StateSnapshot<Value>) -> Value {
    let pending: Vec<Value> = state
        .pending_writes
        .iter()
        .map(|(task, node)| json!({"task": task, "node": node}))
        .collect();
    json!({
        "id": state.run.to_string(),
        "step": state.step,
        "source": state.source,
        "by": state.by,
        "forked_from": state.forked_from,
        "status": state.status,
        "values": state.values,
        "next": state.next,
        "interrupts": state.interrupts.iter().map(interrupt).collect::<Vec<_>>(),
        "pending_writes": pending,
        "tasks": state.tasks.iter().map(task).collect::<Vec<_>>(),
    })
}

/// An open interrupt: `{"id", "node", "kind", "payload", "decisions",
/// "schema"}` (and the decision, once made).
#[derive(Serialize)]
struct InterruptJson<'a> {
    id: &'a str,
    node: &'a str,
    kind: &'a str,
    payload: &'a Value,
    decisions: &'a [DecisionKind],
    schema: &'a Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<&'a Decision>,
}

fn interrupt(interrupt: &PendingInterrupt) -> Value {
    json!(InterruptJson {
        id: &interrupt.id,
        node: &interrupt.node,
        kind: &interrupt.kind,
        payload: &interrupt.payload,
        decisions: &interrupt.decisions,
        schema: &interrupt.schema,
        decision: interrupt.decision.as_ref(),
    })
}

/// A task of the step in flight: `{"task", "node", "id", "error":
/// {"class", "message"} | null, "writes", "interrupts", "nested"}`.
fn task(task: &TaskState) -> Value {
    json!({
        "task": task.task,
        "node": task.node,
        "id": task.id,
        "error": task.error.as_ref().map(|error| json!({"class": error.class, "message": error.message})),
        "writes": task.writes,
        "interrupts": task.interrupts.iter().map(interrupt).collect::<Vec<_>>(),
        "nested": task.nested.iter().map(nested).collect::<Vec<_>>(),
    })
}

/// A graph in flight inside a task: `{"namespace", "graph", "step",
/// "values", "next", "tasks"}`.
fn nested(state: &NestedState) -> Value {
    json!({
        "namespace": state.namespace,
        "graph": state.graph,
        "step": state.step,
        "values": state.values,
        "next": state.next,
        "tasks": state.tasks.iter().map(task).collect::<Vec<_>>(),
    })
}

/// A checkpoint's place in a history: `{"step", "at", "tasks",
/// "snapshot"}`.
#[derive(Serialize)]
struct InfoJson {
    step: u64,
    at: String,
    tasks: u32,
    snapshot: bool,
}

impl From<&CheckpointInfo> for InfoJson {
    fn from(info: &CheckpointInfo) -> Self {
        Self {
            step: info.step,
            at: format_rfc3339(info.at_ms),
            tasks: info.tasks,
            snapshot: info.snapshot,
        }
    }
}

fn info(info: &CheckpointInfo) -> Value {
    json!(InfoJson::from(info))
}

/// A history entry with its state: the checkpoint's place, its `source`,
/// `by`, `forked_from`, `values` and `next`; in a thread's history also
/// its `number` and `run`.
#[derive(Serialize)]
struct EntryJson<'a> {
    #[serde(flatten)]
    info: InfoJson,
    source: &'a CheckpointSource,
    by: &'a Option<String>,
    forked_from: &'a Option<ForkOrigin>,
    values: &'a Value,
    next: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    number: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<String>,
}

impl<'a> EntryJson<'a> {
    fn new(at: &'a CheckpointInfo, state: &'a StateSnapshot<Value>) -> Self {
        Self {
            info: at.into(),
            source: &state.source,
            by: &state.by,
            forked_from: &state.forked_from,
            values: &state.values,
            next: &state.next,
            number: None,
            run: None,
        }
    }
}

/// A page of a thread's history: `{"thread", "total", "checkpoints":
/// [{"number", "run", "step", "at", "tasks", "snapshot", "source", "by",
/// "values", "next"}], "next_before"}`.
pub fn thread_history_json(thread: &str, page: &ThreadHistoryPage<Value>) -> Value {
    let checkpoints: Vec<EntryJson<'_>> = page
        .checkpoints
        .iter()
        .map(|entry| EntryJson {
            number: Some(entry.number),
            run: Some(entry.state.run.to_string()),
            ..EntryJson::new(&entry.info, &entry.state)
        })
        .collect();
    json!({"thread": thread, "total": page.total, "checkpoints": checkpoints,
           "next_before": page.next_before})
}

/// A page of a run's history: `{"checkpoints": [{"step", "at", "tasks",
/// "snapshot"}, with the states: "source", "by", "forked_from", "values",
/// "next"], "next_before"}`.
pub fn run_history_json(page: &RunHistory) -> Value {
    match page {
        RunHistory::Checkpoints(page) => {
            let checkpoints: Vec<Value> = page.checkpoints.iter().map(info).collect();
            json!({"checkpoints": checkpoints, "next_before": page.next_before})
        }
        RunHistory::States(page) => states(page),
    }
}

fn states(page: &StatePage<Value>) -> Value {
    let checkpoints: Vec<EntryJson<'_>> =
        page.checkpoints.iter().map(|(at, state)| EntryJson::new(at, state)).collect();
    json!({"checkpoints": checkpoints, "next_before": page.next_before})
}

/// A thread: `{"thread", "latest": SUMMARY, "step", "values"}` (`values`
/// null when the latest run's graph is not one this process has).
pub fn thread_json(view: &ThreadView) -> Value {
    json!({"thread": view.thread, "latest": view.latest, "step": view.step,
           "values": view.values})
}

/// A page of runs: `{"runs", "damaged": [{"id", "error"}], "next_cursor"}`.
pub fn listing_json(listing: &Listing) -> Value {
    let damaged: Vec<Value> =
        listing.damaged.iter().map(|row| json!({"id": row.id, "error": row.reason})).collect();
    json!({"runs": listing.runs, "damaged": damaged, "next_cursor": listing.next})
}

/// A schedule as the API and `--json` show it: times as RFC 3339 (and
/// milliseconds), no encoded blobs.
pub fn schedule_json(record: &ScheduleRecord) -> Value {
    let time = |ms: Option<i64>| ms.map(format_rfc3339);
    let (cron, at) = match &record.timing {
        ScheduleTiming::Cron { expression } => (Some(expression.clone()), None),
        ScheduleTiming::At { at_ms } => (None, Some(format_rfc3339(*at_ms))),
        _ => (None, None),
    };
    json!({
        "id": record.id,
        "graph": record.graph.name,
        "version": record.graph.version,
        "cron": cron,
        "at": at,
        "missed": record.missed.as_str(),
        "grace_ms": record.grace_ms,
        "input": record.input,
        "created_at": format_rfc3339(record.created_at_ms),
        "next_at": time(record.next_at_ms),
        "next_at_ms": record.next_at_ms,
        "last_run": record.last_run.map(|run| run.to_string()),
        "last_fired_at": time(record.last_fired_at_ms),
        "runs_started": record.runs_started,
        "ticks_skipped": record.ticks_skipped,
        "metadata": record.metadata,
    })
}

/// A run's graph with its drawing (`GET /runs/{id}/graph`): the outline's
/// fields, and `layout`.
#[derive(serde::Serialize)]
pub(crate) struct Drawn {
    /// The graph's outline.
    #[serde(flatten)]
    pub(crate) outline: Outline,
    /// Its layered drawing.
    pub(crate) layout: Value,
}

/// What the UI shape says of an event: `nodeStatus`, `executionType`,
/// `toolName`, `plainTextMessage`, and fields of the event's own.
type UiParts<'a> = (&'static str, &'static str, Option<&'a str>, String, Value);

/// One event in the UI shape of the WebSocket contract: `nodeId`,
/// `currentNode`, `nodeStatus` (started|running|ended), `executionType`
/// (agent|tool|task|run: `task` for a workflow's tasks), `toolName`,
/// `plainTextMessage`. Checkpoints and middleware hooks are not shown.
pub(crate) fn ui_event(envelope: &EventEnvelope) -> Option<Value> {
    let node = envelope.node.clone().unwrap_or_else(|| "run".into());
    let node_id = envelope.node_id.clone().unwrap_or_else(|| "run".into());
    let (status, kind, tool, text, extra) =
        ui_run_parts(&envelope.event).or_else(|| ui_harness_parts(&envelope.event))?;
    let mut ui = json!({
        "seq": envelope.seq,
        "ts": envelope.ts,
        "runId": envelope.run_id.to_string(),
        "eventType": envelope.event.kind(),
        "nodeId": node_id,
        "currentNode": node,
        "nodeStatus": status,
        "executionType": kind,
        "toolName": tool,
        "plainTextMessage": text,
    });
    if let (Some(ui), Some(extra)) = (ui.as_object_mut(), extra.as_object()) {
        ui.extend(extra.clone());
    }
    Some(ui)
}

/// The UI parts of a run, node, task or interrupt event.
fn ui_run_parts(event: &Event) -> Option<UiParts<'_>> {
    Some(match event {
        Event::RunStarted { graph, from_step, .. } => {
            ("started", "run", None, format!("{graph} from step {from_step}"), json!({}))
        }
        Event::RunEnded { status, result, error, interrupts, .. } => (
            "ended",
            "run",
            None,
            match error {
                Some(error) => format!("{status}: {}", error.message),
                None => status.to_string(),
            },
            json!({"runStatus": status, "result": result, "error": error, "interrupts": interrupts}),
        ),
        Event::NodeStarted { .. } => ("started", "agent", None, String::new(), json!({})),
        Event::NodeCompleted { .. } => ("ended", "agent", None, String::new(), json!({})),
        Event::NodeFailed { error, .. } => {
            ("ended", "agent", None, error.clone(), json!({"error": error}))
        }
        Event::TaskStarted { name, .. } => {
            ("running", "task", None, format!("task {name}"), json!({"task": name}))
        }
        Event::TaskCompleted { name, .. } => {
            ("running", "task", None, format!("task {name} done"), json!({"task": name}))
        }
        Event::TaskFailed { name, error, .. } => (
            "running",
            "task",
            None,
            format!("task {name} failed: {error}"),
            json!({"task": name, "error": error}),
        ),
        Event::RetryScheduled { error, delay_ms, .. } => {
            ("running", "agent", None, format!("retrying in {delay_ms} ms: {error}"), json!({}))
        }
        Event::InterruptRaised { interrupt, .. } => (
            "running",
            "agent",
            None,
            format!("waiting for a decision: {}", interrupt.kind),
            json!({"interrupt": interrupt}),
        ),
        Event::RunResumed { .. } => ("running", "run", None, "resumed".into(), json!({})),
        _ => return None,
    })
}

/// The text of an agent's message (a `tollgate_nodes::Message` as JSON),
/// its other fields passed over.
#[derive(Deserialize)]
struct Said {
    #[serde(default)]
    content: String,
}

/// The UI parts of a model, tool or custom event (the user's message
/// content read from the model's answer).
fn ui_harness_parts(event: &Event) -> Option<UiParts<'_>> {
    Some(match event {
        Event::ModelStarted { agent, model, call_id, attempt } => (
            "running",
            "agent",
            None,
            format!("calling {model}"),
            json!({"agentId": agent, "callId": call_id, "attempt": attempt}),
        ),
        Event::ModelDelta { agent, text, call_id, attempt } => (
            "running",
            "agent",
            None,
            text.clone(),
            json!({"agentId": agent, "callId": call_id, "attempt": attempt}),
        ),
        Event::ModelCompleted { agent, message, .. } => (
            "running",
            "agent",
            None,
            // The agent's message: its text alone (the rest not decoded).
            Said::deserialize(message).map(|said| said.content).unwrap_or_default(),
            json!({"agentId": agent}),
        ),
        Event::ToolStarted { agent, tool, call_id, .. } => (
            "started",
            "tool",
            Some(tool.as_str()),
            format!("calling {tool}"),
            json!({"agentId": agent, "callId": call_id}),
        ),
        Event::ToolDelta { agent, call_id, line, .. } => {
            ("running", "tool", None, line.clone(), json!({"agentId": agent, "callId": call_id}))
        }
        Event::ToolCompleted { agent, tool, ok, summary, call_id, .. } => (
            "ended",
            "tool",
            Some(tool.as_str()),
            summary.clone(),
            json!({"agentId": agent, "callId": call_id, "ok": ok}),
        ),
        Event::Custom { name, payload } => {
            ("running", "agent", None, name.clone(), json!({"payload": payload}))
        }
        _ => return None,
    })
}

/// What a thread's runs occupy (`GET /threads/{thread}/storage`,
/// `threads storage --json`): `{"thread", "runs", "checkpoint_bytes",
/// "event_bytes", "bytes"}`.
pub fn thread_storage_json(thread: &str, storage: &tollgate_checkpoint::ThreadStorage) -> Value {
    json!({
        "thread": thread,
        "runs": storage.runs,
        "checkpoint_bytes": storage.checkpoint_bytes,
        "event_bytes": storage.event_bytes,
        "bytes": storage.checkpoint_bytes + storage.event_bytes,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tollgate_checkpoint::RunId;
    use tollgate_engine::EventEnvelope;

    #[test]
    fn a_model_s_answer_shows_its_text_alone() {
        let envelope = |message| -> EventEnvelope {
            serde_json::from_value(json!({
                "v": 1, "run_id": RunId::new().to_string(), "seq": 3, "ts": "2026-12-07T00:00:00.000Z",
                "event_type": "model_completed", "agent": "refunds", "call_id": "c1",
                "model": "m", "message": message, "duration_ms": 4,
            }))
            .unwrap()
        };
        let answer = json!({"role": "assistant", "id": "m1", "agent": "refunds", "content": "Done.",
            "tool_calls": [{"id": "t1", "name": "lookup", "args": {"id": 7}}]});
        let ui = super::ui_event(&envelope(answer)).unwrap();
        assert_eq!(
            (ui["plainTextMessage"].as_str(), ui["agentId"].as_str()),
            (Some("Done."), Some("refunds"))
        );
        // Tool calls only, or a message without text: no text, no failure.
        for message in [json!({"role": "assistant", "id": "m2"}), json!({"content": 5})] {
            let ui = super::ui_event(&envelope(message)).unwrap();
            assert_eq!(ui["plainTextMessage"], "");
        }
    }
}
