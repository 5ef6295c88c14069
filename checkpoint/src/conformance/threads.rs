//! Conformance cases: a thread runs one leg at a time; cached node
//! outputs.

use crate::error::StoreError;
use crate::ids::RunId;
use crate::listing::{PageRequest, RunFilter, ThreadQuery, ThreadRecord, ThreadStatus};
use crate::owner::Owner;
use crate::record::RunFailure;
use crate::record::{NewRun, ThreadTurn, Transition};
use crate::status::RunStatus;
use crate::store::{NodeCacheStore, RunStore, ThreadStore};

use super::fixtures::{blob, event, interrupt, new_run, step};

pub(super) async fn cached_outputs_expire_and_stay_in_their_scope(store: &dyn NodeCacheStore) {
    let get = |scope: &'static str, key: &'static str, now: i64| async move {
        store.cache_get(scope, key, now).await.expect("cache_get").map(|blob| blob.to_bytes())
    };
    assert_eq!(get("g@1:n", "k", 0).await, None);
    store.cache_put("g@1:n", "k", blob(1), 100, 0).await.expect("put");
    assert_eq!(get("g@1:n", "k", 99).await, Some(blob(1).to_bytes()));
    assert_eq!(get("g@1:n", "k", 100).await, None, "expired at its time");
    assert_eq!(get("g@2:n", "k", 0).await, None, "another scope");
    assert_eq!(get("g@1:n", "other", 0).await, None, "another key");
    // Replaced by a later put.
    store.cache_put("g@1:n", "k", blob(2), 500, 50).await.expect("replace");
    assert_eq!(get("g@1:n", "k", 200).await, Some(blob(2).to_bytes()));
    // A put removes the scope's expired entries, not another scope's.
    store.cache_put("g@1:n", "old", blob(3), 10, 0).await.expect("put");
    store.cache_put("g@2:n", "old", blob(4), 10, 0).await.expect("put");
    store.cache_put("g@1:n", "new", blob(5), 1_000, 20).await.expect("put");
    assert_eq!(get("g@1:n", "old", 5).await, None, "purged");
    assert_eq!(get("g@2:n", "old", 5).await, Some(blob(4).to_bytes()));
}

pub(super) async fn a_thread_runs_one_leg_at_a_time(store: &dyn RunStore) {
    let turn = |run: RunId, after: Option<RunId>| NewRun {
        thread_turn: Some(ThreadTurn { after }),
        trace: None,
        ..new_run(run, "g", Some("t"))
    };
    let (first, second, third) = (RunId::new(), RunId::new(), RunId::new());
    // A label-only run on another thread is no part of this one.
    store.create_run(new_run(RunId::new(), "g", Some("other"))).await.expect("other thread");
    // A new thread: built on nothing.
    let moved = store.create_run(turn(first, Some(RunId::new()))).await;
    assert!(matches!(moved, Err(StoreError::ThreadMoved { found: None, .. })), "{moved:?}");
    store.create_run(turn(first, None)).await.expect("the thread's first run");
    // While it runs, the thread is busy; built on nothing, it moved.
    let busy = store.create_run(turn(second, Some(first))).await;
    assert!(
        matches!(&busy, Err(StoreError::ThreadBusy { run, status: RunStatus::Running, .. }) if *run == first),
        "{busy:?}"
    );
    let moved = store.create_run(turn(second, None)).await;
    assert!(
        matches!(moved, Err(StoreError::ThreadMoved { found: Some(found), .. }) if found == first),
        "{moved:?}"
    );
    assert!(
        matches!(store.run(second).await, Err(StoreError::RunNotFound { .. })),
        "nothing written"
    );
    // Paused: still busy.
    let pause = Transition {
        step: None,
        status: RunStatus::AwaitingHitl,
        events: vec![event(2)],
        lease_until_ms: None,
        interrupts: vec![interrupt(first, 1, 0)],
        ..step(first, 1, 1, 2, false)
    };
    store.commit(pause).await.expect("pause");
    let busy = store.create_run(turn(second, Some(first))).await;
    assert!(
        matches!(busy, Err(StoreError::ThreadBusy { status: RunStatus::AwaitingHitl, .. })),
        "{busy:?}"
    );
    // Ended: the next run builds on it; the one after on that.
    store.claim(first, 1, Owner::current(), i64::MAX).await.expect("claim");
    let mut done = step(first, 2, 1, 3, false);
    done.status = RunStatus::Completed;
    done.lease_until_ms = None;
    store.commit(done).await.expect("complete");
    store.create_run(turn(second, Some(first))).await.expect("the thread's second run");
    let stale = store.create_run(turn(third, Some(first))).await;
    assert!(
        matches!(stale, Err(StoreError::ThreadMoved { found: Some(found), .. }) if found == second),
        "{stale:?}"
    );
    let listed = store
        .list_runs(
            &RunFilter { thread: Some("t".into()), ..RunFilter::default() },
            &PageRequest::default(),
        )
        .await
        .expect("list");
    let ids: Vec<RunId> = listed.runs.iter().map(|r| r.id).collect();
    assert_eq!(ids, [second, first], "the thread's runs, newest first");
}

