//! State-graph conformance: the executor's contract, run on any store.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use tollgate_checkpoint::{PageRequest, RunFilter, RunStatus, Store};
use tollgate_engine::{
    Decision, DecisionRequest, Event, EventSink, Executor, Interrupt, NodeContext, NodeError,
    Resumed, Route, RunConfig, RunError, StateGraph, END, START,
};
use tollgate_nodes::{
    Agent, Blueprint, BlueprintError, ChatModel, HarnessError, Message, ModelOptions, ModelRequest,
    ModelResponse, ToolCall, ToolSpec,
};

use crate::models::ScriptedModel;
use crate::tools::FakeTool;
use crate::trajectory::assert_trajectory;

use super::track::{visit, Graph, Track, TrackUpdate};

/// Runs every state-graph case on executors over stores from `make` (a
/// fresh store per case; the round-trip case opens two executors on one).
/// Panics, naming the case, on the first broken promise.
///
/// Cases: linear route, conditional route, fork and merge through a
/// reducer, a cycle stopped by `max_steps`, cancellation, node error
/// propagation, HITL pause / resume / reject, threads (a second run
/// continues the first's state through the reducers; one leg at a time),
/// node caching (a hit skips the node and says so), subgraphs (a failure
/// inside continues inside from the subgraph's stored progress, as a
/// crash does; an interrupt inside pauses the parent and resumes inside;
/// events under the namespace; parallel instances through `Send`),
/// checkpoint round trip through
/// a second executor, run listing newest first with pagination, blueprint
/// validation, tool advertisement and allowlist enforcement, malformed
/// arguments, final output depending on real tool execution, and provider
/// options passthrough.
pub async fn check_engine<S, F, Fut>(make: F)
where
    S: Store,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    linear(Executor::new(make().await)).await;
    conditional(Executor::new(make().await)).await;
    fork_and_merge(Executor::new(make().await)).await;
    cycle_guard(Executor::new(make().await)).await;
    cancellation(Executor::new(make().await)).await;
    node_errors(Executor::new(make().await)).await;
    hitl(Executor::new(make().await)).await;
    threads(Executor::new(make().await)).await;
    caching(Executor::new(make().await)).await;
    super::subgraphs::subgraphs(Executor::new(make().await)).await;
    super::subgraphs::parallel_subgraphs(Executor::new(make().await)).await;
    round_trip(Arc::new(make().await)).await;
    listing(Executor::new(make().await)).await;
    blueprint_validation();
    tools(Executor::new(make().await)).await;
    options_passthrough(Executor::new(make().await)).await;
    super::state::check_state_api(&make).await;
}

async fn linear(executor: Executor) {
    let graph = visit(visit(visit(Graph::new("linear", 1), "a"), "b"), "c")
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .edge("c", END)
        .compile()
        .expect("linear: compiles");
    let outcome =
        executor.run(&graph, Track::default(), RunConfig::new()).await.expect("linear: runs");
    assert_eq!(outcome.status, RunStatus::Completed, "linear");
    assert_eq!(outcome.state.visited, ["a", "b", "c"], "linear: order");
}

async fn conditional(executor: Executor) {
    let graph = visit(visit(visit(Graph::new("conditional", 1), "start"), "small"), "large")
        .edge(START, "start")
        .route("start", ["small", "large"], |state: &Track| {
            if state.count > 5 {
                Route::to("large")
            } else {
                Route::to("small")
            }
        })
        .edge("small", END)
        .edge("large", END)
        .compile()
        .expect("conditional: compiles");
    let small = executor.run(&graph, Track::default(), RunConfig::new()).await.expect("runs");
    assert_eq!(small.state.visited, ["start", "small"], "conditional: low count");
    let big = Track { count: 10, ..Track::default() };
    let large = executor.run(&graph, big, RunConfig::new()).await.expect("runs");
    assert_eq!(large.state.visited, ["start", "large"], "conditional: high count");
}

