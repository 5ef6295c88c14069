//! Numbering, storing and streaming a run's events.

use std::sync::Arc;

use tollgate_checkpoint::{EventRecord, RunId};

use crate::event::{format_rfc3339, Clock, Event, EventEnvelope, EventSink, EVENT_VERSION};

/// When a live subscriber sees an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Live {
    /// At once (node events).
    Now,
    /// Once the transition holding it has committed (checkpoints, run end).
    AfterCommit,
}

/// Gives events gap-free sequence numbers, keeps them for the next commit
/// and forwards them to the live sink.
#[derive(Debug)]
pub(crate) struct Emitter {
    run: RunId,
    seq: u64,
    clock: Arc<dyn Clock>,
    sink: Option<EventSink>,
    batch: Vec<EventRecord>,
    deferred: Vec<EventEnvelope>,
}

impl Emitter {
    /// Continues after `last_seq`.
    pub(crate) fn new(
        run: RunId,
        last_seq: u64,
        clock: Arc<dyn Clock>,
        sink: Option<EventSink>,
    ) -> Self {
        Self { run, seq: last_seq, clock, sink, batch: Vec::new(), deferred: Vec::new() }
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Numbers and records one event. `node` is (name, instance id).
    pub(crate) fn emit(
        &mut self,
        node: Option<(&str, String)>,
        event: Event,
        live: Live,
    ) -> Result<(), serde_json::Error> {
        let (node, node_id) = match node {
            Some((name, id)) => (Some(name.to_owned()), Some(id)),
            None => (None, None),
        };
        let envelope = EventEnvelope {
            v: EVENT_VERSION,
            run_id: self.run,
            seq: self.seq + 1,
            ts: format_rfc3339(self.clock.now_ms()),
            node,
            node_id,
            event,
        };
        let json = serde_json::to_string(&envelope)?;
        self.seq += 1;
        self.batch.push(EventRecord { seq: self.seq, json });
        if let Some(sink) = &self.sink {
            match live {
                Live::Now => sink.send(envelope),
                Live::AfterCommit => self.deferred.push(envelope),
            }
        }
        Ok(())
    }

    /// The events recorded since the last commit, for the next transition.
    pub(crate) fn take_batch(&mut self) -> Vec<EventRecord> {
        std::mem::take(&mut self.batch)
    }

    /// Sends the events held back until their commit.
    pub(crate) fn committed(&mut self) {
        if let Some(sink) = &self.sink {
            for envelope in self.deferred.drain(..) {
                sink.send(envelope);
            }
        }
    }
}

/// The instance id of a task: `name:step.task`.
pub(crate) fn node_id(name: &str, step: u64, task: u32) -> String {
    format!("{name}:{step}.{task}")
}
