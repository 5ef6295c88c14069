//! What listings read and return: which runs ([`RunFilter`]), pages and
//! their cursors, the rows that could not be read, thread records, and
//! the count of runs waiting for a decision.

use std::fmt;

use crate::ids::RunId;
use crate::record::RunRecord;
use crate::status::RunStatus;

/// Runs waiting for a decision ([`RunStore::waiting`](crate::RunStore::waiting)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waiting {
    /// Runs with status `awaiting_hitl`.
    pub runs: u64,
    /// The earliest time one of them paused (its last transition),
    /// milliseconds since the Unix epoch; `None` when none waits.
    pub oldest_since_ms: Option<i64>,
}

/// Which runs to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs of this graph name.
    pub graph: Option<String>,
    /// Only runs of this thread.
    pub thread: Option<String>,
}

impl RunFilter {
    /// The conditions that are set, as (field, value) pairs: `status`,
    /// `graph`, `thread`, each a run must equal. For stores that build
    /// queries: a new filter field appears here, for every store at once.
    pub fn equalities(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        [
            ("status", self.status.map(|status| status.as_str().to_owned())),
            ("graph", self.graph.clone()),
            ("thread", self.thread.clone()),
        ]
        .into_iter()
        .filter_map(|(field, value)| value.map(|value| (field, value)))
    }
}

/// An opaque position in a run listing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor(String);

impl Cursor {
    /// The cursor that continues after `run` in newest-first order.
    pub fn after(run: RunId) -> Self {
        Self(run.to_string())
    }

    /// The run this cursor continues after.
    pub fn last_run(&self) -> Result<RunId, crate::StoreError> {
        self.0.parse().map_err(|_| crate::StoreError::InvalidCursor { cursor: self.0.clone() })
    }

    /// Rebuilds a cursor from its text (as printed by `Display`).
    pub fn from_text(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Page size and position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// Most runs to return.
    pub limit: u64,
    /// Continue after this cursor; `None` starts at the newest run.
    pub cursor: Option<Cursor>,
}

impl Default for PageRequest {
    fn default() -> Self {
        Self { limit: 20, cursor: None }
    }
}

/// One page of runs, newest first.
#[derive(Debug, Clone)]
pub struct RunPage {
    /// The runs.
    pub runs: Vec<RunRecord>,
    /// Rows of this page that could not be read as runs (an unknown
    /// status, a damaged failure record): reported, not fatal to the rest.
    pub damaged: Vec<DamagedRun>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// A stored run row that does not read as a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRun {
    /// The row's id, as stored.
    pub id: String,
    /// What is wrong with it.
    pub reason: String,
}

impl RunPage {
    /// A page from up to `limit + 1` runs read newest first: the extra run,
    /// if any, only says that another page follows.
    pub fn from_overfetch(runs: Vec<RunRecord>, limit: u64) -> Self {
        Self::from_rows(runs.into_iter().map(Ok).collect(), limit)
    }

    /// [`RunPage::from_overfetch`] for rows some of which may be damaged:
    /// they take their place in the page and the cursor like any run.
    pub fn from_rows(mut rows: Vec<Result<RunRecord, DamagedRun>>, limit: u64) -> Self {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let next = if rows.len() > limit {
            rows.truncate(limit);
            rows.last().map(|row| match row {
                Ok(record) => Cursor::after(record.id),
                Err(damaged) => Cursor::from_text(damaged.id.clone()),
            })
        } else {
            None
        };
        let (mut runs, mut damaged) = (Vec::new(), Vec::new());
        for row in rows {
            match row {
                Ok(record) => runs.push(record),
                Err(row) => damaged.push(row),
            }
        }
        Self { runs, damaged, next }
    }
}

/// A thread's own record: a thread exists once created (before any run on
/// it) with its metadata, as LangGraph's threads do. Runs name their
/// thread by id whether it has a record or not.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ThreadRecord {
    /// The thread's id (the `thread` of its runs).
    pub id: String,
    /// When it was created, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// When its metadata last changed.
    pub updated_at_ms: i64,
    /// Its metadata: a JSON object.
    pub metadata: serde_json::Value,
}

impl ThreadRecord {
    /// Thread `id` created at `at_ms` with `metadata`.
    pub fn new(id: impl Into<String>, at_ms: i64, metadata: serde_json::Value) -> Self {
        Self { id: id.into(), created_at_ms: at_ms, updated_at_ms: at_ms, metadata }
    }
}
