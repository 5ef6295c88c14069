//! What a leg is checked against and starts with, whichever operation
//! starts it: that a stored run belongs to the graph, the run's
//! breakpoints, and its `run_started` events. A leaf under the driver and
//! the executor.

use tollgate_checkpoint::{GraphRef, RunId, Store};

use crate::event::Event;
use crate::graph::CompiledGraph;
use crate::state::State;

use super::config::RunConfig;
use super::emit::{Emitter, Live};
use super::error::{json_error, RunError};

/// Nodes to pause before and after (graph breakpoints and the run's own).
#[derive(Debug, Clone, Default)]
pub(crate) struct Breakpoints {
    pub(crate) before: Vec<bool>,
    pub(crate) after: Vec<bool>,
}

/// The run's breakpoints: the graph's, plus those its config adds.
pub(crate) fn breakpoints<S: State>(
    graph: &CompiledGraph<S>,
    config: &RunConfig,
) -> Result<Breakpoints, RunError> {
    let count = graph.node_names().count();
    let mut points = Breakpoints { before: vec![false; count], after: vec![false; count] };
    for i in 0..count {
        points.before[i] = graph.node(i).break_before;
        points.after[i] = graph.node(i).break_after;
    }
    for (names, flags) in
        [(&config.break_before, &mut points.before), (&config.break_after, &mut points.after)]
    {
        for name in names {
            let index =
                graph.index_of(name).ok_or_else(|| RunError::UnknownNode { node: name.clone() })?;
            flags[index] = true;
        }
    }
    Ok(points)
}

/// The run's record, if it belongs to `graph` (name and version).
pub(crate) async fn check_graph<S: State>(
    store: &dyn Store,
    graph: &CompiledGraph<S>,
    run: RunId,
) -> Result<tollgate_checkpoint::RunRecord, RunError> {
    let record = store.run(run).await?;
    same_graph(graph, &record)?;
    Ok(record)
}

/// Refuses a run recorded by another graph (name or version).
pub(crate) fn same_graph<S: State>(
    graph: &CompiledGraph<S>,
    record: &tollgate_checkpoint::RunRecord,
) -> Result<(), RunError> {
    if record.graph != graph_ref(graph) {
        let stored = record.graph.clone();
        return Err(RunError::GraphMismatch { run: record.id, stored, graph: graph_ref(graph) });
    }
    Ok(())
}

pub(crate) fn graph_ref<S: State>(graph: &CompiledGraph<S>) -> GraphRef {
    GraphRef { name: graph.name().to_owned(), version: graph.version() }
}

/// `run_started` and the events the config announces, sent live `when`
/// given: a new run's only once it is stored (a run that could not be
/// created was never started).
pub(crate) fn emit_run_started<S: State>(
    emitter: &Emitter,
    graph: &CompiledGraph<S>,
    from_step: u64,
    run: RunId,
    when: Live,
    announced: &[Event],
) -> Result<(), RunError> {
    let event = Event::RunStarted {
        graph: graph.name().to_owned(),
        graph_version: graph.version(),
        from_step,
    };
    emitter.emit(None, event, when).map_err(|source| json_error(run, from_step, source))?;
    for event in announced {
        emitter
            .emit(None, event.clone(), when)
            .map_err(|source| json_error(run, from_step, source))?;
    }
    Ok(())
}