/// Thread records: created once (a second create returns the first),
/// read, their metadata replaced, listed newest first with offsets,
/// deleted; a missing one is `None`, `ThreadNotFound` or `false`.
pub(super) async fn thread_records_are_created_once_and_listed_newest_first(
    store: &dyn ThreadStore,
) {
    use serde_json::json;
    assert_eq!(store.thread_record("t-1").await.expect("read"), None, "none yet");
    let first = ThreadRecord::new("t-1", 100, json!({"user": "ann"}));
    let (stored, created) = store.create_thread(first.clone()).await.expect("create");
    assert_eq!((stored, created), (first.clone(), true), "created");
    let again = ThreadRecord::new("t-1", 200, json!({"user": "bob"}));
    let (stored, created) = store.create_thread(again).await.expect("create again");
    assert_eq!((stored, created), (first.clone(), false), "the first record stands");
    assert_eq!(store.thread_record("t-1").await.expect("read"), Some(first));
    for (id, at) in [("t-2", 300), ("t-3", 300), ("t-4", 50)] {
        store.create_thread(ThreadRecord::new(id, at, json!({}))).await.expect("create");
    }
    let ids = |page: Vec<ThreadRecord>| page.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let all = store.search_threads(&ThreadQuery::page(0, 10)).await.expect("list");
    assert_eq!(ids(all), ["t-3", "t-2", "t-1", "t-4"], "newest first, then by id descending");
    let page = store.search_threads(&ThreadQuery::page(1, 2)).await.expect("page");
    assert_eq!(ids(page), ["t-2", "t-1"], "offset and limit");
    let past = store.search_threads(&ThreadQuery::page(4, 10)).await.expect("past the end");
    assert!(past.is_empty());

    let updated = store.update_thread("t-1", json!({"user": "cy", "n": 2}), 400).await;
    let updated = updated.expect("update");
    assert_eq!((updated.created_at_ms, updated.updated_at_ms), (100, 400), "times");
    assert_eq!(updated.metadata, json!({"user": "cy", "n": 2}), "metadata replaced");
    assert_eq!(store.thread_record("t-1").await.expect("read"), Some(updated));
    let missing = store.update_thread("nope", json!({}), 1).await;
    assert!(
        matches!(&missing, Err(StoreError::ThreadNotFound { thread }) if thread == "nope"),
        "{missing:?}"
    );
    assert!(store.delete_thread("t-1").await.expect("delete"), "deleted");
    assert!(!store.delete_thread("t-1").await.expect("delete again"), "already gone");
    assert_eq!(store.thread_record("t-1").await.expect("read"), None);
    let all = store.search_threads(&ThreadQuery::page(0, 10)).await.expect("list");
    assert_eq!(ids(all), ["t-3", "t-2", "t-4"]);
}

/// Moves a `running` run at epoch 1 to `status` (nothing for `running`).
pub(super) async fn settle(store: &dyn RunStore, run: RunId, status: RunStatus, at_ms: i64) {
    if status == RunStatus::Running {
        return;
    }
    let transition = Transition {
        step: None,
        status,
        failure: (status == RunStatus::Failed).then(|| RunFailure::new("node_failed", None, "x")),
        events: vec![event(2)],
        at_ms,
        lease_until_ms: None,
        interrupts: match status {
            RunStatus::AwaitingHitl => vec![interrupt(run, 1, 0)],
            _ => Vec::new(),
        },
        ..step(run, 1, 1, 2, false)
    };
    store.commit(transition).await.expect("settle");
}

