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
    PageRequest, Resumed, Route, RunConfig, RunFilter, RunStatus, Send, SqliteOptions, SqliteStore,
    StateGraph, Store, Worker, END, START,
};
use tollgate_postgres::{PostgresOptions, PostgresStore};

use backend::{db_bytes, pg_raw_commit, Backend};

mod backend;
mod load;
mod memory;
mod outbox;
mod page;
mod stream;
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

/// Steps per run in `workers`.
const WORKER_STEPS: u64 = 10;

/// How the `workers` workload runs.
struct Workers {
    /// Legs per worker process.
    concurrency: usize,
    /// Runs queued for each count of processes.
    runs: u64,
    /// Every run watched (Postgres).
    watched: bool,
}

/// `runs` queued runs of `WORKER_STEPS` steps drained by 1, 2 and 4
/// worker processes (this program again, `--worker-child`), each driving
/// `concurrency` legs at once: `runs_per_s` and `steps_per_s` per count.
async fn workers(backend: &Backend, how: &Workers) -> Outcome {
    let Workers { concurrency, runs, watched } = *how;
    let graph = cycle(WORKER_STEPS);
    let mut counts = serde_json::Map::new();
    for processes in [1usize, 2, 4] {
        let name = format!("workers_w{processes}");
        let executor = Executor::with_store(backend.open(&name).await?);
        let watcher = match backend {
            Backend::Postgres(url) if watched => Some(backend::reopen(url, &name).await?),
            _ => None,
        };
        for _ in 0..runs {
            let run = executor.enqueue(&graph, Counter::default(), RunConfig::new()).await?;
            if let Some(watcher) = &watcher {
                watcher.watch(run, std::time::Duration::from_secs(3_600)).await?;
            }
        }
        let mut children = Vec::new();
        for _ in 0..processes {
            let mut child = std::process::Command::new(std::env::current_exe()?)
                .args([
                    "--store",
                    if matches!(backend, Backend::Postgres(_)) { "postgres" } else { "sqlite" },
                ])
                .args(["--worker-concurrency", &concurrency.to_string()])
                .args(["--worker-child", &backend.location(&name)])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()?;
            // Connected and ready: the clock does not count start-up.
            let mut ready = String::new();
            let stdout = child.stdout.take().ok_or("no stdout")?;
            std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready)?;
            children.push(child);
        }
        let started = Instant::now();
        for child in &mut children {
            let stdin = child.stdin.as_mut().ok_or("no stdin")?;
            std::io::Write::write_all(stdin, b"go\n")?;
        }
        // Drained when no run is queued or running: two one-row reads, so
        // that watching costs the server next to nothing.
        let one = PageRequest { limit: 1, cursor: None };
        let left = |status| RunFilter { status: Some(status), ..RunFilter::default() };
        loop {
            let store = executor.store();
            let queued = store.list_runs(&left(RunStatus::Queued), &one).await?.runs.len();
            let running = store.list_runs(&left(RunStatus::Running), &one).await?.runs.len();
            if queued + running == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let seconds = started.elapsed().as_secs_f64();
        let done = RunFilter { status: Some(RunStatus::Completed), ..RunFilter::default() };
        let all = PageRequest { limit: runs + 1, cursor: None };
        let completed = executor.store().list_runs(&done, &all).await?.runs.len() as u64;
        assert_eq!(completed, runs, "every run completed");
        for mut child in children {
            drop(child.stdin.take()); // EOF: the child stops
            child.wait()?;
        }
        counts.insert(
            format!("w{processes}"),
            json!({
                "seconds": seconds,
                "runs_per_s": runs as f64 / seconds,
                "steps_per_s": (runs * WORKER_STEPS) as f64 / seconds,
            }),
        );
    }
    let rate = |key: &str| counts[key]["steps_per_s"].as_f64().unwrap_or(f64::NAN);
    let (w1, w2, w4) = (rate("w1"), rate("w2"), rate("w4"));
    let mut line = line("workers", runs, 0.0, runs * WORKER_STEPS, 0, 0);
    line["seconds"] = counts["w1"]["seconds"].clone();
    line["per_step_us"] = json!(1e6 / w1);
    Ok(extend(
        extend(line, Value::Object(counts)),
        json!({
            "concurrency": concurrency,
            "watched": watched,
            "w2_over_w1": w2 / w1,
            "w4_over_w1": w4 / w1,
        }),
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

/// One worker process of `workers`: drives the cycle graph's runs on
/// `location` until stdin closes.
async fn worker_child(args: &Args, location: &str) -> Result<(), Box<dyn std::error::Error>> {
    let (store, wake): (Arc<dyn Store>, _) = if args.store == "postgres" {
        let url = std::env::var("TOLLGATE_PG_URL")?;
        let options = PostgresOptions::default().with_schema(location);
        let store = PostgresStore::connect_with(&url, options).await?;
        let wake = store.run_notifications();
        (Arc::new(store), Some(wake))
    } else {
        (Arc::new(SqliteStore::open_with(location, sqlite_options(args)?)?), None)
    };
    let mut worker = Worker::new(Executor::with_store(store))
        .graph(cycle(WORKER_STEPS))
        .concurrency(args.worker_concurrency)
        .poll_interval(std::time::Duration::from_millis(20));
    if let Some(wake) = wake {
        worker = worker.wake_on(wake);
    }
    println!("ready");
    // "go" on stdin starts it; stdin's end stops it.
    let (go, went) = tokio::sync::oneshot::channel();
    let reader = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        let mut stdin = std::io::stdin().lock();
        let _ = std::io::BufRead::read_line(&mut stdin, &mut line);
        let _ = go.send(());
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut stdin, &mut rest)
    });
    went.await?;
    let stdin_closed = async {
        let _ = reader.await;
    };
    worker.run(stdin_closed).await;
    Ok(())
}

