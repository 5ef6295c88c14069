//! The reference [`ItemStore`]: a sorted map behind a mutex.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::Value;

use super::vector::{dot, unit};
use super::{
    ttl_ms, GetOp, Item, ItemError, ItemOp, ItemResult, ItemStore, Namespace, PutOp, Ranked,
    SearchOp,
};

/// [`ItemStore`] in memory (gone when the process ends): the reference the
/// durable stores are checked against, and what tests use.
#[derive(Debug, Default)]
pub struct InMemoryItemStore {
    rows: Mutex<BTreeMap<(String, String), Row>>,
}

#[derive(Debug, Clone)]
struct Row {
    value: Value,
    created_at_ms: i64,
    updated_at_ms: i64,
    ttl_ms: Option<i64>,
    expires_at_ms: Option<i64>,
    vector: Option<Vec<f32>>,
}

impl Row {
    fn live(&self, now_ms: i64) -> bool {
        self.expires_at_ms.is_none_or(|at| at > now_ms)
    }

    fn refresh(&mut self, now_ms: i64) {
        if let Some(ttl) = self.ttl_ms {
            self.expires_at_ms = Some(now_ms.saturating_add(ttl));
        }
    }

    fn item(&self, namespace: &str, key: &str, score: Option<f32>) -> Item {
        Item {
            namespace: Namespace::from_stored(namespace),
            key: key.to_owned(),
            value: self.value.clone(),
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            expires_at_ms: self.expires_at_ms,
            score,
        }
    }
}

impl InMemoryItemStore {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
}

type Rows = BTreeMap<(String, String), Row>;

fn put(rows: &mut Rows, put: PutOp, now_ms: i64) {
    let PutOp { namespace, key, value, ttl, vector, .. } = put;
    let slot = (namespace.stored(), key);
    let created_at_ms = match rows.get(&slot) {
        Some(row) if row.live(now_ms) => row.created_at_ms,
        _ => now_ms,
    };
    let ttl_ms = ttl.map(ttl_ms);
    rows.insert(
        slot,
        Row {
            value,
            created_at_ms,
            updated_at_ms: now_ms,
            ttl_ms,
            expires_at_ms: ttl_ms.map(|ttl| now_ms.saturating_add(ttl)),
            vector: vector.map(unit),
        },
    );
}

fn get(rows: &mut Rows, get: GetOp, now_ms: i64) -> Option<Item> {
    let slot = (get.namespace.stored(), get.key);
    let row = rows.get_mut(&slot).filter(|row| row.live(now_ms))?;
    if get.refresh_ttl {
        row.refresh(now_ms);
    }
    Some(row.item(&slot.0, &slot.1, None))
}

fn search(rows: &mut Rows, search: SearchOp, now_ms: i64) -> ItemResult {
    let start = (search.prefix.stored(), String::new());
    let end = match search.prefix.stored_end() {
        Some(end) => Bound::Excluded((end, String::new())),
        None => Bound::Unbounded,
    };
    let query = search.vector.map(unit);
    let mut found: Vec<(Option<f32>, i64, &(String, String))> = Vec::new();
    let (mut unindexed, mut other, mut same) = (0u64, None, false);
    for (slot, row) in rows.range((Bound::Included(start), end)) {
        if !row.live(now_ms) {
            continue;
        }
        // As the SQL stores rank: other dimensions are noticed before the
        // filter, items without vectors after it.
        if let (Some(query), Some(vector)) = (&query, &row.vector) {
            if vector.len() != query.len() {
                other = other.or(Some(vector.len()));
                continue;
            }
            same = true;
        }
        if !search.filter.matches(&row.value) {
            continue;
        }
        let score = match (&query, &row.vector) {
            (None, _) => None,
            (Some(query), Some(vector)) => Some(dot(query, vector)),
            (Some(_), None) => {
                unindexed += u64::from(search.count_unindexed);
                continue;
            }
        };
        found.push((score, row.updated_at_ms, slot));
    }
    let ranked = query.is_some();
    let other = other.filter(|_| !same);
    found.sort_by(|a, b| match (a.0, b.0) {
        (Some(x), Some(y)) => y.total_cmp(&x).then_with(|| a.2.cmp(b.2)),
        _ => b.1.cmp(&a.1).then_with(|| a.2.cmp(b.2)),
    });
    let chosen: Vec<(Option<f32>, (String, String))> = found
        .into_iter()
        .skip(search.offset)
        .take(search.limit)
        .map(|(score, _, slot)| (score, slot.clone()))
        .collect();
    let items = chosen
        .into_iter()
        .filter_map(|(score, slot)| {
            let row = rows.get_mut(&slot)?;
            if search.refresh_ttl {
                row.refresh(now_ms);
            }
            Some(row.item(&slot.0, &slot.1, score))
        })
        .collect();
    match ranked {
        true => ItemResult::Ranked(Ranked::new(items, unindexed, other)),
        false => ItemResult::Items(items),
    }
}

#[async_trait]
impl ItemStore for InMemoryItemStore {
    async fn apply(&self, ops: Vec<ItemOp>, now_ms: i64) -> Result<Vec<ItemResult>, ItemError> {
        // Checked first: past this point nothing fails, so the batch is
        // all or nothing.
        ops.iter().try_for_each(ItemOp::check)?;
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            results.push(match op {
                ItemOp::Put(op) => {
                    put(&mut rows, op, now_ms);
                    ItemResult::Stored
                }
                ItemOp::Delete { namespace, key } => {
                    let removed = rows.remove(&(namespace.stored(), key));
                    ItemResult::Deleted(removed.is_some_and(|row| row.live(now_ms)))
                }
                ItemOp::Get(op) => ItemResult::Item(get(&mut rows, op, now_ms)),
                ItemOp::Search(op) => search(&mut rows, op, now_ms),
                ItemOp::ListNamespaces(query) => {
                    let prefix = query.literal_prefix().stored();
                    let mut namespaces: Vec<Namespace> = rows
                        .iter()
                        .filter(|((ns, _), row)| ns.starts_with(&prefix) && row.live(now_ms))
                        .map(|((ns, _), _)| Namespace::from_stored(ns))
                        .collect();
                    namespaces.dedup();
                    ItemResult::Namespaces(query.select(namespaces))
                }
            });
        }
        Ok(results)
    }

    async fn sweep(&self, now_ms: i64) -> Result<u64, ItemError> {
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        let before = rows.len();
        rows.retain(|_, row| row.live(now_ms));
        Ok((before - rows.len()) as u64)
    }
}
