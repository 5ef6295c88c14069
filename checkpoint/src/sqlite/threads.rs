//! Thread records (`ThreadStore::create_thread` and the rest): the `threads`
//! table.

use async_trait::async_trait;
use rusqlite::types::Value as SqlValue;
use rusqlite::{params, OptionalExtension, Row};

use super::fault::Abort;
use super::writers::Touches;
use super::SqliteStore;
use crate::error::StoreError;
use crate::listing::{
    Holder, ThreadMatches, ThreadQuery, ThreadRecord, ThreadStatus, ThreadStorage,
};
use crate::store::ThreadStore;

const COLUMNS: &str =
    "id, created_at_ms, updated_at_ms, metadata, ttl_ms, owner, tenant, reviewers";

/// The bytes of run `?1`'s checkpoints (steps' frontiers and updates,
/// their parts, snapshots, pending writes, interrupts and decisions) and
/// of its events (steps' and the other transitions'), each table read by
/// its key.
const STORAGE_OF_RUN: &str = "SELECT \
    (SELECT coalesce(sum(length(frontier) + length(updates)), 0) FROM steps WHERE num = ?1) \
    + (SELECT coalesce(sum(length(p.part)), 0) FROM steps s JOIN step_parts p \
       ON p.id BETWEEN (s.id << 20) AND (s.id << 20) + 1048575 WHERE s.num = ?1) \
    + (SELECT coalesce(sum(length(payload)), 0) FROM snapshots \
       WHERE id BETWEEN (?1 << 32) AND (?1 << 32) + 4294967295) \
    + (SELECT coalesce(sum(length(payload)), 0) FROM pending_writes WHERE num = ?1) \
    + (SELECT coalesce(sum(length(CAST(payload AS BLOB)) \
       + coalesce(length(CAST(decision AS BLOB)), 0)), 0) FROM interrupts WHERE num = ?1), \
    (SELECT coalesce(sum(length(CAST(events AS BLOB))), 0) FROM steps WHERE num = ?1) \
    + (SELECT coalesce(sum(length(CAST(lines AS BLOB))), 0) FROM events WHERE num = ?1)";

/// A `threads` row as [`COLUMNS`] reads it.
struct ThreadRow {
    id: String,
    created_at_ms: i64,
    updated_at_ms: i64,
    metadata: String,
    ttl_ms: Option<i64>,
    owner: Option<String>,
    tenant: Option<String>,
    reviewers: Option<String>,
}

fn thread_from_row(row: &Row<'_>) -> rusqlite::Result<ThreadRow> {
    Ok(ThreadRow {
        id: row.get(0)?,
        created_at_ms: row.get(1)?,
        updated_at_ms: row.get(2)?,
        metadata: row.get(3)?,
        ttl_ms: row.get(4)?,
        owner: row.get(5)?,
        tenant: row.get(6)?,
        reviewers: row.get(7)?,
    })
}

fn decoded(row: ThreadRow) -> Result<ThreadRecord, Abort> {
    let ThreadRow { id, created_at_ms, updated_at_ms, metadata, ttl_ms, owner, tenant, reviewers } =
        row;
    let reviewers = match reviewers {
        None => Vec::new(),
        Some(text) => serde_json::from_str(&text).map_err(|error| {
            Abort::Refused(StoreError::Backend {
                source: format!("thread `{id}`: its reviewers are not a JSON array: {error}")
                    .into(),
            })
        })?,
    };
    let metadata = serde_json::from_str(&metadata).map_err(|error| {
        Abort::Refused(StoreError::Backend {
            source: format!("thread `{id}`: its metadata is not JSON: {error}").into(),
        })
    })?;
    Ok(ThreadRecord {
        id,
        created_at_ms,
        updated_at_ms,
        metadata,
        ttl_ms,
        owner,
        tenant,
        reviewers,
    })
}

