//! Conformance case: the outbox keeps entries, lists them by kind,
//! thread and due time, and lets one process at a time take one; gated
//! entries wait for their run out of what is ready.

use serde_json::json;

use super::fixtures::{event, interrupt, new_run, step};
use crate::ids::RunId;
use crate::outbox::{OutboxEntry, OutboxGate, OutboxQuery, OUTBOX_NEVER};
use crate::owner::Owner;
use crate::record::{Answer, DecisionWrite, Transition};
use crate::status::RunStatus;
use crate::store::{OutboxStore, RunStore};

fn ids(entries: Vec<OutboxEntry>) -> Vec<String> {
    entries.into_iter().map(|entry| entry.id).collect()
}

pub(super) async fn outbox_entries_are_taken_by_one_process_at_a_time(
    store: &(impl RunStore + OutboxStore + ?Sized),
) {
    let body = json!({"v": 1, "input": {"text": "ä"}, "list": [1, null]});
    let first = OutboxEntry::new("01A", "run", Some("t1".into()), 100, 1_000, body.clone());
    store.put_outbox(first.clone()).await.expect("put");
    assert_eq!(store.outbox_entry("01A").await.expect("read"), Some(first.clone()));
    assert_eq!(store.outbox_entry("missing").await.expect("read"), None);
    let later = OutboxEntry::new("01B", "run", Some("t1".into()), 200, 5_000, json!({}));
    let other = OutboxEntry::new("01C", "run", Some("t2".into()), 300, 1_000, json!({}));
    let stateless = OutboxEntry::new("01D", "run", None, 400, 0, json!({}));
    let hook = OutboxEntry::new("01E.webhook", "webhook", Some("t1".into()), 500, 0, json!({}));
    for entry in [later, other, stateless, hook] {
        store.put_outbox(entry).await.expect("put");
    }

    // Listed by kind, the earliest due first, then by id; by thread; due.
    let all = |kind: &str| OutboxQuery::new(kind, 10);
    assert_eq!(
        ids(store.list_outbox(all("run")).await.expect("list")),
        ["01D", "01A", "01C", "01B"]
    );
    assert_eq!(ids(store.list_outbox(all("webhook")).await.expect("list")), ["01E.webhook"]);
    assert_eq!(
        ids(store.list_outbox(OutboxQuery::new("run", 2)).await.expect("list")),
        ["01D", "01A"]
    );
    let t1 = all("run").thread("t1");
    assert_eq!(ids(store.list_outbox(t1).await.expect("list")), ["01A", "01B"]);
    let due = all("run").due_by(1_000);
    assert_eq!(ids(store.list_outbox(due).await.expect("list")), ["01D", "01A", "01C"]);
    assert!(store.list_outbox(all("run").due_by(-1)).await.expect("list").is_empty());

    // Taken once until its lease ends, the attempt counted (due or not).
    let taken = store.take_outbox("01A", 1_000, 31_000).await.expect("take").expect("taken");
    assert_eq!((taken.lease_until_ms, taken.attempts, &taken.body), (31_000, 1, &body));
    assert_eq!(store.take_outbox("01A", 30_999, 60_000).await.expect("take"), None, "leased");
    // Listed while leased (a caller keeps order), shown as held.
    let due = store.list_outbox(all("run").due_by(30_999)).await.expect("list");
    let held: Vec<(String, bool)> =
        due.into_iter().map(|entry| (entry.id.clone(), !entry.is_held(30_999))).collect();
    let expected = [("01D", true), ("01A", false), ("01C", true), ("01B", true)];
    assert_eq!(held, expected.map(|(id, free)| (id.to_owned(), free)), "leased");
    let again = store.take_outbox("01A", 31_000, 61_000).await.expect("take").expect("lapsed");
    assert_eq!((again.lease_until_ms, again.attempts), (61_000, 2));
    assert_eq!(store.take_outbox("missing", 0, 1).await.expect("take"), None);
    let early = store.take_outbox("01B", 0, 10).await.expect("take").expect("not due, free");
    assert_eq!((early.due_ms, early.lease_until_ms, early.attempts), (5_000, 10, 1));

    // Written back: replaced whole (free again, due later, a new body).
    let mut back = again.clone();
    back.lease_until_ms = 0;
    back.due_ms = i64::MAX;
    back.body = json!({"v": 1, "error": "gone"});
    store.put_outbox(back.clone()).await.expect("replace");
    assert_eq!(store.outbox_entry("01A").await.expect("read"), Some(back));
    let due = all("run").due_by(i64::MAX - 1);
    assert_eq!(ids(store.list_outbox(due).await.expect("list")), ["01D", "01C", "01B"]);

    // Deleted once.
    assert!(store.delete_outbox("01A").await.expect("delete"));
    assert!(!store.delete_outbox("01A").await.expect("delete"));
    assert_eq!(store.outbox_entry("01A").await.expect("read"), None);
    let t1 = all("run").thread("t1");
    assert_eq!(ids(store.list_outbox(t1).await.expect("list")), ["01B"]);
}

