//! State-API conformance: what a client reads back about runs and threads
//! (sources, next nodes after a state update, a thread's whole history,
//! graphs called from a node, nested states, per-task errors), on any
//! store.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tollgate_checkpoint::{RunStatus, Store};
use tollgate_engine::{
    CheckpointSource, Decision, DecisionRequest, Executor, Interrupt, NodeContext, NodeError,
    Resumed, RunConfig, RunError, END, START,
};

use super::track::{visit, Graph, Track, TrackUpdate};

/// The state-API cases, each on a fresh store from `make`.
pub(super) async fn check_state_api<S, F, Fut>(make: &F)
where
    S: Store,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    update_as_join_source(Executor::new(make().await)).await;
    sources(Executor::new(make().await)).await;
    goto(Executor::new(make().await)).await;
    queued_breakpoints(Executor::new(make().await)).await;
    thread_history(Executor::new(make().await)).await;
    copied_threads(Executor::new(make().await)).await;
    called_graphs(Executor::new(make().await)).await;
    task_errors(Executor::new(make().await)).await;
    subgraph_errors(Executor::new(make().await)).await;
}

/// A join `(p, q) -> j` paused before `j`: a state update written as `q`
/// still has `j` run next (the arrivals it fired on stand until `j`
/// runs), as LangGraph's barrier does; written as `a` (not a source), the
/// next tasks are `a`'s successors.
async fn update_as_join_source(executor: Executor) {
    let graph = ["a", "p", "q", "j"]
        .into_iter()
        .fold(Graph::new("join-update", 1), visit)
        .edge(START, "a")
        .edge("a", "p")
        .edge("a", "q")
        .join(["p", "q"], "j")
        .edge("j", END)
        .compile()
        .expect("join-update: compiles");
    let paused = executor
        .run(&graph, Track::default(), RunConfig::new().interrupt_before(["j"]))
        .await
        .expect("join-update: pauses before j");
    assert_eq!(paused.status, RunStatus::AwaitingHitl, "join-update: paused");
    let run = paused.run_id;
    let update = TrackUpdate::default().visited(vec!["q-by-hand".into()]);
    let step = executor
        .update_state(&graph, run, update, Some("q"), RunConfig::new())
        .await
        .expect("join-update: updates as q");
    let state = executor.get_state(&graph, run, None).await.expect("join-update: state");
    assert_eq!(state.step, step, "join-update: the update is the last checkpoint");
    assert_eq!(state.source, CheckpointSource::Update, "join-update: source");
    assert_eq!(state.next, ["j"], "join-update: j runs next after an update as q");
    let done = executor
        .continue_run(&graph, run, RunConfig::new())
        .await
        .expect("join-update: continues")
        .wait()
        .await
        .expect("join-update: completes");
    assert_eq!(done.status, RunStatus::Completed, "join-update: completed");
    assert_eq!(done.state.visited, ["a", "p", "q", "q-by-hand", "j"], "join-update: j ran once");

    // Written as `a`, which is no source of the join: `a`'s successors.
    let paused = executor
        .run(&graph, Track::default(), RunConfig::new().interrupt_before(["j"]))
        .await
        .expect("join-update: pauses again");
    executor
        .update_state(&graph, paused.run_id, TrackUpdate::default(), Some("a"), RunConfig::new())
        .await
        .expect("join-update: updates as a");
    let state = executor.get_state(&graph, paused.run_id, None).await.expect("state");
    assert_eq!(state.next, ["p", "q"], "join-update: after an update as a, p and q run");
}

