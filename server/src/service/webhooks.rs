//! Webhooks: when a run started with one settles (ends, or pauses for a
//! decision), what the API that made it says of the run is POSTed to the
//! URL, retried with backoff. Never to this server itself. Each delivery
//! is kept in the store's outbox until it is done, so that a server
//! stopped before the run settles (or while retrying) leaves it to the
//! next server of the database: delivered at least once.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate_checkpoint::{OutboxEntry, OutboxGate, RunId, StoreError};
use tollgate_engine::RetryPolicy;

use super::admission::Admission;
use super::outbox::{gate, next_page, OutboxWork, PAGES};
use super::pending::now_ms;
use super::{target, Runs};
use crate::error::ServiceError;

/// The outbox kind of a webhook delivery.
pub(crate) const WEBHOOK_KIND: &str = "webhook";

/// Attempts a webhook gets, and the waits between them: doubling from
/// 0.5 s up to 8 s, each jittered to between half and all of it.
fn retries() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 5,
        initial_backoff: Duration::from_millis(500),
        multiplier: 2.0,
        max_backoff: Duration::from_secs(8),
        jitter: true,
    }
}
/// Time one attempt may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a delivery is held by the server sending it.
const HOLD_MS: i64 = 60_000;
/// How long a webhook of a run that does not exist (and waits for no
/// start) is kept, in case its run is being created right now.
const ORPHAN_MS: i64 = 60_000;
/// How long a webhook no server allows the host of is kept.
const UNSENT_MS: i64 = 3_600_000;

/// A webhook's outbox body (version 1): what to post, where, once which
/// run has settled past which event.
#[derive(Serialize, Deserialize)]
struct Delivery {
    v: u32,
    run: String,
    url: String,
    assistant: String,
    /// The run's last event when the webhook was asked for: it is sent
    /// once the run settles after it (a continued run: not for the pause
    /// it continued from).
    after_seq: u64,
}

impl Runs {
    /// Keeps a webhook to `url` for `run` (of `assistant`) in the store's
    /// outbox: any server of the database delivers it once the run
    /// settles past event `after_seq`, also after this one stopped.
    pub(crate) async fn register_webhook(
        &self,
        run: RunId,
        thread: Option<&str>,
        url: &reqwest::Url,
        assistant: &str,
        after_seq: u64,
    ) -> Result<(), ServiceError> {
        let delivery = Delivery {
            v: 1,
            run: run.to_string(),
            url: url.to_string(),
            assistant: assistant.to_owned(),
            after_seq,
        };
        let now = now_ms();
        let id = format!("{}.webhook", RunId::new());
        let thread = thread.map(str::to_owned);
        let entry = OutboxEntry::new(id, WEBHOOK_KIND, thread, now, now, json!(delivery));
        self.store().put_outbox(entry).await?;
        Ok(())
    }
}

/// Sends the webhooks whose runs settled (each in a task of its own);
/// those of runs still in flight (or still to start) are gated on their
/// run, out of sight until it settles; one that fails to be read waits
/// for the next look. Whether any webhook was ready.
pub(super) async fn deliver_due(
    runs: &Runs,
    admission: &Arc<Admission>,
    work: &Arc<dyn OutboxWork>,
    cursor: &mut Option<OutboxEntry>,
) -> Result<bool, ServiceError> {
    let now = now_ms();
    let mut any = false;
    for _ in 0..PAGES {
        let entries = next_page(runs, WEBHOOK_KIND, now, cursor).await?;
        any |= !entries.is_empty();
        for entry in entries {
            let id = entry.id.clone();
            if let Err(error) = consider(runs, admission, work, entry, now).await {
                tracing::warn!(%id, %error, "webhook: not sent");
            }
        }
        if cursor.is_none() {
            break;
        }
    }
    Ok(any)
}

