//! Per-node retry policy: only retryable errors, bounded attempts.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    Event, Executor, MemoryStore, NodeError, RetryPolicy, RunConfig, RunError, RunStatus, END,
    START,
};

use crate::support::{self, Graph, Trace, TraceUpdate};

/// A node that fails `failures` times (retryable or not), then succeeds.
fn flaky(failures: u32, retryable: bool, policy: Option<RetryPolicy>) -> (Graph, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&calls);
    let mut graph = Graph::new("flaky", 1)
        .node("call", move |_s: Arc<Trace>, ctx| {
            let counter = Arc::clone(&counter);
            async move {
                let call = counter.fetch_add(1, Ordering::SeqCst) + 1;
                assert_eq!(ctx.attempt(), call, "the context counts attempts");
                if call <= failures {
                    let error = format!("attempt {call} failed");
                    return Err(if retryable {
                        NodeError::retryable(error)
                    } else {
                        NodeError::fatal(error)
                    });
                }
                Ok(TraceUpdate::default().count(1))
            }
        })
        .edge(START, "call")
        .edge("call", END);
    if let Some(policy) = policy {
        graph = graph.retry("call", policy);
    }
    (graph, calls)
}

fn fast(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_backoff: Duration::from_millis(1),
        jitter: false,
        ..RetryPolicy::default()
    }
}

/// (failures, retryable, policy, Ok(calls) or Err(attempts)).
type RetryCase = (u32, bool, Option<RetryPolicy>, Result<u32, u32>);

fn check(cases: &[RetryCase]) {
    let runtime = support::runtime();
    for (failures, retryable, policy, expect) in cases {
        let (graph, calls) = flaky(*failures, *retryable, policy.clone());
        let result = runtime.block_on(support::run(graph, 10));
        let label = format!("{failures} failures, retryable {retryable}, {policy:?}");
        match (expect, result) {
            (Ok(expected_calls), Ok(outcome)) => {
                assert_eq!(outcome.status, RunStatus::Completed, "{label}");
                assert_eq!(calls.load(Ordering::SeqCst), *expected_calls, "{label}");
            }
            (Err(expected_attempts), Err(RunError::NodeFailed { attempts, .. })) => {
                assert_eq!(attempts, *expected_attempts, "{label}");
                assert_eq!(calls.load(Ordering::SeqCst), *expected_attempts, "{label}");
            }
            (expect, other) => panic!("{label}: expected {expect:?}, got {other:?}"),
        }
    }
}

#[test]
fn only_retryable_errors_are_retried_within_the_budget() {
    check(&[
        (2, true, Some(fast(3)), Ok(3)),
        (3, true, Some(fast(3)), Err(3)),
        (1, false, Some(fast(3)), Err(1)),
        (1, true, None, Err(1)),
        (0, true, Some(fast(3)), Ok(1)),
    ]);
}

#[test]
fn retries_are_reported_as_events() {
    let runtime = support::runtime();
    let (graph, _) = flaky(2, true, Some(fast(5)));
    let graph = graph.compile().unwrap();
    let executor = Executor::new(MemoryStore::new());
    let (result, events) =
        runtime.block_on(support::run_with_events(&executor, &graph, RunConfig::new()));
    result.unwrap();
    let retries: Vec<(u32, u64)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::RetryScheduled { attempt, delay_ms, .. } => Some((*attempt, *delay_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(retries, [(1, 1), (2, 2)]);
}
