//! What the run service does with schedules: adding one of a registered
//! graph or of a blueprint, listing, showing and deleting them, and their
//! JSON.

use serde_json::{json, Value};
use tollgate_checkpoint::{ScheduleRecord, ScheduleTiming};
use tollgate_engine::{format_rfc3339, Schedule};
use tollgate_nodes::Blueprint;

use super::{input_state, Runs, UserInput};
use crate::error::ServiceError;

/// Schedules one listing returns at most.
pub const MAX_SCHEDULES_LISTED: u64 = 500;

impl Runs {
    /// Adds `schedule`: runs of the registered graph `name` (its newest
    /// version) on `input` (JSON of its state's update).
    pub async fn add_graph_schedule(
        &self,
        name: &str,
        input: Value,
        schedule: Schedule,
    ) -> Result<Value, ServiceError> {
        let graph = self.graphs().newest_entry(name).ok_or_else(|| ServiceError::NotFound {
            message: format!("no graph `{name}` is served here (GET /graphs lists them)"),
        })?;
        let record = graph.schedule(&self.executor, input, schedule).await?;
        Ok(schedule_json(&record))
    }

    /// Adds `schedule`: runs of `blueprint` on `input` (a message, or a
    /// [`UserInput`] with the run's values), each run keeping the
    /// blueprint as a started one does.
    pub async fn add_blueprint_schedule(
        &self,
        blueprint: &Blueprint,
        input: impl Into<UserInput>,
        schedule: Schedule,
    ) -> Result<Value, ServiceError> {
        let agent = blueprint.compile_unstarted(&self.models)?;
        let state = input_state(&input.into());
        let record = self
            .executor
            .add_schedule(agent.graph(), state, schedule, blueprint.run_config())
            .await?;
        Ok(schedule_json(&record))
    }

    /// Schedules by id, skipping `offset`, at most `limit` (at most
    /// [`MAX_SCHEDULES_LISTED`]).
    pub async fn schedules(&self, offset: u64, limit: u64) -> Result<Vec<Value>, ServiceError> {
        let limit = limit.min(MAX_SCHEDULES_LISTED);
        let listed = self.store().list_schedules(offset, limit).await?;
        Ok(listed.iter().map(schedule_json).collect())
    }

    /// One schedule.
    pub async fn schedule(&self, id: &str) -> Result<Value, ServiceError> {
        match self.store().schedule(id).await? {
            Some(record) => Ok(schedule_json(&record)),
            None => Err(ServiceError::NotFound { message: format!("schedule `{id}` not found") }),
        }
    }

    /// Deletes a schedule; the runs it started stay.
    pub async fn delete_schedule(&self, id: &str) -> Result<(), ServiceError> {
        match self.store().delete_schedule(id).await? {
            true => Ok(()),
            false => Err(ServiceError::NotFound { message: format!("schedule `{id}` not found") }),
        }
    }
}

/// A schedule as the API and `--json` show it: times as RFC 3339 (and
/// milliseconds), no encoded blobs.
pub fn schedule_json(record: &ScheduleRecord) -> Value {
    let time = |ms: Option<i64>| ms.map(format_rfc3339);
    let (cron, at) = match &record.timing {
        ScheduleTiming::Cron { expression } => (Some(expression.clone()), None),
        ScheduleTiming::At { at_ms } => (None, Some(format_rfc3339(*at_ms))),
        _ => (None, None),
    };
    json!({
        "id": record.id,
        "graph": record.graph.name,
        "version": record.graph.version,
        "cron": cron,
        "at": at,
        "missed": record.missed.as_str(),
        "grace_ms": record.grace_ms,
        "input": record.input,
        "created_at": format_rfc3339(record.created_at_ms),
        "next_at": time(record.next_at_ms),
        "next_at_ms": record.next_at_ms,
        "last_run": record.last_run.map(|run| run.to_string()),
        "last_fired_at": time(record.last_fired_at_ms),
        "runs_started": record.runs_started,
        "ticks_skipped": record.ticks_skipped,
        "metadata": record.metadata,
    })
}
