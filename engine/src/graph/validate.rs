//! Compile: resolve names, build the petgraph, report every problem at once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::{Bfs, Reversed};

use crate::route::{END, START};
use crate::state::State;

use super::builder::StateGraph;
use super::compiled::{
    CompiledGraph, CompiledJoin, CompiledNode, CompiledRoute, EdgeKind, GraphNode, Inner,
    Successors, Target,
};

/// One thing wrong with a graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphProblem {
    /// A node has an empty name.
    #[error("a node has an empty name")]
    EmptyName,
    /// A node uses `__start__`, `__end__` or `__input__` (the writer of a
    /// thread run's input) as its name.
    #[error("`{name}` is reserved and cannot name a node")]
    ReservedName {
        /// The name.
        name: String,
    },
    /// Two nodes share a name.
    #[error("node `{name}` is declared twice")]
    DuplicateNode {
        /// The name.
        name: String,
    },
    /// An edge starts at a node that does not exist.
    #[error("edge `{from}` -> `{to}` starts at an unknown node `{from}`")]
    UnknownEdgeSource {
        /// Source.
        from: String,
        /// Target.
        to: String,
    },
    /// An edge leads to a node that does not exist.
    #[error("edge `{from}` -> `{to}` leads nowhere: there is no node `{to}`")]
    EdgeToNowhere {
        /// Source.
        from: String,
        /// Target.
        to: String,
    },
    /// An edge, route or command leads into `START`.
    #[error("`{from}` leads into `__start__`, which nothing can enter")]
    EdgeIntoStart {
        /// Source.
        from: String,
    },
    /// An edge or route leaves `END`.
    #[error("`__end__` cannot lead anywhere (found a way to `{to}`)")]
    EdgeFromEnd {
        /// Target.
        to: String,
    },
    /// A route starts at a node that does not exist.
    #[error("a route starts at an unknown node `{from}`")]
    UnknownRouteSource {
        /// Source.
        from: String,
    },
    /// A node has two conditional routes.
    #[error("node `{from}` has more than one conditional route")]
    DuplicateRoute {
        /// Source.
        from: String,
    },
    /// A conditional route declares no targets.
    #[error("the route from `{from}` declares no targets; list every node it can return")]
    RouteWithoutTargets {
        /// Source.
        from: String,
    },
    /// A conditional route declares a target that does not exist.
    #[error("the route from `{from}` declares target `{target}`, which is not a node")]
    UnknownRouteTarget {
        /// Source.
        from: String,
        /// Declared target.
        target: String,
    },
    /// A command node declares a destination that does not exist.
    #[error("command node `{node}` declares destination `{target}`, which is not a node")]
    UnknownCommandTarget {
        /// The command node.
        node: String,
        /// Declared destination.
        target: String,
    },
    /// A join's target does not exist.
    #[error("join into `{target}`: there is no node `{target}`")]
    UnknownJoinTarget {
        /// The join's target.
        target: String,
    },
    /// A join's source does not exist.
    #[error("join into `{join}` waits for `{source_node}`, which is not a node")]
    UnknownJoinSource {
        /// The join's target.
        join: String,
        /// The unknown source.
        source_node: String,
    },
    /// A join lists no sources, or one source twice.
    #[error("join into `{join}` must list distinct sources (found {})", sources.join(", "))]
    BadJoinSources {
        /// The join's target.
        join: String,
        /// The sources as declared.
        sources: Vec<String>,
    },
    /// Two sources of a join run one after the other, so the join would
    /// wait for a branch that is not parallel to the others.
    #[error("join into `{join}`: `{first}` and `{second}` cannot run in parallel (`{first}` leads to `{second}`)")]
    JoinNotParallel {
        /// The join's target.
        join: String,
        /// The source that leads to the other.
        first: String,
        /// The source reached from `first`.
        second: String,
    },
    /// A retry policy or visit limit names a node that does not exist.
    #[error("an option is set for `{node}`, which is not a node")]
    UnknownOptionNode {
        /// The name.
        node: String,
    },
    /// A visit limit of zero, or a retry policy with zero attempts.
    #[error("node `{node}` has a limit of zero ({option}); the node could never run")]
    ZeroLimit {
        /// The node.
        node: String,
        /// `max_visits` or `retry.max_attempts`.
        option: &'static str,
    },
    /// A rejection route leads to a node that does not exist.
    #[error("rejections of `{node}` go to `{target}`, which is not a node")]
    UnknownRejectTarget {
        /// The node whose rejections are routed.
        node: String,
        /// The missing target.
        target: String,
    },
    /// A label names an edge the graph does not have.
    #[error("a label names the edge `{from}` -> `{to}`, which the graph does not have")]
    UnknownLabelledEdge {
        /// Where the labelled edge starts.
        from: String,
        /// Where it ends.
        to: String,
    },
    /// Nothing leaves `START`.
    #[error("nothing leaves `__start__`: add an edge or route from START")]
    NoEntry,
    /// No path from `START` reaches the node.
    #[error("node `{node}` is unreachable from `__start__`")]
    Unreachable {
        /// The node.
        node: String,
    },
    /// No path from the node reaches `END`.
    #[error("node `{node}` has no path to `__end__`")]
    NoPathToEnd {
        /// The node.
        node: String,
    },
}

