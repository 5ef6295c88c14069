//! Long-term memory in the run database: the `items` table.
//!
//! Every batch is one transaction. Filters translate exactly into SQL on
//! the `jsonb` value (`#>` paths, jsonb equality, which compares numbers
//! by value and objects by their fields; `COLLATE "C"` for strings, which
//! orders them by bytes as the reference does), so limits and offsets are
//! the database's. Searches with a vector rank this process's copy of the
//! vectors (`VectorCache`, kept in step with the `item_epoch` row) and read
//! the rows best first: PostgreSQL needs no vector extension. With
//! pgvector, a `vector(N)` column with an HNSW index and `ORDER BY
//! embedding <=> $query` would take the copy's place.

use async_trait::async_trait;
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use tollgate_checkpoint::{
    decode_vector, encode_vector, Condition, FilterOp, GetOp, Item, ItemError, ItemOp, ItemResult,
    ItemStore, Namespace, PutOp, Ranked, Ranking, SearchOp, StoreError, VectorChange,
};

use crate::conn::client_error;
use crate::rows::{column, damaged};
use crate::sql::Sql;
use crate::store::PostgresStore;

const COLUMNS: &str =
    "id, namespace, key, value::text, created_at_ms, updated_at_ms, ttl_ms, expires_at_ms";
const LIVE: &str = "(expires_at_ms IS NULL OR expires_at_ms > $1)";

type Param = Box<dyn ToSql + Sync + Send>;

fn refs(params: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|param| param.as_ref() as &(dyn ToSql + Sync)).collect()
}

/// The item of a row (columns [`COLUMNS`]), its TTL restarted at
/// `refresh` when it has one; with the row's id and whether it has a TTL.
fn item(
    row: &Row,
    score: Option<f32>,
    refresh: Option<i64>,
) -> Result<(i64, bool, Item), StoreError> {
    let namespace: String = column(row, 1)?;
    let key: String = column(row, 2)?;
    let text: String = column(row, 3)?;
    let value = serde_json::from_str(&text).map_err(|error| {
        damaged(format!("item {namespace}{key}: its value is not JSON: {error}"))
    })?;
    let ttl: Option<i64> = column(row, 6)?;
    let expires_at_ms = match (refresh, ttl) {
        (Some(now), Some(ttl)) => Some(now.saturating_add(ttl)),
        _ => column(row, 7)?,
    };
    let item = Item {
        namespace: Namespace::from_stored(&namespace),
        key,
        value,
        created_at_ms: column(row, 4)?,
        updated_at_ms: column(row, 5)?,
        expires_at_ms,
        score,
    };
    Ok((column(row, 0)?, ttl.is_some(), item))
}

/// `namespace` within the stored range of `prefix`, its arguments pushed.
fn range_sql(prefix: &Namespace, params: &mut Vec<Param>) -> String {
    match prefix.stored_end() {
        None => "true".into(),
        Some(end) => {
            params.push(Box::new(prefix.stored()));
            params.push(Box::new(end));
            format!("namespace >= ${} AND namespace < ${}", params.len() - 1, params.len())
        }
    }
}

/// The condition as SQL (exact), its arguments pushed.
fn condition_sql(condition: &Condition, params: &mut Vec<Param>) -> String {
    params.push(Box::new(condition.path.clone()));
    let path = params.len();
    let operand = condition.operand.to_string();
    match condition.op {
        FilterOp::Eq => {
            params.push(Box::new(operand));
            format!("(value #> ${path}) = ${}::text::jsonb", params.len())
        }
        FilterOp::Ne => {
            params.push(Box::new(operand));
            format!("(value #> ${path}) IS DISTINCT FROM ${}::text::jsonb", params.len())
        }
        FilterOp::In => {
            params.push(Box::new(operand));
            format!(
                "(value #> ${path}) = ANY(ARRAY(SELECT jsonb_array_elements(${}::text::jsonb)))",
                params.len()
            )
        }
        op => {
            // Eq, Ne and In are matched above: `op` is an ordering.
            let sign = op.comparison().unwrap_or("<=");
            match condition.operand.as_str() {
                Some(text) => {
                    params.push(Box::new(text.to_owned()));
                    format!(
                        "(jsonb_typeof(value #> ${path}) = 'string' \
                         AND (value #>> ${path}) COLLATE \"C\" {sign} ${})",
                        params.len()
                    )
                }
                None => {
                    params.push(Box::new(operand));
                    format!(
                        "(jsonb_typeof(value #> ${path}) = 'number' \
                         AND (value #> ${path}) {sign} ${}::text::jsonb)",
                        params.len()
                    )
                }
            }
        }
    }
}

