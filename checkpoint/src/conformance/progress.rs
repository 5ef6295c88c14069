//! Conformance case: the progress records of tasks that run subgraphs.

use crate::error::StoreError;
use crate::ids::RunId;
use crate::owner::Owner;
use crate::record::{TaskProgress, TaskWrite, Transition};
use crate::status::RunStatus;
use crate::store::RunStore;

use super::fixtures::{event, interrupt, kind, new_run, step, update};

/// `(task, value)` of each progress record of the run's last checkpoint.
async fn progress_of(store: &dyn RunStore, run: RunId) -> Vec<(u32, u32)> {
    let checkpoint = store.checkpoint(run, None).await.expect("checkpoint");
    checkpoint
        .progress
        .iter()
        .map(|p| (p.task.index, p.update.decode().expect("progress decodes")))
        .collect()
}

fn progress(
    run: RunId,
    epoch: u64,
    step: u64,
    index: u32,
    value: u32,
    seqs: &[u64],
) -> TaskProgress {
    TaskProgress {
        run,
        epoch,
        progress: update(step, index, value),
        events: seqs.iter().map(|seq| event(*seq)).collect(),
    }
}

pub(super) async fn task_progress_is_replaced_and_dropped_with_its_step(store: &dyn RunStore) {
    let run = RunId::new();
    store.create_run(new_run(run, "g", None)).await.expect("create");
    store.commit(step(run, 1, 1, 2, false)).await.expect("step 1");

    // Replaced, not kept first; independent of the task's pending write.
    store.put_task_progress(progress(run, 1, 2, 1, 10, &[3, 4])).await.expect("progress");
    store.put_task_progress(progress(run, 1, 2, 1, 11, &[5])).await.expect("replaced");
    store.put_task_progress(progress(run, 1, 2, 0, 20, &[])).await.expect("no events");
    let write = TaskWrite { run, epoch: 1, updates: vec![update(2, 1, 99)] };
    store.put_task_writes(write).await.expect("pending write of the same task");
    assert_eq!(progress_of(store, run).await, [(0, 20), (1, 11)], "by task, last write wins");
    let checkpoint = store.checkpoint(run, None).await.expect("checkpoint");
    let pending: Vec<(u32, u32)> = checkpoint
        .pending
        .iter()
        .map(|p| (p.task.index, p.update.decode().expect("pending")))
        .collect();
    assert_eq!(pending, [(1, 99)], "pending writes and progress are apart");
    assert_eq!(checkpoint.progress[1].task.node, "n1");
    assert_eq!(store.run(run).await.expect("run").last_seq, 5, "its events are the run's");
    let seqs: Vec<u64> =
        store.events(run, 0, 100).await.expect("events").iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);

    // Refusals: another step, an event gap, a stale writer.
    let refused = store.put_task_progress(progress(run, 1, 3, 0, 1, &[])).await;
    assert!(matches!(refused, Err(StoreError::StepOutOfOrder { .. })), "{refused:?}");
    let refused = store.put_task_progress(progress(run, 1, 2, 0, 1, &[9])).await;
    assert!(matches!(refused, Err(StoreError::EventGap { .. })), "{refused:?}");
    let epoch = store.claim(run, 1, Owner::current(), i64::MAX).await.expect("claim");
    let refused = store.put_task_progress(progress(run, 1, 2, 0, 1, &[6])).await;
    assert!(matches!(refused, Err(StoreError::Fenced { .. })), "{refused:?}");
    assert_eq!(progress_of(store, run).await, [(0, 20), (1, 11)], "refusals changed nothing");
    assert_eq!(store.run(run).await.expect("run").last_seq, 5);

    // A pause keeps it, a past checkpoint does not show it, the step's
    // commit drops it.
    let pause = Transition {
        step: None,
        status: RunStatus::AwaitingHitl,
        events: vec![event(6)],
        lease_until_ms: None,
        interrupts: vec![interrupt(run, 2, 1)],
        ..step(run, epoch, 1, 6, false)
    };
    store.commit(pause).await.expect("pause");
    assert_eq!(progress_of(store, run).await, [(0, 20), (1, 11)], "kept across a pause");
    assert!(store.checkpoint(run, Some(0)).await.expect("past").progress.is_empty());
    let epoch = store.claim(run, epoch, Owner::current(), i64::MAX).await.expect("claim");
    store.put_task_progress(progress(run, epoch, 2, 1, 12, &[7])).await.expect("after resume");
    assert_eq!(progress_of(store, run).await, [(0, 20), (1, 12)]);
    store.commit(step(run, epoch, 2, 8, false)).await.expect("step 2");
    assert!(progress_of(store, run).await.is_empty(), "dropped by the step's commit");
    let checkpoint = store.checkpoint(run, None).await.expect("checkpoint");
    assert!(checkpoint.pending.is_empty());
    let done = Transition {
        step: None,
        status: RunStatus::Completed,
        events: vec![event(9)],
        lease_until_ms: None,
        ..step(run, epoch, 2, 9, false)
    };
    store.commit(done).await.expect("complete");
    let refused = store.put_task_progress(progress(run, epoch, 3, 0, 1, &[])).await;
    assert_eq!(refused.as_ref().map_err(kind).err().as_deref(), Some("RunTerminal"), "{refused:?}");
}
