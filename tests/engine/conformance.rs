//! State-graph conformance: routing, fork/merge, cycle guard, cancellation
//! and error propagation, as data.

use std::sync::Arc;

use serde_json::json;
use tollgate::{
    Command, Event, EventSink, Executor, MemoryStore, Route, RunConfig, RunError, RunStatus, Send,
    END, START,
};

use crate::support::{self, failing, visit, visits, Gate, Graph, Trace, TraceUpdate};

/// What a routing case must end with.
enum Expect {
    /// Completed after `steps` steps with `visited` in merge order.
    Completed { visited: &'static [&'static str], steps: u64 },
    /// Failed with this error kind at this node.
    Failed { kind: &'static str, node: &'static str },
}

struct Case {
    name: &'static str,
    graph: fn() -> Graph,
    max_steps: u64,
    expect: Expect,
}

fn check(cases: &[Case]) {
    let runtime = support::runtime();
    for case in cases {
        let result = runtime.block_on(support::run((case.graph)(), case.max_steps));
        match (&case.expect, result) {
            (Expect::Completed { visited, steps }, Ok(outcome)) => {
                assert_eq!(outcome.status, RunStatus::Completed, "{}", case.name);
                assert_eq!(outcome.state.visited, *visited, "{}: visit order", case.name);
                assert_eq!(outcome.step, *steps, "{}: steps", case.name);
                assert_eq!(outcome.state.count, visited.len() as i64, "{}: count", case.name);
            }
            (Expect::Failed { kind, node }, Err(error)) => {
                assert_eq!(error.kind(), *kind, "{}: {error}", case.name);
                assert_eq!(error.node(), Some(*node), "{}: {error}", case.name);
            }
            (_, other) => panic!("{}: unexpected result {other:?}", case.name),
        }
    }
}

fn new() -> Graph {
    Graph::new("conformance", 1)
}

#[test]
fn routes() {
    check(&[
        Case {
            name: "linear",
            graph: || {
                visits(new(), &["a", "b", "c"])
                    .edge(START, "a")
                    .edge("a", "b")
                    .edge("b", "c")
                    .edge("c", END)
            },
            max_steps: 10,
            expect: Expect::Completed { visited: &["a", "b", "c"], steps: 3 },
        },
        Case {
            name: "conditional route picks one branch from the merged state",
            graph: || {
                visits(new(), &["a", "b", "c"])
                    .edge(START, "a")
                    .route("a", ["b", "c"], |s: &Trace| {
                        Route::to(if s.count == 1 { "c" } else { "b" })
                    })
                    .edge("b", END)
                    .edge("c", END)
            },
            max_steps: 10,
            expect: Expect::Completed { visited: &["a", "c"], steps: 2 },
        },
        Case {
            name: "conditional route to END",
            graph: || {
                visits(new(), &["a", "b"])
                    .edge(START, "a")
                    .route("a", ["b", END], |_: &Trace| Route::end())
                    .edge("b", END)
            },
            max_steps: 10,
            expect: Expect::Completed { visited: &["a"], steps: 1 },
        },
        Case {
            name: "conditional route to several nodes forks",
            graph: || {
                visits(new(), &["a", "b", "c"])
                    .edge(START, "a")
                    .route("a", ["b", "c"], |_: &Trace| Route::all(["c", "b"]))
                    .edge("b", END)
                    .edge("c", END)
            },
            max_steps: 10,
            expect: Expect::Completed { visited: &["a", "c", "b"], steps: 2 },
        },
        Case {
            name: "route from START",
            graph: || {
                visits(new(), &["a", "b"])
                    .route(START, ["a", "b"], |_: &Trace| Route::to("b"))
                    .edge("a", END)
                    .edge("b", END)
            },
            max_steps: 10,
            expect: Expect::Completed { visited: &["b"], steps: 1 },
        },
        Case {
            name: "a node named by two sources in one step runs once",
            graph: || {
                visits(new(), &["a", "b", "c", "d"])
                    .edge(START, "a")
                    .edge("a", "b")
                    .edge("a", "c")
                    .edge("b", "d")
                    .edge("c", "d")
                    .edge("d", END)
            },
            max_steps: 10,
            expect: Expect::Completed { visited: &["a", "b", "c", "d"], steps: 3 },
        },
        Case {
            name: "command node routes and updates",
            graph: || {
                visits(new(), &["b", "c"])
                    .command_node("a", ["b", "c"], |_s: Arc<Trace>, _ctx| async move {
                        Ok(Command::goto("c")
                            .with_update(TraceUpdate::default().visited(vec!["a".into()]).count(1)))
                    })
                    .edge(START, "a")
                    .edge("b", END)
                    .edge("c", END)
            },
            max_steps: 10,
            expect: Expect::Completed { visited: &["a", "c"], steps: 2 },
        },
        Case {
            name: "a route returning an undeclared target fails the run",
            graph: || {
                visits(new(), &["a", "b"])
                    .edge(START, "a")
                    .route("a", ["b"], |_: &Trace| Route::end())
                    .edge("b", END)
            },
            max_steps: 10,
            expect: Expect::Failed { kind: "undeclared_target", node: "a" },
        },
    ]);
}

