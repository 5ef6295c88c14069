//! The `page_render` workload: the review page's first render in headless
//! Chromium (Debian's `chromium` and `chromium-driver`, as `bash
//! scripts/browser` installs them) against `tollgate serve`, with 10 000
//! runs in the database, half of them waiting for a decision.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fantoccini::ClientBuilder;
use serde_json::{json, Value};
use tollgate::{Executor, Interrupt, RunConfig, SqliteStore, StateGraph, END, START};

use crate::{cycle, median, Counter, CounterUpdate, Outcome};

/// Runs in the database; every other one waits for a decision.
const RUNS: u64 = 10_000;
/// Fresh loads of each page timed.
const LOADS: usize = 7;

fn found(variable: &str, fallback: &str) -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os(variable).filter(|path| !path.is_empty()) {
        return Some(path.into());
    }
    let fallback = std::path::PathBuf::from(fallback);
    if fallback.is_absolute() {
        return fallback.is_file().then_some(fallback);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(&fallback))
        .find(|path| path.is_file())
}

pub(crate) async fn page_render(dir: &std::path::Path) -> Outcome {
    let (Some(driver), Some(chromium)) = (
        found("TOLLGATE_CHROMEDRIVER", "chromedriver"),
        found("TOLLGATE_CHROMIUM", "/usr/bin/chromium"),
    ) else {
        return Ok(
            json!({"workload": "page_render", "skipped": "no chromium/chromedriver (bash scripts/browser installs them)"}),
        );
    };
    let tollgate = crate::stream::release_cli()?;
    let db = dir.join("page.db");
    let started = Instant::now();
    {
        let executor = Executor::new(SqliteStore::open(&db)?);
        let pausing = StateGraph::<Counter>::new("refunds", 1)
            .node("review", |_s: Arc<Counter>, ctx| async move {
                ctx.interrupt(Interrupt::new(
                    "approval",
                    json!({"tool": "issue_refund", "args": {"id": 7}}),
                ))?;
                Ok(CounterUpdate::default().count(1))
            })
            .edge(START, "review")
            .edge("review", END)
            .compile()?;
        let finishing = cycle(1);
        for index in 0..RUNS {
            if index % 2 == 0 {
                executor.run(&finishing, Counter::default(), RunConfig::new()).await?;
            } else {
                executor.run(&pausing, Counter::default(), RunConfig::new()).await?;
            }
        }
    }
    let filled_s = started.elapsed().as_secs_f64();

    let (mut server, base) = crate::stream::serve(&tollgate, &db, &[])?;

    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut chromedriver = std::process::Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let result = measure(&base, port, &chromium).await;
    let _ = chromedriver.kill();
    let _ = chromedriver.wait();
    let _ = server.kill();
    let _ = server.wait();
    let (inbox, all) = result?;
    let inbox_p50 = median(inbox.clone());
    Ok(json!({
        "workload": "page_render",
        "runs": RUNS,
        "awaiting": RUNS / 2,
        "fill_s": filled_s,
        "loads": LOADS,
        "inbox_first_render_ms_p50": inbox_p50,
        "inbox_first_render_ms_max": inbox.iter().copied().fold(0.0, f64::max),
        "all_runs_first_render_ms_p50": median(all),
        "target_ms": 300,
        "within_target": inbox_p50 <= 300.0,
    }))
}

/// Milliseconds from navigation start to the listing's first render, for
/// `LOADS` fresh loads of the inbox and of the list of all runs.
async fn measure(
    base: &str,
    port: u16,
    chromium: &std::path::Path,
) -> Result<(Vec<f64>, Vec<f64>), Box<dyn std::error::Error>> {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > Duration::from_secs(20) {
            return Err("chromedriver did not listen".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let profile = tempfile::tempdir()?;
    let capabilities = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-quic", "--disable-dev-shm-usage",
                "--window-size=1280,900",
                format!("--user-data-dir={}", profile.path().display()),
            ],
        },
    });
    let Value::Object(capabilities) = capabilities else { return Err("capabilities".into()) };
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let page = ClientBuilder::new(connector)
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await?;
    let mut timings = (Vec::new(), Vec::new());
    for (address, into) in [("/", &mut timings.0), ("/#/runs", &mut timings.1)] {
        // One load to warm the server's page cache and Chromium's, then
        // the timed ones.
        for round in 0..=LOADS {
            page.goto("about:blank").await?;
            page.goto(&format!("{base}{address}")).await?;
            let waited = Instant::now();
            let ms = loop {
                let mark = page
                    .execute(
                        "const m = performance.getEntriesByName('tollgate:list-rendered')[0]; \
                         return m ? m.startTime : null",
                        vec![],
                    )
                    .await?;
                if let Some(ms) = mark.as_f64() {
                    break ms;
                }
                if waited.elapsed() > Duration::from_secs(20) {
                    return Err(format!("{address} never rendered").into());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            let rows = page
                .execute("return document.querySelectorAll('#runs tbody tr').length", vec![])
                .await?;
            if rows.as_u64() != Some(25) {
                return Err(format!("{address} shows {rows} rows, not 25").into());
            }
            if round > 0 {
                into.push(ms);
            }
        }
    }
    page.close().await?;
    Ok(timings)
}
