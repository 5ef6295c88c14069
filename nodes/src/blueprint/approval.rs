//! A tool's `approval` in a blueprint: `true`/`false`, or
//! `{"reviewers": [GROUP, ...]}`.

use serde::Deserialize;

/// A tool's `approval`: `true`/`false`, or `{"reviewers": [GROUP, ...]}`
/// (approval needed, decided by members of those groups).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum Approval {
    Needed(bool),
    ByReviewers { reviewers: Vec<String> },
}

impl Default for Approval {
    fn default() -> Self {
        Approval::Needed(false)
    }
}

impl Approval {
    /// Whether a call waits for approval.
    pub(super) fn needed(&self) -> bool {
        matches!(self, Approval::Needed(true) | Approval::ByReviewers { .. })
    }

    /// The groups that decide it (none: whoever may decide the run).
    pub(super) fn reviewers(&self) -> &[String] {
        match self {
            Approval::ByReviewers { reviewers } => reviewers,
            Approval::Needed(_) => &[],
        }
    }
}
