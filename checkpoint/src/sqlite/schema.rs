//! The SQLite schema and its migrations, keyed by `PRAGMA user_version`.

use rusqlite::{Connection, TransactionBehavior};

/// Migrations in order: `MIGRATIONS[i]` takes the schema from version `i`
/// to `i + 1`. Never edit one that has shipped; append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: runs, checkpoints as deltas + snapshots, pending writes, events.
    "
    CREATE TABLE runs (
        id             TEXT PRIMARY KEY,     -- ULID: sorts by creation time
        graph          TEXT NOT NULL,
        graph_version  INTEGER NOT NULL,
        thread         TEXT,
        status         TEXT NOT NULL,
        step           INTEGER NOT NULL,
        epoch          INTEGER NOT NULL,
        owner          TEXT,                 -- host|pid|start while running
        lease_until_ms INTEGER,
        created_at_ms  INTEGER NOT NULL,
        updated_at_ms  INTEGER NOT NULL,
        failure        TEXT,                 -- JSON RunFailure
        last_seq       INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX runs_by_status ON runs (status, id);
    CREATE INDEX runs_by_graph ON runs (graph, id);
    CREATE INDEX runs_by_thread ON runs (thread, id) WHERE thread IS NOT NULL;

    -- One row per committed step (step 0 is the input).
    CREATE TABLE steps (
        run      TEXT NOT NULL,
        step     INTEGER NOT NULL,
        at_ms    INTEGER NOT NULL,
        tasks    INTEGER NOT NULL,
        frontier BLOB NOT NULL,
        PRIMARY KEY (run, step)
    );
    -- The delta of each step: one row per task, in task order.
    CREATE TABLE updates (
        run     TEXT NOT NULL,
        step    INTEGER NOT NULL,
        task    INTEGER NOT NULL,
        node    TEXT NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (run, step, task)
    );
    -- Full states, every few steps.
    CREATE TABLE snapshots (
        run     TEXT NOT NULL,
        step    INTEGER NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (run, step)
    );
    -- Outputs of finished tasks of the step in flight.
    CREATE TABLE pending_writes (
        run     TEXT NOT NULL,
        step    INTEGER NOT NULL,
        task    INTEGER NOT NULL,
        node    TEXT NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (run, step, task)
    );
    CREATE TABLE events (
        run  TEXT NOT NULL,
        seq  INTEGER NOT NULL,
        json TEXT NOT NULL,
        PRIMARY KEY (run, seq)
    );
    ",
];

/// The schema version this build writes.
pub(crate) const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Brings the database to [`SCHEMA_VERSION`]. Safe when several processes
/// open the same file at once: the check and the migration share one
/// `BEGIN IMMEDIATE` transaction.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), MigrateError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: u32 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(MigrateError::TooNew { found });
    }
    for migration in &MIGRATIONS[found as usize..] {
        tx.execute_batch(migration)?;
    }
    if found < SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    tx.commit()?;
    Ok(())
}

pub(crate) enum MigrateError {
    TooNew { found: u32 },
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for MigrateError {
    fn from(error: rusqlite::Error) -> Self {
        MigrateError::Sqlite(error)
    }
}
