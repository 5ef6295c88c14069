//! What the store's connection knows of the runs it commits: each run's
//! writer state ([`Writer`]) as of its last commit on this connection, so
//! that a step's commit need not read it back (four B-tree searches on
//! every step: the runs row, and the last steps row through its index).
//!
//! Knowledge is kept only while it cannot be stale:
//! - another connection (another process, another store on the file) that
//!   commits changes `PRAGMA data_version`, which a write transaction
//!   checks before it first uses what is known (the write lock is held, so
//!   nothing can change it after): then everything is forgotten;
//! - every other kind of write of this connection forgets what it may
//!   change ([`Touches`]) as it runs (a run's creation and a decision then
//!   stage the state they wrote, like a commit);
//! - a write's new state is staged and becomes known only once its
//!   transaction commits (a rolled-back batch leaves nothing behind).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use rusqlite::Connection;

use crate::frontier::RecentFrontiers;
use crate::ids::RunId;
use crate::status::RunStatus;

/// What a writer checks before a commit: the run's status, epoch, number,
/// effective step and last event, and its lease.
#[derive(Debug, Clone, Copy)]
pub(super) struct Writer {
    pub(super) status: RunStatus,
    pub(super) epoch: u64,
    pub(super) num: i64,
    pub(super) step: u64,
    pub(super) last_seq: u64,
    pub(super) lease_until_ms: Option<i64>,
}

/// Which runs' writer state a write may change.
#[derive(Debug, Clone, Copy)]
pub(super) enum Touches {
    /// This run's (forgotten as the write runs).
    Run(RunId),
    /// None: the write leaves runs alone, or keeps what is known itself
    /// (a commit, [`Writers::stage`]).
    NoRun,
}

/// A run's writer state as of its last commit here.
#[derive(Debug, Clone)]
pub(super) struct Known {
    pub(super) writer: Writer,
    /// The run has no pending writes for its next step: the last commit
    /// stored a step and dropped them, or the run was just created; only a
    /// write that forgets the run can store some.
    pub(super) settled: bool,
    /// The last frontiers its steps stored in full (`frontier.rs`).
    pub(super) recent: RecentFrontiers,
}

/// At most this many runs are known (beyond, everything is forgotten).
const MAX_KNOWN: usize = 16_384;

/// The connection's knowledge; see the module's doc.
#[derive(Debug)]
pub(super) struct Writers {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// `PRAGMA data_version` as last checked.
    version: Option<i64>,
    /// Whether the open transaction checked it.
    checked: bool,
    known: HashMap<RunId, Known>,
    /// What the open transaction's commits will make known, in order.
    staged: Vec<(RunId, Known)>,
    /// Commits that found nothing known (they read their run back).
    misses: u64,
}

impl Writers {
    /// Nothing known yet, as of the database `conn` sees now.
    pub(super) fn new(conn: &Connection) -> rusqlite::Result<Self> {
        let inner = Inner { version: Some(data_version(conn)?), ..Inner::default() };
        Ok(Self { inner: Mutex::new(inner) })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A write transaction began: nothing is staged yet, and the database
    /// is to be checked again before what is known is used.
    pub(super) fn begin(&self) {
        let mut inner = self.lock();
        inner.checked = false;
        inner.staged.clear();
    }

    /// What is known of `run`, if anything, in the write transaction open
    /// on `conn`. The first use in a transaction checks that no other
    /// connection committed since the last check (everything is forgotten
    /// if one did). Every entry was current when the last check found no
    /// such commit, or was written by this connection after it; an
    /// unchanged version says no other connection committed since, so
    /// every entry is still current.
    pub(super) fn get(&self, conn: &Connection, run: RunId) -> rusqlite::Result<Option<Known>> {
        let mut inner = self.lock();
        if !inner.known.contains_key(&run) {
            inner.misses += 1;
            return Ok(None);
        }
        if !inner.checked {
            let version = data_version(conn)?;
            inner.checked = true;
            if inner.version != Some(version) {
                inner.known.clear();
                inner.version = Some(version);
                inner.misses += 1;
                return Ok(None);
            }
        }
        Ok(inner.known.get(&run).cloned())
    }

    /// `run`'s state once the open transaction commits (a commit, a
    /// creation or a decision wrote it). Later writes of the same
    /// transaction may still forget it.
    pub(super) fn stage(&self, run: RunId, known: Known) {
        self.lock().staged.push((run, known));
    }

    /// A write about to change what `touches` names.
    pub(super) fn forget(&self, touches: Touches) {
        let mut inner = self.lock();
        match touches {
            Touches::Run(run) => {
                inner.known.remove(&run);
                inner.staged.retain(|(staged, _)| *staged != run);
            }
            Touches::NoRun => {}
        }
    }

    /// The open transaction committed: what it staged is known.
    pub(super) fn committed(&self) {
        let mut inner = self.lock();
        let staged = std::mem::take(&mut inner.staged);
        for (run, known) in staged {
            if known.writer.status.is_terminal() {
                // Nothing commits to it any more.
                inner.known.remove(&run);
            } else {
                inner.known.insert(run, known);
            }
        }
        if inner.known.len() > MAX_KNOWN {
            inner.known.clear();
        }
    }

    /// The open transaction failed to commit: whatever it may have left
    /// behind is forgotten.
    pub(super) fn failed(&self) {
        let mut inner = self.lock();
        inner.known.clear();
        inner.staged.clear();
    }

    /// Commits that had to read their run's state back.
    #[cfg(test)]
    pub(super) fn misses(&self) -> u64 {
        self.lock().misses
    }
}

/// Changes whenever another connection commits to the database.
fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("PRAGMA data_version")?.query_row([], |row| row.get(0))
}
