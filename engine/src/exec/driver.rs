//! The async driver: runs a frontier's tasks, merges them at the barrier,
//! asks the planner what comes next and commits one transition per step.
//! The same driver serves new runs and continued ones.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tollgate_checkpoint::{
    Blob, Codec, InterruptRecord, RunId, RunStatus, StepRecord, Store, StoreError, TaskFailure,
    TaskUpdate, Transition,
};
use tracing::Instrument;

use crate::event::Event;
use crate::graph::CompiledGraph;
use crate::hitl::{Decision, PendingInterrupt};
use crate::node::Namespace;
use crate::route::Goto;
use crate::state::{State, Write};
use crate::telemetry;

use super::config::RunConfig;
use super::emit::{Emitter, Live};
use super::error::{json_error, RunError};
use super::handle::{RunHandle, RunOutcome};
use super::plan::Frontier;
use super::record::{TaskOutputRecord, FRONTIER_VERSION};
use super::setup::Breakpoints;
use super::subgraph::Nest;
use super::task::encode_checked;
use super::token::{cancelled_elsewhere, stop, Stop};

/// Tracks delta bytes since the last snapshot (see `SnapshotPolicy`).
#[derive(Debug, Clone, Default)]
pub(crate) struct SnapshotTracker {
    pub(crate) last_size: usize,
    pub(crate) delta_bytes: usize,
    pub(crate) steps: u64,
}

/// One leg of a run: from a checkpoint to a status other than `running`.
pub(crate) struct Leg<S: State> {
    pub(crate) graph: CompiledGraph<S>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) run: RunId,
    pub(crate) epoch: u64,
    pub(crate) config: RunConfig,
    pub(crate) state: Arc<S>,
    /// Last committed step.
    pub(crate) step: u64,
    pub(crate) frontier: Frontier,
    /// The stored form of `frontier`, reused while the frontier repeats
    /// (a cycle schedules the same task every step).
    pub(crate) frontier_blob: Option<Blob>,
    /// Outputs already stored for tasks of the next step, by task index.
    pub(crate) reused: HashMap<u32, (TaskOutputRecord<S::Update>, Blob)>,
    pub(crate) emitter: Arc<Emitter>,
    /// Whether the leg was asked to stop (`cancel::stop`), and the wake-up
    /// of a step waiting on its tasks.
    pub(crate) cancel: Arc<Stop>,
    pub(crate) snapshots: SnapshotTracker,
    /// Decisions for tasks of the next step, by task index then ordinal.
    pub(crate) decisions: HashMap<u32, Arc<BTreeMap<u32, Decision>>>,
    /// Shared empty decisions, for tasks without any.
    pub(crate) no_decisions: Arc<BTreeMap<u32, Decision>>,
    /// Per node: pause before it runs / after it ran.
    pub(crate) breakpoints: Arc<Breakpoints>,
    /// Interrupts to store with the next transition.
    pub(crate) raised: Vec<InterruptRecord>,
    /// The (path, id) of the node that raised each of `raised`.
    pub(crate) origins: Vec<(String, String)>,
    /// What the leg waits for, when it pauses.
    pub(crate) paused: Vec<PendingInterrupt>,
    /// When the run, going back to the queue, may be claimed again (a
    /// sleeping workflow).
    pub(crate) wake: Option<i64>,
    /// Progress records of subgraph tasks of the next step, by task index.
    pub(crate) progress: HashMap<u32, Blob>,
    /// A workflow's finished tasks in the next step (its only task's).
    pub(crate) tasks: Arc<super::access::TaskResults>,
    /// What its tasks need to run graphs nested in them, once one asked.
    pub(crate) access: Option<Arc<super::access::LegAccess>>,
    /// Inside a subgraph: where (node ids and paths are qualified by it).
    pub(crate) ns: Option<Arc<Namespace>>,
    /// Inside a subgraph: where its progress goes instead of commits.
    pub(crate) nest: Option<Box<Nest>>,
    /// The leg's `run` span (disabled inside a subgraph, whose steps nest
    /// in its parent's node span).
    pub(crate) span: tracing::Span,
}

/// What the run does after a checkpoint.
enum Verdict {
    Continue,
    End(RunStatus),
    Fail(RunError),
}

impl<S: State> Leg<S> {
    /// Drives the leg on its own task.
    pub(crate) fn spawn(self) -> RunHandle<S> {
        let run_id = self.run;
        let cancel = Arc::clone(&self.cancel);
        let join = tokio::spawn(self.drive());
        RunHandle { run_id, cancel, join }
    }
}

