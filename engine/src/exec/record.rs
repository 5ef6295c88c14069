//! The engine's stored records. They are converted by hand from runtime
//! types and carry their own schema versions, so a change to a runtime type
//! cannot silently change what is on disk.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::route::Goto;

/// Schema version of [`TaskOutputRecord`].
pub(crate) const TASK_OUTPUT_VERSION: u16 = 1;
/// Schema version of [`FrontierRecord`].
pub(crate) const FRONTIER_VERSION: u16 = 1;
/// Schema version of state snapshots (the user's state; its shape is pinned
/// by the graph version).
pub(crate) const STATE_VERSION: u16 = 1;

/// What one task produced: stored as a pending write when it finishes and
/// as part of its step's delta when the step commits.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct TaskOutputRecord<U> {
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub(crate) update: Option<U>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) goto: Vec<Goto>,
}

fn none<U>() -> Option<U> {
    None
}

/// The borrowed twin of [`TaskOutputRecord`], for encoding without copies.
#[derive(Debug, Serialize)]
pub(crate) struct TaskOutputRef<'a, U> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) update: Option<&'a U>,
    #[serde(skip_serializing_if = "<[Goto]>::is_empty")]
    pub(crate) goto: &'a [Goto],
}

/// What runs next, and the bookkeeping that must survive with it.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct FrontierRecord {
    pub(crate) tasks: Vec<TaskRecord>,
    /// For each join (declaration order), the sources that have arrived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) joins: Vec<Vec<String>>,
    /// Times each node has run so far (nodes that never ran are absent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) visits: BTreeMap<String, u32>,
}

/// One scheduled task.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    pub(crate) node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) input: Option<Value>,
}
