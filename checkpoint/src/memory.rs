//! A store that keeps everything in process memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::codec::Blob;
use crate::error::StoreError;
use crate::event::restore_updates;
use crate::ids::RunId;
use crate::listing::{Cursor, PageRequest, RunFilter, RunPage, ThreadRecord, Waiting};
use crate::outbox::OutboxEntry;
use crate::owner::Owner;
use crate::record::{
    CheckpointInfo, DecisionWrite, EventRecord, HistoryPage, InterruptRecord, NewRun, RunRecord,
    StepRecord, StoredCheckpoint, TaskProgress, TaskUpdate, TaskWrite, Transition,
};
use crate::schedule::ScheduleRecord;
use crate::status::RunStatus;
use crate::store::RunStore;

mod gates;
mod tables;
mod writes;
use writes::{check_events, check_writer};

/// In-memory [`Store`](crate::Store): the same contract as the durable stores (epochs,
/// step order, gap-free events, newest-first listing), nothing survives the
/// process. For tests, examples and runs that need no durability.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    runs: BTreeMap<RunId, StoredRun>,
    /// Node outputs by (scope, key): (expiry, value).
    cache: BTreeMap<(String, String), (i64, Blob)>,
    /// Thread records by id.
    threads: BTreeMap<String, ThreadRecord>,
    /// Schedules by id.
    schedules: BTreeMap<String, ScheduleRecord>,
    /// Outbox entries by id.
    outbox: BTreeMap<String, OutboxEntry>,
    /// Request keys by (scope, key).
    keys: BTreeMap<(String, String), crate::keys::HeldKey>,
}

#[derive(Debug)]
struct StoredRun {
    record: RunRecord,
    /// (step, snapshot); step 0 is the input.
    snapshots: Vec<(u64, Blob)>,
    initial_frontier: Blob,
    steps: Vec<StepRecord>,
    /// Commit time of each step (index 0 is the input).
    step_times: Vec<i64>,
    /// Pending writes of the step after `record.step`, by task index.
    pending: HashMap<u32, TaskUpdate>,
    /// Progress records of the step after `record.step`, by task index.
    progress: HashMap<u32, TaskUpdate>,
    events: Vec<EventRecord>,
    attachment: Option<String>,
    interrupts: Vec<InterruptRecord>,
}

impl StoredRun {
    /// The interrupts raised at `step`, in the order they were raised.
    fn interrupts_at(&self, step: u64) -> Vec<InterruptRecord> {
        self.interrupts.iter().filter(|i| i.step == step).cloned().collect()
    }

    /// The record as handed out, with its pending interrupts counted.
    fn record(&self) -> RunRecord {
        let mut record = self.record.clone();
        let next = record.step + 1;
        record.pending_interrupts =
            self.interrupts.iter().filter(|i| i.step == next && i.decision.is_none()).count()
                as u32;
        record
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied
        // transition: every mutation below validates first, then writes.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn create_run(&self, run: NewRun) -> Result<u64, StoreError> {
        self.lock().create_run(run)
    }

    async fn commit(&self, transition: Transition) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let stored = inner.get_mut(transition.run)?;
        check_writer(stored, transition.epoch)?;
        if let Some(step) = &transition.step {
            if step.step != stored.record.step + 1 {
                return Err(StoreError::StepOutOfOrder {
                    run: transition.run,
                    current: stored.record.step,
                    found: step.step,
                });
            }
        }
        check_events(transition.run, stored.record.last_seq, &transition.events)?;
        // Lines that left their update to the step's record get it back
        // here: this store keeps whole lines.
        let mut events = transition.events;
        if let Some(step) = &transition.step {
            restore_updates(transition.run, step.step, &mut events, &step.updates)?;
        }

