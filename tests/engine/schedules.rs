//! Schedules: each tick of a cron expression starts one run however many
//! workers fire it, missed ticks after downtime follow the schedule's
//! policy, a one-off runs once, and schedules outlive their processes.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::{
    Clock, DynState, Executor, MissedTicks, RunConfig, RunFilter, RunStatus, Schedule,
    ScheduleTiming, SqliteStore, StoreError, Worker, Workflow, WorkflowContext,
};
use tollgate_testkit::{ManualClock, EPOCH_2026_MS};

const MINUTE: Duration = Duration::from_secs(60);

/// A workflow that counts its input's characters.
fn counter() -> Workflow<String, usize> {
    Workflow::new("counter", 1, |ctx: WorkflowContext, text: String| async move {
        ctx.task("count", move || async move { Ok(text.chars().count()) }).await
    })
    .unwrap()
}

/// The store's runs, oldest first, with their status.
async fn runs(executor: &Executor) -> Vec<(tollgate::RunId, RunStatus)> {
    let page = RunFilter::default();
    let listed = executor.store().list_runs(&page, &Default::default()).await.unwrap();
    let mut runs: Vec<_> = listed.runs.iter().map(|run| (run.id, run.status)).collect();
    runs.reverse();
    runs
}

/// Waits until the store holds `count` completed runs.
async fn completed(executor: &Executor, count: usize) {
    for _ in 0..1_000 {
        let runs = runs(executor).await;
        if runs.iter().filter(|(_, status)| *status == RunStatus::Completed).count() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{count} completed runs expected: {:?}", runs(executor).await);
}

/// Three workers, each with its own connection to one database (as three
/// processes have), fire an every-minute schedule of a workflow for five
/// ticks of a test clock: five runs, each completed, the schedule's
/// counters agreeing.
#[tokio::test]
async fn each_tick_starts_one_run_however_many_workers_fire_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("schedules.db");
    let clock = Arc::new(ManualClock::new(EPOCH_2026_MS));
    let config = RunConfig::new().clock(clock.clone());
    let workflow = counter();
    let executor = Executor::new(SqliteStore::open(&path).unwrap());
    let schedule = Schedule::cron("every-minute", "* * * * *").unwrap();
    let added = executor
        .add_schedule(
            workflow.graph(),
            workflow.input(&"tick".to_owned()).unwrap(),
            schedule,
            config.clone(),
        )
        .await
        .unwrap();
    assert_eq!(added.next_at_ms, Some(EPOCH_2026_MS + 60_000), "the next minute");
    assert_eq!(added.input["input"], json!("tick"));
    let again = Schedule::cron("every-minute", "*/5 * * * *").unwrap();
    let taken = executor
        .add_schedule(
            workflow.graph(),
            workflow.input(&"x".to_owned()).unwrap(),
            again,
            config.clone(),
        )
        .await;
    assert!(
        matches!(taken, Err(tollgate::RunError::Store(StoreError::ScheduleExists { .. }))),
        "{taken:?}"
    );

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    for _ in 0..3 {
        let executor = Executor::new(SqliteStore::open(&path).unwrap());
        let worker = Worker::new(executor)
            .graph(workflow.graph().clone())
            .config(config.clone())
            .poll_interval(Duration::from_millis(5));
        let mut stopped = stopped.clone();
        workers.push(tokio::spawn(worker.run(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })));
    }
    for tick in 1..=5 {
        clock.advance(MINUTE);
        completed(&executor, tick).await;
        // Every worker polls a few times within the tick: none fires it again.
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(runs(&executor).await.len(), tick, "one run per tick");
    }
    stop.send(true).unwrap();
    for worker in workers {
        worker.await.unwrap();
    }
    let runs = runs(&executor).await;
    assert!(runs.iter().all(|(_, status)| *status == RunStatus::Completed), "{runs:?}");
    let state = executor.store().checkpoint(runs[0].0, None).await.unwrap();
    assert_eq!(state.snapshot_step, 0, "{state:?}");
    let schedule = executor.store().schedule("every-minute").await.unwrap().unwrap();
    assert_eq!(
        (schedule.runs_started, schedule.ticks_skipped, schedule.last_run, schedule.next_at_ms),
        (5, 0, Some(runs[4].0), Some(EPOCH_2026_MS + 6 * 60_000))
    );
}

