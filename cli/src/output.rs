//! Human-readable output.

use std::fmt::Write as _;

use tollgate_checkpoint::RunStatus;
use tollgate_engine::{Event, EventEnvelope};

use crate::service::RunSummary;

/// A summary as text, with what to do next.
pub(crate) fn summary(run: &RunSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "run      {}", run.id);
    let _ = writeln!(out, "graph    {}", run.graph);
    let _ = writeln!(out, "status   {}", run.status);
    let _ = writeln!(out, "step     {}", run.step);
    let _ = writeln!(out, "created  {}", run.created_at);
    let _ = writeln!(out, "updated  {}", run.updated_at);
    for interrupt in &run.interrupts {
        let _ = writeln!(
            out,
            "waits on {} ({}) at {}: {}",
            interrupt.id, interrupt.kind, interrupt.node, interrupt.payload
        );
        let _ = writeln!(
            out,
            "         decide with: tollgate runs resume {} --interrupt {} --approve",
            run.id, interrupt.id
        );
        let _ = writeln!(
            out,
            "                  or: tollgate runs reject {} --interrupt {} --reason TEXT",
            run.id, interrupt.id
        );
    }
    if let Some(message) = run.error["message"].as_str() {
        let _ = writeln!(out, "error    {message}");
        if let Some(class) = run.error["class"].as_str() {
            let _ = writeln!(out, "class    {class}");
        }
    }
    match (run.status, run.final_text()) {
        (RunStatus::Completed, Some(text)) => {
            let _ = writeln!(out, "answer   {text}");
        }
        (RunStatus::Interrupted, _) | (RunStatus::Failed, _) => {
            let _ =
                writeln!(out, "continue with: tollgate runs continue {} (blueprint runs)", run.id);
        }
        _ => {}
    }
    out
}

/// Runs as a table.
pub(crate) fn table(runs: &[RunSummary], next: Option<&str>) -> String {
    let mut out =
        format!("{:<26}  {:<20}  {:<13}  {:>5}  {}\n", "ID", "GRAPH", "STATUS", "STEP", "UPDATED");
    for run in runs {
        let graph: String = run.graph.chars().take(20).collect();
        let _ = writeln!(
            out,
            "{:<26}  {:<20}  {:<13}  {:>5}  {}",
            run.id, graph, run.status, run.step, run.updated_at
        );
    }
    if runs.is_empty() {
        out.push_str("(no runs)\n");
    }
    if let Some(cursor) = next {
        let _ = writeln!(out, "more: --cursor {cursor}");
    }
    out
}

/// One event as a line.
pub(crate) fn event(envelope: &EventEnvelope) -> String {
    let node = envelope.node_id.as_deref().unwrap_or("");
    let detail = match &envelope.event {
        Event::RunStarted { graph, from_step, .. } => format!("{graph} from step {from_step}"),
        Event::RunEnded { status, error, .. } => match error {
            Some(error) => format!("{status}: {}", error.message),
            None => status.to_string(),
        },
        Event::ModelStarted { model, attempt, .. } => format!("{model} (attempt {attempt})"),
        Event::ModelCompleted { message, .. } => {
            let content = message["content"].as_str().unwrap_or_default();
            let calls = message["tool_calls"].as_array().map_or(0, Vec::len);
            if calls > 0 {
                format!("{calls} tool call(s)")
            } else {
                content.to_owned()
            }
        }
        Event::ModelDelta { text, .. } => text.clone(),
        Event::ToolStarted { tool, args, .. } => format!("{tool} {args}"),
        Event::ToolDelta { stream, line, .. } => format!("{stream}: {line}"),
        Event::ToolCompleted { tool, ok, summary, .. } => {
            format!("{tool} {} {summary}", if *ok { "ok" } else { "failed" })
        }
        Event::InterruptRaised { interrupt, .. } => {
            format!("{} {}", interrupt.kind, interrupt.payload)
        }
        Event::NodeFailed { error, .. } => error.clone(),
        Event::RetryScheduled { delay_ms, error, .. } => format!("in {delay_ms} ms: {error}"),
        Event::CheckpointSaved { step, .. } => format!("step {step}"),
        _ => String::new(),
    };
    format!(
        "{:>4} {} {:<18} {:<20} {}",
        envelope.seq,
        envelope.ts,
        envelope.event.kind(),
        node,
        detail
    )
}