async fn fork_and_merge(executor: Executor) {
    let graph = visit(visit(visit(visit(Graph::new("fork", 1), "split"), "left"), "right"), "join")
        .edge(START, "split")
        .edge("split", "left")
        .edge("split", "right")
        .join(["left", "right"], "join")
        .edge("join", END)
        .compile()
        .expect("fork: compiles");
    let outcome =
        executor.run(&graph, Track::default(), RunConfig::new()).await.expect("fork: runs");
    assert_eq!(
        outcome.state.visited,
        ["split", "left", "right", "join"],
        "fork: merged in task order"
    );
    assert_eq!(outcome.state.count, 4, "fork: the sum reducer saw every branch");
}

async fn cycle_guard(executor: Executor) {
    let graph = visit(Graph::new("cycle", 1), "spin")
        .edge(START, "spin")
        .route("spin", ["spin", END], |_: &Track| Route::to("spin"))
        .compile()
        .expect("cycle: compiles");
    let error = executor.run(&graph, Track::default(), RunConfig::new().max_steps(5)).await;
    assert!(
        matches!(error, Err(RunError::StepLimitExceeded { limit: 5, step: 6, .. })),
        "cycle: stopped by max_steps, got {error:?}"
    );
}

async fn cancellation(executor: Executor) {
    let release = Arc::new(tokio::sync::Notify::new());
    let wait = Arc::clone(&release);
    let graph = Graph::new("cancel", 1)
        .node("slow", move |_s: Arc<Track>, ctx: NodeContext| {
            let wait = Arc::clone(&wait);
            async move {
                if ctx.step() == 2 {
                    wait.notified().await;
                }
                Ok(TrackUpdate::default().count(1))
            }
        })
        .edge(START, "slow")
        .route("slow", ["slow", END], |_: &Track| Route::to("slow"))
        .compile()
        .expect("cancel: compiles");
    let (sink, mut events) = EventSink::channel();
    let config = RunConfig::new().max_steps(1_000).events(sink);
    let handle = executor.start(&graph, Track::default(), config).await.expect("cancel: starts");
    while let Some(event) = events.recv().await {
        if matches!(event.event, Event::NodeStarted { step: 2, .. }) {
            handle.cancel();
            release.notify_one();
            break;
        }
    }
    let outcome = handle.wait().await.expect("cancel: cancellation is not a failure");
    assert_eq!(
        (outcome.status, outcome.step),
        (RunStatus::Interrupted, 2),
        "cancel: stops after the step in flight"
    );
}

async fn node_errors(executor: Executor) {
    let graph = Graph::new("errors", 1)
        .node("boom", |_s: Arc<Track>, _ctx| async {
            Err::<TrackUpdate, _>(NodeError::fatal("disk on fire"))
        })
        .edge(START, "boom")
        .edge("boom", END)
        .compile()
        .expect("errors: compiles");
    let error =
        executor.run(&graph, Track::default(), RunConfig::new()).await.expect_err("errors: fails");
    let RunError::NodeFailed { node, .. } = &error else {
        panic!("errors: expected NodeFailed, got {error}")
    };
    assert_eq!(node, "boom", "errors: names the node");
    let runs = executor
        .store()
        .list_runs(&RunFilter::default(), &PageRequest::default())
        .await
        .expect("lists");
    let failure = runs.runs[0].failure.as_ref().expect("errors: the failure is stored");
    assert!(
        failure.message.contains("disk on fire"),
        "errors: the cause is stored: {}",
        failure.message
    );
}

fn approval_graph() -> StateGraph<Track> {
    visit(Graph::new("hitl", 1), "after")
        .node("ask", |_s: Arc<Track>, ctx: NodeContext| async move {
            let decision = ctx.interrupt(Interrupt::new("approval", json!({"amount": 20})))?;
            let note = match decision {
                Decision::Approve => "approved",
                _ => "other",
            };
            Ok(TrackUpdate::default().visited(vec![note.to_owned()]))
        })
        .edge(START, "ask")
        .edge("ask", "after")
        .edge("after", END)
}

