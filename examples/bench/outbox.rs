//! `outbox_look`: what one look of the LangGraph API's dispatcher costs
//! with 100,000 blocked entries in the outbox (50,000 runs enqueued on
//! threads held by a run that waits for a decision, 50,000 webhooks of
//! runs that have not settled), all gated on that run: a look reads the
//! ready pending runs and the ready webhooks (one page of each, as the
//! dispatcher does), and finds none. Against the same look on an empty
//! outbox; medians of 200 looks each.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tollgate::{
    Executor, Interrupt, OutboxEntry, OutboxGate, OutboxQuery, RunConfig, RunStatus, StateGraph,
    Store, END, START,
};

use crate::backend::Backend;
use crate::{median, Counter, CounterUpdate, Outcome};

/// Blocked entries of each kind.
const EACH: usize = 50_000;
/// Looks timed at each size.
const LOOKS: usize = 200;

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
}

/// The dispatcher's look: a page of ready runs and a page of ready
/// webhooks; the median time of one, in microseconds.
async fn look(store: &Arc<dyn Store>) -> Result<f64, Box<dyn std::error::Error>> {
    let mut times = Vec::with_capacity(LOOKS);
    for _ in 0..LOOKS {
        let now = now_ms();
        let started = Instant::now();
        let runs = store.list_outbox(OutboxQuery::new("run", 64).ready(now)).await?;
        let hooks = store.list_outbox(OutboxQuery::new("webhook", 64).ready(now)).await?;
        times.push(started.elapsed().as_secs_f64() * 1e6);
        assert!(runs.is_empty() && hooks.is_empty(), "nothing is ready");
    }
    Ok(median(times))
}

pub(crate) async fn outbox_look(backend: &Backend) -> Outcome {
    let store = backend.open("outbox_look").await?;
    let graph = StateGraph::<Counter>::new("holder", 1)
        .node("ask", |_s: Arc<Counter>, ctx| async move {
            ctx.interrupt(Interrupt::new("approval", json!({})))?;
            Ok(CounterUpdate::default().count(1))
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()?;
    let executor = Executor::with_store(Arc::clone(&store));
    let holder = executor.run(&graph, Counter::default(), RunConfig::new()).await?;
    assert_eq!(holder.status, RunStatus::AwaitingHitl);
    let empty_us = look(&store).await?;

    let now = now_ms();
    let filled = Instant::now();
    for i in 0..EACH {
        let thread = Some(format!("thread-{i}"));
        let mut run =
            OutboxEntry::new(format!("run-{i:06}"), "run", thread.clone(), now, now, json!({}));
        run.gate = Some(OutboxGate::ended(holder.run_id));
        store.put_outbox(run).await?;
        let mut hook =
            OutboxEntry::new(format!("hook-{i:06}"), "webhook", thread, now, now, json!({}));
        hook.gate = Some(OutboxGate::settled(holder.run_id, 0));
        store.put_outbox(hook).await?;
    }
    let fill_s = filled.elapsed().as_secs_f64();
    let blocked_us = look(&store).await?;
    Ok(json!({
        "workload": "outbox_look",
        "n": EACH * 2,
        "look_us_empty": empty_us,
        "look_us_100k_blocked": blocked_us,
        "fill_seconds": fill_s,
        "db_bytes": backend.bytes("outbox_look").await?,
    }))
}
