//! Human-readable output.

use std::fmt::Write as _;

use serde_json::Value;
use tollgate_checkpoint::RunStatus;
use tollgate_engine::{format_rfc3339, Event, EventEnvelope};

use tollgate_server::RunSummary;

/// A summary as text, with what to do next.
pub(crate) fn summary(run: &RunSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "run      {}", run.id);
    let _ = writeln!(out, "graph    {}", run.graph);
    let _ = writeln!(out, "status   {}", run.status);
    let _ = writeln!(out, "step     {}", run.step);
    let _ = writeln!(out, "created  {}", format_rfc3339(run.created_at_ms));
    let _ = writeln!(out, "updated  {}", format_rfc3339(run.updated_at_ms));
    if let Some(wakes) = run.wakes_at_ms.map(format_rfc3339) {
        let _ = writeln!(out, "wakes    {wakes} (a sleeping workflow; a worker takes it then)");
    }
    if let Some(origin) = &run.forked_from {
        let by = origin.by.as_ref().map(|by| format!(" by {by}")).unwrap_or_default();
        let changed = match origin.changed.is_empty() {
            true => String::new(),
            false => format!("; changed: {}", origin.changed.join(", ")),
        };
        let _ = writeln!(out, "forked   from {} at step {}{by}{changed}", origin.run, origin.step);
    }
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
    if let Some(error) = &run.error {
        let _ = writeln!(out, "error    {}", error.message);
        let _ = writeln!(out, "class    {}", error.class);
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
            run.id,
            graph,
            run.status,
            run.step,
            format_rfc3339(run.updated_at_ms)
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

/// At most `limit` characters of `text`, with `…` when cut.
fn abbreviated(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// One event as a line: every kind shows what it carries (long values
/// abbreviated), so a reviewer reading the log sees a rejection and its
/// reason, an update, a custom payload.
pub(crate) fn event(envelope: &EventEnvelope) -> String {
    let node = envelope.node_id.as_deref().unwrap_or("");
    let detail =
        run_detail(&envelope.event).or_else(|| harness_detail(&envelope.event)).unwrap_or_default();
    format!(
        "{:>4} {} {:<18} {:<20} {}",
        envelope.seq,
        envelope.ts,
        envelope.event.kind(),
        node,
        detail
    )
}

/// What a line says of a run, node, task, interrupt or checkpoint event.
fn run_detail(event: &Event) -> Option<String> {
    let json = |value: &serde_json::Value| abbreviated(&value.to_string(), 160);
    Some(match event {
        Event::RunStarted { graph, graph_version, from_step } => {
            format!("{graph} v{graph_version} from step {from_step}")
        }
        Event::RunEnded { status, step, error, interrupts, .. } => match error {
            Some(error) => format!("{status} at step {step} ({}): {}", error.kind, error.message),
            None if !interrupts.is_empty() => {
                let waiting: Vec<&str> = interrupts.iter().map(|i| i.id.as_str()).collect();
                format!("{status} at step {step}, waiting on {}", waiting.join(", "))
            }
            None => format!("{status} at step {step}"),
        },
        Event::NodeStarted { step, task } => format!("step {step}, task {task}"),
        Event::NodeCompleted { update, goto, reused, .. } => {
            let mut text = format!("update {}", json(update));
            if !goto.is_empty() {
                text.push_str(&format!(", goto {}", goto.join(", ")));
            }
            if *reused {
                text.push_str(" (stored before, not run again)");
            }
            text
        }
        Event::TaskStarted { task, name, .. } => format!("task {task} {name}"),
        Event::TaskCompleted { task, name, output, .. } => {
            format!("task {task} {name}: {}", abbreviated(&json(output), 160))
        }
        Event::TaskFailed { task, name, attempt, error, retry_in_ms, .. } => {
            match retry_in_ms {
                Some(delay) => {
                    format!("task {task} {name}: attempt {attempt} failed, retry in {delay} ms: {error}")
                }
                None => format!("task {task} {name}: failed after {attempt} attempt(s): {error}"),
            }
        }
        Event::NodeFailed { attempts, error, .. } => {
            format!("after {attempts} attempt(s): {error}")
        }
        Event::RetryScheduled { attempt, delay_ms, error, .. } => {
            format!("attempt {attempt} failed, retry in {delay_ms} ms: {error}")
        }
        Event::InterruptRaised { interrupt, .. } => {
            let allowed: Vec<&str> = interrupt.decisions.iter().map(|d| d.as_str()).collect();
            format!(
                "{} asks {} {} ({})",
                interrupt.id,
                interrupt.kind,
                json(&interrupt.payload),
                allowed.join("/")
            )
        }
        Event::RunResumed { step, decisions } => {
            let answers: Vec<String> = decisions
                .iter()
                .map(|answered| match &answered.decision {
                    Some(decision) => format!("{}: {}", answered.id, decision_text(decision)),
                    None => format!("{}: undecided", answered.id),
                })
                .collect();
            format!("step {step}; {}", answers.join("; "))
        }
        Event::CheckpointSaved { step, tasks, snapshot } => {
            format!("step {step}, {tasks} task(s){}", if *snapshot { ", snapshot" } else { "" })
        }
        _ => return None,
    })
}

/// What a line says of a model, tool, middleware or other harness event.
fn harness_detail(event: &Event) -> Option<String> {
    let json = |value: &serde_json::Value| abbreviated(&value.to_string(), 160);
    Some(match event {
        Event::ModelStarted { model, attempt, .. } => format!("{model} (attempt {attempt})"),
        Event::ModelDelta { text, attempt, .. } if *attempt > 1 => {
            format!("(attempt {attempt}) {text}")
        }
        Event::ModelDelta { text, .. } => text.clone(),
        Event::ModelCompleted { message, duration_ms, .. } => {
            let content = message["content"].as_str().unwrap_or_default();
            let calls = message["tool_calls"].as_array().map_or(0, Vec::len);
            if calls > 0 {
                format!("{calls} tool call(s) in {duration_ms} ms")
            } else {
                format!("{} ({duration_ms} ms)", abbreviated(content, 160))
            }
        }
        Event::ToolStarted { tool, args, .. } => format!("{tool} {}", json(args)),
        Event::ToolDelta { stream, line, .. } => format!("{stream}: {line}"),
        Event::ToolCompleted { tool, ok, summary, duration_ms, .. } => {
            let outcome = if *ok { "ok" } else { "failed" };
            format!("{tool} {outcome} in {duration_ms} ms: {summary}")
        }
        Event::MiddlewareStarted { middleware, hook, .. } => format!("{middleware} {hook}"),
        Event::MiddlewareCompleted { middleware, hook, ok, .. } => {
            format!("{middleware} {hook} {}", if *ok { "ok" } else { "failed" })
        }
        Event::Custom { name, payload } => format!("{name} {}", json(payload)),
        Event::EventsCapped { cap } => format!("detail events past {cap} are not stored"),
        Event::PackRun { bundle_hash, signature_verified, key_id, cache_hit, .. } => format!(
            "pack {} {}{}",
            bundle_hash.get(..16).unwrap_or(bundle_hash),
            match (signature_verified, key_id) {
                (true, Some(key)) => format!("signed by {key}, verified"),
                (false, Some(key)) => format!("signed by untrusted key {key}, run unverified"),
                _ => "unsigned".to_owned(),
            },
            if *cache_hit { " (cached)" } else { "" }
        ),
        Event::PersonaStage { persona, stage, transition } => {
            format!("{persona} {transition} ({stage})")
        }
        _ => return None,
    })
}

/// A decision as the CLI spells it: `approve`, `edit {…}`, `respond {…}`,
/// `reject: reason`.
fn decision_text(decision: &tollgate_engine::Decision) -> String {
    use tollgate_engine::Decision;
    match decision {
        Decision::Approve => "approve".to_owned(),
        Decision::Edit { value } => format!("edit {}", abbreviated(&value.to_string(), 120)),
        Decision::Respond { value } => format!("respond {}", abbreviated(&value.to_string(), 120)),
        Decision::Reject { reason: Some(reason) } => format!("reject: {reason}"),
        Decision::Reject { reason: None } => "reject".to_owned(),
    }
}

/// A history page as lines: step, time, tasks, snapshot; with `--values`,
/// the next nodes and the state, abbreviated.
pub(crate) fn history(page: &serde_json::Value) -> String {
    let mut out = String::new();
    for checkpoint in page["checkpoints"].as_array().into_iter().flatten() {
        let snapshot = if checkpoint["snapshot"] == true { "  snapshot" } else { "" };
        if let (Some(number), Some(run)) =
            (checkpoint["number"].as_u64(), checkpoint["run"].as_str())
        {
            let _ = write!(out, "#{number:<4} run {run}  ");
        }
        let _ = write!(
            out,
            "step {:>4}  {}  {} task(s){snapshot}",
            checkpoint["step"],
            checkpoint["at"].as_str().unwrap_or(""),
            checkpoint["tasks"]
        );
        match (checkpoint["source"].as_str(), checkpoint["by"].as_str()) {
            (Some(source), Some(by)) => {
                let _ = writeln!(out, "  ({source} by {by})");
            }
            (Some(source), None) => {
                let _ = writeln!(out, "  ({source})");
            }
            (None, _) => out.push('\n'),
        }
        if let Some(next) = checkpoint["next"].as_array() {
            let names: Vec<&str> = next.iter().filter_map(|n| n.as_str()).collect();
            let _ = writeln!(
                out,
                "           next: {}",
                if names.is_empty() { "(end)".to_owned() } else { names.join(", ") }
            );
        }
        if !checkpoint["values"].is_null() {
            let _ = writeln!(
                out,
                "           values: {}",
                abbreviated(&checkpoint["values"].to_string(), 200)
            );
        }
    }
    if page["checkpoints"].as_array().is_none_or(|c| c.is_empty()) {
        out.push_str("(no checkpoints)\n");
    }
    if let Some(before) = page["next_before"].as_u64() {
        let _ = writeln!(out, "more: --before {before}");
    }
    out
}

/// Writes `text` to stdout. A reader that went away (`tollgate runs events
/// RUN | head`) ends the process quietly with exit 0 instead of a panic.
pub(crate) fn emit(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("tollgate: cannot write to stdout: {error}");
    }
}

/// A thread (`threads show`): its latest run, then the conversation (or
/// the state) its next run starts from.
pub(crate) fn thread(shown: &Value) -> String {
    let latest = &shown["latest"];
    let mut out = format!(
        "thread {}: latest run {} ({}, step {})\n",
        shown["thread"].as_str().unwrap_or("?"),
        latest["id"].as_str().unwrap_or("?"),
        latest["status"].as_str().unwrap_or("?"),
        shown["step"],
    );
    match shown["values"]["messages"].as_array() {
        Some(messages) => {
            for message in messages {
                let content = message["content"].as_str().unwrap_or_default();
                let calls = message["tool_calls"].as_array().map_or(0, Vec::len);
                let said = if content.is_empty() && calls > 0 {
                    format!("({calls} tool call(s))")
                } else {
                    content.replace('\n', " ")
                };
                out.push_str(&format!(
                    "  {:<9} {}\n",
                    message["role"].as_str().unwrap_or("?"),
                    abbreviated(&said, 110)
                ));
            }
        }
        None if shown["values"].is_null() => {
            out.push_str("  (not a blueprint run: read its state where its graph is)\n");
        }
        None => out.push_str(&format!("  {}\n", shown["values"])),
    }
    out
}