/// Sends webhook `entry` if its run settled and no server holds it; gates
/// it on its run while the run has not.
async fn consider(
    runs: &Runs,
    admission: &Arc<Admission>,
    work: &Arc<dyn OutboxWork>,
    entry: OutboxEntry,
    now: i64,
) -> Result<(), ServiceError> {
    let store = runs.store();
    if entry.is_held(now) {
        return Ok(());
    }
    let Ok(delivery) = serde_json::from_value::<Delivery>(entry.body.clone()) else {
        tracing::warn!(id = %entry.id, "webhook: its record does not read; dropped");
        store.delete_outbox(&entry.id).await?;
        return Ok(());
    };
    let Ok(run) = delivery.run.parse::<RunId>() else { return Ok(()) };
    // The hosts allowed here (servers of one database may be configured
    // apart, and restarted with other hosts since): a server that does
    // not allow it leaves it to one that does.
    if !admission.webhook_allowed(&delivery.url) {
        if now - entry.created_at_ms > UNSENT_MS {
            tracing::warn!(%run, url = %delivery.url, "webhook: no server allows its host; dropped");
            store.delete_outbox(&entry.id).await?;
        }
        return Ok(());
    }
    let settled = OutboxGate::settled(run, delivery.after_seq);
    match store.run(run).await {
        Ok(record) if !settled.blocks(record.status, record.last_seq) => {}
        Ok(_) => return gate(runs, &entry.id, settled).await,
        Err(StoreError::RunNotFound { .. }) => {
            let waits = runs.pending(&delivery.run).await?.is_some_and(|p| p.waiting());
            if waits {
                return gate(runs, &entry.id, settled).await;
            }
            if now - entry.created_at_ms > ORPHAN_MS {
                // Deleted, cancelled before it started, or never made.
                store.delete_outbox(&entry.id).await?;
            }
            return Ok(());
        }
        Err(error) => return Err(error.into()),
    }
    if let Some(taken) = store.take_outbox(&entry.id, now, now + HOLD_MS).await? {
        let sending = Sending {
            runs: runs.clone(),
            admission: Arc::clone(admission),
            work: Arc::clone(work),
        };
        tokio::spawn(sending.deliver(taken, delivery, run));
    }
    Ok(())
}

/// What one delivery is sent with, in a task of its own.
struct Sending {
    runs: Runs,
    admission: Arc<Admission>,
    work: Arc<dyn OutboxWork>,
}

impl Sending {
    /// One attempt at a delivery: what the API says of the run POSTed;
    /// done (deleted) on success, on an answer that says not to retry, or
    /// after its last attempt ([`retries`]); otherwise put back, due after
    /// the policy's wait.
    async fn deliver(self, mut entry: OutboxEntry, delivery: Delivery, run: RunId) {
        let store = self.runs.store().clone();
        let done = |why: String| {
            let (store, id) = (store.clone(), entry.id.clone());
            async move {
                if !why.is_empty() {
                    tracing::warn!(%run, why, "webhook: given up");
                }
                if let Err(error) = store.delete_outbox(&id).await {
                    tracing::warn!(%run, %error, "webhook: delivered, but its record stays (it may be sent again)");
                }
            }
        };
        // Checked again as it is sent: the host's addresses now, which the
        // client connects to and nowhere else.
        let own = self.work.own_addrs();
        let target = match target::check(&delivery.url, &self.admission.webhook_hosts, &own).await {
            Ok(target) => target,
            Err(error) => return done(error.to_string()).await,
        };
        let url = target.url.clone();
        let body = match self.work.outcome(run, &delivery.assistant).await {
            Ok(body) => body,
            Err(error) => return done(format!("the outcome did not read: {error}")).await,
        };
        install_crypto();
        let mut builder =
            reqwest::Client::builder().timeout(TIMEOUT).redirect(reqwest::redirect::Policy::none());
        if let Some(host) = url.host_str().filter(|host| host.parse::<std::net::IpAddr>().is_err())
        {
            builder = builder.resolve_to_addrs(host, &target.addrs);
        }
        let client = match builder.build() {
            Ok(client) => client,
            Err(error) => return done(format!("no HTTP client: {error}")).await,
        };
        let sent = client.post(url.clone()).json(&body).send().await;
        let retry = match &sent {
            Ok(response) if response.status().is_success() => return done(String::new()).await,
            // A redirect is not followed (it could lead anywhere): the
            // delivery failed, for good.
            Ok(response) => {
                let status = response.status();
                status.as_u16() == 429 || status.is_server_error()
            }
            Err(_) => true,
        };
        let why = match sent {
            Ok(response) if response.status().is_redirection() => {
                format!("{url}: status {} (redirects are not followed)", response.status())
            }
            Ok(response) => format!("{url}: status {}", response.status()),
            Err(error) => format!("{url}: {error}"),
        };
        let policy = retries();
        if !retry || entry.attempts >= policy.max_attempts {
            return done(format!("{why} (attempt {})", entry.attempts)).await;
        }
        tracing::debug!(%run, attempt = entry.attempts, why, "webhook: retrying");
        // The seed spreads the retries of webhooks that failed together.
        let wait = policy.backoff(entry.attempts, entry.created_at_ms.unsigned_abs());
        entry.lease_until_ms = 0;
        entry.due_ms = now_ms() + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        if let Err(error) = store.put_outbox(entry).await {
            tracing::warn!(%run, %error, "webhook: its retry was not stored; sent again once its hold ends");
        }
    }
}

/// Installs rustls's ring provider once for the process (another library
/// may have installed one first; either works).
fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // ring rather than aws-lc-rs: a smaller build that needs no CMake. rustls
        // 0.23.48 deprecates ring's provider (no post-quantum key exchange); the
        // choice stands, so a newer rustls does not warn in a dependent's build.
        #[allow(deprecated)]
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
