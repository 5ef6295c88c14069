//! Schedules: runs of a graph (or workflow) started on the ticks of a cron
//! expression or once at a time, by whichever process fires them first.
//!
//! Adding one ([`Executor::add_schedule`]) encodes its runs' input once
//! and stores it with the timing. Any process that calls
//! [`Executor::fire_schedules`] (every [`Worker`](crate::Worker) does, each
//! poll) starts the runs of due ticks: one transaction per firing moves the
//! schedule's next tick with a compare-and-set and creates the run
//! `queued`, so with many processes each tick starts one run, and a crash
//! loses none. The run then waits in the queue as any queued run does.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::Cron;
use tollgate_checkpoint::{
    MissedTicks, RunId, ScheduleFire, ScheduleRecord, ScheduleTiming, StoreError, DEFAULT_GRACE_MS,
};
use tracing::Instrument;

use crate::exec::{
    encode_queued, graph_ref, Executor, Frontier, RunConfig, RunError, ScheduleError,
};
use crate::graph::CompiledGraph;
use crate::state::State;

/// Ticks counted one by one when a schedule fires late; beyond, the count
/// of skipped ticks stops there.
const MAX_COUNTED_TICKS: u64 = 10_000;

/// Schedules one call to [`Executor::fire_schedules`] fires at most.
const FIRED_PER_CALL: u64 = 100;

/// What to add: an id, when, and what to do with missed ticks.
#[derive(Debug, Clone)]
pub struct Schedule {
    id: String,
    timing: ScheduleTiming,
    missed: MissedTicks,
    grace: Duration,
    metadata: serde_json::Value,
}

impl Schedule {
    /// Schedule `id` on the ticks of `expression`, read in UTC: five
    /// fields (`minute hour day-of-month month day-of-week`, with `*`,
    /// lists, ranges, steps, names such as `MON` and `JAN`, and nicknames
    /// such as `@daily`), or six with seconds first.
    pub fn cron(id: impl Into<String>, expression: &str) -> Result<Self, ScheduleError> {
        parse(expression)?;
        Ok(Self::new(id, ScheduleTiming::Cron { expression: expression.trim().to_owned() }))
    }

    /// Schedule `id` for one run at `at_ms` (milliseconds since the Unix
    /// epoch).
    pub fn at(id: impl Into<String>, at_ms: i64) -> Self {
        Self::new(id, ScheduleTiming::At { at_ms })
    }

    fn new(id: impl Into<String>, timing: ScheduleTiming) -> Self {
        Self {
            id: id.into(),
            timing,
            missed: MissedTicks::default(),
            grace: Duration::from_millis(DEFAULT_GRACE_MS),
            metadata: serde_json::Value::Object(serde_json::Map::new()),
        }
    }

    /// JSON kept with the schedule ([`ScheduleRecord::metadata`]).
    pub fn metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = metadata;
        self
    }

    /// What to do with ticks that pass while no process fires the
    /// schedule (default [`MissedTicks::RunOnce`]).
    pub fn missed(mut self, missed: MissedTicks) -> Self {
        self.missed = missed;
        self
    }

    /// How late a tick may be fired and still be on time (default a
    /// minute): a tick fired later is missed, and the policy decides.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

fn parse(expression: &str) -> Result<Cron, ScheduleError> {
    Cron::from_str(expression.trim()).map_err(|source| ScheduleError::InvalidCron {
        expression: expression.to_owned(),
        source: Box::new(source),
    })
}

fn utc(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The first tick of `cron` after `after_ms` (strictly), or at it when
/// `inclusive`.
fn tick_after(
    cron: &Cron,
    expression: &str,
    after_ms: i64,
    inclusive: bool,
) -> Result<i64, ScheduleError> {
    cron.find_next_occurrence(&utc(after_ms), inclusive)
        .map(|at| at.timestamp_millis())
        .map_err(|_| ScheduleError::NoTick { expression: expression.to_owned(), after_ms })
}

/// Milliseconds since the Unix epoch of an RFC 3339 time
/// (`2026-12-24T09:00:00Z`, `2026-12-24T10:00:00+01:00`); `None` when the
/// text is not one.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(text.trim()).ok().map(|at| at.timestamp_millis())
}

/// The first tick of `timing` after `after_ms`; `None` for a time that
/// is not after it.
pub fn next_tick(timing: &ScheduleTiming, after_ms: i64) -> Result<Option<i64>, ScheduleError> {
    match timing {
        ScheduleTiming::At { at_ms } => Ok((*at_ms > after_ms).then_some(*at_ms)),
        ScheduleTiming::Cron { expression } => {
            let cron = parse(expression)?;
            tick_after(&cron, expression, after_ms, false).map(Some)
        }
        _ => Ok(None),
    }
}