        let record = &mut stored.record;
        record.status = transition.status;
        record.failure = transition.failure;
        record.updated_at_ms = transition.at_ms;
        record.last_seq += events.len() as u64;
        if transition.status == RunStatus::Running {
            record.lease_until_ms = transition.lease_until_ms.or(record.lease_until_ms);
        } else {
            record.owner = None;
            record.lease_until_ms = match transition.status {
                RunStatus::Queued => transition.lease_until_ms,
                _ => None,
            };
            record.lease_losses = 0;
        }
        stored.events.extend(events);
        stored.interrupts.extend(transition.interrupts);
        if let Some(mut step) = transition.step {
            record.step = step.step;
            stored.pending.clear();
            stored.progress.clear();
            if let Some(snapshot) = step.snapshot.take() {
                stored.snapshots.push((step.step, snapshot));
            }
            stored.steps.push(step);
            stored.step_times.push(transition.at_ms);
        }
        Ok(())
    }

    async fn put_task_writes(&self, write: TaskWrite) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let stored = inner.get_mut(write.run)?;
        check_writer(stored, write.epoch)?;
        let expected = stored.record.step + 1;
        if let Some(wrong) = write.updates.iter().find(|update| update.task.step != expected) {
            return Err(StoreError::StepOutOfOrder {
                run: write.run,
                current: stored.record.step,
                found: wrong.task.step,
            });
        }
        for update in write.updates {
            stored.pending.entry(update.task.index).or_insert(update);
        }
        Ok(())
    }

    async fn put_task_progress(&self, write: TaskProgress) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let stored = inner.get_mut(write.run)?;
        check_writer(stored, write.epoch)?;
        let expected = stored.record.step + 1;
        if write.progress.task.step != expected {
            return Err(StoreError::StepOutOfOrder {
                run: write.run,
                current: stored.record.step,
                found: write.progress.task.step,
            });
        }
        check_events(write.run, stored.record.last_seq, &write.events)?;
        stored.record.last_seq += write.events.len() as u64;
        stored.events.extend(write.events);
        stored.progress.insert(write.progress.task.index, write.progress);
        Ok(())
    }

    async fn claim(
        &self,
        run: RunId,
        expected_epoch: u64,
        owner: Owner,
        lease_until_ms: i64,
    ) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        let stored = inner.get_mut(run)?;
        check_writer(stored, expected_epoch)?;
        let record = &mut stored.record;
        if record.status == RunStatus::Running {
            record.lease_losses += 1;
        }
        record.epoch += 1;
        record.status = RunStatus::Running;
        record.owner = Some(owner);
        record.lease_until_ms = Some(lease_until_ms);
        record.failure = None;
        Ok(record.epoch)
    }

    async fn renew(&self, run: RunId, epoch: u64, lease_until_ms: i64) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let stored = inner.get_mut(run)?;
        check_writer(stored, epoch)?;
        if stored.record.status == RunStatus::Running {
            stored.record.lease_until_ms = Some(lease_until_ms);
        }
        Ok(())
    }

    async fn history(
        &self,
        run: RunId,
        before: Option<u64>,
        limit: u64,
    ) -> Result<HistoryPage, StoreError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let inner = self.lock();
        let stored = inner.runs.get(&run).ok_or(StoreError::RunNotFound { run })?;
        let newest = before.map_or(stored.record.step, |before| before.saturating_sub(1));
        if before == Some(0) {
            return Ok(HistoryPage { checkpoints: Vec::new(), next_before: None });
        }
        let snapshot_steps: std::collections::HashSet<u64> =
            stored.snapshots.iter().map(|(step, _)| *step).collect();
        let mut checkpoints: Vec<CheckpointInfo> = (0..=newest.min(stored.record.step))
            .rev()
            .take(limit)
            .map(|step| CheckpointInfo {
                step,
                at_ms: stored.step_times[step as usize],
                tasks: step
                    .checked_sub(1)
                    .and_then(|i| stored.steps.get(i as usize))
                    .map_or(0, |record| record.updates.len() as u32),
                snapshot: snapshot_steps.contains(&step),
            })
            .collect();
        let next_before = match checkpoints.last() {
            Some(last) if last.step > 0 && checkpoints.len() == limit => Some(last.step),
            _ => None,
        };
        checkpoints.truncate(limit);
        Ok(HistoryPage { checkpoints, next_before })
    }

    async fn run(&self, run: RunId) -> Result<RunRecord, StoreError> {
        let inner = self.lock();
        inner.runs.get(&run).map(StoredRun::record).ok_or(StoreError::RunNotFound { run })
    }

    async fn checkpoint(
        &self,
        run: RunId,
        at: Option<u64>,
    ) -> Result<StoredCheckpoint, StoreError> {
        let inner = self.lock();
        let stored = inner.runs.get(&run).ok_or(StoreError::RunNotFound { run })?;
        let current = stored.record.step;
        let step = at.unwrap_or(current);
        if step > current {
            return Err(StoreError::CheckpointNotFound { run, step });
        }
        let (snapshot_step, snapshot) = stored
            .snapshots
            .iter()
            .rev()
            .find(|(at, _)| *at <= step)
            .cloned()
            .expect("a run always has its input snapshot");
        let deltas = stored
            .steps
            .iter()
            .filter(|record| record.step > snapshot_step && record.step <= step)
            .map(|record| (record.step, record.updates.clone()))
            .collect();
        let frontier = match step {
            0 => stored.initial_frontier.clone(),
            step => stored.steps[step as usize - 1].frontier.clone(),
        };
        let (mut pending, mut progress, interrupts): (Vec<TaskUpdate>, Vec<TaskUpdate>, _) =
            if step == current {
                (
                    stored.pending.values().cloned().collect(),
                    stored.progress.values().cloned().collect(),
                    stored.interrupts_at(step + 1),
                )
            } else {
                (Vec::new(), Vec::new(), Vec::new())
            };
        pending.sort_by_key(|update| update.task.index);
        progress.sort_by_key(|update| update.task.index);
        let mut record = stored.record();
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
    }

    async fn interrupts(&self, run: RunId) -> Result<Vec<InterruptRecord>, StoreError> {
        let inner = self.lock();
        let stored = inner.runs.get(&run).ok_or(StoreError::RunNotFound { run })?;
        Ok(stored.interrupts_at(stored.record.step + 1))
    }

    async fn decide(&self, write: DecisionWrite) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        let run = write.run;
        let stored = inner.get_mut(run)?;
        let record = &stored.record;
        if record.epoch != write.expected_epoch {
            return Err(StoreError::Fenced {
                run,
                writer: write.expected_epoch,
                current: record.epoch,
            });
        }
        if record.status != RunStatus::AwaitingHitl {
            return Err(StoreError::NotAwaitingDecision { run, status: record.status });
        }
        let next = record.step + 1;
        let mut positions = Vec::with_capacity(write.answers.len());
        for answer in &write.answers {
            let interrupt = answer.interrupt.clone();
            let position = stored
                .interrupts
                .iter()
                .position(|i| i.id == answer.interrupt && i.step == next)
                .ok_or_else(|| StoreError::InterruptNotFound {
                    run,
                    interrupt: interrupt.clone(),
                })?;
            if stored.interrupts[position].decision.is_some() || positions.contains(&position) {
                return Err(StoreError::InterruptAnswered { run, interrupt });
            }
            positions.push(position);
        }
        check_events(run, record.last_seq, &write.events)?;
        for (position, answer) in positions.into_iter().zip(write.answers) {
            stored.interrupts[position].decision = Some(answer.decision);
        }
        let record = &mut stored.record;
        record.epoch += 1;
        record.status = write.status;
        record.failure = write.failure;
        record.updated_at_ms = write.at_ms;
        if let (RunStatus::Queued, Some((owner, lease))) = (write.status, write.claim) {
            record.status = RunStatus::Running;
            record.owner = Some(owner);
            record.lease_until_ms = Some(lease);
        }
        record.last_seq += write.events.len() as u64;
        stored.events.extend(write.events);
        Ok(stored.record.epoch)
    }

    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> Result<RunPage, StoreError> {
        let before = page.cursor.as_ref().map(Cursor::last_run).transpose()?;
        let inner = self.lock();
        let upper = match before {
            Some(last) => std::ops::Bound::Excluded(last),
            None => std::ops::Bound::Unbounded,
        };
        let runs: Vec<RunRecord> = inner
            .runs
            .range((std::ops::Bound::Unbounded, upper))
            .rev()
            .map(|(_, stored)| stored)
            .filter(|stored| matches_filter(&stored.record, filter))
            .filter(|stored| held(&inner, &stored.record, filter))
            .take(usize::try_from(page.limit).unwrap_or(usize::MAX).saturating_add(1))
            .map(StoredRun::record)
            .collect();
        Ok(RunPage::from_overfetch(runs, page.limit))
    }

    async fn claimable(&self, now_ms: i64, limit: u64) -> Result<Vec<RunRecord>, StoreError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let inner = self.lock();
        let expired = |record: &RunRecord| {
            record.status == RunStatus::Running
                && record.lease_until_ms.is_none_or(|until| until < now_ms)
        };
        let queued = inner.runs.values().filter(|s| {
            s.record.status == RunStatus::Queued
                && s.record.lease_until_ms.is_none_or(|wake| wake <= now_ms)
        });
        let lost = inner.runs.values().filter(|s| expired(&s.record));
        Ok(queued.chain(lost).take(limit).map(StoredRun::record).collect())
    }

    async fn attachment(&self, run: RunId) -> Result<Option<String>, StoreError> {
        let inner = self.lock();
        let stored = inner.runs.get(&run).ok_or(StoreError::RunNotFound { run })?;
        Ok(stored.attachment.clone())
    }

    async fn delete_run(&self, run: RunId) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if inner.get_mut(run)?.record.status == RunStatus::Running {
            return Err(StoreError::RunInFlight { run });
        }
        inner.runs.remove(&run);
        Ok(())
    }

    async fn waiting(&self) -> Result<Waiting, StoreError> {
        let inner = self.lock();
        let waiting = inner.runs.values().map(|stored| &stored.record);
        let waiting = waiting.filter(|record| record.status == RunStatus::AwaitingHitl);
        Ok(waiting.fold(Waiting::default(), |sum, record| Waiting {
            runs: sum.runs + 1,
            oldest_since_ms: Some(
                sum.oldest_since_ms.map_or(record.updated_at_ms, |t| t.min(record.updated_at_ms)),
            ),
        }))
    }

    async fn events(
        &self,
        run: RunId,
        after_seq: u64,
        limit: u64,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let inner = self.lock();
        let stored = inner.runs.get(&run).ok_or(StoreError::RunNotFound { run })?;
        Ok(stored
            .events
            .iter()
            .filter(|event| event.seq > after_seq)
            .take(limit)
            .cloned()
            .collect())
    }
}

