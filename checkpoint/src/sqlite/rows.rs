//! Reading runs and interrupts and checking writers: what every operation
//! shares.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::fault::Abort;
use super::writers::{Known, Writer, Writers};
use crate::codec::Blob;
use crate::error::StoreError;
use crate::frontier::RecentFrontiers;
use crate::ids::RunId;
use crate::owner::Owner;
use crate::record::{EventRecord, GraphRef, InterruptRecord, NewRun, RunFailure, RunRecord};
use crate::status::RunStatus;

/// Selects a run with its effective step, update time and last event: the
/// newest of its `runs` row and its newest `steps` row (and, for the last
/// event of a running run, its newest `events` row: a progress write
/// stores events without touching the run's row, and every write that
/// ends `running` writes the row). Append a `WHERE`.
pub(super) const SELECT_RUN: &str = "
    SELECT r.id, r.graph, r.graph_version, r.thread, r.status,
           max(r.step, coalesce(s.step, 0)), r.epoch, r.owner, r.lease_until_ms,
           r.created_at_ms, max(r.updated_at_ms, coalesce(s.at_ms, 0)), r.failure,
           max(r.last_seq, coalesce(s.first_seq + s.event_count - 1, 0), CASE
               WHEN r.status = 'running' THEN coalesce(
                   (SELECT e.first_seq + e.count - 1 FROM events e WHERE e.num = r.num
                    ORDER BY e.first_seq DESC LIMIT 1), 0)
               ELSE 0 END), r.num,
           (SELECT count(*) FROM interrupts i WHERE i.num = r.num AND i.decision IS NULL
               AND i.step > max(r.step, coalesce(s.step, 0))),
           r.lease_losses, r.trace
    FROM runs r
    LEFT JOIN steps s ON s.num = r.num AND s.step = (SELECT max(step) FROM steps WHERE num = r.num)";

/// Rows of a run's snapshots are keyed `run number << 32 | step`.
pub(super) fn key(num: i64, step: u64) -> i64 {
    (num << 32) | (step & 0xffff_ffff) as i64
}

/// Steps per run that the snapshot keys can address.
pub(super) const MAX_STEP: u64 = u32::MAX as u64;

/// A run's failure as the `runs.failure` column holds it (JSON).
pub(super) fn failure_text(failure: Option<&RunFailure>) -> Result<Option<String>, StoreError> {
    failure
        .map(serde_json::to_string)
        .transpose()
        .map_err(|error| StoreError::Backend { source: Box::new(error) })
}

pub(super) fn corrupt_row(what: String) -> Abort {
    Abort::Refused(StoreError::Backend { source: what.into() })
}

/// Maps a `SELECT_RUN` row. The outer result is SQLite's, the inner one says
/// whether the row's values make sense.
pub(super) fn run_from_row(row: &Row<'_>) -> rusqlite::Result<Result<(RunRecord, i64), Abort>> {
    let id: String = row.get(0)?;
    let status: String = row.get(4)?;
    let owner: Option<String> = row.get(7)?;
    let failure: Option<String> = row.get(11)?;
    let graph = GraphRef { name: row.get(1)?, version: row.get(2)? };
    let thread: Option<String> = row.get(3)?;
    let numbers: (i64, i64, Option<i64>, i64, i64, i64) =
        (row.get(5)?, row.get(6)?, row.get(8)?, row.get(9)?, row.get(10)?, row.get(12)?);
    let num: i64 = row.get(13)?;
    let pending_interrupts: u32 = row.get(14)?;
    let lease_losses: u32 = row.get(15)?;
    let trace: Option<String> = row.get(16)?;
    let build = || -> Result<(RunRecord, i64), Abort> {
        let id: RunId =
            id.parse().map_err(|_| corrupt_row(format!("bad run id `{id}` in runs")))?;
        let status: RunStatus =
            status.parse().map_err(|_| corrupt_row(format!("run {id}: bad status `{status}`")))?;
        let failure = failure
            .map(|text| serde_json::from_str::<RunFailure>(&text))
            .transpose()
            .map_err(|error| corrupt_row(format!("run {id}: bad failure record: {error}")))?;
        let (step, epoch, lease_until_ms, created_at_ms, updated_at_ms, last_seq) = numbers;
        let record = RunRecord {
            id,
            graph,
            thread,
            status,
            step: step as u64,
            epoch: epoch as u64,
            owner: owner.as_deref().and_then(Owner::parse),
            lease_until_ms,
            created_at_ms,
            updated_at_ms,
            failure,
            last_seq: last_seq as u64,
            pending_interrupts,
            lease_losses,
            trace,
        };
        Ok((record, num))
    };
    Ok(build())
}

