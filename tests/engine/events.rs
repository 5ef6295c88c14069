//! The event log: gap-free sequence, bookends, stored equals live.

use std::sync::Arc;

use tollgate::{
    Clock, Event, EventEnvelope, Executor, MemoryStore, RunConfig, RunId, RunStatus, END, START,
};

use serde_json::json;
use tollgate::EmitError;

use crate::support::{self, visits, Graph, Trace, TraceUpdate};

fn graph() -> tollgate::CompiledGraph<Trace> {
    visits(Graph::new("events", 1), &["a", "b", "c", "d"])
        .edge(START, "a")
        .edge("a", "b")
        .edge("a", "c")
        .join(["b", "c"], "d")
        .edge("d", END)
        .compile()
        .unwrap()
}

/// A clock that never moves.
#[derive(Debug)]
struct Fixed;

impl Clock for Fixed {
    fn now_ms(&self) -> i64 {
        1_795_937_988_000
    }
}

async fn stored(executor: &Executor, run: RunId) -> Vec<EventEnvelope> {
    let records = executor.store().events(run, 0, u64::MAX).await.unwrap();
    records.iter().map(|record| serde_json::from_str(&record.json).unwrap()).collect()
}

#[test]
fn a_run_logs_every_transition_in_order() {
    let runtime = support::runtime();
    let executor = Executor::new(MemoryStore::new());
    let run = RunId::from_parts(1_795_937_988_000, 42);
    let config = RunConfig::new().clock(Arc::new(Fixed)).run_id(run);
    let (result, live) = runtime.block_on(support::run_with_events(&executor, &graph(), config));
    result.unwrap();

    let kinds: Vec<(u64, &str, Option<&str>)> =
        live.iter().map(|e| (e.seq, e.event.kind(), e.node_id.as_deref())).collect();
    assert_eq!(
        kinds,
        [
            (1, "run_started", None),
            (2, "node_started", Some("a:1.0")),
            (3, "node_completed", Some("a:1.0")),
            (4, "checkpoint_saved", None),
            (5, "node_started", Some("b:2.0")),
            (6, "node_started", Some("c:2.1")),
            (7, "node_completed", Some("b:2.0")),
            (8, "node_completed", Some("c:2.1")),
            (9, "checkpoint_saved", None),
            (10, "node_started", Some("d:3.0")),
            (11, "node_completed", Some("d:3.0")),
            (12, "checkpoint_saved", None),
            (13, "run_ended", None),
        ]
    );
    let last = live.last().unwrap();
    let Event::RunEnded {
        status: RunStatus::Completed,
        step: 3,
        result: Some(result),
        error: None,
        interrupts,
    } = &last.event
    else {
        panic!("unexpected closing event {last:?}")
    };
    assert!(interrupts.is_empty());
    assert_eq!(result["visited"], serde_json::json!(["a", "b", "c", "d"]));
    assert!(live.iter().all(|e| e.run_id == run && e.ts == "2026-11-29T07:39:48.000Z" && e.v == 1));

    let stored = runtime.block_on(stored(&executor, run));
    assert_eq!(stored, live, "the stored log is the live log");
}

#[test]
fn node_completed_carries_the_update_as_json() {
    let runtime = support::runtime();
    let executor = Executor::new(MemoryStore::new());
    let (_, live) =
        runtime.block_on(support::run_with_events(&executor, &graph(), RunConfig::new()));
    let line = serde_json::to_value(&live[2]).unwrap();
    assert_eq!(line["event_type"], "node_completed");
    assert_eq!(line["node"], "a");
    assert_eq!(line["update"], serde_json::json!({"visited": ["a"], "count": 1}));
    assert!(line.get("reused").is_none(), "false flags are omitted: {line}");
}

