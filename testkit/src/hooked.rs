//! A store wrapper with hooks, for tests that watch or tamper with what the
//! engine stores.

use async_trait::async_trait;
use tollgate_checkpoint::{
    Blob, Claimed, DecisionWrite, EventRecord, HistoryPage, IdempotencyStore, InterruptRecord,
    KeyClaim, NewRun, NodeCacheStore, OutboxEntry, OutboxGate, OutboxQuery, OutboxStore, Owner,
    PageRequest, RunFilter, RunId, RunPage, RunRecord, RunStatus, RunStore, ScheduleFire,
    ScheduleRecord, ScheduleStore, Store, StoreError, StoredCheckpoint, TaskProgress, TaskWrite,
    ThreadQuery, ThreadRecord, ThreadStorage, ThreadStore, Transition, Waiting,
};

/// What a [`HookedStore`] calls around the wrapped store. Every hook has a
/// default that does nothing; `after_*` hooks run only when the operation
/// succeeded (the database acknowledged it).
pub trait StoreHooks: Send + Sync + std::fmt::Debug + 'static {
    /// Any operation is about to be passed on: the `Store` method's name
    /// (`"create_run"`, `"commit"`, `"checkpoint"`, …), whether it then
    /// succeeds or not. Called before the operation's other hooks.
    fn called(&self, _operation: &'static str) {}
    /// A run was created.
    fn after_create(&self, _run: RunId) {}
    /// A transition is about to be committed.
    fn before_commit(&self, _transition: &Transition) {}
    /// A transition was committed: its run, step (if it ran one) and status.
    fn after_commit(&self, _run: RunId, _step: Option<u64>, _status: RunStatus) {}
    /// Pending task writes were stored: (step, task) of each.
    fn after_task_writes(&self, _tasks: &[(u64, u32)]) {}
    /// A subgraph's progress was stored: (step, task) and the record.
    fn after_task_progress(&self, _task: (u64, u32), _progress: &Blob) {}
    /// A checkpoint was read; return it as the engine should see it (to
    /// damage it, say).
    fn on_checkpoint(&self, checkpoint: StoredCheckpoint) -> StoredCheckpoint {
        checkpoint
    }
}

/// Wraps a store, calling `hooks` around its operations; everything else is
/// delegated unchanged.
#[derive(Debug)]
pub struct HookedStore<S, H> {
    inner: S,
    hooks: H,
}

impl<S: Store, H: StoreHooks> HookedStore<S, H> {
    /// `inner` with `hooks`.
    pub fn new(inner: S, hooks: H) -> Self {
        Self { inner, hooks }
    }

