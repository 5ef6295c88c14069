//! Stored events: a run's log as lines of JSON, and the form a committed
//! step's large updates take in it (left to the step's record, put back
//! when read).

use crate::codec::{Blob, CodecError};
use crate::ids::RunId;
use crate::record::TaskUpdate;

/// One stored event: its per-run sequence number and its JSON envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// Gap-free per run, starting at 1.
    pub seq: u64,
    /// The event envelope as one line of JSON.
    pub json: String,
}

impl EventRecord {
    /// Consecutive events as one text: their JSON lines joined by newlines
    /// (a JSON line never holds a raw newline). Stores keep a transition's
    /// events this way, with the first one's sequence number.
    pub fn join_lines(events: &[EventRecord]) -> String {
        let mut lines = String::with_capacity(events.iter().map(|e| e.json.len() + 1).sum());
        for (i, event) in events.iter().enumerate() {
            if i > 0 {
                lines.push('\n');
            }
            lines.push_str(&event.json);
        }
        lines
    }

    /// Splits what [`EventRecord::join_lines`] made, numbering from
    /// `first_seq`, and appends the events with `seq > after` to `out`.
    pub fn split_lines(first_seq: u64, lines: &str, after: u64, out: &mut Vec<EventRecord>) {
        if lines.is_empty() {
            return;
        }
        for (offset, json) in lines.split('\n').enumerate() {
            let seq = first_seq + offset as u64;
            if seq > after {
                out.push(EventRecord { seq, json: json.to_owned() });
            }
        }
    }
}

/// What ends a stored `node_completed` line whose update was left out: the
/// update is in its step's record (a task's update is written once, not
/// twice). Only the engine writes it, at the very end of the line, where no
/// value of the event can put it.
const UPDATE_IN_STEP: &str = ",\"update_in_step\":true}";

impl EventRecord {
    /// Leaves the `update` of a `node_completed` line out (`null` in its
    /// place, and a marker at the end): the update is stored once, in its
    /// step's record, and [`EventRecord::restore_update`] puts it back when
    /// the line is read. `update` is the update's JSON text exactly as the
    /// line holds it. Returns whether the line was changed (it is left as
    /// it is unless it holds that text right after its first `"update":`).
    pub fn leave_out_update(&mut self, update: &str) -> bool {
        const KEY: &str = "\"update\":";
        let Some(at) = self.json.find(KEY).map(|at| at + KEY.len()) else { return false };
        if !self.json[at..].starts_with(update) || !self.json.ends_with('}') {
            return false;
        }
        self.json.replace_range(at..at + update.len(), "null");
        self.json.truncate(self.json.len() - 1);
        self.json.push_str(UPDATE_IN_STEP);
        true
    }

    /// The task whose update this line left to its step's record, if it
    /// did ([`EventRecord::leave_out_update`]).
    pub fn update_left_out(&self) -> Option<u32> {
        if !self.json.ends_with(UPDATE_IN_STEP) {
            return None;
        }
        let at = self.json.find("\"task\":")? + "\"task\":".len();
        let digits = self.json[at..].bytes().take_while(u8::is_ascii_digit).count();
        self.json[at..at + digits].parse().ok()
    }

    /// Puts back the update a line left out, from `stored`: the task's
    /// update as its step's record holds it (a JSON record with an
    /// `update` field). The line is then byte for byte what the engine
    /// emitted.
    pub fn restore_update(&mut self, stored: &Blob) -> Result<(), CodecError> {
        let record: serde_json::Value = stored.decode()?;
        let update = record.get("update").cloned().unwrap_or(serde_json::Value::Null);
        let text = update.to_string();
        const KEY: &str = "\"update\":null";
        let Some(at) = self.json.find(KEY) else { return Ok(()) };
        let at = at + KEY.len() - "null".len();
        self.json.replace_range(at..at + "null".len(), &text);
        self.json.truncate(self.json.len() - UPDATE_IN_STEP.len());
        self.json.push('}');
        Ok(())
    }
}

/// Puts back the updates that `events` (lines of step `step`) left to the
/// step's record, from `updates`, that record's updates: what a store does
/// to the lines of a step before handing them out (see
/// [`EventRecord::leave_out_update`]).
pub fn restore_updates(
    run: RunId,
    step: u64,
    events: &mut [EventRecord],
    updates: &[TaskUpdate],
) -> Result<(), crate::error::StoreError> {
    for event in events {
        let Some(task) = event.update_left_out() else { continue };
        let stored = updates.iter().find(|u| u.task.index == task).ok_or_else(|| {
            crate::error::StoreError::Backend {
                source: format!(
                    "run {run}: event {} left its update to task {task} of step {step}, \
                     which has none",
                    event.seq
                )
                .into(),
            }
        })?;
        event
            .restore_update(&stored.update)
            .map_err(|source| crate::error::StoreError::CorruptCheckpoint { run, step, source })?;
    }
    Ok(())
}
