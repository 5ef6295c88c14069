//! Commits of transitions, and group commit.
//!
//! A transition is one call of `tollgate_commit` (one round trip, one
//! transaction). Steps of running runs that stay running, the bulk of
//! any workload, go instead through the store's committer task: it sends
//! every such step waiting at that moment in one call of
//! `tollgate_commit_steps`, whose set-based statements check and write
//! them all, so that runs committing at the same time share the server's
//! per-statement and per-transaction work. A step that finds no commit in
//! flight is sent alone, as `tollgate_commit`, from its caller's task (a
//! lone run never waits on the committer). At most [`Commits::flights`]
//! calls of the committer are in flight at once; steps arriving meanwhile
//! wait for the next.
//!
//! Each step is still atomic on its own and answered only once the call
//! holding it has committed: a step whose writer the function refuses
//! (fenced, out of order, an event gap) wrote nothing, and is committed
//! again alone, which names the refusal. A call the server refused as a
//! whole (its transaction rolled back) has each of its steps committed
//! alone. The lone commits of one call go at once, each on a connection
//! of the pool. A call whose connection broke (or whose server process
//! was shut down) may or may not have committed, and each of its steps is
//! answered [`StoreError::Unavailable`], as a lone commit would be.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_postgres::error::Severity;
use tokio_postgres::types::ToSql;
use tollgate_checkpoint::{Blob, EventRecord, RunStatus, StepRecord, StoreError, Transition};

use crate::announce::{announce, announced, watched, watched_sql};
use crate::conn::{prepared, Refusal};
use crate::frontiers::Frontiers;
use crate::rows::{event_span, interrupts_json, json_text, sql_int};
use crate::sql::Sql;

/// Steps in one call at most.
const MAX_BATCH: usize = 256;

/// Bytes of updates, snapshots, frontiers and event lines in one call at
/// most (besides the first step): both ends hold a call's parameters in
/// memory at once.
const MAX_BATCH_BYTES: usize = 8 << 20;

/// The committer task and the way to it.
#[derive(Debug)]
pub(crate) struct Commits {
    /// The way to the committer. It is a task of the runtime it was
    /// started on; should that runtime end (a store connected in one
    /// runtime and used from another), a step that finds it gone starts
    /// another on its own runtime ([`Commits::restart`]).
    jobs: Mutex<mpsc::UnboundedSender<Queued>>,
    flights: usize,
    writer: Writer,
    /// Commits of steps in flight: the committer's calls, and a step sent
    /// from its caller's task.
    busy: Arc<AtomicUsize>,
}

/// One commit of steps in flight, counted in [`Commits::busy`] until it
/// is dropped.
struct Busy(Arc<AtomicUsize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What commits need: the pool, and the frontiers committed lately.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    pool: Pool,
    frontiers: Arc<Frontiers>,
    /// Statements sent unnamed (through a transaction pooler).
    unnamed: bool,
}

/// A step waiting for the committer, and where its answer goes.
struct Queued {
    /// The transition, without its step.
    transition: Transition,
    step: StepRecord,
    /// Its event span (checked before it was queued).
    first_seq: i64,
    count: i32,
    /// What it adds to a call (see [`MAX_BATCH_BYTES`]).
    bytes: usize,
    reply: oneshot::Sender<Result<(), StoreError>>,
}

/// A call that may have committed, and whose answer was lost.
#[derive(Debug, Clone, thiserror::Error)]
#[error("a commit of {steps} steps lost its answer (its connection broke or its server process was shut down): it may or may not have committed")]
struct CallLost {
    steps: usize,
    #[source]
    source: Arc<tokio_postgres::Error>,
}

/// A step handed to the committer that it dropped without an answer (its
/// task ended, or the runtime is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the store's committer stopped before it answered: the step may or may not have committed")]
struct CommitterGone;

impl Commits {
    /// Calls in flight at once for a pool of `pool_size` connections: a
    /// quarter of the pool, so that reads and other writes keep
    /// connections.
    pub(crate) fn flights(pool_size: usize) -> usize {
        (pool_size / 4).max(1)
    }

    /// Starts the committer task (on the current runtime); `unnamed`
    /// sends its statements unnamed.
    pub(crate) fn start(
        pool: Pool,
        frontiers: Arc<Frontiers>,
        flights: usize,
        unnamed: bool,
    ) -> Self {
        let writer = Writer { pool, frontiers, unnamed };
        let busy = Arc::new(AtomicUsize::new(0));
        let flights = flights.max(1);
        let jobs = Mutex::new(spawn_dispatch(&writer, flights, &busy));
        Self { jobs, flights, writer, busy }
    }

