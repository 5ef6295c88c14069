//! The review page in a real browser: headless Chromium from Debian's
//! packages, driven over WebDriver (fantoccini), against `tollgate serve`.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod browser;
#[path = "page/forms.rs"]
mod forms;
#[path = "page/owners.rs"]
mod owners;
mod support;

use std::time::{Duration, Instant};

use fantoccini::Client;
use serde_json::{json, Value};

use browser::{
    check_drawing, click, element, has, open_signed_in, screenshot, text_where, Browser,
};
use support::{client, get_json, runtime, Fixture, Served, TOKEN};

/// The kinds of the run's stored events, in order.
fn event_types(fx: &Fixture, run: &str) -> Vec<String> {
    let output = fx.run(&["runs", "events", run, "--json"]);
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let event: Value = serde_json::from_str(line).unwrap();
            event["event_type"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// The run's summary over the API.
async fn summary(server: &Served, run: &str) -> Value {
    get_json(&client(), &server.url(&format!("/runs/{run}")), 200).await
}

/// Waits until the run's status is `status` (over the API).
async fn status_becomes(server: &Served, run: &str, status: &str) -> Value {
    let started = Instant::now();
    loop {
        let summary = summary(server, run).await;
        if summary["status"] == status {
            return summary;
        }
        assert!(started.elapsed() < browser::PATIENCE, "run {run} stayed {}", summary["status"]);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn open_run(page: &Client, server: &Served, run: &str) {
    open_signed_in(page, &server.url(&format!("/#/run/{run}")), TOKEN).await;
    element(page, &format!("[data-interrupt^=\"{run}\"]")).await;
}

/// A browser, and a server on a fixture with one paused refunds run.
struct Scene {
    browser: Browser,
    fx: Fixture,
    server: Served,
    run: String,
}

impl Scene {
    /// `None` (the test skipped) without a browser, as [`Browser::start`].
    fn paused() -> Option<Self> {
        let browser = Browser::start()?;
        let fx = Fixture::new();
        let server = Served::start(&fx, &[]);
        let run = fx.paused();
        Some(Self { browser, fx, server, run })
    }
}

#[test]
fn a_paused_run_shows_up_in_the_open_inbox_within_a_second() {
    if let Some(browser) = Browser::start() {
        inbox_on(&browser, &Fixture::new());
    }
}

#[test]
fn a_paused_run_shows_up_in_the_open_inbox_within_a_second_on_postgres() {
    if let (Some(browser), Some(fx)) = (Browser::start(), Fixture::postgres()) {
        inbox_on(&browser, &fx);
    }
}

fn inbox_on(browser: &Browser, fx: &Fixture) {
    let server = Served::start(fx, &[]);
    runtime().block_on(async {
        let page = browser.session().await;
        open_signed_in(&page, &server.url("/"), TOKEN).await;
        text_where(&page, "#list-note", |text| text.contains("Nothing is waiting")).await;
        text_where(&page, "#live-state", |text| text == "live").await;
        // Another process pauses a run.
        let run = fx.paused();
        let paused = Instant::now();
        let row = element(&page, &format!("tr[data-run=\"{run}\"]")).await;
        let seen = paused.elapsed();
        eprintln!("inbox showed the paused run {} ms after it paused", seen.as_millis());
        assert!(seen < Duration::from_secs(1), "took {seen:?}");
        let text = row.text().await.unwrap();
        assert!(
            text.contains("refunds") && text.contains("wants to call issue_refund with id = 7"),
            "{text}"
        );
        assert!(text.contains("Needs decision"), "{text}");
        // What the run was asked: the user's message, read from its state.
        let preview = format!("[data-preview=\"{run}\"]");
        text_where(&page, &preview, |text| text == "Refund order 7").await;
        // Filtering by another graph hides it; by its own shows it.
        element(&page, "#filter-graph").await.send_keys("other").await.unwrap();
        click(&page, ".filters button[type=submit]").await;
        text_where(&page, "#list-note", |text| text.contains("Nothing is waiting")).await;
        assert!(!has(&page, &format!("tr[data-run=\"{run}\"]")).await);
        page.goto(&server.url("/#/?status=awaiting_hitl&graph=refunds")).await.unwrap();
        element(&page, &format!("tr[data-run=\"{run}\"]")).await;
        // More paused runs: the inbox as the README shows it.
        for _ in 0..2 {
            fx.paused();
        }
        text_where(&page, "#runs tbody", |text| text.matches("issue_refund").count() == 3).await;
        screenshot(&page, "review-inbox").await;
        page.close().await.unwrap();
    });
}

#[test]
fn approving_from_the_page_completes_the_run_and_the_timeline_shows_it() {
    let Some(Scene { browser, fx: _fx, server, run }) = Scene::paused() else { return };
    runtime().block_on(async {
        let page = browser.session().await;
        open_run(&page, &server, &run).await;
        // What is decided, in words: the call, its arguments as a table,
        // the raw JSON folded away; the conversation so far.
        let ask = text_where(&page, "[data-interrupt] .ask", |text| !text.is_empty()).await;
        assert!(ask.ends_with("wants to call issue_refund with id = 7"), "{ask}");
        let args = element(&page, "[data-interrupt] table.args").await.text().await.unwrap();
        assert!(args.contains("id") && args.contains('7'), "{args}");
        // And what the tool does, in its own words.
        let what = element(&page, "[data-interrupt] .description").await.text().await.unwrap();
        assert_eq!(what, "Refund an order");
        assert!(!element(&page, "[data-interrupt] details.raw pre").await.is_displayed().await.unwrap());
        let said = text_where(&page, "#transcript", |text| text.contains("Refund order 7")).await;
        assert!(said.contains("lookup_order"), "the tool call is in the transcript: {said}");
        // Signed in: the sign-out button shows.
        assert!(element(&page, "#sign-out").await.is_displayed().await.unwrap());
        // A paused run's live badge stays settled: never "reconnecting…".
        for _ in 0..10 {
            let badge = element(&page, "#live-state").await.text().await.unwrap();
            assert_ne!(badge, "reconnecting…", "a pause is not a lost connection");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        // The graph drawing shows the tools node waiting.
        element(&page, "g.node[data-node=\"refunds.tools\"][data-state=\"waiting\"]").await;
        text_where(&page, "#timeline", |text| text.contains("Tool lookup_order")).await;
        page.set_window_size(1280, 1300).await.unwrap();
        screenshot(&page, "review-run").await;
        // Keyboard only: focus Approve, press Enter, then Enter on Send.
        element(&page, "button[data-kind=approve]").await.send_keys("\u{E007}").await.unwrap();
        let send = element(&page, "button[data-send=approve]").await;
        let focused = page.active_element().await.unwrap();
        assert_eq!(focused.attr("data-send").await.unwrap().as_deref(), Some("approve"));
        send.send_keys("\u{E007}").await.unwrap();
        // From the decision to the end, the badge never says the
        // connection was lost (the leg's stream closing is not that).
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            let badge = element(&page, "#live-state").await.text().await.unwrap();
            if seen.last() != Some(&badge) {
                seen.push(badge.clone());
            }
            if badge == "ended" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        assert_eq!(seen.last().map(String::as_str), Some("ended"), "{seen:?}");
        assert!(!seen.iter().any(|badge| badge == "reconnecting…"), "{seen:?}");
        text_where(&page, "#run-status", |text| text == "Done").await;
        // Decided: the panel no longer reads as pending, the badge settles.
        text_where(&page, "#decisions-title", |text| text == "Decided").await;
        assert!(!element(&page, "#decisions .reviewer").await.is_displayed().await.unwrap());
        text_where(&page, "#timeline", |text| {
            text.contains("Leg ended: done") && text.contains("Result: {\"refunded\":true}")
        })
        .await;
        // The command tool's output line and the final answer.
        text_where(&page, "#timeline", |text| text.contains("refunding {\"id\":7}")).await;
        text_where(&page, "#final-answer", |text| text.contains("Refunded 20 EUR")).await;
        element(&page, "g.node[data-node=\"refunds.tools\"][data-state=\"done\"]").await;
        // A node clicked shows the update it last wrote.
        click(&page, "g.node[data-node=\"refunds.tools\"]").await;
        let detail = text_where(&page, "#node-detail", |text| text.contains("last update")).await;
        assert!(detail.contains("refunds.tools · done") && detail.contains("refunded"), "{detail}");
        assert_eq!(summary(&server, &run).await["status"], "completed");
        // The history: checkpoints, a state, what changed.
        click(&page, "#actions a[href$=history]").await;
        element(&page, "#checkpoints li").await;
        let state = text_where(&page, "#state", |text| text.contains("messages")).await;
        assert!(state.contains("Refunded 20 EUR"), "{state}");
        let steps = page
            .execute("return [...document.querySelectorAll('#checkpoints li')].map(li => Number(li.dataset.step))", vec![])
            .await
            .unwrap();
        let steps: Vec<u64> = serde_json::from_value(steps).unwrap();
        assert!(steps.len() >= 3 && steps.windows(2).all(|pair| pair[0] > pair[1]), "{steps:?}");
        let oldest = steps.last().unwrap().to_string();
        element(&page, "#compare").await.select_by(fantoccini::Locator::Css(&format!("option[value=\"{oldest}\"]"))).await.unwrap();
        click(&page, "#compare + button").await;
        let diff = text_where(&page, "#diff", |text| text.contains("/messages")).await;
        assert!(diff.contains("appended"), "{diff}");
        page.close().await.unwrap();
    });
}

#[test]
fn a_pause_inside_a_nested_blueprint_is_shown_on_its_node_and_approved_from_the_page() {
    let Some(browser) = Browser::start() else { return };
    let fx = Fixture::new();
    support::review_pipeline(&fx);
    let server = Served::start(&fx, &[]);
    let paused =
        fx.json(&["run", "pipeline/pipeline.json", "--input", "Order 7 broke.", "--json"], 10);
    let run = paused["id"].as_str().unwrap().to_owned();
    runtime().block_on(async {
        let page = browser.session().await;
        open_run(&page, &server, &run).await;
        // The question names the node inside the subgraph; the drawing
        // marks the subgraph's node waiting, the node before it done.
        text_where(&page, "[data-interrupt]", |text| text.contains("at review/checker.tools"))
            .await;
        element(&page, "g.node[data-node=\"review\"][data-state=\"waiting\"]").await;
        element(&page, "g.node[data-node=\"intake\"][data-state=\"done\"]").await;
        text_where(&page, "#timeline", |text| text.contains("review:2.0/checker")).await;
        // The drawing: every edge drawn, none through a node; the
        // tool-less intake has no tools node.
        let graph_url = server.url(&format!("/runs/{run}/graph"));
        let graph = get_json(&client(), &graph_url, 200).await;
        assert_eq!(check_drawing(&page, &graph).await, graph["edges"].as_array().unwrap().len());
        assert!(!has(&page, "g.node[data-node=\"intake.tools\"]").await);
        // Opened, the subgraph shows its own graph, the waiting tools node
        // inside it; closed again, it is one node.
        click(&page, "[data-toggle=\"review\"]").await;
        element(&page, "g.node[data-node=\"review/checker.tools\"][data-state=\"waiting\"]").await;
        element(&page, "g.node[data-node=\"review/checker\"]").await;
        let open = get_json(&client(), &format!("{graph_url}?open=review"), 200).await;
        let inner = open["layout"]["edges"].as_array().unwrap().len();
        assert!(inner > graph["edges"].as_array().unwrap().len(), "{open}");
        assert_eq!(check_drawing(&page, &open).await, inner);
        text_where(&page, "#graph .edge-label", |text| text == "calls tools").await;
        page.set_window_size(1280, 1300).await.unwrap();
        screenshot(&page, "review-graph-open").await;
        click(&page, "[data-toggle=\"review\"]").await;
        for _ in 0..100 {
            if !has(&page, "g.node[data-node=\"review/checker\"]").await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        assert!(!has(&page, "g.node[data-node=\"review/checker\"]").await, "closed again");
        click(&page, "button[data-kind=approve]").await;
        click(&page, "button[data-send=approve]").await;
        text_where(&page, "#run-status", |text| text == "Done").await;
        element(&page, "g.node[data-node=\"review\"][data-state=\"done\"]").await;
        element(&page, "g.node[data-node=\"summary\"][data-state=\"done\"]").await;
        text_where(&page, "#final-answer", |text| text.contains("on its way")).await;
        page.close().await.unwrap();
    });
}

#[test]
fn an_edit_that_breaks_the_schema_shows_an_inline_error_and_changes_nothing() {
    let Some(Scene { browser, fx, server, run }) = Scene::paused() else { return };
    runtime().block_on(async {
        let page = browser.session().await;
        open_run(&page, &server, &run).await;
        let before = event_types(&fx, &run);
        click(&page, "button[data-kind=edit]").await;
        // The form from the schema: `id`, an integer, required, prefilled.
        let id = element(&page, ".schema-form input[type=number]").await;
        assert_eq!(id.prop("value").await.unwrap().as_deref(), Some("7"));
        assert_eq!(id.attr("step").await.unwrap().as_deref(), Some("1"));
        // Every control of the page has a label.
        let unlabelled = page
            .execute(
                "return [...document.querySelectorAll('input, select, textarea')]
                   .filter(c => c.labels.length === 0 && !c.getAttribute('aria-label')).map(c => c.outerHTML)",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(unlabelled, json!([]), "controls without a label");
        // Checked in the page: not an integer.
        id.clear().await.unwrap();
        id.send_keys("7.5").await.unwrap();
        click(&page, "button[data-send=edit]").await;
        let error = text_where(&page, ".field-error", |text| !text.is_empty()).await;
        eprintln!("inline error: {error}");
        assert_eq!(id.attr("aria-invalid").await.unwrap().as_deref(), Some("true"));
        // Empty: required.
        id.clear().await.unwrap();
        click(&page, "button[data-send=edit]").await;
        text_where(&page, ".field-error", |text| !text.is_empty()).await;
        // Checked again by the server: JSON that breaks the schema.
        click(&page, ".decision-area button.link").await;
        let editor = element(&page, ".decision-area textarea").await;
        editor.clear().await.unwrap();
        editor.send_keys(r#"{"id": "seven"}"#).await.unwrap();
        click(&page, "button[data-send=edit]").await;
        let refused = text_where(&page, "[data-interrupt] .error", |text| text.starts_with("Not recorded")).await;
        assert!(refused.contains("schema") && refused.contains("integer"), "{refused}");
        // Nothing changed: still paused, no new event.
        assert_eq!(summary(&server, &run).await["status"], "awaiting_hitl");
        assert_eq!(event_types(&fx, &run), before);
        // A good edit then goes through.
        editor.clear().await.unwrap();
        editor.send_keys(r#"{"id": 8}"#).await.unwrap();
        click(&page, "button[data-send=edit]").await;
        text_where(&page, "#run-status", |text| text == "Done").await;
        text_where(&page, "#timeline", |text| text.contains("edited to {\"id\":8}")).await;
        page.close().await.unwrap();
    });
}

#[test]
fn a_reject_ends_or_answers_the_run_as_its_graph_says() {
    let Some(browser) = Browser::start() else { return };
    let fx = Fixture::new();
    // The same blueprint, but a rejected refund ends the run.
    let mut blueprint: Value =
        serde_json::from_str(&std::fs::read_to_string(fx.path("refunds.json")).unwrap()).unwrap();
    blueprint["tools"][1]["on_reject"] = json!("end_run");
    std::fs::write(fx.path("refunds_end.json"), blueprint.to_string()).unwrap();
    let server = Served::start(&fx, &[]);
    let answered = fx.paused();
    let ended = fx.json(&["run", "refunds_end.json", "--input", "Refund 7", "--json"], 10)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    runtime().block_on(async {
        let page = browser.session().await;
        for (run, reason) in [(&answered, "not this one"), (&ended, "fraud")] {
            open_run(&page, &server, run).await;
            click(&page, "button[data-kind=reject]").await;
            element(&page, ".decision-area textarea").await.send_keys(reason).await.unwrap();
            click(&page, "button[data-send=reject]").await;
        }
        // Routed back to the agent: the run goes on and completes.
        let summary_answered = status_becomes(&server, &answered, "completed").await;
        assert_eq!(summary_answered["status"], "completed");
        // Ends the run: rejected, with the reason; the page says so.
        text_where(&page, "#run-status", |text| text == "Rejected").await;
        text_where(&page, "#run-error", |text| text.contains("fraud")).await;
        assert_eq!(summary(&server, &ended).await["status"], "rejected");
        page.goto(&server.url(&format!("/#/run/{answered}"))).await.unwrap();
        text_where(&page, "#timeline", |text| {
            text.contains("rejected (“not this one”)")
                && text.contains("A person rejected this call: not this one")
        })
        .await;
        page.close().await.unwrap();
    });
}

#[test]
fn two_reviewers_approve_at_once_one_wins_and_the_other_sees_who() {
    let Some(Scene { browser, fx, server, run }) = Scene::paused() else { return };
    runtime().block_on(async {
        let (alice, bob) = tokio::join!(browser.session(), browser.session());
        for (page, name) in [(&alice, "alice"), (&bob, "bob")] {
            open_run(page, &server, &run).await;
            element(page, "#reviewer").await.send_keys(name).await.unwrap();
            click(page, "button[data-kind=approve]").await;
            element(page, "button[data-send=approve]").await;
        }
        // Both press Send in the same moment.
        let press = "document.querySelector('button[data-send=approve]').click(); return true";
        let (a, b) = tokio::join!(alice.execute(press, vec![]), bob.execute(press, vec![]));
        a.unwrap();
        b.unwrap();
        let outcome = |page: &Client| {
            let page = page.clone();
            async move {
                text_where(&page, "[data-interrupt] .outcome", |text| !text.is_empty()).await;
                let won = has(&page, "[data-interrupt] .outcome .ok").await;
                (won, element(&page, "[data-interrupt] .outcome").await.text().await.unwrap())
            }
        };
        let ((alice_won, alice_says), (bob_won, bob_says)) =
            tokio::join!(outcome(&alice), outcome(&bob));
        assert!(alice_won ^ bob_won, "exactly one wins: alice {alice_says:?}, bob {bob_says:?}");
        let (winner, loser, loser_page) =
            if alice_won { ("alice", &bob_says, &bob) } else { ("bob", &alice_says, &alice) };
        assert!(loser.contains("Another decision was recorded first"), "{loser}");
        let named =
            text_where(loser_page, "[data-interrupt] .winner", |text| text.contains(winner)).await;
        assert!(named.contains("approved"), "{named}");
        // One decision recorded, the run continued once.
        status_becomes(&server, &run, "completed").await;
        let types = event_types(&fx, &run);
        assert_eq!(types.iter().filter(|kind| *kind == "run_resumed").count(), 1, "{types:?}");
        alice.close().await.unwrap();
        bob.close().await.unwrap();
    });
}

#[test]
fn without_the_token_the_page_asks_for_it_and_shows_no_data() {
    let Some(Scene { browser, fx: _fx, server, run }) = Scene::paused() else { return };
    runtime().block_on(async {
        let page = browser.session().await;
        for address in ["/", "/#/runs", &format!("/#/run/{run}")] {
            page.goto(&server.url(address)).await.unwrap();
            element(&page, "#sign-in").await;
            let main = element(&page, "#main").await.text().await.unwrap();
            assert!(!main.contains(&run) && !main.contains("refunds"), "{address}: {main}");
            assert!(!has(&page, "#runs, #facts, #timeline").await, "{address}");
            let sign_out = element(&page, "#sign-out").await;
            assert!(
                !sign_out.is_displayed().await.unwrap(),
                "{address}: no sign-out before signing in"
            );
        }
        // A wrong token is refused, and still nothing shows.
        page.goto(&server.url("/")).await.unwrap();
        element(&page, "#token").await.send_keys("not-the-token").await.unwrap();
        click(&page, "#sign-in button[type=submit]").await;
        text_where(&page, "#token-error", |text| text.contains("not the server")).await;
        assert!(!has(&page, "#runs").await);
        // The right one opens the inbox.
        let token = element(&page, "#token").await;
        token.clear().await.unwrap();
        token.send_keys(TOKEN).await.unwrap();
        click(&page, "#sign-in button[type=submit]").await;
        element(&page, &format!("tr[data-run=\"{run}\"]")).await;
        // Kept for this tab's session only, and signing out forgets it.
        let kept =
            page.execute("return sessionStorage.getItem('tollgate.token')", vec![]).await.unwrap();
        assert_eq!(kept, json!(TOKEN));
        let stored = page.execute("return localStorage.length", vec![]).await.unwrap();
        assert_eq!(stored, json!(0));
        click(&page, "#sign-out").await;
        element(&page, "#sign-in").await;
        assert!(!element(&page, "#sign-out").await.is_displayed().await.unwrap());
        page.close().await.unwrap();
    });
}

#[test]
fn the_run_page_fits_a_phone_screen() {
    let Some(Scene { browser, fx: _fx, server, run }) = Scene::paused() else { return };
    runtime().block_on(async {
        let page = browser.session().await;
        page.set_window_size(390, 844).await.unwrap();
        for address in [format!("/#/run/{run}"), "/".to_owned()] {
            open_signed_in(&page, &server.url(&address), TOKEN).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let fits = page
                .execute(
                    "return document.documentElement.scrollWidth <= window.innerWidth + 1",
                    vec![],
                )
                .await
                .unwrap();
            assert_eq!(fits, json!(true), "{address} scrolls sideways on a phone");
            let name = if address == "/" { "review-inbox-phone" } else { "review-run-phone" };
            screenshot(&page, name).await;
        }
        page.close().await.unwrap();
    });
}

#[test]
fn a_running_run_streams_into_the_page_and_can_be_cancelled_and_continued() {
    let Some(browser) = Browser::start() else { return };
    let fx = Fixture::new();
    // A streaming model, and a tool that prints a line every 0.2 s until
    // the test lets it finish, so that a browser slow to start still sees
    // it running. Continued, it ends at once: the new leg's events take
    // the numbers of the cancelled step's, which the page showed live.
    let release = support::held_blueprint(&fx, "tick", true);
    let folder = fx.dir.path().to_str().unwrap().to_owned();
    let server = Served::start(&fx, &["--blueprints", &folder]);
    runtime().block_on(async {
        let created = client()
            .post(server.url("/runs"))
            .json(&json!({"blueprint": "tick", "input": "tick"}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
        let run = created.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
        let page = browser.session().await;
        open_signed_in(&page, &server.url(&format!("/#/run/{run}")), TOKEN).await;
        // Lines arrive while the tool runs: before its result.
        let seen = text_where(&page, "#timeline", |text| text.contains("tick 2")).await;
        assert!(!seen.contains("Result:"), "the tool had finished already: {seen}");
        element(&page, "g.node[data-node=\"tick.tools\"][data-state=\"running\"]").await;
        click(&page, "#cancel").await;
        text_where(&page, "#run-status", |text| text == "Stopped").await;
        assert_eq!(summary(&server, &run).await["status"], "interrupted");
        // The cancelled leg's end takes the number of the first event the
        // page saw live of the step that never committed: the server takes
        // those back (a rewind), and the page draws the end.
        element(&page, "#timeline li.end-interrupted").await;
        // Continue runs the step again, to the end.
        std::fs::write(&release, "").unwrap();
        click(&page, "#continue").await;
        text_where(&page, "#run-status", |text| text == "Done").await;
        // The streamed reply sits in its model call's entry (the status
        // comes from a summary read, which may see the end before the
        // run's events are drawn).
        let started = Instant::now();
        loop {
            let streamed = page
                .execute("return [...document.querySelectorAll('#timeline .stream')].map(e => e.textContent)", vec![])
                .await
                .unwrap();
            if streamed.as_array().unwrap().contains(&json!("ticked")) {
                break;
            }
            assert!(started.elapsed() < browser::PATIENCE, "{streamed}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        // The timeline is the stored log: the cancelled leg's end is there
        // and nothing it showed live of the step that never committed.
        let shown = page
            .execute("return [...document.querySelectorAll('#timeline li')].map(e => [Number(e.dataset.seq), e.dataset.type])", vec![])
            .await
            .unwrap();
        let stored: std::collections::HashMap<u64, String> =
            support::stored_log(&fx, &run).into_iter().collect();
        let shown: Vec<(u64, String)> = serde_json::from_value(shown).unwrap();
        for (seq, kind) in &shown {
            assert_eq!(stored.get(seq), Some(kind), "the page shows {kind} as event {seq}: {shown:?}");
        }
        assert!(shown.windows(2).all(|pair| pair[0].0 < pair[1].0), "in order, once: {shown:?}");
        let ends = page.find_all(fantoccini::Locator::Css("#timeline li.end-interrupted")).await.unwrap();
        assert_eq!(ends.len(), 1, "the cancelled leg's end: {shown:?}");
        text_where(&page, "#final-answer", |text| text == "ticked").await;
        page.close().await.unwrap();
    });
}
