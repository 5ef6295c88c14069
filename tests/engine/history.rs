//! Time travel: the state at any checkpoint, forks, `update_state` (with
//! and without `as_node`, on the latest or a past checkpoint), and moving a
//! run onto a new graph version.

use std::sync::Arc;

use serde_json::json;
use tollgate::{
    DecisionKind, Event, EventSink, Executor, NodeContext, RunConfig, RunError, RunStatus,
    StoreError, END, START,
};

use crate::hitl::{approval, paused, sqlite};
use crate::support::{self, visit, Graph, Trace, TraceUpdate};

#[test]
fn fork_and_update_state_travel_in_time() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let executor = sqlite(dir.path());
    let graph = support::visits(Graph::new("linear", 1), &["a", "b", "c"])
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .edge("c", END)
        .compile()
        .unwrap();
    let done = runtime.block_on(executor.run(&graph, Trace::default(), RunConfig::new())).unwrap();
    let run = done.run_id;
    assert_eq!(done.state.visited, ["a", "b", "c"]);
    let at_one = runtime.block_on(executor.state_at(&graph, run, 1)).unwrap();
    assert_eq!(at_one.visited, ["a"]);
    let history = runtime.block_on(executor.store().history(run, None, 10)).unwrap();
    assert_eq!(history.checkpoints.iter().map(|c| c.step).collect::<Vec<_>>(), [3, 2, 1, 0]);

    let edit = TraceUpdate::default().visited(vec!["edited".into()]);
    let fork =
        runtime.block_on(executor.fork(&graph, run, 1, Some(edit), RunConfig::new())).unwrap();
    let forked = runtime.block_on(fork.wait()).unwrap();
    assert_ne!(forked.run_id, run);
    assert_eq!(forked.state.visited, ["a", "edited", "b", "c"], "the fork continues from step 1");
    assert_eq!(
        runtime.block_on(executor.state_at(&graph, run, 3)).unwrap().visited,
        ["a", "b", "c"],
        "the source run is unchanged"
    );
    // The fork says where it came from, at every checkpoint, and what it
    // changed; the source says nothing of the kind.
    for step in [Some(0), None] {
        let shown = runtime.block_on(executor.get_state(&graph, forked.run_id, step));
        let origin = shown.unwrap().forked_from.expect("a fork says so");
        assert_eq!(
            (origin.run, origin.step, origin.by, origin.changed),
            (run, 1, None, vec!["visited".to_owned()])
        );
    }
    let origin = runtime.block_on(executor.forked_from(forked.run_id)).unwrap().unwrap();
    assert_eq!((origin.run, origin.step), (run, 1));
    assert_eq!(runtime.block_on(executor.forked_from(run)).unwrap(), None);
    assert!(runtime.block_on(executor.get_state(&graph, run, None)).unwrap().forked_from.is_none());

    // update_state on an interrupted run, as if `b` had written it.
    let gate = support::Gate::closed();
    let held = gate.clone();
    let slow = support::visits(Graph::new("linear", 1), &["b", "c"])
        .node("a", move |_s: Arc<Trace>, _ctx| {
            let held = held.clone();
            async move {
                held.pass().await;
                Ok(TraceUpdate::default().visited(vec!["a".into()]).count(1))
            }
        })
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .edge("c", END)
        .compile()
        .unwrap();
    let (sink, mut events) = EventSink::channel();
    let handle = runtime
        .block_on(executor.start(&slow, Trace::default(), RunConfig::new().events(sink)))
        .unwrap();
    runtime.block_on(async {
        // Cancel while `a` (step 1) is in flight, so step 1 commits.
        while let Some(event) = events.recv().await {
            if matches!(event.event, Event::NodeStarted { step: 1, .. }) {
                break;
            }
        }
    });
    handle.cancel();
    gate.open();
    let paused = runtime.block_on(handle.wait()).unwrap();
    assert_eq!((paused.status, paused.step), (RunStatus::Interrupted, 1));
    let update = TraceUpdate::default().visited(vec!["b-by-hand".into()]);
    let step = runtime
        .block_on(executor.update_state(&slow, paused.run_id, update, Some("b"), RunConfig::new()))
        .unwrap();
    assert_eq!(step, 2);
    let continued =
        runtime.block_on(executor.continue_run(&slow, paused.run_id, RunConfig::new())).unwrap();
    let done = runtime.block_on(continued.wait()).unwrap();
    assert_eq!(
        done.state.visited,
        ["a", "b-by-hand", "c"],
        "after update_state as `b`, `c` runs next"
    );
}

