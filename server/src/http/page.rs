//! The review page: plain HTML, CSS and JavaScript modules embedded in the
//! binary, served from the API's origin. The files hold no data; every
//! run the page shows comes through the API with the token the reviewer
//! signs in with. The drawing of a graph the page shows is laid out here
//! (`layout.rs`), from the service's outline of the graph.

mod layout;

use axum::extract::{OriginalUri, Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::errors::ApiError;
use super::App;

pub(crate) use layout::draw;

/// One embedded file: its name under `/ui/`, content type and bytes.
struct Asset {
    name: &'static str,
    kind: &'static str,
    body: &'static str,
}

const INDEX: &str = include_str!("page/index.html");

const ASSETS: &[Asset] = &[
    Asset { name: "app.css", kind: "text/css; charset=utf-8", body: include_str!("page/app.css") },
    Asset { name: "app.js", kind: JS, body: include_str!("page/app.js") },
    Asset { name: "api.js", kind: JS, body: include_str!("page/api.js") },
    Asset { name: "dom.js", kind: JS, body: include_str!("page/dom.js") },
    Asset { name: "form.js", kind: JS, body: include_str!("page/form.js") },
    Asset { name: "graph.js", kind: JS, body: include_str!("page/graph.js") },
    Asset { name: "history.js", kind: JS, body: include_str!("page/history.js") },
    Asset { name: "list.js", kind: JS, body: include_str!("page/list.js") },
    Asset { name: "run.js", kind: JS, body: include_str!("page/run.js") },
    Asset { name: "words.js", kind: JS, body: include_str!("page/words.js") },
];

const JS: &str = "text/javascript; charset=utf-8";

/// What the page may load and where it may connect: its own origin only.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

/// `GET /`: the page. Nested under a prefix (`/tollgate`), its files are
/// named under the prefix (`/tollgate/ui/app.js`); the scripts find the
/// API at the page's own path.
pub(crate) async fn index(State(app): State<App>, OriginalUri(original): OriginalUri) -> Response {
    let prefix = original.path().trim_end_matches('/');
    let hint = app.settings.sign_in_hint.as_deref();
    if prefix.is_empty() && hint.is_none() {
        return served("text/html; charset=utf-8", INDEX);
    }
    let mut html = INDEX.replace("=\"/ui/", &format!("=\"{prefix}/ui/"));
    if let Some(hint) = hint {
        let meta = format!("<meta name=\"tollgate-sign-in\" content=\"{}\">\n", escaped(hint));
        html = html.replacen(
            "<meta charset=\"utf-8\">\n",
            &format!("<meta charset=\"utf-8\">\n{meta}"),
            1,
        );
    }
    let mut response = served("text/html; charset=utf-8", "");
    *response.body_mut() = axum::body::Body::from(html);
    response
}

/// `text` safe inside an HTML attribute.
fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `GET /ui/{file}`: the page's scripts and style.
pub(crate) async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|asset| asset.name == file) {
        Some(asset) => served(asset.kind, asset.body),
        None => ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no file `{file}`"))
            .into_response(),
    }
}

fn served(kind: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    // Revalidated on every load: a new binary serves new files.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// Whether `path` is one of the page's own files (served without the
/// token: they hold no data).
pub(crate) fn is_page(path: &str) -> bool {
    path == "/" || path.strip_prefix("/ui/").is_some_and(|file| !file.contains('/'))
}
