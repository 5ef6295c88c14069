//! The Postgres store on a real server: both conformance suites, its
//! migrations and refusals, decisions raced from many connections, and
//! checkpoint reads made while steps commit.
//!
//! The server's URL comes from `TOLLGATE_PG_URL` (`bash scripts/postgres`
//! starts one and prints it). Without it these tests say they were skipped,
//! except under `CI=true`, where a missing URL fails them.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::NoTls;
use tollgate_checkpoint::conformance::check_store;
use tollgate_checkpoint::{
    Codec, DecisionWrite, EventRecord, GraphRef, InterruptRecord, NewRun, Owner, PageRequest,
    RunFilter, RunId, RunStatus, RunStore, StepRecord, StoreError, TaskKey, TaskUpdate, Transition,
};
use tollgate_postgres::{PostgresOptions, PostgresStore};
use tollgate_testkit::conformance::check_engine;
use tollgate_testkit::postgres_url;

/// A schema no other test uses.
fn fresh_schema() -> String {
    format!("t{}", ulid::Ulid::new().to_string().to_lowercase())
}

async fn fresh_store(url: &str) -> PostgresStore {
    let options = PostgresOptions::default().with_schema(fresh_schema()).with_pool_size(4);
    PostgresStore::connect_with(url, options).await.unwrap()
}

/// A plain connection, to look at or tamper with the database directly.
async fn raw(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The tables of `schema` with their row counts.
async fn tables(client: &tokio_postgres::Client, schema: &str) -> Vec<(String, i64)> {
    let names = client
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 \
             ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap();
    let mut out = Vec::new();
    for row in names {
        let name: String = row.get(0);
        let count: i64 = client
            .query_one(&format!("SELECT count(*) FROM \"{schema}\".\"{name}\""), &[])
            .await
            .unwrap()
            .get(0);
        out.push((name, count));
    }
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn passes_the_store_conformance_suite() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(check_store(|| fresh_store(&url)));
}

#[test]
fn passes_the_long_term_memory_conformance_suite() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(tollgate_checkpoint::conformance::check_item_store(|| fresh_store(&url)));
}

#[test]
fn passes_the_engine_conformance_suite() {
    let Some(url) = postgres_url() else { return };
    let cases = AtomicUsize::new(0);
    runtime().block_on(check_engine(|| {
        cases.fetch_add(1, Ordering::SeqCst);
        fresh_store(&url)
    }));
    assert!(cases.load(Ordering::SeqCst) > 5, "the suite made a store per case");
}

#[test]
fn ten_processes_opening_at_once_migrate_once() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let schema = fresh_schema();
        let opens = (0..10).map(|_| {
            let options = PostgresOptions::default().with_schema(schema.clone()).with_pool_size(1);
            let url = url.clone();
            tokio::spawn(async move { PostgresStore::connect_with(&url, options).await })
        });
        for open in opens.collect::<Vec<_>>() {
            open.await.unwrap().unwrap();
        }
        let client = raw(&url).await;
        let row = client
            .query_one(&format!("SELECT version, application FROM {schema}.tollgate_schema"), &[])
            .await
            .unwrap();
        assert_eq!((row.get::<_, i32>(0), row.get::<_, String>(1)), (21, "tollgate".to_owned()));
        let names: Vec<String> =
            tables(&client, &schema).await.into_iter().map(|(name, _)| name).collect();
        let expected = [
            "attachments",
            "events",
            "interrupts",
            "item_epoch",
            "items",
            "node_cache",
            "outbox",
            "pending_writes",
            "runs",
            "schedules",
            "snapshots",
            "steps",
            "threads",
            "tollgate_schema",
            "watchers",
        ];
        assert_eq!(names, expected, "each table made once");
    });
}

