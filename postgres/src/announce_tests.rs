//! Status changes and commits of watched runs announced after their
//! commits, on a real server (`TOLLGATE_PG_URL`).

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::time::Duration;

use tollgate_checkpoint::{
    Answer, DecisionWrite, EventRecord, InterruptRecord, Owner, RunId, RunStatus, RunStore,
    TaskKey, TaskProgress, TaskUpdate, Transition,
};
use tollgate_testkit::postgres_url;

use crate::commit::tests::{
    commit_in_one_call, create_running, fresh_store, number, raw, running_run, runtime, step,
};
use crate::PostgresStore;

/// A transition of `run` by `epoch` to `status`, its one event `seq`.
fn change(run: RunId, epoch: u64, status: RunStatus, seq: u64) -> Transition {
    Transition {
        run,
        epoch,
        step: None,
        status,
        failure: None,
        events: vec![EventRecord { seq, json: "{}".into() }],
        at_ms: seq as i64,
        lease_until_ms: None,
        interrupts: Vec::new(),
    }
}

/// `run`, by `epoch`, paused at step `step` on one interrupt, its one
/// event `seq`.
fn pause(run: RunId, epoch: u64, step: u64, seq: u64) -> Transition {
    let mut pause = change(run, epoch, RunStatus::AwaitingHitl, seq);
    pause.interrupts = vec![InterruptRecord {
        id: format!("{run}.{step}.0.0"),
        step,
        task: 0,
        ordinal: 0,
        node: "gate".into(),
        kind: "approval".into(),
        payload: serde_json::json!({}),
        decisions: vec!["approve".into()],
        schema: None,
        rejection_routed: false,
        decision: None,
        raised_at_ms: seq as i64,
    }];
    pause
}

/// The approval of [`pause`]'s interrupt, which leaves `run` queued, its
/// one event `seq`.
fn decision(run: RunId, epoch: u64, step: u64, seq: u64) -> DecisionWrite {
    DecisionWrite {
        run,
        expected_epoch: epoch,
        answers: vec![Answer {
            interrupt: format!("{run}.{step}.0.0"),
            decision: serde_json::json!({"decision": "approve"}),
        }],
        status: RunStatus::Queued,
        events: vec![EventRecord { seq, json: "{}".into() }],
        failure: None,
        at_ms: seq as i64,
        claim: None,
    }
}

/// A write refused names nothing; a pause, a decision, a claim, a
/// takeover and an end each name their run once committed, and the run's new status is visible when the name
/// arrives; no function of the schema notifies `tollgate_runs` inside its
/// transaction (PostgreSQL serialises the commits of transactions that
/// notify, their WAL flushes included).
#[test]
fn status_changes_are_announced_after_their_commits() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let (store, schema) = fresh_store(&url, 4).await;
        let mut changes = store.run_changes();
        // `None` once listening: what is announced from then on is heard.
        let listening = tokio::time::timeout(Duration::from_secs(10), changes.recv()).await;
        assert_eq!(listening.expect("listening within 10 s").unwrap(), None);
        let run = running_run(&store).await;
        // A write refused (a stale epoch) announces nothing: its
        // announcement, pipelined behind it, finds the run still running.
        assert!(store.commit(pause(run, 7, 1, 2)).await.is_err(), "a stale epoch is refused");
        let heard = tokio::time::timeout(Duration::from_millis(500), async {
            while changes.recv().await.expect("the listener is alive") != Some(run) {}
        });
        assert!(heard.await.is_err(), "a refused write was announced");
        // Waits for `run` to be named (other tests' runs share the
        // database's channel), and reads its status then.
        let mut named = async |what: &str| loop {
            let change = tokio::time::timeout(Duration::from_secs(10), changes.recv()).await;
            let change = change.unwrap_or_else(|_| panic!("{what}: not named in 10 s"));
            if change.expect("the listener is alive") == Some(run) {
                return store.run(run).await.unwrap().status;
            }
        };
        store.commit(pause(run, 1, 1, 2)).await.unwrap();
        assert_eq!(named("paused").await, RunStatus::AwaitingHitl);
        let epoch = store.decide(decision(run, 1, 1, 3)).await.unwrap();
        assert_eq!(named("decided").await, RunStatus::Queued);
        let epoch = store.claim(run, epoch, Owner::current(), i64::MAX).await.unwrap();
        assert_eq!(named("claimed").await, RunStatus::Running);
        let epoch = store.claim(run, epoch, Owner::current(), i64::MAX).await.unwrap();
        assert_eq!(named("taken over").await, RunStatus::Running);
        store.commit(change(run, epoch, RunStatus::Completed, 4)).await.unwrap();
        assert_eq!(named("ended").await, RunStatus::Completed);
        let sql = format!(
            "SELECT count(*) FROM pg_proc WHERE prosrc LIKE '%tollgate_runs%' \
             AND pronamespace = '{schema}'::regnamespace"
        );
        let notifying: i64 = raw(&url).await.query_one(&sql, &[]).await.unwrap().get(0);
        assert_eq!(notifying, 0, "a function notifies tollgate_runs inside its transaction");
    });
}

