//! Thread records (`ThreadStore::create_thread` and the rest): the `threads`
//! table.

use async_trait::async_trait;
use rusqlite::types::Value as SqlValue;
use rusqlite::{params, OptionalExtension, Row};

use super::fault::Abort;
use super::writers::Touches;
use super::SqliteStore;
use crate::error::StoreError;
use crate::listing::{ThreadMatches, ThreadQuery, ThreadRecord, ThreadStatus};
use crate::store::ThreadStore;

const COLUMNS: &str = "id, created_at_ms, updated_at_ms, metadata";

fn thread_from_row(row: &Row<'_>) -> rusqlite::Result<(String, i64, i64, String)> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
}

fn decoded(
    (id, created_at_ms, updated_at_ms, metadata): (String, i64, i64, String),
) -> Result<ThreadRecord, Abort> {
    let metadata = serde_json::from_str(&metadata).map_err(|error| {
        Abort::Refused(StoreError::Backend {
            source: format!("thread `{id}`: its metadata is not JSON: {error}").into(),
        })
    })?;
    Ok(ThreadRecord { id, created_at_ms, updated_at_ms, metadata })
}

fn metadata_text(metadata: &serde_json::Value) -> Result<String, StoreError> {
    serde_json::to_string(metadata).map_err(|error| StoreError::Backend { source: Box::new(error) })
}

#[async_trait]
impl ThreadStore for SqliteStore {
    async fn create_thread(
        &self,
        record: ThreadRecord,
    ) -> Result<(ThreadRecord, bool), StoreError> {
        let metadata = metadata_text(&record.metadata)?;
        self.write(Touches::NoRun, move |tx| {
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO threads (id, created_at_ms, updated_at_ms, metadata) \
                     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (id) DO NOTHING",
                )?
                .execute(params![
                    record.id,
                    record.created_at_ms,
                    record.updated_at_ms,
                    metadata
                ])?;
            if inserted == 1 {
                return Ok((record.clone(), true));
            }
            let found = tx
                .prepare_cached(&format!("SELECT {COLUMNS} FROM threads WHERE id = ?1"))?
                .query_row([&record.id], thread_from_row)?;
            Ok((decoded(found)?, false))
        })
        .await
    }

    async fn thread_record(&self, thread: &str) -> Result<Option<ThreadRecord>, StoreError> {
        self.read(|tx| {
            let found = tx
                .prepare_cached(&format!("SELECT {COLUMNS} FROM threads WHERE id = ?1"))?
                .query_row([thread], thread_from_row)
                .optional()?;
            found.map(decoded).transpose()
        })
        .await
    }

    async fn update_thread(
        &self,
        thread: &str,
        metadata: serde_json::Value,
        at_ms: i64,
    ) -> Result<ThreadRecord, StoreError> {
        let text = metadata_text(&metadata)?;
        let thread = thread.to_owned();
        self.write(Touches::NoRun, move |tx| {
            let found = tx
                .prepare_cached(&format!(
                    "UPDATE threads SET metadata = ?2, updated_at_ms = ?3 WHERE id = ?1 \
                     RETURNING {COLUMNS}"
                ))?
                .query_row(params![thread, text, at_ms], thread_from_row)
                .optional()?;
            match found {
                Some(found) => decoded(found),
                None => Err(StoreError::ThreadNotFound { thread: thread.clone() }.into()),
            }
        })
        .await
    }

    async fn search_threads(&self, query: &ThreadQuery) -> Result<Vec<ThreadRecord>, StoreError> {
        let (sql, params) = search_sql(query)?;
        self.read(|tx| {
            let mut statement = tx.prepare_cached(&sql)?;
            let mut rows = statement.query(rusqlite::params_from_iter(params.iter()))?;
            let mut page = ThreadMatches::new(query);
            while !page.is_full() {
                let Some(row) = rows.next()? else { break };
                let status: String = row.get(4)?;
                page.offer(decoded(thread_from_row(row)?)?, &status);
            }
            Ok(page.into_found())
        })
        .await
    }

    async fn delete_thread(&self, thread: &str) -> Result<bool, StoreError> {
        let thread = thread.to_owned();
        self.write(Touches::NoRun, move |tx| {
            Ok(tx.prepare_cached("DELETE FROM threads WHERE id = ?1")?.execute([&thread])? == 1)
        })
        .await
    }
}

/// The statement a search reads its candidates with, newest first, and
/// its parameters: driven by the ids asked for, else by the first scalar
/// metadata value (`thread_tags`), else by the status
/// (`threads_by_status`), else by creation. Its conditions are exact for
/// the status; the caller checks every condition
/// ([`ThreadQuery::admits`]) on what it reads.
fn search_sql(query: &ThreadQuery) -> Result<(String, Vec<SqlValue>), StoreError> {
    let json = |value: &serde_json::Value| metadata_text(value);
    let busy = json(&serde_json::json!(query.busy))?;
    let mut params = Vec::new();
    let status = match query.status {
        None => String::from("1"),
        Some(ThreadStatus::Busy) => {
            params.push(SqlValue::Text(busy));
            String::from("(t.status = 'busy' OR t.id IN (SELECT value FROM json_each(?1)))")
        }
        Some(other) => {
            params.extend([SqlValue::Text(other.as_str().to_owned()), SqlValue::Text(busy)]);
            String::from("t.status = ?1 AND t.id NOT IN (SELECT value FROM json_each(?2))")
        }
    };
    let next = params.len() + 1;
    let tagged = query.metadata.iter().find(|(_, value)| !value.is_object() && !value.is_array());
    let from = if let Some(ids) = &query.ids {
        params.push(SqlValue::Text(json(&serde_json::json!(ids))?));
        format!(
            "threads t WHERE t.id IN (SELECT value FROM json_each(?{next})) AND {status} \
             ORDER BY t.created_at_ms DESC, t.id DESC"
        )
    } else if let Some((key, value)) = tagged {
        params.extend([SqlValue::Text(key.clone()), SqlValue::Text(json(value)?)]);
        format!(
            "thread_tags g CROSS JOIN threads t ON t.id = g.thread \
             WHERE g.key = ?{next} AND g.value = json_quote(json_extract(?{}, '$')) AND {status} \
             ORDER BY g.created_at_ms DESC, g.thread DESC",
            next + 1
        )
    } else {
        format!("threads t WHERE {status} ORDER BY t.created_at_ms DESC, t.id DESC")
    };
    Ok((format!("SELECT t.{} FROM {from}", COLUMNS.replace(", ", ", t.") + ", t.status"), params))
}
