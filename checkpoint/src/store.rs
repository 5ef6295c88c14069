//! The storage contract the engine persists through.

use async_trait::async_trait;

use crate::codec::Blob;
use crate::error::StoreError;
use crate::ids::RunId;
use crate::keys::{Claimed, KeyClaim};
use crate::listing::{
    PageRequest, RunFilter, RunPage, ThreadQuery, ThreadRecord, ThreadStorage, Waiting,
};
use crate::outbox::{OutboxEntry, OutboxGate, OutboxQuery};
use crate::owner::Owner;
use crate::record::{
    DecisionWrite, EventRecord, HistoryPage, InterruptRecord, NewRun, RunRecord, StoredCheckpoint,
    TaskProgress, TaskWrite, Transition,
};
use crate::schedule::{ScheduleFire, ScheduleRecord};

/// Durable home of runs, checkpoints, pending task writes and events, with
/// the thread records, schedules, outbox and node cache that live beside
/// them: one trait per table ([`RunStore`], [`ThreadStore`],
/// [`ScheduleStore`], [`OutboxStore`], [`NodeCacheStore`],
/// [`IdempotencyStore`]), each backend implementing each in the file of
/// that table. Any type that implements all six is a `Store`; the engine and the server hold an
/// `Arc<dyn Store>`. Each trait's conformance cases pin a backend that
/// implements only that part (`conformance::check_run_store` and the
/// others).
pub trait Store:
    RunStore + ThreadStore + ScheduleStore + OutboxStore + NodeCacheStore + IdempotencyStore
{
}

impl<T> Store for T where
    T: RunStore + ThreadStore + ScheduleStore + OutboxStore + NodeCacheStore + IdempotencyStore
{
}

/// Runs: their records, checkpoints, pending task writes, decisions and
/// events; claims, leases and the queue.
///
/// Every method is one atomic operation: a [`Transition`] is applied whole
/// or not at all, so after any crash a run is at checkpoint k or k+1. Writes
/// carry the writer's ownership epoch; a writer whose epoch is stale (another
/// process claimed the run) is refused with [`StoreError::Fenced`].
#[async_trait]
pub trait RunStore: Send + Sync + std::fmt::Debug + 'static {
    /// Creates a run with its input checkpoint, owned by the caller at
    /// epoch 1, status `running`. Returns the epoch.
    async fn create_run(&self, run: NewRun) -> Result<u64, StoreError>;

    /// Applies one transition atomically: step record, frontier, status,
    /// failure and events. Clears the pending writes of the step it commits.
    async fn commit(&self, transition: Transition) -> Result<(), StoreError>;

    /// Stores finished tasks' updates ahead of their step's commit, all or
    /// none. Writing the same task twice keeps the first write.
    async fn put_task_writes(&self, write: TaskWrite) -> Result<(), StoreError>;

    /// Replaces the progress record of one task of the step in flight (a
    /// subgraph's own checkpoint) and appends `events` to the run's log,
    /// all or none, fenced like every write. The last record written is
    /// read back with the checkpoint ([`StoredCheckpoint::progress`]); the
    /// step's commit drops it.
    async fn put_task_progress(&self, progress: TaskProgress) -> Result<(), StoreError>;

    /// Takes ownership of a run that is not terminal, to continue it, if
    /// its epoch is still `expected_epoch` (compare-and-set: of two
    /// claimers exactly one wins, the other gets [`StoreError::Fenced`]).
    /// Sets it `running` under `owner` until `lease_until_ms` and returns
    /// the new epoch, which fences off every earlier owner.
    async fn claim(
        &self,
        run: RunId,
        expected_epoch: u64,
        owner: Owner,
        lease_until_ms: i64,
    ) -> Result<u64, StoreError>;

    /// Extends the lease of the owner at `epoch`.
    async fn renew(&self, run: RunId, epoch: u64, lease_until_ms: i64) -> Result<(), StoreError>;

    /// The run's record.
    async fn run(&self, run: RunId) -> Result<RunRecord, StoreError>;

    /// The run's checkpoint at step `at` (its last when `None`): newest
    /// snapshot at or before it, the deltas after that snapshot up to it,
    /// its frontier, and (for the last checkpoint only) pending writes and
    /// the interrupts of the step in flight, all from one consistent read.
    async fn checkpoint(&self, run: RunId, at: Option<u64>)
        -> Result<StoredCheckpoint, StoreError>;

    /// The interrupts of the step in flight (answered or not), in the order
    /// they were raised.
    async fn interrupts(&self, run: RunId) -> Result<Vec<InterruptRecord>, StoreError>;

    /// Records a decision: compare-and-set on the run's epoch, which it
    /// increments. Refused (and nothing changes) when the epoch moved, the
    /// run is not awaiting a decision, or the interrupt is unknown or
    /// already answered. Returns the new epoch.
    async fn decide(&self, write: DecisionWrite) -> Result<u64, StoreError>;

    /// Runs matching `filter`, newest first, one page.
    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> Result<RunPage, StoreError>;

    /// The run's checkpoints, newest first: those before step `before`
    /// (all when `None`), at most `limit`.
    async fn history(
        &self,
        run: RunId,
        before: Option<u64>,
        limit: u64,
    ) -> Result<HistoryPage, StoreError>;

    /// The JSON text the run was created with ([`NewRun::attachment`]).
    async fn attachment(&self, run: RunId) -> Result<Option<String>, StoreError>;

    /// Runs no process drives, for workers, oldest first, at most `limit`:
    /// `queued` runs, then `running` runs whose lease expired before
    /// `now_ms` (an owner on this host that died with a lease still
    /// running is found by listing `running` runs and
    /// [`RunRecord::is_orphaned`]).
    async fn claimable(&self, now_ms: i64, limit: u64) -> Result<Vec<RunRecord>, StoreError>;

    /// Removes every row of a run (record, steps, snapshots, pending
    /// writes, interrupts, events, attachment), in one transaction. A
    /// `running` run is refused with [`StoreError::RunInFlight`] (cancel it
    /// first), and nothing changes.
    async fn delete_run(&self, run: RunId) -> Result<(), StoreError>;

    /// How many runs wait for a decision (`awaiting_hitl`), and since when
    /// the one that waited longest has waited: what a metrics scrape reads.
    async fn waiting(&self) -> Result<Waiting, StoreError>;

    /// Stored events of a run with `seq > after_seq`, oldest first, at most
    /// `limit`.
    async fn events(
        &self,
        run: RunId,
        after_seq: u64,
        limit: u64,
    ) -> Result<Vec<EventRecord>, StoreError>;
}

