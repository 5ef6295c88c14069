//! Why a store operation was refused or failed: [`StoreError`], shared by
//! the contract (`store.rs`), the records and every backend.

use crate::codec::CodecError;
use crate::ids::RunId;
use crate::status::RunStatus;

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
