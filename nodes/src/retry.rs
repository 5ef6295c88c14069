//! The harness's retry policy for model calls.

use std::collections::BTreeMap;
use std::time::Duration;

use tollgate_engine::RetryPolicy;

use crate::error::{ErrorClass, HarnessError};

/// Longest `Retry-After` honoured; a provider asking for more is waited
/// for this long.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How an agent retries failed model calls. The agent is the only retry
/// owner: provider adapters never retry on their own, so attempts never
/// multiply.
///
/// By default network, timeout, rate-limit and server errors are retried
/// ([`ErrorClass::retryable_by_default`]), with the engine's
/// [`RetryPolicy`] backoff (3 attempts, 200 ms doubling, capped at 10 s,
/// jittered); a provider's `Retry-After` replaces the computed delay (up to
/// [`MAX_RETRY_AFTER`]). Each retry is a `retry_scheduled` event carrying
/// the call id. Classes can be switched on or off one by one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelRetry {
    /// Attempts and backoff.
    pub backoff: RetryPolicy,
    overrides: BTreeMap<ErrorClass, bool>,
}

impl ModelRetry {
    /// The default policy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Never retries.
    pub fn never() -> Self {
        Self {
            backoff: RetryPolicy { max_attempts: 1, ..RetryPolicy::default() },
            ..Self::default()
        }
    }

    /// Uses `backoff` for attempts and delays.
    pub fn backoff(mut self, backoff: RetryPolicy) -> Self {
        self.backoff = backoff;
        self
    }

    /// Retries (or not) errors of `class`, overriding the default.
    pub fn retry_class(mut self, class: ErrorClass, retry: bool) -> Self {
        self.overrides.insert(class, retry);
        self
    }

    /// Whether `error` is retried (attempts permitting).
    pub fn retries(&self, error: &HarnessError) -> bool {
        let class = error.class();
        self.overrides.get(&class).copied().unwrap_or_else(|| class.retryable_by_default())
    }

    /// The delay after attempt `attempt` failed with `error`.
    pub fn delay(&self, attempt: u32, seed: u64, error: &HarnessError) -> Duration {
        match error.retry_after() {
            Some(asked) => asked.min(MAX_RETRY_AFTER),
            None => self.backoff.backoff(attempt, seed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(class: &str) -> HarnessError {
        let provider = "p".to_owned();
        let message = "m".to_owned();
        match class {
            "rate" => HarnessError::RateLimited {
                provider,
                retry_after: Some(Duration::from_millis(1500)),
                message,
            },
            "server" => HarnessError::Server { provider, status: Some(503), message },
            "timeout" => HarnessError::Timeout { what: provider, after: Duration::from_secs(1) },
            "network" => HarnessError::Network { provider, message },
            "auth" => HarnessError::Auth { provider, status: Some(401), message },
            "invalid" => HarnessError::InvalidRequest { provider, status: Some(400), message },
            _ => HarnessError::MissingModel { spec: provider },
        }
    }

    #[test]
    fn only_transient_classes_are_retried_by_default_and_overrides_win() {
        let policy = ModelRetry::new();
        let table = [
            ("rate", true),
            ("server", true),
            ("timeout", true),
            ("network", true),
            ("auth", false),
            ("invalid", false),
            ("missing", false),
        ];
        for (class, retried) in table {
            assert_eq!(policy.retries(&error(class)), retried, "{class}");
        }
        let custom = ModelRetry::new()
            .retry_class(ErrorClass::Auth, true)
            .retry_class(ErrorClass::RateLimit, false);
        assert!(custom.retries(&error("auth")));
        assert!(!custom.retries(&error("rate")));
    }

    #[test]
    fn retry_after_replaces_the_backoff_up_to_a_cap() {
        let policy = ModelRetry::new();
        assert_eq!(policy.delay(1, 0, &error("rate")), Duration::from_millis(1500));
        let huge = HarnessError::RateLimited {
            provider: "p".into(),
            retry_after: Some(Duration::from_secs(3600)),
            message: "m".into(),
        };
        assert_eq!(policy.delay(1, 0, &huge), MAX_RETRY_AFTER);
        let computed = policy.delay(1, 0, &error("server"));
        assert!(computed <= Duration::from_millis(200) && computed >= Duration::from_millis(100));
    }
}
