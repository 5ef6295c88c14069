//! Graph state, partial updates and the reducers that merge them.

mod dynamic;
mod reducer;

pub use dynamic::{CustomReducer, DynReducer, DynSchema, DynState};
pub use reducer::{
    Append, HasId, LastValue, Max, MergeMap, MessageOp, Messages, Min, Reducer, Sum,
};

use std::fmt::Debug;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A graph's state: the value every node reads and returns partial updates to.
///
/// Each field has a [`Reducer`] that folds updates into it. Implement this
/// with `#[derive(GraphState)]` for a struct (one attribute a field), or use
/// [`DynState`] for a JSON object whose reducers are chosen at run time.
pub trait State: Clone + Send + Sync + Serialize + DeserializeOwned + Debug + 'static {
    /// A partial update: which fields a node writes, and with what.
    type Update: Clone + Send + Sync + Serialize + DeserializeOwned + Debug + 'static;
    /// Run-time description of the state's fields; `()` for derived states.
    type Schema: Send + Sync + Debug + 'static;

    /// Merges one super-step's writes, given in the step's deterministic task
    /// order. Two writes to a last-value field are a
    /// [`StateError::ConflictingUpdate`] and leave the state unchanged.
    fn apply(
        &mut self,
        schema: &Self::Schema,
        writes: Vec<Write<Self::Update>>,
    ) -> Result<(), StateError>;
}

/// One task's update, with the node that wrote it.
#[derive(Debug, Clone)]
pub struct Write<U> {
    /// Name of the node whose task returned the update.
    pub node: Arc<str>,
    /// The partial update.
    pub update: U,
}

/// An update could not be merged into the state.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Several nodes of one super-step wrote a last-value field.
    #[error(
        "field `{field}` was written by {} nodes in one step ({}); give it a reducer \
         (append, sum, merge, ...) or let only one branch write it",
        nodes.len(), nodes.join(", ")
    )]
    ConflictingUpdate {
        /// The field.
        field: String,
        /// The writers, in task order.
        nodes: Vec<String>,
    },
    /// A dynamic state's update names a field the schema does not declare.
    #[error("node `{node}` wrote field `{field}`, which the state schema does not declare")]
    UnknownField {
        /// The field.
        field: String,
        /// The writer.
        node: String,
    },
    /// A dynamic reducer got a value of the wrong JSON type.
    #[error("node `{node}` wrote field `{field}`: the {reducer} reducer needs {expected}")]
    TypeMismatch {
        /// The field.
        field: String,
        /// The writer.
        node: String,
        /// The reducer's name.
        reducer: &'static str,
        /// What it needs.
        expected: &'static str,
    },
    /// A custom dynamic reducer refused an update.
    #[error("node `{node}` wrote field `{field}`: the custom reducer refused it: {source}")]
    ReducerRejected {
        /// The field.
        field: String,
        /// The writer.
        node: String,
        /// The reducer's reason.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Support for the `GraphState` derive: the conflict check for one
/// last-value field. Not part of the public API.
#[doc(hidden)]
pub fn __check_exclusive<U>(
    field: &str,
    exclusive: bool,
    writes: &[Write<U>],
    writes_field: impl Fn(&U) -> bool,
) -> Result<(), StateError> {
    if !exclusive {
        return Ok(());
    }
    let mut writers = writes.iter().filter(|write| writes_field(&write.update));
    if writers.clone().nth(1).is_none() {
        return Ok(());
    }
    Err(StateError::ConflictingUpdate {
        field: field.to_owned(),
        nodes: writers.by_ref().map(|write| write.node.to_string()).collect(),
    })
}
