//! The native API's JSON (docs/openapi.yaml) of what the service
//! returns about a run's state: a checkpoint's values, source, next
//! nodes, interrupts and the tasks of the step in flight (with their
//! errors, finished outputs and nested graphs), run and thread histories,
//! and a thread. The CLI's `--json` prints the same.

use serde_json::{json, Value};
use tollgate_checkpoint::{CheckpointInfo, ScheduleRecord, ScheduleTiming};
use tollgate_engine::{
    format_rfc3339, NestedState, PendingInterrupt, StatePage, StateSnapshot, TaskState,
    ThreadHistoryPage,
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
fn interrupt(interrupt: &PendingInterrupt) -> Value {
    let mut shown = json!({"id": interrupt.id, "node": interrupt.node, "kind": interrupt.kind,
        "payload": interrupt.payload, "decisions": interrupt.decisions, "schema": interrupt.schema});
    if let Some(decision) = &interrupt.decision {
        shown["decision"] = json!(decision);
    }
    shown
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
fn info(info: &CheckpointInfo) -> Value {
    json!({"step": info.step, "at": format_rfc3339(info.at_ms), "tasks": info.tasks,
           "snapshot": info.snapshot})
}

/// A run-history entry with its state: the checkpoint's place, its
/// `source`, `by`, `forked_from`, `values` and `next`.
fn history_entry(at: &CheckpointInfo, state: &StateSnapshot<Value>) -> Value {
    let mut entry = info(at);
    entry["source"] = json!(state.source);
    entry["by"] = json!(state.by);
    entry["forked_from"] = json!(state.forked_from);
    entry["values"] = state.values.clone();
    entry["next"] = json!(state.next);
    entry
}

/// A page of a thread's history: `{"thread", "total", "checkpoints":
/// [{"number", "run", "step", "at", "tasks", "snapshot", "source", "by",
/// "values", "next"}], "next_before"}`.
pub fn thread_history_json(thread: &str, page: &ThreadHistoryPage<Value>) -> Value {
    let checkpoints: Vec<Value> = page
        .checkpoints
        .iter()
        .map(|entry| {
            let mut shown = history_entry(&entry.info, &entry.state);
            shown["number"] = json!(entry.number);
            shown["run"] = json!(entry.state.run.to_string());
            shown
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
    let checkpoints: Vec<Value> =
        page.checkpoints.iter().map(|(at, state)| history_entry(at, state)).collect();
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
