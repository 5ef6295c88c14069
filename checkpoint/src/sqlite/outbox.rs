//! The outbox (`Store::put_outbox` and the rest): the `outbox` table.
//! Taking an entry is one `UPDATE … RETURNING` that checks its lease.

use rusqlite::{params, OptionalExtension, Row};

use super::writers::Touches;
use super::{Abort, SqliteStore};
use crate::outbox::{OutboxEntry, OutboxQuery};
use crate::store::StoreError;

const COLUMNS: &str = "id, kind, thread, created_at_ms, due_ms, lease_until_ms, attempts, body";

type EntryRow = (String, String, Option<String>, i64, i64, i64, u32, String);

fn entry_from_row(row: &Row<'_>) -> rusqlite::Result<EntryRow> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
    ))
}

fn decoded(
    (id, kind, thread, created_at_ms, due_ms, lease_until_ms, attempts, body): EntryRow,
) -> Result<OutboxEntry, Abort> {
    let body = OutboxEntry::body_from_text(&id, &body).map_err(Abort::Refused)?;
    let mut entry = OutboxEntry::new(id, kind, thread, created_at_ms, due_ms, body);
    entry.lease_until_ms = lease_until_ms;
    entry.attempts = attempts;
    Ok(entry)
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl SqliteStore {
    pub(crate) async fn upsert_outbox(&self, entry: OutboxEntry) -> Result<(), StoreError> {
        let body = entry.body_text()?;
        self.write(Touches::NoRun, move |tx| {
            tx.prepare_cached(&format!(
                "INSERT OR REPLACE INTO outbox ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
            ))?
            .execute(params![
                entry.id,
                entry.kind,
                entry.thread,
                entry.created_at_ms,
                entry.due_ms,
                entry.lease_until_ms,
                entry.attempts,
                body
            ])?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn read_outbox(&self, id: &str) -> Result<Option<OutboxEntry>, StoreError> {
        self.read(|tx| {
            let found = tx
                .prepare_cached(&format!("SELECT {COLUMNS} FROM outbox WHERE id = ?1"))?
                .query_row([id], entry_from_row)
                .optional()?;
            found.map(decoded).transpose()
        })
        .await
    }

    pub(crate) async fn outbox_page(
        &self,
        query: OutboxQuery,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        self.read(|tx| {
            // Absent filters are NULL parameters: one statement for all.
            let rows = tx
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM outbox WHERE kind = ?1 \
                     AND (?2 IS NULL OR thread = ?2) \
                     AND (?3 IS NULL OR due_ms <= ?3) \
                     ORDER BY due_ms, id LIMIT ?4"
                ))?
                .query_map(
                    params![query.kind, query.thread, query.due_by_ms, clamp(query.limit)],
                    entry_from_row,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            rows.into_iter().map(decoded).collect()
        })
        .await
    }

    pub(crate) async fn take_outbox_entry(
        &self,
        id: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<Option<OutboxEntry>, StoreError> {
        let id = id.to_owned();
        self.write(Touches::NoRun, move |tx| {
            let taken = tx
                .prepare_cached(&format!(
                    "UPDATE outbox SET lease_until_ms = ?3, attempts = attempts + 1 \
                     WHERE id = ?1 AND lease_until_ms <= ?2 \
                     RETURNING {COLUMNS}"
                ))?
                .query_row(params![id, now_ms, lease_until_ms], entry_from_row)
                .optional()?;
            taken.map(decoded).transpose()
        })
        .await
    }

    pub(crate) async fn remove_outbox(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.write(Touches::NoRun, move |tx| {
            Ok(tx.prepare_cached("DELETE FROM outbox WHERE id = ?1")?.execute([&id])? == 1)
        })
        .await
    }
}
