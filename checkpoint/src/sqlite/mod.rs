//! The embedded SQLite store.

mod schema;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rusqlite::{
    params, Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior,
};

use crate::codec::Blob;
use crate::failpoint::__failpoint;
use crate::ids::{RunId, TaskKey};
use crate::owner::Owner;
use crate::record::{
    CheckpointInfo, Cursor, EventRecord, GraphRef, HistoryPage, NewRun, PageRequest, RunFailure,
    RunFilter, RunPage, RunRecord, RunStatus, StoredCheckpoint, TaskUpdate, TaskWrite, Transition,
};
use crate::store::{Store, StoreError};

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
    /// returns, so it survives power loss too. Costs an fsync per step.
    Full,
}

/// Settings of a [`SqliteStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// What a commit survives.
    pub durability: Durability,
    /// How long SQLite itself waits for another process's write lock
    /// before reporting busy (`busy_timeout`).
    pub busy_timeout: Duration,
    /// How long the store keeps retrying a busy database before it gives
    /// up with [`StoreError::Busy`].
    pub patience: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            durability: Durability::Process,
            busy_timeout: Duration::from_secs(5),
            patience: Duration::from_secs(60),
        }
    }
}

/// A [`Store`] in one SQLite file: WAL journal, `BEGIN IMMEDIATE` for every
/// write, one transaction per transition, schema migrations keyed by
/// `user_version`, cached prepared statements. Several processes may open
/// the same file at once; a busy database is waited for and retried, never
/// reported as `database is locked`.
///
/// Each call runs on the calling task while holding the store's one
/// connection; the statements are short (tens of microseconds).
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Connection>,
    path: PathBuf,
    options: SqliteOptions,
}

