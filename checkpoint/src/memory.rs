//! A store that keeps everything in process memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::codec::Blob;
use crate::error::StoreError;
use crate::event::restore_updates;
use crate::ids::RunId;
use crate::outbox::{OutboxEntry, OutboxGate, OutboxQuery};
use crate::owner::Owner;
use crate::record::{
    CheckpointInfo, Cursor, DecisionWrite, EventRecord, HistoryPage, InterruptRecord, NewRun,
    PageRequest, RunFilter, RunPage, RunRecord, RunStatus, StepRecord, StoredCheckpoint,
    TaskProgress, TaskUpdate, TaskWrite, ThreadRecord, Transition, Waiting,
};
use crate::schedule::{ScheduleFire, ScheduleRecord};
use crate::store::Store;

mod gates;
mod writes;
use writes::{check_events, check_writer};

/// In-memory [`Store`]: the same contract as the durable stores (epochs,
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
impl Store for MemoryStore {
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

    async fn cache_get(
        &self,
        scope: &str,
        key: &str,
        now_ms: i64,
    ) -> Result<Option<Blob>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .cache
            .get(&(scope.to_owned(), key.to_owned()))
            .filter(|(expires, _)| *expires > now_ms)
            .map(|(_, value)| value.clone()))
    }

    async fn cache_put(
        &self,
        scope: &str,
        key: &str,
        value: Blob,
        expires_at_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        inner
            .cache
            .retain(|(entry_scope, _), (expires, _)| entry_scope != scope || *expires > now_ms);
        inner.cache.insert((scope.to_owned(), key.to_owned()), (expires_at_ms, value));
        Ok(())
    }

    async fn delete_run(&self, run: RunId) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if inner.get_mut(run)?.record.status == RunStatus::Running {
            return Err(StoreError::RunInFlight { run });
        }
        inner.runs.remove(&run);
        Ok(())
    }

    async fn create_thread(
        &self,
        record: ThreadRecord,
    ) -> Result<(ThreadRecord, bool), StoreError> {
        let mut inner = self.lock();
        if let Some(found) = inner.threads.get(&record.id) {
            return Ok((found.clone(), false));
        }
        inner.threads.insert(record.id.clone(), record.clone());
        Ok((record, true))
    }

    async fn thread_record(&self, thread: &str) -> Result<Option<ThreadRecord>, StoreError> {
        Ok(self.lock().threads.get(thread).cloned())
    }

    async fn update_thread(
        &self,
        thread: &str,
        metadata: serde_json::Value,
        at_ms: i64,
    ) -> Result<ThreadRecord, StoreError> {
        let mut inner = self.lock();
        let record = inner
            .threads
            .get_mut(thread)
            .ok_or_else(|| StoreError::ThreadNotFound { thread: thread.to_owned() })?;
        record.metadata = metadata;
        record.updated_at_ms = at_ms;
        Ok(record.clone())
    }

    async fn list_threads(&self, offset: u64, limit: u64) -> Result<Vec<ThreadRecord>, StoreError> {
        let inner = self.lock();
        let mut threads: Vec<&ThreadRecord> = inner.threads.values().collect();
        threads.sort_by(|a, b| (b.created_at_ms, &b.id).cmp(&(a.created_at_ms, &a.id)));
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        let take = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(threads.into_iter().skip(skip).take(take).cloned().collect())
    }

    async fn delete_thread(&self, thread: &str) -> Result<bool, StoreError> {
        Ok(self.lock().threads.remove(thread).is_some())
    }

    async fn put_outbox(&self, entry: OutboxEntry) -> Result<(), StoreError> {
        self.lock().outbox.insert(entry.id.clone(), entry);
        Ok(())
    }

    async fn outbox_entry(&self, id: &str) -> Result<Option<OutboxEntry>, StoreError> {
        let mut inner = self.lock();
        inner.open_gates();
        Ok(inner.outbox.get(id).cloned())
    }

    async fn list_outbox(&self, query: OutboxQuery) -> Result<Vec<OutboxEntry>, StoreError> {
        let mut inner = self.lock();
        inner.open_gates();
        let mut found: Vec<&OutboxEntry> =
            inner.outbox.values().filter(|entry| query.matches(entry)).collect();
        found.sort_by(|a, b| (a.due_ms, &a.id).cmp(&(b.due_ms, &b.id)));
        let take = usize::try_from(query.limit).unwrap_or(usize::MAX);
        Ok(found.into_iter().take(take).cloned().collect())
    }

    async fn take_outbox(
        &self,
        id: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<Option<OutboxEntry>, StoreError> {
        let mut inner = self.lock();
        let Some(entry) = inner.outbox.get_mut(id).filter(|entry| !entry.is_held(now_ms)) else {
            return Ok(None);
        };
        entry.lease_until_ms = lease_until_ms;
        entry.attempts = entry.attempts.saturating_add(1);
        Ok(Some(entry.clone()))
    }

    async fn delete_outbox(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.lock().outbox.remove(id).is_some())
    }

    async fn gate_outbox(&self, ids: &[String], gate: OutboxGate) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        inner.open_gates();
        if !inner.shut(&gate) {
            return Ok(0);
        }
        let mut gated = 0;
        for id in ids {
            if let Some(entry) = inner.outbox.get_mut(id).filter(|entry| entry.gate.is_none()) {
                entry.gate = Some(gate);
                gated += 1;
            }
        }
        Ok(gated)
    }

    async fn create_schedule(&self, schedule: ScheduleRecord) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if inner.schedules.contains_key(&schedule.id) {
            return Err(StoreError::ScheduleExists { schedule: schedule.id });
        }
        inner.schedules.insert(schedule.id.clone(), schedule);
        Ok(())
    }

    async fn schedule(&self, id: &str) -> Result<Option<ScheduleRecord>, StoreError> {
        Ok(self.lock().schedules.get(id).cloned())
    }

    async fn list_schedules(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        let (offset, limit) = (
            usize::try_from(offset).unwrap_or(usize::MAX),
            usize::try_from(limit).unwrap_or(usize::MAX),
        );
        Ok(self.lock().schedules.values().skip(offset).take(limit).cloned().collect())
    }

    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.lock().schedules.remove(id).is_some())
    }

    async fn due_schedules(
        &self,
        now_ms: i64,
        limit: u64,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let inner = self.lock();
        let mut due: Vec<ScheduleRecord> = inner
            .schedules
            .values()
            .filter(|schedule| schedule.next_at_ms.is_some_and(|at| at <= now_ms))
            .cloned()
            .collect();
        due.sort_by(|a, b| (a.next_at_ms, &a.id).cmp(&(b.next_at_ms, &b.id)));
        due.truncate(limit);
        Ok(due)
    }

    async fn fire_schedule(&self, fire: ScheduleFire) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let schedule = inner
            .schedules
            .get(&fire.schedule)
            .ok_or_else(|| StoreError::ScheduleNotFound { schedule: fire.schedule.clone() })?;
        if schedule.next_at_ms != Some(fire.expected_next_ms) {
            return Err(StoreError::ScheduleMoved {
                schedule: fire.schedule,
                expected: fire.expected_next_ms,
                found: schedule.next_at_ms,
            });
        }
        let started = fire.run.as_ref().map(|run| run.id);
        if let Some(run) = fire.run {
            inner.create_run(run)?;
        }
        let Some(schedule) = inner.schedules.get_mut(&fire.schedule) else {
            return Err(StoreError::ScheduleNotFound { schedule: fire.schedule });
        };
        schedule.next_at_ms = fire.next_at_ms;
        schedule.last_fired_at_ms = Some(fire.at_ms);
        schedule.ticks_skipped += fire.skipped;
        if let Some(run) = started {
            schedule.last_run = Some(run);
            schedule.runs_started += 1;
        }
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
