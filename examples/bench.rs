//! The benchmark program (DESIGN §9). Prints one JSON line per workload
//! with `--json`, a table otherwise.
//!
//! Workloads today: `noop` (a counter cycle on the in-memory store: the
//! engine's own per-step overhead). The SQLite workloads (`raw_commit`,
//! `cycle`, `fanout`, `growth`, `list`) and `hitl` join as their stores land.
//!
//! `cargo run --release --example bench -- --json`

use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{
    CompiledGraph, Executor, GraphState, MemoryStore, Route, RunConfig, StateGraph, END, START,
};

#[derive(Parser, Debug)]
#[command(about = "tollgate benchmarks")]
struct Args {
    /// Print one JSON object per workload instead of a table.
    #[arg(long)]
    json: bool,
    /// Steps per run.
    #[arg(long, default_value_t = 1_000)]
    steps: u64,
    /// Runs per workload; the median run is reported.
    #[arg(long, default_value_t = 31)]
    runs: usize,
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Counter {
    #[reducer(sum)]
    count: u64,
}

fn cycle(steps: u64) -> CompiledGraph<Counter> {
    StateGraph::<Counter>::new("cycle", 1)
        .node("inc", |_s: Arc<Counter>, _ctx| async move { Ok(CounterUpdate::default().count(1)) })
        .edge(START, "inc")
        .route(
            "inc",
            ["inc", END],
            move |s: &Counter| {
                if s.count < steps {
                    Route::to("inc")
                } else {
                    Route::end()
                }
            },
        )
        .compile()
        .expect("valid graph")
}

/// Peak resident set size of this process, from /proc (Linux).
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

async fn noop(args: &Args) -> serde_json::Value {
    let graph = cycle(args.steps);
    let config = RunConfig::new().max_steps(args.steps);
    // Warm up allocators and the runtime.
    let warm_up = Executor::new(MemoryStore::new());
    warm_up.run(&graph, Counter::default(), config.clone()).await.expect("warm-up run");
    let mut seconds = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        // A fresh store per run: each run pays for its own checkpoints,
        // not for the ones earlier runs left in memory.
        let executor = Executor::new(MemoryStore::new());
        let started = Instant::now();
        let outcome = executor.run(&graph, Counter::default(), config.clone()).await.expect("run");
        seconds.push(started.elapsed().as_secs_f64());
        assert_eq!(outcome.state.count, args.steps, "the cycle ran every step");
    }
    seconds.sort_by(f64::total_cmp);
    let median = seconds[seconds.len() / 2];
    json!({
        "workload": "noop",
        "n": args.steps,
        "seconds": median,
        "per_step_us": median * 1e6 / args.steps as f64,
        "db_bytes": 0,
        "peak_rss_mb": peak_rss_mb(),
        "checkpoints": args.steps,
        "runs": args.runs,
        "best_per_step_us": seconds[0] * 1e6 / args.steps as f64,
    })
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let results = vec![noop(&args).await];
    for result in &results {
        if args.json {
            println!("{result}");
        } else {
            println!(
                "{:<10} n={:<6} {:>8.3} s  {:>8.2} us/step  rss {:.1} MB",
                result["workload"].as_str().unwrap_or("?"),
                result["n"],
                result["seconds"].as_f64().unwrap_or(f64::NAN),
                result["per_step_us"].as_f64().unwrap_or(f64::NAN),
                result["peak_rss_mb"].as_f64().unwrap_or(f64::NAN),
            );
        }
    }
}
