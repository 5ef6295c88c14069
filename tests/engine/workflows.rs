//! Durable workflows (`Workflow`): finished tasks are never run again,
//! parallel tasks are stored as they finish, interrupts answer where they
//! were asked, a changed workflow is refused with the task it changed,
//! retries, cancels between tasks, and workers (graphs and workflows
//! called from a workflow: `workflow_calls.rs`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tollgate::{
    Decision, DecisionRequest, DynState, Executor, Interrupt, NodeError, Resumed, RetryPolicy,
    RunConfig, RunError, RunStatus, SqliteStore, TaskOptions, Worker, Workflow, WorkflowContext,
};

use crate::support::event_kinds;

/// How often each task ran, by name.
#[derive(Clone, Default)]
pub(crate) struct Ran(Arc<Mutex<BTreeMap<String, u32>>>);

impl Ran {
    pub(crate) fn count(&self, name: &str) {
        *self.0.lock().unwrap().entry(name.to_owned()).or_default() += 1;
    }

    pub(crate) fn get(&self, name: &str) -> u32 {
        self.0.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    fn total(&self) -> u32 {
        self.0.lock().unwrap().values().sum()
    }
}

/// The run continued to its end.
pub(crate) async fn continued(
    executor: &Executor,
    graph: &tollgate::CompiledGraph<DynState>,
    run: tollgate::RunId,
) -> tollgate::RunOutcome<DynState> {
    executor.continue_run(graph, run, RunConfig::new()).await.unwrap().wait().await.unwrap()
}

/// The run's one interrupt approved, and the leg that follows waited for.
async fn approved(
    executor: &Executor,
    graph: &tollgate::CompiledGraph<DynState>,
    run: tollgate::RunId,
) -> Result<tollgate::RunOutcome<DynState>, RunError> {
    let approve = DecisionRequest::new(Decision::Approve);
    let resumed = executor.resume(graph, run, approve, RunConfig::new()).await.unwrap();
    let Resumed::Continuing(handle) = resumed else { panic!("the run had one interrupt") };
    handle.wait().await
}

/// A worker on `executor` driving `graph`'s runs until `run` completed.
async fn worked_off(
    executor: &Executor,
    graph: &tollgate::CompiledGraph<DynState>,
    run: tollgate::RunId,
) -> tollgate::WorkerReport {
    let worker =
        Worker::new(executor.clone()).graph(graph.clone()).poll_interval(Duration::from_millis(20));
    let store = Arc::clone(executor.store());
    worker
        .run(async move {
            while store.run(run).await.unwrap().status != RunStatus::Completed {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
}

/// The store's one run.
pub(crate) async fn only_run(executor: &Executor) -> tollgate::RunId {
    let page = executor.store().list_runs(&Default::default(), &Default::default()).await;
    page.unwrap().runs[0].id
}

pub(crate) fn sqlite(dir: &Path) -> Executor {
    Executor::new(SqliteStore::open(dir.join("workflows.db")).unwrap())
}

/// A workflow of `tasks` sequential tasks adding their position to a sum;
/// the task at `fail_at` fails (fatally) while `failing` holds.
fn adder(ran: &Ran, fail_at: Option<u32>, failing: Arc<Mutex<bool>>) -> Workflow<u32, u64> {
    let ran = ran.clone();
    Workflow::new("adder", 1, move |ctx: WorkflowContext, tasks: u32| {
        let (ran, failing) = (ran.clone(), Arc::clone(&failing));
        async move {
            let mut sum = 0u64;
            for i in 0..tasks {
                let (ran, failing) = (ran.clone(), Arc::clone(&failing));
                let name = format!("add{i}");
                let task_name = name.clone();
                sum += ctx
                    .task(&name, move || async move {
                        if Some(i) == fail_at && *failing.lock().unwrap() {
                            return Err(NodeError::fatal("the service is down"));
                        }
                        ran.count(&task_name);
                        Ok(u64::from(i))
                    })
                    .await?;
            }
            Ok(sum)
        }
    })
    .unwrap()
}

#[tokio::test]
async fn a_workflow_runs_its_tasks_once_each_and_returns_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let executor = sqlite(dir.path());
    let ran = Ran::default();
    let workflow = adder(&ran, None, Arc::default());
    let outcome = executor
        .run(workflow.graph(), workflow.input(&5).unwrap(), RunConfig::new())
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(workflow.output(&outcome.state).unwrap(), Some(10));
    assert_eq!(ran.total(), 5);
    assert_eq!(outcome.step, 1, "the whole workflow is one step of its run");
    let stored = executor.store().events(outcome.run_id, 0, u64::MAX).await.unwrap();
    let kinds = event_kinds(&stored);
    let started = kinds.iter().filter(|kind| *kind == "task_started").count();
    let completed = kinds.iter().filter(|kind| *kind == "task_completed").count();
    assert_eq!((started, completed), (5, 5), "{kinds:?}");
    let first: Value = serde_json::from_str(&stored[2].json).unwrap();
    assert_eq!(
        (&first["event_type"], &first["task"], &first["name"]),
        (&json!("task_started"), &json!(0), &json!("add0"))
    );
    let done: Value = serde_json::from_str(&stored[3].json).unwrap();
    assert_eq!((&done["event_type"], &done["output"]), (&json!("task_completed"), &json!(0)));
    assert_eq!(kinds.last().map(String::as_str), Some("run_ended"));
}

#[tokio::test]
async fn a_continued_workflow_takes_finished_tasks_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let failing = Arc::new(Mutex::new(true));
    let workflow = adder(&ran, Some(3), Arc::clone(&failing));
    let run = {
        let executor = sqlite(dir.path());
        let error = executor
            .run(workflow.graph(), workflow.input(&6).unwrap(), RunConfig::new())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("the service is down"), "{error}");
        only_run(&executor).await
    };
    assert_eq!(ran.total(), 3, "tasks 0, 1 and 2 finished before task 3 failed");
    *failing.lock().unwrap() = false;
    // Another executor on the file: what a second process sees.
    let executor = sqlite(dir.path());
    let outcome = continued(&executor, workflow.graph(), run).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(workflow.output(&outcome.state).unwrap(), Some(15));
    for i in 0..6 {
        assert_eq!(ran.get(&format!("add{i}")), 1, "task {i} ran exactly once");
    }
}

#[tokio::test]
async fn parallel_tasks_are_stored_as_each_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let failing = Arc::new(Mutex::new(true));
    let (counted, broken) = (ran.clone(), Arc::clone(&failing));
    let workflow = Workflow::new("fan", 1, move |ctx: WorkflowContext, _: ()| {
        let (ran, failing) = (counted.clone(), Arc::clone(&broken));
        async move {
            let slow = |name: &'static str, ms: u64| {
                let ran = ran.clone();
                move || async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    ran.count(name);
                    Ok(name.to_owned())
                }
            };
            let flaky = {
                let ran = ran.clone();
                move || async move {
                    tokio::time::sleep(Duration::from_millis(60)).await;
                    if *failing.lock().unwrap() {
                        return Err(NodeError::fatal("flaky"));
                    }
                    ran.count("c");
                    Ok("c".to_owned())
                }
            };
            let (a, b, c) = tokio::join!(
                ctx.task("a", slow("a", 30)),
                ctx.task("b", slow("b", 10)),
                ctx.task("c", flaky),
            );
            Ok(vec![a?, b?, c?])
        }
    })
    .unwrap();
    let executor = sqlite(dir.path());
    let error =
        executor.run(workflow.graph(), workflow.input(&()).unwrap(), RunConfig::new()).await;
    assert!(error.is_err());
    let run = only_run(&executor).await;
    let stored = executor.store().events(run, 0, u64::MAX).await.unwrap();
    let order: Vec<String> = stored
        .iter()
        .map(|event| serde_json::from_str::<Value>(&event.json).unwrap())
        .filter(|line| line["event_type"] == "task_completed")
        .map(|line| format!("{}:{}", line["task"], line["name"].as_str().unwrap()))
        .collect();
    assert_eq!(order, ["1:b", "0:a"], "stored in the order they finished, numbered as asked");
    *failing.lock().unwrap() = false;
    let outcome = continued(&executor, workflow.graph(), run).await;
    assert_eq!(
        workflow.output(&outcome.state).unwrap(),
        Some(vec!["a".into(), "b".into(), "c".into()])
    );
    assert_eq!((ran.get("a"), ran.get("b"), ran.get("c")), (1, 1, 1));
}

