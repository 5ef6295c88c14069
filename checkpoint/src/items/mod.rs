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

use crate::error::StoreError;

mod filter;
mod in_memory;
mod memory;
mod vector;

pub use filter::{Condition, Filter, FilterOp};
pub use in_memory::InMemoryItemStore;
pub use memory::{EmbedError, Embedder, IndexConfig, Memory};
pub use vector::{decode_vector, encode_vector, Ranking, VectorCache, VectorChange};

/// Longest serialised value a store takes, in bytes.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Longest namespace part, in bytes.
pub const MAX_PART_BYTES: usize = 256;
/// Most parts in a namespace.
pub const MAX_PARTS: usize = 32;
/// Most items one search returns.
pub const MAX_SEARCH_LIMIT: usize = 1000;
/// Most conditions one filter may hold (fields and their operators).
pub const MAX_FILTER_CONDITIONS: usize = 100;
/// Most values one `$in` may list.
pub const MAX_IN_VALUES: usize = 10_000;

/// Where items live: a path of parts such as `users/42/memories`. Parts are
/// non-empty, at most [`MAX_PART_BYTES`] long, and hold no `/` and no
/// control characters. A namespace used as a prefix may be empty (every
/// item); an item's has at least one part.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct Namespace(Vec<String>);

impl Namespace {
    /// A namespace of `parts`, checked.
    pub fn new<I, S>(parts: I) -> Result<Self, ItemError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let parts: Vec<String> = parts.into_iter().map(Into::into).collect();
        if parts.len() > MAX_PARTS {
            return Err(ItemError::TooManyParts { parts: parts.len(), limit: MAX_PARTS });
        }
        for part in &parts {
            check_part(part)?;
        }
        Ok(Self(parts))
    }

    /// A namespace written with slashes (`users/42/memories`); the empty
    /// string is the empty namespace.
    pub fn parse(text: &str) -> Result<Self, ItemError> {
        match text {
            "" => Ok(Self::default()),
            text => Self::new(text.split('/')),
        }
    }

    /// Its parts.
    pub fn parts(&self) -> &[String] {
        &self.0
    }

    /// Whether it has no parts.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `prefix`'s parts begin this namespace.
    pub fn starts_with(&self, prefix: &Namespace) -> bool {
        self.0.starts_with(&prefix.0)
    }

    /// The form stores index by: every part followed by `/`
    /// (`users/42/`), so that a prefix's items are one range of strings
    /// (from [`Namespace::stored`] up to [`Namespace::stored_end`]).
    pub fn stored(&self) -> String {
        let mut text = String::with_capacity(self.0.iter().map(|part| part.len() + 1).sum());
        for part in &self.0 {
            text.push_str(part);
            text.push('/');
        }
        text
    }

    /// The first string past every stored namespace beginning with this
    /// one (the final `/` of [`Namespace::stored`] raised to `0`); `None`
    /// for the empty namespace, which begins every one.
    pub fn stored_end(&self) -> Option<String> {
        let mut text = self.stored();
        text.pop().map(|_| {
            text.push('0');
            text
        })
    }

    /// The namespace back from [`Namespace::stored`].
    pub fn from_stored(text: &str) -> Self {
        Self(text.split_terminator('/').map(str::to_owned).collect())
    }
}

impl TryFrom<Vec<String>> for Namespace {
    type Error = ItemError;

    fn try_from(parts: Vec<String>) -> Result<Self, ItemError> {
        Self::new(parts)
    }
}

impl From<Namespace> for Vec<String> {
    fn from(namespace: Namespace) -> Self {
        namespace.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("/"))
    }
}

fn check_part(part: &str) -> Result<(), ItemError> {
    let reason = if part.is_empty() {
        "is empty"
    } else if part.len() > MAX_PART_BYTES {
        "is longer than 256 bytes"
    } else if part.contains('/') {
        "holds a `/` (the separator)"
    } else if part.chars().any(char::is_control) {
        "holds a control character"
    } else {
        return Ok(());
    };
    Err(ItemError::InvalidNamespacePart { part: part.to_owned(), reason })
}

fn check_key(key: &str) -> Result<(), ItemError> {
    let reason = if key.is_empty() {
        "is empty"
    } else if key.len() > MAX_KEY_BYTES {
        "is longer than 1024 bytes"
    } else if key.chars().any(char::is_control) {
        "holds a control character"
    } else {
        return Ok(());
    };
    Err(ItemError::InvalidKey { key: key.chars().take(64).collect(), reason })
}

fn check_item_namespace(namespace: &Namespace) -> Result<(), ItemError> {
    match namespace.is_empty() {
        true => Err(ItemError::EmptyNamespace),
        false => Ok(()),
    }
}

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

