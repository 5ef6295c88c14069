//! Ownership at the door: a named caller's scope (the server's
//! [`Policy`](crate::Policy)) applied to every request before its handler
//! runs. A caller who reaches everything goes on unchecked. For one who
//! does not (a `user`, or a role a policy file narrows):
//!
//! - a path that names a thread or a run (`/threads/{id}/…`, the native
//!   `/runs/{id}/…`) goes on when that thread (the run's thread) is in
//!   their scope, or no such thread exists yet (theirs to create); else
//!   the same 404 an unknown id gets, so that nobody learns what others
//!   have;
//! - listings, searches and creations (`GET`/`POST /runs`, the
//!   LangGraph API's thread create, search, count and prune and its
//!   stateless runs) go on with the [`Caller`] beside the request: their
//!   handlers filter by it and stamp what they make with it;
//! - what carries no user's data (`/me`, graphs, assistants, the change
//!   feed, which says that some run changed and never which) goes on;
//! - the rest (schedules, crons, `/metrics`, the store,
//!   runs cancelled in bulk, assistants changed) is refused with 403: it
//!   is the server's, not theirs.

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::errors::ApiError;
use super::App;
use crate::error::ServiceError;
use crate::identity::{Caller, Principal};
use crate::service::{self, InScope};

/// What a request reaches, as its path says.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// Nobody's data.
    Open,
    /// A thread (its runs, state, history) by id, as the path spells it.
    Thread(String),
    /// A run by id (native API).
    Run(String),
    /// A listing, search or creation its handler scopes.
    Scoped,
    /// The server's, not a user's.
    Closed,
}

/// Lets the request on as `principal`, within the scope the policy gives
/// them (see the module's documentation).
pub(super) async fn admit(
    app: &App,
    principal: Principal,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = Caller::of(principal, app.settings.policy.as_ref());
    let scope = caller.scope().clone();
    let lg = app.settings.langgraph.as_deref().and_then(|prefix| {
        request.uri().path().strip_prefix(prefix).filter(|rest| rest.starts_with('/'))
    });
    let target = match (caller.is_restricted(), lg) {
        (false, _) => Target::Open,
        (true, Some(rest)) => langgraph_target(request.method(), rest),
        (true, None) => native_target(request.uri().path()),
    };
    let who = caller.principal().map(|who| (who.name.clone(), who.role.as_str()));
    if let Some(principal) = caller.principal() {
        request.extensions_mut().insert(principal.clone());
    }
    request.extensions_mut().insert(caller);
    let missing: Option<ApiError> = match target {
        Target::Open | Target::Scoped => None,
        Target::Closed => {
            let (name, role) = who.unwrap_or_default();
            let message = format!(
                "`{name}` (role {role}) reaches their own threads and runs only: this endpoint is the server's"
            );
            return ApiError::new(StatusCode::FORBIDDEN, "forbidden", message).into_response();
        }
        Target::Thread(thread) => match app.runs.thread_in_scope(&scope, &thread).await {
            Ok(InScope::Yes | InScope::Unused) => None,
            Ok(InScope::No) => Some(service::thread_not_found(&thread).into()),
            Err(error) => Some(error.into()),
        },
        Target::Run(text) => match text.parse() {
            // Not a run id: the handler refuses it as it would anyone's.
            Err(_) => None,
            Ok(run) => match app.runs.run_in_scope(&scope, run).await {
                Ok(true) => None,
                Ok(false) => Some(ServiceError::not_found(run).into()),
                Err(error) => Some(error.into()),
            },
        },
    };
    match missing {
        Some(error) => error.into_response(),
        None => next.run(request).await,
    }
}

/// The path's segments, each percent-decoded as the router decodes its
/// parameters (a segment that is not UTF-8 once decoded kept as sent).
fn segments(path: &str) -> Vec<String> {
    path.trim_start_matches('/')
        .split('/')
        .map(|segment| {
            percent_encoding::percent_decode_str(segment)
                .decode_utf8()
                .map_or_else(|_| segment.to_owned(), |decoded| decoded.into_owned())
        })
        .collect()
}

/// What a native API path reaches.
fn native_target(path: &str) -> Target {
    let segments = segments(path);
    let parts: Vec<&str> = segments.iter().map(String::as_str).collect();
    match parts.as_slice() {
        // `/changes` says only that some run changed, never which.
        [""] | ["me"] | ["healthz"] | ["changes"] | ["graphs", ..] | ["ui", ..] => Target::Open,
        ["runs"] => Target::Scoped,
        ["runs", run, ..] => Target::Run((*run).to_owned()),
        ["threads", thread, ..] => Target::Thread((*thread).to_owned()),
        _ => Target::Closed,
    }
}

/// What a LangGraph API path (below its prefix) reaches.
fn langgraph_target(method: &Method, path: &str) -> Target {
    let segments = segments(path);
    let parts: Vec<&str> = segments.iter().map(String::as_str).collect();
    let reads = method == Method::GET || method == Method::HEAD;
    match parts.as_slice() {
        ["ok"] | ["info"] => Target::Open,
        ["assistants", "search" | "count"] => Target::Open,
        ["assistants", ..] if reads => Target::Open,
        ["threads"] | ["threads", "search" | "count" | "prune"] => Target::Scoped,
        ["threads", _, "runs", "crons", ..] => Target::Closed,
        ["threads", thread, ..] => Target::Thread((*thread).to_owned()),
        ["runs"] | ["runs", "wait" | "stream" | "batch"] => Target::Scoped,
        _ => Target::Closed,
    }
}

#[cfg(test)]
mod tests {
    use super::{langgraph_target, native_target, Target};
    use axum::http::Method;

    #[test]
    fn paths_name_what_they_reach_decoded_as_the_router_decodes_them() {
        let thread = |id: &str| Target::Thread(id.to_owned());
        assert_eq!(native_target("/threads/a%20b/history"), thread("a b"));
        assert_eq!(native_target("/runs/01J/events"), Target::Run("01J".into()));
        assert_eq!(native_target("/runs"), Target::Scoped);
        assert_eq!(native_target("/me"), Target::Open);
        assert_eq!(native_target("/changes"), Target::Open);
        for closed in ["/schedules", "/schedules/x", "/metrics", "/store/items"] {
            assert_eq!(native_target(closed), Target::Closed, "{closed}");
        }
        let post = &Method::POST;
        assert_eq!(langgraph_target(post, "/threads/t%2Fx/runs/wait"), thread("t/x"));
        assert_eq!(langgraph_target(post, "/threads/search"), Target::Scoped);
        assert_eq!(langgraph_target(post, "/runs/stream"), Target::Scoped);
        assert_eq!(langgraph_target(post, "/assistants/search"), Target::Open);
        assert_eq!(langgraph_target(&Method::GET, "/assistants/a/graph"), Target::Open);
        for closed in ["/assistants", "/runs/cancel", "/runs/crons", "/threads/t/runs/crons"] {
            assert_eq!(langgraph_target(post, closed), Target::Closed, "{closed}");
        }
        assert_eq!(langgraph_target(&Method::PUT, "/store/items"), Target::Closed);
    }
}
