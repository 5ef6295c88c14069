//! The step's barrier: each finished task's events emitted in task order
//! (retries, completion, interrupts, failure), what the tasks produced
//! gathered ([`Gathered`]), and the step ended early where a task says so
//! (a failure, a subgraph stopped with the run, a workflow's sleep, a
//! pause) before anything is merged. `driver.rs` merges the rest.

use std::sync::Arc;

use tollgate_checkpoint::{
    Blob, Codec, InterruptRecord, RunStatus, TaskFailure, TaskKey, TaskUpdate,
};

use crate::event::Event;
use crate::hitl::{interrupt_id, PendingInterrupt, Raised};
use crate::route::Goto;
use crate::state::{State, Write};

use super::driver::Leg;
use super::emit::{node_id, Live};
use super::error::{json_error, RunError};
use super::record::TaskOutputRecord;
use super::task::{Outcome, TaskDone};
use super::token::stop;

/// Updates whose JSON is at least this long (bytes) are stored once, in the
/// step's record (which holds it as JSON too), and left out of their
/// `node_completed` event's stored line (the store puts them back when it
/// reads it).
const UPDATE_STORED_ONCE: usize = 512;

/// A completed task's update for the record, write for the merge, and
/// gotos (with whether it was a rejection routed elsewhere).
type Completed<U> = (TaskUpdate, Option<Write<U>>, (Vec<Goto>, bool));

/// What a task's `node_completed` event says of it besides its output.
struct Said {
    index: u32,
    reused: bool,
    cached: bool,
    /// A rejected interrupt routed elsewhere: only its goto applies.
    rejected: bool,
}

impl<U> TaskDone<U> {
    fn said(&self) -> Said {
        Said {
            index: self.index,
            reused: self.reused,
            cached: self.cached,
            rejected: self.rejected,
        }
    }
}

/// What a step's tasks produced, their events emitted.
pub(super) struct Gathered<U> {
    /// The step's record's updates, one per completed task.
    pub(super) updates: Vec<TaskUpdate>,
    /// The writes to merge into the state.
    pub(super) writes: Vec<Write<U>>,
    /// Each task's gotos, and whether it was a rejection routed elsewhere.
    pub(super) gotos: Vec<(Vec<Goto>, bool)>,
    failure: Option<RunError>,
    failed_tasks: Vec<TaskFailure>,
    stopped: bool,
    sleeping: Option<i64>,
    pauses: Vec<(InterruptRecord, PendingInterrupt, (String, String))>,
}

impl<S: State> Leg<S> {
    /// Emits each finished task's events and gathers what it produced.
    pub(super) fn gather(
        &mut self,
        step: u64,
        done: Vec<TaskDone<S::Update>>,
    ) -> Result<Gathered<S::Update>, RunError> {
        let mut gathered = Gathered {
            updates: Vec::with_capacity(done.len()),
            writes: Vec::with_capacity(done.len()),
            gotos: Vec::with_capacity(done.len()),
            failure: None,
            failed_tasks: Vec::new(),
            stopped: false,
            sleeping: None,
            pauses: Vec::new(),
        };
        for task in done {
            let name = Arc::clone(&self.graph.node(task.node).name);
            let id = node_id(&name, step, task.index);
            for (attempt, delay, error) in &task.retries {
                let event = Event::RetryScheduled {
                    step,
                    task: task.index,
                    attempt: *attempt,
                    delay_ms: delay.as_millis() as u64,
                    error: error.clone(),
                    call_id: None,
                };
                self.emit(Some((&name, &id)), event, Live::Now)?;
            }
            let (index, attempts, said) = (task.index, task.attempts, task.said());
            let goto = match task.outcome {
                Outcome::Output(output, blob) => {
                    let (update, write, goto) =
                        self.completed(step, (&name, &id), said, output, blob)?;
                    gathered.updates.push(update);
                    gathered.writes.extend(write);
                    goto
                }
                Outcome::Paused { raised, .. } => {
                    let rejection_routed = self.graph.node(task.node).on_reject.is_some();
                    for raised in raised {
                        let paused =
                            self.raised(step, index, (&name, &id), raised, rejection_routed)?;
                        gathered.pauses.push(paused);
                    }
                    (Vec::new(), false)
                }
                Outcome::Stopped => {
                    gathered.stopped = true;
                    (Vec::new(), false)
                }
                Outcome::Sleeping(until) => {
                    gathered.sleeping =
                        Some(gathered.sleeping.map_or(until, |other| other.min(until)));
                    (Vec::new(), false)
                }
                Outcome::Failed(error) => {
                    let event =
                        Event::NodeFailed { step, task: index, attempts, error: error.to_string() };
                    self.emit(Some((&name, &id)), event, Live::Now)?;
                    let message = error.to_failure().message;
                    let failed = TaskFailure::new(index, &*name, error.class(), message);
                    gathered.failed_tasks.push(failed);
                    gathered.failure.get_or_insert(error);
                    (Vec::new(), false)
                }
            };
            gathered.gotos.push(goto);
        }
        Ok(gathered)
    }

