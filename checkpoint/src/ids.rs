//! Identifiers shared by every store.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use ulid::Ulid;

/// Identifier of one run: a ULID, so ids sort by creation time.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(Ulid);

impl RunId {
    /// A fresh id stamped with the current time.
    pub fn new() -> Self {
        Self(Ulid::new())
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
