//! Long-term memory: JSON items under namespaces and keys, kept across
//! threads and runs, with TTLs, filters and semantic search.
//!
//! [`ItemStore`] is the storage contract (one atomic batch of
//! [`ItemOp`]s at a time); [`Memory`] is what agents and services use: a
//! store, an optional [`Embedder`] with its [`IndexConfig`], and a clock.
//! [`InMemoryItemStore`] is the reference implementation; the SQLite and
//! PostgreSQL run stores keep items in tables of their own.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod error;
mod filter;
mod in_memory;
mod limits;
mod memory;
mod namespace;
mod vector;

pub use error::{EmbedError, ItemError};
pub use filter::{Condition, Filter, FilterOp};
pub use in_memory::InMemoryItemStore;
pub use limits::{
    MAX_FILTER_CONDITIONS, MAX_IN_VALUES, MAX_KEY_BYTES, MAX_PARTS, MAX_PART_BYTES,
    MAX_SEARCH_LIMIT, MAX_VALUE_BYTES,
};
pub use memory::{Embedder, IndexConfig, Memory};
pub use namespace::Namespace;
use namespace::{check_item_namespace, check_key};
pub use vector::{decode_vector, encode_vector, Ranking, VectorCache, VectorChange};

/// One stored item, as reads return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// Its namespace.
    pub namespace: Namespace,
    /// Its key, unique within the namespace.
    pub key: String,
    /// Its value.
    pub value: Value,
    /// When it was first put (milliseconds since the Unix epoch).
    pub created_at_ms: i64,
    /// When it was last put.
    pub updated_at_ms: i64,
    /// When it expires, if it has a TTL (reads refreshing the TTL move it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// Its similarity to a search's query (cosine, -1 to 1); only in
    /// results of a search with a query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
}

/// Stores `value` under a namespace and key (replacing any item there).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PutOp {
    /// Where.
    pub namespace: Namespace,
    /// Its key.
    pub key: String,
    /// The value.
    pub value: Value,
    /// Expire this long after the put (and after each read that refreshes
    /// it); never when `None`.
    pub ttl: Option<Duration>,
    /// Which fields to embed instead of the index's: `Some(vec![])` for
    /// none (the item is not found by queries); `None` for the index's.
    pub index: Option<Vec<String>>,
    /// The embedding ([`Memory`] fills it in; stores keep it).
    pub vector: Option<Vec<f32>>,
}

impl PutOp {
    /// Puts `value` at `namespace`/`key`.
    pub fn new(namespace: Namespace, key: impl Into<String>, value: Value) -> Self {
        Self { namespace, key: key.into(), value, ttl: None, index: None, vector: None }
    }

    /// Expires after `ttl`.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Embeds these fields of the value instead of the index's (none:
    /// not embedded).
    pub fn index<T: Into<String>>(mut self, fields: impl IntoIterator<Item = T>) -> Self {
        self.index = Some(fields.into_iter().map(Into::into).collect());
        self
    }
}

/// Reads one item.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GetOp {
    /// Where.
    pub namespace: Namespace,
    /// Its key.
    pub key: String,
    /// Whether reading it restarts its TTL (default `true`).
    pub refresh_ttl: bool,
}

impl GetOp {
    /// Reads `namespace`/`key`, refreshing its TTL.
    pub fn new(namespace: Namespace, key: impl Into<String>) -> Self {
        Self { namespace, key: key.into(), refresh_ttl: true }
    }
}

/// Finds items under a namespace prefix.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SearchOp {
    /// Items whose namespace begins with this (empty: every item).
    pub prefix: Namespace,
    /// Conditions on the value's fields.
    pub filter: Filter,
    /// Most items returned (default 10, at most [`MAX_SEARCH_LIMIT`]).
    pub limit: usize,
    /// Matches skipped first.
    pub offset: usize,
    /// Rank by similarity to this text (needs an index); by recency,
    /// newest first, when `None`.
    pub query: Option<String>,
    /// The query's embedding ([`Memory`] fills it in).
    pub vector: Option<Vec<f32>>,
    /// Whether returning items restarts their TTLs (default `true`).
    pub refresh_ttl: bool,
    /// With a vector: also count the items that could not match it
    /// ([`Ranked::unindexed`]; default `false`, 0 then). Counting reads
    /// every item under the prefix without a vector: asked for by
    /// [`Memory::search_ranked`], not by every search.
    pub count_unindexed: bool,
}

