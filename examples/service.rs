//! A service embedding the executor: it owns its graphs, starts runs
//! concurrently, lets a reviewer decide from elsewhere, and on (re)start
//! picks up every run that is waiting for it.
//!
//! The "reviewer" here is a second `Executor` on the same database with no
//! graph at all (in real life: `tollgate runs resume`, or the HTTP server).
//! `recover` then continues the decided runs, and any run whose owner died.
//!
//! Run it with `cargo run --example service` (database in `$TOLLGATE_DB`,
//! else a temporary folder).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{
    Decision, DecisionRequest, Executor, GraphState, Interrupt, NodeContext, PageRequest,
    RunConfig, RunFilter, RunStatus, SqliteStore, StateGraph, END, START,
};

/// An expense claim.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Claim {
    amount: u32,
    #[reducer(append)]
    log: Vec<String>,
}

fn graph() -> tollgate::CompiledGraph<Claim> {
    StateGraph::<Claim>::new("expenses", 1)
        .node("check", |state: Arc<Claim>, ctx: NodeContext| async move {
            // Large claims need a person.
            if state.amount > 100 {
                ctx.interrupt(Interrupt::new("approval", json!({"amount": state.amount})))?;
            }
            Ok(ClaimUpdate::default().log(vec![format!("checked {}", state.amount)]))
        })
        .node("pay", |state: Arc<Claim>, _ctx| async move {
            Ok(ClaimUpdate::default().log(vec![format!("paid {}", state.amount)]))
        })
        .edge(START, "check")
        .edge("check", "pay")
        .edge("pay", END)
        .compile()
        .expect("the graph compiles")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = std::env::temp_dir().join(format!("tollgate-service-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let db = std::env::var("TOLLGATE_DB").map_or(scratch.join("service.db"), Into::into);
    let graph = graph();

    // The service starts claims concurrently.
    let service = Executor::new(SqliteStore::open(&db)?);
    let mut handles = Vec::new();
    for amount in [40, 250, 75, 900] {
        let claim = Claim { amount, ..Claim::default() };
        handles.push(
            service
                .start(&graph, claim, RunConfig::new().thread(format!("claim-{amount}")))
                .await?,
        );
    }
    let mut waiting = Vec::new();
    for handle in handles {
        let outcome = handle.wait().await?;
        println!("claim {:>3}: {:?}", outcome.state.amount, outcome.status);
        if outcome.status == RunStatus::AwaitingHitl {
            waiting.push(outcome.run_id);
        }
    }
    assert_eq!(waiting.len(), 2, "the two large claims wait for a person");

    // A reviewer elsewhere: same database, no graph.
    let reviewer = Executor::new(SqliteStore::open(&db)?);
    reviewer.decide(waiting[0], DecisionRequest::new(Decision::Approve)).await?;
    let rejected = reviewer
        .decide(
            waiting[1],
            DecisionRequest::new(Decision::Reject { reason: Some("no receipt".into()) }),
        )
        .await?;
    println!("reviewer: approved one, rejected one ({:?})", rejected.status);

    // The service (say, after a restart) picks up what waits for it.
    for handle in service.recover(&graph, RunConfig::new()).await? {
        let outcome = handle.wait().await?;
        println!("recovered {}: {:?} {:?}", outcome.run_id, outcome.status, outcome.state.log);
        assert_eq!(outcome.status, RunStatus::Completed);
    }

    // Newest first, with their status.
    let page = service
        .store()
        .list_runs(&RunFilter::default(), &PageRequest { limit: 10, cursor: None })
        .await?;
    for run in &page.runs {
        println!("{} {:<8} {:?}", run.id, run.thread.as_deref().unwrap_or("-"), run.status);
    }
    let statuses: Vec<RunStatus> = page.runs.iter().take(4).map(|r| r.status).collect();
    assert_eq!(statuses.iter().filter(|s| **s == RunStatus::Completed).count(), 3);
    assert_eq!(statuses.iter().filter(|s| **s == RunStatus::Rejected).count(), 1);
    std::fs::remove_dir_all(&scratch)?;
    Ok(())
}
