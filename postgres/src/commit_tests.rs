//! Group commit on a real server (`TOLLGATE_PG_URL`, as in
//! `tests/postgres.rs`): calls built by hand, to put refused and accepted
//! steps in one call, and runs committing at once through the store.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio_postgres::NoTls;
use tollgate_checkpoint::{
    Codec, EventRecord, GraphRef, NewRun, Owner, RunId, RunStatus, RunStore, StepRecord,
    StoreError, TaskKey, TaskUpdate, TaskWrite, Transition,
};

use tollgate_testkit::postgres_url;

use super::Queued;
use crate::{PostgresOptions, PostgresStore};

/// A store in a schema of its own, and that schema's name.
pub(crate) async fn fresh_store(url: &str, pool_size: usize) -> (PostgresStore, String) {
    let schema = format!("t{}", ulid::Ulid::new().to_string().to_lowercase());
    let options = PostgresOptions::default().with_schema(schema.clone()).with_pool_size(pool_size);
    (PostgresStore::connect_with(url, options).await.unwrap(), schema)
}

pub(crate) async fn raw(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

pub(crate) fn number(n: u64) -> tollgate_checkpoint::Blob {
    Codec::Json.encode(&n, 1).unwrap()
}

/// A frontier long enough to be worth a reference, one of two.
fn parity(n: u64) -> tollgate_checkpoint::Blob {
    Codec::Json.encode(&format!("{:>40}", n % 2), 1).unwrap()
}

/// A running run (epoch 1, step 0, one event) of this process.
pub(crate) async fn running_run(store: &PostgresStore) -> RunId {
    let run = RunId::new();
    create_running(store, run).await;
    run
}

/// Creates `run` running (epoch 1, step 0, event 1).
pub(crate) async fn create_running(store: &PostgresStore, run: RunId) {
    store
        .create_run(NewRun {
            id: run,
            graph: GraphRef { name: "g".into(), version: 1 },
            thread: None,
            created_at_ms: 1,
            snapshot: number(0),
            frontier: number(0),
            events: vec![EventRecord { seq: 1, json: "{}".into() }],
            claim: Some((Owner::current(), i64::MAX)),
            attachment: None,
            thread_turn: None,
            trace: None,
        })
        .await
        .unwrap();
}

/// Step `step` of `run` written by `epoch`, its update the step's number
/// and its events numbered from `first_seq`.
pub(crate) fn step(run: RunId, epoch: u64, step: u64, first_seq: u64) -> Transition {
    let update =
        TaskUpdate { task: TaskKey { step, index: 0, node: "n".into() }, update: number(step) };
    Transition {
        run,
        epoch,
        step: Some(StepRecord {
            step,
            updates: vec![update],
            snapshot: None,
            frontier: number(step),
        }),
        status: RunStatus::Running,
        failure: None,
        events: vec![EventRecord { seq: first_seq, json: "{}".into() }],
        at_ms: 2,
        lease_until_ms: Some(i64::MAX),
        interrupts: Vec::new(),
    }
}

/// `transition` queued, and where its answer comes.
fn queued(transition: Transition) -> (Queued, oneshot::Receiver<Result<(), StoreError>>) {
    let mut transition = transition;
    let step = transition.step.take().unwrap();
    let (reply, answer) = oneshot::channel();
    let first_seq = transition.events[0].seq as i64;
    let count = transition.events.len() as i32;
    (Queued { transition, step, first_seq, count, bytes: 0, reply }, answer)
}

/// Commits `transitions` (steps of running runs) in one call of `store`'s
/// committer; each must commit.
pub(crate) async fn commit_in_one_call(store: &PostgresStore, transitions: Vec<Transition>) {
    let (batch, answers): (Vec<_>, Vec<_>) = transitions.into_iter().map(queued).unzip();
    store.commits.writer.many(batch).await;
    for answer in answers {
        answer.await.unwrap().unwrap();
    }
}

/// The transaction ids that wrote the steps rows of `runs` at `step`.
async fn writers_of(
    client: &tokio_postgres::Client,
    schema: &str,
    runs: &[RunId],
    step: i64,
) -> Vec<String> {
    let ids: Vec<String> = runs.iter().map(RunId::to_string).collect();
    let sql = format!(
        "SELECT xmin::text FROM {schema}.steps WHERE run = ANY($1) AND step = $2 ORDER BY run"
    );
    client.query(&sql, &[&ids, &step]).await.unwrap().iter().map(|row| row.get(0)).collect()
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// One call holding steps that pass and steps whose writers are refused:
/// the passing ones commit together, in one transaction, with their
/// snapshot, updates and cleared pending writes; each refused one wrote
/// nothing and gets the error a lone commit gets.
#[test]
fn a_call_commits_the_steps_that_pass_and_each_refused_one_says_why() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let (store, schema) = fresh_store(&url, 4).await;
        let mut runs = Vec::new();
        for _ in 0..5 {
            runs.push(running_run(&store).await);
        }
        let [ok, fenced, ahead, gap, snapshotted] = runs[..] else { unreachable!() };
        // A pending write of the step about to commit, which the commit
        // clears.
        let pending =
            TaskUpdate { task: TaskKey { step: 1, index: 1, node: "m".into() }, update: number(7) };
        let write = TaskWrite { run: snapshotted, epoch: 1, updates: vec![pending] };
        store.put_task_writes(write).await.unwrap();
        assert_eq!(store.checkpoint(snapshotted, None).await.unwrap().pending.len(), 1);
        let mut with_snapshot = step(snapshotted, 1, 1, 2);
        if let Some(record) = with_snapshot.step.as_mut() {
            record.snapshot = Some(number(100));
        }
        let transitions = [
            step(ok, 1, 1, 2),
            step(fenced, 2, 1, 2),
            step(ahead, 1, 2, 2),
            step(gap, 1, 1, 3),
            with_snapshot,
        ];
        let (batch, answers): (Vec<_>, Vec<_>) = transitions.into_iter().map(queued).unzip();
        store.commits.writer.many(batch).await;
        let mut results = Vec::new();
        for answer in answers {
            results.push(answer.await.unwrap());
        }
        assert!(results[0].is_ok(), "{results:?}");
        assert!(
            matches!(results[1], Err(StoreError::Fenced { writer: 2, current: 1, .. })),
            "{results:?}"
        );
        assert!(
            matches!(results[2], Err(StoreError::StepOutOfOrder { current: 0, found: 2, .. })),
            "{results:?}"
        );
        assert!(
            matches!(results[3], Err(StoreError::EventGap { expected: 2, found: 3, .. })),
            "{results:?}"
        );
        assert!(results[4].is_ok(), "{results:?}");
        for run in [fenced, ahead, gap] {
            let read = store.checkpoint(run, None).await.unwrap();
            assert_eq!((read.run.step, read.run.last_seq), (0, 1), "nothing written");
        }
        for run in [ok, snapshotted] {
            let read = store.checkpoint(run, None).await.unwrap();
            assert_eq!((read.run.step, read.run.last_seq), (1, 2));
            assert_eq!(read.run.status, RunStatus::Running);
            assert_eq!(read.frontier.decode::<u64>().unwrap(), 1);
            let events = store.events(run, 0, u64::MAX).await.unwrap();
            assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
            assert!(read.pending.is_empty(), "the step's pending writes are cleared");
        }
        let read = store.checkpoint(ok, None).await.unwrap();
        assert_eq!(read.snapshot_step, 0);
        assert_eq!(read.deltas.len(), 1);
        assert_eq!(read.deltas[0].1[0].update.decode::<u64>().unwrap(), 1);
        let read = store.checkpoint(snapshotted, None).await.unwrap();
        assert_eq!((read.snapshot_step, read.snapshot.decode::<u64>().unwrap()), (1, 100));
        let client = raw(&url).await;
        let sql = format!("SELECT count(*) FROM {schema}.pending_writes");
        let left: i64 = client.query_one(&sql, &[]).await.unwrap().get(0);
        assert_eq!(left, 0, "the committed step's pending writes are deleted");
        let writers = writers_of(&client, &schema, &[ok, snapshotted], 1).await;
        assert_eq!(writers.len(), 2);
        assert_eq!(writers[0], writers[1], "one transaction wrote both");
    });
}