    /// The way to the committer.
    fn jobs(&self) -> mpsc::UnboundedSender<Queued> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The way to a committer that runs: a new one, on the current
    /// runtime, when the last one is gone (its runtime ended). `None`
    /// outside a runtime.
    fn restart(&self) -> Option<mpsc::UnboundedSender<Queued>> {
        tokio::runtime::Handle::try_current().ok()?;
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        // Another step may have started one meanwhile.
        if jobs.is_closed() {
            tracing::debug!("the store's committer is gone: starting another");
            *jobs = spawn_dispatch(&self.writer, self.flights, &self.busy);
        }
        Some(jobs.clone())
    }

    /// [`RunStore::commit`](tollgate_checkpoint::RunStore::commit).
    pub(crate) async fn commit(&self, transition: Transition) -> Result<(), StoreError> {
        let grouped = transition.status == RunStatus::Running
            && transition.interrupts.is_empty()
            && transition.failure.is_none();
        let mut transition = transition;
        let step = match transition.step.take() {
            Some(step) if grouped => step,
            step => return self.writer.one(Transition { step, ..transition }).await,
        };
        // Nothing in flight: sent from here, without a hand-over.
        if self.busy.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let _busy = Busy(Arc::clone(&self.busy));
            return self.writer.one(Transition { step: Some(step), ..transition }).await;
        }
        let (first_seq, count) = event_span(transition.run, &transition.events)?;
        let bytes = step.updates.iter().map(|u| u.update.stored_len()).sum::<usize>()
            + step.snapshot.as_ref().map_or(0, Blob::stored_len)
            + step.frontier.stored_len()
            + transition.events.iter().map(|e| e.json.len()).sum::<usize>();
        let (reply, answer) = oneshot::channel();
        let queued = Queued { transition, step, first_seq, count, bytes, reply };
        let sent = match self.jobs().send(queued) {
            Ok(()) => Ok(()),
            // The committer is gone: another, on this runtime.
            Err(mpsc::error::SendError(queued)) => match self.restart() {
                Some(jobs) => jobs.send(queued).map_err(|error| error.0),
                None => Err(queued),
            },
        };
        match sent {
            Ok(()) => answer.await.unwrap_or_else(|_| {
                Err(StoreError::Unavailable { source: Box::new(CommitterGone) })
            }),
            // No committer to be had: commit here.
            Err(queued) => {
                self.writer.one(Transition { step: Some(queued.step), ..queued.transition }).await
            }
        }
    }
}

/// Starts a committer task on the current runtime; the way to it.
fn spawn_dispatch(
    writer: &Writer,
    flights: usize,
    busy: &Arc<AtomicUsize>,
) -> mpsc::UnboundedSender<Queued> {
    let (jobs, queue) = mpsc::unbounded_channel();
    tokio::spawn(dispatch(writer.clone(), queue, flights, Arc::clone(busy)));
    jobs
}

impl Queued {
    /// Commits it alone and answers.
    async fn alone(self, writer: &Writer) {
        let reply = self.reply;
        let transition = Transition { step: Some(self.step), ..self.transition };
        let _ = reply.send(writer.one(transition).await);
    }
}

/// The committer: takes the steps waiting, up to [`MAX_BATCH`], and sends
/// them in one call, with at most `flights` calls in flight (each counted
/// in `busy`); ends once every handle to it is dropped and the calls in
/// flight are answered.
async fn dispatch(
    writer: Writer,
    mut queue: mpsc::UnboundedReceiver<Queued>,
    flights: usize,
    busy: Arc<AtomicUsize>,
) {
    let mut flying = JoinSet::new();
    // A step that would have made the last call too large.
    let mut held: Option<Queued> = None;
    loop {
        while flying.try_join_next().is_some() {}
        if flying.len() >= flights {
            flying.join_next().await;
            continue;
        }
        let first = match held.take() {
            Some(queued) => queued,
            None => match queue.recv().await {
                Some(queued) => queued,
                None => break,
            },
        };
        let mut bytes = first.bytes;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            let Ok(queued) = queue.try_recv() else { break };
            if bytes + queued.bytes > MAX_BATCH_BYTES {
                held = Some(queued);
                break;
            }
            bytes += queued.bytes;
            batch.push(queued);
        }
        let writer = writer.clone();
        busy.fetch_add(1, Ordering::AcqRel);
        let flight = Busy(Arc::clone(&busy));
        flying.spawn(async move {
            writer.many(batch).await;
            drop(flight);
        });
    }
    while flying.join_next().await.is_some() {}
}

