//! The benchmark program (README, Benchmark): one JSON line per workload with
//! `--json`, a table otherwise. SQLite files live in a temp dir; default
//! durability.
//!
//! `cargo run --release --example bench -- --json`
//! `cargo run --release --example bench -- --only cycle,noop`
//! `cargo run --release --example bench -- --json --store postgres` (the
//! server of `TOLLGATE_PG_URL`; each workload in a schema `bench_NAME` of
//! its own, dropped first; `pg_raw_commit` is the floor there)
//! `cargo run --release --example bench -- --only store_put,store_get,store_search_filter,store_search_vector_10k`
//! (long-term memory: `p50_us`, `p99_us` per call)
//! `cargo run --release --example bench -- --only outbox_look` (the
//! LangGraph dispatcher's look with 100,000 blocked outbox entries)
//! `cargo run --release --example bench -- --only threads_search_100k`
//! (LangGraph's thread search, 25 per page, over 100,000 threads)
//! `cargo run --release --example bench -- --only request_keys`
//! (`Idempotency-Key` claims: `claim_us` a new key, `replay_us` a retry)
//! `cargo run --release --example bench -- --only workflow_tasks,workflow_resume`
//! (durable workflows: `per_task_us` against the `cycle` step of the same
//! run, `resume_us` after 1,000 tasks)

use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tollgate::{
    CompiledGraph, Decision, DecisionRequest, Executor, GraphState, Interrupt, MemoryStore,
    PageRequest, Resumed, Route, RunConfig, RunFilter, RunStatus, Send, SqliteOptions, StateGraph,
    Store, END, START,
};

use backend::{db_bytes, pg_raw_commit, Backend};

mod backend;
mod keys;
mod load;
mod memory;
mod outbox;
mod page;
mod report;
mod stream;
mod threads;
mod workers;
mod workflow;

#[derive(Parser, Debug)]
#[command(about = "tollgate benchmarks")]
struct Args {
    /// Print one JSON object per workload instead of a table.
    #[arg(long)]
    json: bool,
    /// Run only these workloads (comma-separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Runs created by the `list` workload. From 20,020 on, the line also
    /// times the page at depth 1000 (`page_ms_depth1000`).
    #[arg(long, default_value_t = 5_000)]
    list_runs: u64,
    /// The store the workloads run on: `sqlite` (files in a temp dir) or
    /// `postgres` (the server of `TOLLGATE_PG_URL`).
    #[arg(long, default_value = "sqlite", value_parser = ["sqlite", "postgres"])]
    store: String,
    /// Legs each worker process of the `workers` workload drives at once.
    #[arg(long, default_value_t = 1)]
    worker_concurrency: usize,
    /// Runs the `workers` workload queues for each count of processes.
    #[arg(long, default_value_t = 200)]
    worker_runs: u64,
    /// Postgres only: every run of the `workers` workload is watched, as
    /// by a server streaming each of them (`PostgresStore::watch`), so
    /// that each of its commits is announced on `tollgate_events`.
    #[arg(long)]
    watch_runs: bool,
    /// Internal: run as one worker process of the `workers` workload on
    /// this store (a SQLite path, or a schema on `TOLLGATE_PG_URL`) until
    /// stdin closes.
    #[arg(long, hide = true)]
    worker_child: Option<String>,
    /// Keep the SQLite files in this folder (created if missing) instead of
    /// a temporary one, to look at them afterwards.
    #[arg(long)]
    keep_in: Option<std::path::PathBuf>,
    /// The page size of the SQLite files the workloads create (a power of
    /// two from 512 to 65536; default the store's, 2048), to weigh latency
    /// against file size. `stream_latency` and `page_render` drive the
    /// `tollgate` CLI and keep the default.
    #[arg(long)]
    page_size: Option<u32>,
}

