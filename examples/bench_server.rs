//! Serves three Rust graphs over LangGraph's server API (at `/lg`), so
//! that any client can measure the same work against tollgate and against
//! LangGraph's own server (docs/langgraph-api.md, "Benchmark"):
//!
//! ```sh
//! cargo run --release --example bench_server -- --addr 127.0.0.1:8123 --db bench.db
//! ```
//!
//! - `echo`: one node appending `"echo:" + text` to `log`;
//! - `steps`: nodes `a`, `b`, `c` in a chain, each appending its name;
//! - `gate`: one node that asks `{"question": "approve " + text + "?"}`,
//!   then sets `answer` to the answer (as a string) and appends `"gate"`.
//!
//! The state of all three is `{text: last value, log: appended list,
//! answer: last value}`. Four more serve the SDK test suites
//! (`scripts/langgraph-sdk`): `pair` (two nodes asking at once, each
//! appending `NAME=ANSWER`), `slow` (one node of `text` milliseconds, 2 s
//! by default), `turn` (one node appending `NAME` of `text` `NAME:MS`
//! after MS milliseconds) and `progress` (one node emitting three custom
//! events).
//! Its long-term memory (`/lg/store/...`) embeds values' `text` field with
//! the testkit's deterministic `KeywordEmbedder` (64 dimensions, offline),
//! so the store's semantic search can be tested. No token on a loopback address (`--token` sets
//! one); `--blueprints DIR` also serves the blueprints of a folder. It
//! prints `listening on http://ADDR` and serves until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tollgate::{
    CompiledGraph, Decision, DecisionKind, Event, GraphState, Interrupt, NodeContext, NodeError,
    StateGraph, END, START,
};
use tollgate_server::{Graphs, Runs, ServeOptions};

#[path = "shared/stop.rs"]
mod stop;
use stop::stopped;

/// Serves the benchmark's graphs.
#[derive(Parser)]
struct Args {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8123")]
    addr: SocketAddr,
    /// The SQLite database (created when missing), or a `postgres://` URL.
    #[arg(long, default_value = "bench_server.db")]
    db: PathBuf,
    /// A bearer token (or `x-api-key`) every request must carry.
    #[arg(long)]
    token: Option<String>,
    /// Take JWTs (HS256) signed with the secret in this file instead:
    /// users (role `user`) reach their own threads only.
    #[arg(long, conflicts_with = "token")]
    jwt_secret_file: Option<PathBuf>,
    /// A folder of blueprints to serve as assistants too.
    #[arg(long)]
    blueprints: Option<PathBuf>,
    /// A host (`HOST` or `HOST:PORT`) run webhooks may be sent to.
    #[arg(long, value_name = "HOST")]
    allow_webhook_host: Vec<String>,
    /// An origin (`http://127.0.0.1:5173`, or `*`) a browser page may call
    /// this server from (CORS): the React front-end test's page.
    #[arg(long, value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// Legs a worker of this process drives at once, on Postgres (where
    /// `serve` leaves queued runs to workers, and `tollgate worker` does
    /// not know these graphs); 0: none.
    #[arg(long, default_value_t = 0)]
    workers: usize,
}

/// The state of the three graphs.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Bench {
    /// The input's text.
    text: String,
    /// What the nodes did, in order.
    #[reducer(append)]
    log: Vec<String>,
    /// The gate's answer.
    answer: Option<String>,
}

fn echo() -> CompiledGraph<Bench> {
    StateGraph::<Bench>::new("echo", 1)
        .node("echo", |state: Arc<Bench>, _ctx| async move {
            Ok(BenchUpdate::default().log(vec![format!("echo:{}", state.text)]))
        })
        .edge(START, "echo")
        .edge("echo", END)
        .compile()
        .expect("echo compiles")
}

fn steps() -> CompiledGraph<Bench> {
    let step = |name: &'static str| {
        move |_state: Arc<Bench>, _ctx: NodeContext| async move {
            Ok(BenchUpdate::default().log(vec![name.to_owned()]))
        }
    };
    StateGraph::<Bench>::new("steps", 1)
        .node("a", step("a"))
        .node("b", step("b"))
        .node("c", step("c"))
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .edge("c", END)
        .compile()
        .expect("steps compiles")
}

fn gate() -> CompiledGraph<Bench> {
    StateGraph::<Bench>::new("gate", 1)
        .node("gate", |state: Arc<Bench>, ctx: NodeContext| async move {
            let question = json!({"question": format!("approve {}?", state.text)});
            let answer = match ctx.interrupt(Interrupt::new("question", question))? {
                Decision::Respond { value: Value::String(text) } => text,
                Decision::Respond { value } | Decision::Edit { value } => value.to_string(),
                Decision::Approve => "approved".to_owned(),
                Decision::Reject { .. } => return Err(NodeError::fatal("the gate was refused")),
            };
            Ok(BenchUpdate::default().answer(Some(answer)).log(vec!["gate".to_owned()]))
        })
        .edge(START, "gate")
        .edge("gate", END)
        .compile()
        .expect("gate compiles")
}

