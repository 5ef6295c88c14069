//! Group commit. A write that finds the store's connection held by
//! another task of the process is not waited for on the runtime worker
//! that made it: it is handed to this thread, which takes the connection
//! as soon as it is free and runs every write waiting at that moment in
//! one transaction, so that concurrent runs share one commit. So is a
//! write that finds another process holding the database's write lock:
//! the thread waits for it once for all the writes waiting. Each write
//! is still atomic on its own: one that is refused (fenced, out of order)
//! is answered with its refusal and the others run again without it.
//! Every caller is answered after the transaction holding its write is
//! committed (durable as the store's level says), or with the error that
//! kept it from being.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::fault::{backend, is_busy, Abort};
use super::writers::Writers;
use super::{CheckpointShared, Tx, FIRST_PAUSE, LAST_PAUSE};
use crate::error::StoreError;
use crate::failpoint::__failpoint;

/// A write, with its answer's type erased.
pub(super) type Work = Box<dyn Fn(&Connection) -> Result<Box<dyn Any + Send>, Abort> + Send + Sync>;

type Answer = Result<Box<dyn Any + Send>, StoreError>;

struct Job {
    work: Work,
    /// The answer, and the write given back to be dropped by its caller:
    /// what it owns (the step's encoded rows) was allocated on the
    /// caller's thread, and freeing it there spares the allocator's
    /// cross-thread locks.
    reply: oneshot::Sender<(Answer, Work)>,
}

/// Writes in one transaction at most (a bound on how long one commit holds
/// the connection).
const MAX_BATCH: usize = 256;

/// The group-commit thread and the way to it.
#[derive(Debug)]
pub(super) struct GroupCommitter {
    jobs: Option<Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    stats: Arc<Stats>,
}

/// What the thread did: transactions committed and writes in them.
#[derive(Debug, Default)]
pub(super) struct Stats {
    pub(super) commits: AtomicU64,
    pub(super) writes: AtomicU64,
    /// Writes handed over and not yet answered.
    pub(super) waiting: AtomicU64,
    /// Until when (nanoseconds on [`clock`]) writes keep coming to the
    /// thread: set by each batch that carried several writes.
    pub(super) shared_until: AtomicU64,
    /// How long after such a batch (nanoseconds; [`SHARED_WINDOW`]).
    pub(super) window: AtomicU64,
    /// The task that last wrote on its own thread, and when (nanoseconds
    /// on [`clock`]).
    alone: Mutex<Option<(tokio::task::Id, u64)>>,
}

/// Nanoseconds since the first call in this process: a clock that fits an
/// atomic.
fn clock() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// How long after a batch of several writes new writes still go to the
/// thread rather than running on their caller's. While runs share
/// commits, a write that found the connection free between two batches
/// would otherwise run alone on its caller's thread: a whole commit for
/// one write, ahead of writes that were waiting (on the `concurrent`
/// benchmark, step p99 9-11 ms with such writes, 5.5-5.8 ms without). A
/// lone run never makes a batch of several, so its writes stay on its
/// own thread (no hand-over per step).
const SHARED_WINDOW: Duration = Duration::from_millis(2);

/// How soon after another task's write on its own thread a write goes to
/// the thread instead. Tasks writing one after another this closely are
/// runs sharing the store; on a runtime with one worker thread they would
/// otherwise take turns at the free connection, each committing alone
/// while the others wait, and no batch would ever form (on the
/// `concurrent` benchmark with `TOKIO_WORKER_THREADS=1`: 54-60k steps/s, a
/// lone run's rate, against 97-115k once they share commits). A run's
/// own task writing step after step stays on its thread.
const OTHERS_WINDOW: Duration = Duration::from_micros(100);

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Job")
    }
}

