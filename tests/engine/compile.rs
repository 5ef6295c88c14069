//! Compile-time validation: one case per rule, every problem at once, and
//! the Mermaid/DOT exports.

use std::sync::Arc;

use tollgate::{GraphProblem, Route, END, START};

use crate::support::{visit, visits, Graph, Trace, TraceUpdate};

fn problem(build: impl FnOnce(Graph) -> Graph) -> Vec<GraphProblem> {
    match build(Graph::new("g", 1)).compile() {
        Ok(_) => Vec::new(),
        Err(error) => {
            assert_eq!(error.graph, "g");
            error.problems
        }
    }
}

fn check(name: &str, build: impl FnOnce(Graph) -> Graph, expect: &[GraphProblem]) {
    assert_eq!(problem(build), expect, "{name}");
}

fn s(text: &str) -> String {
    text.to_owned()
}

#[test]
fn every_rule_has_a_typed_problem() {
    use GraphProblem::*;
    check("valid", |g| visit(g, "a").edge(START, "a").edge("a", END), &[]);
    check("empty name", |g| visit(visit(g, "a"), "").edge(START, "a").edge("a", END), &[EmptyName]);
    check(
        "reserved name",
        |g| visit(visit(g, "a"), END).edge(START, "a").edge("a", END),
        &[ReservedName { name: s(END) }],
    );
    check(
        "duplicate node",
        |g| visits(g, &["a", "a"]).edge(START, "a").edge("a", END),
        &[DuplicateNode { name: s("a") }],
    );
    check(
        "edge from an unknown node",
        |g| visit(g, "a").edge(START, "a").edge("a", END).edge("ghost", "a"),
        &[UnknownEdgeSource { from: s("ghost"), to: s("a") }],
    );
    check(
        "edge to nowhere",
        |g| visit(g, "a").edge(START, "a").edge("a", END).edge("a", "ghost"),
        &[EdgeToNowhere { from: s("a"), to: s("ghost") }],
    );
    check(
        "edge into START",
        |g| visit(g, "a").edge(START, "a").edge("a", END).edge("a", START),
        &[EdgeIntoStart { from: s("a") }],
    );
    check(
        "edge out of END",
        |g| visit(g, "a").edge(START, "a").edge("a", END).edge(END, "a"),
        &[EdgeFromEnd { to: s("a") }],
    );
    check(
        "route from an unknown node",
        |g| {
            visit(g, "a")
                .edge(START, "a")
                .edge("a", END)
                .route("ghost", [END], |_: &Trace| Route::end())
        },
        &[UnknownRouteSource { from: s("ghost") }],
    );
    check(
        "two routes from one node",
        |g| {
            visit(g, "a").edge(START, "a").route("a", [END], |_: &Trace| Route::end()).route(
                "a",
                [END],
                |_: &Trace| Route::end(),
            )
        },
        &[DuplicateRoute { from: s("a") }],
    );
    check(
        "route without targets",
        |g| {
            visit(g, "a").edge(START, "a").edge("a", END).route(
                "a",
                Vec::<String>::new(),
                |_: &Trace| Route::end(),
            )
        },
        &[RouteWithoutTargets { from: s("a") }],
    );
    check(
        "undeclared (unknown) route target",
        |g| visit(g, "a").edge(START, "a").route("a", ["b", END], |_: &Trace| Route::end()),
        &[UnknownRouteTarget { from: s("a"), target: s("b") }],
    );
    check(
        "unknown command destination",
        |g| {
            g.command_node("a", ["nope", END], |_s: Arc<Trace>, _ctx| async move {
                Ok(tollgate::Command::<TraceUpdate>::goto(END))
            })
            .edge(START, "a")
        },
        &[UnknownCommandTarget { node: s("a"), target: s("nope") }],
    );
    check(
        "unknown join target",
        |g| {
            visits(g, &["a", "b"])
                .edge(START, "a")
                .edge(START, "b")
                .edge("a", END)
                .edge("b", END)
                .join(["a", "b"], "ghost")
        },
        &[UnknownJoinTarget { target: s("ghost") }],
    );
    check(
        "unknown join source",
        |g| {
            visits(g, &["a", "d"])
                .edge(START, "a")
                .edge("a", END)
                .join(["a", "ghost"], "d")
                .edge("d", END)
        },
        &[
            UnknownJoinSource { join: s("d"), source_node: s("ghost") },
            Unreachable { node: s("d") },
        ],
    );
    check(
        "join listing a source twice",
        |g| visits(g, &["a", "d"]).edge(START, "a").join(["a", "a"], "d").edge("d", END),
        &[
            BadJoinSources { join: s("d"), sources: vec![s("a"), s("a")] },
            NoPathToEnd { node: s("a") },
            Unreachable { node: s("d") },
        ],
    );
    check(
        "join over nodes that run one after the other",
        |g| {
            visits(g, &["a", "b", "d"])
                .edge(START, "a")
                .edge("a", "b")
                .join(["a", "b"], "d")
                .edge("d", END)
        },
        &[JoinNotParallel { join: s("d"), first: s("a"), second: s("b") }],
    );
    check(
        "option for an unknown node",
        |g| visit(g, "a").edge(START, "a").edge("a", END).max_visits("ghost", 3),
        &[UnknownOptionNode { node: s("ghost") }],
    );
    check(
        "zero visit limit",
        |g| visit(g, "a").edge(START, "a").edge("a", END).max_visits("a", 0),
        &[ZeroLimit { node: s("a"), option: "max_visits" }],
    );
    check("no entry", |g| visit(g, "a").edge("a", END), &[NoEntry, Unreachable { node: s("a") }]);
    check(
        "unreachable node",
        |g| visits(g, &["a", "island"]).edge(START, "a").edge("a", END).edge("island", END),
        &[Unreachable { node: s("island") }],
    );
    check(
        "node with no path to END",
        |g| visits(g, &["a", "sink"]).edge(START, "a").edge("a", END).edge("a", "sink"),
        &[NoPathToEnd { node: s("sink") }],
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let problems = problem(|g| {
        visits(g, &["a", "a", "b"]).edge(START, "a").edge("a", "ghost").route(
            "a",
            ["b", "phantom"],
            |_: &Trace| Route::to("b"),
        )
    });
    assert_eq!(
        problems,
        [
            GraphProblem::DuplicateNode { name: s("a") },
            GraphProblem::EdgeToNowhere { from: s("a"), to: s("ghost") },
            GraphProblem::UnknownRouteTarget { from: s("a"), target: s("phantom") },
            GraphProblem::NoPathToEnd { node: s("a") },
            GraphProblem::NoPathToEnd { node: s("b") },
        ]
    );
    let error = Graph::new("g", 1).compile().unwrap_err();
    assert_eq!(error.to_string(), "graph `g` has 1 problem(s):\n  - nothing leaves `__start__`: add an edge or route from START");
}

#[test]
fn join_over_parallel_branches_with_a_loop_back_compiles() {
    // The loop from `review` back to `plan` passes through the join target,
    // so `a` and `b` are still parallel branches.
    let compiled = visits(Graph::new("g", 1), &["plan", "a", "b", "review"])
        .edge(START, "plan")
        .edge("plan", "a")
        .edge("plan", "b")
        .join(["a", "b"], "review")
        .route("review", ["plan", END], |_: &Trace| Route::end())
        .compile();
    assert!(compiled.is_ok(), "{:?}", compiled.err());
}

#[test]
fn exports_draw_every_kind_of_edge() {
    let graph = visits(Graph::new("draw \"me\"", 1), &["a", "b", "c", "d"])
        .edge(START, "a")
        .edge("a", "b")
        .route("a", ["c", END], |_: &Trace| Route::to("c"))
        .join(["b", "c"], "d")
        .edge("d", END)
        .compile()
        .unwrap();
    let mermaid = graph.to_mermaid();
    let expected_mermaid = "flowchart TD
    n0([\"__start__\"])
    n1([\"__end__\"])
    n2[\"a\"]
    n3[\"b\"]
    n4[\"c\"]
    n5[\"d\"]
    n0 --> n2
    n2 --> n3
    n5 --> n1
    n2 -.-> n4
    n2 -.-> n1
    n3 ==> n5
    n4 ==> n5
";
    assert_eq!(mermaid, expected_mermaid);
    let dot = graph.to_dot();
    assert!(dot.starts_with("digraph \"draw \\\"me\\\"\" {\n"), "{dot}");
    for line in [
        "\"__start__\" -> \"a\";",
        "\"a\" -> \"c\" [style=dashed];",
        "\"b\" -> \"d\" [style=bold, label=\"join\"];",
        "\"d\" -> \"__end__\";",
    ] {
        assert!(dot.contains(line), "missing `{line}` in\n{dot}");
    }
    assert_eq!(graph.graph().node_count(), 6);
    assert_eq!(graph.graph().edge_count(), 7);
}
