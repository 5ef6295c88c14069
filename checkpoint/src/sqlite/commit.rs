//! A transition's commit: the step's row (and its updates' parts), its
//! snapshot, events and interrupts, and the run's row when its status,
//! owner or lease change, in one transaction; checked against the run's
//! writer state, known from the last commit or read back (`writers.rs`).

use std::sync::Arc;

use rusqlite::params;

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
            if let Some(step) = &step {
                // A frontier stored lately is referred to (`frontier.rs`).
                let reference = recent.reference(&step.frontier);
                let frontier = reference.as_ref().map_or(&step.frontier[..], |stored| &stored[..]);
                recent.remember(new_step, &step.frontier);
                let (kept, rest) = parts::split(&step.updates, part_len);
                let insert = "INSERT INTO steps (num, step, at_ms, tasks, frontier, updates, \
                     first_seq, event_count, events) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
                tx.prepare_cached(insert)?.execute(params![
                    num,
                    new_step as i64,
                    transition.at_ms,
                    parts::tasks_column(step.tasks, !rest.is_empty()),
                    frontier,
                    kept,
                    first_seq,
                    count,
                    events
                ])?;
                if !rest.is_empty() {
                    parts::store(tx, tx.last_insert_rowid(), rest, part_len)?;
                }
                if let Some(snapshot) = &step.snapshot {
                    tx.prepare_cached("INSERT INTO snapshots (id, payload) VALUES (?1, ?2)")?
                        .execute(params![key(num, new_step), snapshot])?;
                }
                if !settled {
                    tx.prepare_cached("DELETE FROM pending_writes WHERE num = ?1 AND step = ?2")?
                        .execute(params![num, new_step as i64])?;
                }
            } else {
                insert_events(tx, num, first_seq, count, &events)?;
            }
            insert_interrupts(tx, num, &transition.interrupts)?;
            let mut lease_until_ms = record.lease_until_ms;
            if running && record.status == RunStatus::Running && step.is_some() {
                // A step of a running run: its steps row says it all. The
                // runs row is touched only to keep the lease fresh (about
                // every third of the lease), so most steps write one page.
                if let Some(until) = transition.lease_until_ms {
                    let length = until - transition.at_ms;
                    let stale = record.lease_until_ms.is_none_or(|held| held < until - length / 3);
                    if stale {
                        tx.prepare_cached("UPDATE runs SET lease_until_ms = ?2 WHERE id = ?1")?
                            .execute(params![run.to_string(), until])?;
                        lease_until_ms = Some(until);
                    }
                }
            } else {
                lease_until_ms = match transition.status {
                    RunStatus::Running => transition.lease_until_ms.or(record.lease_until_ms),
                    // Back in the queue, not to be claimed before this.
                    RunStatus::Queued => transition.lease_until_ms,
                    _ => None,
                };
                let update = "UPDATE runs SET status = ?2, step = ?3, failure = ?4, \
                     updated_at_ms = ?5, last_seq = ?6, lease_until_ms = ?7, \
                     owner = CASE WHEN ?8 THEN owner END, \
                     lease_losses = CASE WHEN ?8 THEN lease_losses ELSE 0 END WHERE id = ?1";
                tx.prepare_cached(update)?.execute(params![
                    run.to_string(),
                    transition.status.as_str(),
                    new_step as i64,
                    failure,
                    transition.at_ms,
                    first_seq + count - 1,
                    lease_until_ms,
                    running
                ])?;
            }
            let writer = Writer {
                status: transition.status,
                epoch: record.epoch,
                num,
                step: new_step,
                last_seq: (first_seq + count - 1) as u64,
                lease_until_ms,
            };
            writers.stage(run, Known { writer, settled: step.is_some(), recent });
            Ok(())
        })
        .await
    }
}
