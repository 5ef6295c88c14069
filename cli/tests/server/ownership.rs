//! Who owns what (`serve` with JWTs, docs/tenancy.md): two users of one
//! tenant, a reader narrowed to the tenant by a policy file, a user of
//! another tenant and an admin. Every route that names a thread or a run,
//! on both APIs, answers another user's ids with the 404 of an unknown id
//! and changes nothing; the owner reaches them; listings and searches
//! show each caller theirs; the server's own endpoints are refused to
//! users (SQLite, Postgres).

use reqwest::{Client, Method};
use serde_json::{json, Value};

use crate::support::{self, get_json, runtime, send_json, settled, Fixture, Served};

/// A client whose requests carry a JWT of `sub` with `roles`, in `tenant`.
fn as_who(sub: &str, roles: &[&str], tenant: Option<&str>) -> Client {
    support::client_with(&support::jwt(sub, roles, &[], tenant))
}

/// What a user made: a LangGraph thread with a run waiting for a
/// decision, and a native run (on a thread of its own) waiting too.
struct Made {
    thread: String,
    lg_run: String,
    native_run: String,
    native_thread: String,
}

async fn make(server: &Served, client: &Client) -> Made {
    let lg = |path: &str| server.url(&format!("/lg{path}"));
    let thread = send_json(client.post(lg("/threads")).json(&json!({})), 200).await;
    let thread = thread["thread_id"].as_str().unwrap().to_owned();
    let input = json!({"messages": [{"role": "user", "content": "Refund order 7"}]});
    let body = json!({"assistant_id": "refunds", "input": input});
    let url = lg(&format!("/threads/{thread}/runs/wait"));
    send_json(client.post(url).json(&body), 200).await;
    let runs = get_json(client, &lg(&format!("/threads/{thread}/runs")), 200).await;
    let lg_run = runs[0]["run_id"].as_str().unwrap().to_owned();
    let native = json!({"blueprint": "refunds", "input": "Refund order 7"});
    let started = send_json(client.post(server.url("/runs")).json(&native), 201).await;
    let native_run = started["id"].as_str().unwrap().to_owned();
    let shown = settled(client, &server.url(&format!("/runs/{native_run}"))).await;
    assert_eq!(shown["status"], "awaiting_hitl", "{shown}");
    let native_thread = shown["thread"].as_str().unwrap().to_owned();
    assert_eq!(native_thread, native_run, "a user's run without a thread gets its own");
    Made { thread, lg_run, native_run, native_thread }
}

/// Every route that names one of `made`'s threads or runs, as (method,
/// path, body): reads first, then what would change them.
fn routes(made: &Made) -> Vec<(Method, String, Value)> {
    let (t, r, n, nt) = (&made.thread, &made.lg_run, &made.native_run, &made.native_thread);
    let resume = json!({"command": {"resume": {"decision": "approve"}}, "assistant_id": "refunds"});
    let get = |path: String| (Method::GET, path, Value::Null);
    let post = |path: String, body: Value| (Method::POST, path, body);
    vec![
        get(format!("/lg/threads/{t}")),
        get(format!("/lg/threads/{t}/state")),
        get(format!("/lg/threads/{t}/history")),
        post(format!("/lg/threads/{t}/history"), json!({})),
        get(format!("/lg/threads/{t}/storage")),
        get(format!("/lg/threads/{t}/runs")),
        get(format!("/lg/threads/{t}/runs/{r}")),
        get(format!("/runs/{n}")),
        get(format!("/runs/{n}/state")),
        get(format!("/runs/{n}/history")),
        get(format!("/runs/{n}/graph")),
        get(format!("/threads/{nt}")),
        get(format!("/threads/{nt}/history")),
        get(format!("/threads/{nt}/storage")),
        (Method::PATCH, format!("/lg/threads/{t}"), json!({"metadata": {"x": 1}})),
        post(format!("/lg/threads/{t}/state"), json!({"values": {}})),
        post(format!("/lg/threads/{t}/copy"), Value::Null),
        post(format!("/lg/threads/{t}/runs"), resume.clone()),
        post(format!("/lg/threads/{t}/runs/wait"), resume),
        post(format!("/lg/threads/{t}/runs/{r}/cancel"), Value::Null),
        (Method::DELETE, format!("/lg/threads/{t}/runs/{r}"), Value::Null),
        (Method::DELETE, format!("/lg/threads/{t}"), Value::Null),
        post(format!("/runs/{n}/resume"), json!({"decision": "approve"})),
        post(format!("/runs/{n}/reject"), json!({})),
        post(format!("/runs/{n}/cancel"), Value::Null),
        post(format!("/runs/{n}/continue"), Value::Null),
        post(format!("/runs/{n}/fork"), json!({})),
        (Method::DELETE, format!("/runs/{n}"), Value::Null),
        post(format!("/threads/{nt}/prune"), json!({})),
    ]
}

