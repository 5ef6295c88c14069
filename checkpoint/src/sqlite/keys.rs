//! Request keys (`IdempotencyStore`): the `request_keys` table.

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};

use super::writers::Touches;
use super::SqliteStore;
use crate::error::StoreError;
use crate::keys::{claim_wins, Claimed, HeldKey, KeyClaim};
use crate::store::IdempotencyStore;

#[async_trait]
impl IdempotencyStore for SqliteStore {
    /// Read and written in one write transaction: the file's one writer
    /// at a time decides between claims, in any process.
    async fn claim_key(&self, claim: KeyClaim) -> Result<Claimed, StoreError> {
        self.write(Touches::NoRun, move |tx| {
            let held = tx
                .prepare_cached(
                    "SELECT fingerprint, made, claimed_at_ms, expires_at_ms FROM request_keys \
                     WHERE scope = ?1 AND key = ?2",
                )?
                .query_row(params![claim.scope, claim.key], |row| {
                    Ok(HeldKey::new(row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                })
                .optional()?;
            if let Some(held) = held.filter(|held| !claim_wins(&claim, Some(held))) {
                return Ok(Claimed::Held(held));
            }
            tx.prepare_cached(
                "INSERT OR REPLACE INTO request_keys \
                 (scope, key, fingerprint, made, claimed_at_ms, expires_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                claim.scope,
                claim.key,
                claim.fingerprint,
                claim.made,
                claim.now_ms,
                claim.expires_at_ms
            ])?;
            Ok(Claimed::Won)
        })
        .await
    }

    async fn release_key(&self, scope: &str, key: &str, made: &str) -> Result<bool, StoreError> {
        let (scope, key, made) = (scope.to_owned(), key.to_owned(), made.to_owned());
        self.write(Touches::NoRun, move |tx| {
            let gone = tx
                .prepare_cached(
                    "DELETE FROM request_keys WHERE scope = ?1 AND key = ?2 AND made = ?3",
                )?
                .execute(params![scope, key, made])?;
            Ok(gone > 0)
        })
        .await
    }

    async fn sweep_keys(&self, now_ms: i64, limit: u64) -> Result<u64, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.write(Touches::NoRun, move |tx| {
            let gone = tx
                .prepare_cached(
                    "DELETE FROM request_keys WHERE (scope, key) IN (SELECT scope, key \
                     FROM request_keys WHERE expires_at_ms <= ?1 LIMIT ?2)",
                )?
                .execute(params![now_ms, limit])?;
            Ok(gone as u64)
        })
        .await
    }
}
