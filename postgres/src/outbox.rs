//! The outbox (`OutboxStore::put_outbox` and the rest): the `outbox` table.
//! Taking an entry is one `UPDATE … RETURNING` that checks its lease under the row's lock.
//! Gating one is one `UPDATE` that checks its run under a share lock of
//! the run's row (or of the pending entry that will start it), so the
//! status change (or end) that opens the gate waits for the gate to be
//! committed, and its trigger, whose statements see it, opens it.

use async_trait::async_trait;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use tollgate_checkpoint::{OutboxEntry, OutboxGate, OutboxQuery, OutboxStore, StoreError};

use crate::conn::client_error;
use crate::rows::column;
use crate::sql::Sql;
use crate::store::PostgresStore;

const COLUMNS: &str = "id, kind, thread, created_at_ms, due_ms, lease_until_ms, attempts, body, \
                       gate_run, gate_ended, gate_seq";

fn entry_from_row(row: &Row) -> Result<OutboxEntry, StoreError> {
    let id: String = column(row, 0)?;
    let text: String = column(row, 7)?;
    let body = OutboxEntry::body_from_text(&id, &text)?;
    let mut entry = OutboxEntry::new(
        id,
        column::<String>(row, 1)?,
        column(row, 2)?,
        column(row, 3)?,
        column(row, 4)?,
        body,
    );
    entry.lease_until_ms = column(row, 5)?;
    entry.attempts = u32::try_from(column::<i64>(row, 6)?).unwrap_or(u32::MAX);
    let run: Option<String> = column(row, 8)?;
    entry.gate =
        OutboxGate::from_columns(&entry.id, run.as_deref(), column(row, 9)?, column(row, 10)?)?;
    Ok(entry)
}

#[async_trait]
impl OutboxStore for PostgresStore {
    async fn put_outbox(&self, entry: OutboxEntry) -> Result<(), StoreError> {
        let body = entry.body_text()?;
        let (client, statement) = self
            .prepared(&format!(
                "INSERT INTO outbox ({COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (id) DO UPDATE SET kind = EXCLUDED.kind, thread = EXCLUDED.thread, \
                 created_at_ms = EXCLUDED.created_at_ms, due_ms = EXCLUDED.due_ms, \
                 lease_until_ms = EXCLUDED.lease_until_ms, attempts = EXCLUDED.attempts, \
                 body = EXCLUDED.body, gate_run = EXCLUDED.gate_run, \
                 gate_ended = EXCLUDED.gate_ended, gate_seq = EXCLUDED.gate_seq"
            ))
            .await?;
        let attempts = i64::from(entry.attempts);
        let (gate_run, gate_ended, gate_seq) = entry.gate_columns();
        let params: [&(dyn ToSql + Sync); 11] = [
            &entry.id,
            &entry.kind,
            &entry.thread,
            &entry.created_at_ms,
            &entry.due_ms,
            &entry.lease_until_ms,
            &attempts,
            &body,
            &gate_run,
            &gate_ended,
            &gate_seq,
        ];
        client.exec(&statement, &params).await.map_err(client_error)?;
        Ok(())
    }

    async fn outbox_entry(&self, id: &str) -> Result<Option<OutboxEntry>, StoreError> {
        let (client, statement) =
            self.prepared(&format!("SELECT {COLUMNS} FROM outbox WHERE id = $1")).await?;
        let row = client.row_opt(&statement, &[&id]).await.map_err(client_error)?;
        row.as_ref().map(entry_from_row).transpose()
    }

    async fn list_outbox(&self, query: OutboxQuery) -> Result<Vec<OutboxEntry>, StoreError> {
        // Absent filters are NULL parameters: one statement for all (and
        // one for what is ready, whose partial index the planner uses only
        // for a statement that says `gate_run IS NULL`).
        let ready = if query.ready { "AND gate_run IS NULL" } else { "" };
        let (client, statement) = self
            .prepared(&format!(
                "SELECT {COLUMNS} FROM outbox WHERE kind = $1 {ready} \
                 AND ($2::text IS NULL OR thread = $2) \
                 AND ($3::bigint IS NULL OR due_ms <= $3) \
                 AND ($5::bigint IS NULL OR (due_ms, id) > ($5, $6::text)) \
                 ORDER BY due_ms, id LIMIT $4"
            ))
            .await?;
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let (after_due, after_id) = query.after.clone().unzip();
        let params: [&(dyn ToSql + Sync); 6] =
            [&query.kind, &query.thread, &query.due_by_ms, &limit, &after_due, &after_id];
        let rows = client.rows(&statement, &params).await.map_err(client_error)?;
        rows.iter().map(entry_from_row).collect()
    }

    async fn take_outbox(
        &self,
        id: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<Option<OutboxEntry>, StoreError> {
        let (client, statement) = self
            .prepared(&format!(
                "UPDATE outbox SET lease_until_ms = $3, attempts = attempts + 1 \
                 WHERE id = $1 AND lease_until_ms <= $2 \
                 RETURNING {COLUMNS}"
            ))
            .await?;
        let params: [&(dyn ToSql + Sync); 3] = [&id, &now_ms, &lease_until_ms];
        let row = client.row_opt(&statement, &params).await.map_err(client_error)?;
        row.as_ref().map(entry_from_row).transpose()
    }

    async fn gate_outbox(&self, ids: &[String], gate: OutboxGate) -> Result<u64, StoreError> {
        let (client, statement) = self
            .prepared(
                "UPDATE outbox SET gate_run = $2, gate_ended = $3, gate_seq = $4 \
                 WHERE id = ANY($1) AND gate_run IS NULL AND ( \
                   EXISTS (SELECT 1 FROM runs r WHERE r.id = $2 AND ( \
                     r.status IN ('running', 'queued') \
                     OR ($3 AND r.status = 'awaiting_hitl') OR r.last_seq <= $4) FOR SHARE) \
                   OR (NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = $2) \
                       AND EXISTS (SELECT 1 FROM outbox p WHERE p.id = $2 \
                                   AND p.due_ms < 9223372036854775807 FOR SHARE)))",
            )
            .await?;
        let (run, ended, seq) = gate.columns();
        let ids = ids.to_vec();
        let params: [&(dyn ToSql + Sync); 4] = [&ids, &run, &ended, &seq];
        client.exec(&statement, &params).await.map_err(client_error)
    }

    async fn delete_outbox(&self, id: &str) -> Result<bool, StoreError> {
        let (client, statement) = self.prepared("DELETE FROM outbox WHERE id = $1").await?;
        Ok(client.exec(&statement, &[&id]).await.map_err(client_error)? == 1)
    }
}
