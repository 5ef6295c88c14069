//! Long-term memory in the run database: the `items` table.
//!
//! A batch that writes is one `BEGIN IMMEDIATE` transaction (through the
//! store's writer, so it shares group commits with runs); a batch that
//! only reads is one read transaction. Filters go into the SQL where they
//! translate exactly (scalar operands, through `json_type` and
//! `json_extract`) and are checked again on every row, so that the rest
//! (arrays and objects as operands) holds too. Searches with a vector rank
//! the store's in-memory copy of the vectors (`VectorCache`) and read the
//! rows best first.

use async_trait::async_trait;
use rusqlite::types::Value as Sql;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use super::fault::Abort;
use super::writers::Touches;
use super::SqliteStore;
use crate::error::StoreError;
use crate::items::{
    decode_vector, encode_vector, ttl_ms, Condition, FilterOp, GetOp, Item, ItemError, ItemOp,
    ItemResult, ItemStore, Namespace, PutOp, Ranked, Ranking, SearchOp, VectorCache, VectorChange,
};

/// The value is stored as SQLite's binary JSON (JSONB): filters read its
/// fields without parsing text; `json()` gives the text back.
const COLUMNS: &str =
    "id, namespace, key, json(value), created_at_ms, updated_at_ms, ttl_ms, expires_at_ms";

/// A row as read.
struct Row {
    id: i64,
    namespace: String,
    key: String,
    value: String,
    created_at_ms: i64,
    updated_at_ms: i64,
    ttl_ms: Option<i64>,
    expires_at_ms: Option<i64>,
}

fn row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        id: row.get(0)?,
        namespace: row.get(1)?,
        key: row.get(2)?,
        value: row.get(3)?,
        created_at_ms: row.get(4)?,
        updated_at_ms: row.get(5)?,
        ttl_ms: row.get(6)?,
        expires_at_ms: row.get(7)?,
    })
}

fn undecodable(row: &Row, error: serde_json::Error) -> Abort {
    Abort::Refused(StoreError::Backend {
        source: format!("item {}{}: its value is not JSON: {error}", row.namespace, row.key).into(),
    })
}

impl Row {
    fn live(&self, now_ms: i64) -> bool {
        self.expires_at_ms.is_none_or(|at| at > now_ms)
    }

    /// The item, its TTL restarted when `refresh` says so (the row is
    /// written by [`Work::refreshed`]).
    fn item(self, value: Value, score: Option<f32>, refresh: Option<i64>) -> Item {
        let expires_at_ms = match (refresh, self.ttl_ms) {
            (Some(now), Some(ttl)) => Some(now.saturating_add(ttl)),
            _ => self.expires_at_ms,
        };
        Item {
            namespace: Namespace::from_stored(&self.namespace),
            key: self.key,
            value,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            expires_at_ms,
            score,
        }
    }
}

/// A batch as the transaction runs it: values already serialised.
struct Work {
    ops: Vec<(ItemOp, Option<String>)>,
    now_ms: i64,
}

/// What a batch did besides its results.
#[derive(Default)]
struct Effects {
    /// The vectors it changed (when it wrote).
    changes: Vec<VectorChange>,
    wrote: bool,
    /// Rows whose TTL reads restarted.
    refresh: Vec<i64>,
}

