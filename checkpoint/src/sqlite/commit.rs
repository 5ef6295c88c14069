//! A transition's commit: the step's row (and its updates' parts), its
//! snapshot, events and interrupts, and the run's row when its status,
//! owner or lease change, in one transaction; checked against the run's
//! writer state, known from the last commit or read back (`writers.rs`).

use std::sync::Arc;

use rusqlite::{params, Connection};

use super::fault::Abort;
use super::rows::{
    check_events, check_writer, failure_text, insert_events, insert_interrupts, key, load_writer,
    MAX_STEP,
};
use super::writers::{Known, Touches, Writer};
use super::{frame, parts, SqliteStore};
use crate::codec::Blob;
use crate::error::StoreError;
use crate::frontier::RecentFrontiers;
use crate::record::{EventRecord, Transition};
use crate::status::RunStatus;

/// The encoded parts of a committed step.
struct StepRow {
    number: u64,
    tasks: usize,
    updates: Vec<u8>,
    snapshot: Option<Vec<u8>>,
    frontier: Arc<[u8]>,
}

impl SqliteStore {
    /// [`RunStore::commit`](crate::RunStore::commit).
    pub(super) async fn commit_transition(&self, transition: Transition) -> Result<(), StoreError> {
        let run = transition.run;
        let failure = failure_text(transition.failure.as_ref())?;
        let step = transition.step.as_ref().map(|step| StepRow {
            number: step.step,
            tasks: step.updates.len(),
            updates: frame::encode(&step.updates),
            snapshot: step.snapshot.as_ref().map(Blob::to_bytes),
            frontier: Arc::from(step.frontier.to_bytes()),
        });
        let events = EventRecord::join_compact(run, &transition.events);
        let running = transition.status == RunStatus::Running;
        let writers = Arc::clone(&self.writers);
        let part_len = self.part_len;
        self.write(Touches::NoRun, move |tx| {
            // What the last commit here left, unless something else may
            // have changed it since (`writers.rs`).
            let (record, settled, mut recent) = match writers.get(tx, run)? {
                Some(Known { writer, settled, recent }) => (writer, settled, recent),
                None => (load_writer(tx, run)?, false, RecentFrontiers::default()),
            };
            let num = record.num;
            check_writer(run, record.status, record.epoch, transition.epoch)?;
            if let Some(step) = &step {
                if step.number != record.step + 1 || step.number > MAX_STEP {
                    let (current, found) = (record.step, step.number);
                    return Err(StoreError::StepOutOfOrder { run, current, found }.into());
                }
            }
            check_events(run, record.last_seq, &transition.events)?;
            let first_seq = record.last_seq as i64 + 1;
            let count = transition.events.len() as i64;
            let new_step = step.as_ref().map_or(record.step, |step| step.number);
            if let Some(row) = &step {
                let at = StepAt { num, step: new_step, at_ms: transition.at_ms, first_seq, count };
                insert_step(tx, &at, row, &events, &mut recent, part_len, settled)?;
            } else {
                insert_events(tx, num, first_seq, count, &events)?;
            }
            insert_interrupts(tx, num, &transition.interrupts)?;
            let last_seq = first_seq + count - 1;
            let lease_until_ms = if running && record.status == RunStatus::Running && step.is_some()
            {
                renew_lease(tx, &record, &transition)?
            } else {
                update_run(
                    tx,
                    &transition,
                    record.lease_until_ms,
                    new_step,
                    failure.as_deref(),
                    last_seq,
                )?
            };
            let writer = Writer {
                status: transition.status,
                epoch: record.epoch,
                num,
                step: new_step,
                last_seq: last_seq as u64,
                lease_until_ms,
            };
            writers.stage(run, Known { writer, settled: step.is_some(), recent });
            Ok(())
        })
        .await
    }
}

/// Where a step's row goes: the run's number, the step, its time and its
/// events' sequence numbers.
struct StepAt {
    num: i64,
    step: u64,
    at_ms: i64,
    first_seq: i64,
    count: i64,
}

