//! Thread records (`ThreadStore::create_thread` and the rest): the `threads`
//! table.

use async_trait::async_trait;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use tollgate_checkpoint::{
    StoreError, ThreadMatches, ThreadQuery, ThreadRecord, ThreadStatus, ThreadStore,
};

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

    async fn search_threads(&self, query: &ThreadQuery) -> Result<Vec<ThreadRecord>, StoreError> {
        let search = Search::of(query)?;
        let (client, statement) = self.prepared(&search.sql).await?;
        // Candidates a chunk at a time, newest first: the conditions are
        // exact but for the metadata's containment, checked here.
        let chunk = query.offset.saturating_add(query.limit).clamp(25, 1_000) as i64;
        let (mut page, mut read) = (ThreadMatches::new(query), 0i64);
        loop {
            let mut params = search.params();
            params.extend([&chunk as &(dyn ToSql + Sync), &read]);
            let rows = client.rows(&statement, &params).await.map_err(client_error)?;
            read += rows.len() as i64;
            for row in &rows {
                let status: String = column(row, 4)?;
                if page.offer(thread_from_row(row)?, &status) {
                    return Ok(page.into_found());
                }
            }
            if (rows.len() as i64) < chunk {
                return Ok(page.into_found());
            }
        }
    }

    async fn delete_thread(&self, thread: &str) -> Result<bool, StoreError> {
        let (client, statement) = self.prepared("DELETE FROM threads WHERE id = $1").await?;
        Ok(client.exec(&statement, &[&thread]).await.map_err(client_error)? == 1)
    }
}

/// A search's statement and its parameters but the last two (`LIMIT`,
/// `OFFSET`): the status exact (the index `threads_by_status`), the ids
/// asked for, the metadata as a containment the GIN index answers.
struct Search {
    sql: String,
    status: Option<String>,
    /// The threads counted busy, when the statement names them.
    busy: Option<Vec<String>>,
    ids: Option<Vec<String>>,
    metadata: Option<String>,
}

impl Search {
    fn of(query: &ThreadQuery) -> Result<Self, StoreError> {
        let mut search = Search {
            sql: String::new(),
            status: None,
            busy: query.status.is_some().then(|| query.busy.clone()),
            ids: query.ids.clone(),
            metadata: None,
        };
        let mut conditions = Vec::new();
        let mut next = 1;
        let mut param = || {
            next += 1;
            format!("${}", next - 1)
        };
        match query.status {
            None => {}
            Some(ThreadStatus::Busy) => {
                conditions.push(format!("(status = 'busy' OR id = ANY({}))", param()));
            }
            Some(other) => {
                search.status = Some(other.as_str().to_owned());
                let (status, busy) = (param(), param());
                conditions.push(format!("status = {status} AND NOT (id = ANY({busy}))"));
            }
        }
        if query.ids.is_some() {
            conditions.push(format!("id = ANY({})", param()));
        }
        if !query.metadata.is_empty() {
            let wanted = serde_json::Value::Object(query.metadata.clone());
            search.metadata = Some(metadata_text(&wanted)?);
            conditions.push(format!("tags @> {}::text::jsonb", param()));
        }
        let filter = match conditions.is_empty() {
            true => String::new(),
            false => format!("WHERE {}", conditions.join(" AND ")),
        };
        let (limit, offset) = (param(), param());
        search.sql = format!(
            "SELECT {COLUMNS}, status FROM threads {filter} \
             ORDER BY created_at_ms DESC, id DESC LIMIT {limit} OFFSET {offset}"
        );
        Ok(search)
    }

    /// The parameters in the order of the statement's numbers.
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::new();
        if let Some(status) = &self.status {
            params.push(status);
        }
        if let Some(busy) = &self.busy {
            params.push(busy);
        }
        if let Some(ids) = &self.ids {
            params.push(ids);
        }
        if let Some(metadata) = &self.metadata {
            params.push(metadata);
        }
        params
    }
}
