//! The [`MemoryStore`]'s thread records, schedules, outbox, node cache and
//! request keys (its runs are `memory.rs`'s).

use std::collections::HashMap;

use async_trait::async_trait;

use super::MemoryStore;
use crate::codec::Blob;
use crate::error::StoreError;
use crate::keys::{claim_wins, Claimed, HeldKey, KeyClaim};
use crate::listing::{ThreadMatches, ThreadQuery, ThreadRecord, ThreadStatus, ThreadStorage};
use crate::outbox::{OutboxEntry, OutboxGate, OutboxQuery};
use crate::schedule::{ScheduleFire, ScheduleRecord};
use crate::status::RunStatus;
use crate::store::{IdempotencyStore, NodeCacheStore, OutboxStore, ScheduleStore, ThreadStore};

#[async_trait]
impl ThreadStore for MemoryStore {
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

    async fn search_threads(&self, query: &ThreadQuery) -> Result<Vec<ThreadRecord>, StoreError> {
        let inner = self.lock();
        // The latest run of each thread: runs are keyed by id, ascending.
        let mut latest: HashMap<&str, RunStatus> = HashMap::new();
        for stored in inner.runs.values() {
            if let Some(thread) = &stored.record.thread {
                latest.insert(thread, stored.record.status);
            }
        }
        let mut threads: Vec<&ThreadRecord> = inner.threads.values().collect();
        threads.sort_by(|a, b| (b.created_at_ms, &b.id).cmp(&(a.created_at_ms, &a.id)));
        let mut page = ThreadMatches::new(query);
        for thread in threads {
            let status = ThreadStatus::of(latest.get(thread.id.as_str()).copied());
            if page.offer(thread.clone(), status.as_str()) {
                break;
            }
        }
        Ok(page.into_found())
    }

    async fn delete_thread(&self, thread: &str) -> Result<bool, StoreError> {
        Ok(self.lock().threads.remove(thread).is_some())
    }

    async fn set_thread_reviewers(
        &self,
        thread: &str,
        reviewers: &[String],
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let Some(record) = inner.threads.get_mut(thread) else { return Ok(false) };
        record.reviewers = reviewers.to_vec();
        Ok(true)
    }

    async fn expired_threads(&self, now_ms: i64, limit: u64) -> Result<Vec<String>, StoreError> {
        let inner = self.lock();
        let mut latest: HashMap<&str, (RunStatus, i64)> = HashMap::new();
        // Runs by id ascending: the last one seen of a thread is its latest.
        for stored in inner.runs.values() {
            if let Some(thread) = stored.record.thread.as_deref() {
                latest.insert(thread, (stored.record.status, stored.record.updated_at_ms));
            }
        }
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(inner
            .threads
            .values()
            .filter_map(|record| {
                let ttl = record.ttl_ms?;
                let run = latest.get(record.id.as_str());
                let status = ThreadStatus::of(run.map(|(status, _)| *status));
                let changed =
                    run.map_or(record.updated_at_ms, |(_, at)| *at.max(&record.updated_at_ms));
                let expired = matches!(status, ThreadStatus::Idle | ThreadStatus::Error)
                    && changed.saturating_add(ttl) <= now_ms;
                expired.then(|| record.id.clone())
            })
            .take(limit)
            .collect())
    }

    /// Measured as the durable stores would store it: blobs as stored,
    /// JSON as text.
    async fn thread_storage(&self, thread: &str) -> Result<ThreadStorage, StoreError> {
        let inner = self.lock();
        let mut storage = ThreadStorage::default();
        let runs = inner.runs.values().filter(|run| run.record.thread.as_deref() == Some(thread));
        for run in runs {
            storage.runs += 1;
            let mut checkpoints = run.initial_frontier.stored_len();
            checkpoints += run.snapshots.iter().map(|(_, blob)| blob.stored_len()).sum::<usize>();
            for step in &run.steps {
                checkpoints += step.frontier.stored_len();
                checkpoints += step.updates.iter().map(|u| u.update.stored_len()).sum::<usize>();
            }
            let pending = run.pending.values().chain(run.progress.values());
            checkpoints += pending.map(|u| u.update.stored_len()).sum::<usize>();
            for interrupt in &run.interrupts {
                checkpoints += interrupt.payload.to_string().len();
                checkpoints += interrupt.decision.as_ref().map_or(0, |d| d.to_string().len());
            }
            storage.checkpoint_bytes += checkpoints as u64;
            storage.event_bytes += run.events.iter().map(|e| e.json.len() as u64).sum::<u64>();
        }
        Ok(storage)
    }
}

#[async_trait]
impl ScheduleStore for MemoryStore {
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
}

#[async_trait]
impl OutboxStore for MemoryStore {
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
}

#[async_trait]
impl NodeCacheStore for MemoryStore {
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
}

#[async_trait]
impl IdempotencyStore for MemoryStore {
    async fn claim_key(&self, claim: KeyClaim) -> Result<Claimed, StoreError> {
        let mut inner = self.lock();
        let id = (claim.scope.clone(), claim.key.clone());
        if let Some(held) = inner.keys.get(&id).filter(|held| !claim_wins(&claim, Some(held))) {
            return Ok(Claimed::Held(held.clone()));
        }
        let kept = HeldKey::new(claim.fingerprint, claim.made, claim.now_ms, claim.expires_at_ms);
        inner.keys.insert(id, kept);
        Ok(Claimed::Won)
    }

    async fn release_key(&self, scope: &str, key: &str, made: &str) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let id = (scope.to_owned(), key.to_owned());
        if inner.keys.get(&id).is_some_and(|held| held.made == made) {
            inner.keys.remove(&id);
            return Ok(true);
        }
        Ok(false)
    }

    async fn sweep_keys(&self, now_ms: i64, limit: u64) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        let expired: Vec<(String, String)> = inner
            .keys
            .iter()
            .filter(|(_, held)| held.expires_at_ms <= now_ms)
            .map(|(id, _)| id.clone())
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .collect();
        for id in &expired {
            inner.keys.remove(id);
        }
        Ok(expired.len() as u64)
    }
}