#[test]
fn nodes_emit_harness_events_between_their_bookends_and_may_not_forge_the_executors() {
    let runtime = support::runtime();
    let executor = Executor::new(MemoryStore::new());
    let graph = Graph::new("emit", 1)
        .node("a", |_, ctx: tollgate::NodeContext| async move {
            let custom = Event::Custom { name: "progress".into(), payload: json!({"done": 1}) };
            ctx.emit(custom)?;
            let forged = Event::NodeStarted { step: 9, task: 9 };
            let refused = ctx.emit(forged).expect_err("executor events are reserved");
            assert!(matches!(refused, EmitError::Reserved { kind: "node_started" }), "{refused}");
            let retry = Event::RetryScheduled {
                step: 1,
                task: 0,
                attempt: 1,
                delay_ms: 0,
                error: "429".into(),
                call_id: None,
            };
            assert!(ctx.emit(retry).is_err(), "node retries are the executor's");
            Ok(TraceUpdate::default().count(1))
        })
        .edge(START, "a")
        .edge("a", END)
        .compile()
        .unwrap();
    let attachment = json!({"blueprint": {"name": "x"}});
    let config = RunConfig::new().attach(&attachment);
    let (result, live) = runtime.block_on(support::run_with_events(&executor, &graph, config));
    let run = result.unwrap().run_id;
    let kinds: Vec<(u64, &str)> = live.iter().map(|e| (e.seq, e.event.kind())).collect();
    assert_eq!(
        kinds,
        [
            (1, "run_started"),
            (2, "node_started"),
            (3, "custom"),
            (4, "node_completed"),
            (5, "checkpoint_saved"),
            (6, "run_ended")
        ]
    );
    assert_eq!(live[2].node_id.as_deref(), Some("a:1.0"));
    assert_eq!(runtime.block_on(stored(&executor, run)), live, "emitted events are stored");
    let attached = runtime.block_on(executor.attachment(run)).unwrap();
    assert_eq!(attached, Some(attachment), "the attachment is kept with the run");
}

#[test]
fn past_the_cap_detail_events_are_dropped_once_marked_and_the_rest_kept() {
    let runtime = support::runtime();
    let executor = Executor::new(MemoryStore::new());
    let graph = Graph::new("chatty", 1)
        .node("talk", |_, ctx: tollgate::NodeContext| async move {
            for n in 0..50 {
                ctx.emit(Event::Custom { name: "tick".into(), payload: json!(n) })?;
            }
            Ok(TraceUpdate::default().count(1))
        })
        .edge(START, "talk")
        .route("talk", ["talk", END], |s: &Trace| {
            if s.count < 2 {
                tollgate::Route::to("talk")
            } else {
                tollgate::Route::end()
            }
        })
        .compile()
        .unwrap();
    let config = RunConfig::new().event_cap(10);
    let (result, live) = runtime.block_on(support::run_with_events(&executor, &graph, config));
    let run = result.unwrap().run_id;
    let stored = runtime.block_on(stored(&executor, run));
    assert_eq!(stored, live, "live and stored agree past the cap");
    let seqs: Vec<u64> = stored.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=stored.len() as u64).collect::<Vec<_>>(), "gap-free");
    let customs = stored.iter().filter(|e| e.event.kind() == "custom").count();
    assert_eq!(customs, 10 - 2, "customs fill the cap after run_started and node_started");
    let capped: Vec<&EventEnvelope> =
        stored.iter().filter(|e| e.event.kind() == "events_capped").collect();
    assert_eq!(capped.len(), 1, "marked once per leg");
    assert_eq!(capped[0].event, Event::EventsCapped { cap: 10 });
    let after: Vec<&str> = stored
        .iter()
        .skip_while(|e| e.event.kind() != "events_capped")
        .skip(1)
        .map(|e| e.event.kind())
        .collect();
    assert_eq!(
        after,
        [
            "node_completed",
            "checkpoint_saved",
            "node_started",
            "node_completed",
            "checkpoint_saved",
            "run_ended"
        ],
        "lifecycle events are always kept"
    );
}

#[test]
fn stream_modes_filter_the_one_stream() {
    use tollgate::StreamMode;
    let runtime = support::runtime();
    let executor = Executor::new(MemoryStore::new());
    let (_, live) =
        runtime.block_on(support::run_with_events(&executor, &graph(), RunConfig::new()));
    let kinds = |mode: StreamMode| -> Vec<&str> {
        live.iter().filter(|e| mode.accepts(&e.event)).map(|e| e.event.kind()).collect()
    };
    assert_eq!(kinds(StreamMode::Final), ["run_ended"]);
    assert_eq!(kinds(StreamMode::Events).len(), live.len());
    assert_eq!(kinds(StreamMode::Tools), ["run_started", "run_ended"], "no tools in this graph");
    let updates = kinds(StreamMode::Updates);
    assert!(updates.contains(&"node_completed") && !updates.contains(&"node_started"));
    assert_eq!("updates".parse::<StreamMode>(), Ok(StreamMode::Updates));
    assert!("everything".parse::<StreamMode>().is_err());
}

