//! The [`RunStore`] operations of [`SqliteStore`] (the other tables'
//! traits are implemented in their files: `threads.rs`, `schedules.rs`,
//! `outbox.rs`, `cache.rs`).

use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use super::fault::Abort;
use super::frontier;
use super::rows::{
    blob_at, check_events, check_writer, corrupt_row, failure_text, insert_events, interrupts_at,
    key, load_owner, load_run, load_writer, run_from_row, NewRunRow, MAX_STEP, SELECT_RUN,
};
use super::writers::{Known, Touches, Writer};
use super::{frame, parts, SqliteStore};

use crate::error::StoreError;
use crate::event::restore_updates;
use crate::frontier::RecentFrontiers;
use crate::ids::{RunId, TaskKey};
use crate::listing::{Cursor, DamagedRun, PageRequest, RunFilter, RunPage, Waiting};
use crate::owner::Owner;
use crate::record::{
    CheckpointInfo, DecisionWrite, EventRecord, HistoryPage, InterruptRecord, NewRun, RunRecord,
    StoredCheckpoint, TaskProgress, TaskUpdate, TaskWrite, Transition,
};
use crate::status::RunStatus;
use crate::store::RunStore;

/// The task number of task 0's progress record in `pending_writes` (task
/// i's is this plus i; pending writes have i itself).
const PROGRESS_BASE: i64 = i64::MIN;

#[async_trait]
impl RunStore for SqliteStore {
    async fn create_run(&self, run: NewRun) -> Result<u64, StoreError> {
        let row = NewRunRow::of(run)?;
        let writers = Arc::clone(&self.writers);
        self.write(Touches::Run(row.run()), move |tx| row.insert(tx, &writers)).await
    }

    async fn commit(&self, transition: Transition) -> Result<(), StoreError> {
        self.commit_transition(transition).await
    }

    async fn put_task_writes(&self, write: TaskWrite) -> Result<(), StoreError> {
        let run = write.run;
        let rows: Vec<(TaskKey, Vec<u8>)> =
            write.updates.into_iter().map(|u| (u.task, u.update.to_bytes())).collect();
        let epoch = write.epoch;
        self.write(Touches::Run(run), move |tx| {
            let record = load_writer(tx, run)?;
            let num = record.num;
            check_writer(run, record.status, record.epoch, epoch)?;
            if let Some((task, _)) = rows.iter().find(|(task, _)| task.step != record.step + 1) {
                let (current, found) = (record.step, task.step);
                return Err(StoreError::StepOutOfOrder { run, current, found }.into());
            }
            let mut insert = tx.prepare_cached(
                "INSERT OR IGNORE INTO pending_writes (num, step, task, node, payload) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for (task, payload) in &rows {
                insert.execute(params![num, task.step as i64, task.index, task.node, payload])?;
            }
            Ok(())
        })
        .await
    }

    async fn put_task_progress(&self, write: TaskProgress) -> Result<(), StoreError> {
        let run = write.run;
        let task = write.progress.task.clone();
        let payload = write.progress.update.to_bytes();
        let events = EventRecord::join_compact(run, &write.events);
        let writers = Arc::clone(&self.writers);
        self.write(Touches::NoRun, move |tx| {
            // What the last write here left, unless something else may
            // have changed it since (`writers.rs`); staged again below
            // with its new last event, and pending writes.
            let (record, recent) = match writers.get(tx, run)? {
                Some(Known { writer, recent, .. }) => (writer, recent),
                None => (load_writer(tx, run)?, RecentFrontiers::default()),
            };
            let num = record.num;
            check_writer(run, record.status, record.epoch, write.epoch)?;
            if task.step != record.step + 1 {
                let (current, found) = (record.step, task.step);
                return Err(StoreError::StepOutOfOrder { run, current, found }.into());
            }
            check_events(run, record.last_seq, &write.events)?;
            // Progress shares the pending writes' table, under negative
            // task numbers (task i is `i64::MIN + i`: a step's tasks come
            // in order and are appended, schema 19), so the step's commit
            // and the run's deletion drop it with them.
            tx.prepare_cached(
                "INSERT INTO pending_writes (num, step, task, node, payload) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (num, step, task) \
                 DO UPDATE SET node = excluded.node, payload = excluded.payload",
            )?
            .execute(params![
                num,
                task.step as i64,
                PROGRESS_BASE + i64::from(task.index),
                task.node,
                payload
            ])?;
            let count = write.events.len() as i64;
            if count > 0 {
                let first_seq = record.last_seq as i64 + 1;
                // The run's row is left alone (one page less per write):
                // its last event is read as the newest events row's.
                insert_events(tx, num, first_seq, count, &events)?;
            }
            let writer = Writer { last_seq: record.last_seq + count as u64, ..record };
            writers.stage(run, Known { writer, settled: false, recent });
            Ok(())
        })
        .await
    }

