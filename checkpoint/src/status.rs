//! Where a run is in its life ([`RunStatus`]), with its names and what
//! each status holds.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunStatus {
    /// Created, not started.
    Queued,
    /// Owned by a process that is executing it.
    Running,
    /// Paused until a person decides.
    AwaitingHitl,
    /// Reached the end. Terminal.
    Completed,
    /// Stopped by an error; the last checkpoint stays and the run can be
    /// continued once the cause is fixed.
    Failed,
    /// Cancelled at a step boundary; can be continued.
    Interrupted,
    /// A person rejected it. Terminal.
    Rejected,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::AwaitingHitl,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Interrupted,
        RunStatus::Rejected,
    ];

    /// `completed` and `rejected` never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Rejected)
    }

    /// The snake_case name used in JSON, the CLI and storage.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::AwaitingHitl => "awaiting_hitl",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Rejected => "rejected",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// The text is not a run status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a run status (queued, running, awaiting_hitl, completed, failed, interrupted, rejected)")]
pub struct InvalidRunStatus {
    /// The rejected text.
    pub text: String,
}

impl FromStr for RunStatus {
    type Err = InvalidRunStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| InvalidRunStatus { text: s.to_owned() })
    }
}

impl RunStatus {
    /// Whether a run in this status holds its thread: `running`, `queued`
    /// or `awaiting_hitl` (a thread runs one leg at a time).
    pub fn holds_thread(self) -> bool {
        matches!(self, RunStatus::Running | RunStatus::Queued | RunStatus::AwaitingHitl)
    }
}
