//! Conformance case: decisions are compare-and-set, several answers all
//! or none.

use crate::error::StoreError;
use crate::ids::RunId;
use crate::owner::Owner;
use crate::record::{Answer, DecisionWrite, RunFailure, Transition};
use crate::status::RunStatus;
use crate::store::RunStore;

use super::fixtures::{event, interrupt, kind, new_run, step};

pub(super) async fn decisions_are_compare_and_set(store: &dyn RunStore) {
    let run = RunId::new();
    store.create_run(new_run(run, "g", None)).await.expect("create");
    store.commit(step(run, 1, 1, 2, false)).await.expect("step 1");
    let pause = Transition {
        step: None,
        status: RunStatus::AwaitingHitl,
        events: vec![event(3)],
        lease_until_ms: None,
        interrupts: vec![interrupt(run, 2, 0), interrupt(run, 2, 1)],
        ..step(run, 1, 1, 3, false)
    };
    store.commit(pause).await.expect("pause");
    let record = store.run(run).await.expect("run");
    assert_eq!(
        (record.status, record.pending_interrupts, record.owner.as_ref()),
        (RunStatus::AwaitingHitl, 2, None)
    );
    let open = store.interrupts(run).await.expect("interrupts");
    assert_eq!(open, [interrupt(run, 2, 0), interrupt(run, 2, 1)]);
    let last = store.checkpoint(run, None).await.expect("last checkpoint");
    assert_eq!((last.run.step, &last.interrupts), (1, &open), "the checkpoint carries them");
    let past = store.checkpoint(run, Some(0)).await.expect("past checkpoint");
    assert!(past.interrupts.is_empty(), "a past checkpoint has none: {:?}", past.interrupts);

    let approve =
        |id: String| Answer { interrupt: id, decision: serde_json::json!({"decision": "approve"}) };
    let decide = |id: String, epoch: u64, status: RunStatus| DecisionWrite {
        run,
        expected_epoch: epoch,
        answers: vec![approve(id)],
        status,
        events: Vec::new(),
        failure: None,
        at_ms: 9,
        claim: None,
    };
    let (first, second) = (open[0].id.clone(), open[1].id.clone());
    let both = |ids: [String; 2]| DecisionWrite {
        answers: ids.into_iter().map(approve).collect(),
        ..decide(String::new(), 1, RunStatus::Queued)
    };
    let refusals = [
        (decide(first.clone(), 7, RunStatus::AwaitingHitl), "Fenced"),
        (decide("nope".into(), 1, RunStatus::AwaitingHitl), "InterruptNotFound"),
        // Several answers: all or none.
        (both([first.clone(), "nope".into()]), "InterruptNotFound"),
        (both([first.clone(), first.clone()]), "InterruptAnswered"),
    ];
    for (write, expected) in refusals {
        let error = store.decide(write).await.expect_err(expected);
        assert_eq!(kind(&error), expected, "{error:?}");
    }
    assert_eq!(store.run(run).await.expect("run"), record, "refused decisions change nothing");
    assert_eq!(
        store.decide(decide(first.clone(), 1, RunStatus::AwaitingHitl)).await.expect("decide"),
        2
    );
    let again =
        store.decide(decide(first.clone(), 2, RunStatus::AwaitingHitl)).await.expect_err("twice");
    assert!(matches!(again, StoreError::InterruptAnswered { .. }), "{again:?}");
    let stale =
        store.decide(decide(second.clone(), 1, RunStatus::Queued)).await.expect_err("stale");
    assert!(matches!(stale, StoreError::Fenced { writer: 1, current: 2, .. }), "{stale:?}");
    assert_eq!(
        store.decide(decide(second.clone(), 2, RunStatus::Queued)).await.expect("decide"),
        3
    );
    let record = store.run(run).await.expect("run");
    assert_eq!((record.status, record.pending_interrupts, record.epoch), (RunStatus::Queued, 0, 3));
    let answered = store.interrupts(run).await.expect("interrupts");
    assert!(answered.iter().all(|i| i.decision.is_some()));
    let last = store.checkpoint(run, None).await.expect("last checkpoint");
    assert_eq!(last.interrupts, answered, "with their decisions");
    let late = store.decide(decide(second, 3, RunStatus::Queued)).await.expect_err("not paused");
    assert!(
        matches!(late, StoreError::NotAwaitingDecision { status: RunStatus::Queued, .. }),
        "{late:?}"
    );

    // A decider that continues the run itself claims it in the same write.
    let other = RunId::new();
    store.create_run(new_run(other, "g", None)).await.expect("create");
    let pause = Transition {
        step: None,
        status: RunStatus::AwaitingHitl,
        events: vec![event(2)],
        lease_until_ms: None,
        interrupts: vec![interrupt(other, 1, 0)],
        ..step(other, 1, 1, 2, false)
    };
    store.commit(pause).await.expect("pause");
    let claimed = DecisionWrite {
        run: other,
        answers: vec![approve(format!("{other}.1.0.0"))],
        claim: Some((Owner::current(), 4_242)),
        ..decide(String::new(), 1, RunStatus::Queued)
    };
    assert_eq!(store.decide(claimed).await.expect("decide and claim"), 2);
    let record = store.run(other).await.expect("run");
    assert_eq!(
        (record.status, record.owner, record.lease_until_ms),
        (RunStatus::Running, Some(Owner::current()), Some(4_242))
    );

    // A rejection that ends the run records why, as a failing commit does.
    let rejected = RunId::new();
    store.create_run(new_run(rejected, "g", None)).await.expect("create");
    let pause = Transition {
        step: None,
        status: RunStatus::AwaitingHitl,
        events: vec![event(2)],
        lease_until_ms: None,
        interrupts: vec![interrupt(rejected, 1, 0)],
        ..step(rejected, 1, 1, 2, false)
    };
    store.commit(pause).await.expect("pause");
    let why = RunFailure::new("rejected", Some("n".into()), "not this one");
    let reject = DecisionWrite {
        run: rejected,
        answers: vec![Answer {
            interrupt: format!("{rejected}.1.0.0"),
            decision: serde_json::json!({"decision": "reject", "reason": "not this one"}),
        }],
        failure: Some(why.clone()),
        ..decide(String::new(), 1, RunStatus::Rejected)
    };
    assert_eq!(store.decide(reject).await.expect("reject"), 2);
    let record = store.run(rejected).await.expect("run");
    assert_eq!((record.status, record.failure), (RunStatus::Rejected, Some(why)));

    // One write answers both interrupts of a pause.
    let pair = RunId::new();
    store.create_run(new_run(pair, "g", None)).await.expect("create");
    let pause = Transition {
        step: None,
        status: RunStatus::AwaitingHitl,
        events: vec![event(2)],
        lease_until_ms: None,
        interrupts: vec![interrupt(pair, 1, 0), interrupt(pair, 1, 1)],
        ..step(pair, 1, 1, 2, false)
    };
    store.commit(pause).await.expect("pause");
    let ids = [format!("{pair}.1.0.0"), format!("{pair}.1.1.0")];
    let write = DecisionWrite { run: pair, ..both(ids) };
    assert_eq!(store.decide(write).await.expect("both at once"), 2);
    let record = store.run(pair).await.expect("run");
    assert_eq!((record.status, record.pending_interrupts), (RunStatus::Queued, 0));
    assert!(store.interrupts(pair).await.expect("interrupts").iter().all(|i| i.decision.is_some()));

    // The continuing owner claims the queued run and commits the step.
    assert_eq!(store.claim(run, 3, Owner::current(), i64::MAX).await.expect("claim"), 4);
    store.commit(step(run, 4, 2, 4, false)).await.expect("step 2");
    assert!(store.interrupts(run).await.expect("interrupts").is_empty(), "a new step has none");
    let last = store.checkpoint(run, None).await.expect("last checkpoint");
    assert!(last.interrupts.is_empty(), "{:?}", last.interrupts);
}
