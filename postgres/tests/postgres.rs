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
    Codec, DecisionWrite, EventRecord, GraphRef, InterruptRecord, NewRun, Owner, RunId, RunStatus,
    RunStore, StepRecord, StoreError, Transition,
};
use tollgate_postgres::{PostgresOptions, PostgresStore};
use tollgate_testkit::conformance::check_engine;
use tollgate_testkit::postgres_url;

#[path = "postgres/storage.rs"]
mod storage;

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
        assert_eq!((row.get::<_, i32>(0), row.get::<_, String>(1)), (27, "tollgate".to_owned()));
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
            "request_keys",
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
            matches!(error, StoreError::SchemaTooNew { found: 99, supported: 27 }),
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

/// Claims of one request key from many connections at once, some of
/// them taking over an abandoned claim: one wins, each other finds the
/// winner's.
#[test]
fn of_many_concurrent_key_claims_on_separate_connections_exactly_one_wins() {
    use tollgate_checkpoint::{Claimed, IdempotencyStore, KeyClaim};
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let schema = fresh_schema();
        let store = fresh_store_in(&url, &schema).await;
        for round in 0..5 {
            let key = format!("k{round}");
            let abandoned = KeyClaim::new("ann", &key, "f", "dead", 0, i64::MAX);
            store.claim_key(abandoned).await.unwrap();
            let mut claimers = Vec::new();
            for n in 0..8 {
                let store = fresh_store_in(&url, &schema).await;
                let claim = KeyClaim::new("ann", &key, "f", format!("run-{n}"), 10, i64::MAX)
                    .replacing("dead");
                claimers.push(tokio::spawn(async move { store.claim_key(claim).await }));
            }
            let mut won = Vec::new();
            let mut found = Vec::new();
            for (n, claimer) in claimers.into_iter().enumerate() {
                match claimer.await.unwrap().unwrap() {
                    Claimed::Won => won.push(format!("run-{n}")),
                    Claimed::Held(held) => found.push(held.made),
                }
            }
            assert_eq!(won.len(), 1, "exactly one claim wins: {won:?}");
            assert!(found.iter().all(|made| *made == won[0]), "{found:?} against {won:?}");
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
