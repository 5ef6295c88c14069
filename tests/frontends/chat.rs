//! Agent Chat UI against tollgate: a reply streams into the page, the
//! thread shows in its list, and a tool approval is approved, edited,
//! rejected with a reason and marked as resolved from its card, each run
//! checked through the API and through what the model was sent.

use std::time::{Duration, Instant};

use fantoccini::Client;
use serde_json::{json, Value};
use tollgate_testkit::browser::{element, shown, PATIENCE};
use tollgate_testkit::fake_openai::FakeOpenAi;

use crate::page::{button, history_read_after_stream, page_text, text_shown, type_into};
use crate::support::{refund_call, runs, streamed_text, thread_becomes, TOKEN};
use crate::Stack;

/// Where the message box is.
const MESSAGE: &str = "textarea[placeholder='Type your message...']";

/// Drives Agent Chat UI; leaves one thread waiting for a decision, for
/// Agent Inbox. Returns that thread's id.
pub(crate) async fn drive(stack: &Stack, page: &Client) -> String {
    let origin = &stack.chat.origin;
    // Agent Chat UI keeps its API key in the browser; the deployment and
    // the assistant go in its address (which skips its set-up form).
    page.goto(origin).await.unwrap();
    page.execute("localStorage.setItem('lg:chat:apiKey', arguments[0])", vec![json!(TOKEN)])
        .await
        .unwrap();
    let home = reqwest::Url::parse_with_params(
        &format!("{origin}/"),
        &[
            ("apiUrl", stack.server.api.as_str()),
            ("assistantId", "shop"),
            ("chatHistoryOpen", "true"),
        ],
    )
    .unwrap()
    .to_string();

    streams_and_lists(stack, page, &home).await;
    approves(stack, page, &home).await;
    edits(stack, page, &home).await;
    rejects(stack, page, &home).await;
    resolves(stack, page, &home).await;
    // One left waiting, for the inbox.
    ask_for_refund(stack, page, &home, 7, "Refund order 7 (for the inbox)").await
}

