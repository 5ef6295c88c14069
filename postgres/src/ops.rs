//! The [`RunStore`] operations of [`PostgresStore`] (the other tables'
//! traits are implemented in their files: `threads.rs`, `schedules.rs`,
//! `outbox.rs`, `cache.rs`).

use async_trait::async_trait;
use tokio_postgres::types::ToSql;
use tollgate_checkpoint::{
    restore_updates, CheckpointInfo, Cursor, DamagedRun, DecisionWrite, EventRecord, HistoryPage,
    InterruptRecord, NewRun, Owner, PageRequest, RunFilter, RunId, RunPage, RunRecord, RunStatus,
    RunStore, StoreError, StoredCheckpoint, TaskKey, TaskProgress, TaskUpdate, TaskWrite,
    Transition, Waiting,
};

use crate::announce::{announce, announced, watched, watched_sql};
use crate::cache::check_turn;
use crate::checkpoint::read_checkpoint;
use crate::conn::{client_error, Refusal};
use crate::rows::{
    blob_at, column, event_span, interrupt_from_row, json_text, run_from_row, sql_int, CreateArgs,
    Params, CLAIMABLE_LOST, CLAIMABLE_QUEUED, CREATE_RUN, RUN_BY_ID, SELECT_RUN,
};
use crate::sql::Sql;
use crate::store::PostgresStore;

#[async_trait]
impl RunStore for PostgresStore {
    async fn create_run(&self, run: NewRun) -> Result<u64, StoreError> {
        let (first, count) = event_span(run.id, &run.events)?;
        if count > 0 && first != 1 {
            return Err(StoreError::EventGap { run: run.id, expected: 1, found: first as u64 });
        }
        let args = CreateArgs::of(&run);
        let values = args.values(&run);
        let refused = |error| Refusal::new(run.id).map(error);
        let (client, row) = match (run.thread_turn, &run.thread) {
            // A run that continues its thread checks the thread's latest
            // run and is created in one transaction, serialised per thread
            // by an advisory lock: of two starts on one thread, one sees
            // the other.
            (Some(turn), Some(thread)) => {
                let mut client = self.client().await?;
                let tx = client.transaction().await.map_err(client_error)?;
                check_turn(&tx, thread, turn, self.unnamed).await?;
                let statement =
                    tx.statement(CREATE_RUN, self.unnamed).await.map_err(client_error)?;
                let row = tx.row(&statement, &values).await.map_err(refused)?;
                tx.commit().await.map_err(client_error)?;
                (client, row)
            }
            // A queued run is announced in the same round trip.
            _ if run.claim.is_none() => {
                let (client, statement) = self.prepared(CREATE_RUN).await?;
                let write = client.row(&statement, &values);
                announced(&client, self.unnamed, (run.id, RunStatus::Queued), write)
                    .await
                    .map_err(refused)?;
                self.frontiers.committed(run.id, 0, &args.frontier, false);
                return Ok(1);
            }
            _ => {
                let (client, statement) = self.prepared(CREATE_RUN).await?;
                let row = client.row(&statement, &values).await.map_err(refused)?;
                (client, row)
            }
        };
        self.frontiers.committed(run.id, 0, &args.frontier, run.claim.is_some());
        let changed = run.claim.is_none().then_some((run.id, RunStatus::Queued));
        announce(&client, self.unnamed, changed, &watched(&row, 1)).await;
        Ok(1)
    }

    async fn commit(&self, transition: Transition) -> Result<(), StoreError> {
        self.commits.commit(transition).await
    }

