//! A step's updates longer than a quarter page, stored as parts.
//!
//! A `steps` row holding a 1 KB update is about 1.3 KB: one fits on a
//! 2 KiB page, the next does not, and about 700 bytes of every page stay
//! empty (the database grew by twice the update). Longer updates are cut
//! into parts of a little under a quarter page, appended to `step_parts`,
//! four to a page; the `steps` row keeps the head that is shorter than a
//! part and, small again, shares its page with others.
//!
//! A part's id is its step row's id (commit order) shifted left by
//! [`PART_BITS`], plus its number within the step, so parts append as
//! their steps do and a step's parts are one range of the rowid B-tree,
//! with no index to write. The row says it has parts by a negative
//! `tasks` (the task count, negated: a step with parts has updates, so at
//! least one task), which costs rows without parts nothing.

use rusqlite::{params, Connection};

use super::Abort;
use crate::error::StoreError;
use crate::ids::RunId;
use crate::CodecError;

/// Bits of a part's id that number it within its step.
const PART_BITS: u32 = 20;

/// The longest part for pages of `page_size` bytes: four parts and their
/// cell headers fill a page.
pub(crate) fn part_len(page_size: u32) -> usize {
    (page_size as usize / 4).saturating_sub(16).max(64)
}

/// Splits `updates` (framed) into what the `steps` row keeps and what goes
/// to parts (empty when the updates stay whole in the row: at most
/// `part_len` bytes, or too many parts for [`PART_BITS`], which SQLite's
/// own overflow pages then carry). The parts are all whole.
pub(crate) fn split(updates: &[u8], part_len: usize) -> (&[u8], &[u8]) {
    let parts = updates.len() / part_len;
    if updates.len() <= part_len || parts >> PART_BITS != 0 {
        return (updates, &[]);
    }
    updates.split_at(updates.len() % part_len)
}

/// The `tasks` column of a step of `tasks` tasks: negated when its updates
/// have parts.
pub(crate) fn tasks_column(tasks: usize, parted: bool) -> i64 {
    let tasks = i64::try_from(tasks).unwrap_or(i64::MAX);
    if parted {
        -tasks
    } else {
        tasks
    }
}

/// Appends the parts of `rest` (from [`split`]) for the step row `step_id`.
pub(crate) fn store(
    tx: &Connection,
    step_id: i64,
    rest: &[u8],
    part_len: usize,
) -> rusqlite::Result<()> {
    let mut insert = tx.prepare_cached("INSERT INTO step_parts (id, part) VALUES (?1, ?2)")?;
    for (number, part) in rest.chunks(part_len).enumerate() {
        insert.execute(params![range(step_id).0 | number as i64, part])?;
    }
    Ok(())
}

/// A step's framed updates: what its row kept, then its parts in order
/// when its `tasks` column is negative. A missing part is a damaged
/// checkpoint (missing last parts leave the updates short, which decoding
/// them finds).
pub(crate) fn load(
    tx: &Connection,
    run: RunId,
    step: u64,
    (step_id, tasks): (i64, i64),
    mut kept: Vec<u8>,
) -> Result<Vec<u8>, Abort> {
    if tasks >= 0 {
        return Ok(kept);
    }
    let (first, last) = range(step_id);
    let mut stmt = tx
        .prepare_cached("SELECT id, part FROM step_parts WHERE id BETWEEN ?1 AND ?2 ORDER BY id")?;
    let mut rows = stmt.query(params![first, last])?;
    let mut next = 0i64;
    let mut gap = false;
    while let Some(row) = rows.next()? {
        if row.get::<_, i64>(0)? != first + next {
            gap = true;
            break;
        }
        kept.extend_from_slice(&row.get::<_, Vec<u8>>(1)?);
        next += 1;
    }
    if next == 0 || gap {
        let source = CodecError::PartMissing { part: next as u64 };
        return Err(Abort::Refused(StoreError::CorruptCheckpoint { run, step, source }));
    }
    Ok(kept)
}

/// Deletes the parts of every step of run `num` (before its `steps` rows).
pub(crate) fn delete_run(tx: &Connection, num: i64) -> rusqlite::Result<()> {
    let steps: Vec<i64> = tx
        .prepare_cached("SELECT id FROM steps WHERE num = ?1 AND tasks < 0")?
        .query_map([num], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut delete = tx.prepare_cached("DELETE FROM step_parts WHERE id BETWEEN ?1 AND ?2")?;
    for step_id in steps {
        let (first, last) = range(step_id);
        delete.execute(params![first, last])?;
    }
    Ok(())
}

/// The ids the parts of step row `step_id` may have.
fn range(step_id: i64) -> (i64, i64) {
    let first = step_id << PART_BITS;
    (first, first | ((1 << PART_BITS) - 1))
}
