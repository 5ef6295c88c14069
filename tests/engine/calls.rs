//! Graphs called from a node's own code (`NodeContext::call`): their
//! finished steps are never run again, and a node that calls another
//! graph at a position when it runs again is refused.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{
    Executor, GraphState, MemoryStore, NodeContext, NodeError, RunConfig, RunError, StateGraph,
    END, START,
};

use crate::support::{Graph, Trace, TraceUpdate};

/// The called graphs' own state.
#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Inner {
    /// What the called graph's nodes did, in order.
    #[reducer(append)]
    done: Vec<String>,
    #[reducer(sum)]
    n: i64,
}

/// A node that calls a graph and then fails: its retry, and a continue
/// after the run failed, get the finished child's stored state without
/// running it again; a node that calls another graph at that position
/// when it runs again fails with the mismatch named.
#[tokio::test]
async fn a_called_graph_that_finished_is_not_run_again() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let children = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&children);
    let child = StateGraph::<Inner>::new("child", 1)
        .node("work", move |_s: Arc<Inner>, _ctx| {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(InnerUpdate::default().done(vec!["work".into()]).n(1))
            }
        })
        .edge(START, "work")
        .edge("work", END)
        .compile()
        .unwrap();
    let attempts = Arc::new(AtomicU32::new(0));
    let tries = Arc::clone(&attempts);
    let graph = Graph::new("caller", 1)
        .node("call", move |_s: Arc<Trace>, ctx: NodeContext| {
            let (child, tries) = (child.clone(), Arc::clone(&tries));
            async move {
                let done = ctx.call(&child, Inner::default()).await?;
                match tries.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(NodeError::retryable("flaky after the call")),
                    1 => Err(NodeError::fatal("down after the call")),
                    _ => Ok(TraceUpdate::default().visited(done.done).count(done.n)),
                }
            }
        })
        .retry(
            "call",
            tollgate::RetryPolicy {
                max_attempts: 2,
                initial_backoff: Duration::from_millis(1),
                jitter: false,
                ..tollgate::RetryPolicy::default()
            },
        )
        .edge(START, "call")
        .edge("call", END)
        .compile()
        .unwrap();
    let executor = Executor::new(MemoryStore::new());
    let failed = executor.run(&graph, Trace::default(), RunConfig::new()).await;
    assert!(matches!(failed, Err(RunError::NodeFailed { attempts: 2, .. })), "{failed:?}");
    assert_eq!(children.load(Ordering::SeqCst), 1, "the retry reused the finished child");
    let run = executor.store().list_runs(&Default::default(), &Default::default()).await;
    let run = run.unwrap().runs[0].id;
    let state = executor.get_state(&graph, run, None).await.unwrap();
    let nested = &state.tasks[0].nested;
    assert_eq!((nested.len(), nested[0].next.is_empty()), (1, true), "{nested:?}");
    assert_eq!(nested[0].values["done"], json!(["work"]));
    let done = executor.continue_run(&graph, run, RunConfig::new()).await.unwrap();
    let done = done.wait().await.unwrap();
    assert_eq!(
        (done.state.visited.as_slice(), done.state.count),
        (["work".to_owned()].as_slice(), 1)
    );
    assert_eq!(children.load(Ordering::SeqCst), 1, "continuing reused the finished child");

    // Another graph at that position when the node runs again.
    let other = StateGraph::<Inner>::new("other", 1)
        .node("x", |_s: Arc<Inner>, _ctx| async move { Ok(InnerUpdate::default()) })
        .edge(START, "x")
        .edge("x", END)
        .compile()
        .unwrap();
    let first_graph = StateGraph::<Inner>::new("first", 1)
        .node("y", |_s: Arc<Inner>, _ctx| async move { Ok(InnerUpdate::default()) })
        .edge(START, "y")
        .edge("y", END)
        .compile()
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let switching = Graph::new("switching", 1)
        .node("call", move |_s: Arc<Trace>, ctx: NodeContext| {
            let (first_graph, calls, other) =
                (first_graph.clone(), Arc::clone(&calls), other.clone());
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    ctx.call(&first_graph, Inner::default()).await?;
                    return Err(NodeError::fatal("stop here"));
                }
                ctx.call(&other, Inner::default()).await?;
                Ok(TraceUpdate::default())
            }
        })
        .edge(START, "call")
        .edge("call", END)
        .compile()
        .unwrap();
    let failed = executor.run(&switching, Trace::default(), RunConfig::new()).await;
    assert!(failed.is_err());
    let run = executor.store().list_runs(&Default::default(), &Default::default()).await;
    let run = run.unwrap().runs[0].id;
    let leg = executor.continue_run(&switching, run, RunConfig::new()).await.unwrap();
    let error = leg.wait().await.unwrap_err().to_string();
    assert!(
        error.contains("called graph `other` as call 0, where its earlier attempt called `first`"),
        "{error}"
    );
}