impl SearchOp {
    /// The newest ten items under `prefix`.
    pub fn new(prefix: Namespace) -> Self {
        Self {
            prefix,
            filter: Filter::default(),
            limit: 10,
            offset: 0,
            query: None,
            vector: None,
            refresh_ttl: true,
            count_unindexed: false,
        }
    }

    /// Only items matching `filter`.
    pub fn filter(mut self, filter: Filter) -> Self {
        self.filter = filter;
        self
    }

    /// At most `limit` items.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Skipping the first `offset` matches.
    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

    /// Ranked by similarity to `query`.
    pub fn query(mut self, query: impl Into<String>) -> Self {
        self.query = Some(query.into());
        self
    }
}

/// Lists the namespaces that hold items.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NamespaceQuery {
    /// Parts namespaces begin with (`*` matches any one part).
    pub prefix: Vec<String>,
    /// Parts namespaces end with (`*` matches any one part).
    pub suffix: Vec<String>,
    /// Namespaces cut to this many parts (then listed once).
    pub max_depth: Option<usize>,
    /// Most namespaces returned (default 100).
    pub limit: usize,
    /// Namespaces skipped first.
    pub offset: usize,
}

impl Default for NamespaceQuery {
    fn default() -> Self {
        Self { prefix: Vec::new(), suffix: Vec::new(), max_depth: None, limit: 100, offset: 0 }
    }
}

impl NamespaceQuery {
    /// Every namespace (the first hundred, in order).
    pub fn new() -> Self {
        Self::default()
    }

    /// Beginning with `parts`.
    pub fn prefix<T: Into<String>>(mut self, parts: impl IntoIterator<Item = T>) -> Self {
        self.prefix = parts.into_iter().map(Into::into).collect();
        self
    }

    /// Ending with `parts`.
    pub fn suffix<T: Into<String>>(mut self, parts: impl IntoIterator<Item = T>) -> Self {
        self.suffix = parts.into_iter().map(Into::into).collect();
        self
    }

    /// Cut to `depth` parts.
    pub fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = Some(depth);
        self
    }

    /// At most `limit`, after skipping `offset`.
    pub fn page(mut self, limit: usize, offset: usize) -> Self {
        self.limit = limit;
        self.offset = offset;
        self
    }

    /// Applies the query to every namespace holding items (sorted and
    /// distinct): what a store returns.
    pub fn select(&self, namespaces: impl IntoIterator<Item = Namespace>) -> Vec<Namespace> {
        let matches = |parts: &[String], pattern: &[String]| {
            parts.len() >= pattern.len()
                && parts.iter().zip(pattern).all(|(part, want)| want == "*" || part == want)
        };
        let mut chosen: Vec<Namespace> = namespaces
            .into_iter()
            .filter(|ns| matches(&ns.0, &self.prefix))
            .filter(|ns| {
                let tail: Vec<String> = ns.0.iter().rev().cloned().collect();
                let want: Vec<String> = self.suffix.iter().rev().cloned().collect();
                matches(&tail, &want)
            })
            .map(|ns| match self.max_depth {
                Some(depth) if ns.0.len() > depth => Namespace(ns.0[..depth].to_vec()),
                _ => ns,
            })
            .collect();
        chosen.sort();
        chosen.dedup();
        chosen.into_iter().skip(self.offset).take(self.limit).collect()
    }

    /// The literal parts the prefix begins with (up to its first `*`):
    /// what a store can narrow its scan to.
    pub fn literal_prefix(&self) -> Namespace {
        Namespace(self.prefix.iter().take_while(|part| *part != "*").cloned().collect())
    }
}

/// One operation of a batch.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ItemOp {
    /// Store an item.
    Put(PutOp),
    /// Remove an item (nothing when there is none).
    Delete {
        /// Where.
        namespace: Namespace,
        /// Its key.
        key: String,
    },
    /// Read an item.
    Get(GetOp),
    /// Find items.
    Search(SearchOp),
    /// List namespaces.
    ListNamespaces(NamespaceQuery),
}

