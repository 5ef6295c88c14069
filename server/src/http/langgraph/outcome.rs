//! What a run came to, as LangGraph's clients read it: its values at
//! the last checkpoint (`runs.wait`, `runs.join`), and its `Run` with them
//! (a webhook's body).

use serde_json::{json, Value};
use tollgate_checkpoint::{RunId, RunStatus};

use super::super::App;
use super::wire;
use crate::error::ServiceError;

/// The run's last event: a stream of what it does next starts after it.
pub(super) async fn last_seq(app: &App, run: RunId) -> Result<u64, ServiceError> {
    Ok(app.runs.record(run).await?.last_seq)
}

/// The run's outcome as `runs.wait` returns it: the values at its last
/// checkpoint, with `__interrupt__` when it waits and `__error__` when it
/// failed (keys LangGraph adds to the user's state, which is JSON of the
/// user's shape, so they are set by key).
pub(super) async fn outcome(app: &App, run: RunId) -> Result<Value, ServiceError> {
    let summary = app.runs.summary(run).await?;
    let mut values = match app.runs.state(run, None).await {
        Ok(state) => wire::values(&state.values),
        Err(_) => summary.result.clone(),
    };
    if !summary.interrupts.is_empty() {
        let interrupts: Vec<Value> = summary.interrupts.iter().map(wire::interrupt).collect();
        values["__interrupt__"] = json!(interrupts);
    }
    if matches!(summary.status, RunStatus::Failed | RunStatus::Rejected) {
        let error = summary.error.as_ref();
        let (class, message) = (error.map(|e| &e.class), error.map(|e| &e.message));
        values["__error__"] = json!({"error": class, "message": message});
    }
    Ok(values)
}

/// A settled run as a webhook posts it: its `Run`, with `values` as
/// `runs.wait` returns them.
pub(super) async fn settled_run(
    app: &App,
    run: RunId,
    assistant: &str,
) -> Result<Value, ServiceError> {
    let mut body = run_json(app, run, assistant).await?;
    body["values"] = outcome(app, run).await?;
    Ok(body)
}

pub(super) async fn run_json(
    app: &App,
    run: RunId,
    assistant: &str,
) -> Result<Value, ServiceError> {
    Ok(wire::run(&app.runs.summary(run).await?, assistant))
}
