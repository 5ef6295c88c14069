//! The store conformance suite: the contract every [`Store`] must keep.
//!
//! Call [`check_store`] from a test with a function that makes a fresh,
//! empty store; each case gets its own. A backend that implements only
//! some of the table traits is pinned by their suites alone
//! ([`check_run_store`], [`check_thread_store`], [`check_schedule_store`],
//! [`check_outbox_store`], [`check_node_cache_store`],
//! [`check_idempotency_store`]). A failure panics with the case and what
//! differed.
//!
//! ```text
//! #[tokio::test]
//! async fn my_store_conforms() {
//!     tollgate_checkpoint::conformance::check_store(|| async { MyStore::new() }).await;
//! }
//! ```

use std::future::Future;

use crate::codec::{Blob, Codec};
use crate::error::StoreError;
use crate::ids::{RunId, TaskKey};
use crate::listing::Waiting;
use crate::listing::{Cursor, PageRequest, RunFilter};
use crate::owner::Owner;
use crate::record::{EventRecord, RunFailure, StepRecord, TaskUpdate, TaskWrite, Transition};
use crate::status::RunStatus;
use crate::store::{
    IdempotencyStore, NodeCacheStore, OutboxStore, RunStore, ScheduleStore, Store, ThreadStore,
};

mod decisions;
mod deletion;
mod fixtures;
mod items;
mod keys;
mod outbox;
mod owners;
mod progress;
mod queue;
mod schedules;
mod sizes;
mod takeovers;
mod threads;

use decisions::decisions_are_compare_and_set;
use deletion::deleting_removes_every_row_of_one_run;
#[cfg(all(test, feature = "sqlite"))]
pub(crate) use fixtures::interrupt;
use fixtures::{blob, event, kind, new_run, step, update};
pub use items::check_item_store;
use keys::{
    expired_keys_are_swept_in_batches, keys_are_claimed_once_per_scope,
    keys_are_released_by_their_claimer_and_taken_over_by_name,
};
use outbox::{
    gated_entries_wait_for_their_run_out_of_sight,
    outbox_entries_are_taken_by_one_process_at_a_time,
};
use owners::threads_and_runs_are_kept_apart_by_holder;
use progress::task_progress_is_replaced_and_dropped_with_its_step;
use queue::{
    a_run_queued_with_a_wake_up_is_claimable_once_due,
    claimable_runs_are_queued_then_lost_oldest_first,
    lease_losses_count_takeovers_until_a_leg_ends, queued_runs_have_no_owner_until_claimed,
};
use schedules::schedules_fire_once_per_tick_with_their_run;
use sizes::updates_of_every_size_read_back_whole;
use takeovers::takeovers_mid_flight_keep_one_history;
use threads::{
    a_thread_runs_one_leg_at_a_time, cached_outputs_expire_and_stay_in_their_scope,
    thread_records_are_created_once_and_listed_newest_first,
    thread_searches_match_metadata_exactly, thread_statuses_follow_their_latest_run,
    thread_storage_counts_its_runs_bytes, threads_idle_past_their_ttl_expire,
};

/// Runs every case, each on a fresh store from `make`: the six suites
/// below, one per table trait.
pub async fn check_store<S, F, Fut>(make: F)
where
    S: Store,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    check_run_store(&make).await;
    check_thread_store(&make).await;
    check_schedule_store(&make).await;
    check_outbox_store(&make).await;
    check_node_cache_store(&make).await;
    check_idempotency_store(&make).await;
}

