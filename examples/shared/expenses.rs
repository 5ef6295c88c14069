//! The graphs the `embedded_server` and `expense_tool` examples serve.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{CompiledGraph, GraphState, Interrupt, NodeContext, StateGraph, END, START};

/// An expense claim.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Claim {
    pub(crate) amount: u32,
    #[reducer(append)]
    pub(crate) log: Vec<String>,
}

/// `expenses`: a claim over 100 waits for a person's approval, then is paid.
pub(crate) fn expenses() -> CompiledGraph<Claim> {
    StateGraph::<Claim>::new("expenses", 1)
        .node("check", |state: Arc<Claim>, ctx: NodeContext| async move {
            if state.amount > 100 {
                // What the review page shows: `title` as the question,
                // `description` under it, the other fields as a table.
                let question = json!({
                    "title": "Approve this expense?",
                    "description": "Claims over 100 EUR need a manager's approval.",
                    "amount": state.amount,
                });
                ctx.interrupt(Interrupt::new("approval", question))?;
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

/// What `expenses` takes (the fields of its state's update), for clients
/// and the review page's forms.
pub(crate) fn input_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "amount": {"type": "integer", "minimum": 0, "title": "Amount", "description": "In euros"},
            "log": {"type": "array", "items": {"type": "string"}, "title": "Log lines to add"}
        },
        "required": ["amount"],
        "additionalProperties": false
    })
}

/// `slow`: three nodes of 300 ms each in a chain, each appending its
/// name to `log` (for taking a run over from a process killed mid-run).
pub(crate) fn slow() -> CompiledGraph<Claim> {
    let step = |name: &'static str| {
        move |_state: Arc<Claim>, _ctx: NodeContext| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(ClaimUpdate::default().log(vec![name.to_owned()]))
        }
    };
    StateGraph::<Claim>::new("slow", 1)
        .node("a", step("a"))
        .node("b", step("b"))
        .node("c", step("c"))
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .edge("c", END)
        .compile()
        .expect("the graph compiles")
}
