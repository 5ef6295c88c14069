//! What the engine asks of its store, call by call: a step is one commit
//! and nothing else, and a pause and its resume are five writes and one
//! read (the cost `docs/hitl.md` states). A store call more on these paths
//! is a transaction more on every step or every review: these tests name
//! it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tollgate::{
    DecisionRequest, Executor, MemoryStore, Resumed, Route, RunConfig, RunStatus, END, START,
};
use tollgate_testkit::{HookedStore, StoreHooks};

use crate::hitl::approval;
use crate::support::{visit, Graph, Trace, TraceUpdate};

/// Counts the store's calls by operation.
#[derive(Debug, Default)]
struct Counting(Mutex<BTreeMap<&'static str, u32>>);

impl StoreHooks for Counting {
    fn called(&self, operation: &'static str) {
        *self.0.lock().unwrap().entry(operation).or_default() += 1;
    }
}

impl Counting {
    /// The calls since the last take.
    fn take(&self) -> BTreeMap<&'static str, u32> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn counted() -> (Executor, Arc<HookedStore<MemoryStore, Counting>>) {
    let store = Arc::new(HookedStore::new(MemoryStore::new(), Counting::default()));
    (Executor::with_store(Arc::clone(&store) as Arc<dyn tollgate::Store>), store)
}

fn calls(pairs: &[(&'static str, u32)]) -> BTreeMap<&'static str, u32> {
    pairs.iter().copied().collect()
}

/// `ask` pauses once; once approved, `after` runs and the run ends.
fn asking() -> tollgate::CompiledGraph<Trace> {
    let graph = Graph::new("hitl", 1).node(
        "ask",
        |_s: Arc<Trace>, ctx: tollgate::NodeContext| async move {
            ctx.interrupt(approval())?;
            Ok(TraceUpdate::default().count(1))
        },
    );
    visit(graph, "after")
        .edge(START, "ask")
        .edge("ask", "after")
        .edge("after", END)
        .compile()
        .unwrap()
}

#[tokio::test]
async fn each_step_is_one_commit_and_nothing_else() {
    let graph = visit(Graph::new("cycle", 1), "inc")
        .edge(START, "inc")
        .route(
            "inc",
            ["inc", END],
            |s: &Trace| {
                if s.count < 20 {
                    Route::to("inc")
                } else {
                    Route::end()
                }
            },
        )
        .compile()
        .unwrap();
    let (executor, store) = counted();
    let outcome = executor.run(&graph, Trace::default(), RunConfig::new()).await.unwrap();
    assert_eq!((outcome.status, outcome.step), (RunStatus::Completed, 20));
    // The run's creation (with its input), then one commit per step, the
    // last with the run's end: no read, no lease renewal between steps.
    assert_eq!(store.hooks().take(), calls(&[("create_run", 1), ("commit", 20)]));
}

#[tokio::test]
async fn a_pause_and_its_resume_are_five_writes_and_one_read() {
    let graph = asking();
    for spawned in [false, true] {
        let (executor, store) = counted();
        let paused = executor.run(&graph, Trace::default(), RunConfig::new()).await.unwrap();
        assert_eq!(paused.status, RunStatus::AwaitingHitl);
        // The creation, and the step that pauses (its interrupt with it).
        assert_eq!(store.hooks().take(), calls(&[("create_run", 1), ("commit", 1)]));
        let request = DecisionRequest::new(tollgate::Decision::Approve);
        let run = paused.run_id;
        let outcome = if spawned {
            let Resumed::Continuing(handle) =
                executor.resume(&graph, run, request, RunConfig::new()).await.unwrap()
            else {
                panic!("the run did not continue")
            };
            handle.wait().await.unwrap()
        } else {
            let Resumed::Continuing(outcome) =
                executor.resume_run(&graph, run, request, RunConfig::new()).await.unwrap()
            else {
                panic!("the run did not continue")
            };
            outcome
        };
        assert_eq!((outcome.status, outcome.state.count), (RunStatus::Completed, 2));
        // One read (the checkpoint holds the record and the interrupts),
        // the decision with the claim in one write, then the paused node's
        // step and the last step with the run's end.
        assert_eq!(
            store.hooks().take(),
            calls(&[("checkpoint", 1), ("decide", 1), ("commit", 2)]),
            "spawned: {spawned}"
        );
    }
}