impl Work {
    fn run(
        &self,
        tx: &Connection,
        cache: Option<&VectorCache>,
    ) -> Result<(Vec<ItemResult>, Effects), Abort> {
        let mut effects = Effects::default();
        let mut results = Vec::with_capacity(self.ops.len());
        for (op, text) in &self.ops {
            results.push(match op {
                ItemOp::Put(put) => {
                    let text = text.as_deref().unwrap_or("null");
                    effects.changes.push(self.put(tx, put, text)?);
                    effects.wrote = true;
                    ItemResult::Stored
                }
                ItemOp::Delete { namespace, key } => {
                    let gone: Option<(i64, Option<i64>)> = tx
                        .prepare_cached(
                            "DELETE FROM items WHERE namespace = ?1 AND key = ?2 \
                             RETURNING id, expires_at_ms",
                        )?
                        .query_row(params![namespace.stored(), key], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()?;
                    let Some((id, expires)) = gone else {
                        results.push(ItemResult::Deleted(false));
                        continue;
                    };
                    tx.prepare_cached("DELETE FROM item_vectors WHERE id = ?1")?.execute([id])?;
                    effects.changes.push(VectorChange::Remove { row: id });
                    effects.wrote = true;
                    ItemResult::Deleted(expires.is_none_or(|at| at > self.now_ms))
                }
                ItemOp::Get(get) => ItemResult::Item(self.get(tx, get, &mut effects)?),
                ItemOp::Search(search) => {
                    // A search after a write of its own batch ranks the
                    // table itself: the copy does not hold those writes.
                    let cache = cache.filter(|_| !effects.wrote);
                    self.search(tx, search, cache, &mut effects)?
                }
                ItemOp::ListNamespaces(query) => {
                    let prefix = query.literal_prefix();
                    let (range, bound) = range_sql(&prefix, 1);
                    let sql = format!(
                        "SELECT DISTINCT namespace FROM items WHERE {range} \
                         AND (expires_at_ms IS NULL OR expires_at_ms > ?{}) ORDER BY namespace",
                        bound.len() + 1
                    );
                    let mut args: Vec<Sql> = bound;
                    args.push(Sql::Integer(self.now_ms));
                    let names: Vec<String> = tx
                        .prepare_cached(&sql)?
                        .query_map(rusqlite::params_from_iter(args), |r| r.get(0))?
                        .collect::<rusqlite::Result<_>>()?;
                    ItemResult::Namespaces(
                        query.select(names.iter().map(|name| Namespace::from_stored(name))),
                    )
                }
            });
        }
        Ok((results, effects))
    }

    fn put(&self, tx: &Connection, put: &PutOp, text: &str) -> Result<VectorChange, Abort> {
        let namespace = put.namespace.stored();
        let ttl = put.ttl.map(ttl_ms);
        let expires = ttl.map(|ttl| self.now_ms.saturating_add(ttl));
        let id: i64 = tx
            .prepare_cached(
                "INSERT INTO items (namespace, key, id, value, created_at_ms, updated_at_ms, \
                                    ttl_ms, expires_at_ms) \
                 VALUES (?1, ?2, (SELECT ifnull(max(id), 0) + 1 FROM items), jsonb(?3), \
                         ?4, ?4, ?5, ?6) \
                 ON CONFLICT (namespace, key) DO UPDATE SET \
                    value = excluded.value, \
                    created_at_ms = CASE WHEN items.expires_at_ms <= ?4 THEN ?4 \
                                         ELSE items.created_at_ms END, \
                    updated_at_ms = ?4, ttl_ms = ?5, expires_at_ms = ?6 \
                 RETURNING id",
            )?
            .query_row(params![namespace, put.key, text, self.now_ms, ttl, expires], |r| {
                r.get(0)
            })?;
        let unit = put.vector.as_deref().map(encode_vector);
        match &unit {
            Some(bytes) => tx
                .prepare_cached("INSERT OR REPLACE INTO item_vectors (id, vector) VALUES (?1, ?2)")?
                .execute(params![id, bytes])?,
            None => tx.prepare_cached("DELETE FROM item_vectors WHERE id = ?1")?.execute([id])?,
        };
        let vector = unit.as_deref().and_then(decode_vector);
        Ok(VectorChange::Set { row: id, namespace, vector })
    }

    fn get(
        &self,
        tx: &Connection,
        get: &GetOp,
        effects: &mut Effects,
    ) -> Result<Option<Item>, Abort> {
        let found = tx
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM items WHERE namespace = ?1 AND key = ?2"
            ))?
            .query_row(params![get.namespace.stored(), get.key], row)
            .optional()?;
        let Some(found) = found.filter(|found| found.live(self.now_ms)) else {
            return Ok(None);
        };
        let value = serde_json::from_str(&found.value).map_err(|e| undecodable(&found, e))?;
        let refresh = (get.refresh_ttl && found.ttl_ms.is_some()).then_some(self.now_ms);
        if refresh.is_some() {
            effects.refresh.push(found.id);
        }
        Ok(Some(found.item(value, None, refresh)))
    }

    fn search(
        &self,
        tx: &Connection,
        search: &SearchOp,
        cache: Option<&VectorCache>,
        effects: &mut Effects,
    ) -> Result<ItemResult, Abort> {
        let wanted = search.offset.saturating_add(search.limit);
        if search.limit == 0 {
            return Ok(ItemResult::Items(Vec::new()));
        }
        let refresh = search.refresh_ttl.then_some(self.now_ms);
        let mut items = Vec::new();
        let mut skipped = 0;
        let mut take =
            |found: Row, score: Option<f32>, items: &mut Vec<Item>| -> Result<bool, Abort> {
                if !found.live(self.now_ms) {
                    return Ok(false);
                }
                let value: Value =
                    serde_json::from_str(&found.value).map_err(|e| undecodable(&found, e))?;
                if !search.filter.matches(&value) {
                    return Ok(false);
                }
                if skipped < search.offset {
                    skipped += 1;
                    return Ok(false);
                }
                if refresh.is_some() && found.ttl_ms.is_some() {
                    effects.refresh.push(found.id);
                }
                items.push(found.item(value, score, refresh));
                Ok(items.len() == search.limit)
            };
        if let Some(query) = &search.vector {
            let top = search.filter.is_empty().then_some(wanted);
            let ranked = rank(tx, &search.prefix, query, cache, top)?;
            let mut read =
                tx.prepare_cached(&format!("SELECT {COLUMNS} FROM items WHERE id = ?1"))?;
            for (score, id) in ranked.scored {
                let Some(found) = read.query_row([id], row).optional()? else { continue };
                if take(found, Some(score), &mut items)? {
                    break;
                }
            }
            let unindexed = match search.count_unindexed {
                true => self.unindexed(tx, search)?,
                false => 0,
            };
            return Ok(ItemResult::Ranked(Ranked::new(items, unindexed, ranked.other_dimensions)));
        }
        let (range, mut args) = range_sql(&search.prefix, 1);
        args.push(Sql::Integer(self.now_ms));
        let mut sql = format!(
            "SELECT {COLUMNS} FROM items WHERE {range} \
             AND (expires_at_ms IS NULL OR expires_at_ms > ?{})",
            args.len()
        );
        for condition in search.filter.conditions() {
            if let Some(clause) = pushed_down(condition, &mut args) {
                sql.push_str(" AND ");
                sql.push_str(&clause);
            }
        }
        sql.push_str(" ORDER BY updated_at_ms DESC, namespace, key");
        let mut statement = tx.prepare_cached(&sql)?;
        let mut rows = statement.query(rusqlite::params_from_iter(args))?;
        while let Some(found) = rows.next()? {
            if take(row(found)?, None, &mut items)? {
                break;
            }
        }
        Ok(ItemResult::Items(items))
    }

    /// Live items under the search's prefix that pass its filter but have
    /// no vector: no query can match them.
    fn unindexed(&self, tx: &Connection, search: &SearchOp) -> Result<u64, Abort> {
        let (range, mut args) = range_sql(&search.prefix, 1);
        args.push(Sql::Integer(self.now_ms));
        let mut sql = format!(
            "FROM items WHERE {range} \
             AND (expires_at_ms IS NULL OR expires_at_ms > ?{}) \
             AND NOT EXISTS (SELECT 1 FROM item_vectors v WHERE v.id = items.id)",
            args.len()
        );
        if search.filter.is_empty() {
            let count: i64 = tx
                .prepare_cached(&format!("SELECT count(*) {sql}"))?
                .query_row(rusqlite::params_from_iter(args), |r| r.get(0))?;
            return Ok(u64::try_from(count).unwrap_or(0));
        }
        // The conditions SQL can check narrow the rows; the filter decides.
        for condition in search.filter.conditions() {
            if let Some(clause) = pushed_down(condition, &mut args) {
                sql.push_str(" AND ");
                sql.push_str(&clause);
            }
        }
        let mut statement = tx.prepare_cached(&format!("SELECT {COLUMNS} {sql}"))?;
        let mut rows = statement.query(rusqlite::params_from_iter(args))?;
        let mut count = 0;
        while let Some(found) = rows.next()? {
            let found = row(found)?;
            let value: Value =
                serde_json::from_str(&found.value).map_err(|e| undecodable(&found, e))?;
            if search.filter.matches(&value) {
                count += 1;
            }
        }
        Ok(count)
    }
}