fn backend(error: rusqlite::Error) -> StoreError {
    StoreError::Backend { source: Box::new(error) }
}

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if matches!(failure.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Why a write closure stopped: a refusal to report, or SQLite trouble.
enum Abort {
    Refused(StoreError),
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for Abort {
    fn from(error: rusqlite::Error) -> Self {
        Abort::Sqlite(error)
    }
}

impl From<StoreError> for Abort {
    fn from(error: StoreError) -> Self {
        Abort::Refused(error)
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with default
    /// options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens the database at `path`.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let mut conn = Connection::open(&path).map_err(backend)?;
        conn.busy_timeout(options.busy_timeout).map_err(backend)?;
        let started = Instant::now();
        loop {
            match Self::prepare(&mut conn, &options) {
                Ok(()) => break,
                Err(StoreError::Backend { source }) if started.elapsed() < options.patience => {
                    let busy = source.downcast_ref::<rusqlite::Error>().is_some_and(is_busy);
                    if !busy {
                        return Err(StoreError::Backend { source });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(error) => return Err(error),
            }
        }
        conn.set_prepared_statement_cache_capacity(64);
        Ok(Self { conn: Mutex::new(conn), path, options })
    }

    fn prepare(conn: &mut Connection, options: &SqliteOptions) -> Result<(), StoreError> {
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(backend)?;
        if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
            return Err(StoreError::Backend {
                source: format!("journal_mode is {mode}, WAL is required").into(),
            });
        }
        let synchronous = match options.durability {
            Durability::Process => "NORMAL",
            Durability::Full => "FULL",
        };
        conn.pragma_update(None, "synchronous", synchronous).map_err(backend)?;
        schema::migrate(conn).map_err(|error| match error {
            schema::MigrateError::TooNew { found } => {
                StoreError::SchemaTooNew { found, supported: schema::SCHEMA_VERSION }
            }
            schema::MigrateError::Sqlite(error) => backend(error),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `work` in a `BEGIN IMMEDIATE` transaction and commits it,
    /// retrying the whole transaction while the database is busy.
    fn write<T>(
        &self,
        work: impl Fn(&Transaction<'_>) -> Result<T, Abort>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let mut conn = self.lock();
        let mut pause = Duration::from_millis(1);
        loop {
            let attempt = (|| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let value = work(&tx)?;
                __failpoint("commit:inside");
                tx.commit()?;
                Ok(value)
            })();
            match attempt {
                Ok(value) => {
                    __failpoint("commit:after");
                    return Ok(value);
                }
                Err(Abort::Refused(error)) => return Err(error),
                Err(Abort::Sqlite(error)) if is_busy(&error) => {
                    if started.elapsed() >= self.options.patience {
                        return Err(StoreError::Busy {
                            waited_ms: started.elapsed().as_millis() as u64,
                        });
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(Abort::Sqlite(error)) => return Err(backend(error)),
            }
        }
    }

    /// Runs `work` in a read transaction (one consistent snapshot).
    fn read<T>(
        &self,
        work: impl Fn(&Transaction<'_>) -> Result<T, Abort>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let mut conn = self.lock();
        loop {
            let attempt = (|| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
                let value = work(&tx)?;
                tx.commit()?;
                Ok(value)
            })();
            match attempt {
                Ok(value) => return Ok(value),
                Err(Abort::Refused(error)) => return Err(error),
                Err(Abort::Sqlite(error))
                    if is_busy(&error) && started.elapsed() < self.options.patience =>
                {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(Abort::Sqlite(error)) if is_busy(&error) => {
                    return Err(StoreError::Busy {
                        waited_ms: started.elapsed().as_millis() as u64,
                    })
                }
                Err(Abort::Sqlite(error)) => return Err(backend(error)),
            }
        }
    }
}

const RUN_COLUMNS: &str = "id, graph, graph_version, thread, status, step, epoch, owner, \
     lease_until_ms, created_at_ms, updated_at_ms, failure, last_seq";

fn corrupt_row(what: String) -> Abort {
    Abort::Refused(StoreError::Backend { source: what.into() })
}

fn run_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<RunRecord, Abort>> {
    let id: String = row.get(0)?;
    let status: String = row.get(4)?;
    let owner: Option<String> = row.get(7)?;
    let failure: Option<String> = row.get(11)?;
    let build = || -> Result<RunRecord, Abort> {
        let id: RunId =
            id.parse().map_err(|_| corrupt_row(format!("bad run id `{id}` in runs")))?;
        let status: RunStatus =
            status.parse().map_err(|_| corrupt_row(format!("run {id}: bad status `{status}`")))?;
        let failure = failure
            .map(|text| serde_json::from_str::<RunFailure>(&text))
            .transpose()
            .map_err(|error| corrupt_row(format!("run {id}: bad failure record: {error}")))?;
        Ok(RunRecord {
            id,
            graph: GraphRef { name: row.get(1)?, version: row.get(2)? },
            thread: row.get(3)?,
            status,
            step: row.get::<_, i64>(5)? as u64,
            epoch: row.get::<_, i64>(6)? as u64,
            owner: owner.as_deref().and_then(Owner::parse),
            lease_until_ms: row.get(8)?,
            created_at_ms: row.get(9)?,
            updated_at_ms: row.get(10)?,
            failure,
            last_seq: row.get::<_, i64>(12)? as u64,
        })
    };
    Ok(build())
}

fn load_run(tx: &Transaction<'_>, run: RunId) -> Result<RunRecord, Abort> {
    let mut stmt = tx.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))?;
    match stmt.query_row([run.to_string()], run_from_row).optional()? {
        Some(record) => record,
        None => Err(StoreError::RunNotFound { run }.into()),
    }
}

fn check_writer(record: &RunRecord, epoch: u64) -> Result<(), StoreError> {
    if record.status.is_terminal() {
        return Err(StoreError::RunTerminal { run: record.id, status: record.status });
    }
    if record.epoch != epoch {
        return Err(StoreError::Fenced { run: record.id, writer: epoch, current: record.epoch });
    }
    Ok(())
}

fn check_events(run: RunId, last_seq: u64, events: &[EventRecord]) -> Result<(), StoreError> {
    for (offset, event) in events.iter().enumerate() {
        let expected = last_seq + 1 + offset as u64;
        if event.seq != expected {
            return Err(StoreError::EventGap { run, expected, found: event.seq });
        }
    }
    Ok(())
}

fn blob_at(run: RunId, step: u64, bytes: &[u8]) -> Result<Blob, Abort> {
    Blob::from_bytes(bytes)
        .map_err(|source| Abort::Refused(StoreError::CorruptCheckpoint { run, step, source }))
}

fn insert_events(tx: &Transaction<'_>, run: &str, events: &[EventRecord]) -> Result<(), Abort> {
    let mut stmt = tx.prepare_cached("INSERT INTO events (run, seq, json) VALUES (?1, ?2, ?3)")?;
    for event in events {
        stmt.execute(params![run, event.seq as i64, event.json])?;
    }
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    async fn create_run(&self, run: NewRun) -> Result<u64, StoreError> {
        check_events(run.id, 0, &run.events)?;
        let id = run.id.to_string();
        let (snapshot, frontier) = (run.snapshot.to_bytes(), run.frontier.to_bytes());
        let owner = run.owner.to_text();
        self.write(|tx| {
            let exists = tx
                .prepare_cached("SELECT 1 FROM runs WHERE id = ?1")?
                .query_row([&id], |_| Ok(()))
                .optional()?;
            if exists.is_some() {
                return Err(StoreError::RunExists { run: run.id }.into());
            }
            tx.prepare_cached(
                "INSERT INTO runs (id, graph, graph_version, thread, status, step, epoch, owner, \
                 lease_until_ms, created_at_ms, updated_at_ms, failure, last_seq) \
                 VALUES (?1, ?2, ?3, ?4, 'running', 0, 1, ?5, ?6, ?7, ?7, NULL, ?8)",
            )?
            .execute(params![
                id,
                run.graph.name,
                run.graph.version,
                run.thread,
                owner,
                run.lease_until_ms,
                run.created_at_ms,
                run.events.len() as i64
            ])?;
            tx.prepare_cached(
                "INSERT INTO steps (run, step, at_ms, tasks, frontier) VALUES (?1, 0, ?2, 0, ?3)",
            )?
            .execute(params![id, run.created_at_ms, frontier])?;
            tx.prepare_cached("INSERT INTO snapshots (run, step, payload) VALUES (?1, 0, ?2)")?
                .execute(params![id, snapshot])?;
            insert_events(tx, &id, &run.events)?;
            Ok(1)
        })
    }

    async fn commit(&self, transition: Transition) -> Result<(), StoreError> {
        let run = transition.run;
        let id = run.to_string();
        let failure = transition
            .failure
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|error| StoreError::Backend { source: Box::new(error) })?;
        let step = transition.step.as_ref().map(|step| {
            let updates: Vec<(u32, &str, Vec<u8>)> = step
                .updates
                .iter()
                .map(|u| (u.task.index, u.task.node.as_str(), u.update.to_bytes()))
                .collect();
            (
                step.step,
                updates,
                step.snapshot.as_ref().map(Blob::to_bytes),
                step.frontier.to_bytes(),
            )
        });
        let running = transition.status == RunStatus::Running;
        self.write(|tx| {
            let record = load_run(tx, run)?;
            check_writer(&record, transition.epoch)?;
            if let Some((number, _, _, _)) = &step {
                if *number != record.step + 1 {
                    return Err(StoreError::StepOutOfOrder { run, current: record.step, found: *number }.into());
                }
            }
            check_events(run, record.last_seq, &transition.events)?;
            let mut new_step = record.step;
            if let Some((number, updates, snapshot, frontier)) = &step {
                new_step = *number;
                let number = *number as i64;
                tx.prepare_cached(
                    "INSERT INTO steps (run, step, at_ms, tasks, frontier) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![id, number, transition.at_ms, updates.len() as i64, frontier])?;
                let mut insert = tx.prepare_cached(
                    "INSERT INTO updates (run, step, task, node, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?;
                for (task, node, payload) in updates {
                    insert.execute(params![id, number, task, node, payload])?;
                }
                if let Some(snapshot) = snapshot {
                    tx.prepare_cached("INSERT INTO snapshots (run, step, payload) VALUES (?1, ?2, ?3)")?
                        .execute(params![id, number, snapshot])?;
                }
                tx.prepare_cached("DELETE FROM pending_writes WHERE run = ?1 AND step = ?2")?
                    .execute(params![id, number])?;
            }
            insert_events(tx, &id, &transition.events)?;
            let lease = if running { transition.lease_until_ms.or(record.lease_until_ms) } else { None };
            tx.prepare_cached(
                "UPDATE runs SET status = ?2, step = ?3, failure = ?4, updated_at_ms = ?5, \
                 last_seq = ?6, lease_until_ms = ?7, owner = CASE WHEN ?8 THEN owner END \
                 WHERE id = ?1",
            )?
            .execute(params![
                id,
                transition.status.as_str(),
                new_step as i64,
                failure,
                transition.at_ms,
                (record.last_seq + transition.events.len() as u64) as i64,
                lease,
                running
            ])?;
            Ok(())
        })
    }

    async fn put_task_write(&self, write: TaskWrite) -> Result<(), StoreError> {
        let run = write.run;
        let payload = write.update.update.to_bytes();
        let task = &write.update.task;
        self.write(|tx| {
            let record = load_run(tx, run)?;
            check_writer(&record, write.epoch)?;
            if task.step != record.step + 1 {
                return Err(StoreError::StepOutOfOrder {
                    run,
                    current: record.step,
                    found: task.step,
                }
                .into());
            }
            tx.prepare_cached(
                "INSERT OR IGNORE INTO pending_writes (run, step, task, node, payload) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                run.to_string(),
                task.step as i64,
                task.index,
                task.node,
                payload
            ])?;
            Ok(())
        })
    }

    async fn claim(
        &self,
        run: RunId,
        expected_epoch: u64,
        owner: Owner,
        lease_until_ms: i64,
    ) -> Result<u64, StoreError> {
        let owner = owner.to_text();
        self.write(|tx| {
            let record = load_run(tx, run)?;
            check_writer(&record, expected_epoch)?;
            tx.prepare_cached(
                "UPDATE runs SET epoch = epoch + 1, status = 'running', owner = ?2, \
                 lease_until_ms = ?3 WHERE id = ?1",
            )?
            .execute(params![run.to_string(), owner, lease_until_ms])?;
            Ok(record.epoch + 1)
        })
    }

    async fn renew(&self, run: RunId, epoch: u64, lease_until_ms: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            let record = load_run(tx, run)?;
            check_writer(&record, epoch)?;
            tx.prepare_cached(
                "UPDATE runs SET lease_until_ms = ?2 WHERE id = ?1 AND status = 'running'",
            )?
            .execute(params![run.to_string(), lease_until_ms])?;
            Ok(())
        })
    }

    async fn run(&self, run: RunId) -> Result<RunRecord, StoreError> {
        self.read(|tx| load_run(tx, run))
    }

    async fn checkpoint(&self, run: RunId) -> Result<StoredCheckpoint, StoreError> {
        let id = run.to_string();
        self.read(|tx| {
            let record = load_run(tx, run)?;
            let (snapshot_step, snapshot): (i64, Vec<u8>) = tx
                .prepare_cached(
                    "SELECT step, payload FROM snapshots WHERE run = ?1 ORDER BY step DESC LIMIT 1",
                )?
                .query_row([&id], |row| Ok((row.get(0)?, row.get(1)?)))?;
            let snapshot_step = snapshot_step as u64;
            let snapshot = blob_at(run, snapshot_step, &snapshot)?;
            let mut deltas: Vec<(u64, Vec<TaskUpdate>)> = Vec::new();
            let mut stmt = tx.prepare_cached(
                "SELECT step, task, node, payload FROM updates WHERE run = ?1 AND step > ?2 \
                 ORDER BY step, task",
            )?;
            let mut rows = stmt.query(params![id, snapshot_step as i64])?;
            while let Some(row) = rows.next()? {
                let step = row.get::<_, i64>(0)? as u64;
                let update = TaskUpdate {
                    task: TaskKey { step, index: row.get(1)?, node: row.get(2)? },
                    update: blob_at(run, step, &row.get::<_, Vec<u8>>(3)?)?,
                };
                match deltas.last_mut() {
                    Some((last, updates)) if *last == step => updates.push(update),
                    _ => deltas.push((step, vec![update])),
                }
            }
            let frontier: Vec<u8> = tx
                .prepare_cached("SELECT frontier FROM steps WHERE run = ?1 AND step = ?2")?
                .query_row(params![id, record.step as i64], |row| row.get(0))?;
            let frontier = blob_at(run, record.step, &frontier)?;
            let next = record.step + 1;
            let mut pending = Vec::new();
            let mut stmt = tx.prepare_cached(
                "SELECT task, node, payload FROM pending_writes WHERE run = ?1 AND step = ?2 \
                 ORDER BY task",
            )?;
            let mut rows = stmt.query(params![id, next as i64])?;
            while let Some(row) = rows.next()? {
                pending.push(TaskUpdate {
                    task: TaskKey { step: next, index: row.get(0)?, node: row.get(1)? },
                    update: blob_at(run, next, &row.get::<_, Vec<u8>>(2)?)?,
                });
            }
            Ok(StoredCheckpoint { run: record, snapshot_step, snapshot, deltas, frontier, pending })
        })
    }

    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> Result<RunPage, StoreError> {
        let after = page.cursor.as_ref().map(Cursor::last_run).transpose()?;
        let mut sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1");
        let mut values: Vec<String> = Vec::new();
        for (column, value) in [
            ("status", filter.status.map(|s| s.as_str().to_owned())),
            ("graph", filter.graph.clone()),
            ("thread", filter.thread.clone()),
            ("id <", after.map(|id| id.to_string())),
        ] {
            if let Some(value) = value {
                values.push(value);
                let op = if column.ends_with('<') { "" } else { " =" };
                sql.push_str(&format!(" AND {column}{op} ?{}", values.len()));
            }
        }
        sql.push_str(&format!(
            " ORDER BY id DESC LIMIT {}",
            page.limit.saturating_add(1).min(i64::MAX as usize)
        ));
        let mut runs = self.read(|tx| {
            let mut stmt = tx.prepare_cached(&sql)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(values.iter()))?;
            let mut runs = Vec::new();
            while let Some(row) = rows.next()? {
                runs.push(run_from_row(row)??);
            }
            Ok(runs)
        })?;
        let next = if runs.len() > page.limit {
            runs.truncate(page.limit);
            runs.last().map(|record| Cursor::after(record.id))
        } else {
            None
        };
        Ok(RunPage { runs, next })
    }

    async fn history(
        &self,
        run: RunId,
        before: Option<u64>,
        limit: usize,
    ) -> Result<HistoryPage, StoreError> {
        let id = run.to_string();
        let before = before.map_or(i64::MAX, |step| step as i64);
        let limit = limit.min(i64::MAX as usize) as i64;
        let checkpoints = self.read(|tx| {
            load_run(tx, run)?;
            let mut stmt = tx.prepare_cached(
                "SELECT s.step, s.at_ms, s.tasks, \
                        EXISTS (SELECT 1 FROM snapshots p WHERE p.run = s.run AND p.step = s.step) \
                 FROM steps s WHERE s.run = ?1 AND s.step < ?2 ORDER BY s.step DESC LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![id, before, limit], |row| {
                Ok(CheckpointInfo {
                    step: row.get::<_, i64>(0)? as u64,
                    at_ms: row.get(1)?,
                    tasks: row.get(2)?,
                    snapshot: row.get(3)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })?;
        let next_before = match checkpoints.last() {
            Some(last) if last.step > 0 && checkpoints.len() as i64 == limit => Some(last.step),
            _ => None,
        };
        Ok(HistoryPage { checkpoints, next_before })
    }

    async fn events(
        &self,
        run: RunId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let id = run.to_string();
        let limit = limit.min(i64::MAX as usize) as i64;
        self.read(|tx| {
            load_run(tx, run)?;
            let mut stmt = tx.prepare_cached(
                "SELECT seq, json FROM events WHERE run = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![id, after_seq as i64, limit], |row| {
                Ok(EventRecord { seq: row.get::<_, i64>(0)? as u64, json: row.get(1)? })
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(future)
    }

    #[test]
    fn passes_the_store_conformance_suite() {
        let dir = tempfile::tempdir().expect("temp dir");
        let counter = std::sync::atomic::AtomicUsize::new(0);
        block_on(crate::conformance::check_store(|| {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let path = dir.path().join(format!("store-{n}.db"));
            async move { SqliteStore::open(path).expect("open") }
        }));
    }

    #[test]
    fn reopening_keeps_everything_and_a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.db");
        let run = RunId::new();
        block_on(async {
            let store = SqliteStore::open(&path).expect("open");
            let new = NewRun {
                id: run,
                graph: GraphRef { name: "g".into(), version: 3 },
                thread: Some("t".into()),
                created_at_ms: 5,
                snapshot: crate::Codec::Json.encode(&1u8, 1).expect("encode"),
                frontier: crate::Codec::Json.encode(&2u8, 1).expect("encode"),
                events: vec![EventRecord { seq: 1, json: "{}".into() }],
                owner: Owner::current(),
                lease_until_ms: 99,
            };
            store.create_run(new).await.expect("create");
        });
        let store = SqliteStore::open(&path).expect("reopen");
        let record = block_on(store.run(run)).expect("run survives");
        assert_eq!((record.graph.version, record.thread.as_deref()), (3, Some("t")));
        assert_eq!(record.owner, Some(Owner::current()));
        drop(store);

        let conn = Connection::open(&path).expect("open raw");
        conn.pragma_update(None, "user_version", 99).expect("bump");
        drop(conn);
        let error = SqliteStore::open(&path).expect_err("newer schema");
        assert!(matches!(error, StoreError::SchemaTooNew { found: 99, supported: 1 }), "{error:?}");
    }

    #[test]
    fn a_truncated_blob_is_corruption_of_that_run_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.db");
        let store = SqliteStore::open(&path).expect("open");
        let (bad, good) = (RunId::new(), RunId::new());
        for run in [bad, good] {
            let new = NewRun {
                id: run,
                graph: GraphRef { name: "g".into(), version: 1 },
                thread: None,
                created_at_ms: 5,
                snapshot: crate::Codec::Json.encode(&1u8, 1).expect("encode"),
                frontier: crate::Codec::Json.encode(&2u8, 1).expect("encode"),
                events: Vec::new(),
                owner: Owner::current(),
                lease_until_ms: 99,
            };
            block_on(store.create_run(new)).expect("create");
        }
        let conn = Connection::open(&path).expect("open raw");
        conn.execute("UPDATE snapshots SET payload = x'0100' WHERE run = ?1", [bad.to_string()])
            .expect("truncate");
        let error = block_on(store.checkpoint(bad)).expect_err("corrupt");
        assert!(
            matches!(error, StoreError::CorruptCheckpoint { run, step: 0, .. } if run == bad),
            "{error:?}"
        );
        block_on(store.checkpoint(good)).expect("the other run is fine");
        let ok: String =
            conn.query_row("PRAGMA integrity_check", [], |row| row.get(0)).expect("check");
        assert_eq!(ok, "ok");
    }
}
