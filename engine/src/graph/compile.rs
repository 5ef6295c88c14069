//! Compile: resolve names, build the petgraph, report every problem at once.
//!
//! `compile` reads the builder's declarations in phases, each into a
//! [`Compiling`] (the node table, the petgraph drawn so far, the problems
//! found): the nodes, the static edges, the routes, the command targets,
//! the joins, the per-node options, the breakpoints and reject paths, the
//! drawing's labels. A phase records what is wrong and goes on, so that a
//! graph with several mistakes reports them all; the whole graph is then
//! checked (`validate.rs`) and, with no problem found, assembled.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use petgraph::graph::{DiGraph, NodeIndex};

use crate::node::RetryPolicy;
use crate::route::{END, START};
use crate::state::State;

use super::builder::{JoinDecl, NodeDecl, RouteDecl, StateGraph};
use super::compiled::{
    CompiledGraph, CompiledJoin, CompiledNode, CompiledRoute, EdgeKind, GraphNode, Inner,
    Successors, Target,
};
use super::validate::{check_joins, check_paths, CompileError, GraphProblem};

/// Command targets of a node, by name (`None`: not a command node).
type Commands = Vec<Option<HashMap<String, Target>>>;

/// Drawing labels of edges, by petgraph indices.
type Labels = HashMap<(usize, usize), String>;

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
    let mut at = Compiling::new(&nodes);
    // Slot 0 is START, slot i + 1 is node i.
    let mut successors: Vec<Successors<S>> =
        (0..=nodes.len()).map(|_| Successors::default()).collect();
    at.edges(&edges, &mut successors);
    at.routes(routes, &mut successors);
    let mut commands = at.commands(&nodes);
    let (compiled_joins, memberships) = at.joins(&joins);
    let options = Options {
        retry: at.known(retries, |policy| policy.max_attempts == 0, "retry.max_attempts"),
        cache: at.known(caches, Duration::is_zero, "cache ttl"),
        visits: at.known(visit_limits, |limit| *limit == 0, "max_visits"),
        before: at.flags(break_before, nodes.len()),
        after: at.flags(break_after, nodes.len()),
    };
    let mut labels = Labels::new();
    let reject_to = at.rejects(on_reject, &mut commands, &mut labels);
    at.labels(given_labels, &mut labels);

    let start = successors.remove(0);
    if start.edges.is_empty() && start.route.is_none() {
        at.problems.push(GraphProblem::NoEntry);
    }
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    check_paths(&at.pg, &at.index, &names, &mut at.problems);
    check_joins(&at.pg, &compiled_joins, &names, &mut at.problems);
    if !at.problems.is_empty() {
        return Err(CompileError { graph: name, problems: at.problems });
    }

    let scope = format!("{name}@{version}");
    let per_node = successors.into_iter().zip(commands).zip(memberships).zip(reject_to);
    let compiled_nodes: Vec<CompiledNode<S>> = nodes
        .into_iter()
        .zip(per_node)
        .enumerate()
        .map(|(i, (node, (((next, commands), joins), on_reject)))| {
            options.node(i, node, &scope, Wiring { next, commands, joins, on_reject })
        })
        .collect();
    let limited = compiled_nodes.iter().any(|node| node.max_visits.is_some());
    Ok(CompiledGraph {
        inner: Arc::new(Inner {
            limited,
            name,
            version,
            schema,
            graph: at.pg,
            nodes: compiled_nodes,
            index: at.index,
            start,
            joins: compiled_joins,
            labels,
        }),
    })
}

/// What compiling has found so far: the node table, the petgraph (START
/// at 0, END at 1, node i at i + 2), the problems.
struct Compiling {
    index: HashMap<String, usize>,
    pg: DiGraph<GraphNode, EdgeKind>,
    problems: Vec<GraphProblem>,
}

/// A node's edges, as the phases resolved them.
struct Wiring<S: State> {
    next: Successors<S>,
    commands: Option<HashMap<String, Target>>,
    joins: Vec<(usize, usize)>,
    on_reject: Option<usize>,
}

/// The per-node options, checked.
struct Options {
    retry: HashMap<String, RetryPolicy>,
    cache: HashMap<String, Duration>,
    visits: HashMap<String, u32>,
    before: Vec<bool>,
    after: Vec<bool>,
}

