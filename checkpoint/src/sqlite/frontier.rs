//! Reading frontiers stored once (see [`crate::RecentFrontiers`]): a
//! step's row holds its frontier, or a reference to an earlier step of its
//! run that holds it in full. The store's connection remembers each run's
//! recent full frontiers with the rest it knows of the run
//! (`writers.rs`).

use rusqlite::{params, Connection, OptionalExtension};

use super::fault::Abort;
use super::rows::{blob_at, corrupt_row};
use crate::codec::Blob;
use crate::frontier::frontier_reference;
use crate::ids::RunId;

/// The frontier of `run` (number `num`) after `step`, a reference
/// followed.
pub(super) fn read(tx: &Connection, run: RunId, num: i64, step: u64) -> Result<Blob, Abort> {
    let select = |at: u64| -> Result<Vec<u8>, Abort> {
        tx.prepare_cached("SELECT frontier FROM steps WHERE num = ?1 AND step = ?2")?
            .query_row(params![num, at as i64], |row| row.get(0))
            .optional()?
            .ok_or_else(|| corrupt_row(format!("run {run}: no step {at} holds a frontier")))
    };
    let stored = select(step)?;
    let Some(at) = frontier_reference(&stored) else { return blob_at(run, step, &stored) };
    let full = select(at)?;
    if at >= step || frontier_reference(&full).is_some() {
        return Err(corrupt_row(format!(
            "run {run}: the frontier of step {step} refers to step {at}, which does not hold one"
        )));
    }
    blob_at(run, at, &full)
}