/// `namespace` within the stored range of `prefix`, with its arguments
/// numbered from `first`.
fn range_sql(prefix: &Namespace, first: usize) -> (String, Vec<Sql>) {
    match prefix.stored_end() {
        None => ("1".into(), Vec::new()),
        Some(end) => (
            format!("namespace >= ?{first} AND namespace < ?{}", first + 1),
            vec![Sql::Text(prefix.stored()), Sql::Text(end)],
        ),
    }
}

/// The longest `$in` list pushed down into SQL (SQLite refuses an
/// expression tree deeper than 1,000).
const PUSHED_IN_VALUES: usize = 64;

/// The condition as SQL, when it translates exactly; its arguments (the
/// JSON path among them: nothing of the filter goes into the SQL text) are
/// appended to `args`. Rows are checked again in Rust either way.
fn pushed_down(condition: &Condition, args: &mut Vec<Sql>) -> Option<String> {
    if condition.path.iter().any(|part| part.contains(['"', '\\']) || part.is_empty()) {
        return None;
    }
    let path: String = std::iter::once("$".to_owned())
        .chain(condition.path.iter().map(|p| format!("\"{p}\"")))
        .collect::<Vec<_>>()
        .join(".");
    // Appended to a copy, kept only when the whole condition translates.
    let mut trial = args.clone();
    trial.push(Sql::Text(path));
    let at = trial.len();
    let ty = format!("json_type(value, ?{at})");
    let field = format!("json_extract(value, ?{at})");
    let equal = |operand: &Value, args: &mut Vec<Sql>| -> Option<String> {
        Some(match operand {
            Value::Null => format!("{ty} = 'null'"),
            Value::Bool(true) => format!("{ty} = 'true'"),
            Value::Bool(false) => format!("{ty} = 'false'"),
            Value::Number(n) => {
                args.push(Sql::Real(n.as_f64()?));
                format!("({ty} IN ('integer', 'real') AND {field} = ?{})", args.len())
            }
            Value::String(s) => {
                args.push(Sql::Text(s.clone()));
                format!("({ty} = 'text' AND {field} = ?{})", args.len())
            }
            Value::Array(_) | Value::Object(_) => return None,
        })
    };
    let clause = match condition.op {
        FilterOp::Eq => equal(&condition.operand, &mut trial)?,
        FilterOp::Ne => format!("NOT IFNULL({}, 0)", equal(&condition.operand, &mut trial)?),
        FilterOp::In => {
            // A long list is one `OR` term a value, as deep a tree: past
            // `PUSHED_IN_VALUES`, the list is checked in Rust only.
            let all = condition.operand.as_array().filter(|all| all.len() <= PUSHED_IN_VALUES)?;
            let clauses: Option<Vec<String>> =
                all.iter().map(|one| equal(one, &mut trial)).collect();
            match clauses? {
                // Nothing is in an empty list (and the path goes unused).
                clauses if clauses.is_empty() => return Some("0".into()),
                clauses => format!("({})", clauses.join(" OR ")),
            }
        }
        op => {
            // Eq, Ne and In are matched above: `op` is an ordering.
            let sign = op.comparison().unwrap_or("<=");
            let types = match &condition.operand {
                Value::Number(n) => {
                    trial.push(Sql::Real(n.as_f64()?));
                    "IN ('integer', 'real')"
                }
                Value::String(s) => {
                    trial.push(Sql::Text(s.clone()));
                    "= 'text'"
                }
                _ => return None,
            };
            format!("({ty} {types} AND {field} {sign} ?{})", trial.len())
        }
    };
    *args = trial;
    Some(clause)
}