/// Thread records: a thread's metadata, kept apart from its runs.
#[async_trait]
pub trait ThreadStore: Send + Sync + std::fmt::Debug + 'static {
    /// Stores a thread's record unless one with its id exists. Returns
    /// the stored record: `record` (true) or the one that was there
    /// (false).
    async fn create_thread(&self, record: ThreadRecord)
        -> Result<(ThreadRecord, bool), StoreError>;

    /// A thread's record, if it was created ([`ThreadStore::create_thread`]).
    async fn thread_record(&self, thread: &str) -> Result<Option<ThreadRecord>, StoreError>;

    /// Replaces a thread's metadata at `at_ms`; the updated record.
    /// [`StoreError::ThreadNotFound`] when it has no record.
    async fn update_thread(
        &self,
        thread: &str,
        metadata: serde_json::Value,
        at_ms: i64,
    ) -> Result<ThreadRecord, StoreError>;

    /// The thread records `query` asks for, newest first (by creation,
    /// then id, descending). A thread's status follows its latest run
    /// ([`ThreadStatus::of`](crate::ThreadStatus::of)) as the store keeps
    /// it, in the transaction that changes the run; searches by status
    /// and by scalar metadata values read indexes, so a page costs what
    /// it returns, not the number of threads.
    async fn search_threads(&self, query: &ThreadQuery) -> Result<Vec<ThreadRecord>, StoreError>;

    /// Sets the groups that review `thread`'s runs
    /// ([`ThreadRecord::reviewers`]), replacing those it had; whether it
    /// has a record (a thread without one is left as it is).
    async fn set_thread_reviewers(
        &self,
        thread: &str,
        reviewers: &[String],
    ) -> Result<bool, StoreError>;

    /// Removes a thread's record (its runs are the caller's to delete);
    /// whether there was one.
    async fn delete_thread(&self, thread: &str) -> Result<bool, StoreError>;

    /// At most `limit` threads whose time to live ran out by `now_ms`:
    /// records with a [`ThreadRecord::ttl_ms`] whose status is `idle` or
    /// `error` (never one with a run in flight or waiting for a decision)
    /// and whose last change (the record's, or its latest run's) is at
    /// least `ttl_ms` before `now_ms`. For the caller to remove.
    async fn expired_threads(&self, now_ms: i64, limit: u64) -> Result<Vec<String>, StoreError>;

    /// What the runs of `thread` occupy: their number, and the bytes of
    /// their checkpoints and of their events (all zero for a thread
    /// without runs).
    async fn thread_storage(&self, thread: &str) -> Result<ThreadStorage, StoreError>;
}