/// A workflow asking for approval between two tasks.
fn approving(ran: &Ran, order: [&'static str; 2]) -> Workflow<u32, Value> {
    let ran = ran.clone();
    Workflow::new("refund", 1, move |ctx: WorkflowContext, amount: u32| {
        let ran = ran.clone();
        async move {
            let mut done = Vec::new();
            for name in order {
                let ran = ran.clone();
                done.push(
                    ctx.task(name, move || async move {
                        ran.count(name);
                        Ok(name.to_owned())
                    })
                    .await?,
                );
            }
            let decision = ctx.interrupt(Interrupt::new("approval", json!({"refund": amount})))?;
            let approved = matches!(decision, Decision::Approve);
            let ran = ran.clone();
            let paid = ctx
                .task("pay", move || async move {
                    ran.count("pay");
                    Ok(approved)
                })
                .await?;
            Ok(json!({"done": done, "paid": paid}))
        }
    })
    .unwrap()
}

#[tokio::test]
async fn an_interrupt_answers_where_it_was_asked_after_a_decision_from_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let workflow = approving(&ran, ["look_up", "check"]);
    let executor = sqlite(dir.path());
    let paused = executor
        .run(workflow.graph(), workflow.input(&20).unwrap(), RunConfig::new())
        .await
        .unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingHitl);
    assert_eq!(paused.interrupts[0].payload, json!({"refund": 20}));
    assert_eq!(paused.interrupts[0].node, "refund");
    drop(executor);
    // Decided and continued by another executor on the file.
    let other = sqlite(dir.path());
    let done = approved(&other, workflow.graph(), paused.run_id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let output = workflow.output(&done.state).unwrap().unwrap();
    assert_eq!(output, json!({"done": ["look_up", "check"], "paid": true}));
    assert_eq!((ran.get("look_up"), ran.get("check"), ran.get("pay")), (1, 1, 1));
}

