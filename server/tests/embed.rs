//! The API nested in a service of its own: under `/tollgate`, beside the
//! service's routes, behind the service's own API-key middleware
//! (`Auth::External`), or behind a check the service supplies
//! (`Auth::Custom`). Real sockets, a real SQLite database.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use tollgate_server::{
    nest_under, Api, Auth, Authenticate, Principal, Refusal, Role, Runs, ServeOptions,
};

const KEY: &str = "service-key-1";

/// The service's own check: `x-api-key` on every path it guards.
async fn api_key(request: Request, next: Next) -> Response {
    match request.headers().get("x-api-key").and_then(|value| value.to_str().ok()) {
        Some(KEY) => next.run(request).await,
        _ => (StatusCode::UNAUTHORIZED, "no key").into_response(),
    }
}

/// A check the service supplies: `x-user` names the caller.
#[derive(Debug)]
struct Users;

impl Authenticate for Users {
    fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, Refusal> {
        match headers.get("x-user").and_then(|value| value.to_str().ok()) {
            Some("root") => Ok(Principal::new("root", Role::Admin)),
            Some(user) if !user.is_empty() => Ok(Principal::new(user, Role::Read)),
            _ => Err(Refusal::new("say who you are with `x-user`")),
        }
    }
}

async fn started(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

fn blueprints() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.json"), r#"[{"text": "Hello!"}]"#).unwrap();
    let hello = json!({"name": "hello", "model": "scripted:hello.json"});
    std::fs::write(dir.path().join("greeter.json"), hello.to_string()).unwrap();
    let broken = json!({"name": "broken", "modle": "scripted:hello.json"});
    std::fs::write(dir.path().join("broken.json"), broken.to_string()).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_nests_under_a_prefix_behind_the_service_s_own_check() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let folder = blueprints();
    let runs = Runs::open(&folder.path().join("runs.db"), true).await.unwrap();
    let mut options = ServeOptions::new(([127, 0, 0, 1], 0).into());
    options.auth = Auth::External;
    options.blueprints = Some(folder.path().to_owned());
    let api = Api::new(runs, options).unwrap();
    let app = Router::new()
        .route("/own", get(|| async { "the service's own route" }))
        .merge(nest_under("/tollgate", api.router().layer(axum::middleware::from_fn(api_key))));
    let base = started(app).await;
    let client =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let keyed = |request: reqwest::RequestBuilder| request.header("x-api-key", KEY);

    // What it can start: the folder's blueprints, not its reply files.
    let listed: Value = keyed(client.get(format!("{base}/tollgate/graphs")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<(&str, &str)> = listed["graphs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["name"].as_str().unwrap(), g["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(names, [("greeter", "blueprint")], "{listed}");
    assert_eq!(listed["graphs"][0]["outline"]["name"], "hello");
    // A blueprint that does not load is listed with its problems, in the
    // folder's terms (no path of the server's).
    assert_eq!(listed["invalid"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["invalid"][0]["file"], "broken.json");
    let problems = listed["invalid"][0]["problems"].as_str().unwrap();
    assert!(problems.contains("did you mean `model`?"), "{problems}");
    assert!(!problems.contains(&*folder.path().to_string_lossy()), "{problems}");
    // LangGraph's API, asked for it as an assistant, says why it cannot
    // be one (422), not that there is none; an unknown one is a 404.
    for (id, status) in [("broken", 422), ("missing", 404)] {
        let url = format!("{base}/tollgate/lg/assistants/{id}");
        let answer = keyed(client.get(url)).send().await.unwrap();
        assert_eq!(answer.status(), status, "assistant {id}");
        let body: Value = answer.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap().to_owned();
        if status == 422 {
            assert!(message.contains("broken.json"), "{message}");
            assert!(message.contains("did you mean `model`?"), "{message}");
            assert!(!message.contains(&*folder.path().to_string_lossy()), "{message}");
        }
    }

    // The service's routes stay its own; its check guards every tollgate path.
    let own = client.get(format!("{base}/own")).send().await.unwrap();
    assert_eq!(own.text().await.unwrap(), "the service's own route");
    for path in ["/tollgate/runs", "/tollgate", "/tollgate/ui/app.js", "/tollgate/healthz"] {
        let refused = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(refused.status(), 401, "{path} without the key");
    }

    // Started, driven and shown under the prefix.
    let response = keyed(client.post(format!("{base}/tollgate/runs?wait=true")))
        .json(&json!({"blueprint": "greeter", "input": "Hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let summary: Value = response.json().await.unwrap();
    assert_eq!(summary["status"], "completed");
    let id = summary["id"].as_str().unwrap();
    let shown: Value = keyed(client.get(format!("{base}/tollgate/runs/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["result"]["messages"][1]["content"], "Hello!");
    let events = keyed(client.get(format!("{base}/tollgate/runs/{id}/events")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(events.contains("run_ended"), "{events}");
    // Errors keep the JSON shape under the prefix.
    let missing = keyed(client.get(format!("{base}/tollgate/runs/01ARZ3NDEKTSV4RRFFQ69G5FAV")))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["kind"], "not_found");

    // The page at `/tollgate` names its files under the prefix.
    let page = keyed(client.get(format!("{base}/tollgate"))).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"src="/tollgate/ui/app.js""#), "asset URLs: {html}");
    assert!(html.contains(r#"href="/tollgate/ui/app.css""#), "asset URLs: {html}");
    // And at `/tollgate/` (which axum's `nest` alone leaves a 404):
    // `nest_under` redirects it to the page.
    let slash = keyed(client.get(format!("{base}/tollgate/"))).send().await.unwrap();
    assert_eq!(slash.status(), 308, "GET /tollgate/");
    assert_eq!(slash.headers()["location"], "/tollgate");
    let script = keyed(client.get(format!("{base}/tollgate/ui/api.js"))).send().await.unwrap();
    assert_eq!(script.status(), 200);
    assert!(script.text().await.unwrap().contains("BASE + path"));

    let (_, left) = api.release(Duration::from_secs(1)).await;
    assert_eq!(left, 0, "no leg left in a step");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_the_service_supplies_guards_every_endpoint_but_health_and_the_page() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let folder = blueprints();
    let runs = Runs::open(&folder.path().join("runs.db"), true).await.unwrap();
    let mut options = ServeOptions::new(([127, 0, 0, 1], 0).into());
    options.auth = Auth::Custom(Arc::new(Users));
    options.blueprints = Some(folder.path().to_owned());
    let router = tollgate_server::router(runs, options).unwrap();
    let base = started(Router::new().nest("/api", router)).await;
    let client = reqwest::Client::new();
    let refused = client.get(format!("{base}/api/runs")).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        (body["error"]["kind"].as_str(), body["error"]["message"].as_str()),
        (Some("unauthorized"), Some("say who you are with `x-user`"))
    );
    let listed = client.get(format!("{base}/api/runs")).header("x-user", "ana").send().await;
    assert_eq!(listed.unwrap().status(), 200);
    // A reader may not start runs; an admin may.
    let start = |user: &'static str| {
        client
            .post(format!("{base}/api/runs?wait=true"))
            .header("x-user", user)
            .json(&json!({"blueprint": "greeter", "input": "Hi"}))
            .send()
    };
    let forbidden = start("ana").await.unwrap();
    assert_eq!(forbidden.status(), 403);
    let body: Value = forbidden.json().await.unwrap();
    assert_eq!(body["error"]["kind"], "forbidden");
    assert!(body["error"]["message"].as_str().unwrap().contains("role admin"), "{body}");
    assert_eq!(start("root").await.unwrap().status(), 201);
    for open in ["/api/healthz", "/api", "/api/ui/app.css"] {
        let response = client.get(format!("{base}{open}")).send().await.unwrap();
        assert_eq!(response.status(), 200, "{open} needs no check");
    }
}