type Outcome = Result<Value, Box<dyn std::error::Error>>;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Counter {
    #[reducer(sum)]
    count: u64,
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Log {
    #[reducer(append)]
    lines: Vec<String>,
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

pub(crate) fn line(
    workload: &str,
    n: u64,
    seconds: f64,
    steps: u64,
    db: u64,
    checkpoints: u64,
) -> Value {
    json!({
        "workload": workload,
        "n": n,
        "seconds": seconds,
        "per_step_us": seconds * 1e6 / steps.max(1) as f64,
        "db_bytes": db,
        "peak_rss_mb": peak_rss_mb(),
        "checkpoints": checkpoints,
    })
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub(crate) fn extend(mut value: Value, extra: Value) -> Value {
    if let (Some(object), Value::Object(extra)) = (value.as_object_mut(), extra) {
        object.extend(extra);
    }
    value
}

/// The floor: single-row INSERT transactions with the store's pragmas.
fn raw_commit(dir: &std::path::Path, options: &SqliteOptions) -> Outcome {
    let n = 1_000;
    let path = dir.join("raw.db");
    let conn = rusqlite::Connection::open(&path)?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "page_size", options.page_size)?;
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))?;
    conn.pragma_update(None, "wal_autocheckpoint", options.wal_autocheckpoint)?;
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)", [])?;
    let payload = vec![7u8; 64];
    let started = Instant::now();
    for _ in 0..n {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        conn.prepare_cached("INSERT INTO t (payload) VALUES (?1)")?.execute([&payload])?;
        conn.execute_batch("COMMIT")?;
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(conn);
    Ok(line("raw_commit", n, seconds, n, db_bytes(&path), n))
}

pub(crate) async fn cycle_on(
    store: Arc<dyn Store>,
    steps: u64,
) -> Result<f64, Box<dyn std::error::Error>> {
    let executor = Executor::with_store(store);
    let started = Instant::now();
    let outcome =
        executor.run(&cycle(steps), Counter::default(), RunConfig::new().max_steps(steps)).await?;
    assert_eq!(outcome.state.count, steps, "the cycle ran every step");
    Ok(started.elapsed().as_secs_f64())
}

async fn cycle_store(backend: &Backend) -> Outcome {
    let n = 1_000;
    let store = backend.open("cycle").await?;
    cycle_on(Arc::clone(&store), 50).await?; // warm-up
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(cycle_on(Arc::clone(&store), n).await?);
    }
    let seconds = median(runs);
    drop(store);
    Ok(line("cycle", n, seconds, n, backend.bytes("cycle").await?, n))
}

async fn noop() -> Outcome {
    let n = 1_000;
    cycle_on(Arc::new(MemoryStore::new()), n).await?;
    let mut runs = Vec::new();
    for _ in 0..31 {
        // A fresh store per run: each run pays for its own checkpoints.
        runs.push(cycle_on(Arc::new(MemoryStore::new()), n).await?);
    }
    let best = runs.iter().copied().fold(f64::INFINITY, f64::min);
    let seconds = median(runs);
    Ok(extend(
        line("noop", n, seconds, n, 0, n),
        json!({"best_per_step_us": best * 1e6 / n as f64}),
    ))
}