/// The [`RunStore`] cases: transitions, claims and fencing, checkpoints,
/// pending writes and progress, listings and history, events, decisions,
/// the queue, deletion, and a thread's one leg at a time.
pub async fn check_run_store<S, F, Fut>(make: F)
where
    S: RunStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    transitions_apply_in_order_or_not_at_all(&make().await).await;
    claims_are_compare_and_set_and_fence_old_owners(&make().await).await;
    takeovers_mid_flight_keep_one_history(&make().await).await;
    terminal_runs_never_change(&make().await).await;
    checkpoint_is_snapshot_plus_deltas_plus_pending(&make().await).await;
    pending_writes_keep_the_first_and_clear_on_commit(&make().await).await;
    listing_is_newest_first_without_gaps_or_duplicates(&make().await).await;
    history_is_newest_first_and_paginated(&make().await).await;
    events_are_stored_in_order(&make().await).await;
    updates_left_to_their_step_come_back_with_the_events(&make().await).await;
    corruption_is_confined_to_its_run(&make().await).await;
    orphaned_runs_are_recognised(&make().await).await;
    decisions_are_compare_and_set(&make().await).await;
    past_checkpoints_are_readable(&make().await).await;
    attachments_are_kept_verbatim(&make().await).await;
    trace_context_stays_with_the_run(&make().await).await;
    waiting_runs_are_counted_with_the_oldest_pause(&make().await).await;
    queued_runs_have_no_owner_until_claimed(&make().await).await;
    lease_losses_count_takeovers_until_a_leg_ends(&make().await).await;
    claimable_runs_are_queued_then_lost_oldest_first(&make().await).await;
    a_run_queued_with_a_wake_up_is_claimable_once_due(&make().await).await;
    deleting_removes_every_row_of_one_run(&make().await).await;
    a_thread_runs_one_leg_at_a_time(&make().await).await;
    task_progress_is_replaced_and_dropped_with_its_step(&make().await).await;
    updates_of_every_size_read_back_whole(&make().await).await;
}

/// The [`ThreadStore`] cases: thread records and their searches (a
/// thread's status follows its runs: the store keeps runs too).
pub async fn check_thread_store<S, F, Fut>(make: F)
where
    S: RunStore + ThreadStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    thread_records_are_created_once_and_listed_newest_first(&make().await).await;
    thread_statuses_follow_their_latest_run(&make().await).await;
    threads_idle_past_their_ttl_expire(&make().await).await;
    thread_storage_counts_its_runs_bytes(&make().await).await;
    thread_searches_match_metadata_exactly(&make().await).await;
    threads_and_runs_are_kept_apart_by_holder(&make().await).await;
}

/// The [`ScheduleStore`] cases (a schedule fires runs: the store keeps
/// runs too).
pub async fn check_schedule_store<S, F, Fut>(make: F)
where
    S: RunStore + ScheduleStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    schedules_fire_once_per_tick_with_their_run(&make().await).await;
}

/// The [`OutboxStore`] cases (entries are gated on runs: the store keeps
/// runs too).
pub async fn check_outbox_store<S, F, Fut>(make: F)
where
    S: RunStore + OutboxStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    outbox_entries_are_taken_by_one_process_at_a_time(&make().await).await;
    gated_entries_wait_for_their_run_out_of_sight(&make().await).await;
}

/// The [`NodeCacheStore`] cases.
pub async fn check_node_cache_store<S, F, Fut>(make: F)
where
    S: NodeCacheStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    cached_outputs_expire_and_stay_in_their_scope(&make().await).await;
}

/// The [`IdempotencyStore`] cases.
pub async fn check_idempotency_store<S, F, Fut>(make: F)
where
    S: IdempotencyStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    keys_are_claimed_once_per_scope(&make().await).await;
    keys_are_released_by_their_claimer_and_taken_over_by_name(&make().await).await;
    expired_keys_are_swept_in_batches(&make().await).await;
}

async fn attachments_are_kept_verbatim(store: &impl RunStore) {
    let (with, without) = (RunId::new(), RunId::new());
    let body = r#"{"name":"refunds","tools":["é",1]}"#;
    let mut run = new_run(with, "g", None);
    run.attachment = Some(body.to_owned());
    store.create_run(run).await.expect("create");
    store.create_run(new_run(without, "g", None)).await.expect("create");
    assert_eq!(store.attachment(with).await.expect("read").as_deref(), Some(body));
    assert_eq!(store.attachment(without).await.expect("read"), None);
    assert!(matches!(store.attachment(RunId::new()).await, Err(StoreError::RunNotFound { .. })));
}