#[test]
fn a_newer_or_foreign_schema_is_refused_and_left_untouched() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let client = raw(&url).await;
        // A schema of a newer tollgate.
        let newer = fresh_schema();
        drop(fresh_store_in(&url, &newer).await);
        client
            .execute(&format!("UPDATE {newer}.tollgate_schema SET version = 99"), &[])
            .await
            .unwrap();
        let before = tables(&client, &newer).await;
        let options = PostgresOptions::default().with_schema(newer.clone());
        let error = PostgresStore::connect_with(&url, options).await.unwrap_err();
        assert!(
            matches!(error, StoreError::SchemaTooNew { found: 99, supported: 21 }),
            "{error:?}"
        );
        assert!(error.to_string().contains("upgrade tollgate"), "{error}");
        assert_eq!(tables(&client, &newer).await, before, "nothing changed");

        // A schema holding another application's tables.
        let foreign = fresh_schema();
        client
            .batch_execute(&format!(
                "CREATE SCHEMA {foreign}; CREATE TABLE {foreign}.customers (id int); \
                 INSERT INTO {foreign}.customers VALUES (1)"
            ))
            .await
            .unwrap();
        let options = PostgresOptions::default().with_schema(foreign.clone());
        let error = PostgresStore::connect_with(&url, options).await.unwrap_err();
        assert!(matches!(&error, StoreError::ForeignDatabase { tables } if tables == "customers"));
        assert!(error.to_string().contains("not tollgate's"), "{error}");
        assert_eq!(tables(&client, &foreign).await, [("customers".to_owned(), 1)]);
    });
}

async fn fresh_store_in(url: &str, schema: &str) -> PostgresStore {
    let options = PostgresOptions::default().with_schema(schema).with_pool_size(1);
    PostgresStore::connect_with(url, options).await.unwrap()
}

#[test]
fn bad_settings_and_unreachable_servers_are_typed_errors() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let closed_port = "postgres://tollgate:tollgate@127.0.0.1:1/tollgate_test?sslmode=disable";
        let error = PostgresStore::connect(closed_port).await.unwrap_err();
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");

        let wrong_password = url.replacen("tollgate:tollgate@", "tollgate:wrong@", 1);
        assert_ne!(wrong_password, url, "the test URL names the tollgate role");
        let error = PostgresStore::connect(&wrong_password).await.unwrap_err();
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
        assert!(error.to_string().contains("password"), "{error}");

        let error = PostgresStore::connect("postgres://host:notaport/db").await.unwrap_err();
        assert!(matches!(error, StoreError::InvalidSettings { .. }), "{error:?}");
        let options = PostgresOptions::default().with_schema("Robert'); DROP TABLE runs;--");
        let error = PostgresStore::connect_with(&url, options).await.unwrap_err();
        assert!(matches!(error, StoreError::InvalidSettings { .. }), "{error:?}");
        assert!(PostgresStore::is_url("postgres://x/y") && PostgresStore::is_url("postgresql://x"));
        assert!(!PostgresStore::is_url("tollgate.db"));
    });
}

fn paused_run(run: RunId) -> (NewRun, Transition) {
    let blob = Codec::Json.encode(&0u32, 1).unwrap();
    let created = NewRun {
        id: run,
        graph: GraphRef { name: "g".into(), version: 1 },
        thread: None,
        created_at_ms: 1,
        snapshot: blob.clone(),
        frontier: blob,
        events: vec![EventRecord { seq: 1, json: "{}".into() }],
        claim: Some((Owner::current(), i64::MAX)),
        attachment: None,
        thread_turn: None,
        trace: None,
    };
    let interrupt = InterruptRecord {
        id: format!("{run}.1.0.0"),
        step: 1,
        task: 0,
        ordinal: 0,
        node: "gate".into(),
        kind: "approval".into(),
        payload: serde_json::json!({"b": 1, "a": [2, 3]}),
        decisions: vec!["approve".into()],
        schema: None,
        rejection_routed: false,
        decision: None,
        raised_at_ms: 2,
    };
    let pause = Transition {
        run,
        epoch: 1,
        step: None,
        status: RunStatus::AwaitingHitl,
        failure: None,
        events: vec![EventRecord { seq: 2, json: "{}".into() }],
        at_ms: 2,
        lease_until_ms: None,
        interrupts: vec![interrupt],
    };
    (created, pause)
}

