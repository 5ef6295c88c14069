//! Tool safety: the allowlist, argument validation, the approval gate.

use std::sync::atomic::Ordering;

use serde_json::json;
use tollgate::{
    Agent, Decision, DecisionError, DecisionRequest, HarnessError, Message, RunConfig, RunError,
    RunStatus, ScriptReply, ToolRegistry, TOOL_APPROVAL,
};
use tollgate_testkit::assert_trajectory;

use crate::support::{self, call, counting, model, text};

fn tool_results(messages: &[Message]) -> Vec<(String, bool)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, is_error, .. } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[test]
fn tools_off_the_allowlist_are_never_called_and_the_model_is_told() {
    let rt = support::runtime();
    let (safe, safe_calls) = counting("safe");
    let (danger, danger_calls) = counting("delete_everything");
    let registry = ToolRegistry::new().register(safe).register(danger);
    let script = vec![
        call("delete_everything", json!({"id": 1})),
        call("safe", json!({"id": 2})),
        text("ok"),
    ];
    let agent = Agent::new("a", model(script)).tools(registry).allow(["safe"]).compile().unwrap();
    let run = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(danger_calls.load(Ordering::SeqCst), 0, "never called");
    assert_eq!(safe_calls.load(Ordering::SeqCst), 1);
    let results = tool_results(&run.messages);
    assert!(
        results[0].1 && results[0].0.contains("`delete_everything` is not available"),
        "{results:?}"
    );
    assert_trajectory(run.events()).no_tool_called("delete_everything").completed();
    // Only allowed tools were advertised.
    let advertised = Agent::new("b", model(vec![]))
        .tools(ToolRegistry::new().register(counting("x").0))
        .allow(["missing"])
        .compile()
        .unwrap_err();
    assert!(matches!(advertised, HarnessError::MissingTool { .. }), "{advertised}");
}

#[test]
fn malformed_arguments_go_back_to_the_model_as_a_tool_error() {
    let rt = support::runtime();
    let (lookup, calls) = counting("lookup");
    let script = vec![
        call("lookup", json!({"id": "seven"})),
        call("lookup", json!({"id": 7, "extra": true})),
        call("lookup", json!({"id": 7})),
        text("done"),
    ];
    let agent = Agent::new("a", model(script)).tool(lookup).compile().unwrap();
    let run = rt.block_on(agent.run(&support::executor(), "go", RunConfig::new())).unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "only the valid call ran");
    let results = tool_results(&run.messages);
    assert!(results[0].1 && results[0].0.contains("/id"), "names the bad field: {results:?}");
    assert!(results[1].1 && results[1].0.contains("extra"), "{results:?}");
    assert!(!results[2].1);
}

fn approval_agent() -> (tollgate::CompiledAgent, std::sync::Arc<std::sync::atomic::AtomicU32>) {
    let (refund, calls) = counting("issue_refund");
    let script = vec![call("issue_refund", json!({"id": 7})), text("handled")];
    let agent = Agent::new("refunds", model(script))
        .tool(refund)
        .require_approval(["issue_refund"])
        .compile()
        .unwrap();
    (agent, calls)
}

#[test]
fn approved_and_edited_calls_run_with_the_decided_arguments() {
    let rt = support::runtime();
    for (decision, expected) in [
        (Decision::Approve, json!({"id": 7})),
        (Decision::Edit { value: json!({"id": 8}) }, json!({"id": 8})),
    ] {
        let executor = support::executor();
        let (agent, calls) = approval_agent();
        let paused = rt.block_on(agent.run(&executor, "refund 7", RunConfig::new())).unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingHitl);
        assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing runs before approval");
        let interrupt = &paused.interrupts[0];
        assert_eq!(interrupt.kind, TOOL_APPROVAL);
        assert_eq!(interrupt.payload["args"], json!({"id": 7}));
        assert_trajectory(paused.events())
            .interrupted(TOOL_APPROVAL)
            .ended(RunStatus::AwaitingHitl);

        let request = DecisionRequest::new(decision);
        let done =
            rt.block_on(agent.resume(&executor, paused.run_id, request, RunConfig::new())).unwrap();
        assert_eq!(done.status, RunStatus::Completed);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_trajectory(done.events()).tool_called_with("issue_refund", expected).completed();
    }
}

#[test]
fn an_edit_that_breaks_the_schema_is_refused_and_changes_nothing() {
    let rt = support::runtime();
    let executor = support::executor();
    let (agent, _) = approval_agent();
    let paused = rt.block_on(agent.run(&executor, "refund 7", RunConfig::new())).unwrap();
    let bad = DecisionRequest::new(Decision::Edit { value: json!({"id": "seven"}) });
    let error =
        rt.block_on(agent.resume(&executor, paused.run_id, bad, RunConfig::new())).unwrap_err();
    assert!(
        matches!(error, HarnessError::Run(RunError::Decision(DecisionError::InvalidValue { .. }))),
        "{error}"
    );
    let record = rt.block_on(executor.store().run(paused.run_id)).unwrap();
    assert_eq!(record.status, RunStatus::AwaitingHitl);
}

#[test]
fn a_rejected_call_is_not_run_and_the_model_is_told_why() {
    let rt = support::runtime();
    let executor = support::executor();
    let (agent, calls) = approval_agent();
    let paused = rt.block_on(agent.run(&executor, "refund 7", RunConfig::new())).unwrap();
    let reject = DecisionRequest::new(Decision::Reject { reason: Some("over limit".into()) });
    let done =
        rt.block_on(agent.resume(&executor, paused.run_id, reject, RunConfig::new())).unwrap();
    assert_eq!(done.status, RunStatus::Completed, "the run goes on: the model decides what next");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let results = tool_results(&done.messages);
    assert_eq!(results, [("A person rejected this call: over limit".to_owned(), true)]);
    assert_eq!(done.final_text(), Some("handled"));
}

#[test]
fn two_approvals_in_one_turn_are_asked_one_by_one_before_anything_runs() {
    let rt = support::runtime();
    let executor = support::executor();
    let (refund, calls) = counting("issue_refund");
    let both = ScriptReply::ToolCalls(vec![
        ("issue_refund".into(), json!({"id": 1}), Some("c1".into())),
        ("issue_refund".into(), json!({"id": 2}), Some("c2".into())),
    ]);
    let agent = Agent::new("r", model(vec![both, text("ok")]))
        .tool(refund)
        .require_approval(["issue_refund"])
        .compile()
        .unwrap();
    let first = rt.block_on(agent.run(&executor, "go", RunConfig::new())).unwrap();
    assert_eq!(first.interrupts[0].payload["call_id"], "c1");
    // The person deciding reads what the tool does and what it was given.
    assert_eq!(first.interrupts[0].payload["description"], "The issue_refund tool");
    assert_eq!(first.interrupts[0].payload["args"], json!({"id": 1}));
    let approve = || DecisionRequest::new(Decision::Approve);
    let second =
        rt.block_on(agent.resume(&executor, first.run_id, approve(), RunConfig::new())).unwrap();
    assert_eq!(second.status, RunStatus::AwaitingHitl);
    assert_eq!(second.interrupts[0].payload["call_id"], "c2");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing ran between the two questions");
    let done =
        rt.block_on(agent.resume(&executor, first.run_id, approve(), RunConfig::new())).unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "each call ran once");
}
