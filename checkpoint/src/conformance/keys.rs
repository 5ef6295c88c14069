//! [`IdempotencyStore`] cases: a key is claimed once, its holder found,
//! released only by its claimer, taken over when expired or named.

use crate::keys::{Claimed, KeyClaim};
use crate::store::IdempotencyStore;

/// A claim of `key` by `scope` for `made`, at `now` for `ttl`.
fn claim(scope: &str, key: &str, fingerprint: &str, made: &str, now: i64, ttl: i64) -> KeyClaim {
    KeyClaim::new(scope, key, fingerprint, made, now, now + ttl)
}

pub(super) async fn keys_are_claimed_once_per_scope(store: &impl IdempotencyStore) {
    let first = claim("ann", "k1", "body-a", "run-1", 1_000, 500);
    assert_eq!(store.claim_key(first).await.expect("claim"), Claimed::Won);
    // Another request with the key finds the first, whatever it sends.
    for fingerprint in ["body-a", "body-b"] {
        let again = claim("ann", "k1", fingerprint, "run-2", 1_100, 500);
        let Claimed::Held(held) = store.claim_key(again).await.expect("claim again") else {
            panic!("a held key was claimed a second time");
        };
        assert_eq!((held.fingerprint.as_str(), held.made.as_str()), ("body-a", "run-1"));
        assert_eq!((held.claimed_at_ms, held.expires_at_ms), (1_000, 1_500));
    }
    // The same key from another caller is another key.
    let other = claim("bob", "k1", "body-b", "run-3", 1_100, 500);
    assert_eq!(store.claim_key(other).await.expect("claim"), Claimed::Won);
    // Expired, it is claimed afresh.
    let later = claim("ann", "k1", "body-c", "run-4", 1_500, 500);
    assert_eq!(store.claim_key(later).await.expect("claim"), Claimed::Won);
    let held = claim("ann", "k1", "body-a", "run-5", 1_600, 500);
    let Claimed::Held(held) = store.claim_key(held).await.expect("claim") else {
        panic!("the renewed key was claimed again");
    };
    assert_eq!(held.made, "run-4");
}

pub(super) async fn keys_are_released_by_their_claimer_and_taken_over_by_name(
    store: &impl IdempotencyStore,
) {
    let first = claim("ann", "k", "body", "run-1", 1_000, 60_000);
    assert_eq!(store.claim_key(first).await.expect("claim"), Claimed::Won);
    // Only the claimer of `run-1` releases it.
    assert!(!store.release_key("ann", "k", "run-9").await.expect("release"));
    assert!(!store.release_key("bob", "k", "run-1").await.expect("release"));
    assert!(store.release_key("ann", "k", "run-1").await.expect("release"));
    assert!(!store.release_key("ann", "k", "run-1").await.expect("release twice"));
    let second = claim("ann", "k", "body", "run-2", 2_000, 60_000);
    assert_eq!(store.claim_key(second).await.expect("claim"), Claimed::Won);
    // Taking over names the claim it replaces; another name does not.
    let wrong = claim("ann", "k", "body", "run-3", 3_000, 60_000).replacing("run-1");
    assert!(matches!(store.claim_key(wrong).await.expect("claim"), Claimed::Held(_)));
    let over = claim("ann", "k", "body", "run-3", 3_000, 60_000).replacing("run-2");
    assert_eq!(store.claim_key(over).await.expect("take over"), Claimed::Won);
    let Claimed::Held(held) =
        store.claim_key(claim("ann", "k", "body", "run-4", 3_100, 1)).await.expect("claim")
    else {
        panic!("a taken-over key was claimed again");
    };
    assert_eq!((held.made.as_str(), held.claimed_at_ms), ("run-3", 3_000));
}

pub(super) async fn expired_keys_are_swept_in_batches(store: &impl IdempotencyStore) {
    for i in 0..5 {
        let key = format!("old-{i}");
        store.claim_key(claim("ann", &key, "f", "r", 1_000, 100)).await.expect("claim");
    }
    store.claim_key(claim("ann", "young", "f", "r", 1_000, 10_000)).await.expect("claim");
    assert_eq!(store.sweep_keys(1_100, 3).await.expect("sweep"), 3);
    assert_eq!(store.sweep_keys(1_100, 10).await.expect("sweep"), 2);
    assert_eq!(store.sweep_keys(1_100, 10).await.expect("sweep"), 0);
    // The unexpired key is still held.
    let again = claim("ann", "young", "f", "other", 1_200, 10);
    assert!(matches!(store.claim_key(again).await.expect("claim"), Claimed::Held(_)));
}