/// The transition of a step of `run` (epoch 1) that keeps it running.
fn step_of(run: RunId, record: StepRecord, events: Vec<EventRecord>) -> Transition {
    Transition {
        run,
        epoch: 1,
        step: Some(record),
        status: RunStatus::Running,
        failure: None,
        events,
        at_ms: 2,
        lease_until_ms: Some(i64::MAX),
        interrupts: Vec::new(),
    }
}

#[test]
fn of_many_concurrent_decisions_on_separate_connections_exactly_one_wins() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let schema = fresh_schema();
        let store = Arc::new(fresh_store_in(&url, &schema).await);
        for _ in 0..5 {
            let run = RunId::new();
            let (created, pause) = paused_run(run);
            store.create_run(created).await.unwrap();
            store.commit(pause).await.unwrap();
            // Eight deciders, each with its own pool (its own connection).
            let mut deciders = Vec::new();
            for n in 0..8 {
                let store = fresh_store_in(&url, &schema).await;
                deciders.push(tokio::spawn(async move {
                    store
                        .decide(DecisionWrite {
                            run,
                            expected_epoch: 1,
                            answers: vec![tollgate_checkpoint::Answer {
                                interrupt: format!("{run}.1.0.0"),
                                decision: serde_json::json!({"decision": "approve", "by": n}),
                            }],
                            status: RunStatus::Queued,
                            events: vec![EventRecord { seq: 3, json: format!("{{\"by\":{n}}}") }],
                            failure: None,
                            at_ms: 3,
                            claim: None,
                        })
                        .await
                }));
            }
            let mut won = 0;
            for decider in deciders {
                match decider.await.unwrap() {
                    Ok(epoch) => {
                        assert_eq!(epoch, 2);
                        won += 1;
                    }
                    Err(StoreError::Fenced { current: 2, .. })
                    | Err(StoreError::NotAwaitingDecision { .. }) => {}
                    Err(other) => panic!("unexpected refusal {other:?}"),
                }
            }
            assert_eq!(won, 1, "exactly one decision wins");
            let record = store.run(run).await.unwrap();
            assert_eq!((record.status, record.epoch, record.last_seq), (RunStatus::Queued, 2, 3));
            let events = store.events(run, 0, 10).await.unwrap();
            assert_eq!(events.len(), 3, "one decision's event, once");
            let interrupts = store.interrupts(run).await.unwrap();
            assert_eq!(interrupts[0].payload, serde_json::json!({"b": 1, "a": [2, 3]}));
        }
    });
}

#[test]
fn connections_the_server_dropped_are_replaced() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        // A name of its own, so that only this test's connections are cut.
        let separator = if url.contains('?') { '&' } else { '?' };
        let tagged = format!("{url}{separator}application_name=tg_dropped_test");
        let options = PostgresOptions::default().with_schema(fresh_schema()).with_pool_size(2);
        let store = PostgresStore::connect_with(&tagged, options).await.unwrap();
        let run = RunId::new();
        let (created, pause) = paused_run(run);
        store.create_run(created).await.unwrap();
        let admin = raw(&url).await;
        let cut = admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = 'tg_dropped_test'",
                &[],
            )
            .await
            .unwrap();
        assert!(!cut.is_empty(), "the store's connection was found and cut");
        // A call that meets a connection whose end has not reached the pool
        // yet fails as unavailable (at most one per pooled connection); the
        // pool then opens new ones.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let mut failures = 0;
        let record = loop {
            match store.run(run).await {
                Ok(record) => break record,
                Err(StoreError::Unavailable { .. }) if failures < 2 => failures += 1,
                Err(other) => panic!("after {failures} failures: {other:?}"),
            }
        };
        assert_eq!(record.status, RunStatus::Running);
        store.commit(pause).await.unwrap();
        assert_eq!(store.run(run).await.unwrap().status, RunStatus::AwaitingHitl);
    });
}

