//! Long-term memory workloads: puts, gets and filtered searches over
//! 100,000 items (1,000 namespaces `users/{u}/memories` of 100 items,
//! values `{"text", "kind": one of four, "n"}`), and vector searches over
//! 10,000 and 100,000 items of 384 dimensions. Every call is timed on its
//! own (a put is its own transaction, as LangGraph's store does it).

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tollgate::{Filter, ItemOp, ItemStore, Memory, Namespace, PutOp, SearchOp};

use crate::backend::Backend;
use crate::Outcome;

const USERS: usize = 1_000;
const PER_USER: usize = 100;
const KINDS: [&str; 4] = ["pref", "fact", "event", "note"];
const DIMS: usize = 384;

/// A small deterministic generator (xorshift), so runs compare.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn vector(&mut self) -> Vec<f32> {
        (0..DIMS).map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5).collect()
    }
}

fn user(u: usize) -> Namespace {
    Namespace::new(["users".to_owned(), u.to_string(), "memories".to_owned()]).expect("valid")
}

fn value(u: usize, i: usize) -> Value {
    json!({"text": format!("user {u} memory {i}: something worth keeping"), "kind": KINDS[i % 4], "n": i})
}

/// p50 and p99 of microsecond samples.
fn percentiles(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    (at(0.50), at(0.99))
}

fn line(workload: &str, n: usize, samples: Vec<f64>, extra: Value) -> Value {
    let (p50, p99) = percentiles(samples);
    crate::extend(json!({"workload": workload, "n": n, "p50_us": p50, "p99_us": p99}), extra)
}

fn since(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e6
}

async fn timed<F, T>(samples: &mut Vec<f64>, call: F) -> Result<T, Box<dyn std::error::Error>>
where
    F: std::future::Future<Output = Result<T, tollgate::ItemError>>,
{
    let started = Instant::now();
    let value = call.await?;
    samples.push(since(started));
    Ok(value)
}

/// `store_put`, `store_get`, `store_search_filter` on one store of
/// 100,000 items.
pub(crate) async fn items(backend: &Backend) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let store: Arc<dyn ItemStore> = backend.open_items("store").await?;
    let memory = Memory::new(store);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut puts = Vec::with_capacity(USERS * PER_USER);
    let started = Instant::now();
    for i in 0..PER_USER {
        for u in 0..USERS {
            timed(&mut puts, memory.put(&user(u), &format!("m{i:03}"), value(u, i))).await?;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let bytes = backend.bytes("store").await?;
    let put = line("store_put", puts.len(), puts, json!({"seconds": seconds, "db_bytes": bytes}));
    let mut gets = Vec::with_capacity(20_000);
    for _ in 0..20_000 {
        let (u, i) = (rng.below(USERS), rng.below(PER_USER));
        let found = timed(&mut gets, memory.get(&user(u), &format!("m{i:03}"))).await?;
        assert!(found.is_some(), "every item was put");
    }
    let get = line("store_get", gets.len(), gets, json!({"items": USERS * PER_USER}));
    let filter = Filter::from_json(&json!({"kind": "pref"}))?;
    let mut searches = Vec::with_capacity(5_000);
    for _ in 0..5_000 {
        let op = SearchOp::new(user(rng.below(USERS))).filter(filter.clone()).limit(10);
        let found = timed(&mut searches, memory.search(op)).await?;
        assert_eq!(found.len(), 10, "a quarter of 100 items are prefs");
    }
    let search = line(
        "store_search_filter",
        searches.len(),
        searches,
        json!({"items": USERS * PER_USER, "namespace_items": PER_USER, "limit": 10}),
    );
    Ok(vec![put, get, search])
}

/// `store_search_vector_N`: `n` items of 384 dimensions (put in batches
/// of 500), then top-10 searches with a query vector (the query's
/// embedding is given: an embedder's time is its provider's).
pub(crate) async fn vectors(backend: &Backend, n: usize) -> Outcome {
    let name = format!("store_vectors_{n}");
    let memory = Memory::new(backend.open_items(&name).await?);
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for start in (0..n).step_by(500) {
        let ops = (start..(start + 500).min(n))
            .map(|i| {
                let mut put =
                    PutOp::new(user(i % USERS), format!("v{i}"), json!({"kind": KINDS[i % 4]}));
                put.vector = Some(rng.vector());
                ItemOp::Put(put)
            })
            .collect();
        memory.batch(ops).await?;
    }
    let search = |vector: Vec<f32>| {
        let mut op = SearchOp::new(Namespace::parse("users")?).limit(10);
        op.vector = Some(vector);
        Ok::<_, tollgate::ItemError>(op)
    };
    // The first search loads this process's copy of the vectors.
    let started = Instant::now();
    memory.search(search(rng.vector())?).await?;
    let first_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut samples = Vec::new();
    for _ in 0..100 {
        let found = timed(&mut samples, memory.search(search(rng.vector())?)).await?;
        assert_eq!(found.len(), 10);
    }
    Ok(line(
        &format!("store_search_vector_{}k", n / 1000),
        samples.len(),
        samples,
        json!({"items": n, "dims": DIMS, "top": 10, "first_search_ms": first_ms}),
    ))
}
