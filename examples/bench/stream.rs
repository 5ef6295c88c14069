//! The `stream_latency` workload: `tollgate serve` and an SSE client, in
//! the same process as the run and across processes.

use serde_json::{json, Value};

use crate::Outcome;

/// Tool calls of each `stream_latency` run.
const STAMPS: usize = 60;

/// Nanoseconds since the Unix epoch.
fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as i128)
}

/// The value at quantile `q` (0..=1) of `values`, sorted here.
pub(crate) fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let index = ((values.len().saturating_sub(1)) as f64 * q).round() as usize;
    values.get(index).copied().unwrap_or(f64::NAN)
}

/// Follows a run's SSE stream to its end; returns the latencies (ms) of
/// the stamps it carries, from the tool writing them to this client
/// reading them: `ns …` output lines (`tool_delta`), or `{"ns": …}`
/// results (`tool_completed`), those written after `since` only.
async fn stamp_latencies(
    client: &reqwest::Client,
    url: &str,
    kind: &str,
    since: i128,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    use eventsource_stream::Eventsource;
    use futures_util::StreamExt;
    let response = client.get(url).send().await?.error_for_status()?;
    let mut events = response.bytes_stream().eventsource();
    let mut latencies = Vec::new();
    while let Some(event) = events.next().await {
        let event = event?;
        let received = now_ns();
        if event.event != kind {
            continue;
        }
        let data: Value = serde_json::from_str(&event.data)?;
        let stamp = match kind {
            "tool_delta" => {
                data["line"].as_str().and_then(|line| line.strip_prefix("ns ")).map(str::to_owned)
            }
            _ => data["summary"]
                .as_str()
                .and_then(|summary| serde_json::from_str::<Value>(summary).ok())
                .map(|v| v["ns"].to_string()),
        };
        if let Some(stamp) = stamp.and_then(|text| text.trim().parse::<i128>().ok()) {
            if stamp > since {
                latencies.push((received - stamp) as f64 / 1e6);
            }
        }
    }
    Ok(latencies)
}

/// Starts the `stamp` blueprint over the API of the server at `base` and
/// follows it: the run, and the latencies (ms) of its stamped lines.
async fn started_stamps(
    client: &reqwest::Client,
    base: &str,
) -> Result<(String, Vec<f64>), Box<dyn std::error::Error>> {
    let created: Value = client
        .post(format!("{base}/runs"))
        .json(&json!({"blueprint": "stamp"}))
        .send()
        .await?
        .json()
        .await?;
    let run = created["id"].as_str().ok_or("POST /runs gave no id")?.to_owned();
    let url = format!("{base}/runs/{run}/events?mode=tools");
    let latencies = stamp_latencies(client, &url, "tool_delta", 0).await?;
    Ok((run, latencies))
}

/// The `tollgate` binary, built (or found fresh) next to this program.
pub(crate) fn release_cli() -> Result<std::path::PathBuf, Box<dyn std::error::Error>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = std::process::Command::new(cargo)
        .args(["build", "--release", "--quiet", "-p", "tollgate-cli"])
        .status()?;
    if !built.success() {
        return Err("cargo build --release -p tollgate-cli failed".into());
    }
    let exe = std::env::current_exe()?;
    Ok(exe
        .parent()
        .and_then(std::path::Path::parent)
        .map(|release| release.join("tollgate"))
        .ok_or("cannot find target/release")?)
}

/// Writes `stamp.json` into `folder`: a blueprint whose model asks
/// `stamps` times for its command tool running `script`, then answers.
fn stamp_blueprint(
    folder: &std::path::Path,
    stamps: usize,
    script: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut replies: Vec<Value> =
        (0..stamps).map(|_| json!({"tool_calls": [{"name": "stamp", "args": {}}]})).collect();
    replies.push(json!({"text": "stamped"}));
    std::fs::write(folder.join("stamp_replies.json"), Value::Array(replies).to_string())?;
    let blueprint = json!({
        "name": "stamp", "model": "scripted:stamp_replies.json", "max_steps": 1000, "max_turns": 1000,
        "tools": [{"name": "stamp", "description": "Stamps the time", "parameters": {"type": "object"},
                   "command": ["/bin/sh", "-c", script]}]
    });
    std::fs::write(folder.join("stamp.json"), blueprint.to_string())?;
    Ok(())
}