/// Schedules: what starts runs on a timetable, fired once per tick
/// across processes.
#[async_trait]
pub trait ScheduleStore: Send + Sync + std::fmt::Debug + 'static {
    /// Adds a schedule; [`StoreError::ScheduleExists`] when its id is
    /// taken, nothing written.
    async fn create_schedule(&self, schedule: ScheduleRecord) -> Result<(), StoreError>;

    /// The schedule `id`, if there is one.
    async fn schedule(&self, id: &str) -> Result<Option<ScheduleRecord>, StoreError>;

    /// Schedules by id, skipping `offset`, at most `limit`.
    async fn list_schedules(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<Vec<ScheduleRecord>, StoreError>;

    /// Deletes a schedule (its runs stay); `false` when there was none.
    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError>;

    /// Schedules whose next tick is at or before `now_ms`, the most
    /// overdue first, at most `limit`.
    async fn due_schedules(
        &self,
        now_ms: i64,
        limit: u64,
    ) -> Result<Vec<ScheduleRecord>, StoreError>;

    /// Fires a schedule: moves its next tick and creates the run, in one
    /// transaction, if its next tick is still `fire.expected_next_ms`;
    /// otherwise [`StoreError::ScheduleMoved`] (another process fired
    /// it) or [`StoreError::ScheduleNotFound`], nothing written.
    async fn fire_schedule(&self, fire: ScheduleFire) -> Result<(), StoreError>;
}

/// The outbox: deferred work (runs waiting to start, webhook deliveries)
/// taken by one process at a time, gated on a run's status.
#[async_trait]
pub trait OutboxStore: Send + Sync + std::fmt::Debug + 'static {
    /// Stores an outbox entry, replacing the one with its id if any (the
    /// caller that took an entry writes it back so, with its new due
    /// time, lease or body).
    async fn put_outbox(&self, entry: OutboxEntry) -> Result<(), StoreError>;

    /// The outbox entry `id`, if there is one.
    async fn outbox_entry(&self, id: &str) -> Result<Option<OutboxEntry>, StoreError>;

    /// The outbox entries `query` asks for, the earliest due first (then
    /// by id), at most `query.limit`.
    async fn list_outbox(&self, query: OutboxQuery) -> Result<Vec<OutboxEntry>, StoreError>;

    /// Takes entry `id` until `lease_until_ms` unless a process holds it
    /// at `now_ms` ([`OutboxEntry::is_held`]; due or not: that is the
    /// lister's to check), counting the attempt, in one compare-and-set:
    /// the entry as taken, or `None` when it is gone or held.
    async fn take_outbox(
        &self,
        id: &str,
        now_ms: i64,
        lease_until_ms: i64,
    ) -> Result<Option<OutboxEntry>, StoreError>;

    /// Deletes outbox entry `id`; whether there was one.
    async fn delete_outbox(&self, id: &str) -> Result<bool, StoreError>;

    /// Gates the entries `ids` that are not gated yet on `gate`, each only
    /// while the gate stays shut: its run exists and keeps it shut
    /// ([`OutboxGate::blocks`]), or does not exist yet while an outbox
    /// entry with the run's id is due to start it (before
    /// [`OUTBOX_NEVER`](crate::OUTBOX_NEVER)). The check and the gate are
    /// one step no status change of the run slips between. How many were
    /// gated (0: the gate is open, the caller goes on).
    ///
    /// A gated entry is not [ready](OutboxQuery::ready) until the store
    /// opens its gate, which it does in the same transaction as what opens
    /// it: the run's status change, the run's deletion, or the deletion
    /// (or due time set to never) of the entry with the run's id.
    async fn gate_outbox(&self, ids: &[String], gate: OutboxGate) -> Result<u64, StoreError>;
}

/// Node caching: a node's output kept under its input's key until it
/// expires.
#[async_trait]
pub trait NodeCacheStore: Send + Sync + std::fmt::Debug + 'static {
    /// A node's cached output under `key` in `scope` (a graph's node), if
    /// one is stored and has not expired at `now_ms`.
    async fn cache_get(
        &self,
        scope: &str,
        key: &str,
        now_ms: i64,
    ) -> Result<Option<Blob>, StoreError>;

    /// Stores a node's output under `key` in `scope` until `expires_at_ms`,
    /// replacing any; entries of `scope` that expired by `now_ms` are
    /// removed.
    async fn cache_put(
        &self,
        scope: &str,
        key: &str,
        value: Blob,
        expires_at_ms: i64,
        now_ms: i64,
    ) -> Result<(), StoreError>;
}

/// Request keys ([`KeyClaim`](crate::KeyClaim)): the first request with a key
/// claims it for what it makes; a retry finds what that is.
#[async_trait]
pub trait IdempotencyStore: Send + Sync + std::fmt::Debug + 'static {
    /// Claims `claim.key` in `claim.scope` for `claim.made`: won when no
    /// request holds the key, when it expired by `claim.now_ms`, or when
    /// it is held for [`KeyClaim::replacing`]; else the holder. Of any
    /// number of claims at once, in any processes, one wins.
    async fn claim_key(&self, claim: KeyClaim) -> Result<Claimed, StoreError>;

    /// Releases the key if it is still held for `made` (its claimer did
    /// not make it). Returns whether it was.
    async fn release_key(&self, scope: &str, key: &str, made: &str) -> Result<bool, StoreError>;

    /// Removes at most `limit` keys that expired by `now_ms`; returns how
    /// many.
    async fn sweep_keys(&self, now_ms: i64, limit: u64) -> Result<u64, StoreError>;
}