/// A graph failed to compile; every problem found is listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError {
    /// The graph's name.
    pub graph: String,
    /// The problems, in the order found.
    pub problems: Vec<GraphProblem>,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "graph `{}` has {} problem(s):", self.graph, self.problems.len())?;
        for problem in &self.problems {
            write!(f, "\n  - {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CompileError {}

/// Resolves names against the node table.
struct Names<'a> {
    index: &'a HashMap<String, usize>,
}

impl Names<'_> {
    fn target(&self, name: &str) -> Option<Target> {
        if name == END {
            Some(Target::End)
        } else {
            self.index.get(name).copied().map(Target::Node)
        }
    }

    /// Slot of a source: 0 = START, i + 1 = node i.
    fn source(&self, name: &str) -> Option<usize> {
        if name == START {
            Some(0)
        } else {
            self.index.get(name).map(|i| i + 1)
        }
    }
}

fn petgraph_index(target: Target) -> NodeIndex {
    match target {
        Target::End => NodeIndex::new(1),
        Target::Node(i) => NodeIndex::new(i + 2),
    }
}

fn slot_index(slot: usize) -> NodeIndex {
    if slot == 0 {
        NodeIndex::new(0)
    } else {
        NodeIndex::new(slot + 1)
    }
}

pub(super) fn compile<S: State>(graph: StateGraph<S>) -> Result<CompiledGraph<S>, CompileError> {
    let StateGraph {
        name,
        version,
        schema,
        nodes,
        edges,
        routes,
        joins,
        retries,
        caches,
        visit_limits,
        break_before,
        break_after,
        on_reject,
        labels: given_labels,
    } = graph;
    let mut problems = Vec::new();

    let mut index = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        if node.name.is_empty() {
            problems.push(GraphProblem::EmptyName);
        } else if node.name == START || node.name == END || node.name == crate::INPUT_NODE {
            problems.push(GraphProblem::ReservedName { name: node.name.clone() });
        } else if index.contains_key(&node.name) {
            problems.push(GraphProblem::DuplicateNode { name: node.name.clone() });
        } else {
            index.insert(node.name.clone(), i);
        }
    }
    let names = Names { index: &index };

    let mut pg: DiGraph<GraphNode, EdgeKind> = DiGraph::new();
    pg.add_node(GraphNode::Start);
    pg.add_node(GraphNode::End);
    for node in &nodes {
        pg.add_node(GraphNode::Node(node.name.clone()));
    }

    // Slot 0 is START, slot i + 1 is node i.
    let mut successors: Vec<Successors<S>> =
        (0..=nodes.len()).map(|_| Successors::default()).collect();
    let resolve_into = |from: &str, to: &str, problems: &mut Vec<GraphProblem>| -> Option<Target> {
        if to == START {
            problems.push(GraphProblem::EdgeIntoStart { from: from.to_owned() });
            return None;
        }
        names.target(to)
    };

    for (from, to) in &edges {
        if from == END {
            problems.push(GraphProblem::EdgeFromEnd { to: to.clone() });
            continue;
        }
        let source = names.source(from);
        if source.is_none() {
            problems.push(GraphProblem::UnknownEdgeSource { from: from.clone(), to: to.clone() });
        }
        let target = resolve_into(from, to, &mut problems);
        if target.is_none() && to != START {
            problems.push(GraphProblem::EdgeToNowhere { from: from.clone(), to: to.clone() });
        }
        if let (Some(slot), Some(target)) = (source, target) {
            if !successors[slot].edges.contains(&target) {
                successors[slot].edges.push(target);
                pg.update_edge(slot_index(slot), petgraph_index(target), EdgeKind::Static);
            }
        }
    }

    for route in routes {
        if route.from == END {
            problems.push(GraphProblem::EdgeFromEnd { to: route.targets.join(", ") });
            continue;
        }
        let Some(slot) = names.source(&route.from) else {
            problems.push(GraphProblem::UnknownRouteSource { from: route.from.clone() });
            continue;
        };
        if route.targets.is_empty() {
            problems.push(GraphProblem::RouteWithoutTargets { from: route.from.clone() });
        }
        let mut allowed = HashMap::new();
        for target_name in &route.targets {
            match resolve_into(&route.from, target_name, &mut problems) {
                Some(target) => {
                    allowed.insert(target_name.clone(), target);
                    pg.update_edge(slot_index(slot), petgraph_index(target), EdgeKind::Conditional);
                }
                None if target_name == START => {}
                None => problems.push(GraphProblem::UnknownRouteTarget {
                    from: route.from.clone(),
                    target: target_name.clone(),
                }),
            }
        }
        if successors[slot].route.is_some() {
            problems.push(GraphProblem::DuplicateRoute { from: route.from.clone() });
        } else {
            successors[slot].route = Some(CompiledRoute { run: route.route, allowed });
        }
    }

    let mut commands: Vec<Option<HashMap<String, Target>>> = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        let Some(destinations) = &node.destinations else {
            commands.push(None);
            continue;
        };
        let mut allowed = HashMap::new();
        for target_name in destinations {
            match resolve_into(&node.name, target_name, &mut problems) {
                Some(target) => {
                    allowed.insert(target_name.clone(), target);
                    pg.update_edge(
                        NodeIndex::new(i + 2),
                        petgraph_index(target),
                        EdgeKind::Command,
                    );
                }
                None if target_name == START => {}
                None => problems.push(GraphProblem::UnknownCommandTarget {
                    node: node.name.clone(),
                    target: target_name.clone(),
                }),
            }
        }
        commands.push(Some(allowed));
    }

    let mut compiled_joins = Vec::new();
    let mut memberships: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nodes.len()];
    for join in &joins {
        let target = index.get(&join.target).copied();
        if target.is_none() {
            problems.push(GraphProblem::UnknownJoinTarget { target: join.target.clone() });
        }
        let distinct: HashSet<&String> = join.sources.iter().collect();
        if join.sources.is_empty() || distinct.len() != join.sources.len() {
            problems.push(GraphProblem::BadJoinSources {
                join: join.target.clone(),
                sources: join.sources.clone(),
            });
        }
        let mut sources = Vec::new();
        for source in &join.sources {
            match index.get(source) {
                Some(&i) => sources.push(i),
                None => problems.push(GraphProblem::UnknownJoinSource {
                    join: join.target.clone(),
                    source_node: source.clone(),
                }),
            }
        }
        if let Some(target) = target {
            if sources.len() == join.sources.len() && distinct.len() == sources.len() {
                let join_index = compiled_joins.len();
                for (position, &source) in sources.iter().enumerate() {
                    memberships[source].push((join_index, position));
                    pg.update_edge(
                        NodeIndex::new(source + 2),
                        NodeIndex::new(target + 2),
                        EdgeKind::Join,
                    );
                }
                compiled_joins.push(CompiledJoin { sources, target });
            }
        }
    }

    let mut retry_of = HashMap::new();
    for (node, policy) in retries {
        if !index.contains_key(&node) {
            problems.push(GraphProblem::UnknownOptionNode { node });
        } else if policy.max_attempts == 0 {
            problems.push(GraphProblem::ZeroLimit { node, option: "retry.max_attempts" });
        } else {
            retry_of.insert(node, policy);
        }
    }
    let mut cache_of = HashMap::new();
    for (node, ttl) in caches {
        if !index.contains_key(&node) {
            problems.push(GraphProblem::UnknownOptionNode { node });
        } else if ttl.is_zero() {
            problems.push(GraphProblem::ZeroLimit { node, option: "cache ttl" });
        } else {
            cache_of.insert(node, ttl);
        }
    }
    let mut visits_of = HashMap::new();
    for (node, limit) in visit_limits {
        if !index.contains_key(&node) {
            problems.push(GraphProblem::UnknownOptionNode { node });
        } else if limit == 0 {
            problems.push(GraphProblem::ZeroLimit { node, option: "max_visits" });
        } else {
            visits_of.insert(node, limit);
        }
    }

    let flags = |names: Vec<String>, problems: &mut Vec<GraphProblem>| {
        let mut set = vec![false; nodes.len()];
        for node in names {
            match index.get(&node) {
                Some(&i) => set[i] = true,
                None => problems.push(GraphProblem::UnknownOptionNode { node }),
            }
        }
        set
    };
    let before = flags(break_before, &mut problems);
    let after = flags(break_after, &mut problems);
    let mut reject_to = vec![None; nodes.len()];
    let mut labels: HashMap<(usize, usize), String> = HashMap::new();
    for (node, target) in on_reject {
        let Some(&from) = index.get(&node) else {
            problems.push(GraphProblem::UnknownOptionNode { node });
            continue;
        };
        match index.get(&target) {
            Some(&to) => {
                reject_to[from] = Some(to);
                labels.insert((from + 2, to + 2), "rejected".to_owned());
                pg.update_edge(
                    NodeIndex::new(from + 2),
                    NodeIndex::new(to + 2),
                    EdgeKind::Conditional,
                );
                commands[from].get_or_insert_with(HashMap::new).insert(target, Target::Node(to));
            }
            None => problems.push(GraphProblem::UnknownRejectTarget { node, target }),
        }
    }

    for (from, to, label) in given_labels {
        let ends = names.source(&from).zip(names.target(&to));
        let edge = ends.and_then(|(slot, target)| {
            pg.find_edge(slot_index(slot), petgraph_index(target)).map(|_| (slot, target))
        });
        match edge {
            Some((slot, target)) => {
                labels.insert((slot_index(slot).index(), petgraph_index(target).index()), label);
            }
            None => problems.push(GraphProblem::UnknownLabelledEdge { from, to }),
        }
    }

    let start_successors = successors.remove(0);
    if start_successors.edges.is_empty() && start_successors.route.is_none() {
        problems.push(GraphProblem::NoEntry);
    }

    check_paths(
        &pg,
        &index,
        &nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        &mut problems,
    );
    check_joins(
        &pg,
        &compiled_joins,
        &nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        &mut problems,
    );

    if !problems.is_empty() {
        return Err(CompileError { graph: name, problems });
    }

    let compiled_nodes: Vec<CompiledNode<S>> = nodes
        .into_iter()
        .zip(successors)
        .zip(commands)
        .zip(memberships)
        .enumerate()
        .map(|(i, (((node, next), commands), joins))| {
            let ttl = cache_of.remove(&node.name);
            CompiledNode {
                cached: ttl.is_some(),
                break_before: before[i],
                break_after: after[i],
                on_reject: reject_to[i],
                retry: retry_of.remove(&node.name),
                max_visits: visits_of.remove(&node.name),
                run: match ttl {
                    Some(ttl) => crate::exec::cached(
                        node.run,
                        format!("{name}@{version}:{}", node.name),
                        ttl,
                    ),
                    None => node.run,
                },
                name: Arc::from(node.name),
                subgraph: node.subgraph,
                next,
                commands,
                joins,
            }
        })
        .collect();

    let limited = compiled_nodes.iter().any(|node: &CompiledNode<S>| node.max_visits.is_some());
    Ok(CompiledGraph {
        inner: Arc::new(Inner {
            limited,
            name,
            version,
            schema,
            graph: pg,
            nodes: compiled_nodes,
            index,
            start: start_successors,
            joins: compiled_joins,
            labels,
        }),
    })
}

