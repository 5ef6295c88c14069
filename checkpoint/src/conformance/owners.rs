//! Conformance case: thread records keep their owner and tenant, and
//! searches and run listings keep a holder's.

use serde_json::json;

use crate::ids::RunId;
use crate::listing::{Holder, PageRequest, RunFilter, ThreadQuery, ThreadRecord, ThreadStatus};
use crate::status::RunStatus;
use crate::store::{RunStore, ThreadStore};

use super::fixtures::new_run;
use super::threads::{found, settle};

fn owner(name: &str, tenant: Option<&str>) -> Holder {
    Holder::Owner { name: name.into(), tenant: tenant.map(str::to_owned) }
}

/// A record reads back with its owner and tenant (and a second create
/// keeps the first's); a search for a holder finds exactly theirs, newest
/// first, with the status, metadata and pages as for any search; the same
/// name in another tenant is another holder; a run listing for a holder
/// lists the runs on their threads only (not a run on a thread without a
/// record, not a run without a thread).
pub(super) async fn threads_and_runs_are_kept_apart_by_holder<S: RunStore + ThreadStore>(
    store: &S,
) {
    let made = [
        ("ann-1", Some("ann"), Some("acme"), 10),
        ("bob-1", Some("bob"), Some("acme"), 11),
        ("ann-2", Some("ann"), Some("acme"), 12),
        ("ann-other", Some("ann"), Some("initech"), 13),
        ("ann-none", Some("ann"), None, 14),
        ("nobody", None, None, 15),
    ];
    for (id, name, tenant, at) in made {
        let record = ThreadRecord::new(id, at, json!({"n": at}))
            .with_owner(name.map(str::to_owned), tenant.map(str::to_owned));
        store.create_thread(record).await.expect("create");
    }
    let again = ThreadRecord::new("ann-1", 99, json!({})).with_owner(Some("bob".into()), None);
    let (kept, created) = store.create_thread(again).await.expect("create again");
    assert!(!created);
    assert_eq!((kept.owner.as_deref(), kept.tenant.as_deref()), (Some("ann"), Some("acme")));
    let read = store.thread_record("bob-1").await.expect("read").expect("record");
    assert_eq!((read.owner.as_deref(), read.tenant.as_deref()), (Some("bob"), Some("acme")));

    let held = |holder: Holder| ThreadQuery::page(0, 100).held_by(Some(holder));
    assert_eq!(found(store, held(owner("ann", Some("acme")))).await, ["ann-2", "ann-1"]);
    assert_eq!(found(store, held(owner("ann", None))).await, ["ann-none"]);
    assert_eq!(found(store, held(owner("bob", Some("acme")))).await, ["bob-1"]);
    assert!(found(store, held(owner("carl", Some("acme")))).await.is_empty());
    let tenant = found(store, held(Holder::Tenant("acme".into()))).await;
    assert_eq!(tenant, ["ann-2", "bob-1", "ann-1"]);
    let paged = ThreadQuery::page(1, 1).held_by(Some(owner("ann", Some("acme"))));
    assert_eq!(found(store, paged).await, ["ann-1"], "pages count the holder's only");
    let mut metadata = serde_json::Map::new();
    metadata.insert("n".into(), json!(11));
    let tagged = held(owner("ann", Some("acme"))).metadata(metadata);
    assert!(found(store, tagged).await.is_empty(), "bob's metadata is not ann's");

    // Runs: ann's paused run on her thread, bob's on his, others unheld.
    let (ann_run, bob_run) = (RunId::new(), RunId::new());
    store.create_run(new_run(ann_run, "g", Some("ann-1"))).await.expect("ann's run");
    settle(store, ann_run, RunStatus::AwaitingHitl, 1_000).await;
    store.create_run(new_run(bob_run, "g", Some("bob-1"))).await.expect("bob's run");
    store.create_run(new_run(RunId::new(), "g", Some("no-record"))).await.expect("unowned");
    store.create_run(new_run(RunId::new(), "g", None)).await.expect("threadless");
    let waiting = held(owner("ann", Some("acme"))).status(Some(ThreadStatus::Interrupted), vec![]);
    assert_eq!(found(store, waiting).await, ["ann-1"]);
    let bob_waiting =
        held(owner("bob", Some("acme"))).status(Some(ThreadStatus::Interrupted), vec![]);
    assert!(found(store, bob_waiting).await.is_empty());

    let listed = |holder: Holder| async move {
        let filter = RunFilter { held_by: Some(holder), ..RunFilter::default() };
        let page = store
            .list_runs(&filter, &PageRequest { limit: 100, cursor: None })
            .await
            .expect("list");
        page.runs.into_iter().map(|run| run.id).collect::<Vec<_>>()
    };
    assert_eq!(listed(owner("ann", Some("acme"))).await, [ann_run]);
    assert_eq!(listed(owner("bob", Some("acme"))).await, [bob_run]);
    assert_eq!(listed(Holder::Tenant("acme".into())).await, [bob_run, ann_run]);
    assert!(listed(owner("ann", None)).await.is_empty());
    let filter = RunFilter {
        held_by: Some(owner("ann", Some("acme"))),
        status: Some(RunStatus::Running),
        ..RunFilter::default()
    };
    let page =
        store.list_runs(&filter, &PageRequest { limit: 100, cursor: None }).await.expect("list");
    assert!(page.runs.is_empty(), "the holder and the status both hold");
    reviewers_widen_a_holders_view(store, ann_run, bob_run).await;
}

