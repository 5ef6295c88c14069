//! The SQLite store against the reference store (`MemoryStore`): random
//! sequences of store calls on a few runs, some of them through a second
//! connection to the same file, some stale or out of order, get the same
//! answers and leave the same runs and event logs. The SQLite commit path
//! keeps each run's writer state in memory between commits; this checks
//! that doing so never changes an answer.

use proptest::prelude::*;
use tollgate::RunStore;
use tollgate::{MemoryStore, Owner, RunId, RunStatus, SqliteStore, Store, StoreError};
use tollgate_checkpoint::{
    Answer, Codec, DecisionWrite, EventRecord, GraphRef, InterruptRecord, NewRun, StepRecord,
    TaskKey, TaskUpdate, TaskWrite, Transition,
};

/// Runs the sequences work on.
const RUNS: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Create,
    /// A transition: with a step or not, running, or now and then paused
    /// at an interrupt or completed, with 0-2 events; `skew` moves its
    /// step off the next one.
    Commit {
        with_step: bool,
        end: u8,
        events: u8,
        skew: i8,
    },
    Pending,
    Claim,
    Decide,
    Delete,
}

#[derive(Debug, Clone)]
struct Call {
    run: usize,
    op: Op,
    /// Through the second connection.
    other: bool,
    /// With an epoch other than the run's.
    stale: bool,
}

fn call() -> impl Strategy<Value = Call> {
    let commit =
        (any::<bool>(), 0u8..6, 0u8..3, prop_oneof![8 => Just(0i8), 1 => Just(-1), 1 => Just(1)])
            .prop_map(|(with_step, end, events, skew)| Op::Commit { with_step, end, events, skew });
    let op = prop_oneof![
        1 => Just(Op::Create),
        12 => commit,
        1 => Just(Op::Pending),
        2 => Just(Op::Claim),
        3 => Just(Op::Decide),
        1 => Just(Op::Delete),
    ];
    (0..RUNS, op, prop::bool::weighted(0.3), prop::bool::weighted(0.15))
        .prop_map(|(run, op, other, stale)| Call { run, op, other, stale })
}

fn blob(value: u64) -> tollgate::Blob {
    Codec::Json.encode(&value, 1).expect("encode")
}

/// Event lines as the engine writes them (the head the store leaves out,
/// and times that repeat).
fn lines(run: RunId, first: u64, count: u64) -> Vec<EventRecord> {
    (first..first + count)
        .map(|seq| EventRecord {
            seq,
            json: format!(
                "{{\"v\":1,\"run_id\":\"{run}\",\"seq\":{seq},\"ts\":\"t{}\",\"event_type\":\"x\"}}",
                seq / 2
            ),
        })
        .collect()
}

/// What one call returned, comparable across stores: the value, or the
/// kind of error.
fn answer<T: std::fmt::Debug>(result: &Result<T, StoreError>) -> String {
    match result {
        Ok(value) => format!("ok {value:?}"),
        Err(error) => {
            let text = format!("{error:?}");
            let kind = text.split([' ', '(', '{']).next().unwrap_or_default().to_owned();
            format!("err {kind}")
        }
    }
}

/// The parts of a run both stores must agree on.
async fn state(store: &dyn Store, run: RunId) -> String {
    match store.run(run).await {
        Ok(r) => format!("{:?} epoch {} step {} seq {}", r.status, r.epoch, r.step, r.last_seq),
        Err(error) => answer::<()>(&Err(error)),
    }
}

