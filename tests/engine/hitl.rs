//! Human in the loop: pause, resume, reject; parallel and repeated
//! interrupts; every refused decision; the double-resume race; resuming
//! after a reopen (breakpoints are in `breakpoints.rs`, time travel in
//! `history.rs`).

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use serde_json::json;
use tollgate::{
    Decision, DecisionError, DecisionKind, DecisionRequest, Event, EventSink, Executor, Interrupt,
    NodeContext, NodeError, Resumed, RunConfig, RunError, RunHandle, RunId, RunOutcome, RunStatus,
    SqliteStore, StoreError, END, START,
};

use crate::support::{self, visit, Graph, Trace, TraceUpdate};

/// Counts how often each node ran.
#[derive(Debug, Default, Clone)]
pub(crate) struct Runs(Arc<[AtomicU32; 4]>);

impl Runs {
    pub(crate) fn bump(&self, slot: usize) {
        self.0[slot].fetch_add(1, Ordering::SeqCst);
    }
    pub(crate) fn get(&self, slot: usize) -> u32 {
        self.0[slot].load(Ordering::SeqCst)
    }
}

/// `ask` asks with `request`, records the decision in `tags`, then `after`
/// runs.
pub(crate) fn asking(runs: &Runs, request: Interrupt) -> Graph {
    let (asked, after) = (runs.clone(), runs.clone());
    Graph::new("hitl", 1)
        .node("ask", move |_s: Arc<Trace>, ctx: NodeContext| {
            let (runs, request) = (asked.clone(), request.clone());
            async move {
                runs.bump(0);
                let decision = ctx.interrupt(request)?;
                let text = serde_json::to_string(&decision).map_err(NodeError::fatal)?;
                Ok(TraceUpdate::default().tags([("decision".to_owned(), text)].into()))
            }
        })
        .node("after", move |_s: Arc<Trace>, _ctx| {
            let runs = after.clone();
            async move {
                runs.bump(1);
                Ok(TraceUpdate::default().visited(vec!["after".into()]))
            }
        })
        .edge(START, "ask")
        .edge("ask", "after")
        .edge("after", END)
}

pub(crate) fn approval() -> Interrupt {
    Interrupt::new("approval", json!({"refund": 20}))
}

pub(crate) fn sqlite(dir: &Path) -> Executor {
    Executor::new(SqliteStore::open(dir.join("hitl.db")).unwrap())
}

pub(crate) async fn paused(
    executor: &Executor,
    graph: &tollgate::CompiledGraph<Trace>,
) -> RunOutcome<Trace> {
    let outcome = executor.run(graph, Trace::default(), RunConfig::new()).await.unwrap();
    assert_eq!(outcome.status, RunStatus::AwaitingHitl);
    outcome
}

/// Approves the run's only pending interrupt and drives the leg in this
/// task (`resume_run`).
pub(crate) async fn approve(
    executor: &Executor,
    graph: &tollgate::CompiledGraph<Trace>,
    run: RunId,
) -> RunOutcome<Trace> {
    let request = DecisionRequest::new(Decision::Approve);
    match executor.resume_run(graph, run, request, RunConfig::new()).await.unwrap() {
        Resumed::Continuing(outcome) => outcome,
        other => panic!("expected the run to continue, got {other:?}"),
    }
}

/// Waits for the leg `resume` spawned.
pub(crate) async fn finish(resumed: Resumed<RunHandle<Trace>>) -> RunOutcome<Trace> {
    match resumed {
        Resumed::Continuing(handle) => handle.wait().await.unwrap(),
        other => panic!("expected the run to continue, got {other:?}"),
    }
}

