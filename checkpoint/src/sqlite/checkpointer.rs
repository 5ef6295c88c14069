//! The background checkpoint thread: copies the WAL back into the
//! database every so many commits (or on a timer), and starts the WAL over
//! when many runs committing without pause keep SQLite from doing it.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::Connection;

use super::fault::{backend, is_busy};
use crate::error::StoreError;

/// The background checkpoint thread and how to wake and stop it.
#[derive(Debug)]
pub(super) struct Checkpointer {
    pub(super) shared: Arc<CheckpointShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Debug, Default)]
pub(crate) struct CheckpointShared {
    state: Mutex<CheckpointState>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct CheckpointState {
    /// Commits so far.
    commits: u64,
    /// Commits the last checkpoint started after.
    covered: u64,
    /// Checkpoints run so far.
    checkpoints: u64,
    /// Times the thread started the WAL over.
    restarts: u64,
    stop: bool,
}

/// Commits after which the checkpoint thread runs (it also runs on a
/// timer when there were fewer). Not after every commit: each checkpoint
/// syncs the files, and copying a batch writes a page changed many times
/// once. Not many more either: while a checkpoint syncs the files,
/// commits stall, and bigger checkpoints stall them longer (on the
/// `concurrent` benchmark, step p99 median 6.0 ms at 256, 4.9 ms at 128,
/// worse again at 1024; 64 slowed a lone run's `cycle`).
pub(super) const CHECKPOINT_EVERY: u64 = 128;
/// The checkpoint thread's timer.
pub(super) const CHECKPOINT_PERIOD: Duration = Duration::from_millis(100);
/// With [`Checkpointing::Background`](super::Checkpointing::Background), the WAL is started over once it
/// holds this many times `wal_autocheckpoint` frames (below the inline
/// safety net, [`SAFETY_NET`]). Each restart stalls this process's commits
/// twice: the restart itself holds the connection while it syncs the
/// files, and the first commit after it syncs the new WAL header. Under
/// steady load, restarting at 16 times rather than 4 took the `concurrent`
/// benchmark's step p99 (5 rounds on one store) from 6.0 and 7.3 ms to 5.0
/// and 5.6 ms in two sessions of 8 interleaved runs, and left it as it was
/// in a slower third (24 and 40 times were no better than 16).
pub(super) const RESTART_AT: u32 = 16;
/// With [`Checkpointing::Background`](super::Checkpointing::Background), SQLite's own inline checkpoint
/// (`wal_autocheckpoint`) stays in force at this many times the value, as
/// a safety net should the checkpoint thread fall behind. Above
/// [`RESTART_AT`] with room to spare (the WAL grows while a restart is
/// due): past the net every commit checkpoints inline.
pub(super) const SAFETY_NET: u32 = 40;

impl Checkpointer {
    /// The thread, on its own connection to `path`; it starts the WAL over
    /// once it holds `restart_at` frames, holding the store's connection
    /// `writer` meanwhile (see [`Checkpointer::restart`]).
    pub(super) fn start(
        path: &Path,
        restart_at: u32,
        writer: Arc<Mutex<Connection>>,
    ) -> Result<Self, StoreError> {
        let conn = Connection::open(path).map_err(backend)?;
        // A busy checkpoint is skipped, not waited for.
        conn.busy_timeout(Duration::ZERO).map_err(backend)?;
        let shared = Arc::new(CheckpointShared::default());
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("tollgate-checkpoint".into())
            .spawn(move || Self::work(&conn, &theirs, i64::from(restart_at), &writer))
            .map_err(|error| StoreError::Backend { source: Box::new(error) })?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Starts the WAL over from its beginning; the frames it held, if it
    /// did. A writer does that itself only when it begins a transaction
    /// while the whole WAL is copied back; under a steady stream of group
    /// commits some writes always come in while a checkpoint copies, so the
    /// WAL grew to 100-230 MB (256 runs at once for 3-10 s, measured)
    /// instead of staying near the checkpoint interval. A `RESTART`
    /// checkpoint takes the write lock, copies what is left, syncs and
    /// resets the WAL once no reader is in it. The caller holds the store's
    /// own connection meanwhile, so that this process's writes wait for the
    /// restart (the commit thread for the connection, a write on a caller's
    /// task on the commit thread; reads go to read connections). It waits
    /// for nobody: when another process writes or a read is in the WAL, it
    /// copies what it can and the next checkpoint tries again, so that
    /// other processes never stall this one's writes.
    fn restart(conn: &Connection) -> Option<i64> {
        let row = |row: &rusqlite::Row<'_>| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?));
        match conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], row) {
            Ok((0, frames)) => Some(frames),
            Ok(_) => None,
            Err(error) => {
                if !is_busy(&error) {
                    tracing::debug!(%error, "restarting the WAL failed");
                }
                None
            }
        }
    }

    fn work(
        conn: &Connection,
        shared: &CheckpointShared,
        restart_at: i64,
        writer: &Mutex<Connection>,
    ) {
        let mut timed_out = false;
        // The size of the WAL the last restart reset (reported until the
        // next write).
        let mut restarted = None;
        let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if state.stop {
                return;
            }
            let behind = state.commits - state.covered;
            if behind >= CHECKPOINT_EVERY || (timed_out && behind > 0) {
                state.covered = state.commits;
                state.checkpoints += 1;
                timed_out = false;
                drop(state);
                // PASSIVE: copies what no reader still needs, never blocks
                // writers; busy or failed attempts are retried next time.
                // The row says how many frames the WAL holds.
                let mut started_over = false;
                match conn
                    .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get::<_, i64>(1))
                {
                    Ok(frames) if frames >= restart_at && restarted != Some(frames) => {
                        let held = writer.lock().unwrap_or_else(PoisonError::into_inner);
                        let reset = Self::restart(conn);
                        drop(held);
                        started_over = reset.is_some();
                        restarted = reset.or(restarted);
                    }
                    Ok(_) => {}
                    Err(error) if is_busy(&error) => {}
                    Err(error) => tracing::debug!(%error, "background checkpoint failed"),
                }
                state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.restarts += u64::from(started_over);
                continue;
            }
            let (guard, waited) = shared
                .wake
                .wait_timeout(state, CHECKPOINT_PERIOD)
                .unwrap_or_else(PoisonError::into_inner);
            state = guard;
            timed_out = waited.timed_out();
        }
    }

    /// (commits, checkpoints) so far.
    #[cfg(test)]
    pub(super) fn counts(&self) -> (u64, u64) {
        let state = self.shared.state.lock().unwrap_or_else(PoisonError::into_inner);
        (state.commits, state.checkpoints)
    }

    /// Times the WAL was started over so far.
    #[cfg(test)]
    pub(super) fn restarts(&self) -> u64 {
        self.shared.state.lock().unwrap_or_else(PoisonError::into_inner).restarts
    }

    pub(super) fn committed(&self) {
        count_commits(&self.shared, 1);
    }
}

/// Counts `writes` committed (a group commit carries many: each grows the
/// WAL like a commit of its own); every `CHECKPOINT_EVERY` wakes the
/// checkpoint thread, so that the WAL never reaches the inline
/// checkpoint's size in the path of a commit.
pub(super) fn count_commits(shared: &CheckpointShared, writes: u64) {
    let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
    let before = state.commits - state.covered;
    state.commits += writes;
    if before < CHECKPOINT_EVERY && before + writes >= CHECKPOINT_EVERY {
        shared.wake.notify_one();
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.state.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
