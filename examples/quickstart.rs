//! Quick start: an editorial workflow on the embedded store.
//!
//! plan ─┬─ research_web ─────────────────────┐
//!       └─ research_papers ─ summarize_papers ┴─(join)─ write ─ review ─┐
//!                                    ▲                                  │
//!                                    └──── revise (conditional) ────────┘─ END
//!
//! The first run completes after one revision. The second run has a
//! reviewer that is never satisfied: the cycle is stopped by `max_steps`.
//! Every step is checkpointed into SQLite (`$TOLLGATE_DB`, else
//! `./tollgate.db`); the runs in the database are listed at the end, newest
//! first, so a second invocation lists four.
//!
//! Run it with `cargo run --example quickstart`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tollgate::{
    Event, EventEnvelope, EventSink, Executor, GraphState, NodeContext, NodeError, PageRequest,
    Route, RunConfig, RunError, RunFilter, SqliteStore, StateGraph, END, START,
};

/// The workflow's state: one line per field, each with its reducer.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Article {
    /// Last value: the one planner writes it.
    topic: String,
    /// Both research branches append here in the same step.
    #[reducer(append)]
    sources: Vec<String>,
    /// Every draft, in order.
    #[reducer(append)]
    drafts: Vec<String>,
    /// How many times the writer ran.
    #[reducer(sum)]
    revisions: u32,
    /// The reviewer's verdict.
    approved: bool,
    /// Quality the reviewer insists on (0-100).
    bar: u32,
}

fn graph() -> tollgate::CompiledGraph<Article> {
    StateGraph::<Article>::new("editorial", 1)
        .node("plan", |state: Arc<Article>, _ctx: NodeContext| async move {
            Ok(ArticleUpdate::default().topic(format!("{} (outline)", state.topic)))
        })
        .node("research_web", |state: Arc<Article>, _ctx| async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            Ok(ArticleUpdate::default().sources(vec![format!("web: 3 posts on {}", state.topic)]))
        })
        .node("research_papers", |_state: Arc<Article>, _ctx| async move {
            Ok(ArticleUpdate::default().sources(vec!["papers: 2 found".into()]))
        })
        .node("summarize_papers", |_state: Arc<Article>, _ctx| async move {
            Ok(ArticleUpdate::default().sources(vec!["papers: summarised".into()]))
        })
        .node("write", |state: Arc<Article>, ctx: NodeContext| async move {
            let draft = format!(
                "draft {} on {} from {} sources ({} steps left)",
                state.revisions + 1,
                state.topic,
                state.sources.len(),
                ctx.remaining_steps()
            );
            Ok(ArticleUpdate::default().drafts(vec![draft]).revisions(1))
        })
        .node("review", |state: Arc<Article>, _ctx| async move {
            let quality = 40 * state.revisions;
            if state.sources.len() < 3 {
                return Err(NodeError::fatal("review needs every source"));
            }
            Ok(ArticleUpdate::default().approved(quality >= state.bar))
        })
        .edge(START, "plan")
        .edge("plan", "research_web")
        .edge("plan", "research_papers")
        .edge("research_papers", "summarize_papers")
        .join(["research_web", "summarize_papers"], "write")
        .edge("write", "review")
        .route("review", ["write", END], |state: &Article| {
            if state.approved {
                Route::end()
            } else {
                Route::to("write")
            }
        })
        .compile()
        .expect("the editorial graph is valid")
}

fn describe(event: &EventEnvelope) -> String {
    let detail = match &event.event {
        Event::RunStarted { graph, graph_version, .. } => format!("{graph} v{graph_version}"),
        Event::NodeCompleted { update, .. } => update.to_string(),
        Event::NodeFailed { error, .. } => error.clone(),
        Event::CheckpointSaved { step, tasks, .. } => format!("step {step}, {tasks} task(s)"),
        Event::RunEnded { status, step, error, .. } => match error {
            Some(error) => format!("{status} at step {step}: {}", error.message),
            None => format!("{status} at step {step}"),
        },
        _ => String::new(),
    };
    format!(
        "{:>3}  {:<16}  {:<22}  {}",
        event.seq,
        event.event.kind(),
        event.node_id.as_deref().unwrap_or("-"),
        detail
    )
}

async fn run(executor: &Executor, bar: u32, max_steps: u64) -> Result<Article, RunError> {
    let (sink, mut events) = EventSink::channel();
    let printer = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            println!("{}", describe(&event));
        }
    });
    let input = Article { topic: "durable agents".into(), bar, ..Article::default() };
    let config = RunConfig::new().max_steps(max_steps).events(sink);
    let result = executor.run(&graph(), input, config).await;
    let _ = printer.await;
    result.map(|outcome| outcome.state)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::var("TOLLGATE_DB").unwrap_or_else(|_| "tollgate.db".to_owned());
    let executor = Executor::new(SqliteStore::open(&path)?);
    println!("{}", graph().to_mermaid());

    println!("== run 1: reviewer wants quality 80, budget 12 steps");
    let article = run(&executor, 80, 12).await?;
    println!(
        "approved after {} revision(s); last draft: {}\n",
        article.revisions,
        article.drafts.last().map_or("", String::as_str)
    );

    println!("== run 2: reviewer is never satisfied, budget 10 steps");
    match run(&executor, 1_000, 10).await {
        Err(RunError::StepLimitExceeded { limit, step, node }) => {
            println!("stopped by the cycle guard: limit {limit}, step {step} would run `{node}`");
        }
        other => return Err(format!("expected the step limit to stop run 2, got {other:?}").into()),
    }

    let page = PageRequest { limit: 5, cursor: None };
    let runs = executor.store().list_runs(&RunFilter::default(), &page).await?;
    println!("\nruns in {path}, newest first:");
    for run in &runs.runs {
        let error = run.failure.as_ref().map_or("", |failure| failure.kind.as_str());
        println!("  {}  {:<10}  step {:>2}  {error}", run.id, run.status, run.step);
    }
    if runs.next.is_some() {
        println!("  ... (more on the next page)");
    }
    Ok(())
}
