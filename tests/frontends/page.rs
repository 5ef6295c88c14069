//! Finding things on the front-ends' pages: by CSS, or by XPath where a
//! button is known by its text (these pages have no ids).

use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, Locator};
use serde_json::Value;
use tollgate_testkit::browser::{shown, PATIENCE};

/// `//…` is XPath, anything else CSS.
fn locator(what: &str) -> Locator<'_> {
    if what.starts_with("//") {
        Locator::XPath(what)
    } else {
        Locator::Css(what)
    }
}

/// The first element `what` names that is shown and enabled, once there
/// is one.
async fn usable(page: &Client, what: &str) -> Element {
    let started = Instant::now();
    loop {
        if let Ok(found) = page.find_all(locator(what)).await {
            for element in found {
                let shown = element.is_displayed().await.unwrap_or(false);
                let enabled = element.is_enabled().await.unwrap_or(false);
                if shown && enabled {
                    return element;
                }
            }
        }
        if started.elapsed() > PATIENCE {
            panic!("no usable `{what}`; {}", diagnosis(page).await);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until an element `what` names is shown.
pub(crate) async fn text_shown(page: &Client, what: &str) {
    usable(page, what).await;
}

/// Clicks the button whose text is `text` (once it is shown and enabled;
/// found again when the page redrew it in between).
pub(crate) async fn button(page: &Client, text: &str) {
    let what = format!("//button[normalize-space()='{text}']");
    let started = Instant::now();
    loop {
        let found = usable(page, &what).await;
        // In the middle of the window: not under a sticky header's fade.
        let scroll = "arguments[0].scrollIntoView({block: 'center'})";
        let argument = serde_json::to_value(&found).unwrap();
        let _ = page.execute(scroll, vec![argument]).await;
        match found.click().await {
            Ok(()) => return,
            Err(error) if started.elapsed() < PATIENCE => {
                // Stale (redrawn) or covered for a moment by an animation.
                let _ = error;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("click `{text}`: {error}"),
        }
    }
}

/// Types `keys` into the field `what` names (WebDriver key codes allowed).
pub(crate) async fn type_into(page: &Client, what: &str, keys: &str) {
    let started = Instant::now();
    loop {
        let field = usable(page, what).await;
        match field.send_keys(keys).await {
            Ok(()) => return,
            Err(error) if started.elapsed() < PATIENCE => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("type into `{what}`: {error}"),
        }
    }
}

/// The text the page shows.
pub(crate) async fn page_text(page: &Client) -> String {
    match page.execute("return document.body ? document.body.innerText : ''", vec![]).await {
        Ok(serde_json::Value::String(text)) => text,
        _ => String::new(),
    }
}

/// What a failure's message says of the page: its address, its text, and
/// the requests it made (each with when it started and ended, in ms since
/// the page loaded, and its status; an end of 0 is a request still open).
pub(crate) async fn diagnosis(page: &Client) -> String {
    let url = page.current_url().await.map(|url| url.to_string()).unwrap_or_default();
    let script = "return performance.getEntriesByType('resource')
        .filter(e => e.initiatorType === 'fetch' || e.initiatorType === 'xmlhttprequest')
        .map(e => `${Math.round(e.startTime)}..${Math.round(e.responseEnd)} ${e.responseStatus ?? ''} ${e.name}`)
        .join('\\n')";
    let requests = match page.execute(script, vec![]).await {
        Ok(Value::String(list)) => list,
        other => format!("(unreadable: {other:?})"),
    };
    format!("the page at {url} shows:\n{}\nits requests:\n{requests}", shown(page).await)
}

/// Waits until the page has read its thread's history again after its
/// last run's stream ended. `useStream` does so when a stream ends, and
/// Agent Chat UI then draws the approval card again from the history's
/// head, resetting what was typed or chosen in it: a decision made before
/// that read is lost (the card's default, approve, is what gets sent).
/// Seen through the page's resource timings (an entry is there once its
/// request has ended).
pub(crate) async fn history_read_after_stream(page: &Client) {
    let script = "const all = performance.getEntriesByType('resource');
        const streams = all.filter(e => e.name.includes('/runs/stream'));
        if (!streams.length) return false;
        const ended = streams[streams.length - 1].responseEnd;
        return all.some(e => e.name.includes('/history') && e.startTime >= ended - 1);";
    let started = Instant::now();
    loop {
        if let Ok(Value::Bool(true)) = page.execute(script, vec![]).await {
            // The read's answer is drawn within a frame or two.
            tokio::time::sleep(Duration::from_millis(250)).await;
            return;
        }
        if started.elapsed() > PATIENCE {
            panic!("the history was not read after the stream; {}", diagnosis(page).await);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