fn matches_filter(record: &RunRecord, filter: &RunFilter) -> bool {
    filter.status.is_none_or(|status| record.status == status)
        && filter.graph.as_deref().is_none_or(|graph| record.graph.name == graph)
        && filter.thread.as_deref().is_none_or(|thread| record.thread.as_deref() == Some(thread))
}

/// Whether the run's thread record is held as `filter` asks (any run
/// when it asks nothing).
fn held(inner: &Inner, record: &RunRecord, filter: &RunFilter) -> bool {
    let Some(holder) = &filter.held_by else { return true };
    let Some(thread) = record.thread.as_deref().and_then(|thread| inner.threads.get(thread)) else {
        return false;
    };
    if holder.holds(thread.owner.as_deref(), thread.tenant.as_deref()) {
        return true;
    }
    // Reviewed: the run waits, and is what its thread waits on (its
    // latest run: runs are keyed by id, ascending).
    let latest = inner.runs.values().rev().find(|run| run.record.thread == record.thread);
    record.status == RunStatus::AwaitingHitl
        && latest.is_some_and(|latest| latest.record.id == record.id)
        && crate::listing::reviews(&filter.reviewed_by, &thread.reviewers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_the_store_conformance_suite() {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(crate::conformance::check_store(|| async { MemoryStore::new() }));
    }
}
