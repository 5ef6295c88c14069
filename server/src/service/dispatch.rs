//! The dispatcher of the outbox's work (`outbox.rs`): one look every
//! 250 ms, at once when work is added, and when runs change status while
//! work waits; each look starts the pending runs that are ready and sends
//! the webhooks whose runs settled (`webhooks.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tollgate_checkpoint::{OutboxEntry, OutboxGate, OutboxQuery, RunId};

use super::admission::Admission;
use super::outbox::{gate, next_page, OutboxWork, Retry, PAGES};
use super::pending::{now_ms, Pending, PENDING_HOLD_MS, PENDING_KIND};
use super::{webhooks, Runs};
use crate::error::ServiceError;

/// How often the outbox is read when nothing wakes the dispatcher.
const POLL: Duration = Duration::from_millis(250);
/// The shortest time between two reads that runs changing status
/// prompt (on SQLite every commit does).
const MIN_GAP: Duration = Duration::from_millis(20);
/// Starts of a pending run that may fail on a conflict before it is
/// given up (a conflict that is not a busy thread repeats).
const MAX_STARTS: u32 = 20;

/// What the dispatcher works with.
struct Dispatcher {
    runs: Runs,
    admission: Arc<Admission>,
    work: Arc<dyn OutboxWork>,
}

