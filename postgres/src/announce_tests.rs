//! Status changes announced after their commits, on a real server
//! (`TOLLGATE_PG_URL`).

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::time::Duration;

use tollgate_checkpoint::{
    Answer, DecisionWrite, EventRecord, InterruptRecord, Owner, RunId, RunStatus, Store, Transition,
};
use tollgate_testkit::postgres_url;

use crate::commit::tests::{fresh_store, raw, running_run, runtime};

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

/// A pause, a decision, a claim, a takeover and an end each name their
/// run once committed, and the run's new status is visible when the name
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
        // Waits for `run` to be named (other tests' runs share the
        // database's channel), and reads its status then.
        let mut named = async |what: &str| loop {
            let change = tokio::time::timeout(Duration::from_secs(10), changes.recv()).await;
            let change = change.unwrap_or_else(|_| panic!("{what}: not named in 10 s"));
            if change.expect("the listener is alive") == Some(run) {
                return store.run(run).await.unwrap().status;
            }
        };
        let mut pause = change(run, 1, RunStatus::AwaitingHitl, 2);
        pause.interrupts = vec![InterruptRecord {
            id: format!("{run}.1.0.0"),
            step: 1,
            task: 0,
            ordinal: 0,
            node: "gate".into(),
            kind: "approval".into(),
            payload: serde_json::json!({}),
            decisions: vec!["approve".into()],
            schema: None,
            rejection_routed: false,
            decision: None,
            raised_at_ms: 2,
        }];
        store.commit(pause).await.unwrap();
        assert_eq!(named("paused").await, RunStatus::AwaitingHitl);
        let decision = DecisionWrite {
            run,
            expected_epoch: 1,
            answers: vec![Answer {
                interrupt: format!("{run}.1.0.0"),
                decision: serde_json::json!({"decision": "approve"}),
            }],
            status: RunStatus::Queued,
            events: vec![EventRecord { seq: 3, json: "{}".into() }],
            failure: None,
            at_ms: 3,
            claim: None,
        };
        let epoch = store.decide(decision).await.unwrap();
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