async fn fanout(backend: &Backend) -> Outcome {
    let (k, runs) = (100usize, 20u64);
    let graph = StateGraph::<Log>::new("fanout", 1)
        .node("split", |_s: Arc<Log>, _ctx| async move { Ok(LogUpdate::default()) })
        .node("work", |_s: Arc<Log>, ctx| async move {
            let item: usize = ctx.input()?;
            Ok(LogUpdate::default().lines(vec![format!("item {item}")]))
        })
        .node("join", |state: Arc<Log>, _ctx| async move {
            Ok(LogUpdate::default().lines(vec![format!("joined {}", state.lines.len())]))
        })
        .edge(START, "split")
        .route("split", ["work"], move |_: &Log| {
            Route::send((0..k).map(|i| Send::new("work", json!(i))))
        })
        .join(["work"], "join")
        .edge("join", END)
        .compile()?;
    let executor = Executor::with_store(backend.open("fanout").await?);
    let started = Instant::now();
    for _ in 0..runs {
        let outcome = executor.run(&graph, Log::default(), RunConfig::new()).await?;
        assert_eq!(outcome.state.lines.len(), k + 1);
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(executor);
    let steps = runs * 3;
    Ok(extend(
        line("fanout", runs, seconds, steps, backend.bytes("fanout").await?, steps),
        json!({"k": k, "per_run_ms": seconds * 1e3 / runs as f64}),
    ))
}

async fn growth(backend: &Backend) -> Outcome {
    let n = 1_000u64;
    let stamps: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::with_capacity(n as usize + 1)));
    let recorder = Arc::clone(&stamps);
    let graph = StateGraph::<Log>::new("growth", 1)
        .node("append", move |state: Arc<Log>, _ctx| {
            recorder.lock().expect("stamps").push(Instant::now());
            let line = format!("{:0>200}", state.lines.len());
            async move { Ok(LogUpdate::default().lines(vec![line])) }
        })
        .edge(START, "append")
        .route("append", ["append", END], move |s: &Log| {
            if (s.lines.len() as u64) < n {
                Route::to("append")
            } else {
                Route::end()
            }
        })
        .compile()?;
    let executor = Executor::with_store(backend.open("growth").await?);
    let started = Instant::now();
    let outcome = executor.run(&graph, Log::default(), RunConfig::new().max_steps(n)).await?;
    let seconds = started.elapsed().as_secs_f64();
    drop(executor);
    assert_eq!(outcome.state.lines.len() as u64, n);
    let stamps = stamps.lock().expect("stamps").clone();
    let span = |from: usize, to: usize| stamps[to].duration_since(stamps[from]).as_secs_f64() * 1e3;
    let (first, last) = (span(0, 100), span(n as usize - 101, n as usize - 1));
    Ok(extend(
        line("growth", n, seconds, n, backend.bytes("growth").await?, n),
        json!({"first100_ms": first, "last100_ms": last, "last_over_first": last / first}),
    ))
}

/// 500 runs pause at an interrupt; then each is resumed to completion with
/// `resume_run` (the leg driven in this task). `resume_spawned_us`: 100
/// more runs resumed with `resume` (the leg in a task of its own) and waited
/// for.
async fn hitl(backend: &Backend) -> Outcome {
    let n = 500u64;
    let graph = StateGraph::<Counter>::new("hitl", 1)
        .node("ask", |_s: Arc<Counter>, ctx| async move {
            ctx.interrupt(Interrupt::new("approval", json!({"amount": 20})))?;
            Ok(CounterUpdate::default().count(1))
        })
        .node(
            "after",
            |_s: Arc<Counter>, _ctx| async move { Ok(CounterUpdate::default().count(1)) },
        )
        .edge(START, "ask")
        .edge("ask", "after")
        .edge("after", END)
        .compile()?;
    let executor = Executor::with_store(backend.open("hitl").await?);
    let started = Instant::now();
    let mut runs = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let outcome = executor.run(&graph, Counter::default(), RunConfig::new()).await?;
        assert_eq!(outcome.status, RunStatus::AwaitingHitl);
        runs.push(outcome.run_id);
    }
    let pausing = started.elapsed().as_secs_f64();
    let started = Instant::now();
    for run in runs {
        let request = DecisionRequest::new(Decision::Approve);
        let Resumed::Continuing(outcome) =
            executor.resume_run(&graph, run, request, RunConfig::new()).await?
        else {
            return Err("the run did not continue".into());
        };
        assert_eq!(outcome.status, RunStatus::Completed);
    }
    let resuming = started.elapsed().as_secs_f64();
    drop(executor);
    let bytes = backend.bytes("hitl").await?;
    // The spawned variant, on a file of its own.
    let executor = Executor::with_store(backend.open("hitl_spawned").await?);
    let spawned_n = 100;
    let mut runs = Vec::with_capacity(spawned_n);
    for _ in 0..spawned_n {
        runs.push(executor.run(&graph, Counter::default(), RunConfig::new()).await?.run_id);
    }
    let started = Instant::now();
    for run in runs {
        let request = DecisionRequest::new(Decision::Approve);
        let Resumed::Continuing(handle) =
            executor.resume(&graph, run, request, RunConfig::new()).await?
        else {
            return Err("the run did not continue".into());
        };
        assert_eq!(handle.wait().await?.status, RunStatus::Completed);
    }
    let spawned = started.elapsed().as_secs_f64() * 1e6 / spawned_n as f64;
    let seconds = pausing + resuming;
    Ok(extend(
        line("hitl", n, seconds, n * 3, bytes, n * 2),
        json!({
            "start_pause_us": pausing * 1e6 / n as f64,
            "resume_us": resuming * 1e6 / n as f64,
            "resume_spawned_us": spawned,
        }),
    ))
}