/// A call the server refuses as a whole (here a steps row that should not
/// be there) rolls back: each of its steps is then committed alone, and
/// only the one in the way fails.
#[test]
fn a_call_refused_whole_commits_each_step_alone() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let (store, schema) = fresh_store(&url, 4).await;
        let (first, blocked, last) =
            (running_run(&store).await, running_run(&store).await, running_run(&store).await);
        let client = raw(&url).await;
        // (The steps trigger names its tables without their schema.)
        client.batch_execute(&format!("SET search_path = {schema}")).await.unwrap();
        client
            .execute(
                &format!(
                    "INSERT INTO {schema}.steps (run, step, at_ms, frontier, tasks, nodes, \
                     updates, first_seq, event_count, events) \
                     VALUES ($1, 1, 0, '\\x00', '{{}}', '{{}}', '{{}}', 2, 0, '')"
                ),
                &[&blocked.to_string()],
            )
            .await
            .unwrap();
        let (batch, answers): (Vec<_>, Vec<_>) =
            [step(first, 1, 1, 2), step(blocked, 1, 1, 2), step(last, 1, 1, 2)]
                .into_iter()
                .map(queued)
                .unzip();
        store.commits.writer.many(batch).await;
        let mut results = Vec::new();
        for answer in answers {
            results.push(answer.await.unwrap());
        }
        assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
        assert!(matches!(results[1], Err(StoreError::Backend { .. })), "{results:?}");
        let writers = writers_of(&client, &schema, &[first, last], 1).await;
        assert_eq!(writers.len(), 2);
        assert_ne!(writers[0], writers[1], "committed alone, one after the other");
        let read = store.checkpoint(blocked, None).await.unwrap();
        assert_eq!((read.run.step, read.run.last_seq), (0, 1), "nothing of it written");
    });
}

