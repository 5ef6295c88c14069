//! The model/tool loop: trajectories, concurrency, ids, limits.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::{
    Agent, Event, FnTool, HarnessError, Message, RunConfig, RunError, RunStatus, ScriptReply,
    ToolSpec,
};
use tollgate_testkit::assert_trajectory;

use crate::support::{self, call, counting, model, text};

#[test]
fn an_agent_calls_a_tool_then_answers() {
    let rt = support::runtime();
    let (lookup, calls) = counting("lookup_user");
    let agent =
        Agent::new("helper", model(vec![call("lookup_user", json!({"id": 7})), text("Ann.")]))
            .system("Be brief.")
            .tool(lookup)
            .compile()
            .unwrap();
    let run = rt.block_on(agent.run(&support::executor(), "Who is 7?", RunConfig::new())).unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.final_text(), Some("Ann."));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_trajectory(run.events())
        .model_called("default")
        .tool_called_with("lookup_user", json!({"id": 7}))
        .tool_completed("lookup_user", true)
        .model_called("default")
        .completed();
    // The tool's result answers the model's call id, and went back to it.
    let Message::Tool { call_id, content, is_error, .. } = &run.messages[2] else {
        panic!("expected a tool result, got {:?}", run.messages[2])
    };
    assert_eq!((call_id.as_str(), is_error), ("call_0_0", &false));
    assert_eq!(content, r#"{"echo":{"id":7}}"#);
    let usage = run.events().iter().find_map(|e| match &e.event {
        Event::ModelCompleted { usage, .. } => usage.clone(),
        _ => None,
    });
    assert!(usage.is_some_and(|u| u["total_tokens"].as_u64() > Some(0)), "usage is reported");
    // Each turn is a checkpoint: model, tools, model.
    assert_eq!(run.events().iter().filter(|e| e.event.kind() == "checkpoint_saved").count(), 3);
}