/// A graph's own question in the shape Agent Inbox shows with buttons
/// (LangGraph's `HumanInterrupt`): accept approves, a response answers.
fn sign_off() -> CompiledGraph<Bench> {
    StateGraph::<Bench>::new("sign_off", 1)
        .node("sign_off", |state: Arc<Bench>, ctx: NodeContext| async move {
            let question = json!({
                "action_request": {"action": "sign_off", "args": {"text": state.text}},
                "config": {"allow_accept": true, "allow_respond": true, "allow_edit": false, "allow_ignore": true},
                "description": format!("Sign off `{}`?", state.text),
            });
            let request = Interrupt::new("sign_off", question).allow([
                DecisionKind::Approve,
                DecisionKind::Respond,
                DecisionKind::Reject,
            ]);
            let answer = match ctx.interrupt(request.handle_rejection())? {
                Decision::Respond { value: Value::String(text) } => text,
                Decision::Approve => "signed".to_owned(),
                Decision::Reject { .. } => "ignored".to_owned(),
                other => format!("{:?}", other.kind()),
            };
            Ok(BenchUpdate::default().answer(Some(answer)).log(vec!["sign_off".to_owned()]))
        })
        .edge(START, "sign_off")
        .edge("sign_off", END)
        .compile()
        .expect("sign_off compiles")
}

fn pair() -> CompiledGraph<Bench> {
    let ask = |name: &'static str| {
        move |_state: Arc<Bench>, ctx: NodeContext| async move {
            let question = json!({"question": format!("{name}?")});
            let answer = match ctx.interrupt(Interrupt::new("question", question))? {
                Decision::Respond { value: Value::String(text) } => text,
                other => format!("{:?}", other.kind()),
            };
            Ok(BenchUpdate::default().log(vec![format!("{name}={answer}")]))
        }
    };
    StateGraph::<Bench>::new("pair", 1)
        .node("left", ask("left"))
        .node("right", ask("right"))
        .edge(START, "left")
        .edge(START, "right")
        .edge("left", END)
        .edge("right", END)
        .compile()
        .expect("pair compiles")
}

fn slow() -> CompiledGraph<Bench> {
    StateGraph::<Bench>::new("slow", 1)
        .node("wait", |state: Arc<Bench>, _ctx| async move {
            let millis = state.text.parse().unwrap_or(2_000);
            tokio::time::sleep(std::time::Duration::from_millis(millis)).await;
            Ok(BenchUpdate::default().log(vec!["waited".to_owned()]))
        })
        .edge(START, "wait")
        .edge("wait", END)
        .compile()
        .expect("slow compiles")
}

/// `turn`: one node that appends the name in `text` (`NAME` or
/// `NAME:MILLISECONDS`) after sleeping that long, so that the order runs
/// of a thread ran in shows in its log.
fn turn() -> CompiledGraph<Bench> {
    StateGraph::<Bench>::new("turn", 1)
        .node("turn", |state: Arc<Bench>, _ctx| async move {
            let (name, millis) = state.text.split_once(':').unwrap_or((&state.text, "0"));
            let millis = millis.parse().unwrap_or(0);
            tokio::time::sleep(std::time::Duration::from_millis(millis)).await;
            Ok(BenchUpdate::default().log(vec![name.to_owned()]))
        })
        .edge(START, "turn")
        .edge("turn", END)
        .compile()
        .expect("turn compiles")
}

fn progress() -> CompiledGraph<Bench> {
    StateGraph::<Bench>::new("progress", 1)
        .node("work", |_state: Arc<Bench>, ctx: NodeContext| async move {
            for done in 1..=3 {
                let payload = json!({"done": done, "of": 3});
                ctx.emit(Event::Custom { name: "progress".into(), payload })?;
            }
            Ok(BenchUpdate::default().log(vec!["worked".to_owned()]))
        })
        .edge(START, "work")
        .edge("work", END)
        .compile()
        .expect("progress compiles")
}

fn input_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}})
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let graphs = Graphs::new()
        .graph_with_input_schema(echo(), input_schema())
        .graph_with_input_schema(steps(), input_schema())
        .graph_with_input_schema(gate(), input_schema())
        .graph(pair())
        .graph(sign_off())
        .graph(slow())
        .graph(turn())
        .graph(progress());
    let embedder = Arc::new(tollgate_testkit::KeywordEmbedder::new(64));
    let runs = Runs::open(&args.db, true)
        .await?
        .with_graphs(graphs)
        .with_embedder(tollgate::IndexConfig::new(64).fields(["text"]), embedder);
    let mut options = ServeOptions::new(args.addr);
    options.token = args.token;
    if let Some(path) = &args.jwt_secret_file {
        options.auth = tollgate_server::Auth::Jwt(tollgate_server::Jwt::load_secret(path)?, None);
    }
    options.blueprints = args.blueprints;
    options.allow_webhook_hosts = args.allow_webhook_host;
    options.allow_origins = args.allow_origin;
    tollgate_server::check_exposure(&options)?;
    if args.workers > 0 {
        let worker = runs.clone();
        let lease = std::time::Duration::from_secs(30);
        tokio::spawn(async move { worker.work(args.workers, lease, 3, stopped()).await });
    }
    tollgate_server::serve(runs, options, stopped()).await?;
    Ok(())
}
