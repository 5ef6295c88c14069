//! A store that keeps everything in process memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::codec::Blob;
use crate::ids::RunId;
use crate::record::{
    Cursor, EventRecord, NewRun, PageRequest, RunFilter, RunPage, RunRecord, RunStatus, StepRecord,
    StoredCheckpoint, TaskUpdate, TaskWrite, Transition,
};
use crate::store::{Store, StoreError};

/// In-memory [`Store`]: the same contract as the durable stores (epochs,
/// step order, gap-free events, newest-first listing), nothing survives the
/// process. For tests, examples and runs that need no durability.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    runs: BTreeMap<RunId, StoredRun>,
}

#[derive(Debug)]
struct StoredRun {
    record: RunRecord,
    /// (step, snapshot); step 0 is the input.
    snapshots: Vec<(u64, Blob)>,
    initial_frontier: Blob,
    steps: Vec<StepRecord>,
    /// Pending writes of the step after `record.step`, by task index.
    pending: HashMap<u32, TaskUpdate>,
    events: Vec<EventRecord>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied
        // transition: every mutation below validates first, then writes.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Inner {
    fn get_mut(&mut self, run: RunId) -> Result<&mut StoredRun, StoreError> {
        self.runs.get_mut(&run).ok_or(StoreError::RunNotFound { run })
    }
}

fn check_writer(stored: &StoredRun, epoch: u64) -> Result<(), StoreError> {
    let record = &stored.record;
    if record.status.is_terminal() {
        return Err(StoreError::RunTerminal { run: record.id, status: record.status });
    }
    if record.epoch != epoch {
        return Err(StoreError::Fenced { run: record.id, writer: epoch, current: record.epoch });
    }
    Ok(())
}

fn check_events(run: RunId, last_seq: u64, events: &[EventRecord]) -> Result<(), StoreError> {
    for (offset, event) in events.iter().enumerate() {
        let expected = last_seq + 1 + offset as u64;
        if event.seq != expected {
            return Err(StoreError::EventGap { run, expected, found: event.seq });
        }
    }
    Ok(())
}

#[async_trait]
impl Store for MemoryStore {
    async fn create_run(&self, run: NewRun) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        if inner.runs.contains_key(&run.id) {
            return Err(StoreError::RunExists { run: run.id });
        }
        check_events(run.id, 0, &run.events)?;
        let record = RunRecord {
            id: run.id,
            graph: run.graph,
            thread: run.thread,
            status: RunStatus::Running,
            step: 0,
            epoch: 1,
            created_at_ms: run.created_at_ms,
            updated_at_ms: run.created_at_ms,
            failure: None,
            last_seq: run.events.len() as u64,
        };
        inner.runs.insert(
            run.id,
            StoredRun {
                record,
                snapshots: vec![(0, run.snapshot)],
                initial_frontier: run.frontier,
                steps: Vec::new(),
                pending: HashMap::new(),
                events: run.events,
            },
        );
        Ok(1)
    }

    async fn commit(&self, transition: Transition) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let stored = inner.get_mut(transition.run)?;
        check_writer(stored, transition.epoch)?;
        if let Some(step) = &transition.step {
            if step.step != stored.record.step + 1 {
                return Err(StoreError::StepOutOfOrder {
                    run: transition.run,
                    current: stored.record.step,
                    found: step.step,
                });
            }
        }
        check_events(transition.run, stored.record.last_seq, &transition.events)?;

        let record = &mut stored.record;
        record.status = transition.status;
        record.failure = transition.failure;
        record.updated_at_ms = transition.at_ms;
        record.last_seq += transition.events.len() as u64;
        stored.events.extend(transition.events);
        if let Some(mut step) = transition.step {
            record.step = step.step;
            stored.pending.clear();
            if let Some(snapshot) = step.snapshot.take() {
                stored.snapshots.push((step.step, snapshot));
            }
            stored.steps.push(step);
        }
        Ok(())
    }

    async fn put_task_write(&self, write: TaskWrite) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let stored = inner.get_mut(write.run)?;
        check_writer(stored, write.epoch)?;
        let expected = stored.record.step + 1;
        if write.update.task.step != expected {
            return Err(StoreError::StepOutOfOrder {
                run: write.run,
                current: stored.record.step,
                found: write.update.task.step,
            });
        }
        stored.pending.entry(write.update.task.index).or_insert(write.update);
        Ok(())
    }

    async fn claim(&self, run: RunId) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        let stored = inner.get_mut(run)?;
        let record = &mut stored.record;
        if record.status.is_terminal() {
            return Err(StoreError::RunTerminal { run, status: record.status });
        }
        record.epoch += 1;
        record.status = RunStatus::Running;
        Ok(record.epoch)
    }

    async fn run(&self, run: RunId) -> Result<RunRecord, StoreError> {
        let inner = self.lock();
        inner
            .runs
            .get(&run)
            .map(|stored| stored.record.clone())
            .ok_or(StoreError::RunNotFound { run })
    }

    async fn checkpoint(&self, run: RunId) -> Result<StoredCheckpoint, StoreError> {
        let inner = self.lock();
        let stored = inner.runs.get(&run).ok_or(StoreError::RunNotFound { run })?;
        let (snapshot_step, snapshot) =
            stored.snapshots.last().cloned().expect("a run always has its input snapshot");
        let deltas = stored
            .steps
            .iter()
            .filter(|step| step.step > snapshot_step)
            .map(|step| (step.step, step.updates.clone()))
            .collect();
        let frontier = stored
            .steps
            .last()
            .map_or_else(|| stored.initial_frontier.clone(), |step| step.frontier.clone());
        let mut pending: Vec<TaskUpdate> = stored.pending.values().cloned().collect();
        pending.sort_by_key(|update| update.task.index);
        Ok(StoredCheckpoint {
            run: stored.record.clone(),
            snapshot_step,
            snapshot,
            deltas,
            frontier,
            pending,
        })
    }

    async fn list_runs(
        &self,
        filter: &RunFilter,
        page: &PageRequest,
    ) -> Result<RunPage, StoreError> {
        let before = page.cursor.as_ref().map(Cursor::last_run).transpose()?;
        let inner = self.lock();
        let upper = match before {
            Some(last) => std::ops::Bound::Excluded(last),
            None => std::ops::Bound::Unbounded,
        };
        let mut runs: Vec<RunRecord> = inner
            .runs
            .range((std::ops::Bound::Unbounded, upper))
            .rev()
            .map(|(_, stored)| &stored.record)
            .filter(|record| matches_filter(record, filter))
            .take(page.limit.saturating_add(1))
            .cloned()
            .collect();
        let next = if runs.len() > page.limit {
            runs.truncate(page.limit);
            runs.last().map(|record| Cursor::after(record.id))
        } else {
            None
        };
        Ok(RunPage { runs, next })
    }

    async fn events(
        &self,
        run: RunId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let inner = self.lock();
        let stored = inner.runs.get(&run).ok_or(StoreError::RunNotFound { run })?;
        Ok(stored
            .events
            .iter()
            .filter(|event| event.seq > after_seq)
            .take(limit)
            .cloned()
            .collect())
    }
}

