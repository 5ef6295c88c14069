//! What a task's context carries from its leg: the data a node's
//! [`NodeContext`](crate::NodeContext) holds to reach the store through
//! the executor's rules (a cached node's lookup, a nested graph's leg and
//! progress tree, a workflow's finished tasks). Data only, below the node
//! and the driver: `cache.rs`, `subgraph.rs` and `workflow.rs` do the work.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tollgate_checkpoint::{Blob, Store, TaskKey, TaskUpdate};

use crate::event::Clock;

use super::config::RunConfig;
use super::emit::Emitter;
use super::token::Stop;

/// What a cached node's context carries: the store, the clock, and
/// whether this task's output came from the cache.
#[derive(Debug)]
pub(crate) struct CacheAccess {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) hit: AtomicBool,
}

impl CacheAccess {
    pub(crate) fn hit(&self) -> bool {
        self.hit.load(Ordering::SeqCst)
    }
}

/// Task number of the progress record holding a workflow's task 0; task
/// `n` is at `TASK_RESULTS + n` (subgraph progress stays below: a task's
/// position in a frontier). Kept under 2^30 so that every store's task
/// column (a signed 32-bit integer in Postgres, progress negated) holds
/// it.
pub(crate) const TASK_RESULTS: u32 = 1 << 29;

/// A workflow's finished tasks, by position: the task's name and its
/// stored result. Loaded with the checkpoint and added to as tasks finish
/// (a retried node sees what its earlier attempt stored).
#[derive(Debug, Default)]
pub(crate) struct TaskResults {
    stored: Mutex<BTreeMap<u32, (String, Blob)>>,
}

impl TaskResults {
    /// The results among a checkpoint's progress records (the others are
    /// left in `progress`).
    pub(crate) fn split(progress: &mut Vec<TaskUpdate>) -> Self {
        let mut stored = BTreeMap::new();
        progress.retain(|record| match record.task.index.checked_sub(TASK_RESULTS) {
            Some(position) => {
                stored.insert(position, (record.task.node.clone(), record.update.clone()));
                false
            }
            None => true,
        });
        Self { stored: Mutex::new(stored) }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, (String, Blob)>> {
        self.stored.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What every task of a leg may need to run a graph nested in it: the
/// leg's store, epoch, settings and stop flag. One per leg, shared.
#[derive(Debug)]
pub(crate) struct LegAccess {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) epoch: u64,
    pub(crate) config: RunConfig,
    pub(crate) cancel: Arc<Stop>,
}

/// What a task's context carries to run a graph nested in it (a subgraph
/// node, or [`NodeContext::call`]): its leg's access, the progress stored
/// by an earlier attempt, and where its tree is.
#[derive(Debug)]
pub(crate) struct SubgraphAccess {
    pub(crate) leg: Arc<LegAccess>,
    /// A task of the run itself: its stored progress tree, if any.
    pub(crate) progress: Option<Blob>,
    /// A task of a subgraph: the tree it belongs to and the path of the
    /// subgraph it is a task of.
    pub(crate) within: Option<(Arc<ProgressRoot>, Vec<Part>)>,
    /// A task of the run itself: its tree, once a nested leg opened it
    /// (shared by the task's calls).
    pub(crate) root: std::sync::OnceLock<Arc<ProgressRoot>>,
    /// A workflow's finished tasks (`exec/workflow.rs`): the leg's for the
    /// step's first task, empty for the others.
    pub(crate) tasks: Arc<TaskResults>,
}

/// One step down a progress tree: a subgraph task's position, or a call's
/// number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Task(u32),
    Call(u32),
}

/// The progress tree of one task of the run, shared by every subgraph
/// below it; each write stores the whole tree.
#[derive(Debug)]
pub(crate) struct ProgressRoot {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) run: tollgate_checkpoint::RunId,
    pub(crate) epoch: u64,
    /// The run's task the tree is stored under.
    pub(crate) key: TaskKey,
    pub(crate) emitter: Arc<Emitter>,
    pub(crate) tree: tokio::sync::Mutex<ProgressTree>,
}

/// One level's progress record (JSON of [`ProgressRef`], kept as its text
/// so that writing the tree copies the other levels' records rather than
/// serialising them again), those of its subgraph tasks, by task
/// position, and those of the graphs its task called, by call number.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct ProgressTree {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) record: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) children: BTreeMap<u32, ProgressTree>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) calls: BTreeMap<u32, ProgressTree>,
    /// A call's graph (its name), so that a node calling another graph at
    /// that position when it runs again is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) graph: Option<String>,
}

impl ProgressTree {
    pub(crate) fn at(&mut self, path: &[Part]) -> &mut ProgressTree {
        path.iter().fold(self, |tree, part| match part {
            Part::Task(task) => tree.children.entry(*task).or_default(),
            Part::Call(call) => tree.calls.entry(*call).or_default(),
        })
    }
}
