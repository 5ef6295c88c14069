//! Numbering, storing and streaming a run's events.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tollgate_checkpoint::{EventRecord, RunId};

use crate::event::{
    format_rfc3339, push_padded, Clock, Event, EventEnvelope, EventSink, EVENT_VERSION,
};

/// Default cap of stored events per run: past it, detail events
/// (`model_delta`, `tool_delta`, `middleware_*`, `custom`) are dropped (an
/// `events_capped` event says so); run, node, checkpoint, interrupt, model
/// and tool call events are always kept.
pub const DEFAULT_EVENT_CAP: u64 = 10_000;

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
///
/// Events are written straight to JSON in the envelope's field order (the
/// same text `serde_json` makes of an [`EventEnvelope`]), with the run id
/// and the timestamp formatted once and reused: this is on every step's
/// path.
///
/// The driver and the leg's running nodes (harness events) share one
/// emitter, so its counters sit behind a mutex; every lock is short and
/// uncontended in the common case.
#[derive(Debug)]
pub(crate) struct Emitter {
    run: RunId,
    /// `{"v":1,"run_id":"…","seq":` — the same for every event of the run.
    prefix: String,
    clock: Arc<dyn Clock>,
    sink: Option<EventSink>,
    /// Stored events after which detail events are dropped.
    cap: u64,
    inner: Mutex<Inner>,
    /// Held while a batch is taken and written (a step's commit, a
    /// subgraph's progress): writes of one run reach the store in the
    /// order their events were numbered.
    pub(crate) writes: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Inner {
    seq: u64,
    /// The last timestamp formatted, and its text.
    ts: (i64, String),
    /// The time events are stamped with, refreshed by [`Emitter::tick`]
    /// (reading the clock once per phase of a step, not once per event).
    now: i64,
    batch: Vec<EventRecord>,
    deferred: Vec<EventEnvelope>,
    /// This leg has recorded its `events_capped` marker.
    capped: bool,
    /// `node_completed` events of the batch (seq, the update's JSON text)
    /// whose update is stored once, in the step's record, if the step
    /// commits ([`Emitter::take_batch_of_step`]).
    left_out: Vec<(u64, String)>,
}

impl Emitter {
    /// Continues after `last_seq`.
    pub(crate) fn new(
        run: RunId,
        last_seq: u64,
        clock: Arc<dyn Clock>,
        sink: Option<EventSink>,
    ) -> Self {
        let prefix = format!("{{\"v\":{EVENT_VERSION},\"run_id\":\"{run}\",\"seq\":");
        let now = clock.now_ms();
        let inner = Inner {
            seq: last_seq,
            ts: (i64::MIN, String::new()),
            now,
            batch: Vec::new(),
            deferred: Vec::new(),
            capped: false,
            left_out: Vec::new(),
        };
        Self {
            run,
            prefix,
            clock,
            sink,
            cap: DEFAULT_EVENT_CAP,
            inner: Mutex::new(inner),
            writes: tokio::sync::Mutex::new(()),
        }
    }

