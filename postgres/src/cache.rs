//! The node cache (`NodeCacheStore::cache_get` / `cache_put`) and the thread check
//! of a run that continues its thread.

use async_trait::async_trait;
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;
use tollgate_checkpoint::{Blob, NodeCacheStore, StoreError, ThreadTurn};

use crate::conn::client_error;
use crate::rows::column;
use crate::sql::Sql;
use crate::store::PostgresStore;

#[async_trait]
impl NodeCacheStore for PostgresStore {
    /// An unexpired cached output.
    async fn cache_get(
        &self,
        scope: &str,
        key: &str,
        now_ms: i64,
    ) -> Result<Option<Blob>, StoreError> {
        let (client, statement) = self
            .prepared(
                "SELECT value FROM node_cache WHERE scope = $1 AND key = $2 AND expires_ms > $3",
            )
            .await?;
        let row = client
            .row_opt(&statement, &[&scope as &(dyn ToSql + Sync), &key, &now_ms])
            .await
            .map_err(client_error)?;
        match row {
            Some(row) => {
                let bytes: Vec<u8> = column(&row, 0)?;
                Blob::from_bytes(&bytes)
                    .map(Some)
                    .map_err(|source| StoreError::Backend { source: Box::new(source) })
            }
            None => Ok(None),
        }
    }

    /// Stores a cached output, removing the scope's expired ones: one
    /// statement, one round trip.
    async fn cache_put(
        &self,
        scope: &str,
        key: &str,
        value: Blob,
        expires_at_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let (client, statement) = self
            .prepared(
                "WITH purged AS (DELETE FROM node_cache WHERE scope = $1 AND expires_ms <= $5) \
                 INSERT INTO node_cache (scope, key, expires_ms, value) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (scope, key) DO UPDATE SET expires_ms = EXCLUDED.expires_ms, \
                 value = EXCLUDED.value",
            )
            .await?;
        client
            .exec(
                &statement,
                &[&scope as &(dyn ToSql + Sync), &key, &expires_at_ms, &value.to_bytes(), &now_ms],
            )
            .await
            .map_err(client_error)?;
        Ok(())
    }
}

/// Within `tx`: locks `thread` (an advisory lock, so that of two starts on
/// one thread one sees the other) and checks its latest run against `turn`.
pub(crate) async fn check_turn(
    tx: &Transaction<'_>,
    thread: &str,
    turn: ThreadTurn,
    unnamed: bool,
) -> Result<(), StoreError> {
    tx.exec_of(unnamed, "SELECT pg_advisory_xact_lock(hashtextextended($1, 7))", &[&thread])
        .await
        .map_err(client_error)?;
    let row = tx
        .row_opt_of(
            unnamed,
            "SELECT id, status FROM runs WHERE thread = $1 ORDER BY id DESC LIMIT 1",
            &[&thread],
        )
        .await
        .map_err(client_error)?;
    let latest: Option<(String, String)> = match row {
        Some(row) => Some((column(&row, 0)?, column(&row, 1)?)),
        None => None,
    };
    turn.check_stored(thread, latest.as_ref().map(|(id, status)| (id.as_str(), status.as_str())))
}
