//! Tests of what commits know of their runs (`writers.rs`): known state
//! is used, and never once it may be stale.

use rusqlite::Connection;

use super::tests::{block_on, new_run, step_of};
use super::writers::{Known, Touches, Writers};
use super::SqliteStore;
use crate::record::{TaskProgress, TaskUpdate, TaskWrite};
use crate::{Owner, RunId, RunStatus, RunStore, StoreError, TaskKey};

/// Step `number` of `run` (events `2n-1`, `2n`) by the writer of `epoch`.
fn step(run: RunId, number: u64, epoch: u64) -> crate::Transition {
    crate::Transition { epoch, ..step_of(run, number, 2 * number - 1, false) }
}

#[test]
fn a_runs_steps_read_nothing_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("s.db")).expect("open");
    let run = RunId::new();
    block_on(async {
        store.create_run(new_run(run)).await.expect("create");
        for number in 1..=5 {
            store.commit(step(run, number, 1)).await.expect("commit");
        }
    });
    assert_eq!(store.writers.misses(), 0, "no step read the run back: its creation left it");
    let checkpoint = block_on(store.checkpoint(run, None)).expect("checkpoint");
    assert_eq!(checkpoint.run.step, 5);
    assert_eq!(checkpoint.run.last_seq, 10);
}

#[test]
fn a_claim_of_this_store_or_of_another_connection_fences_the_old_writer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path).expect("open");
    let other = SqliteStore::open(&path).expect("open a second connection");
    let run = RunId::new();
    block_on(async {
        store.create_run(new_run(run)).await.expect("create");
        store.commit(step(run, 1, 1)).await.expect("step 1");
        // Taken over through this store: its own claim is seen.
        let epoch = store.claim(run, 1, Owner::current(), i64::MAX).await.expect("claim");
        assert_eq!(epoch, 2);
        let stale = store.commit(step(run, 2, 1)).await;
        assert!(
            matches!(stale, Err(StoreError::Fenced { writer: 1, current: 2, .. })),
            "{stale:?}"
        );
        store.commit(step(run, 2, 2)).await.expect("step 2 by the new owner");
        // Taken over through another connection (another process would
        // do the same): the known epoch 2 is stale now.
        let epoch = other.claim(run, 2, Owner::current(), i64::MAX).await.expect("claim");
        assert_eq!(epoch, 3);
        let stale = store.commit(step(run, 3, 2)).await;
        assert!(
            matches!(stale, Err(StoreError::Fenced { writer: 2, current: 3, .. })),
            "{stale:?}"
        );
        other.commit(step(run, 3, 3)).await.expect("step 3 by the other connection");
        // And the other connection's step is seen by the next commit here.
        let epoch = store.claim(run, 3, Owner::current(), i64::MAX).await.expect("claim back");
        store.commit(step(run, 4, epoch)).await.expect("step 4 follows the other's step 3");
        let early = store.commit(step(run, 4, epoch)).await;
        assert!(
            matches!(early, Err(StoreError::StepOutOfOrder { current: 4, found: 4, .. })),
            "{early:?}"
        );
    });
    let history = block_on(store.history(run, None, 10)).expect("history");
    let steps: Vec<u64> = history.checkpoints.iter().map(|c| c.step).collect();
    assert_eq!(steps, [4, 3, 2, 1, 0]);
}

#[test]
fn a_deleted_run_takes_no_more_steps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path).expect("open");
    let run = RunId::new();
    block_on(async {
        store.create_run(new_run(run)).await.expect("create");
        let pause = crate::Transition { status: RunStatus::AwaitingHitl, ..step(run, 1, 1) };
        store.commit(pause).await.expect("pause");
        store.delete_run(run).await.expect("delete");
        let late = store.commit(step(run, 2, 1)).await;
        assert!(matches!(late, Err(StoreError::RunNotFound { .. })), "{late:?}");
    });
    let conn = Connection::open(&path).expect("open");
    let rows: i64 = conn.query_row("SELECT count(*) FROM steps", [], |r| r.get(0)).expect("count");
    assert_eq!(rows, 0, "no step row of the deleted run");
}

