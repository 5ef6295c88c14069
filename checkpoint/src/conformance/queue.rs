//! Conformance cases: the queue: queued runs and their owners, what is
//! claimable (queued and due, or orphaned), wake-ups of sleeping runs,
//! and the count of lost leases.

use crate::error::StoreError;
use crate::ids::RunId;
use crate::listing::{PageRequest, RunFilter};
use crate::owner::Owner;
use crate::record::{NewRun, Transition};
use crate::status::RunStatus;
use crate::store::RunStore;

use super::fixtures::{event, new_run, step};

pub(super) async fn claimable_runs_are_queued_then_lost_oldest_first(store: &dyn RunStore) {
    let ids: Vec<RunId> = (0..5).map(|i| RunId::from_parts(2_000 + i, 9)).collect();
    let queued = |id| NewRun { claim: None, ..new_run(id, "g", None) };
    let leased =
        |id, until| NewRun { claim: Some((Owner::current(), until)), ..new_run(id, "g", None) };
    store.create_run(leased(ids[0], 100)).await.expect("create"); // lease lost at 100
    store.create_run(queued(ids[1])).await.expect("create");
    store.create_run(leased(ids[2], 10_000)).await.expect("create"); // alive
    store.create_run(queued(ids[3])).await.expect("create");
    store.create_run(leased(ids[4], 50)).await.expect("create"); // lost
    let at = |now, limit| async move {
        let runs = store.claimable(now, limit).await.expect("claimable");
        runs.iter().map(|r| r.id).collect::<Vec<_>>()
    };
    assert_eq!(at(1_000, 10).await, [ids[1], ids[3], ids[0], ids[4]]);
    assert_eq!(at(1_000, 3).await, [ids[1], ids[3], ids[0]], "at most `limit`");
    assert_eq!(at(75, 10).await, [ids[1], ids[3], ids[4]], "lost only once its lease ended");
    // A finished run is never claimable.
    let mut done = step(ids[1], 1, 1, 1, false);
    done.events.clear();
    store.claim(ids[1], 1, Owner::current(), 100).await.expect("claim");
    done.epoch = 2;
    done.status = RunStatus::Completed;
    done.lease_until_ms = None;
    store.commit(done).await.expect("complete");
    assert_eq!(at(1_000, 10).await, [ids[3], ids[0], ids[4]]);
}

/// A leg that ends `queued` with a wake-up (a sleeping workflow): no owner,
/// shown with its wake-up, not claimable before it, claimable after; a
/// leg that ends `queued` without one is due at once.
pub(super) async fn a_run_queued_with_a_wake_up_is_claimable_once_due(store: &dyn RunStore) {
    let run = RunId::from_parts(3_000, 7);
    store.create_run(new_run(run, "g", None)).await.expect("create");
    let parked = Transition {
        step: None,
        status: RunStatus::Queued,
        events: vec![event(2)],
        lease_until_ms: Some(5_000),
        ..step(run, 1, 1, 2, false)
    };
    store.commit(parked).await.expect("park");
    let record = store.run(run).await.expect("run");
    assert_eq!((record.status, record.owner.as_ref()), (RunStatus::Queued, None));
    assert_eq!(record.wakes_at_ms(), Some(5_000));
    assert!(!record.is_claimable(4_999) && record.is_claimable(5_000));
    let at = |now| async move {
        let runs = store.claimable(now, 10).await.expect("claimable");
        runs.iter().map(|r| r.id).collect::<Vec<_>>()
    };
    assert_eq!(at(4_999).await, [], "not before its wake-up");
    assert_eq!(at(5_000).await, [run]);
    // Claimed and released without a wake-up: due at once.
    let epoch = store.claim(run, 1, Owner::current(), 10_000).await.expect("claim");
    let released = Transition {
        step: None,
        status: RunStatus::Queued,
        events: vec![event(3)],
        lease_until_ms: None,
        ..step(run, epoch, 1, 3, false)
    };
    store.commit(released).await.expect("release");
    assert_eq!(store.run(run).await.expect("run").wakes_at_ms(), None);
    assert_eq!(at(0).await, [run]);
}

pub(super) async fn lease_losses_count_takeovers_until_a_leg_ends(store: &dyn RunStore) {
    let run = RunId::new();
    store.create_run(new_run(run, "g", None)).await.expect("create");
    assert_eq!(store.run(run).await.expect("run").lease_losses, 0);
    // Two takeovers of a running run (its owner gone each time).
    assert_eq!(store.claim(run, 1, Owner::current(), i64::MAX).await.expect("take over"), 2);
    store.commit(step(run, 2, 1, 2, false)).await.expect("a step under the new owner");
    assert_eq!(store.claim(run, 2, Owner::current(), i64::MAX).await.expect("take over"), 3);
    assert_eq!(store.run(run).await.expect("run").lease_losses, 2, "a step does not reset");
    // The leg ends (interrupted): the count starts again.
    let ended = Transition {
        step: None,
        status: RunStatus::Interrupted,
        events: vec![event(3)],
        lease_until_ms: None,
        ..step(run, 3, 1, 3, false)
    };
    store.commit(ended).await.expect("end the leg");
    assert_eq!(store.run(run).await.expect("run").lease_losses, 0);
    // Claiming a run that is not running (here interrupted) is no takeover.
    store.claim(run, 3, Owner::current(), i64::MAX).await.expect("continue");
    assert_eq!(store.run(run).await.expect("run").lease_losses, 0);
}

pub(super) async fn queued_runs_have_no_owner_until_claimed(store: &dyn RunStore) {
    let run = RunId::new();
    store.create_run(NewRun { claim: None, ..new_run(run, "g", None) }).await.expect("queue");
    let record = store.run(run).await.expect("run");
    assert_eq!(
        (
            record.status,
            record.epoch,
            record.owner.as_ref(),
            record.lease_until_ms,
            record.last_seq
        ),
        (RunStatus::Queued, 1, None, None, 1)
    );
    assert!(!record.is_orphaned(i64::MAX), "a queued run is not orphaned");
    let queued = RunFilter { status: Some(RunStatus::Queued), ..RunFilter::default() };
    let page = store.list_runs(&queued, &PageRequest::default()).await.expect("list");
    assert_eq!(page.runs.iter().map(|r| r.id).collect::<Vec<_>>(), [run]);
    assert_eq!(store.claim(run, 1, Owner::current(), 5_000).await.expect("claim"), 2);
    let second = store.claim(run, 1, Owner::current(), 5_000).await;
    assert!(matches!(second, Err(StoreError::Fenced { current: 2, .. })), "{second:?}");
    let record = store.run(run).await.expect("run");
    assert_eq!(
        (record.status, record.owner, record.lease_until_ms),
        (RunStatus::Running, Some(Owner::current()), Some(5_000))
    );
    let checkpoint = store.checkpoint(run, None).await.expect("checkpoint");
    assert_eq!((checkpoint.run.step, checkpoint.snapshot_step), (0, 0));
}
