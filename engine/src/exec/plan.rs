//! The planner: what runs next. A pure function of the graph, the merged
//! state and the finished step; no IO, no clocks, no randomness.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tollgate_checkpoint::RunId;

use crate::graph::{CompiledGraph, Target};
use crate::route::{Goto, START};
use crate::state::State;

use super::error::RunError;
use super::record::{
    CheckpointSource, ForkOrigin, FrontierRecord, LegBreakpoints, RunSettings, TaskRecord,
};

/// One task of a frontier.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub(crate) node: usize,
    /// The branch input of a `Send`.
    pub(crate) input: Option<Arc<Value>>,
}

/// The tasks of the next super-step plus what must carry over between
/// steps: join arrivals and visit counts.
#[derive(Debug, Clone)]
pub(crate) struct Frontier {
    pub(crate) tasks: Vec<Task>,
    /// Per join, per source: has it arrived since the join last fired?
    pub(crate) arrivals: Vec<Vec<bool>>,
    /// Per join: it fired and its target has not run since. A state
    /// update written as one of its sources then fires it again (the
    /// arrivals it fired on still stand until the target runs).
    pub(crate) fired: Vec<bool>,
    /// Per node: tasks run so far (excluding `tasks`); empty unless some
    /// node has a visit limit.
    pub(crate) visits: Vec<u32>,
    /// The run's settings, carried from step to step.
    pub(crate) settings: Option<RunSettings>,
    /// What wrote the checkpoint this frontier is stored with, when not the
    /// run's own loop (or, at step 0, its input).
    pub(crate) source: Option<CheckpointSource>,
    /// Who asked for the update or fork that wrote it, when they said
    /// ([`RunConfig::by`](crate::RunConfig::by)).
    pub(crate) by: Option<String>,
    /// A queued run's breakpoints for its first leg (only in the frontier
    /// it was queued with).
    pub(crate) first_leg: Option<LegBreakpoints>,
    /// Nodes whose breakpoint before them already paused the step a state
    /// update superseded (only in the frontier that update wrote).
    pub(crate) honoured: Vec<String>,
    /// Where the run was forked from, carried from step to step.
    pub(crate) origin: Option<Arc<ForkOrigin>>,
}

/// Collects a step's targets in order: a node named several times runs
/// once; every `Send` is its own task.
struct Schedule {
    tasks: Vec<Task>,
    scheduled: Vec<bool>,
}

impl Schedule {
    fn new(nodes: usize) -> Self {
        Self { tasks: Vec::new(), scheduled: vec![false; nodes] }
    }

    fn target(&mut self, target: Target) {
        if let Target::Node(node) = target {
            if !std::mem::replace(&mut self.scheduled[node], true) {
                self.tasks.push(Task { node, input: None });
            }
        }
    }

    fn goto(
        &mut self,
        from: &str,
        goto: Goto,
        allowed: &HashMap<String, Target>,
    ) -> Result<(), RunError> {
        let undeclared = |target: &str| RunError::UndeclaredTarget {
            node: from.to_owned(),
            target: target.to_owned(),
        };
        match goto {
            Goto::End => {
                if !allowed.values().any(|target| *target == Target::End) {
                    return Err(undeclared(crate::END));
                }
            }
            Goto::Node(name) => {
                let target = *allowed.get(name.as_ref()).ok_or_else(|| undeclared(&name))?;
                self.target(target);
            }
            Goto::Send(send) => match allowed.get(send.node.as_ref()) {
                Some(Target::Node(node)) => {
                    self.tasks.push(Task { node: *node, input: Some(Arc::new(send.input)) });
                }
                _ => return Err(undeclared(&send.node)),
            },
        }
        Ok(())
    }
}

impl Frontier {
    /// The first frontier: START's edges and route, on the input state.
    pub(crate) fn start<S: State>(graph: &CompiledGraph<S>, state: &S) -> Result<Self, RunError> {
        let inner = &graph.inner;
        let mut schedule = Schedule::new(inner.nodes.len());
        for &target in &inner.start.edges {
            schedule.target(target);
        }
        if let Some(route) = &inner.start.route {
            let chosen = (route.run)(state)
                .map_err(|source| RunError::RouteFailed { node: START.to_owned(), source })?;
            for goto in chosen.into_targets() {
                schedule.goto(START, goto, &route.allowed)?;
            }
        }
        let frontier = Self {
            tasks: Vec::new(),
            arrivals: inner.joins.iter().map(|join| vec![false; join.sources.len()]).collect(),
            fired: vec![false; inner.joins.len()],
            visits: if inner.limited { vec![0; inner.nodes.len()] } else { Vec::new() },
            settings: None,
            source: None,
            by: None,
            first_leg: None,
            honoured: Vec::new(),
            origin: None,
        };
        frontier.with_tasks(graph, schedule.tasks)
    }

