//! How a node retries a retryable error.

use std::time::Duration;

/// How a node retries errors marked [`NodeError::retryable`](crate::NodeError::retryable).
///
/// Defaults: 3 attempts in all, 200 ms before the first retry, doubling,
/// capped at 10 s, with jitter that picks a delay between half and all of
/// the computed backoff. Nodes without a policy never retry.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = never retry).
    pub max_attempts: u32,
    /// Delay before the first retry.
    pub initial_backoff: Duration,
    /// Factor applied to the delay after each retry.
    pub multiplier: f64,
    /// Upper bound of any delay.
    pub max_backoff: Duration,
    /// Randomise each delay within [delay / 2, delay].
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(200),
            multiplier: 2.0,
            max_backoff: Duration::from_secs(10),
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `attempt + 1`, after `attempt` failed.
    /// `seed` picks the jitter deterministically.
    pub fn backoff(&self, attempt: u32, seed: u64) -> Duration {
        let exponent = attempt.saturating_sub(1).min(64) as i32;
        let raw = self.initial_backoff.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = raw.min(self.max_backoff.as_secs_f64()).max(0.0);
        let secs = if self.jitter {
            let unit = (splitmix64(seed ^ u64::from(attempt)) >> 11) as f64 / (1u64 << 53) as f64;
            capped * (0.5 + 0.5 * unit)
        } else {
            capped
        };
        Duration::from_secs_f64(secs)
    }
}

/// A small, well-mixed hash for jitter (no RNG crate needed).
pub(crate) fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_jitters_within_half() {
        let policy = RetryPolicy { jitter: false, ..RetryPolicy::default() };
        let delays: Vec<u128> = (1..=8).map(|a| policy.backoff(a, 7).as_millis()).collect();
        assert_eq!(delays, [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
        let jittered = RetryPolicy::default();
        for attempt in 1..=8 {
            for seed in 0..50 {
                let full = policy.backoff(attempt, seed);
                let got = jittered.backoff(attempt, seed);
                assert!(
                    got <= full && got >= full / 2,
                    "{got:?} outside [{:?}, {full:?}]",
                    full / 2
                );
            }
        }
    }
}