/// The ids a search finds, in order.
pub(super) async fn found(store: &dyn ThreadStore, query: ThreadQuery) -> Vec<String> {
    let page = store.search_threads(&query).await.expect("search");
    page.into_iter().map(|thread| thread.id).collect()
}

/// A thread's status follows its latest run as [`ThreadStatus::of`]
/// says, through every run status, a record made after its runs, a newer
/// run and the latest run's deletion; the threads counted busy apart are
/// busy and nothing else.
pub(super) async fn thread_statuses_follow_their_latest_run<S: RunStore + ThreadStore>(store: &S) {
    use serde_json::json;
    let mut expected: Vec<(String, ThreadStatus)> = Vec::new();
    for (index, status) in RunStatus::ALL.into_iter().enumerate() {
        let thread = format!("s-{index}");
        let record = ThreadRecord::new(thread.clone(), 10 + index as i64, json!({}));
        store.create_thread(record).await.expect("create");
        let run = RunId::new();
        store.create_run(new_run(run, "g", Some(&thread))).await.expect("run");
        settle(store, run, status, 2_000).await;
        expected.push((thread, ThreadStatus::of(Some(status))));
    }
    // Runs first, then the record: it starts from its latest run.
    let paused = RunId::new();
    store.create_run(new_run(paused, "g", Some("late"))).await.expect("run");
    settle(store, paused, RunStatus::AwaitingHitl, 2_000).await;
    store.create_thread(ThreadRecord::new("late", 100, json!({}))).await.expect("create");
    expected.push(("late".into(), ThreadStatus::Interrupted));
    store.create_thread(ThreadRecord::new("none", 5, json!({}))).await.expect("create");
    expected.push(("none".into(), ThreadStatus::Idle));
    for status in ThreadStatus::ALL {
        let mut wanted: Vec<(i64, String)> = Vec::new();
        for (thread, shown) in &expected {
            if *shown == status {
                let record = store.thread_record(thread).await.expect("read").expect("record");
                wanted.push((record.created_at_ms, thread.clone()));
            }
        }
        wanted.sort_by(|a, b| b.cmp(a));
        let wanted: Vec<String> = wanted.into_iter().map(|(_, thread)| thread).collect();
        let query = ThreadQuery::page(0, 100).status(Some(status), Vec::new());
        assert_eq!(found(store, query).await, wanted, "threads {status}");
    }
    // A newer run decides; deleting it gives the thread back to the older.
    let newer = RunId::new();
    store.create_run(new_run(newer, "g", Some("late"))).await.expect("newer run");
    let busy = ThreadQuery::page(0, 100).status(Some(ThreadStatus::Busy), Vec::new());
    assert!(found(store, busy.clone()).await.contains(&"late".to_owned()), "its newer run runs");
    settle(store, newer, RunStatus::Interrupted, 3_000).await;
    store.delete_run(newer).await.expect("delete the newer run");
    let interrupted = ThreadQuery::page(0, 100).status(Some(ThreadStatus::Interrupted), Vec::new());
    assert_eq!(found(store, interrupted).await, ["late", "s-2"], "back to the paused run");
    store.delete_run(paused).await.expect("delete the last run");
    let idle = |busy: Vec<String>| ThreadQuery::page(0, 100).status(Some(ThreadStatus::Idle), busy);
    assert!(found(store, idle(Vec::new())).await.contains(&"late".to_owned()), "no run left");
    // Threads counted busy apart (runs waiting to start elsewhere).
    let apart = vec!["none".to_owned()];
    let busy = ThreadQuery::page(0, 100).status(Some(ThreadStatus::Busy), apart.clone());
    assert_eq!(found(store, busy).await, ["s-1", "s-0", "none"], "busy, newest first");
    assert!(!found(store, idle(apart)).await.contains(&"none".to_owned()), "not idle");
}