    /// The frontier after this one ran: `gotos[i]` are the command targets
    /// of task `i`, and when its flag is set they are the only way on (a
    /// routed rejection: no static edge, route or join applies); routes see
    /// the merged `state`.
    pub(crate) fn next<S: State>(
        &self,
        graph: &CompiledGraph<S>,
        state: &S,
        gotos: Vec<(Vec<Goto>, bool)>,
    ) -> Result<Self, RunError> {
        let inner = &graph.inner;
        let mut schedule = Schedule::new(inner.nodes.len());
        let mut arrivals = self.arrivals.clone();
        let mut fired = self.fired.clone();
        let mut visits = self.visits.clone();
        for (task, (gotos, only)) in self.tasks.iter().zip(gotos) {
            let node = graph.node(task.node);
            if !fired.is_empty() {
                for (join, fired) in inner.joins.iter().zip(fired.iter_mut()) {
                    if join.target == task.node {
                        *fired = false;
                    }
                }
            }
            if let Some(count) = visits.get_mut(task.node) {
                *count += 1;
            }
            if only {
                let empty = HashMap::new();
                let allowed = node.commands.as_ref().unwrap_or(&empty);
                for goto in gotos {
                    schedule.goto(&node.name, goto, allowed)?;
                }
                continue;
            }
            for &target in &node.next.edges {
                schedule.target(target);
            }
            if let Some(route) = &node.next.route {
                let chosen = (route.run)(state).map_err(|source| RunError::RouteFailed {
                    node: node.name.to_string(),
                    source,
                })?;
                for goto in chosen.into_targets() {
                    schedule.goto(&node.name, goto, &route.allowed)?;
                }
            }
            if !gotos.is_empty() {
                let empty = HashMap::new();
                let allowed = node.commands.as_ref().unwrap_or(&empty);
                for goto in gotos {
                    schedule.goto(&node.name, goto, allowed)?;
                }
            }
            for &(join, position) in &node.joins {
                arrivals[join][position] = true;
            }
        }
        for ((join, arrived), fired) in
            inner.joins.iter().zip(arrivals.iter_mut()).zip(fired.iter_mut())
        {
            if arrived.iter().all(|&a| a) {
                arrived.iter_mut().for_each(|a| *a = false);
                *fired = true;
                schedule.target(Target::Node(join.target));
            }
        }
        Self {
            tasks: Vec::new(),
            arrivals,
            fired,
            visits,
            settings: self.settings,
            source: None,
            by: None,
            first_leg: None,
            honoured: Vec::new(),
            origin: self.origin.clone(),
        }
        .with_tasks(graph, schedule.tasks)
    }

    /// The frontier after `node` (alone) wrote a state update that is not
    /// one of the run's steps ([`Executor::update_state`]): `node`'s
    /// successors. A join `node` is a source of, which fired and whose
    /// target has not run since, fires again: the arrivals it fired on
    /// still stand, as LangGraph's barrier channels keep them until the
    /// target consumes them.
    ///
    /// [`Executor::update_state`]: crate::Executor::update_state
    pub(crate) fn after_update<S: State>(
        mut self,
        graph: &CompiledGraph<S>,
        state: &S,
        node: usize,
    ) -> Result<Self, RunError> {
        for (join, (arrived, fired)) in
            graph.inner.joins.iter().zip(self.arrivals.iter_mut().zip(&self.fired))
        {
            if *fired && join.sources.contains(&node) {
                arrived.iter_mut().for_each(|a| *a = true);
            }
        }
        self.tasks = vec![Task { node, input: None }];
        let mut next = self.next(graph, state, vec![(Vec::new(), false)])?;
        next.source = Some(CheckpointSource::Update);
        Ok(next)
    }

    /// The frontier whose next step runs `nodes` (a `Command(goto=…)` from
    /// outside the run, [`Executor::goto`]): what was planned is dropped;
    /// join arrivals and visit counts stay.
    ///
    /// [`Executor::goto`]: crate::Executor::goto
    pub(crate) fn goto<S: State>(
        self,
        graph: &CompiledGraph<S>,
        nodes: Vec<usize>,
    ) -> Result<Self, RunError> {
        let tasks = nodes.into_iter().map(|node| Task { node, input: None }).collect();
        let mut next = self.with_tasks(graph, tasks)?;
        next.source = Some(CheckpointSource::Update);
        next.by = None;
        Ok(next)
    }

