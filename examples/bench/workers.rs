//! The `workers` workload: queued runs drained by 1, 2 and 4 worker
//! processes (this program again, `--worker-child`), and the child's side.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tollgate::{
    Executor, PageRequest, RunConfig, RunFilter, RunStatus, SqliteStore, Store, Worker,
};
use tollgate_postgres::{PostgresOptions, PostgresStore};

use crate::backend::{self, Backend};
use crate::{cycle, extend, line, sqlite_options, Args, Counter, Outcome};

/// Steps per run in `workers`.
const WORKER_STEPS: u64 = 10;

/// How the `workers` workload runs.
pub(crate) struct Workers {
    /// Legs per worker process.
    pub(crate) concurrency: usize,
    /// Runs queued for each count of processes.
    pub(crate) runs: u64,
    /// Every run watched (Postgres).
    pub(crate) watched: bool,
}

/// `runs` queued runs of `WORKER_STEPS` steps drained by 1, 2 and 4
/// worker processes (this program again, `--worker-child`), each driving
/// `concurrency` legs at once: `runs_per_s` and `steps_per_s` per count.
pub(crate) async fn workers(backend: &Backend, how: &Workers) -> Outcome {
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
            children.push(spawn_worker(backend, &name, concurrency)?);
        }
        let started = Instant::now();
        for child in &mut children {
            let stdin = child.stdin.as_mut().ok_or("no stdin")?;
            std::io::Write::write_all(stdin, b"go\n")?;
        }
        drained(executor.store()).await?;
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

/// A worker process (this program again, `--worker-child`) on database
/// `name`, connected and ready: the clock does not count start-up.
fn spawn_worker(
    backend: &Backend,
    name: &str,
    concurrency: usize,
) -> Result<std::process::Child, Box<dyn std::error::Error>> {
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args([
            "--store",
            if matches!(backend, Backend::Postgres(_)) { "postgres" } else { "sqlite" },
        ])
        .args(["--worker-concurrency", &concurrency.to_string()])
        .args(["--worker-child", &backend.location(name)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut ready = String::new();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready)?;
    Ok(child)
}

/// Waits until no run is queued or running: two one-row reads, so that
/// watching costs the server next to nothing.
async fn drained(store: &Arc<dyn Store>) -> Result<(), Box<dyn std::error::Error>> {
    let one = PageRequest { limit: 1, cursor: None };
    let left = |status| RunFilter { status: Some(status), ..RunFilter::default() };
    loop {
        let queued = store.list_runs(&left(RunStatus::Queued), &one).await?.runs.len();
        let running = store.list_runs(&left(RunStatus::Running), &one).await?.runs.len();
        if queued + running == 0 {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// One worker process of `workers`: drives the cycle graph's runs on
/// `location` until stdin closes.
pub(crate) async fn worker_child(
    args: &Args,
    location: &str,
) -> Result<(), Box<dyn std::error::Error>> {
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