/// A failed run says what class of failure it was as data: the class its
/// node's error names, else the engine's kind; in the record and in
/// `run_ended`.
#[tokio::test]
async fn failures_carry_their_class() {
    let classed = Graph::new("classed", 1)
        .node("call", |_s: Arc<Trace>, _ctx| async move {
            Err::<TraceUpdate, _>(tollgate::NodeError::fatal("quota spent").with_class("quota"))
        })
        .edge(START, "call")
        .edge("call", END);
    let plain = support::failing(Graph::new("plain", 1), "call", "boom")
        .edge(START, "call")
        .edge("call", END);
    let looping = visits(Graph::new("looping", 1), &["a"]).edge(START, "a").route(
        "a",
        ["a", END],
        |_: &Trace| tollgate::Route::to("a"),
    );
    let cases = [
        (classed, 10, "node_failed", "quota"),
        (plain, 10, "node_failed", "node_failed"),
        (looping, 3, "step_limit_exceeded", "step_limit_exceeded"),
    ];
    for (graph, max_steps, kind, class) in cases {
        let graph = graph.compile().unwrap();
        let executor = Executor::new(MemoryStore::new());
        let (result, events) =
            support::run_with_events(&executor, &graph, RunConfig::new().max_steps(max_steps))
                .await;
        let error = result.expect_err(class);
        assert_eq!((error.kind(), error.class()), (kind, class));
        let Some(Event::RunEnded { error: Some(failure), .. }) = events.last().map(|e| &e.event)
        else {
            panic!("{class}: no failure in run_ended: {:?}", events.last());
        };
        assert_eq!((failure.kind.as_str(), failure.class.as_deref()), (kind, Some(class)));
        let record = executor.store().run(events[0].run_id).await.unwrap();
        assert_eq!(record.failure.as_ref(), Some(failure), "{class}: stored as sent");
    }
}

/// A run that could not be stored was never started: its `run_started`
/// reaches no one (here: the id is taken; in life, a full disk).
#[tokio::test]
async fn a_run_that_was_never_stored_announces_nothing() {
    let executor = Executor::new(MemoryStore::new());
    let run = RunId::new();
    let config = || RunConfig::new().run_id(run);
    executor.run(&graph(), Trace::default(), config()).await.unwrap();
    let (result, events) = support::run_with_events(&executor, &graph(), config()).await;
    let error = result.expect_err("the id is taken");
    assert!(
        matches!(error, tollgate::RunError::Store(tollgate::StoreError::RunExists { .. })),
        "{error:?}"
    );
    assert!(events.is_empty(), "nothing was announced: {events:?}");
}

/// A route may fail: the run fails with the routing node and the cause, as
/// data, and keeps the checkpoint of the step before.
#[tokio::test]
async fn a_failing_route_fails_the_run_with_its_node_and_cause() {
    let graph = visits(Graph::new("routed", 1), &["a", "b"])
        .edge(START, "a")
        .try_route("a", ["b", END], |state: &Trace| match state.last.as_deref() {
            Some(_) => Ok(tollgate::Route::to("b")),
            None => {
                Err(tollgate::NodeError::fatal("no `last` to route on").with_class("missing_input"))
            }
        })
        .edge("b", END)
        .compile()
        .unwrap();
    let executor = Executor::new(MemoryStore::new());
    let (result, events) = support::run_with_events(&executor, &graph, RunConfig::new()).await;
    let error = result.expect_err("the route fails");
    assert!(
        matches!(&error, tollgate::RunError::RouteFailed { node, .. } if node == "a"),
        "{error:?}"
    );
    assert_eq!((error.kind(), error.class()), ("route_failed", "missing_input"));
    assert!(error.to_string().contains("no `last` to route on"), "{error}");
    let record = executor.store().run(events[0].run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Failed);
    let failure = record.failure.unwrap();
    assert_eq!((failure.kind.as_str(), failure.node.as_deref()), ("route_failed", Some("a")));
    assert!(
        !events.iter().any(|e| e.node_id.as_deref().is_some_and(|n| n.starts_with("b:"))),
        "b never ran"
    );
}

#[test]
fn announced_events_follow_run_started_in_the_same_commit() {
    let runtime = support::runtime();
    let executor = Executor::new(MemoryStore::new());
    let pack = Event::PackRun {
        bundle_hash: "ab".repeat(32),
        signature_verified: true,
        key_id: Some("0123456789abcdef".into()),
        cache_hit: false,
        dry_run_verify: false,
    };
    let config = RunConfig::new()
        .announce(pack.clone())
        // The executor's own kinds are not taken.
        .announce(Event::CheckpointSaved { step: 9, tasks: 1, snapshot: false });
    let (result, live) = runtime.block_on(support::run_with_events(&executor, &graph(), config));
    let run = result.unwrap().run_id;
    let stored = runtime.block_on(stored(&executor, run));
    assert_eq!(stored.len(), live.len(), "stored as sent");
    assert_eq!((stored[0].event.kind(), &stored[1].event), ("run_started", &pack));
    assert_eq!(stored[2].event.kind(), "node_started");
    assert_eq!(stored.iter().filter(|e| matches!(e.event, Event::PackRun { .. })).count(), 1);
    assert!(stored.iter().all(|e| !matches!(e.event, Event::CheckpointSaved { step: 9, .. })));
}