async fn trace_context_stays_with_the_run(store: &dyn RunStore) {
    let (traced, queued, plain) = (RunId::new(), RunId::new(), RunId::new());
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut run = new_run(traced, "g", None);
    run.trace = Some(parent.to_owned());
    store.create_run(run).await.expect("create");
    let mut run = new_run(queued, "g", None);
    (run.trace, run.claim, run.events) = (Some(parent.to_owned()), None, Vec::new());
    store.create_run(run).await.expect("enqueue");
    store.create_run(new_run(plain, "g", None)).await.expect("create");
    // Kept through steps, claims and a paused checkpoint's read.
    store.commit(step(traced, 1, 1, 2, false)).await.expect("step");
    store.claim(traced, 1, Owner::current(), i64::MAX).await.expect("take over");
    store.claim(queued, 1, Owner::current(), i64::MAX).await.expect("claim");
    for run in [traced, queued] {
        assert_eq!(store.run(run).await.expect("run").trace.as_deref(), Some(parent));
        let checkpoint = store.checkpoint(run, None).await.expect("checkpoint");
        assert_eq!(checkpoint.run.trace.as_deref(), Some(parent));
    }
    assert_eq!(store.run(plain).await.expect("run").trace, None);
    let page = store.list_runs(&RunFilter::default(), &PageRequest::default()).await;
    let page = page.expect("list");
    let listed = page.runs.iter().find(|r| r.id == traced).expect("listed");
    assert_eq!(listed.trace.as_deref(), Some(parent));
}

async fn waiting_runs_are_counted_with_the_oldest_pause(store: &dyn RunStore) {
    assert_eq!(store.waiting().await.expect("waiting"), Waiting::default(), "empty store");
    let pause = |run, at_ms| Transition {
        step: None,
        status: RunStatus::AwaitingHitl,
        events: vec![event(2)],
        at_ms,
        lease_until_ms: None,
        ..step(run, 1, 1, 2, false)
    };
    let (early, late, busy) = (RunId::new(), RunId::new(), RunId::new());
    for run in [early, late, busy] {
        store.create_run(new_run(run, "g", None)).await.expect("create");
    }
    store.commit(pause(late, 9_000)).await.expect("pause late");
    store.commit(pause(early, 7_000)).await.expect("pause early");
    store.commit(step(busy, 1, 1, 2, false)).await.expect("a running run does not wait");
    let waiting = store.waiting().await.expect("waiting");
    assert_eq!(waiting, Waiting { runs: 2, oldest_since_ms: Some(7_000) });
    // The early run is cancelled (claimed and ended): the late one is left.
    let epoch = store.claim(early, 1, Owner::current(), i64::MAX).await.expect("claim");
    let ended = Transition {
        step: None,
        status: RunStatus::Interrupted,
        events: vec![event(3)],
        lease_until_ms: None,
        ..step(early, epoch, 2, 3, false)
    };
    store.commit(ended).await.expect("end");
    let waiting = store.waiting().await.expect("waiting");
    assert_eq!(waiting, Waiting { runs: 1, oldest_since_ms: Some(9_000) });
}

