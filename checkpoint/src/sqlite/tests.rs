//! Tests of the SQLite store beyond the conformance suite.

use rusqlite::Connection;

use super::*;
use crate::record::{EventRecord, GraphRef, NewRun};
use crate::{Owner, RunId, RunStore};

/// A run of graph `g` v1 with a one-byte state, to create in tests.
pub(super) fn new_run(id: RunId) -> NewRun {
    NewRun {
        id,
        graph: GraphRef { name: "g".into(), version: 1 },
        thread: None,
        created_at_ms: 5,
        snapshot: crate::Codec::Json.encode(&1u8, 1).expect("encode"),
        frontier: crate::Codec::Json.encode(&2u8, 1).expect("encode"),
        events: Vec::new(),
        claim: Some((Owner::current(), 99)),
        attachment: None,
        thread_turn: None,
        trace: None,
    }
}

pub(super) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(future)
}

/// The store conformance suite on stores opened with `options`.
fn conforms_with(options: SqliteOptions) {
    let dir = tempfile::tempdir().expect("temp dir");
    let counter = std::sync::atomic::AtomicUsize::new(0);
    block_on(crate::conformance::check_store(|| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = dir.path().join(format!("store-{n}.db"));
        let options = options.clone();
        async move { SqliteStore::open_with(path, options).expect("open") }
    }));
}

#[test]
fn passes_the_store_conformance_suite() {
    conforms_with(SqliteOptions::default());
}

/// With `Durability::Full` every write takes the commit thread's path
/// (`group.rs`): the whole contract holds there too.
#[test]
fn passes_the_store_conformance_suite_with_full_durability() {
    conforms_with(SqliteOptions { durability: Durability::Full, ..SqliteOptions::default() });
}

#[test]
fn reopening_keeps_everything_and_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.db");
    let run = RunId::new();
    block_on(async {
        let store = SqliteStore::open(&path).expect("open");
        let new = NewRun {
            graph: GraphRef { name: "g".into(), version: 3 },
            thread: Some("t".into()),
            events: vec![EventRecord { seq: 1, json: "{}".into() }],
            ..new_run(run)
        };
        store.create_run(new).await.expect("create");
    });
    let store = SqliteStore::open(&path).expect("reopen");
    let record = block_on(store.run(run)).expect("run survives");
    assert_eq!((record.graph.version, record.thread.as_deref()), (3, Some("t")));
    assert_eq!(record.owner, Some(Owner::current()));
    drop(store);

    // A version-1 file (before attachments) is migrated in place.
    let conn = Connection::open(&path).expect("open raw");
    conn.execute_batch(STEPS_OF_VERSION_7).expect("downgrade");
    conn.execute_batch(
        "DROP TABLE attachments; ALTER TABLE runs DROP COLUMN lease_losses; \
         ALTER TABLE runs DROP COLUMN trace; PRAGMA user_version = 1",
    )
    .expect("downgrade");
    drop(conn);
    let store = SqliteStore::open(&path).expect("migrate 1 -> 8");
    assert_eq!(block_on(store.attachment(run)).expect("attachments table exists"), None);
    assert_eq!(block_on(store.run(run)).expect("run").lease_losses, 0, "column added (4)");
    assert_eq!(block_on(store.run(run)).expect("run").trace, None, "column added (7)");
    drop(store);

    let conn = Connection::open(&path).expect("open raw");
    let id: i64 = conn.query_row("PRAGMA application_id", [], |row| row.get(0)).expect("id");
    assert_eq!(id, schema::APPLICATION_ID, "migration 5 marks the file");
    conn.pragma_update(None, "user_version", 99).expect("bump");
    drop(conn);
    let before = std::fs::read(&path).expect("bytes");
    let error = SqliteStore::open(&path).expect_err("newer schema");
    let supported = schema::SCHEMA_VERSION;
    assert!(
        matches!(error, StoreError::SchemaTooNew { found: 99, supported: s } if s == supported)
    );
    assert_eq!(std::fs::read(&path).expect("bytes"), before, "left as it was");
}

