//! Agent Inbox against tollgate: threads made by Agent Chat UI and by
//! LangGraph's API directly are listed with no hand-made metadata; a tool
//! approval is accepted, edited, answered with a response and marked as
//! resolved; a Rust graph's own question (`sign_off`) is accepted,
//! answered and ignored. Each run is checked through the API.

use std::time::{Duration, Instant};

use fantoccini::Client;
use serde_json::{json, Value};
use tollgate_testkit::browser::PATIENCE;

use crate::chat::{last_tool_message, tool_result};
use crate::page::{button, diagnosis, page_text, text_shown, type_into};
use crate::support::{get, post, refund_call, runs, streamed_text, thread_becomes, TOKEN};
use crate::Stack;

/// Drives Agent Inbox; `from_chat` is a thread Agent Chat UI left waiting
/// for a tool approval.
pub(crate) async fn drive(stack: &Stack, page: &Client, from_chat: &str) {
    // Three more refunds asked through the API, as the SDK asks them.
    let mut refunds = vec![from_chat.to_owned()];
    for order in [21, 22, 23] {
        refunds.push(refund_through_the_api(stack, order).await);
    }
    let sign_offs = [
        sign_off_through_the_api(stack, "report-1").await,
        sign_off_through_the_api(stack, "report-2").await,
        sign_off_through_the_api(stack, "report-3").await,
    ];

    open_inbox(stack, page, "shop").await;
    // Every waiting refund is listed (by the tool's name), with nothing
    // written into the threads' metadata by hand.
    listed(page, "issue_refund", refunds.len()).await;

    // Accept: the tool runs with the model's arguments.
    open_thread(stack, page, "shop", &refunds[0]).await;
    stack.openai.push(streamed_text(&["Refunded", " order 7."], Duration::from_millis(20)));
    button(page, "Accept").await;
    settled_success(stack, &refunds[0]).await;
    assert_eq!(tool_result(&stack.openai), json!({"order": 7}));

    // Edit: 22 becomes 25 (sent as text); the tool receives the integer.
    open_thread(stack, page, "shop", &refunds[2]).await;
    let field = "//p[normalize-space()='Order']/following-sibling::textarea";
    type_into(page, field, "\u{E009}a\u{E000}25").await;
    stack.openai.push(streamed_text(&["Refunded", " order 25."], Duration::from_millis(20)));
    button(page, "Submit").await;
    settled_success(stack, &refunds[2]).await;
    assert_eq!(tool_result(&stack.openai), json!({"order": 25}));

    // Response: a tool approval takes no answer of its own, so the text
    // rejects the call and reaches the model as the reason.
    open_thread(stack, page, "shop", &refunds[1]).await;
    type_into(page, "textarea[placeholder='Your response here...']", "Ask the customer first")
        .await;
    stack.openai.push(streamed_text(&["I will ask."], Duration::from_millis(20)));
    button(page, "Send Response").await;
    settled_success(stack, &refunds[1]).await;
    let told = last_tool_message(&stack.openai);
    assert!(
        told["content"].as_str().unwrap_or_default().contains("Ask the customer first"),
        "the model was not told: {told}"
    );

    // Mark as Resolved: the run ends; the model is not asked again.
    open_thread(stack, page, "shop", &refunds[3]).await;
    let asked = stack.openai.requests().len();
    button(page, "Mark as Resolved").await;
    let view = thread_becomes(&stack.client, &stack.server.api, &refunds[3], "idle").await;
    assert_eq!(view["interrupts"], json!({}), "{view}");
    assert_eq!(stack.openai.requests().len(), asked, "the model was asked again");

    // A Rust graph's own question, in the inbox of its graph.
    open_inbox(stack, page, "sign_off").await;
    listed(page, "sign_off", sign_offs.len()).await;
    let answers = [
        ("Accept", None, "signed"),
        ("Send Response", Some("Signed, with a note"), "Signed, with a note"),
        ("Ignore", None, "ignored"),
    ];
    for (thread, (action, typed, answer)) in sign_offs.iter().zip(answers) {
        open_thread(stack, page, "sign_off", thread).await;
        let shown = page_text(page).await;
        assert!(shown.contains("Sign off"), "the question is not shown:\n{shown}");
        if let Some(typed) = typed {
            type_into(page, "textarea[placeholder='Your response here...']", typed).await;
        }
        button(page, action).await;
        let values = settled_success(stack, thread).await;
        assert_eq!(values["answer"], answer, "{action}: {values}");
    }
}