async fn hitl(executor: Executor) {
    let graph = approval_graph().compile().expect("hitl: compiles");
    let paused =
        executor.run(&graph, Track::default(), RunConfig::new()).await.expect("hitl: runs");
    assert_eq!(paused.status, RunStatus::AwaitingHitl, "hitl: pauses");
    assert_eq!(paused.interrupts.len(), 1, "hitl: one interrupt");
    let approve = DecisionRequest::new(Decision::Approve);
    let Resumed::Continuing(handle) = executor
        .resume(&graph, paused.run_id, approve, RunConfig::new())
        .await
        .expect("hitl: resumes")
    else {
        panic!("hitl: an approval continues the run")
    };
    let done = handle.wait().await.expect("hitl: finishes");
    assert_eq!(done.state.visited, ["approved", "after"], "hitl: the node read its decision");

    let paused =
        executor.run(&graph, Track::default(), RunConfig::new()).await.expect("hitl: runs");
    let reject = DecisionRequest::new(Decision::Reject { reason: Some("no".into()) });
    let outcome = executor
        .resume(&graph, paused.run_id, reject, RunConfig::new())
        .await
        .expect("hitl: rejects");
    assert!(matches!(outcome, Resumed::Rejected(_)), "hitl: a rejection ends the run");
    let record = executor.store().run(paused.run_id).await.expect("hitl: run");
    assert_eq!(record.status, RunStatus::Rejected, "hitl: rejected is stored");
    let again = executor.decide(paused.run_id, DecisionRequest::new(Decision::Approve)).await;
    assert!(again.is_err(), "hitl: a finished run takes no decision");
}

async fn threads(executor: Executor) {
    let graph = visit(Graph::new("thread", 1), "turn")
        .edge(START, "turn")
        .edge("turn", END)
        .compile()
        .expect("threads: compiles");
    let input = |name: &str| TrackUpdate::default().visited(vec![name.to_owned()]).count(10);
    assert!(executor.thread_state(&graph, "t").await.expect("threads: state").is_none());
    let first = executor
        .run_on_thread(&graph, "t", input("one"), RunConfig::new())
        .await
        .expect("threads: first run");
    assert_eq!(first.state.visited, ["one", "turn"], "threads: the input is written first");
    assert_eq!(first.state.count, 11);
    let second = executor
        .run_on_thread(&graph, "t", input("two"), RunConfig::new())
        .await
        .expect("threads: second run");
    assert_eq!(
        (second.state.visited.clone(), second.state.count),
        (vec!["one".into(), "turn".into(), "two".into(), "turn".into()], 22),
        "threads: the second run starts from the first's state, the input through the reducers"
    );
    let now = executor.thread_state(&graph, "t").await.expect("threads: state");
    assert_eq!(
        now.map(|snapshot| (snapshot.run, snapshot.values.count)),
        Some((second.run_id, 22))
    );
    // Another thread is another conversation.
    let other = executor
        .run_on_thread(&graph, "u", input("three"), RunConfig::new())
        .await
        .expect("threads: other thread");
    assert_eq!(other.state.count, 11, "threads: threads do not mix");
    // A paused run holds its thread.
    let asking = approval_graph().compile().expect("threads: compiles");
    let paused = executor
        .run_on_thread(&asking, "p", TrackUpdate::default(), RunConfig::new())
        .await
        .expect("threads: pauses");
    assert_eq!(paused.status, RunStatus::AwaitingHitl);
    let busy = executor.run_on_thread(&asking, "p", TrackUpdate::default(), RunConfig::new()).await;
    assert!(
        matches!(&busy, Err(RunError::Store(tollgate_checkpoint::StoreError::ThreadBusy { run, .. })) if *run == paused.run_id),
        "threads: a paused thread refuses another run: {busy:?}"
    );
    let listed = executor
        .store()
        .list_runs(
            &RunFilter { thread: Some("t".into()), ..RunFilter::default() },
            &PageRequest::default(),
        )
        .await
        .expect("threads: list");
    let ids: Vec<_> = listed.runs.iter().map(|run| run.id).collect();
    assert_eq!(ids, [second.run_id, first.run_id], "threads: its runs, newest first");
}

