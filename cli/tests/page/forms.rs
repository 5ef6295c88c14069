//! The review page's forms: a schema form answering a Rust graph's question,
//! a run deleted under an open page, the history page's fork and state
//! write (the inbox, decisions and streaming are in `page.rs`).

use std::time::Duration;

use serde_json::json;

use crate::browser::{attr, click, element, has, text_where, Browser};
use crate::support::{client, get_json, runtime, Fixture, Served};
use crate::{open_run, summary, Scene};

#[test]
fn a_question_from_a_rust_graph_is_answered_with_a_schema_form() {
    use std::sync::Arc;
    use tollgate_checkpoint::SqliteStore;
    use tollgate_engine::{
        Decision, DecisionKind, DynReducer, DynSchema, DynState, Executor, Interrupt, RunConfig,
        StateGraph, END, START,
    };
    let Some(browser) = Browser::start() else { return };
    let fx = Fixture::new();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2, "description": "Who ordered"},
            "count": {"type": "integer", "minimum": 1},
            "colour": {"enum": ["red", "blue"]},
            "urgent": {"type": "boolean"}
        },
        "required": ["name", "count"]
    });
    let asked = schema.clone();
    let graph = StateGraph::<DynState>::with_schema(
        "survey",
        1,
        DynSchema::new().field("answer", DynReducer::LastValue),
    )
    .node("ask", move |_state: Arc<DynState>, ctx| {
        let schema = asked.clone();
        async move {
            let question = Interrupt::new("question", json!({"question": "Who, and how many?"}))
                .allow([DecisionKind::Respond, DecisionKind::Reject])
                .schema(schema);
            let mut update = serde_json::Map::new();
            if let Decision::Respond { value } = ctx.interrupt(question)? {
                update.insert("answer".into(), value);
            }
            Ok(update)
        }
    })
    .edge(START, "ask")
    .edge("ask", END)
    .compile()
    .unwrap();
    let executor = Executor::new(SqliteStore::open(fx.db()).unwrap());
    let local = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = local
        .block_on(executor.run(&graph, DynState::default(), RunConfig::new()))
        .unwrap()
        .run_id
        .to_string();
    let server = Served::start(&fx, &[]);
    runtime().block_on(async {
        let page = browser.session().await;
        open_run(&page, &server, &run).await;
        // A graph the server does not have: no drawing, said so.
        text_where(&page, "#graph", |text| text.contains("of a graph this process does not have"))
            .await;
        click(&page, "button[data-kind=respond]").await;
        let name = element(&page, ".schema-form input[type=text]").await;
        // The schema's rules, in the page: too short.
        name.send_keys("A").await.unwrap();
        element(&page, ".schema-form input[type=number]").await.send_keys("3").await.unwrap();
        click(&page, "button[data-send=respond]").await;
        let error =
            text_where(&page, ".field:has(input[type=text]) .field-error", |text| !text.is_empty())
                .await;
        eprintln!("inline error: {error}");
        assert_eq!(name.attr("aria-invalid").await.unwrap().as_deref(), Some("true"));
        assert_eq!(summary(&server, &run).await["status"], "awaiting_hitl");
        name.send_keys("da").await.unwrap();
        element(&page, ".schema-form select")
            .await
            .select_by(fantoccini::Locator::Css("option[value=\"1\"]"))
            .await
            .unwrap();
        click(&page, ".schema-form input[type=checkbox]").await;
        click(&page, "button[data-send=respond]").await;
        text_where(&page, "[data-interrupt] .outcome", |text| text.contains("Answered")).await;
        page.close().await.unwrap();
    });
    // Recorded; the process with the graph continues the run.
    let run_id = run.parse().unwrap();
    let done = local.block_on(async {
        executor.continue_run(&graph, run_id, RunConfig::new()).await.unwrap().wait().await.unwrap()
    });
    assert_eq!(
        done.state.get("answer"),
        Some(&json!({"name": "Ada", "count": 3, "colour": "blue", "urgent": true}))
    );
}

#[test]
fn a_run_deleted_while_its_page_is_open_says_so() {
    let Some(Scene { browser, fx: _fx, server, run }) = Scene::paused() else { return };
    runtime().block_on(async {
        let page = browser.session().await;
        open_run(&page, &server, &run).await;
        text_where(&page, "#live-state", |text| text == "live").await;
        // A paused run can be deleted; its stream then closes, and the page
        // says the run is gone instead of reconnecting for ever.
        let deleted = client().delete(server.url(&format!("/runs/{run}"))).send().await.unwrap();
        assert_eq!(deleted.status(), 200);
        text_where(&page, "#live-state", |text| text == "gone").await;
        text_where(&page, "#run-notice", |text| text.contains("no longer exists")).await;
        page.close().await.unwrap();
    });
}

