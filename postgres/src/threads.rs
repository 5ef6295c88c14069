//! Thread records (`ThreadStore::create_thread` and the rest): the `threads`
//! table.

use async_trait::async_trait;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use tollgate_checkpoint::{
    StoreError, ThreadMatches, ThreadQuery, ThreadRecord, ThreadStatus, ThreadStorage, ThreadStore,
};

use crate::conn::client_error;
use crate::rows::{column, damaged};
use crate::sql::Sql;
use crate::store::PostgresStore;

const COLUMNS: &str =
    "id, created_at_ms, updated_at_ms, metadata, ttl_ms, owner, tenant, reviewers";

fn thread_from_row(row: &Row) -> Result<ThreadRecord, StoreError> {
    let id: String = column(row, 0)?;
    let text: String = column(row, 3)?;
    let metadata = serde_json::from_str(&text)
        .map_err(|error| damaged(format!("thread `{id}`: its metadata is not JSON: {error}")))?;
    let mut record = ThreadRecord::new(id, column(row, 1)?, metadata)
        .with_ttl(column(row, 4)?)
        .with_owner(column(row, 5)?, column(row, 6)?);
    record.reviewers = column::<Option<Vec<String>>>(row, 7)?.unwrap_or_default();
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
            "WITH inserted AS (INSERT INTO threads ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (id) DO NOTHING RETURNING {COLUMNS}) \
             SELECT {COLUMNS}, true FROM inserted \
             UNION ALL SELECT {COLUMNS}, false FROM threads WHERE id = $1 \
             AND NOT EXISTS (SELECT 1 FROM inserted)"
        );
        let (client, statement) = self.prepared(&sql).await?;
        let reviewers = (!record.reviewers.is_empty()).then_some(&record.reviewers);
        let params: [&(dyn ToSql + Sync); 8] = [
            &record.id,
            &record.created_at_ms,
            &record.updated_at_ms,
            &metadata,
            &record.ttl_ms,
            &record.owner,
            &record.tenant,
            &reviewers,
        ];
        let row = client.row(&statement, &params).await.map_err(client_error)?;
        Ok((thread_from_row(&row)?, column(&row, 8)?))
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
                let status: String = column(row, 8)?;
                if page.offer(thread_from_row(row)?, &status) {
                    return Ok(page.into_found());
                }
            }
            if (rows.len() as i64) < chunk {
                return Ok(page.into_found());
            }
        }
    }

    /// Read through the partial index of threads with a time to live,
    /// each one's latest run by its id.
    async fn expired_threads(&self, now_ms: i64, limit: u64) -> Result<Vec<String>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (client, statement) = self
            .prepared(
                "SELECT t.id FROM threads t LEFT JOIN runs r ON r.id = t.latest_run \
                 WHERE t.ttl_ms IS NOT NULL AND t.status IN ('idle', 'error') \
                 AND greatest(t.updated_at_ms, r.updated_at_ms) + t.ttl_ms <= $1 LIMIT $2",
            )
            .await?;
        let params: [&(dyn ToSql + Sync); 2] = [&now_ms, &limit];
        let rows = client.rows(&statement, &params).await.map_err(client_error)?;
        rows.iter().map(|row| column(row, 0)).collect()
    }

    /// One statement: each table read by its run key, sizes as stored
    /// (`pg_column_size`: after compression).
    async fn thread_storage(&self, thread: &str) -> Result<ThreadStorage, StoreError> {
        let (client, statement) = self.prepared(STORAGE).await?;
        let row = client.row(&statement, &[&thread]).await.map_err(client_error)?;
        let bytes = |at: usize| -> Result<u64, StoreError> {
            Ok(u64::try_from(column::<i64>(&row, at)?).unwrap_or(0))
        };
        Ok(ThreadStorage::new(bytes(0)?, bytes(1)?, bytes(2)?))
    }

    async fn set_thread_reviewers(
        &self,
        thread: &str,
        reviewers: &[String],
    ) -> Result<bool, StoreError> {
        let statement = "UPDATE threads SET reviewers = $2 WHERE id = $1";
        let (client, statement) = self.prepared(statement).await?;
        let reviewers = (!reviewers.is_empty()).then(|| reviewers.to_vec());
        let params: [&(dyn ToSql + Sync); 2] = [&thread, &reviewers];
        Ok(client.exec(&statement, &params).await.map_err(client_error)? == 1)
    }

    async fn delete_thread(&self, thread: &str) -> Result<bool, StoreError> {
        let (client, statement) = self.prepared("DELETE FROM threads WHERE id = $1").await?;
        Ok(client.exec(&statement, &[&thread]).await.map_err(client_error)? == 1)
    }
}

/// The runs of thread `$1`, the bytes of their checkpoints (steps'
/// frontiers and updates, snapshots, pending writes, interrupts and
/// decisions) and of their events (steps' and the other transitions').
const STORAGE: &str = "WITH rs AS (SELECT id FROM runs WHERE thread = $1) SELECT \
    (SELECT count(*) FROM rs), \
    ((SELECT coalesce(sum(pg_column_size(frontier) + pg_column_size(updates)), 0) \
        FROM steps WHERE run IN (SELECT id FROM rs)) \
     + (SELECT coalesce(sum(pg_column_size(payload)), 0) FROM snapshots \
        WHERE run IN (SELECT id FROM rs)) \
     + (SELECT coalesce(sum(pg_column_size(payload)), 0) FROM pending_writes \
        WHERE run IN (SELECT id FROM rs)) \
     + (SELECT coalesce(sum(pg_column_size(payload) + coalesce(pg_column_size(decision), 0)), 0) \
        FROM interrupts WHERE run IN (SELECT id FROM rs)))::bigint, \
    ((SELECT coalesce(sum(pg_column_size(events)), 0) FROM steps WHERE run IN (SELECT id FROM rs)) \
     + (SELECT coalesce(sum(pg_column_size(lines)), 0) FROM events \
        WHERE run IN (SELECT id FROM rs)))::bigint";

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
    /// The holder's values (`Holder::sql`).
    held: Vec<String>,
    /// The groups whose reviews widen the holder's.
    reviewed: Option<Vec<String>>,
}

impl Search {
    fn of(query: &ThreadQuery) -> Result<Self, StoreError> {
        let mut search = Search {
            sql: String::new(),
            status: None,
            busy: query.status.is_some().then(|| query.busy.clone()),
            ids: query.ids.clone(),
            metadata: None,
            held: Vec::new(),
            reviewed: None,
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
        if let Some(holder) = &query.held_by {
            let (condition, held) = holder.sql('$', next);
            next += held.len();
            search.held = held;
            match query.reviewed_by.is_empty() {
                true => conditions.push(condition),
                false => {
                    search.reviewed = Some(query.reviewed_by.clone());
                    conditions.push(format!(
                        "({condition} OR (status = 'interrupted' AND reviewers && ${next}))"
                    ));
                    next += 1;
                }
            }
        }
        let mut param = || {
            next += 1;
            format!("${}", next - 1)
        };
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
        params.extend(self.held.iter().map(|value| value as &(dyn ToSql + Sync)));
        if let Some(reviewed) = &self.reviewed {
            params.push(reviewed);
        }
        params
    }
}
