//! Graphs and workflows called from a workflow: a graph as one durable
//! step, a workflow inline; a failure inside either resumes there, not
//! from the caller's start; a workflow inside a graph refused in words.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tollgate::{
    DynState, Executor, NodeError, RunConfig, StateGraph, Workflow, WorkflowContext, END, START,
};

use crate::workflows::{continued, only_run, sqlite, Ran};

#[tokio::test]
async fn a_workflow_calls_a_graph_as_one_of_its_steps() {
    let schema = tollgate::DynSchema::new().field("n", tollgate::DynReducer::Sum);
    let child = StateGraph::<DynState>::with_schema("double", 1, schema)
        .node("double", |state: Arc<DynState>, _ctx| async move {
            let n = state.get("n").and_then(Value::as_i64).unwrap_or(0);
            Ok(serde_json::Map::from_iter([("n".to_owned(), json!(n))]))
        })
        .edge(START, "double")
        .edge("double", END)
        .compile()
        .unwrap();
    let workflow = Workflow::new("caller", 1, move |ctx: WorkflowContext, n: i64| {
        let child = child.clone();
        async move {
            let before = ctx.task("before", move || async move { Ok(n + 1) }).await?;
            let input =
                DynState::from(serde_json::Map::from_iter([("n".to_owned(), json!(before))]));
            let doubled = ctx.call(&child, input).await?;
            Ok(doubled.get("n").cloned().unwrap_or_default())
        }
    })
    .unwrap();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let outcome = executor
        .run(workflow.graph(), workflow.input(&20).unwrap(), RunConfig::new())
        .await
        .unwrap();
    assert_eq!(workflow.output(&outcome.state).unwrap(), Some(json!(42)));
}

/// A workflow that calls another inline: the child's tasks are numbered
/// and stored with the caller's, named after the child; a failure inside
/// the child, continued, runs neither the caller's finished tasks nor the
/// child's again, only the one that failed.
#[tokio::test]
async fn a_called_workflow_resumes_where_it_failed_inside_its_caller() {
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let failing = Arc::new(Mutex::new(true));
    let charge = {
        let (ran, failing) = (ran.clone(), Arc::clone(&failing));
        Workflow::new("charge", 7, move |ctx: WorkflowContext, amount: u64| {
            let (ran, failing) = (ran.clone(), Arc::clone(&failing));
            async move {
                let r = ran.clone();
                let auth = ctx
                    .task("authorize", move || async move {
                        r.count("authorize");
                        Ok(format!("auth-{amount}"))
                    })
                    .await?;
                ctx.task("capture", move || async move {
                    ran.count("capture");
                    if *failing.lock().unwrap() {
                        return Err(NodeError::fatal("the bank is down"));
                    }
                    Ok(format!("{auth}:captured"))
                })
                .await
            }
        })
        .unwrap()
    };
    let order = {
        let ran = ran.clone();
        Workflow::new("order", 1, move |ctx: WorkflowContext, amount: u64| {
            let (ran, charge) = (ran.clone(), charge.clone());
            async move {
                let r = ran.clone();
                let total = ctx
                    .task("price", move || async move {
                        r.count("price");
                        Ok(amount * 2)
                    })
                    .await?;
                let receipt = ctx.call_workflow(&charge, total).await?;
                let r = ran.clone();
                ctx.task("ship", move || async move {
                    r.count("ship");
                    Ok(format!("shipped with {receipt}"))
                })
                .await
            }
        })
        .unwrap()
    };
    let executor = sqlite(dir.path());
    let error =
        executor.run(order.graph(), order.input(&21).unwrap(), RunConfig::new()).await.unwrap_err();
    assert!(error.to_string().contains("the bank is down"), "{error}");
    let run = only_run(&executor).await;
    *failing.lock().unwrap() = false;
    let outcome = continued(&sqlite(dir.path()), order.graph(), run).await;
    assert_eq!(
        order.output(&outcome.state).unwrap(),
        Some("shipped with auth-42:captured".to_owned())
    );
    assert_eq!(
        (ran.get("price"), ran.get("authorize"), ran.get("capture"), ran.get("ship")),
        (1, 1, 2, 1),
        "only the task that failed ran again"
    );
    let stored = executor.store().events(run, 0, u64::MAX).await.unwrap();
    let names: Vec<String> = stored
        .iter()
        .map(|event| serde_json::from_str::<Value>(&event.json).unwrap())
        .filter(|line| line["event_type"] == "task_completed")
        .map(|line| format!("{}:{}", line["task"], line["name"].as_str().unwrap()))
        .collect();
    assert_eq!(names, ["0:price", "1:charge/authorize", "2:charge/capture", "3:ship"]);
}

