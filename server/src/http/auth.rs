//! Who may call the API: the built-in bearer token (the default), no
//! check here when the embedding service's own middleware decides, or a
//! check the service supplies ([`Authenticate`]). `/healthz`, the review
//! page's own files and CORS preflights are always let through.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::errors::ApiError;
use super::{page, App};

/// The prefix of the WebSocket subprotocol that carries the token.
const TOKEN_PROTOCOL: &str = "tollgate.token.";

/// How the API authenticates requests.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Auth {
    /// The bearer token of [`ServeOptions::token`](crate::ServeOptions):
    /// `Authorization: Bearer TOKEN`, or for a browser's WebSocket the
    /// subprotocol `tollgate.token.HEX`. No token: no check.
    #[default]
    Token,
    /// No check here: the service that nests the router checks callers
    /// with its own middleware (a tower layer around the router).
    External,
    /// This check, on every request but `/healthz`, the page's files and
    /// CORS preflights.
    Custom(Arc<dyn Authenticate>),
}

/// A check a service supplies: maps a request's headers to who is calling,
/// or refuses it.
pub trait Authenticate: Send + Sync + std::fmt::Debug + 'static {
    /// Who is calling (a name), or why not (answered 401 with the JSON
    /// error shape).
    fn authenticate(&self, headers: &HeaderMap) -> Result<String, Refusal>;
}

/// Why [`Authenticate`] refused a request: said in the 401's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What the caller should know (never a secret).
    pub message: String,
}

impl Refusal {
    /// A refusal saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }
}

/// The check the router runs, as configured.
#[derive(Debug)]
pub(crate) enum Check {
    /// Nothing to check (no token, or the service checks).
    Open,
    /// The bearer token.
    Token(String),
    /// The service's check.
    Custom(Arc<dyn Authenticate>),
}

/// Lets a request through when nothing is to be checked, when it asks for
/// `/healthz` or one of the page's files, or is a CORS preflight (browsers
/// send those without credentials), or when it passes the check: the
/// token as `Authorization: Bearer TOKEN` (the scheme in any case) or, for
/// a WebSocket (where browsers cannot set headers), the subprotocol
/// `tollgate.token.HEX` with the token's bytes in hex; or the service's
/// own check. Answers 401 otherwise.
pub(crate) async fn check(State(app): State<App>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let exempt = path == "/healthz" || page::is_page(path) || request.method() == Method::OPTIONS;
    match &app.settings.auth {
        Check::Open => next.run(request).await,
        _ if exempt => next.run(request).await,
        Check::Token(token) => match given_token(request.headers()) {
            Some(given) if same(&given, token.as_bytes()) => next.run(request).await,
            Some(_) => unauthorized("the bearer token is not the server's"),
            None => unauthorized("this endpoint needs `Authorization: Bearer TOKEN`"),
        },
        Check::Custom(check) => match check.authenticate(request.headers()) {
            Ok(_) => next.run(request).await,
            Err(refusal) => unauthorized(&refusal.message),
        },
    }
}

/// The token a request offers: the bearer header, else the WebSocket
/// subprotocol.
fn given_token(headers: &HeaderMap) -> Option<Vec<u8>> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, credentials)| credentials.trim().as_bytes().to_vec())
        .or_else(|| {
            headers
                .get_all(header::SEC_WEBSOCKET_PROTOCOL)
                .iter()
                .filter_map(|value| value.to_str().ok())
                .flat_map(|value| value.split(','))
                .find_map(|offered| offered.trim().strip_prefix(TOKEN_PROTOCOL))
                .map(|hex| crate::hex::decode(hex).unwrap_or_default())
        })
}

fn unauthorized(message: &str) -> Response {
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
}

/// Compares in time that depends on the lengths only, not on where the
/// bytes first differ.
fn same(given: &[u8], token: &[u8]) -> bool {
    let mut difference = given.len() ^ token.len();
    for index in 0..given.len().max(token.len()) {
        let (a, b) = (given.get(index).copied(), token.get(index).copied());
        difference |= usize::from(a.unwrap_or(0) ^ b.unwrap_or(0));
    }
    difference == 0
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(same(b"s3cret", b"s3cret"));
        for other in [&b"s3cre"[..], b"s3cret!", b"S3cret", b"", b"s3cres"] {
            assert!(!same(other, b"s3cret"), "{other:?}");
        }
        assert!(same(b"", b""));
    }
}