#[test]
fn tool_calls_of_one_turn_run_concurrently() {
    let rt = support::runtime();
    // Each call waits for the other: run one after the other, they time out.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let spec = ToolSpec::new("meet", "waits for a partner", json!({"type": "object"}));
    let tool = FnTool::new(spec, move |args, _ctx| {
        let barrier = Arc::clone(&barrier);
        async move {
            tokio::time::timeout(Duration::from_secs(5), barrier.wait()).await.map_err(|_| {
                HarnessError::ToolFailed { tool: "meet".into(), message: "ran alone".into() }
            })?;
            Ok(args)
        }
    });
    let both = ScriptReply::ToolCalls(vec![
        ("meet".into(), json!({"n": 1}), Some("a".into())),
        ("meet".into(), json!({"n": 2}), Some("b".into())),
    ]);
    let agent = Agent::new("pair", model(vec![both, text("met")])).tool(tool).compile().unwrap();
    let run = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap();
    let results: Vec<(&str, &str)> = run
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { call_id, content, .. } => Some((call_id.as_str(), content.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(results, [("a", r#"{"n":1}"#), ("b", r#"{"n":2}"#)], "results in call order");
}

#[test]
fn a_model_that_never_stops_calling_tools_hits_the_turn_limit() {
    let rt = support::runtime();
    let (tool, _) = counting("again");
    let replies = (0..10).map(|_| call("again", json!({"id": 1}))).collect();
    let agent = Agent::new("loop", model(replies)).tool(tool).max_turns(3).compile().unwrap();
    let error = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap_err();
    let HarnessError::Run(RunError::NodeFailed { node, source, .. }) = &error else {
        panic!("{error}")
    };
    assert_eq!(node, "loop");
    let cause = source.cause().downcast_ref::<HarnessError>();
    assert!(matches!(cause, Some(HarnessError::TurnLimitExceeded { limit: 3, .. })), "{error}");
}

#[test]
fn an_agent_without_tools_has_no_tools_node_and_refuses_a_tool_call() {
    let rt = support::runtime();
    let chat = Agent::new("chat", model(vec![text("Hi.")])).compile().unwrap();
    let nodes: Vec<&str> = chat.graph().node_names().collect();
    assert_eq!(nodes, ["chat"], "no chat.tools");
    let answer = chat.graph().shape().edges.into_iter().find(|e| e.from == "chat").unwrap();
    assert_eq!((answer.to.as_str(), answer.kind), ("__end__", "static"));
    let run = rt.block_on(chat.run(&support::executor(), "Hello", RunConfig::new())).unwrap();
    assert_eq!(run.final_text(), Some("Hi."));
    // A model that calls a tool it was never shown fails the node, named.
    let confused =
        Agent::new("chat", model(vec![call("lookup_user", json!({"id": 7}))])).compile().unwrap();
    let error =
        rt.block_on(confused.run(&support::executor(), "Who?", RunConfig::new())).unwrap_err();
    let HarnessError::Run(RunError::NodeFailed { node, source, .. }) = &error else {
        panic!("{error}")
    };
    assert_eq!(node, "chat");
    let cause = source.cause().downcast_ref::<HarnessError>();
    assert!(
        matches!(cause, Some(HarnessError::ToolCallWithoutTools { tool, .. }) if tool == "lookup_user"),
        "{error}"
    );
    // With tools, the tools node is there and the route's edges are named.
    let (lookup, _) = counting("lookup_user");
    let helper = Agent::new("helper", model(vec![text("-")])).tool(lookup).compile().unwrap();
    let labels: Vec<(String, String, Option<String>)> =
        helper.graph().shape().edges.into_iter().map(|e| (e.from, e.to, e.label)).collect();
    assert!(labels.contains(&("helper".into(), "helper.tools".into(), Some("calls tools".into()))));
    assert!(labels.contains(&("helper".into(), "__end__".into(), Some("answers".into()))));
}

#[test]
fn a_script_that_runs_out_is_a_typed_error() {
    let rt = support::runtime();
    let (tool, _) = counting("t");
    let agent =
        Agent::new("short", model(vec![call("t", json!({"id": 1}))])).tool(tool).compile().unwrap();
    let error = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap_err();
    assert!(error.to_string().contains("has 1 replies; call 2 asked for one more"), "{error}");
}

#[test]
fn streaming_reports_deltas_that_join_to_the_answer() {
    let rt = support::runtime();
    let chunks = ScriptReply::Stream(vec!["Hel".into(), "lo, ".into(), "wörld".into()]);
    let agent = Agent::new("s", model(vec![chunks])).streaming(true).compile().unwrap();
    let run = rt.block_on(agent.run(&support::executor(), "hi", RunConfig::new())).unwrap();
    let deltas: String = run
        .events()
        .iter()
        .filter_map(|e| match &e.event {
            Event::ModelDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "Hello, wörld");
    assert_eq!(run.final_text(), Some("Hello, wörld"));
}

#[test]
fn a_typed_tool_gets_its_schema_from_the_rust_type_and_decoded_arguments() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Lookup {
        /// The order.
        id: u32,
    }
    let tool = FnTool::typed("lookup", "Find an order", |args: Lookup, ctx| async move {
        Ok(json!({"id": args.id, "call": ctx.call_id()}))
    });
    let schema = &tollgate::Tool::spec(&tool).parameters;
    assert_eq!(schema["properties"]["id"]["type"], "integer");
    assert_eq!(schema["required"], json!(["id"]));
    let rt = support::runtime();
    let agent = Agent::new(
        "t",
        model(vec![
            call("lookup", json!({"id": -1})),
            call("lookup", json!({"id": 3})),
            text("ok"),
        ]),
    )
    .tool(tool)
    .compile()
    .unwrap();
    let run = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap();
    let results: Vec<(&str, bool)> = run
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, is_error, .. } => Some((content.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert!(results[0].1 && results[0].0.contains("minimum"), "u32 rejects -1: {results:?}");
    assert_eq!(results[1], (r#"{"call":"call_1_0","id":3}"#, false));
}

#[test]
fn concurrent_sub_agents_stay_attributable_and_apart() {
    use tollgate::{AgentState, StateGraph, END, START};
    use tollgate_testkit::{FakeTool, ScriptedModel as Expecting};
    let rt = support::runtime();
    let model = |tool: &str| {
        Expecting::builder().tool_call(tool, json!({"id": 1})).reply(format!("{tool} done")).build()
    };
    let (left, right) = (model("l_tool"), model("r_tool"));
    let graph = StateGraph::<AgentState>::new("pair", 1).edge(START, "left").edge(START, "right");
    let graph = Agent::new("left", Arc::new(left.clone()))
        .tool(FakeTool::new("l_tool", json!("L")))
        .add_to(graph, &[END])
        .unwrap();
    let graph = Agent::new("right", Arc::new(right.clone()))
        .tool(FakeTool::new("r_tool", json!("R")))
        .add_to(graph, &[END])
        .unwrap();
    let graph = graph.compile().unwrap();
    let executor = support::executor();
    let input =
        AgentState { messages: vec![Message::user("input.0", "go")], ..AgentState::default() };
    let outcome = rt.block_on(executor.run(&graph, input, RunConfig::new())).unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    // Both ran in the same steps, as tasks 0 and 1.
    let records = rt.block_on(executor.store().events(outcome.run_id, 0, u64::MAX)).unwrap();
    let events: Vec<tollgate::EventEnvelope> =
        records.iter().map(|r| serde_json::from_str(&r.json).unwrap()).collect();
    let tools: Vec<(String, String, String)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ToolStarted { agent, tool, .. } => {
                Some((agent.clone(), tool.clone(), e.node_id.clone().unwrap()))
            }
            _ => None,
        })
        .collect();
    let mut tools = tools;
    tools.sort();
    assert_eq!(
        tools,
        [
            ("left".into(), "l_tool".into(), "left.tools:2.0".into()),
            ("right".into(), "r_tool".into(), "right.tools:2.1".into())
        ]
    );
    // Each model saw only the input and its own traffic.
    for (model, own, other) in [(&left, "l_tool", "r_tool"), (&right, "r_tool", "l_tool")] {
        let second = &model.requests()[1];
        let names: Vec<&str> = second
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(names, [own], "{own} agent saw {other}'s results");
    }
    let answers: Vec<&str> = outcome
        .state
        .messages
        .iter()
        .filter(|m| {
            m.agent().is_some()
                && m.tool_calls().is_empty()
                && matches!(m, Message::Assistant { .. })
        })
        .map(|m| m.content())
        .collect();
    assert_eq!(answers, ["l_tool done", "r_tool done"], "merged in task order");
}