/// A new, empty database on the server of `url`; its URL.
async fn fresh_database(url: &str) -> String {
    let name = format!("tg_{}", RunId::new().to_string().to_lowercase());
    raw(url).await.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap();
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (server, _) = base.rsplit_once('/').unwrap();
    let query = if query.is_empty() { String::new() } else { format!("?{query}") };
    format!("{server}/{name}{query}")
}

/// A queued run wakes `run_notifications`, a claim does not, a release
/// back to the queue does; `run_changes` names each run whose status
/// changed, in any process: `None` once listening (anything before was
/// missed), then the run when it is queued, claimed and released.
#[test]
fn a_queued_run_wakes_the_listeners_of_its_database_and_is_named() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        // A database of its own: notifications are per database.
        let url = fresh_database(&url).await;
        let store = PostgresStore::connect(&url).await.unwrap();
        let wake = store.run_notifications();
        let mut changes = store.run_changes();
        let within = |what: &'static str| {
            let wake = Arc::clone(&wake);
            async move {
                tokio::time::timeout(Duration::from_secs(10), wake.notified())
                    .await
                    .unwrap_or_else(|_| panic!("no wake-up: {what}"));
            }
        };
        let mut next = async || {
            tokio::time::timeout(Duration::from_secs(10), changes.recv())
                .await
                .expect("a change within 10 s")
                .expect("the listener is alive")
        };
        within("once listening").await;
        assert_eq!(next().await, None, "listening: anything before was missed");
        // Nothing happens: no wake-up.
        let quiet = tokio::time::timeout(Duration::from_millis(300), wake.notified()).await;
        assert!(quiet.is_err(), "woken with nothing queued");
        let other = PostgresStore::connect(&url).await.unwrap();
        let run = RunId::new();
        let (created, _) = paused_run(run);
        other.create_run(NewRun { claim: None, ..created }).await.unwrap();
        within("a run was queued").await;
        assert_eq!(next().await, Some(run), "queued");
        let epoch = other.run(run).await.unwrap().epoch;
        let epoch = other.claim(run, epoch, Owner::current(), i64::MAX).await.unwrap();
        assert_eq!(next().await, Some(run), "claimed");
        // A claim makes no work for a worker: it does not wake one.
        let quiet = tokio::time::timeout(Duration::from_millis(300), wake.notified()).await;
        assert!(quiet.is_err(), "woken by a claim");
        // Released back to the queue (a worker shutting down): it does.
        let release = Transition {
            run,
            epoch,
            step: None,
            status: RunStatus::Queued,
            failure: None,
            events: Vec::new(),
            at_ms: 3,
            lease_until_ms: None,
            interrupts: Vec::new(),
        };
        other.commit(release).await.unwrap();
        assert_eq!(next().await, Some(run), "released");
        within("a run was released").await;
    });
}

/// Commits of a watched run wake `event_notifications` at once; commits of
/// runs nobody watches do not.
#[test]
fn watched_runs_announce_their_commits() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let store = fresh_store(&url).await;
        let notify = store.event_notifications();
        // The listener wakes everyone once it listens.
        let listening = notify.notified();
        tokio::pin!(listening);
        listening.as_mut().enable();
        tokio::time::timeout(Duration::from_secs(10), listening).await.unwrap();
        let (watched, unwatched) = (RunId::new(), RunId::new());
        store.watch(watched, Duration::from_secs(60)).await.unwrap();
        let woken = |run: RunId| {
            let store = &store;
            let notify = Arc::clone(&notify);
            async move {
                let notified = notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let (created, pause) = paused_run(run);
                store.create_run(created).await.unwrap();
                store.commit(pause).await.unwrap();
                tokio::time::timeout(Duration::from_millis(1_500), notified).await.is_ok()
            }
        };
        assert!(!woken(unwatched).await, "a run nobody watches makes no noise");
        assert!(woken(watched).await, "a watched run's commit wakes the streams");
    });
}

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