#[test]
fn fork_and_merge() {
    check(&[
        Case {
            name: "static fork, join, merged through the append reducer",
            graph: || {
                visits(new(), &["a", "b", "c", "d"])
                    .edge(START, "a")
                    .edge("a", "b")
                    .edge("a", "c")
                    .join(["b", "c"], "d")
                    .edge("d", END)
            },
            max_steps: 10,
            expect: Expect::Completed { visited: &["a", "b", "c", "d"], steps: 3 },
        },
        Case {
            name: "join waits for branches of different lengths and runs once",
            graph: || {
                visits(new(), &["a", "b", "c", "c2", "c3", "d"])
                    .edge(START, "a")
                    .edge("a", "b")
                    .edge("a", "c")
                    .edge("c", "c2")
                    .edge("c2", "c3")
                    .join(["b", "c3"], "d")
                    .edge("d", END)
            },
            max_steps: 10,
            expect: Expect::Completed { visited: &["a", "b", "c", "c2", "c3", "d"], steps: 5 },
        },
        Case {
            name: "Send fans out with per-branch input and a join reduces",
            graph: || {
                visits(new(), &["a", "reduce"])
                    .node("worker", |_s: Arc<Trace>, ctx| async move {
                        let item: String = ctx.input()?;
                        Ok(TraceUpdate::default().visited(vec![format!("worker:{item}")]).count(1))
                    })
                    .edge(START, "a")
                    .route("a", ["worker"], |_: &Trace| {
                        Route::send(["x", "y", "z"].map(|item| Send::new("worker", json!(item))))
                    })
                    .join(["worker"], "reduce")
                    .edge("reduce", END)
            },
            max_steps: 10,
            expect: Expect::Completed {
                visited: &["a", "worker:x", "worker:y", "worker:z", "reduce"],
                steps: 3,
            },
        },
    ]);
}

#[test]
fn cycles_and_errors() {
    check(&[
        Case {
            name: "a cycle that ends by itself",
            graph: || {
                visit(new(), "a").edge(START, "a").route("a", ["a", END], |s: &Trace| {
                    if s.count < 3 {
                        Route::to("a")
                    } else {
                        Route::end()
                    }
                })
            },
            max_steps: 10,
            expect: Expect::Completed { visited: &["a", "a", "a"], steps: 3 },
        },
        Case {
            name: "an endless cycle is stopped by max_steps",
            graph: || {
                visit(new(), "a")
                    .edge(START, "a")
                    .route("a", ["a", END], |_: &Trace| Route::to("a"))
            },
            max_steps: 5,
            expect: Expect::Failed { kind: "step_limit_exceeded", node: "a" },
        },
        Case {
            name: "a node error fails the run with the node's name",
            graph: || {
                failing(visit(new(), "a"), "boom", "disk on fire")
                    .edge(START, "a")
                    .edge("a", "boom")
                    .edge("boom", END)
            },
            max_steps: 10,
            expect: Expect::Failed { kind: "node_failed", node: "boom" },
        },
        Case {
            name: "a panicking node fails the run, not the process",
            graph: || {
                visit(new(), "a")
                    .node("panics", |_s: Arc<Trace>, _ctx| async move {
                        if true {
                            panic!("bug in a node");
                        }
                        Ok(TraceUpdate::default())
                    })
                    .edge(START, "a")
                    .edge("a", "panics")
                    .edge("panics", END)
            },
            max_steps: 10,
            expect: Expect::Failed { kind: "node_panicked", node: "panics" },
        },
    ]);
}

#[test]
fn node_error_is_recorded_with_node_and_cause() {
    support::runtime().block_on(async {
        let graph = failing(visit(new(), "a"), "boom", "disk on fire")
            .edge(START, "a")
            .edge("a", "boom")
            .edge("boom", END)
            .compile()
            .unwrap();
        let executor = Executor::new(MemoryStore::new());
        let error = executor.run(&graph, Trace::default(), RunConfig::new()).await.unwrap_err();
        let RunError::NodeFailed { node, step, attempts, source } = &error else {
            panic!("expected NodeFailed, got {error:?}")
        };
        assert_eq!((node.as_str(), *step, *attempts), ("boom", 2, 1));
        assert_eq!(source.to_string(), "disk on fire");
        assert!(!source.is_retryable());

        let page =
            executor.store().list_runs(&Default::default(), &Default::default()).await.unwrap();
        let record = &page.runs[0];
        assert_eq!(record.status, RunStatus::Failed);
        assert_eq!(record.step, 1, "the last good checkpoint stays");
        let failure = record.failure.as_ref().expect("failure stored");
        assert_eq!((failure.kind.as_str(), failure.node.as_deref()), ("node_failed", Some("boom")));
        assert!(failure.message.contains("disk on fire"), "{}", failure.message);
    });
}

