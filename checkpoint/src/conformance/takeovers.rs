//! Runs taken over while their old owners keep committing, many at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;

use super::fixtures::{new_run, step};
use crate::codec::{Blob, Codec};
use crate::error::StoreError;
use crate::ids::RunId;
use crate::owner::Owner;
use crate::record::Transition;
use crate::store::RunStore;

/// Runs taken over at once.
const RUNS: usize = 16;

/// Steps an old owner tries at most (it is fenced long before).
const TRIES: u64 = 200;

/// Steps each new owner commits after its claim.
const AFTER: u64 = 5;

/// What one owner of a run saw.
enum Seen {
    /// The old owner: whether a commit of it was refused as fenced.
    Old { fenced: bool },
    /// The new owner: the step its checkpoint read after the claim held.
    New { from: u64 },
}

/// One owner's work, polled beside every other's on the caller's task.
type Owning<'a> = Pin<Box<dyn Future<Output = (RunId, Seen)> + Send + 'a>>;

/// 16 running runs; each old owner commits step after step until it is
/// refused, and a new owner claims its run once it has 2 to 9 steps
/// answered, reads the checkpoint and commits 5 more. All 32 owners are
/// in flight together on one task (a store that batches concurrent
/// commits sees fenced steps beside accepted ones), and frontiers take
/// turns between two values (a store that stores a frontier as a
/// reference to an earlier step's may not point at a refused step). The
/// old owner's steps answered `Ok` are exactly those its successor read,
/// its next is `Fenced`, and each run reads back one gapless history.
pub(super) async fn takeovers_mid_flight_keep_one_history(store: &dyn RunStore) {
    let mut runs = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let run = RunId::new();
        store.create_run(new_run(run, "g", None)).await.expect("create");
        runs.push(run);
    }
    // Steps answered `Ok` to each old owner so far.
    let answered: Vec<AtomicU64> = runs.iter().map(|_| AtomicU64::new(0)).collect();
    let mut owners: Vec<Owning<'_>> = Vec::with_capacity(2 * RUNS);
    for (index, (&run, answered)) in runs.iter().zip(&answered).enumerate() {
        owners.push(Box::pin(async move {
            for n in 1..=TRIES {
                match store.commit(turn(run, 1, n, n + 1)).await {
                    Ok(()) => answered.store(n, Ordering::Release),
                    Err(StoreError::Fenced { .. }) => return (run, Seen::Old { fenced: true }),
                    Err(error) => panic!("{run}: the old owner's step {n}: {error:?}"),
                }
                yield_once().await;
            }
            (run, Seen::Old { fenced: false })
        }));
        owners.push(Box::pin(async move {
            while answered.load(Ordering::Acquire) < 2 + index as u64 % 8 {
                yield_once().await;
            }
            let epoch = store.claim(run, 1, Owner::current(), i64::MAX).await.expect("claim");
            let read = store.checkpoint(run, None).await.expect("checkpoint after the claim");
            let (from, mut seq) = (read.run.step, read.run.last_seq);
            for n in from + 1..=from + AFTER {
                seq += 1;
                let committed = store.commit(turn(run, epoch, n, seq)).await;
                committed
                    .unwrap_or_else(|error| panic!("{run}: the new owner's step {n}: {error:?}"));
                yield_once().await;
            }
            (run, Seen::New { from })
        }));
    }
    for (index, seen) in join_all(owners).await.chunks(2).enumerate() {
        let [(run, Seen::Old { fenced }), (_, Seen::New { from })] = seen else {
            unreachable!("owners come in pairs, the old one first")
        };
        let (run, from) = (*run, *from);
        assert!(*fenced, "{run}: the old owner was still committing when the run was taken");
        assert_eq!(
            answered[index].load(Ordering::Acquire),
            from,
            "{run}: the old owner's steps answered Ok are those its successor read"
        );
        for n in 1..=from + AFTER {
            let read = store.checkpoint(run, Some(n)).await.expect("a past checkpoint");
            assert_eq!(read.frontier, parity(n), "{run}: the frontier of step {n}");
        }
        let last = store.checkpoint(run, None).await.expect("checkpoint");
        assert_eq!(last.run.step, from + AFTER, "{run}: the new owner's last step");
        let seqs: Vec<u64> =
            store.events(run, 0, u64::MAX).await.expect("events").iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=from + AFTER + 1).collect::<Vec<_>>(), "{run}: gapless events");
    }
}

/// Step `n` of `run` by `epoch`, its event numbered `seq`, with the
/// frontier of [`parity`].
fn turn(run: RunId, epoch: u64, n: u64, seq: u64) -> Transition {
    let mut transition = step(run, epoch, n, seq, false);
    if let Some(record) = transition.step.as_mut() {
        record.frontier = parity(n);
    }
    transition
}

/// One of two frontiers, by the step's parity: long enough that a store
/// may keep it as a reference to the step before last.
fn parity(n: u64) -> Blob {
    Codec::Json.encode(&format!("{:>40}", n % 2), 1).expect("a string encodes")
}

/// Lets the other owners on the task go on (a store that answers at
/// once would otherwise run one owner's whole loop in one poll).
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
}

/// Polls every future on the caller's task until all are done; their
/// outputs in the order given.
async fn join_all<T>(mut futures: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> Vec<T> {
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            return Poll::Pending;
        }
        Poll::Ready(outputs.iter_mut().filter_map(Option::take).collect())
    })
    .await
}