/// A long-term memory operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ItemError {
    /// A namespace part breaks the rules.
    #[error("namespace part `{part}` {reason}")]
    InvalidNamespacePart {
        /// The part.
        part: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// An item's namespace must have at least one part.
    #[error("an item's namespace must have at least one part")]
    EmptyNamespace,
    /// Too many parts.
    #[error("a namespace of {parts} parts (at most {limit})")]
    TooManyParts {
        /// Parts given.
        parts: usize,
        /// The most allowed.
        limit: usize,
    },
    /// A key breaks the rules.
    #[error("key `{key}` {reason}")]
    InvalidKey {
        /// The key (its first 64 characters).
        key: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A value is too large.
    #[error("the value of {namespace}/{key} is {bytes} bytes of JSON (at most {limit})")]
    ValueTooLarge {
        /// Where.
        namespace: Namespace,
        /// Its key.
        key: String,
        /// Its size.
        bytes: usize,
        /// The most allowed.
        limit: usize,
    },
    /// A TTL of zero would expire the item before anyone saw it.
    #[error("a TTL must be longer than zero")]
    ZeroTtl,
    /// A search asked for too many items.
    #[error("a search limit of {limit} (at most {most})")]
    LimitTooLarge {
        /// Asked for.
        limit: usize,
        /// The most allowed.
        most: usize,
    },
    /// A filter field's operator is not one of `$eq $ne $gt $gte $lt
    /// $lte $in`.
    #[error(
        "filter on `{field}`: unknown operator `{operator}` (use $eq $ne $gt $gte $lt $lte $in)"
    )]
    UnknownOperator {
        /// The field.
        field: String,
        /// The operator.
        operator: String,
    },
    /// A filter's operand does not suit its operator.
    #[error("filter on `{field}`: {operator} needs {needs}")]
    InvalidOperand {
        /// The field.
        field: String,
        /// The operator.
        operator: &'static str,
        /// What it needs.
        needs: &'static str,
    },
    /// A filter is not a JSON object of fields.
    #[error("a filter is a JSON object of fields and conditions")]
    FilterNotObject,
    /// A filter holds more conditions than [`MAX_FILTER_CONDITIONS`].
    #[error("a filter of {conditions} conditions (at most {limit})")]
    FilterTooLarge {
        /// The conditions it holds.
        conditions: usize,
        /// The most allowed.
        limit: usize,
    },
    /// A `$in` lists more values than [`MAX_IN_VALUES`].
    #[error("filter on `{field}`: $in lists {values} values (at most {limit})")]
    InTooLong {
        /// The field.
        field: String,
        /// The values it lists.
        values: usize,
        /// The most allowed.
        limit: usize,
    },
    /// A search has a query but the memory has no index.
    #[error("a search with a query needs an index (an embedder and the fields to embed)")]
    NoIndex,
    /// A vector has the wrong number of dimensions.
    #[error("a vector of {found} dimensions where the index has {expected}")]
    WrongDimensions {
        /// The index's.
        expected: usize,
        /// The vector's.
        found: usize,
    },
    /// A semantic search's vector has other dimensions than every vector
    /// stored under its prefix (they were embedded by another embedder).
    #[error(
        "the query was embedded with {query} dimensions, but the items under this prefix were embedded with {stored}: search with the embedder that stored them, or store them again with this one"
    )]
    StoredDimensions {
        /// The query vector's.
        query: usize,
        /// The stored vectors'.
        stored: usize,
    },
    /// The embedder failed.
    #[error("embedder `{embedder}` failed: {source}")]
    Embed {
        /// Its name.
        embedder: String,
        /// Why.
        #[source]
        source: EmbedError,
    },
    /// The store failed (busy past its patience, I/O, a damaged file).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ItemError {
    /// A stable name for the failure (`invalid_key`, `store`, …), for
    /// APIs and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            ItemError::InvalidNamespacePart { .. } => "invalid_namespace",
            ItemError::EmptyNamespace => "invalid_namespace",
            ItemError::TooManyParts { .. } => "invalid_namespace",
            ItemError::InvalidKey { .. } => "invalid_key",
            ItemError::ValueTooLarge { .. } => "value_too_large",
            ItemError::ZeroTtl => "invalid_ttl",
            ItemError::LimitTooLarge { .. } => "invalid_limit",
            ItemError::UnknownOperator { .. } => "invalid_filter",
            ItemError::InvalidOperand { .. } => "invalid_filter",
            ItemError::FilterNotObject => "invalid_filter",
            ItemError::FilterTooLarge { .. } => "filter_too_large",
            ItemError::InTooLong { .. } => "filter_too_large",
            ItemError::NoIndex => "no_index",
            ItemError::WrongDimensions { .. } => "wrong_dimensions",
            ItemError::StoredDimensions { .. } => "wrong_dimensions",
            ItemError::Embed { .. } => "embedder",
            ItemError::Store(_) => "store",
        }
    }

    /// Whether the caller's input is at fault (a request to correct), as
    /// opposed to the store or the embedder.
    pub fn is_invalid_input(&self) -> bool {
        !matches!(self, ItemError::Embed { .. } | ItemError::Store(_))
    }
}

/// `ttl` in whole milliseconds (at least one).
pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

#[cfg(test)]
mod tests;
