//! What can be wrong with a graph (`GraphProblem`, `CompileError`) and the
//! checks on the whole petgraph once it is built (`compile.rs` builds it):
//! every node reachable from START and reaching END, joins whose sources
//! can all fire.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::{Bfs, Reversed};

use super::compiled::{CompiledJoin, EdgeKind, GraphNode};

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

/// Every node must be reachable from START and reach END.
pub(super) fn check_paths(
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
pub(super) fn check_joins(
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
