//! The long-term memory contract: what every [`ItemStore`] must keep.

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::items::{
    Filter, GetOp, ItemError, ItemOp, ItemResult, ItemStore, Memory, Namespace, NamespaceQuery,
    PutOp, SearchOp,
};

/// Runs every case of the long-term memory contract, each on a fresh,
/// empty store from `make`, through [`Memory`] with a clock the cases
/// move. A failure panics with the case and what differed.
pub async fn check_item_store<S, F, Fut>(make: F)
where
    S: ItemStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let fresh = || async { Clocked::new(make().await) };
    items_are_put_read_replaced_and_deleted(&fresh().await).await;
    bad_names_sizes_and_filters_are_refused(&fresh().await).await;
    searches_stay_in_their_prefix_newest_first_without_gaps(&fresh().await).await;
    filters_compare_like_the_reference(&fresh().await).await;
    expired_items_are_invisible_at_once_and_swept(&fresh().await).await;
    namespaces_are_listed_by_prefix_suffix_and_depth(&fresh().await).await;
    a_batch_sees_its_own_writes_and_an_invalid_batch_writes_nothing(&fresh().await).await;
    vector_searches_rank_after_the_filter(&fresh().await).await;
    concurrent_writers_to_one_key_leave_one_whole_value(&fresh().await).await;
}

/// A memory over the store under test, on a clock the case sets.
struct Clocked {
    memory: Memory,
    now: Arc<AtomicI64>,
}

const START_MS: i64 = 1_800_000_000_000;

impl Clocked {
    fn new(store: impl ItemStore) -> Self {
        let now = Arc::new(AtomicI64::new(START_MS));
        let clock = Arc::clone(&now);
        let memory = Memory::new(Arc::new(store)).with_clock(move || clock.load(Ordering::SeqCst));
        Self { memory, now }
    }

    fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

fn ns(text: &str) -> Namespace {
    Namespace::parse(text).expect("a valid namespace")
}

fn keys(items: &[crate::items::Item]) -> Vec<String> {
    items.iter().map(|item| format!("{}:{}", item.namespace, item.key)).collect()
}

async fn items_are_put_read_replaced_and_deleted(c: &Clocked) {
    let m = &c.memory;
    let users = ns("users/42");
    assert_eq!(
        m.get(&users, "lang").await.expect("the store answers"),
        None,
        "an empty store has no item"
    );
    m.put(&users, "lang", json!({"text": "French"})).await.expect("the store answers");
    let first = m.get(&users, "lang").await.expect("the store answers").expect("the item put");
    assert_eq!(first.value, json!({"text": "French"}));
    assert_eq!((first.created_at_ms, first.updated_at_ms), (START_MS, START_MS));
    assert_eq!((first.namespace.clone(), first.key.as_str()), (users.clone(), "lang"));
    assert_eq!(first.expires_at_ms, None);
    c.advance(10);
    m.put(&users, "lang", json!({"text": "German"})).await.expect("the store answers");
    let second =
        m.get(&users, "lang").await.expect("the store answers").expect("the item replaced");
    assert_eq!(second.value["text"], "German", "a put replaces the value");
    assert_eq!(second.created_at_ms, START_MS, "a put keeps when it was created");
    assert_eq!(second.updated_at_ms, START_MS + 10);
    assert_eq!(
        m.get(&ns("users/4"), "lang").await.expect("the store answers"),
        None,
        "namespaces are exact"
    );
    // Any JSON value, Unicode kept.
    m.put(&users, "note", json!("çà et là ✓")).await.expect("the store answers");
    assert_eq!(
        m.get(&users, "note").await.expect("the store answers").expect("a valid filter").value,
        json!("çà et là ✓")
    );
    assert!(
        m.delete(&users, "lang").await.expect("the store answers"),
        "delete says there was an item"
    );
    assert!(
        !m.delete(&users, "lang").await.expect("the store answers"),
        "a second delete finds nothing"
    );
    assert_eq!(m.get(&users, "lang").await.expect("the store answers"), None);
}

async fn bad_names_sizes_and_filters_are_refused(c: &Clocked) {
    let m = &c.memory;
    let users = ns("users/1");
    let refused = |result: Result<(), ItemError>, kind: &str| match result {
        Err(error) => assert_eq!(error.kind(), kind, "{error}"),
        Ok(()) => panic!("expected a `{kind}` refusal"),
    };
    refused(m.put(&Namespace::default(), "k", json!(1)).await, "invalid_namespace");
    refused(m.put(&users, "", json!(1)).await, "invalid_key");
    let big = json!("x".repeat(crate::items::MAX_VALUE_BYTES + 1));
    refused(m.put(&users, "k", big).await, "value_too_large");
    refused(m.put_for(&users, "k", json!(1), Duration::ZERO).await, "invalid_ttl");
    let search = m.search(SearchOp::new(users.clone()).limit(100_000)).await.map(drop);
    refused(search, "invalid_limit");
    let query = m.search(SearchOp::new(users.clone()).query("anything")).await.map(drop);
    refused(query, "no_index");
    assert!(Filter::from_json(&json!({"n": {"$near": 1}})).is_err());
    assert!(
        m.search(SearchOp::new(users)).await.expect("the store answers").is_empty(),
        "nothing was stored"
    );
}

async fn searches_stay_in_their_prefix_newest_first_without_gaps(c: &Clocked) {
    let m = &c.memory;
    for n in 0..12 {
        m.put(&ns("users/42/memories"), &format!("m{n:02}"), json!({"n": n}))
            .await
            .expect("the store answers");
        c.advance(1);
    }
    m.put(&ns("users/4/memories"), "other", json!({"n": 99})).await.expect("the store answers");
    m.put(&ns("users/420"), "other", json!({"n": 99})).await.expect("the store answers");
    let newest = m.search(SearchOp::new(ns("users/42")).limit(3)).await.expect("the store answers");
    assert_eq!(
        keys(&newest),
        ["users/42/memories:m11", "users/42/memories:m10", "users/42/memories:m09"],
        "newest first, only under the prefix"
    );
    let mut seen = Vec::new();
    for page in 0..5 {
        let items = m
            .search(SearchOp::new(ns("users/42")).limit(5).offset(page * 5))
            .await
            .expect("the store answers");
        seen.extend(keys(&items));
    }
    let expected: Vec<String> =
        (0..12).rev().map(|n| format!("users/42/memories:m{n:02}")).collect();
    assert_eq!(seen, expected, "pages have no gaps and no duplicates");
    let everything =
        m.search(SearchOp::new(Namespace::default()).limit(100)).await.expect("the store answers");
    assert_eq!(everything.len(), 14, "the empty prefix finds every item");
    let zero = m.search(SearchOp::new(ns("users")).limit(0)).await.expect("the store answers");
    assert!(zero.is_empty(), "limit 0 returns nothing");
}

async fn filters_compare_like_the_reference(c: &Clocked) {
    let m = &c.memory;
    let at = ns("f");
    let values = [
        ("a", json!({"kind": "pref", "n": 1, "who": {"name": "ann"}})),
        ("b", json!({"kind": "fact", "n": 2.5, "who": {"name": "bob"}})),
        ("c", json!({"kind": "pref", "n": "3"})),
        ("d", json!({"kind": "pref", "n": 4.0, "tags": ["x", "y"], "ok": true})),
        ("e", json!({"kind": null, "n": 5})),
        ("f", json!(["not", "an", "object"])),
    ];
    for (key, value) in &values {
        m.put(&at, key, value.clone()).await.expect("the store answers");
        c.advance(1);
    }
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (json!({}), vec!["f", "e", "d", "c", "b", "a"]),
        (json!({"kind": "pref"}), vec!["d", "c", "a"]),
        (json!({"kind": {"$eq": "pref"}}), vec!["d", "c", "a"]),
        (json!({"kind": {"$ne": "pref"}}), vec!["f", "e", "b"]),
        (json!({"kind": null}), vec!["e"]),
        (json!({"n": 4}), vec!["d"]),
        (json!({"n": 1.0}), vec!["a"]),
        (json!({"n": {"$gt": 2}}), vec!["e", "d", "b"]),
        (json!({"n": {"$gte": 2.5, "$lt": 5}}), vec!["d", "b"]),
        (json!({"n": {"$lte": 1}}), vec!["a"]),
        (json!({"n": {"$gt": "2"}}), vec!["c"]),
        (json!({"n": {"$in": [1, "3", 5]}}), vec!["e", "c", "a"]),
        (json!({"who.name": "bob"}), vec!["b"]),
        (json!({"who.name": {"$ne": "bob"}}), vec!["f", "e", "d", "c", "a"]),
        (json!({"tags": ["x", "y"]}), vec!["d"]),
        (json!({"ok": true}), vec!["d"]),
        (json!({"ok": 1}), vec![]),
        (json!({"missing": {"$gt": 0}}), vec![]),
        (json!({"kind": "pref", "n": {"$gt": 1}}), vec!["d"]),
        // Field names are data, never SQL.
        (json!({"it's": "x"}), vec![]),
        (json!({"a') OR 1=1 --": {"$ne": 1}}), vec!["f", "e", "d", "c", "b", "a"]),
        (json!({"n": {"$in": []}}), vec![]),
    ];
    for (filter, expected) in cases {
        let parsed = Filter::from_json(&filter).expect("a valid filter");
        let items = m
            .search(SearchOp::new(at.clone()).filter(parsed).limit(50))
            .await
            .expect("the store answers");
        let found: Vec<&str> = items.iter().map(|item| item.key.as_str()).collect();
        assert_eq!(found, expected, "filter {filter}");
    }
    let limited = Filter::from_json(&json!({"kind": "pref"})).expect("a valid filter");
    let page = m
        .search(SearchOp::new(at).filter(limited).limit(1).offset(1))
        .await
        .expect("the store answers");
    assert_eq!(keys(&page), ["f:c"], "limit and offset apply after the filter");
}