/// Files that are not tollgate's are refused before anything is written to
/// them: not a byte of the file changes, no WAL appears.
#[test]
fn files_that_are_not_ours_are_refused_untouched() {
    let dir = tempfile::tempdir().expect("temp dir");
    type Expected = fn(&StoreError) -> bool;
    let cases: [(&str, &str, Expected); 5] = [
        (
            "customers",
            "CREATE TABLE customers (id INTEGER); INSERT INTO customers VALUES (1);",
            |e| matches!(e, StoreError::ForeignDatabase { tables } if tables == "customers"),
        ),
        (
            "ours_and_theirs",
            "CREATE TABLE runs (id TEXT); CREATE TABLE invoices (id TEXT); PRAGMA user_version = 2;",
            |e| matches!(e, StoreError::ForeignDatabase { tables } if tables == "invoices"),
        ),
        (
            "other_application",
            "PRAGMA application_id = 42;",
            |e| matches!(e, StoreError::ForeignDatabase { tables } if tables.contains("0x2a")),
        ),
        (
            "negative_version",
            "PRAGMA user_version = -5;",
            |e| matches!(e, StoreError::UnknownSchemaVersion { found: -5 }),
        ),
        (
            "garbage_version",
            "PRAGMA user_version = 2000000000;",
            |e| matches!(e, StoreError::SchemaTooNew { found: 2_000_000_000, .. }),
        ),
    ];
    for (name, setup, expected) in cases {
        let path = dir.path().join(format!("{name}.db"));
        let conn = Connection::open(&path).expect("create");
        conn.execute_batch(setup).expect("setup");
        drop(conn);
        let before = std::fs::read(&path).expect("bytes");
        let error = SqliteStore::open(&path).expect_err(name);
        assert!(expected(&error), "{name}: {error:?}");
        assert_eq!(std::fs::read(&path).expect("bytes"), before, "{name}: the file changed");
        let wal = dir.path().join(format!("{name}.db-wal"));
        assert!(!wal.exists(), "{name}: a WAL appeared");
    }
    let message = SqliteStore::open(dir.path().join("negative_version.db")).expect_err("negative");
    assert!(
        message.to_string().contains("-5")
            && message.to_string().contains("not a tollgate database")
    );

    // Files of a tollgate before the mark (versions 1-4, no application
    // id) are ours by their exact schema: migrated and marked.
    for version in 1..5 {
        let legacy = dir.path().join(format!("legacy{version}.db"));
        let conn = Connection::open(&legacy).expect("create");
        schema::write_version(&conn, version).expect("old schema");
        drop(conn);
        drop(SqliteStore::open(&legacy).expect("a legacy file opens"));
        let conn = Connection::open(&legacy).expect("open raw");
        let id: i64 = conn.query_row("PRAGMA application_id", [], |row| row.get(0)).expect("id");
        assert_eq!(id, schema::APPLICATION_ID, "version {version}");
    }
}

/// A file without tollgate's mark whose tables merely share names with
/// ours (a `runs` table), at every version tollgate has written, is refused
/// before anything is written: not a byte changes, no WAL appears, no
/// migration runs. So is a file of an old version with a table changed.
#[test]
fn unmarked_files_that_only_look_like_ours_are_refused_at_every_version() {
    let dir = tempfile::tempdir().expect("temp dir");
    for version in 1..=schema::SCHEMA_VERSION {
        let path = dir.path().join(format!("lookalike{version}.db"));
        let conn = Connection::open(&path).expect("create");
        conn.execute_batch(&format!(
            "CREATE TABLE runs (id TEXT, customer TEXT); INSERT INTO runs VALUES ('1', 'x'); \
             PRAGMA user_version = {version};"
        ))
        .expect("setup");
        drop(conn);
        let before = std::fs::read(&path).expect("bytes");
        let error = SqliteStore::open(&path).expect_err("a look-alike");
        assert!(matches!(error, StoreError::ForeignDatabase { .. }), "{version}: {error:?}");
        assert_eq!(std::fs::read(&path).expect("bytes"), before, "{version}: the file changed");
        assert!(!dir.path().join(format!("lookalike{version}.db-wal")).exists(), "{version}");
    }
    // A genuine old schema with one column more is not ours either.
    let path = dir.path().join("changed.db");
    let conn = Connection::open(&path).expect("create");
    schema::write_version(&conn, 3).expect("old schema");
    conn.execute_batch("ALTER TABLE runs ADD COLUMN customer TEXT;").expect("change");
    drop(conn);
    let before = std::fs::read(&path).expect("bytes");
    let error = SqliteStore::open(&path).expect_err("changed");
    assert!(matches!(error, StoreError::ForeignDatabase { .. }), "{error:?}");
    assert_eq!(std::fs::read(&path).expect("bytes"), before);
}