fn matches_filter(record: &RunRecord, filter: &RunFilter) -> bool {
    filter.status.is_none_or(|status| record.status == status)
        && filter.graph.as_deref().is_none_or(|graph| record.graph.name == graph)
        && filter.thread.as_deref().is_none_or(|thread| record.thread.as_deref() == Some(thread))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Codec;
    use crate::ids::TaskKey;
    use crate::record::GraphRef;

    fn blob(value: u32) -> Blob {
        Codec::Json.encode(&value, 1).expect("encode")
    }

    fn event(seq: u64) -> EventRecord {
        EventRecord { seq, json: format!("{{\"seq\":{seq}}}") }
    }

    fn new_run(id: RunId, graph: &str, thread: Option<&str>) -> NewRun {
        NewRun {
            id,
            graph: GraphRef { name: graph.into(), version: 1 },
            thread: thread.map(str::to_owned),
            created_at_ms: 0,
            snapshot: blob(0),
            frontier: blob(0),
            events: vec![event(1)],
        }
    }

    fn step(run: RunId, epoch: u64, number: u64, seq: u64, snapshot: bool) -> Transition {
        let update = TaskUpdate {
            task: TaskKey { step: number, index: 0, node: "n".into() },
            update: blob(number as u32),
        };
        Transition {
            run,
            epoch,
            step: Some(StepRecord {
                step: number,
                updates: vec![update],
                snapshot: snapshot.then(|| blob(100 + number as u32)),
                frontier: blob(number as u32),
            }),
            status: RunStatus::Running,
            failure: None,
            events: vec![event(seq)],
            at_ms: number as i64,
        }
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(future)
    }

    #[test]
    fn transitions_must_follow_in_order_with_gap_free_events() {
        block_on(async {
            let store = MemoryStore::new();
            let run = RunId::new();
            assert_eq!(store.create_run(new_run(run, "g", None)).await.unwrap(), 1);
            assert!(matches!(
                store.create_run(new_run(run, "g", None)).await,
                Err(StoreError::RunExists { .. })
            ));
            store.commit(step(run, 1, 1, 2, false)).await.unwrap();
            let cases = [
                (step(run, 1, 3, 3, false), "StepOutOfOrder"),
                (step(run, 1, 1, 3, false), "StepOutOfOrder"),
                (step(run, 1, 2, 5, false), "EventGap"),
                (step(run, 7, 2, 3, false), "Fenced"),
            ];
            for (transition, expected) in cases {
                let error = store.commit(transition).await.unwrap_err();
                assert!(format!("{error:?}").starts_with(expected), "{error:?}");
            }
            let record = store.run(run).await.unwrap();
            assert_eq!((record.step, record.last_seq), (1, 2), "refused commits change nothing");
        });
    }

    #[test]
    fn a_claim_fences_the_previous_owner_and_terminal_runs_stay_put() {
        block_on(async {
            let store = MemoryStore::new();
            let run = RunId::new();
            store.create_run(new_run(run, "g", None)).await.unwrap();
            assert_eq!(store.claim(run).await.unwrap(), 2);
            let stale = store.commit(step(run, 1, 1, 2, false)).await.unwrap_err();
            assert!(matches!(stale, StoreError::Fenced { writer: 1, current: 2, .. }), "{stale:?}");
            let write = TaskWrite {
                run,
                epoch: 1,
                update: TaskUpdate {
                    task: TaskKey { step: 1, index: 0, node: "n".into() },
                    update: blob(1),
                },
            };
            assert!(matches!(store.put_task_write(write).await, Err(StoreError::Fenced { .. })));

            let mut done = step(run, 2, 1, 2, false);
            done.status = RunStatus::Completed;
            store.commit(done).await.unwrap();
            assert!(matches!(store.claim(run).await, Err(StoreError::RunTerminal { .. })));
            let after = store.commit(step(run, 2, 2, 3, false)).await.unwrap_err();
            assert!(matches!(after, StoreError::RunTerminal { status: RunStatus::Completed, .. }));
        });
    }

    #[test]
    fn checkpoint_is_newest_snapshot_plus_later_deltas_and_pending_writes() {
        block_on(async {
            let store = MemoryStore::new();
            let run = RunId::new();
            store.create_run(new_run(run, "g", None)).await.unwrap();
            store.commit(step(run, 1, 1, 2, false)).await.unwrap();
            store.commit(step(run, 1, 2, 3, true)).await.unwrap();
            store.commit(step(run, 1, 3, 4, false)).await.unwrap();
            store.commit(step(run, 1, 4, 5, false)).await.unwrap();
            for (index, value) in [(1, 51), (0, 50), (1, 99)] {
                let update = TaskUpdate {
                    task: TaskKey { step: 5, index, node: "n".into() },
                    update: blob(value),
                };
                store.put_task_write(TaskWrite { run, epoch: 1, update }).await.unwrap();
            }
            let checkpoint = store.checkpoint(run).await.unwrap();
            assert_eq!(checkpoint.snapshot_step, 2);
            assert_eq!(checkpoint.snapshot.decode::<u32>().unwrap(), 102);
            let deltas: Vec<u64> = checkpoint.deltas.iter().map(|(step, _)| *step).collect();
            assert_eq!(deltas, [3, 4]);
            assert_eq!(checkpoint.frontier.decode::<u32>().unwrap(), 4);
            let pending: Vec<u32> =
                checkpoint.pending.iter().map(|p| p.update.decode().unwrap()).collect();
            assert_eq!(pending, [50, 51], "ordered by task; the first write of a task wins");

            store.commit(step(run, 1, 5, 6, false)).await.unwrap();
            assert!(
                store.checkpoint(run).await.unwrap().pending.is_empty(),
                "a commit clears them"
            );
        });
    }

    #[test]
    fn listing_is_newest_first_with_cursors_and_filters() {
        block_on(async {
            let store = MemoryStore::new();
            let ids: Vec<RunId> = (0..7).map(|i| RunId::from_parts(1_000 + i, 7)).collect();
            for (i, id) in ids.iter().enumerate() {
                let graph = if i % 2 == 0 { "even" } else { "odd" };
                store.create_run(new_run(*id, graph, Some("t"))).await.unwrap();
            }
            let mut seen = Vec::new();
            let mut cursor = None;
            loop {
                let page = store
                    .list_runs(
                        &RunFilter::default(),
                        &PageRequest { limit: 3, cursor: cursor.clone() },
                    )
                    .await
                    .unwrap();
                seen.extend(page.runs.iter().map(|r| r.id));
                // A run created while paging is newer than every cursor:
                // it shows up on a fresh listing, never as a duplicate.
                if cursor.is_none() {
                    store
                        .create_run(new_run(RunId::from_parts(9_999, 1), "odd", None))
                        .await
                        .unwrap();
                }
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            let newest_first: Vec<RunId> = ids.iter().rev().copied().collect();
            assert_eq!(seen, newest_first);

            let even = RunFilter { graph: Some("even".into()), ..RunFilter::default() };
            let page = store.list_runs(&even, &PageRequest::default()).await.unwrap();
            assert_eq!(page.runs.len(), 4);
            let threaded = RunFilter { thread: Some("t".into()), ..RunFilter::default() };
            assert_eq!(
                store.list_runs(&threaded, &PageRequest::default()).await.unwrap().runs.len(),
                7
            );
            let done = RunFilter { status: Some(RunStatus::Completed), ..RunFilter::default() };
            assert!(store.list_runs(&done, &PageRequest::default()).await.unwrap().runs.is_empty());
            let bad = PageRequest { limit: 3, cursor: Some(Cursor::from_text("nope")) };
            assert!(matches!(
                store.list_runs(&RunFilter::default(), &bad).await,
                Err(StoreError::InvalidCursor { .. })
            ));
        });
    }
}