/// Every checkpoint says what wrote it: the input (step 0), the loop, a
/// state update, a fork.
async fn sources(executor: Executor) {
    let graph = ["a", "b"]
        .into_iter()
        .fold(Graph::new("sources", 1), visit)
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
        .expect("sources: compiles");
    let paused = executor
        .run(&graph, Track::default(), RunConfig::new().interrupt_before(["b"]))
        .await
        .expect("sources: pauses");
    let run = paused.run_id;
    executor
        .update_state(
            &graph,
            run,
            TrackUpdate::default().count(5),
            Some("a"),
            RunConfig::new().by("alice"),
        )
        .await
        .expect("sources: update");
    executor
        .continue_run(&graph, run, RunConfig::new())
        .await
        .expect("sources: continues")
        .wait()
        .await
        .expect("sources: completes");
    let page = executor.state_history(&graph, run, None, 10).await.expect("sources: history");
    let seen: Vec<(u64, CheckpointSource, Option<&str>, Vec<String>)> = page
        .checkpoints
        .iter()
        .map(|(info, state)| (info.step, state.source, state.by.as_deref(), state.next.clone()))
        .collect();
    let b = || vec!["b".to_owned()];
    assert_eq!(
        seen,
        [
            (3, CheckpointSource::Loop, None, vec![]),
            (2, CheckpointSource::Update, Some("alice"), b()),
            (1, CheckpointSource::Loop, None, b()),
            (0, CheckpointSource::Input, None, vec!["a".to_owned()]),
        ],
        "sources: newest first, each with its source, who asked and next nodes"
    );
    let input = executor.get_state(&graph, run, Some(0)).await.expect("sources: step 0");
    assert_eq!(input.source, CheckpointSource::Input, "sources: a past input checkpoint");
    let fork = executor
        .fork(&graph, run, 1, None, RunConfig::new().by("bob"))
        .await
        .expect("sources: forks")
        .wait()
        .await
        .expect("sources: the fork completes");
    let first = executor.get_state(&graph, fork.run_id, Some(0)).await.expect("fork state");
    assert_eq!(first.source, CheckpointSource::Fork, "sources: a fork's first checkpoint");
    assert_eq!(first.by.as_deref(), Some("bob"), "sources: who asked for the fork");
    assert_eq!(first.next, ["b"], "sources: the fork continues where its source was");
    let after = executor.get_state(&graph, fork.run_id, Some(1)).await.expect("fork step 1");
    assert_eq!(after.source, CheckpointSource::Loop, "sources: the fork's own steps");
    assert_eq!(after.by, None, "sources: the fork's own steps name nobody");
}

/// `Executor::goto`: a run paused before `b` is sent to `c` instead, with
/// an update; `Executor::fork_as` starts a run again from a checkpoint
/// with new input, and it runs from the graph's entry.
async fn goto(executor: Executor) {
    let graph = ["a", "b", "c"]
        .into_iter()
        .fold(Graph::new("goto", 1), visit)
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", "c")
        .edge("c", END)
        .compile()
        .expect("goto: compiles");
    let paused = executor
        .run(&graph, Track::default(), RunConfig::new().interrupt_before(["b"]))
        .await
        .expect("goto: pauses");
    let run = paused.run_id;
    let unknown = executor
        .goto(&graph, run, None, &["nowhere"], RunConfig::new())
        .await
        .expect_err("goto: an unknown node");
    assert!(matches!(unknown, RunError::UnknownNode { .. }), "goto: {unknown}");
    let step = executor
        .goto(
            &graph,
            run,
            Some(TrackUpdate::default().count(10)),
            &["c"],
            RunConfig::new().by("ops"),
        )
        .await
        .expect("goto: written");
    let state = executor.get_state(&graph, run, None).await.expect("goto: state");
    assert_eq!((state.step, state.next.as_slice()), (step, ["c".to_owned()].as_slice()));
    assert_eq!((state.source, state.by.as_deref()), (CheckpointSource::Update, Some("ops")));
    assert_eq!(state.status, RunStatus::Interrupted, "goto: the run is stopped, to be continued");
    let done = executor
        .continue_run(&graph, run, RunConfig::new())
        .await
        .expect("goto: continues")
        .wait()
        .await
        .expect("goto: completes");
    assert_eq!(done.state.visited, ["a", "c"], "goto: b was skipped");
    assert_eq!(done.state.count, 12, "goto: the update, and a and c");
    let again = executor
        .fork_as(&graph, run, 1, TrackUpdate::default().count(100), Some(START), RunConfig::new())
        .await
        .expect("goto: fork_as starts")
        .wait()
        .await
        .expect("goto: fork_as completes");
    assert_eq!(again.state.visited, ["a", "a", "b", "c"], "goto: from the entry again");
    assert_eq!(again.state.count, 104);
}

