//! The node cache (`NodeCacheStore::cache_get` / `cache_put`): the `node_cache`
//! table.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};

use super::writers::Touches;
use super::SqliteStore;
use crate::codec::Blob;
use crate::error::StoreError;
use crate::store::NodeCacheStore;

#[async_trait]
impl NodeCacheStore for SqliteStore {
    /// An unexpired cached output.
    async fn cache_get(
        &self,
        scope: &str,
        key: &str,
        now_ms: i64,
    ) -> Result<Option<Blob>, StoreError> {
        let bytes: Option<Vec<u8>> = self
            .read(|tx| {
                Ok(tx
                    .prepare_cached(
                        "SELECT value FROM node_cache WHERE scope = ?1 AND key = ?2 AND expires_ms > ?3",
                    )?
                    .query_row(params![scope, key, now_ms], |row| row.get(0))
                    .optional()?)
            })
            .await?;
        bytes
            .map(|bytes| Blob::from_bytes(&bytes))
            .transpose()
            .map_err(|source| StoreError::Backend { source: Box::new(source) })
    }

    /// Stores a cached output, removing the scope's expired ones.
    async fn cache_put(
        &self,
        scope: &str,
        key: &str,
        value: Blob,
        expires_at_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let bytes = value.to_bytes();
        let (scope, key) = (scope.to_owned(), key.to_owned());
        self.write(Touches::NoRun, move |tx| {
            tx.prepare_cached("DELETE FROM node_cache WHERE scope = ?1 AND expires_ms <= ?2")?
                .execute(params![scope, now_ms])?;
            tx.prepare_cached(
                "INSERT OR REPLACE INTO node_cache (scope, key, expires_ms, value) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![scope, key, expires_at_ms, bytes])?;
            Ok(())
        })
        .await
    }
}