/// Searches by metadata compare JSON values exactly (a number with
/// another type, a missing key, an object by its whole value), follow a
/// record's new metadata, combine with the status, the ids asked for and
/// pages, and forget deleted threads.
pub(super) async fn thread_searches_match_metadata_exactly<S: RunStore + ThreadStore>(store: &S) {
    use serde_json::json;
    let records = [
        ("a", 10, json!({"user": "ann", "n": 1, "tags": ["x"]})),
        ("b", 20, json!({"user": "bob", "flag": true, "n": 1.0})),
        ("c", 30, json!({"user": "ann", "nested": {"k": 1}, "none": null})),
        ("d", 40, json!({"user": "ann", "flag": 1, "n": "1"})),
        ("e", 50, json!({"user": "ann's \"friend\"", "n": 1})),
    ];
    for (id, at, metadata) in records {
        store.create_thread(ThreadRecord::new(id, at, metadata)).await.expect("create");
    }
    let by = |metadata: serde_json::Value| {
        let metadata = metadata.as_object().cloned().expect("an object");
        ThreadQuery::page(0, 100).metadata(metadata)
    };
    assert_eq!(found(store, by(json!({"user": "ann"}))).await, ["d", "c", "a"]);
    assert_eq!(found(store, by(json!({"user": "ann's \"friend\""}))).await, ["e"]);
    assert_eq!(found(store, by(json!({"n": 1}))).await, ["e", "a"], "1, not 1.0 or \"1\"");
    assert_eq!(found(store, by(json!({"n": 1.0}))).await, ["b"]);
    assert_eq!(found(store, by(json!({"flag": true}))).await, ["b"], "true, not 1");
    assert_eq!(found(store, by(json!({"flag": 1}))).await, ["d"]);
    assert_eq!(found(store, by(json!({"none": null}))).await, ["c"], "null, not missing");
    assert_eq!(found(store, by(json!({"nested": {"k": 1}}))).await, ["c"]);
    assert!(found(store, by(json!({"nested": {"k": 2}}))).await.is_empty());
    assert_eq!(found(store, by(json!({"tags": ["x"]}))).await, ["a"]);
    assert_eq!(found(store, by(json!({"user": "ann", "n": 1}))).await, ["a"], "every key");
    assert!(found(store, by(json!({"user": "zed"}))).await.is_empty());
    // Pages count matching threads only.
    let mut page = by(json!({"user": "ann"}));
    (page.offset, page.limit) = (1, 1);
    assert_eq!(found(store, page).await, ["c"], "offset and limit among the matches");
    let ids = Some(vec!["a".to_owned(), "b".to_owned(), "zz".to_owned()]);
    assert_eq!(found(store, by(json!({"user": "ann"})).ids(ids.clone())).await, ["a"]);
    assert_eq!(found(store, ThreadQuery::page(0, 10).ids(ids)).await, ["b", "a"]);
    // With a status: only d has a run, paused.
    let run = RunId::new();
    store.create_run(new_run(run, "g", Some("d"))).await.expect("run");
    settle(store, run, RunStatus::AwaitingHitl, 2_000).await;
    let paused = |query: ThreadQuery| query.status(Some(ThreadStatus::Interrupted), Vec::new());
    assert_eq!(found(store, paused(by(json!({"user": "ann"})))).await, ["d"]);
    assert!(found(store, paused(by(json!({"user": "bob"})))).await.is_empty());
    // New metadata replaces the old in searches.
    store.update_thread("a", json!({"user": "bob"}), 60).await.expect("update");
    assert_eq!(found(store, by(json!({"user": "ann"}))).await, ["d", "c"]);
    assert_eq!(found(store, by(json!({"user": "bob"}))).await, ["b", "a"], "by creation");
    assert!(found(store, by(json!({"tags": ["x"]}))).await.is_empty());
    store.delete_thread("b").await.expect("delete");
    assert_eq!(found(store, by(json!({"user": "bob"}))).await, ["a"]);
}