#[test]
fn the_history_page_forks_with_an_edit_and_writes_the_latest_state() {
    let Some(Scene { browser, fx: _fx, server, run }) = Scene::paused() else { return };
    runtime().block_on(async {
        let page = browser.session().await;
        let before = summary(&server, &run).await;
        // A fork from step 1 with an edit: the page opens the new run.
        open_run(&page, &server, &run).await;
        page.goto(&server.url(&format!("/#/run/{run}/history?step=1"))).await.unwrap();
        text_where(&page, "#travel-title", |text| text == "Change it from step 1").await;
        assert!(!has(&page, "#write-state").await, "a past checkpoint takes no write");
        let editor = element(&page, "#travel textarea").await;
        editor.clear().await.unwrap();
        editor.send_keys(r#"{"context": {"ticket": "T-9"}}"#).await.unwrap();
        element(&page, "#travel #reviewer").await.send_keys("Rita").await.unwrap();
        click(&page, "#fork").await;
        let mut forked = String::new();
        for _ in 0..100 {
            let url = page.current_url().await.unwrap().to_string();
            if let Some(id) = url.split("#/run/").nth(1).filter(|id| !id.contains('/')) {
                forked = id.to_owned();
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!forked.is_empty() && forked != run, "the page opened the fork: {forked}");
        let state = get_json(&client(), &server.url(&format!("/runs/{forked}/state")), 200).await;
        assert_eq!(state["values"]["context"]["ticket"], "T-9", "{state}");
        let first = server.url(&format!("/runs/{forked}/state?step=0"));
        let first = get_json(&client(), &first, 200).await;
        assert_eq!((&first["source"], &first["by"]), (&json!("fork"), &json!("Rita")), "{first}");
        // The fork's page says where it came from (a link to the source),
        // who forked it and what the fork changed.
        let said = text_where(&page, "#forked-from", |text| !text.is_empty()).await;
        let short = &run[run.len() - 8..];
        assert!(
            said.starts_with(&format!("…{short} at step 1 by Rita; changed: context")),
            "{said}"
        );
        assert_eq!(
            attr(&page, "#forked-from a", "href").await.as_deref(),
            Some(format!("#/run/{run}").as_str())
        );
        // So does its row in the inbox (it waits at the same approval).
        page.goto(&server.url("/#/")).await.unwrap();
        let row = format!("[data-preview=\"{forked}\"]");
        let said = text_where(&page, &row, |text| text.contains("forked from")).await;
        assert!(
            said.ends_with(&format!("forked from …{short} at step 1 by Rita; changed: context")),
            "{said}"
        );
        assert_eq!(summary(&server, &run).await, before, "the source run is unchanged");
        // A write on the latest checkpoint of the source.
        page.goto(&server.url(&format!("/#/run/{run}/history"))).await.unwrap();
        page.refresh().await.unwrap();
        text_where(&page, "#travel-title", |text| {
            text.ends_with(&format!("step {}", before["step"]))
        })
        .await;
        let editor = element(&page, "#travel textarea").await;
        editor.clear().await.unwrap();
        editor.send_keys(r#"{"context": {"reviewed": "from the page"}}"#).await.unwrap();
        click(&page, "#write-state").await;
        text_where(&page, "#travel-outcome", |text| text.starts_with("Written as step")).await;
        // The name given is kept, and the new checkpoint says who wrote it.
        page.refresh().await.unwrap();
        text_where(&page, "#checkpoints", |text| text.contains("edited by Rita")).await;
        let now = summary(&server, &run).await;
        assert_eq!(now["status"], "interrupted", "{now}");
        assert_eq!(now["step"], before["step"].as_u64().unwrap() + 1);
        let state = get_json(&client(), &server.url(&format!("/runs/{run}/state")), 200).await;
        assert_eq!(state["values"]["context"]["reviewed"], "from the page", "{state}");
        // Not JSON: marked inline, nothing sent.
        page.refresh().await.unwrap();
        text_where(&page, "#travel-title", |text| text.ends_with(&format!("step {}", now["step"])))
            .await;
        let editor = element(&page, "#travel textarea").await;
        editor.clear().await.unwrap();
        editor.send_keys("{not json").await.unwrap();
        click(&page, "#write-state").await;
        element(&page, "#travel textarea[aria-invalid=true]").await;
        assert_eq!(summary(&server, &run).await["step"], now["step"], "nothing written");
        page.close().await.unwrap();
    });
}
