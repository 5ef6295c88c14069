//! Deciding on interrupts and resuming paused runs.

use std::sync::Arc;

use tollgate_checkpoint::{
    Answer, DecisionWrite, InterruptRecord, Owner, RunFailure, RunId, RunRecord, RunStatus,
    StoreError,
};

use crate::event::{Clock, Event, SystemClock};
use crate::graph::CompiledGraph;
use crate::hitl::{
    validate, Decision, DecisionError, DecisionRequest, PendingInterrupt, DECIDED_BY, DECISION_NOTE,
};
use crate::state::State;
use crate::telemetry;

use super::config::RunConfig;
use super::driver::Leg;
use super::emit::{Emitter, Live};
use super::error::RunError;
use super::executor::{Claimed, Executor};
use super::handle::{RunHandle, RunOutcome};
use super::setup::{breakpoints, same_graph};

/// What a recorded decision did to its run.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionOutcome {
    /// The run.
    pub run: RunId,
    /// The interrupt answered (the first, when one call answered several).
    pub interrupt: String,
    /// The run's status now: `queued` (ready to continue), `awaiting_hitl`
    /// (other interrupts still open) or `rejected` (ended).
    pub status: RunStatus,
    /// The run's version (epoch) after the decision.
    pub version: u64,
    /// Interrupts still waiting.
    pub pending: Vec<PendingInterrupt>,
}

/// A recorded decision, with what continuing the run needs.
struct Decided {
    outcome: DecisionOutcome,
    /// The run's last event sequence number.
    last_seq: u64,
    /// The step's interrupts, the new decision included.
    interrupts: Vec<InterruptRecord>,
}

/// What [`Executor::resume`] (`T` = [`RunHandle`]) or
/// [`Executor::resume_run`] (`T` = [`RunOutcome`]) did.
#[derive(Debug)]
pub enum Resumed<T> {
    /// Every interrupt is answered and the run continued in this process:
    /// its handle (`resume`), or how the leg ended (`resume_run`).
    Continuing(T),
    /// Other interrupts still wait for decisions.
    Waiting(DecisionOutcome),
    /// The decision rejected the run and the graph does not route
    /// rejections of that node: the run ended `rejected`.
    Rejected(DecisionOutcome),
}

fn store_refusal(run: RunId, error: StoreError) -> DecisionError {
    match error {
        StoreError::Fenced { writer, current, .. } => {
            DecisionError::Conflict { run, expected: writer, found: current }
        }
        StoreError::NotAwaitingDecision { status, .. } => DecisionError::NotPaused { run, status },
        StoreError::InterruptAnswered { interrupt, .. } => {
            DecisionError::AlreadyAnswered { run, interrupt }
        }
        StoreError::InterruptNotFound { interrupt, .. } => {
            DecisionError::InterruptNotFound { run, interrupt, pending: Vec::new() }
        }
        other => DecisionError::Store(other),
    }
}

impl Executor {
    /// Records a decision on a paused run. Needs no graph: the CLI or a
    /// server can decide, and the process that has the graph continues the
    /// run (`continue_run`, `recover`). Compare-and-set on the run's
    /// version: of two concurrent decisions exactly one is recorded, the
    /// other gets [`DecisionError::Conflict`]. A refused decision changes
    /// nothing. Events it writes (a rejection that ends the run) carry the
    /// system clock's time; [`Executor::resume`] uses its config's clock.
    pub async fn decide(
        &self,
        run: RunId,
        request: DecisionRequest,
    ) -> Result<DecisionOutcome, DecisionError> {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        self.record_decision(run, request, None, None, clock).await.map(|decided| decided.outcome)
    }

    /// The record and interrupts of `run` (`known` when the caller has
    /// just read them), once it is paused at the version `request`
    /// expects.
    async fn paused(
        &self,
        run: RunId,
        request: &DecisionRequest,
        known: Option<(RunRecord, Vec<InterruptRecord>)>,
    ) -> Result<(RunRecord, Vec<InterruptRecord>), DecisionError> {
        let refused = |error| store_refusal(run, error);
        let (record, known_interrupts) = match known {
            Some((record, interrupts)) => (record, Some(interrupts)),
            None => (self.store.run(run).await.map_err(refused)?, None),
        };
        if let Some(expected) = request.expected_version.filter(|v| *v != record.epoch) {
            return Err(DecisionError::Conflict { run, expected, found: record.epoch });
        }
        if record.status != RunStatus::AwaitingHitl {
            return Err(DecisionError::NotPaused { run, status: record.status });
        }
        let interrupts = match known_interrupts {
            Some(interrupts) => interrupts,
            None => self.store.interrupts(run).await.map_err(refused)?,
        };
        Ok((record, interrupts))
    }

