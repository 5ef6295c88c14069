//! The JSON a client reads about a run's state: a checkpoint's values,
//! source, next nodes, interrupts and the tasks of the step in flight
//! (with their errors, finished outputs and nested graphs), and the
//! entries of run and thread histories.

use serde::Serialize;
use serde_json::{json, Value};
use tollgate_checkpoint::CheckpointInfo;
use tollgate_engine::{
    format_rfc3339, NestedState, PendingInterrupt, StateSnapshot, TaskState, ThreadHistoryPage,
};

/// `{"id", "step", "source", "by", "forked_from", "status", "values",
/// "next", "interrupts", "pending_writes", "tasks"}` (`by`: who asked for
/// the update or fork that wrote it, or null; `forked_from`: `{"run",
/// "step", "by", "changed"}` of a run forked from another, or null).
pub(crate) fn state<S: Serialize>(state: &StateSnapshot<S>) -> Value {
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
        "values": serde_json::to_value(&state.values).unwrap_or(Value::Null),
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
pub(crate) fn info(info: &CheckpointInfo) -> Value {
    json!({"step": info.step, "at": format_rfc3339(info.at_ms), "tasks": info.tasks,
           "snapshot": info.snapshot})
}

/// A run-history entry with its state: the checkpoint's place, its
/// `source`, `by`, `forked_from`, `values` and `next`.
pub(crate) fn history_entry<S: Serialize>(at: &CheckpointInfo, state: &StateSnapshot<S>) -> Value {
    let mut entry = info(at);
    entry["source"] = json!(state.source);
    entry["by"] = json!(state.by);
    entry["forked_from"] = json!(state.forked_from);
    entry["values"] = serde_json::to_value(&state.values).unwrap_or(Value::Null);
    entry["next"] = json!(state.next);
    entry
}

/// A page of a thread's history: `{"thread", "total", "checkpoints":
/// [{"number", "run", "step", "at", "tasks", "snapshot", "source", "by",
/// "values", "next"}], "next_before"}`.
pub(crate) fn thread_history<S: Serialize>(thread: &str, page: &ThreadHistoryPage<S>) -> Value {
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
