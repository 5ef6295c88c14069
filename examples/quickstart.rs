//! Quick start: an editorial workflow on the embedded store, with a person
//! in the loop.
//!
//! ```text
//! plan ─┬─ research_web ─────────────────────┐
//!       └─ research_papers ─ summarize_papers ┴─(join)─ write ─ review ─┬─ publish ─ END
//!                                                         ▲            │     ▲
//!                                                         └─ (revise) ─┤  sign_off
//!                                                                      └─────┘ (runs that need one)
//! ```
//!
//! Four runs, every step checkpointed into SQLite (`$TOLLGATE_DB`, else
//! `./tollgate.db`):
//! 1. completes after two revisions (the first draft is sent back once);
//! 2. has a reviewer that is never satisfied: the loop is stopped by the
//!    step guard (`max_steps`);
//! 3. needs an editor's sign-off: it pauses at the `sign_off` gate, and a
//!    second process (this program again, started with `reviewer`) lists
//!    the paused runs and approves it with an edited headline; this process
//!    sees the decision and finishes the run;
//! 4. pauses the same way; the reviewer rejects it with a reason and it ends
//!    `rejected`.
//!
//! The runs in the database are then listed newest first.
//!
//! Run it with `cargo run --example quickstart`.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use tollgate::{
    Decision, DecisionKind, DecisionRequest, Event, EventEnvelope, EventSink, Executor, GraphState,
    Interrupt, NodeContext, NodeError, PageRequest, Route, RunConfig, RunError, RunFilter, RunId,
    RunStatus, SqliteStore, StateGraph, END, START,
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
    /// Whether an editor must sign the article off before it is published.
    needs_sign_off: bool,
    /// The headline: proposed by the writer, perhaps edited by the editor.
    headline: String,
    /// Set by `publish`.
    published: bool,
}

/// The question the `sign_off` gate asks, and what an edit must look like.
fn sign_off_request(state: &Article) -> Interrupt {
    Interrupt::new("sign_off", json!({"headline": state.headline, "draft": state.drafts.last()}))
        .allow([DecisionKind::Approve, DecisionKind::Edit, DecisionKind::Reject])
        .schema(json!({
            "type": "object",
            "properties": {"headline": {"type": "string", "minLength": 1}},
            "required": ["headline"]
        }))
}

fn graph() -> tollgate::CompiledGraph<Article> {
    StateGraph::<Article>::new("editorial", 2)
        .node("plan", |state: Arc<Article>, _ctx: NodeContext| async move {
            Ok(ArticleUpdate::default().topic(format!("{} (outline)", state.topic)))
        })
        .node("research_web", |state: Arc<Article>, _ctx| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
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
            let headline = format!("Durable agents, revision {}", state.revisions + 1);
            Ok(ArticleUpdate::default().drafts(vec![draft]).revisions(1).headline(headline))
        })
        .node("review", |state: Arc<Article>, _ctx| async move {
            let quality = 40 * state.revisions;
            if state.sources.len() < 3 {
                return Err(NodeError::fatal("review needs every source"));
            }
            Ok(ArticleUpdate::default().approved(quality >= state.bar))
        })
        // The gate: the first time, `interrupt` pauses the run (the error is
        // returned with `?`); once decided, the node runs again and gets the
        // decision. A rejection ends the run without running it again.
        .node("sign_off", |state: Arc<Article>, ctx: NodeContext| async move {
            match ctx.interrupt(sign_off_request(&state))? {
                Decision::Edit { value } => {
                    let headline = value["headline"].as_str().unwrap_or_default().to_owned();
                    Ok(ArticleUpdate::default().headline(headline))
                }
                _ => Ok(ArticleUpdate::default()),
            }
        })
        .node("publish", |_state: Arc<Article>, _ctx| async move {
            Ok(ArticleUpdate::default().published(true))
        })
        .edge(START, "plan")
        .edge("plan", "research_web")
        .edge("plan", "research_papers")
        .edge("research_papers", "summarize_papers")
        .join(["research_web", "summarize_papers"], "write")
        .edge("write", "review")
        .route("review", ["write", "sign_off", "publish"], |state: &Article| {
            if !state.approved {
                Route::to("write")
            } else if state.needs_sign_off {
                Route::to("sign_off")
            } else {
                Route::to("publish")
            }
        })
        .edge("sign_off", "publish")
        .edge("publish", END)
        .compile()
        .expect("the editorial graph is valid")
}