async fn list(backend: &Backend, n: u64) -> Outcome {
    let executor = Executor::with_store(backend.open("list").await?);
    let graph = cycle(1);
    for _ in 0..n {
        executor.run(&graph, Counter::default(), RunConfig::new()).await?;
    }
    let store = executor.store();
    let mut pages = Vec::new();
    let mut cursor = None;
    let mut seen = 0;
    for _ in 0..11 {
        let request = PageRequest { limit: 20, cursor: cursor.clone() };
        let started = Instant::now();
        let page = store.list_runs(&RunFilter::default(), &request).await?;
        pages.push(started.elapsed().as_secs_f64() * 1e3);
        seen += page.runs.len();
        cursor = page.next;
    }
    assert_eq!(seen, 220, "newest 20 and 10 more pages");
    let mut depths = json!({"page_ms_depth1": pages[0]});
    if n >= 20_020 {
        // Walk to page 1000 and time it, to compare with the first.
        for _ in 11..999 {
            let request = PageRequest { limit: 20, cursor: cursor.clone() };
            cursor = store.list_runs(&RunFilter::default(), &request).await?.next;
        }
        let mut at_depth = Vec::new();
        for _ in 0..5 {
            let request = PageRequest { limit: 20, cursor: cursor.clone() };
            let started = Instant::now();
            let page = store.list_runs(&RunFilter::default(), &request).await?;
            at_depth.push(started.elapsed().as_secs_f64() * 1e3);
            assert_eq!(page.runs.len(), 20);
        }
        depths["page_ms_depth1000"] = json!(median(at_depth));
    }
    drop(executor);
    let max = pages.iter().copied().fold(0.0, f64::max);
    let total: f64 = pages.iter().sum();
    Ok(extend(
        extend(line("list", n, total / 1e3, 11, backend.bytes("list").await?, n), depths),
        json!({"page_ms_median": median(pages), "page_ms_max": max}),
    ))
}

/// The settings of the SQLite files the workloads create (`--page-size`).
fn sqlite_options(args: &Args) -> Result<SqliteOptions, Box<dyn std::error::Error>> {
    let mut options = SqliteOptions::default();
    if let Some(page_size) = args.page_size {
        if !(512..=65_536).contains(&page_size) || !page_size.is_power_of_two() {
            return Err(format!("--page-size {page_size}: a power of two from 512 to 65536").into());
        }
        options.page_size = page_size;
    }
    Ok(options)
}

