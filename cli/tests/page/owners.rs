//! The review page on a server with users (JWTs): each user signs in and
//! sees their own runs only; a member of a reviewer group sees what waits
//! for their group, and approves it from the page.

use serde_json::json;

use crate::browser::{element, has, open_signed_in, text_where, Browser};
use crate::support::{self, get_json, runtime, send_json, settled, Fixture, Served};

#[test]
fn each_user_sees_their_own_runs_and_a_reviewer_decides_what_waits_for_them() {
    let Some(browser) = Browser::start() else { return };
    let fx = Fixture::new();
    let secret = support::jwt_secret(&fx);
    support::reviewed_blueprint(&fx);
    let library = fx.dir.path().to_str().unwrap().to_owned();
    let args = ["--jwt-secret-file", secret.to_str().unwrap(), "--blueprints", &library];
    let server = Served::start_with(&fx, &args, None);
    let ann_token = support::jwt("ann", &["user"], &[], Some("acme"));
    let fay_token = support::jwt("fay", &["user"], &["finance"], Some("acme"));
    let (ann, bob) = (
        support::client_with(&ann_token),
        support::client_with(&support::jwt("bob", &["user"], &[], Some("acme"))),
    );
    runtime().block_on(async {
        let start = |client: &reqwest::Client, blueprint: &str| {
            let body = json!({"blueprint": blueprint, "input": "Refund order 7"});
            let request = client.post(server.url("/runs")).json(&body);
            async move { send_json(request, 201).await["id"].as_str().unwrap().to_owned() }
        };
        let reviewed = start(&ann, "reviewed").await;
        let plain = start(&ann, "refunds").await;
        let bobs = start(&bob, "refunds").await;
        for (client, run) in [(&ann, &reviewed), (&ann, &plain), (&bob, &bobs)] {
            let shown = settled(client, &server.url(&format!("/runs/{run}"))).await;
            assert_eq!(shown["status"], "awaiting_hitl");
        }
        let row = |run: &str| format!("tr[data-run=\"{run}\"]");

        // Ann's inbox: her two runs, not Bob's.
        let page = browser.session().await;
        open_signed_in(&page, &server.url("/"), &ann_token).await;
        element(&page, &row(&reviewed)).await;
        element(&page, &row(&plain)).await;
        assert!(!has(&page, &row(&bobs)).await, "bob's run is not ann's");
        page.close().await.unwrap();

        // Fay (finance): the run that waits for finance, nothing else.
        let page = browser.session().await;
        open_signed_in(&page, &server.url("/"), &fay_token).await;
        element(&page, &row(&reviewed)).await;
        assert!(!has(&page, &row(&plain)).await && !has(&page, &row(&bobs)).await);
        page.goto(&server.url(&format!("/#/run/{reviewed}"))).await.unwrap();
        element(&page, &format!("[data-interrupt^=\"{reviewed}\"]")).await;
        element(&page, "button[data-kind=approve]").await.click().await.unwrap();
        element(&page, "button[data-send=approve]").await.click().await.unwrap();
        // The run goes on out of her sight: the page says so.
        text_where(&page, "#run-notice", |text| text.contains("no longer waits for you")).await;
        page.close().await.unwrap();
        let done = settled(&ann, &server.url(&format!("/runs/{reviewed}"))).await;
        assert_eq!(done["status"], "completed", "{done}");
        // Decided: no longer Fay's to see.
        let fay = support::client_with(&fay_token);
        get_json(&fay, &server.url(&format!("/runs/{reviewed}")), 404).await;
    });
}
