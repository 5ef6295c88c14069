//! [`Memory`]: an item store with its index and clock, what agents use.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde_json::Value;
use tracing::Instrument;

use super::{
    EmbedError, GetOp, Item, ItemError, ItemOp, ItemResult, ItemStore, Namespace, NamespaceQuery,
    PutOp, Ranked, SearchOp,
};

/// Turns texts into vectors for semantic search.
#[async_trait]
pub trait Embedder: Send + Sync + fmt::Debug {
    /// A name for errors and logs (`openai:text-embedding-3-small`).
    fn name(&self) -> &str;

    /// One vector per text, in order.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// What a [`Memory`] embeds: the fields of each value, and the vectors'
/// dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexConfig {
    /// Dimensions of the embedder's vectors (checked on every vector).
    pub dims: usize,
    /// Fields of a value whose text is embedded (dotted paths; `$` for the
    /// whole value): strings as they are, other values as JSON, joined by
    /// newlines. An item with none of them is not embedded.
    pub fields: Vec<String>,
}

impl IndexConfig {
    /// Vectors of `dims` dimensions of the whole value.
    pub fn new(dims: usize) -> Self {
        Self { dims, fields: vec!["$".into()] }
    }

    /// Embeds these fields.
    pub fn fields<T: Into<String>>(mut self, fields: impl IntoIterator<Item = T>) -> Self {
        self.fields = fields.into_iter().map(Into::into).collect();
        self
    }

