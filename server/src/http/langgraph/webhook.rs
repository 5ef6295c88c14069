//! Webhooks: when a run started with `webhook` settles (ends, or pauses
//! for a decision), its outcome is POSTed to the URL, retried with
//! backoff. Never to this server itself.

use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::Value;
use tollgate_checkpoint::RunId;

use super::super::errors::ApiResult;
use super::super::App;
use crate::error::ServiceError;

/// Attempts a webhook gets; the waits between them double from
/// [`FIRST_WAIT`] up to [`LAST_WAIT`].
const ATTEMPTS: u32 = 5;
const FIRST_WAIT: Duration = Duration::from_millis(500);
const LAST_WAIT: Duration = Duration::from_secs(8);
/// Time one attempt may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The webhook URL `given`, checked: `http` or `https`, on a host the
/// server allows (`--allow-webhook-host`), and not the address the
/// request reached this server at (`Host`), which would have the server
/// post to itself.
pub(super) fn checked(
    given: &str,
    headers: &HeaderMap,
    allowed: &[String],
) -> ApiResult<reqwest::Url> {
    let invalid = |why: &str| ServiceError::invalid(format!("webhook `{given}` {why}"));
    let url = reqwest::Url::parse(given).map_err(|_| invalid("is not a URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid("must be an http or https URL with a host").into());
    }
    if !super::super::routes::host_allowed(given, allowed) {
        return Err(invalid(
            "is on a host this server does not send webhooks to (serve --allow-webhook-host HOST)",
        )
        .into());
    }
    let host = url.host_str().unwrap_or("");
    let port = url.port_or_known_default();
    let own = headers.get(axum::http::header::HOST).and_then(|value| value.to_str().ok());
    if let Some(own) = own {
        let (own_host, own_port) = match own.rsplit_once(':') {
            Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => {
                (host, port.parse().ok())
            }
            _ => (own, Some(80)),
        };
        let own_host = own_host.trim_start_matches('[').trim_end_matches(']');
        if own_host.eq_ignore_ascii_case(host.trim_start_matches('[').trim_end_matches(']'))
            && own_port == port
        {
            return Err(
                invalid("is this server: a webhook is never sent to the server itself").into()
            );
        }
    }
    Ok(url)
}

/// Posts `run`'s outcome (`build` makes the body once it settled) to
/// `url` in the background: up to [`ATTEMPTS`] times while the receiver
/// cannot be reached or answers 429 or 5xx.
pub(super) fn send_when_settled<F, Fut>(app: App, run: RunId, url: reqwest::Url, build: F)
where
    F: FnOnce(App, RunId) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ApiResult<Value>> + Send,
{
    tokio::spawn(async move {
        if let Err(error) = app.runs.settled(run).await {
            tracing::warn!(%run, %error, "webhook: the run did not settle");
            return;
        }
        let body = match build(app, run).await {
            Ok(body) => body,
            Err(error) => {
                tracing::warn!(%run, error = %error.message, "webhook: the outcome did not read");
                return;
            }
        };
        install_crypto();
        let client = match reqwest::Client::builder().timeout(TIMEOUT).build() {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(%run, %error, "webhook: no HTTP client");
                return;
            }
        };
        let mut wait = FIRST_WAIT;
        for attempt in 1..=ATTEMPTS {
            let sent = client.post(url.clone()).json(&body).send().await;
            let retry = match &sent {
                Ok(response) if response.status().is_success() => return,
                Ok(response) => {
                    let status = response.status();
                    status.as_u16() == 429 || status.is_server_error()
                }
                Err(_) => true,
            };
            let why = match sent {
                Ok(response) => format!("status {}", response.status()),
                Err(error) => error.to_string(),
            };
            if !retry || attempt == ATTEMPTS {
                tracing::warn!(%run, %url, attempt, why, "webhook: given up");
                return;
            }
            tracing::debug!(%run, %url, attempt, why, "webhook: retrying");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(LAST_WAIT);
        }
    });
}

/// Installs rustls's ring provider once for the process (another library
/// may have installed one first; either works).
fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
