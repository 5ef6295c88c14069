//! The testkit tested: its conformance suite on both stores, its doubles'
//! promises (scripts checked at drop, chunks that rejoin, schema-driven
//! calls, flaky and slow doubles), determinism, recording and replay.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tollgate::{
    Agent, Event, Executor, MemoryStore, ModelRetry, RetryPolicy, RunConfig, RunStatus,
    SqliteStore, ToolSpec,
};
use tollgate_testkit::conformance::check_engine;
use tollgate_testkit::{
    assert_trajectory, deterministic_config, to_ndjson, EventCollector, Failure,
    FakeStreamingModel, FakeTool, FlakyModel, FlakyTool, ReplayFixture, SchemaDrivenModel,
    ScriptedModel, SlowTool,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

fn quick_retry(attempts: u32) -> ModelRetry {
    ModelRetry::new().backoff(RetryPolicy {
        max_attempts: attempts,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        ..RetryPolicy::default()
    })
}

#[test]
fn the_engine_conformance_suite_passes_on_both_stores() {
    let rt = runtime();
    rt.block_on(check_engine(|| async { MemoryStore::new() }));
    let dir = tempfile::tempdir().unwrap();
    let counter = std::sync::atomic::AtomicU32::new(0);
    rt.block_on(check_engine(|| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = dir.path().join(format!("case{n}.db"));
        async move { SqliteStore::open(path).unwrap() }
    }));
}

#[test]
fn a_script_with_unused_replies_fails_the_test_at_drop() {
    let model = ScriptedModel::builder().reply("used").reply("never asked").build();
    let agent = Agent::new("a", Arc::new(model.clone())).compile().unwrap();
    let run =
        runtime().block_on(agent.run(&Executor::new(MemoryStore::new()), "hi", RunConfig::new()));
    assert_eq!(run.unwrap().status, RunStatus::Completed);
    drop(agent);
    let message = panic_text(catch_unwind(AssertUnwindSafe(|| drop(model))).unwrap_err());
    assert!(
        message.contains("dropped with 1 unused replies") && message.contains("never asked"),
        "{message}"
    );
}

#[test]
fn an_unexpected_call_fails_the_run_and_the_test() {
    let model = ScriptedModel::builder().tool_call("t", json!({})).build();
    let agent = Agent::new("a", Arc::new(model.clone()))
        .tool(FakeTool::new("t", json!(1)))
        .compile()
        .unwrap();
    let run =
        runtime().block_on(agent.run(&Executor::new(MemoryStore::new()), "hi", RunConfig::new()));
    assert!(run.is_err(), "the second call panicked inside the node");
    drop(agent);
    let message = panic_text(catch_unwind(AssertUnwindSafe(|| drop(model))).unwrap_err());
    assert!(message.contains("got call 2 but its script has 1 replies"), "{message}");
}

/// The stored event log of a run, as JSON lines.
async fn stored_log(executor: &Executor, run: tollgate::RunId) -> Vec<String> {
    let records = executor.store().events(run, 0, u64::MAX).await.unwrap();
    records.into_iter().map(|record| record.json).collect()
}

#[test]
fn two_runs_with_the_same_seed_write_identical_event_logs() {
    let rt = runtime();
    let once = |seed| {
        let model = ScriptedModel::builder()
            .fail(Failure::Server)
            .tool_calls(vec![("a".into(), json!({"n": 1})), ("b".into(), json!({"n": 2}))])
            .reply("done")
            .build();
        let agent = Agent::new("det", Arc::new(model))
            .tool(FakeTool::new("a", json!("A")))
            .tool(FakeTool::new("b", json!("B")))
            .retry(quick_retry(3))
            .compile()
            .unwrap();
        let executor = Executor::new(MemoryStore::new());
        let run = rt.block_on(agent.run(&executor, "go", deterministic_config(seed))).unwrap();
        rt.block_on(stored_log(&executor, run.run_id))
    };
    let (first, second, other) = (once(7), once(7), once(8));
    assert!(first.len() > 10);
    assert_eq!(first, second, "same seed, same log, byte for byte");
    assert_ne!(first, other, "another seed, another run id");
}