async fn transitions_apply_in_order_or_not_at_all(store: &dyn RunStore) {
    let run = RunId::new();
    assert_eq!(store.create_run(new_run(run, "g", None)).await.expect("create"), 1);
    let again = store.create_run(new_run(run, "g", None)).await.expect_err("duplicate id");
    assert!(matches!(again, StoreError::RunExists { .. }), "{again:?}");
    store.commit(step(run, 1, 1, 2, false)).await.expect("step 1");
    for (transition, expected) in [
        (step(run, 1, 3, 3, false), "StepOutOfOrder"),
        (step(run, 1, 1, 3, false), "StepOutOfOrder"),
        (step(run, 1, 2, 5, false), "EventGap"),
        (step(run, 7, 2, 3, false), "Fenced"),
    ] {
        let error = store.commit(transition).await.expect_err(expected);
        assert_eq!(kind(&error), expected, "{error:?}");
    }
    let record = store.run(run).await.expect("run");
    assert_eq!(
        (record.step, record.last_seq, record.epoch),
        (1, 2, 1),
        "refused commits change nothing"
    );
    assert_eq!(store.history(run, None, 10).await.expect("history").checkpoints.len(), 2);
    let missing = store.run(RunId::new()).await.expect_err("unknown run");
    assert!(matches!(missing, StoreError::RunNotFound { .. }), "{missing:?}");
}

async fn claims_are_compare_and_set_and_fence_old_owners(store: &dyn RunStore) {
    let run = RunId::new();
    store.create_run(new_run(run, "g", None)).await.expect("create");
    let first = store.claim(run, 1, Owner::current(), i64::MAX).await;
    let second = store.claim(run, 1, Owner::current(), i64::MAX).await;
    assert_eq!(first.expect("the first claim wins"), 2);
    assert!(matches!(second, Err(StoreError::Fenced { writer: 1, current: 2, .. })), "{second:?}");
    let stale = store.commit(step(run, 1, 1, 2, false)).await.expect_err("fenced commit");
    assert!(matches!(stale, StoreError::Fenced { writer: 1, current: 2, .. }), "{stale:?}");
    let stale_write = TaskWrite { run, epoch: 1, updates: vec![update(1, 0, 1)] };
    assert!(matches!(store.put_task_writes(stale_write).await, Err(StoreError::Fenced { .. })));
    assert!(matches!(store.renew(run, 1, i64::MAX).await, Err(StoreError::Fenced { .. })));
    store.renew(run, 2, 5_000).await.expect("the owner renews");
    assert_eq!(store.run(run).await.expect("run").lease_until_ms, Some(5_000));
    let failed = Transition {
        step: None,
        status: RunStatus::Failed,
        failure: Some(RunFailure {
            kind: "node_failed".into(),
            class: Some("rate_limited".into()),
            node: Some("n".into()),
            message: "boom".into(),
            tasks: vec![crate::TaskFailure::new(0, "n", "rate_limited", "boom")],
        }),
        events: vec![event(2)],
        lease_until_ms: None,
        ..step(run, 2, 1, 2, false)
    };
    store.commit(failed).await.expect("fail the run");
    let record = store.run(run).await.expect("run");
    assert_eq!(
        (record.status, record.owner.as_ref(), record.last_seq),
        (RunStatus::Failed, None, 2)
    );
    assert_eq!(store.claim(run, 2, Owner::current(), i64::MAX).await.expect("claim failed run"), 3);
    let record = store.run(run).await.expect("run");
    assert_eq!(
        (record.status, record.failure),
        (RunStatus::Running, None),
        "a claim clears the failure"
    );
    store.commit(step(run, 3, 1, 3, false)).await.expect("the new owner commits");
}

async fn terminal_runs_never_change(store: &dyn RunStore) {
    for status in [RunStatus::Completed, RunStatus::Rejected] {
        let run = RunId::new();
        store.create_run(new_run(run, "g", None)).await.expect("create");
        let mut done = step(run, 1, 1, 2, false);
        done.status = status;
        done.lease_until_ms = None;
        store.commit(done).await.expect("finish");
        let record = store.run(run).await.expect("run");
        assert_eq!((record.owner, record.lease_until_ms), (None, None), "no owner once ended");
        let claim = store.claim(run, 1, Owner::current(), i64::MAX).await;
        assert!(matches!(claim, Err(StoreError::RunTerminal { .. })), "{claim:?}");
        let commit = store.commit(step(run, 1, 2, 3, false)).await;
        assert!(matches!(commit, Err(StoreError::RunTerminal { .. })), "{commit:?}");
        assert_eq!(store.run(run).await.expect("run").status, status);
    }
}