/// Bob's thread names finance as its reviewers: while his run runs,
/// finance members (searching as Ann) see nothing of it; once it waits for
/// a decision they do, and only then.
async fn reviewers_widen_a_holders_view<S: RunStore + ThreadStore>(
    store: &S,
    ann_run: RunId,
    bob_run: RunId,
) {
    let finance = vec!["finance".to_owned()];
    assert!(store.set_thread_reviewers("bob-1", &finance).await.expect("set"));
    assert!(!store.set_thread_reviewers("no-record", &finance).await.expect("set"), "no record");
    let read = store.thread_record("bob-1").await.expect("read").expect("record");
    assert_eq!(read.reviewers, finance);
    let groups = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>();
    let reviewing = |names: &[&str]| {
        ThreadQuery::page(0, 100)
            .held_by(Some(owner("ann", Some("acme"))))
            .reviewed_by(groups(names))
    };
    let reviewed_runs = |names: &[&str]| {
        let filter = RunFilter {
            held_by: Some(owner("ann", Some("acme"))),
            reviewed_by: groups(names),
            ..RunFilter::default()
        };
        async move {
            let page = store.list_runs(&filter, &PageRequest { limit: 100, cursor: None });
            page.await.expect("list").runs.into_iter().map(|run| run.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(found(store, reviewing(&["finance"])).await, ["ann-2", "ann-1"], "bob's runs");
    assert_eq!(reviewed_runs(&["finance"]).await, [ann_run]);
    settle(store, bob_run, RunStatus::AwaitingHitl, 2_000).await;
    let seen = found(store, reviewing(&["ops", "finance"])).await;
    assert_eq!(seen, ["ann-2", "bob-1", "ann-1"], "waiting for finance");
    assert_eq!(found(store, reviewing(&["ops"])).await, ["ann-2", "ann-1"], "not ops'");
    let only_waiting = reviewing(&["finance"]).status(Some(ThreadStatus::Interrupted), vec![]);
    assert_eq!(found(store, only_waiting).await, ["bob-1", "ann-1"]);
    assert_eq!(reviewed_runs(&["finance"]).await, [bob_run, ann_run]);
    assert_eq!(reviewed_runs(&["ops"]).await, [ann_run]);
    // A newer run on Bob's thread: the paused one is no longer what the
    // thread waits on, and the thread is busy.
    store.create_run(new_run(RunId::new(), "g", Some("bob-1"))).await.expect("newer run");
    assert_eq!(reviewed_runs(&["finance"]).await, [ann_run], "not the thread's latest");
    assert_eq!(found(store, reviewing(&["finance"])).await, ["ann-2", "ann-1"], "busy again");
    // Without a holder, reviewers narrow nothing.
    let everyone = ThreadQuery::page(0, 100).reviewed_by(finance);
    assert_eq!(found(store, everyone).await.len(), 6);
    assert!(store.set_thread_reviewers("bob-1", &[]).await.expect("clear"));
    assert_eq!(found(store, reviewing(&["finance"])).await, ["ann-2", "ann-1"], "cleared");
}