    /// A task's output: its `node_completed` event; its update for the
    /// record, its write for the merge, its gotos.
    fn completed(
        &mut self,
        step: u64,
        (name, id): (&Arc<str>, &str),
        task: Said,
        output: TaskOutputRecord<S::Update>,
        blob: Blob,
    ) -> Result<Completed<S::Update>, RunError> {
        let update = serde_json::to_value(&output.update)
            .map_err(|source| json_error(self.run, step, source))?;
        let once = self.nest.is_none()
            && blob.codec() == Codec::Json
            && blob.payload().len() >= UPDATE_STORED_ONCE;
        let text = once.then(|| update.to_string());
        let event = Event::NodeCompleted {
            step,
            task: task.index,
            update,
            goto: output.goto.iter().map(|goto| goto.node().to_owned()).collect(),
            reused: task.reused,
            cached: task.cached,
        };
        self.emit(Some((name, id)), event, Live::Now)?;
        if let Some(text) = text {
            self.emitter.update_in_step(text);
        }
        let key = TaskKey { step, index: task.index, node: name.to_string() };
        let write = output.update.map(|update| Write { node: Arc::clone(name), update });
        Ok((TaskUpdate { task: key, update: blob }, write, (output.goto, task.rejected)))
    }

    /// One interrupt a task raised: its record, its `interrupt_raised`
    /// event, and where it was raised (a subgraph's node, or the task's).
    fn raised(
        &mut self,
        step: u64,
        task: u32,
        (name, id): (&str, &str),
        raised: Raised,
        rejection_routed: bool,
    ) -> Result<(InterruptRecord, PendingInterrupt, (String, String)), RunError> {
        let (path, at) = match raised.origin {
            Some(origin) => origin,
            None => self.qualify(name, id),
        };
        let request = raised.request;
        let record = InterruptRecord {
            id: interrupt_id(self.run, step, task, raised.ordinal),
            step,
            task,
            ordinal: raised.ordinal,
            node: path.clone(),
            kind: request.kind,
            payload: request.payload,
            decisions: request.decisions.iter().map(|d| d.as_str().to_owned()).collect(),
            schema: request.schema,
            rejection_routed: rejection_routed || request.handles_rejection,
            decision: None,
            raised_at_ms: self.emitter.now_ms(),
        };
        let interrupt = PendingInterrupt::from_record(&record);
        let event = Event::InterruptRaised { step, task, interrupt: interrupt.clone() };
        self.emit_at(Some((&path, &at)), event, Live::Now)?;
        Ok((record, interrupt, (path, at)))
    }

    /// Ends the step before its merge where a task says so: a failure
    /// fails the run; a subgraph stopped with the run stops it; a sleep
    /// (with no pause) parks it; a pause keeps the step in flight with its
    /// interrupts. `Ok(None)`: nothing did, merge.
    pub(super) async fn end_early(
        &mut self,
        gathered: &mut Gathered<S::Update>,
    ) -> Result<Option<RunStatus>, RunError> {
        if let Some(error) = gathered.failure.take() {
            let tasks = std::mem::take(&mut gathered.failed_tasks);
            return Err(self.fail_tasks(error, tasks).await);
        }
        let status = if gathered.stopped {
            // A subgraph stopped with the run: so does the run, its step
            // unfinished (the subgraph's progress is stored).
            match self.cancel.asked() {
                stop::RELEASE => RunStatus::Queued,
                _ => RunStatus::Interrupted,
            }
        } else if let (Some(until), true) = (gathered.sleeping, gathered.pauses.is_empty()) {
            // A workflow sleeps: back to the queue, not to be claimed
            // before `until`; the step stays in flight (its stored tasks
            // with it).
            self.wake = Some(until);
            RunStatus::Queued
        } else if !gathered.pauses.is_empty() {
            // The step stays in flight: finished siblings are stored as
            // pending writes, the interrupts with this transition.
            let (mut records, mut pending) = (Vec::new(), Vec::new());
            for (record, interrupt, origin) in gathered.pauses.drain(..) {
                records.push(record);
                pending.push(interrupt);
                self.origins.push(origin);
            }
            self.raised = records;
            self.paused = pending;
            RunStatus::AwaitingHitl
        } else {
            return Ok(None);
        };
        self.emit_run_ended(status, None)?;
        self.commit(None, status, None).await?;
        Ok(Some(status))
    }
}