impl Options {
    /// Node `i`, with its options and its wiring.
    fn node<S: State>(
        &self,
        i: usize,
        node: NodeDecl<S>,
        scope: &str,
        wiring: Wiring<S>,
    ) -> CompiledNode<S> {
        let ttl = self.cache.get(&node.name).copied();
        CompiledNode {
            cached: ttl.is_some(),
            break_before: self.before[i],
            break_after: self.after[i],
            on_reject: wiring.on_reject,
            retry: self.retry.get(&node.name).cloned(),
            max_visits: self.visits.get(&node.name).copied(),
            run: match ttl {
                Some(ttl) => crate::exec::cached(node.run, format!("{scope}:{}", node.name), ttl),
                None => node.run,
            },
            name: Arc::from(node.name),
            subgraph: node.subgraph,
            next: wiring.next,
            commands: wiring.commands,
            joins: wiring.joins,
        }
    }
}

impl Compiling {
    /// The node table and the petgraph's nodes; names checked.
    fn new<S: State>(nodes: &[NodeDecl<S>]) -> Self {
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
        let mut pg: DiGraph<GraphNode, EdgeKind> = DiGraph::new();
        pg.add_node(GraphNode::Start);
        pg.add_node(GraphNode::End);
        for node in nodes {
            pg.add_node(GraphNode::Node(node.name.clone()));
        }
        Self { index, pg, problems }
    }

    /// The static edges (`add_edge`).
    fn edges<S: State>(&mut self, edges: &[(String, String)], successors: &mut [Successors<S>]) {
        let names = Names { index: &self.index };
        for (from, to) in edges {
            if from == END {
                self.problems.push(GraphProblem::EdgeFromEnd { to: to.clone() });
                continue;
            }
            let source = names.source(from);
            if source.is_none() {
                self.problems
                    .push(GraphProblem::UnknownEdgeSource { from: from.clone(), to: to.clone() });
            }
            let target = names.edge_target(from, to, &mut self.problems);
            if target.is_none() && to != START {
                self.problems
                    .push(GraphProblem::EdgeToNowhere { from: from.clone(), to: to.clone() });
            }
            if let (Some(slot), Some(target)) = (source, target) {
                if !successors[slot].edges.contains(&target) {
                    successors[slot].edges.push(target);
                    self.pg.update_edge(slot_index(slot), petgraph_index(target), EdgeKind::Static);
                }
            }
        }
    }

    /// The conditional routes (`add_conditional_edges`).
    fn routes<S: State>(&mut self, routes: Vec<RouteDecl<S>>, successors: &mut [Successors<S>]) {
        let names = Names { index: &self.index };
        for route in routes {
            if route.from == END {
                let to = route.targets.join(", ");
                self.problems.push(GraphProblem::EdgeFromEnd { to });
                continue;
            }
            let Some(slot) = names.source(&route.from) else {
                self.problems.push(GraphProblem::UnknownRouteSource { from: route.from.clone() });
                continue;
            };
            if route.targets.is_empty() {
                self.problems.push(GraphProblem::RouteWithoutTargets { from: route.from.clone() });
            }
            let mut allowed = HashMap::new();
            for target_name in &route.targets {
                match names.edge_target(&route.from, target_name, &mut self.problems) {
                    Some(target) => {
                        allowed.insert(target_name.clone(), target);
                        let (a, b) = (slot_index(slot), petgraph_index(target));
                        self.pg.update_edge(a, b, EdgeKind::Conditional);
                    }
                    None if target_name == START => {}
                    None => self.problems.push(GraphProblem::UnknownRouteTarget {
                        from: route.from.clone(),
                        target: target_name.clone(),
                    }),
                }
            }
            if successors[slot].route.is_some() {
                self.problems.push(GraphProblem::DuplicateRoute { from: route.from.clone() });
            } else {
                successors[slot].route = Some(CompiledRoute { run: route.route, allowed });
            }
        }
    }