async fn expired_items_are_invisible_at_once_and_swept(c: &Clocked) {
    let m = &c.memory;
    let at = ns("ttl");
    m.put_for(&at, "short", json!({"v": 1}), Duration::from_millis(1_000))
        .await
        .expect("the store answers");
    m.put_for(&at, "long", json!({"v": 2}), Duration::from_millis(5_000))
        .await
        .expect("the store answers");
    m.put(&at, "forever", json!({"v": 3})).await.expect("the store answers");
    m.put_for(&ns("gone/soon"), "x", json!(1), Duration::from_millis(1_000))
        .await
        .expect("the store answers");
    c.advance(999);
    let short = m
        .get(&at, "short")
        .await
        .expect("the store answers")
        .expect("alive 1 ms before it expires");
    assert_eq!(short.expires_at_ms, Some(START_MS + 999 + 1_000), "a get refreshes the TTL");
    let unrefreshed = GetOp { refresh_ttl: false, ..GetOp::new(at.clone(), "long") };
    let long = m.get_op(unrefreshed).await.expect("the store answers").expect("alive");
    assert_eq!(long.expires_at_ms, Some(START_MS + 5_000), "refresh_ttl false keeps it");
    c.advance(1);
    assert_eq!(
        m.get(&ns("gone/soon"), "x").await.expect("the store answers"),
        None,
        "invisible at its expiry"
    );
    let names = m.list_namespaces(NamespaceQuery::new()).await.expect("the store answers");
    assert_eq!(names, std::slice::from_ref(&at), "an expired item's namespace is not listed");
    c.advance(4_000);
    let left = m.search(SearchOp::new(at.clone())).await.expect("the store answers");
    let mut left: Vec<&str> = left.iter().map(|item| item.key.as_str()).collect();
    left.sort_unstable();
    assert_eq!(left, ["forever"], "searches skip expired items");
    assert!(
        !m.delete(&at, "short").await.expect("the store answers"),
        "an expired item is not there to delete"
    );
    // Put again over an expired item (not yet swept): a new item.
    m.put_for(&at, "long", json!({"v": 4}), Duration::from_secs(60))
        .await
        .expect("the store answers");
    let again = m.get(&at, "long").await.expect("the store answers").expect("put again");
    assert_eq!(again.created_at_ms, c.now.load(Ordering::SeqCst), "created anew");
    assert_eq!(m.sweep().await.expect("the store answers"), 1, "the sweep removes what expired");
    assert_eq!(m.sweep().await.expect("the store answers"), 0);
    assert_eq!(m.get(&ns("gone/soon"), "x").await.expect("the store answers"), None);
}

async fn namespaces_are_listed_by_prefix_suffix_and_depth(c: &Clocked) {
    let m = &c.memory;
    for (text, key) in
        [("a/x/m", "1"), ("a/x/m", "2"), ("a/y/m", "1"), ("a/y/n", "1"), ("b/x/m", "1")]
    {
        m.put(&ns(text), key, json!(1)).await.expect("the store answers");
    }
    let names =
        |found: Vec<Namespace>| -> Vec<String> { found.iter().map(ToString::to_string).collect() };
    let all = m.list_namespaces(NamespaceQuery::new()).await.expect("the store answers");
    assert_eq!(names(all), ["a/x/m", "a/y/m", "a/y/n", "b/x/m"], "each once, in order");
    let a = m
        .list_namespaces(NamespaceQuery::new().prefix(["a", "y"]))
        .await
        .expect("the store answers");
    assert_eq!(names(a), ["a/y/m", "a/y/n"]);
    let m_end = m
        .list_namespaces(NamespaceQuery::new().suffix(["x", "m"]))
        .await
        .expect("the store answers");
    assert_eq!(names(m_end), ["a/x/m", "b/x/m"]);
    let wild = m
        .list_namespaces(NamespaceQuery::new().prefix(["*", "x"]))
        .await
        .expect("the store answers");
    assert_eq!(names(wild), ["a/x/m", "b/x/m"]);
    let top =
        m.list_namespaces(NamespaceQuery::new().max_depth(2)).await.expect("the store answers");
    assert_eq!(names(top), ["a/x", "a/y", "b/x"]);
    let page =
        m.list_namespaces(NamespaceQuery::new().page(2, 1)).await.expect("the store answers");
    assert_eq!(names(page), ["a/y/m", "a/y/n"]);
}