    async fn put_task_writes(&self, write: TaskWrite) -> Result<(), StoreError> {
        let run = write.run;
        let steps: Vec<i64> = write.updates.iter().map(|u| sql_int(u.task.step)).collect();
        let tasks: Vec<i32> = write.updates.iter().map(|u| u.task.index as i32).collect();
        let nodes: Vec<&str> = write.updates.iter().map(|u| u.task.node.as_str()).collect();
        let payloads: Vec<Vec<u8>> = write.updates.iter().map(|u| u.update.to_bytes()).collect();
        let (client, statement) =
            self.prepared("SELECT tollgate_put_task_writes($1, $2, $3, $4, $5, $6)").await?;
        let id = run.to_string();
        client
            .exec(&statement, &[&id, &sql_int(write.epoch), &steps, &tasks, &nodes, &payloads])
            .await
            .map(drop)
            .map_err(|error| Refusal { epoch: write.epoch, ..Refusal::new(run) }.map(error))
    }

    async fn put_task_progress(&self, write: TaskProgress) -> Result<(), StoreError> {
        let run = write.run;
        let (first_seq, count) = event_span(run, &write.events)?;
        let task = &write.progress.task;
        let (client, statement) = self
            .prepared(concat!(
                "SELECT tollgate_put_task_progress($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                watched_sql!("= $1")
            ))
            .await?;
        let id = run.to_string();
        let row = client
            .row(
                &statement,
                &[
                    &id,
                    &sql_int(write.epoch),
                    &sql_int(task.step),
                    &(task.index as i32),
                    &task.node,
                    &write.progress.update.to_bytes(),
                    &first_seq,
                    &count,
                    &EventRecord::join_compact(write.run, &write.events),
                ],
            )
            .await
            .map_err(|error| {
                let refusal = Refusal { epoch: write.epoch, step: task.step, ..Refusal::new(run) };
                Refusal { first_seq: first_seq as u64, ..refusal }.map(error)
            })?;
        announce(&client, self.unnamed, None, &watched(&row, 1)).await;
        Ok(())
    }

    async fn claim(
        &self,
        run: RunId,
        expected_epoch: u64,
        owner: Owner,
        lease_until_ms: i64,
    ) -> Result<u64, StoreError> {
        let (client, statement) = self.prepared("SELECT tollgate_claim($1, $2, $3, $4)").await?;
        let id = run.to_string();
        let owner = owner.to_text();
        let params: [&(dyn ToSql + Sync); 4] =
            [&id, &sql_int(expected_epoch), &owner, &lease_until_ms];
        let write = client.row(&statement, &params);
        // Announced also for a takeover of a running run: its old leg,
        // listening, renews at once and learns that it lost the run.
        let row = announced(&client, self.unnamed, (run, RunStatus::Running), write)
            .await
            .map_err(|error| Refusal { epoch: expected_epoch, ..Refusal::new(run) }.map(error))?;
        Ok(column::<i64>(&row, 0)? as u64)
    }

    async fn renew(&self, run: RunId, epoch: u64, lease_until_ms: i64) -> Result<(), StoreError> {
        let (client, statement) = self.prepared("SELECT tollgate_renew($1, $2, $3)").await?;
        let id = run.to_string();
        client
            .exec(&statement, &[&id, &sql_int(epoch), &lease_until_ms])
            .await
            .map(drop)
            .map_err(|error| Refusal { epoch, ..Refusal::new(run) }.map(error))
    }

    async fn run(&self, run: RunId) -> Result<RunRecord, StoreError> {
        let (client, statement) = self.prepared(RUN_BY_ID).await?;
        let row = client
            .row_opt(&statement, &[&run.to_string()])
            .await
            .map_err(client_error)?
            .ok_or(StoreError::RunNotFound { run })?;
        run_from_row(&row)
    }

    async fn checkpoint(
        &self,
        run: RunId,
        at: Option<u64>,
    ) -> Result<StoredCheckpoint, StoreError> {
        read_checkpoint(self, run, at).await
    }