/// A queued run keeps the breakpoints of its first leg for the process
/// that drives it: continued elsewhere, it pauses before `b`; an unknown
/// node is refused before anything is stored.
async fn queued_breakpoints(executor: Executor) {
    let graph = ["a", "b"]
        .into_iter()
        .fold(Graph::new("queued-breakpoints", 1), visit)
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
        .expect("queued-breakpoints: compiles");
    let unknown = executor
        .enqueue(&graph, Track::default(), RunConfig::new().interrupt_before(["zz"]))
        .await
        .expect_err("queued-breakpoints: an unknown node");
    assert!(matches!(unknown, RunError::UnknownNode { .. }), "queued-breakpoints: {unknown}");
    let run = executor
        .enqueue(&graph, Track::default(), RunConfig::new().interrupt_before(["b"]))
        .await
        .expect("queued-breakpoints: queued");
    let paused = executor
        .continue_run(&graph, run, RunConfig::new())
        .await
        .expect("queued-breakpoints: taken")
        .wait()
        .await
        .expect("queued-breakpoints: pauses");
    assert_eq!(paused.status, RunStatus::AwaitingHitl, "queued-breakpoints: before b");
    assert_eq!(paused.state.visited, ["a"]);
    let approvals = paused.interrupts.iter().map(|i| (i.id.clone(), Decision::Approve));
    let request = DecisionRequest::all(approvals).expect("queued-breakpoints: one");
    let done = match executor.resume(&graph, run, request, RunConfig::new()).await {
        Ok(Resumed::Continuing(handle)) => handle.wait().await.expect("queued-breakpoints: done"),
        _ => panic!("queued-breakpoints: the approval continues it"),
    };
    assert_eq!(done.state.visited, ["a", "b"], "queued-breakpoints: once past it, b runs");
}