#[test]
fn a_truncated_blob_is_corruption_of_that_run_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.db");
    let store = SqliteStore::open(&path).expect("open");
    let (bad, good) = (RunId::new(), RunId::new());
    for run in [bad, good] {
        block_on(store.create_run(new_run(run))).expect("create");
    }
    let conn = Connection::open(&path).expect("open raw");
    conn.execute(
        "UPDATE snapshots SET payload = x'0100' \
         WHERE id = (SELECT num << 32 FROM runs WHERE id = ?1)",
        [bad.to_string()],
    )
    .expect("truncate");
    let error = block_on(store.checkpoint(bad, None)).expect_err("corrupt");
    assert!(
        matches!(error, StoreError::CorruptCheckpoint { run, step: 0, .. } if run == bad),
        "{error:?}"
    );
    block_on(store.checkpoint(good, None)).expect("the other run is fine");
    let ok: String = conn.query_row("PRAGMA integrity_check", [], |row| row.get(0)).expect("check");
    assert_eq!(ok, "ok");
}

#[test]
fn the_checkpoint_thread_runs_per_batch_of_commits_not_per_commit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("c.db")).expect("open");
    let started = std::time::Instant::now();
    block_on(async {
        for num in 0..1_000 {
            let insert = "INSERT INTO attachments (num, body) VALUES (?1, 'x')";
            store
                .write(Touches::NoRun, move |tx| Ok(tx.execute(insert, [num])?))
                .await
                .expect("write");
            std::thread::yield_now();
        }
    });
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let checkpointer = store.checkpointer.as_ref().expect("background checkpointing");
    let (commits, checkpoints) = checkpointer.counts();
    assert_eq!(commits, 1_000);
    // One per CHECKPOINT_EVERY commits, plus one per timer period at most.
    let bound = commits / CHECKPOINT_EVERY + elapsed_ms / CHECKPOINT_PERIOD.as_millis() as u64 + 2;
    assert!(
        checkpoints <= bound,
        "{checkpoints} checkpoints for {commits} commits in {elapsed_ms} ms (at most {bound})"
    );
}

#[test]
fn the_page_size_applies_to_new_files_and_bad_sizes_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let page_size = |path: &std::path::Path| -> u32 {
        let conn = Connection::open(path).expect("open");
        conn.query_row("PRAGMA page_size", [], |row| row.get(0)).expect("page_size")
    };
    let fresh = dir.path().join("fresh.db");
    drop(SqliteStore::open(&fresh).expect("open"));
    assert_eq!(page_size(&fresh), SqliteOptions::default().page_size);
    assert_eq!(SqliteOptions::default().page_size, 2048);

    let custom = dir.path().join("custom.db");
    let options = SqliteOptions { page_size: 8192, ..SqliteOptions::default() };
    drop(SqliteStore::open_with(&custom, options).expect("open"));
    assert_eq!(page_size(&custom), 8192);
    // An existing file keeps its size, whatever the options say.
    drop(SqliteStore::open(&custom).expect("reopen"));
    assert_eq!(page_size(&custom), 8192);

    for bad in [0, 100, 3000, 131_072] {
        let options = SqliteOptions { page_size: bad, ..SqliteOptions::default() };
        let error = SqliteStore::open_with(dir.path().join("bad.db"), options).expect_err("bad");
        assert!(
            matches!(error, StoreError::InvalidPageSize { page_size } if page_size == bad),
            "{error:?}"
        );
    }
    assert!(!dir.path().join("bad.db").exists(), "a refused size creates no file");
}