/// The steps a call refused are committed again alone all at once: one
/// waiting on its run's row lock holds up none of the others.
#[test]
fn steps_a_call_refused_commit_again_at_once() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let (store, schema) = fresh_store(&url, 4).await;
        let mut fenced = [running_run(&store).await, running_run(&store).await];
        // The call goes in the order of run ids: `held` would be first.
        fenced.sort();
        let [held, free] = fenced;
        for run in fenced {
            store.claim(run, 1, Owner::current(), i64::MAX).await.unwrap();
        }
        let ok = running_run(&store).await;
        // Another connection holds the row of `held`. The call skips the
        // row (its epoch is not the step's); the lone commit waits on it.
        let mut locker = raw(&url).await;
        let lock = locker.transaction().await.unwrap();
        let sql = format!("SELECT 1 FROM {schema}.runs WHERE id = $1 FOR UPDATE");
        lock.execute(&sql, &[&held.to_string()]).await.unwrap();
        let (batch, answers): (Vec<_>, Vec<_>) =
            [step(held, 1, 1, 2), step(free, 1, 1, 2), step(ok, 1, 1, 2)]
                .into_iter()
                .map(queued)
                .unzip();
        let [mut held_answer, free_answer, ok_answer] = <[_; 3]>::try_from(answers).unwrap();
        let writer = store.commits.writer.clone();
        let call = tokio::spawn(async move { writer.many(batch).await });
        let wait = std::time::Duration::from_secs(10);
        let answer = tokio::time::timeout(wait, free_answer).await;
        let answer = answer.expect("answered while the other refused step waits").unwrap();
        assert!(
            matches!(answer, Err(StoreError::Fenced { writer: 1, current: 2, .. })),
            "{answer:?}"
        );
        assert!(ok_answer.await.unwrap().is_ok());
        assert!(held_answer.try_recv().is_err(), "the held run's commit waits on its row");
        lock.rollback().await.unwrap();
        let answer = held_answer.await.unwrap();
        assert!(
            matches!(answer, Err(StoreError::Fenced { writer: 1, current: 2, .. })),
            "{answer:?}"
        );
        call.await.unwrap();
        assert_eq!(step_read(&store, ok).await, 1);
        for run in fenced {
            assert_eq!(step_read(&store, run).await, 0, "nothing of a refused step written");
        }
    });
}

