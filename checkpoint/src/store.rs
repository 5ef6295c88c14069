//! The storage contract the engine persists through.

use async_trait::async_trait;

use crate::codec::{Blob, CodecError};
use crate::ids::RunId;
use crate::outbox::{OutboxEntry, OutboxGate, OutboxQuery};
use crate::owner::Owner;
use crate::record::{
    DecisionWrite, EventRecord, HistoryPage, InterruptRecord, NewRun, PageRequest, RunFilter,
    RunPage, RunRecord, RunStatus, StoredCheckpoint, TaskProgress, TaskWrite, ThreadRecord,
    Transition, Waiting,
};
use crate::schedule::{ScheduleFire, ScheduleRecord};

/// Durable home of runs, checkpoints, pending task writes and events.
///
/// Every method is one atomic operation: a [`Transition`] is applied whole
/// or not at all, so after any crash a run is at checkpoint k or k+1. Writes
/// carry the writer's ownership epoch; a writer whose epoch is stale (another
/// process claimed the run) is refused with [`StoreError::Fenced`].
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
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

    /// Stores a thread's record unless one with its id exists. Returns
    /// the stored record: `record` (true) or the one that was there
    /// (false).
    async fn create_thread(&self, record: ThreadRecord)
        -> Result<(ThreadRecord, bool), StoreError>;

    /// A thread's record, if it was created ([`Store::create_thread`]).
    async fn thread_record(&self, thread: &str) -> Result<Option<ThreadRecord>, StoreError>;

    /// Replaces a thread's metadata at `at_ms`; the updated record.
    /// [`StoreError::ThreadNotFound`] when it has no record.
    async fn update_thread(
        &self,
        thread: &str,
        metadata: serde_json::Value,
        at_ms: i64,
    ) -> Result<ThreadRecord, StoreError>;

    /// Thread records, newest first (by creation, then id, descending),
    /// `offset` of them skipped, at most `limit`.
    async fn list_threads(&self, offset: u64, limit: u64) -> Result<Vec<ThreadRecord>, StoreError>;

    /// Removes a thread's record (its runs are the caller's to delete);
    /// whether there was one.
    async fn delete_thread(&self, thread: &str) -> Result<bool, StoreError>;

    /// How many runs wait for a decision (`awaiting_hitl`), and since when
    /// the one that waited longest has waited: what a metrics scrape reads.
    async fn waiting(&self) -> Result<Waiting, StoreError>;

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

    /// Stored events of a run with `seq > after_seq`, oldest first, at most
    /// `limit`.
    async fn events(
        &self,
        run: RunId,
        after_seq: u64,
        limit: u64,
    ) -> Result<Vec<EventRecord>, StoreError>;
}

