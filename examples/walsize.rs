//! throwaway: WAL size under sustained load
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Counter {
    #[reducer(sum)]
    count: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(256);
    let steps: u64 = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let dir = std::env::temp_dir().join(format!("walsize{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut options = SqliteOptions::default();
    if std::env::var("INLINE").is_ok() {
        options.checkpointing = Checkpointing::Inline;
    }
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open_with(dir.join("w.db"), options)?);
    let executor = Executor::with_store(Arc::clone(&store));
    let graph = StateGraph::<Counter>::new("c", 1)
        .node("inc", |_s: Arc<Counter>, _ctx| async move { Ok(CounterUpdate::default().count(1)) })
        .edge(START, "inc")
        .route(
            "inc",
            ["inc", END],
            move |s: &Counter| if s.count < steps { Route::to("inc") } else { Route::end() },
        )
        .compile()?;
    let wal = dir.join("w.db-wal");
    let watcher = tokio::spawn(async move {
        let started = Instant::now();
        let mut max = 0;
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
            max = max.max(len);
            println!("{:5.2}s wal {:6.1} MB", started.elapsed().as_secs_f64(), len as f64 / 1e6);
            if started.elapsed() > Duration::from_secs(60) {
                break max;
            }
        }
    });
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..runs {
        handles.push(
            executor.start(&graph, Counter::default(), RunConfig::new().max_steps(steps)).await?,
        );
    }
    for h in handles {
        h.wait().await?;
    }
    let secs = started.elapsed().as_secs_f64();
    watcher.abort();
    println!("steps/s {:.0}", (runs * steps) as f64 / secs);
    drop(executor);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
