//! Schedules (`ScheduleStore::create_schedule` and the rest): the `schedules`
//! table. A firing moves the next tick (the row locked, compared) and
//! creates its run in one transaction.

use async_trait::async_trait;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use tollgate_checkpoint::{
    __ScheduleRow as ScheduleRow, RunStatus, ScheduleFire, ScheduleRecord, ScheduleStore,
    StoreError,
};

use crate::announce::{announce, watched};
use crate::conn::{client_error, Refusal};
use crate::rows::column;
use crate::rows::{CreateArgs, CREATE_RUN};
use crate::sql::Sql;
use crate::store::PostgresStore;

const COLUMNS: &str = "id, graph, graph_version, spec, input, snapshot, frontier, attachment, \
     created_at_ms, next_at_ms, last_run, last_fired_at_ms, runs_started, ticks_skipped";

fn schedule_from_row(row: &Row) -> Result<ScheduleRecord, StoreError> {
    ScheduleRow {
        id: column(row, 0)?,
        graph: column(row, 1)?,
        version: column(row, 2)?,
        spec: column(row, 3)?,
        input: column(row, 4)?,
        snapshot: column(row, 5)?,
        frontier: column(row, 6)?,
        attachment: column(row, 7)?,
        created_at_ms: column(row, 8)?,
        next_at_ms: column(row, 9)?,
        last_run: column(row, 10)?,
        last_fired_at_ms: column(row, 11)?,
        runs_started: column(row, 12)?,
        ticks_skipped: column(row, 13)?,
    }
    .decode()
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl ScheduleStore for PostgresStore {
    async fn create_schedule(&self, schedule: ScheduleRecord) -> Result<(), StoreError> {
        let row = ScheduleRow::encode(&schedule)?;
        let (client, statement) = self
            .prepared(&format!(
                "INSERT INTO schedules ({COLUMNS}) VALUES \
                 ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
                 ON CONFLICT (id) DO NOTHING"
            ))
            .await?;
        let params: [&(dyn ToSql + Sync); 14] = [
            &row.id,
            &row.graph,
            &row.version,
            &row.spec,
            &row.input,
            &row.snapshot,
            &row.frontier,
            &row.attachment,
            &row.created_at_ms,
            &row.next_at_ms,
            &row.last_run,
            &row.last_fired_at_ms,
            &row.runs_started,
            &row.ticks_skipped,
        ];
        match client.exec(&statement, &params).await.map_err(client_error)? {
            1 => Ok(()),
            _ => Err(StoreError::ScheduleExists { schedule: row.id }),
        }
    }

    async fn schedule(&self, id: &str) -> Result<Option<ScheduleRecord>, StoreError> {
        let (client, statement) =
            self.prepared(&format!("SELECT {COLUMNS} FROM schedules WHERE id = $1")).await?;
        let row = client.row_opt(&statement, &[&id]).await.map_err(client_error)?;
        row.as_ref().map(schedule_from_row).transpose()
    }

    async fn list_schedules(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        let (client, statement) = self
            .prepared(&format!(
                "SELECT {COLUMNS} FROM schedules ORDER BY id COLLATE \"C\" LIMIT $1 OFFSET $2"
            ))
            .await?;
        let rows = client
            .rows(&statement, &[&clamp(limit), &clamp(offset)])
            .await
            .map_err(client_error)?;
        rows.iter().map(schedule_from_row).collect()
    }

    async fn due_schedules(
        &self,
        now_ms: i64,
        limit: u64,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        let (client, statement) = self
            .prepared(&format!(
                "SELECT {COLUMNS} FROM schedules WHERE next_at_ms <= $1 \
                 ORDER BY next_at_ms, id COLLATE \"C\" LIMIT $2"
            ))
            .await?;
        let rows =
            client.rows(&statement, &[&now_ms, &clamp(limit)]).await.map_err(client_error)?;
        rows.iter().map(schedule_from_row).collect()
    }

    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError> {
        let (client, statement) = self.prepared("DELETE FROM schedules WHERE id = $1").await?;
        Ok(client.exec(&statement, &[&id]).await.map_err(client_error)? == 1)
    }

    async fn fire_schedule(&self, fire: ScheduleFire) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(client_error)?;
        let found = tx
            .row_opt_of(
                self.unnamed,
                "SELECT next_at_ms FROM schedules WHERE id = $1 FOR UPDATE",
                &[&fire.schedule],
            )
            .await
            .map_err(client_error)?;
        let Some(found) = found else {
            return Err(StoreError::ScheduleNotFound { schedule: fire.schedule });
        };
        let next: Option<i64> = column(&found, 0)?;
        if next != Some(fire.expected_next_ms) {
            return Err(StoreError::ScheduleMoved {
                schedule: fire.schedule,
                expected: fire.expected_next_ms,
                found: next,
            });
        }
        let mut created = None;
        if let Some(run) = &fire.run {
            let args = CreateArgs::of(run);
            let statement = tx.statement(CREATE_RUN, self.unnamed).await.map_err(client_error)?;
            let row = tx
                .row(&statement, &args.values(run))
                .await
                .map_err(|error| Refusal::new(run.id).map(error))?;
            created = Some((run.id, args, watched(&row, 1)));
        }
        let started = created.as_ref().map(|(run, _, _)| run.to_string());
        tx.exec_of(
            self.unnamed,
            "UPDATE schedules SET next_at_ms = $2, last_fired_at_ms = $3, \
             ticks_skipped = ticks_skipped + $4, last_run = coalesce($5, last_run), \
             runs_started = runs_started + CASE WHEN $5::text IS NULL THEN 0 ELSE 1 END \
             WHERE id = $1",
            &[&fire.schedule, &fire.next_at_ms, &fire.at_ms, &clamp(fire.skipped), &started],
        )
        .await
        .map_err(client_error)?;
        tx.commit().await.map_err(client_error)?;
        if let Some((run, args, watched)) = created {
            self.frontiers.committed(run, 0, &args.frontier, false);
            announce(&client, self.unnamed, Some((run, RunStatus::Queued)), &watched).await;
        }
        Ok(())
    }
}