/// The reviewers as stored: a JSON array, `NULL` for none.
fn reviewers_text(reviewers: &[String]) -> Result<Option<String>, StoreError> {
    if reviewers.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(reviewers)
        .map(Some)
        .map_err(|error| StoreError::Backend { source: Box::new(error) })
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
        let reviewers = reviewers_text(&record.reviewers)?;
        self.write(Touches::NoRun, move |tx| {
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO threads (id, created_at_ms, updated_at_ms, metadata, ttl_ms, \
                     owner, tenant, reviewers) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
                     ON CONFLICT (id) DO NOTHING",
                )?
                .execute(params![
                    record.id,
                    record.created_at_ms,
                    record.updated_at_ms,
                    metadata,
                    record.ttl_ms,
                    record.owner,
                    record.tenant,
                    reviewers
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
                let status: String = row.get(8)?;
                page.offer(decoded(thread_from_row(row)?)?, &status);
            }
            Ok(page.into_found())
        })
        .await
    }

    /// Read through the partial index of threads with a time to live,
    /// each one's latest run by its id.
    async fn expired_threads(&self, now_ms: i64, limit: u64) -> Result<Vec<String>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|tx| {
            let mut statement = tx.prepare_cached(
                "SELECT t.id FROM threads t LEFT JOIN runs r ON r.id = t.latest_run \
                 WHERE t.ttl_ms IS NOT NULL AND t.status IN ('idle', 'error') \
                 AND max(t.updated_at_ms, coalesce(r.updated_at_ms, 0)) + t.ttl_ms <= ?1 \
                 LIMIT ?2",
            )?;
            let ids = statement.query_map(params![now_ms, limit], |row| row.get(0))?;
            Ok(ids.collect::<rusqlite::Result<Vec<String>>>()?)
        })
        .await
    }

    /// Each run's rows by its number, read in one transaction: the
    /// bytes as stored (text as UTF-8).
    async fn thread_storage(&self, thread: &str) -> Result<ThreadStorage, StoreError> {
        self.read(|tx| {
            let nums: Vec<i64> = tx
                .prepare_cached("SELECT num FROM runs WHERE thread = ?1")?
                .query_map([thread], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let mut measure = tx.prepare_cached(STORAGE_OF_RUN)?;
            let mut storage = ThreadStorage::new(nums.len() as u64, 0, 0);
            for num in nums {
                let (checkpoints, events): (i64, i64) =
                    measure.query_row([num], |row| Ok((row.get(0)?, row.get(1)?)))?;
                storage.checkpoint_bytes += u64::try_from(checkpoints).unwrap_or(0);
                storage.event_bytes += u64::try_from(events).unwrap_or(0);
            }
            Ok(storage)
        })
        .await
    }

    async fn set_thread_reviewers(
        &self,
        thread: &str,
        reviewers: &[String],
    ) -> Result<bool, StoreError> {
        let (thread, text) = (thread.to_owned(), reviewers_text(reviewers)?);
        self.write(Touches::NoRun, move |tx| {
            let statement = "UPDATE threads SET reviewers = ?2 WHERE id = ?1";
            Ok(tx.prepare_cached(statement)?.execute(params![thread, text])? == 1)
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

/// A condition over a `threads` row (alias `t`): `waiting` holds and one
/// of the groups of parameter `?at` (a JSON array) reviews it.
pub(super) fn reviewed_sql(waiting: &str, at: usize) -> String {
    format!(
        "({waiting} AND EXISTS (SELECT 1 FROM json_each(t.reviewers) w \
         WHERE w.value IN (SELECT value FROM json_each(?{at}))))"
    )
}

/// The statement a search reads its candidates with, newest first, and
/// its parameters: driven by the ids asked for, else by the holder
/// (`threads_by_owner`, `threads_by_tenant`), else by the first scalar
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
    let status = match &query.held_by {
        Some(holder) => {
            let (condition, values) = holder.sql('?', params.len() + 1);
            params.extend(values.into_iter().map(SqlValue::Text));
            let condition = match query.reviewed_by.is_empty() {
                true => condition,
                false => {
                    params.push(SqlValue::Text(json(&serde_json::json!(query.reviewed_by))?));
                    format!(
                        "({condition} OR {})",
                        reviewed_sql("t.status = 'interrupted'", params.len())
                    )
                }
            };
            format!("{status} AND {condition}")
        }
        None => status,
    };
    let next = params.len() + 1;
    let tagged = query.metadata.iter().find(|(_, value)| !value.is_object() && !value.is_array());
    let from = if let Some(ids) = &query.ids {
        params.push(SqlValue::Text(json(&serde_json::json!(ids))?));
        format!(
            "threads t WHERE t.id IN (SELECT value FROM json_each(?{next})) AND {status} \
             ORDER BY t.created_at_ms DESC, t.id DESC"
        )
    } else if let (Some(holder), true) = (&query.held_by, query.reviewed_by.is_empty()) {
        // A user's threads through their holder's index, newest first:
        // fewer than a status's (the planner, without statistics, would
        // take the status's index and read every thread of that status).
        let index = match holder {
            Holder::Tenant(_) => "threads_by_tenant",
            _ => "threads_by_owner",
        };
        format!(
            "threads t INDEXED BY {index} WHERE {status} ORDER BY t.created_at_ms DESC, t.id DESC"
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