#[tokio::test]
async fn a_reordered_workflow_continuing_an_old_run_fails_naming_both_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let executor = sqlite(dir.path());
    let old = approving(&ran, ["look_up", "check"]);
    let paused =
        executor.run(old.graph(), old.input(&20).unwrap(), RunConfig::new()).await.unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingHitl);
    let changed = approving(&ran, ["check", "look_up"]);
    let error = approved(&executor, changed.graph(), paused.run_id).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, RunError::TaskMismatch { position: 0, .. }), "{error:?}");
    assert!(message.contains("`check`") && message.contains("`look_up`"), "{message}");
    let record = executor.store().run(paused.run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Failed);
    assert_eq!(record.failure.unwrap().kind, "task_mismatch");
    assert_eq!((ran.get("look_up"), ran.get("check"), ran.get("pay")), (1, 1, 0));
}

#[tokio::test]
async fn a_task_is_retried_with_its_policy_and_timed_out_attempts_count() {
    let executor = Executor::new(tollgate::MemoryStore::new());
    let attempts = Arc::new(Mutex::new(0u32));
    let tries = Arc::clone(&attempts);
    let workflow = Workflow::new("retrying", 1, move |ctx: WorkflowContext, _: ()| {
        let tries = Arc::clone(&tries);
        async move {
            let policy = RetryPolicy {
                max_attempts: 3,
                initial_backoff: Duration::from_millis(1),
                ..RetryPolicy::default()
            };
            let options = TaskOptions::new().retry(policy).timeout(Duration::from_millis(200));
            ctx.task_with("flaky", options, move || {
                let tries = Arc::clone(&tries);
                async move {
                    let attempt = {
                        let mut tries = tries.lock().unwrap();
                        *tries += 1;
                        *tries
                    };
                    match attempt {
                        1 => Err(NodeError::retryable("503")),
                        2 => {
                            tokio::time::sleep(Duration::from_secs(5)).await;
                            Ok(0)
                        }
                        _ => Ok(attempt),
                    }
                }
            })
            .await
        }
    })
    .unwrap();
    let outcome = executor
        .run(workflow.graph(), workflow.input(&()).unwrap(), RunConfig::new())
        .await
        .unwrap();
    assert_eq!(workflow.output(&outcome.state).unwrap(), Some(3));
    let stored = executor.store().events(outcome.run_id, 0, u64::MAX).await.unwrap();
    let failed: Vec<Value> = stored
        .iter()
        .map(|event| serde_json::from_str::<Value>(&event.json).unwrap())
        .filter(|line| line["event_type"] == "task_failed")
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert_eq!((&failed[0]["attempt"], &failed[0]["error"]), (&json!(1), &json!("503")));
    assert!(failed[1]["error"].as_str().unwrap().contains("took longer than"), "{failed:?}");
    assert!(failed[1]["retry_in_ms"].is_u64());
}