/// Whether the entries `ids` are ready (in listing order) at `now`.
async fn ready(store: &(impl OutboxStore + ?Sized), kind: &str) -> Vec<String> {
    ids(store.list_outbox(OutboxQuery::new(kind, 100).ready(1_000)).await.expect("ready"))
}

pub(super) async fn gated_entries_wait_for_their_run_out_of_sight(
    store: &(impl RunStore + OutboxStore + ?Sized),
) {
    let entry = |id: &str, kind: &str, due: i64| {
        OutboxEntry::new(id, kind, Some("t".into()), 10, due, json!({}))
    };
    let (busy, unborn) = (RunId::new(), RunId::new());
    store.create_run(new_run(busy, "g", Some("t"))).await.expect("create");
    for (id, kind) in [("h1", "webhook"), ("h2", "webhook"), ("r1", "run"), ("r2", "run")] {
        store.put_outbox(entry(id, kind, 100)).await.expect("put");
    }
    // A pending run (its entry has its run's id) and a webhook for it.
    store.put_outbox(entry(&unborn.to_string(), "run", 5_000)).await.expect("put");
    store.put_outbox(entry("h3", "webhook", 100)).await.expect("put");
    let strings = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect::<Vec<_>>();

    // Gated while the run keeps the gate shut; out of what is ready.
    let settled = OutboxGate::settled(busy, 1);
    assert_eq!(store.gate_outbox(&strings(&["h1"]), settled).await.expect("gate"), 1);
    let ended = OutboxGate::ended(busy);
    assert_eq!(store.gate_outbox(&strings(&["r1", "r2", "nope"]), ended).await.expect("gate"), 2);
    assert_eq!(store.gate_outbox(&strings(&["r1"]), ended).await.expect("gate"), 0, "gated once");
    let for_unborn = OutboxGate::settled(unborn, 0);
    assert_eq!(store.gate_outbox(&strings(&["h3"]), for_unborn).await.expect("gate"), 1);
    assert_eq!(ready(store, "webhook").await, ["h2"]);
    assert!(ready(store, "run").await.is_empty(), "the pending run is not due by 1000");
    let all = OutboxQuery::new("webhook", 10);
    assert_eq!(ids(store.list_outbox(all.clone()).await.expect("all")), ["h1", "h2", "h3"]);
    let h1 = store.outbox_entry("h1").await.expect("read").expect("h1");
    assert_eq!(h1.gate, Some(settled), "kept whole");
    // A gate that is open already gates nothing.
    let nobody = OutboxGate::settled(RunId::new(), 0);
    assert_eq!(store.gate_outbox(&strings(&["h2"]), nobody).await.expect("gate"), 0);

    // The run pauses: what waited for it to settle past seq 1 is ready;
    // what waits for it to end is not.
    store.commit(step(busy, 1, 1, 2, false)).await.expect("step 1");
    let pause = Transition {
        step: None,
        status: RunStatus::AwaitingHitl,
        events: vec![event(3)],
        lease_until_ms: None,
        interrupts: vec![interrupt(busy, 2, 0)],
        ..step(busy, 1, 1, 3, false)
    };
    store.commit(pause).await.expect("pause");
    assert_eq!(ready(store, "webhook").await, ["h1", "h2"]);
    assert_eq!(store.outbox_entry("h1").await.expect("read").expect("h1").gate, None);
    // Not past seq 3: shut; past it: open.
    let past = |seq| OutboxGate::settled(busy, seq);
    assert_eq!(store.gate_outbox(&strings(&["h2"]), past(3)).await.expect("gate"), 1);
    assert_eq!(store.gate_outbox(&strings(&["h1"]), past(2)).await.expect("gate"), 0);
    assert_eq!(ready(store, "webhook").await, ["h1"]);
    let paused = OutboxGate::ended(busy);
    assert_eq!(store.gate_outbox(&strings(&["h1"]), paused).await.expect("gate"), 1);

    // Decided and ended: every gate on it opens.
    let answer = store.interrupts(busy).await.expect("interrupts")[0].id.clone();
    let decision = DecisionWrite {
        run: busy,
        expected_epoch: 1,
        answers: vec![Answer { interrupt: answer, decision: json!("yes") }],
        status: RunStatus::Queued,
        events: vec![event(4)],
        failure: None,
        at_ms: 2_000,
        claim: Some((Owner::current(), i64::MAX)),
    };
    let epoch = store.decide(decision).await.expect("decide");
    assert!(ready(store, "webhook").await.is_empty(), "running again: both wait");
    let mut done = step(busy, epoch, 2, 5, false);
    done.status = RunStatus::Completed;
    done.lease_until_ms = None;
    store.commit(done).await.expect("end");
    assert_eq!(ready(store, "webhook").await, ["h1", "h2"]);
    let run_entries =
        ids(store.list_outbox(OutboxQuery::new("run", 10).ready(100)).await.expect("ready"));
    assert_eq!(run_entries, ["r1", "r2"]);

    // The pending run's entry ends (due never) or is deleted: its
    // webhook's gate opens.
    let mut never = store.outbox_entry(&unborn.to_string()).await.expect("read").expect("pending");
    never.due_ms = OUTBOX_NEVER;
    store.put_outbox(never).await.expect("ended");
    assert_eq!(ready(store, "webhook").await, ["h1", "h2", "h3"]);
    assert_eq!(store.gate_outbox(&strings(&["h3"]), for_unborn).await.expect("gate"), 0);
    store.delete_outbox(&unborn.to_string()).await.expect("delete");

    // A deleted run opens the gates on it.
    let doomed = RunId::new();
    store.create_run(new_run(doomed, "g", None)).await.expect("create");
    let mut failed = step(doomed, 1, 1, 2, false);
    failed.status = RunStatus::AwaitingHitl;
    failed.lease_until_ms = None;
    failed.interrupts = vec![interrupt(doomed, 2, 0)];
    store.commit(failed).await.expect("pause");
    assert_eq!(
        store.gate_outbox(&strings(&["h3"]), OutboxGate::ended(doomed)).await.expect("gate"),
        1
    );
    assert_eq!(ready(store, "webhook").await, ["h1", "h2"]);
    store.delete_run(doomed).await.expect("delete");
    assert_eq!(ready(store, "webhook").await, ["h1", "h2", "h3"]);

    // Pages: after an entry, in listing order.
    let h1 = store.outbox_entry("h1").await.expect("read").expect("h1");
    let page = OutboxQuery::new("webhook", 1).ready(1_000).after(&h1);
    assert_eq!(ids(store.list_outbox(page).await.expect("page")), ["h2"]);
}
