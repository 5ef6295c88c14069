//! Schedules (`ScheduleStore::create_schedule` and the rest): the `schedules`
//! table. A firing moves the next tick with a compare-and-set and creates
//! its run in the same transaction.

use async_trait::async_trait;
use std::sync::Arc;

use rusqlite::{params, OptionalExtension, Row};

use super::fault::Abort;
use super::rows::NewRunRow;
use super::writers::Touches;
use super::SqliteStore;
use crate::error::StoreError;
use crate::schedule::{ScheduleFire, ScheduleRecord, ScheduleRow};
use crate::store::ScheduleStore;

const COLUMNS: &str = "id, graph, graph_version, spec, input, snapshot, frontier, attachment, \
     created_at_ms, next_at_ms, last_run, last_fired_at_ms, runs_started, ticks_skipped";

fn schedule_from_row(row: &Row<'_>) -> rusqlite::Result<ScheduleRow> {
    Ok(ScheduleRow {
        id: row.get(0)?,
        graph: row.get(1)?,
        version: row.get(2)?,
        spec: row.get(3)?,
        input: row.get(4)?,
        snapshot: row.get(5)?,
        frontier: row.get(6)?,
        attachment: row.get(7)?,
        created_at_ms: row.get(8)?,
        next_at_ms: row.get(9)?,
        last_run: row.get(10)?,
        last_fired_at_ms: row.get(11)?,
        runs_started: row.get(12)?,
        ticks_skipped: row.get(13)?,
    })
}

fn decoded(rows: Vec<ScheduleRow>) -> Result<Vec<ScheduleRecord>, Abort> {
    rows.into_iter().map(|row| row.decode().map_err(Abort::Refused)).collect()
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl ScheduleStore for SqliteStore {
    async fn create_schedule(&self, schedule: ScheduleRecord) -> Result<(), StoreError> {
        let row = ScheduleRow::encode(&schedule)?;
        self.write(Touches::NoRun, move |tx| {
            let inserted = tx
                .prepare_cached(&format!(
                    "INSERT INTO schedules ({COLUMNS}) VALUES \
                     (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) \
                     ON CONFLICT (id) DO NOTHING"
                ))?
                .execute(params![
                    row.id,
                    row.graph,
                    row.version,
                    row.spec,
                    row.input,
                    row.snapshot,
                    row.frontier,
                    row.attachment,
                    row.created_at_ms,
                    row.next_at_ms,
                    row.last_run,
                    row.last_fired_at_ms,
                    row.runs_started,
                    row.ticks_skipped
                ])?;
            match inserted {
                1 => Ok(()),
                _ => Err(StoreError::ScheduleExists { schedule: row.id.clone() }.into()),
            }
        })
        .await
    }

    async fn schedule(&self, id: &str) -> Result<Option<ScheduleRecord>, StoreError> {
        self.read(|tx| {
            let found = tx
                .prepare_cached(&format!("SELECT {COLUMNS} FROM schedules WHERE id = ?1"))?
                .query_row([id], schedule_from_row)
                .optional()?;
            Ok(decoded(found.into_iter().collect())?.pop())
        })
        .await
    }

    async fn list_schedules(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.read(|tx| {
            let rows = tx
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM schedules ORDER BY id LIMIT ?1 OFFSET ?2"
                ))?
                .query_map([clamp(limit), clamp(offset)], schedule_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            decoded(rows)
        })
        .await
    }

    async fn due_schedules(
        &self,
        now_ms: i64,
        limit: u64,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.read(|tx| {
            let rows = tx
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM schedules WHERE next_at_ms <= ?1 \
                     ORDER BY next_at_ms, id LIMIT ?2"
                ))?
                .query_map([now_ms, clamp(limit)], schedule_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            decoded(rows)
        })
        .await
    }

    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.write(Touches::NoRun, move |tx| {
            Ok(tx.prepare_cached("DELETE FROM schedules WHERE id = ?1")?.execute([&id])? == 1)
        })
        .await
    }

    async fn fire_schedule(&self, fire: ScheduleFire) -> Result<(), StoreError> {
        let run = fire.run.clone().map(NewRunRow::of).transpose()?;
        let touches = match &fire.run {
            Some(run) => Touches::Run(run.id),
            None => Touches::NoRun,
        };
        let writers = Arc::clone(&self.writers);
        self.write(touches, move |tx| {
            let found: Option<Option<i64>> = tx
                .prepare_cached("SELECT next_at_ms FROM schedules WHERE id = ?1")?
                .query_row([&fire.schedule], |row| row.get(0))
                .optional()?;
            let Some(next) = found else {
                return Err(StoreError::ScheduleNotFound { schedule: fire.schedule.clone() }.into());
            };
            if next != Some(fire.expected_next_ms) {
                return Err(StoreError::ScheduleMoved {
                    schedule: fire.schedule.clone(),
                    expected: fire.expected_next_ms,
                    found: next,
                }
                .into());
            }
            let started = match &run {
                Some(run) => {
                    run.insert(tx, &writers)?;
                    Some(run.id())
                }
                None => None,
            };
            tx.prepare_cached(
                "UPDATE schedules SET next_at_ms = ?2, last_fired_at_ms = ?3, \
                 ticks_skipped = ticks_skipped + ?4, \
                 last_run = coalesce(?5, last_run), \
                 runs_started = runs_started + (?5 IS NOT NULL) WHERE id = ?1",
            )?
            .execute(params![
                fire.schedule,
                fire.next_at_ms,
                fire.at_ms,
                clamp(fire.skipped),
                started
            ])?;
            Ok(())
        })
        .await
    }
}