#[tokio::test]
async fn a_cancelled_workflow_stops_between_tasks_and_continues_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let counted = ran.clone();
    let (reached, reach) =
        (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let (signal, gate) = (Arc::clone(&reached), Arc::clone(&reach));
    let workflow = Workflow::new("slow", 1, move |ctx: WorkflowContext, _: ()| {
        let (ran, signal, gate) = (counted.clone(), Arc::clone(&signal), Arc::clone(&gate));
        async move {
            for i in 0..4u32 {
                let (ran, signal, gate) = (ran.clone(), Arc::clone(&signal), Arc::clone(&gate));
                ctx.task(&format!("t{i}"), move || async move {
                    if i == 1 {
                        signal.notify_one();
                        gate.notified().await;
                    }
                    ran.count(&format!("t{i}"));
                    Ok(i)
                })
                .await?;
            }
            Ok(())
        }
    })
    .unwrap();
    let executor = sqlite(dir.path());
    let handle = executor
        .start(workflow.graph(), workflow.input(&()).unwrap(), RunConfig::new())
        .await
        .unwrap();
    let run = handle.run_id();
    reached.notified().await;
    handle.cancel();
    reach.notify_one();
    let stopped = handle.wait().await.unwrap();
    assert_eq!(stopped.status, RunStatus::Interrupted);
    assert_eq!(ran.total(), 2, "task 1 finished; task 2 did not start");
    let outcome = continued(&executor, workflow.graph(), run).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    for i in 0..4 {
        assert_eq!(ran.get(&format!("t{i}")), 1, "task {i} ran once");
    }
}

#[tokio::test]
async fn a_worker_drives_a_queued_workflow() {
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let workflow = adder(&ran, None, Arc::default());
    let executor = sqlite(dir.path());
    let run = executor
        .enqueue(workflow.graph(), workflow.input(&4).unwrap(), RunConfig::new())
        .await
        .unwrap();
    let report = worked_off(&executor, workflow.graph(), run).await;
    assert_eq!(report.completed, 1);
    assert_eq!(ran.total(), 4);
}

#[tokio::test]
async fn an_input_that_does_not_decode_fails_the_run_naming_the_workflow() {
    let executor = Executor::new(tollgate::MemoryStore::new());
    let ran = Ran::default();
    let workflow = adder(&ran, None, Arc::default());
    let input = DynState::from(serde_json::Map::from_iter([("input".to_owned(), json!("five"))]));
    let error = executor.run(workflow.graph(), input, RunConfig::new()).await.unwrap_err();
    assert!(
        error.to_string().contains("workflow `adder`: the run's input does not decode"),
        "{error}"
    );
    assert_eq!(ran.total(), 0);
}

