//! An agent inside a durable workflow: its tool approval pauses the
//! workflow's run, and once approved the tool runs, the agent answers,
//! and the workflow's finished task is not run again.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use serde_json::json;
use tollgate::{
    Agent, AgentState, Decision, DecisionRequest, Message, Resumed, RunConfig, RunStatus, Workflow,
    WorkflowContext, TOOL_APPROVAL,
};

use crate::support::{self, call, counting, model, text};

#[test]
fn a_called_agents_tool_approval_pauses_the_workflow_and_its_decision_runs_the_tool() {
    let rt = support::runtime();
    let executor = support::executor();
    let (refund, refunds) = counting("issue_refund");
    let script = vec![call("issue_refund", json!({"id": 7})), text("handled")];
    let agent = Agent::new("refunds", model(script))
        .tool(refund)
        .require_approval(["issue_refund"])
        .compile()
        .unwrap();
    let graph = agent.graph().clone();
    let checks = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&checks);
    let workflow = Workflow::new("support", 1, move |ctx: WorkflowContext, request: String| {
        let (graph, counted) = (graph.clone(), Arc::clone(&counted));
        async move {
            let order = ctx
                .task("look_up", move || async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    Ok(7)
                })
                .await?;
            let input = AgentState {
                messages: vec![Message::user("u1", format!("{request} (order {order})"))],
                ..AgentState::default()
            };
            let done = ctx.call(&graph, input).await?;
            Ok(done.messages.last().map(|m| m.content().to_owned()).unwrap_or_default())
        }
    })
    .unwrap();
    let input = workflow.input(&"refund it".to_owned()).unwrap();
    let paused = rt.block_on(executor.run(workflow.graph(), input, RunConfig::new())).unwrap();
    assert_eq!(paused.status, RunStatus::AwaitingHitl);
    assert_eq!(paused.interrupts[0].kind, TOOL_APPROVAL);
    assert_eq!(paused.interrupts[0].payload["args"], json!({"id": 7}));
    assert_eq!(refunds.load(Ordering::SeqCst), 0, "nothing runs before approval");

    let approve = DecisionRequest::new(Decision::Approve);
    let resumed = rt
        .block_on(executor.resume_run(workflow.graph(), paused.run_id, approve, RunConfig::new()))
        .unwrap();
    let Resumed::Continuing(done) = resumed else { panic!("the run had one interrupt") };
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(workflow.output(&done.state).unwrap(), Some("handled".to_owned()));
    assert_eq!(refunds.load(Ordering::SeqCst), 1, "the approved call ran once");
    assert_eq!(checks.load(Ordering::SeqCst), 1, "the workflow's task did not run again");
}
