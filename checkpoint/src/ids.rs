//! Identifiers shared by every store.

use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use ulid::Ulid;

/// Identifier of one run: a ULID, so ids sort by creation time. Ids made by
/// one process increase strictly, even within one millisecond, so runs it
/// starts list in the order it started them; across processes, runs of the
/// same millisecond sort in no particular order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(Ulid);

impl RunId {
    /// A fresh id stamped with the current time, greater than every id this
    /// process made before.
    pub fn new() -> Self {
        static GENERATOR: Mutex<Option<ulid::Generator>> = Mutex::new(None);
        let mut generator = GENERATOR.lock().unwrap_or_else(PoisonError::into_inner);
        let id = generator.get_or_insert_with(ulid::Generator::new).generate();
        // The random part overflows only after 2^80 ids in one millisecond.
        Self(id.unwrap_or_else(|_| Ulid::new()))
    }

    /// An id built from a millisecond timestamp and 80 random bits; used by
    /// deterministic id generators.
    pub fn from_parts(timestamp_ms: u64, random: u128) -> Self {
        Self(Ulid::from_parts(timestamp_ms, random))
    }

    /// The millisecond timestamp encoded in the id.
    pub fn timestamp_ms(&self) -> u64 {
        self.0.timestamp_ms()
    }
}

impl RunId {
    /// The id's 26 characters, written into `buf` (no allocation: event
    /// lines are compacted against it on every commit).
    pub(crate) fn text_in<'b>(&self, buf: &'b mut [u8; ulid::ULID_LEN]) -> &'b str {
        self.0.array_to_str(buf)
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RunId({})", self.0)
    }
}

/// The text was not a valid run id (26 characters of Crockford base32).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a run id (expected 26 characters of Crockford base32)")]
pub struct InvalidRunId {
    /// The rejected text.
    pub text: String,
}

impl FromStr for RunId {
    type Err = InvalidRunId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ulid::from_string(s).map(Self).map_err(|_| InvalidRunId { text: s.to_owned() })
    }
}

/// Deterministic address of one task of one super-step: the task's position
/// in the step's frontier and the node it runs. Together with the run id it
/// names the task across retries, crashes and resumes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskKey {
    /// Super-step the task belongs to (1 is the first step after the input).
    pub step: u64,
    /// Position of the task in that step's frontier.
    pub index: u32,
    /// Name of the node the task runs.
    pub node: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_one_process_increase_strictly_even_within_a_millisecond() {
        let ids: Vec<RunId> = (0..10_000).map(|_| RunId::new()).collect();
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]));
        let same_ms = ids.windows(2).filter(|p| p[0].timestamp_ms() == p[1].timestamp_ms()).count();
        assert!(same_ms > 0, "the test made ids within one millisecond");
    }
}