/// `tollgate --db DB serve --addr 127.0.0.1:0 EXTRA` without a token: the
/// child and the address it listens on.
pub(crate) fn serve(
    tollgate: &std::path::Path,
    db: &std::path::Path,
    extra: &[&str],
) -> Result<(std::process::Child, String), Box<dyn std::error::Error>> {
    use std::io::BufRead;
    let mut server = std::process::Command::new(tollgate)
        .arg("--db")
        .arg(db)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(extra)
        .env_remove("TOLLGATE_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut line = String::new();
    let stdout = server.stdout.take().ok_or("serve has no stdout")?;
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    let base = line.trim().strip_prefix("listening on ").ok_or("serve did not start")?.to_owned();
    Ok((server, base))
}

/// `stream_latency`: a blueprint whose command tool stamps the time into a
/// line it prints and into its result, STAMPS times; a `tollgate serve`
/// process; an SSE client. `same_process_ms`: the server drives the run
/// (`POST /runs`), the stamped lines go from memory to the client.
/// `cross_process_ms`: a `tollgate run` process drives it, the results
/// reach the client once committed, through the SQLite change signal.
pub(crate) async fn stream_latency(dir: &std::path::Path) -> Outcome {
    let tollgate = release_cli()?;
    let folder = dir.join("stream");
    std::fs::create_dir_all(&folder)?;
    let script = r#"echo "ns $(date +%s%N)"; echo "{\"ns\": $(date +%s%N)}""#;
    stamp_blueprint(&folder, STAMPS, script)?;
    let db = folder.join("stream.db");
    let folder_arg = folder.to_string_lossy();
    let (mut server, base) =
        serve(&tollgate, &db, &["--create", "--blueprints", folder_arg.as_ref()])?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();

    // Same process: the server drives the run.
    let (run, mut same) = started_stamps(&client, &base).await?;

    // Across processes: a `tollgate run` process drives it.
    let since = now_ns();
    let mut driver = std::process::Command::new(&tollgate)
        .arg("--db")
        .arg(&db)
        .arg("run")
        .arg(folder.join("stamp.json"))
        .arg("--json")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let other = loop {
        let list: Value = client.get(format!("{base}/runs?limit=1")).send().await?.json().await?;
        match list["runs"][0]["id"].as_str() {
            Some(id) if id != run => break id.to_owned(),
            _ => tokio::time::sleep(std::time::Duration::from_millis(2)).await,
        }
    };
    let url = format!("{base}/runs/{other}/events?mode=tools");
    let mut cross = stamp_latencies(&client, &url, "tool_completed", since).await?;
    driver.wait()?;
    let _ = server.kill();
    let _ = server.wait();
    if same.is_empty() || cross.is_empty() {
        return Err(format!(
            "stream_latency: no stamps received ({} / {})",
            same.len(),
            cross.len()
        )
        .into());
    }
    Ok(json!({
        "workload": "stream_latency",
        "n": STAMPS,
        "same_process_samples": same.len(),
        "same_process_ms": {"p50": quantile(&mut same, 0.5), "p99": quantile(&mut same, 0.99), "max": quantile(&mut same, 1.0)},
        "cross_process_samples": cross.len(),
        "cross_process_ms": {"p50": quantile(&mut cross, 0.5), "p99": quantile(&mut cross, 0.99), "max": quantile(&mut cross, 1.0)},
    }))
}

/// Tool calls of the Postgres `stream_latency` run.
const PG_STAMPS: usize = 200;

/// `stream_latency` on Postgres: a `tollgate serve` process and a
/// `tollgate worker` process on the database of `url`, the run started
/// over the API (so the worker drives it), an SSE client of the server.
/// `cross_process_ms`: from the worker's tool writing a stamped line to
/// the client reading it, published by the worker (`NOTIFY`) and relayed
/// by the server before the step commits (the tool goes on for 50 ms
/// after the line, so a line that arrives sooner came live).
pub(crate) async fn pg_stream_latency(url: &str) -> Outcome {
    let tollgate = release_cli()?;
    let folder = tempfile::tempdir()?;
    // The step commits 50 ms after the stamped line at the earliest: a
    // line that arrives sooner came live, not with the commit.
    let script = r#"echo "ns $(date +%s%N)"; sleep 0.05; echo "{\"ns\": $(date +%s%N)}""#;
    stamp_blueprint(folder.path(), PG_STAMPS, script)?;
    let folder_arg = folder.path().to_string_lossy().into_owned();
    let db = std::path::Path::new(url);
    let (mut server, base) = serve(&tollgate, db, &["--blueprints", &folder_arg])?;
    let mut worker = std::process::Command::new(&tollgate)
        .arg("--db")
        .arg(url)
        .arg("worker")
        .current_dir(folder.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let (_, mut cross) = started_stamps(&client, &base).await?;
    for child in [&mut server, &mut worker] {
        let _ = child.kill();
        let _ = child.wait();
    }
    if cross.is_empty() {
        return Err("stream_latency (postgres): no stamps received".into());
    }
    Ok(json!({
        "workload": "stream_latency",
        "store": "postgres",
        "n": PG_STAMPS,
        "cross_process_samples": cross.len(),
        "cross_process_ms": {"p50": quantile(&mut cross, 0.5), "p99": quantile(&mut cross, 0.99), "max": quantile(&mut cross, 1.0)},
        "same_process_ms": {"p50": null, "p99": null},
    }))
}