/// A thread's history: every checkpoint of every run of the thread, newest
/// first, numbered continuously, paginated.
async fn thread_history(executor: Executor) {
    let graph = ["a", "b"]
        .into_iter()
        .fold(Graph::new("thread-history", 1), visit)
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
        .expect("thread-history: compiles");
    let first = executor
        .run_on_thread(&graph, "t-1", TrackUpdate::default().count(10), RunConfig::new())
        .await
        .expect("thread-history: first run");
    let second = executor
        .run_on_thread(&graph, "t-1", TrackUpdate::default().count(100), RunConfig::new())
        .await
        .expect("thread-history: second run");
    executor
        .run_on_thread(&graph, "t-other", TrackUpdate::default(), RunConfig::new())
        .await
        .expect("thread-history: another thread");
    let mut entries = Vec::new();
    let mut before = None;
    let mut pages = 0;
    loop {
        let page = executor
            .thread_history(&graph, "t-1", before, 4)
            .await
            .expect("thread-history: a page");
        assert_eq!(page.total, 6, "thread-history: two runs of three checkpoints");
        pages += 1;
        entries.extend(page.checkpoints);
        match page.next_before {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 2, "thread-history: pages of 4");
    let seen: Vec<(u64, _, u64, CheckpointSource, i64)> = entries
        .iter()
        .map(|entry| {
            (
                entry.number,
                entry.state.run,
                entry.state.step,
                entry.state.source,
                entry.state.values.count,
            )
        })
        .collect();
    let (one, two) = (first.run_id, second.run_id);
    assert_eq!(
        seen,
        [
            (5, two, 2, CheckpointSource::Loop, 114),
            (4, two, 1, CheckpointSource::Loop, 113),
            (3, two, 0, CheckpointSource::Input, 112),
            (2, one, 2, CheckpointSource::Loop, 12),
            (1, one, 1, CheckpointSource::Loop, 11),
            (0, one, 0, CheckpointSource::Input, 10),
        ],
        "thread-history: newest first across runs, numbered continuously, with the state at each"
    );
    assert_eq!(entries[2].state.next, ["a"], "thread-history: the second run's input");
    let tail = executor.thread_history(&graph, "t-1", Some(2), 10).await.expect("tail");
    let numbers: Vec<u64> = tail.checkpoints.iter().map(|entry| entry.number).collect();
    assert_eq!((numbers, tail.next_before), (vec![1, 0], None), "thread-history: before");
    let none = executor.thread_history(&graph, "t-none", None, 10).await.expect("empty");
    assert!(none.checkpoints.is_empty() && none.total == 0, "thread-history: no runs");
}

/// A thread copied whole (`Executor::copy_thread`): the copy's history
/// is the source's, checkpoint for checkpoint (state, source, next
/// nodes, times); its paused run waits for the same decision under its
/// own interrupt id and goes on apart from the source's; a thread with a
/// run in flight is refused.
async fn copied_threads(executor: Executor) {
    let graph = ["a"]
        .into_iter()
        .fold(Graph::new("copied", 1), visit)
        .node("ask", |_s: Arc<Track>, ctx: NodeContext| async move {
            let decision = ctx.interrupt(Interrupt::new("approval", json!({"q": "go?"})))?;
            let note = if decision == Decision::Approve { "approved" } else { "refused" };
            Ok(TrackUpdate::default().visited(vec![note.to_owned()]))
        })
        .edge(START, "a")
        .edge("a", "ask")
        .edge("ask", END)
        .compile()
        .expect("copy: compiles");
    let approve = |outcome: &tollgate_engine::RunOutcome<Track>| {
        let approvals = outcome.interrupts.iter().map(|i| (i.id.clone(), Decision::Approve));
        DecisionRequest::all(approvals).expect("copy: one interrupt")
    };
    let first = executor
        .run_on_thread(&graph, "t-src", TrackUpdate::default().count(10), RunConfig::new())
        .await
        .expect("copy: first run pauses");
    match executor.resume_run(&graph, first.run_id, approve(&first), RunConfig::new()).await {
        Ok(Resumed::Continuing(done)) => assert_eq!(done.status, RunStatus::Completed),
        _ => panic!("copy: the first run goes on"),
    }
    let second = executor
        .run_on_thread(&graph, "t-src", TrackUpdate::default().count(100), RunConfig::new())
        .await
        .expect("copy: second run pauses");
    assert_eq!(second.status, RunStatus::AwaitingHitl, "copy: the source's latest waits");

    let copies = executor.copy_thread("t-src", "t-copy").await.expect("copy: copied");
    assert_eq!(copies.len(), 2, "copy: one run for each");
    let shown = |page: tollgate_engine::ThreadHistoryPage<Track>| {
        page.checkpoints
            .into_iter()
            .map(|entry| {
                let state = entry.state;
                let values = (state.values.count, state.values.visited);
                (entry.number, state.step, state.source, values, state.next, entry.info.at_ms)
            })
            .collect::<Vec<_>>()
    };
    let source = executor.thread_history(&graph, "t-src", None, 100).await.expect("source");
    let copy = executor.thread_history(&graph, "t-copy", None, 100).await.expect("copy");
    let runs: Vec<_> = copy.checkpoints.iter().map(|entry| entry.state.run).collect();
    assert_eq!(source.total, copy.total, "copy: as many checkpoints");
    assert_eq!(shown(source), shown(copy), "copy: the same history, checkpoint for checkpoint");
    assert!(runs.iter().all(|run| copies.contains(run)), "copy: every checkpoint is the copy's");

    // The copy's paused run asks the same, under its own id, and goes on alone.
    let paused = executor.get_state(&graph, copies[1], None).await.expect("copy: state");
    assert_eq!(paused.status, RunStatus::AwaitingHitl, "copy: paused as the source");
    assert_eq!(paused.interrupts.len(), 1, "copy: the open interrupt");
    let asked = &paused.interrupts[0];
    assert!(asked.id.starts_with(&copies[1].to_string()), "copy: its own id: {}", asked.id);
    let request = DecisionRequest::new(Decision::Approve);
    match executor.resume_run(&graph, copies[1], request, RunConfig::new()).await {
        Ok(Resumed::Continuing(done)) => {
            assert_eq!(done.status, RunStatus::Completed, "copy: the copy completes");
            assert_eq!(done.state.visited, ["a", "approved", "a", "approved"]);
        }
        _ => panic!("copy: the copy's run goes on"),
    }
    let left = executor.get_state(&graph, second.run_id, None).await.expect("copy: source");
    assert_eq!(left.status, RunStatus::AwaitingHitl, "copy: the source still waits");
    assert_eq!(left.values.visited, ["a", "approved", "a"], "copy: the source is unchanged");

    // A thread with a run in flight: refused.
    executor
        .enqueue_on_thread(&graph, "t-busy", TrackUpdate::default(), RunConfig::new())
        .await
        .expect("copy: queued");
    let busy = executor.copy_thread("t-busy", "t-busy-copy").await.expect_err("copy: busy");
    assert!(
        matches!(busy, RunError::Store(tollgate_checkpoint::StoreError::ThreadBusy { .. })),
        "copy: {busy}"
    );
}

/// A node calls a compiled graph from its own code: an interrupt inside
/// the child pauses the run, the state shows the child nested under the
/// calling task; on resume the node runs again, a finished call returns
/// its stored result without running, the paused one continues inside
/// (its finished steps not run again), and the call returns the child's
/// final state.
async fn called_graphs(executor: Executor) {
    let searches = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&searches);
    let child = Graph::new("research", 1)
        .node("search", move |_s: Arc<Track>, _ctx| {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(TrackUpdate::default().visited(vec!["search".into()]).count(1))
            }
        })
        .node("ask", |_s: Arc<Track>, ctx: NodeContext| async move {
            let decision = ctx.interrupt(Interrupt::new("approval", json!({"found": 1})))?;
            let note = if decision == Decision::Approve { "approved" } else { "refused" };
            Ok(TrackUpdate::default().visited(vec![note.to_owned()]))
        })
        .edge(START, "search")
        .edge("search", "ask")
        .edge("ask", END)
        .compile()
        .expect("calls: the child compiles");
    let quick = ["note"]
        .into_iter()
        .fold(Graph::new("quick", 1), visit)
        .edge(START, "note")
        .edge("note", END)
        .compile()
        .expect("calls: the quick child compiles");
    let plans = Arc::new(AtomicU32::new(0));
    let plan_counter = Arc::clone(&plans);
    let graph = Graph::new("caller", 1)
        .node("plan", move |_s: Arc<Track>, ctx: NodeContext| {
            let (child, quick, plans) = (child.clone(), quick.clone(), Arc::clone(&plan_counter));
            async move {
                plans.fetch_add(1, Ordering::SeqCst);
                let first = ctx.call(&quick, Track::default()).await?;
                let found = ctx.call(&child, Track { count: 100, ..Track::default() }).await?;
                let mut visited = first.visited;
                visited.extend(found.visited);
                Ok(TrackUpdate::default().visited(visited).count(found.count))
            }
        })
        .edge(START, "plan")
        .edge("plan", END)
        .compile()
        .expect("calls: compiles");
    let paused =
        executor.run(&graph, Track::default(), RunConfig::new()).await.expect("calls: pauses");
    assert_eq!(paused.status, RunStatus::AwaitingHitl, "calls: the child's interrupt pauses");
    assert_eq!(paused.interrupts.len(), 1, "calls: one interrupt");
    let run = paused.run_id;
    let state = executor.get_state(&graph, run, None).await.expect("calls: state");
    assert_eq!(state.next, ["plan"], "calls: plan is in flight");
    let task = &state.tasks[0];
    assert_eq!(task.interrupts.len(), 1, "calls: the child's interrupt is the task's");
    let namespaces: Vec<&str> = task.nested.iter().map(|n| n.namespace.as_str()).collect();
    assert_eq!(namespaces, ["plan:1.0~0", "plan:1.0~1"], "calls: both calls, by number");
    let (done, open) = (&task.nested[0], &task.nested[1]);
    assert!(done.next.is_empty(), "calls: the first call finished");
    assert_eq!(open.graph.as_deref(), Some("research"), "calls: the called graph");
    assert_eq!(open.next, ["ask"], "calls: the child waits at ask");
    assert_eq!(open.values["visited"], json!(["search"]), "calls: the child's state");
    assert_eq!(open.values["count"], json!(101), "calls: the child's input went through");
    assert_eq!(open.tasks[0].id, "plan:1.0~1/ask:2.0", "calls: the child's task id");
    assert_eq!(open.tasks[0].interrupts.len(), 1, "calls: the interrupt under the child task");

    // Decided from another executor on the same store (another process).
    let other = Executor::with_store(Arc::clone(executor.store()));
    let resumed = other
        .resume_run(&graph, run, DecisionRequest::new(Decision::Approve), RunConfig::new())
        .await
        .expect("calls: resumes");
    let Resumed::Continuing(done) = resumed else { panic!("calls: the run continues") };
    assert_eq!(done.status, RunStatus::Completed, "calls: completes");
    assert_eq!(done.state.visited, ["note", "search", "approved"], "calls: the calls' results");
    assert_eq!(done.state.count, 101, "calls: the child's final state is returned");
    assert_eq!(searches.load(Ordering::SeqCst), 1, "calls: the child's finished step ran once");
    assert_eq!(plans.load(Ordering::SeqCst), 2, "calls: the node ran again from its start");
}