/// Routes that follow a run while it runs (streams, joins) or name a
/// checkpoint: asked of another's ids only (they answer at once: 404).
fn following(made: &Made) -> Vec<(Method, String, Value)> {
    let (t, r, n) = (&made.thread, &made.lg_run, &made.native_run);
    let checkpoint = format!("{r}-1");
    vec![
        (Method::GET, format!("/lg/threads/{t}/runs/{r}/join"), Value::Null),
        (Method::GET, format!("/lg/threads/{t}/runs/{r}/stream"), Value::Null),
        (Method::GET, format!("/lg/threads/{t}/state/{checkpoint}"), Value::Null),
        (
            Method::POST,
            format!("/lg/threads/{t}/state/checkpoint"),
            json!({"checkpoint": {"checkpoint_id": checkpoint}}),
        ),
        (Method::GET, format!("/runs/{n}/events"), Value::Null),
        (Method::GET, format!("/runs/{n}/ws"), Value::Null),
    ]
}

async fn status_of(server: &Served, client: &Client, route: &(Method, String, Value)) -> u16 {
    let (method, path, body) = route;
    let mut request = client.request(method.clone(), server.url(path));
    if !body.is_null() {
        request = request.json(body);
    }
    request.send().await.unwrap().status().as_u16()
}

/// The ids of a LangGraph thread search's threads.
async fn searched(server: &Served, client: &Client, body: Value) -> Vec<String> {
    let found = send_json(client.post(server.url("/lg/threads/search")).json(&body), 200).await;
    found.as_array().unwrap().iter().map(|t| t["thread_id"].as_str().unwrap().to_owned()).collect()
}