/// A batch in one transaction.
struct Batch<'a> {
    tx: &'a Transaction<'a>,
    store: &'a PostgresStore,
    now_ms: i64,
    changes: Vec<VectorChange>,
    wrote: bool,
    refresh: Vec<i64>,
}

impl Batch<'_> {
    async fn put(&mut self, put: &PutOp) -> Result<(), StoreError> {
        let text = serde_json::to_string(&put.value)
            .map_err(|error| StoreError::Backend { source: Box::new(error) })?;
        let ttl = put.ttl.map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1));
        let expires = ttl.map(|ttl| self.now_ms.saturating_add(ttl));
        let vector = put.vector.as_deref().map(encode_vector);
        let namespace = put.namespace.stored();
        let statement = self
            .tx
            .statement(
                "INSERT INTO items (namespace, key, value, created_at_ms, updated_at_ms, \
                                    ttl_ms, expires_at_ms, vector) \
                 VALUES ($1, $2, $3::text::jsonb, $4, $4, $5, $6, $7) \
                 ON CONFLICT (namespace, key) DO UPDATE SET \
                    value = excluded.value, \
                    created_at_ms = CASE WHEN items.expires_at_ms <= $4 THEN $4 \
                                         ELSE items.created_at_ms END, \
                    updated_at_ms = $4, ttl_ms = $5, expires_at_ms = $6, vector = $7 \
                 RETURNING id",
                self.store.unnamed,
            )
            .await
            .map_err(client_error)?;
        let params: [&(dyn ToSql + Sync); 7] =
            [&namespace, &put.key, &text, &self.now_ms, &ttl, &expires, &vector];
        let row = self.tx.row(&statement, &params).await.map_err(client_error)?;
        let vector = vector.as_deref().and_then(decode_vector);
        self.changes.push(VectorChange::Set { row: column(&row, 0)?, namespace, vector });
        self.wrote = true;
        Ok(())
    }

    async fn delete(&mut self, namespace: &Namespace, key: &str) -> Result<bool, StoreError> {
        let statement = self
            .tx
            .statement(
                "DELETE FROM items WHERE namespace = $1 AND key = $2 RETURNING id, expires_at_ms",
                self.store.unnamed,
            )
            .await
            .map_err(client_error)?;
        let row = self
            .tx
            .row_opt(&statement, &[&namespace.stored(), &key])
            .await
            .map_err(client_error)?;
        let Some(row) = row else { return Ok(false) };
        self.changes.push(VectorChange::Remove { row: column(&row, 0)? });
        self.wrote = true;
        let expires: Option<i64> = column(&row, 1)?;
        Ok(expires.is_none_or(|at| at > self.now_ms))
    }

    async fn get(&mut self, get: &GetOp) -> Result<Option<Item>, StoreError> {
        let statement = self
            .tx
            .statement(
                &format!(
                    "SELECT {COLUMNS} FROM items WHERE {LIVE} AND namespace = $2 AND key = $3"
                ),
                self.store.unnamed,
            )
            .await
            .map_err(client_error)?;
        let row = self
            .tx
            .row_opt(&statement, &[&self.now_ms, &get.namespace.stored(), &get.key])
            .await
            .map_err(client_error)?;
        let Some(row) = row else { return Ok(None) };
        let refresh = get.refresh_ttl.then_some(self.now_ms);
        let (id, has_ttl, item) = item(&row, None, refresh)?;
        if refresh.is_some() && has_ttl {
            self.refresh.push(id);
        }
        Ok(Some(item))
    }

    async fn search(&mut self, search: &SearchOp) -> Result<ItemResult, StoreError> {
        if search.limit == 0 {
            return Ok(ItemResult::Items(Vec::new()));
        }
        let refresh = search.refresh_ttl.then_some(self.now_ms);
        let mut params: Vec<Param> = vec![Box::new(self.now_ms)];
        let mut sql = format!("SELECT {COLUMNS} FROM items WHERE {LIVE}");
        sql.push_str(" AND ");
        sql.push_str(&range_sql(&search.prefix, &mut params));
        for condition in search.filter.conditions() {
            sql.push_str(" AND ");
            sql.push_str(&condition_sql(condition, &mut params));
        }
        let mut found = Vec::new();
        let mut ranking = None;
        match &search.vector {
            None => {
                params.push(Box::new(i64::try_from(search.limit).unwrap_or(i64::MAX)));
                params.push(Box::new(i64::try_from(search.offset).unwrap_or(i64::MAX)));
                sql.push_str(&format!(
                    " ORDER BY updated_at_ms DESC, namespace, key LIMIT ${} OFFSET ${}",
                    params.len() - 1,
                    params.len()
                ));
                let statement =
                    self.tx.statement(&sql, self.store.unnamed).await.map_err(client_error)?;
                for row in self.tx.rows(&statement, &refs(&params)).await.map_err(client_error)? {
                    found.push(item(&row, None, refresh)?);
                }
            }
            Some(query) => {
                let wanted = search.offset.saturating_add(search.limit);
                let top = search.filter.is_empty().then_some(wanted);
                let Ranking { scored: ranked, other_dimensions } =
                    self.rank(&search.prefix, query, top).await?;
                ranking = Some(other_dimensions);
                params.push(Box::new(Vec::<i64>::new()));
                let ids_at = params.len();
                sql.push_str(&format!(" AND id = ANY(${ids_at})"));
                let statement =
                    self.tx.statement(&sql, self.store.unnamed).await.map_err(client_error)?;
                let mut skipped = 0;
                'chunks: for chunk in ranked.chunks(256.max(wanted)) {
                    let ids: Vec<i64> = chunk.iter().map(|(_, id)| *id).collect();
                    params[ids_at - 1] = Box::new(ids);
                    let rows =
                        self.tx.rows(&statement, &refs(&params)).await.map_err(client_error)?;
                    let by_id: std::collections::HashMap<i64, &Row> =
                        rows.iter().filter_map(|row| Some((column(row, 0).ok()?, row))).collect();
                    for (score, id) in chunk {
                        let Some(row) = by_id.get(id) else { continue };
                        if skipped < search.offset {
                            skipped += 1;
                            continue;
                        }
                        found.push(item(row, Some(*score), refresh)?);
                        if found.len() == search.limit {
                            break 'chunks;
                        }
                    }
                }
            }
        }
        let mut items = Vec::with_capacity(found.len());
        for (id, has_ttl, item) in found {
            if refresh.is_some() && has_ttl {
                self.refresh.push(id);
            }
            items.push(item);
        }
        let Some(other_dimensions) = ranking else { return Ok(ItemResult::Items(items)) };
        let unindexed = match search.count_unindexed {
            true => self.unindexed(search).await?,
            false => 0,
        };
        Ok(ItemResult::Ranked(Ranked::new(items, unindexed, other_dimensions)))
    }

    /// Live items under the search's prefix that pass its filter but have
    /// no vector: no query can match them.
    async fn unindexed(&mut self, search: &SearchOp) -> Result<u64, StoreError> {
        let mut params: Vec<Param> = vec![Box::new(self.now_ms)];
        let mut sql = format!("SELECT count(*) FROM items WHERE {LIVE} AND vector IS NULL");
        sql.push_str(" AND ");
        sql.push_str(&range_sql(&search.prefix, &mut params));
        for condition in search.filter.conditions() {
            sql.push_str(" AND ");
            sql.push_str(&condition_sql(condition, &mut params));
        }
        let row =
            self.tx.row_of(self.store.unnamed, &sql, &refs(&params)).await.map_err(client_error)?;
        let count: i64 = column(&row, 0)?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Rows under `prefix` best first, from this process's copy of the
    /// vectors (loaded anew when it is behind the epoch). A search after a
    /// write of its own batch reads the table: the copy lacks those writes.
    async fn rank(
        &self,
        prefix: &Namespace,
        query: &[f32],
        top: Option<usize>,
    ) -> Result<Ranking, StoreError> {
        let stored = prefix.stored();
        let load = |sql: String, params: Vec<Param>| async move {
            let rows = self
                .tx
                .rows_of(self.store.unnamed, &sql, &refs(&params))
                .await
                .map_err(client_error)?;
            let mut vectors = Vec::with_capacity(rows.len());
            for row in rows {
                let bytes: Vec<u8> = column(&row, 2)?;
                if let Some(vector) = decode_vector(&bytes) {
                    vectors.push((column(&row, 0)?, column::<String>(&row, 1)?, vector));
                }
            }
            Ok::<_, StoreError>(vectors)
        };
        if self.wrote {
            let mut params = Vec::new();
            let range = range_sql(prefix, &mut params);
            let sql = format!(
                "SELECT id, namespace, vector FROM items WHERE {range} AND vector IS NOT NULL"
            );
            let scratch = tollgate_checkpoint::VectorCache::new();
            scratch.replace(0, load(sql, params).await?);
            return Ok(scratch.rank(0, &stored, query, top).unwrap_or_default());
        }
        let row = self
            .tx
            .row_of(self.store.unnamed, "SELECT epoch FROM item_epoch WHERE id = 1", &[])
            .await
            .map_err(client_error)?;
        let epoch: i64 = column(&row, 0)?;
        let cache = &self.store.vectors;
        if let Some(ranked) = cache.rank(epoch, &stored, query, top) {
            return Ok(ranked);
        }
        let sql = "SELECT id, namespace, vector FROM items WHERE vector IS NOT NULL".to_owned();
        cache.replace(epoch, load(sql, Vec::new()).await?);
        Ok(cache.rank(epoch, &stored, query, top).unwrap_or_default())
    }

    async fn namespaces(
        &self,
        query: &tollgate_checkpoint::NamespaceQuery,
    ) -> Result<Vec<Namespace>, StoreError> {
        let mut params: Vec<Param> = vec![Box::new(self.now_ms)];
        let range = range_sql(&query.literal_prefix(), &mut params);
        let sql = format!(
            "SELECT DISTINCT namespace FROM items WHERE {LIVE} AND {range} ORDER BY namespace"
        );
        let rows = self
            .tx
            .rows_of(self.store.unnamed, &sql, &refs(&params))
            .await
            .map_err(client_error)?;
        let mut names = Vec::with_capacity(rows.len());
        for row in rows {
            names.push(Namespace::from_stored(&column::<String>(&row, 0)?));
        }
        Ok(query.select(names))
    }
}

