//! Durable workflows: `workflow_tasks` (one workflow of 1,000 sequential
//! tasks, each stored as it finishes; per task, against the `cycle` step
//! measured on the same backend in the same run) and `workflow_resume` (a
//! workflow that ran 1,000 tasks and paused at an interrupt is decided and
//! resumed: decision to completion, the replay of every stored task
//! included).

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tollgate::{
    Decision, DecisionRequest, Executor, Interrupt, RunConfig, RunStatus, Store, Workflow,
    WorkflowContext,
};

use crate::backend::Backend;
use crate::{cycle_on, extend, line, median, Outcome};

const TASKS: u32 = 1_000;

/// `tasks` sequential tasks, each returning its position; with `ask`, an
/// approval after them.
fn workflow(ask: bool) -> Workflow<u32, u64> {
    Workflow::new("bench_workflow", 1, move |ctx: WorkflowContext, tasks: u32| async move {
        let mut sum = 0u64;
        for i in 0..tasks {
            sum += ctx.task("step", move || async move { Ok(u64::from(i)) }).await?;
        }
        if ask {
            ctx.interrupt(Interrupt::new("approval", json!({"sum": sum})))?;
        }
        Ok(sum)
    })
    .expect("a valid name")
}

async fn tasks_on(store: Arc<dyn Store>) -> Result<f64, Box<dyn std::error::Error>> {
    let executor = Executor::with_store(store);
    let flow = workflow(false);
    let started = Instant::now();
    let outcome = executor.run(flow.graph(), flow.input(&TASKS)?, RunConfig::new()).await?;
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(flow.output(&outcome.state)?, Some(u64::from(TASKS) * u64::from(TASKS - 1) / 2));
    Ok(seconds)
}

/// `workflow_tasks`: five runs of 1,000 tasks and five 1,000-step cycles on
/// one store, medians of each.
pub(crate) async fn tasks(backend: &Backend) -> Outcome {
    let store = backend.open("workflow_tasks").await?;
    tasks_on(Arc::clone(&store)).await?; // warm-up
    cycle_on(Arc::clone(&store), 50).await?;
    let (mut flows, mut cycles) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        flows.push(tasks_on(Arc::clone(&store)).await?);
        cycles.push(cycle_on(Arc::clone(&store), u64::from(TASKS)).await?);
    }
    let (seconds, cycle) = (median(flows), median(cycles));
    drop(store);
    let n = u64::from(TASKS);
    let per_task_us = seconds * 1e6 / n as f64;
    let cycle_us = cycle * 1e6 / n as f64;
    let bytes = backend.bytes("workflow_tasks").await?;
    Ok(extend(
        line("workflow_tasks", n, seconds, n, bytes, 1),
        json!({
            "per_task_us": per_task_us,
            "cycle_per_step_us": cycle_us,
            "ratio_to_cycle": per_task_us / cycle_us,
        }),
    ))
}

/// `workflow_resume`: five runs that ran 1,000 tasks and paused, each
/// decided and resumed in this process; the median from the decision to
/// the run's completion.
pub(crate) async fn resume(backend: &Backend) -> Outcome {
    let store = backend.open("workflow_resume").await?;
    let executor = Executor::with_store(Arc::clone(&store));
    let flow = workflow(true);
    let mut samples = Vec::new();
    for _ in 0..6 {
        let paused = executor.run(flow.graph(), flow.input(&TASKS)?, RunConfig::new()).await?;
        assert_eq!(paused.status, RunStatus::AwaitingHitl);
        let started = Instant::now();
        let approve = DecisionRequest::new(Decision::Approve);
        let done =
            executor.resume_run(flow.graph(), paused.run_id, approve, RunConfig::new()).await?;
        let seconds = started.elapsed().as_secs_f64();
        let tollgate::Resumed::Continuing(done) = done else {
            return Err("the resumed workflow did not continue".into());
        };
        assert_eq!(done.status, RunStatus::Completed);
        samples.push(seconds);
    }
    samples.remove(0); // warm-up
    let seconds = median(samples);
    drop(executor);
    drop(store);
    let bytes = backend.bytes("workflow_resume").await?;
    let n = u64::from(TASKS);
    Ok(extend(
        line("workflow_resume", n, seconds, 1, bytes, 1),
        json!({"resume_us": seconds * 1e6}),
    ))
}