/// `get_state`: values, next nodes, open interrupts with their schema, and
/// the finished sibling of the interrupted task, at the last checkpoint;
/// the values and next nodes of a past one.
#[tokio::test]
async fn get_state_shows_what_a_paused_run_waits_for() {
    let request = approval()
        .allow([DecisionKind::Approve, DecisionKind::Edit])
        .schema(json!({"type": "object", "required": ["refund"]}));
    let graph = visit(visit(Graph::new("state", 1), "pre"), "side")
        .node("ask", move |_s: Arc<Trace>, ctx: NodeContext| {
            let request = request.clone();
            async move {
                ctx.interrupt(request)?;
                Ok(TraceUpdate::default())
            }
        })
        .edge(START, "pre")
        .edge("pre", "ask")
        .edge("pre", "side")
        .edge("ask", END)
        .edge("side", END)
        .compile()
        .unwrap();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let run = paused(&executor, &graph).await.run_id;

    let now = executor.get_state(&graph, run, None).await.unwrap();
    assert_eq!((now.step, now.status), (1, RunStatus::AwaitingHitl));
    assert_eq!(now.values.visited, ["pre"]);
    assert_eq!(now.next, ["ask", "side"]);
    assert_eq!(now.pending_writes, [(1, "side".to_owned())], "side finished; ask did not");
    assert_eq!(now.interrupts.len(), 1);
    assert_eq!(now.interrupts[0].schema, Some(json!({"type": "object", "required": ["refund"]})));
    assert_eq!(now.interrupts[0].decisions, [DecisionKind::Approve, DecisionKind::Edit]);

    let start = executor.get_state(&graph, run, Some(0)).await.unwrap();
    assert_eq!((start.step, start.next.as_slice()), (0, ["pre".to_owned()].as_slice()));
    assert!(start.values.visited.is_empty() && start.interrupts.is_empty());
    assert!(start.pending_writes.is_empty());
    let error = executor.get_state(&graph, run, Some(9)).await.unwrap_err();
    assert!(matches!(error, RunError::Store(StoreError::CheckpointNotFound { step: 9, .. })));
}

/// `update_state` without `as_node` takes the node that wrote the latest
/// checkpoint (refusing when several did); `update_state_at` edits a past
/// checkpoint into a queued fork.
#[test]
fn update_state_infers_the_writer_and_forks_past_checkpoints() {
    let runtime = support::runtime();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let linear = support::visits(Graph::new("line", 1), &["a", "b", "c"])
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .edge("c", END)
        .compile()
        .unwrap();
    let paused = runtime
        .block_on(executor.run(&linear, Trace::default(), RunConfig::new().interrupt_before(["c"])))
        .unwrap();
    assert_eq!((paused.status, paused.step), (RunStatus::AwaitingHitl, 2));
    let edit = TraceUpdate::default().visited(vec!["edit".into()]);
    let step = runtime
        .block_on(executor.update_state(&linear, paused.run_id, edit, None, RunConfig::new()))
        .unwrap();
    assert_eq!(step, 3);
    let continued =
        runtime.block_on(executor.continue_run(&linear, paused.run_id, RunConfig::new()));
    let done = runtime.block_on(continued.unwrap().wait()).unwrap();
    assert_eq!(done.state.visited, ["a", "b", "edit", "c"], "written as `b`: `c` runs next");

    // A past checkpoint: a fork, queued, the source unchanged.
    let before = runtime.block_on(executor.state_at(&linear, done.run_id, 1)).unwrap();
    let edit = TraceUpdate::default().visited(vec!["past".into()]);
    let by_ann = RunConfig::new().by("ann");
    let fork = runtime
        .block_on(executor.update_state_at(&linear, done.run_id, 1, edit, None, by_ann))
        .unwrap();
    assert_eq!(runtime.block_on(executor.store().run(fork)).unwrap().status, RunStatus::Queued);
    let forked = runtime.block_on(executor.continue_run(&linear, fork, RunConfig::new()));
    let forked = runtime.block_on(forked.unwrap().wait()).unwrap();
    assert_eq!(forked.state.visited, ["a", "past", "b", "c"], "written as `a` (it wrote step 1)");
    // Run to its end, it still says where it came from, who forked it
    // and what changed.
    let origin = runtime.block_on(executor.forked_from(fork)).unwrap().expect("a fork");
    assert_eq!(
        (origin.run, origin.step, origin.by.as_deref(), origin.changed),
        (done.run_id, 1, Some("ann"), vec!["visited".to_owned()])
    );
    assert_eq!(runtime.block_on(executor.state_at(&linear, done.run_id, 1)).unwrap(), before);
    // The input: written as `__start__`, the graph runs from its entry.
    let edit = TraceUpdate::default().visited(vec!["first".into()]);
    let fork = runtime
        .block_on(executor.update_state_at(&linear, done.run_id, 0, edit, None, RunConfig::new()))
        .unwrap();
    let forked = runtime.block_on(executor.continue_run(&linear, fork, RunConfig::new()));
    let forked = runtime.block_on(forked.unwrap().wait()).unwrap();
    assert_eq!(forked.state.visited, ["first", "a", "b", "c"]);

    // Two nodes wrote the latest checkpoint: which one is not clear.
    let fan = support::visits(Graph::new("fan", 1), &["a", "b", "c", "d"])
        .edge(START, "a")
        .edge("a", "b")
        .edge("a", "c")
        .join(["b", "c"], "d")
        .edge("d", END)
        .compile()
        .unwrap();
    let paused = runtime
        .block_on(executor.run(&fan, Trace::default(), RunConfig::new().interrupt_before(["d"])))
        .unwrap();
    let ambiguous = runtime.block_on(executor.update_state(
        &fan,
        paused.run_id,
        TraceUpdate::default(),
        None,
        RunConfig::new(),
    ));
    match ambiguous {
        Err(RunError::AmbiguousWriter { nodes, .. }) => assert_eq!(nodes, ["b", "c"]),
        other => panic!("{other:?}"),
    }
    runtime
        .block_on(executor.update_state(
            &fan,
            paused.run_id,
            TraceUpdate::default().visited(vec!["c-by-hand".into()]),
            Some("c"),
            RunConfig::new(),
        ))
        .unwrap();
    // Written as `c`, a source of the join that fired: `d` runs next, as
    // LangGraph's barrier still holds both arrivals until `d` runs.
    let state = runtime.block_on(executor.get_state(&fan, paused.run_id, None)).unwrap();
    assert_eq!(state.next, ["d"], "an update as a join source schedules the join's target");
    let continued = runtime.block_on(executor.continue_run(&fan, paused.run_id, RunConfig::new()));
    let done = runtime.block_on(continued.unwrap().wait()).unwrap();
    assert_eq!(done.state.visited, ["a", "b", "c", "c-by-hand", "d"]);
}