/// Inserts a step's row (its updates beyond `part_len` in parts, its
/// events), its snapshot, and drops the pending writes it settles
/// (unless it is known there are none).
fn insert_step(
    tx: &Connection,
    at: &StepAt,
    row: &StepRow,
    events: &str,
    recent: &mut RecentFrontiers,
    part_len: usize,
    settled: bool,
) -> Result<(), Abort> {
    // A frontier stored lately is referred to (`frontier.rs`).
    let reference = recent.reference(&row.frontier);
    let frontier = reference.as_ref().map_or(&row.frontier[..], |stored| &stored[..]);
    recent.remember(at.step, &row.frontier);
    let (kept, rest) = parts::split(&row.updates, part_len);
    let insert = "INSERT INTO steps (num, step, at_ms, tasks, frontier, updates, \
         first_seq, event_count, events) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
    tx.prepare_cached(insert)?.execute(params![
        at.num,
        at.step as i64,
        at.at_ms,
        parts::tasks_column(row.tasks, !rest.is_empty()),
        frontier,
        kept,
        at.first_seq,
        at.count,
        events
    ])?;
    if !rest.is_empty() {
        parts::store(tx, tx.last_insert_rowid(), rest, part_len)?;
    }
    if let Some(snapshot) = &row.snapshot {
        tx.prepare_cached("INSERT INTO snapshots (id, payload) VALUES (?1, ?2)")?
            .execute(params![key(at.num, at.step), snapshot])?;
    }
    if !settled {
        tx.prepare_cached("DELETE FROM pending_writes WHERE num = ?1 AND step = ?2")?
            .execute(params![at.num, at.step as i64])?;
    }
    Ok(())
}

/// A step of a running run: its steps row says it all. The runs row is
/// touched only to keep the lease fresh (about every third of the lease),
/// so most steps write one page. Returns the lease now held.
fn renew_lease(
    tx: &Connection,
    record: &Writer,
    transition: &Transition,
) -> Result<Option<i64>, Abort> {
    let Some(until) = transition.lease_until_ms else { return Ok(record.lease_until_ms) };
    let length = until - transition.at_ms;
    let stale = record.lease_until_ms.is_none_or(|held| held < until - length / 3);
    if !stale {
        return Ok(record.lease_until_ms);
    }
    tx.prepare_cached("UPDATE runs SET lease_until_ms = ?2 WHERE id = ?1")?
        .execute(params![transition.run.to_string(), until])?;
    Ok(Some(until))
}

/// Any other transition: the runs row takes its status, step, failure,
/// last event and lease (an owner kept only while it runs; `held`, the
/// lease it had, kept by a running run that names none). Returns the
/// lease now held.
fn update_run(
    tx: &Connection,
    transition: &Transition,
    held: Option<i64>,
    step: u64,
    failure: Option<&str>,
    last_seq: i64,
) -> Result<Option<i64>, Abort> {
    let running = transition.status == RunStatus::Running;
    let lease_until_ms = match transition.status {
        RunStatus::Running => transition.lease_until_ms.or(held),
        // Back in the queue, not to be claimed before this.
        RunStatus::Queued => transition.lease_until_ms,
        _ => None,
    };
    let update = "UPDATE runs SET status = ?2, step = ?3, failure = ?4, \
         updated_at_ms = ?5, last_seq = ?6, lease_until_ms = ?7, \
         owner = CASE WHEN ?8 THEN owner END, \
         lease_losses = CASE WHEN ?8 THEN lease_losses ELSE 0 END WHERE id = ?1";
    tx.prepare_cached(update)?.execute(params![
        transition.run.to_string(),
        transition.status.as_str(),
        step as i64,
        failure,
        transition.at_ms,
        last_seq,
        lease_until_ms,
        running
    ])?;
    Ok(lease_until_ms)
}
