//! Reads that find the store's connection held: they run on a read
//! connection of their own, never waiting on the runtime worker for the
//! writer to let go.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use super::tests::{block_on, new_run, step_of};
use super::*;
use crate::status::RunStatus;
use crate::{RunId, RunStore};

/// How long the other process's lock is held at most (the test fails if
/// the read took that long: it waited for the lock).
const HELD_AT_MOST: Duration = Duration::from_secs(20);

/// Another process holds the write lock; a write handed to the commit
/// thread waits for it there, holding the store's connection. A read on a
/// one-thread runtime is answered meanwhile (before, it blocked the
/// thread until the other process let go); the write lands once it does.
#[test]
fn a_read_is_answered_while_the_commit_thread_waits_for_another_process() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("reads.db");
    let store = Arc::new(SqliteStore::open(&path).expect("open"));
    let run = RunId::new();
    block_on(store.create_run(new_run(run))).expect("created");

    // The other process: holds the write lock until told, or for
    // HELD_AT_MOST, whichever comes first.
    let released = Arc::new(AtomicBool::new(false));
    let (release, told) = mpsc::channel::<()>();
    let (locked, is_locked) = mpsc::channel::<()>();
    let other = {
        let (path, released) = (path.clone(), Arc::clone(&released));
        std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(path).expect("open");
            conn.execute_batch("BEGIN IMMEDIATE").expect("the write lock");
            locked.send(()).expect("told");
            let _ = told.recv_timeout(HELD_AT_MOST);
            released.store(true, Ordering::SeqCst);
            conn.execute_batch("ROLLBACK").expect("let go");
        })
    };
    is_locked.recv().expect("locked");

    let writer = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            block_on(store.group.submit(Box::new(|conn| {
                conn.execute("INSERT INTO attachments (num, body) VALUES (1, 'x')", [])?;
                Ok(Box::new(()) as Box<dyn std::any::Any + Send>)
            })))
        })
    };
    // Until the commit thread holds the connection (it keeps it while it
    // waits for the lock).
    let deadline = std::time::Instant::now() + HELD_AT_MOST;
    while store.conn.try_lock().is_ok() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }

    let record = block_on(store.run(run)).expect("read");
    let answered_while_held = !released.load(Ordering::SeqCst);
    release.send(()).expect("release");
    other.join().expect("the other process");
    assert!(answered_while_held, "the read waited for the other process's lock");
    assert_eq!(record.id, run);
    assert_eq!(record.status, RunStatus::Running);
    assert!(writer.join().expect("writer").is_ok(), "the write lands once the lock is free");
    let body = block_on(store.attachment(run)).expect("attachment");
    assert_eq!(body.as_deref(), Some("x"));
}

/// Reads made while the connection is held see every commit made before
/// them, and the read connection is kept for the next such read.
#[test]
fn reads_on_the_read_connection_see_every_commit_and_reuse_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("fresh.db")).expect("open");
    let run = RunId::new();
    block_on(store.create_run(new_run(run))).expect("created");
    for n in 1..=3u64 {
        block_on(store.commit(step_of(run, n, 2 * n - 1, false))).expect("committed");
        let held = store.conn.lock().expect("the connection");
        let checkpoint = block_on(store.checkpoint(run, None)).expect("read");
        let events = block_on(store.events(run, 0, 100)).expect("events");
        drop(held);
        assert_eq!(checkpoint.run.step, n, "the read saw the commit before it");
        let frontier: u64 = checkpoint.frontier.decode().expect("decode");
        assert_eq!(frontier, n);
        assert_eq!(events.len() as u64, 2 * n, "and its events");
        assert_eq!(events.last().map(|event| event.seq), Some(2 * n));
    }
    assert_eq!(
        store.readers.as_ref().expect("a file: read connections").opened(),
        1,
        "one read connection, reused"
    );
}

/// With the connection free, a read runs on it: no read connection.
#[test]
fn a_read_that_finds_the_connection_free_runs_on_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("free.db")).expect("open");
    let run = RunId::new();
    block_on(store.create_run(new_run(run))).expect("created");
    assert_eq!(block_on(store.run(run)).expect("read").step, 0);
    assert_eq!(store.readers.as_ref().expect("a file: read connections").opened(), 0);
}

/// An in-memory database has no other connection to read on: reads wait
/// for its one connection, and see what was written.
#[test]
fn an_in_memory_store_reads_on_its_one_connection() {
    let store = SqliteStore::open(":memory:").expect("open");
    assert!(store.readers.is_none());
    let run = RunId::new();
    block_on(store.create_run(new_run(run))).expect("created");
    block_on(store.commit(step_of(run, 1, 1, false))).expect("committed");
    assert_eq!(block_on(store.run(run)).expect("read").step, 1);
}

/// The read connections close before the store's own: closing last, that
/// connection copies the WAL back and removes it, as it did before there
/// were read connections (a read-only one closing last would leave it).
#[test]
fn closing_the_store_after_reads_on_read_connections_leaves_no_wal() {
    for checkpointing in [Checkpointing::Inline, Checkpointing::Background] {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("closed.db");
        let options = SqliteOptions { checkpointing, ..SqliteOptions::default() };
        let store = SqliteStore::open_with(&path, options).expect("open");
        let run = RunId::new();
        block_on(store.create_run(new_run(run))).expect("created");
        block_on(store.commit(step_of(run, 1, 1, false))).expect("committed");
        let held = store.conn.lock().expect("the connection");
        assert_eq!(block_on(store.run(run)).expect("read").step, 1);
        drop(held);
        assert_eq!(store.readers.as_ref().expect("a file: read connections").opened(), 1);
        drop(store);
        let wal = dir.path().join("closed.db-wal");
        let left = wal.metadata().map_or(0, |meta| meta.len());
        assert!(!wal.exists(), "{checkpointing:?}: the WAL is left behind, {left} bytes");
        let reopened = SqliteStore::open(&path).expect("reopen");
        assert_eq!(block_on(reopened.run(run)).expect("read").step, 1);
    }
}
