//! The registry of typed Rust graphs a process serves: by name and
//! version, with the JSON Schema of their input where given.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tollgate_engine::{CompiledGraph, State};

use super::outline::{GraphListing, ListingKind};
use super::served::ServedGraph;

/// The typed Rust graphs a process can run, several versions of a name
/// allowed: the API starts them by name (`POST /runs {"graph": NAME,
/// "input": …}`, on the newest version), decides and continues their runs
/// on the version each run started with, workers drive them, and the page
/// draws them. Blueprints need no registration: their runs carry their
/// blueprint.
///
/// ```
/// use std::sync::Arc;
/// use tollgate_engine::{NodeContext, StateGraph, END, START};
///
/// #[derive(tollgate_macros::GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
/// #[graph_state(crate = tollgate_engine)]
/// struct Claim {
///     amount: u32,
/// }
///
/// let expenses = StateGraph::<Claim>::new("expenses", 1)
///     .node("check", |_state: Arc<Claim>, _ctx: NodeContext| async move {
///         Ok(ClaimUpdate::default())
///     })
///     .edge(START, "check")
///     .edge("check", END)
///     .compile()
///     .unwrap();
/// let graphs = tollgate_server::Graphs::new().graph(expenses);
/// assert_eq!(graphs.newest("expenses"), Some(("expenses", 1)));
/// ```
#[derive(Clone, Default)]
pub struct Graphs {
    entries: BTreeMap<(String, u32), Arc<dyn ServedGraph>>,
    /// JSON Schemas of inputs, where given.
    schemas: BTreeMap<(String, u32), Value>,
}

impl std::fmt::Debug for Graphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries.keys()).finish()
    }
}

impl Graphs {
    /// No graphs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `graph` (its name and version; the same pair again replaces
    /// it). Its state is shown as JSON and its input taken as JSON of its
    /// update, merged through its reducers.
    pub fn graph<S: State + Default>(mut self, graph: CompiledGraph<S>) -> Self {
        let key = (graph.name().to_owned(), graph.version());
        self.schemas.remove(&key);
        self.entries.insert(key, Arc::new(graph));
        self
    }

    /// Adds `graph` with the JSON Schema of its input (shown by `GET
    /// /graphs` for clients and forms; the input is still checked by
    /// decoding it as the state's update).
    pub fn graph_with_input_schema<S: State + Default>(
        self,
        graph: CompiledGraph<S>,
        schema: Value,
    ) -> Self {
        let key = (graph.name().to_owned(), graph.version());
        let mut graphs = self.graph(graph);
        graphs.schemas.insert(key, schema);
        graphs
    }

    /// The newest version of `name`, as `(name, version)`.
    pub fn newest(&self, name: &str) -> Option<(&str, u32)> {
        self.newest_entry(name).map(|entry| (entry.name(), entry.version()))
    }

    pub(crate) fn newest_entry(&self, name: &str) -> Option<&Arc<dyn ServedGraph>> {
        self.entries
            .range((name.to_owned(), 0)..=(name.to_owned(), u32::MAX))
            .next_back()
            .map(|(_, g)| g)
    }

    pub(crate) fn exact(&self, name: &str, version: u32) -> Option<&Arc<dyn ServedGraph>> {
        self.entries.get(&(name.to_owned(), version))
    }

    /// The versions of `name` there are, oldest first.
    pub(crate) fn versions(&self, name: &str) -> Vec<u32> {
        self.entries
            .keys()
            .filter(|(entry, _)| entry == name)
            .map(|(_, version)| *version)
            .collect()
    }

    /// Every graph (the newest version's outline), by name.
    pub(crate) fn listing(&self) -> Vec<GraphListing> {
        let mut names: Vec<&str> = self.entries.keys().map(|(name, _)| name.as_str()).collect();
        names.dedup();
        names.into_iter().filter_map(|name| self.described(name)).collect()
    }

    /// One graph by name, as in [`Graphs::listing`].
    pub(crate) fn described(&self, name: &str) -> Option<GraphListing> {
        let newest = self.newest_entry(name)?;
        Some(GraphListing {
            name: name.to_owned(),
            version: newest.version(),
            versions: self.versions(name),
            kind: ListingKind::Graph,
            graph: None,
            input_schema: self.schemas.get(&(name.to_owned(), newest.version())).cloned(),
            outline: newest.outline(),
        })
    }
}