/// What firing a due schedule at `now_ms` does: whether it starts a run,
/// its next tick, and the ticks it skips.
#[derive(Debug, PartialEq)]
struct Firing {
    run: bool,
    next_at_ms: Option<i64>,
    skipped: u64,
}

/// Decides the firing of `schedule`, whose next tick `due_ms` has come.
/// The ticks from `due_ms` to `now_ms` are due; the last of them is on
/// time when it is at most the grace old. One run stands for them all
/// when the last is on time, or (policy `run_once`) when it is not; the
/// others are skipped.
fn firing(schedule: &ScheduleRecord, due_ms: i64, now_ms: i64) -> Result<Firing, ScheduleError> {
    let (last_due, count, next_at_ms) = match &schedule.timing {
        ScheduleTiming::Cron { expression } => {
            let cron = parse(expression)?;
            let (mut last, mut count) = (due_ms, 1_u64);
            loop {
                let next = tick_after(&cron, expression, last, false)?;
                if next > now_ms {
                    break (last, count, Some(next));
                }
                if count >= MAX_COUNTED_TICKS {
                    // Long downtime: jump to the last due tick.
                    let last = cron
                        .find_previous_occurrence(&utc(now_ms), true)
                        .map_or(next, |at| at.timestamp_millis());
                    let next = tick_after(&cron, expression, now_ms, false)?;
                    break (last, count, Some(next));
                }
                (last, count) = (next, count + 1);
            }
        }
        _ => (due_ms, 1, None),
    };
    let on_time =
        now_ms.saturating_sub(last_due) <= i64::try_from(schedule.grace_ms).unwrap_or(i64::MAX);
    let run = on_time || schedule.missed == MissedTicks::RunOnce;
    Ok(Firing { run, next_at_ms, skipped: if run { count - 1 } else { count } })
}

/// Whether `id` may name a schedule.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl Executor {
    /// Adds `schedule`: runs of `graph` from `input` (with `config`'s
    /// settings: codec, limits, attachment) on its ticks. Its first tick
    /// is the first after now (by `config`'s clock); a time in the past
    /// is due at once. Runs start `queued`: a worker (or any process
    /// calling [`Executor::fire_schedules`] and then driving the queue)
    /// runs them, pinned to `graph`'s name and version as every run is.
    /// A taken id is [`StoreError::ScheduleExists`].
    pub async fn add_schedule<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        input: S,
        schedule: Schedule,
        config: RunConfig,
    ) -> Result<ScheduleRecord, RunError> {
        if !valid_id(&schedule.id) {
            return Err(ScheduleError::InvalidId { id: schedule.id }.into());
        }
        let now = config.clock.now_ms();
        let next_at_ms = match &schedule.timing {
            ScheduleTiming::At { at_ms } => Some(*at_ms),
            timing => next_tick(timing, now)?,
        };
        let shown = serde_json::to_value(&input).unwrap_or(serde_json::Value::Null);
        let frontier = Frontier::start(graph, &input)?;
        // Encoded once for every run: a run id only names errors here.
        let (config, snapshot, frontier) =
            encode_queued(graph, RunId::new(), &input, frontier, config)?;
        let mut record = ScheduleRecord::new(
            schedule.id,
            graph_ref(graph),
            schedule.timing,
            shown,
            snapshot,
            frontier,
            now,
            next_at_ms,
        );
        record.missed = schedule.missed;
        record.grace_ms = u64::try_from(schedule.grace.as_millis()).unwrap_or(u64::MAX);
        record.attachment = config.attachment;
        record.metadata = schedule.metadata;
        self.store.create_schedule(record.clone()).await?;
        Ok(record)
    }

    /// Fires the schedules whose tick has come by `now_ms`: for each, in
    /// one transaction, its next tick moves on and (unless its missed
    /// ticks are skipped) a run is created `queued`. A schedule another
    /// process fired meanwhile is left to it. Returns the runs started.
    /// Workers call it each poll; call it yourself when no worker runs.
    pub async fn fire_schedules(&self, now_ms: i64) -> Result<Vec<RunId>, RunError> {
        let mut started = Vec::new();
        for schedule in self.store.due_schedules(now_ms, FIRED_PER_CALL).await? {
            let Some(due) = schedule.next_at_ms else { continue };
            let span = tracing::info_span!(
                "schedule",
                otel.name = %format_args!("schedule {}", schedule.id),
                tollgate.schedule = %schedule.id,
                tollgate.graph = %schedule.graph.name,
            );
            let fired = async {
                let plan = match firing(&schedule, due, now_ms) {
                    Ok(plan) => plan,
                    Err(error) => {
                        // Stored by a build whose cron reading differs:
                        // left alone, said once per poll.
                        tracing::warn!(%error, "schedule cannot fire");
                        return Ok(None);
                    }
                };
                let run = plan.run.then(RunId::new);
                let new_run = run.map(|run| schedule.new_run(run, now_ms));
                let fire = ScheduleFire::new(
                    schedule.id.clone(),
                    due,
                    plan.next_at_ms,
                    now_ms,
                    new_run,
                    plan.skipped,
                );
                match self.store.fire_schedule(fire).await {
                    Ok(()) => {
                        tracing::info!(run = ?run, skipped = plan.skipped, next_at_ms = ?plan.next_at_ms, "schedule fired");
                        Ok(run)
                    }
                    // Another process fired it, or it was deleted.
                    Err(StoreError::ScheduleMoved { .. } | StoreError::ScheduleNotFound { .. }) => {
                        Ok(None)
                    }
                    Err(error) => Err(RunError::from(error)),
                }
            }
            .instrument(span)
            .await?;
            started.extend(fired);
        }
        Ok(started)
    }
}

