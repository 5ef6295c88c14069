//! Read connections. A read that finds the store's connection held (a
//! group commit running, or waiting for another process's write lock) does
//! not wait for it on its runtime worker: it runs on a connection of its
//! own. In WAL mode readers and the writer do not wait for each other, and
//! a read transaction begun after a commit sees it.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::fault::Abort;
use super::read_on;

/// Idle read connections kept for the next reads; more are opened when
/// more reads run at once, and closed once done.
const IDLE: usize = 4;

/// The store's read connections, opened when first needed.
#[derive(Debug)]
pub(super) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    #[cfg(test)]
    opened: std::sync::atomic::AtomicUsize,
}

impl Readers {
    pub(super) fn new(path: PathBuf) -> Self {
        Self {
            path,
            idle: Mutex::default(),
            #[cfg(test)]
            opened: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// `work` in a read transaction on one of the read connections, kept
    /// for the next read unless SQLite failed on it.
    pub(super) fn read<T>(
        &self,
        work: &impl Fn(&Connection) -> Result<T, Abort>,
    ) -> Result<T, Abort> {
        let conn = self.take()?;
        let attempt = read_on(&conn, work);
        if !matches!(attempt, Err(Abort::Sqlite(_))) {
            self.give_back(conn);
        }
        attempt
    }

    /// An idle connection, or a new one (read-only: a read cannot write).
    fn take(&self) -> rusqlite::Result<Connection> {
        if let Some(conn) = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop() {
            return Ok(conn);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        // A busy read is retried by the store without holding the worker.
        conn.busy_timeout(Duration::ZERO)?;
        conn.set_prepared_statement_cache_capacity(64);
        #[cfg(test)]
        self.opened.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(conn)
    }

    /// Keeps `conn` for the next read (unless enough are kept).
    fn give_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE {
            idle.push(conn);
        }
    }

    /// Read connections opened so far.
    #[cfg(test)]
    pub(super) fn opened(&self) -> usize {
        self.opened.load(std::sync::atomic::Ordering::SeqCst)
    }
}
