//! The outbox: work a server owes to later, kept in the runs' database so
//! that a server stopped before doing it leaves it to the next one. A
//! run waiting for its thread or its time (LangGraph's
//! `multitask_strategy="enqueue"` and `after_seconds`), a webhook waiting
//! for its run to settle. The store keeps entries and their leases; what
//! an entry means is its kind's, in its JSON body.
//!
//! An entry that cannot proceed until a run settles is *gated* on that
//! run ([`OutboxStore::gate_outbox`](crate::OutboxStore::gate_outbox)): listings of
//! what is ready ([`OutboxQuery::ready`]) pass it over, through an index,
//! until the store opens its gate in the same transaction as the run's
//! status change (or its deletion, or the end of the pending entry it
//! waits for). So any number of entries that cannot proceed cost a
//! reader nothing and never hide one that can.

use crate::ids::RunId;

/// The due time of an entry that never comes due again (cancelled,
/// failed; kept to be read): listings of what is due never find it.
pub const OUTBOX_NEVER: i64 = i64::MAX;

/// What a gated entry waits for: run `run` to settle past `after_seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxGate {
    /// The run it waits for.
    pub run: RunId,
    /// Which of the run's statuses open the gate.
    pub opens: GateOpens,
    /// The gate opens only once the run's last event is past this
    /// sequence number (a run continued from a pause: not the pause it
    /// was continued from). `None`: whatever its last event.
    pub after_seq: Option<u64>,
}

/// Which statuses of its run open an [`OutboxGate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateOpens {
    /// Any but `running` and `queued`: the run settled, paused for a
    /// decision or ended (a webhook).
    Settled,
    /// Any but `running`, `queued` and `awaiting_hitl`: the run no longer
    /// holds its thread (a run waiting for its thread).
    Ended,
}

impl OutboxGate {
    /// A gate on `run` that `opens` past `after_seq` (`None`: any).
    pub fn new(run: RunId, opens: GateOpens, after_seq: Option<u64>) -> Self {
        Self { run, opens, after_seq }
    }

    /// A gate that opens once `run` settles ([`GateOpens::Settled`]) past
    /// `after_seq`.
    pub fn settled(run: RunId, after_seq: u64) -> Self {
        Self { run, opens: GateOpens::Settled, after_seq: Some(after_seq) }
    }

    /// A gate that opens once `run` no longer holds its thread
    /// ([`GateOpens::Ended`]).
    pub fn ended(run: RunId) -> Self {
        Self { run, opens: GateOpens::Ended, after_seq: None }
    }

    /// As a store keeps it: the run's id, whether it opens only once the
    /// run ended ([`GateOpens::Ended`]), and the seq the run's last event
    /// must pass (-1: any).
    pub fn columns(&self) -> (String, bool, i64) {
        let seq = self.after_seq.map_or(-1, |seq| i64::try_from(seq).unwrap_or(i64::MAX));
        (self.run.to_string(), self.opens == GateOpens::Ended, seq)
    }

    /// A gate a store kept ([`columns`](Self::columns)) for entry `entry`
    /// read back (`run` none: not gated).
    pub fn from_columns(
        entry: &str,
        run: Option<&str>,
        ended: bool,
        seq: i64,
    ) -> Result<Option<Self>, crate::StoreError> {
        let Some(run) = run else { return Ok(None) };
        let run = run.parse().map_err(|_| crate::StoreError::Backend {
            source: format!("outbox entry `{entry}`: its gate names `{run}`, not a run id").into(),
        })?;
        let opens = if ended { GateOpens::Ended } else { GateOpens::Settled };
        Ok(Some(Self { run, opens, after_seq: u64::try_from(seq).ok() }))
    }

    /// Whether a run of `status` whose last event is `last_seq` keeps the
    /// gate shut (the reference every store's SQL matches).
    pub fn blocks(&self, status: crate::status::RunStatus, last_seq: u64) -> bool {
        use crate::status::RunStatus;
        matches!(status, RunStatus::Running | RunStatus::Queued)
            || (self.opens == GateOpens::Ended && status == RunStatus::AwaitingHitl)
            || self.after_seq.is_some_and(|after| last_seq <= after)
    }
}

