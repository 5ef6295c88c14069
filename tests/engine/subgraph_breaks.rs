//! Subgraphs drawn nested, and a subgraph's breakpoint pausing the run (the
//! rest of the subgraph cases are in `subgraph.rs`).

use std::sync::Arc;

use tollgate::{
    Decision, DecisionRequest, Executor, MemoryStore, Resumed, RunConfig, RunStatus, StateGraph,
    END, START,
};

use crate::subgraph::{from_inner, into_inner, looping, parent, Inner, InnerUpdate, Log};
use crate::support::{self, Graph, Trace};

#[test]
fn drawings_show_subgraphs_nested() {
    let graph = parent(looping(2, &Log::default(), None));
    let mermaid = graph.to_mermaid();
    for line in [
        "    subgraph n3[\"sub\"]",
        "        n3_0([\"__start__\"])",
        "        n3_2[\"work\"]",
        "        n3_0 --> n3_2",
        "        n3_2 -.-> n3_1",
        "    end",
        "    n2 --> n3",
    ] {
        assert!(mermaid.contains(&format!("{line}\n")), "missing `{line}` in\n{mermaid}");
    }
    let dot = graph.to_dot();
    for line in [
        "    subgraph \"cluster_sub\" {",
        "        label=\"sub (loop)\";",
        "        \"sub/work\" [shape=box];",
        "        \"sub/__start__\" -> \"sub/work\";",
        "    \"sub\" -> \"sub/__start__\" [style=dotted];",
        "    \"a\" -> \"sub\";",
    ] {
        assert!(dot.contains(&format!("{line}\n")), "missing `{line}` in\n{dot}");
    }
}

#[test]
fn a_breakpoint_of_the_subgraph_pauses_the_run_and_an_approval_passes_it() {
    let runtime = support::runtime();
    let inner = StateGraph::<Inner>::new("guarded", 1)
        .node("work", |_s: Arc<Inner>, _ctx| async move {
            Ok(InnerUpdate::default().done(vec!["worked".into()]))
        })
        .edge(START, "work")
        .edge("work", END)
        .interrupt_before(["work"])
        .compile()
        .unwrap();
    let graph = Graph::new("outer", 1)
        .subgraph("sub", inner, into_inner, from_inner)
        .edge(START, "sub")
        .edge("sub", END)
        .compile()
        .unwrap();
    let executor = Executor::new(MemoryStore::new());
    let paused =
        runtime.block_on(executor.run(&graph, Trace::default(), RunConfig::new())).unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingHitl);
    let point = paused.interrupts[0].breakpoint().expect("a typed breakpoint");
    assert_eq!((point.node.as_str(), point.side), ("sub/work", tollgate::BreakpointSide::Before));
    assert_eq!(paused.interrupts[0].node, "sub/work");
    let request = DecisionRequest::new(Decision::Approve);
    let resumed = runtime
        .block_on(executor.resume_run(&graph, paused.run_id, request, RunConfig::new()))
        .unwrap();
    let Resumed::Continuing(done) = resumed else { panic!("the run continues") };
    assert_eq!(
        (done.status, done.state.visited.clone()),
        (RunStatus::Completed, vec!["worked".to_owned()])
    );
}