impl GroupCommitter {
    /// Starts the thread on the store's connection; `checkpoints` is told
    /// of every commit.
    pub(super) fn start(
        conn: Arc<Mutex<Connection>>,
        writers: Arc<Writers>,
        checkpoints: Option<Arc<CheckpointShared>>,
        patience: Duration,
    ) -> Result<Self, StoreError> {
        let (jobs, queue) = mpsc::channel();
        let stats = Arc::new(Stats::default());
        stats.window.store(SHARED_WINDOW.as_nanos() as u64, Ordering::Relaxed);
        let counted = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("tollgate-commit".into())
            .spawn(move || run(&conn, &writers, &queue, checkpoints.as_deref(), patience, &counted))
            .map_err(|error| StoreError::Backend { source: Box::new(error) })?;
        Ok(Self { jobs: Some(jobs), thread: Some(thread), stats })
    }

    /// Writes handed over and not yet answered.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> u64 {
        self.stats.waiting.load(Ordering::SeqCst)
    }

    /// (transactions committed, writes they carried) so far.
    #[cfg(test)]
    pub(super) fn stats(&self) -> (u64, u64) {
        (self.stats.commits.load(Ordering::Relaxed), self.stats.writes.load(Ordering::Relaxed))
    }

    /// Hands `work` to the thread; the answer comes once it is committed.
    pub(super) async fn submit(&self, work: Work) -> Answer {
        let (reply, answer) = oneshot::channel();
        self.stats.waiting.fetch_add(1, Ordering::SeqCst);
        let sent = self.jobs.as_ref().map(|jobs| jobs.send(Job { work, reply }));
        if !matches!(sent, Some(Ok(()))) {
            self.stats.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(gone());
        }
        match answer.await {
            Ok((answer, work)) => {
                drop(work);
                answer
            }
            Err(_) => Err(gone()),
        }
    }

    /// Whether a write of `task` goes to the thread. True while writes are
    /// waiting for it: a new write then joins them rather than overtaking
    /// them on its own thread. True while runs have been sharing commits (a
    /// batch of several writes ended less than [`SHARED_WINDOW`] ago): a
    /// new write then waits its turn with the others. And true when
    /// another task wrote on its own thread less than [`OTHERS_WINDOW`]
    /// ago: tasks are taking turns at the store.
    pub(super) fn busy(&self, task: Option<tokio::task::Id>) -> bool {
        if self.stats.waiting.load(Ordering::SeqCst) > 0
            || clock() < self.stats.shared_until.load(Ordering::Relaxed)
        {
            return true;
        }
        let Some(task) = task else { return false };
        let alone = *self.stats.alone.lock().unwrap_or_else(PoisonError::into_inner);
        matches!(alone, Some((other, at))
            if other != task && clock().saturating_sub(at) < OTHERS_WINDOW.as_nanos() as u64)
    }

    /// Notes that `task` just wrote on its own thread.
    pub(super) fn wrote_alone(&self, task: Option<tokio::task::Id>) {
        if let Some(task) = task {
            *self.stats.alone.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((task, clock()));
        }
    }

    /// Sets how long writes keep going to the thread after a batch of
    /// several.
    #[cfg(test)]
    pub(super) fn set_window(&self, window: Duration) {
        self.stats.window.store(window.as_nanos() as u64, Ordering::Relaxed);
        self.stats.shared_until.store(0, Ordering::Relaxed);
    }
}

