//! Load workloads: many runs at once on one executor (`concurrent`), and a
//! big state with small updates (`big_state`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{
    Executor, GraphState, NodeContext, Route, RunConfig, RunId, StateGraph, Store, END, START,
};

use crate::stream::quantile;
use crate::{cycle_on, extend, line, Backend, Counter, CounterUpdate, Outcome};

/// Rounds of [`concurrent`], one after the other on one store: one round
/// lasts about 0.1 s on SQLite, so a single one is at the mercy of one
/// stall of the machine, and a store that has run a while restarts its
/// WAL as often as a service's would.
const ROUNDS: u64 = 5;

/// 256 runs x 50 steps started together on one executor, [`ROUNDS`]
/// times on the same store: the aggregate durable step rate (the median
/// round's), the time between two consecutive steps of a run (p50, p99
/// over the gaps of all rounds together: one durable step of it while 255
/// others run), and the single-run cycle measured on that store first for
/// the ratio.
pub(crate) async fn concurrent(backend: &Backend) -> Outcome {
    let (runs, steps) = (256u64, 50u64);
    let store: Arc<dyn Store> = backend.open("concurrent").await?;
    // The single run first (warmed up), on the same store.
    cycle_on(Arc::clone(&store), 50).await?;
    let mut single = Vec::new();
    for _ in 0..3 {
        single.push(cycle_on(Arc::clone(&store), 1_000).await? / 1_000.0);
    }
    let single_per_step = crate::median(single);
    let (mut rates, mut p99s, mut gaps) = (Vec::new(), Vec::new(), Vec::new());
    let mut seconds = 0.0;
    for _ in 0..ROUNDS {
        let (round_seconds, mut round_gaps) =
            concurrent_round(Arc::clone(&store), runs, steps).await?;
        seconds += round_seconds;
        rates.push((runs * steps) as f64 / round_seconds);
        p99s.push(quantile(&mut round_gaps, 0.99));
        gaps.append(&mut round_gaps);
    }
    drop(store);
    let total = ROUNDS * runs * steps;
    let steps_per_s = crate::median(rates.clone());
    let single_rate = 1.0 / single_per_step;
    Ok(extend(
        line(
            "concurrent",
            ROUNDS * runs,
            seconds,
            total,
            backend.bytes("concurrent").await?,
            total,
        ),
        json!({
            "runs": runs,
            "steps_per_run": steps,
            "rounds": ROUNDS,
            "steps_per_s": steps_per_s,
            "step_p50_us": quantile(&mut gaps, 0.50),
            "step_p90_us": quantile(&mut gaps, 0.90),
            "step_p99_us": quantile(&mut gaps, 0.99),
            "step_max_us": quantile(&mut gaps, 1.0),
            "round_steps_per_s": rates,
            "round_step_p99_us": p99s,
            "single_steps_per_s": single_rate,
            "speedup_over_single": steps_per_s / single_rate,
        }),
    ))
}

