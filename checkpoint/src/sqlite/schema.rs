//! The SQLite schema: which files may be opened, and the migrations of
//! `migrations.rs` applied to them, keyed by `PRAGMA user_version`.

use rusqlite::{Connection, TransactionBehavior};

use super::migrations::MIGRATIONS;
use crate::error::StoreError;

/// `PRAGMA application_id` of tollgate's databases: "TGAT".
pub(crate) const APPLICATION_ID: i64 = 0x5447_4154;

/// Every table tollgate's migrations create.
const OUR_TABLES: &[&str] = &[
    "attachments",
    "events",
    "interrupts",
    "item_epoch",
    "item_vectors",
    "items",
    "node_cache",
    "outbox",
    "pending_writes",
    "request_keys",
    "runs",
    "schedules",
    "snapshots",
    "step_parts",
    "steps",
    "thread_tags",
    "threads",
];

/// Decides, reading only, whether the file may be opened: an empty
/// database (a new file), or one of ours at a version this build knows.
/// Anything else is refused before a byte is written: another
/// application's file (its `application_id`, or tables that are not
/// ours), a version that is negative or from a newer tollgate.
pub(crate) fn inspect(conn: &Connection) -> Result<(), StoreError> {
    let backend = |error| StoreError::Backend { source: Box::new(error) };
    // One read transaction: the three reads see one state of the file, even
    // while another process migrates it (seen: tables, but the version from
    // before the migration). Read-only; dropped without writing.
    let conn = conn.unchecked_transaction().map_err(backend)?;
    let application: i64 =
        conn.query_row("PRAGMA application_id", [], |row| row.get(0)).map_err(backend)?;
    let version: i64 =
        conn.query_row("PRAGMA user_version", [], |row| row.get(0)).map_err(backend)?;
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .and_then(|mut stmt| stmt.query_map([], |row| row.get(0))?.collect())
        .map_err(backend)?;
    if application != 0 && application != APPLICATION_ID {
        return Err(StoreError::ForeignDatabase {
            tables: format!("application_id {application:#x}, not tollgate's"),
        });
    }
    let foreign: Vec<&str> =
        tables.iter().map(String::as_str).filter(|name| !OUR_TABLES.contains(name)).collect();
    if !foreign.is_empty() {
        let shown: Vec<&str> = foreign.iter().take(5).copied().collect();
        return Err(StoreError::ForeignDatabase { tables: shown.join(", ") });
    }
    if version < 0 || (version == 0 && !tables.is_empty()) {
        return Err(StoreError::UnknownSchemaVersion { found: version });
    }
    if version > i64::from(SCHEMA_VERSION) {
        let found = u32::try_from(version).unwrap_or(u32::MAX);
        return Err(StoreError::SchemaTooNew { found, supported: SCHEMA_VERSION });
    }
    if application == 0 && version > 0 {
        // No mark: tollgate has written one since version 5 (`MARKED_SINCE`),
        // so only a file of an older tollgate may lack it, and that file has
        // exactly the tables, columns and indexes of its version.
        let ours = version < i64::from(MARKED_SINCE)
            && fingerprint(&conn).map_err(backend)?
                == fingerprint_of(u32::try_from(version).unwrap_or(0)).map_err(backend)?;
        if !ours {
            let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
            return Err(StoreError::ForeignDatabase {
                tables: format!(
                    "{}: no tollgate mark, and not the schema of a tollgate file of version {version}",
                    shown.join(", ")
                ),
            });
        }
    }
    Ok(())
}

/// The first schema version whose files carry [`APPLICATION_ID`].
const MARKED_SINCE: u32 = 5;

/// What a database's schema is: each table's columns (name, type, not
/// null, primary key) and each index's name and table, sorted.
fn fingerprint(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut found: Vec<String> = conn
        .prepare(
            "SELECT m.type || ' ' || m.name || ' ' || m.tbl_name || ' ' || \
                    coalesce(group_concat(p.name || ':' || p.type || ':' || p.\"notnull\" || ':' || p.pk, ','), '') \
             FROM sqlite_schema m LEFT JOIN pragma_table_info(m.name) p ON m.type = 'table' \
             WHERE m.name NOT LIKE 'sqlite_%' GROUP BY m.type, m.name, m.tbl_name",
        )?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    found.sort();
    Ok(found)
}

/// Writes the schema of `version` into `conn`, as that tollgate did
/// (tests of old files).
#[cfg(test)]
pub(crate) fn write_version(conn: &Connection, version: u32) -> rusqlite::Result<()> {
    for migration in &MIGRATIONS[..version as usize] {
        conn.execute_batch(migration)?;
    }
    conn.pragma_update(None, "user_version", version)
}

/// The [`fingerprint`] of a file tollgate wrote at schema `version`.
fn fingerprint_of(version: u32) -> rusqlite::Result<Vec<String>> {
    let conn = Connection::open_in_memory()?;
    for migration in &MIGRATIONS[..version as usize] {
        conn.execute_batch(migration)?;
    }
    fingerprint(&conn)
}

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