impl Drop for GroupCommitter {
    fn drop(&mut self) {
        // Closing the channel ends the thread once the queue is empty.
        self.jobs.take();

        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread stopped (it panicked, or the store is closing).
fn gone() -> StoreError {
    StoreError::Backend { source: "the SQLite commit thread has stopped".into() }
}

fn run(
    conn: &Mutex<Connection>,
    writers: &Writers,
    queue: &Receiver<Job>,
    checkpoints: Option<&CheckpointShared>,
    patience: Duration,
    stats: &Stats,
) {
    while let Ok(first) = queue.recv() {
        // The batch is taken once the connection is ours, so that writes
        // arriving while it was held join it.
        let conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let answers = commit_batch(&conn, writers, queue, batch, patience);
        let several = answers.len() > 1;
        drop(conn);
        if several {
            let until = clock().saturating_add(stats.window.load(Ordering::Relaxed));
            stats.shared_until.store(until, Ordering::Relaxed);
        }
        stats.waiting.fetch_sub(answers.len() as u64, Ordering::SeqCst);
        let written = answers.iter().filter(|(_, answer)| answer.is_ok()).count() as u64;
        if written > 0 {
            stats.commits.fetch_add(1, Ordering::Relaxed);
            stats.writes.fetch_add(written, Ordering::Relaxed);
            if let Some(shared) = checkpoints {
                super::count_commits(shared, written);
            }
        }
        for (job, answer) in answers {
            // A caller that stopped waiting no longer needs its answer.
            let _ = job.reply.send((answer, job.work));
        }
    }
}

/// Runs `batch` in one transaction: a refused write is answered with its
/// refusal and the transaction begun again without it; a busy database is
/// waited for (up to `patience`), and writes queued meanwhile join the
/// batch, so that they wait for the other process once, together; a
/// failed commit fails every write in it.
fn commit_batch(
    conn: &Connection,
    writers: &Writers,
    queue: &Receiver<Job>,
    batch: Vec<Job>,
    patience: Duration,
) -> Vec<(Job, Answer)> {
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    let mut pending = batch;
    let mut answers = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        match attempt(conn, writers, &mut pending, &mut answers) {
            Attempt::Done | Attempt::Again => {}
            Attempt::Busy if started.elapsed() < patience => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(LAST_PAUSE);
                while pending.len() + answers.len() < MAX_BATCH {
                    match queue.try_recv() {
                        Ok(job) => pending.push(job),
                        Err(_) => break,
                    }
                }
            }
            Attempt::Busy => {
                let waited_ms = started.elapsed().as_millis() as u64;
                for job in pending.drain(..) {
                    answers.push((job, Err(StoreError::Busy { waited_ms })));
                }
            }
        }
    }
    answers
}

/// How one attempt at a batch went.
enum Attempt {
    /// Every pending write is answered.
    Done,
    /// One write was answered alone; the others are to run again.
    Again,
    /// Another process holds the database: try again later.
    Busy,
}

/// One transaction over the pending writes; answered writes leave
/// `pending` for `answers`.
fn attempt(
    conn: &Connection,
    writers: &Writers,
    pending: &mut Vec<Job>,
    answers: &mut Vec<(Job, Answer)>,
) -> Attempt {
    let tx = match Tx::begin(conn, "BEGIN IMMEDIATE") {
        Ok(tx) => tx,
        Err(error) if is_busy(&error) => return Attempt::Busy,
        Err(error) => {
            fail_all(pending, answers, &error);
            return Attempt::Done;
        }
    };
    writers.begin();
    let mut values = Vec::with_capacity(pending.len());
    for index in 0..pending.len() {
        // A write that panics is that write's failure, not the thread's.
        let work = &pending[index].work;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&tx)))
            .unwrap_or_else(|_| {
                Err(Abort::Refused(StoreError::Backend { source: "a write panicked".into() }))
            });
        let error = match result {
            Ok(value) => {
                values.push(value);
                continue;
            }
            Err(Abort::Sqlite(error)) if is_busy(&error) => return Attempt::Busy,
            Err(Abort::Sqlite(error)) => backend(error),
            Err(Abort::Refused(error)) => error,
        };
        // Undo everything (dropping the transaction rolls it back), answer
        // this one, run the rest again.
        drop(tx);
        let job = pending.remove(index);
        answers.push((job, Err(error)));
        return Attempt::Again;
    }
    __failpoint("commit:inside");
    match tx.commit() {
        Ok(()) => {
            writers.committed();
            __failpoint("commit:after");
            for (job, value) in pending.drain(..).zip(values) {
                answers.push((job, Ok(value)));
            }
        }
        Err(error) => {
            writers.failed();
            if is_busy(&error) {
                return Attempt::Busy;
            }
            fail_all(pending, answers, &error);
        }
    }
    Attempt::Done
}

/// Answers every pending write with `error` (each gets its own copy).
fn fail_all(pending: &mut Vec<Job>, answers: &mut Vec<(Job, Answer)>, error: &rusqlite::Error) {
    for job in pending.drain(..) {
        answers.push((job, Err(backend(copy(error)))));
    }
}

fn copy(error: &rusqlite::Error) -> rusqlite::Error {
    match error {
        rusqlite::Error::SqliteFailure(failure, message) => {
            rusqlite::Error::SqliteFailure(*failure, message.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}