#[test]
fn pause_then_approve_continues_and_the_node_sees_the_decision() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let executor = sqlite(dir.path());
    let runs = Runs::default();
    let graph = asking(&runs, approval()).compile().unwrap();
    let (sink, mut events) = EventSink::channel();
    let outcome = runtime
        .block_on(executor.run(&graph, Trace::default(), RunConfig::new().events(sink)))
        .unwrap();
    let run = outcome.run_id;
    assert_eq!((outcome.status, outcome.step), (RunStatus::AwaitingHitl, 0));
    assert_eq!(outcome.interrupts.len(), 1);
    let interrupt = &outcome.interrupts[0];
    assert_eq!(interrupt.id, format!("{run}.1.0.0"));
    assert_eq!((interrupt.node.as_str(), interrupt.kind.as_str()), ("ask", "approval"));
    assert_eq!(interrupt.payload, json!({"refund": 20}));

    let record = runtime.block_on(executor.store().run(run)).unwrap();
    assert_eq!(record.status, RunStatus::AwaitingHitl);
    assert_eq!((record.pending_interrupts, record.owner, record.lease_until_ms), (1, None, None));
    let mut kinds = Vec::new();
    while let Some(event) = events.try_recv() {
        kinds.push(event.event.kind());
        if let Event::RunEnded { status, interrupts, .. } = &event.event {
            assert_eq!((*status, interrupts.len()), (RunStatus::AwaitingHitl, 1));
        }
    }
    assert_eq!(kinds, ["run_started", "node_started", "interrupt_raised", "run_ended"]);

    let resumed = runtime
        .block_on(executor.resume(
            &graph,
            run,
            DecisionRequest::new(Decision::Approve),
            RunConfig::new(),
        ))
        .unwrap();
    let done = runtime.block_on(finish(resumed));
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.state.tags["decision"], r#"{"decision":"approve"}"#);
    assert_eq!((runs.get(0), runs.get(1)), (2, 1), "ask re-ran once, after ran once");
    let stored = runtime.block_on(executor.store().events(run, 0, u64::MAX)).unwrap();
    let kinds = support::event_kinds(&stored);
    assert_eq!(
        &kinds[4..6],
        ["run_started", "run_resumed"],
        "the second leg starts with the decision"
    );
    assert_eq!(kinds.last().map(String::as_str), Some("run_ended"));
}

#[test]
fn reject_ends_the_run_unless_the_graph_routes_rejections() {
    let runtime = support::runtime();
    let runs = Runs::default();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let graph = asking(&runs, approval()).compile().unwrap();
    let run = runtime.block_on(paused(&executor, &graph)).run_id;
    let reject = DecisionRequest::new(Decision::Reject { reason: Some("too much".into()) });
    let resumed =
        runtime.block_on(executor.resume_run(&graph, run, reject, RunConfig::new())).unwrap();
    assert!(
        matches!(resumed, Resumed::Rejected(ref outcome) if outcome.status == RunStatus::Rejected),
        "{resumed:?}"
    );
    assert_eq!(runtime.block_on(executor.store().run(run)).unwrap().status, RunStatus::Rejected);
    let again = runtime.block_on(executor.continue_run(&graph, run, RunConfig::new())).unwrap_err();
    assert!(matches!(again, RunError::Store(StoreError::RunTerminal { .. })), "{again:?}");
    let last = runtime.block_on(executor.store().events(run, 0, u64::MAX)).unwrap().pop().unwrap();
    let last: serde_json::Value = serde_json::from_str(&last.json).unwrap();
    assert_eq!(
        (last["status"].as_str(), last["error"]["message"].as_str()),
        (Some("rejected"), Some("too much"))
    );

    let routed_runs = Runs::default();
    let routed = asking(&routed_runs, approval())
        .node("fallback", |_s: Arc<Trace>, _ctx| async move {
            Ok(TraceUpdate::default().visited(vec!["fallback".into()]))
        })
        .edge("fallback", END)
        .on_reject("ask", "fallback")
        .compile()
        .unwrap();
    let run = runtime.block_on(paused(&executor, &routed)).run_id;
    let reject = DecisionRequest::new(Decision::Reject { reason: None });
    let done = runtime.block_on(async {
        finish(executor.resume(&routed, run, reject, RunConfig::new()).await.unwrap()).await
    });
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.state.visited, ["fallback"]);
    assert_eq!(
        (routed_runs.get(0), routed_runs.get(1)),
        (1, 0),
        "ask did not run again; after never ran"
    );
}

/// `split`, then the graph's `left` and `right` at once, then the end.
fn split_in_two(graph: Graph) -> Graph {
    visit(graph, "split")
        .edge(START, "split")
        .edge("split", "left")
        .edge("split", "right")
        .edge("left", END)
        .edge("right", END)
}

