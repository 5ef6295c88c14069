//! The records the conformance checks write: runs, steps, events,
//! updates and interrupts made the same way for every backend.

use crate::codec::{Blob, Codec};
use crate::error::StoreError;
use crate::ids::{RunId, TaskKey};
use crate::owner::Owner;
use crate::record::{
    EventRecord, GraphRef, InterruptRecord, NewRun, StepRecord, StoredCheckpoint, TaskUpdate,
    Transition,
};
use crate::status::RunStatus;

pub(super) fn blob(value: u32) -> Blob {
    Codec::Json.encode(&value, 1).expect("a u32 encodes")
}

pub(super) fn event(seq: u64) -> EventRecord {
    EventRecord { seq, json: format!("{{\"seq\":{seq}}}") }
}

pub(super) fn new_run(id: RunId, graph: &str, thread: Option<&str>) -> NewRun {
    NewRun {
        id,
        graph: GraphRef { name: graph.into(), version: 1 },
        thread: thread.map(str::to_owned),
        created_at_ms: id.timestamp_ms() as i64,
        snapshot: blob(0),
        frontier: blob(0),
        events: vec![event(1)],
        claim: Some((Owner::current(), i64::MAX)),
        attachment: None,
        thread_turn: None,
        trace: None,
    }
}

pub(super) fn update(step: u64, index: u32, value: u32) -> TaskUpdate {
    TaskUpdate { task: TaskKey { step, index, node: format!("n{index}") }, update: blob(value) }
}

pub(super) fn step(run: RunId, epoch: u64, number: u64, seq: u64, snapshot: bool) -> Transition {
    Transition {
        run,
        epoch,
        step: Some(StepRecord {
            step: number,
            updates: vec![update(number, 0, number as u32)],
            snapshot: snapshot.then(|| blob(100 + number as u32)),
            frontier: blob(number as u32),
        }),
        status: RunStatus::Running,
        failure: None,
        events: vec![event(seq)],
        at_ms: 1_000 + number as i64,
        lease_until_ms: Some(i64::MAX),
        interrupts: Vec::new(),
    }
}

pub(super) fn kind(error: &StoreError) -> String {
    format!("{error:?}").split([' ', '{', '(']).next().unwrap_or_default().to_owned()
}

pub(crate) fn interrupt(run: RunId, step: u64, task: u32) -> InterruptRecord {
    InterruptRecord {
        id: format!("{run}.{step}.{task}.0"),
        step,
        task,
        ordinal: 0,
        node: format!("n{task}"),
        kind: "approval".into(),
        payload: serde_json::json!({"task": task}),
        decisions: vec!["approve".into(), "reject".into()],
        schema: None,
        rejection_routed: false,
        decision: None,
        raised_at_ms: 7,
    }
}

/// What a checkpoint holds, comparably.
pub(super) fn shape(
    checkpoint: StoredCheckpoint,
) -> (u64, usize, usize, usize, Vec<InterruptRecord>) {
    let StoredCheckpoint { snapshot_step, deltas, pending, progress, interrupts, .. } = checkpoint;
    (snapshot_step, deltas.len(), pending.len(), progress.len(), interrupts)
}