/// Updates of 512 bytes and more are stored once, in their step's record:
/// the stored `node_completed` line leaves them out and the store puts
/// them back, so what is read is byte for byte what was emitted. A step
/// that pauses keeps its finished siblings' updates in its lines (they
/// are pending writes, not a step's record).
#[test]
fn large_updates_are_stored_once_and_read_back_whole() {
    use tollgate::{Decision, DecisionRequest, Interrupt, Resumed, SqliteStore};
    let big = |name: &str| format!("{name}:{}", "é\"\\x".repeat(300));
    let graph = Graph::new("big", 1)
        .node("a", move |_s: Arc<Trace>, _ctx| async move {
            Ok(TraceUpdate::default().visited(vec![big("a")]))
        })
        .node("b", move |_s: Arc<Trace>, _ctx| async move {
            Ok(TraceUpdate::default().visited(vec![big("b")]))
        })
        .node("ask", |_s: Arc<Trace>, ctx: tollgate::NodeContext| async move {
            ctx.interrupt(Interrupt::new("approval", json!({})))?;
            Ok(TraceUpdate::default().count(1))
        })
        .node("small", |_s: Arc<Trace>, _ctx| async move {
            Ok(TraceUpdate::default().visited(vec!["small".to_owned()]))
        })
        .edge(START, "a")
        .edge("a", "b")
        .edge("a", "ask")
        .join(["b", "ask"], "small")
        .edge("small", END)
        .compile()
        .unwrap();
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.db");
    let executor = Executor::new(SqliteStore::open(&path).unwrap());
    let (result, mut live) =
        runtime.block_on(support::run_with_events(&executor, &graph, RunConfig::new()));
    let run = result.unwrap().run_id;
    let (sink, mut stream) = tollgate::EventSink::channel();
    let request = DecisionRequest::new(Decision::Approve);
    let resumed = runtime
        .block_on(executor.resume_run(&graph, run, request, RunConfig::new().events(sink)))
        .unwrap();
    assert!(matches!(resumed, Resumed::Continuing(ref o) if o.status == RunStatus::Completed));
    while let Some(event) = stream.try_recv() {
        live.push(event);
    }
    let records = runtime.block_on(executor.store().events(run, 0, u64::MAX)).unwrap();
    let lines: Vec<String> = records.iter().map(|r| r.json.clone()).collect();
    let emitted: Vec<String> = live.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
    assert_eq!(lines, emitted, "read back byte for byte");
    let updates_of_b = lines
        .iter()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["update"]["visited"][0] == json!(big("b")))
        .count();
    // Before the pause, and again (reused) when the step committed.
    assert_eq!(updates_of_b, 2, "b's node_completed events, read back with their update");

    // On disk: step 1 (a) left its update to the step's record; step 2
    // paused with b finished (its update kept in the pause's lines) and
    // was committed on resume, leaving b's update out.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mut stmt = conn.prepare("SELECT events FROM steps ORDER BY id").unwrap();
    let steps: Vec<String> =
        stmt.query_map([], |row| row.get::<_, String>(0)).unwrap().map(Result::unwrap).collect();
    let completed: Vec<&str> = steps
        .iter()
        .flat_map(|events| events.lines())
        .filter(|line| line.contains("|node_completed|"))
        .collect();
    assert_eq!(completed.len(), 4, "a, b (reused), ask, small");
    assert!(
        completed.iter().all(|line| !line.contains("a:é") && !line.contains("b:é")),
        "the committed steps' node_completed lines leave their updates to the step's record"
    );
    assert!(steps.iter().any(|events| events.contains("\"update_in_step\":true")));
    assert!(
        steps.iter().flat_map(|events| events.lines()).all(|line| line.starts_with("~1|")),
        "engine lines are stored by fields, without the head every line of the run repeats"
    );
    assert!(
        steps.iter().flat_map(|events| events.lines()).any(|line| line.starts_with("~1|=|")),
        "a line at the time of the line before it is stored without it"
    );
    assert!(
        steps.iter().flat_map(|events| events.lines()).any(|line| line.contains("|+|")),
        "a node instance named after its node, step and task is stored without it"
    );
    assert!(
        steps.iter().flat_map(|events| events.lines()).all(|line| !line.contains("\"seq\"")),
        "sequence numbers are the rows'"
    );
    let mut stmt = conn.prepare("SELECT lines FROM events").unwrap();
    let paused: Vec<String> =
        stmt.query_map([], |row| row.get::<_, String>(0)).unwrap().map(Result::unwrap).collect();
    assert!(paused.iter().any(|lines| lines.contains("b:é")), "the pause keeps b's update");
}
