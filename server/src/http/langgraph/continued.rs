//! A run on a thread that goes on from where it is, as LangGraph's run
//! requests ask: from a checkpoint (time travel), after a command
//! (`Command(update=…, goto=…)`), or with a decision
//! (`Command(resume=…)`).

use serde_json::{json, Value};
use tollgate_checkpoint::{RunId, RunStatus};
use tollgate_engine::{Decision, DecisionRequest};

use super::super::errors::{ApiError, ApiResult};
use super::super::App;
use super::assistants::Assistant;
use super::body::{CommandBody, RunBody};
use super::outcome::last_seq;
use super::resume::answers;
use super::wire;
use crate::error::ServiceError;
use crate::service::{Decided, Leg, ListingKind, RunSummary, StateWrite};

/// A run started (or continued) for a request.
pub(super) struct Started {
    pub(super) run: RunId,
    pub(super) assistant: String,
    /// The events before this start: a stream of it begins after them.
    pub(super) after_seq: u64,
    /// Its leg, when this process drives it.
    pub(super) leg: Option<Leg>,
}

/// A run on `thread` from one of its checkpoints (`RUN-STEP`): with
/// input, a new run whose input is written at that checkpoint, starting
/// again from the graph's entry; without, a new run going on from there
/// with what was to run next (time travel; the runs after that
/// checkpoint stay in the thread's history). A thread busy with a run is
/// refused as with `reject`.
pub(super) async fn checkpoint_run(
    app: &App,
    assistant: Assistant,
    thread: Option<&str>,
    latest: Option<RunSummary>,
    checkpoint: &str,
    body: &RunBody,
) -> ApiResult<Started> {
    let Some(thread) = thread else {
        return Err(ServiceError::invalid(
            "a checkpoint to start from belongs to a thread: give one",
        )
        .into());
    };
    let unknown = || -> ApiError {
        ServiceError::missing(format!("thread `{thread}` has no checkpoint `{checkpoint}`")).into()
    };
    let (run, step) = wire::parse_checkpoint_id(checkpoint).ok_or_else(unknown)?;
    let source = app.runs.summary(run).await.map_err(|_| unknown())?;
    if source.thread.as_deref() != Some(thread) || step > source.step {
        return Err(unknown());
    }
    if let Some(busy) = latest.filter(|latest| latest.in_flight()) {
        return Err(ServiceError::conflict(format!(
            "thread `{thread}` is busy: run {} is {} (multitask strategy `reject`)",
            busy.id, busy.status
        ))
        .into());
    }
    let into = RunId::new();
    let input = match body.input.clone().filter(|input| !input.is_null()) {
        Some(input) if assistant.kind == ListingKind::Blueprint => {
            let Some(text) = wire::user_text(&input) else {
                return Err(ServiceError::invalid(
                    "a blueprint agent's input is `{\"messages\": [...]}` with a user message",
                )
                .into());
            };
            let message = json!({"id": format!("{into}.input"), "role": "user", "content": text});
            Some(json!({"messages": [{"upsert": message}]}))
        }
        other => other,
    };
    let sink = Some(app.hub.sink(into));
    let leg = app.runs.start_at(run, step, input, thread, into, sink).await?;
    Ok(Started { run: into, assistant: assistant.name, after_seq: 0, leg: Some(leg) })
}

/// `Command(update=…, goto=…)`: the thread's stopped or paused run gets
/// the update (as `update_state` writes it, or as `__start__` with
/// `goto`) and, with `goto`, goes to those nodes next; then it goes on.
/// A thread with no such run (none, a finished one, one in flight) is a
/// conflict: start a run with input.
pub(super) async fn command_run(
    app: &App,
    assistant: Assistant,
    thread: Option<&str>,
    latest: Option<RunSummary>,
    command: &CommandBody,
    by: Option<&str>,
) -> ApiResult<Started> {
    let stopped = latest.filter(|latest| {
        matches!(
            latest.status,
            RunStatus::AwaitingHitl | RunStatus::Interrupted | RunStatus::Failed
        )
    });
    let Some(latest) = stopped else {
        return Err(ServiceError::conflict(format!(
                "`Command(update=…)` and `Command(goto=…)` go to a thread whose latest run is paused, interrupted or failed; thread `{}` has none (start a run with input)",
                thread.unwrap_or("")
            ))
        .into());
    };
    let run = latest.id;
    let update = command.state_update()?;
    let nodes = command.nodes()?;
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let write = match (command.moves(), update) {
        (true, update) => StateWrite::Goto { update, nodes: &nodes },
        (false, Some(update)) => StateWrite::Update { update, as_node: None },
        (false, None) => {
            let after_seq = last_seq(app, run).await?;
            let leg = app.runs.continue_leg(run, Some(app.hub.sink(run))).await?;
            return Ok(Started { run, assistant: assistant.name, after_seq, leg: Some(leg) });
        }
    };
    // Written and continued under one claim: the thread is never seen
    // idle with its run `interrupted` in between. The stream shows what
    // follows the write.
    let sink = Some(app.hub.sink(run));
    let continuing = app.runs.write_and_continue(run, write, by, sink).await?;
    let (after_seq, leg) = (continuing.last_seq, Some(continuing.leg));
    Ok(Started { run, assistant: assistant.name, after_seq, leg })
}

/// `Command(resume=…)`: the thread's paused run decided and continued.
pub(super) async fn resume_run(
    app: &App,
    assistant: Assistant,
    latest: RunSummary,
    resume: &Value,
    by: Option<&str>,
) -> ApiResult<Started> {
    if latest.status != RunStatus::AwaitingHitl {
        return Err(ServiceError::conflict(format!(
            "run {} is {}: there is no interrupt to resume",
            latest.id, latest.status
        ))
        .into());
    }
    decided(app, assistant, latest.id, answers(&latest.interrupts, resume)?, by).await
}

/// Records `answers` on paused run `run` and continues it when they were
/// the last it waited for (its leg, driven here when this process has
/// its graph).
pub(super) async fn decided(
    app: &App,
    assistant: Assistant,
    run: RunId,
    answers: Vec<(String, Decision)>,
    by: Option<&str>,
) -> ApiResult<Started> {
    let mut request = DecisionRequest::all(answers)
        .ok_or_else(|| ApiError::from(ServiceError::invalid("`resume` answers no interrupt")))?;
    if let Some(by) = by {
        request = request.by(by);
    }
    let after_seq = last_seq(app, run).await?;
    let leg = match app.runs.decide(run, request, Some(app.hub.sink(run))).await? {
        Decided::Continuing(leg) => Some(leg),
        Decided::Settled | Decided::Recorded => None,
    };
    Ok(Started { run, assistant: assistant.name, after_seq, leg })
}
