//! Finding things on the front-ends' pages: by CSS, or by XPath where a
//! button is known by its text (these pages have no ids).

use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, Locator};
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
            panic!("no usable `{what}`; the page shows:\n{}", shown(page).await);
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