/// A graph called from a workflow fails in its second node: continued, its
/// first node and the workflow's task before the call are not run again.
#[tokio::test]
async fn a_crash_inside_a_called_graph_resumes_the_graph_not_the_workflow() {
    let dir = tempfile::tempdir().unwrap();
    let ran = Ran::default();
    let failing = Arc::new(Mutex::new(true));
    let schema = tollgate::DynSchema::new().field("n", tollgate::DynReducer::LastValue);
    let (ran_a, ran_b, fails) = (ran.clone(), ran.clone(), Arc::clone(&failing));
    let child = StateGraph::<DynState>::with_schema("pipeline", 1, schema)
        .node("a", move |state: Arc<DynState>, _ctx| {
            let ran = ran_a.clone();
            async move {
                ran.count("a");
                let n = state.get("n").and_then(Value::as_i64).unwrap_or(0);
                Ok(serde_json::Map::from_iter([("n".to_owned(), json!(n + 1))]))
            }
        })
        .node("b", move |state: Arc<DynState>, _ctx| {
            let (ran, fails) = (ran_b.clone(), Arc::clone(&fails));
            async move {
                ran.count("b");
                if *fails.lock().unwrap() {
                    return Err(NodeError::fatal("b is down"));
                }
                let n = state.get("n").and_then(Value::as_i64).unwrap_or(0);
                Ok(serde_json::Map::from_iter([("n".to_owned(), json!(n * 10))]))
            }
        })
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
        .unwrap();
    let r = ran.clone();
    let workflow = Workflow::new("caller", 1, move |ctx: WorkflowContext, n: i64| {
        let (child, ran) = (child.clone(), r.clone());
        async move {
            let before = ctx
                .task("before", move || async move {
                    ran.count("before");
                    Ok(n + 1)
                })
                .await?;
            let input =
                DynState::from(serde_json::Map::from_iter([("n".to_owned(), json!(before))]));
            let done = ctx.call(&child, input).await?;
            Ok(done.get("n").cloned().unwrap_or_default())
        }
    })
    .unwrap();
    let executor = sqlite(dir.path());
    let error = executor
        .run(workflow.graph(), workflow.input(&1).unwrap(), RunConfig::new())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("b is down"), "{error}");
    let run = only_run(&executor).await;
    *failing.lock().unwrap() = false;
    let outcome = continued(&sqlite(dir.path()), workflow.graph(), run).await;
    assert_eq!(workflow.output(&outcome.state).unwrap(), Some(json!(30)));
    assert_eq!((ran.get("before"), ran.get("a"), ran.get("b")), (1, 1, 2));
}

/// A workflow inside a graph (as a subgraph) is refused in words.
#[tokio::test]
async fn a_workflow_as_a_subgraph_is_refused_naming_call_workflow() {
    let inner =
        Workflow::new("inner", 1, |_ctx: WorkflowContext, n: u32| async move { Ok(n) }).unwrap();
    let schema = tollgate::DynSchema::new()
        .field("input", tollgate::DynReducer::LastValue)
        .field("output", tollgate::DynReducer::LastValue);
    let outer = StateGraph::<DynState>::with_schema("outer", 1, schema)
        .subgraph(
            "inner",
            inner.into_graph(),
            |state: &DynState, _send| Ok(state.clone()),
            |_state: &DynState, done: DynState| {
                Ok(serde_json::Map::from_iter(
                    done.get("output").map(|v| ("output".to_owned(), v.clone())),
                ))
            },
        )
        .edge(START, "inner")
        .edge("inner", END)
        .compile()
        .unwrap();
    let input = DynState::from(serde_json::Map::from_iter([("input".to_owned(), json!(3))]));
    let error = Executor::new(tollgate::MemoryStore::new())
        .run(&outer, input, RunConfig::new())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("call_workflow"), "{error}");
}
