//! Long-term memory under kill -9: a child stores batches of 50 items, one
//! batch per transaction, journalling each batch once it is acknowledged;
//! killed inside a batch's transaction (a failpoint) or at a random moment,
//! the file holds every acknowledged batch whole and no batch in part.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate::{ItemOp, Memory, Namespace, PutOp, SearchOp, SqliteStore};

use crate::child::journal;
use crate::parent::{block_on, lines};

/// Items of a batch.
const BATCH: usize = 50;
/// Batches a child stores.
const BATCHES: usize = 200;

/// The child: stores `BATCHES` batches.
pub(crate) async fn child(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let memory = Memory::new(Arc::new(SqliteStore::open(dir.join("memory.sqlite"))?));
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

fn killed_child(dir: &Path, failpoint: Option<&str>, kill_after: Option<Duration>) {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.env("TOLLGATE_CRASH_CHILD", "memory").env("TOLLGATE_CRASH_DIR", dir);
    command.env_remove("TOLLGATE_FAILPOINTS").stderr(std::process::Stdio::null());
    if let Some(failpoint) = failpoint {
        command.env("TOLLGATE_FAILPOINTS", failpoint);
    }
    let mut child = command.spawn().unwrap();
    if let Some(delay) = kill_after {
        std::thread::sleep(delay);
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// Every batch is whole or absent; every acknowledged one is whole.
fn check(dir: &Path) -> (usize, usize) {
    let memory = Memory::new(Arc::new(SqliteStore::open(dir.join("memory.sqlite")).unwrap()));
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

/// Killed inside the transaction of the 1st, 7th and 40th batch, and at
/// random moments.
pub(crate) fn batches_are_all_or_nothing() {
    for failpoint in ["commit:inside@1", "commit:inside@7", "commit:inside@40"] {
        let dir = tempfile::tempdir().unwrap();
        killed_child(dir.path(), Some(failpoint), None);
        let (whole, acked) = check(dir.path());
        let fired: usize = failpoint.rsplit('@').next().unwrap().parse().unwrap();
        assert_eq!(whole, fired - 1, "{failpoint}: the batches before it, whole, and not it");
        assert_eq!(acked, fired - 1);
    }
    let mut seed = std::process::id() as u64;
    for _ in 0..6 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let delay = Duration::from_millis(20 + (seed >> 33) % 400);
        let dir = tempfile::tempdir().unwrap();
        killed_child(dir.path(), None, Some(delay));
        let (whole, acked) = check(dir.path());
        assert!(whole >= acked && whole <= acked + 1, "{whole} whole, {acked} acknowledged");
    }
}
