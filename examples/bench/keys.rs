//! The `request_keys` workload: `Idempotency-Key` claims on the store, as
//! a server makes them. `claim_us`: a new key claimed (one write
//! transaction); `replay_us`: the claim of a key already held, which
//! reads the holder (what a retried request costs before it answers);
//! `read_us`, for scale: the store's read of a thread record that is not
//! there (one indexed read).

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tollgate::{Claimed, KeyClaim, Store};

use crate::backend::Backend;
use crate::{extend, line, median, Outcome};

const KEYS: u64 = 1_000;
const DAY_MS: i64 = 86_400_000;

/// `KEYS` new keys of round `round` claimed, then claimed again: the
/// seconds each pass took.
async fn round(
    store: &Arc<dyn Store>,
    round: u32,
) -> Result<(f64, f64, f64), Box<dyn std::error::Error>> {
    let claim = |i: u64, made: &str| {
        let key = format!("r{round}-k{i}");
        KeyClaim::new("bench", key, "fingerprint", made, 1_000, 1_000 + DAY_MS)
    };
    let started = Instant::now();
    for i in 0..KEYS {
        let made = format!("run-{i}");
        assert_eq!(store.claim_key(claim(i, &made)).await?, Claimed::Won);
    }
    let claims = started.elapsed().as_secs_f64();
    let started = Instant::now();
    for i in 0..KEYS {
        assert!(matches!(store.claim_key(claim(i, "other")).await?, Claimed::Held(_)));
    }
    let replays = started.elapsed().as_secs_f64();
    let started = Instant::now();
    for i in 0..KEYS {
        assert!(store.thread_record(&format!("r{round}-t{i}")).await?.is_none());
    }
    Ok((claims, replays, started.elapsed().as_secs_f64()))
}

/// `request_keys`: five rounds of 1,000 claims, 1,000 replays and 1,000
/// reads; medians.
pub(crate) async fn request_keys(backend: &Backend) -> Outcome {
    let store = backend.open("request_keys").await?;
    round(&store, 0).await?; // warm-up
    let (mut claims, mut replays, mut reads) = (Vec::new(), Vec::new(), Vec::new());
    for n in 1..=5 {
        let (claimed, replayed, read) = round(&store, n).await?;
        claims.push(claimed);
        replays.push(replayed);
        reads.push(read);
    }
    let (claims, replays, reads) = (median(claims), median(replays), median(reads));
    drop(store);
    let bytes = backend.bytes("request_keys").await?;
    Ok(extend(
        line("request_keys", KEYS, claims, KEYS, bytes, 0),
        json!({
            "claim_us": claims * 1e6 / KEYS as f64,
            "replay_us": replays * 1e6 / KEYS as f64,
            "read_us": reads * 1e6 / KEYS as f64,
        }),
    ))
}
