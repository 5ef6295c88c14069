//! The bearer token: required on every endpoint but `/healthz` and the
//! review page's own files when the server has one.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::errors::ApiError;
use super::{page, App};

/// The prefix of the WebSocket subprotocol that carries the token.
const TOKEN_PROTOCOL: &str = "tollgate.token.";

/// Lets a request through when the server has no token, when it asks for
/// `/healthz` or one of the page's files, or is a CORS preflight (browsers
/// send those without credentials), or when it carries `Authorization:
/// Bearer TOKEN` (the scheme in any case) or, for a WebSocket (where
/// browsers cannot set headers), offers the subprotocol
/// `tollgate.token.HEX` with the token's bytes in hex; answers 401
/// otherwise.
pub(crate) async fn require_token(
    State(app): State<App>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = &app.settings.token else { return next.run(request).await };
    let path = request.uri().path();
    if path == "/healthz" || page::is_page(path) || request.method() == Method::OPTIONS {
        return next.run(request).await;
    }
    let headers = request.headers();
    let given = headers
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
        });
    match given {
        Some(given) if same(&given, token.as_bytes()) => next.run(request).await,
        Some(_) => unauthorized("the bearer token is not the server's"),
        None => unauthorized("this endpoint needs `Authorization: Bearer TOKEN`"),
    }
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