/// Every process down for ten minutes and a half: a schedule that runs
/// missed ticks once starts one run, one that skips them starts none and
/// waits for its next tick; both count what they skipped.
#[tokio::test]
async fn missed_ticks_after_downtime_follow_the_policy() {
    let clock = Arc::new(ManualClock::new(EPOCH_2026_MS));
    let config = RunConfig::new().clock(clock.clone());
    let workflow = counter();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let input = || workflow.input(&"late".to_owned()).unwrap();
    let once = Schedule::cron("once", "* * * * *").unwrap();
    executor.add_schedule(workflow.graph(), input(), once, config.clone()).await.unwrap();
    let skip = Schedule::cron("skip", "* * * * *")
        .unwrap()
        .missed(MissedTicks::Skip)
        .grace(Duration::from_secs(5));
    executor.add_schedule(workflow.graph(), input(), skip, config.clone()).await.unwrap();
    assert!(executor.fire_schedules(clock.now_ms()).await.unwrap().is_empty(), "nothing due yet");

    clock.advance(MINUTE * 10 + Duration::from_secs(30));
    let started = executor.fire_schedules(clock.now_ms()).await.unwrap();
    assert_eq!(started.len(), 1, "one run for the missed ticks of `once`, none for `skip`");
    let store = executor.store();
    let once = store.schedule("once").await.unwrap().unwrap();
    let skip = store.schedule("skip").await.unwrap().unwrap();
    assert_eq!((once.runs_started, once.ticks_skipped, once.last_run), (1, 9, Some(started[0])));
    assert_eq!((skip.runs_started, skip.ticks_skipped, skip.last_run), (0, 10, None));
    let next = EPOCH_2026_MS + 11 * 60_000;
    assert_eq!((once.next_at_ms, skip.next_at_ms), (Some(next), Some(next)));
    assert!(executor.fire_schedules(clock.now_ms()).await.unwrap().is_empty(), "fired already");
    // On time again, the skipping schedule runs its tick.
    clock.advance(Duration::from_secs(31));
    assert_eq!(executor.fire_schedules(clock.now_ms()).await.unwrap().len(), 2);
    let outcomes = executor.recover(workflow.graph(), config).await.unwrap();
    assert_eq!(outcomes.len(), 3);
    for handle in outcomes {
        let done = handle.wait().await.unwrap();
        assert_eq!(workflow.output(&done.state).unwrap(), Some(4));
    }
}

/// A schedule at a time runs once, then has no tick left; a time already
/// past when added is due at once. Schedules live in the database: a new
/// process (a reopened file) fires them.
#[tokio::test]
async fn a_one_off_runs_once_and_schedules_outlive_their_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("once.db");
    let clock = Arc::new(ManualClock::new(EPOCH_2026_MS));
    let config = RunConfig::new().clock(clock.clone());
    let workflow = counter();
    {
        let executor = Executor::new(SqliteStore::open(&path).unwrap());
        let at = Schedule::at("launch", EPOCH_2026_MS + 3_600_000);
        let input = workflow.input(&"go".to_owned()).unwrap();
        let added =
            executor.add_schedule(workflow.graph(), input, at, config.clone()).await.unwrap();
        assert_eq!(added.timing, ScheduleTiming::At { at_ms: EPOCH_2026_MS + 3_600_000 });
        let bad = Schedule::at("has space", 0);
        let input = workflow.input(&"go".to_owned()).unwrap();
        let refused = executor.add_schedule(workflow.graph(), input, bad, config.clone()).await;
        assert!(
            matches!(
                refused,
                Err(tollgate::RunError::Schedule(tollgate::ScheduleError::InvalidId { .. }))
            ),
            "{refused:?}"
        );
    }
    let executor = Executor::new(SqliteStore::open(&path).unwrap());
    clock.advance(Duration::from_secs(3_599));
    assert!(executor.fire_schedules(clock.now_ms()).await.unwrap().is_empty());
    clock.advance(Duration::from_secs(1));
    let started = executor.fire_schedules(clock.now_ms()).await.unwrap();
    assert_eq!(started.len(), 1);
    clock.advance(Duration::from_secs(86_400));
    assert!(executor.fire_schedules(clock.now_ms()).await.unwrap().is_empty(), "no tick left");
    let launch = executor.store().schedule("launch").await.unwrap().unwrap();
    assert_eq!((launch.next_at_ms, launch.runs_started), (None, 1));
    let done = executor
        .continue_run(workflow.graph(), started[0], config)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let _: &DynState = &done.state;
}
