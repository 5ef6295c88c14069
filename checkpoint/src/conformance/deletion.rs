//! Deleting a run removes every row of it and nothing of the others.

use super::fixtures::{event, interrupt, new_run, shape, step, update};
use crate::error::StoreError;
use crate::ids::RunId;
use crate::listing::{PageRequest, RunFilter};
use crate::record::{TaskProgress, TaskWrite, Transition};
use crate::status::RunStatus;
use crate::store::RunStore;

pub(super) async fn deleting_removes_every_row_of_one_run(store: &dyn RunStore) {
    let (gone, kept) = (RunId::new(), RunId::new());
    for run in [gone, kept] {
        let mut created = new_run(run, "g", None);
        created.attachment = Some("{}".into());
        store.create_run(created).await.expect("create");
        store.commit(step(run, 1, 1, 2, true)).await.expect("step 1");
        let write = TaskWrite { run, epoch: 1, updates: vec![update(2, 0, 7)] };
        store.put_task_writes(write).await.expect("pending write");
        let progress = TaskProgress { run, epoch: 1, progress: update(2, 1, 8), events: vec![] };
        store.put_task_progress(progress).await.expect("progress");
        let pause = Transition {
            step: None,
            status: RunStatus::AwaitingHitl,
            events: vec![event(3)],
            lease_until_ms: None,
            interrupts: vec![interrupt(run, 2, 0)],
            ..step(run, 1, 1, 3, false)
        };
        store.commit(pause).await.expect("pause");
    }
    let running = RunId::new();
    store.create_run(new_run(running, "g", None)).await.expect("create");
    let refused = store.delete_run(running).await;
    assert!(matches!(refused, Err(StoreError::RunInFlight { .. })), "{refused:?}");
    assert_eq!(store.run(running).await.expect("still there").status, RunStatus::Running);

    let before = (
        store.run(kept).await.expect("run"),
        store.events(kept, 0, 100).await.expect("events"),
        shape(store.checkpoint(kept, None).await.expect("checkpoint")),
    );
    store.delete_run(gone).await.expect("delete");
    let not_found = |result: Result<(), StoreError>| {
        assert!(matches!(result, Err(StoreError::RunNotFound { .. })), "{result:?}");
    };
    not_found(store.run(gone).await.map(drop));
    not_found(store.checkpoint(gone, None).await.map(drop));
    not_found(store.attachment(gone).await.map(drop));
    not_found(store.delete_run(gone).await);
    assert!(store.events(gone, 0, 100).await.map_or(true, |events| events.is_empty()));
    let listed = store.list_runs(&RunFilter::default(), &PageRequest::default()).await;
    let ids: Vec<RunId> = listed.expect("list").runs.iter().map(|r| r.id).collect();
    assert!(!ids.contains(&gone) && ids.contains(&kept), "{ids:?}");
    let after = (
        store.run(kept).await.expect("run"),
        store.events(kept, 0, 100).await.expect("events"),
        shape(store.checkpoint(kept, None).await.expect("checkpoint")),
    );
    assert_eq!(after, before, "the other run is untouched");
    // A new run with the deleted one's graph starts clean.
    let again = RunId::new();
    store.create_run(new_run(again, "g", None)).await.expect("create after delete");
    assert_eq!(store.events(again, 0, 100).await.expect("events"), [event(1)]);
}