async fn a_batch_sees_its_own_writes_and_an_invalid_batch_writes_nothing(c: &Clocked) {
    let m = &c.memory;
    let at = ns("batch");
    let results = m
        .batch(vec![
            ItemOp::Put(PutOp::new(at.clone(), "a", json!(1))),
            ItemOp::Get(GetOp::new(at.clone(), "a")),
            ItemOp::Delete { namespace: at.clone(), key: "a".into() },
            ItemOp::Get(GetOp::new(at.clone(), "a")),
            ItemOp::Put(PutOp::new(at.clone(), "b", json!(2))),
            ItemOp::Search(SearchOp::new(at.clone())),
            ItemOp::ListNamespaces(NamespaceQuery::new()),
        ])
        .await
        .expect("a valid filter");
    assert_eq!(results.len(), 7, "one result per operation");
    assert!(matches!(&results[0], ItemResult::Stored));
    assert!(matches!(&results[1], ItemResult::Item(Some(item)) if item.value == json!(1)));
    assert!(matches!(&results[2], ItemResult::Deleted(true)));
    assert!(matches!(&results[3], ItemResult::Item(None)));
    assert!(matches!(&results[5], ItemResult::Items(items) if keys(items) == ["batch:b"]));
    assert!(
        matches!(&results[6], ItemResult::Namespaces(names) if names == std::slice::from_ref(&at))
    );
    let refused = m
        .batch(vec![
            ItemOp::Put(PutOp::new(at.clone(), "c", json!(3))),
            ItemOp::Put(PutOp::new(at.clone(), "", json!(4))),
        ])
        .await;
    assert!(refused.is_err(), "a batch with an invalid operation is refused");
    assert_eq!(m.get(&at, "c").await.expect("the store answers"), None, "and none of it is stored");
}

