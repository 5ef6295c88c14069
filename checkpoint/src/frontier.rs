//! Frontiers stored once. A step's frontier (what runs next, with the
//! leg's settings) is often the very one an earlier step of its run
//! stored: a loop back to the same node, or two nodes taking turns. Such a
//! step may store a reference to that step (nine bytes) instead of the
//! frontier again (about 80 bytes for one task, a fifth of a small step's
//! row). A store remembers the last [`RECENT`] frontiers each run stored in
//! full ([`RecentFrontiers`]); a run it knows nothing of stores its
//! frontier in full.
//!
//! A reference is a zero byte and the step, little-endian: no blob starts
//! with a zero (a blob's first byte is its codec's tag, never zero). It
//! always names a step that stored its frontier in full, so reading one
//! takes at most one more lookup. Steps rows are immutable and only ever
//! deleted with their whole run, so what a store remembers of a run stays
//! true for as long as the run exists.

use std::sync::Arc;

/// Full frontiers remembered per run: two covers a node looping on itself
/// and two nodes taking turns (an agent and its tools).
const RECENT: usize = 2;

/// Frontiers longer than this are not remembered (they are stored in
/// full every time): what is remembered stays under 1 KB a run, however
/// large the inputs `Send` tasks carry.
const MAX_REMEMBERED: usize = 512;

/// The first byte of a stored reference.
const REFERENCE: u8 = 0;

/// The last frontiers a run stored in full, newest first, with their
/// steps: what a store needs to store a repeated frontier as a reference
/// (see [`frontier_reference`] for reading one).
#[derive(Debug, Clone, Default)]
pub struct RecentFrontiers([Option<(u64, Arc<[u8]>)>; RECENT]);

impl RecentFrontiers {
    /// What a step storing `frontier` (its encoded bytes) stores: a
    /// reference to a remembered step holding the same bytes, or `None`
    /// for the frontier itself.
    pub fn reference(&self, frontier: &[u8]) -> Option<[u8; 9]> {
        let (step, _) = self.0.iter().flatten().find(|(_, full)| **full == *frontier)?;
        let mut stored = [REFERENCE; 9];
        stored[1..].copy_from_slice(&step.to_le_bytes());
        Some(stored)
    }

    /// Remembers that `step` stored `frontier`, newest, when it stored it
    /// in full (no reference) and it is not too long to remember (512
    /// bytes).
    pub fn remember(&mut self, step: u64, frontier: &Arc<[u8]>) {
        if frontier.len() > MAX_REMEMBERED || self.reference(frontier).is_some() {
            return;
        }
        self.0.rotate_right(1);
        self.0[0] = Some((step, Arc::clone(frontier)));
    }

    /// Remembers only `step`'s frontier, stored in full (if it is not
    /// too long to remember).
    pub fn only(step: u64, frontier: &[u8]) -> Self {
        let mut recent = Self::default();
        recent.remember(step, &Arc::from(frontier));
        recent
    }
}

/// The step a stored frontier refers to, if it is a reference
/// ([`RecentFrontiers::reference`]) rather than a frontier.
pub fn frontier_reference(stored: &[u8]) -> Option<u64> {
    let (&first, step) = stored.split_first()?;
    let step: [u8; 8] = step.try_into().ok()?;
    (first == REFERENCE).then(|| u64::from_le_bytes(step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontiers_seen_lately_are_referred_to_and_others_stored() {
        let blob = |name: u8| -> Arc<[u8]> { Arc::from(&[1, name][..]) };
        let (a, b, c) = (blob(b'a'), blob(b'b'), blob(b'c'));
        let mut recent = RecentFrontiers::only(0, &a);
        let to = |step: u64| {
            let mut stored = vec![REFERENCE];
            stored.extend_from_slice(&step.to_le_bytes());
            stored
        };
        assert_eq!(recent.reference(&a).map(Vec::from), Some(to(0)));
        assert_eq!(recent.reference(&b), None);
        // Two nodes taking turns: both are remembered.
        recent.remember(1, &b);
        assert_eq!(recent.reference(&a).map(Vec::from), Some(to(0)));
        assert_eq!(recent.reference(&b).map(Vec::from), Some(to(1)));
        // A step referring to one changes nothing.
        recent.remember(2, &a);
        assert_eq!(recent.reference(&a).map(Vec::from), Some(to(0)));
        // A third frontier pushes the oldest out.
        recent.remember(3, &c);
        assert_eq!(recent.reference(&c).map(Vec::from), Some(to(3)));
        assert_eq!(recent.reference(&b).map(Vec::from), Some(to(1)));
        assert_eq!(recent.reference(&a), None);
        assert_eq!(frontier_reference(&to(7)), Some(7));
        assert_eq!(frontier_reference(&a), None, "a blob is not a reference");
        assert_eq!(frontier_reference(&[REFERENCE, 1]), None, "nor is a cut-off one");
        // A long frontier (many `Send` inputs) is stored every time.
        let long: Arc<[u8]> = Arc::from(vec![1; MAX_REMEMBERED + 1]);
        recent.remember(4, &long);
        assert_eq!(recent.reference(&long), None);
        assert_eq!(recent.reference(&c).map(Vec::from), Some(to(3)), "the others stay");
        assert_eq!(RecentFrontiers::only(0, &long).reference(&long), None);
    }
}
