//! Request keys (`IdempotencyStore`): the `request_keys` table.

use async_trait::async_trait;
use tokio_postgres::types::ToSql;
use tollgate_checkpoint::{claim_wins, Claimed, HeldKey, IdempotencyStore, KeyClaim, StoreError};

use crate::conn::client_error;
use crate::rows::column;
use crate::sql::Sql;
use crate::store::PostgresStore;

/// Claims a free key in one statement, or reads who holds it. A held key
/// costs one indexed read and writes nothing (`DO NOTHING` takes no row
/// lock, so the transaction gets no id and its commit waits for no WAL
/// flush): what a retried request pays. The read sees the table as of the
/// statement's start, so a key a concurrent claim committed while the
/// insert waited on it reads as no row at all: the statement is then run
/// again.
const CLAIM: &str = "WITH claimed AS ( \
       INSERT INTO request_keys (scope, key, fingerprint, made, claimed_at_ms, expires_at_ms) \
       VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (scope, key) DO NOTHING RETURNING 1) \
     SELECT true, NULL::text, NULL::text, NULL::bigint, NULL::bigint FROM claimed \
     UNION ALL \
     SELECT false, fingerprint, made, claimed_at_ms, expires_at_ms FROM request_keys \
     WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)";

/// Takes over a held key that expired by `$5` or is held for `$7` (a
/// claimer that never made its thing): compare-and-set on what was read.
const TAKE_OVER: &str = "UPDATE request_keys SET fingerprint = $3, made = $4, \
       claimed_at_ms = $5, expires_at_ms = $6 \
     WHERE scope = $1 AND key = $2 AND (expires_at_ms <= $5 OR made = $7)";

/// How many times a claim that read neither outcome is run again.
const CLAIM_ATTEMPTS: usize = 5;

#[async_trait]
impl IdempotencyStore for PostgresStore {
    async fn claim_key(&self, claim: KeyClaim) -> Result<Claimed, StoreError> {
        let (client, statement) = self.prepared(CLAIM).await?;
        let params: [&(dyn ToSql + Sync); 7] = [
            &claim.scope,
            &claim.key,
            &claim.fingerprint,
            &claim.made,
            &claim.now_ms,
            &claim.expires_at_ms,
            &claim.replacing,
        ];
        for _ in 0..CLAIM_ATTEMPTS {
            let Some(row) = client.row_opt(&statement, &params[..6]).await.map_err(client_error)?
            else {
                continue;
            };
            if column::<bool>(&row, 0)? {
                return Ok(Claimed::Won);
            }
            let held = HeldKey::new(
                column(&row, 1)?,
                column(&row, 2)?,
                column(&row, 3)?,
                column(&row, 4)?,
            );
            if !claim_wins(&claim, Some(&held)) {
                return Ok(Claimed::Held(held));
            }
            let take_over =
                client.statement(TAKE_OVER, self.unnamed).await.map_err(client_error)?;
            if client.exec(&take_over, &params).await.map_err(client_error)? == 1 {
                return Ok(Claimed::Won);
            }
            // Another claim took it over first: read it again.
        }
        Err(StoreError::Backend {
            source: format!(
                "request key `{}` was neither claimed nor found held in {CLAIM_ATTEMPTS} attempts",
                claim.key
            )
            .into(),
        })
    }

    async fn release_key(&self, scope: &str, key: &str, made: &str) -> Result<bool, StoreError> {
        let (client, statement) = self
            .prepared("DELETE FROM request_keys WHERE scope = $1 AND key = $2 AND made = $3")
            .await?;
        let params: [&(dyn ToSql + Sync); 3] = [&scope, &key, &made];
        let gone = client.exec(&statement, &params).await.map_err(client_error)?;
        Ok(gone > 0)
    }

    async fn sweep_keys(&self, now_ms: i64, limit: u64) -> Result<u64, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (client, statement) = self
            .prepared(
                "DELETE FROM request_keys WHERE (scope, key) IN (SELECT scope, key \
                 FROM request_keys WHERE expires_at_ms <= $1 LIMIT $2)",
            )
            .await?;
        let params: [&(dyn ToSql + Sync); 2] = [&now_ms, &limit];
        client.exec(&statement, &params).await.map_err(client_error)
    }
}
