//! Merges never depend on which task finishes first.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::{Route, RunStatus, Send, END, START};

use crate::support::{self, Graph, Trace, TraceUpdate};

/// Sleeps a pseudo-random time derived from `seed`, then appends `label`.
async fn jittered(seed: u64, label: String) -> TraceUpdate {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    tokio::time::sleep(Duration::from_micros(x % 3_000)).await;
    TraceUpdate::default().visited(vec![label]).count(1)
}

#[test]
fn fan_out_results_merge_in_task_order_whatever_the_timing() {
    let runtime = support::runtime();
    let mut seen = Vec::new();
    for round in 0..20u64 {
        let graph = Graph::new("jitter", 1)
            .node("split", |_s: Arc<Trace>, _ctx| async move { Ok(TraceUpdate::default()) })
            .node("worker", move |_s: Arc<Trace>, ctx| async move {
                let item: u64 = ctx.input()?;
                Ok(jittered(round * 31 + item, format!("w{item}")).await)
            })
            .node("left", move |_s: Arc<Trace>, _ctx| async move {
                Ok(jittered(round, "left".into()).await)
            })
            .node("right", move |_s: Arc<Trace>, _ctx| async move {
                Ok(jittered(round + 7, "right".into()).await)
            })
            .edge(START, "split")
            .route("split", ["worker"], |_: &Trace| {
                Route::send((0..8u64).map(|i| Send::new("worker", json!(i))))
            })
            .edge(START, "left")
            .edge(START, "right")
            .edge("worker", END)
            .edge("left", END)
            .edge("right", END);
        let outcome = runtime.block_on(support::run(graph, 10)).unwrap();
        assert_eq!(outcome.status, RunStatus::Completed);
        seen.push(outcome.state.visited);
    }
    let expected: Vec<String> = ["left", "right"]
        .into_iter()
        .map(String::from)
        .chain((0..8).map(|i| format!("w{i}")))
        .collect();
    for visited in &seen {
        assert_eq!(visited, &expected);
    }
}

/// The documented order (docs/engine.md, "Task order, precisely"): a
/// node's static edges in declaration order, not by name.
#[tokio::test]
async fn tasks_follow_the_declaration_order_of_edges() {
    let graph = support::visits(Graph::new("order", 1), &["a", "b", "c"])
        .edge(START, "a")
        .edge("a", "c")
        .edge("a", "b")
        .edge("b", END)
        .edge("c", END);
    let outcome = support::run(graph, 10).await.unwrap();
    assert_eq!(outcome.state.visited, ["a", "c", "b"]);
}
