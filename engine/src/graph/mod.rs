//! Building graphs and compiling them into a validated petgraph.

mod builder;
mod compile;
mod compiled;
mod export;
mod shape;
mod validate;

pub use builder::StateGraph;
pub use compiled::{CompiledGraph, EdgeKind, GraphNode};
pub use shape::{GraphShape, ShapeEdge, ShapeNode};
pub use validate::{CompileError, GraphProblem};

pub(crate) use compiled::Target;