async fn caching(executor: Executor) {
    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let graph = Graph::new("cached", 1)
        .node("slow", move |_state: Arc<Track>, _ctx| {
            let calls = Arc::clone(&counted);
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(TrackUpdate::default().count(5))
            }
        })
        .edge(START, "slow")
        .edge("slow", END)
        .cache("slow", std::time::Duration::from_secs(3600))
        .compile()
        .expect("caching: compiles");
    for round in 0..2 {
        let (sink, mut events) = EventSink::channel();
        let done = executor
            .run(&graph, Track::default(), RunConfig::new().events(sink))
            .await
            .expect("caching: runs");
        assert_eq!(done.state.count, 5, "caching: the same output");
        let mut cached = Vec::new();
        while let Some(event) = events.try_recv() {
            if let Event::NodeCompleted { cached: hit, .. } = event.event {
                cached.push(hit);
            }
        }
        assert_eq!(cached, [round == 1], "caching: round {round} says whether it hit");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "caching: the node ran once");
}

async fn round_trip<S: Store>(store: Arc<S>) {
    let graph = approval_graph().compile().expect("round trip: compiles");
    let first = Executor::with_store(store.clone());
    let paused =
        first.run(&graph, Track::default(), RunConfig::new()).await.expect("round trip: runs");
    drop(first);
    let second = Executor::with_store(store);
    let state =
        second.state_at(&graph, paused.run_id, paused.step).await.expect("round trip: loads");
    assert_eq!(state, paused.state, "round trip: the checkpoint holds the state");
    let Resumed::Continuing(handle) = second
        .resume(&graph, paused.run_id, DecisionRequest::new(Decision::Approve), RunConfig::new())
        .await
        .expect("round trip: resumes")
    else {
        panic!("round trip: continues")
    };
    let done = handle.wait().await.expect("round trip: finishes");
    assert_eq!(done.status, RunStatus::Completed, "round trip: completes in the second executor");
}

