//! Conformance cases: schedules are fired once per tick, each firing and
//! its run in one transaction.

use crate::error::StoreError;
use crate::ids::RunId;
use crate::record::GraphRef;
use crate::schedule::{MissedTicks, ScheduleFire, ScheduleRecord, ScheduleTiming};
use crate::status::RunStatus;
use crate::store::{RunStore, ScheduleStore};

use super::fixtures::blob;

fn schedule(id: &str, next_at_ms: Option<i64>) -> ScheduleRecord {
    let mut schedule = ScheduleRecord::new(
        id,
        GraphRef { name: "g".into(), version: 3 },
        ScheduleTiming::Cron { expression: "*/5 * * * *".into() },
        serde_json::json!({"text": id}),
        blob(7),
        blob(8),
        1_000,
        next_at_ms,
    );
    schedule.missed = MissedTicks::Skip;
    schedule.grace_ms = 2_500;
    schedule.attachment = Some(format!("{{\"of\":\"{id}\"}}"));
    schedule.metadata = serde_json::json!({"owner": id, "tags": ["a", 1]});
    schedule
}

pub(super) async fn schedules_fire_once_per_tick_with_their_run(
    store: &(impl RunStore + ScheduleStore + ?Sized),
) {
    let nightly = schedule("nightly", Some(10_000));
    store.create_schedule(nightly.clone()).await.expect("create");
    let taken = store.create_schedule(schedule("nightly", Some(1))).await;
    assert!(matches!(taken, Err(StoreError::ScheduleExists { .. })), "{taken:?}");
    assert_eq!(store.schedule("nightly").await.expect("read"), Some(nightly.clone()));
    let once = ScheduleRecord {
        timing: ScheduleTiming::At { at_ms: 5_000 },
        ..schedule("once", Some(5_000))
    };
    store.create_schedule(once).await.expect("create");
    store.create_schedule(schedule("done", None)).await.expect("create");
    // Listed by id, paged.
    let ids = |page: Vec<ScheduleRecord>| page.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(store.list_schedules(0, 10).await.expect("list")), ["done", "nightly", "once"]);
    assert_eq!(ids(store.list_schedules(1, 1).await.expect("list")), ["nightly"]);
    // Due: next tick at or before now, most overdue first; none without a tick.
    assert!(store.due_schedules(4_999, 10).await.expect("due").is_empty());
    assert_eq!(ids(store.due_schedules(10_000, 10).await.expect("due")), ["once", "nightly"]);
    assert_eq!(ids(store.due_schedules(10_000, 1).await.expect("due")), ["once"]);

    // A firing creates its run queued, from the schedule's input, and
    // moves the tick, together.
    let run = RunId::new();
    let fire = ScheduleFire::new(
        "nightly",
        10_000,
        Some(20_000),
        10_050,
        Some(nightly.new_run(run, 10_050)),
        0,
    );
    store.fire_schedule(fire).await.expect("fire");
    let record = store.run(run).await.expect("the run");
    assert_eq!(
        (record.status, record.owner.clone(), record.graph.clone()),
        (RunStatus::Queued, None, nightly.graph.clone())
    );
    assert_eq!(store.attachment(run).await.expect("attachment"), nightly.attachment.clone());
    let checkpoint = store.checkpoint(run, None).await.expect("checkpoint");
    assert_eq!(checkpoint.snapshot.to_bytes(), blob(7).to_bytes());
    assert!(store.claimable(10_050, 10).await.expect("claimable").iter().any(|r| r.id == run));
    let fired = store.schedule("nightly").await.expect("read").expect("there");
    assert_eq!(
        (
            fired.next_at_ms,
            fired.last_run,
            fired.last_fired_at_ms,
            fired.runs_started,
            fired.ticks_skipped
        ),
        (Some(20_000), Some(run), Some(10_050), 1, 0)
    );

    // The same tick fired again (another process that read it before):
    // refused, nothing written, no run.
    let late = RunId::new();
    let again = ScheduleFire::new(
        "nightly",
        10_000,
        Some(20_000),
        10_060,
        Some(nightly.new_run(late, 10_060)),
        0,
    );
    let refused = store.fire_schedule(again).await;
    assert!(
        matches!(
            &refused,
            Err(StoreError::ScheduleMoved { expected: 10_000, found: Some(20_000), .. })
        ),
        "{refused:?}"
    );
    assert!(matches!(store.run(late).await, Err(StoreError::RunNotFound { .. })), "no run");
    assert_eq!(store.schedule("nightly").await.expect("read"), Some(fired.clone()));

    // A firing whose run cannot be created writes nothing either.
    let clash = ScheduleFire::new(
        "nightly",
        20_000,
        Some(30_000),
        20_000,
        Some(nightly.new_run(run, 20_000)),
        0,
    );
    let refused = store.fire_schedule(clash).await;
    assert!(matches!(refused, Err(StoreError::RunExists { .. })), "{refused:?}");
    assert_eq!(store.schedule("nightly").await.expect("read"), Some(fired));

    // Skipping ticks: no run, the tick moved, counted.
    let skip = ScheduleFire::new("nightly", 20_000, Some(90_000), 85_000, None, 13);
    store.fire_schedule(skip).await.expect("skip");
    let skipped = store.schedule("nightly").await.expect("read").expect("there");
    assert_eq!(
        (skipped.next_at_ms, skipped.last_run, skipped.runs_started, skipped.ticks_skipped),
        (Some(90_000), Some(run), 1, 13)
    );

    // The last tick of a one-off leaves it with none: never due again.
    let once = store.schedule("once").await.expect("read").expect("there");
    let last =
        ScheduleFire::new("once", 5_000, None, 5_001, Some(once.new_run(RunId::new(), 5_001)), 0);
    store.fire_schedule(last).await.expect("fire once");
    assert!(
        !ids(store.due_schedules(i64::MAX, 10).await.expect("due")).contains(&"once".to_owned())
    );

    // Unknown schedules; deleting keeps the runs.
    let unknown = store.fire_schedule(ScheduleFire::new("nope", 1, None, 1, None, 0)).await;
    assert!(matches!(unknown, Err(StoreError::ScheduleNotFound { .. })), "{unknown:?}");
    assert!(store.delete_schedule("nightly").await.expect("delete"));
    assert!(!store.delete_schedule("nightly").await.expect("delete again"));
    assert_eq!(store.schedule("nightly").await.expect("read"), None);
    assert_eq!(store.run(run).await.expect("the run stays").status, RunStatus::Queued);
}
