//! Running one step's tasks: concurrently (inline when alone), each in
//! its `node` span, under the leg's lease, their outputs stored ahead of
//! the step's commit where a crash or a pause must not lose them.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use tokio::task::JoinSet;
use tollgate_checkpoint::{__failpoint, StoreError, TaskKey, TaskUpdate, TaskWrite};
use tracing::Instrument;

use crate::event::Event;
use crate::hitl::Decision;
use crate::node::NodeContext;
use crate::state::State;
use crate::telemetry;

use super::access::{CacheAccess, LegAccess, SubgraphAccess};
use super::driver::Leg;
use super::emit::{node_id, Live};
use super::error::RunError;
use super::plan::Task;
use super::task::{is_rejected, rejected, Outcome, TaskDone, TaskRunner};

impl<S: State> Leg<S> {
    /// Runs the frontier's tasks concurrently; results come back in task
    /// order, whatever order they finished in.
    pub(super) async fn execute(
        &mut self,
        step: u64,
    ) -> Result<Vec<TaskDone<S::Update>>, RunError> {
        let count = self.frontier.tasks.len();
        let mut done = Vec::with_capacity(count);
        let mut set = JoinSet::new();
        for position in 0..count {
            let task = self.frontier.tasks[position].clone();
            let index = position as u32;
            let decisions = match self.decisions.is_empty() {
                true => Arc::clone(&self.no_decisions),
                false => match self.decisions.get(&index) {
                    Some(decisions) => Arc::clone(decisions),
                    None => Arc::clone(&self.no_decisions),
                },
            };
            if let Some(settled) = self.settled(step, index, task.node, &decisions) {
                done.push(settled);
                continue;
            }
            let (runner, span) = self.runner(step, index, task, decisions)?;
            if count == 1 {
                // A lone task runs inline: no spawn on the hot path.
                let task = self.leased(traced(runner, span)).await?;
                self.keep(step, false, vec![task], &mut done).await?;
            } else {
                set.spawn(traced(runner, span));
            }
        }
        self.join(step, count > 1, set, &mut done).await?;
        done.sort_by_key(|task| task.index);
        Ok(done)
    }

    /// A task that does not run: a rejected interrupt of a node whose
    /// rejections the graph routes (it goes there), or one whose output
    /// an earlier attempt stored.
    fn settled(
        &mut self,
        step: u64,
        index: u32,
        node: usize,
        decisions: &BTreeMap<u32, Decision>,
    ) -> Option<TaskDone<S::Update>> {
        let done = |outcome, rejected, reused| TaskDone {
            index,
            node,
            attempts: 0,
            retries: Vec::new(),
            outcome,
            reused,
            cached: false,
            rejected,
        };
        if let (true, Some(target)) = (is_rejected(decisions), self.graph.node(node).on_reject) {
            let target = self.graph.node(target).name.to_string();
            let outcome = match rejected(self.config.codec, &target, self.run, step) {
                Ok((output, blob)) => Outcome::Output(output, blob),
                Err(error) => Outcome::Failed(error),
            };
            return Some(done(outcome, true, false));
        }
        let reused = if self.reused.is_empty() { None } else { self.reused.remove(&index) };
        reused.map(|(output, blob)| done(Outcome::Output(output, blob), false, true))
    }