    /// Records a decision; with `claim`, a run that becomes ready is taken
    /// over in the same transaction (status `running`). `known` is the
    /// run's record and interrupts when the caller has just read them.
    async fn record_decision(
        &self,
        run: RunId,
        request: DecisionRequest,
        claim: Option<(Owner, i64)>,
        known: Option<(RunRecord, Vec<InterruptRecord>)>,
        clock: Arc<dyn Clock>,
    ) -> Result<Decided, DecisionError> {
        let refused = |error| store_refusal(run, error);
        let (record, mut interrupts) = self.paused(run, &request, known).await?;
        let waiting: Vec<String> =
            interrupts.iter().filter(|i| i.decision.is_none()).map(|i| i.id.clone()).collect();
        let (first, answers) = checked_answers(run, &request, &interrupts, &waiting)?;

        // A rejection the graph does not route ends the run.
        let ending = answers.iter().find(|(target, decision)| {
            matches!(decision, Decision::Reject { .. }) && !target.rejection_routed
        });
        let remaining: Vec<PendingInterrupt> = interrupts
            .iter()
            .filter(|i| i.decision.is_none() && !answers.iter().any(|(a, _)| a.id == i.id))
            .map(PendingInterrupt::from_record)
            .collect();
        let status = if ending.is_some() {
            RunStatus::Rejected
        } else if remaining.is_empty() {
            RunStatus::Queued
        } else {
            RunStatus::AwaitingHitl
        };
        let stored = encode_answers(&request, &answers)?;
        let emitter = Emitter::new(run, record.last_seq, Arc::clone(&clock), None);
        let ended = match ending {
            Some((target, decision)) => {
                Some(rejection(&emitter, &record, &request, &answers, (target, decision))?)
            }
            None => None,
        };
        let events = emitter.take_batch();
        let last_seq = record.last_seq + events.len() as u64;
        let version = self
            .store
            .decide(DecisionWrite {
                run,
                expected_epoch: request.expected_version.unwrap_or(record.epoch),
                answers: stored.clone(),
                status,
                events,
                failure: ended,
                at_ms: clock.now_ms(),
                claim,
            })
            .await
            .map_err(refused)?;
        if status == RunStatus::Rejected {
            metrics::counter!(
                telemetry::RUNS_FINISHED,
                "graph" => record.graph.name.clone(),
                "status" => RunStatus::Rejected.as_str()
            )
            .increment(1);
        }
        for answer in stored {
            if let Some(answered) = interrupts.iter_mut().find(|i| i.id == answer.interrupt) {
                answered.decision = Some(answer.decision);
            }
        }
        let outcome =
            DecisionOutcome { run, interrupt: first, status, version, pending: remaining };
        Ok(Decided { outcome, last_seq, interrupts })
    }

    /// Records a decision and, once the run has every decision it waits
    /// for, continues it in this process in a task of its own (like
    /// [`Executor::start`]): wait on the handle or cancel it.
    pub async fn resume<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        request: DecisionRequest,
        config: RunConfig,
    ) -> Result<Resumed<RunHandle<S>>, RunError> {
        Ok(match self.resume_leg(graph, run, request, config).await? {
            Resumed::Continuing(leg) => Resumed::Continuing(leg.spawn()),
            Resumed::Waiting(outcome) => Resumed::Waiting(outcome),
            Resumed::Rejected(outcome) => Resumed::Rejected(outcome),
        })
    }

    /// Records a decision and, once the run has every decision it waits
    /// for, drives it in the calling task until its leg ends (like
    /// [`Executor::run`]; no spawn, no cross-thread wake-up). `Err` when the
    /// leg failed. Dropping the future stops the run where it is: it stays
    /// `running` until its lease expires, and then `recover` continues it.
    pub async fn resume_run<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        request: DecisionRequest,
        config: RunConfig,
    ) -> Result<Resumed<RunOutcome<S>>, RunError> {
        Ok(match self.resume_leg(graph, run, request, config).await? {
            Resumed::Continuing(leg) => Resumed::Continuing(leg.drive().await?),
            Resumed::Waiting(outcome) => Resumed::Waiting(outcome),
            Resumed::Rejected(outcome) => Resumed::Rejected(outcome),
        })
    }

    /// Records the decision; once the run is ready, claims it in the same
    /// write and returns the leg that continues it.
    async fn resume_leg<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        run: RunId,
        request: DecisionRequest,
        config: RunConfig,
    ) -> Result<Resumed<Leg<S>>, RunError> {
        // One read: the record, the interrupts and the state to continue
        // from. The decision is compare-and-set on the epoch read here, and
        // nothing commits to a paused run without changing it, so once the
        // decision is recorded this checkpoint is still the run's last.
        let mut checkpoint = self.store.checkpoint(run, None).await?;
        same_graph(graph, &checkpoint.run)?;
        let points = breakpoints(graph, &config)?;
        // The decision and the takeover are one transaction: no other
        // process can slip in between and continue the run.
        let claim = Some((Owner::current(), config.lease_until()));
        let known = (checkpoint.run.clone(), std::mem::take(&mut checkpoint.interrupts));
        let Decided { outcome, last_seq, interrupts } = self
            .record_decision(run, request, claim, Some(known), Arc::clone(&config.clock))
            .await?;
        Ok(match outcome.status {
            RunStatus::Queued => {
                checkpoint.interrupts = interrupts;
                let epoch = outcome.version;
                let claimed = Claimed { run, epoch, last_seq, checkpoint: Some(checkpoint) };
                Resumed::Continuing(self.continue_claimed(graph, claimed, points, config).await?)
            }
            RunStatus::Rejected => Resumed::Rejected(outcome),
            _ => Resumed::Waiting(outcome),
        })
    }
}