/// Builds the call for `store`'s view of the run (the reference's, so
/// that both stores get the same call) and makes it.
async fn make(
    store: &dyn Store,
    reference: &MemoryStore,
    run: RunId,
    call: &Call,
    tick: u64,
) -> String {
    let known = reference.run(run).await.ok();
    let epoch = known.as_ref().map_or(1, |r| r.epoch);
    let epoch = match (call.stale, epoch) {
        (false, epoch) => epoch,
        (true, 1) => 2,
        (true, epoch) => epoch - 1,
    };
    let next = known.as_ref().map_or(1, |r| r.step + 1);
    let seq = known.as_ref().map_or(1, |r| r.last_seq + 1);
    let lease = Some(i64::MAX / 2);
    match &call.op {
        Op::Create => {
            let new = NewRun {
                id: run,
                graph: GraphRef { name: "g".into(), version: 1 },
                thread: None,
                created_at_ms: 1,
                snapshot: blob(0),
                frontier: blob(0),
                events: lines(run, 1, 1),
                claim: Some((Owner::current(), i64::MAX / 2)),
                attachment: None,
                thread_turn: None,
                trace: None,
            };
            answer(&store.create_run(new).await)
        }
        Op::Commit { with_step, end, events, skew } => {
            let number = next.saturating_add_signed(i64::from(*skew));
            let step = with_step.then(|| StepRecord {
                step: number,
                updates: vec![TaskUpdate {
                    task: TaskKey { step: number, index: 0, node: "n".into() },
                    update: blob(number),
                }],
                snapshot: None,
                frontier: blob(number),
            });
            let (status, interrupts) = match end {
                0 | 1 => (RunStatus::AwaitingHitl, vec![interrupt(run, next, tick)]),
                2 => (RunStatus::Completed, Vec::new()),
                _ => (RunStatus::Running, Vec::new()),
            };
            let transition = Transition {
                run,
                epoch,
                step,
                status,
                failure: None,
                events: lines(run, seq, u64::from(*events)),
                at_ms: 10 + tick as i64,
                lease_until_ms: lease,
                interrupts,
            };
            answer(&store.commit(transition).await)
        }
        Op::Pending => {
            let task = TaskKey { step: next, index: 1, node: "m".into() };
            let updates = vec![TaskUpdate { task, update: blob(tick) }];
            answer(&store.put_task_writes(TaskWrite { run, epoch, updates }).await)
        }
        Op::Claim => answer(&store.claim(run, epoch, Owner::current(), i64::MAX / 2).await),
        Op::Decide => {
            let open = reference.interrupts(run).await.unwrap_or_default();
            let id = open
                .iter()
                .find(|i| i.decision.is_none())
                .map_or_else(|| format!("{run}.0.0.0"), |i| i.id.clone());
            let write = DecisionWrite {
                run,
                expected_epoch: epoch,
                answers: vec![Answer { interrupt: id, decision: serde_json::json!("approve") }],
                status: RunStatus::Queued,
                events: lines(run, seq, 1),
                failure: None,
                at_ms: 10 + tick as i64,
                claim: Some((Owner::current(), i64::MAX / 2)),
            };
            answer(&store.decide(write).await)
        }
        Op::Delete => answer(&store.delete_run(run).await),
    }
}

fn interrupt(run: RunId, step: u64, tick: u64) -> InterruptRecord {
    InterruptRecord {
        id: format!("{run}.{step}.0.{tick}"),
        step,
        task: 0,
        ordinal: tick as u32,
        node: "n".into(),
        kind: "approval".into(),
        payload: serde_json::json!({}),
        decisions: vec!["approve".into()],
        schema: None,
        rejection_routed: false,
        decision: None,
        raised_at_ms: 7,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn sqlite_answers_every_call_as_the_reference_does(
        calls in proptest::collection::vec(call(), 1..80)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let reference = MemoryStore::new();
            let mine = SqliteStore::open(&path).unwrap();
            let other = SqliteStore::open(&path).unwrap();
            let runs: Vec<RunId> = (0..RUNS).map(|_| RunId::new()).collect();
            // Every run exists at first (a call may delete and create it
            // again), one of them created through the other connection.
            let creates = (0..RUNS).map(|run| Call { run, op: Op::Create, other: run == 1, stale: false });
            for (tick, call) in creates.chain(calls.iter().cloned()).enumerate() {
                let mut run = runs[call.run];
                if matches!(call.op, Op::Decide) {
                    // A decision goes to a paused run when there is one.
                    for &candidate in &runs {
                        let paused = reference.run(candidate).await.map(|r| r.status);
                        if matches!(paused, Ok(RunStatus::AwaitingHitl)) {
                            run = candidate;
                            break;
                        }
                    }
                }
                let sqlite: &dyn Store = if call.other { &other } else { &mine };
                let got = make(sqlite, &reference, run, &call, tick as u64).await;
                let expected = make(&reference, &reference, run, &call, tick as u64).await;
                prop_assert_eq!(&got, &expected, "call {} {:?}", tick, call);
                for &run in &runs {
                    prop_assert_eq!(state(&mine, run).await, state(&reference, run).await);
                }
            }
            for &run in &runs {
                let got = mine.events(run, 0, u64::MAX).await.map(|e| e.into_iter().map(|e| e.json).collect::<Vec<_>>());
                let expected = reference.events(run, 0, u64::MAX).await.map(|e| e.into_iter().map(|e| e.json).collect::<Vec<_>>());
                prop_assert_eq!(answer(&got), answer(&expected));
                let got = mine.checkpoint(run, None).await.map(|c| (c.deltas.len(), c.pending.len()));
                let expected = reference.checkpoint(run, None).await.map(|c| (c.deltas.len(), c.pending.len()));
                prop_assert_eq!(answer(&got), answer(&expected));
            }
            Ok(())
        })?;
    }
}
