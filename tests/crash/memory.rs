//! Long-term memory under kill -9: a child stores batches of 50 items, one
//! batch per transaction, journalling each batch once it is acknowledged;
//! killed inside a batch's transaction (a failpoint) or while it writes
//! (once it has acknowledged a random number of batches), the store holds
//! every acknowledged batch whole and no batch in part. On a SQLite file,
//! and on PostgreSQL (`TOLLGATE_PG_URL`, a schema of its own per child;
//! killed while writing only).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::{ItemOp, ItemStore, Memory, Namespace, PutOp, SearchOp, SqliteStore};
use tollgate_postgres::{PostgresOptions, PostgresStore};

use crate::child::journal;
use crate::parent::{block_on, lines};

/// Items of a batch.
const BATCH: usize = 50;
/// Batches a child stores.
const BATCHES: usize = 200;

/// Where the items go: the SQLite file of `dir`, or `schema` on
/// `TOLLGATE_PG_URL`.
async fn store(
    dir: &Path,
    schema: Option<&str>,
) -> Result<Arc<dyn ItemStore>, Box<dyn std::error::Error>> {
    Ok(match schema {
        Some(schema) => {
            let url = std::env::var("TOLLGATE_PG_URL")?;
            let options = PostgresOptions::default().with_schema(schema);
            Arc::new(PostgresStore::connect_with(&url, options).await?)
        }
        None => Arc::new(SqliteStore::open(dir.join("memory.sqlite"))?),
    })
}

/// The child: stores `BATCHES` batches.
pub(crate) async fn child(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let schema = std::env::var("TOLLGATE_CRASH_PG_SCHEMA").ok();
    let memory = Memory::new(store(dir, schema.as_deref()).await?);
    for batch in 0..BATCHES {
        let namespace = Namespace::new(["crash", &format!("b{batch:03}")])?;
        let ops = (0..BATCH)
            .map(|key| {
                let value = json!({"batch": batch, "key": key, "text": "x".repeat(200)});
                ItemOp::Put(PutOp::new(namespace.clone(), format!("k{key:02}"), value))
            })
            .collect();
        memory.batch(ops).await?;
        journal(&dir.join("memory-acks.log"), &format!("{batch}"));
    }
    Ok(())
}

/// Runs a child; kills it once it has acknowledged `kill_after_acks`
/// batches (when given), else lets it finish or die at its failpoint.
fn killed_child(
    dir: &Path,
    schema: Option<&str>,
    failpoint: Option<&str>,
    kill_after_acks: Option<usize>,
) {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.env("TOLLGATE_CRASH_CHILD", "memory").env("TOLLGATE_CRASH_DIR", dir);
    command.env_remove("TOLLGATE_FAILPOINTS").stderr(std::process::Stdio::null());
    match schema {
        Some(schema) => command.env("TOLLGATE_CRASH_PG_SCHEMA", schema),
        None => command.env_remove("TOLLGATE_CRASH_PG_SCHEMA"),
    };
    if let Some(failpoint) = failpoint {
        command.env("TOLLGATE_FAILPOINTS", failpoint);
    }
    let mut child = command.spawn().unwrap();
    if let Some(acks) = kill_after_acks {
        let started = std::time::Instant::now();
        while lines(&dir.join("memory-acks.log")).len() < acks {
            assert!(started.elapsed() < Duration::from_secs(60), "the child stalled");
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// Every batch is whole or absent; every acknowledged one is whole.
fn check(dir: &Path, schema: Option<&str>) -> (usize, usize) {
    let memory = Memory::new(block_on(store(dir, schema)).unwrap());
    let acked: Vec<usize> =
        lines(&dir.join("memory-acks.log")).iter().map(|line| line[0].parse().unwrap()).collect();
    let mut whole = 0;
    for batch in 0..BATCHES {
        let namespace = Namespace::new(["crash", &format!("b{batch:03}")]).unwrap();
        let found = block_on(memory.search(SearchOp::new(namespace).limit(1000))).unwrap();
        assert!(
            found.is_empty() || found.len() == BATCH,
            "batch {batch} is torn: {} of {BATCH} items",
            found.len()
        );
        if acked.contains(&batch) {
            assert_eq!(found.len(), BATCH, "acknowledged batch {batch} was lost");
        }
        whole += usize::from(found.len() == BATCH);
    }
    (whole, acked.len())
}

/// Killed inside the transaction of the 1st, 7th and 40th batch, and
/// while writing.
pub(crate) fn batches_are_all_or_nothing() {
    for failpoint in ["commit:inside@1", "commit:inside@7", "commit:inside@40"] {
        let dir = tempfile::tempdir().unwrap();
        killed_child(dir.path(), None, Some(failpoint), None);
        let (whole, acked) = check(dir.path(), None);
        let fired: usize = failpoint.rsplit('@').next().unwrap().parse().unwrap();
        assert_eq!(whole, fired - 1, "{failpoint}: the batches before it, whole, and not it");
        assert_eq!(acked, fired - 1);
    }
    random_kills(None);
}

/// Killed while writing, on PostgreSQL.
pub(crate) fn batches_are_all_or_nothing_on_postgres() {
    let Some(url) = tollgate_testkit::postgres_url() else { return };
    let schema = format!("crash_memory_{}", tollgate::RunId::new().to_string().to_lowercase());
    random_kills(Some(&schema));
    block_on(async {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        for round in 0..6 {
            client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema}_{round} CASCADE"))
                .await?;
        }
        Ok::<(), tokio_postgres::Error>(())
    })
    .unwrap();
}

/// Six children, each killed while it writes: once it has acknowledged a
/// random number (1 to 40) of batches, with the next one in flight.
fn random_kills(schema: Option<&str>) {
    let mut seed = std::process::id() as u64;
    for round in 0..6 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let acks = 1 + ((seed >> 33) % 40) as usize;
        let dir = tempfile::tempdir().unwrap();
        let schema = schema.map(|schema| format!("{schema}_{round}"));
        killed_child(dir.path(), schema.as_deref(), None, Some(acks));
        let (whole, acked) = check(dir.path(), schema.as_deref());
        assert!(acked >= acks, "killed after {acks} acknowledged batches, {acked} journalled");
        assert!(whole >= acked && whole <= acked + 1, "{whole} whole, {acked} acknowledged");
    }
}