    /// The hooks (to read what they recorded).
    pub fn hooks(&self) -> &H {
        &self.hooks
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

#[async_trait]
impl<S: Store, H: StoreHooks> RunStore for HookedStore<S, H> {
    async fn create_run(&self, run: NewRun) -> Result<u64, StoreError> {
        self.hooks.called("create_run");
        let id = run.id;
        let epoch = self.inner.create_run(run).await?;
        self.hooks.after_create(id);
        Ok(epoch)
    }

    async fn commit(&self, transition: Transition) -> Result<(), StoreError> {
        self.hooks.called("commit");
        self.hooks.before_commit(&transition);
        let (run, step, status) =
            (transition.run, transition.step.as_ref().map(|s| s.step), transition.status);
        self.inner.commit(transition).await?;
        self.hooks.after_commit(run, step, status);
        Ok(())
    }

    async fn put_task_writes(&self, write: TaskWrite) -> Result<(), StoreError> {
        self.hooks.called("put_task_writes");
        let tasks: Vec<(u64, u32)> =
            write.updates.iter().map(|u| (u.task.step, u.task.index)).collect();
        self.inner.put_task_writes(write).await?;
        self.hooks.after_task_writes(&tasks);
        Ok(())
    }

    async fn put_task_progress(&self, progress: TaskProgress) -> Result<(), StoreError> {
        self.hooks.called("put_task_progress");
        let task = (progress.progress.task.step, progress.progress.task.index);
        let record = progress.progress.update.clone();
        self.inner.put_task_progress(progress).await?;
        self.hooks.after_task_progress(task, &record);
        Ok(())
    }

    async fn claim(
        &self,
        run: RunId,
        epoch: u64,
        owner: Owner,
        until: i64,
    ) -> Result<u64, StoreError> {
        self.hooks.called("claim");
        self.inner.claim(run, epoch, owner, until).await
    }

    async fn renew(&self, run: RunId, epoch: u64, until: i64) -> Result<(), StoreError> {
        self.hooks.called("renew");
        self.inner.renew(run, epoch, until).await
    }

    async fn run(&self, run: RunId) -> Result<RunRecord, StoreError> {
        self.hooks.called("run");
        self.inner.run(run).await
    }

    async fn checkpoint(
        &self,
        run: RunId,
        at: Option<u64>,
    ) -> Result<StoredCheckpoint, StoreError> {
        self.hooks.called("checkpoint");
        Ok(self.hooks.on_checkpoint(self.inner.checkpoint(run, at).await?))
    }

    async fn interrupts(&self, run: RunId) -> Result<Vec<InterruptRecord>, StoreError> {
        self.hooks.called("interrupts");
        self.inner.interrupts(run).await
    }

    async fn decide(&self, write: DecisionWrite) -> Result<u64, StoreError> {
        self.hooks.called("decide");
        self.inner.decide(write).await
    }

    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> Result<RunPage, StoreError> {
        self.hooks.called("list_runs");
        self.inner.list_runs(filter, page).await
    }

    async fn history(
        &self,
        run: RunId,
        before: Option<u64>,
        limit: u64,
    ) -> Result<HistoryPage, StoreError> {
        self.hooks.called("history");
        self.inner.history(run, before, limit).await
    }

    async fn attachment(&self, run: RunId) -> Result<Option<String>, StoreError> {
        self.hooks.called("attachment");
        self.inner.attachment(run).await
    }

    async fn delete_run(&self, run: RunId) -> Result<(), StoreError> {
        self.hooks.called("delete_run");
        self.inner.delete_run(run).await
    }

    async fn waiting(&self) -> Result<Waiting, StoreError> {
        self.hooks.called("waiting");
        self.inner.waiting().await
    }

    async fn events(
        &self,
        run: RunId,
        after: u64,
        limit: u64,
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.hooks.called("events");
        self.inner.events(run, after, limit).await
    }

    async fn claimable(&self, now_ms: i64, limit: u64) -> Result<Vec<RunRecord>, StoreError> {
        self.hooks.called("claimable");
        self.inner.claimable(now_ms, limit).await
    }
}

#[async_trait]
impl<S: Store, H: StoreHooks> ThreadStore for HookedStore<S, H> {
    async fn create_thread(
        &self,
        record: ThreadRecord,
    ) -> Result<(ThreadRecord, bool), StoreError> {
        self.hooks.called("create_thread");
        self.inner.create_thread(record).await
    }

    async fn thread_record(&self, thread: &str) -> Result<Option<ThreadRecord>, StoreError> {
        self.hooks.called("thread_record");
        self.inner.thread_record(thread).await
    }

    async fn update_thread(
        &self,
        thread: &str,
        metadata: serde_json::Value,
        at_ms: i64,
    ) -> Result<ThreadRecord, StoreError> {
        self.hooks.called("update_thread");
        self.inner.update_thread(thread, metadata, at_ms).await
    }

    async fn search_threads(&self, query: &ThreadQuery) -> Result<Vec<ThreadRecord>, StoreError> {
        self.hooks.called("search_threads");
        self.inner.search_threads(query).await
    }

    async fn set_thread_reviewers(
        &self,
        thread: &str,
        reviewers: &[String],
    ) -> Result<bool, StoreError> {
        self.hooks.called("set_thread_reviewers");
        self.inner.set_thread_reviewers(thread, reviewers).await
    }

    async fn delete_thread(&self, thread: &str) -> Result<bool, StoreError> {
        self.hooks.called("delete_thread");
        self.inner.delete_thread(thread).await
    }

    async fn expired_threads(&self, now_ms: i64, limit: u64) -> Result<Vec<String>, StoreError> {
        self.hooks.called("expired_threads");
        self.inner.expired_threads(now_ms, limit).await
    }

    async fn thread_storage(&self, thread: &str) -> Result<ThreadStorage, StoreError> {
        self.hooks.called("thread_storage");
        self.inner.thread_storage(thread).await
    }
}

#[async_trait]
impl<S: Store, H: StoreHooks> ScheduleStore for HookedStore<S, H> {
    async fn create_schedule(&self, schedule: ScheduleRecord) -> Result<(), StoreError> {
        self.hooks.called("create_schedule");
        self.inner.create_schedule(schedule).await
    }

    async fn schedule(&self, id: &str) -> Result<Option<ScheduleRecord>, StoreError> {
        self.hooks.called("schedule");
        self.inner.schedule(id).await
    }

    async fn list_schedules(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.hooks.called("list_schedules");
        self.inner.list_schedules(offset, limit).await
    }

    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError> {
        self.hooks.called("delete_schedule");
        self.inner.delete_schedule(id).await
    }

    async fn due_schedules(
        &self,
        now_ms: i64,
        limit: u64,
    ) -> Result<Vec<ScheduleRecord>, StoreError> {
        self.hooks.called("due_schedules");
        self.inner.due_schedules(now_ms, limit).await
    }

    async fn fire_schedule(&self, fire: ScheduleFire) -> Result<(), StoreError> {
        self.hooks.called("fire_schedule");
        self.inner.fire_schedule(fire).await
    }
}

#[async_trait]
impl<S: Store, H: StoreHooks> OutboxStore for HookedStore<S, H> {
    async fn put_outbox(&self, entry: OutboxEntry) -> Result<(), StoreError> {
        self.hooks.called("put_outbox");
        self.inner.put_outbox(entry).await
    }

    async fn outbox_entry(&self, id: &str) -> Result<Option<OutboxEntry>, StoreError> {
        self.hooks.called("outbox_entry");
        self.inner.outbox_entry(id).await
    }

    async fn list_outbox(&self, query: OutboxQuery) -> Result<Vec<OutboxEntry>, StoreError> {
        self.hooks.called("list_outbox");
        self.inner.list_outbox(query).await
    }

    async fn take_outbox(
        &self,
        id: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<Option<OutboxEntry>, StoreError> {
        self.hooks.called("take_outbox");
        self.inner.take_outbox(id, now_ms, lease_until_ms).await
    }

    async fn delete_outbox(&self, id: &str) -> Result<bool, StoreError> {
        self.hooks.called("delete_outbox");
        self.inner.delete_outbox(id).await
    }

    async fn gate_outbox(&self, ids: &[String], gate: OutboxGate) -> Result<u64, StoreError> {
        self.hooks.called("gate_outbox");
        self.inner.gate_outbox(ids, gate).await
    }
}

#[async_trait]
impl<S: Store, H: StoreHooks> NodeCacheStore for HookedStore<S, H> {
    async fn cache_get(
        &self,
        scope: &str,
        key: &str,
        now_ms: i64,
    ) -> Result<Option<Blob>, StoreError> {
        self.hooks.called("cache_get");
        self.inner.cache_get(scope, key, now_ms).await
    }

    async fn cache_put(
        &self,
        scope: &str,
        key: &str,
        value: Blob,
        expires_at_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.hooks.called("cache_put");
        self.inner.cache_put(scope, key, value, expires_at_ms, now_ms).await
    }
}

#[async_trait]
impl<S: Store, H: StoreHooks> IdempotencyStore for HookedStore<S, H> {
    async fn claim_key(&self, claim: KeyClaim) -> Result<Claimed, StoreError> {
        self.hooks.called("claim_key");
        self.inner.claim_key(claim).await
    }

    async fn release_key(&self, scope: &str, key: &str, made: &str) -> Result<bool, StoreError> {
        self.hooks.called("release_key");
        self.inner.release_key(scope, key, made).await
    }

    async fn sweep_keys(&self, now_ms: i64, limit: u64) -> Result<u64, StoreError> {
        self.hooks.called("sweep_keys");
        self.inner.sweep_keys(now_ms, limit).await
    }
}