/// The ids of the native run listing.
async fn listed(server: &Served, client: &Client) -> Vec<String> {
    let page = get_json(client, &server.url("/runs?limit=100"), 200).await;
    page["runs"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect()
}

/// `serve` with JWTs and the fixture's blueprints (and, with `policy`,
/// that policy file), with a worker on Postgres (which `serve` leaves runs
/// to).
fn serve_users(fx: &Fixture, policy: Option<&str>) -> (Served, Option<support::Reaped>) {
    let secret = support::jwt_secret(fx);
    let library = fx.dir.path().to_str().unwrap().to_owned();
    let mut args = vec![
        "--jwt-secret-file".to_owned(),
        secret.to_str().unwrap().to_owned(),
        "--blueprints".to_owned(),
        library,
    ];
    if let Some(policy) = policy {
        std::fs::write(fx.path("policy"), policy).unwrap();
        args.extend(["--policy".to_owned(), fx.path("policy").to_str().unwrap().to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Served::start_with(fx, &args, None);
    let postgres = fx.db().to_string_lossy().starts_with("postgres");
    (server, postgres.then(|| support::Reaped::new(support::start_worker(fx))))
}

/// Stops the worker `serve_users` started, if any; it must stop cleanly.
fn stop_worker(worker: Option<support::Reaped>) {
    if let Some(mut worker) = worker {
        support::signal(&worker, "TERM");
        assert!(worker.wait().unwrap().success(), "the worker stops cleanly");
    }
}

#[test]
fn each_user_reaches_their_own_and_others_ids_are_not_found() {
    for fx in [Some(Fixture::new()), Fixture::postgres()].into_iter().flatten() {
        let unowned = fx.paused();
        let policy = "# readers see their tenant\nread tenant\n";
        let (server, worker) = serve_users(&fx, Some(policy));
        let ann = as_who("ann", &["user"], Some("acme"));
        let bob = as_who("bob", &["user"], Some("acme"));
        let carl = as_who("carl", &["user"], Some("initech"));
        let rita = as_who("rita", &["read"], Some("acme"));
        let root = as_who("root", &["admin"], None);
        runtime().block_on(async {
            let anns = make(&server, &ann).await;
            let bobs = make(&server, &bob).await;
            let carls = make(&server, &carl).await;

            // Bob, Carl (another tenant) and Rita (who may not change
            // anything) get the 404 of an unknown id on every route of
            // Ann's; nothing of hers changes.
            for route in routes(&anns).into_iter().chain(following(&anns)) {
                assert_eq!(status_of(&server, &bob, &route).await, 404, "bob: {route:?}");
                assert_eq!(status_of(&server, &carl, &route).await, 404, "carl: {route:?}");
            }
            let ann_run = server.url(&format!("/runs/{}", anns.native_run));
            assert_eq!(get_json(&ann, &ann_run, 200).await["status"], "awaiting_hitl");
            let ann_thread = server.url(&format!("/lg/threads/{}", anns.thread));
            assert_eq!(get_json(&ann, &ann_thread, 200).await["status"], "interrupted");
            // A run unknown to anyone reads the same as another's.
            let nobody = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
            let unknown = get_json(&bob, &server.url(&format!("/runs/{nobody}")), 404).await;
            let others = get_json(&bob, &ann_run, 404).await;
            assert_eq!(unknown["error"]["kind"], others["error"]["kind"]);
            // The admin's run (no thread, nobody's) is nobody's to users.
            get_json(&ann, &server.url(&format!("/runs/{unowned}")), 404).await;

            // Each one's reads of their own answer; the reader reaches
            // the tenant's, not another tenant's.
            for route in routes(&anns).into_iter().filter(|(method, ..)| method == Method::GET) {
                assert_eq!(status_of(&server, &ann, &route).await, 200, "ann: {route:?}");
                assert_eq!(status_of(&server, &rita, &route).await, 200, "rita: {route:?}");
                assert_eq!(status_of(&server, &root, &route).await, 200, "root: {route:?}");
            }
            for route in routes(&carls).into_iter().filter(|(method, ..)| method == Method::GET) {
                assert_eq!(status_of(&server, &rita, &route).await, 404, "rita: {route:?}");
            }

            // Listings and searches: each their own, the reader the
            // tenant's, the admin everything.
            let mut ann_runs = listed(&server, &ann).await;
            ann_runs.sort();
            let mut expected = vec![anns.native_run.clone(), anns.lg_run.clone()];
            expected.sort();
            assert_eq!(ann_runs, expected);
            let ann_threads = searched(&server, &ann, json!({"limit": 100})).await;
            assert_eq!(ann_threads, [anns.native_thread.clone(), anns.thread.clone()]);
            let waiting = json!({"status": "interrupted", "limit": 100});
            let bob_waiting = searched(&server, &bob, waiting.clone()).await;
            assert_eq!(bob_waiting, [bobs.native_thread.clone(), bobs.thread.clone()]);
            let count = send_json(bob.post(server.url("/lg/threads/count")).json(&json!({})), 200);
            assert_eq!(count.await, json!(2));
            let tenant = searched(&server, &rita, json!({"limit": 100})).await;
            assert_eq!(tenant.len(), 4, "ann's and bob's: {tenant:?}");
            assert!(!tenant.contains(&carls.thread));
            let all = listed(&server, &root).await;
            assert!(all.contains(&unowned) && all.contains(&carls.native_run), "{all:?}");

            // Ids chosen by a user cannot take another's thread.
            let taken = json!({"thread_id": anns.thread});
            send_json(bob.post(server.url("/lg/threads")).json(&taken), 409).await;
            let quietly = json!({"thread_id": anns.thread, "if_exists": "do_nothing"});
            send_json(bob.post(server.url("/lg/threads")).json(&quietly), 409).await;
            let onto = json!({"blueprint": "refunds", "input": "x", "thread": anns.native_thread});
            send_json(bob.post(server.url("/runs")).json(&onto), 404).await;
            let prune = json!({"thread_ids": [anns.thread], "strategy": "delete"});
            let pruned = send_json(bob.post(server.url("/lg/threads/prune")).json(&prune), 200);
            assert_eq!(pruned.await, json!({"pruned_count": 0}));
            get_json(&ann, &ann_thread, 200).await;

            // The server's own endpoints are not a user's.
            for (method, path) in [
                (Method::GET, "/schedules"),
                (Method::GET, "/metrics"),
                (Method::POST, "/lg/runs/crons/search"),
                (Method::POST, "/lg/runs/cancel"),
                (Method::POST, "/lg/assistants"),
            ] {
                let route = (method, path.to_owned(), json!({}));
                assert_eq!(status_of(&server, &ann, &route).await, 403, "{path}");
            }

            // The owner decides their own.
            let resume = server.url(&format!("/runs/{}/resume", anns.native_run));
            send_json(ann.post(resume).json(&json!({"decision": "approve"})), 200).await;
            let done = settled(&ann, &ann_run).await;
            assert_eq!(done["status"], "completed", "{done}");
            get_json(&bob, &ann_run, 404).await;
        });
        stop_worker(worker);
    }
}

#[test]
fn reviewers_see_and_decide_what_waits_for_their_group_and_nothing_else() {
    for fx in [Some(Fixture::new()), Fixture::postgres()].into_iter().flatten() {
        support::reviewed_blueprint(&fx);
        let (server, worker) = serve_users(&fx, None);
        let ann = as_who("ann", &["user"], Some("acme"));
        let fay = support::client_with(&support::jwt("fay", &["user"], &["finance"], None));
        let gus = as_who("gus", &["user"], None);
        runtime().block_on(async {
            let lg = |path: &str| server.url(&format!("/lg{path}"));
            // Ann's runs: one of `refunds` (nobody reviews it), two of
            // `reviewed` (finance does), each waiting for a decision.
            let plain = make(&server, &ann).await;
            let thread = send_json(ann.post(lg("/threads")).json(&json!({})), 200).await;
            let thread = thread["thread_id"].as_str().unwrap().to_owned();
            let input = json!({"messages": [{"role": "user", "content": "Refund order 7"}]});
            let body = json!({"assistant_id": "reviewed", "input": input});
            send_json(ann.post(lg(&format!("/threads/{thread}/runs/wait"))).json(&body), 200).await;
            let native = json!({"blueprint": "reviewed", "input": "Refund order 7"});
            let started = send_json(ann.post(server.url("/runs")).json(&native), 201).await;
            let run = started["id"].as_str().unwrap().to_owned();
            let run_url = server.url(&format!("/runs/{run}"));
            assert_eq!(settled(&ann, &run_url).await["status"], "awaiting_hitl");

            // Fay (finance) sees what waits for finance, and only that.
            let waiting = json!({"status": "interrupted", "limit": 100});
            let seen = searched(&server, &fay, waiting).await;
            assert_eq!(seen, [run.clone(), thread.clone()], "the two reviewed threads");
            assert!(searched(&server, &fay, json!({})).await.len() == 2);
            assert_eq!(listed(&server, &fay).await.len(), 2, "their runs, not the plain ones");
            get_json(&fay, &lg(&format!("/threads/{thread}")), 200).await;
            get_json(&fay, &lg(&format!("/threads/{thread}/state")), 200).await;
            get_json(&fay, &run_url, 200).await;
            for route in routes(&plain) {
                assert_eq!(status_of(&server, &fay, &route).await, 404, "fay: {route:?}");
            }
            // Gus (no finance) sees none of it.
            get_json(&gus, &lg(&format!("/threads/{thread}")), 404).await;
            get_json(&gus, &run_url, 404).await;
            // Seeing and deciding is all: anything else is refused.
            for (method, path, body) in [
                (Method::PATCH, format!("/lg/threads/{thread}"), json!({"metadata": {"x": 1}})),
                (Method::POST, format!("/lg/threads/{thread}/runs"), body.clone()),
                (Method::POST, format!("/lg/threads/{thread}/state"), json!({"values": {}})),
                (Method::DELETE, format!("/lg/threads/{thread}"), Value::Null),
                (Method::POST, format!("/runs/{run}/cancel"), Value::Null),
                (Method::DELETE, format!("/runs/{run}"), Value::Null),
                (Method::POST, format!("/threads/{run}/prune"), json!({})),
            ] {
                let route = (method, path, body);
                assert_eq!(status_of(&server, &fay, &route).await, 403, "{route:?}");
            }
            let refused = fay.post(lg(&format!("/threads/{thread}/runs"))).json(&body).send();
            let refused: Value = refused.await.unwrap().json().await.unwrap();
            assert!(refused["error"]["message"].as_str().unwrap().contains("reviews thread"));

            // Fay decides both, natively and as LangGraph's clients do.
            let approve = json!({"decision": "approve"});
            send_json(fay.post(format!("{run_url}/resume")).json(&approve), 200).await;
            assert_eq!(settled(&ann, &run_url).await["status"], "completed");
            let events = support::sse(&ann, &format!("{run_url}/events"), None).await;
            let resumed = events.iter().find(|(_, kind, _)| kind == "run_resumed").unwrap();
            assert_eq!(resumed.2["decisions"][0]["decided_by"], "fay", "{resumed:?}");
            let resume = json!({"assistant_id": "reviewed",
                                "command": {"resume": {"decisions": [{"type": "approve"}]}}});
            let url = lg(&format!("/threads/{thread}/runs/wait"));
            send_json(fay.post(url).json(&resume), 200).await;
            let done = get_json(&ann, &lg(&format!("/threads/{thread}")), 200).await;
            assert_eq!(done["status"], "idle", "{done}");
            // Decided: no longer hers to see.
            get_json(&fay, &lg(&format!("/threads/{thread}")), 404).await;
            get_json(&fay, &run_url, 404).await;
            assert!(searched(&server, &fay, json!({})).await.is_empty());
        });
        stop_worker(worker);
    }
}

/// A blueprint whose agent remembers one fact in namespace `memories`,
/// written as `memo.json`.
fn memo_blueprint(fx: &Fixture) {
    let replies = json!([
        {"tool_calls": [{"name": "remember", "args": {"text": "likes tea", "key": "tea"}}]},
        {"text": "Noted."}
    ]);
    std::fs::write(fx.path("memo_replies.json"), replies.to_string()).unwrap();
    let blueprint = json!({"name": "memo", "model": "scripted:memo_replies.json",
                           "memory": {"namespace": ["memories"]}});
    std::fs::write(fx.path("memo.json"), blueprint.to_string()).unwrap();
}

#[test]
fn each_users_memory_is_their_own_on_both_apis_and_in_their_runs() {
    for fx in [Some(Fixture::new()), Fixture::postgres()].into_iter().flatten() {
        memo_blueprint(&fx);
        let (server, worker) = serve_users(&fx, Some("read tenant\n"));
        let ann = as_who("ann", &["user"], Some("acme"));
        let bob = as_who("bob", &["user"], Some("acme"));
        let rita = as_who("rita", &["read"], Some("acme"));
        let root = as_who("root", &["admin"], None);
        runtime().block_on(async {
            // Ann's run remembers in `memories`: hers.
            let memo = json!({"blueprint": "memo", "input": "I like tea"});
            let started = send_json(ann.post(server.url("/runs")).json(&memo), 201).await;
            let run_url = server.url(&format!("/runs/{}", started["id"].as_str().unwrap()));
            assert_eq!(settled(&ann, &run_url).await["status"], "completed");
            let tea = server.url("/store/items?namespace=memories&key=tea");
            let hers = get_json(&ann, &tea, 200).await;
            assert_eq!(
                (&hers["namespace"], &hers["value"]["text"]),
                (&json!(["memories"]), &json!("likes tea"))
            );
            // Bob's `memories` is another: empty, then his own.
            get_json(&bob, &tea, 404).await;
            let his = json!({"namespace": "memories", "key": "tea", "value": {"text": "his"}});
            send_json(bob.put(server.url("/store/items")).json(&his), 200).await;
            assert_eq!(get_json(&ann, &tea, 200).await["value"]["text"], "likes tea");
            assert_eq!(get_json(&bob, &tea, 200).await["value"]["text"], "his");
            // The same through LangGraph's store API.
            let lg = |path: &str| server.url(&format!("/lg{path}"));
            let search = json!({"namespace_prefix": ["memories"]});
            let found = send_json(ann.post(lg("/store/items/search")).json(&search), 200).await;
            assert_eq!(found["items"].as_array().unwrap().len(), 1, "{found}");
            assert_eq!(found["items"][0]["namespace"], json!(["memories"]));
            let spaces = send_json(bob.post(lg("/store/namespaces")).json(&json!({})), 200).await;
            assert_eq!(spaces, json!({"namespaces": [["memories"]]}));
            let get = lg("/store/items?namespace=memories&key=tea");
            assert_eq!(get_json(&bob, &get, 200).await["value"]["text"], "his");
            // The tenant's reader sees both users' shelves; the admin the
            // store as it is.
            let spaces = send_json(rita.post(lg("/store/namespaces")).json(&json!({})), 200).await;
            assert_eq!(
                spaces,
                json!({"namespaces": [["users", "ann", "memories"], ["users", "bob", "memories"]]})
            );
            let stored =
                server.url("/store/items?namespace=tenants/acme/users/ann/memories&key=tea");
            assert_eq!(get_json(&root, &stored, 200).await["value"]["text"], "likes tea");
            let delete = server.url("/store/items?namespace=memories&key=tea");
            let deleted = send_json(bob.delete(&delete), 200).await;
            assert_eq!(deleted, json!({"deleted": true}));
            assert_eq!(get_json(&ann, &tea, 200).await["value"]["text"], "likes tea", "not hers");
        });
        stop_worker(worker);
    }
}