/// Starts the dispatcher on the current runtime (none: not at all); it
/// ends once `work` is no longer [`OutboxWork::alive`]. `woken` has it
/// look at once (work was added).
pub(crate) fn spawn_dispatcher(
    runs: Runs,
    admission: Arc<Admission>,
    work: Arc<dyn OutboxWork>,
    woken: Arc<Notify>,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let dispatcher = Dispatcher { runs, admission, work };
    runtime.spawn(async move {
        let changes = dispatcher.runs.status_changes();
        let mut outstanding = true;
        let mut cursors = Cursors::default();
        while dispatcher.work.alive() {
            let began = Instant::now();
            match dispatcher.tick(&mut cursors).await {
                Ok(any) => outstanding = any,
                // The database away: `/healthz` and the store-error metric
                // say so; no warning four times a second here.
                Err(error @ ServiceError::Unavailable { .. }) => {
                    tracing::debug!(%error, "outbox: not read");
                }
                Err(error) => tracing::warn!(%error, "outbox: not read"),
            }
            // Runs changing status matter only while work waits.
            let changed = async {
                match changes.as_deref().filter(|_| outstanding) {
                    Some(changes) => {
                        changes.notified().await;
                        tokio::time::sleep(MIN_GAP.saturating_sub(began.elapsed())).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = woken.notified() => {}
                () = changed => {}
                () = tokio::time::sleep(POLL) => {}
            }
        }
    });
}

/// Where each kind's next look goes on from: a look reads at most
/// [`PAGES`] pages of what is ready, so that many entries that are
/// ready but cannot proceed here (a graph this server does not serve, a
/// webhook host it does not allow) never hide the rest: the next look
/// reads on after them, and starts over once it has read to the end.
#[derive(Default)]
struct Cursors {
    runs: Option<OutboxEntry>,
    webhooks: Option<OutboxEntry>,
}

/// What a look found of a thread: pending runs of a thread held by a run
/// are gated on it (out of sight until it ends); others wait for the
/// next look.
enum Thread {
    /// Held by this run.
    Held(RunId),
    /// Free, or its earliest pending run seen: the rest wait.
    Seen,
}

impl Dispatcher {
    /// One look: due pending runs started, settled runs' webhooks sent.
    /// Whether any work waits.
    async fn tick(&self, cursors: &mut Cursors) -> Result<bool, ServiceError> {
        let started = self.start_due(&mut cursors.runs).await?;
        let (runs, admission, work) = (&self.runs, &self.admission, &self.work);
        let sent = webhooks::deliver_due(runs, admission, work, &mut cursors.webhooks).await?;
        Ok(started || sent)
    }

    /// Starts the pending runs that are ready, each thread's oldest first
    /// and only once no run of its thread is in flight or waits for a
    /// decision; those of a thread that is not free are gated on the run
    /// that holds it, so that they are read again only once it ends. One
    /// that fails to be read or started is left for the next look, the
    /// others go on.
    async fn start_due(&self, cursor: &mut Option<OutboxEntry>) -> Result<bool, ServiceError> {
        let now = now_ms();
        let mut threads = HashMap::new();
        let mut any = false;
        for _ in 0..PAGES {
            let entries = next_page(&self.runs, PENDING_KIND, now, cursor).await?;
            any |= !entries.is_empty();
            for entry in entries {
                let id = entry.id.clone();
                if let Err(error) = self.consider(entry, now, &mut threads).await {
                    tracing::warn!(%id, %error, "a pending run was not started");
                }
            }
            if cursor.is_none() {
                break;
            }
        }
        Ok(any)
    }

    /// Starts pending run `entry` if it is free and its thread is; gates
    /// it on the run that holds its thread if there is one.
    async fn consider(
        &self,
        entry: OutboxEntry,
        now: i64,
        threads: &mut HashMap<String, Thread>,
    ) -> Result<(), ServiceError> {
        let store = self.runs.store();
        if entry.is_held(now) {
            if let Some(thread) = &entry.thread {
                threads.insert(thread.clone(), Thread::Seen);
            }
            return Ok(());
        }
        let Ok(run) = entry.id.parse::<RunId>() else {
            tracing::warn!(id = %entry.id, "outbox: a pending run without a run id; dropped");
            return self.runs.delete_pending(&entry.id).await;
        };
        if let Some(thread) = entry.thread.clone() {
            match threads.get(&thread) {
                Some(Thread::Held(holder)) => {
                    return gate(&self.runs, &entry.id, OutboxGate::ended(*holder)).await;
                }
                Some(Thread::Seen) => return Ok(()),
                None => {}
            }
            let latest = self.runs.executor().thread_latest(&thread).await?;
            if let Some(holder) = latest.filter(|latest| latest.status.holds_thread()) {
                if holder.id != run {
                    threads.insert(thread, Thread::Held(holder.id));
                    return gate(&self.runs, &entry.id, OutboxGate::ended(holder.id)).await;
                }
            }
            threads.insert(thread.clone(), Thread::Seen);
            // Only the thread's earliest pending run starts (a look that
            // went on from a cursor may meet a later one first).
            let head = OutboxQuery::new(PENDING_KIND, 1).thread(thread).due_by(now);
            let head = store.list_outbox(head).await?;
            if head.first().is_some_and(|head| head.id != entry.id) {
                return Ok(());
            }
        }
        if store.run(run).await.is_ok() {
            // Started before its record was deleted (a crash between).
            return self.runs.delete_pending(&entry.id).await;
        }
        if !self.work.can_start(&Pending::read(entry.clone())?).await {
            return Ok(());
        }
        let taken = store.take_outbox(&entry.id, now, now + PENDING_HOLD_MS).await?;
        let Some(taken) = taken else { return Ok(()) };
        let pending = Pending::read(taken)?;
        if pending.waiting() {
            self.start(pending, run).await?;
        }
        Ok(())
    }

    /// Starts `pending` (held) as run `run`: its record deleted once the
    /// run exists; put back on a conflict (the thread took a run
    /// meanwhile) or while the database is away; kept as failed when it
    /// cannot start.
    async fn start(&self, pending: Pending, run: RunId) -> Result<(), ServiceError> {
        match self.work.start(&pending, run).await {
            Ok(()) => self.runs.delete_pending(&pending.entry.id).await,
            Err(refused)
                if (refused.retry == Retry::Conflict && pending.entry.attempts < MAX_STARTS)
                    || refused.retry == Retry::Unavailable =>
            {
                self.runs.release_pending(pending, now_ms()).await
            }
            Err(refused) => {
                tracing::warn!(%run, error = %refused.message, "a pending run could not start");
                self.runs.pending_failed(pending, refused.why).await
            }
        }
    }
}
