//! What the Postgres store keeps and reads back: damaged rows listed as
//! such, one moment per checkpoint read while steps commit, event lines
//! compact and byte for byte, repeated frontiers as references.

use std::sync::Arc;

use tollgate_checkpoint::{
    Codec, EventRecord, NewRun, PageRequest, RunFilter, RunId, RunStore, StepRecord, TaskKey,
    TaskUpdate,
};
use tollgate_testkit::postgres_url;

use crate::{fresh_schema, fresh_store, fresh_store_in, paused_run, raw, runtime, step_of};

/// A run row that does not read (an unknown status) is reported as damaged
/// in its listing page; the other runs are listed.
#[test]
fn a_damaged_row_does_not_hide_the_others() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let schema = fresh_schema();
        let store = fresh_store_in(&url, &schema).await;
        let runs: Vec<RunId> = (0..3).map(|_| RunId::new()).collect();
        for run in &runs {
            store.create_run(paused_run(*run).0).await.unwrap();
        }
        let client = raw(&url).await;
        client
            .execute(
                &format!("UPDATE {schema}.runs SET status = 'sleepy' WHERE id = $1"),
                &[&runs[1].to_string()],
            )
            .await
            .unwrap();
        let page = store
            .list_runs(&RunFilter::default(), &PageRequest { limit: 10, cursor: None })
            .await
            .unwrap();
        let listed: Vec<RunId> = page.runs.iter().map(|record| record.id).collect();
        assert_eq!(listed, [runs[2], runs[0]]);
        assert_eq!(page.damaged.len(), 1);
        assert_eq!(page.damaged[0].id, runs[1].to_string());
        assert!(page.damaged[0].reason.contains("sleepy"), "{:?}", page.damaged);
    });
}

/// A checkpoint read is one moment of the run, however its steps commit
/// meanwhile: the run's row, frontier, snapshot and deltas always agree
/// (its statements share one transaction's snapshot).
#[test]
fn a_checkpoint_read_sees_one_moment_while_steps_commit() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let store = Arc::new(fresh_store(&url).await);
        let run = RunId::new();
        let number = |n: u64| Codec::Json.encode(&n, 1).unwrap();
        let created = NewRun { snapshot: number(0), frontier: number(0), ..paused_run(run).0 };
        store.create_run(created).await.unwrap();
        let steps = 300u64;
        let writer = Arc::clone(&store);
        let writing = tokio::spawn(async move {
            for step in 1..=steps {
                let update = TaskUpdate {
                    task: TaskKey { step, index: 0, node: "n".into() },
                    update: number(step),
                };
                let record = StepRecord {
                    step,
                    updates: vec![update],
                    snapshot: (step % 7 == 0).then(|| number(step)),
                    frontier: number(step),
                };
                let events = vec![EventRecord { seq: step + 1, json: "{}".into() }];
                writer.commit(step_of(run, record, events)).await.unwrap();
            }
        });
        let mut reads = 0;
        let mut seen = std::collections::BTreeSet::new();
        while !writing.is_finished() || reads == 0 {
            let read = store.checkpoint(run, None).await.unwrap();
            let at = read.run.step;
            seen.insert(at);
            assert_eq!(read.run.last_seq, at + 1, "the row of the same moment");
            assert_eq!(read.frontier.decode::<u64>().unwrap(), at, "the frontier of step {at}");
            assert_eq!(read.snapshot.decode::<u64>().unwrap(), read.snapshot_step);
            assert!(read.snapshot_step <= at && at - read.snapshot_step < 7, "{at}");
            let deltas: Vec<u64> = read.deltas.iter().map(|(step, _)| *step).collect();
            let expected: Vec<u64> = (read.snapshot_step + 1..=at).collect();
            assert_eq!(deltas, expected, "the deltas since the snapshot, up to step {at}");
            for (step, updates) in &read.deltas {
                assert_eq!(updates[0].update.decode::<u64>().unwrap(), *step);
            }
            reads += 1;
        }
        writing.await.unwrap();
        assert!(seen.len() > 10, "reads landed between many commits: {seen:?}");
        // A past step reads as it was.
        let past = store.checkpoint(run, Some(100)).await.unwrap();
        assert_eq!((past.run.step, past.snapshot_step), (100, 98));
        assert_eq!(past.frontier.decode::<u64>().unwrap(), 100);
        assert!(past.pending.is_empty() && past.interrupts.is_empty());
    });
}

