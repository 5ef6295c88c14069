//! The step guard: `max_steps` counts super-steps; remaining steps are
//! visible to nodes; per-node visit limits.

use std::sync::Arc;

use tollgate::{
    Executor, MemoryStore, NodeContext, Route, RunConfig, RunError, RunStatus, DEFAULT_MAX_STEPS,
    END, START,
};

use crate::support::{self, Graph, Trace, TraceUpdate};

/// A loop that needs exactly `needed` steps; each visit records the
/// remaining steps it saw.
fn looping(needed: i64) -> Graph {
    Graph::new("loop", 1)
        .node("a", |_s: Arc<Trace>, ctx: NodeContext| async move {
            Ok(TraceUpdate::default().count(1).visited(vec![ctx.remaining_steps().to_string()]))
        })
        .edge(START, "a")
        .route(
            "a",
            ["a", END],
            move |s: &Trace| if s.count < needed { Route::to("a") } else { Route::end() },
        )
}

/// (max_steps, Ok(steps) | Err((limit, step))) for a loop needing `needed`.
type GuardCase = (u64, Result<u64, (u64, u64)>);

fn check(needed: i64, cases: &[GuardCase]) {
    let runtime = support::runtime();
    for &(max_steps, expect) in cases {
        let result = runtime.block_on(support::run(looping(needed), max_steps));
        match (expect, result) {
            (Ok(steps), Ok(outcome)) => {
                assert_eq!(outcome.status, RunStatus::Completed, "max {max_steps}");
                assert_eq!(outcome.step, steps, "max {max_steps}");
            }
            (Err((limit, step)), Err(RunError::StepLimitExceeded { limit: l, step: s, node })) => {
                assert_eq!((l, s, node.as_str()), (limit, step, "a"), "max {max_steps}");
            }
            (expect, other) => panic!("max {max_steps}: expected {expect:?}, got {other:?}"),
        }
    }
}

#[test]
fn n_minus_one_fails_n_and_n_plus_one_complete() {
    check(5, &[(4, Err((4, 5))), (5, Ok(5)), (6, Ok(5))]);
    check(1, &[(0, Err((0, 1))), (1, Ok(1)), (2, Ok(1))]);
}

#[test]
fn the_default_budget_is_documented_and_enforced() {
    assert_eq!(DEFAULT_MAX_STEPS, 1_000);
    let runtime = support::runtime();
    let graph = looping(1_001).compile().unwrap();
    let executor = Executor::new(MemoryStore::new());
    let error =
        runtime.block_on(executor.run(&graph, Trace::default(), RunConfig::new())).unwrap_err();
    assert!(
        matches!(error, RunError::StepLimitExceeded { limit: 1_000, step: 1_001, .. }),
        "{error:?}"
    );
    let graph = looping(1_000).compile().unwrap();
    let outcome =
        runtime.block_on(executor.run(&graph, Trace::default(), RunConfig::new())).unwrap();
    assert_eq!(outcome.step, 1_000);
}

#[test]
fn nodes_see_the_remaining_steps() {
    let outcome = support::runtime().block_on(support::run(looping(4), 6)).unwrap();
    assert_eq!(outcome.state.visited, ["5", "4", "3", "2"]);
}

#[test]
fn a_failed_step_limit_keeps_the_last_checkpoint() {
    let runtime = support::runtime();
    let graph = looping(10).compile().unwrap();
    let executor = Executor::new(MemoryStore::new());
    let handle = runtime
        .block_on(executor.start(&graph, Trace::default(), RunConfig::new().max_steps(3)))
        .unwrap();
    let run = handle.run_id();
    assert!(runtime.block_on(handle.wait()).is_err());
    let record = runtime.block_on(executor.store().run(run)).unwrap();
    assert_eq!((record.status, record.step), (RunStatus::Failed, 3));
    assert_eq!(record.failure.unwrap().kind, "step_limit_exceeded");
}

#[test]
fn visit_limits_stop_a_node_not_the_budget() {
    let runtime = support::runtime();
    let exact = looping(3).max_visits("a", 3);
    let outcome = runtime.block_on(support::run(exact, 100)).unwrap();
    assert_eq!(outcome.state.count, 3);

    let over = looping(4).max_visits("a", 3);
    let error = runtime.block_on(support::run(over, 100)).unwrap_err();
    assert!(
        matches!(&error, RunError::VisitLimitExceeded { node, limit: 3 } if node == "a"),
        "{error:?}"
    );
}

/// `max_steps` counts the run's steps, not the leg's: a run stopped after
/// two steps and continued with a budget of three runs one more step, then
/// fails at step four (docs/engine.md, "Step guard").
#[tokio::test]
async fn the_budget_counts_the_runs_steps_across_legs() {
    let graph = looping(5).compile().unwrap();
    let executor = Executor::new(MemoryStore::new());
    let first = executor.run(&graph, Trace::default(), RunConfig::new().max_steps(2)).await;
    let run = match first {
        Err(RunError::StepLimitExceeded { limit: 2, step: 3, .. }) => {
            executor.store().list_runs(&Default::default(), &Default::default()).await.unwrap().runs
                [0]
            .id
        }
        other => panic!("expected the guard at step 3: {other:?}"),
    };
    let continued = executor
        .continue_run(&graph, run, RunConfig::new().max_steps(3))
        .await
        .unwrap()
        .wait()
        .await;
    match continued {
        Err(RunError::StepLimitExceeded { limit: 3, step: 4, .. }) => {}
        other => panic!("expected the guard at the run's step 4: {other:?}"),
    }
    assert_eq!(executor.store().run(run).await.unwrap().step, 3, "one more step ran");
}

/// The run's settings are stored with it: a leg continued with a default
/// `RunConfig` (another process, a worker) keeps the run's `max_steps`; a
/// config that sets its own overrides it, and the override is stored for
/// the legs after it. Per-run breakpoints hold for their leg only.
#[test]
fn a_runs_settings_hold_for_legs_continued_elsewhere() {
    let runtime = support::runtime();
    let executor = Executor::new(MemoryStore::new());
    let graph = looping(20).compile().unwrap();
    let resume = |run, config: RunConfig| {
        let request = tollgate::DecisionRequest::new(tollgate::Decision::Approve);
        runtime.block_on(executor.resume_run(&graph, run, request, config))
    };
    // Paused by a per-run breakpoint before step 1, with a budget of 5.
    let config = RunConfig::new().max_steps(5).interrupt_before(["a"]);
    let first = runtime.block_on(executor.run(&graph, Trace::default(), config)).unwrap();
    assert_eq!((first.status, first.step), (RunStatus::AwaitingHitl, 0));
    // Resumed with a default config: no breakpoint now, but the budget of
    // 5 (not the default 1000) holds.
    let failed = resume(first.run_id, RunConfig::new()).unwrap_err();
    assert!(matches!(failed, RunError::StepLimitExceeded { limit: 5, step: 6, .. }), "{failed:?}");

    // An override holds for that leg and the legs after it.
    let config = RunConfig::new().max_steps(3).interrupt_before(["a"]);
    let run = runtime.block_on(executor.run(&graph, Trace::default(), config)).unwrap().run_id;
    let resumed = resume(run, RunConfig::new().max_steps(7).interrupt_before(["a"]));
    let Ok(tollgate::Resumed::Continuing(paused)) = resumed else { panic!("{resumed:?}") };
    assert_eq!((paused.status, paused.step), (RunStatus::AwaitingHitl, 1));
    let failed = resume(run, RunConfig::new()).unwrap_err();
    assert!(matches!(failed, RunError::StepLimitExceeded { limit: 7, step: 8, .. }), "{failed:?}");
}
