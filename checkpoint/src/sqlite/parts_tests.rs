//! Tests of updates stored as parts (`parts.rs`).

use rusqlite::Connection;

use super::tests::{block_on, new_run, step_of};
use super::*;
use crate::record::{TaskUpdate, Transition};
use crate::status::RunStatus;
use crate::{Codec, CodecError, RunId, RunStore, TaskKey};

/// Step `number` of `run` with one update of `len` bytes of text, and the
/// events `seq..seq + 2` of [`step_of`].
fn big_step(run: RunId, number: u64, seq: u64, len: usize) -> Transition {
    let text: String = ('a'..='z').cycle().skip(number as usize).take(len).collect();
    let update = Codec::Json.encode(&text, 1).expect("encode");
    let mut transition = step_of(run, number, seq, false);
    if let Some(step) = transition.step.as_mut() {
        step.updates =
            vec![TaskUpdate { task: TaskKey { step: number, index: 0, node: "n".into() }, update }];
    }
    transition
}

/// The parts `transition`'s updates take on pages of `page_size` bytes.
fn parts_of(transition: &Transition, page_size: u32) -> i64 {
    let framed = transition.step.as_ref().map_or(0, |step| frame::encode(&step.updates).len());
    let part = parts::part_len(page_size);
    if framed <= part {
        0
    } else {
        (framed / part) as i64
    }
}

fn count(path: &std::path::Path, sql: &str) -> i64 {
    let conn = Connection::open(path).expect("open raw");
    conn.query_row(sql, [], |row| row.get(0)).expect("count")
}

/// Everything a run reads back: its checkpoint at every step, its events.
fn read(store: &SqliteStore, run: RunId) -> String {
    block_on(async {
        let record = store.run(run).await.expect("run");
        let mut seen = Vec::new();
        for at in 0..=record.step {
            seen.push(format!("{:?}", store.checkpoint(run, Some(at)).await.expect("checkpoint")));
        }
        let events = store.events(run, 0, u64::MAX).await.expect("events");
        format!("{seen:?} {events:?}")
    })
}

/// 1 KB updates on 2 KiB pages: stored whole, each took a page of its own
/// (the database grew by twice the update); in parts, they fill their
/// pages.
#[test]
fn updates_past_a_quarter_page_are_stored_in_parts_that_fill_their_pages() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.db");
    let store = SqliteStore::open(&path).expect("open");
    let run = RunId::new();
    let (steps, len) = (200u64, 1_024usize);
    let mut expected_parts = 0;
    block_on(async {
        store.create_run(new_run(run)).await.expect("create");
        let first = big_step(run, 1, 1, len);
        expected_parts += parts_of(&first, 2048);
        store.commit(first).await.expect("step 1");
    });
    let pages = |path| count(path, "PRAGMA page_count");
    let before = pages(&path);
    block_on(async {
        for number in 2..=steps + 1 {
            let step = big_step(run, number, 1 + 2 * (number - 1), len);
            expected_parts += parts_of(&step, 2048);
            store.commit(step).await.expect("step");
        }
    });
    let grown = (pages(&path) - before) as f64 * 2048.0 / steps as f64;
    assert!(grown <= 1.5 * len as f64, "{grown} bytes per step of a {len}-byte update");
    assert!(expected_parts >= 2 * (steps as i64 + 1), "each update takes parts");
    assert_eq!(count(&path, "SELECT count(*) FROM step_parts"), expected_parts);
    let checkpoint = block_on(store.checkpoint(run, None)).expect("checkpoint");
    let last = checkpoint.deltas.last().map(|(_, updates)| updates[0].update.decode::<String>());
    let text = last.expect("deltas").expect("decodes");
    assert_eq!(text.len(), len);
    assert!(text
        .starts_with(&('a'..='z').cycle().skip(steps as usize + 1).take(26).collect::<String>()));
}

#[test]
fn deleting_a_run_deletes_its_parts_and_no_others() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.db");
    let store = SqliteStore::open(&path).expect("open");
    let (gone, kept) = (RunId::new(), RunId::new());
    let mut kept_parts = 0;
    block_on(async {
        for run in [gone, kept] {
            store.create_run(new_run(run)).await.expect("create");
        }
        for number in 1..=5u64 {
            for run in [gone, kept] {
                let step = big_step(run, number, 1 + 2 * (number - 1), 700 * number as usize);
                if run == kept {
                    kept_parts += parts_of(&step, 2048);
                }
                store.commit(step).await.expect("step");
            }
        }
        let end = Transition {
            step: None,
            status: RunStatus::Completed,
            lease_until_ms: None,
            ..step_of(gone, 5, 11, false)
        };
        store.commit(end).await.expect("the run ends");
    });
    let before = read(&store, kept);
    assert!(count(&path, "SELECT count(*) FROM step_parts") > kept_parts);
    block_on(store.delete_run(gone)).expect("delete");
    assert_eq!(count(&path, "SELECT count(*) FROM step_parts"), kept_parts);
    assert_eq!(read(&store, kept), before, "the other run reads the same");
}

