//! A durable workflow in plain async Rust: a refund, written as ordinary
//! code (a loop, `?`, `tokio::join!`) whose steps are tasks stored as they
//! finish, on the embedded SQLite store (`$TOLLGATE_DB`, else
//! `./tollgate-workflow.db`).
//!
//! 1. The order and the customer are looked up in parallel, the refund is
//!    checked, and the run pauses for a person's approval.
//! 2. A second executor (what another process would be) approves it; the
//!    workflow runs again from its top, every finished task returns its
//!    stored result without running, and `interrupt` returns the approval.
//! 3. The payment service fails once: the run fails; `continue_run` runs
//!    only the payment again.
//!
//! Run it with `cargo run --example workflow`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{
    Decision, DecisionRequest, Executor, Interrupt, NodeError, RunConfig, RunStatus, SqliteStore,
    Workflow, WorkflowContext,
};

/// What a refund is asked for.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Refund {
    order: u32,
    amount: u32,
}

/// What the workflow returns.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Receipt {
    customer: String,
    refunded: u32,
    payment: String,
}

/// Calls each side effect made, by name (a real workflow would call
/// services; here they count, so the program can show what ran).
#[derive(Default)]
struct Calls {
    look_ups: AtomicU32,
    payments: AtomicU32,
}

fn refund_workflow(calls: Arc<Calls>) -> Workflow<Refund, Receipt> {
    Workflow::new("refund", 1, move |ctx: WorkflowContext, refund: Refund| {
        let calls = Arc::clone(&calls);
        async move {
            // Two look-ups at once; each is stored as it finishes.
            let counted = Arc::clone(&calls);
            let (order, customer) = tokio::join!(
                ctx.task("look_up_order", move || async move {
                    counted.look_ups.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({"order": refund.order, "paid": 120}))
                }),
                ctx.task("look_up_customer", || async { Ok("Ada".to_owned()) }),
            );
            let (order, customer) = (order?, customer?);
            let paid = order["paid"].as_u64().unwrap_or(0) as u32;
            let amount = refund.amount.min(paid);
            // A person approves refunds: the run pauses here, durably.
            let decision = ctx.interrupt(Interrupt::new(
                "approval",
                json!({"customer": customer, "refund": amount}),
            ))?;
            if !matches!(decision, Decision::Approve) {
                return Ok(Receipt { customer, refunded: 0, payment: "declined".into() });
            }
            let payment = ctx
                .task("pay", move || async move {
                    // The payment service is down on its first call.
                    match calls.payments.fetch_add(1, Ordering::SeqCst) {
                        0 => Err(NodeError::fatal("payment service unavailable")),
                        _ => Ok(format!("pay_{}", refund.order)),
                    }
                })
                .await?;
            Ok(Receipt { customer, refunded: amount, payment })
        }
    })
    .expect("a valid workflow name")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::var("TOLLGATE_DB").unwrap_or_else(|_| "tollgate-workflow.db".into());
    let calls = Arc::new(Calls::default());
    let workflow = refund_workflow(Arc::clone(&calls));

    // 1. Start: the look-ups run, then the run pauses for approval.
    let executor = Executor::new(SqliteStore::open(&path)?);
    let input = workflow.input(&Refund { order: 7, amount: 80 })?;
    let paused = executor.run(workflow.graph(), input, RunConfig::new()).await?;
    assert_eq!(paused.status, RunStatus::AwaitingHitl);
    let run = paused.run_id;
    println!("run {run}: waiting for {}", paused.interrupts[0].payload);

    // 2. Approved from another executor on the same database.
    let reviewer = Executor::new(SqliteStore::open(&path)?);
    let approve = DecisionRequest::new(Decision::Approve);
    let error = match reviewer.resume_run(workflow.graph(), run, approve, RunConfig::new()).await {
        Err(error) => error,
        Ok(_) => return Err("the payment service should have failed once".into()),
    };
    println!("run {run}: failed at the payment: {error}");
    assert_eq!(calls.look_ups.load(Ordering::SeqCst), 1, "the look-up ran once");

    // 3. Continued: only the payment runs again.
    let done = reviewer.continue_run(workflow.graph(), run, RunConfig::new()).await?.wait().await?;
    assert_eq!(done.status, RunStatus::Completed);
    let receipt = workflow.output(&done.state)?.ok_or("the workflow returned no output")?;
    assert_eq!(receipt, Receipt { customer: "Ada".into(), refunded: 80, payment: "pay_7".into() });
    assert_eq!(calls.look_ups.load(Ordering::SeqCst), 1, "still once: its result was stored");
    assert_eq!(calls.payments.load(Ordering::SeqCst), 2, "the failed payment and its retry");
    println!("run {run}: {receipt:?}");

    // The run's log shows each task once.
    let events = reviewer.store().events(run, 0, u64::MAX).await?;
    let tasks: Vec<String> = events
        .iter()
        .filter_map(|event| serde_json::from_str::<serde_json::Value>(&event.json).ok())
        .filter(|line| line["event_type"] == "task_completed")
        .map(|line| line["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    println!("tasks completed: {}", tasks.join(", "));
    Ok(())
}
