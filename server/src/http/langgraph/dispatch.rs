//! The LangGraph API's part in the service's deferred work
//! (`service/outbox.rs`): starting a pending run as if its request were
//! made now, and the body of a webhook (the run's `Run`, with its
//! values). The service's dispatcher decides when.

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use axum::http::StatusCode;
use serde_json::Value;
use tollgate_checkpoint::RunId;

use super::super::App;
use super::{assistants, outcome, queue, runs};
use crate::error::ServiceError;
use crate::service::{self, OutboxWork, Pending, Retry, StartRefused};

/// The LangGraph API's work, for the dispatcher.
struct LangGraphWork {
    app: App,
}

#[async_trait]
impl OutboxWork for LangGraphWork {
    fn alive(&self) -> bool {
        // The dispatcher's own clone is the last: no router or `Api` of
        // this app is left.
        Arc::strong_count(&self.app.settings) > 1
    }

    fn own_addrs(&self) -> Vec<SocketAddr> {
        self.app.settings.own_addrs()
    }

    async fn can_start(&self, pending: &Pending) -> bool {
        assistants::to_run(&self.app, &pending.run.assistant).await.is_ok()
    }

    async fn start(&self, pending: &Pending, run: RunId) -> Result<(), StartRefused> {
        let app = &self.app;
        let thread = pending.entry.thread.as_deref();
        let started = match queue::request(pending) {
            Ok(mut request) => {
                request.shelf.clone_from(&pending.run.memory_shelf);
                runs::start_pending(app, thread, &request, run).await
            }
            Err(error) => Err(error),
        };
        match started {
            Ok(started) => {
                if let Some(leg) = started.leg {
                    app.legs.drive(leg);
                }
                Ok(())
            }
            Err(error) => {
                let retry = match error.status {
                    StatusCode::CONFLICT => Retry::Conflict,
                    StatusCode::SERVICE_UNAVAILABLE => Retry::Unavailable,
                    _ => Retry::Never,
                };
                let why = queue::failure(&error);
                Err(StartRefused { retry, message: error.message, why })
            }
        }
    }

    async fn outcome(&self, run: RunId, assistant: &str) -> Result<Value, ServiceError> {
        outcome::settled_run(&self.app, run, assistant).await
    }
}

/// Starts the service's dispatcher for `app`'s LangGraph API, on the
/// current runtime (none: not at all); it ends once no router or
/// [`Api`](crate::Api) of `app` is left.
pub(crate) fn spawn(app: App) {
    let (runs, admission) = (app.runs.clone(), Arc::clone(&app.settings.admission));
    let woken = Arc::clone(&app.outbox);
    service::spawn_dispatcher(runs, admission, Arc::new(LangGraphWork { app }), woken);
}