    /// The text of `value` to embed for `fields`, if any.
    fn text(fields: &[String], value: &Value) -> Option<String> {
        let parts: Vec<String> = fields
            .iter()
            .filter_map(|field| match field.as_str() {
                "$" => Some(value),
                path => path.split('.').try_fold(value, |at, part| at.as_object()?.get(part)),
            })
            .filter(|found| !found.is_null())
            .map(|found| match found {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n"))
    }
}

type Clock = dyn Fn() -> i64 + Send + Sync;

/// Long-term memory as agents and services use it: an [`ItemStore`], an
/// optional [`Embedder`] with its [`IndexConfig`] (puts embed the
/// configured fields; searches with a query embed it and rank by
/// similarity), and a clock for TTLs.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use tollgate_checkpoint::{InMemoryItemStore, Memory, Namespace};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let memory = Memory::new(Arc::new(InMemoryItemStore::new()));
/// let ns = Namespace::parse("users/42/memories").unwrap();
/// memory.put(&ns, "lang", json!({"text": "prefers French"})).await.unwrap();
/// let item = memory.get(&ns, "lang").await.unwrap().unwrap();
/// assert_eq!(item.value["text"], "prefers French");
/// # });
/// ```
#[derive(Clone)]
pub struct Memory {
    store: Arc<dyn ItemStore>,
    index: Option<(IndexConfig, Arc<dyn Embedder>)>,
    clock: Arc<Clock>,
}

impl fmt::Debug for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Memory")
            .field("store", &self.store)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Memory {
    /// Memory in `store`, without an index, on the wall clock.
    pub fn new(store: Arc<dyn ItemStore>) -> Self {
        Self { store, index: None, clock: Arc::new(wall_clock_ms) }
    }

    /// Embeds what `config` says with `embedder`.
    pub fn with_index(mut self, config: IndexConfig, embedder: Arc<dyn Embedder>) -> Self {
        self.index = Some((config, embedder));
        self
    }

    /// Reads the time (milliseconds since the Unix epoch) from `clock`:
    /// tests move it to expire items.
    pub fn with_clock(mut self, clock: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ItemStore> {
        &self.store
    }

    /// The index, if any.
    pub fn index(&self) -> Option<&IndexConfig> {
        self.index.as_ref().map(|(config, _)| config)
    }

    /// The clock's time.
    pub fn now_ms(&self) -> i64 {
        (self.clock)()
    }

    /// Applies `ops` as one atomic batch (see [`ItemStore::apply`]), after
    /// embedding what they need in one call to the embedder.
    pub async fn batch(&self, mut ops: Vec<ItemOp>) -> Result<Vec<ItemResult>, ItemError> {
        ops.iter().try_for_each(ItemOp::check)?;
        self.embed(&mut ops).await?;
        let span = tracing::debug_span!("memory", ops = ops.len());
        self.store.apply(ops, self.now_ms()).instrument(span).await
    }

    /// Fills in the vectors of puts and queries.
    async fn embed(&self, ops: &mut [ItemOp]) -> Result<(), ItemError> {
        let mut texts = Vec::new();
        let mut slots = Vec::new();
        for (at, op) in ops.iter().enumerate() {
            match op {
                ItemOp::Put(put) if put.vector.is_none() => {
                    let Some((config, _)) = &self.index else { continue };
                    let fields = put.index.as_deref().unwrap_or(&config.fields);
                    if let Some(text) = IndexConfig::text(fields, &put.value) {
                        texts.push(text);
                        slots.push(at);
                    }
                }
                ItemOp::Search(search) if search.vector.is_none() => {
                    let Some(query) = &search.query else { continue };
                    if self.index.is_none() {
                        return Err(ItemError::NoIndex);
                    }
                    texts.push(query.clone());
                    slots.push(at);
                }
                _ => {}
            }
        }
        let Some((config, embedder)) = self.index.as_ref().filter(|_| !texts.is_empty()) else {
            return Ok(());
        };
        let span = tracing::debug_span!("embed", embedder = embedder.name(), texts = texts.len());
        let vectors = embedder
            .embed(&texts)
            .instrument(span)
            .await
            .map_err(|source| ItemError::Embed { embedder: embedder.name().to_owned(), source })?;
        if vectors.len() != texts.len() {
            let source = super::EmbedError::Count { asked: texts.len(), found: vectors.len() };
            return Err(ItemError::Embed { embedder: embedder.name().to_owned(), source });
        }
        for (at, vector) in slots.into_iter().zip(vectors) {
            if vector.len() != config.dims {
                return Err(ItemError::WrongDimensions {
                    expected: config.dims,
                    found: vector.len(),
                });
            }
            match &mut ops[at] {
                ItemOp::Put(put) => put.vector = Some(vector),
                ItemOp::Search(search) => search.vector = Some(vector),
                _ => {}
            }
        }
        Ok(())
    }

    async fn one(&self, op: ItemOp) -> Result<ItemResult, ItemError> {
        let mut results = self.batch(vec![op]).await?;
        Ok(results.pop().unwrap_or(ItemResult::Stored))
    }

    /// Stores `value` at `namespace`/`key`.
    pub async fn put(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Value,
    ) -> Result<(), ItemError> {
        self.put_op(PutOp::new(namespace.clone(), key, value)).await
    }

    /// Stores an item with options (TTL, fields to embed).
    pub async fn put_op(&self, op: PutOp) -> Result<(), ItemError> {
        self.one(ItemOp::Put(op)).await.map(drop)
    }

    /// Stores `value` expiring after `ttl`.
    pub async fn put_for(
        &self,
        namespace: &Namespace,
        key: &str,
        value: Value,
        ttl: Duration,
    ) -> Result<(), ItemError> {
        self.put_op(PutOp::new(namespace.clone(), key, value).ttl(ttl)).await
    }

    /// The item, refreshing its TTL.
    pub async fn get(&self, namespace: &Namespace, key: &str) -> Result<Option<Item>, ItemError> {
        self.get_op(GetOp::new(namespace.clone(), key)).await
    }

    /// The item, with options.
    pub async fn get_op(&self, op: GetOp) -> Result<Option<Item>, ItemError> {
        match self.one(ItemOp::Get(op)).await? {
            ItemResult::Item(item) => Ok(item),
            _ => Ok(None),
        }
    }

    /// Removes the item; whether there was one.
    pub async fn delete(&self, namespace: &Namespace, key: &str) -> Result<bool, ItemError> {
        let op = ItemOp::Delete { namespace: namespace.clone(), key: key.to_owned() };
        Ok(matches!(self.one(op).await?, ItemResult::Deleted(true)))
    }

    /// The matches of `search`. A semantic search whose query has other
    /// dimensions than every vector stored under its prefix is
    /// [`ItemError::StoredDimensions`], not an empty answer.
    pub async fn search(&self, search: SearchOp) -> Result<Vec<Item>, ItemError> {
        Ok(self.search_ranked(search).await?.items)
    }

    /// As [`Memory::search`], with what a semantic search could not match:
    /// the items under the prefix that pass the filter but have no vector
    /// ([`Ranked::unindexed`]; 0 for a search without a query).
    pub async fn search_ranked(&self, mut search: SearchOp) -> Result<Ranked, ItemError> {
        search.count_unindexed = true;
        // The query's dimensions: the caller's vector, else the index's.
        let query = match (&search.vector, &search.query, &self.index) {
            (Some(vector), _, _) => vector.len(),
            (None, Some(_), Some((config, _))) => config.dims,
            _ => 0,
        };
        let mut results = self.batch(vec![ItemOp::Search(search)]).await?;
        match results.pop() {
            Some(ItemResult::Ranked(ranked)) => match ranked.other_dimensions {
                Some(stored) => Err(ItemError::StoredDimensions { query, stored }),
                None => Ok(ranked),
            },
            Some(ItemResult::Items(items)) => Ok(Ranked::new(items, 0, None)),
            _ => Ok(Ranked::new(Vec::new(), 0, None)),
        }
    }

    /// The namespaces `query` selects.
    pub async fn list_namespaces(
        &self,
        query: NamespaceQuery,
    ) -> Result<Vec<Namespace>, ItemError> {
        match self.one(ItemOp::ListNamespaces(query)).await? {
            ItemResult::Namespaces(namespaces) => Ok(namespaces),
            _ => Ok(Vec::new()),
        }
    }

    /// Removes expired items now; how many (they are invisible already).
    pub async fn sweep(&self) -> Result<u64, ItemError> {
        self.store.sweep(self.now_ms()).await
    }
}
