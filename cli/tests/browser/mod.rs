//! Headless Chromium for the review page's tests: the testkit's
//! `browser` module, and what only this page needs.

use std::path::PathBuf;

mod drawing;

pub(crate) use drawing::check_drawing;

use fantoccini::Client;
// Each test binary including this module uses some of these.
#[allow(unused_imports)]
pub(crate) use tollgate_testkit::browser::{
    attr, click, element, has, text_where, Browser, PATIENCE,
};

/// Opens `url` and signs in with `token` when the page asks for it.
pub(crate) async fn open_signed_in(page: &Client, url: &str, token: &str) {
    // A fresh load, so that nothing of the page before is found below.
    page.goto("about:blank").await.unwrap();
    page.goto(url).await.unwrap();
    if attr(page, "#sign-in, #runs, #facts", "id").await.as_deref() == Some("sign-in") {
        element(page, "#token").await.send_keys(token).await.unwrap();
        click(page, "#sign-in button[type=submit]").await;
        element(page, "#runs, #facts").await;
    }
}

/// Writes a screenshot to `TOLLGATE_SCREENSHOTS/NAME.png` when that folder
/// is set (the README's pictures come from here).
pub(crate) async fn screenshot(page: &Client, name: &str) {
    let Some(dir) = std::env::var_os("TOLLGATE_SCREENSHOTS") else { return };
    let png = page.screenshot().await.unwrap();
    std::fs::write(PathBuf::from(dir).join(format!("{name}.png")), png).unwrap();
}
