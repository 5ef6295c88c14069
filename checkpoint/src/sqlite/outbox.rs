//! The outbox (`OutboxStore::put_outbox` and the rest): the `outbox` table.
//! Taking an entry is one `UPDATE … RETURNING` that checks its lease;
//! gating one is one `UPDATE` that checks its run (writes are serialized,
//! so no status change slips between the check and the gate). Gates open
//! by the triggers of schema 17.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension, Row};

use super::fault::Abort;
use super::writers::Touches;
use super::SqliteStore;
use crate::error::StoreError;
use crate::outbox::{OutboxEntry, OutboxGate, OutboxQuery};
use crate::store::OutboxStore;

const COLUMNS: &str = "id, kind, thread, created_at_ms, due_ms, lease_until_ms, attempts, body, \
                       gate_run, gate_ended, gate_seq";

type Gate = (Option<String>, bool, i64);
type EntryRow = (String, String, Option<String>, i64, i64, i64, u32, String, Gate);

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
        (row.get(8)?, row.get(9)?, row.get(10)?),
    ))
}

fn decoded(
    (id, kind, thread, created_at_ms, due_ms, lease_until_ms, attempts, body, gate): EntryRow,
) -> Result<OutboxEntry, Abort> {
    let body = OutboxEntry::body_from_text(&id, &body).map_err(Abort::Refused)?;
    let mut entry = OutboxEntry::new(id, kind, thread, created_at_ms, due_ms, body);
    entry.lease_until_ms = lease_until_ms;
    entry.attempts = attempts;
    let (run, ended, seq) = gate;
    entry.gate =
        OutboxGate::from_columns(&entry.id, run.as_deref(), ended, seq).map_err(Abort::Refused)?;
    Ok(entry)
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl OutboxStore for SqliteStore {
    async fn put_outbox(&self, entry: OutboxEntry) -> Result<(), StoreError> {
        let body = entry.body_text()?;
        let (gate_run, gate_ended, gate_seq) = entry.gate_columns();
        self.write(Touches::NoRun, move |tx| {
            tx.prepare_cached(&format!(
                "INSERT OR REPLACE INTO outbox ({COLUMNS}) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
            ))?
            .execute(params![
                entry.id,
                entry.kind,
                entry.thread,
                entry.created_at_ms,
                entry.due_ms,
                entry.lease_until_ms,
                entry.attempts,
                body,
                gate_run,
                gate_ended,
                gate_seq
            ])?;
            Ok(())
        })
        .await
    }

    async fn outbox_entry(&self, id: &str) -> Result<Option<OutboxEntry>, StoreError> {
        self.read(|tx| {
            let found = tx
                .prepare_cached(&format!("SELECT {COLUMNS} FROM outbox WHERE id = ?1"))?
                .query_row([id], entry_from_row)
                .optional()?;
            found.map(decoded).transpose()
        })
        .await
    }

    async fn list_outbox(&self, query: OutboxQuery) -> Result<Vec<OutboxEntry>, StoreError> {
        // What is ready is read through its own (partial) index, which
        // gated entries are not in; the planner picks it only for a
        // statement that says `gate_run IS NULL`, so that is a second one.
        let ready = if query.ready { "AND gate_run IS NULL" } else { "" };
        let (after_due, after_id) = query.after.clone().unzip();
        self.read(move |tx| {
            // Absent filters are NULL parameters: one statement for all.
            let rows = tx
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM outbox WHERE kind = ?1 {ready} \
                     AND (?2 IS NULL OR thread = ?2) \
                     AND (?3 IS NULL OR due_ms <= ?3) \
                     AND (?5 IS NULL OR (due_ms, id) > (?5, ?6)) \
                     ORDER BY due_ms, id LIMIT ?4"
                ))?
                .query_map(
                    params![
                        query.kind,
                        query.thread,
                        query.due_by_ms,
                        clamp(query.limit),
                        after_due,
                        after_id
                    ],
                    entry_from_row,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            rows.into_iter().map(decoded).collect()
        })
        .await
    }

    async fn take_outbox(
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

    async fn gate_outbox(&self, ids: &[String], gate: OutboxGate) -> Result<u64, StoreError> {
        let ids = ids.to_vec();
        let (run, ended, seq) = gate.columns();
        self.write(Touches::NoRun, move |tx| {
            let mut gated = 0;
            let mut statement = tx.prepare_cached(
                "UPDATE outbox SET gate_run = ?2, gate_ended = ?3, gate_seq = ?4 \
                 WHERE id = ?1 AND gate_run IS NULL AND ( \
                   EXISTS (SELECT 1 FROM runs r WHERE r.id = ?2 AND ( \
                     r.status IN ('running', 'queued') \
                     OR (?3 AND r.status = 'awaiting_hitl') OR r.last_seq <= ?4)) \
                   OR (NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = ?2) \
                       AND EXISTS (SELECT 1 FROM outbox p WHERE p.id = ?2 \
                                   AND p.due_ms < 9223372036854775807)))",
            )?;
            for id in &ids {
                gated += statement.execute(params![id, run, ended, seq])? as u64;
            }
            Ok(gated)
        })
        .await
    }

    async fn delete_outbox(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.write(Touches::NoRun, move |tx| {
            Ok(tx.prepare_cached("DELETE FROM outbox WHERE id = ?1")?.execute([&id])? == 1)
        })
        .await
    }
}
