//! The subgraph cases of the engine's conformance suite.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use serde_json::json;
use tollgate_checkpoint::{PageRequest, RunFilter, RunStatus};
use tollgate_engine::{
    Decision, DecisionRequest, Event, EventSink, Executor, Interrupt, NodeContext, NodeError,
    Resumed, RunConfig, RunError, END, START,
};

use super::track::{Graph, Track, TrackUpdate};

/// A failure inside a subgraph continues inside from its stored progress;
/// an interrupt inside pauses the parent and resumes inside; the inner
/// events carry the namespace.
pub(super) async fn subgraphs(executor: Executor) {
    let (graph, drafts) = review_graph();
    let failed = executor.run(&graph, Track::default(), RunConfig::new()).await;
    let Err(RunError::NodeFailed { node, .. }) = failed else {
        panic!("subgraphs: a failure inside fails the parent task, got {failed:?}")
    };
    assert_eq!(node, "review", "subgraphs: the parent task fails");
    let run = executor.store().list_runs(&RunFilter::default(), &PageRequest::default()).await;
    let run = run.expect("subgraphs: lists").runs[0].id;
    let checkpoint = executor.store().checkpoint(run, None).await.expect("subgraphs: checkpoint");
    assert_eq!(checkpoint.progress.len(), 1, "subgraphs: the inner progress is stored");

    let (sink, mut events) = EventSink::channel();
    let handle = executor
        .continue_run(&graph, run, RunConfig::new().events(sink))
        .await
        .expect("subgraphs: continues");
    let paused = handle.wait().await.expect("subgraphs: pauses");
    assert_eq!(paused.status, RunStatus::AwaitingHitl, "subgraphs: pauses inside");
    let asked = &paused.interrupts[0];
    assert_eq!(asked.node, "review/ask", "subgraphs: the interrupt names its node");
    assert_eq!(asked.id, format!("{run}.1.0.0"), "subgraphs: an id of the parent's step");
    assert_eq!(drafts.load(Ordering::SeqCst), 1, "subgraphs: a finished inner step stays done");
    let mut ids = Vec::new();
    while let Some(event) = events.try_recv() {
        if let Event::NodeCompleted { .. } = event.event {
            ids.push(event.node_id.unwrap_or_default());
        }
    }
    assert_eq!(ids, ["review:1.0/check:2.0"], "subgraphs: inner events carry the namespace");

    let approve = DecisionRequest::new(Decision::Approve);
    let Resumed::Continuing(handle) =
        executor.resume(&graph, run, approve, RunConfig::new()).await.expect("subgraphs: resumes")
    else {
        panic!("subgraphs: an approval continues the run")
    };
    let done = handle.wait().await.expect("subgraphs: finishes");
    assert_eq!(done.status, RunStatus::Completed, "subgraphs: completes");
    assert_eq!(done.state.visited, ["draft", "check", "approved"], "subgraphs: resumed inside");
    assert_eq!((done.state.count, done.step), (1, 1), "subgraphs: one parent step");
    assert_eq!(drafts.load(Ordering::SeqCst), 1, "subgraphs: draft ran once in all");
    let checkpoint = executor.store().checkpoint(run, None).await.expect("subgraphs: checkpoint");
    assert!(checkpoint.progress.is_empty(), "subgraphs: the step's commit drops the progress");
}

/// A parent whose `review` node runs a subgraph that drafts, fails its
/// check once, then asks for approval; and the count of drafts.
fn review_graph() -> (tollgate_engine::CompiledGraph<Track>, Arc<AtomicU32>) {
    let drafts = Arc::new(AtomicU32::new(0));
    let failed_once = Arc::new(AtomicBool::new(false));
    let (counter, flag) = (Arc::clone(&drafts), Arc::clone(&failed_once));
    let inner = Graph::new("inner", 1)
        .node("draft", move |_s: Arc<Track>, _ctx| {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(TrackUpdate::default().visited(vec!["draft".into()]).count(1))
            }
        })
        .node("check", move |_s: Arc<Track>, _ctx| {
            let flag = Arc::clone(&flag);
            async move {
                if !flag.swap(true, Ordering::SeqCst) {
                    return Err(NodeError::fatal("the checker is down"));
                }
                Ok(TrackUpdate::default().visited(vec!["check".into()]))
            }
        })
        .node("ask", |_s: Arc<Track>, ctx: NodeContext| async move {
            let decision = ctx.interrupt(Interrupt::new("approval", json!({"draft": 1})))?;
            let note = if decision == Decision::Approve { "approved" } else { "other" };
            Ok(TrackUpdate::default().visited(vec![note.to_owned()]))
        })
        .edge(START, "draft")
        .edge("draft", "check")
        .edge("check", "ask")
        .edge("ask", END)
        .compile()
        .expect("subgraphs: the inner graph compiles");
    let graph = Graph::new("outer", 1)
        .subgraph(
            "review",
            inner,
            |_: &Track, _| Ok(Track::default()),
            |_: &Track, inner: Track| {
                Ok(TrackUpdate::default().visited(inner.visited).count(inner.count))
            },
        )
        .edge(START, "review")
        .edge("review", END)
        .compile()
        .expect("subgraphs: compiles");
    (graph, drafts)
}

/// Parallel instances of a subgraph through `Send`, each with its own
/// state, merged in task order, their events under their own tasks.
pub(super) async fn parallel_subgraphs(executor: Executor) {
    let echo = Graph::new("echo", 1)
        .node("say", |s: Arc<Track>, _ctx| async move {
            Ok(TrackUpdate::default().visited(vec![format!("{} said", s.visited[0])]))
        })
        .edge(START, "say")
        .edge("say", END)
        .compile()
        .expect("subgraphs: the echo graph compiles");
    let fan = Graph::new("fan", 1)
        .subgraph(
            "echo",
            echo,
            |_: &Track, send| {
                let who = send.and_then(|v| v.as_str()).unwrap_or("nobody").to_owned();
                Ok(Track { visited: vec![who], count: 0 })
            },
            |_: &Track, inner: Track| Ok(TrackUpdate::default().visited(inner.visited).count(1)),
        )
        .route(START, ["echo"], |_: &Track| {
            tollgate_engine::Route::send(
                ["ann", "bob", "cy"].map(|who| tollgate_engine::Send::new("echo", json!(who))),
            )
        })
        .edge("echo", END)
        .compile()
        .expect("subgraphs: the fan compiles");
    let (sink, mut events) = EventSink::channel();
    let done = executor
        .run(&fan, Track::default(), RunConfig::new().events(sink))
        .await
        .expect("subgraphs: the fan runs");
    assert_eq!(
        done.state.visited,
        ["ann", "ann said", "bob", "bob said", "cy", "cy said"],
        "subgraphs: instances merged in task order"
    );
    assert_eq!(done.state.count, 3, "subgraphs: three instances");
    let mut ids = Vec::new();
    while let Some(event) = events.try_recv() {
        if let (Event::NodeCompleted { .. }, Some("echo/say")) =
            (&event.event, event.node.as_deref())
        {
            ids.push(event.node_id.unwrap_or_default());
        }
    }
    ids.sort();
    assert_eq!(
        ids,
        ["echo:1.0/say:1.0", "echo:1.1/say:1.0", "echo:1.2/say:1.0"],
        "subgraphs: each instance under its own task"
    );
}
