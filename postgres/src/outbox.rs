//! The outbox (`Store::put_outbox` and the rest): the `outbox` table.
//! Taking an entry is one `UPDATE … RETURNING` that checks its lease under the row's lock.

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use tollgate_checkpoint::{OutboxEntry, OutboxQuery, StoreError};

use crate::rows::column;
use crate::sql::Sql;
use crate::store::{client_error, PostgresStore};

/// Schema version 20: the outbox, work a server owes to later (runs
/// waiting for their thread or time, webhooks waiting for their run).
pub(crate) const OUTBOX_MIGRATION: &str = r#"
    CREATE TABLE outbox (
        id             text PRIMARY KEY,
        kind           text NOT NULL,
        thread         text,
        created_at_ms  bigint NOT NULL,
        due_ms         bigint NOT NULL,
        lease_until_ms bigint NOT NULL,
        attempts       bigint NOT NULL,
        body           text NOT NULL           -- JSON, the kind's own record
    );
    CREATE INDEX outbox_due ON outbox (kind, due_ms, id);
    CREATE INDEX outbox_by_thread ON outbox (thread, kind) WHERE thread IS NOT NULL;
"#;

const COLUMNS: &str = "id, kind, thread, created_at_ms, due_ms, lease_until_ms, attempts, body";

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
    Ok(entry)
}

impl PostgresStore {
    pub(crate) async fn upsert_outbox(&self, entry: OutboxEntry) -> Result<(), StoreError> {
        let body = entry.body_text()?;
        let (client, statement) = self
            .prepared(&format!(
                "INSERT INTO outbox ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (id) DO UPDATE SET kind = EXCLUDED.kind, thread = EXCLUDED.thread, \
                 created_at_ms = EXCLUDED.created_at_ms, due_ms = EXCLUDED.due_ms, \
                 lease_until_ms = EXCLUDED.lease_until_ms, attempts = EXCLUDED.attempts, \
                 body = EXCLUDED.body"
            ))
            .await?;
        let attempts = i64::from(entry.attempts);
        let params: [&(dyn ToSql + Sync); 8] = [
            &entry.id,
            &entry.kind,
            &entry.thread,
            &entry.created_at_ms,
            &entry.due_ms,
            &entry.lease_until_ms,
            &attempts,
            &body,
        ];
        client.exec(&statement, &params).await.map_err(client_error)?;
        Ok(())
    }

    pub(crate) async fn read_outbox(&self, id: &str) -> Result<Option<OutboxEntry>, StoreError> {
        let (client, statement) =
            self.prepared(&format!("SELECT {COLUMNS} FROM outbox WHERE id = $1")).await?;
        let row = client.row_opt(&statement, &[&id]).await.map_err(client_error)?;
        row.as_ref().map(entry_from_row).transpose()
    }

    pub(crate) async fn outbox_page(
        &self,
        query: OutboxQuery,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        // Absent filters are NULL parameters: one statement for all.
        let (client, statement) = self
            .prepared(&format!(
                "SELECT {COLUMNS} FROM outbox WHERE kind = $1 \
                 AND ($2::text IS NULL OR thread = $2) \
                 AND ($3::bigint IS NULL OR due_ms <= $3) \
                 ORDER BY due_ms, id LIMIT $4"
            ))
            .await?;
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let params: [&(dyn ToSql + Sync); 4] =
            [&query.kind, &query.thread, &query.due_by_ms, &limit];
        let rows = client.rows(&statement, &params).await.map_err(client_error)?;
        rows.iter().map(entry_from_row).collect()
    }

    pub(crate) async fn take_outbox_entry(
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

    pub(crate) async fn remove_outbox(&self, id: &str) -> Result<bool, StoreError> {
        let (client, statement) = self.prepared("DELETE FROM outbox WHERE id = $1").await?;
        Ok(client.exec(&statement, &[&id]).await.map_err(client_error)? == 1)
    }
}
