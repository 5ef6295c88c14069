//! Conformance cases: a thread runs one leg at a time; cached node
//! outputs.

use crate::error::StoreError;
use crate::ids::RunId;
use crate::listing::{PageRequest, RunFilter};
use crate::owner::Owner;
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
    use crate::listing::ThreadRecord;
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
    let all = store.list_threads(0, 10).await.expect("list");
    assert_eq!(ids(all), ["t-3", "t-2", "t-1", "t-4"], "newest first, then by id descending");
    let page = store.list_threads(1, 2).await.expect("page");
    assert_eq!(ids(page), ["t-2", "t-1"], "offset and limit");
    assert!(store.list_threads(4, 10).await.expect("past the end").is_empty());

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
    assert_eq!(ids(store.list_threads(0, 10).await.expect("list")), ["t-3", "t-2", "t-4"]);
}
