//! The state every graph case runs on, and a node that records its visit.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tollgate_engine::{GraphState, StateGraph};

/// The state the graph cases run on.
#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[graph_state(crate = tollgate_engine)]
pub(super) struct Track {
    /// Nodes in merge order.
    #[reducer(append)]
    pub(super) visited: Vec<String>,
    #[reducer(sum)]
    pub(super) count: i64,
}

pub(super) type Graph = StateGraph<Track>;

pub(super) fn visit(graph: Graph, name: &'static str) -> Graph {
    graph.node(name, move |_state: Arc<Track>, _ctx| async move {
        Ok(TrackUpdate::default().visited(vec![name.to_owned()]).count(1))
    })
}