pub(super) fn load_run(tx: &Connection, run: RunId) -> Result<(RunRecord, i64), Abort> {
    let mut stmt = tx.prepare_cached(&format!("{SELECT_RUN} WHERE r.id = ?1"))?;
    match stmt.query_row([run.to_string()], run_from_row).optional()? {
        Some(record) => record,
        None => Err(StoreError::RunNotFound { run }.into()),
    }
}

/// Reads [`Writer`]: the part of `SELECT_RUN` a commit needs, without
/// decoding the rest of the row (this is on every step's path).
pub(super) fn load_writer(tx: &Connection, run: RunId) -> Result<Writer, Abort> {
    let row: Option<(String, i64, i64, i64, i64, Option<i64>)> = tx
        .prepare_cached(
            "SELECT r.status, r.epoch, r.num, max(r.step, coalesce(s.step, 0)),
                    max(r.last_seq, coalesce(s.first_seq + s.event_count - 1, 0), CASE
                        WHEN r.status = 'running' THEN coalesce(
                            (SELECT e.first_seq + e.count - 1 FROM events e
                             WHERE e.num = r.num ORDER BY e.first_seq DESC LIMIT 1), 0)
                        ELSE 0 END),
                    r.lease_until_ms
             FROM runs r
             LEFT JOIN steps s ON s.num = r.num
                 AND s.step = (SELECT max(step) FROM steps WHERE num = r.num)
             WHERE r.id = ?1",
        )?
        .query_row(params![run.to_string()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
        })
        .optional()?;
    let (status, epoch, num, step, last_seq, lease_until_ms) =
        row.ok_or(StoreError::RunNotFound { run })?;
    let status =
        status.parse().map_err(|_| corrupt_row(format!("run {run}: bad status `{status}`")))?;
    Ok(Writer {
        status,
        epoch: epoch as u64,
        num,
        step: step as u64,
        last_seq: last_seq as u64,
        lease_until_ms,
    })
}

