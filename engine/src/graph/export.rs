//! Drawing a compiled graph as Mermaid or Graphviz DOT.

use std::fmt::Write as _;

use petgraph::visit::EdgeRef;

use crate::state::State;

use super::compiled::{CompiledGraph, EdgeKind, GraphNode};

impl<S: State> CompiledGraph<S> {
    /// A Mermaid flowchart: solid arrows for static edges, dotted ones for
    /// route targets and command destinations, thick ones into joins.
    pub fn to_mermaid(&self) -> String {
        let graph = self.graph();
        let mut out = String::from("flowchart TD\n");
        for index in graph.node_indices() {
            let label = mermaid_label(graph[index].name());
            let _ = match &graph[index] {
                GraphNode::Start | GraphNode::End => {
                    writeln!(out, "    n{}([\"{label}\"])", index.index())
                }
                GraphNode::Node(_) => writeln!(out, "    n{}[\"{label}\"]", index.index()),
            };
        }
        for edge in graph.edge_references() {
            let arrow = match edge.weight() {
                EdgeKind::Static => "-->",
                EdgeKind::Conditional | EdgeKind::Command => "-.->",
                EdgeKind::Join => "==>",
            };
            let _ =
                writeln!(out, "    n{} {arrow} n{}", edge.source().index(), edge.target().index());
        }
        out
    }

    /// A Graphviz digraph: dashed edges for route targets and command
    /// destinations, bold ones into joins.
    pub fn to_dot(&self) -> String {
        let graph = self.graph();
        let mut out = format!("digraph \"{}\" {{\n", dot_escape(self.name()));
        for index in graph.node_indices() {
            let shape = match graph[index] {
                GraphNode::Start | GraphNode::End => "oval",
                GraphNode::Node(_) => "box",
            };
            let _ = writeln!(out, "    \"{}\" [shape={shape}];", dot_escape(graph[index].name()));
        }
        for edge in graph.edge_references() {
            let style = match edge.weight() {
                EdgeKind::Static => "",
                EdgeKind::Conditional => " [style=dashed]",
                EdgeKind::Command => " [style=dashed, label=\"command\"]",
                EdgeKind::Join => " [style=bold, label=\"join\"]",
            };
            let _ = writeln!(
                out,
                "    \"{}\" -> \"{}\"{style};",
                dot_escape(graph[edge.source()].name()),
                dot_escape(graph[edge.target()].name())
            );
        }
        out.push_str("}\n");
        out
    }
}

fn mermaid_label(name: &str) -> String {
    name.replace('"', "#quot;")
}

fn dot_escape(name: &str) -> String {
    name.replace('\\', "\\\\").replace('"', "\\\"")
}