/// A failed step's tasks: the failed one with its class and message, the
/// finished sibling with the update it wrote.
async fn task_errors(executor: Executor) {
    let graph = visit(Graph::new("task-errors", 1), "ok")
        .node("quota", |_s: Arc<Track>, _ctx| async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Err::<TrackUpdate, _>(NodeError::fatal("the quota is spent").with_class("quota"))
        })
        .edge(START, "ok")
        .edge(START, "quota")
        .edge("ok", END)
        .edge("quota", END)
        .compile()
        .expect("task-errors: compiles");
    let failed = executor.run(&graph, Track::default(), RunConfig::new()).await;
    assert!(matches!(failed, Err(RunError::NodeFailed { .. })), "task-errors: fails");
    let run = executor.store().list_runs(&Default::default(), &Default::default()).await;
    let run = run.expect("task-errors: lists").runs[0].id;
    let state = executor.get_state(&graph, run, None).await.expect("task-errors: state");
    assert_eq!(state.status, RunStatus::Failed, "task-errors: status");
    assert_eq!(state.next, ["ok", "quota"], "task-errors: the step in flight");
    let (ok, quota) = (&state.tasks[0], &state.tasks[1]);
    assert_eq!(ok.error, None, "task-errors: the sibling did not fail");
    assert_eq!(
        ok.writes,
        Some(json!({"visited": ["ok"], "count": 1})),
        "task-errors: the finished sibling's update"
    );
    let error = quota.error.as_ref().expect("task-errors: the failed task's error");
    assert_eq!(error.class, "quota", "task-errors: class");
    assert!(error.message.contains("the quota is spent"), "task-errors: {}", error.message);
    assert_eq!(quota.writes, None, "task-errors: the failed task wrote nothing");
}

