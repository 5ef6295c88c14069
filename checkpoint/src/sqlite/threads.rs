//! Thread records (`ThreadStore::create_thread` and the rest): the `threads`
//! table.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension, Row};

use super::fault::Abort;
use super::writers::Touches;
use super::SqliteStore;
use crate::error::StoreError;
use crate::listing::ThreadRecord;
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

    async fn list_threads(&self, offset: u64, limit: u64) -> Result<Vec<ThreadRecord>, StoreError> {
        let (offset, limit) =
            (i64::try_from(offset).unwrap_or(i64::MAX), i64::try_from(limit).unwrap_or(i64::MAX));
        self.read(|tx| {
            let rows = tx
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM threads \
                     ORDER BY created_at_ms DESC, id DESC LIMIT ?1 OFFSET ?2"
                ))?
                .query_map([limit, offset], thread_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            rows.into_iter().map(decoded).collect()
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
