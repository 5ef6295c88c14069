//! Thread records (`ThreadStore::create_thread` and the rest): the `threads`
//! table.

use async_trait::async_trait;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use tollgate_checkpoint::{StoreError, ThreadRecord, ThreadStore};

use crate::conn::client_error;
use crate::rows::{column, damaged};
use crate::sql::Sql;
use crate::store::PostgresStore;

const COLUMNS: &str = "id, created_at_ms, updated_at_ms, metadata";

fn thread_from_row(row: &Row) -> Result<ThreadRecord, StoreError> {
    let id: String = column(row, 0)?;
    let text: String = column(row, 3)?;
    let metadata = serde_json::from_str(&text)
        .map_err(|error| damaged(format!("thread `{id}`: its metadata is not JSON: {error}")))?;
    let mut record = ThreadRecord::new(id, column(row, 1)?, metadata);
    record.updated_at_ms = column(row, 2)?;
    Ok(record)
}

fn metadata_text(metadata: &serde_json::Value) -> Result<String, StoreError> {
    serde_json::to_string(metadata).map_err(|error| StoreError::Backend { source: Box::new(error) })
}

#[async_trait]
impl ThreadStore for PostgresStore {
    async fn create_thread(
        &self,
        record: ThreadRecord,
    ) -> Result<(ThreadRecord, bool), StoreError> {
        let metadata = metadata_text(&record.metadata)?;
        // One statement: the new row, or the row that was there.
        let sql = format!(
            "WITH inserted AS (INSERT INTO threads ({COLUMNS}) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO NOTHING RETURNING {COLUMNS}) \
             SELECT {COLUMNS}, true FROM inserted \
             UNION ALL SELECT {COLUMNS}, false FROM threads WHERE id = $1 \
             AND NOT EXISTS (SELECT 1 FROM inserted)"
        );
        let (client, statement) = self.prepared(&sql).await?;
        let params: [&(dyn ToSql + Sync); 4] =
            [&record.id, &record.created_at_ms, &record.updated_at_ms, &metadata];
        let row = client.row(&statement, &params).await.map_err(client_error)?;
        Ok((thread_from_row(&row)?, column(&row, 4)?))
    }

    async fn thread_record(&self, thread: &str) -> Result<Option<ThreadRecord>, StoreError> {
        let (client, statement) =
            self.prepared(&format!("SELECT {COLUMNS} FROM threads WHERE id = $1")).await?;
        let row = client.row_opt(&statement, &[&thread]).await.map_err(client_error)?;
        row.as_ref().map(thread_from_row).transpose()
    }

    async fn update_thread(
        &self,
        thread: &str,
        metadata: serde_json::Value,
        at_ms: i64,
    ) -> Result<ThreadRecord, StoreError> {
        let text = metadata_text(&metadata)?;
        let (client, statement) = self
            .prepared(&format!(
                "UPDATE threads SET metadata = $2, updated_at_ms = $3 WHERE id = $1 \
                 RETURNING {COLUMNS}"
            ))
            .await?;
        let params: [&(dyn ToSql + Sync); 3] = [&thread, &text, &at_ms];
        match client.row_opt(&statement, &params).await.map_err(client_error)? {
            Some(row) => thread_from_row(&row),
            None => Err(StoreError::ThreadNotFound { thread: thread.to_owned() }),
        }
    }

    async fn list_threads(&self, offset: u64, limit: u64) -> Result<Vec<ThreadRecord>, StoreError> {
        let (offset, limit) =
            (i64::try_from(offset).unwrap_or(i64::MAX), i64::try_from(limit).unwrap_or(i64::MAX));
        let (client, statement) = self
            .prepared(&format!(
                "SELECT {COLUMNS} FROM threads ORDER BY created_at_ms DESC, id DESC \
                 LIMIT $1 OFFSET $2"
            ))
            .await?;
        let rows = client.rows(&statement, &[&limit, &offset]).await.map_err(client_error)?;
        rows.iter().map(thread_from_row).collect()
    }

    async fn delete_thread(&self, thread: &str) -> Result<bool, StoreError> {
        let (client, statement) = self.prepared("DELETE FROM threads WHERE id = $1").await?;
        Ok(client.exec(&statement, &[&thread]).await.map_err(client_error)? == 1)
    }
}