/// Rows under `prefix` with a vector of the query's dimensions, best
/// first (only the `top` best when given): from the copy when there is
/// one (loaded anew when it is behind the epoch), else from the table.
fn rank(
    tx: &Connection,
    prefix: &Namespace,
    query: &[f32],
    cache: Option<&VectorCache>,
    top: Option<usize>,
) -> Result<Ranking, Abort> {
    let stored = prefix.stored();
    let Some(cache) = cache else {
        let (range, args) = range_sql(prefix, 1);
        let sql = format!(
            "SELECT i.id, i.namespace, v.vector FROM items i JOIN item_vectors v ON v.id = i.id \
             WHERE {}",
            range.replace("namespace", "i.namespace")
        );
        let scratch = VectorCache::new();
        scratch.replace(0, vectors(tx, &sql, args)?);
        return Ok(scratch.rank(0, &stored, query, top).unwrap_or_default());
    };
    let epoch: i64 = tx
        .prepare_cached("SELECT epoch FROM item_epoch WHERE id = 1")?
        .query_row([], |r| r.get(0))?;
    if let Some(ranked) = cache.rank(epoch, &stored, query, top) {
        return Ok(ranked);
    }
    let sql = "SELECT v.id, i.namespace, v.vector FROM item_vectors v JOIN items i ON i.id = v.id";
    cache.replace(epoch, vectors(tx, sql, Vec::new())?);
    Ok(cache.rank(epoch, &stored, query, top).unwrap_or_default())
}

