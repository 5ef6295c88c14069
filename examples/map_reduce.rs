//! Map-reduce with `Send`: one branch per chunk, merged by a reducer.
//!
//! `split` cuts a text into chunks and sends each to its own `count` task
//! (`Send` carries the chunk as the task's input); the tasks of one step run
//! concurrently and their updates merge in task order through the `append`
//! and `sum` reducers; `report` runs once, when every branch has arrived (a
//! join). The run is checkpointed into SQLite: a crash while the branches
//! run re-runs only the branches whose output was not stored yet.
//!
//! Run it with `cargo run --example map_reduce`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{Executor, GraphState, Route, RunConfig, Send, SqliteStore, StateGraph, END, START};

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Words {
    /// The input text (last value).
    text: String,
    /// One line per chunk, in chunk order (append).
    #[reducer(append)]
    counts: Vec<String>,
    /// Words in all (sum).
    #[reducer(sum)]
    total: u64,
    /// The final report.
    report: Option<String>,
}

#[derive(Deserialize)]
struct Chunk {
    index: usize,
    text: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let graph = StateGraph::<Words>::new("map-reduce", 1)
        .node("split", |_s: Arc<Words>, _ctx| async { Ok(WordsUpdate::default()) })
        .route("split", ["count"], |state: &Words| {
            let lines: Vec<&str> = state.text.lines().filter(|l| !l.trim().is_empty()).collect();
            Route::send(
                lines
                    .iter()
                    .enumerate()
                    .map(|(index, text)| Send::new("count", json!({"index": index, "text": text}))),
            )
        })
        .node("count", |_s: Arc<Words>, ctx| async move {
            let chunk: Chunk = ctx.input()?;
            let words = chunk.text.split_whitespace().count() as u64;
            Ok(WordsUpdate::default()
                .counts(vec![format!("chunk {}: {words} words", chunk.index)])
                .total(words))
        })
        .join(["count"], "report")
        .node("report", |state: Arc<Words>, _ctx| async move {
            let report = format!("{} chunks, {} words", state.counts.len(), state.total);
            Ok(WordsUpdate::default().report(Some(report)))
        })
        .edge(START, "split")
        .edge("report", END)
        .compile()?;

    let dir = std::env::temp_dir().join(format!("tollgate-map-reduce-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let executor = Executor::new(SqliteStore::open(dir.join("runs.db"))?);
    let text = "the quick brown fox\njumps over\nthe lazy dog\n\nand runs away again";
    let input = Words { text: text.into(), ..Words::default() };
    let outcome = executor.run(&graph, input, RunConfig::new()).await?;
    for line in &outcome.state.counts {
        println!("{line}");
    }
    println!("{}", outcome.state.report.as_deref().unwrap_or("no report"));
    assert_eq!(outcome.state.total, 13);
    assert_eq!(outcome.state.counts[0], "chunk 0: 4 words", "merged in task order");
    assert_eq!(outcome.step, 3, "split, the branches, the report");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