    /// Drops detail events once `cap` events are stored.
    pub(crate) fn with_cap(mut self, cap: u64) -> Self {
        self.cap = cap;
        self
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the counters half
        // updated (each update is one assignment after the fallible work).
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The time of the current phase (see [`Emitter::tick`]).
    pub(crate) fn now_ms(&self) -> i64 {
        self.lock().now
    }

    /// Reads the clock: later events and records carry this time.
    pub(crate) fn tick(&self) -> i64 {
        let now = self.clock.now_ms();
        self.lock().now = now;
        now
    }

    /// The run's clock.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Numbers and records one event. `node` is (name, instance id).
    pub(crate) fn emit(
        &self,
        node: Option<(&str, &str)>,
        event: Event,
        live: Live,
    ) -> Result<(), serde_json::Error> {
        let mut inner = self.lock();
        if event.is_detail() && inner.seq >= self.cap {
            if inner.capped {
                return Ok(());
            }
            inner.capped = true;
            drop(inner);
            self.emit(None, Event::EventsCapped { cap: self.cap }, Live::Now)?;
            return Ok(());
        }
        let now = inner.now;
        if inner.ts.0 != now {
            inner.ts = (now, format_rfc3339(now));
        }
        let seq = inner.seq + 1;
        let mut json = String::with_capacity(self.prefix.len() + 160);
        json.push_str(&self.prefix);
        let _ = write!(json, "{seq},\"ts\":\"{}\",", inner.ts.1);
        let mut bytes = json.into_bytes();
        if let Some((name, id)) = node {
            bytes.extend_from_slice(b"\"node\":");
            serde_json::to_writer(&mut bytes, name)?;
            bytes.extend_from_slice(b",\"node_id\":");
            serde_json::to_writer(&mut bytes, id)?;
            bytes.push(b',');
        }
        // The event is `{"event_type":…}`: splice its fields into the
        // envelope by dropping its opening brace.
        let body = bytes.len();
        serde_json::to_writer(&mut bytes, &event)?;
        bytes.remove(body);
        let json = String::from_utf8(bytes).expect("serde_json writes UTF-8");
        inner.seq = seq;
        inner.batch.push(EventRecord { seq, json });
        if let Some(sink) = &self.sink {
            let envelope = EventEnvelope {
                v: EVENT_VERSION,
                run_id: self.run,
                seq,
                ts: inner.ts.1.clone(),
                node: node.map(|(name, _)| name.to_owned()),
                node_id: node.map(|(_, id)| id.to_owned()),
                event,
            };
            match live {
                // Sent under the lock, so live order is seq order.
                Live::Now => sink.send(envelope),
                Live::AfterCommit => inner.deferred.push(envelope),
            }
        }
        Ok(())
    }

    /// The events recorded since the last commit, for the next transition.
    pub(crate) fn take_batch(&self) -> Vec<EventRecord> {
        let mut inner = self.lock();
        inner.left_out.clear();
        std::mem::take(&mut inner.batch)
    }

    /// The last event emitted is a `node_completed` whose update (`text`,
    /// its JSON) the step's record holds too: stored once if the step
    /// commits.
    pub(crate) fn update_in_step(&self, text: String) {
        let mut inner = self.lock();
        let seq = inner.seq;
        if inner.batch.last().is_some_and(|last| last.seq == seq) {
            inner.left_out.push((seq, text));
        }
    }

    /// The batch, for the transition that commits a step: the updates of
    /// its `node_completed` events are left to the step's record (the
    /// store puts them back when it reads the events).
    pub(crate) fn take_batch_of_step(&self) -> Vec<EventRecord> {
        let mut inner = self.lock();
        let left_out = std::mem::take(&mut inner.left_out);
        let mut batch = std::mem::take(&mut inner.batch);
        for (seq, text) in left_out {
            if let Some(event) = batch.iter_mut().find(|event| event.seq == seq) {
                event.leave_out_update(&text);
            }
        }
        batch
    }

    /// Sends the events held back until their commit.
    pub(crate) fn committed(&self) {
        if let Some(sink) = &self.sink {
            let deferred = std::mem::take(&mut self.lock().deferred);
            for envelope in deferred {
                sink.send(envelope);
            }
        }
    }
}

/// The instance id of a task: `name:step.task`.
pub(crate) fn node_id(name: &str, step: u64, task: u32) -> String {
    // Without `format!`: two of these per task, on every step.
    let mut id = String::with_capacity(name.len() + 12);
    id.push_str(name);
    id.push(':');
    push_padded(&mut id, step, 1);
    id.push('.');
    push_padded(&mut id, u64::from(task), 1);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_name_step_and_task() {
        assert_eq!(node_id("ask", 0, 0), "ask:0.0");
        assert_eq!(node_id("a:b", 12_345, u32::MAX), format!("a:b:12345.{}", u32::MAX));
        assert_eq!(node_id("", u64::MAX, 10), format!(":{}.10", u64::MAX));
    }
    use crate::event::SystemClock;

    #[test]
    fn hand_written_envelope_equals_the_serde_one() {
        let (sink, mut stream) = EventSink::channel();
        let emitter = Emitter::new(RunId::new(), 41, Arc::new(SystemClock), Some(sink));
        let events = [
            (Some(("a \"quoted\" node", "a:1.0")), Event::NodeStarted { step: 1, task: 0 }),
            (None, Event::CheckpointSaved { step: 1, tasks: 1, snapshot: false }),
        ];
        for (node, event) in events {
            emitter.emit(node, event, Live::Now).unwrap();
        }
        for record in emitter.take_batch() {
            let live = stream.try_recv().expect("sent live");
            assert_eq!(record.json, serde_json::to_string(&live).unwrap());
            assert_eq!(record.seq, live.seq);
        }
    }
}
