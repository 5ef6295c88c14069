//! Updates of every size, committed by runs in turn, read back whole.

use super::fixtures::{event, new_run, step};
use crate::codec::Codec;
use crate::ids::{RunId, TaskKey};
use crate::record::{StepRecord, TaskUpdate, Transition};
use crate::status::RunStatus;
use crate::store::RunStore;

/// Lengths around the sizes a store may treat apart (a quarter, a half and
/// a whole page of common page sizes, and far beyond).
const SIZES: [usize; 12] = [0, 1, 100, 480, 495, 496, 497, 900, 1_000, 2_000, 5_000, 70_000];

/// The update of task `task` of step `number` of the run tagged `tag`:
/// text of `len` bytes, different for every run, step and task.
fn sized(tag: char, number: u64, task: u32, len: usize) -> TaskUpdate {
    let head = format!("{tag}{number}.{task}:");
    let text: String = head
        .chars()
        .chain(('a'..='z').cycle().skip(number as usize))
        .take(len.max(head.len()))
        .collect();
    let update = Codec::Json.encode(&text, 1).expect("a string encodes");
    TaskUpdate { task: TaskKey { step: number, index: task, node: format!("n{task}") }, update }
}

/// The updates of step `number` of the run tagged `tag`: two tasks, of two
/// of the sizes.
fn updates(tag: char, number: u64) -> Vec<TaskUpdate> {
    let i = number as usize - 1;
    vec![
        sized(tag, number, 0, SIZES[i % SIZES.len()]),
        sized(tag, number, 1, SIZES[(i + 5) % SIZES.len()]),
    ]
}

fn texts(updates: &[TaskUpdate]) -> Vec<(u32, String)> {
    updates
        .iter()
        .map(|u| (u.task.index, u.update.decode::<String>().expect("a stored update decodes")))
        .collect()
}

pub(super) async fn updates_of_every_size_read_back_whole(store: &dyn RunStore) {
    let runs = [('a', RunId::new()), ('b', RunId::new())];
    for (_, run) in runs {
        store.create_run(new_run(run, "g", None)).await.expect("create");
    }
    let steps = SIZES.len() as u64;
    // In turn, as concurrent runs commit; run a takes a snapshot at step 6.
    for number in 1..=steps {
        for (tag, run) in runs {
            let snapshot = (tag == 'a' && number == 6)
                .then(|| Codec::Json.encode(&"snapshot", 1).expect("encodes"));
            let record = StepRecord {
                step: number,
                updates: updates(tag, number),
                snapshot,
                frontier: Codec::Json.encode(&(number as u32), 1).expect("encodes"),
            };
            let transition =
                Transition { step: Some(record), ..step(run, 1, number, number + 1, false) };
            store.commit(transition).await.expect("step");
        }
    }
    let expect_run = |tag: char, run: RunId| async move {
        for at in 0..=steps {
            let checkpoint = store.checkpoint(run, Some(at)).await.expect("checkpoint");
            let from = checkpoint.snapshot_step + 1;
            assert_eq!(checkpoint.deltas.len() as u64, at + 1 - from, "run {tag} at {at}");
            for (number, read) in checkpoint.deltas {
                assert_eq!(texts(&read), texts(&updates(tag, number)), "run {tag} step {number}");
                assert_eq!(read, updates(tag, number), "run {tag} step {number}");
            }
        }
    };
    for (tag, run) in runs {
        expect_run(tag, run).await;
    }
    // Deleting one run leaves the other's updates whole.
    let (_, gone) = runs[1];
    let end = Transition {
        step: None,
        status: RunStatus::Completed,
        events: vec![event(steps + 2)],
        lease_until_ms: None,
        ..step(gone, 1, steps, steps + 2, false)
    };
    store.commit(end).await.expect("run b ends");
    store.delete_run(gone).await.expect("delete run b");
    let (tag, run) = runs[0];
    expect_run(tag, run).await;
}