/// Each write of a watched run names it on `tollgate_events` once it has
/// committed, with what it wrote readable then: its creation (watched
/// before it existed: `watch` takes any id), a task's progress, a step
/// alone and one in a group call, a pause and a decision. No write of a
/// run nobody watches names it. Nothing of the schema (no function, no
/// trigger) notifies inside a write's transaction.
#[test]
fn commits_of_watched_runs_are_announced_after_them() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let (store, schema) = fresh_store(&url, 4).await;
        let mut named = store.event_changes();
        let listening = tokio::time::timeout(Duration::from_secs(10), named.recv()).await;
        assert_eq!(listening.expect("listening within 10 s").unwrap(), None);
        let (run, quiet) = (RunId::new(), RunId::new());
        store.watch(run, Duration::from_secs(60)).await.unwrap();
        // Each write is made for `quiet` first: had it been announced, its
        // name would come before `run`'s.
        let mut next = async |what: &str| loop {
            let name = tokio::time::timeout(Duration::from_secs(10), named.recv()).await;
            let name = name.unwrap_or_else(|_| panic!("{what}: not named in 10 s"));
            match name.expect("the listener is alive") {
                Some(named) if named == quiet => panic!("{what}: a run nobody watches named"),
                Some(named) if named == run => return last_seq(&store, run).await,
                _ => {}
            }
        };
        for each in [quiet, run] {
            create_running(&store, each).await;
        }
        assert_eq!(next("created").await, 1);
        for each in [quiet, run] {
            store.put_task_progress(progress(each, 2)).await.unwrap();
        }
        assert_eq!(next("progress").await, 2);
        for each in [quiet, run] {
            store.commit(step(each, 1, 1, 3)).await.unwrap();
        }
        assert_eq!(next("a step alone").await, 3);
        commit_in_one_call(&store, vec![step(quiet, 1, 2, 4), step(run, 1, 2, 4)]).await;
        assert_eq!(next("a step in a call").await, 4);
        for each in [quiet, run] {
            store.commit(pause(each, 1, 3, 5)).await.unwrap();
        }
        assert_eq!(next("paused").await, 5);
        for each in [quiet, run] {
            store.decide(decision(each, 1, 3, 6)).await.unwrap();
        }
        assert_eq!(next("decided").await, 6);
        let in_schema = format!("pronamespace = '{schema}'::regnamespace");
        let notifying =
            format!("SELECT count(*) FROM pg_proc WHERE prosrc LIKE '%pg_notify%' AND {in_schema}");
        let client = raw(&url).await;
        let notifying: i64 = client.query_one(&notifying, &[]).await.unwrap().get(0);
        assert_eq!(notifying, 0, "a function notifies inside its transaction");
        // (The outbox's gates are opened by triggers that fire only when a
        // run settles, and a thread's status follows its latest run by
        // triggers that fire when a run is inserted, deleted or changes
        // status; they notify nothing: not the kind this looks for.)
        let triggers = format!(
            "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
             WHERE NOT t.tgisinternal AND c.relnamespace = '{schema}'::regnamespace \
             AND t.tgname NOT LIKE 'outbox_gates_open_%' AND t.tgname NOT LIKE 'threads_%'"
        );
        let triggers: i64 = client.query_one(&triggers, &[]).await.unwrap().get(0);
        assert_eq!(triggers, 0, "a trigger is left on the schema's tables");
    });
}

/// The last event number of `run` as stored.
async fn last_seq(store: &PostgresStore, run: RunId) -> u64 {
    store.run(run).await.unwrap().last_seq
}

/// Progress of task 0 of step 1 of `run` (epoch 1), its one event `seq`.
fn progress(run: RunId, seq: u64) -> TaskProgress {
    let task = TaskKey { step: 1, index: 0, node: "n".into() };
    TaskProgress {
        run,
        epoch: 1,
        progress: TaskUpdate { task, update: number(0) },
        events: vec![EventRecord { seq, json: "{}".into() }],
    }
}