    async fn interrupts(&self, run: RunId) -> Result<Vec<InterruptRecord>, StoreError> {
        let (client, statement) = self
            .prepared(
                "SELECT i.id, i.step, i.task, i.ordinal, i.node, i.kind, i.payload, i.decisions, \
                        i.schema, i.rejection_routed, i.decision, i.raised_at_ms, r.id \
                 FROM runs r LEFT JOIN interrupts i ON i.run = r.id AND i.step = r.step + 1 \
                 WHERE r.id = $1 ORDER BY i.task, i.ordinal",
            )
            .await?;
        let rows = client.rows(&statement, &[&run.to_string()]).await.map_err(client_error)?;
        if rows.is_empty() {
            return Err(StoreError::RunNotFound { run });
        }
        let mut interrupts = Vec::new();
        for row in &rows {
            if column::<Option<String>>(row, 0)?.is_some() {
                interrupts.push(interrupt_from_row(run, row)?);
            }
        }
        Ok(interrupts)
    }

    async fn decide(&self, write: DecisionWrite) -> Result<u64, StoreError> {
        let run = write.run;
        let (first_seq, count) = event_span(run, &write.events)?;
        let (status, owner, lease) = match (&write.status, &write.claim) {
            (RunStatus::Queued, Some((owner, lease))) => {
                (RunStatus::Running, Some(owner.to_text()), Some(*lease))
            }
            (status, _) => (*status, None, None),
        };
        let (client, statement) = self
            .prepared(concat!(
                "SELECT tollgate_decide($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                watched_sql!("= $1")
            ))
            .await?;
        let failure = write.failure.as_ref().map(json_text).transpose()?;
        let id = run.to_string();
        let interrupts: Vec<&str> = write.answers.iter().map(|a| a.interrupt.as_str()).collect();
        let decisions: Vec<String> = write.answers.iter().map(|a| a.decision.to_string()).collect();
        let lines = EventRecord::join_compact(write.run, &write.events);
        let params: [&(dyn ToSql + Sync); 12] = [
            &id,
            &sql_int(write.expected_epoch),
            &interrupts,
            &decisions,
            &status.as_str(),
            &first_seq,
            &count,
            &lines,
            &write.at_ms,
            &owner,
            &lease,
            &failure,
        ];
        let row = client.row(&statement, &params);
        // A new status is announced in the same round trip; a decision
        // that leaves the run waiting (others remain), to its watchers.
        let changed = status != RunStatus::AwaitingHitl;
        let row = if changed {
            announced(&client, self.unnamed, (run, status), row).await
        } else {
            row.await
        };
        let row = row.map_err(|error| {
            Refusal {
                epoch: write.expected_epoch,
                first_seq: first_seq as u64,
                interrupt: write.answers.first().map(|a| a.interrupt.clone()).unwrap_or_default(),
                ..Refusal::new(run)
            }
            .map(error)
        })?;
        if !changed {
            announce(&client, self.unnamed, None, &watched(&row, 1)).await;
        }
        Ok(column::<i64>(&row, 0)? as u64)
    }

    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> Result<RunPage, StoreError> {
        let after = page.cursor.as_ref().map(Cursor::last_run).transpose()?;
        // The text is built from fixed fragments only; values are parameters.
        let mut sql = format!("{SELECT_RUN} WHERE true");
        let mut values: Vec<String> = Vec::new();
        let conditions = filter.equalities().map(|(field, value)| (field, "=", value));
        for (field, operator, value) in
            conditions.chain(after.map(|id| ("id", "<", id.to_string())))
        {
            values.push(value);
            sql.push_str(&format!(" AND r.{field} {operator} ${}", values.len()));
        }
        if let Some(holder) = &filter.held_by {
            let (condition, held) = holder.sql('$', values.len() + 1);
            values.extend(held);
            // Each candidate's thread read by its key (the runs are read
            // newest first, and the page is full after a few): no list of
            // every thread of the holder, or of every reviewed one, made.
            let mut held =
                format!("EXISTS (SELECT 1 FROM threads t WHERE t.id = r.thread AND {condition})");
            if !filter.reviewed_by.is_empty() {
                // Text parameters only: the groups as a text array's literal.
                values.push(array_literal(&filter.reviewed_by));
                held = format!(
                    "({held} OR (r.status = 'awaiting_hitl' AND EXISTS (SELECT 1 FROM threads t \
                     WHERE t.id = r.thread AND t.latest_run = r.id AND t.status = 'interrupted' \
                     AND t.reviewers && ${}::text::text[])))",
                    values.len()
                );
            }
            sql.push_str(&format!(" AND {held}"));
        }
        sql.push_str(&format!(" ORDER BY r.id DESC LIMIT ${}", values.len() + 1));
        let limit = sql_int(page.limit.saturating_add(1));
        let (client, statement) = self.prepared(&sql).await?;
        let mut params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|value| value as _).collect();
        params.push(&limit);
        let rows = client.rows(&statement, &params).await.map_err(client_error)?;
        let runs = rows
            .iter()
            .map(|row| {
                // One damaged row does not hide the others.
                run_from_row(row).map_err(|error| DamagedRun {
                    id: row.try_get::<_, String>(0).unwrap_or_default(),
                    reason: error.to_string(),
                })
            })
            .collect();
        Ok(RunPage::from_rows(runs, page.limit))
    }

    async fn history(
        &self,
        run: RunId,
        before: Option<u64>,
        limit: u64,
    ) -> Result<HistoryPage, StoreError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let before = before.map_or(i64::MAX, sql_int);
        let limit = sql_int(limit as u64);
        let client = self.client().await?;
        let (exists, statement) = tokio::try_join!(
            client.statement("SELECT 1 FROM runs WHERE id = $1", self.unnamed),
            client.statement(
                "SELECT s.step, s.at_ms, cardinality(s.tasks), \
                        EXISTS (SELECT 1 FROM snapshots p WHERE p.run = s.run AND p.step = s.step) \
                 FROM steps s WHERE s.run = $1 AND s.step < $2 ORDER BY s.step DESC LIMIT $3",
                self.unnamed
            ),
        )
        .map_err(client_error)?;
        let id = run.to_string();
        let (by_id, page): (Params<'_, 1>, Params<'_, 3>) = ([&id], [&id, &before, &limit]);
        let (exists, rows) =
            tokio::try_join!(client.row_opt(&exists, &by_id), client.rows(&statement, &page),)
                .map_err(client_error)?;
        if exists.is_none() {
            return Err(StoreError::RunNotFound { run });
        }
        let checkpoints = rows
            .iter()
            .map(|row| {
                Ok(CheckpointInfo {
                    step: column::<i64>(row, 0)? as u64,
                    at_ms: column(row, 1)?,
                    tasks: column::<i32>(row, 2)? as u32,
                    snapshot: column(row, 3)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let next_before = match checkpoints.last() {
            Some(last) if last.step > 0 && checkpoints.len() as i64 == limit => Some(last.step),
            _ => None,
        };
        Ok(HistoryPage { checkpoints, next_before })
    }

    async fn claimable(&self, now_ms: i64, limit: u64) -> Result<Vec<RunRecord>, StoreError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let limit = sql_int(limit as u64);
        let client = self.client().await?;
        let (queued, lost) = tokio::try_join!(
            client.statement(CLAIMABLE_QUEUED, self.unnamed),
            client.statement(CLAIMABLE_LOST, self.unnamed),
        )
        .map_err(client_error)?;
        let both: Params<'_, 2> = [&limit, &now_ms];
        let (queued, lost) =
            tokio::try_join!(client.rows(&queued, &both), client.rows(&lost, &both))
                .map_err(client_error)?;
        let mut runs =
            queued.iter().chain(&lost).map(run_from_row).collect::<Result<Vec<_>, _>>()?;
        runs.truncate(limit as usize);
        Ok(runs)
    }

    async fn delete_run(&self, run: RunId) -> Result<(), StoreError> {
        self.remove_run(run).await
    }

    async fn waiting(&self) -> Result<Waiting, StoreError> {
        let (client, statement) = self
            .prepared(
                "SELECT count(*), min(updated_at_ms) FROM runs WHERE status = 'awaiting_hitl'",
            )
            .await?;
        let row = client.row(&statement, &[]).await.map_err(client_error)?;
        Ok(Waiting { runs: column::<i64>(&row, 0)? as u64, oldest_since_ms: column(&row, 1)? })
    }

    async fn attachment(&self, run: RunId) -> Result<Option<String>, StoreError> {
        let (client, statement) = self
            .prepared(
                "SELECT a.body FROM runs r LEFT JOIN attachments a ON a.run = r.id \
                 WHERE r.id = $1",
            )
            .await?;
        let row = client
            .row_opt(&statement, &[&run.to_string()])
            .await
            .map_err(client_error)?
            .ok_or(StoreError::RunNotFound { run })?;
        column(&row, 0)
    }

    async fn events(
        &self,
        run: RunId,
        after_seq: u64,
        limit: u64,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let after = sql_int(after_seq);
        // Every row holds at least one event, so `limit` rows are enough
        // (step rows with events, and rows of status-only transitions).
        let rows_limit = sql_int(limit as u64);
        let client = self.client().await?;
        let (exists, statement) = tokio::try_join!(
            client.statement("SELECT 1 FROM runs WHERE id = $1", self.unnamed),
            client.statement(
                "(SELECT first_seq, events, step, tasks, updates FROM steps \
                   WHERE run = $1 AND event_count > 0 AND first_seq + event_count - 1 > $2 \
                   ORDER BY step LIMIT $3) \
                 UNION ALL \
                 (SELECT first_seq, lines, NULL::bigint, NULL::integer[], NULL::bytea[] \
                   FROM events \
                   WHERE run = $1 AND first_seq + count - 1 > $2 ORDER BY first_seq LIMIT $3) \
                 ORDER BY 1 LIMIT $3",
                self.unnamed
            ),
        )
        .map_err(client_error)?;
        let id = run.to_string();
        let (by_id, page): (Params<'_, 1>, Params<'_, 3>) = ([&id], [&id, &after, &rows_limit]);
        let (exists, rows) =
            tokio::try_join!(client.row_opt(&exists, &by_id), client.rows(&statement, &page),)
                .map_err(client_error)?;
        if exists.is_none() {
            return Err(StoreError::RunNotFound { run });
        }
        let mut events = Vec::new();
        for row in &rows {
            let first = column::<i64>(row, 0)? as u64;
            let lines: String = column(row, 1)?;
            let from = events.len();
            EventRecord::split_compact(run, first, &lines, after_seq, &mut events);
            if events[from..].iter().any(|e| e.update_left_out().is_some()) {
                // Lines that left their update to their step's record.
                let step = column::<Option<i64>>(row, 2)?.unwrap_or_default() as u64;
                let tasks: Vec<i32> = column::<Option<Vec<i32>>>(row, 3)?.unwrap_or_default();
                let blobs: Vec<&[u8]> = column::<Option<Vec<&[u8]>>>(row, 4)?.unwrap_or_default();
                let updates = tasks
                    .into_iter()
                    .zip(blobs)
                    .map(|(index, bytes)| {
                        Ok(TaskUpdate {
                            task: TaskKey { step, index: index as u32, node: String::new() },
                            update: blob_at(run, step, bytes)?,
                        })
                    })
                    .collect::<Result<Vec<_>, StoreError>>()?;
                restore_updates(run, step, &mut events[from..], &updates)?;
            }
            if events.len() >= limit {
                break;
            }
        }
        events.truncate(limit);
        Ok(events)
    }
}

/// `values` as a Postgres text array's literal (`{"a","b"}`), each element
/// quoted with its `"` and `\` escaped.
fn array_literal(values: &[String]) -> String {
    let quoted: Vec<String> = values
        .iter()
        .map(|value| format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    format!("{{{}}}", quoted.join(","))
}
