//! Conformance case: the outbox keeps entries, lists them by kind,
//! thread and due time, and lets one process at a time take one.

use serde_json::json;

use crate::outbox::{OutboxEntry, OutboxQuery};
use crate::store::Store;

fn ids(entries: Vec<OutboxEntry>) -> Vec<String> {
    entries.into_iter().map(|entry| entry.id).collect()
}

pub(super) async fn outbox_entries_are_taken_by_one_process_at_a_time(store: &dyn Store) {
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
