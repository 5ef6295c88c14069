//! Stored schedules: runs of one graph from one input, started on the ticks
//! of a cron expression or once at a time ([`ScheduleRecord`]), and the
//! write that starts one ([`ScheduleFire`]).

use serde::{Deserialize, Serialize};

use crate::codec::Blob;
use crate::error::StoreError;
use crate::ids::RunId;
use crate::record::{GraphRef, NewRun};

/// When a schedule starts runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ScheduleTiming {
    /// On every tick of a cron expression, read in UTC (five fields,
    /// `minute hour day-of-month month day-of-week`, or six with seconds
    /// first). The store keeps the text; the engine reads it.
    Cron {
        /// The expression.
        expression: String,
    },
    /// Once, at a time (milliseconds since the Unix epoch).
    At {
        /// The time.
        at_ms: i64,
    },
}

/// What a schedule does with ticks that came while no process fired it
/// (every worker and server down, or busy beyond the schedule's grace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MissedTicks {
    /// One run for all the ticks missed together, started when a process
    /// comes back; then the schedule keeps to its ticks.
    #[default]
    RunOnce,
    /// No run for missed ticks: the schedule waits for its next tick.
    Skip,
}

impl MissedTicks {
    /// The policy's name (`run_once`, `skip`).
    pub fn as_str(self) -> &'static str {
        match self {
            MissedTicks::RunOnce => "run_once",
            MissedTicks::Skip => "skip",
        }
    }
}

impl std::str::FromStr for MissedTicks {
    type Err = InvalidMissedTicks;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "run_once" | "run-once" => Ok(MissedTicks::RunOnce),
            "skip" => Ok(MissedTicks::Skip),
            _ => Err(InvalidMissedTicks { text: s.to_owned() }),
        }
    }
}

/// The text is not a missed-ticks policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a missed-ticks policy (run_once, skip)")]
pub struct InvalidMissedTicks {
    /// The rejected text.
    pub text: String,
}

/// A stored schedule: what its runs start from (the input checkpoint and
/// first frontier, encoded once when it was added, so that any process
/// can start a run of it without the graph), when, and what it did so far.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ScheduleRecord {
    /// Its id: a name chosen by whoever added it, unique in the store.
    pub id: String,
    /// The graph its runs are pinned to.
    pub graph: GraphRef,
    /// When it starts runs.
    pub timing: ScheduleTiming,
    /// What it does with missed ticks.
    pub missed: MissedTicks,
    /// How late a tick may be fired and still count as on time
    /// (milliseconds): a tick older than this when a process fires it is
    /// missed.
    pub grace_ms: u64,
    /// The input of its runs, as JSON (shown; runs start from `snapshot`).
    pub input: serde_json::Value,
    /// The input state of every run: its snapshot of step 0.
    pub snapshot: Blob,
    /// The first frontier of every run.
    pub frontier: Blob,
    /// Kept with every run ([`NewRun::attachment`]).
    pub attachment: Option<String>,
    /// When it was added, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Its next tick; `None` once it has none left (a time that passed).
    pub next_at_ms: Option<i64>,
    /// The last run it started.
    pub last_run: Option<RunId>,
    /// When it last fired (started a run or skipped ticks).
    pub last_fired_at_ms: Option<i64>,
    /// Runs it started.
    pub runs_started: u64,
    /// Ticks it skipped ([`MissedTicks::Skip`], or the ticks one
    /// [`MissedTicks::RunOnce`] run stood for beyond the first).
    pub ticks_skipped: u64,
    /// JSON kept with it and never read by tollgate (an empty object by
    /// default; the LangGraph API keeps a cron's metadata and payload
    /// here).
    pub metadata: serde_json::Value,
}

/// How late a tick may fire and still be on time, unless a schedule says
/// otherwise: a minute.
pub const DEFAULT_GRACE_MS: u64 = 60_000;

impl ScheduleRecord {
    /// Schedule `id` of `graph`, its runs starting from `snapshot` and
    /// `frontier` (the encoded `input`), added at `created_at_ms` with its
    /// first tick at `next_at_ms`; missed ticks run once, a grace of
    /// [`DEFAULT_GRACE_MS`], no attachment, nothing fired yet.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: impl Into<String>,
        graph: GraphRef,
        timing: ScheduleTiming,
        input: serde_json::Value,
        snapshot: Blob,
        frontier: Blob,
        created_at_ms: i64,
        next_at_ms: Option<i64>,
    ) -> Self {
        Self {
            id: id.into(),
            graph,
            timing,
            missed: MissedTicks::default(),
            grace_ms: DEFAULT_GRACE_MS,
            input,
            snapshot,
            frontier,
            attachment: None,
            created_at_ms,
            next_at_ms,
            last_run: None,
            last_fired_at_ms: None,
            runs_started: 0,
            ticks_skipped: 0,
            metadata: serde_json::Value::Object(serde_json::Map::new()),
        }
    }

    /// The run a fire starts: `id`, created at `at_ms`, queued for a
    /// worker, from the schedule's input.
    pub fn new_run(&self, id: RunId, at_ms: i64) -> NewRun {
        NewRun {
            id,
            graph: self.graph.clone(),
            thread: None,
            created_at_ms: at_ms,
            snapshot: self.snapshot.clone(),
            frontier: self.frontier.clone(),
            events: Vec::new(),
            claim: None,
            attachment: self.attachment.clone(),
            thread_turn: None,
            trace: None,
        }
    }
}

/// Version of the stored spec's JSON.
const SPEC_VERSION: u32 = 1;

