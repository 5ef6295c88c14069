//! Rows and statements of the Postgres store: the run and interrupt
//! columns, their conversions, the checks done before a write is sent,
//! a new run's arguments (`CREATE_RUN`, shared with schedules), and a
//! run's rows deleted.

use tokio_postgres::types::{FromSql, ToSql};
use tokio_postgres::Row;
use tollgate_checkpoint::{
    frontier_reference, Blob, EventRecord, GraphRef, InterruptRecord, NewRun, Owner, RunFailure,
    RunId, RunRecord, RunStatus, StoreError, TaskKey, TaskUpdate,
};

use crate::announce::watched_sql;

/// A run's columns, with its open interrupts counted. Append a `WHERE`.
macro_rules! select_run {
    () => {
        "SELECT r.id, r.graph, r.graph_version, r.thread, r.status, r.step, r.epoch, r.owner,
                r.lease_until_ms, r.created_at_ms, r.updated_at_ms, r.failure, r.last_seq,
                (SELECT count(*) FROM interrupts i
                  WHERE i.run = r.id AND i.decision IS NULL AND i.step > r.step),
                r.lease_losses, r.trace
         FROM runs r"
    };
}

pub(crate) const SELECT_RUN: &str = select_run!();

/// One run by id.
pub(crate) const RUN_BY_ID: &str = concat!(select_run!(), " WHERE r.id = $1");

/// Queued runs, oldest first.
pub(crate) const CLAIMABLE_QUEUED: &str = concat!(
    select_run!(),
    " WHERE r.status = 'queued' \
      AND (r.lease_until_ms IS NULL OR r.lease_until_ms <= $2) ORDER BY r.id LIMIT $1"
);

/// Running runs whose lease expired, oldest first.
pub(crate) const CLAIMABLE_LOST: &str = concat!(
    select_run!(),
    " WHERE r.status = 'running' AND (r.lease_until_ms IS NULL OR r.lease_until_ms < $2) \
      ORDER BY r.id LIMIT $1"
);

/// Parameters of one statement.
pub(crate) type Params<'a, const N: usize = 2> = [&'a (dyn ToSql + Sync); N];

/// Steps are `bigint` in SQL; the contract's steps are `u64`.
pub(crate) fn sql_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn damaged(what: String) -> StoreError {
    StoreError::Backend { source: what.into() }
}

/// A column of our own schema; a type that does not match is a damaged
/// or foreign table, reported, never a panic.
pub(crate) fn column<'a, T: FromSql<'a>>(row: &'a Row, index: usize) -> Result<T, StoreError> {
    row.try_get(index).map_err(|error| StoreError::Backend { source: Box::new(error) })
}

pub(crate) fn json_text<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::Backend { source: Box::new(error) })
}

pub(crate) fn run_from_row(row: &Row) -> Result<RunRecord, StoreError> {
    let id: String = column(row, 0)?;
    let id: RunId = id.parse().map_err(|_| damaged(format!("bad run id `{id}` in runs")))?;
    let status: String = column(row, 4)?;
    let status: RunStatus =
        status.parse().map_err(|_| damaged(format!("run {id}: bad status `{status}`")))?;
    let failure = column::<Option<String>>(row, 11)?
        .map(|text| serde_json::from_str::<RunFailure>(&text))
        .transpose()
        .map_err(|error| damaged(format!("run {id}: bad failure record: {error}")))?;
    let owner: Option<String> = column(row, 7)?;
    let version: i64 = column(row, 2)?;
    Ok(RunRecord {
        id,
        graph: GraphRef { name: column(row, 1)?, version: version as u32 },
        thread: column(row, 3)?,
        status,
        step: column::<i64>(row, 5)? as u64,
        epoch: column::<i64>(row, 6)? as u64,
        owner: owner.as_deref().and_then(Owner::parse),
        lease_until_ms: column(row, 8)?,
        created_at_ms: column(row, 9)?,
        updated_at_ms: column(row, 10)?,
        failure,
        last_seq: column::<i64>(row, 12)? as u64,
        pending_interrupts: column::<i64>(row, 13)? as u32,
        lease_losses: column::<i32>(row, 14)? as u32,
        trace: column(row, 15)?,
    })
}

