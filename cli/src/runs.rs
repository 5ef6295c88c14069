//! `tollgate runs …`: list, show, decide, follow events, write state,
//! fork, continue, history, cancel, delete and prune runs.

use std::time::Duration;

use serde_json::json;
use tollgate_checkpoint::{RunFilter, RunId, RunStatus};
use tollgate_engine::{Clock, Decision, DecisionRequest};
use tollgate_server::{code, Decided, Runs, ServiceError};

use crate::args::{self, RunsCommand};
use crate::{json_arg, output, parse_age, print_json, print_summary, progress, report, run_id};

pub(crate) async fn runs_command(runs: &Runs, command: RunsCommand) -> Result<u8, ServiceError> {
    match command {
        RunsCommand::List { status, graph, thread, limit, cursor, json } => {
            let status = status.as_deref().map(status_arg).transpose()?;
            let listing = runs
                .list(RunFilter { status, graph, thread, ..RunFilter::default() }, limit, cursor)
                .await?;
            if json {
                print_json(&tollgate_server::listing_json(&listing));
            } else {
                say_raw!("{}", output::table(&listing.runs, listing.next.as_deref()));
                for damaged in &listing.damaged {
                    say!("damaged run {}: {}", damaged.id, damaged.reason);
                }
            }
            Ok(code::OK)
        }
        RunsCommand::Show { run, json } => {
            print_summary(&runs.show(run_id(&run)?).await?, json);
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
            let decision = Decision::Reject { reason };
            decide(runs, &run, tollgate_server::decision_request(interrupt, decision, by), json)
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
        RunsCommand::Continue { run, json } => continue_run(runs, run_id(&run)?, json).await,
        RunsCommand::History { run, thread, before, limit, values, json } => {
            history(runs, (run, thread), (before, limit), values, json).await
        }
        RunsCommand::Cancel { run, json } => {
            print_summary(&runs.cancel(run_id(&run)?).await?, json);
            Ok(code::OK)
        }
        RunsCommand::Delete { run } => {
            let run = run_id(&run)?;
            runs.delete(run).await?;
            say!("deleted run {run}");
            Ok(code::OK)
        }
        RunsCommand::Prune { older_than, status, dry_run, json } => {
            prune(runs, &older_than, &status, dry_run, json).await
        }
    }
}

/// A `--status` argument.
fn status_arg(text: &str) -> Result<RunStatus, ServiceError> {
    text.parse::<RunStatus>()
        .map_err(|error| ServiceError::invalid(error.to_string()).with_source(error))
}

/// `runs history`: a run's checkpoints, or a thread's.
async fn history(
    runs: &Runs,
    (run, thread): (Option<String>, Option<String>),
    (before, limit): (Option<u64>, u64),
    values: bool,
    json: bool,
) -> Result<u8, ServiceError> {
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

/// `runs continue`: a paused run's refusal says how to decide it.
async fn continue_run(runs: &Runs, run: RunId, json: bool) -> Result<u8, ServiceError> {
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

/// `runs prune`: terminal runs older than `older_than` (never running
/// ones), or what would go with `--dry-run`.
async fn prune(
    runs: &Runs,
    older_than: &str,
    status: &[String],
    dry_run: bool,
    json: bool,
) -> Result<u8, ServiceError> {
    let age = parse_age("--older-than", older_than)?;
    let statuses = status.iter().map(|text| status_arg(text)).collect::<Result<Vec<_>, _>>()?;
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