/// Runs committing at the same time through the store share calls (steps
/// rows of one transaction), and every step reads back as written,
/// frontiers stored as references included.
#[test]
fn runs_committing_at_once_share_calls_and_read_back_whole() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let (store, schema) = fresh_store(&url, 8).await;
        commit_at_once(Arc::new(store), &url, &schema).await;
    });
}

/// A store connected on a runtime that has ended since (its committer
/// task and its connections' tasks ended with it) still shares calls on
/// the runtime it is used from: the first step to find the committer gone
/// starts another there.
#[test]
fn a_store_outliving_its_runtime_starts_its_committer_again() {
    let Some(url) = postgres_url() else { return };
    let first = runtime();
    let (store, schema) = first.block_on(fresh_store(&url, 8));
    drop(first);
    runtime().block_on(commit_at_once(Arc::new(store), &url, &schema));
}

/// 48 runs x 12 steps committed at once through `store` (in `schema`):
/// every step reads back as written, and the steps rows come from fewer
/// than half as many transactions.
async fn commit_at_once(store: Arc<PostgresStore>, url: &str, schema: &str) {
    let (runs, steps) = (48usize, 12u64);
    let mut ids = Vec::new();
    for _ in 0..runs {
        ids.push(running_run(&store).await);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for run in ids.clone() {
        let store = Arc::clone(&store);
        tasks.spawn(async move {
            for n in 1..=steps {
                let mut transition = step(run, 1, n, n + 1);
                if let Some(record) = transition.step.as_mut() {
                    // Two frontiers taking turns: stored as references
                    // from the third step on.
                    record.frontier = parity(n);
                    record.snapshot = (n % 5 == 0).then(|| number(1000 + n));
                }
                store.commit(transition).await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    // Every commit in flight was counted out again (a flight's count
    // ends just after its answers): a lone step sends itself again.
    let counted_out = async {
        while store.commits.busy.load(std::sync::atomic::Ordering::Acquire) != 0 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), counted_out).await.unwrap();
    for run in &ids {
        for n in 1..=steps {
            let read = store.checkpoint(*run, Some(n)).await.unwrap();
            assert_eq!(read.frontier, parity(n), "{run} step {n}");
            let last = read.deltas.last().map(|(step, updates)| (*step, updates.len()));
            let snapshot = read.snapshot.decode::<u64>().unwrap();
            if n % 5 == 0 {
                assert_eq!((read.snapshot_step, snapshot), (n, 1000 + n));
            } else {
                assert_eq!(last, Some((n, 1)), "{run} step {n}");
                assert_eq!(read.deltas.last().unwrap().1[0].update.decode::<u64>().unwrap(), n);
            }
        }
        let events = store.events(*run, 0, u64::MAX).await.unwrap();
        assert_eq!(events.len() as u64, steps + 1);
    }
    let client = raw(url).await;
    let row = client
        .query_one(
            &format!(
                "SELECT count(*), count(DISTINCT xmin::text) FROM {schema}.steps WHERE step > 0"
            ),
            &[],
        )
        .await
        .unwrap();
    let (rows, transactions): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(rows, (runs as i64) * steps as i64);
    assert!(transactions < rows / 2, "{rows} steps in {transactions} transactions");
    let references: i64 = client
        .query_one(&format!("SELECT count(*) FROM {schema}.steps WHERE length(frontier) = 9"), &[])
        .await
        .unwrap()
        .get(0);
    // Steps 1 and 2 store the two frontiers; every later step refers to
    // one (what a step committed in a call is remembered as well).
    assert_eq!(references, runs as i64 * (steps as i64 - 2));
}

/// Runs taken over while their owners keep committing, 32 at once (calls
/// then hold steps of old owners and of new ones together): each old
/// owner's steps answered `Ok` are exactly those the new owner read after
/// its claim, its next is refused `Fenced`, the new owner's continue from
/// there, and every run reads back as one gapless history (frontiers
/// stored as references included).
#[test]
fn owners_fenced_while_their_successors_commit_keep_one_history() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let (store, _) = fresh_store(&url, 8).await;
        let store = Arc::new(store);
        let mut ids = Vec::new();
        for _ in 0..32 {
            ids.push(running_run(&store).await);
        }
        // Step `n` of `run` by `epoch`, its event `seq`, frontiers taking
        // turns (stored as references).
        let turn = |run, epoch, n, seq| {
            let mut transition = step(run, epoch, n, seq);
            if let Some(record) = transition.step.as_mut() {
                record.frontier = parity(n);
            }
            transition
        };
        let mut tasks = tokio::task::JoinSet::new();
        for (index, run) in ids.iter().copied().enumerate() {
            let old = Arc::clone(&store);
            let seen = Arc::new(AtomicU64::new(0));
            let told = Arc::clone(&seen);
            // The old owner steps on until refused: (steps answered `Ok`,
            // whether it was refused).
            let predecessor = tokio::spawn(async move {
                for n in 1..=200 {
                    if let Err(error) = old.commit(turn(run, 1, n, n + 1)).await {
                        assert!(matches!(error, StoreError::Fenced { .. }), "{error:?}");
                        return (n - 1, true);
                    }
                    told.store(n, Ordering::Release);
                }
                (200, false)
            });
            let new = Arc::clone(&store);
            tasks.spawn(async move {
                // Takes over once the old owner has 2 to 9 steps answered,
                // while it goes on committing.
                while seen.load(Ordering::Acquire) < 2 + index as u64 % 8 {
                    tokio::task::yield_now().await;
                }
                let epoch = new.claim(run, 1, Owner::current(), i64::MAX).await.unwrap();
                let read = new.checkpoint(run, None).await.unwrap();
                let (from, mut seq) = (read.run.step, read.run.last_seq);
                for n in from + 1..=from + 10 {
                    seq += 1;
                    new.commit(turn(run, epoch, n, seq)).await.unwrap();
                }
                let (answered, refused) = predecessor.await.unwrap();
                (run, from, answered, refused)
            });
        }
        let mut refused_runs = 0;
        while let Some(done) = tasks.join_next().await {
            let (run, from, answered, refused) = done.unwrap();
            assert_eq!(
                answered, from,
                "{run}: the old owner's steps are those read after the claim"
            );
            refused_runs += usize::from(refused);
            for n in 1..=from + 10 {
                let read = store.checkpoint(run, Some(n)).await.unwrap();
                assert_eq!(read.frontier, parity(n), "{run} step {n}");
            }
            assert_eq!(store.checkpoint(run, None).await.unwrap().run.step, from + 10);
            let seqs: Vec<u64> =
                store.events(run, 0, u64::MAX).await.unwrap().iter().map(|e| e.seq).collect();
            assert_eq!(seqs, (1..=from + 11).collect::<Vec<_>>(), "{run}: one gapless history");
        }
        // Every old owner was still committing when its run was taken.
        assert_eq!(refused_runs, 32, "old owners fenced");
    });
}

/// A call whose server process is shut down under it (a `FATAL` error,
/// which could as well have come after its commit) answers each of its
/// steps `Unavailable`, not a refusal; the runs then commit again on a
/// new connection.
#[test]
fn a_call_whose_server_process_is_shut_down_answers_unavailable() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let (store, schema) = fresh_store(&url, 4).await;
        let (held, other) = (running_run(&store).await, running_run(&store).await);
        // Another connection holds the row of `held`: the call waits on it.
        let mut locker = raw(&url).await;
        let lock = locker.transaction().await.unwrap();
        let sql = format!("SELECT 1 FROM {schema}.runs WHERE id = $1 FOR UPDATE");
        lock.execute(&sql, &[&held.to_string()]).await.unwrap();
        let (batch, answers): (Vec<_>, Vec<_>) =
            [step(held, 1, 1, 2), step(other, 1, 1, 2)].into_iter().map(queued).unzip();
        let writer = store.commits.writer.clone();
        let call = tokio::spawn(async move { writer.many(batch).await });
        let admin = raw(&url).await;
        let waiting = "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                       AND query LIKE '%tollgate_commit_steps%'";
        let pid: i32 = loop {
            if let Some(row) = admin.query_opt(waiting, &[]).await.unwrap() {
                break row.get(0);
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        admin.execute("SELECT pg_terminate_backend($1)", &[&pid]).await.unwrap();
        // (Committed again alone, `held` would wait for the lock: the call
        // would not end.)
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), call).await;
        ended.expect("the call answered without committing its steps again").unwrap();
        for answer in answers {
            let answer = answer.await.unwrap();
            assert!(matches!(answer, Err(StoreError::Unavailable { .. })), "{answer:?}");
        }
        lock.rollback().await.unwrap();
        // Nothing of the call was written (it was shut down while it
        // waited); the pool hands its broken connection out once more at
        // most (docs/postgres.md, connections).
        for run in [held, other] {
            assert_eq!(step_read(&store, run).await, 0);
            let mut broken = 0;
            while let Err(error) = store.commit(step(run, 1, 1, 2)).await {
                assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
                broken += 1;
                assert!(broken <= 1, "a second broken connection");
            }
            assert_eq!(step_read(&store, run).await, 1);
        }
    });
}