    /// Sets the tasks, enforcing per-node visit limits.
    fn with_tasks<S: State>(
        mut self,
        graph: &CompiledGraph<S>,
        tasks: Vec<Task>,
    ) -> Result<Self, RunError> {
        if graph.inner.limited {
            let mut upcoming = self.visits.clone();
            for task in &tasks {
                upcoming[task.node] += 1;
                let node = graph.node(task.node);
                if let Some(limit) = node.max_visits {
                    if upcoming[task.node] > limit {
                        return Err(RunError::VisitLimitExceeded {
                            node: node.name.to_string(),
                            limit,
                        });
                    }
                }
            }
        }
        self.tasks = tasks;
        Ok(self)
    }

    /// Whether `other` schedules the same tasks with the same bookkeeping,
    /// so its stored form is this one's.
    pub(crate) fn same_as(&self, other: &Frontier) -> bool {
        self.arrivals == other.arrivals
            && self.fired == other.fired
            && self.source == other.source
            && self.by == other.by
            && self.visits == other.visits
            && self.tasks.len() == other.tasks.len()
            && self.tasks.iter().zip(&other.tasks).all(|(a, b)| {
                a.node == b.node
                    && match (&a.input, &b.input) {
                        (None, None) => true,
                        (Some(x), Some(y)) => Arc::ptr_eq(x, y) || x == y,
                        _ => false,
                    }
            })
    }

    /// The stored form.
    pub(crate) fn to_record<S: State>(&self, graph: &CompiledGraph<S>) -> FrontierRecord {
        let name = |node: usize| graph.node(node).name.to_string();
        FrontierRecord {
            tasks: self
                .tasks
                .iter()
                .map(|task| TaskRecord {
                    node: name(task.node),
                    input: task.input.as_deref().cloned(),
                })
                .collect(),
            joins: if self.arrivals.iter().flatten().any(|&a| a) {
                graph
                    .inner
                    .joins
                    .iter()
                    .zip(&self.arrivals)
                    .map(|(join, arrived)| {
                        join.sources
                            .iter()
                            .zip(arrived)
                            .filter(|(_, &a)| a)
                            .map(|(&s, _)| name(s))
                            .collect()
                    })
                    .collect()
            } else {
                Vec::new()
            },
            fired: self
                .fired
                .iter()
                .enumerate()
                .filter(|(_, &fired)| fired)
                .map(|(join, _)| join as u32)
                .collect(),
            visits: self
                .visits
                .iter()
                .enumerate()
                .filter(|&(node, &count)| count > 0 && graph.node(node).max_visits.is_some())
                .map(|(node, &count)| (name(node), count))
                .collect(),
            settings: self.settings,
            source: self.source,
            by: self.by.clone(),
            first_leg: self.first_leg.clone(),
            honoured: self.honoured.clone(),
            origin: self.origin.as_deref().map(ForkOrigin::record),
        }
    }

    /// Rebuilds a frontier from its stored form against `graph`.
    pub(crate) fn from_record<S: State>(
        record: FrontierRecord,
        graph: &CompiledGraph<S>,
        run: RunId,
        step: u64,
    ) -> Result<Self, RunError> {
        let inner = &graph.inner;
        let lookup = |node: &str| {
            inner.index.get(node).copied().ok_or_else(|| RunError::UnknownStoredNode {
                run,
                step,
                node: node.to_owned(),
            })
        };
        let tasks = record
            .tasks
            .into_iter()
            .map(|task| Ok(Task { node: lookup(&task.node)?, input: task.input.map(Arc::new) }))
            .collect::<Result<Vec<_>, RunError>>()?;
        let mut arrivals: Vec<Vec<bool>> =
            inner.joins.iter().map(|join| vec![false; join.sources.len()]).collect();
        for (join, arrived) in record.joins.iter().enumerate() {
            for source in arrived {
                let node = lookup(source)?;
                let position =
                    inner.joins.get(join).and_then(|j| j.sources.iter().position(|&s| s == node));
                match position {
                    Some(position) => arrivals[join][position] = true,
                    None => {
                        return Err(RunError::UnknownStoredNode { run, step, node: source.clone() })
                    }
                }
            }
        }
        let mut fired = vec![false; inner.joins.len()];
        for &join in &record.fired {
            // A join the graph no longer has (another version) is dropped:
            // it can fire nothing.
            if let Some(flag) = fired.get_mut(join as usize) {
                *flag = true;
            }
        }
        let mut visits = if inner.limited { vec![0; inner.nodes.len()] } else { Vec::new() };
        for (node, count) in &record.visits {
            if !inner.limited {
                break;
            }
            visits[lookup(node)?] = *count;
        }
        Ok(Self {
            tasks,
            arrivals,
            fired,
            visits,
            settings: record.settings,
            source: record.source,
            by: record.by,
            first_leg: record.first_leg,
            honoured: record.honoured,
            origin: record.origin.and_then(ForkOrigin::from_record).map(Arc::new),
        })
    }
}