/// An interrupt and the decision given it.
type Answering<'a> = (&'a InterruptRecord, &'a Decision);

/// The interrupt answered first (the one named, or the only one
/// waiting) and every answer of `request`, each checked against its
/// interrupt before anything is written.
fn checked_answers<'a>(
    run: RunId,
    request: &'a DecisionRequest,
    interrupts: &'a [InterruptRecord],
    waiting: &[String],
) -> Result<(String, Vec<Answering<'a>>), DecisionError> {
    let first = match &request.interrupt {
        Some(id) => id.clone(),
        None => match waiting {
            [only] => only.clone(),
            _ => return Err(DecisionError::Ambiguous { run, pending: waiting.to_vec() }),
        },
    };
    let mut answers: Vec<Answering<'a>> = Vec::new();
    let asked = std::iter::once((&first, &request.decision))
        .chain(request.more.iter().map(|(id, decision)| (id, decision)));
    for (id, decision) in asked {
        let target = interrupts.iter().find(|i| &i.id == id).ok_or_else(|| {
            DecisionError::InterruptNotFound {
                run,
                interrupt: id.clone(),
                pending: waiting.to_vec(),
            }
        })?;
        if target.decision.is_some() || answers.iter().any(|(seen, _)| seen.id == *id) {
            return Err(DecisionError::AlreadyAnswered { run, interrupt: id.clone() });
        }
        let view = PendingInterrupt::from_record(target);
        let kind = decision.kind();
        if !view.decisions.contains(&kind) {
            return Err(DecisionError::NotAllowed {
                interrupt: target.id.clone(),
                decision: kind,
                allowed: view.decisions,
            });
        }
        if let (Some(schema), Some(value)) = (&target.schema, decision.value()) {
            validate(&target.id, schema, value)?;
        }
        answers.push((target, decision));
    }
    Ok((first, answers))
}

/// The answers as stored: each decision's JSON with who made it and why.
fn encode_answers(
    request: &DecisionRequest,
    answers: &[Answering<'_>],
) -> Result<Vec<Answer>, DecisionError> {
    let encode = |decision: &Decision| {
        let mut value = serde_json::to_value(decision).map_err(|error| {
            DecisionError::Store(StoreError::Backend { source: Box::new(error) })
        })?;
        if let Some(fields) = value.as_object_mut() {
            for (key, text) in [(DECIDED_BY, &request.by), (DECISION_NOTE, &request.note)] {
                if let Some(text) = text {
                    fields.insert(key.to_owned(), serde_json::Value::String(text.clone()));
                }
            }
        }
        Ok::<_, DecisionError>(value)
    };
    answers
        .iter()
        .map(|(target, decision)| {
            Ok(Answer { interrupt: target.id.clone(), decision: encode(decision)? })
        })
        .collect()
}

/// A rejection that ends the run, as a leg of its own: its events
/// (started, resumed with the decisions, ended `rejected`) on `emitter`,
/// and the run's failure.
fn rejection(
    emitter: &Emitter,
    record: &RunRecord,
    request: &DecisionRequest,
    answers: &[Answering<'_>],
    (target, decision): (&InterruptRecord, &Decision),
) -> Result<RunFailure, DecisionError> {
    let reason = match decision {
        Decision::Reject { reason } => reason.clone(),
        _ => None,
    };
    let decisions = answers
        .iter()
        .map(|(target, decision)| PendingInterrupt {
            decision: Some((*decision).clone()),
            decided_by: request.by.clone(),
            decision_note: request.note.clone(),
            ..PendingInterrupt::from_record(target)
        })
        .collect();
    let failure = RunFailure::new(
        "rejected",
        Some(target.node.clone()),
        reason.unwrap_or_else(|| format!("interrupt `{}` was rejected", target.id)),
    );
    let events = [
        Event::RunStarted {
            graph: record.graph.name.clone(),
            graph_version: record.graph.version,
            from_step: record.step,
        },
        Event::RunResumed { step: record.step + 1, decisions },
        Event::RunEnded {
            status: RunStatus::Rejected,
            step: record.step,
            result: None,
            error: Some(failure.clone()),
            interrupts: Vec::new(),
        },
    ];
    for event in events {
        emitter.emit(None, event, Live::Now).map_err(|error| {
            DecisionError::Store(StoreError::Backend { source: Box::new(error) })
        })?;
    }
    Ok(failure)
}