    async fn claim(
        &self,
        run: RunId,
        expected_epoch: u64,
        owner: Owner,
        lease_until_ms: i64,
    ) -> Result<u64, StoreError> {
        let owner = owner.to_text();
        let id = run.to_string();
        self.write(Touches::Run(run), move |tx| {
            let (status, epoch, _) = load_owner(tx, run)?;
            check_writer(run, status, epoch, expected_epoch)?;
            tx.prepare_cached(
                "UPDATE runs SET epoch = epoch + 1, status = 'running', owner = ?2, \
                 lease_until_ms = ?3, failure = NULL, \
                 lease_losses = lease_losses + (status = 'running') WHERE id = ?1",
            )?
            .execute(params![id, owner, lease_until_ms])?;
            Ok(epoch + 1)
        })
        .await
    }

    async fn renew(&self, run: RunId, epoch: u64, lease_until_ms: i64) -> Result<(), StoreError> {
        let id = run.to_string();
        self.write(Touches::Run(run), move |tx| {
            let (status, current, _) = load_owner(tx, run)?;
            check_writer(run, status, current, epoch)?;
            tx.prepare_cached(
                "UPDATE runs SET lease_until_ms = ?2 WHERE id = ?1 AND status = 'running'",
            )?
            .execute(params![id, lease_until_ms])?;
            Ok(())
        })
        .await
    }

    async fn run(&self, run: RunId) -> Result<RunRecord, StoreError> {
        self.read(|tx| load_run(tx, run).map(|(record, _)| record)).await
    }