#[test]
fn pending_writes_stored_after_a_step_are_dropped_by_the_next() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path).expect("open");
    let run = RunId::new();
    let pending = |conn: &Connection| -> i64 {
        conn.query_row("SELECT count(*) FROM pending_writes", [], |r| r.get(0)).expect("count")
    };
    block_on(async {
        store.create_run(new_run(run)).await.expect("create");
        store.commit(step(run, 1, 1)).await.expect("step 1");
        store.commit(step(run, 2, 1)).await.expect("step 2");
        let update = crate::Codec::Json.encode(&7u8, 1).expect("encode");
        let task = TaskKey { step: 3, index: 1, node: "n".into() };
        let updates = vec![TaskUpdate { task, update }];
        store.put_task_writes(TaskWrite { run, epoch: 1, updates }).await.expect("pending");
    });
    let conn = Connection::open(&path).expect("open");
    assert_eq!(pending(&conn), 1);
    // A commit without a step in between (its events only) is known too,
    // and it dropped no pending writes.
    let events = vec![crate::EventRecord { seq: 5, json: "{}".into() }];
    let between = crate::Transition { step: None, events, ..step(run, 3, 1) };
    block_on(store.commit(between)).expect("events only");
    assert_eq!(pending(&conn), 1);
    let third = crate::Transition {
        events: vec![crate::EventRecord { seq: 6, json: "{}".into() }],
        ..step(run, 3, 1)
    };
    block_on(store.commit(third)).expect("step 3");
    assert_eq!(pending(&conn), 0, "the step's commit dropped its pending writes");
    assert_eq!(store.writers.misses(), 1, "only the first commit after the pending write");
}

#[test]
fn only_committed_transactions_leave_anything_known() {
    let conn = Connection::open_in_memory().expect("open");
    let writers = Writers::new(&conn).expect("writers");
    let (run, other) = (RunId::new(), RunId::new());
    let known = |step| Known {
        writer: super::writers::Writer {
            status: RunStatus::Running,
            epoch: 1,
            num: 1,
            step,
            last_seq: 0,
            lease_until_ms: None,
        },
        settled: true,
        recent: Default::default(),
    };
    // A batch that was rolled back and begun again: nothing of it stays.
    writers.begin();
    writers.stage(run, known(1));
    writers.begin();
    writers.committed();
    assert!(writers.get(&conn, run).expect("get").is_none());
    // A write of another kind later in the batch forgets what was staged.
    writers.begin();
    writers.stage(run, known(1));
    writers.stage(other, known(7));
    writers.forget(Touches::Run(run));
    writers.committed();
    writers.begin();
    assert!(writers.get(&conn, run).expect("get").is_none());
    assert_eq!(writers.get(&conn, other).expect("get").map(|k| k.writer.step), Some(7));
    // A failed commit forgets everything.
    writers.begin();
    writers.stage(run, known(2));
    writers.failed();
    writers.committed();
    assert!(writers.get(&conn, run).expect("get").is_none());
    assert!(writers.get(&conn, other).expect("get").is_none());
    // Another connection's commit is noticed before known state is used.
    let file = tempfile::tempdir().expect("temp dir");
    let path = file.path().join("v.db");
    let mine = Connection::open(&path).expect("open");
    let theirs = Connection::open(&path).expect("open");
    mine.execute_batch("CREATE TABLE t (x)").expect("create");
    let writers = Writers::new(&mine).expect("writers");
    writers.begin();
    assert!(writers.get(&mine, other).expect("get").is_none());
    writers.stage(other, known(9));
    writers.committed();
    writers.begin();
    assert!(writers.get(&mine, other).expect("get").is_some(), "nobody else wrote");
    writers.begin();
    theirs.execute("INSERT INTO t VALUES (1)", []).expect("their write");
    assert!(writers.get(&mine, other).expect("get").is_none(), "their commit made it stale");
}

