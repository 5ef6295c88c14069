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
mod schedule;
mod store;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use serde_json::{json, Value};
use tollgate_checkpoint::{IndexConfig, RunFilter, RunId, RunStatus};
use tollgate_engine::{Clock, Decision, DecisionRequest, EventSink};
use tollgate_nodes::Blueprint;

use args::{Cli, Command, RunsCommand, ScheduleCommand, StoreCommand, ThreadsCommand};
use tollgate_server::{code, Decided, Graphs, RunSummary, Runs, ServiceError, UserInput};

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
    // Only `run` (and `serve --create`) make a new SQLite database: a
    // mistyped --db elsewhere is "not found", not a new empty file.
    let creates = match &cli.command {
        Command::Run { .. }
        | Command::Store(StoreCommand::Put { .. })
        | Command::Schedule(ScheduleCommand::Add { .. }) => true,
        Command::Serve { create, .. } => *create,
        _ => false,
    };
    // A blueprint (or a pack, verified and extracted into its cache) is
    // checked before the database is opened (or created): an invalid one
    // runs nothing and leaves nothing behind.
    let loaded = match &cli.command {
        Command::Run {
            blueprint: Some(blueprint),
            trusted_keys,
            allow_unsigned,
            dry_run_verify,
            queue,
            json,
            ..
        } if tollgate_server::is_pack(blueprint) => {
            if *queue {
                return Err(ServiceError::invalid(
                    "a pack cannot be queued: workers elsewhere may not hold the verified pack; run it here",
                ));
            }
            match tollgate_server::load_pack(
                blueprint,
                trusted_keys,
                *allow_unsigned,
                *dry_run_verify,
            )? {
                tollgate_server::Loaded::Blueprint(blueprint) => Some(*blueprint),
                tollgate_server::Loaded::DryRun(report) => {
                    if *json {
                        print_json(&report);
                    } else {
                        say!(
                            "verified {}: bundle {}, {}; nothing run",
                            blueprint.display(),
                            report["bundle_hash"].as_str().unwrap_or("?"),
                            match (
                                report["signature_verified"].as_bool(),
                                report["key_id"].as_str()
                            ) {
                                (Some(true), Some(key)) => format!(
                                    "signed by trusted key {}",
                                    tollgate_server::printable(key)
                                ),
                                (_, Some(key)) => format!(
                                    "signed by untrusted key {} (allowed)",
                                    tollgate_server::printable(key)
                                ),
                                _ => "unsigned (allowed)".to_owned(),
                            }
                        );
                    }
                    return Ok(code::OK);
                }
            }
        }
        Command::Run { blueprint, dry_run_verify, .. } => {
            if *dry_run_verify {
                return Err(ServiceError::invalid("--dry-run-verify is for packs (.tgpack)"));
            }
            blueprint.as_deref().map(Blueprint::load).transpose()?
        }
        _ => None,
    };
    // `serve`'s options are checked before the database is opened (or
    // created): a refused start leaves nothing behind.
    let serve_options = match &cli.command {
        Command::Serve {
            addr,
            token_file,
            tokens_file,
            insecure_no_auth,
            allow_origin,
            blueprints,
            allow_inline_commands,
            allow_mcp_host,
            allow_webhook_host,
            langgraph_prefix,
            no_langgraph,
            max_connections,
            header_timeout,
            body_timeout,
            max_body,
            no_worker,
            ..
        } => {
            let seconds = |name: &str, value: f64| {
                Duration::try_from_secs_f64(value)
                    .ok()
                    .filter(|duration| !duration.is_zero())
                    .ok_or_else(|| {
                        ServiceError::invalid(format!("--{name} takes seconds, more than 0"))
                    })
            };
            let mut limits = tollgate_server::Limits::default();
            limits.max_connections = *max_connections;
            limits.header_timeout = seconds("header-timeout", *header_timeout)?;
            limits.body_timeout = seconds("body-timeout", *body_timeout)?;
            limits.max_body = *max_body;
            let mut options = tollgate_server::ServeOptions::new(*addr);
            options.token = server_token(token_file.as_deref())?;
            if let Some(path) = tokens_file {
                if options.token.is_some() {
                    return Err(ServiceError::invalid(
                        "--tokens-file replaces the one token: unset TOLLGATE_TOKEN",
                    ));
                }
                options.auth = tollgate_server::Auth::Tokens(tollgate_server::Tokens::load(path)?);
            }
            options.insecure_no_auth = *insecure_no_auth;
            options.allow_origins = allow_origin.clone();
            options.blueprints = blueprints.clone();
            options.allow_inline_commands = *allow_inline_commands;
            options.allow_mcp_hosts = allow_mcp_host.clone();
            options.allow_webhook_hosts = allow_webhook_host.clone();
            options.pass_env = cli.pass_env.clone();
            options.limits = limits;
            options.langgraph_prefix = (!*no_langgraph).then(|| langgraph_prefix.clone());
            options.worker = !*no_worker;
            tollgate_server::check_exposure(&options)?;
            Some(options)
        }
        _ => None,
    };
    // Long-running commands stop gracefully on SIGTERM/SIGINT, watched from
    // the start (before the database is even opened).
    let long_running = matches!(cli.command, Command::Serve { .. } | Command::Worker { .. });
    let mut shutdown = long_running.then(|| Box::pin(shutdown_signal()));
    let mut runs =
        Runs::open(&cli.db, creates).await?.with_pass_env(cli.pass_env.clone()).with_graphs(graphs);
    if let Some(spec) = &cli.embedder {
        let embedder = tollgate_server::embedder(spec, cli.embed_dims)?;
        let index = IndexConfig::new(cli.embed_dims).fields(cli.embed_fields.clone());
        runs = runs.with_embedder(index, embedder);
    }
    if long_running {
        // Expired memory items are invisible at once; this reclaims them.
        runs.sweep_memory_every(std::time::Duration::from_secs(60));
    }
    // Blueprints of the served folder that will not load are said at
    // once (and listed by `GET /graphs` under `invalid`).
    if let Some(folder) = serve_options.as_ref().and_then(|options| options.blueprints.as_deref()) {
        for invalid in runs.blueprint_problems(folder) {
            eprintln!("tollgate: warning: {} is not served: {}", invalid.file, invalid.problems);
        }
    }
    match cli.command {
        Command::Run { graph: Some(name), input, queue, thread, json, .. } => {
            if thread.as_deref().is_some_and(|thread| thread.trim().is_empty()) {
                return Err(ServiceError::invalid("--thread must not be empty"));
            }
            let input = match input.trim() {
                "" => json!({}),
                text => json_arg("--input", text)?,
            };
            let events = if queue { None } else { progress(json) };
            let summary = runs.start_graph(&name, input, thread.as_deref(), queue, events).await?;
            Ok(report(&summary, json))
        }
        Command::Run { input, model, stream, queue, thread, json, .. } => {
            let Some(mut blueprint) = loaded else {
                return Err(ServiceError::invalid("give a blueprint file, or --graph NAME"));
            };
            blueprint = blueprint.with_inherited_env(&cli.pass_env);
            if let Some(spec) = model {
                blueprint = blueprint.with_model(spec);
            }
            if stream {
                blueprint = blueprint.with_streaming();
            }
            let input = user_message(&input)?;
            if thread.as_deref().is_some_and(|thread| thread.trim().is_empty()) {
                return Err(ServiceError::invalid("--thread must not be empty"));
            }
            let thread = thread.as_deref();
            let summary = if queue {
                runs.enqueue(&blueprint, input, thread).await?
            } else {
                runs.start(&blueprint, input, thread, progress(json)).await?
            };
            Ok(report(&summary, json))
        }
        Command::Worker { concurrency, lease, max_lease_losses, metrics_addr, json } => {
            let lease = std::time::Duration::try_from_secs_f64(lease)
                .ok()
                .filter(|lease| *lease >= std::time::Duration::from_millis(100))
                .ok_or_else(|| ServiceError::invalid("--lease takes seconds, at least 0.1"))?;
            let shutdown = shutdown
                .take()
                .ok_or_else(|| ServiceError::failed("the worker's signal watch is missing"))?;
            if let Some(addr) = metrics_addr {
                tollgate_server::serve_metrics(runs.store().clone(), addr).await?;
            }
            let report = runs.work(concurrency, lease, max_lease_losses, shutdown).await;
            if json {
                print_json(&report);
            } else {
                say!(
                    "worker stopped: {} legs ({} completed, {} failed, {} released), {} claims lost to other workers, {} runs dead-lettered",
                    report["legs"], report["completed"], report["failed"], report["released"],
                    report["lost_claims"], report["dead_lettered"]
                );
            }
            Ok(code::OK)
        }
        Command::Runs(command) => runs_command(&runs, command).await,
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

async fn runs_command(runs: &Runs, command: RunsCommand) -> Result<u8, ServiceError> {
    match command {
        RunsCommand::List { status, graph, thread, limit, cursor, json } => {
            let status = status
                .map(|text| {
                    text.parse::<RunStatus>().map_err(|error| {
                        ServiceError::invalid(error.to_string()).with_source(error)
                    })
                })
                .transpose()?;
            let filter = RunFilter { status, graph, thread };
            let listing = runs.list(filter, limit, cursor).await?;
            if json {
                print_json(&listing.json());
            } else {
                say_raw!("{}", output::table(&listing.runs, listing.next.as_deref()));
                for damaged in &listing.damaged {
                    say!("damaged run {}: {}", damaged.id, damaged.reason);
                }
            }
            Ok(code::OK)
        }
        RunsCommand::Show { run, json } => {
            let summary = runs.show(run_id(&run)?).await?;
            print_summary(&summary, json);
            Ok(code::OK)
        }
        RunsCommand::Resume { run, interrupt, approve, edit, respond, by, json } => {
            let decision = match (approve, edit, respond) {
                (true, _, _) => Decision::Approve,
                (_, Some(value), _) => Decision::Edit { value: json_arg("--edit", &value)? },
                (_, _, Some(value)) => Decision::Respond { value: json_arg("--respond", &value)? },
                _ => {
                    return Err(ServiceError::invalid(
                        "give one of --approve, --edit JSON, --respond JSON",
                    ))
                }
            };
            decide(runs, &run, tollgate_server::decision_request(interrupt, decision, by), json)
                .await
        }
        RunsCommand::Reject { run, interrupt, reason, by, json } => {
            decide(
                runs,
                &run,
                tollgate_server::decision_request(interrupt, Decision::Reject { reason }, by),
                json,
            )
            .await
        }
        RunsCommand::Events { run, follow, json } => {
            events(runs, run_id(&run)?, follow, json).await
        }
        RunsCommand::UpdateState { run, values, as_node, by, json } => {
            let run = run_id(&run)?;
            let values = args::object_arg("--values", &values)?;
            let step = runs.update_state(run, values, as_node.as_deref(), by.as_deref()).await?;
            let summary = runs.summary(run).await?;
            if json {
                print_json(&json!({"step": step, "run": summary}));
            } else {
                say!("wrote checkpoint {step} of run {run}: continue it with `tollgate runs continue {run}`");
            }
            Ok(code::OK)
        }
        RunsCommand::Fork { run, step, values, by, json } => {
            let run = run_id(&run)?;
            let edit = values.map(|values| args::object_arg("--values", &values)).transpose()?;
            let into = RunId::new();
            let leg = runs.fork(run, step, edit, into, progress(json), by.as_deref()).await?;
            runs.wait(leg).await?;
            Ok(report(&runs.show(into).await?, json))
        }
        RunsCommand::Continue { run, json } => {
            let run = run_id(&run)?;
            match runs.continue_run(run, progress(json)).await {
                Ok(summary) => Ok(report(&summary, json)),
                Err(error) => {
                    // A paused run waits for a decision: say how to give it.
                    if let Ok(summary) = runs.summary(run).await {
                        for interrupt in &summary.interrupts {
                            eprintln!(
                                "decide with: tollgate runs resume {run} --interrupt {} --approve\n         or: tollgate runs reject {run} --interrupt {} --reason TEXT",
                                interrupt.id, interrupt.id
                            );
                        }
                    }
                    Err(error)
                }
            }
        }
        RunsCommand::History { run, thread, before, limit, values, json } => {
            let page = match (run, thread) {
                (_, Some(thread)) => tollgate_server::thread_history_json(
                    &thread,
                    &runs.thread_history(&thread, before, limit).await?,
                ),
                (Some(run), None) => tollgate_server::run_history_json(
                    &runs.history(run_id(&run)?, before, limit, values).await?,
                ),
                (None, None) => unreachable!("clap requires a run or --thread"),
            };
            if json {
                print_json(&page);
            } else {
                say_raw!("{}", output::history(&page));
            }
            Ok(code::OK)
        }
        RunsCommand::Cancel { run, json } => {
            let summary = runs.cancel(run_id(&run)?).await?;
            print_summary(&summary, json);
            Ok(code::OK)
        }
        RunsCommand::Delete { run } => {
            let run = run_id(&run)?;
            runs.delete(run).await?;
            say!("deleted run {run}");
            Ok(code::OK)
        }
        RunsCommand::Prune { older_than, status, dry_run, json } => {
            let age = parse_age("--older-than", &older_than)?;
            let statuses = status
                .iter()
                .map(|text| {
                    text.parse::<RunStatus>().map_err(|error| {
                        ServiceError::invalid(error.to_string()).with_source(error)
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if statuses.contains(&RunStatus::Running) {
                return Err(ServiceError::invalid(
                    "running runs are never pruned: cancel them first (`tollgate runs cancel`)",
                ));
            }
            let now = tollgate_engine::SystemClock.now_ms();
            let found = runs.prune(now.saturating_sub(age), &statuses, dry_run).await?;
            let ids: Vec<String> = found.iter().map(|(run, _)| run.to_string()).collect();
            match (json, dry_run) {
                (true, false) => print_json(&json!({"deleted": ids})),
                (true, true) => print_json(&json!({
                    "dry_run": true,
                    "would_delete": found
                        .iter()
                        .map(|(run, status)| json!({"id": run.to_string(), "status": status}))
                        .collect::<Vec<_>>(),
                })),
                (false, false) => say!("deleted {} run(s)", found.len()),
                (false, true) => {
                    for (run, status) in &found {
                        say!("would delete {run} ({status})");
                    }
                    say!("would delete {} run(s); nothing deleted (--dry-run)", found.len());
                }
            }
            Ok(code::OK)
        }
    }
}

async fn decide(
    runs: &Runs,
    run: &str,
    request: DecisionRequest,
    json: bool,
) -> Result<u8, ServiceError> {
    let run = run_id(run)?;
    match runs.decide(run, request, progress(json)).await? {
        Decided::Continuing(handle) => {
            runs.wait(handle).await?;
            Ok(report(&runs.summary(run).await?, json))
        }
        Decided::Settled => Ok(report(&runs.summary(run).await?, json)),
        Decided::Recorded => {
            // A graph defined in Rust: the decision is recorded and the
            // process that has the graph continues the run (exit 0),
            // unless the decision ended it (a rejection: exit 11).
            let summary = runs.summary(run).await?;
            print_summary(&summary, json);
            if summary.status == RunStatus::Rejected {
                return Ok(code::REJECTED);
            }
            if !json {
                say!(
                    "decision recorded; the process that owns graph `{}` continues the run",
                    summary.graph
                );
            }
            Ok(code::OK)
        }
    }
}

async fn events(runs: &Runs, run: RunId, follow: bool, json: bool) -> Result<u8, ServiceError> {
    let mut after = 0;
    loop {
        let batch = runs.events(run, after, 1000).await?;
        for record in &batch {
            // A damaged line stops the listing, named, in both modes.
            let envelope = tollgate_server::parse_event(record)?;
            if json {
                say!("{}", record.json);
            } else {
                say!("{}", output::event(&envelope));
            }
            after = record.seq;
        }
        if !follow {
            return Ok(code::OK);
        }
        if batch.is_empty() {
            // Like the SSE stream: done once no leg is in flight and its
            // closing event is printed.
            let record = runs.store().run(run).await?;
            let in_flight = matches!(record.status, RunStatus::Running | RunStatus::Queued);
            if !in_flight && record.last_seq <= after {
                return Ok(code::OK);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
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
/// Completes on SIGTERM or SIGINT (Ctrl-C).
/// Resolves on SIGTERM or SIGINT. The handlers are installed here, before
/// the future is first polled: a signal that comes early (a worker stopped
/// right after it started) still stops it gracefully rather than killing
/// it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let watch = |kind: SignalKind, name: &str| match signal(kind) {
        Ok(signal) => Some(signal),
        Err(error) => {
            eprintln!("tollgate: cannot watch {name} ({error})");
            None
        }
    };
    let mut terminate = watch(SignalKind::terminate(), "SIGTERM");
    let mut interrupt = watch(SignalKind::interrupt(), "SIGINT");
    async move {
        tokio::select! {
            () = received(terminate.as_mut()) => {}
            () = received(interrupt.as_mut()) => {}
        }
    }
}

/// Waits for the signal, or forever when it could not be watched.
async fn received(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

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

/// The user's message from `--input`: text, a JSON string, or a JSON object
/// (its `message` field, else the object itself as JSON text; its
/// `context`, an object, the run's values).
fn user_message(input: &str) -> Result<UserInput, ServiceError> {
    Ok(match serde_json::from_str::<Value>(input) {
        Ok(value @ (Value::String(_) | Value::Object(_))) => UserInput::from_json(&value),
        _ => UserInput::from(input),
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

/// The server's token: `--token-file`'s first line, else `TOLLGATE_TOKEN`
/// (read here rather than by the argument parser, so that `--help` never
/// shows it). Blank means none.
fn server_token(file: Option<&std::path::Path>) -> Result<Option<String>, ServiceError> {
    let token = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|error| {
                ServiceError::invalid(format!(
                    "cannot read --token-file {}: {error}",
                    path.display()
                ))
            })?;
            let token = text.lines().next().unwrap_or_default().trim().to_owned();
            if token.is_empty() {
                return Err(ServiceError::invalid(format!(
                    "--token-file {} holds no token on its first line",
                    path.display()
                )));
            }
            token
        }
        None => std::env::var("TOLLGATE_TOKEN").unwrap_or_default().trim().to_owned(),
    };
    Ok((!token.is_empty()).then_some(token))
}