/// Threads with a time to live expire once idle that long: from the
/// record's last change without runs, from the latest run's last change
/// with them; never while a run is in flight or waits for a decision;
/// never without a time to live.
pub(super) async fn threads_idle_past_their_ttl_expire<S: RunStore + ThreadStore>(store: &S) {
    use serde_json::json;
    let record = |id: &str, ttl: Option<i64>| ThreadRecord::new(id, 1_000, json!({})).with_ttl(ttl);
    for (id, ttl) in [("quiet", Some(500)), ("kept", None)] {
        store.create_thread(record(id, ttl)).await.expect("create");
    }
    let created = store.thread_record("quiet").await.expect("read").expect("record");
    assert_eq!(created.ttl_ms, Some(500), "the time to live reads back");
    let expired = |now: i64| async move {
        let mut found = store.expired_threads(now, 100).await.expect("expired");
        found.sort();
        found
    };
    assert_eq!(expired(1_499).await, Vec::<String>::new());
    assert_eq!(expired(1_500).await, ["quiet"]);
    // A change of its metadata is a change.
    store.update_thread("quiet", json!({"n": 1}), 2_000).await.expect("update");
    assert_eq!(expired(2_499).await, Vec::<String>::new());
    let mut last = 0;
    for (id, status) in [
        ("done", RunStatus::Completed),
        ("failed", RunStatus::Failed),
        ("paused", RunStatus::AwaitingHitl),
        ("running", RunStatus::Running),
    ] {
        store.create_thread(record(id, Some(500))).await.expect("create");
        let run = RunId::new();
        store.create_run(new_run(run, "g", Some(id))).await.expect("run");
        last = run.timestamp_ms() as i64 + 10_000;
        settle(store, run, status, last).await;
    }
    // Settled runs count from their last change (settle's time; the
    // running run's is its creation).
    let early = expired(last - 10_000).await;
    assert!(!early.contains(&"done".to_owned()), "not before its run's last change: {early:?}");
    assert_eq!(expired(last + 500).await, ["done", "failed", "quiet"]);
    assert_eq!(expired(i64::MAX / 2).await, ["done", "failed", "quiet"], "paused and running kept");
    assert_eq!(store.expired_threads(i64::MAX / 2, 2).await.expect("limit").len(), 2);
}

/// What a thread's runs occupy: nothing without runs; each run counted;
/// an update of 20,000 incompressible bytes adds at least that many to
/// the checkpoints, events add to the events; another thread's runs and
/// runs without a thread are not counted; deleted runs leave nothing.
pub(super) async fn thread_storage_counts_its_runs_bytes<S: RunStore + ThreadStore>(store: &S) {
    use crate::codec::Codec;
    use crate::listing::ThreadStorage;
    let empty = store.thread_storage("measured").await.expect("storage");
    assert_eq!(empty, ThreadStorage::default(), "no runs, no bytes");
    let (first, second, elsewhere) = (RunId::new(), RunId::new(), RunId::new());
    store.create_run(new_run(first, "g", Some("measured"))).await.expect("run");
    store.create_run(new_run(elsewhere, "g", Some("other"))).await.expect("run");
    store.create_run(new_run(RunId::new(), "g", None)).await.expect("run");
    let one = store.thread_storage("measured").await.expect("storage");
    assert_eq!(one.runs, 1);
    assert!(one.checkpoint_bytes > 0 && one.event_bytes > 0, "{one:?}");
    // 20,000 bytes that do not compress (a xorshift sequence).
    let mut state = 0x2545_f491_u32;
    let noise: Vec<u32> = (0..5_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        })
        .collect();
    let big = Codec::Bincode.encode(&noise, 1).expect("encodes");
    let mut transition = step(first, 1, 1, 2, false);
    if let Some(record) = transition.step.as_mut() {
        record.updates[0].update = big;
    }
    store.commit(transition).await.expect("step");
    let grown = store.thread_storage("measured").await.expect("storage");
    assert!(grown.checkpoint_bytes >= one.checkpoint_bytes + 20_000, "{one:?} -> {grown:?}");
    assert!(grown.event_bytes > one.event_bytes, "the step's event: {one:?} -> {grown:?}");
    store.create_run(new_run(second, "g", Some("measured"))).await.expect("run");
    let two = store.thread_storage("measured").await.expect("storage");
    assert_eq!(two.runs, 2);
    assert!(two.checkpoint_bytes > grown.checkpoint_bytes, "{grown:?} -> {two:?}");
    let other = store.thread_storage("other").await.expect("storage");
    assert_eq!(other.runs, 1);
    assert!(other.checkpoint_bytes < 20_000, "another thread's runs apart: {other:?}");
    for (run, seq) in [(first, 3), (second, 2)] {
        store.commit(completed(run, seq)).await.expect("settle");
        store.delete_run(run).await.expect("delete");
    }
    let gone = store.thread_storage("measured").await.expect("storage");
    assert_eq!(gone, ThreadStorage::default(), "deleted runs leave nothing");
}

/// A transition that completes `run` at epoch 1 with event `seq`.
fn completed(run: RunId, seq: u64) -> Transition {
    Transition {
        step: None,
        status: RunStatus::Completed,
        lease_until_ms: None,
        ..step(run, 1, 1, seq, false)
    }
}