#[test]
fn a_decision_leaves_the_new_owner_known_and_the_paused_steps_writes_to_drop() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path).expect("open");
    let run = RunId::new();
    let interrupt = crate::conformance::interrupt(run, 2, 0);
    block_on(async {
        store.create_run(new_run(run)).await.expect("create");
        store.commit(step(run, 1, 1)).await.expect("step 1");
        // Step 2: task 1 finished, task 0 asks.
        let update = crate::Codec::Json.encode(&7u8, 1).expect("encode");
        let task = TaskKey { step: 2, index: 1, node: "n".into() };
        let updates = vec![TaskUpdate { task, update }];
        store.put_task_writes(TaskWrite { run, epoch: 1, updates }).await.expect("pending");
        let pause = crate::Transition {
            step: None,
            status: RunStatus::AwaitingHitl,
            events: vec![crate::EventRecord { seq: 3, json: "{}".into() }],
            interrupts: vec![interrupt.clone()],
            ..step(run, 2, 1)
        };
        store.commit(pause).await.expect("pause");
        let decision = crate::record::DecisionWrite {
            run,
            expected_epoch: 1,
            answers: vec![crate::record::Answer {
                interrupt: interrupt.id.clone(),
                decision: serde_json::json!({"type": "approve"}),
            }],
            status: RunStatus::Queued,
            events: vec![crate::EventRecord { seq: 4, json: "{}".into() }],
            failure: None,
            at_ms: 9,
            claim: Some((Owner::current(), i64::MAX)),
        };
        assert_eq!(store.decide(decision).await.expect("decide"), 2);
    });
    let misses = store.writers.misses();
    let stale = block_on(store.commit(step(run, 2, 1)));
    assert!(matches!(stale, Err(StoreError::Fenced { writer: 1, current: 2, .. })), "{stale:?}");
    let resumed = crate::Transition {
        events: vec![crate::EventRecord { seq: 5, json: "{}".into() }],
        ..step(run, 2, 2)
    };
    block_on(store.commit(resumed)).expect("step 2 by the decider");
    assert_eq!(store.writers.misses(), misses, "the decision left the run known");
    let conn = Connection::open(&path).expect("open");
    let pending: i64 =
        conn.query_row("SELECT count(*) FROM pending_writes", [], |r| r.get(0)).expect("count");
    assert_eq!(pending, 0, "step 2's commit dropped the write stored before the pause");
    let record = block_on(store.run(run)).expect("run");
    assert_eq!((record.step, record.last_seq, record.epoch), (2, 5, 2));
}

/// A file of schema 18 keeps its tasks' progress: migration 19 numbers
/// the records upwards (`-1 - i` then, `i64::MIN + i` now), and they read
/// back by task, each with its own update.
#[test]
fn progress_written_before_schema_19_reads_back_once_migrated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v18.db");
    let run = RunId::new();
    let tasks = |conn: &Connection| -> Vec<i64> {
        let mut stmt = conn.prepare("SELECT task FROM pending_writes ORDER BY task").expect("sql");
        stmt.query_map([], |row| row.get(0)).expect("rows").map(|t| t.expect("task")).collect()
    };
    {
        let store = SqliteStore::open(&path).expect("open");
        block_on(async {
            store.create_run(new_run(run)).await.expect("create");
            store.commit(step(run, 1, 1)).await.expect("step 1");
            for index in 0..3u32 {
                let update = crate::Codec::Json.encode(&(10 + index), 1).expect("encode");
                let task = TaskKey { step: 2, index, node: format!("n{index}") };
                let progress = TaskUpdate { task, update };
                let write = TaskProgress { run, epoch: 1, progress, events: Vec::new() };
                store.put_task_progress(write).await.expect("progress");
            }
        });
    }
    let conn = Connection::open(&path).expect("open");
    let min = i64::MIN;
    assert_eq!(tasks(&conn), [min, min + 1, min + 2], "numbered upwards, in task order");
    // Back to how tollgate numbered them up to schema 18.
    conn.execute_batch(
        "UPDATE pending_writes SET task = -1 - (task - (-9223372036854775807 - 1)) \
         WHERE task < 0; DROP TABLE request_keys; DROP INDEX threads_with_ttl; \
         ALTER TABLE threads DROP COLUMN ttl_ms; DROP INDEX threads_by_owner; \
         DROP INDEX threads_by_tenant; ALTER TABLE threads DROP COLUMN owner; \
         ALTER TABLE threads DROP COLUMN tenant; ALTER TABLE threads DROP COLUMN reviewers; \
         PRAGMA user_version = 18;",
    )
    .expect("schema 18's numbering");
    assert_eq!(tasks(&conn), [-3, -2, -1]);
    drop(conn);
    let store = SqliteStore::open(&path).expect("migrated");
    let checkpoint = block_on(store.checkpoint(run, None)).expect("checkpoint");
    let read: Vec<(u32, String, u32)> = checkpoint
        .progress
        .iter()
        .map(|p| (p.task.index, p.task.node.clone(), p.update.decode().expect("decodes")))
        .collect();
    let expected = [(0, "n0".to_owned(), 10), (1, "n1".to_owned(), 11), (2, "n2".to_owned(), 12)];
    assert_eq!(read, expected);
    let conn = Connection::open(&path).expect("open");
    assert_eq!(tasks(&conn), [min, min + 1, min + 2], "renumbered by the migration");
}
