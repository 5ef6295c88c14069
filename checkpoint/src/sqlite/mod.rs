//! The embedded SQLite store.

mod cache;
mod checkpointer;
mod commit;
mod fault;
mod frame;
mod frontier;
mod group;
#[cfg(test)]
mod group_tests;
mod items;
mod keys;
mod migrations;
mod ops;
mod outbox;
mod parts;
#[cfg(test)]
mod parts_tests;
#[cfg(test)]
mod read_tests;
mod readers;
mod rows;
mod schedules;
mod schema;
#[cfg(test)]
mod tests;
mod threads;
#[cfg(test)]
mod writer_tests;
mod writers;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::error::StoreError;
use crate::failpoint::__failpoint;
use checkpointer::{count_commits, CheckpointShared, Checkpointer, RESTART_AT, SAFETY_NET};
#[cfg(test)]
use checkpointer::{CHECKPOINT_EVERY, CHECKPOINT_PERIOD};
pub(crate) use fault::backend;
use fault::{is_busy, Abort};
use writers::{Touches, Writers};

/// How much a committed transition survives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous = NORMAL` in WAL mode (the default): a committed
    /// transition survives the process being killed at any point; the last
    /// transitions before a power loss or OS crash may be lost (the database
    /// stays consistent).
    #[default]
    Process,
    /// `synchronous = FULL`: every commit is synced to disk before it
    /// returns, so it survives power loss too. Costs an fsync per commit;
    /// every write goes to the store's commit thread (never held on a
    /// runtime worker for the sync), and writes waiting together share
    /// one sync.
    Full,
}

/// Settings of a [`SqliteStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// What a commit survives.
    pub durability: Durability,
    /// How long SQLite itself waits for another process's write lock
    /// inside one attempt (`busy_timeout`), blocking the calling thread.
    /// Default zero: a busy attempt returns at once and the store waits
    /// between attempts without holding a runtime worker, so other tasks
    /// (a server's requests, other runs) go on meanwhile.
    pub busy_timeout: Duration,
    /// How long the store keeps retrying a busy database before it gives
    /// up with [`StoreError::Busy`].
    pub patience: Duration,
    /// WAL pages after which a commit copies the WAL back into the
    /// database (`wal_autocheckpoint`). Larger means fewer, cheaper-per-page
    /// checkpoints (a page written many times is copied once) and a larger
    /// `-wal` file. Default 1000 pages (2 MiB at the default page size),
    /// SQLite's own default. With [`Checkpointing::Background`] this is only
    /// the safety net, at forty times the value, and the checkpoint thread
    /// starts the WAL over from its beginning once it holds sixteen times
    /// the value (writes wait for that moment; see docs/durability.md), so
    /// under steady load the `-wal` file reaches about 33 MB by default.
    pub wal_autocheckpoint: u32,
    /// Who copies the WAL back into the database.
    pub checkpointing: Checkpointing,
    /// Page size in bytes of a database this store creates (a power of two
    /// from 512 to 65536); an existing file keeps the size it was created
    /// with. Default 2048: a step dirties a handful of scattered pages and
    /// every one is written whole to the WAL, so pages half SQLite's usual
    /// 4096 bytes commit faster. Files with 1-2 KB step rows get up to a
    /// third larger (one row to a page); choose 4096 where size matters
    /// more than latency. At 1024, agent-sized rows spill to overflow pages
    /// and steps get slower.
    pub page_size: u32,
}

/// Who copies the write-ahead log back into the database file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Checkpointing {
    /// A thread of the store, on its own connection, shortly after commits
    /// (passive checkpoints: writers never wait for it). Commits stay short
    /// and even; an inline checkpoint every `wal_autocheckpoint` pages
    /// remains as a safety net should the thread fall behind.
    #[default]
    Background,
    /// The commit that crosses `wal_autocheckpoint` pages does it, inside
    /// the caller's call (SQLite's default).
    Inline,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            durability: Durability::Process,
            busy_timeout: Duration::ZERO,
            patience: Duration::from_secs(60),
            wal_autocheckpoint: 1_000,
            checkpointing: Checkpointing::Background,
            page_size: 2048,
        }
    }
}