impl ItemOp {
    /// Whether it changes the store.
    pub fn writes(&self) -> bool {
        matches!(self, ItemOp::Put(_) | ItemOp::Delete { .. })
    }

    /// Checks names, sizes and limits: what every store refuses.
    pub fn check(&self) -> Result<(), ItemError> {
        match self {
            ItemOp::Put(put) => {
                check_item_namespace(&put.namespace)?;
                check_key(&put.key)?;
                let bytes = serde_json::to_vec(&put.value).map(|text| text.len()).unwrap_or(0);
                if bytes > MAX_VALUE_BYTES {
                    return Err(ItemError::ValueTooLarge {
                        namespace: put.namespace.clone(),
                        key: put.key.clone(),
                        bytes,
                        limit: MAX_VALUE_BYTES,
                    });
                }
                if put.ttl.is_some_and(|ttl| ttl.is_zero()) {
                    return Err(ItemError::ZeroTtl);
                }
                Ok(())
            }
            ItemOp::Delete { namespace, key } => {
                check_item_namespace(namespace)?;
                check_key(key)
            }
            ItemOp::Get(get) => {
                check_item_namespace(&get.namespace)?;
                check_key(&get.key)
            }
            ItemOp::Search(search) => match search.limit {
                0 | 1..=MAX_SEARCH_LIMIT => Ok(()),
                limit => Err(ItemError::LimitTooLarge { limit, most: MAX_SEARCH_LIMIT }),
            },
            ItemOp::ListNamespaces(_) => Ok(()),
        }
    }
}

/// What one operation of a batch returned, in the batch's order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ItemResult {
    /// A put was stored.
    Stored,
    /// A delete: whether there was an item.
    Deleted(bool),
    /// A get: the item, if there is one and it has not expired.
    Item(Option<Item>),
    /// A search: the matches, best (or newest) first.
    Items(Vec<Item>),
    /// A search with a vector: the matches, best first, and what the
    /// store saw that could not match.
    Ranked(Ranked),
    /// A namespace listing, in order.
    Namespaces(Vec<Namespace>),
}

/// What a search with a vector ([`SearchOp::vector`]) found.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Ranked {
    /// The matches, best first.
    pub items: Vec<Item>,
    /// Live items under the prefix that pass the filter but have no
    /// vector (stored without an embedder): no query can match them
    /// (counted when [`SearchOp::count_unindexed`], else 0).
    pub unindexed: u64,
    /// When no vector under the prefix has the query's dimensions but some
    /// have others: those (the first seen).
    pub other_dimensions: Option<usize>,
}

impl Ranked {
    /// `items` found, with `unindexed` items that could not match and the
    /// `other_dimensions` of stored vectors when none had the query's.
    pub fn new(items: Vec<Item>, unindexed: u64, other_dimensions: Option<usize>) -> Self {
        Self { items, unindexed, other_dimensions }
    }
}

/// Storage of long-term memory.
///
/// [`ItemStore::apply`] runs a batch atomically: every write of it is
/// stored, or none (a process killed mid-batch leaves the store as it
/// was); reads in a batch see the batch's earlier writes. Expired items are
/// invisible to every read from the moment they expire, and removed by
/// [`ItemStore::sweep`]. Stores keep [`PutOp::vector`] and rank a search
/// carrying [`SearchOp::vector`] by cosine similarity, after the filter;
/// embedding is [`Memory`]'s job.
#[async_trait]
pub trait ItemStore: Send + Sync + fmt::Debug + 'static {
    /// Applies `ops` in order as one atomic batch, at `now_ms`.
    async fn apply(&self, ops: Vec<ItemOp>, now_ms: i64) -> Result<Vec<ItemResult>, ItemError>;

    /// Removes the items expired at `now_ms`; how many.
    async fn sweep(&self, now_ms: i64) -> Result<u64, ItemError>;
}

/// `ttl` in whole milliseconds (at least one).
pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

#[cfg(test)]
mod tests;