/// One round of [`concurrent`] on `store`: its seconds from the release of
/// the runs to the last one's end, and the gaps (us) between two
/// consecutive steps of every run.
async fn concurrent_round(
    store: Arc<dyn Store>,
    runs: u64,
    steps: u64,
) -> Result<(f64, Vec<f64>), Box<dyn std::error::Error>> {
    let executor = Executor::with_store(store);
    // Each run's node calls, timed: the gap between two calls of one run
    // is one durable step of it (commit included).
    let stamps: Arc<Mutex<HashMap<RunId, Vec<Instant>>>> = Arc::default();
    let recorder = Arc::clone(&stamps);
    // Started together: every run's first step waits here until all 256
    // exist, then they go at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(runs as usize + 1));
    let gate = Arc::clone(&barrier);
    let graph =
        StateGraph::<Counter>::new("concurrent", 1)
            .node("inc", move |_s: Arc<Counter>, ctx: NodeContext| {
                let (recorder, gate) = (Arc::clone(&recorder), Arc::clone(&gate));
                async move {
                    if ctx.step() == 1 {
                        gate.wait().await;
                    }
                    let now = Instant::now();
                    recorder.lock().expect("stamps").entry(ctx.run_id()).or_default().push(now);
                    Ok(CounterUpdate::default().count(1))
                }
            })
            .edge(START, "inc")
            .route("inc", ["inc", END], move |s: &Counter| {
                if s.count < steps {
                    Route::to("inc")
                } else {
                    Route::end()
                }
            })
            .compile()?;
    let mut handles = Vec::new();
    for _ in 0..runs {
        let config = RunConfig::new().max_steps(steps);
        handles.push(executor.start(&graph, Counter::default(), config).await?);
    }
    barrier.wait().await;
    let started = Instant::now();
    for handle in handles {
        let outcome = handle.wait().await?;
        assert_eq!(outcome.state.count, steps, "every run ran every step");
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut gaps = Vec::new();
    for calls in stamps.lock().expect("stamps").values() {
        assert_eq!(calls.len() as u64, steps, "one call per step of every run");
        gaps.extend(calls.windows(2).map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6));
    }
    assert_eq!(gaps.len() as u64, runs * (steps - 1));
    Ok((seconds, gaps))
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Big {
    /// The bulk of the state, written once with the input.
    blob: String,
    /// One line per step.
    #[reducer(append)]
    lines: Vec<String>,
}

/// A 1 MB state, 1 KB appended per step, 500 steps: the time per step and
/// the bytes the database grew by per step, snapshots included (the growth
/// of a 500-step run's database over a 1-step run's, per extra step). Part
/// of that growth is the run's result (the final state, kept once in its
/// `run_ended` event), which is 500 KB larger after 500 appends: it is
/// reported apart, with the growth per step without it.
pub(crate) async fn big_state(backend: &Backend) -> Outcome {
    let (steps, update) = (500u64, 1_024usize);
    let long = big_run(backend, "big_state", steps, update).await?;
    let base = big_run(backend, "big_state_base", 1, update).await?;
    let extra = (steps - 1) as f64;
    let per_step = long.bytes.saturating_sub(base.bytes) as f64 / extra;
    let result_growth = long.result_bytes.saturating_sub(base.result_bytes) as f64 / extra;
    Ok(extend(
        line("big_state", steps, long.seconds, steps, long.bytes, steps),
        json!({
            "state_bytes": 1 << 20,
            "update_bytes": update,
            "bytes_written_per_step": per_step,
            "per_step_over_update": per_step / update as f64,
            "result_bytes": long.result_bytes,
            "result_growth_per_step": result_growth,
            "per_step_without_result_over_update": (per_step - result_growth) / update as f64,
            "snapshots": long.snapshots,
            "base_db_bytes": base.bytes,
        }),
    ))
}

/// What one [`big_run`] took and left.
struct BigRun {
    seconds: f64,
    /// The database's bytes once closed.
    bytes: u64,
    /// Snapshots taken after the input.
    snapshots: usize,
    /// The length of the run's `run_ended` line (its result is the final
    /// state).
    result_bytes: u64,
}

/// One run of `steps` appends on a fresh store `name`.
async fn big_run(
    backend: &Backend,
    name: &str,
    steps: u64,
    update: usize,
) -> Result<BigRun, Box<dyn std::error::Error>> {
    let graph = StateGraph::<Big>::new("big_state", 1)
        .node("append", move |state: Arc<Big>, _ctx| {
            let line = format!("{:0>width$}", state.lines.len(), width = update);
            async move { Ok(BigUpdate::default().lines(vec![line])) }
        })
        .edge(START, "append")
        .route("append", ["append", END], move |s: &Big| {
            if (s.lines.len() as u64) < steps {
                Route::to("append")
            } else {
                Route::end()
            }
        })
        .compile()?;
    let store = backend.open(name).await?;
    let executor = Executor::with_store(Arc::clone(&store));
    let input = Big { blob: "x".repeat(1 << 20), lines: Vec::new() };
    let started = Instant::now();
    let outcome = executor.run(&graph, input, RunConfig::new().max_steps(steps)).await?;
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(outcome.state.lines.len() as u64, steps, "every step appended");
    let page = store.history(outcome.run_id, None, 1_000).await?;
    let snapshots = page.checkpoints.iter().filter(|c| c.snapshot && c.step > 0).count();
    let events = store.events(outcome.run_id, 0, u64::MAX).await?;
    let ended = events.iter().rev().find(|e| e.json.contains("\"event_type\":\"run_ended\""));
    let result_bytes = ended.ok_or("the run has no run_ended event")?.json.len() as u64;
    drop((executor, store));
    Ok(BigRun { seconds, bytes: backend.bytes(name).await?, snapshots, result_bytes })
}