#[async_trait]
impl ItemStore for PostgresStore {
    async fn apply(&self, ops: Vec<ItemOp>, now_ms: i64) -> Result<Vec<ItemResult>, ItemError> {
        ops.iter().try_for_each(ItemOp::check)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(client_error)?;
        let mut batch = Batch {
            tx: &tx,
            store: self,
            now_ms,
            changes: Vec::new(),
            wrote: false,
            refresh: Vec::new(),
        };
        let mut results = Vec::with_capacity(ops.len());
        for op in &ops {
            results.push(match op {
                ItemOp::Put(put) => {
                    batch.put(put).await?;
                    ItemResult::Stored
                }
                ItemOp::Delete { namespace, key } => {
                    ItemResult::Deleted(batch.delete(namespace, key).await?)
                }
                ItemOp::Get(get) => ItemResult::Item(batch.get(get).await?),
                ItemOp::Search(search) => batch.search(search).await?,
                ItemOp::ListNamespaces(query) => {
                    ItemResult::Namespaces(batch.namespaces(query).await?)
                }
                _ => {
                    return Err(ItemError::Store(damaged(
                        "an item operation this store does not know".into(),
                    )))
                }
            });
        }
        let Batch { changes, wrote, refresh, .. } = batch;
        if !refresh.is_empty() {
            tx.exec_of(
                self.unnamed, "UPDATE items SET expires_at_ms = $2 + ttl_ms WHERE id = ANY($1) AND ttl_ms IS NOT NULL",
                &[&refresh, &now_ms],
            )
            .await
            .map_err(client_error)?;
        }
        let epoch = match wrote {
            true => {
                let row = tx
                    .row_of(
                        self.unnamed,
                        "UPDATE item_epoch SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch",
                        &[],
                    )
                    .await
                    .map_err(client_error)?;
                Some(column::<i64>(&row, 0)?)
            }
            false => None,
        };
        tx.commit().await.map_err(client_error)?;
        if let Some(epoch) = epoch {
            self.vectors.apply(epoch, changes);
        }
        Ok(results)
    }

    async fn sweep(&self, now_ms: i64) -> Result<u64, ItemError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(client_error)?;
        let rows = tx
            .rows_of(
                self.unnamed,
                "DELETE FROM items WHERE expires_at_ms <= $1 RETURNING id",
                &[&now_ms],
            )
            .await
            .map_err(client_error)?;
        if rows.is_empty() {
            return Ok(0);
        }
        let row = tx
            .row_of(
                self.unnamed,
                "UPDATE item_epoch SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch",
                &[],
            )
            .await
            .map_err(client_error)?;
        let epoch: i64 = column(&row, 0)?;
        tx.commit().await.map_err(client_error)?;
        let mut changes = Vec::with_capacity(rows.len());
        for row in &rows {
            changes.push(VectorChange::Remove { row: column(row, 0)? });
        }
        self.vectors.apply(epoch, changes);
        Ok(rows.len() as u64)
    }
}