#[test]
fn parallel_interrupts_get_distinct_ids_and_each_needs_a_decision() {
    let runtime = support::runtime();
    let runs = Runs::default();
    let (left, right) = (runs.clone(), runs.clone());
    let graph = split_in_two(Graph::new("parallel", 1))
        .node("left", move |_s: Arc<Trace>, ctx: NodeContext| {
            let runs = left.clone();
            async move {
                runs.bump(0);
                ctx.interrupt(Interrupt::new("approval", json!("left")))?;
                Ok(TraceUpdate::default().visited(vec!["left".into()]))
            }
        })
        .node("right", move |_s: Arc<Trace>, ctx: NodeContext| {
            let runs = right.clone();
            async move {
                runs.bump(1);
                ctx.interrupt(Interrupt::new("approval", json!("right")))?;
                Ok(TraceUpdate::default().visited(vec!["right".into()]))
            }
        })
        .compile()
        .unwrap();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let outcome = runtime.block_on(paused(&executor, &graph));
    let run = outcome.run_id;
    let ids: Vec<&str> = outcome.interrupts.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, [format!("{run}.2.0.0"), format!("{run}.2.1.0")]);

    let ambiguous = runtime
        .block_on(executor.decide(run, DecisionRequest::new(Decision::Approve)))
        .unwrap_err();
    assert!(
        matches!(&ambiguous, DecisionError::Ambiguous { pending, .. } if pending.len() == 2),
        "{ambiguous:?}"
    );
    let first = DecisionRequest::on(ids[1], Decision::Approve);
    let waiting =
        runtime.block_on(executor.resume_run(&graph, run, first, RunConfig::new())).unwrap();
    assert!(
        matches!(&waiting, Resumed::Waiting(o) if o.pending.len() == 1 && o.pending[0].id == ids[0]),
        "{waiting:?}"
    );
    // Continuing needs every decision: refused, naming the one still open,
    // and nothing changes.
    let before = runtime.block_on(executor.store().run(run)).unwrap();
    let early = runtime.block_on(executor.continue_run(&graph, run, RunConfig::new())).unwrap_err();
    assert!(
        matches!(&early, RunError::AwaitingDecision { pending, .. } if pending == &[ids[0]]),
        "{early:?}"
    );
    assert_eq!(runtime.block_on(executor.store().run(run)).unwrap(), before);
    let second = DecisionRequest::on(ids[0], Decision::Approve);
    let done = runtime.block_on(async {
        finish(executor.resume(&graph, run, second, RunConfig::new()).await.unwrap()).await
    });
    assert_eq!(done.state.visited, ["split", "left", "right"]);
    assert_eq!((runs.get(0), runs.get(1)), (2, 2));
}

/// One call answers both interrupts of a pause (a map from id to
/// decision): all recorded in one write, or none.
#[test]
fn a_resume_map_answers_several_interrupts_at_once_or_not_at_all() {
    let runtime = support::runtime();
    let asking = |name: &'static str| {
        move |_s: Arc<Trace>, ctx: NodeContext| async move {
            let request = Interrupt::new("question", json!(name))
                .allow([DecisionKind::Respond, DecisionKind::Reject])
                .schema(json!({"type": "integer"}))
                .handle_rejection();
            let answer = match ctx.interrupt(request)? {
                Decision::Respond { value } => format!("{name}={value}"),
                _ => format!("{name} refused"),
            };
            Ok(TraceUpdate::default().visited(vec![answer]))
        }
    };
    let graph = split_in_two(Graph::new("pair", 1))
        .node("left", asking("left"))
        .node("right", asking("right"))
        .compile()
        .unwrap();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let outcome = runtime.block_on(paused(&executor, &graph));
    let run = outcome.run_id;
    let (left, right) = (outcome.interrupts[0].id.clone(), outcome.interrupts[1].id.clone());
    let before = runtime.block_on(executor.store().run(run)).unwrap();
    // One bad answer refuses the whole call: nothing is recorded.
    let bad = DecisionRequest::all([
        (left.clone(), Decision::Respond { value: json!(1) }),
        (right.clone(), Decision::Respond { value: json!("two") }),
    ])
    .unwrap();
    let refused = runtime.block_on(executor.decide(run, bad)).unwrap_err();
    assert!(matches!(refused, DecisionError::InvalidValue { .. }), "{refused:?}");
    let twice = DecisionRequest::all([
        (left.clone(), Decision::Respond { value: json!(1) }),
        (left.clone(), Decision::Respond { value: json!(2) }),
    ])
    .unwrap();
    let refused = runtime.block_on(executor.decide(run, twice)).unwrap_err();
    assert!(matches!(refused, DecisionError::AlreadyAnswered { .. }), "{refused:?}");
    assert_eq!(runtime.block_on(executor.store().run(run)).unwrap(), before, "nothing changed");
    assert!(DecisionRequest::all(Vec::new()).is_none());
    // Both at once: the run continues.
    let both = DecisionRequest::all([
        (left, Decision::Respond { value: json!(1) }),
        (right, Decision::Reject { reason: None }),
    ])
    .unwrap()
    .by("pat");
    let (sink, mut events) = EventSink::channel();
    let resumed =
        runtime.block_on(executor.resume_run(&graph, run, both, RunConfig::new().events(sink)));
    let Ok(Resumed::Continuing(done)) = resumed else { panic!("{resumed:?}") };
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.state.visited, ["split", "left=1", "right refused"]);
    let mut answered = Vec::new();
    while let Some(event) = events.try_recv() {
        if let Event::RunResumed { decisions, .. } = event.event {
            answered.extend(decisions.into_iter().map(|d| (d.id, d.decided_by)));
        }
    }
    assert_eq!(answered.len(), 2, "one resumed leg names both: {answered:?}");
    assert!(answered.iter().all(|(_, by)| by.as_deref() == Some("pat")));
}

