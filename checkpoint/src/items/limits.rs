//! The limits every item store enforces.

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