/// The run's step as read, trying once more when the pool handed out the
/// connection whose server process was shut down.
async fn step_read(store: &PostgresStore, run: RunId) -> u64 {
    match store.checkpoint(run, None).await {
        Err(StoreError::Unavailable { .. }) => store.checkpoint(run, None).await.unwrap().run.step,
        read => read.unwrap().run.step,
    }
}

/// A call wakes the streams of the watched runs among its steps once it
/// committed; the steps of runs nobody watches make no noise, and a lone
/// commit of a watched run wakes them too.
#[test]
fn a_call_wakes_the_streams_of_its_watched_runs() {
    let Some(url) = postgres_url() else { return };
    runtime().block_on(async {
        let (store, _) = fresh_store(&url, 4).await;
        let notify = store.event_notifications();
        // The listener wakes everyone once it listens.
        let listening = notify.notified();
        tokio::pin!(listening);
        listening.as_mut().enable();
        tokio::time::timeout(std::time::Duration::from_secs(10), listening).await.unwrap();
        let (watched, quiet, other) =
            (running_run(&store).await, running_run(&store).await, running_run(&store).await);
        store.watch(watched, std::time::Duration::from_secs(60)).await.unwrap();
        let woken = |transitions: Vec<Transition>| {
            let (store, notify) = (&store, Arc::clone(&notify));
            async move {
                let notified = notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                commit_in_one_call(store, transitions).await;
                let wait = std::time::Duration::from_millis(1_500);
                tokio::time::timeout(wait, notified).await.is_ok()
            }
        };
        let unwatched = vec![step(quiet, 1, 1, 2), step(other, 1, 1, 2)];
        assert!(!woken(unwatched).await, "steps of runs nobody watches make no noise");
        let one_watched = vec![step(quiet, 1, 2, 3), step(watched, 1, 1, 2)];
        assert!(woken(one_watched).await, "a watched run's step in a call wakes its streams");
        let alone = vec![step(watched, 1, 2, 3)];
        assert!(woken(alone).await, "a lone commit of a watched run still wakes them");
    });
}
