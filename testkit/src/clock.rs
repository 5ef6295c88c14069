//! Deterministic clocks and ids, injected through the run config.

use std::sync::atomic::{AtomicI64, Ordering};

use tollgate_checkpoint::RunId;
use tollgate_engine::{Clock, RunConfig};

/// A clock that starts at `start_ms` and moves `step_ms` forward each time
/// it is read: the same sequence of reads gives the same times.
#[derive(Debug)]
pub struct StepClock {
    next: AtomicI64,
    step_ms: i64,
}

impl StepClock {
    /// Starts at `start_ms`, advancing `step_ms` per read (0: a fixed clock).
    pub fn new(start_ms: i64, step_ms: i64) -> Self {
        Self { next: AtomicI64::new(start_ms), step_ms }
    }
}

impl Clock for StepClock {
    fn now_ms(&self) -> i64 {
        self.next.fetch_add(self.step_ms, Ordering::SeqCst)
    }
}

/// A clock that stands still until the test moves it: hand it to a run
/// (`RunConfig::clock`) and a worker, and a workflow's durable sleep
/// (`WorkflowContext::sleep`) of days ends when the test says so.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// Stands at `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        Self { now: AtomicI64::new(start_ms) }
    }

    /// Moves to `now_ms`.
    pub fn set(&self, now_ms: i64) {
        self.now.store(now_ms, Ordering::SeqCst);
    }

    /// Moves forward by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        let millis = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.now.fetch_add(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// 2026-01-01T00:00:00Z, where deterministic runs start.
pub const EPOCH_2026_MS: i64 = 1_767_225_600_000;

/// Run ids from a seed: the same seed and index give the same id.
#[derive(Debug, Clone, Copy)]
pub struct DeterministicIds {
    seed: u64,
}

impl DeterministicIds {
    /// Ids for `seed`.
    pub fn new(seed: u64) -> Self {
        Self { seed }
    }

    /// The `index`th run id.
    pub fn run_id(&self, index: u64) -> RunId {
        let random = (u128::from(mix(self.seed)) << 16) ^ u128::from(mix(self.seed ^ index));
        RunId::from_parts(EPOCH_2026_MS as u64 + index, random)
    }
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A run config whose run id and clock come from `seed`: two runs of the
/// same graph and input with the same seed (each on its own store) write
/// identical event logs. The clock is fixed, so durations read 0.
pub fn deterministic_config(seed: u64) -> RunConfig {
    RunConfig::new()
        .run_id(DeterministicIds::new(seed).run_id(0))
        .clock(std::sync::Arc::new(StepClock::new(EPOCH_2026_MS, 0)))
}