/// A thread and a run of `shop` through the API, left waiting for the
/// approval of a refund of `order`.
async fn refund_through_the_api(stack: &Stack, order: u64) -> String {
    let api = &stack.server.api;
    stack.openai.push(refund_call(&format!("call_{order}"), order));
    let thread = post(&stack.client, &format!("{api}/threads"), &json!({})).await;
    let thread = thread["thread_id"].as_str().unwrap().to_owned();
    let input = json!({"messages": [{"role": "user", "content": format!("Refund order {order}")}]});
    post(
        &stack.client,
        &format!("{api}/threads/{thread}/runs/wait"),
        &json!({"assistant_id": "shop", "input": input}),
    )
    .await;
    thread_becomes(&stack.client, api, &thread, "interrupted").await;
    thread
}

/// A thread and a run of the Rust graph `sign_off`, left waiting.
async fn sign_off_through_the_api(stack: &Stack, text: &str) -> String {
    let api = &stack.server.api;
    let thread = post(&stack.client, &format!("{api}/threads"), &json!({})).await;
    let thread = thread["thread_id"].as_str().unwrap().to_owned();
    post(
        &stack.client,
        &format!("{api}/threads/{thread}/runs/wait"),
        &json!({"assistant_id": "sign_off", "input": {"text": text}}),
    )
    .await;
    thread_becomes(&stack.client, api, &thread, "interrupted").await;
    thread
}

/// Opens the inbox of `graph` (Agent Inbox keeps its inboxes and the API
/// key in the browser; its "Add Inbox" dialog writes the same).
///
/// Two of the app's own habits are kept out of the way, as a reviewer's
/// second visit would have them: the first look of a day that finds no
/// thread reloads the page once (`inbox-refreshed-DATE`), and an address
/// without all of its parameters is completed by `router.replace` while the
/// page hydrates, which can leave Next's layout suspended ("Loading
/// (layout)...") with no request made to the API. So the flag is set, and
/// every address is the full one the app itself would make.
async fn open_inbox(stack: &Stack, page: &Client, graph: &str) {
    let origin = &stack.inbox.origin;
    let inboxes = json!([{
        "id": inbox_id(graph), "graphId": graph, "deploymentUrl": stack.server.api,
        "name": format!("{graph} inbox"), "selected": true, "createdAt": "2026-12-06T00:00:00.000Z",
    }]);
    page.goto(origin).await.unwrap();
    page.execute(
        "localStorage.setItem('inbox:agent_inboxes', arguments[0]);
         localStorage.setItem('inbox:langchain_api_key', arguments[1]);
         localStorage.setItem('inbox-refreshed-' + new Date().toDateString(), 'true');",
        vec![json!(inboxes.to_string()), json!(TOKEN)],
    )
    .await
    .unwrap();
    page.goto(&inbox_url(stack, graph)).await.unwrap();
}

/// The inbox's id for `graph`'s inbox.
fn inbox_id(graph: &str) -> String {
    format!("tollgate-{graph}")
}

/// The full address of the interrupted threads of `graph`'s inbox.
fn inbox_url(stack: &Stack, graph: &str) -> String {
    let (origin, id) = (&stack.inbox.origin, inbox_id(graph));
    format!("{origin}/?agent_inbox={id}&inbox=interrupted&offset=0&limit=10")
}

/// Waits until the list shows exactly `count` items titled `title`.
async fn listed(page: &Client, title: &str, count: usize) {
    let what = format!("//span[normalize-space()='{title}']");
    let started = Instant::now();
    loop {
        let found = page.find_all(fantoccini::Locator::XPath(&what)).await.unwrap().len();
        if found == count {
            return;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{found} items titled {title}, not {count}; {}",
            diagnosis(page).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Opens a thread's page in `graph`'s inbox.
async fn open_thread(stack: &Stack, page: &Client, graph: &str, thread: &str) {
    let url = format!("{}&view_state_thread_id={thread}", inbox_url(stack, graph));
    page.goto(&url).await.unwrap();
    text_shown(page, "//button[normalize-space()='Mark as Resolved']").await;
}

/// Waits until the thread is idle, its newest run a success; returns the
/// thread's values.
async fn settled_success(stack: &Stack, thread: &str) -> Value {
    let api = &stack.server.api;
    let view = thread_becomes(&stack.client, api, thread, "idle").await;
    let runs = runs(&stack.client, api, thread).await;
    assert_eq!(runs[0]["status"], "success", "{runs:?}");
    let state = get(&stack.client, &format!("{api}/threads/{thread}/state")).await;
    assert_eq!(state["next"], json!([]), "{view}");
    state["values"].clone()
}
