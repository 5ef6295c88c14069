//! Ownership at the door: a named caller's scope (the server's
//! [`Policy`](crate::Policy)) applied to every request before its handler
//! runs. A caller who reaches everything goes on unchecked. For one who
//! does not (a `user`, or a role a policy file narrows):
//!
//! - a path that names a thread or a run (`/threads/{id}/…`, the native
//!   `/runs/{id}/…`) goes on when that thread (the run's thread) is held
//!   in their scope, or no such thread exists yet (theirs to create); a
//!   thread waiting for a decision one of their groups reviews is theirs
//!   to see and decide only (other requests: 403); else the same 404 an
//!   unknown id gets, so that nobody learns what others have;
//! - listings, searches and creations (`GET`/`POST /runs`, the
//!   LangGraph API's thread create, search, count and prune and its
//!   stateless runs) and the store (on both APIs) go on with the
//!   [`Caller`] beside the request: their handlers filter by it, stamp
//!   what they make with it, and keep the store's namespaces to the
//!   caller's shelf;
//! - what carries no user's data (`/me`, graphs, assistants, the change
//!   feed, which says that some run changed and never which) goes on;
//! - the rest (schedules, crons, `/metrics`,
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
    let mut caller = Caller::of(principal, app.settings.policy.as_ref());
    let lg = app.settings.langgraph.as_deref().and_then(|prefix| {
        request.uri().path().strip_prefix(prefix).filter(|rest| rest.starts_with('/'))
    });
    let (target, action) = match (caller.is_restricted(), lg) {
        (false, _) => (Target::Open, Action::Change),
        (true, Some(rest)) => {
            (langgraph_target(request.method(), rest), langgraph_action(request.method(), rest))
        }
        (true, None) => {
            let path = request.uri().path();
            (native_target(path), native_action(request.method(), path))
        }
    };
    let refused = match reach(app, &caller, &target).await {
        Ok(InScope::Yes | InScope::Unused) => None,
        Ok(InScope::Reviewing) if action != Action::Change => {
            if action == Action::DecideOnly {
                caller = caller.deciding_only();
            }
            None
        }
        Ok(InScope::Reviewing) => Some(reviewer_only(&caller, &target)),
        Ok(InScope::No) => Some(match &target {
            Target::Run(text) => match text.parse() {
                Ok(run) => ServiceError::not_found(run).into(),
                Err(_) => service::thread_not_found(text).into(),
            },
            Target::Thread(thread) => service::thread_not_found(thread).into(),
            _ => server_only(&caller),
        }),
        Err(error) => Some(error.into()),
    };
    if let Some(refused) = refused {
        return refused.into_response();
    }
    if let Some(principal) = caller.principal() {
        request.extensions_mut().insert(principal.clone());
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// What a request asks of the thread or run it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// To see it (a `GET`, a history asked with `POST`).
    Read,
    /// To decide what it waits for (native `resume`, `reject`).
    Decide,
    /// A new run on it, which its handler lets a reviewer make only as a
    /// decision (LangGraph's `Command(resume=…)`).
    DecideOnly,
    /// Anything else.
    Change,
}

/// Whether `caller` reaches `target`.
async fn reach(app: &App, caller: &Caller, target: &Target) -> Result<InScope, ServiceError> {
    Ok(match target {
        Target::Open | Target::Scoped => InScope::Yes,
        Target::Closed => InScope::No,
        Target::Thread(thread) => app.runs.thread_in_scope(caller.scope(), thread).await?,
        // Not a run id: the handler refuses it as it would anyone's.
        Target::Run(text) => match text.parse() {
            Err(_) => InScope::Yes,
            Ok(run) => app.runs.run_in_scope(caller.scope(), run).await?,
        },
    })
}

/// The 403 of the server's own endpoints.
fn server_only(caller: &Caller) -> ApiError {
    let (name, role) =
        caller.principal().map(|who| (who.name.as_str(), who.role.as_str())).unwrap_or_default();
    let message = format!(
        "`{name}` (role {role}) reaches their own threads and runs only: this endpoint is the server's"
    );
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
}

/// The 403 of a reviewer asking a thread they review for more.
fn reviewer_only(caller: &Caller, target: &Target) -> ApiError {
    let thread = match target {
        Target::Thread(thread) | Target::Run(thread) => thread.clone(),
        _ => String::new(),
    };
    ServiceError::ReviewOnly { who: caller.name().unwrap_or_default().to_owned(), thread }.into()
}

/// What a native API request asks of what it names.
fn native_action(method: &Method, path: &str) -> Action {
    if method == Method::GET || method == Method::HEAD {
        return Action::Read;
    }
    let segments = segments(path);
    match segments.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["runs", _, "resume" | "reject"] if method == Method::POST => Action::Decide,
        _ => Action::Change,
    }
}

/// What a LangGraph API request (below its prefix) asks of what it names.
fn langgraph_action(method: &Method, path: &str) -> Action {
    if method == Method::GET || method == Method::HEAD {
        return Action::Read;
    }
    let segments = segments(path);
    match segments.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["threads", _, "history"] if method == Method::POST => Action::Read,
        ["threads", _, "runs"] | ["threads", _, "runs", "wait" | "stream"]
            if method == Method::POST =>
        {
            Action::DecideOnly
        }
        _ => Action::Change,
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
        ["runs"] | ["store", ..] => Target::Scoped,
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
        ["runs"] | ["runs", "wait" | "stream" | "batch"] | ["store", ..] => Target::Scoped,
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
        assert_eq!(native_target("/store/items"), Target::Scoped);
        for closed in ["/schedules", "/schedules/x", "/metrics"] {
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
        assert_eq!(langgraph_target(&Method::PUT, "/store/items"), Target::Scoped);
    }
}
