//! The frontiers each run stored lately in full, so that a step repeating
//! one stores a nine-byte reference instead (see
//! [`RecentFrontiers`]): about a sixth of a small step's row.
//!
//! What is remembered is only ever what this store committed, and steps
//! rows never change, so it stays true whichever process commits the run
//! next (a run's id is never used again: the engine makes a new ULID for
//! each). A run is forgotten when this store deletes it, when one of its
//! commits fails (the commit may or may not have landed), and when it
//! stops running; at most [`MAX_RUNS`] runs are remembered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tollgate_checkpoint::{frontier_reference, RecentFrontiers, RunId};

/// Runs remembered at most (under 1 KB each); beyond, all are forgotten.
const MAX_RUNS: usize = 16_384;

/// Runs' recent full frontiers, by run.
#[derive(Debug, Default)]
pub(crate) struct Frontiers(Mutex<HashMap<RunId, RecentFrontiers>>);

impl Frontiers {
    fn lock(&self) -> MutexGuard<'_, HashMap<RunId, RecentFrontiers>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What step storing `frontier` of `run` stores: a reference to a
    /// step of the run that holds the same bytes, or `None` for the
    /// frontier itself.
    pub(crate) fn reference(&self, run: RunId, frontier: &[u8]) -> Option<[u8; 9]> {
        self.lock().get(&run)?.reference(frontier)
    }

    /// `run` committed a step `step` that stored `stored` (its frontier,
    /// or a reference to an earlier step's): a frontier stored in full is
    /// remembered while the run goes on running, and the run forgotten
    /// once it stops. A reference is never remembered, even when the run
    /// was forgotten meanwhile (all runs are, past [`MAX_RUNS`]): a later
    /// step would refer to a step that holds no frontier.
    pub(crate) fn committed(&self, run: RunId, step: u64, stored: &[u8], running: bool) {
        let mut runs = self.lock();
        if !running {
            runs.remove(&run);
            return;
        }
        if frontier_reference(stored).is_some() {
            return;
        }
        if runs.len() >= MAX_RUNS && !runs.contains_key(&run) {
            runs.clear();
        }
        runs.entry(run).or_default().remember(step, &Arc::from(stored));
    }

    /// Nothing is known of `run` any more.
    pub(crate) fn forget(&self, run: RunId) {
        self.lock().remove(&run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_remembered_while_they_run_and_forgotten_after() {
        let frontiers = Frontiers::default();
        let (run, other) = (RunId::new(), RunId::new());
        let a = [1u8, b'a'];
        assert_eq!(frontiers.reference(run, &a), None, "nothing known");
        frontiers.committed(run, 0, &a, true);
        let reference = frontiers.reference(run, &a).unwrap();
        assert_eq!(tollgate_checkpoint::frontier_reference(&reference), Some(0));
        assert_eq!(frontiers.reference(other, &a), None, "per run");
        frontiers.forget(run);
        assert_eq!(frontiers.reference(run, &a), None, "forgotten");
        frontiers.committed(run, 3, &a, true);
        frontiers.committed(run, 4, &[1, b'b'], false);
        assert_eq!(frontiers.reference(run, &a), None, "a run that stopped is forgotten");
        for _ in 0..MAX_RUNS {
            frontiers.committed(RunId::new(), 0, &a, true);
        }
        frontiers.committed(run, 5, &a, true);
        assert_eq!(frontiers.lock().len(), 1, "full: all forgotten before one more");
        // A step that stored a reference, of a run forgotten meanwhile, is
        // not remembered as holding the frontier.
        let reference = frontiers.reference(run, &a).unwrap();
        frontiers.forget(run);
        frontiers.committed(run, 6, &reference, true);
        assert!(!frontiers.lock().contains_key(&run), "a reference is not remembered");
    }
}
