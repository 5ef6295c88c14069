//! Webhooks as LangGraph's clients ask for them: the URL checked against
//! the request (never this server, not even by its `Host`), then kept for
//! the service's dispatcher (`service/webhooks.rs`), which POSTs the
//! run's `Run` once it settles.

use axum::http::HeaderMap;
use tollgate_checkpoint::RunId;

use super::super::errors::ApiResult;
use super::super::App;
use crate::error::ServiceError;
use crate::service::webhook_target;

/// The webhook URL `given`, checked (`service/target.rs`): `http` or
/// `https`, on a host the server allows (`--allow-webhook-host`), not
/// resolving to an internal address that is not itself allowed, and not
/// this server: neither an address it listens on nor the one the request
/// reached it at (`Host`).
pub(super) async fn checked(
    app: &App,
    given: &str,
    headers: &HeaderMap,
) -> ApiResult<reqwest::Url> {
    let own = app.settings.own_addrs();
    let allowed = &app.settings.admission.webhook_hosts;
    let url = webhook_target(given, allowed, &own)
        .await
        .map_err(|error| ServiceError::invalid(error.to_string()).with_source(error))?
        .url;
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
            let message = format!(
                "webhook `{given}` is this server: a webhook is never sent to the server itself"
            );
            return Err(ServiceError::invalid(message).into());
        }
    }
    Ok(url)
}

/// Keeps a webhook to `url` for `run` (see `Runs::register_webhook`) and
/// has the dispatcher look at once.
pub(super) async fn register(
    app: &App,
    run: RunId,
    thread: Option<&str>,
    url: &reqwest::Url,
    assistant: &str,
    after_seq: u64,
) -> ApiResult<()> {
    app.runs.register_webhook(run, thread, url, assistant, after_seq).await?;
    super::queue::wake(app);
    Ok(())
}
