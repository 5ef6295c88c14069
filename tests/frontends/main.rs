//! LangGraph's own front-ends, unchanged, against tollgate's LangGraph API:
//! Agent Chat UI and Agent Inbox (pinned snapshots, production builds made
//! by `scripts/frontends`), in headless Chromium over WebDriver, talking
//! to the `bench_server` example with a token (which both send as
//! `x-api-key`). Its blueprint agent `shop` streams from the testkit's fake
//! OpenAI server and calls a tool that needs approval.
//!
//! Needs `TOLLGATE_FRONTENDS=$(bash scripts/frontends)` and Chromium with
//! chromedriver (`scripts/browser`); skipped with a note without them,
//! except under `CI=true`.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is the report.

mod chat;
mod inbox;
mod page;
mod support;

use tollgate_testkit::browser::Browser;
use tollgate_testkit::fake_openai::FakeOpenAi;

use support::{api, Next, Server};

/// Everything one test runs.
pub(crate) struct Stack {
    pub(crate) openai: FakeOpenAi,
    pub(crate) chat: Next,
    pub(crate) inbox: Next,
    pub(crate) server: Server,
    pub(crate) client: reqwest::Client,
}

#[test]
fn agent_chat_ui_and_agent_inbox_decide_runs_unchanged() {
    let Some(builds) = support::builds() else { return };
    let Some(browser) = Browser::start() else { return };
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let openai = FakeOpenAi::start().await;
        let chat = Next::start(&builds, "agent-chat-ui").await;
        let inbox = Next::start(&builds, "agent-inbox").await;
        let server = Server::start(openai.base_url(), &[&chat.origin, &inbox.origin]);
        let stack = Stack { openai, chat, inbox, server, client: api() };
        let page = browser.session().await;
        let waiting = chat::drive(&stack, &page).await;
        inbox::drive(&stack, &page, &waiting).await;
        page.close().await.unwrap();
    });
}
