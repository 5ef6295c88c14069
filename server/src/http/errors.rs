//! One error shape for every answer that is not a success:
//! `{"error": {"kind", "message"}}`.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::ServiceError;

use super::App;

/// A typed error as JSON, with the HTTP status of the CLI exit code of the
/// same meaning.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) kind: &'static str,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, kind, message: message.into() }
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> Self {
        let status =
            StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Self { status, kind: error.kind(), message: error.to_string() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"kind": self.kind, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE || self.kind == "key_in_flight" {
            // The database is away, or the first request with this key
            // is still running: clients try again, not give up.
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// The kind and the message for a status when the framework answered
/// without one of ours.
fn described(status: StatusCode) -> (&'static str, &'static str) {
    match status.as_u16() {
        400 => ("invalid", "the request is malformed"),
        401 => (
            "unauthorized",
            "this endpoint needs the server's token: `Authorization: Bearer TOKEN` or `x-api-key: TOKEN`",
        ),
        404 => ("not_found", "no such endpoint (see docs/openapi.yaml)"),
        405 => ("method_not_allowed", "this endpoint does not take that method (see `Allow`)"),
        408 => ("timeout", "the request took too long to arrive"),
        409 => ("conflict", "the request conflicts with the run's state"),
        413 => ("too_large", "the request body is too large"),
        414 => ("uri_too_long", "the request target is too long"),
        415 => ("unsupported_media_type", "the request body has the wrong type"),
        422 => ("invalid", "the request body does not parse"),
        429 => ("too_many_requests", "too many requests"),
        503 => ("unavailable", "the server cannot answer now"),
        code if code >= 500 => ("failed", "the server failed"),
        _ => ("error", "the request failed"),
    }
}

/// Rewrites an error answer that is not JSON (an unknown path, a wrong
/// method, a query string that does not parse, a refused upgrade) into the
/// error shape, keeping the framework's message when it gave one.
pub(crate) async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4_096)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let (kind, default) = described(status);
    let message = if text.is_empty() { default.to_owned() } else { text };
    let body = json!({"error": {"kind": kind, "message": message}}).to_string();
    parts
        .headers
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

/// Unknown paths.
pub(crate) async fn no_route() -> ApiError {
    let (kind, message) = described(StatusCode::NOT_FOUND);
    ApiError::new(StatusCode::NOT_FOUND, kind, message)
}

/// Refuses request targets longer than the limit (414) before any
/// handler parses them.
pub(crate) async fn limit_uri(State(app): State<App>, request: Request, next: Next) -> Response {
    let length = request.uri().path_and_query().map_or(0, |target| target.as_str().len());
    let limit = app.settings.limits.max_uri;
    if length > limit {
        let message = format!("the request target is {length} bytes; the limit is {limit}");
        return ApiError::new(StatusCode::URI_TOO_LONG, "uri_too_long", message).into_response();
    }
    next.run(request).await
}