/// A [`Store`](crate::Store) in one SQLite file: WAL journal, `BEGIN IMMEDIATE` for every
/// write, one transaction per transition, schema migrations keyed by
/// `user_version`, cached prepared statements. Several processes may open
/// the same file at once; a busy database is waited for and retried, never
/// reported as `database is locked`.
///
/// A write runs on the calling task when the store's connection is free
/// (the statements are short: tens of microseconds); one that finds it
/// held by another task goes to the store's commit thread, which commits
/// every write waiting at that moment in one transaction (group commit),
/// while the task yields its runtime worker.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    options: SqliteOptions,
    /// Updates longer than this are stored as parts (`parts.rs`), from the
    /// file's page size.
    part_len: usize,
    /// Reads that find the connection held run here (`readers.rs`); none
    /// for an in-memory database. Dropped (fields drop in this order)
    /// before `group` and `checkpointer`, whose threads hold the store's
    /// connection until they end: a read-write connection closing last
    /// copies the WAL back and removes it, which a read-only one cannot.
    readers: Option<readers::Readers>,
    /// Writes that found the connection held go here (`group.rs`).
    group: group::GroupCommitter,
    /// What the connection knows of the runs it commits (`writers.rs`).
    writers: Arc<Writers>,
    /// The background checkpoint thread, with its own connection; it also
    /// holds the store's while it starts the WAL over.
    checkpointer: Option<Checkpointer>,
    /// Long-term memory's vectors, for searches with a query (`items.rs`).
    vectors: crate::items::VectorCache,
}

/// A transaction begun and ended with cached statements (rusqlite's own
/// `Transaction` parses `BEGIN` and `COMMIT` anew each time, a few
/// microseconds on every step). Rolled back on drop unless committed.
struct Tx<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Tx<'c> {
    fn begin(conn: &'c Connection, begin: &str) -> rusqlite::Result<Self> {
        // Built first so that a `BEGIN` failing halfway is rolled back too.
        let tx = Self { conn, open: true };
        conn.prepare_cached(begin)?.execute([])?;
        Ok(tx)
    }

    fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        // A failed COMMIT may already have ended the transaction.
        if self.open && !self.conn.is_autocommit() {
            if let Err(error) = self.conn.prepare_cached("ROLLBACK").and_then(|mut s| s.execute([]))
            {
                tracing::warn!(%error, "rollback failed");
            }
        }
    }
}