/// Why a store operation was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No run with this id.
    #[error("run {run} not found")]
    RunNotFound {
        /// The id asked for.
        run: RunId,
    },
    /// A run with this id exists already.
    #[error("run {run} already exists")]
    RunExists {
        /// The id.
        run: RunId,
    },
    /// The thread's latest run is still going: a thread runs one leg at a
    /// time.
    #[error("thread `{thread}` is busy: its latest run {run} is {status}; decide, cancel or wait for it first")]
    ThreadBusy {
        /// The thread.
        thread: String,
        /// Its latest run.
        run: RunId,
        /// That run's status (`running`, `queued` or `awaiting_hitl`).
        status: RunStatus,
    },
    /// Another run of the thread was started since the caller read it.
    #[error(
        "thread `{thread}` moved on: its latest run is {}, not {}; read its state again",
        run_or_none(found),
        run_or_none(expected)
    )]
    ThreadMoved {
        /// The thread.
        thread: String,
        /// The latest run the caller built on.
        expected: Option<RunId>,
        /// The latest run now.
        found: Option<RunId>,
    },
    /// The writer's epoch is not the run's: another process owns the run now.
    #[error("run {run} is owned at epoch {current}; a writer at epoch {writer} was fenced off")]
    Fenced {
        /// The run.
        run: RunId,
        /// The writer's epoch.
        writer: u64,
        /// The run's epoch.
        current: u64,
    },
    /// The committed step does not follow the run's last step.
    #[error("run {run} is at step {current}; step {found} cannot be committed next")]
    StepOutOfOrder {
        /// The run.
        run: RunId,
        /// The run's last committed step.
        current: u64,
        /// The step offered.
        found: u64,
    },
    /// Event sequence numbers must continue the run's sequence without gaps.
    #[error("run {run}: next event must be seq {expected}, got {found}")]
    EventGap {
        /// The run.
        run: RunId,
        /// The next sequence number.
        expected: u64,
        /// The number offered.
        found: u64,
    },
    /// No thread record with this id.
    #[error("thread `{thread}` not found")]
    ThreadNotFound {
        /// The id asked for.
        thread: String,
    },
    /// The run is running: it cannot be deleted.
    #[error("run {run} is running; cancel it before deleting it")]
    RunInFlight {
        /// The run.
        run: RunId,
    },
    /// The run is `completed` or `rejected` and never changes again.
    #[error("run {run} is {status} and cannot change")]
    RunTerminal {
        /// The run.
        run: RunId,
        /// Its terminal status.
        status: RunStatus,
    },
    /// A listing cursor that this store did not hand out.
    #[error("`{cursor}` is not a valid listing cursor")]
    InvalidCursor {
        /// The cursor text.
        cursor: String,
    },
    /// The database is busy beyond every retry (another process holds the
    /// write lock for longer than the store's patience).
    #[error("the store stayed busy for {waited_ms} ms; another process holds the write lock")]
    Busy {
        /// How long the store waited.
        waited_ms: u64,
    },
    /// The run has no checkpoint at this step.
    #[error("run {run} has no checkpoint at step {step}")]
    CheckpointNotFound {
        /// The run.
        run: RunId,
        /// The step asked for.
        step: u64,
    },
    /// The run is not waiting for a decision.
    #[error("run {run} is {status}, not awaiting a decision")]
    NotAwaitingDecision {
        /// The run.
        run: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// No interrupt with this id is open on the run.
    #[error("run {run} has no interrupt `{interrupt}` in its current step")]
    InterruptNotFound {
        /// The run.
        run: RunId,
        /// The id asked for.
        interrupt: String,
    },
    /// The interrupt has a decision already.
    #[error("interrupt `{interrupt}` of run {run} is already answered")]
    InterruptAnswered {
        /// The run.
        run: RunId,
        /// The interrupt.
        interrupt: String,
    },
    /// The database was written by a newer tollgate (its schema version is
    /// beyond this build's).
    #[error("the database schema is version {found}; this build supports up to {supported}: upgrade tollgate")]
    SchemaTooNew {
        /// The database's version.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
    /// SQLite's page size must be a power of two from 512 to 65536.
    #[error("{page_size} is not a valid SQLite page size (a power of two from 512 to 65536)")]
    InvalidPageSize {
        /// The size asked for.
        page_size: u32,
    },
    /// The database could not be put in write-ahead-log mode (an in-memory
    /// or read-only file, or a file system without shared memory).
    #[error("the database is in journal mode `{mode}`; the store needs WAL")]
    WalUnavailable {
        /// The journal mode SQLite reported.
        mode: String,
    },
    /// The database holds tables of another application: tollgate writes
    /// nothing to it (use an empty database, or a schema of its own).
    #[error("the database holds tables that are not tollgate's ({tables}); use an empty database or a schema of tollgate's own")]
    ForeignDatabase {
        /// Some of the tables found, comma-separated.
        tables: String,
    },
    /// The database's schema version is one no tollgate writes (negative,
    /// or 0 with tables in it): it is not a tollgate database.
    #[error("the database's schema version (user_version) is {found}, which no tollgate writes: this is not a tollgate database; use an empty file")]
    UnknownSchemaVersion {
        /// The version found.
        found: i64,
    },
    /// The database server cannot be reached or refused the connection
    /// (down, unreachable, wrong password). Transient causes may clear.
    #[error("the database is unavailable: {source}")]
    Unavailable {
        /// The client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Every connection of the store's pool stayed in use for as long as a
    /// call may wait for one: more calls at once than the pool holds.
    #[error("all {size} connections of the store's pool stayed in use for {waited_ms} ms; raise the pool size (and the database's max_connections) or run fewer legs at once")]
    PoolExhausted {
        /// The pool's size.
        size: usize,
        /// How long the call waited.
        waited_ms: u64,
    },
    /// The connection URL or an option is not valid.
    #[error("invalid database settings: {source}")]
    InvalidSettings {
        /// What was wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The backend failed (disk full, I/O error, a damaged database file).
    #[error("the store failed: {source}")]
    Backend {
        /// The backend's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A schedule with this id exists already.
    #[error("schedule `{schedule}` already exists; delete it first or choose another id")]
    ScheduleExists {
        /// The id.
        schedule: String,
    },
    /// No schedule with this id.
    #[error("schedule `{schedule}` not found")]
    ScheduleNotFound {
        /// The id asked for.
        schedule: String,
    },
    /// The schedule's next tick is not the one the firing process read:
    /// another process fired it (or it was replaced) since.
    #[error("schedule `{schedule}` moved on: its next tick is {}, not {expected}", found.map_or_else(|| "none".to_owned(), |at| at.to_string()))]
    ScheduleMoved {
        /// The schedule.
        schedule: String,
        /// The tick the caller read (milliseconds since the Unix epoch).
        expected: i64,
        /// Its next tick now.
        found: Option<i64>,
    },
    /// A stored blob failed its checksum or is cut short.
    #[error("run {run}: checkpoint at step {step} is corrupt: {source}")]
    CorruptCheckpoint {
        /// The run.
        run: RunId,
        /// The step whose record is damaged.
        step: u64,
        /// What was wrong.
        #[source]
        source: CodecError,
    },
}

impl StoreError {
    /// Stable snake_case name of the variant (a metric label, a log field).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::RunNotFound { .. } => "run_not_found",
            StoreError::RunExists { .. } => "run_exists",
            StoreError::ThreadBusy { .. } => "thread_busy",
            StoreError::ThreadMoved { .. } => "thread_moved",
            StoreError::Fenced { .. } => "fenced",
            StoreError::StepOutOfOrder { .. } => "step_out_of_order",
            StoreError::EventGap { .. } => "event_gap",
            StoreError::ThreadNotFound { .. } => "thread_not_found",
            StoreError::RunInFlight { .. } => "run_in_flight",
            StoreError::RunTerminal { .. } => "run_terminal",
            StoreError::InvalidCursor { .. } => "invalid_cursor",
            StoreError::Busy { .. } => "busy",
            StoreError::CheckpointNotFound { .. } => "checkpoint_not_found",
            StoreError::NotAwaitingDecision { .. } => "not_awaiting_decision",
            StoreError::InterruptNotFound { .. } => "interrupt_not_found",
            StoreError::InterruptAnswered { .. } => "interrupt_answered",
            StoreError::SchemaTooNew { .. } => "schema_too_new",
            StoreError::InvalidPageSize { .. } => "invalid_page_size",
            StoreError::WalUnavailable { .. } => "wal_unavailable",
            StoreError::ForeignDatabase { .. } => "foreign_database",
            StoreError::UnknownSchemaVersion { .. } => "unknown_schema_version",
            StoreError::Unavailable { .. } => "unavailable",
            StoreError::PoolExhausted { .. } => "pool_exhausted",
            StoreError::InvalidSettings { .. } => "invalid_settings",
            StoreError::Backend { .. } => "backend",
            StoreError::CorruptCheckpoint { .. } => "corrupt_checkpoint",
            StoreError::ScheduleExists { .. } => "schedule_exists",
            StoreError::ScheduleNotFound { .. } => "schedule_not_found",
            StoreError::ScheduleMoved { .. } => "schedule_moved",
        }
    }
}

/// A run id, or `none` (a thread with no run yet), for messages.
fn run_or_none(run: &Option<RunId>) -> String {
    run.map_or_else(|| "none".to_owned(), |run| run.to_string())
}
