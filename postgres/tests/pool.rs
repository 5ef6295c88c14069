//! The store's connections are bounded: more calls at once than its pool
//! holds wait for a connection as long as `wait_timeout`, then fail with
//! the typed `PoolExhausted`, not a hang; the calls holding connections
//! are not disturbed.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::time::{Duration, Instant};

use tokio_postgres::NoTls;
use tollgate_checkpoint::{
    Codec, EventRecord, GraphRef, NewRun, Owner, RunId, RunStore, StoreError, ThreadTurn,
};
use tollgate_postgres::{PostgresOptions, PostgresStore};
use tollgate_testkit::postgres_url;

#[test]
fn a_call_that_finds_every_connection_busy_fails_typed_after_the_wait() {
    let Some(url) = postgres_url() else { return };
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let schema = format!("t{}", ulid::Ulid::new().to_string().to_lowercase());
        let mut options = PostgresOptions::default().with_schema(schema.clone()).with_pool_size(1);
        options.wait_timeout = Duration::from_millis(300);
        let store = PostgresStore::connect_with(&url, options).await.unwrap();
        // The pool's one connection is held by a run created on thread
        // `held`, which waits for the thread's lock while another
        // connection holds it.
        let thread = format!("held-{schema}");
        let (raw, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
        tokio::spawn(connection);
        raw.batch_execute("BEGIN").await.unwrap();
        raw.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 7))", &[&thread])
            .await
            .unwrap();
        let blob = Codec::Json.encode(&0, 1).unwrap();
        let run = RunId::new();
        let created = NewRun {
            id: run,
            graph: GraphRef { name: "g".into(), version: 1 },
            thread: Some(thread),
            created_at_ms: 1,
            snapshot: blob.clone(),
            frontier: blob,
            events: vec![EventRecord { seq: 1, json: "{}".into() }],
            claim: Some((Owner::current(), i64::MAX)),
            attachment: None,
            thread_turn: Some(ThreadTurn { after: None }),
            trace: None,
        };
        let holder = {
            let store = store.clone();
            tokio::spawn(async move { store.create_run(created).await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        let refused = store.run(RunId::new()).await.unwrap_err();
        let waited = started.elapsed();
        assert!(
            matches!(refused, StoreError::PoolExhausted { size: 1, waited_ms: 300 }),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("raise the pool size"), "{refused}");
        assert!(
            waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        // The lock let go, the held call finishes as if nothing happened.
        raw.batch_execute("COMMIT").await.unwrap();
        assert_eq!(holder.await.unwrap().unwrap(), 1);
        assert_eq!(store.run(run).await.unwrap().id, run);
        raw.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.unwrap();
    });
}

/// `pool_mode` and `pool_size` are checked before anything connects: an
/// unknown mode, a size out of range, and a
/// schema of tollgate's own through a transaction pooler (its
/// `search_path` is session state such a pooler does not keep), are
/// `InvalidSettings` saying what to do instead.
#[test]
fn pool_keys_are_checked_before_connecting() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let url = "postgres://u:p@127.0.0.1:1/db?sslmode=disable";
        let unknown = PostgresStore::connect(&format!("{url}&pool_mode=statement")).await;
        let Err(StoreError::InvalidSettings { source }) = unknown else {
            panic!("an unknown pool_mode is invalid: {unknown:?}")
        };
        assert!(source.to_string().contains("session or transaction"), "{source}");
        for size in ["0", "many", "20000"] {
            let refused = PostgresStore::connect(&format!("{url}&pool_size={size}")).await;
            let Err(StoreError::InvalidSettings { source }) = refused else {
                panic!("pool_size={size} is invalid: {refused:?}")
            };
            assert!(source.to_string().contains("from 1 to 10000"), "{source}");
        }
        let options = PostgresOptions::default().with_schema("mine");
        let schema =
            PostgresStore::connect_with(&format!("{url}&pool_mode=transaction"), options).await;
        let Err(StoreError::InvalidSettings { source }) = schema else {
            panic!("a schema through a transaction pooler is invalid: {schema:?}")
        };
        assert!(source.to_string().contains("ALTER ROLE"), "{source}");
        // The same through the option, with no URL key.
        let options = PostgresOptions::default()
            .with_schema("mine")
            .with_pooling(tollgate_postgres::Pooling::Transaction);
        let schema = PostgresStore::connect_with(url, options).await;
        assert!(matches!(schema, Err(StoreError::InvalidSettings { .. })), "{schema:?}");
        // Without a schema, the mode is taken and the (absent) server is
        // what fails.
        let plain = PostgresStore::connect(&format!("{url}&pool_mode=transaction")).await;
        assert!(matches!(plain, Err(StoreError::Unavailable { .. })), "{plain:?}");
    });
}