/// One entry of the outbox.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OutboxEntry {
    /// Unique id (a pending run's is the id its run will have).
    pub id: String,
    /// What it is (`run`, `webhook`): listings ask for one kind.
    pub kind: String,
    /// The thread it belongs to, if any: a thread's entries are listed
    /// together, and deleted with it.
    pub thread: Option<String>,
    /// When it was added, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Not taken before this time ([`i64::MAX`]: never again; kept to be
    /// read).
    pub due_ms: i64,
    /// Taken by a process until this time (0: free).
    pub lease_until_ms: i64,
    /// How many times it was taken.
    pub attempts: u32,
    /// What it is, as its kind's own versioned JSON record.
    pub body: serde_json::Value,
    /// What it waits for, if anything ([`OutboxStore::gate_outbox`](crate::OutboxStore::gate_outbox)):
    /// shut, it is not [ready](OutboxQuery::ready).
    pub gate: Option<OutboxGate>,
}

impl OutboxEntry {
    /// A free entry of `kind`, due at `due_ms`, added at `at_ms`.
    pub fn new(
        id: impl Into<String>,
        kind: impl Into<String>,
        thread: Option<String>,
        at_ms: i64,
        due_ms: i64,
        body: serde_json::Value,
    ) -> Self {
        Self {
            id: id.into(),
            kind: kind.into(),
            thread,
            created_at_ms: at_ms,
            due_ms,
            lease_until_ms: 0,
            attempts: 0,
            body,
            gate: None,
        }
    }

    /// Whether a process holds it at `now_ms` (its lease runs past then).
    pub fn is_held(&self, now_ms: i64) -> bool {
        self.lease_until_ms > now_ms
    }
}

/// Which entries [`OutboxStore::list_outbox`](crate::OutboxStore::list_outbox) reads.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxQuery {
    /// Their kind.
    pub kind: String,
    /// Only a thread's.
    pub thread: Option<String>,
    /// Only those due by this time (leased or not: a caller keeping
    /// entries in order sees those another process holds).
    pub due_by_ms: Option<i64>,
    /// Only those ready: due, and not [gated](OutboxEntry::gate) (held or
    /// not, as with `due_by_ms`).
    pub ready: bool,
    /// Only those after this `(due_ms, id)`, in listing order: the next
    /// page of a listing.
    pub after: Option<(i64, String)>,
    /// At most this many.
    pub limit: u64,
}

impl OutboxQuery {
    /// Up to `limit` entries of `kind`, every one.
    pub fn new(kind: impl Into<String>, limit: u64) -> Self {
        Self { kind: kind.into(), thread: None, due_by_ms: None, ready: false, after: None, limit }
    }

    /// Only the entries of `thread`.
    pub fn thread(mut self, thread: impl Into<String>) -> Self {
        self.thread = Some(thread.into());
        self
    }

    /// Only the entries due by `now_ms`.
    pub fn due_by(mut self, now_ms: i64) -> Self {
        self.due_by_ms = Some(now_ms);
        self
    }

    /// Only the entries ready at `now_ms`: due by then and not gated.
    pub fn ready(mut self, now_ms: i64) -> Self {
        self.due_by_ms = Some(now_ms);
        self.ready = true;
        self
    }

    /// Only the entries listed after `entry` (by due time, then id).
    pub fn after(mut self, entry: &OutboxEntry) -> Self {
        self.after = Some((entry.due_ms, entry.id.clone()));
        self
    }

    /// Whether `entry` is one of them (the reference every store's SQL
    /// matches).
    pub fn matches(&self, entry: &OutboxEntry) -> bool {
        entry.kind == self.kind
            && self.thread.as_ref().is_none_or(|thread| entry.thread.as_ref() == Some(thread))
            && self.due_by_ms.is_none_or(|now| entry.due_ms <= now)
            && (!self.ready || entry.gate.is_none())
            && self.after.as_ref().is_none_or(|(due, id)| (entry.due_ms, &entry.id) > (*due, id))
    }
}

impl OutboxEntry {
    /// Its gate as a store keeps it ([`OutboxGate::columns`]; not gated:
    /// no run, `false`, -1).
    pub fn gate_columns(&self) -> (Option<String>, bool, i64) {
        match self.gate.as_ref().map(OutboxGate::columns) {
            Some((run, ended, seq)) => (Some(run), ended, seq),
            None => (None, false, -1),
        }
    }

    /// Its body as a store keeps it: JSON text.
    pub fn body_text(&self) -> Result<String, crate::StoreError> {
        serde_json::to_string(&self.body).map_err(|error| crate::StoreError::Backend {
            source: format!("outbox entry `{}`: {error}", self.id).into(),
        })
    }

    /// A body a store kept (`text`) read back for entry `id`.
    pub fn body_from_text(id: &str, text: &str) -> Result<serde_json::Value, crate::StoreError> {
        serde_json::from_str(text).map_err(|error| crate::StoreError::Backend {
            source: format!("outbox entry `{id}`: its body is not JSON: {error}").into(),
        })
    }
}