#[test]
fn a_stream_that_fails_at_chunk_n_delivers_the_chunks_before_it() {
    let model = FakeStreamingModel::new("one two three four").fail_at_chunk(2, Failure::Auth);
    assert_eq!(model.chunks(), ["one ", "two ", "three ", "four"]);
    let agent = Agent::new("s", Arc::new(model)).streaming(true).compile().unwrap();
    let collector = EventCollector::new();
    let config = RunConfig::new().events(collector.sink());
    let run = runtime().block_on(agent.run(&Executor::new(MemoryStore::new()), "hi", config));
    assert!(run.is_err(), "auth is not retried");
    let deltas: Vec<String> = collector
        .events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::ModelDelta { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["one ", "two "]);
}

#[test]
fn the_schema_driven_model_calls_every_declared_tool_once_with_valid_arguments() {
    let strict = |name: &str, schema: Value| {
        FakeTool::with_spec(ToolSpec::new(name, "", schema), json!("ok"))
    };
    let search = strict(
        "search",
        json!({"type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
               "required": ["q", "limit"], "additionalProperties": false}),
    );
    let flag = strict(
        "flag",
        json!({"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]}),
    );
    let agent = Agent::new("sd", Arc::new(SchemaDrivenModel::with_final_text("all done")))
        .tool(search.clone())
        .tool(flag.clone())
        .compile()
        .unwrap();
    let run = runtime()
        .block_on(agent.run(&Executor::new(MemoryStore::new()), "go", RunConfig::new()))
        .unwrap();
    assert_eq!(flag.calls(), [json!({"on": false})]);
    assert_eq!(search.calls(), [json!({"q": "test", "limit": 0})]);
    assert_trajectory(run.events())
        .tool_calls(2)
        .model_calls(3)
        .final_message("all done")
        .completed();
}

#[test]
fn flaky_models_are_retried_and_flaky_tools_report_errors_to_the_model() {
    let rt = runtime();
    let inner = ScriptedModel::builder()
        .fail(Failure::RateLimit)
        .fail(Failure::RateLimit)
        .reply("fine")
        .build();
    inner.forget(); // the first two replies are shadowed by the flaky wrapper
    let model = FlakyModel::new(2, Failure::Server, inner);
    let agent = Agent::new("f", Arc::new(model)).retry(quick_retry(3)).compile().unwrap();
    let run =
        rt.block_on(agent.run(&Executor::new(MemoryStore::new()), "go", RunConfig::new())).unwrap();
    assert_trajectory(run.events()).retries(2).model_calls(3).final_message("fine").completed();

    let tool = FlakyTool::failing("broken");
    let model = ScriptedModel::builder().tool_call("broken", json!({})).reply("sorry").build();
    let agent = Agent::new("t", Arc::new(model)).tool(tool.clone()).compile().unwrap();
    let run =
        rt.block_on(agent.run(&Executor::new(MemoryStore::new()), "go", RunConfig::new())).unwrap();
    assert_eq!(tool.calls(), 1);
    assert_trajectory(run.events())
        .tool_completed("broken", false)
        .final_message("sorry")
        .completed();
}

#[test]
fn a_slow_tool_past_its_timeout_is_cancelled() {
    let slow = SlowTool::new("slow", Duration::from_secs(30));
    let model = ScriptedModel::builder().tool_call("slow", json!({})).reply("gave up").build();
    let agent = Agent::new("s", Arc::new(model))
        .tool(slow.clone())
        .tool_timeout(Duration::from_millis(50))
        .compile()
        .unwrap();
    let run = runtime()
        .block_on(agent.run(&Executor::new(MemoryStore::new()), "go", RunConfig::new()))
        .unwrap();
    assert_eq!((slow.started(), slow.cancelled()), (1, 1));
    assert_trajectory(run.events()).tool_completed("slow", false).completed();
}

#[test]
fn a_recorded_run_replays_as_a_script_and_a_trajectory() {
    let rt = runtime();
    let record = || {
        ScriptedModel::builder()
            .tool_calls(vec![("a".into(), json!({"n": 1})), ("b".into(), json!({"n": 2}))])
            .tool_call("a", json!({"n": 3}))
            .reply("finished")
            .build()
    };
    let tools = |agent: Agent| {
        agent.tool(FakeTool::new("a", json!("A"))).tool(FakeTool::new("b", json!("B")))
    };
    let agent = tools(Agent::new("r", Arc::new(record()))).compile().unwrap();
    let recorded =
        rt.block_on(agent.run(&Executor::new(MemoryStore::new()), "go", RunConfig::new())).unwrap();
    let ndjson = to_ndjson(recorded.events());
    assert_eq!(ndjson.lines().count(), recorded.events().len());

    let fixture = ReplayFixture::from_ndjson(&ndjson).unwrap();
    assert_eq!(fixture.steps().len(), 3 + 3, "3 model answers, 3 tool calls");
    let replay = tools(Agent::new("r", Arc::new(fixture.model("replayed")))).compile().unwrap();
    let replayed = rt
        .block_on(replay.run(&Executor::new(MemoryStore::new()), "go", RunConfig::new()))
        .unwrap();
    fixture.assert_replayed(replayed.events());

    // A diverging run is caught, with both trajectories printed.
    let other =
        tools(Agent::new("r", Arc::new(ScriptedModel::builder().reply("finished").build())))
            .compile()
            .unwrap();
    let diverged =
        rt.block_on(other.run(&Executor::new(MemoryStore::new()), "go", RunConfig::new())).unwrap();
    let message = panic_text(
        catch_unwind(AssertUnwindSafe(|| fixture.assert_replayed(diverged.events()))).unwrap_err(),
    );
    assert!(message.contains("the replay diverged") && message.contains("run_ended"), "{message}");
}

#[test]
fn a_failed_trajectory_assertion_prints_the_trajectory() {
    let model = ScriptedModel::builder().reply("hi").build();
    let agent = Agent::new("a", Arc::new(model)).compile().unwrap();
    let run = runtime()
        .block_on(agent.run(&Executor::new(MemoryStore::new()), "go", RunConfig::new()))
        .unwrap();
    let message = panic_text(
        catch_unwind(AssertUnwindSafe(|| {
            assert_trajectory(run.events()).tool_called("lookup");
        }))
        .unwrap_err(),
    );
    assert!(message.contains("expected a call of tool `lookup`"), "{message}");
    assert!(message.contains("model_started") && message.contains("run_ended"), "{message}");
}

#[test]
fn graph_assertions_cover_status_transitions_checkpoints_state_and_interrupts() {
    use tollgate::{
        Decision, DecisionRequest, Interrupt, NodeContext, Resumed, StateGraph, END, START,
    };
    let rt = runtime();
    let count = |n: i64| serde_json::Map::from_iter([("count".to_owned(), json!(n))]);
    let schema = tollgate::DynSchema::new().field("count", tollgate::DynReducer::Sum);
    let graph = StateGraph::<tollgate::DynState>::with_schema("g", 1, schema)
        .node("ask", move |_s, ctx: NodeContext| async move {
            let interrupt = Interrupt::new("approval", json!({"amount": 20}))
                .allow([tollgate::DecisionKind::Approve, tollgate::DecisionKind::Reject]);
            ctx.interrupt(interrupt)?;
            Ok(count(1))
        })
        .node("after", move |_s, _ctx| async move { Ok(count(2)) })
        .edge(START, "ask")
        .edge("ask", "after")
        .edge("after", END)
        .compile()
        .unwrap();
    let executor = Executor::new(MemoryStore::new());
    let paused =
        rt.block_on(executor.run(&graph, tollgate::DynState::default(), RunConfig::new())).unwrap();
    let Resumed::Continuing(handle) = rt
        .block_on(executor.resume(
            &graph,
            paused.run_id,
            DecisionRequest::new(Decision::Approve),
            RunConfig::new(),
        ))
        .unwrap()
    else {
        panic!("continues")
    };
    let done = rt.block_on(handle.wait()).unwrap();
    let stored = rt.block_on(executor.store().events(done.run_id, 0, u64::MAX)).unwrap();
    let events: Vec<tollgate::EventEnvelope> =
        stored.iter().map(|e| serde_json::from_str(&e.json).unwrap()).collect();
    assert_trajectory(&events)
        .interrupt_with_options("approval", &["approve", "reject"])
        .resumed_at("ask")
        .node_sequence(&["ask", "ask", "after"])
        .checkpoints(2)
        .update_at(2, "after", "/count", &json!(2))
        .final_state("/count", &json!(3))
        .completed();
}

/// `ScriptedTasks`: scripted tasks never run, their results are stored as
/// real ones (a continued run replays them without asking the script),
/// scripted retryable failures go through the task's retry policy, a
/// fatal one fails the run, and a test clock ends a week's sleep.
#[test]
fn scripted_tasks_unit_test_a_workflow() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use tollgate::{TaskOptions, Workflow, WorkflowContext};
    use tollgate_testkit::{ManualClock, ScriptedTasks, EPOCH_2026_MS};

    let sent = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&sent);
    let renew = Workflow::new("renew", 1, move |ctx: WorkflowContext, customer: String| {
        let sent = Arc::clone(&counted);
        async move {
            let plan: String = ctx.task("look_up", || async { unreachable!("scripted") }).await?;
            let retry = RetryPolicy {
                max_attempts: 3,
                initial_backoff: Duration::from_millis(1),
                ..RetryPolicy::default()
            };
            let charged: bool = ctx
                .task_with("charge", TaskOptions::new().retry(retry), || async { Ok(true) })
                .await?;
            ctx.sleep(Duration::from_secs(7 * 24 * 3600)).await?;
            ctx.task("remind", move || async move {
                sent.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await?;
            Ok(json!({"customer": customer, "plan": plan, "charged": charged}))
        }
    })
    .unwrap();
    runtime().block_on(async {
        let clock = Arc::new(ManualClock::new(EPOCH_2026_MS));
        let tasks = ScriptedTasks::new()
            .returns("look_up", "gold")
            .fails_retryably("charge", "card declined")
            .fails_retryably("charge", "card declined");
        let config = tasks.config(RunConfig::new().clock(clock.clone()));
        let executor = Executor::new(MemoryStore::new());
        let input = renew.input(&"ada".to_owned()).unwrap();
        let parked = executor.run(renew.graph(), input, config.clone()).await.unwrap();
        assert_eq!(parked.status, RunStatus::Queued, "asleep");
        assert_eq!(
            tasks.answered(),
            [("look_up".to_owned(), 1), ("charge".to_owned(), 1), ("charge".to_owned(), 2)],
            "the third attempt of `charge` ran for real"
        );
        clock.advance(Duration::from_secs(7 * 24 * 3600));
        let handles = executor.recover(renew.graph(), config).await.unwrap();
        let done = handles.into_iter().next().unwrap().wait().await.unwrap();
        assert_eq!(done.status, RunStatus::Completed);
        let output = renew.output(&done.state).unwrap().unwrap();
        assert_eq!(output, json!({"customer": "ada", "plan": "gold", "charged": true}));
        assert_eq!(tasks.answered().len(), 3, "the replay took the stored results");
        assert_eq!(sent.load(Ordering::SeqCst), 1);

        // A fatal scripted failure fails the run, naming it.
        let failing = ScriptedTasks::new().returns("look_up", "gold").fails("charge", "no card");
        let input = renew.input(&"bo".to_owned()).unwrap();
        let error =
            executor.run(renew.graph(), input, failing.config(RunConfig::new())).await.unwrap_err();
        assert!(error.to_string().contains("no card"), "{error}");
        // A scripted result of the wrong type is a typed error, not a panic.
        let wrong = ScriptedTasks::new().returns("look_up", 42);
        let input = renew.input(&"cy".to_owned()).unwrap();
        let error =
            executor.run(renew.graph(), input, wrong.config(RunConfig::new())).await.unwrap_err();
        assert!(error.to_string().contains("scripted result does not decode"), "{error}");
    });
}
