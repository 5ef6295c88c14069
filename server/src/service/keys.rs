//! Requests made once: a request that creates something (a run, a run
//! that waits to start, a copied thread) may carry a key
//! (`Idempotency-Key`); the first request with a key makes its thing,
//! and a retry with the same key and the same request is answered with
//! that thing instead of making a second (`docs/tenancy.md`).
//!
//! The key is claimed in the store before the thing is made
//! ([`IdempotencyStore::claim_key`](tollgate_checkpoint::IdempotencyStore::claim_key)),
//! so of any number of requests at once, in any servers sharing the
//! database, one makes it; the others wait for it to appear (at most
//! [`IN_FLIGHT_WAIT`]) and answer it. A claimer that fails releases the
//! key; one that died leaves a claim that is taken over once it is
//! [`ABANDONED_AFTER`] old and its thing never appeared.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tollgate_checkpoint::{Claimed, HeldKey, KeyClaim, RunId, StoreError};

use super::pending::now_ms;
use super::Runs;
use crate::error::ServiceError;

/// How long a key is kept by default: a retry within it finds the first
/// request's thing.
pub const DEFAULT_KEY_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest key taken.
const MAX_KEY_LEN: usize = 255;
/// How long a request waits for the thing another request with its key
/// is making before it is told to retry later.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(5);
/// How old a claim whose thing never appeared must be to be taken over
/// (its claimer died, or failed without releasing it).
const ABANDONED_AFTER: Duration = Duration::from_secs(60);
/// How many expired keys one sweep transaction removes.
const KEY_SWEEP_BATCH: u64 = 500;
/// How often a waiting request looks again.
const LOOK_AGAIN: Duration = Duration::from_millis(20);

/// A request's key: whose it is, the key, what the request is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestKey {
    scope: String,
    key: String,
    fingerprint: String,
    ttl: Duration,
}

impl RequestKey {
    /// The key `key` sent by `scope` (the principal; empty for an open
    /// server) with `request` (what identifies it: its method and path)
    /// and `body` (its JSON, compared by value: the same fields in
    /// another order or spacing are the same body), kept for `ttl`.
    /// A key that is empty, longer than [`MAX_KEY_LEN`] or not printable
    /// ASCII is refused.
    pub(crate) fn new(
        scope: &str,
        key: &str,
        request: &str,
        body: Option<&serde_json::Value>,
        ttl: Duration,
    ) -> Result<Self, ServiceError> {
        let printable = key.bytes().all(|byte| (0x21..0x7f).contains(&byte));
        if key.is_empty() || key.len() > MAX_KEY_LEN || !printable {
            return Err(ServiceError::invalid(format!(
                "`Idempotency-Key` must be 1 to {MAX_KEY_LEN} printable ASCII characters without spaces"
            )));
        }
        let mut digest = Sha256::new();
        digest.update(request.as_bytes());
        digest.update([0]);
        if let Some(body) = body {
            digest.update(body.to_string().as_bytes());
        }
        let fingerprint = crate::hex::encode(&digest.finalize());
        Ok(Self { scope: scope.to_owned(), key: key.to_owned(), fingerprint, ttl })
    }
}

/// What a keyed request makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Makes {
    /// A run, or a run that waits to start (a pending run of that id).
    Run,
    /// A thread.
    Thread,
    /// Several runs (a batch): their ids joined by `,`, found when one
    /// of them is.
    Runs,
}

/// What a keyed request answers.
#[derive(Debug)]
pub(crate) enum Made<T> {
    /// What it made now.
    Fresh(T),
    /// What a request with its key made before (the id its maker gave:
    /// see [`Runs::made_once`]).
    Replay(String),
}

/// What a keyed request does.
#[derive(Debug)]
enum Once {
    /// The key is this request's: make the thing, then say which
    /// ([`Claim::made`]) or release it ([`Claim::release`]).
    Fresh(Claim),
    /// A request with the key made this (the id of a run or a thread).
    Replay(String),
}

/// A key this request claimed.
#[derive(Debug)]
#[must_use = "a claim is released when the thing is not made"]
struct Claim {
    key: RequestKey,
    made: String,
}

impl Claim {
    /// Says the request made `made` (another id than the claim's when it
    /// answered with an existing run: a decision, a run continued).
    async fn made(self, runs: &Runs, made: &str) -> Result<(), ServiceError> {
        if made == self.made {
            return Ok(());
        }
        let claim = keyed(&self.key, made).replacing(self.made.clone());
        match runs.store().claim_key(claim).await? {
            Claimed::Won => Ok(()),
            Claimed::Held(held) => Err(ServiceError::failed(format!(
                "request key `{}` was taken over (now for {}) while its request ran",
                self.key.key, held.made
            ))),
        }
    }

    /// Releases the key: the thing was not made, a retry makes it.
    async fn release(self, runs: &Runs) {
        let key = &self.key;
        if let Err(error) = runs.store().release_key(&key.scope, &key.key, &self.made).await {
            tracing::warn!(%error, key = %key.key, "a request key was not released");
        }
    }
}

/// The claim of `key` for `made`, now.
fn keyed(key: &RequestKey, made: &str) -> KeyClaim {
    let now = now_ms();
    let ttl = i64::try_from(key.ttl.as_millis()).unwrap_or(i64::MAX);
    KeyClaim::new(&key.scope, &key.key, &key.fingerprint, made, now, now.saturating_add(ttl))
}