/// A reply streams word by word, and the thread shows in the list.
async fn streams_and_lists(stack: &Stack, page: &Client, home: &str) {
    let pieces = ["Hello", " Ann", ", how", " can", " I", " help?"];
    stack.openai.push(streamed_text(&pieces, Duration::from_millis(300)));
    page.goto(home).await.unwrap();
    type_into(page, MESSAGE, "Hi, I am Ann").await;
    button(page, "Send").await;
    // Part of the reply is on the page before the rest was sent.
    let started = Instant::now();
    let mut partial = false;
    loop {
        let text = page_text(page).await;
        if text.contains("Hello Ann, how can I help?") {
            break;
        }
        partial |= text.contains("Hello Ann");
        assert!(started.elapsed() < PATIENCE, "no reply on the page:\n{text}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(partial, "the reply showed only once complete");
    let thread = thread_of(page).await;
    let view = thread_becomes(&stack.client, &stack.server.api, &thread, "idle").await;
    assert_eq!(view["metadata"]["graph_id"], "shop", "{view}");
    let runs = runs(&stack.client, &stack.server.api, &thread).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["status"], "success");
    // The thread list shows it (by its first message).
    page.goto(home).await.unwrap();
    text_shown(page, "//button[.//p[normalize-space()='Hi, I am Ann']]").await;
}

/// Approve: the tool runs with the model's arguments.
async fn approves(stack: &Stack, page: &Client, home: &str) {
    let thread = ask_for_refund(stack, page, home, 7, "Refund order 7").await;
    stack.openai.push(streamed_text(&["Refunded", " order 7."], Duration::from_millis(20)));
    button(page, "Approve").await;
    text_shown(page, "//p[contains(., 'Refunded order 7.')]").await;
    settled_success(stack, &thread, 1).await;
    assert_eq!(tool_result(&stack.openai), json!({"order": 7}));
}

/// Edit: the reviewer types 15 where the model said 7; the tool receives
/// the integer 15.
async fn edits(stack: &Stack, page: &Client, home: &str) {
    let thread = ask_for_refund(stack, page, home, 7, "Refund order 15").await;
    let field = "//p[normalize-space()='Order']/following-sibling::textarea";
    // Select all (Ctrl+A), then type over it.
    type_into(page, field, "\u{E009}a\u{E000}15").await;
    stack.openai.push(streamed_text(&["Refunded", " order 15."], Duration::from_millis(20)));
    button(page, "Submit").await;
    text_shown(page, "//p[contains(., 'Refunded order 15.')]").await;
    settled_success(stack, &thread, 1).await;
    assert_eq!(tool_result(&stack.openai), json!({"order": 15}));
    // The model's call in the thread shows the arguments it ran with.
    let state =
        crate::support::get(&stack.client, &format!("{}/threads/{thread}/state", stack.server.api))
            .await;
    let calls: Vec<Value> = state["values"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|message| message["tool_calls"].as_array())
        .flatten()
        .map(|call| call["args"].clone())
        .collect();
    assert_eq!(calls, [json!({"order": 15})]);
}

/// Reject with a reason: the model is told why, and answers.
async fn rejects(stack: &Stack, page: &Client, home: &str) {
    let thread = ask_for_refund(stack, page, home, 9, "Refund order 9").await;
    type_into(
        page,
        "textarea[placeholder='Share feedback with the agent...']",
        "Order 9 was never paid",
    )
    .await;
    stack.openai.push(streamed_text(&["No refund", " for order 9."], Duration::from_millis(20)));
    button(page, "Submit rejection").await;
    text_shown(page, "//p[contains(., 'No refund for order 9.')]").await;
    settled_success(stack, &thread, 1).await;
    let told = last_tool_message(&stack.openai);
    assert!(
        told["content"].as_str().unwrap_or_default().contains("Order 9 was never paid"),
        "the model was not told the reason: {told}"
    );
}

/// Mark as Resolved: the run ends where it is; the tool never runs, the
/// model is not asked again.
async fn resolves(stack: &Stack, page: &Client, home: &str) {
    let thread = ask_for_refund(stack, page, home, 11, "Refund order 11").await;
    let asked = stack.openai.requests().len();
    button(page, "Mark as Resolved").await;
    let view = thread_becomes(&stack.client, &stack.server.api, &thread, "idle").await;
    assert_eq!(view["interrupts"], json!({}), "{view}");
    let runs = runs(&stack.client, &stack.server.api, &thread).await;
    assert_eq!(runs[0]["status"], "success", "{runs:?}");
    assert_eq!(stack.openai.requests().len(), asked, "the model was asked again");
}

/// Opens a new thread, asks for a refund the model answers with a call of
/// `issue_refund` for `order`, and waits for the approval card. Returns
/// the thread.
async fn ask_for_refund(
    stack: &Stack,
    page: &Client,
    home: &str,
    order: u64,
    message: &str,
) -> String {
    stack.openai.push(refund_call(&format!("call_{order}"), order));
    page.goto(home).await.unwrap();
    type_into(page, MESSAGE, message).await;
    button(page, "Send").await;
    // The URL names the thread once the run started.
    let started = Instant::now();
    let thread = loop {
        if let Some(thread) = thread_in_url(page).await {
            break thread;
        }
        assert!(started.elapsed() < PATIENCE, "no thread in the address");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    thread_becomes(&stack.client, &stack.server.api, &thread, "interrupted").await;
    // The card with its buttons, once drawn from the history the page
    // reads again when the stream ended (a card drawn before is drawn
    // anew, what was typed into it gone).
    history_read_after_stream(page).await;
    element(page, "textarea[placeholder='Share feedback with the agent...']").await;
    text_shown(page, "//button[normalize-space()='Mark as Resolved']").await;
    let card = page_text(page).await;
    assert!(card.contains("issue_refund"), "no tool name on the card:\n{card}");
    thread
}

async fn thread_in_url(page: &Client) -> Option<String> {
    let url = page.current_url().await.ok()?;
    url.query_pairs().find(|(key, _)| key == "threadId").map(|(_, value)| value.into_owned())
}

async fn thread_of(page: &Client) -> String {
    match thread_in_url(page).await {
        Some(thread) => thread,
        None => panic!("no thread in the address; the page shows:\n{}", shown(page).await),
    }
}

/// Waits until the thread is idle with `count` runs, the newest a success.
async fn settled_success(stack: &Stack, thread: &str, count: usize) {
    let view = thread_becomes(&stack.client, &stack.server.api, thread, "idle").await;
    let runs = runs(&stack.client, &stack.server.api, thread).await;
    assert_eq!(runs.len(), count, "{runs:?}");
    assert_eq!(runs[0]["status"], "success", "{runs:?} {view}");
}

/// The last `tool` message the model was sent.
pub(crate) fn last_tool_message(openai: &FakeOpenAi) -> Value {
    let body = openai.last_body();
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|message| message["role"] == "tool")
        .cloned()
        .unwrap_or_else(|| panic!("no tool message in {body}"))
}

/// What the tool answered (it echoes its arguments), as the model got it.
pub(crate) fn tool_result(openai: &FakeOpenAi) -> Value {
    let message = last_tool_message(openai);
    serde_json::from_str(message["content"].as_str().unwrap()).unwrap()
}