impl SqliteStore {
    /// A signal for every change committed to the database by any
    /// connection of any process: a thread of its own reads `PRAGMA
    /// data_version` (one page read from the shared memory index, no
    /// lock) every `every`, and wakes every waiter of the returned
    /// [`Notify`](tokio::sync::Notify) when it moved. Stream readers wait
    /// on it instead of polling the tables. The thread ends once every
    /// handle is dropped.
    pub fn changes(&self, every: Duration) -> Result<Arc<tokio::sync::Notify>, StoreError> {
        let conn = Connection::open(&self.path).map_err(backend)?;
        conn.busy_timeout(Duration::from_millis(50)).map_err(backend)?;
        let notify = Arc::new(tokio::sync::Notify::new());
        let weak = Arc::downgrade(&notify);
        std::thread::Builder::new()
            .name("tollgate-changes".into())
            .spawn(move || {
                let version = |conn: &Connection| {
                    conn.query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0)).ok()
                };
                let mut seen = version(&conn);
                loop {
                    std::thread::sleep(every);
                    let Some(notify) = weak.upgrade() else { return };
                    let now = version(&conn);
                    if now != seen {
                        seen = now;
                        notify.notify_waiters();
                    }
                }
            })
            .map_err(|error| StoreError::Backend { source: Box::new(error) })?;
        Ok(notify)
    }

    /// Opens (creating if needed) the database at `path` with default
    /// options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens the database at `path`.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let page_size = options.page_size;
        if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
            return Err(StoreError::InvalidPageSize { page_size });
        }
        let mut conn = Connection::open(&path).map_err(backend)?;
        conn.busy_timeout(options.busy_timeout).map_err(backend)?;
        let started = Instant::now();
        let wal = loop {
            match Self::prepare(&mut conn, &options) {
                Ok(wal) => break wal,
                Err(StoreError::Backend { source }) if started.elapsed() < options.patience => {
                    let busy = source.downcast_ref::<rusqlite::Error>().is_some_and(is_busy);
                    if !busy {
                        return Err(StoreError::Backend { source });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(error) => return Err(error),
            }
        };
        conn.set_prepared_statement_cache_capacity(64);
        // The file's own page size (a file created before keeps its pages).
        let page_size: u32 =
            conn.query_row("PRAGMA page_size", [], |row| row.get(0)).map_err(backend)?;
        let part_len = parts::part_len(page_size);
        let writers = Arc::new(Writers::new(&conn).map_err(backend)?);
        let conn = Arc::new(Mutex::new(conn));
        let checkpointer = match options.checkpointing {
            Checkpointing::Background => Some(Checkpointer::start(
                &path,
                options.wal_autocheckpoint.saturating_mul(RESTART_AT),
                Arc::clone(&conn),
            )?),
            Checkpointing::Inline => None,
        };
        let counted = checkpointer.as_ref().map(|checkpointer| Arc::clone(&checkpointer.shared));
        let group = group::GroupCommitter::start(
            Arc::clone(&conn),
            Arc::clone(&writers),
            counted,
            options.patience,
        )?;
        // Another connection to an in-memory database would open another
        // database: reads there wait for the one connection.
        let readers = wal.then(|| readers::Readers::new(path.clone()));
        Ok(Self {
            conn,
            path,
            options,
            part_len,
            readers,
            group,
            writers,
            checkpointer,
            vectors: crate::items::VectorCache::new(),
        })
    }

    /// Sets the connection up and migrates the schema; whether the
    /// database is in WAL mode (not an in-memory database).
    fn prepare(conn: &mut Connection, options: &SqliteOptions) -> Result<bool, StoreError> {
        // Whose file is it? Decided before anything is written to it.
        schema::inspect(conn)?;
        // Only takes effect before the file's first write (it is fixed once
        // the database exists, and WAL mode is such a write).
        conn.pragma_update(None, "page_size", options.page_size).map_err(backend)?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(backend)?;
        if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
            return Err(StoreError::WalUnavailable { mode });
        }
        let synchronous = match options.durability {
            Durability::Process => "NORMAL",
            Durability::Full => "FULL",
        };
        conn.pragma_update(None, "synchronous", synchronous).map_err(backend)?;
        let autocheckpoint = match options.checkpointing {
            Checkpointing::Background => options.wal_autocheckpoint.saturating_mul(SAFETY_NET),
            Checkpointing::Inline => options.wal_autocheckpoint,
        };
        conn.pragma_update(None, "wal_autocheckpoint", autocheckpoint).map_err(backend)?;
        schema::migrate(conn).map_err(|error| match error {
            schema::MigrateError::TooNew { found } => {
                StoreError::SchemaTooNew { found, supported: schema::SCHEMA_VERSION }
            }
            schema::MigrateError::Sqlite(error) => backend(error),
        })?;
        Ok(mode.eq_ignore_ascii_case("wal"))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `work` in a `BEGIN IMMEDIATE` transaction and commits it.
    ///
    /// When another task of this process holds the connection, or another
    /// process holds the database's write lock, the work is not waited
    /// for on this thread: it goes to the group committer (`group.rs`),
    /// which runs every write waiting at that moment in one transaction
    /// (retried while another process holds the lock, up to the store's
    /// patience), and this task awaits its answer (given once that
    /// transaction is committed). So does every write of a store with
    /// [`Durability::Full`], a write while others wait there or have just
    /// shared a commit, and one that follows closely another task's write
    /// (`GroupCommitter::busy`).
    ///
    /// `touches` says which runs' writer state the work may change: it is
    /// forgotten as the work runs (`writers.rs`).
    async fn write<T, F>(&self, touches: Touches, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T, Abort> + Send + Sync + 'static,
    {
        let writers = Arc::clone(&self.writers);
        let work = move |conn: &Connection| {
            writers.forget(touches);
            work(conn)
        };
        let task = tokio::task::try_id();
        // A synced commit is slow (a disk sync, hundreds of microseconds
        // to milliseconds): never on a runtime worker.
        let synced = self.options.durability == Durability::Full;
        if !synced && !self.group.busy(task) {
            match self.try_inline(&work) {
                Some(Ok(value)) => {
                    self.group.wrote_alone(task);
                    __failpoint("commit:after");
                    if let Some(checkpointer) = &self.checkpointer {
                        checkpointer.committed();
                    }
                    return Ok(value);
                }
                Some(Err(Abort::Refused(error))) => return Err(error),
                // Another process holds the write lock: the commit thread
                // waits for it, once for every write waiting.
                Some(Err(Abort::Sqlite(error))) if is_busy(&error) => {}
                Some(Err(Abort::Sqlite(error))) => return Err(backend(error)),
                // Another task holds the connection.
                None => {}
            }
        }
        let value = self.group.submit(Box::new(move |conn| {
            work(conn).map(|value| Box::new(value) as Box<dyn std::any::Any + Send>)
        }));
        let value = value.await?;
        Ok(*value.downcast::<T>().expect("a write's answer has the write's type"))
    }

    /// The store's connection, unless another task holds it.
    fn free_conn(&self) -> Option<MutexGuard<'_, Connection>> {
        match self.conn.try_lock() {
            Ok(conn) => Some(conn),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// One attempt at `work` on this thread, if the connection is free
    /// (`None` when another task holds it).
    fn try_inline<T>(
        &self,
        work: &impl Fn(&Connection) -> Result<T, Abort>,
    ) -> Option<Result<T, Abort>> {
        let conn = self.free_conn()?;
        Some(Tx::begin(&conn, "BEGIN IMMEDIATE").map_err(Abort::from).and_then(|tx| {
            self.writers.begin();
            let value = work(&tx)?;
            __failpoint("commit:inside");
            if let Err(error) = tx.commit() {
                self.writers.failed();
                return Err(error.into());
            }
            self.writers.committed();
            Ok(value)
        }))
    }

    /// Runs `work` in a read transaction (one consistent snapshot),
    /// retried while the database is busy (waiting off the runtime worker,
    /// see [`back_off`]). On the store's connection when it is free (its
    /// page cache is warm with what was just written); on a read
    /// connection when another task holds it (`readers.rs`), so that a
    /// read never waits on its runtime worker for a group commit or for
    /// another process's write lock.
    pub(crate) async fn read<T: Send>(
        &self,
        work: impl Fn(&Connection) -> Result<T, Abort> + Send + Sync,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let mut pause = FIRST_PAUSE;
        loop {
            let attempt = match (self.free_conn(), &self.readers) {
                (Some(conn), _) => read_on(&conn, &work),
                (None, Some(readers)) => readers.read(&work),
                (None, None) => {
                    read_on(&self.conn.lock().unwrap_or_else(PoisonError::into_inner), &work)
                }
            };
            match attempt {
                Ok(value) => return Ok(value),
                Err(Abort::Refused(error)) => return Err(error),
                Err(Abort::Sqlite(error)) if is_busy(&error) => {
                    self.wait_busy(started, &mut pause).await?;
                }
                Err(Abort::Sqlite(error)) => return Err(backend(error)),
            }
        }
    }

    /// Waits `pause` (doubling it, up to [`LAST_PAUSE`]) before another
    /// attempt, or gives up with [`StoreError::Busy`] past the patience.
    async fn wait_busy(&self, started: Instant, pause: &mut Duration) -> Result<(), StoreError> {
        if started.elapsed() >= self.options.patience {
            return Err(StoreError::Busy { waited_ms: started.elapsed().as_millis() as u64 });
        }
        back_off(*pause).await;
        *pause = (*pause * 2).min(LAST_PAUSE);
        Ok(())
    }
}

/// `work` in a read transaction on `conn`.
pub(super) fn read_on<T>(
    conn: &Connection,
    work: &impl Fn(&Connection) -> Result<T, Abort>,
) -> Result<T, Abort> {
    let tx = Tx::begin(conn, "BEGIN DEFERRED")?;
    let value = work(&tx)?;
    tx.commit()?;
    Ok(value)
}

/// The first and the longest wait between attempts on a busy database.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const LAST_PAUSE: Duration = Duration::from_millis(50);

/// Waits `pause` without holding a runtime worker: on a tokio runtime the
/// sleep runs on its blocking pool (which needs no timer driver, so any
/// runtime will do) while the worker runs other tasks; elsewhere the
/// calling thread sleeps.
async fn back_off(pause: Duration) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            if runtime.spawn_blocking(move || std::thread::sleep(pause)).await.is_err() {
                // The runtime is shutting down.
                std::thread::sleep(pause);
            }
        }
        Err(_) => std::thread::sleep(pause),
    }
}