    /// The targets command nodes declared.
    fn commands<S: State>(&mut self, nodes: &[NodeDecl<S>]) -> Commands {
        let names = Names { index: &self.index };
        let mut commands = Vec::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            let Some(destinations) = &node.destinations else {
                commands.push(None);
                continue;
            };
            let mut allowed = HashMap::new();
            for target_name in destinations {
                match names.edge_target(&node.name, target_name, &mut self.problems) {
                    Some(target) => {
                        allowed.insert(target_name.clone(), target);
                        let (a, b) = (NodeIndex::new(i + 2), petgraph_index(target));
                        self.pg.update_edge(a, b, EdgeKind::Command);
                    }
                    None if target_name == START => {}
                    None => self.problems.push(GraphProblem::UnknownCommandTarget {
                        node: node.name.clone(),
                        target: target_name.clone(),
                    }),
                }
            }
            commands.push(Some(allowed));
        }
        commands
    }

    /// The joins, and each node's memberships: (join, position).
    fn joins(&mut self, joins: &[JoinDecl]) -> (Vec<CompiledJoin>, Vec<Vec<(usize, usize)>>) {
        let mut compiled = Vec::new();
        let mut memberships: Vec<Vec<(usize, usize)>> = vec![Vec::new(); self.pg.node_count() - 2];
        for join in joins {
            let target = self.index.get(&join.target).copied();
            if target.is_none() {
                self.problems.push(GraphProblem::UnknownJoinTarget { target: join.target.clone() });
            }
            let distinct: HashSet<&String> = join.sources.iter().collect();
            if join.sources.is_empty() || distinct.len() != join.sources.len() {
                self.problems.push(GraphProblem::BadJoinSources {
                    join: join.target.clone(),
                    sources: join.sources.clone(),
                });
            }
            let mut sources = Vec::new();
            for source in &join.sources {
                match self.index.get(source) {
                    Some(&i) => sources.push(i),
                    None => self.problems.push(GraphProblem::UnknownJoinSource {
                        join: join.target.clone(),
                        source_node: source.clone(),
                    }),
                }
            }
            let whole = sources.len() == join.sources.len() && distinct.len() == sources.len();
            let Some(target) = target.filter(|_| whole) else { continue };
            for (position, &source) in sources.iter().enumerate() {
                memberships[source].push((compiled.len(), position));
                let (a, b) = (NodeIndex::new(source + 2), NodeIndex::new(target + 2));
                self.pg.update_edge(a, b, EdgeKind::Join);
            }
            compiled.push(CompiledJoin { sources, target });
        }
        (compiled, memberships)
    }

    /// A per-node option (retry, cache, visit limit): on a known node, not
    /// `zero` (named `option` in the problem).
    fn known<T>(
        &mut self,
        given: Vec<(String, T)>,
        zero: impl Fn(&T) -> bool,
        option: &'static str,
    ) -> HashMap<String, T> {
        let mut known = HashMap::new();
        for (node, value) in given {
            if !self.index.contains_key(&node) {
                self.problems.push(GraphProblem::UnknownOptionNode { node });
            } else if zero(&value) {
                self.problems.push(GraphProblem::ZeroLimit { node, option });
            } else {
                known.insert(node, value);
            }
        }
        known
    }

    /// A flag per node (breakpoints), set for the nodes named.
    fn flags(&mut self, names: Vec<String>, nodes: usize) -> Vec<bool> {
        let mut set = vec![false; nodes];
        for node in names {
            match self.index.get(&node) {
                Some(&i) => set[i] = true,
                None => self.problems.push(GraphProblem::UnknownOptionNode { node }),
            }
        }
        set
    }

    /// Where a rejected node goes (`on_reject`): a command target of the
    /// node and a labelled conditional edge.
    fn rejects(
        &mut self,
        on_reject: Vec<(String, String)>,
        commands: &mut Commands,
        labels: &mut Labels,
    ) -> Vec<Option<usize>> {
        let mut reject_to = vec![None; commands.len()];
        for (node, target) in on_reject {
            let Some(&from) = self.index.get(&node) else {
                self.problems.push(GraphProblem::UnknownOptionNode { node });
                continue;
            };
            let Some(&to) = self.index.get(&target) else {
                self.problems.push(GraphProblem::UnknownRejectTarget { node, target });
                continue;
            };
            reject_to[from] = Some(to);
            labels.insert((from + 2, to + 2), "rejected".to_owned());
            let (a, b) = (NodeIndex::new(from + 2), NodeIndex::new(to + 2));
            self.pg.update_edge(a, b, EdgeKind::Conditional);
            commands[from].get_or_insert_with(HashMap::new).insert(target, Target::Node(to));
        }
        reject_to
    }

    /// The drawing's labels, each on an edge the graph has.
    fn labels(&mut self, given: Vec<(String, String, String)>, labels: &mut Labels) {
        let names = Names { index: &self.index };
        for (from, to, label) in given {
            let ends = names.source(&from).zip(names.target(&to));
            let edge = ends.and_then(|(slot, target)| {
                self.pg.find_edge(slot_index(slot), petgraph_index(target)).map(|_| (slot, target))
            });
            match edge {
                Some((slot, target)) => {
                    labels
                        .insert((slot_index(slot).index(), petgraph_index(target).index()), label);
                }
                None => self.problems.push(GraphProblem::UnknownLabelledEdge { from, to }),
            }
        }
    }
}

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

    /// The target of an edge from `from` to `to`; an edge into START is
    /// a problem of its own.
    fn edge_target(
        &self,
        from: &str,
        to: &str,
        problems: &mut Vec<GraphProblem>,
    ) -> Option<Target> {
        if to == START {
            problems.push(GraphProblem::EdgeIntoStart { from: from.to_owned() });
            return None;
        }
        self.target(to)
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
