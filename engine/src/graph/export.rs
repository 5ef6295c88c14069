//! Drawing a compiled graph as Mermaid or Graphviz DOT, subgraphs nested.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use petgraph::graph::DiGraph;
use petgraph::visit::EdgeRef;

use crate::state::State;

use super::compiled::{CompiledGraph, EdgeKind, GraphNode, Outline};

type Shape = DiGraph<GraphNode, EdgeKind>;

impl<S: State> CompiledGraph<S> {
    /// A Mermaid flowchart: solid arrows for static edges, dotted ones for
    /// route targets and command destinations, thick ones into joins. A
    /// subgraph node is drawn as a block holding its graph.
    pub fn to_mermaid(&self) -> String {
        let mut out = String::from("flowchart TD\n");
        mermaid(&mut out, self.graph(), &self.nested(), "n", 1);
        out
    }

    /// A Graphviz digraph: dashed edges for route targets and command
    /// destinations, bold ones into joins. A subgraph node's graph is
    /// drawn beside it as a cluster (its nodes named `node/inner`), joined
    /// to it by a dotted edge.
    pub fn to_dot(&self) -> String {
        let mut out = format!("digraph \"{}\" {{\n", dot_escape(self.name()));
        dot(&mut out, self.graph(), &self.nested(), "", 1);
        out.push_str("}\n");
        out
    }
}

fn mermaid(
    out: &mut String,
    graph: &Shape,
    nested: &HashMap<String, Arc<Outline>>,
    prefix: &str,
    depth: usize,
) {
    let pad = "    ".repeat(depth);
    for index in graph.node_indices() {
        let id = format!("{prefix}{}", index.index());
        let label = mermaid_label(graph[index].name());
        let _ = match &graph[index] {
            GraphNode::Start | GraphNode::End => writeln!(out, "{pad}{id}([\"{label}\"])"),
            GraphNode::Node(name) => match nested.get(name) {
                Some(inner) => {
                    let _ = writeln!(out, "{pad}subgraph {id}[\"{label}\"]");
                    mermaid(out, &inner.graph, &inner.nested, &format!("{id}_"), depth + 1);
                    writeln!(out, "{pad}end")
                }
                None => writeln!(out, "{pad}{id}[\"{label}\"]"),
            },
        };
    }
    for edge in graph.edge_references() {
        let arrow = match edge.weight() {
            EdgeKind::Static => "-->",
            EdgeKind::Conditional | EdgeKind::Command => "-.->",
            EdgeKind::Join => "==>",
        };
        let (from, to) = (edge.source().index(), edge.target().index());
        let _ = writeln!(out, "{pad}{prefix}{from} {arrow} {prefix}{to}");
    }
}

fn dot(
    out: &mut String,
    graph: &Shape,
    nested: &HashMap<String, Arc<Outline>>,
    prefix: &str,
    depth: usize,
) {
    let pad = "    ".repeat(depth);
    let name =
        |index: petgraph::graph::NodeIndex| dot_escape(&format!("{prefix}{}", graph[index].name()));
    for index in graph.node_indices() {
        let shape = match graph[index] {
            GraphNode::Start | GraphNode::End => "oval",
            GraphNode::Node(_) => "box",
        };
        let _ = writeln!(out, "{pad}\"{}\" [shape={shape}];", name(index));
        let GraphNode::Node(node) = &graph[index] else { continue };
        let Some(inner) = nested.get(node) else { continue };
        let path = format!("{prefix}{node}");
        let _ = writeln!(out, "{pad}subgraph \"cluster_{}\" {{", dot_escape(&path));
        let label = format!("{path} ({})", inner.name);
        let _ = writeln!(out, "{pad}    label=\"{}\";", dot_escape(&label));
        dot(out, &inner.graph, &inner.nested, &format!("{path}/"), depth + 1);
        let _ = writeln!(out, "{pad}}}");
        let start = dot_escape(&format!("{path}/{}", crate::START));
        let _ = writeln!(out, "{pad}\"{}\" -> \"{start}\" [style=dotted];", name(index));
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
            "{pad}\"{}\" -> \"{}\"{style};",
            name(edge.source()),
            name(edge.target())
        );
    }
}

fn mermaid_label(name: &str) -> String {
    name.replace('"', "#quot;")
}

fn dot_escape(name: &str) -> String {
    name.replace('\\', "\\\\").replace('"', "\\\"")
}