impl<S: State> Leg<S> {
    pub(crate) async fn drive(mut self) -> Result<RunOutcome<S>, RunError> {
        let span = std::mem::replace(&mut self.span, tracing::Span::none());
        let (store, run) = (Arc::clone(&self.store), self.run);
        let result = async move {
            match self.verdict(self.step) {
                Verdict::Continue => {}
                verdict => return self.end_between_steps(verdict).await,
            }
            loop {
                match self.step_once().await? {
                    Some(status) => return Ok(self.outcome(status)),
                    None => continue,
                }
            }
        }
        .instrument(span.clone())
        .await;
        let result = match result {
            Err(RunError::Store(StoreError::Fenced { .. }))
                if cancelled_elsewhere(&*store, run).await =>
            {
                Err(RunError::Cancelled { run })
            }
            Err(error @ RunError::Store(StoreError::Fenced { .. })) => {
                metrics::counter!(telemetry::LEASES_LOST).increment(1);
                Err(error)
            }
            other => other,
        };
        if let Err(error) = &result {
            telemetry::span_failed(&span, error);
        }
        result
    }

    /// The `run` span of a leg of `run`: the root of the leg's spans.
    pub(crate) fn run_span(run: RunId, graph: &str) -> tracing::Span {
        tracing::info_span!(
            "run",
            otel.name = %format_args!("run {graph}"),
            tollgate.run_id = %run,
            tollgate.graph = %graph,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        )
    }

    fn verdict(&self, step: u64) -> Verdict {
        if self.frontier.tasks.is_empty() {
            Verdict::End(RunStatus::Completed)
        } else if self.cancel.asked() == stop::CANCEL {
            Verdict::End(RunStatus::Interrupted)
        } else if self.cancel.asked() == stop::RELEASE {
            Verdict::End(RunStatus::Queued)
        } else if step + 1 > self.config.max_steps {
            let node = self.graph.node(self.frontier.tasks[0].node).name.to_string();
            Verdict::Fail(RunError::StepLimitExceeded {
                limit: self.config.max_steps,
                step: step + 1,
                node,
            })
        } else {
            Verdict::Continue
        }
    }

    fn outcome(self, status: RunStatus) -> RunOutcome<S> {
        let state = Arc::try_unwrap(self.state).unwrap_or_else(|shared| (*shared).clone());
        RunOutcome { run_id: self.run, status, step: self.step, state, interrupts: self.paused }
    }

    /// Ends the leg with a status change alone (no step ran).
    async fn end_between_steps(mut self, verdict: Verdict) -> Result<RunOutcome<S>, RunError> {
        match verdict {
            Verdict::Continue => unreachable!("only ending verdicts reach here"),
            Verdict::Fail(error) => Err(self.fail(error).await),
            Verdict::End(status) => {
                self.emit_run_ended(status, None)?;
                self.commit(None, status, None).await?;
                Ok(self.outcome(status))
            }
        }
    }

