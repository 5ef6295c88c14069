//! What the run service does with schedules: adding one of a registered
//! graph or of a blueprint, listing, showing and deleting them.

use serde_json::Value;
use tollgate_checkpoint::ScheduleRecord;
use tollgate_engine::Schedule;
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
    ) -> Result<ScheduleRecord, ServiceError> {
        let graph = self.graphs().newest_entry(name).ok_or_else(|| {
            ServiceError::missing(format!(
                "no graph `{name}` is served here (GET /graphs lists them)"
            ))
        })?;
        graph.schedule(&self.executor, input, schedule).await
    }

    /// Adds `schedule`: runs of `blueprint` on `input` (a message, or a
    /// [`UserInput`] with the run's values), each run keeping the
    /// blueprint as a started one does.
    pub async fn add_blueprint_schedule(
        &self,
        blueprint: &Blueprint,
        input: impl Into<UserInput>,
        schedule: Schedule,
    ) -> Result<ScheduleRecord, ServiceError> {
        let agent = blueprint.compile_unstarted(&self.models)?;
        let state = input_state(&input.into());
        let record = self
            .executor
            .add_schedule(agent.graph(), state, schedule, blueprint.run_config())
            .await?;
        Ok(record)
    }

    /// Schedules by id, skipping `offset`, at most `limit` (at most
    /// [`MAX_SCHEDULES_LISTED`]).
    pub async fn schedules(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<Vec<ScheduleRecord>, ServiceError> {
        let limit = limit.min(MAX_SCHEDULES_LISTED);
        Ok(self.store().list_schedules(offset, limit).await?)
    }

    /// One schedule.
    pub async fn schedule(&self, id: &str) -> Result<ScheduleRecord, ServiceError> {
        match self.store().schedule(id).await? {
            Some(record) => Ok(record),
            None => Err(ServiceError::missing(format!("schedule `{id}` not found"))),
        }
    }

    /// Deletes a schedule; the runs it started stay.
    pub async fn delete_schedule(&self, id: &str) -> Result<(), ServiceError> {
        match self.store().delete_schedule(id).await? {
            true => Ok(()),
            false => Err(ServiceError::missing(format!("schedule `{id}` not found"))),
        }
    }
}