/// A schedule's timing and policy as stored: a JSON text with its version.
#[derive(Serialize, Deserialize)]
struct StoredSpec {
    v: u32,
    timing: ScheduleTiming,
    missed: MissedTicks,
    grace_ms: u64,
    #[serde(default = "empty_object", skip_serializing_if = "is_empty_object")]
    metadata: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

fn is_empty_object(value: &serde_json::Value) -> bool {
    value.as_object().is_some_and(serde_json::Map::is_empty)
}

/// One schedule as a database row: what the SQL stores write and read
/// back (not part of the API).
#[doc(hidden)]
#[derive(Debug)]
#[allow(missing_docs)]
pub struct ScheduleRow {
    pub id: String,
    pub graph: String,
    pub version: i64,
    pub spec: String,
    pub input: String,
    pub snapshot: Vec<u8>,
    pub frontier: Vec<u8>,
    pub attachment: Option<String>,
    pub created_at_ms: i64,
    pub next_at_ms: Option<i64>,
    pub last_run: Option<String>,
    pub last_fired_at_ms: Option<i64>,
    pub runs_started: i64,
    pub ticks_skipped: i64,
}

impl ScheduleRow {
    /// The row of `record`.
    pub fn encode(record: &ScheduleRecord) -> Result<Self, StoreError> {
        let backend = |error: serde_json::Error| StoreError::Backend { source: Box::new(error) };
        let spec = StoredSpec {
            v: SPEC_VERSION,
            timing: record.timing.clone(),
            missed: record.missed,
            grace_ms: record.grace_ms,
            metadata: record.metadata.clone(),
        };
        Ok(Self {
            id: record.id.clone(),
            graph: record.graph.name.clone(),
            version: i64::from(record.graph.version),
            spec: serde_json::to_string(&spec).map_err(backend)?,
            input: serde_json::to_string(&record.input).map_err(backend)?,
            snapshot: record.snapshot.to_bytes(),
            frontier: record.frontier.to_bytes(),
            attachment: record.attachment.clone(),
            created_at_ms: record.created_at_ms,
            next_at_ms: record.next_at_ms,
            last_run: record.last_run.map(|run| run.to_string()),
            last_fired_at_ms: record.last_fired_at_ms,
            runs_started: i64::try_from(record.runs_started).unwrap_or(i64::MAX),
            ticks_skipped: i64::try_from(record.ticks_skipped).unwrap_or(i64::MAX),
        })
    }

    /// The record, or why the row does not read as one.
    pub fn decode(self) -> Result<ScheduleRecord, StoreError> {
        let id = self.id;
        let damaged = |what: String| StoreError::Backend {
            source: format!("schedule `{id}`: {what}").into(),
        };
        let spec: StoredSpec = serde_json::from_str(&self.spec)
            .map_err(|error| damaged(format!("its spec does not read: {error}")))?;
        if spec.v > SPEC_VERSION {
            return Err(damaged(format!(
                "its spec is version {}, newer than this build's {SPEC_VERSION}",
                spec.v
            )));
        }
        let input = serde_json::from_str(&self.input)
            .map_err(|error| damaged(format!("its input is not JSON: {error}")))?;
        let snapshot = Blob::from_bytes(&self.snapshot)
            .map_err(|error| damaged(format!("its snapshot does not read: {error}")))?;
        let frontier = Blob::from_bytes(&self.frontier)
            .map_err(|error| damaged(format!("its frontier does not read: {error}")))?;
        let last_run = match self.last_run {
            Some(text) => Some(
                text.parse()
                    .map_err(|error| damaged(format!("its last run is not a run id: {error}")))?,
            ),
            None => None,
        };
        let version = u32::try_from(self.version)
            .map_err(|_| damaged(format!("graph version {} is out of range", self.version)))?;
        Ok(ScheduleRecord {
            graph: GraphRef { name: self.graph, version },
            timing: spec.timing,
            missed: spec.missed,
            grace_ms: spec.grace_ms,
            input,
            snapshot,
            frontier,
            attachment: self.attachment,
            created_at_ms: self.created_at_ms,
            next_at_ms: self.next_at_ms,
            last_run,
            last_fired_at_ms: self.last_fired_at_ms,
            runs_started: self.runs_started.max(0) as u64,
            ticks_skipped: self.ticks_skipped.max(0) as u64,
            metadata: spec.metadata,
            id,
        })
    }
}

/// One firing of a schedule, applied in one transaction: its next tick
/// moves from `expected_next_ms` to `next_at_ms` (compare-and-set: of
/// two processes firing the same tick, one wins and the other is refused
/// with [`StoreError::ScheduleMoved`], nothing written), and `run`, if
/// any, is created `queued`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScheduleFire {
    /// The schedule.
    pub schedule: String,
    /// Its next tick as the firing process read it.
    pub expected_next_ms: i64,
    /// Its next tick after this one; `None`: none left.
    pub next_at_ms: Option<i64>,
    /// When it fired.
    pub at_ms: i64,
    /// The run it starts (`claim: None`); `None` when it skips the ticks.
    pub run: Option<NewRun>,
    /// Ticks skipped by this firing.
    pub skipped: u64,
}

impl ScheduleFire {
    /// A firing of `schedule`, read with its next tick at
    /// `expected_next_ms`, at `at_ms`: next tick `next_at_ms`, starting
    /// `run` (`None`: skipping), `skipped` ticks skipped.
    pub fn new(
        schedule: impl Into<String>,
        expected_next_ms: i64,
        next_at_ms: Option<i64>,
        at_ms: i64,
        run: Option<NewRun>,
        skipped: u64,
    ) -> Self {
        Self { schedule: schedule.into(), expected_next_ms, next_at_ms, at_ms, run, skipped }
    }
}