/// Every node must be reachable from START and reach END.
fn check_paths(
    pg: &DiGraph<GraphNode, EdgeKind>,
    index: &HashMap<String, usize>,
    names: &[&str],
    problems: &mut Vec<GraphProblem>,
) {
    let mut from_start = HashSet::new();
    let mut bfs = Bfs::new(pg, NodeIndex::new(0));
    while let Some(node) = bfs.next(pg) {
        from_start.insert(node.index());
    }
    let mut to_end = HashSet::new();
    let reversed = Reversed(pg);
    let mut bfs = Bfs::new(reversed, NodeIndex::new(1));
    while let Some(node) = bfs.next(reversed) {
        to_end.insert(node.index());
    }
    for (i, name) in names.iter().enumerate() {
        // Duplicates and reserved names are reported already.
        if index.get(*name) != Some(&i) {
            continue;
        }
        if !from_start.contains(&(i + 2)) {
            problems.push(GraphProblem::Unreachable { node: (*name).to_owned() });
        }
        if !to_end.contains(&(i + 2)) {
            problems.push(GraphProblem::NoPathToEnd { node: (*name).to_owned() });
        }
    }
}

/// Sources of one join must not lead to each other except through the join.
fn check_joins(
    pg: &DiGraph<GraphNode, EdgeKind>,
    joins: &[CompiledJoin],
    names: &[&str],
    problems: &mut Vec<GraphProblem>,
) {
    for join in joins {
        let avoid = NodeIndex::new(join.target + 2);
        for (a, &first) in join.sources.iter().enumerate() {
            for &second in &join.sources[a + 1..] {
                let (x, y) = (NodeIndex::new(first + 2), NodeIndex::new(second + 2));
                let ordered = if reaches(pg, x, y, avoid) {
                    Some((first, second))
                } else if reaches(pg, y, x, avoid) {
                    Some((second, first))
                } else {
                    None
                };
                if let Some((first, second)) = ordered {
                    problems.push(GraphProblem::JoinNotParallel {
                        join: names[join.target].to_owned(),
                        first: names[first].to_owned(),
                        second: names[second].to_owned(),
                    });
                }
            }
        }
    }
}

fn reaches(
    pg: &DiGraph<GraphNode, EdgeKind>,
    from: NodeIndex,
    to: NodeIndex,
    avoid: NodeIndex,
) -> bool {
    let mut seen = HashSet::from([from]);
    let mut queue = VecDeque::from([from]);
    while let Some(node) = queue.pop_front() {
        for next in pg.neighbors(node) {
            if next == to {
                return true;
            }
            if next != avoid && seen.insert(next) {
                queue.push_back(next);
            }
        }
    }
    false
}