pub(crate) fn blob_at(run: RunId, step: u64, bytes: &[u8]) -> Result<Blob, StoreError> {
    Blob::from_bytes(bytes).map_err(|source| StoreError::CorruptCheckpoint { run, step, source })
}

/// The frontier of `run` after `step` from its row: (the stored frontier,
/// the step it refers to if it is a reference, that step's frontier).
/// A reference names a step before that holds its frontier in full.
pub(crate) fn frontier_from_row(run: RunId, step: u64, row: &Row) -> Result<Blob, StoreError> {
    let stored: &[u8] = column(row, 0)?;
    let Some(at) = column::<Option<i64>>(row, 1)? else { return blob_at(run, step, stored) };
    match column::<Option<&[u8]>>(row, 2)? {
        Some(full) if (at as u64) < step && frontier_reference(full).is_none() => {
            blob_at(run, at as u64, full)
        }
        _ => Err(damaged(format!(
            "run {run}: the frontier of step {step} refers to step {at}, which does not hold one"
        ))),
    }
}

/// The first sequence number and count of events that must follow each
/// other without gaps (the store checks the first against the run's last).
pub(crate) fn event_span(run: RunId, events: &[EventRecord]) -> Result<(i64, i32), StoreError> {
    let first = events.first().map_or(0, |event| event.seq);
    for (offset, event) in events.iter().enumerate() {
        let expected = first + offset as u64;
        if event.seq != expected {
            return Err(StoreError::EventGap { run, expected, found: event.seq });
        }
    }
    Ok((sql_int(first), events.len() as i32))
}

/// Interrupts as the JSON array `tollgate_insert_interrupts` reads; JSON
/// values travel as strings so they are stored verbatim.
pub(crate) fn interrupts_json(
    interrupts: &[InterruptRecord],
) -> Result<Option<String>, StoreError> {
    if interrupts.is_empty() {
        return Ok(None);
    }
    let rows: Vec<serde_json::Value> = interrupts
        .iter()
        .map(|interrupt| {
            Ok(serde_json::json!({
                "id": interrupt.id,
                "step": interrupt.step,
                "task": interrupt.task,
                "ordinal": interrupt.ordinal,
                "node": interrupt.node,
                "kind": interrupt.kind,
                "payload": interrupt.payload.to_string(),
                "decisions": json_text(&interrupt.decisions)?,
                "schema": interrupt.schema.as_ref().map(ToString::to_string),
                "rejection_routed": interrupt.rejection_routed,
                "decision": interrupt.decision.as_ref().map(ToString::to_string),
                "raised_at_ms": interrupt.raised_at_ms,
            }))
        })
        .collect::<Result<_, StoreError>>()?;
    json_text(&rows).map(Some)
}

pub(crate) fn interrupt_from_row(run: RunId, row: &Row) -> Result<InterruptRecord, StoreError> {
    let json = |text: String| -> Result<serde_json::Value, StoreError> {
        serde_json::from_str(&text)
            .map_err(|error| damaged(format!("run {run}: bad interrupt JSON: {error}")))
    };
    let decisions = match json(column(row, 7)?)? {
        serde_json::Value::Array(items) => {
            items.into_iter().filter_map(|item| item.as_str().map(str::to_owned)).collect()
        }
        _ => Vec::new(),
    };
    Ok(InterruptRecord {
        id: column(row, 0)?,
        step: column::<i64>(row, 1)? as u64,
        task: column::<i32>(row, 2)? as u32,
        ordinal: {
            let ordinal = column::<i64>(row, 3)?;
            u32::try_from(ordinal)
                .map_err(|_| damaged(format!("interrupt ordinal {ordinal} out of range")))?
        },
        node: column(row, 4)?,
        kind: column(row, 5)?,
        payload: json(column(row, 6)?)?,
        decisions,
        schema: column::<Option<String>>(row, 8)?.map(json).transpose()?,
        rejection_routed: column(row, 9)?,
        decision: column::<Option<String>>(row, 10)?.map(json).transpose()?,
        raised_at_ms: column(row, 11)?,
    })
}