impl Runs {
    /// Makes what a request makes, once per key: without a key, `make`
    /// runs; with one, `make` runs only if no earlier request with the
    /// key made its thing, and says what it made (`fresh` or another id,
    /// which a replay gets back verbatim: for a run, `RUN` or
    /// `RUN@SEQ`); a failed `make` releases the key. See [`Runs::once`]
    /// for the refusals.
    pub(crate) async fn made_once<T, E, Fut>(
        &self,
        key: Option<&RequestKey>,
        fresh: &str,
        makes: Makes,
        make: impl FnOnce() -> Fut,
    ) -> Result<Made<T>, E>
    where
        Fut: std::future::Future<Output = Result<(T, String), E>>,
        E: From<ServiceError>,
    {
        let Some(key) = key else {
            return make().await.map(|(value, _)| Made::Fresh(value));
        };
        let claim = match self.once(key, fresh, makes).await? {
            Once::Replay(made) => return Ok(Made::Replay(made)),
            Once::Fresh(claim) => claim,
        };
        match make().await {
            Ok((value, made)) => {
                claim.made(self, &made).await?;
                Ok(Made::Fresh(value))
            }
            Err(error) => {
                claim.release(self).await;
                Err(error)
            }
        }
    }

    /// Claims `key` for `fresh` (the id the request would make), or finds
    /// what an earlier request with it made. The same key with another
    /// request is refused ([`ServiceError::KeyReused`]); a request with it
    /// still making its thing after [`IN_FLIGHT_WAIT`] is a conflict
    /// ([`ServiceError::KeyInFlight`]).
    async fn once(
        &self,
        key: &RequestKey,
        fresh: &str,
        makes: Makes,
    ) -> Result<Once, ServiceError> {
        let store = self.store();
        let mut claim = keyed(key, fresh);
        let deadline = tokio::time::Instant::now() + IN_FLIGHT_WAIT;
        loop {
            let held = match store.claim_key(claim.clone()).await? {
                Claimed::Won => {
                    return Ok(Once::Fresh(Claim { key: key.clone(), made: fresh.to_owned() }))
                }
                Claimed::Held(held) => held,
            };
            if held.fingerprint != key.fingerprint {
                return Err(ServiceError::KeyReused { key: key.key.clone(), made: held.made });
            }
            if self.exists(&held.made, makes).await? {
                return Ok(Once::Replay(held.made));
            }
            if abandoned(&held) {
                claim = keyed(key, fresh).replacing(held.made);
                continue;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ServiceError::KeyInFlight {
                    key: key.key.clone(),
                    after: IN_FLIGHT_WAIT,
                });
            }
            tokio::time::sleep(LOOK_AGAIN).await;
            claim = keyed(key, fresh);
        }
    }

    /// Whether `id` exists as what a request `makes`.
    async fn exists(&self, id: &str, makes: Makes) -> Result<bool, ServiceError> {
        match makes {
            Makes::Run => self.run_exists(id).await,
            Makes::Thread => Ok(self.thread_record(id).await?.is_some()),
            Makes::Runs => {
                for run in id.split(',') {
                    if self.run_exists(run).await? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
        }
    }

    /// Whether run `id` (`RUN` or `RUN@SEQ`) exists, or waits to start.
    async fn run_exists(&self, id: &str) -> Result<bool, ServiceError> {
        let id = id.split_once('@').map_or(id, |(run, _)| run);
        let Ok(run) = id.parse::<RunId>() else {
            return Ok(false);
        };
        match self.store().run(run).await {
            Ok(_) => Ok(true),
            Err(StoreError::RunNotFound { .. }) => Ok(self.pending(id).await?.is_some()),
            Err(error) => Err(error.into()),
        }
    }

    /// Removes the request keys that expired, [`KEY_SWEEP_BATCH`] at a
    /// time; how many.
    pub(crate) async fn sweep_keys(&self) -> Result<u64, ServiceError> {
        let mut removed = 0;
        loop {
            let batch = self.store().sweep_keys(now_ms(), KEY_SWEEP_BATCH).await?;
            removed += batch;
            if batch < KEY_SWEEP_BATCH {
                return Ok(removed);
            }
        }
    }
}

/// Whether a claim whose thing has not appeared is old enough to take
/// over.
fn abandoned(held: &HeldKey) -> bool {
    let age = now_ms().saturating_sub(held.claimed_at_ms);
    age >= i64::try_from(ABANDONED_AFTER.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::RequestKey;

    #[test]
    fn a_fingerprint_is_the_request_and_the_body_by_value() {
        let ttl = Duration::from_secs(60);
        let key = |request: &str, body: serde_json::Value| {
            RequestKey::new("ann", "k-1", request, Some(&body), ttl).expect("a good key")
        };
        let one = key("POST /runs", json!({"a": 1, "b": [1, 2]}));
        // The same fields in another order are the same body.
        let parsed: serde_json::Value =
            serde_json::from_str(r#"{ "b": [1,2],  "a": 1 }"#).expect("json");
        assert_eq!(one, key("POST /runs", parsed));
        assert_ne!(one.fingerprint, key("POST /runs", json!({"a": 2, "b": [1, 2]})).fingerprint);
        assert_ne!(
            one.fingerprint,
            key("POST /runs/wait", json!({"a": 1, "b": [1, 2]})).fingerprint
        );
        let none = RequestKey::new("ann", "k-1", "POST /runs", None, ttl).expect("key");
        assert_ne!(one.fingerprint, none.fingerprint);
    }

    #[test]
    fn keys_that_are_empty_long_or_not_printable_are_refused() {
        let ttl = Duration::from_secs(1);
        for bad in ["", "with space", "tab\t", "é", &"x".repeat(256)] {
            let error = RequestKey::new("", bad, "POST /runs", None, ttl).expect_err(bad);
            assert!(error.to_string().contains("Idempotency-Key"), "{bad}: {error}");
        }
        assert!(RequestKey::new("", &"x".repeat(255), "POST /runs", None, ttl).is_ok());
    }
}