#[test]
fn a_missing_part_is_corruption_of_its_step() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.db");
    let store = SqliteStore::open(&path).expect("open");
    let run = RunId::new();
    block_on(async {
        store.create_run(new_run(run)).await.expect("create");
        store.commit(big_step(run, 1, 1, 1_700)).await.expect("step 1");
        store.commit(big_step(run, 2, 3, 1_700)).await.expect("step 2");
    });
    let conn = Connection::open(&path).expect("open raw");
    let (id, tasks): (i64, i64) = conn
        .query_row(
            "SELECT s.id, s.tasks FROM steps s JOIN runs r ON r.num = s.num \
             WHERE r.id = ?1 AND s.step = 2",
            [run.to_string()],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("step 2");
    assert_eq!(tasks, -1, "one task, with parts");
    let parts: Vec<i64> = conn
        .prepare("SELECT id FROM step_parts WHERE id >> 20 = ?1 ORDER BY id")
        .expect("prepare")
        .query_map([id], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("parts");
    assert_eq!(parts, [id << 20, id << 20 | 1, id << 20 | 2]);
    conn.execute("DELETE FROM step_parts WHERE id = ?1", [parts[1]]).expect("delete a part");
    drop(conn);
    let error = block_on(store.checkpoint(run, None)).expect_err("a part is missing");
    assert!(
        matches!(
            error,
            StoreError::CorruptCheckpoint {
                step: 2,
                source: CodecError::PartMissing { part: 1 },
                ..
            }
        ),
        "{error:?}"
    );
    block_on(store.checkpoint(run, Some(1))).expect("step 1 is whole");
    let history = block_on(store.history(run, None, 10)).expect("history");
    let tasks: Vec<u32> = history.checkpoints.iter().map(|c| c.tasks).collect();
    assert_eq!(tasks, [1, 1, 0], "history counts tasks, parts or not");
}

/// A version-11 file keeps its updates in its rows: they read the same
/// after the migration, and new ones past a quarter of the file's page
/// (64 KiB here, whatever the options ask) take parts.
#[test]
fn version_11_files_read_the_same_and_new_updates_take_parts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.db");
    let run = RunId::new();
    let options = SqliteOptions { page_size: 65_536, ..SqliteOptions::default() };
    let store = SqliteStore::open_with(&path, options).expect("open");
    block_on(async {
        store.create_run(new_run(run)).await.expect("create");
        store.commit(big_step(run, 1, 1, 1_000)).await.expect("step 1");
        store.commit(big_step(run, 2, 3, 5_000)).await.expect("step 2");
    });
    assert_eq!(count(&path, "SELECT count(*) FROM step_parts"), 0, "both fit a quarter page");
    let before = read(&store, run);
    drop(store);
    let conn = Connection::open(&path).expect("open raw");
    conn.execute_batch(
        "DROP TABLE step_parts; DROP TABLE threads; DROP TABLE thread_tags; \
         DROP TRIGGER threads_follow_new_run; DROP TRIGGER threads_follow_run_status; \
         DROP TRIGGER threads_follow_deleted_run; DROP TABLE items; DROP TABLE item_vectors; DROP TABLE item_epoch; DROP TABLE schedules; DROP TRIGGER outbox_gates_open_on_status; DROP TRIGGER outbox_gates_open_on_run_deleted; DROP TABLE outbox; \
         DROP TABLE request_keys; PRAGMA user_version = 11;",
    )
    .expect("downgrade");
    drop(conn);

    let store = SqliteStore::open(&path).expect("migrate 11 -> 12");
    assert_eq!(read(&store, run), before, "the old rows read the same");
    let third = big_step(run, 3, 5, 40_000);
    let parts = parts_of(&third, 65_536);
    assert_eq!(parts, 2);
    block_on(store.commit(third)).expect("step 3");
    assert_eq!(count(&path, "SELECT count(*) FROM step_parts"), parts);
    let checkpoint = block_on(store.checkpoint(run, None)).expect("checkpoint");
    let sizes: Vec<usize> = checkpoint
        .deltas
        .iter()
        .map(|(_, updates)| updates[0].update.decode::<String>().expect("decodes").len())
        .collect();
    assert_eq!(sizes, [1_000, 5_000, 40_000]);
}