/// A run of version 1 moves onto version 2 explicitly; continuing it on
/// version 2 directly is refused, and a version without its next node
/// cannot take it.
#[test]
fn a_run_migrates_onto_a_new_graph_version_explicitly() {
    let runtime = support::runtime();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let version = |v: u32, last: &'static str| {
        support::visits(Graph::new("flow", v), &["a", "b", last])
            .edge(START, "a")
            .edge("a", "b")
            .edge("b", last)
            .edge(last, END)
            .compile()
            .unwrap()
    };
    let (v1, v2) = (version(1, "c"), version(2, "d"));
    // Stopped after `a` by its budget: `b` is next.
    let stopped = runtime
        .block_on(executor.run(&v1, Trace::default(), RunConfig::new().thread("t").max_steps(1)))
        .unwrap_err();
    assert!(matches!(stopped, RunError::StepLimitExceeded { .. }), "{stopped:?}");
    let run =
        runtime.block_on(executor.store().list_runs(&Default::default(), &Default::default()));
    let run = run.unwrap().runs[0].id;
    let mismatch = runtime.block_on(executor.continue_run(&v2, run, RunConfig::new())).unwrap_err();
    assert!(matches!(mismatch, RunError::GraphMismatch { .. }), "{mismatch:?}");
    let migrated =
        runtime.block_on(executor.migrate(&v1, &v2, run, RunConfig::new().max_steps(10))).unwrap();
    let record = runtime.block_on(executor.store().run(migrated)).unwrap();
    assert_eq!(
        (record.status, record.graph.version, record.thread.as_deref()),
        (RunStatus::Queued, 2, Some("t"))
    );
    let handle = runtime.block_on(executor.continue_run(&v2, migrated, RunConfig::new())).unwrap();
    let done = runtime.block_on(handle.wait()).unwrap();
    assert_eq!(done.state.visited, ["a", "b", "d"], "from `b` on, on version 2");
    // A version without `b` cannot take the run.
    let v3 = support::visits(Graph::new("flow", 3), &["a", "z"])
        .edge(START, "a")
        .edge("a", "z")
        .edge("z", END)
        .compile()
        .unwrap();
    let missing = runtime.block_on(executor.migrate(&v1, &v3, run, RunConfig::new())).unwrap_err();
    assert!(
        matches!(missing, RunError::UnknownStoredNode { ref node, .. } if node == "b"),
        "{missing:?}"
    );
}