/// Event lines are kept without the head every line of their run repeats
/// (by fields: without their number and a time equal to the line
/// before's), and read back byte for byte; lines of another shape are kept
/// whole.
#[test]
fn event_lines_are_stored_compact_and_read_back_byte_for_byte() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let schema = fresh_schema();
        let store = fresh_store_in(&url, &schema).await;
        let run = RunId::new();
        let line = |seq: u64, ts: &str, kind: &str| {
            format!("{{\"v\":1,\"run_id\":\"{run}\",\"seq\":{seq},\"ts\":\"{ts}\",\"event_type\":\"{kind}\"}}")
        };
        let (mut created, mut pause) = paused_run(run);
        created.events = vec![EventRecord { seq: 1, json: line(1, "2026-12-01T07:00:00.001Z", "run_started") }];
        pause.events = vec![
            EventRecord { seq: 2, json: line(2, "2026-12-01T07:00:00.002Z", "node_started") },
            EventRecord { seq: 3, json: line(3, "2026-12-01T07:00:00.002Z", "interrupt") },
            EventRecord { seq: 4, json: "{\"not\":\"an envelope\"}".into() },
            EventRecord { seq: 5, json: "~ kept as it is".into() },
        ];
        let mut written = created.events.clone();
        written.extend(pause.events.clone());
        store.create_run(created).await.unwrap();
        store.commit(pause).await.unwrap();
        let read = store.events(run, 0, 100).await.unwrap();
        assert_eq!(read, written, "read back byte for byte");
        assert_eq!(store.events(run, 3, 100).await.unwrap(), written[3..], "from a later seq");

        let client = raw(&url).await;
        let first: String = client
            .query_one(&format!("SELECT events FROM {schema}.steps WHERE step = 0"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(first, "~1|@2026-12-01T07:00:00.001Z|-|-|run_started|}");
        let paused: String = client
            .query_one(&format!("SELECT lines FROM {schema}.events"), &[])
            .await
            .unwrap()
            .get(0);
        let kept: Vec<&str> = paused.lines().collect();
        assert_eq!(
            kept,
            [
                "~1|@2026-12-01T07:00:00.002Z|-|-|node_started|}",
                "~1|=|-|-|interrupt|}",
                "{\"not\":\"an envelope\"}",
                "~~ kept as it is",
            ]
        );
    });
}

/// A step whose frontier is one of the last two its run stored in full
/// through this store stores a nine-byte reference to that step; another
/// store (another process) taking the run over stores its first in full.
/// Reads give every step's frontier back as committed, and a reference
/// that names no full frontier is reported as damaged.
#[test]
fn frontiers_a_run_repeats_are_stored_as_references() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let schema = fresh_schema();
        let store = fresh_store_in(&url, &schema).await;
        let run = RunId::new();
        let blob = |text: &str| Codec::Json.encode(&text, 1).unwrap();
        let long = "x".repeat(600);
        // Step 0 is the run's first frontier; then two nodes taking turns,
        // one looping on itself, a long one repeated, and a frontier last
        // seen three steps before.
        let frontiers: Vec<_> =
            ["a", "b", "a", "b", "a", "c", "c", &long, &long, "a", "a", "a", "a"]
                .into_iter()
                .map(blob)
                .collect();
        let created =
            NewRun { frontier: frontiers[0].clone(), events: Vec::new(), ..paused_run(run).0 };
        store.create_run(created).await.unwrap();
        // Steps 11 and 12 are committed through another store.
        let other = fresh_store_in(&url, &schema).await;
        for (step, frontier) in frontiers.iter().enumerate().skip(1) {
            let step = step as u64;
            let record = StepRecord {
                step,
                updates: Vec::new(),
                snapshot: None,
                frontier: frontier.clone(),
            };
            let through = if step > 10 { &other } else { &store };
            through.commit(step_of(run, record, Vec::new())).await.unwrap();
        }
        let client = raw(&url).await;
        let stored: Vec<(i64, i32, Option<i64>)> = client
            .query(
                &format!(
                    "SELECT step, length(frontier), {schema}.tollgate_referred(frontier) \
                     FROM {schema}.steps ORDER BY step"
                ),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        let referred: Vec<Option<i64>> = stored.iter().map(|(_, _, to)| *to).collect();
        let none = None;
        assert_eq!(
            referred,
            [
                none,
                none,
                Some(0),
                Some(1),
                Some(0),
                none,
                Some(5),
                none,
                none,
                none,
                Some(9),
                none,
                Some(11)
            ],
            "{stored:?}"
        );
        for (step, length, to) in &stored {
            assert_eq!(*length == 9, to.is_some(), "step {step}: {stored:?}");
        }
        for reader in [&store, &other] {
            for (step, frontier) in frontiers.iter().enumerate() {
                let read = reader.checkpoint(run, Some(step as u64)).await.unwrap();
                assert_eq!(read.frontier.to_bytes(), frontier.to_bytes(), "step {step}");
            }
            let last = reader.checkpoint(run, None).await.unwrap();
            assert_eq!(last.frontier.to_bytes(), frontiers[12].to_bytes());
        }

        // A reference to a step that is itself a reference, or to no step.
        for target in [3u64, 99] {
            let mut reference = vec![0u8];
            reference.extend_from_slice(&target.to_le_bytes());
            client
                .execute(
                    &format!("UPDATE {schema}.steps SET frontier = $1 WHERE step = 4"),
                    &[&reference],
                )
                .await
                .unwrap();
            let error = store.checkpoint(run, Some(4)).await.unwrap_err().to_string();
            assert!(error.contains(&format!("refers to step {target}")), "{error}");
        }
    });
}
