//! Node caching: a node's output served from the store for the same input
//! until it expires, across runs and restarts, marked in the events.

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::{Clock, Event, EventSink, Executor, RunConfig, Send, SqliteStore, END, START};

use crate::support::{self, Graph, Trace, TraceUpdate};

/// A clock the test moves.
#[derive(Debug, Default)]
struct Manual(AtomicI64);

impl Clock for Manual {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// `expensive` counts its runs and echoes the count of the state it saw.
fn graph(calls: Arc<AtomicU32>) -> tollgate::CompiledGraph<Trace> {
    Graph::new("cached", 1)
        .node("expensive", move |state: Arc<Trace>, _ctx| {
            let calls = Arc::clone(&calls);
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(TraceUpdate::default().visited(vec![format!("saw {}", state.count)]))
            }
        })
        .edge(START, "expensive")
        .edge("expensive", END)
        .cache("expensive", Duration::from_secs(60))
        .compile()
        .unwrap()
}

fn cached_flags(events: &mut tollgate::EventStream) -> Vec<bool> {
    let mut flags = Vec::new();
    while let Some(event) = events.try_recv() {
        if let Event::NodeCompleted { cached, .. } = event.event {
            flags.push(cached);
        }
    }
    flags
}

#[test]
fn a_cached_node_runs_once_per_input_until_its_entry_expires() {
    let runtime = support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let clock = Arc::new(Manual::default());
    let graph = graph(Arc::clone(&calls));
    let run = |executor: &Executor, count: i64| {
        let (sink, mut events) = EventSink::channel();
        let config = RunConfig::new().clock(clock.clone()).events(sink);
        let input = Trace { count, ..Trace::default() };
        let outcome = runtime.block_on(executor.run(&graph, input, config)).unwrap();
        (outcome.state.visited, cached_flags(&mut events))
    };
    let executor = Executor::new(SqliteStore::open(dir.path().join("c.db")).unwrap());
    assert_eq!(run(&executor, 1), (vec!["saw 1".to_owned()], vec![false]));
    assert_eq!(run(&executor, 1), (vec!["saw 1".to_owned()], vec![true]), "a hit");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the node ran once");
    assert_eq!(run(&executor, 2).1, [false], "another input is another entry");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Another process on the same file: still cached.
    drop(executor);
    let executor = Executor::new(SqliteStore::open(dir.path().join("c.db")).unwrap());
    assert_eq!(run(&executor, 1).1, [true], "the cache survives a restart");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Past its time to live, the node runs again.
    clock.0.store(61_000, Ordering::SeqCst);
    assert_eq!(run(&executor, 1).1, [false]);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // ...and is cached again from then on.
    assert_eq!(run(&executor, 1).1, [true]);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[test]
fn instances_sent_in_parallel_are_keyed_by_their_input() {
    let runtime = support::runtime();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let graph = Graph::new("fan", 1)
        .node("split", |_s: Arc<Trace>, _ctx| async { Ok(TraceUpdate::default()) })
        .node("square", move |_s: Arc<Trace>, ctx: tollgate::NodeContext| {
            let calls = Arc::clone(&counted);
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                let n: i64 = ctx.input::<i64>()?;
                Ok(TraceUpdate::default().count(n * n))
            }
        })
        .edge(START, "split")
        .route("split", ["square"], |_s: &Trace| {
            tollgate::Route::send((1..=3).map(|n| Send::new("square", serde_json::json!(n))))
        })
        .edge("square", END)
        .cache("square", Duration::from_secs(60))
        .compile()
        .unwrap();
    let executor = Executor::new(tollgate::MemoryStore::new());
    let first = runtime.block_on(executor.run(&graph, Trace::default(), RunConfig::new())).unwrap();
    let second =
        runtime.block_on(executor.run(&graph, Trace::default(), RunConfig::new())).unwrap();
    assert_eq!((first.state.count, second.state.count), (14, 14));
    assert_eq!(calls.load(Ordering::SeqCst), 3, "each input ran once");
}