async fn checkpoint_is_snapshot_plus_deltas_plus_pending(store: &dyn RunStore) {
    let run = RunId::new();
    store.create_run(new_run(run, "g", None)).await.expect("create");
    let fresh = store.checkpoint(run, None).await.expect("checkpoint");
    assert_eq!((fresh.snapshot_step, fresh.deltas.len()), (0, 0));
    for (number, snapshot) in [(1, false), (2, true), (3, false), (4, false)] {
        store.commit(step(run, 1, number, number + 1, snapshot)).await.expect("step");
    }
    let checkpoint = store.checkpoint(run, None).await.expect("checkpoint");
    assert_eq!(checkpoint.snapshot_step, 2);
    assert_eq!(checkpoint.snapshot.decode::<u32>().expect("snapshot"), 102);
    let deltas: Vec<(u64, u32)> = checkpoint
        .deltas
        .iter()
        .map(|(step, updates)| (*step, updates[0].update.decode().expect("delta")))
        .collect();
    assert_eq!(deltas, [(3, 3), (4, 4)]);
    assert_eq!(checkpoint.frontier.decode::<u32>().expect("frontier"), 4);
    assert_eq!(checkpoint.run.step, 4);
}

async fn pending_writes_keep_the_first_and_clear_on_commit(store: &dyn RunStore) {
    let run = RunId::new();
    store.create_run(new_run(run, "g", None)).await.expect("create");
    store
        .put_task_writes(TaskWrite { run, epoch: 1, updates: vec![update(1, 1, 51)] })
        .await
        .expect("pending write");
    store
        .put_task_writes(TaskWrite {
            run,
            epoch: 1,
            updates: vec![update(1, 0, 50), update(1, 1, 99)],
        })
        .await
        .expect("pending writes");
    let mixed = TaskWrite { run, epoch: 1, updates: vec![update(1, 2, 7), update(3, 0, 1)] };
    let wrong_step = store.put_task_writes(mixed).await;
    assert!(matches!(wrong_step, Err(StoreError::StepOutOfOrder { .. })), "{wrong_step:?}");
    let pending: Vec<(u32, u32)> = store
        .checkpoint(run, None)
        .await
        .expect("checkpoint")
        .pending
        .iter()
        .map(|p| (p.task.index, p.update.decode().expect("pending")))
        .collect();
    assert_eq!(pending, [(0, 50), (1, 51)], "ordered by task; the first write of a task wins");
    store.commit(step(run, 1, 1, 2, false)).await.expect("commit");
    assert!(store.checkpoint(run, None).await.expect("checkpoint").pending.is_empty());
}