/// A failure inside a subgraph keeps the inner error's class, in the run's
/// failure and in the failed task's error.
async fn subgraph_errors(executor: Executor) {
    let inner = visit(Graph::new("inner-fails", 1), "quote")
        .node("charge", |_s: Arc<Track>, _ctx| async move {
            Err::<TrackUpdate, _>(NodeError::fatal("card declined").with_class("payment"))
        })
        .edge(START, "quote")
        .edge("quote", "charge")
        .edge("charge", END)
        .compile()
        .expect("subgraph-errors: inner compiles");
    let graph = Graph::new("outer-fails", 1)
        .subgraph(
            "pay",
            inner,
            |_: &Track, _| Ok(Track::default()),
            |_: &Track, _: Track| Ok(TrackUpdate::default()),
        )
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
        .expect("subgraph-errors: compiles");
    let failed = executor.run(&graph, Track::default(), RunConfig::new()).await;
    let Err(error) = failed else { panic!("subgraph-errors: fails") };
    assert_eq!(error.class(), "payment", "subgraph-errors: the run's class is the inner one");
    let run = executor.store().list_runs(&Default::default(), &Default::default()).await;
    let run = run.expect("subgraph-errors: lists").runs[0].id;
    let record = executor.store().run(run).await.expect("subgraph-errors: record");
    let failure = record.failure.expect("subgraph-errors: a failure is stored");
    assert_eq!(failure.class.as_deref(), Some("payment"), "subgraph-errors: stored class");
    let state = executor.get_state(&graph, run, None).await.expect("subgraph-errors: state");
    let task = state.tasks[0].error.as_ref().expect("subgraph-errors: the task's error");
    assert_eq!(task.class, "payment", "subgraph-errors: the task's class");
    assert!(task.message.contains("card declined"), "subgraph-errors: {}", task.message);
    let nested = &state.tasks[0].nested;
    assert_eq!(nested.len(), 1, "subgraph-errors: the subgraph's progress is shown");
    assert_eq!(nested[0].namespace, "pay:1.0", "subgraph-errors: its namespace");
    assert_eq!(nested[0].next, ["charge"], "subgraph-errors: where it stopped");
    assert_eq!(nested[0].values["visited"], json!(["quote"]), "subgraph-errors: its state");
}