    async fn checkpoint(
        &self,
        run: RunId,
        at: Option<u64>,
    ) -> Result<StoredCheckpoint, StoreError> {
        self.read(|tx| {
            let (mut record, num) = load_run(tx, run)?;
            let current = record.step;
            let step = at.unwrap_or(current);
            if step > current {
                return Err(StoreError::CheckpointNotFound { run, step }.into());
            }
            let (snapshot_key, snapshot): (i64, Vec<u8>) = tx
                .prepare_cached(
                    "SELECT id, payload FROM snapshots WHERE id BETWEEN ?1 AND ?2 \
                     ORDER BY id DESC LIMIT 1",
                )?
                .query_row(params![key(num, 0), key(num, step)], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })?;
            let snapshot_step = (snapshot_key & 0xffff_ffff) as u64;
            let snapshot = blob_at(run, snapshot_step, &snapshot)?;
            let mut deltas: Vec<(u64, Vec<TaskUpdate>)> = Vec::new();
            let mut stmt = tx.prepare_cached(
                "SELECT step, updates, id, tasks FROM steps \
                 WHERE num = ?1 AND step BETWEEN ?2 AND ?3 ORDER BY step",
            )?;
            let mut rows = stmt.query(params![num, snapshot_step as i64 + 1, step as i64])?;
            while let Some(row) = rows.next()? {
                let step = row.get::<_, i64>(0)? as u64;
                let row_of = (row.get(2)?, row.get(3)?);
                let framed = parts::load(tx, run, step, row_of, row.get(1)?)?;
                deltas.push((step, frame::decode(run, step, &framed)?));
            }
            let frontier = frontier::read(tx, run, num, step)?;
            let mut pending = Vec::new();
            let mut progress = Vec::new();
            let mut interrupts = Vec::new();
            if step == current {
                let next = step + 1;
                let mut stmt = tx.prepare_cached(
                    "SELECT task, node, payload FROM pending_writes WHERE num = ?1 AND step = ?2 \
                     ORDER BY task",
                )?;
                let mut rows = stmt.query(params![num, next as i64])?;
                while let Some(row) = rows.next()? {
                    let task: i64 = row.get(0)?;
                    let index = if task < 0 { task.wrapping_sub(PROGRESS_BASE) } else { task };
                    let index = u32::try_from(index)
                        .map_err(|_| corrupt_row(format!("run {run}: task number {task}")))?;
                    let update = TaskUpdate {
                        task: TaskKey { step: next, index, node: row.get(1)? },
                        update: blob_at(run, next, &row.get::<_, Vec<u8>>(2)?)?,
                    };
                    match task < 0 {
                        true => progress.push(update),
                        false => pending.push(update),
                    }
                }
                progress.sort_by_key(|update| update.task.index);
                interrupts = interrupts_at(tx, run, num, next)?;
            }
            record.step = step;
            Ok(StoredCheckpoint {
                run: record,
                snapshot_step,
                snapshot,
                deltas,
                frontier,
                pending,
                progress,
                interrupts,
            })
        })
        .await
    }

    async fn interrupts(&self, run: RunId) -> Result<Vec<InterruptRecord>, StoreError> {
        self.read(|tx| {
            let (record, num) = load_run(tx, run)?;
            interrupts_at(tx, run, num, record.step + 1)
        })
        .await
    }

    async fn decide(&self, write: DecisionWrite) -> Result<u64, StoreError> {
        let run = write.run;
        let failure = failure_text(write.failure.as_ref())?;
        let events = EventRecord::join_compact(run, &write.events);
        let id = run.to_string();
        let writers = Arc::clone(&self.writers);
        self.write(Touches::Run(run), move |tx| {
            // The writer's part of the run is all a decision checks.
            let record = load_writer(tx, run)?;
            let num = record.num;
            if record.epoch != write.expected_epoch {
                let (writer, current) = (write.expected_epoch, record.epoch);
                return Err(StoreError::Fenced { run, writer, current }.into());
            }
            if record.status != RunStatus::AwaitingHitl {
                return Err(StoreError::NotAwaitingDecision { run, status: record.status }.into());
            }
            check_answers(tx, &write, num, record.step + 1)?;
            check_events(run, record.last_seq, &write.events)?;
            for answer in &write.answers {
                tx.prepare_cached(
                    "UPDATE interrupts SET decision = ?3 WHERE num = ?1 AND id = ?2",
                )?
                .execute(params![
                    num,
                    answer.interrupt,
                    answer.decision.to_string()
                ])?;
            }
            let first_seq = record.last_seq as i64 + 1;
            let count = write.events.len() as i64;
            insert_events(tx, num, first_seq, count, &events)?;
            let (status, owner, lease) = match (&write.status, &write.claim) {
                (RunStatus::Queued, Some((owner, lease))) => {
                    (RunStatus::Running, Some(owner.to_text()), Some(*lease))
                }
                (status, _) => (*status, None, None),
            };
            tx.prepare_cached(
                "UPDATE runs SET epoch = epoch + 1, status = ?2, step = ?3, updated_at_ms = ?4, \
                 last_seq = ?5, owner = ?6, lease_until_ms = ?7, failure = ?8 WHERE id = ?1",
            )?
            .execute(params![
                id,
                status.as_str(),
                record.step as i64,
                write.at_ms,
                first_seq + count - 1,
                owner,
                lease,
                failure
            ])?;
            // What the run's next commit checks: the paused step's pending
            // writes are still there (not settled).
            let writer = Writer {
                status,
                epoch: record.epoch + 1,
                num,
                step: record.step,
                last_seq: (first_seq + count - 1) as u64,
                lease_until_ms: lease,
            };
            writers
                .stage(run, Known { writer, settled: false, recent: RecentFrontiers::default() });
            Ok(record.epoch + 1)
        })
        .await
    }

    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> Result<RunPage, StoreError> {
        let after = page.cursor.as_ref().map(Cursor::last_run).transpose()?;
        let mut sql = format!("{SELECT_RUN} WHERE 1");
        let mut values: Vec<String> = Vec::new();
        let conditions = filter.equalities().map(|(field, value)| (field, "=", value));
        for (field, operator, value) in
            conditions.chain(after.map(|id| ("id", "<", id.to_string())))
        {
            values.push(value);
            sql.push_str(&format!(" AND r.{field} {operator} ?{}", values.len()));
        }
        if let Some(holder) = &filter.held_by {
            let (condition, held) = holder.sql('?', values.len() + 1);
            values.extend(held);
            // Each candidate's thread read by its key (the runs are read
            // newest first, and the page is full after a few): no list of
            // every thread of the holder, or of every reviewed one, made.
            let mut held =
                format!("EXISTS (SELECT 1 FROM threads t WHERE t.id = r.thread AND {condition})");
            if !filter.reviewed_by.is_empty() {
                let groups = serde_json::to_string(&filter.reviewed_by)
                    .map_err(|error| StoreError::Backend { source: Box::new(error) })?;
                values.push(groups);
                // The run the thread waits on: its latest, waiting.
                let waiting = "t.latest_run = r.id AND t.status = 'interrupted'";
                let reviewed = super::threads::reviewed_sql(waiting, values.len());
                held = format!(
                    "({held} OR (r.status = 'awaiting_hitl' AND EXISTS \
                     (SELECT 1 FROM threads t WHERE t.id = r.thread AND {reviewed})))"
                );
            }
            sql.push_str(&format!(" AND {held}"));
        }
        let limit = page.limit.saturating_add(1).min(i64::MAX as u64);
        sql.push_str(&format!(" ORDER BY r.id DESC LIMIT {limit}"));
        let runs = self
            .read(|tx| {
                let mut stmt = tx.prepare_cached(&sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(values.iter()))?;
                let mut runs = Vec::new();
                while let Some(row) = rows.next()? {
                    let id: String = row.get(0)?;
                    runs.push(match run_from_row(row)? {
                        Ok((record, _)) => Ok(record),
                        // One damaged row does not hide the others.
                        Err(Abort::Refused(error)) => {
                            Err(DamagedRun { id, reason: error.to_string() })
                        }
                        Err(other) => return Err(other),
                    });
                }
                Ok(runs)
            })
            .await?;
        Ok(RunPage::from_rows(runs, page.limit))
    }

    async fn history(
        &self,
        run: RunId,
        before: Option<u64>,
        limit: u64,
    ) -> Result<HistoryPage, StoreError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let before = before.map_or(MAX_STEP + 1, |step| step.min(MAX_STEP + 1));
        let limit = limit.min(i64::MAX as usize) as i64;
        let checkpoints = self
            .read(|tx| {
                let (_, _, num) = load_owner(tx, run)?;
                if before == 0 {
                    return Ok(Vec::new());
                }
                let mut stmt = tx.prepare_cached(
                    "SELECT s.step, s.at_ms, abs(s.tasks), \
                         EXISTS (SELECT 1 FROM snapshots p WHERE p.id = s.num << 32 | s.step) \
                     FROM steps s WHERE s.num = ?1 AND s.step < ?2 \
                     ORDER BY s.step DESC LIMIT ?3",
                )?;
                let rows = stmt.query_map(params![num, before as i64, limit], |row| {
                    Ok(CheckpointInfo {
                        step: row.get::<_, i64>(0)? as u64,
                        at_ms: row.get(1)?,
                        tasks: row.get(2)?,
                        snapshot: row.get(3)?,
                    })
                })?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await?;
        let next_before = match checkpoints.last() {
            Some(last) if last.step > 0 && checkpoints.len() as i64 == limit => Some(last.step),
            _ => None,
        };
        Ok(HistoryPage { checkpoints, next_before })
    }

    async fn claimable(&self, now_ms: i64, limit: u64) -> Result<Vec<RunRecord>, StoreError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let limit = limit.min(i64::MAX as usize) as i64;
        let mut runs = self
            .read(|tx| {
                let mut runs = Vec::new();
                let queued = format!(
                    "{SELECT_RUN} WHERE r.status = 'queued' \
                     AND (r.lease_until_ms IS NULL OR r.lease_until_ms <= ?2) ORDER BY r.id LIMIT ?1"
                );
                let lost = format!(
                    "{SELECT_RUN} WHERE r.status = 'running' \
                     AND (r.lease_until_ms IS NULL OR r.lease_until_ms < ?2) ORDER BY r.id LIMIT ?1"
                );
                let mut stmt = tx.prepare_cached(&queued)?;
                let mut rows = stmt.query(params![limit, now_ms])?;
                while let Some(row) = rows.next()? {
                    runs.push(run_from_row(row)??.0);
                }
                let mut stmt = tx.prepare_cached(&lost)?;
                let mut rows = stmt.query(params![limit, now_ms])?;
                while let Some(row) = rows.next()? {
                    runs.push(run_from_row(row)??.0);
                }
                Ok(runs)
            })
            .await?;
        runs.truncate(limit as usize);
        Ok(runs)
    }

    async fn waiting(&self) -> Result<Waiting, StoreError> {
        self.read(|tx| {
            let waiting = "SELECT count(*), min(updated_at_ms) FROM runs \
                 WHERE status = 'awaiting_hitl'";
            let (runs, oldest_since_ms): (i64, Option<i64>) =
                tx.prepare_cached(waiting)?.query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            Ok(Waiting { runs: runs as u64, oldest_since_ms })
        })
        .await
    }

    async fn attachment(&self, run: RunId) -> Result<Option<String>, StoreError> {
        self.read(|tx| {
            let (_, _, num) = load_owner(tx, run)?;
            Ok(tx
                .prepare_cached("SELECT body FROM attachments WHERE num = ?1")?
                .query_row([num], |row| row.get(0))
                .optional()?)
        })
        .await
    }

    async fn delete_run(&self, run: RunId) -> Result<(), StoreError> {
        let id = run.to_string();
        self.write(Touches::Run(run), move |tx| {
            let (status, _, num) = load_owner(tx, run)?;
            if status == RunStatus::Running {
                return Err(StoreError::RunInFlight { run }.into());
            }
            parts::delete_run(tx, num)?;
            for delete in [
                "DELETE FROM steps WHERE num = ?1",
                "DELETE FROM snapshots WHERE id BETWEEN ?1 << 32 AND (?1 << 32) + 4294967295",
                "DELETE FROM pending_writes WHERE num = ?1",
                "DELETE FROM interrupts WHERE num = ?1",
                "DELETE FROM events WHERE num = ?1",
                "DELETE FROM attachments WHERE num = ?1",
            ] {
                tx.prepare_cached(delete)?.execute([num])?;
            }
            tx.prepare_cached("DELETE FROM runs WHERE id = ?1")?.execute([&id])?;
            Ok(())
        })
        .await
    }

    async fn events(
        &self,
        run: RunId,
        after_seq: u64,
        limit: u64,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let mut events = self
            .read(|tx| {
                let (_, _, num) = load_owner(tx, run)?;
                // Step rows and status-change rows, merged by sequence number.
                // A step row's updates come along for the lines that left
                // their update to it.
                let mut stmt = tx.prepare_cached(
                    "SELECT first_seq, events, step, updates, id, tasks FROM steps \
                   WHERE num = ?1 AND event_count > 0 AND first_seq + event_count - 1 > ?2 \
                 UNION ALL \
                 SELECT first_seq, lines, NULL, NULL, NULL, NULL FROM events \
                   WHERE num = ?1 AND first_seq + count - 1 > ?2 \
                 ORDER BY 1",
                )?;
                let mut rows = stmt.query(params![num, after_seq as i64])?;
                let mut events = Vec::new();
                while let Some(row) = rows.next()? {
                    let first = row.get::<_, i64>(0)? as u64;
                    let lines: String = row.get(1)?;
                    let from = events.len();
                    EventRecord::split_compact(run, first, &lines, after_seq, &mut events);
                    if events[from..].iter().any(|e| e.update_left_out().is_some()) {
                        let step = row.get::<_, i64>(2)? as u64;
                        let row_of = (row.get(4)?, row.get(5)?);
                        let updates = parts::load(tx, run, step, row_of, row.get(3)?)?;
                        let updates = frame::decode(run, step, &updates).map_err(Abort::Refused)?;
                        restore_updates(run, step, &mut events[from..], &updates)
                            .map_err(Abort::Refused)?;
                    }
                    if events.len() >= limit {
                        break;
                    }
                }
                Ok(events)
            })
            .await?;
        events.truncate(limit);
        Ok(events)
    }
}

/// Refuses answers to interrupts that the paused step `step` of run
/// number `num` does not have, or that were answered before (or twice
/// in `write`).
fn check_answers(tx: &Connection, write: &DecisionWrite, num: i64, step: u64) -> Result<(), Abort> {
    let run = write.run;
    for (index, answer) in write.answers.iter().enumerate() {
        let answered: Option<Option<String>> = tx
            .prepare_cached(
                "SELECT decision FROM interrupts WHERE num = ?1 AND id = ?2 AND step = ?3",
            )?
            .query_row(params![num, answer.interrupt, step as i64], |row| row.get(0))
            .optional()?;
        let interrupt = answer.interrupt.clone();
        let twice = write.answers[..index].iter().any(|a| a.interrupt == interrupt);
        match answered {
            None => return Err(StoreError::InterruptNotFound { run, interrupt }.into()),
            Some(Some(_)) => return Err(StoreError::InterruptAnswered { run, interrupt }.into()),
            Some(None) if twice => {
                return Err(StoreError::InterruptAnswered { run, interrupt }.into())
            }
            Some(None) => {}
        }
    }
    Ok(())
}