#[test]
fn version_2_files_are_migrated_status_events_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.db");
    let run = RunId::new();
    let line = |seq: u64| EventRecord { seq, json: format!("{{\"seq\":{seq}}}") };
    let store = SqliteStore::open(&path).expect("open");
    let first = NewRun { events: vec![line(1)], ..new_run(run) };
    block_on(store.create_run(first)).expect("create");
    let pause = crate::Transition {
        run,
        epoch: 1,
        step: None,
        status: crate::RunStatus::Interrupted,
        failure: None,
        events: vec![line(2), line(3)],
        at_ms: 6,
        lease_until_ms: None,
        interrupts: Vec::new(),
    };
    block_on(store.commit(pause)).expect("status-only transition");
    let before = block_on(store.events(run, 0, u64::MAX)).expect("events");
    assert_eq!(before.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    drop(store);

    // Back to the version-2 layout: a WITHOUT ROWID table keyed by run and
    // seq, and an index on runs.num.
    let conn = Connection::open(&path).expect("open raw");
    conn.execute_batch(STEPS_OF_VERSION_7).expect("downgrade");
    conn.execute_batch(
        "CREATE TABLE old_events (num INTEGER NOT NULL, first_seq INTEGER NOT NULL, \
             count INTEGER NOT NULL, lines TEXT NOT NULL, PRIMARY KEY (num, first_seq)) \
             WITHOUT ROWID;
         INSERT INTO old_events SELECT num, first_seq, count, lines FROM events;
         DROP TABLE events;
         ALTER TABLE old_events RENAME TO events;
         CREATE UNIQUE INDEX runs_by_num ON runs (num);
         ALTER TABLE runs DROP COLUMN lease_losses;
         ALTER TABLE runs DROP COLUMN trace;
         PRAGMA user_version = 2;",
    )
    .expect("downgrade");
    drop(conn);

    let store = SqliteStore::open(&path).expect("migrate 2 -> 8");
    let after = block_on(store.events(run, 0, u64::MAX)).expect("events");
    assert_eq!(after, before, "the events survive the migration");
    drop(store);
    let conn = Connection::open(&path).expect("open raw");
    let index = |name: &str| -> i64 {
        conn.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = ?1",
            [name],
            |row| row.get(0),
        )
        .expect("schema")
    };
    let version: u32 = conn.query_row("PRAGMA user_version", [], |row| row.get(0)).expect("v");
    assert_eq!(
        (index("events_by_run"), index("runs_by_num"), version),
        (1, 0, schema::SCHEMA_VERSION)
    );

    // Runs created after the migration continue the numbering.
    let store = SqliteStore::open(&path).expect("reopen");
    let next = RunId::new();
    block_on(store.create_run(new_run(next))).expect("create after migration");
    drop(store);
    let nums: Vec<i64> = conn
        .prepare("SELECT num FROM runs ORDER BY num")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(nums, [1, 2]);
    let ok: String = conn.query_row("PRAGMA integrity_check", [], |row| row.get(0)).expect("check");
    assert_eq!(ok, "ok");
}

/// Puts the `steps` table back as it was up to version 7: keyed `run
/// number << 32 | step`, without the parts of version 12 (the tests'
/// updates are small: none has parts) and the thread records of 13.
const STEPS_OF_VERSION_7: &str = "
    DROP TABLE items;
    DROP TABLE item_vectors;
    DROP TABLE item_epoch;
    DROP TABLE threads;
    DROP TABLE thread_tags;
    DROP TRIGGER threads_follow_new_run;
    DROP TRIGGER threads_follow_run_status;
    DROP TRIGGER threads_follow_deleted_run;
    DROP TABLE schedules;
    DROP TRIGGER outbox_gates_open_on_status;
    DROP TRIGGER outbox_gates_open_on_run_deleted;
    DROP TABLE outbox;
    DROP TABLE request_keys;
    DROP TABLE step_parts;
    CREATE TABLE old_steps (id INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL,
        tasks INTEGER NOT NULL, frontier BLOB NOT NULL, updates BLOB NOT NULL,
        first_seq INTEGER NOT NULL, event_count INTEGER NOT NULL, events TEXT NOT NULL);
    INSERT INTO old_steps SELECT num << 32 | step, at_ms, tasks, frontier, updates,
        first_seq, event_count, events FROM steps;
    DROP TABLE steps;
    ALTER TABLE old_steps RENAME TO steps;";