/// The workload's own figures, each with the unit its field name says:
/// `_us` microseconds, `_ms` milliseconds, `per_run` / `per_page` / `_per_s`
/// as named.
fn extra_units(result: &Value) -> String {
    let Some(fields) = result.as_object() else { return String::new() };
    let common =
        ["workload", "n", "seconds", "per_step_us", "db_bytes", "peak_rss_mb", "checkpoints"];
    let mut out = String::new();
    for (name, value) in fields.iter().filter(|(name, _)| !common.contains(&name.as_str())) {
        let unit = if name.contains("_us") {
            " us"
        } else if name.contains("_ms") {
            " ms"
        } else if name.ends_with("_per_s") {
            " /s"
        } else {
            ""
        };
        match value.as_f64() {
            Some(number) if !value.is_u64() => out.push_str(&format!("  {name} {number:.2}{unit}")),
            _ => out.push_str(&format!("  {name} {value}{unit}")),
        }
    }
    out
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if let Some(location) = &args.worker_child {
        return worker_child(&args, location).await;
    }
    let dir = tempfile::tempdir()?;
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|w| w == name);
    let backend = if args.store == "postgres" {
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
        Backend::Sqlite(keep.clone(), sqlite_options(&args)?)
    } else {
        Backend::Sqlite(dir.path().to_owned(), sqlite_options(&args)?)
    };
    let mut results = Vec::new();
    match &backend {
        Backend::Sqlite(dir, options) if wanted("raw_commit") => {
            results.push(raw_commit(dir, options)?);
        }
        Backend::Postgres(url) if wanted("pg_raw_commit") => {
            results.push(pg_raw_commit(url).await?);
        }
        _ => {}
    }
    if wanted("cycle") {
        results.push(cycle_store(&backend).await?);
    }
    if wanted("fanout") {
        results.push(fanout(&backend).await?);
    }
    if wanted("hitl") {
        results.push(hitl(&backend).await?);
    }
    if wanted("growth") {
        results.push(growth(&backend).await?);
    }
    if wanted("list") {
        results.push(list(&backend, args.list_runs).await?);
    }
    if wanted("workers") {
        let how = Workers {
            concurrency: args.worker_concurrency,
            runs: args.worker_runs,
            watched: args.watch_runs,
        };
        results.push(workers(&backend, &how).await?);
    }
    if wanted("noop") {
        results.push(noop().await?);
    }
    if wanted("concurrent") {
        results.push(load::concurrent(&backend).await?);
    }
    if wanted("big_state") {
        results.push(load::big_state(&backend).await?);
    }
    if ["store_put", "store_get", "store_search_filter"].iter().any(|name| wanted(name)) {
        results.extend(memory::items(&backend).await?);
    }
    if wanted("outbox_look") {
        results.push(outbox::outbox_look(&backend).await?);
    }
    if wanted("workflow_tasks") {
        results.push(workflow::tasks(&backend).await?);
    }
    if wanted("workflow_resume") {
        results.push(workflow::resume(&backend).await?);
    }
    if wanted("store_search_vector_10k") {
        results.push(memory::vectors(&backend, 10_000).await?);
    }
    if wanted("store_search_vector_100k") {
        results.push(memory::vectors(&backend, 100_000).await?);
    }
    if let Backend::Sqlite(_, options) = &backend {
        for result in &mut results {
            result["page_size"] = json!(options.page_size);
        }
    }
    match &backend {
        Backend::Sqlite(dir, _) if wanted("stream_latency") => {
            results.push(stream::stream_latency(dir).await?);
        }
        Backend::Postgres(url) if wanted("stream_latency") => {
            results.push(stream::pg_stream_latency(url).await?);
        }
        _ => {}
    }
    match &backend {
        Backend::Sqlite(dir, _) if wanted("page_render") => {
            results.push(page::page_render(dir).await?);
        }
        _ => {}
    }
    for result in &results {
        if args.json {
            println!("{result}");
        } else if let Some(skipped) = result.get("skipped") {
            println!("{:<10} skipped: {skipped}", result["workload"].as_str().unwrap_or("?"));
        } else if let Some(p50) = result.get("inbox_first_render_ms_p50") {
            println!(
                "{:<10} runs={} inbox first render p50 {:.1} ms max {:.1} ms (target 300 ms); all runs p50 {:.1} ms",
                "page_render", result["runs"], p50.as_f64().unwrap_or(f64::NAN),
                result["inbox_first_render_ms_max"].as_f64().unwrap_or(f64::NAN),
                result["all_runs_first_render_ms_p50"].as_f64().unwrap_or(f64::NAN),
            );
        } else if let Some(p50) = result.get("p50_us") {
            println!(
                "{:<24} n={:<6} p50 {:>9.1} us  p99 {:>9.1} us",
                result["workload"].as_str().unwrap_or("?"),
                result["n"],
                p50.as_f64().unwrap_or(f64::NAN),
                result["p99_us"].as_f64().unwrap_or(f64::NAN),
            );
        } else if let Some(same) = result.get("same_process_ms") {
            let cross = &result["cross_process_ms"];
            println!(
                "{:<10} n={:<6} same process p50 {:.2} ms p99 {:.2} ms; across processes p50 {:.2} ms p99 {:.2} ms",
                "stream_latency", result["n"], same["p50"].as_f64().unwrap_or(f64::NAN),
                same["p99"].as_f64().unwrap_or(f64::NAN), cross["p50"].as_f64().unwrap_or(f64::NAN),
                cross["p99"].as_f64().unwrap_or(f64::NAN),
            );
        } else {
            println!(
                "{:<10} n={:<6} {:>8.3} s  {:>9.2} us/step  db {:>9} B  rss {:.1} MB{}",
                result["workload"].as_str().unwrap_or("?"),
                result["n"],
                result["seconds"].as_f64().unwrap_or(f64::NAN),
                result["per_step_us"].as_f64().unwrap_or(f64::NAN),
                result["db_bytes"],
                result["peak_rss_mb"].as_f64().unwrap_or(f64::NAN),
                extra_units(result),
            );
        }
    }
    Ok(())
}