/// The store the workloads run on (`--store`, `--keep-in`).
fn backend_of(args: &Args, dir: &std::path::Path) -> Result<Backend, Box<dyn std::error::Error>> {
    Ok(if args.store == "postgres" {
        if args.page_size.is_some() {
            return Err("--page-size is for SQLite files; Postgres has its own pages".into());
        }
        let url = std::env::var("TOLLGATE_PG_URL")
            .map_err(|_| "--store postgres reads the server's URL from TOLLGATE_PG_URL")?;
        Backend::Postgres(url)
    } else if args.watch_runs {
        return Err(
            "--watch-runs is for Postgres: SQLite streams learn of commits otherwise".into()
        );
    } else if let Some(keep) = &args.keep_in {
        std::fs::create_dir_all(keep)?;
        Backend::Sqlite(keep.clone(), sqlite_options(args)?)
    } else {
        Backend::Sqlite(dir.to_owned(), sqlite_options(args)?)
    })
}

/// Runs the workloads asked for, in order; one line each.
async fn run(args: &Args, backend: &Backend) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|w| w == name);
    let mut results = Vec::new();
    match backend {
        Backend::Sqlite(dir, options) if wanted("raw_commit") => {
            results.push(raw_commit(dir, options)?);
        }
        Backend::Postgres(url) if wanted("pg_raw_commit") => {
            results.push(pg_raw_commit(url).await?);
        }
        _ => {}
    }
    if wanted("cycle") {
        results.push(cycle_store(backend).await?);
    }
    if wanted("fanout") {
        results.push(fanout(backend).await?);
    }
    if wanted("hitl") {
        results.push(hitl(backend).await?);
    }
    if wanted("growth") {
        results.push(growth(backend).await?);
    }
    if wanted("list") {
        results.push(list(backend, args.list_runs).await?);
    }
    if wanted("workers") {
        let how = workers::Workers {
            concurrency: args.worker_concurrency,
            runs: args.worker_runs,
            watched: args.watch_runs,
        };
        results.push(workers::workers(backend, &how).await?);
    }
    if wanted("noop") {
        results.push(noop().await?);
    }
    if wanted("concurrent") {
        results.push(load::concurrent(backend).await?);
    }
    if wanted("big_state") {
        results.push(load::big_state(backend).await?);
    }
    if ["store_put", "store_get", "store_search_filter"].iter().any(|name| wanted(name)) {
        results.extend(memory::items(backend).await?);
    }
    if wanted("outbox_look") {
        results.push(outbox::outbox_look(backend).await?);
    }
    if wanted("workflow_tasks") {
        results.push(workflow::tasks(backend).await?);
    }
    if wanted("workflow_resume") {
        results.push(workflow::resume(backend).await?);
    }
    if wanted("threads_search_100k") {
        results.push(threads::threads_search(backend).await?);
    }
    if wanted("request_keys") {
        results.push(keys::request_keys(backend).await?);
    }
    if wanted("store_search_vector_10k") {
        results.push(memory::vectors(backend, 10_000).await?);
    }
    if wanted("store_search_vector_100k") {
        results.push(memory::vectors(backend, 100_000).await?);
    }
    if let Backend::Sqlite(_, options) = backend {
        for result in &mut results {
            result["page_size"] = json!(options.page_size);
        }
    }
    results.extend(latencies(backend, &wanted).await?);
    Ok(results)
}

/// The stream and page workloads asked for.
async fn latencies(
    backend: &Backend,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let mut results = Vec::new();
    match backend {
        Backend::Sqlite(dir, _) if wanted("stream_latency") => {
            results.push(stream::stream_latency(dir).await?);
        }
        Backend::Postgres(url) if wanted("stream_latency") => {
            results.push(stream::pg_stream_latency(url).await?);
        }
        _ => {}
    }
    match backend {
        Backend::Sqlite(dir, _) if wanted("page_render") => {
            results.push(page::page_render(dir).await?);
        }
        _ => {}
    }
    Ok(results)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if let Some(location) = &args.worker_child {
        return workers::worker_child(&args, location).await;
    }
    let dir = tempfile::tempdir()?;
    let backend = backend_of(&args, dir.path())?;
    let results = run(&args, &backend).await?;
    report::print(&results, args.json);
    Ok(())
}