    /// Runs one super-step and commits it. `Some(status)` when the leg ended.
    pub(super) async fn step_once(&mut self) -> Result<Option<RunStatus>, RunError> {
        let span = tracing::info_span!(
            "step",
            otel.name = %format_args!("step {}", self.step + 1),
            tollgate.run_id = %self.run,
            tollgate.step = self.step + 1,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        let started = std::time::Instant::now();
        let result = self.step_inner().instrument(span.clone()).await;
        telemetry::seconds(telemetry::STEP_DURATION, started.elapsed());
        if let Err(error) = &result {
            telemetry::span_failed(&span, error);
        }
        result
    }

    /// One step in phases: run the tasks, gather what they produced at the
    /// barrier (ending the step there on a failure, stop, sleep or pause),
    /// merge and plan, encode the step's record, commit it.
    async fn step_inner(&mut self) -> Result<Option<RunStatus>, RunError> {
        let step = self.step + 1;
        self.emitter.tick();
        let done = self.execute(step).await?;
        self.emitter.tick();
        let mut gathered = self.gather(step, done)?;
        if let Some(status) = self.end_early(&mut gathered).await? {
            return Ok(Some(status));
        }
        let tasks = self.frontier.tasks.len() as u32;
        let repeated = self.merge(step, gathered.writes, gathered.gotos).await?;
        let record = self.step_record(step, gathered.updates, repeated)?;
        let event = Event::CheckpointSaved { step, tasks, snapshot: record.snapshot.is_some() };
        self.emit(None, event, Live::AfterCommit)?;
        self.step = step;
        self.commit_step(step, record).await
    }

    /// Merges the step's writes into the state and plans the next
    /// frontier (the step's bookkeeping cleared); whether it repeats the
    /// last one.
    async fn merge(
        &mut self,
        step: u64,
        writes: Vec<Write<S::Update>>,
        gotos: Vec<(Vec<Goto>, bool)>,
    ) -> Result<bool, RunError> {
        let state = Arc::make_mut(&mut self.state);
        if let Err(source) = state.apply(self.graph.schema(), writes) {
            return Err(self.fail(RunError::InvalidUpdate { step, source }).await);
        }
        let next = match self.frontier.next(&self.graph, &self.state, gotos) {
            Ok(next) => next,
            Err(error) => return Err(self.fail(error).await),
        };
        let repeated = next.same_as(&self.frontier);
        self.frontier = next;
        self.reused.clear();
        self.progress.clear();
        self.tasks = Arc::default();
        self.decisions.clear();
        Ok(repeated)
    }

    /// The step's record: its updates, the new frontier (its stored form
    /// reused while it repeats) and a snapshot of the state when the
    /// snapshot policy asks for one.
    fn step_record(
        &mut self,
        step: u64,
        updates: Vec<TaskUpdate>,
        repeated: bool,
    ) -> Result<StepRecord, RunError> {
        let codec = self.config.codec;
        let encode_error = |source| RunError::Encode { run: self.run, step, source };
        let frontier = match self.frontier_blob.take() {
            Some(blob) if repeated => blob,
            _ => Codec::Json
                .encode(&self.frontier.to_record(&self.graph), FRONTIER_VERSION)
                .map_err(encode_error)?,
        };
        self.frontier_blob = Some(frontier.clone());
        self.snapshots.delta_bytes += updates.iter().map(|u| u.update.stored_len()).sum::<usize>();
        self.snapshots.steps += 1;
        let policy = &self.config.snapshots;
        let snapshot = if self.nest.is_some() {
            // A subgraph's progress record holds its whole state.
            None
        } else if self.snapshots.delta_bytes >= self.snapshots.last_size.max(policy.min_delta_bytes)
            || self.snapshots.steps >= policy.max_steps_between
        {
            let blob = encode_checked::<S, S>(codec, &self.state, "state", self.run, step)?;
            self.snapshots =
                SnapshotTracker { last_size: blob.stored_len(), delta_bytes: 0, steps: 0 };
            Some(blob)
        } else {
            None
        };
        Ok(StepRecord { step, updates, snapshot, frontier })
    }

    /// Commits the step's record with the status the verdict gives: on,
    /// ended, or failed.
    async fn commit_step(
        &mut self,
        step: u64,
        record: StepRecord,
    ) -> Result<Option<RunStatus>, RunError> {
        match self.verdict(step) {
            Verdict::Continue => {
                self.commit(Some(record), RunStatus::Running, None).await?;
                Ok(None)
            }
            Verdict::End(status) => {
                self.emit_run_ended(status, None)?;
                self.commit(Some(record), status, None).await?;
                Ok(Some(status))
            }
            Verdict::Fail(error) => {
                let failure = error.to_failure();
                self.emit_run_ended(RunStatus::Failed, Some(failure.clone()))?;
                self.commit(Some(record), RunStatus::Failed, Some(failure)).await?;
                Err(error)
            }
        }
    }

    /// A node's (path, id), qualified by the leg's namespace.
    pub(super) fn qualify(&self, name: &str, id: &str) -> (String, String) {
        match &self.ns {
            Some(ns) => ns.qualify(name, id),
            None => (name.to_owned(), id.to_owned()),
        }
    }

    /// Emits `event`, labelled with a node of this leg's graph.
    pub(super) fn emit(
        &mut self,
        node: Option<(&str, &str)>,
        event: Event,
        live: Live,
    ) -> Result<(), RunError> {
        match (node, self.ns.is_some()) {
            (Some((name, id)), true) => {
                let (path, id) = self.qualify(name, id);
                self.emit_at(Some((&path, &id)), event, live)
            }
            _ => self.emit_at(node, event, live),
        }
    }

    /// Emits `event`, labelled with a node's full (path, id). Inside a
    /// subgraph the run's own events are left to the parent: checkpoints
    /// and ends are the subgraph's progress, its interrupts are raised
    /// again by the parent task.
    pub(super) fn emit_at(
        &mut self,
        node: Option<(&str, &str)>,
        event: Event,
        live: Live,
    ) -> Result<(), RunError> {
        let run_level = matches!(
            event,
            Event::CheckpointSaved { .. } | Event::RunEnded { .. } | Event::InterruptRaised { .. }
        );
        if self.nest.is_some() && run_level {
            return Ok(());
        }
        let (run, step) = (self.run, self.step);
        self.emitter.emit(node, event, live).map_err(|source| json_error(run, step, source))
    }

    pub(super) fn emit_run_ended(
        &mut self,
        status: RunStatus,
        error: Option<tollgate_checkpoint::RunFailure>,
    ) -> Result<(), RunError> {
        let result = (status == RunStatus::Completed)
            .then(|| serde_json::to_value(&*self.state))
            .transpose()
            .map_err(|source| json_error(self.run, self.step, source))?;
        let interrupts =
            if status == RunStatus::AwaitingHitl { self.paused.clone() } else { Vec::new() };
        self.emit(
            None,
            Event::RunEnded { status, step: self.step, result, error, interrupts },
            Live::AfterCommit,
        )
    }

    pub(super) async fn commit(
        &mut self,
        step: Option<StepRecord>,
        status: RunStatus,
        failure: Option<tollgate_checkpoint::RunFailure>,
    ) -> Result<(), RunError> {
        if self.nest.is_some() {
            // A subgraph's "commit" is its progress record; a failure is
            // the parent's to record.
            return match status {
                RunStatus::Failed => Ok(()),
                _ => self.write_progress(step.is_some()).await,
            };
        }
        self.origins.clear();
        let _gate = self.emitter.writes.lock().await;
        let has_step = step.is_some();
        let transition = Transition {
            run: self.run,
            epoch: self.epoch,
            step,
            status,
            failure,
            events: match has_step {
                true => self.emitter.take_batch_of_step(),
                false => self.emitter.take_batch(),
            },
            at_ms: self.emitter.now_ms(),
            lease_until_ms: match status {
                RunStatus::Running => {
                    Some(self.emitter.now_ms().saturating_add(self.config.lease.as_millis() as i64))
                }
                // Back in the queue: when it may be claimed again.
                RunStatus::Queued => self.wake.take(),
                _ => None,
            },
            interrupts: std::mem::take(&mut self.raised),
        };
        let started = std::time::Instant::now();
        let committed = self.store.commit(transition).await;
        telemetry::seconds(telemetry::COMMIT_DURATION, started.elapsed());
        if let Err(error) = committed {
            telemetry::count_store_error("commit", &error);
            return Err(error.into());
        }
        self.emitter.committed();
        let graph = || self.graph.name().to_owned();
        match status {
            RunStatus::Completed
            | RunStatus::Failed
            | RunStatus::Interrupted
            | RunStatus::Rejected => {
                metrics::counter!(telemetry::RUNS_FINISHED, "graph" => graph(), "status" => status.as_str())
                    .increment(1);
            }
            RunStatus::AwaitingHitl => {
                metrics::counter!(telemetry::RUNS_PAUSED, "graph" => graph()).increment(1)
            }
            _ => {}
        }
        Ok(())
    }

    /// Records the failure (status, error, closing event) and hands the
    /// error back. A writer that lost the run (fenced) records nothing.
    async fn fail(&mut self, error: RunError) -> RunError {
        self.fail_tasks(error, Vec::new()).await
    }

    /// [`Leg::fail`] for a step whose `tasks` failed (stored with the
    /// failure, for the state view).
    pub(super) async fn fail_tasks(
        &mut self,
        error: RunError,
        tasks: Vec<TaskFailure>,
    ) -> RunError {
        if matches!(error, RunError::Store(_)) || self.nest.is_some() {
            return error;
        }
        let mut failure = error.to_failure();
        failure.tasks = tasks;
        if self.emit_run_ended(RunStatus::Failed, Some(failure.clone())).is_ok() {
            if let Err(store_error) = self.commit(None, RunStatus::Failed, Some(failure)).await {
                tracing::warn!(run = %self.run, %store_error, "could not record the run's failure");
            }
        }
        error
    }
}