/// A step of `run` with one update, events `seq..seq + 2`, and a snapshot
/// when asked.
pub(super) fn step_of(run: RunId, number: u64, seq: u64, snapshot: bool) -> crate::Transition {
    let blob = |value: u64| crate::Codec::Json.encode(&value, 1).expect("encode");
    let key = crate::TaskKey { step: number, index: 0, node: "n".into() };
    crate::Transition {
        run,
        epoch: 1,
        step: Some(crate::StepRecord {
            step: number,
            updates: vec![crate::TaskUpdate { task: key, update: blob(number) }],
            snapshot: snapshot.then(|| blob(100 + number)),
            frontier: blob(number),
        }),
        status: crate::RunStatus::Running,
        failure: None,
        events: (seq..seq + 2)
            .map(|seq| EventRecord { seq, json: format!("{{\"s\":{seq}}}") })
            .collect(),
        at_ms: 1_000 + number as i64,
        lease_until_ms: Some(i64::MAX),
        interrupts: Vec::new(),
    }
}

#[test]
fn version_7_files_get_their_steps_in_commit_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.db");
    let runs = [RunId::new(), RunId::new(), RunId::new()];
    // What each run reads back: its history, its checkpoints at every step
    // and its events.
    let read = |store: &SqliteStore| {
        block_on(async {
            let mut seen = Vec::new();
            for run in runs {
                let record = store.run(run).await.expect("run");
                let history = store.history(run, None, 100).await.expect("history");
                let mut checkpoints = Vec::new();
                for at in 0..=record.step {
                    checkpoints.push(format!("{:?}", store.checkpoint(run, Some(at)).await));
                }
                let events = store.events(run, 0, u64::MAX).await.expect("events");
                seen.push(format!("{record:?} {history:?} {checkpoints:?} {events:?}"));
            }
            seen
        })
    };
    let store = SqliteStore::open(&path).expect("open");
    block_on(async {
        for run in runs {
            store.create_run(new_run(run)).await.expect("create");
        }
        // Interleaved, as concurrent runs commit; run 0 takes a snapshot.
        for number in 1..=4u64 {
            for (i, run) in runs.iter().enumerate().take(3 - usize::from(number == 4)) {
                let seq = 1 + 2 * (number - 1);
                store
                    .commit(step_of(*run, number, seq, i == 0 && number == 2))
                    .await
                    .expect("step");
            }
        }
    });
    let before = read(&store);
    drop(store);

    // Back to the version-7 layout: steps keyed `run number << 32 | step`.
    let conn = Connection::open(&path).expect("open raw");
    conn.execute_batch(STEPS_OF_VERSION_7).expect("downgrade");
    conn.pragma_update(None, "user_version", 7).expect("downgrade");
    drop(conn);

    let store = SqliteStore::open(&path).expect("migrate 7 -> 8");
    assert_eq!(read(&store), before, "every run reads back the same");
    // The runs go on: the next step of each, and a new run numbered after
    // them.
    let next = RunId::new();
    block_on(async {
        store.commit(step_of(runs[0], 5, 9, false)).await.expect("step after migration");
        store.commit(step_of(runs[2], 4, 7, false)).await.expect("run 2 had 3 steps");
        let twice = store.commit(step_of(runs[2], 4, 9, false)).await.expect_err("step 4 again");
        assert!(matches!(twice, StoreError::StepOutOfOrder { .. }), "{twice:?}");
        store.create_run(new_run(next)).await.expect("create after migration");
    });
    drop(store);
    let conn = Connection::open(&path).expect("open raw");
    let rows: Vec<(i64, i64)> = conn
        .prepare("SELECT num, step FROM steps ORDER BY id")
        .expect("prepare")
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    // In commit order: the step-0 rows, then the interleaved steps (rows
    // of equal time in run order), then what came after the migration.
    let mut expected = vec![(1, 0), (2, 0), (3, 0)];
    for number in 1..=4 {
        expected.extend((1..=3).take(3 - usize::from(number == 4)).map(|num| (num, number)));
    }
    expected.extend([(1, 5), (3, 4), (4, 0)]);
    assert_eq!(rows, expected);
    let index: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'steps_by_run'",
            [],
            |row| row.get(0),
        )
        .expect("schema");
    assert_eq!(index, 1);
    let ok: String = conn.query_row("PRAGMA integrity_check", [], |row| row.get(0)).expect("check");
    assert_eq!(ok, "ok");
}