async fn vector_searches_rank_after_the_filter(c: &Clocked) {
    let m = &c.memory;
    let put = |ns_text: &str, key: &str, value: Value, vector: Option<Vec<f32>>| {
        let mut op = PutOp::new(ns(ns_text), key, value);
        op.vector = vector;
        m.put_op(op)
    };
    put("docs/a", "north", json!({"kind": "pref"}), Some(vec![0.0, 1.0, 0.0]))
        .await
        .expect("the store answers");
    put("docs/a", "east", json!({"kind": "pref"}), Some(vec![2.0, 0.0, 0.0]))
        .await
        .expect("the store answers");
    put("docs/a", "north-east", json!({"kind": "fact"}), Some(vec![1.0, 1.0, 0.0]))
        .await
        .expect("the store answers");
    put("docs/b", "north-too", json!({"kind": "pref"}), Some(vec![0.0, 3.0, 0.1]))
        .await
        .expect("the store answers");
    put("docs/a", "plain", json!({"kind": "pref"}), None).await.expect("the store answers");
    put("docs/a", "flat", json!({"kind": "pref"}), Some(vec![1.0, 0.0]))
        .await
        .expect("the store answers");
    let query = |prefix: &str, filter: Value, vector: Vec<f32>, limit: usize| {
        let mut search = SearchOp::new(ns(prefix))
            .filter(Filter::from_json(&filter).expect("a valid filter"))
            .limit(limit);
        search.vector = Some(vector);
        m.search(search)
    };
    let north =
        query("docs/a", json!({}), vec![0.0, 5.0, 0.0], 10).await.expect("the store answers");
    assert_eq!(
        north.iter().map(|item| item.key.as_str()).collect::<Vec<_>>(),
        ["north", "north-east", "east"],
        "best first; items without a vector (or of other dimensions) are not ranked"
    );
    let scores: Vec<f32> = north.iter().map(|item| item.score.expect("a score")).collect();
    assert!((scores[0] - 1.0).abs() < 1e-5, "cosine of the same direction: {scores:?}");
    assert!((scores[1] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-5, "{scores:?}");
    assert!(scores[2].abs() < 1e-5, "{scores:?}");
    // What could not match is told: items without a vector that pass the
    // filter are counted; a query of other dimensions than every vector
    // under the prefix is refused, naming both.
    let ranked = |prefix: &str, filter: Value, vector: Vec<f32>| {
        let mut search =
            SearchOp::new(ns(prefix)).filter(Filter::from_json(&filter).expect("a valid filter"));
        search.vector = Some(vector);
        m.search_ranked(search)
    };
    let told = ranked("docs/a", json!({}), vec![0.0, 5.0, 0.0]).await.expect("the store answers");
    assert_eq!((told.unindexed, told.other_dimensions), (1, None), "`plain` has no vector");
    let facts = ranked("docs/a", json!({"kind": "fact"}), vec![0.0, 5.0, 0.0]).await;
    assert_eq!(facts.expect("the store answers").unindexed, 0, "`plain` is no fact");
    match ranked("docs/b", json!({}), vec![0.0, 1.0]).await {
        Err(ItemError::StoredDimensions { query: 2, stored: 3 }) => {}
        other => panic!("a query of 2 dimensions over vectors of 3: {other:?}"),
    }
    let none = ranked("docs/z", json!({}), vec![0.0, 1.0]).await.expect("the store answers");
    assert_eq!((none.items.len(), none.unindexed, none.other_dimensions), (0, 0, None));
    let without = m.search_ranked(SearchOp::new(ns("docs/a"))).await.expect("the store answers");
    assert_eq!((without.items.len(), without.unindexed), (5, 0), "no query: nothing to count");
    let prefs = query("docs", json!({"kind": "pref"}), vec![0.0, 1.0, 0.0], 2)
        .await
        .expect("the store answers");
    assert_eq!(
        prefs.iter().map(|item| item.key.as_str()).collect::<Vec<_>>(),
        ["north", "north-too"],
        "the filter first, then the ranking, then the limit"
    );
    // Writes after a search are seen by the next one.
    put("docs/a", "east", json!({"kind": "pref"}), Some(vec![0.0, 1.0, 0.0]))
        .await
        .expect("the store answers");
    assert!(m.delete(&ns("docs/a"), "north").await.expect("the store answers"));
    let again = query("docs/a", json!({"kind": "pref"}), vec![0.0, 1.0, 0.0], 10)
        .await
        .expect("the store answers");
    assert_eq!(
        again.iter().map(|item| item.key.as_str()).collect::<Vec<_>>(),
        ["east"],
        "a replaced vector and a deleted item show at once"
    );
    // A search after a put of its own batch sees it.
    let mut fresh = PutOp::new(ns("docs/c"), "fresh", json!({"kind": "pref"}));
    fresh.vector = Some(vec![0.0, 0.0, 1.0]);
    let mut within = SearchOp::new(ns("docs/c"));
    within.vector = Some(vec![0.0, 0.0, 1.0]);
    let results =
        m.batch(vec![ItemOp::Put(fresh), ItemOp::Search(within)]).await.expect("the store answers");
    assert!(
        matches!(&results[1], ItemResult::Ranked(ranked) if keys(&ranked.items) == ["docs/c:fresh"]),
        "a batch's search ranks the batch's own puts: {results:?}"
    );
    c.advance(1);
    let mut op = PutOp::new(ns("docs/a"), "brief", json!({})).ttl(Duration::from_millis(5));
    op.vector = Some(vec![0.0, 1.0, 0.0]);
    m.put_op(op).await.expect("the store answers");
    c.advance(5);
    let expired =
        query("docs/a", json!({}), vec![0.0, 1.0, 0.0], 10).await.expect("the store answers");
    assert!(!expired.iter().any(|item| item.key == "brief"), "expired items are not ranked");
}

async fn concurrent_writers_to_one_key_leave_one_whole_value(c: &Clocked) {
    let at = ns("race");
    let mut writers = Vec::new();
    for writer in 0..8u32 {
        let memory = c.memory.clone();
        let at = at.clone();
        writers.push(tokio::spawn(async move {
            for round in 0..10u32 {
                let filler = vec![writer; 512];
                let value = json!({"writer": writer, "round": round, "filler": filler});
                memory.put(&at, "shared", value).await.expect("a put");
            }
        }));
    }
    for writer in writers {
        writer.await.expect("a writer task");
    }
    let item =
        c.memory.get(&at, "shared").await.expect("the store answers").expect("the shared item");
    let writer = item.value["writer"].as_u64().expect("a writer's value");
    assert_eq!(item.value["round"], 9, "the last put of some writer wins");
    let filler = item.value["filler"].as_array().expect("the filler");
    assert!(
        filler.len() == 512 && filler.iter().all(|n| n.as_u64() == Some(writer)),
        "the value is one writer's, whole"
    );
}
