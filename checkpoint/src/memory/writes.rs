//! The memory store's writes checked: a new run (its thread turn, its
//! first events), a writer's epoch, gap-free events.

use std::collections::HashMap;

use super::{Inner, StoredRun};
use crate::error::StoreError;
use crate::ids::RunId;
use crate::record::{EventRecord, NewRun, RunRecord};
use crate::status::RunStatus;

impl Inner {
    /// Creates a run (`RunStore::create_run`).
    pub(super) fn create_run(&mut self, run: NewRun) -> Result<u64, StoreError> {
        let inner = self;
        if inner.runs.contains_key(&run.id) {
            return Err(StoreError::RunExists { run: run.id });
        }
        check_events(run.id, 0, &run.events)?;
        if let (Some(turn), Some(thread)) = (run.thread_turn, &run.thread) {
            let latest = inner
                .runs
                .values()
                .filter(|stored| stored.record.thread.as_deref() == Some(thread.as_str()))
                .map(|stored| (stored.record.id, stored.record.status))
                .max_by_key(|(id, _)| *id);
            turn.check(thread, latest)?;
        }
        let record = RunRecord {
            id: run.id,
            graph: run.graph,
            thread: run.thread,
            status: if run.claim.is_some() { RunStatus::Running } else { RunStatus::Queued },
            step: 0,
            epoch: 1,
            created_at_ms: run.created_at_ms,
            updated_at_ms: run.created_at_ms,
            failure: None,
            last_seq: run.events.len() as u64,
            owner: run.claim.as_ref().map(|(owner, _)| owner.clone()),
            lease_until_ms: run.claim.as_ref().map(|(_, until)| *until),
            pending_interrupts: 0,
            lease_losses: 0,
            trace: run.trace,
        };
        inner.runs.insert(
            run.id,
            StoredRun {
                record,
                snapshots: vec![(0, run.snapshot)],
                initial_frontier: run.frontier,
                steps: Vec::new(),
                step_times: vec![run.created_at_ms],
                pending: HashMap::new(),
                progress: HashMap::new(),
                events: run.events,
                interrupts: Vec::new(),
                attachment: run.attachment,
            },
        );
        Ok(1)
    }

    pub(super) fn get_mut(&mut self, run: RunId) -> Result<&mut StoredRun, StoreError> {
        self.runs.get_mut(&run).ok_or(StoreError::RunNotFound { run })
    }
}

pub(super) fn check_writer(stored: &StoredRun, epoch: u64) -> Result<(), StoreError> {
    let record = &stored.record;
    if record.status.is_terminal() {
        return Err(StoreError::RunTerminal { run: record.id, status: record.status });
    }
    if record.epoch != epoch {
        return Err(StoreError::Fenced { run: record.id, writer: epoch, current: record.epoch });
    }
    Ok(())
}

pub(super) fn check_events(
    run: RunId,
    last_seq: u64,
    events: &[EventRecord],
) -> Result<(), StoreError> {
    for (offset, event) in events.iter().enumerate() {
        let expected = last_seq + 1 + offset as u64;
        if event.seq != expected {
            return Err(StoreError::EventGap { run, expected, found: event.seq });
        }
    }
    Ok(())
}
