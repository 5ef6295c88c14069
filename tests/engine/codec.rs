//! Codecs: bincode for plain states round-trips through a crash-free
//! interruption; a state bincode cannot read back fails at its first write.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tollgate::{
    Codec, DynReducer, DynSchema, DynState, EventSink, Executor, GraphState, Route, RunConfig,
    RunError, SqliteStore, StateGraph, END, START,
};

use crate::support::{self, Gate, Graph, Msg, Trace, TraceUpdate};

fn workload(gate: Option<Gate>) -> tollgate::CompiledGraph<Trace> {
    Graph::new("codec", 1)
        .node("a", move |_s: Arc<Trace>, ctx| {
            let gate = gate.clone();
            async move {
                if let (Some(gate), 3) = (gate, ctx.step()) {
                    gate.pass().await;
                }
                let message =
                    Msg { id: Some(format!("m{}", ctx.step() % 2)), text: ctx.step().to_string() };
                Ok(TraceUpdate::default()
                    .count(1)
                    .visited(vec![format!("a{}", ctx.step())])
                    .messages(vec![message.into()])
                    .tags([(ctx.step().to_string(), "x".to_owned())].into()))
            }
        })
        .edge(START, "a")
        .route("a", ["a", END], |s: &Trace| if s.count < 6 { Route::to("a") } else { Route::end() })
        .compile()
        .unwrap()
}

#[test]
fn bincode_states_survive_an_interruption() {
    let runtime = support::runtime();
    let reference = runtime.block_on(support::run_graph(&workload(None))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let executor = Executor::new(SqliteStore::open(dir.path().join("bin.db")).unwrap());
    let gate = Gate::closed();
    let (sink, mut events) = EventSink::channel();
    let config = RunConfig::new().codec(Codec::Bincode);
    let handle = runtime
        .block_on(executor.start(
            &workload(Some(gate.clone())),
            Trace::default(),
            config.clone().events(sink),
        ))
        .unwrap();
    runtime.block_on(async {
        while let Some(event) = events.recv().await {
            if matches!(event.event, tollgate::Event::NodeStarted { step: 3, .. }) {
                handle.cancel();
                gate.open();
                break;
            }
        }
    });
    let run = handle.run_id();
    runtime.block_on(handle.wait()).unwrap();
    let checkpoint = runtime.block_on(executor.store().checkpoint(run, None)).unwrap();
    assert_eq!(checkpoint.snapshot.codec(), Codec::Bincode);
    assert_eq!(checkpoint.deltas[0].1[0].update.codec(), Codec::Bincode);
    let continued = runtime.block_on(executor.continue_run(&workload(None), run, config)).unwrap();
    let outcome = runtime.block_on(continued.wait()).unwrap();
    assert_eq!(outcome.state, reference.state);
}

#[test]
fn a_json_value_state_is_refused_before_the_run_exists() {
    let runtime = support::runtime();
    let graph =
        StateGraph::<DynState>::with_schema("dyn", 1, DynSchema::new().field("x", DynReducer::Sum))
            .node("a", |_s: Arc<DynState>, _ctx| async move { Ok(serde_json::Map::new()) })
            .edge(START, "a")
            .edge("a", END)
            .compile()
            .unwrap();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let input = DynState(serde_json::json!({"x": 1}).as_object().cloned().unwrap());
    let config = RunConfig::new().codec(Codec::Bincode);
    let error = runtime.block_on(executor.start(&graph, input, config)).unwrap_err();
    assert!(
        matches!(
            error,
            RunError::CodecRoundTrip { step: 0, codec: Codec::Bincode, what: "state", .. }
        ),
        "{error:?}"
    );
    let page = runtime
        .block_on(executor.store().list_runs(&Default::default(), &Default::default()))
        .unwrap();
    assert!(page.runs.is_empty(), "no run was created");
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Loose {
    #[reducer(append)]
    notes: Vec<serde_json::Value>,
}

#[test]
fn an_update_bincode_cannot_read_fails_at_its_first_write() {
    let runtime = support::runtime();
    let graph = StateGraph::<Loose>::new("loose", 1)
        .node("a", |_s: Arc<Loose>, _ctx| async move {
            Ok(LooseUpdate::default().notes(vec![serde_json::json!({"free": "form"})]))
        })
        .edge(START, "a")
        .edge("a", END)
        .compile()
        .unwrap();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let config = RunConfig::new().codec(Codec::Bincode);
    let error = runtime.block_on(executor.run(&graph, Loose::default(), config)).unwrap_err();
    assert!(matches!(error, RunError::CodecRoundTrip { step: 1, what: "update", .. }), "{error:?}");
}
