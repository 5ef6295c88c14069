//! Property tests: the executor against a reference model of super-step
//! semantics, and interrupted runs against uninterrupted ones.

use std::sync::Arc;

use proptest::prelude::*;
use tollgate::{
    Executor, MemoryStore, RunConfig, RunError, SnapshotPolicy, SqliteStore, StateGraph, END, START,
};

use crate::support::{Graph, Trace, TraceUpdate};

/// A random DAG: `edges[i]` are the targets of node `i` (nodes after it, or
/// `None` for END), in declaration order.
#[derive(Debug, Clone)]
struct Dag {
    edges: Vec<Vec<Option<usize>>>,
}

fn name(i: usize) -> String {
    format!("n{i}")
}

fn dag() -> impl Strategy<Value = Dag> {
    (2usize..8).prop_flat_map(|n| {
        // For each node: a few candidate targets and one guaranteed parent.
        let targets = proptest::collection::vec(proptest::collection::vec(0usize..100, 0..4), n);
        let parents = proptest::collection::vec(0usize..100, n);
        (Just(n), targets, parents).prop_map(|(n, targets, parents)| {
            let mut edges: Vec<Vec<Option<usize>>> = vec![Vec::new(); n];
            for (i, picks) in targets.into_iter().enumerate() {
                for pick in picks {
                    // Later nodes or END.
                    let span = n - i;
                    let target = i + 1 + pick % span;
                    let target = (target < n).then_some(target);
                    if !edges[i].contains(&target) {
                        edges[i].push(target);
                    }
                }
            }
            // Every node after the first has a parent, so all are reachable.
            for (j, parent) in parents.into_iter().enumerate().skip(1) {
                let i = parent % j;
                if !edges[i].contains(&Some(j)) {
                    edges[i].push(Some(j));
                }
            }
            // Every node leads somewhere, so all reach END.
            for targets in &mut edges {
                if targets.is_empty() {
                    targets.push(None);
                }
            }
            Dag { edges }
        })
    })
}

fn build(dag: &Dag) -> tollgate::CompiledGraph<Trace> {
    let mut graph: Graph = StateGraph::new("prop", 1);
    for i in 0..dag.edges.len() {
        let label = name(i);
        graph = graph.node(name(i), move |_s: Arc<Trace>, _ctx| {
            let label = label.clone();
            async move { Ok(TraceUpdate::default().visited(vec![label]).count(1)) }
        });
    }
    graph = graph.edge(START, name(0));
    for (i, targets) in dag.edges.iter().enumerate() {
        for target in targets {
            graph = graph.edge(name(i), target.map_or_else(|| END.to_owned(), name));
        }
    }
    graph.compile().expect("generated DAGs are valid graphs")
}

/// The reference model: each step runs its frontier in order; the next
/// frontier lists each task's targets in declaration order, once each.
fn reference(dag: &Dag) -> (Vec<String>, u64) {
    let mut visited = Vec::new();
    let mut frontier = vec![0usize];
    let mut steps = 0;
    while !frontier.is_empty() {
        steps += 1;
        let mut next: Vec<usize> = Vec::new();
        for &node in &frontier {
            visited.push(name(node));
            for target in dag.edges[node].iter().flatten() {
                if !next.contains(target) {
                    next.push(*target);
                }
            }
        }
        frontier = next;
    }
    (visited, steps)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_executor_matches_the_reference_model(dag in dag()) {
        let (visited, steps) = reference(&dag);
        let outcome = runtime()
            .block_on(Executor::new(MemoryStore::new()).run(&build(&dag), Trace::default(), RunConfig::new()))
            .expect("the run completes");
        prop_assert_eq!(&outcome.state.visited, &visited);
        prop_assert_eq!(outcome.step, steps);
    }

    #[test]
    fn a_run_stopped_at_any_step_continues_to_the_same_end(dag in dag(), stop in 1u64..8) {
        let (visited, steps) = reference(&dag);
        prop_assume!(stop < steps);
        let dir = tempfile::tempdir().expect("temp dir");
        let graph = build(&dag);
        // Tiny snapshots spacing: loading replays snapshot + deltas.
        let snapshots = SnapshotPolicy { min_delta_bytes: 1, max_steps_between: 2 };
        let runtime = runtime();
        let executor = Executor::new(SqliteStore::open(dir.path().join("p.db")).expect("open"));
        let config = RunConfig::new().snapshots(snapshots.clone());
        let handle = runtime
            .block_on(executor.start(&graph, Trace::default(), config.clone().max_steps(stop)))
            .expect("start");
        let run = handle.run_id();
        let stopped = runtime.block_on(handle.wait());
        let limited = matches!(stopped, Err(RunError::StepLimitExceeded { .. }));
        prop_assert!(limited, "{:?}", stopped);
        // Another "process": a fresh store on the same file. The run's
        // budget is stored with it: this leg raises it.
        let executor = Executor::new(SqliteStore::open(dir.path().join("p.db")).expect("reopen"));
        let config = config.max_steps(tollgate::DEFAULT_MAX_STEPS);
        let handle = runtime.block_on(executor.continue_run(&graph, run, config)).expect("continue");
        let outcome = runtime.block_on(handle.wait()).expect("completes");
        prop_assert_eq!(&outcome.state.visited, &visited);
        prop_assert_eq!(outcome.step, steps);
    }
}