#[test]
fn several_interrupts_in_one_node_are_answered_in_order() {
    let runtime = support::runtime();
    let runs = Runs::default();
    let counted = runs.clone();
    let schema =
        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
    let graph = Graph::new("form", 1)
        .node("form", move |_s: Arc<Trace>, ctx: NodeContext| {
            let (runs, schema) = (counted.clone(), schema.clone());
            async move {
                runs.bump(0);
                let first =
                    ctx.interrupt(Interrupt::new("question", json!("who?")).schema(schema))?;
                let second = ctx.interrupt(Interrupt::new("approval", json!("sure?")))?;
                let name =
                    first.value().and_then(|v| v["name"].as_str()).unwrap_or_default().to_owned();
                Ok(TraceUpdate::default().visited(vec![name, format!("{:?}", second.kind())]))
            }
        })
        .edge(START, "form")
        .edge("form", END)
        .compile()
        .unwrap();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let first = runtime.block_on(paused(&executor, &graph));
    let run = first.run_id;
    assert_eq!(first.interrupts[0].id, format!("{run}.1.0.0"));
    let invalid = DecisionRequest::new(Decision::Respond { value: json!({"name": 7}) });
    let error = runtime.block_on(executor.decide(run, invalid)).unwrap_err();
    assert!(matches!(error, DecisionError::InvalidValue { .. }), "{error:?}");
    let answer = DecisionRequest::new(Decision::Respond { value: json!({"name": "Ada"}) });
    let second = runtime.block_on(async {
        match executor.resume(&graph, run, answer, RunConfig::new()).await.unwrap() {
            Resumed::Continuing(handle) => handle.wait().await.unwrap(),
            other => panic!("{other:?}"),
        }
    });
    assert_eq!(second.status, RunStatus::AwaitingHitl);
    assert_eq!(
        second.interrupts[0].id,
        format!("{run}.1.0.1"),
        "the second question has the next ordinal"
    );
    let done = runtime.block_on(approve(&executor, &graph, run));
    assert_eq!(done.state.visited, ["Ada", "Approve"]);
    assert_eq!(runs.get(0), 3, "the node ran three times: two pauses, then through");
}

/// Every row of every table, for byte-for-byte comparisons.
fn dump(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut rows = Vec::new();
    for table in ["runs", "steps", "snapshots", "pending_writes", "interrupts", "events"] {
        let mut stmt = conn.prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2")).unwrap();
        let columns = stmt.column_count();
        let mut query = stmt.query([]).unwrap();
        while let Some(row) = query.next().unwrap() {
            let values: Vec<String> =
                (0..columns).map(|i| format!("{:?}", row.get_ref(i).unwrap())).collect();
            rows.push(format!("{table}: {}", values.join(" | ")));
        }
    }
    rows
}

