//! The `tollgate` command line: runs blueprints, lists and shows runs,
//! records decisions, prints and follows events, continues runs, and serves
//! the HTTP API. Exit codes (docs/cli.md): 0 completed or done, 10
//! awaiting_hitl, 11 rejected, 1 failed, 2 bad usage or invalid input, 3
//! not found, 4 conflict.
//!
//! As a library, [`main_with`] is every command for a binary of one's
//! own that also serves typed Rust graphs (`mytool run --graph NAME`,
//! `mytool serve`, `mytool worker`, `mytool runs resume` continue them):
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     let graphs = tollgate_server::Graphs::new(); // .graph(my_graph())
//!     tollgate_cli::main_with(graphs)
//! }
//! ```

/// `println!` to stdout that ends quietly when the reader left.
macro_rules! say {
    ($($arg:tt)*) => { $crate::output::emit(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` likewise.
macro_rules! say_raw {
    ($($arg:tt)*) => { $crate::output::emit(format_args!($($arg)*)) };
}

mod args;
mod logs;
mod output;
mod pack;
mod run;
mod runs;
mod schedule;
mod serve;
mod store;

use std::process::ExitCode;

use clap::Parser;
use serde_json::Value;
use tollgate_checkpoint::{IndexConfig, RunId, RunStatus};
use tollgate_engine::EventSink;

use args::{Cli, Command, ScheduleCommand, StoreCommand, ThreadsCommand};
use tollgate_server::{code, Graphs, PruneStrategy, RunSummary, Runs, ServiceError};

/// Parses the process's arguments and runs the command, with `graphs`
/// served besides blueprints; the exit code of docs/cli.md.
pub fn main_with(graphs: Graphs) -> ExitCode {
    let cli = Cli::parse();
    // Traces go out when OTEL_EXPORTER_OTLP_ENDPOINT is set; the guard
    // sends the last ones after the runtime is gone.
    let _otel = match logs::install(matches!(
        cli.command,
        Command::Serve { .. } | Command::Worker { .. }
    )) {
        Ok(guard) => guard,
        Err(message) => {
            eprintln!("tollgate: {message}");
            return ExitCode::from(code::USAGE);
        }
    };
    let runtime =
        match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
            Ok(runtime) => runtime,
            Err(error) => {
                eprintln!("tollgate: cannot start the async runtime: {error}");
                return ExitCode::from(code::FAILED);
            }
        };
    let result = runtime.block_on(dispatch(cli, graphs));
    // Legs still spawned end here, before the spans are flushed.
    drop(runtime);
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("tollgate: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

async fn dispatch(cli: Cli, graphs: Graphs) -> Result<u8, ServiceError> {
    if let Command::Serve { token: Some(_), .. } = &cli.command {
        return Err(ServiceError::invalid(
            "--token is not taken: a token on the command line shows in `ps`; set TOLLGATE_TOKEN or use --token-file PATH",
        ));
    }
    // Packs need no database.
    let command = match cli.command {
        Command::Pack(command) => return pack::pack_command(command),
        command => command,
    };
    let cli = Cli { command, ..cli };
    // A blueprint (or a pack, verified and extracted into its cache) is
    // checked before the database is opened (or created): an invalid one
    // runs nothing and leaves nothing behind.
    let loaded = match run::load(&cli.command)? {
        run::Load::Blueprint(blueprint) => blueprint,
        run::Load::Verified => return Ok(code::OK),
    };
    // `serve`'s options are checked before the database is opened (or
    // created): a refused start leaves nothing behind.
    let serve_options = serve::options(&cli.command, &cli.pass_env)?;
    // Long-running commands stop gracefully on SIGTERM/SIGINT, watched from
    // the start (before the database is even opened).
    let long_running = matches!(cli.command, Command::Serve { .. } | Command::Worker { .. });
    let mut shutdown = long_running.then(|| Box::pin(serve::shutdown_signal()));
    let runs = open(&cli, graphs, long_running).await?;
    // Blueprints of the served folder that will not load are said at
    // once (and listed by `GET /graphs` under `invalid`).
    if let Some(folder) = serve_options.as_ref().and_then(|options| options.blueprints.as_deref()) {
        for invalid in runs.blueprint_problems(folder) {
            eprintln!("tollgate: warning: {} is not served: {}", invalid.file, invalid.problems);
        }
    }
    match cli.command {
        Command::Run { graph: Some(name), input, queue, thread, json, .. } => {
            run::run_graph(&runs, &name, &input, (queue, thread), json).await
        }
        Command::Run { input, model, stream, queue, thread, json, .. } => {
            let Some(blueprint) = loaded else {
                return Err(ServiceError::invalid("give a blueprint file, or --graph NAME"));
            };
            let blueprint = run::configured(blueprint, &cli.pass_env, model, stream);
            run::run_blueprint(&runs, &blueprint, &input, (queue, thread), json).await
        }
        Command::Worker { concurrency, lease, max_lease_losses, metrics_addr, json } => {
            let shutdown = shutdown
                .take()
                .ok_or_else(|| ServiceError::failed("the worker's signal watch is missing"))?;
            let limits = (concurrency, lease, max_lease_losses);
            serve::worker(&runs, limits, metrics_addr, shutdown, json).await
        }
        Command::Runs(command) => runs::runs_command(&runs, command).await,
        Command::Store(command) => store::store_command(&runs, command).await,
        Command::Pack(command) => pack::pack_command(command),
        Command::Schedule(command) => schedule::schedule_command(&runs, command).await,
        Command::Threads(ThreadsCommand::Show { thread, json }) => {
            let shown = tollgate_server::thread_json(&runs.thread(&thread).await?);
            if json {
                print_json(&shown);
            } else {
                say_raw!("{}", output::thread(&shown));
            }
            Ok(code::OK)
        }
        Command::Threads(ThreadsCommand::Prune { threads, keep_latest, json }) => {
            let strategy =
                if keep_latest { PruneStrategy::KeepLatest } else { PruneStrategy::Delete };
            let pruned = runs.prune_threads(&threads, strategy).await?;
            if json {
                print_json(&serde_json::json!({"pruned": pruned}));
            } else {
                let how = if keep_latest { "kept its latest run" } else { "deleted" };
                for thread in &pruned {
                    say_raw!("{thread}: {how}");
                }
            }
            // Every thread named is pruned, or the command says which were not.
            if pruned.len() < threads.len() {
                let missing: Vec<&str> = threads
                    .iter()
                    .filter(|thread| !pruned.contains(thread))
                    .map(String::as_str)
                    .collect();
                return Err(ServiceError::missing(format!("no thread {}", missing.join(", "))));
            }
            Ok(code::OK)
        }
        Command::Threads(ThreadsCommand::Storage { thread, json }) => {
            let storage = runs.thread_storage(&thread).await?;
            let bytes = storage.checkpoint_bytes + storage.event_bytes;
            if json {
                print_json(&tollgate_server::thread_storage_json(&thread, &storage));
            } else {
                say_raw!(
                    "{thread}: {} run(s), {bytes} bytes ({} of checkpoints, {} of events)",
                    storage.runs,
                    storage.checkpoint_bytes,
                    storage.event_bytes
                );
            }
            Ok(code::OK)
        }
        Command::Serve { .. } => {
            let options = serve_options
                .ok_or_else(|| ServiceError::failed("the server's options are missing"))?;
            let shutdown = shutdown
                .take()
                .ok_or_else(|| ServiceError::failed("the server's signal watch is missing"))?;
            tollgate_server::serve(runs, options, shutdown).await?;
            Ok(code::OK)
        }
    }
}

/// The run service on `--db`, with the graphs served and the embedder
/// asked for. Only `run` (and `serve --create`) make a new SQLite
/// database: a mistyped --db elsewhere is "not found", not a new empty
/// file.
async fn open(cli: &Cli, graphs: Graphs, long_running: bool) -> Result<Runs, ServiceError> {
    let creates = match &cli.command {
        Command::Run { .. }
        | Command::Store(StoreCommand::Put { .. })
        | Command::Schedule(ScheduleCommand::Add { .. }) => true,
        Command::Serve { create, .. } => *create,
        _ => false,
    };
    let mut runs =
        Runs::open(&cli.db, creates).await?.with_pass_env(cli.pass_env.clone()).with_graphs(graphs);
    if let Some(spec) = &cli.embedder {
        let embedder = tollgate_server::embedder(spec, cli.embed_dims)?;
        let index = IndexConfig::new(cli.embed_dims).fields(cli.embed_fields.clone());
        runs = runs.with_embedder(index, embedder);
    }
    if let Command::Serve { thread_ttl, .. } = &cli.command {
        let ttl = thread_ttl.map(|ttl| serve::seconds("thread-ttl", ttl)).transpose()?;
        runs = runs.with_thread_ttl(ttl);
    }
    if long_running {
        // Expired memory items and request keys are invisible at once, and
        // expired threads are removed: one sweep every minute (`serve
        // --sweep-every`).
        let every = match &cli.command {
            Command::Serve { sweep_every, .. } => serve::seconds("sweep-every", *sweep_every)?,
            _ => std::time::Duration::from_secs(60),
        };
        runs.sweep_expired_every(every);
    }
    Ok(runs)
}

/// Prints a leg's events to stderr as they happen (human mode only).
fn progress(json: bool) -> Option<EventSink> {
    if json {
        return None;
    }
    let (sink, mut stream) = EventSink::channel();
    tokio::spawn(async move {
        while let Some(envelope) = stream.recv().await {
            if !matches!(
                envelope.event.kind(),
                "model_delta" | "middleware_started" | "middleware_completed"
            ) {
                eprintln!("{}", output::event(&envelope));
            }
        }
    });
    Some(sink)
}

/// Prints the summary and turns the run's status into the exit code.
fn report(summary: &RunSummary, json: bool) -> u8 {
    print_summary(summary, json);
    match summary.status {
        RunStatus::Completed => code::OK,
        RunStatus::AwaitingHitl => code::AWAITING,
        RunStatus::Rejected => code::REJECTED,
        // Decided and waiting for its graph's process, or still going.
        RunStatus::Queued | RunStatus::Running => code::OK,
        _ => code::FAILED,
    }
}

fn print_summary(summary: &RunSummary, json: bool) {
    if json {
        print_json(summary);
    } else {
        say_raw!("{}", output::summary(summary));
    }
}

fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string(value) {
        Ok(text) => say!("{text}"),
        Err(error) => eprintln!("tollgate: cannot encode JSON: {error}"),
    }
}

fn run_id(text: &str) -> Result<RunId, ServiceError> {
    text.parse().map_err(|_| {
        ServiceError::invalid(format!(
            "`{text}` is not a run id (26 characters, as `runs list` prints)"
        ))
    })
}

fn json_arg(flag: &str, text: &str) -> Result<Value, ServiceError> {
    serde_json::from_str(text).map_err(|error| {
        ServiceError::invalid(format!("{flag} takes JSON: {error}")).with_source(error)
    })
}

/// `30d`, `12h`, `15m`, `90s` as milliseconds.
fn parse_age(flag: &str, text: &str) -> Result<i64, ServiceError> {
    let invalid = || {
        ServiceError::invalid(format!(
            "{flag} `{text}`: give a number and a unit, s, m, h or d (such as 30d)"
        ))
    };
    let text = text.trim();
    let unit = text.chars().last().ok_or_else(invalid)?;
    let seconds: i64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => return Err(invalid()),
    };
    let count: i64 = text[..text.len() - 1].parse().map_err(|_| invalid())?;
    count.checked_mul(seconds * 1_000).filter(|ms| *ms >= 0).ok_or_else(invalid)
}
