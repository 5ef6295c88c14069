//! Request keys: what makes a retried request start nothing new. A caller
//! sends a key with a request that creates something (a run, a pending
//! run, a copied thread); the first request with the key claims it for
//! the id of what it makes, and a later one with the same key finds that
//! id instead of making a second ([`IdempotencyStore`](crate::IdempotencyStore)).
//!
//! A claim is written before what it names is made, in its own
//! transaction: the key is taken by exactly one of any number of callers
//! (the table's primary key decides), whichever process they are in. A
//! claimer that fails to make its thing releases the key; one that died
//! before doing either leaves a claim whose thing never appears, which
//! the next caller may take over by naming it
//! ([`KeyClaim::replacing`]).

/// A claim on a request key for what the request makes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyClaim {
    /// Whose key it is (a principal): the same key from two callers is
    /// two keys.
    pub scope: String,
    /// The key the caller sent.
    pub key: String,
    /// What identifies the request (a digest of its route and body): a
    /// retry carries the same, another request under the same key does
    /// not.
    pub fingerprint: String,
    /// The id of what the request makes.
    pub made: String,
    /// When the claim is made, milliseconds since the Unix epoch; a key
    /// that expired by then is claimed afresh.
    pub now_ms: i64,
    /// Until when the key is kept.
    pub expires_at_ms: i64,
    /// Take the key over also when it is held for this id (a claimer that
    /// never made it).
    pub replacing: Option<String>,
}

impl KeyClaim {
    /// A claim of `key` in `scope` for `made`, by a request whose
    /// fingerprint is `fingerprint`, made at `now_ms` and kept until
    /// `expires_at_ms`.
    pub fn new(
        scope: impl Into<String>,
        key: impl Into<String>,
        fingerprint: impl Into<String>,
        made: impl Into<String>,
        now_ms: i64,
        expires_at_ms: i64,
    ) -> Self {
        Self {
            scope: scope.into(),
            key: key.into(),
            fingerprint: fingerprint.into(),
            made: made.into(),
            now_ms,
            expires_at_ms,
            replacing: None,
        }
    }

    /// The same claim, taking the key over from a claimer of `made` that
    /// never made it.
    pub fn replacing(mut self, made: impl Into<String>) -> Self {
        self.replacing = Some(made.into());
        self
    }
}

/// What a claim found: one of two outcomes, and never more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// The key is the caller's now: make what it names.
    Won,
    /// Another request holds the key (unexpired).
    Held(HeldKey),
}

/// A key another request holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldKey {
    /// That request's fingerprint.
    pub fingerprint: String,
    /// The id of what it makes (or made).
    pub made: String,
    /// When it claimed the key, milliseconds since the Unix epoch.
    pub claimed_at_ms: i64,
    /// Until when the key is kept.
    pub expires_at_ms: i64,
}

impl HeldKey {
    /// A held key as a store read it.
    pub fn new(fingerprint: String, made: String, claimed_at_ms: i64, expires_at_ms: i64) -> Self {
        Self { fingerprint, made, claimed_at_ms, expires_at_ms }
    }
}

/// For stores: what a claim does to a key held as `held` (none: free).
/// `true`: the claim takes the key.
pub fn claim_wins(claim: &KeyClaim, held: Option<&HeldKey>) -> bool {
    match held {
        None => true,
        Some(held) => {
            held.expires_at_ms <= claim.now_ms || claim.replacing.as_deref() == Some(&held.made)
        }
    }
}