async fn listing_is_newest_first_without_gaps_or_duplicates(store: &dyn RunStore) {
    let ids: Vec<RunId> = (0..7).map(|i| RunId::from_parts(1_000 + i, 7)).collect();
    for (i, id) in ids.iter().enumerate() {
        let graph = if i % 2 == 0 { "even" } else { "odd" };
        store.create_run(new_run(*id, graph, (i < 3).then_some("t"))).await.expect("create");
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let request = PageRequest { limit: 3, cursor: cursor.clone() };
        let page = store.list_runs(&RunFilter::default(), &request).await.expect("page");
        seen.extend(page.runs.iter().map(|r| r.id));
        // A run created while paging is newer than every cursor: it never
        // shows up as a duplicate, and nothing is skipped.
        store.create_run(new_run(RunId::new(), "late", None)).await.expect("create");
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let newest_first: Vec<RunId> = ids.iter().rev().copied().collect();
    assert_eq!(seen, newest_first);

    let count = |filter: RunFilter| async move {
        let request = PageRequest { limit: 100, cursor: None };
        store.list_runs(&filter, &request).await.expect("filtered page").runs.len()
    };
    assert_eq!(count(RunFilter { graph: Some("even".into()), ..RunFilter::default() }).await, 4);
    assert_eq!(count(RunFilter { thread: Some("t".into()), ..RunFilter::default() }).await, 3);
    let done = RunFilter { status: Some(RunStatus::Completed), ..RunFilter::default() };
    assert_eq!(count(done).await, 0);
    let running = RunFilter {
        status: Some(RunStatus::Running),
        graph: Some("odd".into()),
        ..RunFilter::default()
    };
    assert_eq!(count(running).await, 3);
    let bad = PageRequest { limit: 3, cursor: Some(Cursor::from_text("nope")) };
    let error = store.list_runs(&RunFilter::default(), &bad).await.expect_err("bad cursor");
    assert!(matches!(error, StoreError::InvalidCursor { .. }), "{error:?}");
}

async fn history_is_newest_first_and_paginated(store: &dyn RunStore) {
    let run = RunId::new();
    store.create_run(new_run(run, "g", None)).await.expect("create");
    for number in 1..=4 {
        store.commit(step(run, 1, number, number + 1, number == 2)).await.expect("step");
    }
    let first = store.history(run, None, 3).await.expect("history");
    let steps: Vec<(u64, u32, bool)> =
        first.checkpoints.iter().map(|c| (c.step, c.tasks, c.snapshot)).collect();
    assert_eq!(steps, [(4, 1, false), (3, 1, false), (2, 1, true)]);
    assert_eq!(first.checkpoints[0].at_ms, 1_004);
    assert_eq!(first.next_before, Some(2));
    let rest = store.history(run, first.next_before, 3).await.expect("history");
    let steps: Vec<(u64, bool)> = rest.checkpoints.iter().map(|c| (c.step, c.snapshot)).collect();
    assert_eq!(steps, [(1, false), (0, true)]);
    assert_eq!(rest.next_before, None);
}

async fn events_are_stored_in_order(store: &dyn RunStore) {
    let run = RunId::new();
    store.create_run(new_run(run, "g", None)).await.expect("create");
    for number in 1..=3 {
        store.commit(step(run, 1, number, number + 1, false)).await.expect("step");
    }
    let all: Vec<u64> =
        store.events(run, 0, u64::MAX).await.expect("events").iter().map(|e| e.seq).collect();
    assert_eq!(all, [1, 2, 3, 4]);
    let page: Vec<EventRecord> = store.events(run, 1, 2).await.expect("events");
    assert_eq!(page, [event(2), event(3)]);
}

/// A `node_completed` line may leave a large update to its step's record
/// (`EventRecord::leave_out_update`): the store hands it back whole.
async fn updates_left_to_their_step_come_back_with_the_events(store: &dyn RunStore) {
    let run = RunId::new();
    store.create_run(new_run(run, "g", None)).await.expect("create");
    let text = format!("{{\"lines\":[\"{}\"]}}", "é\\\"x".repeat(300));
    let update: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let record = serde_json::json!({"update": update, "goto": []});
    let stored = Codec::Json.encode(&record, 1).expect("encodes");
    let line = |seq: u64, task: u32, update: &str| {
        format!(
            "{{\"v\":1,\"run_id\":\"{run}\",\"seq\":{seq},\"node\":\"update\",\
             \"event_type\":\"node_completed\",\"step\":1,\"task\":{task},\
             \"update\":{update},\"reused\":false}}"
        )
    };
    let whole = [line(2, 1, &text), line(3, 0, "{\"small\":1}")];
    let mut events: Vec<EventRecord> = whole
        .iter()
        .enumerate()
        .map(|(i, json)| EventRecord { seq: 2 + i as u64, json: json.clone() })
        .collect();
    assert!(events[0].leave_out_update(&text), "the line holds the update");
    assert!(!events[0].json.contains("lines"), "left out: {}", events[0].json);
    assert_eq!(events[0].update_left_out(), Some(1));
    assert!(!events[1].leave_out_update("{\"other\":2}"), "not the line's update");
    let updates = vec![
        TaskUpdate { task: TaskKey { step: 1, index: 0, node: "a".into() }, update: blob(5) },
        TaskUpdate { task: TaskKey { step: 1, index: 1, node: "update".into() }, update: stored },
    ];
    let transition = Transition {
        step: Some(StepRecord { step: 1, updates, snapshot: None, frontier: blob(1) }),
        events,
        ..step(run, 1, 1, 2, false)
    };
    store.commit(transition).await.expect("step 1");
    let read = store.events(run, 1, 10).await.expect("events");
    let lines: Vec<&str> = read.iter().map(|e| e.json.as_str()).collect();
    assert_eq!(lines, [whole[0].as_str(), whole[1].as_str()], "byte for byte");
    let later = store.events(run, 2, 10).await.expect("events after the line");
    assert_eq!(later.len(), 1);
}

async fn corruption_is_confined_to_its_run(store: &dyn RunStore) {
    let (damaged, healthy) = (RunId::new(), RunId::new());
    let mut bytes = blob(7).to_bytes();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x04;
    let mut bad = new_run(damaged, "g", None);
    bad.snapshot = Blob::from_bytes(&bytes).expect("header intact");
    store.create_run(bad).await.expect("create");
    store.create_run(new_run(healthy, "g", None)).await.expect("create");
    let read = store.checkpoint(damaged, None).await;
    let detected = match read {
        Err(StoreError::CorruptCheckpoint { run, step: 0, .. }) => run == damaged,
        Ok(checkpoint) => checkpoint.snapshot.decode::<u32>().is_err(),
        Err(other) => panic!("unexpected error {other:?}"),
    };
    assert!(detected, "a damaged blob must not decode");
    let fine = store.checkpoint(healthy, None).await.expect("the other run is untouched");
    assert_eq!(fine.snapshot.decode::<u32>().expect("decodes"), 0);
}

async fn orphaned_runs_are_recognised(store: &dyn RunStore) {
    let (expired, alive) = (RunId::new(), RunId::new());
    let mut stale = new_run(expired, "g", None);
    stale.claim = Some((Owner::current(), 10));
    store.create_run(stale).await.expect("create");
    store.create_run(new_run(alive, "g", None)).await.expect("create");
    let now = 1_000;
    assert!(store.run(expired).await.expect("run").is_orphaned(now));
    assert!(!store.run(alive).await.expect("run").is_orphaned(now));
    let record = store.run(expired).await.expect("run");
    assert_eq!(record.owner, Some(Owner::current()));
    let epoch =
        store.claim(expired, record.epoch, Owner::current(), i64::MAX).await.expect("claim");
    assert!(!store.run(expired).await.expect("run").is_orphaned(now), "claimed again");
    assert_eq!(epoch, 2);
}

async fn past_checkpoints_are_readable(store: &dyn RunStore) {
    let run = RunId::new();
    store.create_run(new_run(run, "g", None)).await.expect("create");
    for (number, snapshot) in [(1, false), (2, true), (3, false)] {
        store.commit(step(run, 1, number, number + 1, snapshot)).await.expect("step");
    }
    let cases = [(0, 0, vec![]), (1, 0, vec![1]), (2, 2, vec![]), (3, 2, vec![3])];
    for (at, snapshot_step, deltas) in cases {
        let checkpoint = store.checkpoint(run, Some(at)).await.expect("past checkpoint");
        assert_eq!(checkpoint.snapshot_step, snapshot_step, "at {at}");
        let steps: Vec<u64> = checkpoint.deltas.iter().map(|(step, _)| *step).collect();
        assert_eq!(steps, deltas, "at {at}");
        assert_eq!(checkpoint.frontier.decode::<u32>().expect("frontier"), at as u32);
        assert_eq!(checkpoint.run.step, at);
    }
    let missing = store.checkpoint(run, Some(4)).await.expect_err("beyond the last step");
    assert!(matches!(missing, StoreError::CheckpointNotFound { step: 4, .. }), "{missing:?}");
}
