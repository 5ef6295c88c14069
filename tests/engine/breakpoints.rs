//! Breakpoints before and after nodes, and what a decision records of who
//! made it (pauses and decisions are in `hitl.rs`).

use std::sync::Arc;

use serde_json::json;
use tollgate::{
    Decision, DecisionRequest, Event, EventSink, Executor, Interrupt, RunConfig, RunError,
    RunStatus, END, START,
};

use crate::hitl::{approval, approve, asking, finish, paused, sqlite, Runs};
use crate::support::{self, Graph, Trace, TraceUpdate};

#[test]
fn breakpoints_pause_before_and_after_nodes() {
    let runtime = support::runtime();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let runs = Runs::default();
    let (a, b) = (runs.clone(), runs.clone());
    let graph = Graph::new("breaks", 1)
        .node("a", move |_s: Arc<Trace>, _ctx| {
            let runs = a.clone();
            async move {
                runs.bump(0);
                Ok(TraceUpdate::default().visited(vec!["a".into()]).count(1))
            }
        })
        .node("b", move |_s: Arc<Trace>, _ctx| {
            let runs = b.clone();
            async move {
                runs.bump(1);
                Ok(TraceUpdate::default().visited(vec!["b".into()]).count(1))
            }
        })
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .interrupt_before(["b"])
        .compile()
        .unwrap();
    let config = RunConfig::new().interrupt_after(["a"]);
    let first = runtime.block_on(executor.run(&graph, Trace::default(), config)).unwrap();
    let run = first.run_id;
    assert_eq!((first.status, first.step), (RunStatus::AwaitingHitl, 0));
    assert_eq!(first.interrupts[0].id, format!("{run}.1.0.after"));
    assert_eq!(first.interrupts[0].payload, json!({"node": "a", "when": "after"}));
    let typed = first.interrupts[0].breakpoint();
    assert_eq!(
        typed,
        Some(tollgate::Breakpoint { node: "a".into(), side: tollgate::BreakpointSide::After })
    );
    assert_eq!(runs.get(0), 1, "a ran before the breakpoint after it");

    let second = runtime.block_on(approve(&executor, &graph, run));
    assert_eq!((second.status, second.step), (RunStatus::AwaitingHitl, 1));
    assert_eq!(second.interrupts[0].id, format!("{run}.2.0.before"));
    assert_eq!(
        second.interrupts[0].breakpoint().map(|b| (b.node, b.side)),
        Some(("b".into(), tollgate::BreakpointSide::Before))
    );
    assert_eq!(second.state.visited, ["a"], "a's stored output was merged, a did not run again");
    assert_eq!((runs.get(0), runs.get(1)), (1, 0));

    let done = runtime.block_on(approve(&executor, &graph, run));
    assert_eq!(
        (done.status, done.state.visited.clone()),
        (RunStatus::Completed, vec!["a".to_owned(), "b".to_owned()])
    );
    assert_eq!((runs.get(0), runs.get(1)), (1, 1));
    let unknown = runtime
        .block_on(executor.start(
            &graph,
            Trace::default(),
            RunConfig::new().interrupt_before(["ghost"]),
        ))
        .unwrap_err();
    assert!(matches!(unknown, RunError::UnknownNode { .. }), "{unknown:?}");
}

#[test]
fn a_decision_records_who_made_it_without_changing_what_the_node_sees() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let executor = sqlite(dir.path());
    let runs = Runs::default();
    let graph = asking(&runs, approval()).compile().unwrap();
    let run = runtime.block_on(paused(&executor, &graph)).run_id;
    let (sink, mut events) = EventSink::channel();
    let request = DecisionRequest::new(Decision::Approve).by("erin");
    let resumed =
        runtime.block_on(executor.resume(&graph, run, request, RunConfig::new().events(sink)));
    let done = runtime.block_on(finish(resumed.unwrap()));
    assert_eq!(done.status, RunStatus::Completed);
    // The node gets the decision alone.
    assert_eq!(done.state.tags["decision"], r#"{"decision":"approve"}"#);
    let mut deciders = Vec::new();
    while let Some(event) = events.try_recv() {
        if let Event::RunResumed { decisions, .. } = &event.event {
            deciders.extend(decisions.iter().map(|d| d.decided_by.clone()));
        }
    }
    assert_eq!(deciders, [Some("erin".to_owned())]);
}

#[test]
fn a_node_cannot_pass_its_interrupt_off_as_a_breakpoint() {
    let runtime = support::runtime();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let graph = Graph::new("fake", 1)
        .node("sly", |_s: Arc<Trace>, ctx| async move {
            ctx.interrupt(Interrupt::new(
                tollgate::BREAKPOINT,
                json!({"node": "sly", "when": "before"}),
            ))?;
            Ok(TraceUpdate::default())
        })
        .edge(START, "sly")
        .edge("sly", END)
        .compile()
        .unwrap();
    let failed =
        runtime.block_on(executor.run(&graph, Trace::default(), RunConfig::new())).unwrap_err();
    assert!(failed.to_string().contains("breakpoint"), "{failed}");
    // A node's own interrupt is no breakpoint.
    let runs = Runs::default();
    let asking = asking(&runs, approval()).compile().unwrap();
    let paused = runtime.block_on(paused(&executor, &asking));
    assert_eq!(paused.interrupts[0].breakpoint(), None);
}