#[test]
fn cancellation_stops_at_the_next_boundary() {
    support::runtime().block_on(async {
        let gate = Gate::closed();
        let held = gate.clone();
        let graph = new()
            .node("slow", move |_s: Arc<Trace>, ctx| {
                let held = held.clone();
                async move {
                    if ctx.step() == 2 {
                        held.pass().await;
                    }
                    Ok(TraceUpdate::default().count(1))
                }
            })
            .edge(START, "slow")
            .route("slow", ["slow", END], |_: &Trace| Route::to("slow"))
            .compile()
            .unwrap();
        let executor = Executor::new(MemoryStore::new());
        let (sink, mut events) = EventSink::channel();
        let handle = executor
            .start(&graph, Trace::default(), RunConfig::new().max_steps(10_000).events(sink))
            .await
            .unwrap();
        // Cancel while the second step's task is in flight.
        loop {
            let event = events.recv().await.expect("events until the end");
            if matches!(event.event, Event::NodeStarted { step: 2, .. }) {
                handle.cancel();
                gate.open();
                break;
            }
        }
        let run = handle.run_id();
        let outcome = handle.wait().await.expect("cancellation is not a failure");
        assert_eq!(outcome.status, RunStatus::Interrupted);
        assert_eq!(outcome.step, 2, "the in-flight step finishes and is committed");
        assert_eq!(outcome.state.count, 2);
        let record = executor.store().run(run).await.unwrap();
        assert_eq!((record.status, record.step), (RunStatus::Interrupted, 2));
        let mut last = None;
        while let Some(event) = events.recv().await {
            last = Some(event);
        }
        let last = last.expect("run_ended arrives");
        assert!(
            matches!(last.event, Event::RunEnded { status: RunStatus::Interrupted, step: 2, .. }),
            "{last:?}"
        );
    });
}

#[test]
fn dynamic_json_state_follows_the_same_semantics() {
    use tollgate::{DynReducer, DynSchema, DynState, StateGraph};

    type Update = serde_json::Map<String, serde_json::Value>;
    type Ready = std::future::Ready<Result<Update, tollgate::NodeError>>;

    fn writer(
        field: &'static str,
        value: serde_json::Value,
    ) -> impl Fn(Arc<DynState>, tollgate::NodeContext) -> Ready + std::marker::Send + Sync + 'static
    {
        move |_state, _ctx| {
            let mut update = Update::new();
            update.insert(field.to_owned(), value.clone());
            std::future::ready(Ok(update))
        }
    }
    let schema = || {
        DynSchema::new()
            .field("log", DynReducer::Append)
            .field("total", DynReducer::Sum)
            .field("winner", DynReducer::LastValue)
    };
    let graph = || {
        StateGraph::<DynState>::with_schema("dyn", 1, schema())
            .node("a", writer("log", json!(["a"])))
            .node("b", writer("total", json!(2)))
            .node("c", writer("total", json!(3)))
            .node("d", writer("winner", json!("d")))
            .edge(START, "a")
            .edge("a", "b")
            .edge("a", "c")
            .join(["b", "c"], "d")
            .edge("d", END)
            .compile()
            .unwrap()
    };
    let runtime = support::runtime();
    let executor = Executor::new(MemoryStore::new());
    let outcome =
        runtime.block_on(executor.run(&graph(), DynState::default(), RunConfig::new())).unwrap();
    assert_eq!(
        serde_json::Value::Object(outcome.state.0),
        json!({"log": ["a"], "total": 5, "winner": "d"})
    );

    // Two parallel nodes writing the last-value field conflict.
    let parallel = StateGraph::<DynState>::with_schema("dyn", 1, schema())
        .node("b", writer("winner", json!("b")))
        .node("c", writer("winner", json!("c")))
        .edge(START, "b")
        .edge(START, "c")
        .edge("b", END)
        .edge("c", END)
        .compile()
        .unwrap();
    let error = runtime
        .block_on(executor.run(&parallel, DynState::default(), RunConfig::new()))
        .unwrap_err();
    assert!(
        matches!(&error, RunError::InvalidUpdate { source: tollgate::StateError::ConflictingUpdate { field, nodes }, .. }
            if field == "winner" && nodes == &["b", "c"]),
        "{error:?}"
    );
}
