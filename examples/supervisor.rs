//! A supervisor with two sub-agents running at the same time.
//!
//! A plain node plans the work, then two agents (a researcher and a critic,
//! each with its own model, tools and script) run concurrently in the same
//! super-steps. Their events interleave in one log, yet every event names
//! its agent and its node instance (`node_id`), and each agent's model sees
//! only the input and its own tool traffic. Both answers end up in the
//! shared conversation.
//!
//! Run it with `cargo run --example supervisor`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::{
    Agent, AgentState, AgentStateUpdate, Event, EventSink, Executor, FnTool, HarnessError,
    MemoryStore, Message, MessageOp, RunConfig, ScriptReply, ScriptedModel, StateGraph, ToolSpec,
    END, START,
};

fn search_tool(name: &str, delay_ms: u64) -> FnTool {
    let spec = ToolSpec::new(
        name,
        "Search a source",
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
    );
    FnTool::new(spec, move |args, _ctx| async move {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        Ok::<_, HarnessError>(json!({"hits": [format!("result for {}", args["q"])]}))
    })
}

fn scripted(name: &str, tool: &str, query: &str, answer: &str) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(
        name,
        vec![
            ScriptReply::ToolCalls(vec![(tool.into(), json!({"q": query}), None)]),
            ScriptReply::Text(answer.into()),
        ],
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let researcher = Agent::new(
        "researcher",
        scripted("research-model", "web", "battery recycling", "Facts: 3 sources agree."),
    )
    .system("You research.")
    .tool(search_tool("web", 30));
    let critic = Agent::new(
        "critic",
        scripted("critic-model", "papers", "recycling criticism", "Risks: cost, purity."),
    )
    .system("You look for weaknesses.")
    .tool(search_tool("papers", 10));

    let graph = StateGraph::<AgentState>::new("supervisor", 1)
        .node("plan", |_state, _ctx| async {
            let note = Message::assistant(
                "plan.0",
                "Plan: research the topic and criticise it, in parallel.",
            );
            Ok(AgentStateUpdate::default().messages(vec![MessageOp::Upsert(note)]))
        })
        .edge(START, "plan")
        .edge("plan", "researcher")
        .edge("plan", "critic");
    let graph = researcher.add_to(graph, &[END])?;
    let graph = critic.add_to(graph, &[END])?.compile()?;

    let (sink, mut events) = EventSink::channel();
    let printer = tokio::spawn(async move {
        while let Some(envelope) = events.recv().await {
            let node_id = envelope.node_id.unwrap_or_default();
            match envelope.event {
                Event::ModelStarted { agent, model, .. } => {
                    println!("{:>3} {node_id:<18} {agent:<10} calls {model}", envelope.seq)
                }
                Event::ToolStarted { agent, tool, .. } => {
                    println!("{:>3} {node_id:<18} {agent:<10} runs {tool}", envelope.seq)
                }
                Event::ToolCompleted { agent, tool, summary, .. } => {
                    println!("{:>3} {node_id:<18} {agent:<10} {tool} -> {summary}", envelope.seq)
                }
                Event::RunEnded { status, .. } => println!("{:>3} run {status}", envelope.seq),
                _ => {}
            }
        }
    });
    let executor = Executor::new(MemoryStore::new());
    let input = AgentState {
        messages: vec![Message::user("input.0", "Is battery recycling worth it?")],
        ..AgentState::default()
    };
    let outcome = executor.run(&graph, input, RunConfig::new().events(sink)).await?;
    printer.await?;

    let answers: Vec<(&str, &str)> = outcome
        .state
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Assistant { tool_calls, .. } if tool_calls.is_empty()))
        .filter_map(|m| m.agent().map(|agent| (agent, m.content())))
        .collect();
    println!("answers: {answers:?}");
    assert_eq!(answers.len(), 2, "both sub-agents answered");
    // Neither agent's model saw the other's tool calls.
    for agent in ["researcher", "critic"] {
        let seen = outcome.state.messages.iter().filter(|m| m.visible_to(agent));
        assert!(seen
            .filter(|m| m.agent().is_some_and(|a| a != agent))
            .all(|m| m.tool_calls().is_empty()));
    }
    Ok(())
}
