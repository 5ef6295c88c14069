//! A refund agent with an approval gate, decided from "another process".
//!
//! The agent looks the order up (a fixture tool), then asks to refund it.
//! `issue_refund` needs a person's approval, so the run pauses
//! (`awaiting_hitl`) and this process lets go of it. A reviewer that has
//! only the database (the CLI, a web page) records the decision; the process
//! that owns the agent picks the decided run up with `recover` and finishes
//! it. The refund runs exactly once, after approval.
//!
//! Run it with `cargo run --example refund_agent` (database in
//! `$TOLLGATE_DB`, else a temporary folder).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use serde_json::json;
use tollgate::{
    Agent, Decision, DecisionRequest, Executor, FixtureTool, FnTool, HarnessError, RunConfig,
    RunStatus, ScriptReply, ScriptedModel, SqliteStore, ToolSpec,
};

fn order_schema() -> serde_json::Value {
    json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]})
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = std::env::temp_dir().join(format!("tollgate-refunds-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let db = std::env::var("TOLLGATE_DB").map_or(scratch.join("refunds.db"), Into::into);

    let refunds = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&refunds);
    let issue_refund = FnTool::new(
        ToolSpec::new("issue_refund", "Refund an order", order_schema()),
        move |args, ctx| {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                println!(
                    "  refunding order {} (idempotency key {})",
                    args["id"],
                    ctx.idempotency_key()
                );
                Ok::<_, HarnessError>(json!({"refunded": true, "amount": 20}))
            }
        },
    );
    let model = ScriptedModel::new(
        "scripted",
        vec![
            ScriptReply::ToolCalls(vec![("lookup_order".into(), json!({"id": 7}), None)]),
            ScriptReply::ToolCalls(vec![("issue_refund".into(), json!({"id": 7}), None)]),
            ScriptReply::Text("Order 7 was refunded: 20 EUR.".into()),
        ],
    );
    let agent = Agent::new("refunds", Arc::new(model))
        .system("You handle refund requests.")
        .tool(FixtureTool::new(
            ToolSpec::new("lookup_order", "Find an order", order_schema()),
            json!({"id": 7, "amount": 20}),
        ))
        .tool(issue_refund)
        .require_approval(["issue_refund"])
        .compile()?;

    // The agent's process: run until the approval gate.
    let executor = Executor::new(SqliteStore::open(&db)?);
    let paused = agent.run(&executor, "Please refund order 7.", RunConfig::new()).await?;
    assert_eq!(paused.status, RunStatus::AwaitingHitl);
    let interrupt = &paused.interrupts[0];
    println!("run {} waits: {} {}", paused.run_id, interrupt.kind, interrupt.payload);
    assert_eq!(refunds.load(Ordering::SeqCst), 0, "nothing is refunded before approval");

    // The reviewer: only the database, no graph.
    let reviewer = Executor::new(SqliteStore::open(&db)?);
    let decided = reviewer
        .decide(paused.run_id, DecisionRequest::on(&interrupt.id, Decision::Approve))
        .await?;
    println!("reviewer approved; run is {:?}", decided.status);

    // The agent's process picks decided runs up and finishes them.
    for handle in executor.recover(agent.graph(), RunConfig::new()).await? {
        let outcome = handle.wait().await?;
        let answer = outcome.state.messages.last().map(|m| m.content().to_owned());
        println!("run {} {:?}: {}", outcome.run_id, outcome.status, answer.unwrap_or_default());
        assert_eq!(outcome.status, RunStatus::Completed);
    }
    assert_eq!(refunds.load(Ordering::SeqCst), 1, "refunded exactly once");
    std::fs::remove_dir_all(&scratch)?;
    Ok(())
}
