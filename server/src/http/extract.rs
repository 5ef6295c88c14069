//! What handlers take from a request, written once: a JSON body read
//! within the server's size and time limits ([`JsonBody`], and [`JsonOrDefault`]
//! where an empty body means the defaults), the same with the request's
//! `Idempotency-Key` ([`KeyedJson`], [`Keyed`] for a request without a
//! body), and a run id from the path ([`RunPath`]). Each refuses bad
//! input with the API's error shape.

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use tollgate_checkpoint::RunId;

use crate::error::ServiceError;
use crate::service::RequestKey;

use super::errors::{ApiError, ApiResult};
use super::App;

/// A JSON request body that must be there: an empty body is refused (400)
/// like one that does not parse; a body over the size limit is 413, one
/// slower than the body timeout 408.
pub(crate) struct JsonBody<T>(pub(crate) T);

/// A JSON request body whose absence (an empty or all-blank body) means
/// `T::default()`; otherwise as [`JsonBody`].
pub(crate) struct JsonOrDefault<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<App> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &App) -> Result<Self, Self::Rejection> {
        let bytes = read(app, request.into_body()).await?;
        parse(&bytes).map(JsonBody)
    }
}

impl<T: DeserializeOwned + Default> FromRequest<App> for JsonOrDefault<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &App) -> Result<Self, Self::Rejection> {
        let bytes = read(app, request.into_body()).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonOrDefault(T::default()));
        }
        parse(&bytes).map(JsonOrDefault)
    }
}

/// The header a request key comes in.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header that says an answer is a replay of an earlier request with
/// the same `Idempotency-Key` (`true`).
const REPLAYED: &str = "idempotent-replayed";

/// `response`, marked as a replay (`Idempotent-Replayed: true`) when it
/// is one.
pub(crate) fn replayed(
    mut response: axum::response::Response,
    replay: bool,
) -> axum::response::Response {
    if replay {
        response.headers_mut().insert(REPLAYED, axum::http::HeaderValue::from_static("true"));
    }
    response
}

/// A JSON body that must be there (as [`JsonBody`]) and the request's
/// key, when it sent `Idempotency-Key`.
pub(crate) struct KeyedJson<T> {
    pub(crate) body: T,
    pub(crate) key: Option<RequestKey>,
}

/// The request key of a request without a body (a thread copy).
pub(crate) struct Keyed(pub(crate) Option<RequestKey>);

/// [`KeyedJson`] whose absent body (empty or all blank) means
/// `T::default()`, as [`JsonOrDefault`].
pub(crate) struct KeyedJsonOrDefault<T> {
    pub(crate) body: T,
    pub(crate) key: Option<RequestKey>,
}

impl<T: DeserializeOwned> FromRequest<App> for KeyedJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &App) -> Result<Self, Self::Rejection> {
        let (parts, body) = request.into_parts();
        let bytes = read(app, body).await?;
        let (body, key) = keyed(&parts, app, &bytes)?;
        Ok(KeyedJson { body, key })
    }
}

impl<T: DeserializeOwned + Default> FromRequest<App> for KeyedJsonOrDefault<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &App) -> Result<Self, Self::Rejection> {
        let (parts, body) = request.into_parts();
        let bytes = read(app, body).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            let key = request_key(&parts, app, None)?;
            return Ok(KeyedJsonOrDefault { body: T::default(), key });
        }
        let (body, key) = keyed(&parts, app, &bytes)?;
        Ok(KeyedJsonOrDefault { body, key })
    }
}

/// The body `bytes` parsed, and the request's key for it.
fn keyed<T: DeserializeOwned>(
    parts: &Parts,
    app: &App,
    bytes: &[u8],
) -> ApiResult<(T, Option<RequestKey>)> {
    if !parts.headers.contains_key(IDEMPOTENCY_KEY) {
        return Ok((parse(bytes)?, None));
    }
    let value: serde_json::Value = parse(bytes)?;
    let key = request_key(parts, app, Some(&value))?;
    let body = serde_json::from_value(value).map_err(|error| {
        ApiError::from(
            ServiceError::invalid(format!("bad request body: {error}")).with_source(error),
        )
    })?;
    Ok((body, key))
}

impl FromRequestParts<App> for Keyed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Self::Rejection> {
        request_key(parts, app, None).map(Keyed)
    }
}

/// The request's key: its `Idempotency-Key` in the scope of its principal
/// (none on an open server), for its method, path and body.
fn request_key(
    parts: &Parts,
    app: &App,
    body: Option<&serde_json::Value>,
) -> ApiResult<Option<RequestKey>> {
    let Some(sent) = parts.headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let sent = sent.to_str().map_err(|_| {
        ServiceError::invalid("`Idempotency-Key` must be printable ASCII".to_owned())
    })?;
    let scope = parts.extensions.get::<super::Principal>().map_or("", |who| who.name.as_str());
    let request = format!("{} {}", parts.method, parts.uri.path());
    let ttl = app.settings.idempotency_ttl;
    Ok(Some(RequestKey::new(scope, sent, &request, body, ttl)?))
}

/// The body's bytes, within the limits.
async fn read(app: &App, body: axum::body::Body) -> ApiResult<axum::body::Bytes> {
    let limits = app.settings.limits;
    let read = axum::body::to_bytes(body, limits.max_body);
    match tokio::time::timeout(limits.body_timeout, read).await {
        Err(_) => {
            let message = format!(
                "the request body did not arrive within {} s",
                limits.body_timeout.as_secs_f64()
            );
            Err(ApiError::new(StatusCode::REQUEST_TIMEOUT, "timeout", message))
        }
        Ok(Err(error)) => {
            let too_large = std::error::Error::source(&error)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            Err(if too_large {
                let message = format!("the request body is larger than {} bytes", limits.max_body);
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
            } else {
                ServiceError::invalid(format!("cannot read the request body: {error}")).into()
            })
        }
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    serde_json::from_slice(bytes).map_err(|error| {
        ServiceError::invalid(format!("bad request body: {error}")).with_source(error).into()
    })
}

/// The run id of a `/runs/{id}/…` path; one that is not a run id is
/// refused (400).
pub(crate) struct RunPath(pub(crate) RunId);

impl<S: Send + Sync> FromRequestParts<S> for RunPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(text) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ServiceError::invalid(rejection.body_text()))?;
        run_id(&text).map(RunPath)
    }
}

/// `text` as a run id, or a 400 that names it.
pub(crate) fn run_id(text: &str) -> ApiResult<RunId> {
    text.parse().map_err(|_| ServiceError::invalid(format!("`{text}` is not a run id")).into())
}

/// The caller as the gate admitted them (anyone, reaching everything, on
/// a server that names nobody).
impl<S: Send + Sync> FromRequestParts<S> for crate::identity::Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<Self>().cloned().unwrap_or_else(Self::anyone))
    }
}