#[test]
fn refused_decisions_are_typed_and_change_nothing() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hitl.db");
    let executor = sqlite(dir.path());
    let runs = Runs::default();
    let strict = Interrupt::new("question", json!("amount?"))
        .allow([DecisionKind::Respond, DecisionKind::Reject])
        .schema(json!({"type": "integer", "minimum": 0}));
    let graph = asking(&runs, strict).compile().unwrap();
    let run = runtime.block_on(paused(&executor, &graph)).run_id;
    let version = runtime.block_on(executor.store().run(run)).unwrap().epoch;
    let id = format!("{run}.1.0.0");
    let simple =
        visit(Graph::new("simple", 1), "a").edge(START, "a").edge("a", END).compile().unwrap();
    let done = runtime.block_on(executor.run(&simple, Trace::default(), RunConfig::new())).unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let done = done.run_id;

    let cases: Vec<(RunId, DecisionRequest, &str)> = vec![
        (run, DecisionRequest::new(Decision::Approve), "NotAllowed"),
        (run, DecisionRequest::new(Decision::Respond { value: json!(-3) }), "InvalidValue"),
        (run, DecisionRequest::new(Decision::Respond { value: json!("ten") }), "InvalidValue"),
        (run, DecisionRequest::on("nope", Decision::Reject { reason: None }), "InterruptNotFound"),
        (
            run,
            DecisionRequest::new(Decision::Respond { value: json!(3) }).at_version(version + 5),
            "Conflict",
        ),
        (done, DecisionRequest::new(Decision::Approve), "NotPaused"),
        (RunId::new(), DecisionRequest::new(Decision::Approve), "Store"),
    ];
    let before = dump(&path);
    for (target, request, expected) in cases {
        let error = runtime.block_on(executor.decide(target, request)).unwrap_err();
        let kind = format!("{error:?}");
        assert!(kind.starts_with(expected), "expected {expected}, got {kind}");
        if expected == "NotAllowed" {
            // In the words of the CLI and the JSON API, not Rust's.
            let said = error.to_string();
            assert!(said.ends_with("accepts `respond`, `reject`, not `approve`"), "{said}");
        }
    }
    assert_eq!(dump(&path), before, "refused decisions leave every row as it was");

    let answer =
        DecisionRequest::on(&id, Decision::Respond { value: json!(3) }).at_version(version);
    runtime.block_on(executor.decide(run, answer.clone())).unwrap();
    let after = dump(&path);
    let twice = runtime
        .block_on(
            executor.decide(run, DecisionRequest::on(&id, Decision::Respond { value: json!(4) })),
        )
        .unwrap_err();
    assert!(
        matches!(twice, DecisionError::NotPaused { status: RunStatus::Queued, .. }),
        "{twice:?}"
    );
    let stale = runtime.block_on(executor.decide(run, answer)).unwrap_err();
    assert!(matches!(stale, DecisionError::Conflict { .. }), "{stale:?}");
    assert_eq!(dump(&path), after);
}

#[test]
fn of_two_concurrent_resumes_exactly_one_wins_200_times() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    // Two stores on one file: two processes, as far as SQLite can tell.
    let (first, second) = (sqlite(dir.path()), sqlite(dir.path()));
    for round in 0..200 {
        let runs = Runs::default();
        let graph = asking(&runs, approval()).compile().unwrap();
        let run = runtime.block_on(paused(&first, &graph)).run_id;
        let version = runtime.block_on(first.store().run(run)).unwrap().epoch;
        let request = DecisionRequest::new(Decision::Approve).at_version(version);
        let results = runtime.block_on(async {
            let a = first.resume(&graph, run, request.clone(), RunConfig::new());
            let b = second.resume(&graph, run, request.clone(), RunConfig::new());
            let (a, b) = tokio::join!(a, b);
            let mut outcomes = Vec::new();
            for result in [a, b] {
                outcomes.push(match result {
                    Ok(resumed) => Ok(finish(resumed).await.status),
                    Err(error) => Err(error),
                });
            }
            outcomes
        });
        let wins = results.iter().filter(|r| matches!(r, Ok(RunStatus::Completed))).count();
        let conflicts = results
            .iter()
            .filter(|r| matches!(r, Err(RunError::Decision(DecisionError::Conflict { .. }))))
            .count();
        assert_eq!((wins, conflicts), (1, 1), "round {round}: {results:?}");
        assert_eq!(runs.get(1), 1, "round {round}: the next node ran once");
    }
}

#[test]
fn a_decision_from_a_process_without_the_graph_is_picked_up_after_a_reopen() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let runs = Runs::default();
    let graph = asking(&runs, approval()).compile().unwrap();
    let run = runtime.block_on(async { paused(&sqlite(dir.path()), &graph).await.run_id });
    // A reviewer's process: opens the file, decides, knows no graph.
    let outcome = runtime
        .block_on(sqlite(dir.path()).decide(run, DecisionRequest::new(Decision::Approve)))
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Queued);
    // The graph's process, restarted: recover picks the decided run up.
    let executor = sqlite(dir.path());
    let handles = runtime.block_on(executor.recover(&graph, RunConfig::new())).unwrap();
    assert_eq!(handles.len(), 1);
    let done = runtime.block_on(handles.into_iter().next().unwrap().wait()).unwrap();
    assert_eq!((done.run_id, done.status), (run, RunStatus::Completed));
    assert_eq!(runs.get(1), 1);
}
