//! The memory store's outbox gates: checked against its runs when read
//! (the SQL stores open them by trigger; the outcome is the same).

use super::Inner;
use crate::outbox::{OutboxGate, OUTBOX_NEVER};

impl Inner {
    /// Whether `gate` is shut now: its run exists and keeps it shut, or
    /// does not exist yet while an entry with its id is due to start it.
    pub(super) fn shut(&self, gate: &OutboxGate) -> bool {
        match self.runs.get(&gate.run) {
            Some(stored) => {
                let record = stored.record();
                gate.blocks(record.status, record.last_seq)
            }
            None => self
                .outbox
                .get(&gate.run.to_string())
                .is_some_and(|pending| pending.due_ms < OUTBOX_NEVER),
        }
    }

    /// Opens every gate that is no longer shut.
    pub(super) fn open_gates(&mut self) {
        let open: Vec<String> = self
            .outbox
            .values()
            .filter(|entry| entry.gate.as_ref().is_some_and(|gate| !self.shut(gate)))
            .map(|entry| entry.id.clone())
            .collect();
        for id in open {
            if let Some(entry) = self.outbox.get_mut(&id) {
                entry.gate = None;
            }
        }
    }
}