#[cfg(test)]
mod tests {
    use tollgate_checkpoint::{Codec, GraphRef};

    use super::*;

    const MINUTE: i64 = 60_000;

    fn every_minute(missed: MissedTicks) -> ScheduleRecord {
        let blob = Codec::Json.encode(&0, 1).expect("encodes");
        let mut record = ScheduleRecord::new(
            "s",
            GraphRef { name: "g".into(), version: 1 },
            ScheduleTiming::Cron { expression: "* * * * *".into() },
            serde_json::Value::Null,
            blob.clone(),
            blob,
            0,
            Some(MINUTE),
        );
        record.missed = missed;
        record.grace_ms = 5_000;
        record
    }

    #[test]
    fn a_tick_on_time_runs_and_moves_to_the_next() {
        let schedule = every_minute(MissedTicks::Skip);
        let fired = firing(&schedule, MINUTE, MINUTE + 200).expect("fires");
        assert_eq!(fired, Firing { run: true, next_at_ms: Some(2 * MINUTE), skipped: 0 });
    }

    #[test]
    fn missed_ticks_run_once_or_are_skipped() {
        // Down from minute 1 to 10 and 30 s: ten ticks due, the last 30 s old.
        let now = 10 * MINUTE + 30_000;
        let once = firing(&every_minute(MissedTicks::RunOnce), MINUTE, now).expect("fires");
        assert_eq!(once, Firing { run: true, next_at_ms: Some(11 * MINUTE), skipped: 9 });
        let skip = firing(&every_minute(MissedTicks::Skip), MINUTE, now).expect("fires");
        assert_eq!(skip, Firing { run: false, next_at_ms: Some(11 * MINUTE), skipped: 10 });
        // Back within the grace of the last tick: it runs, even when skipping.
        let now = 10 * MINUTE + 2_000;
        let skip = firing(&every_minute(MissedTicks::Skip), MINUTE, now).expect("fires");
        assert_eq!(skip, Firing { run: true, next_at_ms: Some(11 * MINUTE), skipped: 9 });
    }

    #[test]
    fn a_long_downtime_jumps_to_the_last_tick() {
        let now = 30 * 24 * 60 * MINUTE + 1_000; // a month of minutes
        let fired = firing(&every_minute(MissedTicks::RunOnce), MINUTE, now).expect("fires");
        assert_eq!(fired.next_at_ms, Some(30 * 24 * 60 * MINUTE + MINUTE));
        assert!(fired.run);
        assert_eq!(fired.skipped, MAX_COUNTED_TICKS - 1);
    }

    #[test]
    fn cron_expressions_are_read_in_utc_and_checked() {
        let timing = ScheduleTiming::Cron { expression: "30 2 * * MON".into() };
        // 1970-01-01 was a Thursday: the first Monday is the 5th.
        let day = 24 * 60 * MINUTE;
        assert_eq!(
            next_tick(&timing, 0).expect("ticks"),
            Some(4 * day + 2 * 60 * MINUTE + 30 * MINUTE)
        );
        assert!(matches!(
            Schedule::cron("x", "61 * * * *"),
            Err(ScheduleError::InvalidCron { .. })
        ));
        assert!(matches!(Schedule::cron("x", ""), Err(ScheduleError::InvalidCron { .. })));
        let never = ScheduleTiming::Cron { expression: "0 0 30 2 *".into() };
        assert!(matches!(next_tick(&never, 0), Err(ScheduleError::NoTick { .. })));
        assert_eq!(next_tick(&ScheduleTiming::At { at_ms: 5 }, 4).expect("at"), Some(5));
        assert_eq!(next_tick(&ScheduleTiming::At { at_ms: 5 }, 5).expect("at"), None);
        assert_eq!(parse_rfc3339("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_rfc3339("2026-01-01T00:00:00.5Z"), Some(1_767_225_600_500));
        assert_eq!(parse_rfc3339("tomorrow"), None);
        assert!(valid_id("nightly-report.v2") && !valid_id("") && !valid_id("a b"));
    }
}