async fn listing(executor: Executor) {
    let graph = visit(Graph::new("listed", 1), "a")
        .edge(START, "a")
        .edge("a", END)
        .compile()
        .expect("compiles");
    let mut ids = Vec::new();
    for _ in 0..7 {
        ids.push(
            executor
                .run(&graph, Track::default(), RunConfig::new())
                .await
                .expect("listing: runs")
                .run_id,
        );
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut page = PageRequest { limit: 3, cursor: None };
    loop {
        let found =
            executor.store().list_runs(&RunFilter::default(), &page).await.expect("listing: lists");
        assert!(found.runs.len() <= 3, "listing: page size");
        seen.extend(found.runs.iter().map(|run| run.id));
        match found.next {
            Some(cursor) => page.cursor = Some(cursor),
            None => break,
        }
    }
    assert_eq!(seen, ids, "listing: newest first, no gap, no duplicate");
}

fn blueprint_validation() {
    let broken = json!({"name": "x", "model": "nonsense", "tools": [{"name": "t", "description": "",
        "parameters": {"type": "object"}}], "surprise": 1});
    match Blueprint::from_value(broken, ".") {
        Err(BlueprintError::Invalid { problems }) => {
            assert!(!problems.is_empty(), "blueprint: problems listed")
        }
        other => panic!("blueprint: an invalid blueprint is refused, got {other:?}"),
    }
    let fine = json!({"name": "x", "model": "openai:gpt", "tools": [{"name": "t", "description": "",
        "parameters": {"type": "object"}, "fixture": 1}]});
    assert!(Blueprint::from_value(fine, ".").is_ok(), "blueprint: a valid blueprint is accepted");
}

/// Answers with the last tool result it was given, else calls `add`.
#[derive(Debug)]
struct UsesToolResult;

#[async_trait]
impl ChatModel for UsesToolResult {
    fn name(&self) -> &str {
        "uses-tool-result"
    }

    async fn invoke(&self, request: &ModelRequest) -> Result<ModelResponse, HarnessError> {
        match request.messages.last() {
            Some(Message::Tool { content, .. }) => {
                Ok(ModelResponse::text(format!("The sum is {content}.")))
            }
            _ => Ok(ModelResponse::tool_calls(vec![ToolCall::new(
                "c1",
                "add",
                json!({"a": 2, "b": 3}),
            )])),
        }
    }
}

async fn tools(executor: Executor) {
    // Advertisement and allowlist: only allowed tools are shown, and a call
    // of another is never made.
    let hidden = FakeTool::new("hidden", json!("secret"));
    let shown = FakeTool::new("shown", json!("ok"));
    let model = ScriptedModel::builder()
        .tool_call("hidden", json!({}))
        .tool_call("shown", json!({"x": 1}))
        .reply("done")
        .build();
    let agent = Agent::new("allow", Arc::new(model.clone()))
        .tool(hidden.clone())
        .tool(shown.clone())
        .allow(["shown"])
        .compile()
        .expect("tools: compiles");
    let run = agent.run(&executor, "go", RunConfig::new()).await.expect("tools: runs");
    let advertised: Vec<String> =
        model.requests()[0].tools.iter().map(|t| t.name.clone()).collect();
    assert_eq!(advertised, ["shown"], "tools: only allowed tools are advertised");
    assert!(hidden.calls().is_empty(), "tools: a tool off the allowlist is never called");
    assert_eq!(shown.calls(), [json!({"x": 1})], "tools: the allowed tool ran once");
    assert_trajectory(run.events()).no_tool_called("hidden").tool_called("shown").completed();

    // Malformed arguments go back to the model; the tool does not run.
    let strict = FakeTool::with_spec(
        ToolSpec::new(
            "strict",
            "",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        ),
        json!(1),
    );
    let model =
        ScriptedModel::builder().tool_call("strict", json!({"n": "one"})).reply("gave up").build();
    let agent =
        Agent::new("strict", Arc::new(model)).tool(strict.clone()).compile().expect("compiles");
    let run = agent
        .run(&executor, "go", RunConfig::new())
        .await
        .expect("tools: malformed arguments do not crash");
    assert!(strict.calls().is_empty(), "tools: malformed arguments never reach the tool");
    let told = run.messages.iter().any(
        |m| matches!(m, Message::Tool { is_error: true, content, .. } if content.contains("/n")),
    );
    assert!(told, "tools: the model is told what was wrong");

    // The final answer depends on what the tool really returned.
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let add = tollgate_nodes::FnTool::new(
        ToolSpec::new("add", "adds", json!({"type": "object"})),
        move |args, _| {
            let flag = Arc::clone(&flag);
            async move {
                flag.store(true, Ordering::SeqCst);
                Ok(json!(args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)))
            }
        },
    );
    let agent =
        Agent::new("adder", Arc::new(UsesToolResult)).tool(add).compile().expect("compiles");
    let run = agent.run(&executor, "2 + 3?", RunConfig::new()).await.expect("tools: runs");
    assert!(ran.load(Ordering::SeqCst), "tools: the tool ran");
    assert_eq!(run.final_text(), Some("The sum is 5."), "tools: the answer uses the real result");
}

async fn options_passthrough(executor: Executor) {
    let model = ScriptedModel::builder().reply("ok").build();
    let mut options =
        ModelOptions { temperature: Some(0.25), max_tokens: Some(64), ..ModelOptions::default() };
    options.extra.insert("seed".into(), json!(7));
    let agent = Agent::new("opts", Arc::new(model.clone()))
        .options(options.clone())
        .compile()
        .expect("compiles");
    agent.run(&executor, "go", RunConfig::new()).await.expect("options: runs");
    assert_eq!(model.requests()[0].options, options, "options: reach the provider unchanged");
}