const EVENT_HEADER: &str = "seq  event             node                    detail";

/// One line of the event table: the event's number in the run, its kind,
/// the node it comes from, and what it carries.
fn describe(event: &EventEnvelope) -> String {
    let detail = match &event.event {
        Event::RunStarted { graph, graph_version, from_step } => {
            format!("graph {graph} v{graph_version}, from step {from_step}")
        }
        Event::NodeCompleted { update, .. } => format!("update {update}"),
        Event::NodeFailed { error, .. } => error.clone(),
        Event::CheckpointSaved { step, tasks, .. } => format!("step {step}, {tasks} task(s)"),
        Event::InterruptRaised { interrupt, .. } => {
            format!("asks `{}`: {}", interrupt.kind, interrupt.payload)
        }
        Event::RunResumed { decisions, .. } => decisions
            .iter()
            .map(|answered| {
                let decision = answered.decision.as_ref().map_or_else(String::new, |decision| {
                    serde_json::to_string(decision).unwrap_or_default()
                });
                format!("{} decided {decision}", answered.id)
            })
            .collect::<Vec<_>>()
            .join("; "),
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

/// A config whose events are printed as they happen; the returned task
/// ends once the leg's events are all printed.
fn printing(max_steps: u64) -> (RunConfig, tokio::task::JoinHandle<()>) {
    let (sink, mut events) = EventSink::channel();
    let printer = tokio::spawn(async move {
        println!("{EVENT_HEADER}");
        while let Some(event) = events.recv().await {
            println!("{}", describe(&event));
        }
    });
    (RunConfig::new().max_steps(max_steps).events(sink), printer)
}

fn article(bar: u32, needs_sign_off: bool) -> Article {
    Article { topic: "durable agents".into(), bar, needs_sign_off, ..Article::default() }
}

/// Runs 3 and 4: the run pauses at the gate, a second process decides, this
/// one sees the decision and, if the run may go on, finishes it.
async fn with_reviewer(
    executor: &Executor,
    db: &Path,
    verdict: &str,
) -> Result<RunStatus, Box<dyn std::error::Error>> {
    let (config, printer) = printing(12);
    let paused = executor.run(&graph(), article(80, true), config).await?;
    printer.await?;
    let run = paused.run_id;
    let waits = paused.interrupts.first().ok_or("the run should wait at the gate")?;
    println!("run {run} is {}: it waits for `{}` on {}", paused.status, waits.kind, waits.payload);

    println!("-- starting a second process to play the reviewer ({verdict})");
    let mut reviewer = Command::new(std::env::current_exe()?)
        .args(["reviewer", verdict, &run.to_string()])
        .env("TOLLGATE_DB", db)
        .spawn()?;

    // Watch the database, as any process could, until the decision lands.
    let deadline = Instant::now() + Duration::from_secs(60);
    let record = loop {
        let record = executor.store().run(run).await?;
        if record.status != RunStatus::AwaitingHitl {
            break record;
        }
        if Instant::now() > deadline {
            return Err("no decision within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    if !reviewer.wait()?.success() {
        return Err("the reviewer process failed".into());
    }
    println!("-- this process sees run {run} is now {}", record.status);
    if record.status == RunStatus::Rejected {
        let reason = record.failure.map(|failure| failure.message).unwrap_or_default();
        println!("run {run} ends rejected: {reason}\n");
        return Ok(RunStatus::Rejected);
    }
    let (config, printer) = printing(12);
    let outcome = executor.continue_run(&graph(), run, config).await?.wait().await?;
    printer.await?;
    println!(
        "run {run} is {}; published under the headline {:?}\n",
        outcome.status, outcome.state.headline
    );
    Ok(outcome.status)
}

/// The second process: only the database, no graph. Lists the paused runs
/// newest first, then decides `run`.
async fn reviewer(verdict: &str, run: &str) -> Result<(), Box<dyn std::error::Error>> {
    let db = std::env::var("TOLLGATE_DB").unwrap_or_else(|_| "tollgate.db".to_owned());
    let executor = Executor::new(SqliteStore::open(&db)?);
    let me = format!("   [reviewer, pid {}]", std::process::id());
    let waiting = RunFilter { status: Some(RunStatus::AwaitingHitl), ..RunFilter::default() };
    let page =
        executor.store().list_runs(&waiting, &PageRequest { limit: 5, cursor: None }).await?;
    println!("{me} runs waiting for a decision, newest first:");
    for paused in &page.runs {
        println!("{me}   {}  {}  step {}", paused.id, paused.graph.name, paused.step);
    }
    let run: RunId = run.parse()?;
    let decision = match verdict {
        "approve" => Decision::Edit { value: json!({"headline": "Agents that survive a crash"}) },
        _ => Decision::Reject { reason: Some("off-topic for this issue".into()) },
    };
    println!("{me} deciding {run}: {}", serde_json::to_string(&decision)?);
    let decided = executor.decide(run, DecisionRequest::new(decision)).await?;
    println!("{me} recorded; the run is {} (version {})", decided.status, decided.version);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, role, verdict, run] = args.as_slice() {
        if role == "reviewer" {
            return reviewer(verdict, run).await;
        }
    }

    let path = std::env::var("TOLLGATE_DB").unwrap_or_else(|_| "tollgate.db".to_owned());
    let executor = Executor::new(SqliteStore::open(&path)?);
    println!("The graph as a Mermaid flowchart (paste it into a ```mermaid block on GitHub,");
    println!("or into mermaid.live, to draw it): solid arrows are edges, dotted arrows the");
    println!("targets a route may pick, thick arrows the branches a join waits for.\n");
    println!("{}", graph().to_mermaid());
    println!("Every event of each run is printed: its number in the run, its kind, the node");
    println!("it comes from, and what it carries. A node's `update` is what it wrote; the");
    println!("stored state is the updates merged through each field's reducer.\n");

    println!("== run 1: reviewer wants quality 80, budget 12 steps");
    let (config, printer) = printing(12);
    let finished = executor.run(&graph(), article(80, false), config).await?;
    printer.await?;
    println!(
        "run {} is {} after {} revision(s); last draft: {}\n",
        finished.run_id,
        finished.status,
        finished.state.revisions,
        finished.state.drafts.last().map_or("", String::as_str)
    );

    println!("== run 2: reviewer is never satisfied, budget 10 steps");
    let (config, printer) = printing(10);
    let result = executor.run(&graph(), article(1_000, false), config).await;
    printer.await?;
    match result {
        Err(RunError::StepLimitExceeded { limit, step, node }) => {
            println!("stopped by the step guard: limit {limit}, step {step} would run `{node}`\n");
        }
        other => return Err(format!("expected the step limit to stop run 2, got {other:?}").into()),
    }

    println!("== run 3: needs an editor's sign-off; the reviewer approves with a new headline");
    with_reviewer(&executor, Path::new(&path), "approve").await?;
    println!("== run 4: needs an editor's sign-off; the reviewer rejects it");
    with_reviewer(&executor, Path::new(&path), "reject").await?;

    let page = PageRequest { limit: 4, cursor: None };
    let runs = executor.store().list_runs(&RunFilter::default(), &page).await?;
    println!("The last four runs in {path}, newest first:");
    println!("  {:<26}  {:<10}  {:>4}  why it ended", "run", "status", "step");
    for run in &runs.runs {
        let why = run
            .failure
            .as_ref()
            .map_or_else(String::new, |failure| format!("{}: {}", failure.kind, failure.message));
        println!("  {}  {:<10}  {:>4}  {why}", run.id, run.status, run.step);
    }
    let newest = runs.runs.first().map_or_else(String::new, |run| run.id.to_string());
    println!("\nThe same with the CLI (run from this folder):");
    println!("  cargo run -q -p tollgate-cli -- --db {path} runs list");
    println!("  cargo run -q -p tollgate-cli -- --db {path} runs events {newest}");
    println!("A blueprint run paused for approval, decided from the command line:");
    println!(
        "  cargo run -q -p tollgate-cli -- --db {path} run examples/blueprints/refunds/refunds.json --input 'Please refund order 7'"
    );
    println!("  cargo run -q -p tollgate-cli -- --db {path} runs resume RUN_ID --approve");
    Ok(())
}
