//! What an item operation can refuse or fail on.

use super::namespace::Namespace;
use crate::error::StoreError;

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
    /// A filter holds more conditions than [`MAX_FILTER_CONDITIONS`](super::limits::MAX_FILTER_CONDITIONS).
    #[error("a filter of {conditions} conditions (at most {limit})")]
    FilterTooLarge {
        /// The conditions it holds.
        conditions: usize,
        /// The most allowed.
        limit: usize,
    },
    /// A `$in` lists more values than [`MAX_IN_VALUES`](super::limits::MAX_IN_VALUES).
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

/// An embedder failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The request did not get an answer.
    #[error("request failed: {source}")]
    Request {
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The service answered with an error status.
    #[error("HTTP status {status}: {body}")]
    Status {
        /// The status.
        status: u16,
        /// The start of its body (keys scrubbed).
        body: String,
    },
    /// The answer is not a list of embeddings.
    #[error("the answer is not a list of embeddings: {source}")]
    Response {
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The answer has another number of vectors than texts asked for.
    #[error("{found} vectors for {asked} texts")]
    Count {
        /// Texts asked for.
        asked: usize,
        /// Vectors returned.
        found: usize,
    },
}