fn vectors(
    tx: &Connection,
    sql: &str,
    args: Vec<Sql>,
) -> Result<Vec<(i64, String, Vec<f32>)>, Abort> {
    let mut statement = tx.prepare_cached(sql)?;
    let rows = statement.query_map(rusqlite::params_from_iter(args), |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, Vec<u8>>(2)?))
    })?;
    let mut found = Vec::new();
    for one in rows {
        let (id, namespace, bytes) = one?;
        if let Some(vector) = decode_vector(&bytes) {
            found.push((id, namespace, vector));
        }
    }
    Ok(found)
}

/// Raises the epoch; the new one.
fn bump(tx: &Connection) -> rusqlite::Result<i64> {
    tx.prepare_cached("UPDATE item_epoch SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch")?
        .query_row([], |r| r.get(0))
}

/// Restarts the TTLs of `rows` at `now_ms`.
fn refresh(tx: &Connection, rows: &[i64], now_ms: i64) -> rusqlite::Result<()> {
    let mut update = tx.prepare_cached(
        "UPDATE items SET expires_at_ms = ?2 + ttl_ms WHERE id = ?1 AND ttl_ms IS NOT NULL",
    )?;
    for id in rows {
        update.execute(params![id, now_ms])?;
    }
    Ok(())
}

#[async_trait]
impl ItemStore for SqliteStore {
    async fn apply(&self, ops: Vec<ItemOp>, now_ms: i64) -> Result<Vec<ItemResult>, ItemError> {
        ops.iter().try_for_each(ItemOp::check)?;
        let mut prepared = Vec::with_capacity(ops.len());
        let writes = ops.iter().any(ItemOp::writes);
        for op in ops {
            let text = match &op {
                ItemOp::Put(put) => Some(
                    serde_json::to_string(&put.value)
                        .map_err(|error| StoreError::Backend { source: Box::new(error) })?,
                ),
                _ => None,
            };
            prepared.push((op, text));
        }
        let work = std::sync::Arc::new(Work { ops: prepared, now_ms });
        if writes {
            let batch = std::sync::Arc::clone(&work);
            let (results, epoch, changes) = self
                .write(Touches::NoRun, move |tx| {
                    let (results, effects) = batch.run(tx, None)?;
                    refresh(tx, &effects.refresh, batch.now_ms)?;
                    let epoch = bump(tx)?;
                    Ok((results, epoch, effects.changes))
                })
                .await?;
            self.vectors.apply(epoch, changes);
            return Ok(results);
        }
        let (results, effects) = self.read(|tx| work.run(tx, Some(&self.vectors))).await?;
        if !effects.refresh.is_empty() {
            // Best effort after the read: an item deleted meanwhile is
            // simply not updated.
            let rows = effects.refresh;
            self.write(Touches::NoRun, move |tx| Ok(refresh(tx, &rows, now_ms)?)).await?;
        }
        Ok(results)
    }

    async fn sweep(&self, now_ms: i64) -> Result<u64, ItemError> {
        let (removed, epoch) = self
            .write(Touches::NoRun, move |tx| {
                let removed: Vec<i64> = tx
                    .prepare_cached("DELETE FROM items WHERE expires_at_ms <= ?1 RETURNING id")?
                    .query_map([now_ms], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                let mut vectors = tx.prepare_cached("DELETE FROM item_vectors WHERE id = ?1")?;
                for id in &removed {
                    vectors.execute([id])?;
                }
                let epoch = match removed.is_empty() {
                    true => None,
                    false => Some(bump(tx)?),
                };
                Ok((removed, epoch))
            })
            .await?;
        let count = removed.len() as u64;
        if let Some(epoch) = epoch {
            self.vectors.apply(
                epoch,
                removed.into_iter().map(|row| VectorChange::Remove { row }).collect(),
            );
        }
        Ok(count)
    }
}