    /// A task ready to run, its `node_started` event emitted: its context
    /// (with what it needs to run a nested graph, and the node's cache),
    /// and its `node` span.
    fn runner(
        &mut self,
        step: u64,
        index: u32,
        task: Task,
        decisions: Arc<BTreeMap<u32, Decision>>,
    ) -> Result<(TaskRunner<S>, tracing::Span), RunError> {
        let name = Arc::clone(&self.graph.node(task.node).name);
        self.emit(
            Some((&name, &node_id(&name, step, index))),
            Event::NodeStarted { step, task: index },
            Live::Now,
        )?;
        let leg = match &self.access {
            Some(access) => Arc::clone(access),
            None => {
                let access = Arc::new(LegAccess {
                    store: Arc::clone(&self.store),
                    epoch: self.epoch,
                    config: self.config.clone(),
                    cancel: Arc::clone(&self.cancel),
                });
                Arc::clone(self.access.insert(access))
            }
        };
        let subgraph = Some(Arc::new(SubgraphAccess {
            leg,
            progress: self.progress.remove(&index),
            within: self.nest.as_ref().map(|nest| (Arc::clone(&nest.root), nest.path.clone())),
            root: std::sync::OnceLock::new(),
            tasks: match index {
                0 => Arc::clone(&self.tasks),
                _ => Arc::default(),
            },
        }));
        let span = tracing::info_span!(
            "node",
            otel.name = %format_args!("node {name}"),
            tollgate.run_id = %self.run,
            tollgate.step = step,
            tollgate.node = %self.qualify(&name, "").0,
            tollgate.task = index,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        let ctx = NodeContext {
            run_id: self.run,
            step,
            task: index,
            node: name,
            max_steps: self.config.max_steps,
            attempt: 1,
            input: task.input,
            decisions,
            ordinal: AtomicU32::new(0),
            calls: AtomicU32::new(0),
            emitter: Arc::clone(&self.emitter),
            cache: self.graph.node(task.node).cached.then(|| {
                Arc::new(CacheAccess {
                    store: Arc::clone(&self.store),
                    clock: Arc::clone(&self.config.clock),
                    hit: std::sync::atomic::AtomicBool::new(false),
                })
            }),
            ns: self.ns.clone(),
            subgraph,
            memory: self.config.memory.clone(),
        };
        let runner = TaskRunner {
            graph: self.graph.clone(),
            node: task.node,
            state: Arc::clone(&self.state),
            ctx,
            codec: self.config.codec,
            break_before: self.breakpoints.before[task.node],
            break_after: self.breakpoints.after[task.node],
        };
        Ok((runner, span))
    }

    /// Stores each finished task's output as it finishes, so a crash
    /// re-runs only unfinished siblings. Tasks that finish together are
    /// written in one transaction (group commit).
    async fn join(
        &mut self,
        step: u64,
        pending_writes: bool,
        mut set: JoinSet<TaskDone<S::Update>>,
        done: &mut Vec<TaskDone<S::Update>>,
    ) -> Result<(), RunError> {
        while let Some(first) = self.leased(set.join_next()).await? {
            let mut finished = vec![first];
            while let Some(more) = set.try_join_next() {
                finished.push(more);
            }
            let finished = finished
                .into_iter()
                .map(|joined| {
                    joined.map_err(|error| {
                        // Panics are caught inside the task; this is a
                        // runtime shutdown aborting it.
                        tracing::warn!(%error, "a node task was aborted");
                        RunError::DriverLost { run: self.run }
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            self.keep(step, pending_writes, finished, done).await?;
        }
        Ok(())
    }

    /// Awaits `work`, renewing the lease every third of it while the work
    /// runs (every commit renews it too), and at once when the leg is
    /// cancelled. A task that finishes at once never touches the timer.
    ///
    /// A renewal refused because the run is no longer this leg's (taken
    /// over by a cancel or by another owner, ended, deleted) stops the
    /// work at once with that error: its outputs could not be stored
    /// anyway. Dropping `work` drops the tasks in flight (a command tool's
    /// process is killed), so that a cancelled run does not go on with
    /// side effects nobody will see. Other failures (the database away for
    /// a moment) leave the work running; its commit tries again.
    async fn leased<F: std::future::Future>(&self, work: F) -> Result<F::Output, RunError> {
        tokio::pin!(work);
        // Fast path: work that is done at its first poll creates no timer.
        let first = std::future::poll_fn(|cx| match work.as_mut().poll(cx) {
            std::task::Poll::Ready(output) => std::task::Poll::Ready(Some(output)),
            std::task::Poll::Pending => std::task::Poll::Ready(None),
        })
        .await;
        if let Some(output) = first {
            return Ok(output);
        }
        let period = (self.config.lease / 3).max(std::time::Duration::from_millis(10));
        loop {
            tokio::select! {
                biased;
                output = &mut work => return Ok(output),
                () = self.cancel.woken() => self.renew().await?,
                () = tokio::time::sleep(period) => self.renew().await?,
            }
        }
    }

    /// Renews the lease; `Err` when the run is no longer this leg's.
    async fn renew(&self) -> Result<(), RunError> {
        let until = self.config.lease_until();
        match self.store.renew(self.run, self.epoch, until).await {
            Ok(()) => Ok(()),
            Err(error) => {
                telemetry::count_store_error("renew", &error);
                tracing::debug!(run = %self.run, %error, "lease renewal refused");
                match error {
                    StoreError::Fenced { .. }
                    | StoreError::RunTerminal { .. }
                    | StoreError::RunNotFound { .. } => Err(RunError::Store(error)),
                    _ => Ok(()),
                }
            }
        }
    }

    /// Stores the outputs that must outlive a crash or a pause (siblings'
    /// outputs in a multi-task step, a node's output held by a breakpoint
    /// after it), in one transaction, then adds the tasks to `done`.
    async fn keep(
        &mut self,
        step: u64,
        siblings: bool,
        finished: Vec<TaskDone<S::Update>>,
        done: &mut Vec<TaskDone<S::Update>>,
    ) -> Result<(), RunError> {
        let mut writes = Vec::new();
        let mut kept = Vec::new();
        for task in &finished {
            let output = match &task.outcome {
                Outcome::Output(output, blob) if siblings => Some((output, blob)),
                Outcome::Paused { output: Some((output, blob)), .. } => Some((output, blob)),
                _ => None,
            };
            if let Some((output, blob)) = output {
                let node = self.graph.node(task.node).name.to_string();
                if self.nest.is_some() {
                    kept.push((task.index, node, output));
                    continue;
                }
                let key = TaskKey { step, index: task.index, node };
                writes.push(TaskUpdate { task: key, update: blob.clone() });
            }
        }
        if !kept.is_empty() {
            self.keep_nested(kept).await?;
        }
        done.extend(finished);
        if !writes.is_empty() {
            __failpoint("pending:before");
            let write = TaskWrite { run: self.run, epoch: self.epoch, updates: writes };
            self.store
                .put_task_writes(write)
                .await
                .inspect_err(|error| telemetry::count_store_error("put_task_writes", error))?;
        }
        Ok(())
    }
}

/// Runs a task in its `node` span, marked failed when the task failed.
async fn traced<S: State>(runner: TaskRunner<S>, span: tracing::Span) -> TaskDone<S::Update> {
    let done = runner.run().instrument(span.clone()).await;
    if let Outcome::Failed(error) = &done.outcome {
        telemetry::span_failed(&span, error);
    }
    done
}