#[tokio::test]
async fn a_sleeping_workflow_waits_in_the_queue_and_a_worker_wakes_it_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let counted = ran.clone();
    let workflow = Workflow::new("nap", 1, move |ctx: WorkflowContext, ms: u64| {
        let ran = counted.clone();
        async move {
            let before = ran.clone();
            ctx.task("before", move || async move {
                before.count("before");
                Ok(())
            })
            .await?;
            ctx.sleep(Duration::from_millis(ms)).await?;
            let after = ran.clone();
            ctx.task("after", move || async move {
                after.count("after");
                Ok(())
            })
            .await?;
            Ok(ctx.now_ms())
        }
    })
    .unwrap();
    let started =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as i64;
    let run = {
        let executor = sqlite(dir.path());
        let parked =
            executor.run(workflow.graph(), workflow.input(&400).unwrap(), RunConfig::new()).await;
        let parked = parked.unwrap();
        assert_eq!(parked.status, RunStatus::Queued, "parked, no process holds it");
        let record = executor.store().run(parked.run_id).await.unwrap();
        let wake = record.wakes_at_ms().expect("listed with its wake-up");
        assert!(wake >= started + 400 && wake < started + 5_000, "{wake} vs {started}");
        assert_eq!(record.owner, None);
        let due = executor.store().claimable(started, 10).await.unwrap();
        assert!(due.is_empty(), "not claimable before its wake-up");
        // `recover` leaves it too.
        assert!(executor.recover(workflow.graph(), RunConfig::new()).await.unwrap().is_empty());
        parked.run_id
    };
    assert_eq!((ran.get("before"), ran.get("after")), (1, 0));
    // Every process gone; a new one's worker takes it once it is due.
    let executor = sqlite(dir.path());
    let report = worked_off(&executor, workflow.graph(), run).await;
    assert_eq!(report.completed, 1);
    let done = executor.store().run(run).await.unwrap();
    assert_eq!(done.wakes_at_ms(), None);
    let state = executor.get_state(workflow.graph(), run, None).await.unwrap();
    let finished_at = workflow.output(&state.values).unwrap().unwrap();
    assert!(finished_at >= started + 400, "woke early: {finished_at} vs {started}");
    assert_eq!((ran.get("before"), ran.get("after")), (1, 1), "the first task did not run again");
}

/// A sleep of three days, ended by a test clock (the testkit's
/// `ManualClock`): not due before, due after.
#[tokio::test]
async fn a_test_clock_ends_a_long_sleep() {
    use tollgate_testkit::{ManualClock, EPOCH_2026_MS};
    let clock = Arc::new(ManualClock::new(EPOCH_2026_MS));
    let config = RunConfig::new().clock(clock.clone());
    let workflow = Workflow::new("reminder", 1, |ctx: WorkflowContext, _: ()| async move {
        ctx.sleep(Duration::from_secs(3 * 24 * 3600)).await?;
        ctx.task("remind", || async { Ok("sent".to_owned()) }).await
    })
    .unwrap();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let parked =
        executor.run(workflow.graph(), workflow.input(&()).unwrap(), config.clone()).await.unwrap();
    assert_eq!(parked.status, RunStatus::Queued);
    let record = executor.store().run(parked.run_id).await.unwrap();
    assert_eq!(record.wakes_at_ms(), Some(EPOCH_2026_MS + 3 * 24 * 3600 * 1000));
    clock.advance(Duration::from_secs(2 * 24 * 3600));
    assert!(executor.recover(workflow.graph(), config.clone()).await.unwrap().is_empty());
    // Taken early by hand, it parks again.
    let early = executor.continue_run(workflow.graph(), parked.run_id, config.clone()).await;
    let early = early.unwrap().wait().await.unwrap();
    assert_eq!(early.status, RunStatus::Queued);
    clock.advance(Duration::from_secs(24 * 3600));
    let handles = executor.recover(workflow.graph(), config).await.unwrap();
    assert_eq!(handles.len(), 1, "due now");
    let done = handles.into_iter().next().unwrap().wait().await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(workflow.output(&done.state).unwrap(), Some("sent".to_owned()));
}