#[test]
fn waiting_for_a_locked_database_leaves_the_runtime_free() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("locked.db");
    let store = SqliteStore::open(&path).expect("open");
    // Another connection (another process, as far as SQLite can tell)
    // holds the write lock for 300 ms.
    let holder = Connection::open(&path).expect("open holder");
    holder.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        holder.execute_batch("COMMIT").expect("unlock");
    });
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("rt");
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let started = std::time::Instant::now();
    runtime.block_on(async {
        // On a one-thread runtime this task only runs while the write waits
        // without blocking the thread.
        let counter = std::sync::Arc::clone(&ticks);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let insert = "INSERT INTO attachments (num, body) VALUES (1, 'x')";
        store
            .write(Touches::NoRun, |tx| Ok(tx.execute(insert, [])?))
            .await
            .expect("write after the lock");
    });
    let waited = started.elapsed();
    release.join().expect("holder");
    let ticks = ticks.load(std::sync::atomic::Ordering::SeqCst);
    assert!(waited >= std::time::Duration::from_millis(250), "the write waited: {waited:?}");
    assert!(ticks >= 10, "other tasks ran {ticks} times in {waited:?} while the write waited");
}

#[test]
fn passes_the_long_term_memory_conformance_suite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let counter = std::sync::atomic::AtomicUsize::new(0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(crate::conformance::check_item_store(|| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = dir.path().join(format!("items-{n}.db"));
        async move { SqliteStore::open(path).expect("open") }
    }));
}

/// A file of schema 17 (before thread statuses and tags) opens with its
/// threads' statuses and scalar metadata filled in from what it holds.
#[test]
fn threads_of_an_older_file_are_searchable_once_migrated() {
    use crate::listing::{ThreadQuery, ThreadStatus};
    use crate::ThreadStore;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("v17.db");
    let conn = Connection::open(&path).expect("create");
    schema::write_version(&conn, 17).expect("schema 17");
    conn.pragma_update(None, "application_id", schema::APPLICATION_ID).expect("mark");
    conn.execute_batch(
        "INSERT INTO threads VALUES ('paused', 10, 10, '{\"user\":\"ann\",\"o\":{\"k\":1}}'), \
                                    ('quiet', 20, 20, '{\"user\":\"ann\"}'), \
                                    ('odd', 30, 30, '[1]'); \
         INSERT INTO runs (id, num, graph, graph_version, thread, status, step, epoch, \
                           created_at_ms, updated_at_ms, last_seq) VALUES \
           ('01A', 1, 'g', 1, 'paused', 'completed', 1, 1, 1, 1, 1), \
           ('01B', 2, 'g', 1, 'paused', 'awaiting_hitl', 1, 1, 2, 2, 1);",
    )
    .expect("rows of schema 17");
    drop(conn);
    let store = SqliteStore::open(&path).expect("migrated");
    let search = |query: ThreadQuery| {
        let found = block_on(store.search_threads(&query)).expect("search");
        found.into_iter().map(|thread| thread.id).collect::<Vec<_>>()
    };
    let ann = serde_json::json!({"user": "ann"}).as_object().cloned().expect("object");
    assert_eq!(search(ThreadQuery::page(0, 10).metadata(ann)), ["quiet", "paused"]);
    let paused = ThreadQuery::page(0, 10).status(Some(ThreadStatus::Interrupted), Vec::new());
    assert_eq!(search(paused), ["paused"], "its latest run waits");
    let idle = ThreadQuery::page(0, 10).status(Some(ThreadStatus::Idle), Vec::new());
    assert_eq!(search(idle), ["odd", "quiet"]);
}