/// One call's parameters, in the order `tollgate_commit_steps` takes them.
#[derive(Default)]
struct Columns {
    runs: Vec<String>,
    epochs: Vec<i64>,
    steps: Vec<i64>,
    at: Vec<i64>,
    frontiers: Vec<Vec<u8>>,
    first_seqs: Vec<i64>,
    counts: Vec<i32>,
    lines: Vec<String>,
    leases: Vec<Option<i64>>,
    snapshots: Vec<Option<Vec<u8>>>,
    update_of: Vec<i32>,
    tasks: Vec<i32>,
    nodes: Vec<String>,
    updates: Vec<Vec<u8>>,
}

impl Writer {
    /// Commits the transition in a call of its own.
    pub(crate) async fn one(&self, transition: Transition) -> Result<(), StoreError> {
        let run = transition.run;
        let (first_seq, count) = event_span(run, &transition.events)?;
        let failure = transition.failure.as_ref().map(json_text).transpose()?;
        let interrupts = interrupts_json(&transition.interrupts)?;
        let step = transition.step.as_ref();
        let number = step.map(|step| sql_int(step.step));
        let full = step.map(|step| step.frontier.to_bytes());
        // A frontier the run stored lately is referred to (`frontiers.rs`).
        let reference = full.as_deref().and_then(|full| self.frontiers.reference(run, full));
        let frontier: Option<&[u8]> =
            reference.as_ref().map(|stored| &stored[..]).or(full.as_deref());
        let tasks: Vec<i32> = step
            .map(|step| step.updates.iter().map(|u| u.task.index as i32).collect())
            .unwrap_or_default();
        let nodes: Vec<&str> = step
            .map(|step| step.updates.iter().map(|u| u.task.node.as_str()).collect())
            .unwrap_or_default();
        let updates: Vec<Vec<u8>> = step
            .map(|step| step.updates.iter().map(|u| u.update.to_bytes()).collect())
            .unwrap_or_default();
        let snapshot = step.and_then(|step| step.snapshot.as_ref()).map(Blob::to_bytes);
        const COMMIT: &str = concat!(
            "SELECT tollgate_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
             $14, $15, $16)",
            watched_sql!("= $1")
        );
        let (client, statement) = prepared(&self.pool, COMMIT, self.unnamed).await?;
        let (id, epoch) = (run.to_string(), sql_int(transition.epoch));
        let lines = EventRecord::join_compact(run, &transition.events);
        let status = transition.status.as_str();
        let params: [&(dyn ToSql + Sync); 16] = [
            &id,
            &epoch,
            &number,
            &transition.at_ms,
            &frontier,
            &tasks,
            &nodes,
            &updates,
            &snapshot,
            &status,
            &failure,
            &first_seq,
            &count,
            &lines,
            &transition.lease_until_ms,
            &interrupts,
        ];
        let write = client.row(&statement, &params);
        // A new status is announced in the same round trip; a step of a
        // running run, to its watchers (read by the write) after it.
        let running = transition.status == RunStatus::Running;
        let result = if running {
            let result = write.await;
            if let Ok(row) = &result {
                announce(&client, self.unnamed, None, &watched(row, 1)).await;
            }
            result
        } else {
            announced(&client, self.unnamed, (run, transition.status), write).await
        };
        match (&result, step.zip(frontier)) {
            (Ok(_), Some((step, stored))) => {
                self.frontiers.committed(run, step.step, stored, running)
            }
            (Ok(_), None) if running => {}
            _ => self.frontiers.forget(run),
        }
        result.map(drop).map_err(|error| {
            Refusal {
                epoch: transition.epoch,
                step: step.map_or(0, |step| step.step),
                first_seq: first_seq as u64,
                ..Refusal::new(run)
            }
            .map(error)
        })
    }

    /// Commits `batch` (steps of running runs) in one call, and answers
    /// each step.
    async fn many(&self, mut batch: Vec<Queued>) {
        if batch.len() == 1 {
            if let Some(queued) = batch.pop() {
                queued.alone(self).await;
            }
            return;
        }
        // Runs rows are locked in the order of their ids, as far as the
        // plan follows the arrays: calls in flight together rarely share a
        // run, and a deadlock between two would be refused and retried.
        batch.sort_by_key(|queued| queued.transition.run);
        let mut columns = Columns::default();
        for (position, queued) in batch.iter().enumerate() {
            let (transition, step) = (&queued.transition, &queued.step);
            let full = step.frontier.to_bytes();
            let stored = match self.frontiers.reference(transition.run, &full) {
                Some(reference) => reference.to_vec(),
                None => full,
            };
            columns.runs.push(transition.run.to_string());
            columns.epochs.push(sql_int(transition.epoch));
            columns.steps.push(sql_int(step.step));
            columns.at.push(transition.at_ms);
            columns.frontiers.push(stored);
            columns.first_seqs.push(queued.first_seq);
            columns.counts.push(queued.count);
            columns.lines.push(EventRecord::join_compact(transition.run, &transition.events));
            columns.leases.push(transition.lease_until_ms);
            columns.snapshots.push(step.snapshot.as_ref().map(Blob::to_bytes));
            for update in &step.updates {
                columns.update_of.push(position as i32 + 1);
                columns.tasks.push(update.task.index as i32);
                columns.nodes.push(update.task.node.clone());
                columns.updates.push(update.update.to_bytes());
            }
        }
        let steps = batch.len();
        match self.call(&columns).await {
            Ok(Called { accepted, watched, client }) => {
                tracing::debug!(steps, committed = accepted.len(), "group commit");
                let mut refused = Vec::new();
                let mut announced = Vec::new();
                let mut accepted = accepted.into_iter().peekable();
                for (position, queued) in batch.into_iter().enumerate() {
                    if accepted.next_if_eq(&(position as i32 + 1)).is_some() {
                        let (run, step) = (queued.transition.run, queued.step.step);
                        self.frontiers.committed(run, step, &columns.frontiers[position], true);
                        let _ = queued.reply.send(Ok(()));
                        let id = &columns.runs[position];
                        if watched.contains(id) {
                            announced.push(id.clone());
                        }
                    } else {
                        refused.push(queued);
                    }
                }
                // Streams of watched runs wake once their steps are
                // answered (a refused one announces its lone commit).
                announce(&client, self.unnamed, None, &announced).await;
                drop(client);
                // Refused steps wrote nothing: alone, they say why.
                self.each_alone(refused).await;
            }
            Err(Failed::NotCommitted) => {
                tracing::debug!(steps, "group commit refused whole: each step alone");
                self.each_alone(batch).await;
            }
            Err(Failed::Lost(error)) => {
                let lost = CallLost { steps, source: Arc::new(error) };
                for queued in batch {
                    self.frontiers.forget(queued.transition.run);
                    let source = Box::new(lost.clone());
                    let _ = queued.reply.send(Err(StoreError::Unavailable { source }));
                }
            }
        }
    }

    /// Commits each of `steps` alone, all at once (one waiting on a row
    /// lock holds up none of the others), and answers each.
    async fn each_alone(&self, steps: Vec<Queued>) {
        let mut alone = JoinSet::new();
        for queued in steps {
            let writer = self.clone();
            alone.spawn(async move { queued.alone(&writer).await });
        }
        while alone.join_next().await.is_some() {}
    }

    /// One call of `tollgate_commit_steps`: the positions of the steps it
    /// committed, and which of its runs are watched.
    async fn call(&self, columns: &Columns) -> Result<Called, Failed> {
        const COMMIT_STEPS: &str = concat!(
            "SELECT tollgate_commit_steps($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
             $13, $14)",
            watched_sql!("= ANY ($1)")
        );
        // Nothing was sent until the call is: errors before it committed
        // nothing.
        let client = self.pool.get().await.map_err(|_| Failed::NotCommitted)?;
        let statement =
            client.statement(COMMIT_STEPS, self.unnamed).await.map_err(|_| Failed::NotCommitted)?;
        let row = client
            .row(
                &statement,
                &[
                    &columns.runs,
                    &columns.epochs,
                    &columns.steps,
                    &columns.at,
                    &columns.frontiers,
                    &columns.first_seqs,
                    &columns.counts,
                    &columns.lines,
                    &columns.leases,
                    &columns.snapshots,
                    &columns.update_of,
                    &columns.tasks,
                    &columns.nodes,
                    &columns.updates,
                ],
            )
            .await
            .map_err(|error| {
                // An ERROR from the server: the call's transaction rolled
                // back (a failed commit included). A FATAL one (the
                // backend shut down) may come after the commit; so may a
                // break of the connection.
                let severity = error.as_db_error().and_then(|db| db.parsed_severity());
                match severity {
                    Some(Severity::Error) => Failed::NotCommitted,
                    _ => Failed::Lost(error),
                }
            })?;
        // It committed: an answer that does not read is an answer lost.
        let accepted = row.try_get::<_, Vec<i32>>(0).map_err(Failed::Lost)?;
        Ok(Called { accepted, watched: watched(&row, 1), client })
    }
}

/// What a call that committed answered.
struct Called {
    /// The positions (from 1, in order) of the steps it committed.
    accepted: Vec<i32>,
    /// Which of its runs (accepted or not) someone watches.
    watched: Vec<String>,
    /// The connection it committed on, to announce them.
    client: deadpool_postgres::Client,
}

/// Why a call did not answer.
enum Failed {
    /// Nothing of it committed.
    NotCommitted,
    /// Its connection broke, or its server process was shut down: it may
    /// or may not have committed.
    Lost(tokio_postgres::Error),
}

#[cfg(test)]
#[path = "commit_tests.rs"]
pub(crate) mod tests;