/// Creates a run (`tollgate_create_run`). Its id may be watched already
/// (`watch` takes any id): its creation is then announced too, as the
/// steps trigger did.
pub(crate) const CREATE_RUN: &str = concat!(
    "SELECT tollgate_create_run($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
    watched_sql!("= $1")
);

/// The arguments of [`CREATE_RUN`] that a new run's fields do not hold
/// as they are.
pub(crate) struct CreateArgs {
    id: String,
    events: String,
    owner: Option<String>,
    lease: Option<i64>,
    snapshot: Vec<u8>,
    pub(crate) frontier: Vec<u8>,
    version: i64,
    count: i32,
}

impl CreateArgs {
    pub(crate) fn of(run: &NewRun) -> Self {
        Self {
            id: run.id.to_string(),
            events: EventRecord::join_compact(run.id, &run.events),
            owner: run.claim.as_ref().map(|(owner, _)| owner.to_text()),
            lease: run.claim.as_ref().map(|(_, until)| *until),
            snapshot: run.snapshot.to_bytes(),
            frontier: run.frontier.to_bytes(),
            version: i64::from(run.graph.version),
            count: i32::try_from(run.events.len()).unwrap_or(i32::MAX),
        }
    }

    /// The statement's arguments, in order.
    pub(crate) fn values<'a>(
        &'a self,
        run: &'a NewRun,
    ) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 13] {
        [
            &self.id,
            &run.graph.name,
            &self.version,
            &run.thread,
            &self.owner,
            &self.lease,
            &run.created_at_ms,
            &self.snapshot,
            &self.frontier,
            &self.count,
            &self.events,
            &run.attachment,
            &run.trace,
        ]
    }
}

/// A checkpoint's deltas: each step's updates from its row's arrays.
pub(crate) fn deltas_from_rows(
    run: RunId,
    rows: &[Row],
) -> Result<Vec<(u64, Vec<TaskUpdate>)>, StoreError> {
    rows.iter()
        .map(|row| {
            let step = column::<i64>(row, 0)? as u64;
            let tasks: Vec<i32> = column(row, 1)?;
            let nodes: Vec<String> = column(row, 2)?;
            let blobs: Vec<&[u8]> = column(row, 3)?;
            if tasks.len() != nodes.len() || tasks.len() != blobs.len() {
                return Err(damaged(format!("run {run}: step {step} has ragged updates")));
            }
            let updates = tasks
                .into_iter()
                .zip(nodes)
                .zip(blobs)
                .map(|((index, node), bytes)| {
                    Ok(TaskUpdate {
                        task: TaskKey { step, index: index as u32, node },
                        update: blob_at(run, step, bytes)?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            Ok((step, updates))
        })
        .collect()
}

/// The pending writes of the step after `step`, and its progress records
/// (which share the table under negative task numbers: task i is -1 - i),
/// in task order.
pub(crate) fn pending_from_rows(
    run: RunId,
    step: u64,
    rows: &[Row],
) -> Result<(Vec<TaskUpdate>, Vec<TaskUpdate>), StoreError> {
    let (mut pending, mut progress) = (Vec::new(), Vec::new());
    for row in rows {
        let task = column::<i32>(row, 0)?;
        let update = TaskUpdate {
            task: TaskKey {
                step: step + 1,
                index: if task < 0 { (-1 - task) as u32 } else { task as u32 },
                node: column(row, 1)?,
            },
            update: blob_at(run, step + 1, column(row, 2)?)?,
        };
        match task < 0 {
            true => progress.push(update),
            false => pending.push(update),
        }
    }
    progress.sort_by_key(|update: &TaskUpdate| update.task.index);
    Ok((pending, progress))
}
