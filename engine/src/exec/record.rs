//! The engine's stored records. They are converted by hand from runtime
//! types and carry their own schema versions, so a change to a runtime type
//! cannot silently change what is on disk.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::route::Goto;

/// Schema version of [`TaskOutputRecord`].
pub(crate) const TASK_OUTPUT_VERSION: u16 = 1;
/// Schema version of [`FrontierRecord`]: 2 added `fired` and `source`
/// (version 1 records read as neither: no join pending, the loop's own
/// checkpoint); 3 added `by` (older records read as nobody named) and
/// `first_leg` (none); 4 added `honoured` (none); 5 added `origin` (none:
/// not a fork).
pub(crate) const FRONTIER_VERSION: u16 = 5;
/// Schema version of state snapshots (the user's state; its shape is pinned
/// by the graph version).
pub(crate) const STATE_VERSION: u16 = 1;

/// What one task produced: stored as a pending write when it finishes and
/// as part of its step's delta when the step commits. Every field is always
/// written (no skipped fields), so compact codecs can read it back.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct TaskOutputRecord<U> {
    pub(crate) update: Option<U>,
    #[serde(with = "gotos")]
    pub(crate) goto: Vec<Goto>,
}

/// The borrowed twin of [`TaskOutputRecord`], for encoding without copies.
#[derive(Debug, Serialize)]
pub(crate) struct TaskOutputRef<'a, U> {
    pub(crate) update: Option<&'a U>,
    #[serde(serialize_with = "gotos::serialize")]
    pub(crate) goto: &'a [Goto],
}

/// Command targets may carry `Send` inputs (`serde_json::Value`), which
/// compact codecs cannot decode: in those codecs they travel as JSON text.
mod gotos {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::route::Goto;

    pub(super) fn serialize<S: Serializer>(
        gotos: &[Goto],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            gotos.serialize(serializer)
        } else {
            let text = serde_json::to_string(gotos).map_err(serde::ser::Error::custom)?;
            text.serialize(serializer)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Goto>, D::Error> {
        if deserializer.is_human_readable() {
            Vec::<Goto>::deserialize(deserializer)
        } else {
            let text = String::deserialize(deserializer)?;
            serde_json::from_str(&text).map_err(D::Error::custom)
        }
    }
}

/// What runs next, and the bookkeeping that must survive with it. Always
/// stored as JSON (it carries `Send` inputs), whatever the run's codec.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct FrontierRecord {
    pub(crate) tasks: Vec<TaskRecord>,
    /// For each join (declaration order), the sources that have arrived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) joins: Vec<Vec<String>>,
    /// Times each node has run so far (nodes that never ran are absent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) visits: BTreeMap<String, u32>,
    /// The run's settings (absent in records written before they were
    /// stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) settings: Option<RunSettings>,
    /// Joins (declaration order) that fired and whose target has not run
    /// since.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) fired: Vec<u32>,
    /// What wrote this checkpoint, when not the run's loop (absent: `loop`,
    /// or `input` at step 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) source: Option<CheckpointSource>,
    /// Who asked for the state update or fork that wrote this checkpoint,
    /// when they said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) by: Option<String>,
    /// The breakpoints of a queued run's first leg (its `RunConfig`'s),
    /// for the worker that drives it; only in the frontier it was queued
    /// with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) first_leg: Option<LegBreakpoints>,
    /// Nodes whose breakpoint before them the step this checkpoint
    /// superseded had paused at: the next leg's first step runs them
    /// without pausing there again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) honoured: Vec<String>,
    /// Where the run was forked from, carried from step to step (absent:
    /// not a fork).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) origin: Option<ForkOriginRecord>,
}

/// [`ForkOrigin`] as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ForkOriginRecord {
    pub(crate) run: String,
    pub(crate) step: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) by: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) changed: Vec<String>,
}

/// Where a run was forked from: a run started from a checkpoint of another
/// (`Executor::fork`, `fork_as`, `update_state_at`), and what the fork
/// changed there. Carried by every checkpoint of the forked run
/// ([`StateSnapshot::forked_from`](crate::StateSnapshot::forked_from)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ForkOrigin {
    /// The run it was forked from.
    pub run: tollgate_checkpoint::RunId,
    /// The checkpoint of that run it started from.
    pub step: u64,
    /// Who asked for the fork, when they said.
    pub by: Option<String>,
    /// The state's top-level fields whose values the fork changed (sorted;
    /// empty for a fork without an edit).
    pub changed: Vec<String>,
}

impl ForkOrigin {
    pub(crate) fn record(&self) -> ForkOriginRecord {
        ForkOriginRecord {
            run: self.run.to_string(),
            step: self.step,
            by: self.by.clone(),
            changed: self.changed.clone(),
        }
    }

    /// The stored form back; `None` when its run id does not read.
    pub(crate) fn from_record(record: ForkOriginRecord) -> Option<Self> {
        let run = record.run.parse().ok()?;
        Some(Self { run, step: record.step, by: record.by, changed: record.changed })
    }

    /// The top-level fields of `before` and `after` (a state as JSON)
    /// whose values differ.
    pub(crate) fn changed_fields(before: &Value, after: &Value) -> Vec<String> {
        let empty = serde_json::Map::new();
        let (before, after) =
            (before.as_object().unwrap_or(&empty), after.as_object().unwrap_or(&empty));
        let mut changed: Vec<String> = after
            .iter()
            .filter(|(key, value)| before.get(*key) != Some(*value))
            .map(|(key, _)| key.clone())
            .chain(before.keys().filter(|key| !after.contains_key(*key)).cloned())
            .collect();
        changed.sort();
        changed.dedup();
        changed
    }
}

/// Nodes a leg pauses before and after, besides the graph's breakpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LegBreakpoints {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) before: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) after: Vec<String>,
}

/// What wrote a checkpoint, as LangGraph's checkpoint metadata names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CheckpointSource {
    /// The run's input (step 0 of a run started from an input, on a
    /// thread or not).
    Input,
    /// A step the run's loop committed.
    Loop,
    /// A state update written as if a node ran (`Executor::update_state`,
    /// and step 0 of the run `Executor::update_state_at` creates).
    Update,
    /// A copy of another run's checkpoint (step 0 of `Executor::fork` and
    /// of `Executor::migrate`).
    Fork,
}

impl CheckpointSource {
    /// The source of checkpoint `step` stored with `source`.
    pub(crate) fn of(step: u64, source: Option<CheckpointSource>) -> Self {
        source.unwrap_or(if step == 0 { CheckpointSource::Input } else { CheckpointSource::Loop })
    }

    /// Its name: `input`, `loop`, `update` or `fork`.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointSource::Input => "input",
            CheckpointSource::Loop => "loop",
            CheckpointSource::Update => "update",
            CheckpointSource::Fork => "fork",
        }
    }
}

impl std::fmt::Display for CheckpointSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run's settings, stored with it (in every frontier record), so that a
/// process that continues, resumes or recovers the run uses them unless
/// its own `RunConfig` sets them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunSettings {
    pub(crate) max_steps: u64,
    pub(crate) event_cap: u64,
}

/// One scheduled task.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    pub(crate) node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) input: Option<Value>,
}