/// The run's status, epoch and number, for a writer that only needs to be
/// allowed.
pub(super) fn load_owner(tx: &Connection, run: RunId) -> Result<(RunStatus, u64, i64), Abort> {
    let row: Option<(String, i64, i64)> = tx
        .prepare_cached("SELECT status, epoch, num FROM runs WHERE id = ?1")?
        .query_row(params![run.to_string()], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let (status, epoch, num) = row.ok_or(StoreError::RunNotFound { run })?;
    let status =
        status.parse().map_err(|_| corrupt_row(format!("run {run}: bad status `{status}`")))?;
    Ok((status, epoch as u64, num))
}

pub(super) fn check_writer(
    run: RunId,
    status: RunStatus,
    current: u64,
    epoch: u64,
) -> Result<(), StoreError> {
    if status.is_terminal() {
        return Err(StoreError::RunTerminal { run, status });
    }
    if current != epoch {
        return Err(StoreError::Fenced { run, writer: epoch, current });
    }
    Ok(())
}

pub(super) fn check_events(
    run: RunId,
    last_seq: u64,
    events: &[EventRecord],
) -> Result<(), StoreError> {
    for (offset, event) in events.iter().enumerate() {
        let expected = last_seq + 1 + offset as u64;
        if event.seq != expected {
            return Err(StoreError::EventGap { run, expected, found: event.seq });
        }
    }
    Ok(())
}

pub(super) fn blob_at(run: RunId, step: u64, bytes: &[u8]) -> Result<Blob, Abort> {
    Blob::from_bytes(bytes)
        .map_err(|source| Abort::Refused(StoreError::CorruptCheckpoint { run, step, source }))
}

pub(super) fn insert_interrupts(
    tx: &Connection,
    num: i64,
    interrupts: &[InterruptRecord],
) -> Result<(), Abort> {
    if interrupts.is_empty() {
        return Ok(());
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO interrupts (num, id, step, task, ordinal, node, kind, payload, decisions, \
         schema, rejection_routed, decision, raised_at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?;
    for interrupt in interrupts {
        let decisions = serde_json::to_string(&interrupt.decisions)
            .map_err(|error| Abort::Refused(StoreError::Backend { source: Box::new(error) }))?;
        insert.execute(params![
            num,
            interrupt.id,
            interrupt.step as i64,
            interrupt.task,
            interrupt.ordinal,
            interrupt.node,
            interrupt.kind,
            interrupt.payload.to_string(),
            decisions,
            interrupt.schema.as_ref().map(ToString::to_string),
            interrupt.rejection_routed,
            interrupt.decision.as_ref().map(ToString::to_string),
            interrupt.raised_at_ms
        ])?;
    }
    Ok(())
}

/// The interrupts raised at `step`, in the order they were raised.
pub(super) fn interrupts_at(
    tx: &Connection,
    run: RunId,
    num: i64,
    step: u64,
) -> Result<Vec<InterruptRecord>, Abort> {
    let mut stmt = tx.prepare_cached(
        "SELECT id, step, task, ordinal, node, kind, payload, decisions, schema, \
                rejection_routed, decision, raised_at_ms \
         FROM interrupts WHERE num = ?1 AND step = ?2 ORDER BY task, ordinal",
    )?;
    let mut rows = stmt.query(params![num, step as i64])?;
    let mut interrupts = Vec::new();
    while let Some(row) = rows.next()? {
        interrupts.push(interrupt_from_row(run, row)?);
    }
    Ok(interrupts)
}

pub(super) fn interrupt_from_row(
    run: RunId,
    row: &rusqlite::Row<'_>,
) -> Result<InterruptRecord, Abort> {
    let json = |text: String| -> Result<serde_json::Value, Abort> {
        serde_json::from_str(&text).map_err(|error| {
            Abort::Refused(StoreError::Backend {
                source: format!("run {run}: bad interrupt JSON: {error}").into(),
            })
        })
    };
    let decisions: String = row.get(7)?;
    let decisions = match json(decisions)? {
        serde_json::Value::Array(items) => {
            items.into_iter().filter_map(|item| item.as_str().map(str::to_owned)).collect()
        }
        _ => Vec::new(),
    };
    Ok(InterruptRecord {
        id: row.get(0)?,
        step: row.get::<_, i64>(1)? as u64,
        task: row.get(2)?,
        ordinal: row.get(3)?,
        node: row.get(4)?,
        kind: row.get(5)?,
        payload: json(row.get(6)?)?,
        decisions,
        schema: row.get::<_, Option<String>>(8)?.map(json).transpose()?,
        rejection_routed: row.get(9)?,
        decision: row.get::<_, Option<String>>(10)?.map(json).transpose()?,
        raised_at_ms: row.get(11)?,
    })
}

/// Appends `count` event lines (`lines`, numbered from `first_seq`) to a
/// run's log outside a step row; nothing when there are none.
pub(super) fn insert_events(
    tx: &Connection,
    num: i64,
    first_seq: i64,
    count: i64,
    lines: &str,
) -> rusqlite::Result<()> {
    if count > 0 {
        let insert = "INSERT INTO events (num, first_seq, count, lines) VALUES (?1, ?2, ?3, ?4)";
        tx.prepare_cached(insert)?.execute(params![num, first_seq, count, lines])?;
    }
    Ok(())
}

/// A new run as its rows are written (`RunStore::create_run`, and the run a
/// schedule starts).
pub(super) struct NewRunRow {
    run: NewRun,
    id: String,
    snapshot: Vec<u8>,
    frontier: Vec<u8>,
    status: RunStatus,
    owner: Option<String>,
    lease: Option<i64>,
    events: String,
}

impl NewRunRow {
    pub(super) fn of(run: NewRun) -> Result<Self, StoreError> {
        check_events(run.id, 0, &run.events)?;
        Ok(Self {
            id: run.id.to_string(),
            snapshot: run.snapshot.to_bytes(),
            frontier: run.frontier.to_bytes(),
            status: if run.claim.is_some() { RunStatus::Running } else { RunStatus::Queued },
            owner: run.claim.as_ref().map(|(owner, _)| owner.to_text()),
            lease: run.claim.as_ref().map(|(_, until)| *until),
            events: EventRecord::join_compact(run.id, &run.events),
            run,
        })
    }

    /// The run.
    pub(super) fn run(&self) -> RunId {
        self.run.id
    }

    /// The run's id, as stored.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// Inserts the run's rows in `tx`; its epoch (1).
    pub(super) fn insert(
        &self,
        tx: &rusqlite::Connection,
        writers: &Writers,
    ) -> Result<u64, Abort> {
        let Self { run, id, snapshot, frontier, status, owner, lease, events } = self;
        let (status, lease) = (*status, *lease);
        let exists = tx
            .prepare_cached("SELECT count(*) FROM runs WHERE id = ?1")?
            .query_row([&id], |row| row.get::<_, i64>(0))?;
        if exists > 0 {
            return Err(StoreError::RunExists { run: run.id }.into());
        }
        if let (Some(turn), Some(thread)) = (run.thread_turn, &run.thread) {
            let latest = tx
                .prepare_cached(
                    "SELECT id, status FROM runs WHERE thread = ?1 ORDER BY id DESC LIMIT 1",
                )?
                .query_row([thread], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))
                .optional()?;
            turn.check_stored(thread, latest.as_ref().map(|(id, s)| (id.as_str(), s.as_str())))?;
        }
        // Every run has a step-0 row, so the steps index holds the
        // highest number (no index on runs.num).
        let num: i64 = tx
            .prepare_cached("SELECT coalesce(max(num), 0) + 1 FROM steps")?
            .query_row([], |row| row.get(0))?;
        let insert_run = "INSERT INTO runs (id, num, graph, graph_version, thread, status, \
             step, epoch, owner, lease_until_ms, created_at_ms, updated_at_ms, failure, \
             last_seq, trace) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, 1, ?7, ?8, ?9, ?9, NULL, 0, ?10)";
        tx.prepare_cached(insert_run)?.execute(params![
            id,
            num,
            run.graph.name,
            run.graph.version,
            run.thread,
            status.as_str(),
            owner,
            lease,
            run.created_at_ms,
            run.trace
        ])?;
        let insert_step = "INSERT INTO steps (num, step, at_ms, tasks, frontier, updates, \
             first_seq, event_count, events) VALUES (?1, 0, ?2, 0, ?3, x'', 1, ?4, ?5)";
        let count = run.events.len() as i64;
        tx.prepare_cached(insert_step)?.execute(params![
            num,
            run.created_at_ms,
            frontier,
            count,
            events
        ])?;
        tx.prepare_cached("INSERT INTO snapshots (id, payload) VALUES (?1, ?2)")?
            .execute(params![key(num, 0), snapshot])?;
        if let Some(body) = &run.attachment {
            tx.prepare_cached("INSERT INTO attachments (num, body) VALUES (?1, ?2)")?
                .execute(params![num, body])?;
        }
        // Its first commit need not read it back (`writers.rs`); a new
        // run has no pending writes.
        let writer = Writer {
            status,
            epoch: 1,
            num,
            step: 0,
            last_seq: count as u64,
            lease_until_ms: lease,
        };
        let recent = RecentFrontiers::only(0, frontier);
        writers.stage(run.id, Known { writer, settled: true, recent });
        Ok(1)
    }
}
