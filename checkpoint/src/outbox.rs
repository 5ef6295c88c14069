//! The outbox: work a server owes to later, kept in the runs' database so
//! that a server stopped before doing it leaves it to the next one. A
//! run waiting for its thread or its time (LangGraph's
//! `multitask_strategy="enqueue"` and `after_seconds`), a webhook waiting
//! for its run to settle. The store keeps entries and their leases; what
//! an entry means is its kind's, in its JSON body.

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
        }
    }

    /// Whether a process holds it at `now_ms` (its lease runs past then).
    pub fn is_held(&self, now_ms: i64) -> bool {
        self.lease_until_ms > now_ms
    }
}

/// Which entries [`Store::list_outbox`](crate::Store::list_outbox) reads.
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
    /// At most this many.
    pub limit: u64,
}

impl OutboxQuery {
    /// Up to `limit` entries of `kind`, every one.
    pub fn new(kind: impl Into<String>, limit: u64) -> Self {
        Self { kind: kind.into(), thread: None, due_by_ms: None, limit }
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

    /// Whether `entry` is one of them (the reference every store's SQL
    /// matches).
    pub fn matches(&self, entry: &OutboxEntry) -> bool {
        entry.kind == self.kind
            && self.thread.as_ref().is_none_or(|thread| entry.thread.as_ref() == Some(thread))
            && self.due_by_ms.is_none_or(|now| entry.due_ms <= now)
    }
}

impl OutboxEntry {
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
