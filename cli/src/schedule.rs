//! `tollgate schedule …`: schedules from the command line.

use serde_json::{json, Value};
use tollgate_checkpoint::{InvalidMissedTicks, MissedTicks};
use tollgate_engine::{parse_rfc3339, Schedule};
use tollgate_nodes::Blueprint;
use tollgate_server::{code, schedule_json, Runs, ServiceError, MAX_SCHEDULES_LISTED};

use crate::args::ScheduleCommand;
use crate::run::user_message;
use crate::{json_arg, print_json};

/// One line per schedule: id, what, when, next tick, runs started.
fn line(schedule: &Value) -> String {
    let when = match (schedule["cron"].as_str(), schedule["at"].as_str()) {
        (Some(cron), _) => format!("cron {cron}"),
        (None, Some(at)) => format!("at {at}"),
        _ => "?".to_owned(),
    };
    format!(
        "{}\t{}@{}\t{}\tnext {}\truns {}\tlast {}",
        schedule["id"].as_str().unwrap_or("?"),
        schedule["graph"].as_str().unwrap_or("?"),
        schedule["version"],
        when,
        schedule["next_at"].as_str().unwrap_or("none"),
        schedule["runs_started"],
        schedule["last_run"].as_str().unwrap_or("none"),
    )
}

pub(crate) async fn schedule_command(
    runs: &Runs,
    command: ScheduleCommand,
) -> Result<u8, ServiceError> {
    match command {
        ScheduleCommand::Add { id, blueprint, graph, cron, at, input, missed, grace, json } => {
            let schedule = schedule_of(id, (cron, at), &missed, grace)?;
            let added = match (blueprint, graph) {
                (_, Some(name)) => {
                    let input = match input.trim() {
                        "" => json!({}),
                        text => json_arg("--input", text)?,
                    };
                    runs.add_graph_schedule(&name, input, schedule).await?
                }
                (Some(path), None) => {
                    if tollgate_server::is_pack(&path) {
                        return Err(ServiceError::invalid(
                            "a pack cannot be scheduled: workers may not hold the verified pack; schedule its blueprint",
                        ));
                    }
                    let blueprint = Blueprint::load(&path)?;
                    runs.add_blueprint_schedule(&blueprint, user_message(&input)?, schedule).await?
                }
                (None, None) => return Err(ServiceError::invalid("give a --blueprint or --graph")),
            };
            let added = schedule_json(&added);
            if json {
                print_json(&added);
            } else {
                say!("added {}", line(&added));
            }
            Ok(code::OK)
        }
        ScheduleCommand::List { json } => {
            let listed: Vec<Value> =
                runs.schedules(0, MAX_SCHEDULES_LISTED).await?.iter().map(schedule_json).collect();
            if json {
                print_json(&json!({"schedules": listed}));
            } else if listed.is_empty() {
                say!("no schedules");
            } else {
                for schedule in &listed {
                    say!("{}", line(schedule));
                }
            }
            Ok(code::OK)
        }
        ScheduleCommand::Show { id, json } => {
            let schedule = schedule_json(&runs.schedule(&id).await?);
            if json {
                print_json(&schedule);
            } else {
                say!("{}", line(&schedule));
                say!(
                    "missed ticks: {} (grace {} ms), {} skipped; input {}",
                    schedule["missed"].as_str().unwrap_or("?"),
                    schedule["grace_ms"],
                    schedule["ticks_skipped"],
                    schedule["input"]
                );
            }
            Ok(code::OK)
        }
        ScheduleCommand::Delete { id } => {
            runs.delete_schedule(&id).await?;
            say!("deleted schedule {id}");
            Ok(code::OK)
        }
    }
}

/// The schedule `schedule add` asks for: its timing (`--cron` or `--at`),
/// what a missed tick does, and its grace.
fn schedule_of(
    id: String,
    (cron, at): (Option<String>, Option<String>),
    missed: &str,
    grace: f64,
) -> Result<Schedule, ServiceError> {
    let mut schedule = match (cron, at) {
        (Some(cron), _) => Schedule::cron(id, &cron).map_err(|error| {
            ServiceError::invalid(format!("--cron: {error}")).with_source(error)
        })?,
        (None, Some(at)) => {
            let at_ms = parse_rfc3339(&at).ok_or_else(|| {
                ServiceError::invalid(format!(
                    "--at takes an RFC 3339 time (2026-12-24T09:00:00Z), not `{at}`"
                ))
            })?;
            Schedule::at(id, at_ms)
        }
        (None, None) => return Err(ServiceError::invalid("give --cron or --at")),
    };
    let missed: MissedTicks = missed
        .parse()
        .map_err(|error: InvalidMissedTicks| ServiceError::invalid(format!("--missed: {error}")))?;
    let grace = std::time::Duration::try_from_secs_f64(grace)
        .map_err(|_| ServiceError::invalid("--grace takes seconds, 0 or more"))?;
    schedule = schedule.missed(missed).grace(grace);
    Ok(schedule)
}