/// A state update at a breakpoint, then go on: the breakpoint already
/// honoured does not pause the run again ("fix it and go on", as in
/// LangGraph), on a join whose source the update is written as; a later
/// visit of the node pauses as before.
#[test]
fn a_breakpoint_already_honoured_does_not_pause_again_after_an_update() {
    let runtime = support::runtime();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let joined = support::visits(Graph::new("joined", 1), &["p", "q", "j"])
        .edge(START, "p")
        .edge(START, "q")
        .join(["p", "q"], "j")
        .edge("j", END)
        .interrupt_before(["j"])
        .compile()
        .unwrap();
    let paused =
        runtime.block_on(executor.run(&joined, Trace::default(), RunConfig::new())).unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingHitl);
    let edit = TraceUpdate::default().visited(vec!["fixed".into()]);
    runtime
        .block_on(executor.update_state(&joined, paused.run_id, edit, Some("q"), RunConfig::new()))
        .unwrap();
    let continued =
        runtime.block_on(executor.continue_run(&joined, paused.run_id, RunConfig::new()));
    let done = runtime.block_on(continued.unwrap().wait()).unwrap();
    assert_eq!(done.status, RunStatus::Completed, "j runs: its breakpoint was honoured");
    assert_eq!(done.state.visited.last().map(String::as_str), Some("j"));

    // A new run of the graph still pauses before `j`.
    let again =
        runtime.block_on(executor.run(&joined, Trace::default(), RunConfig::new())).unwrap();
    assert_eq!(again.status, RunStatus::AwaitingHitl);
}

/// `update_state_and_continue` and `goto_and_continue`: the write and the
/// takeover are one claim. While the leg runs, the run is `running` under
/// this process (never `interrupted`), another continue is refused, and
/// the leg's events follow the write's.
#[test]
fn a_write_continued_at_once_is_never_seen_stopped() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let executor = sqlite(dir.path());
    let gate = support::Gate::closed();
    let held = gate.clone();
    let graph = support::visits(Graph::new("line", 1), &["a", "b"])
        .node("c", move |_s: Arc<Trace>, _ctx| {
            let held = held.clone();
            async move {
                held.pass().await;
                Ok(TraceUpdate::default().visited(vec!["c".into()]))
            }
        })
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .edge("c", END)
        .compile()
        .unwrap();
    let before_c = || RunConfig::new().interrupt_before(["c"]);
    let paused = runtime.block_on(executor.run(&graph, Trace::default(), before_c())).unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingHitl);
    let run = paused.run_id;

    let edit = TraceUpdate::default().visited(vec!["edit".into()]);
    let config = RunConfig::new().by("ann");
    let continued = runtime
        .block_on(executor.update_state_and_continue(&graph, run, edit, Some("b"), config))
        .unwrap();
    assert_eq!(continued.step, 3);
    let record = runtime.block_on(executor.store().run(run)).unwrap();
    assert_eq!(record.status, RunStatus::Running, "claimed from the write on");
    let again = runtime.block_on(executor.continue_run(&graph, run, RunConfig::new()));
    assert!(matches!(again, Err(RunError::RunOwned { .. })), "{again:?}");
    gate.open();
    let done = runtime.block_on(continued.leg.wait()).unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.state.visited, ["a", "b", "edit", "c"], "the breakpoint honoured once");
    let events = runtime.block_on(executor.store().events(run, continued.last_seq, 100)).unwrap();
    let first = events.first().expect("the leg's events");
    assert_eq!(first.seq, continued.last_seq + 1);
    assert!(first.json.contains("\"run_started\""), "{}", first.json);

    // `goto` nowhere (`__end__`): the paused run completes as it is, its
    // question dropped.
    let asking = support::visits(Graph::new("asking", 1), &["a"])
        .node("ask", |_s: Arc<Trace>, ctx: NodeContext| async move {
            ctx.interrupt(approval())?;
            Ok(TraceUpdate::default().visited(vec!["ask".into()]))
        })
        .edge(START, "a")
        .edge("a", "ask")
        .edge("ask", END)
        .compile()
        .unwrap();
    let paused = runtime.block_on(crate::hitl::paused(&executor, &asking));
    let update = TraceUpdate::default().visited(vec!["resolved".into()]);
    let continued = runtime
        .block_on(executor.goto_and_continue(
            &asking,
            paused.run_id,
            Some(update),
            &[],
            RunConfig::new(),
        ))
        .unwrap();
    let done = runtime.block_on(continued.leg.wait()).unwrap();
    assert_eq!(
        (done.status, done.state.visited),
        (RunStatus::Completed, vec!["a".into(), "resolved".into()])
    );
    let record = runtime.block_on(executor.store().run(paused.run_id)).unwrap();
    assert_eq!((record.status, record.pending_interrupts), (RunStatus::Completed, 0));
    // A node that is not there is refused before anything is written.
    let paused = runtime.block_on(crate::hitl::paused(&executor, &asking));
    let unknown = runtime
        .block_on(executor.goto_and_continue(
            &asking,
            paused.run_id,
            None,
            &["nowhere"],
            RunConfig::new(),
        ))
        .unwrap_err();
    assert!(matches!(unknown, RunError::UnknownNode { .. }), "{unknown:?}");
    let record = runtime.block_on(executor.store().run(paused.run_id)).unwrap();
    assert_eq!(record.status, RunStatus::AwaitingHitl);
}
