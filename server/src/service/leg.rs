//! Waiting for a leg this process drives: Ctrl-C stops it, and its end
//! becomes a command's result.

use tokio::sync::broadcast;
use tollgate_checkpoint::{RunId, RunStatus};
use tollgate_engine::{Executor, RunError};

use super::Leg;

use crate::error::ServiceError;

/// Waits for a leg of `executor`. A first Ctrl-C stops it at the next
/// step boundary (the step in flight finishes and is committed); a second
/// stops it at once: the run is cancelled as `runs cancel` does, and the
/// leg drops the step in flight (a command tool's process is killed).
/// Either way the run is `interrupted` and can be continued. A failed run
/// is reported by its summary, not as an error. With `changes` (a store's
/// changed runs: Postgres), a change of the run has the leg renew its
/// lease at once, so that a cancel from another process stops it at once.
pub(super) async fn wait(
    executor: &Executor,
    handle: Leg,
    changes: Option<broadcast::Receiver<Option<RunId>>>,
) -> Result<(), ServiceError> {
    let (cancel, run, executor) = (handle.cancel_token(), handle.run_id(), executor.clone());
    let renewer = changes.map(|mut changes| {
        let token = cancel.clone();
        tokio::spawn(async move {
            loop {
                match changes.recv().await {
                    Ok(Some(changed)) if changed != run => {}
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => token.renew_now(),
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        })
    });
    let watcher = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        eprintln!("interrupting at the next step boundary (Ctrl-C again to stop now)...");
        cancel.cancel();
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        eprintln!("stopping now: the step in flight is dropped...");
        if let Err(error) = executor.cancel_run(run).await {
            eprintln!("the run could not be cancelled: {error}");
        }
        // Has the leg renew its lease at once, be refused, and stop.
        cancel.cancel();
    });
    let result = handle.wait().await;
    watcher.abort();
    if let Some(renewer) = renewer {
        renewer.abort();
    }
    leg_result(result)
}

/// A leg's end as a command's result: a run that failed is reported by its
/// summary, not as an error; the store failing, or a conflict, is one.
pub(crate) fn leg_result(result: Result<RunStatus, RunError>) -> Result<(), ServiceError> {
    match result {
        Ok(_) => Ok(()),
        Err(tollgate_engine::RunError::NodeFailed { .. })
        | Err(tollgate_engine::RunError::NodePanicked { .. })
        | Err(tollgate_engine::RunError::StepLimitExceeded { .. })
        | Err(tollgate_engine::RunError::VisitLimitExceeded { .. })
        | Err(tollgate_engine::RunError::InvalidUpdate { .. })
        | Err(tollgate_engine::RunError::UndeclaredTarget { .. })
        | Err(tollgate_engine::RunError::RouteFailed { .. })
        | Err(tollgate_engine::RunError::Cancelled { .. }) => Ok(()),
        Err(other) => Err(other.into()),
    }
}
