//! Headless Chromium driven over WebDriver (feature `browser`), for tests
//! of pages: the review page's, and LangGraph's front-ends run against
//! tollgate.
//!
//! chromedriver comes from `TOLLGATE_CHROMEDRIVER` or `PATH` (Debian's
//! `chromium-driver`, installed by the project's `scripts/browser`);
//! Chromium from `TOLLGATE_CHROMIUM` or `/usr/bin/chromium`. Without them
//! [`Browser::start`] answers `None` (the test is skipped with a note),
//! except under `CI=true`, where it panics.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// One chromedriver process; each session is a fresh Chromium with its own
/// empty profile.
#[derive(Debug)]
pub struct Browser {
    driver: Child,
    url: String,
    chromium: PathBuf,
    profiles: tempfile::TempDir,
}

impl Drop for Browser {
    /// Ends chromedriver and every Chromium it started: they share the
    /// process group chromedriver leads (on success, failure and panic).
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn found(variable: &str, fallback: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(variable).filter(|path| !path.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let fallback = PathBuf::from(fallback);
    if fallback.is_absolute() {
        return fallback.is_file().then_some(fallback);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(&fallback))
        .find(|path| path.is_file())
}

impl Browser {
    /// Starts chromedriver on a free port; `None` (the test skipped) when
    /// chromedriver or Chromium is missing outside CI.
    pub fn start() -> Option<Self> {
        let (Some(driver), Some(chromium)) = (
            found("TOLLGATE_CHROMEDRIVER", "chromedriver"),
            found("TOLLGATE_CHROMIUM", "/usr/bin/chromium"),
        ) else {
            assert!(
                std::env::var("CI").is_err(),
                "CI needs chromium and chromedriver: run `bash scripts/browser` first"
            );
            eprintln!("skipped: no chromium/chromedriver (bash scripts/browser installs them)");
            return None;
        };
        // Port 0: chromedriver binds a free port itself and says which. (A
        // port found free beforehand could be taken by another test's
        // server before chromedriver binds it: chromedriver then exits, and
        // the other server answered in its place until it stopped.)
        // A process group of its own, so that Drop ends the Chromium
        // processes it starts with it.
        // Chromium's own temporary folders (`org.chromium.Chromium.*`) go
        // under the profiles' folder, removed with it once the processes
        // are killed: a killed Chromium cannot clean up after itself.
        let profiles = tempfile::tempdir().expect("a folder for Chromium profiles");
        let scratch = profiles.path().join("tmp");
        std::fs::create_dir(&scratch).expect("a temporary folder for Chromium");
        let mut driver = Command::new(driver)
            .process_group(0)
            .env("TMPDIR", &scratch)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let stdout = driver.stdout.take().expect("chromedriver's stdout");
        let (told, port) = std::sync::mpsc::channel();
        // Reads its output until it exits, so that the pipe never fills.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let said = line.strip_prefix("ChromeDriver was started successfully on port ");
                if let Some(port) =
                    said.and_then(|rest| rest.trim_end_matches('.').parse::<u16>().ok())
                {
                    let _ = told.send(port);
                }
            }
        });
        let port = port.recv_timeout(Duration::from_secs(20)).expect("chromedriver listens");
        Some(Self { driver, url: format!("http://127.0.0.1:{port}"), chromium, profiles })
    }

    /// A new browser window (a fresh Chromium with an empty profile).
    pub async fn session(&self) -> Client {
        let profile =
            tempfile::tempdir_in(self.profiles.path()).expect("a Chromium profile").keep();
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": self.chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-quic", "--disable-dev-shm-usage",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else { unreachable!() };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("a Chromium session")
    }
}

/// How long a page gets to show something.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// The element `css` names, once there is one.
pub async fn element(page: &Client, css: &str) -> Element {
    match page.wait().at_most(PATIENCE).for_element(Locator::Css(css)).await {
        Ok(found) => found,
        Err(error) => panic!("no `{css}` on the page ({error}); it shows:\n{}", shown(page).await),
    }
}

/// What the page shows, for a failure's message: the text of its `#main`
/// when it has one, else of its body.
pub async fn shown(page: &Client) -> String {
    if let Ok(main) = page.find(Locator::Css("#main")).await {
        return main.text().await.unwrap_or_default();
    }
    match page.execute("return document.body ? document.body.innerText : ''", vec![]).await {
        Ok(Value::String(text)) => text,
        _ => page.source().await.unwrap_or_default(),
    }
}

/// Whether the page has an element `css` names now.
pub async fn has(page: &Client, css: &str) -> bool {
    !page.find_all(Locator::Css(css)).await.expect("the page answers").is_empty()
}

/// Waits until the text of `css` satisfies `wanted`; returns it.
pub async fn text_where(page: &Client, css: &str, wanted: impl Fn(&str) -> bool) -> String {
    let started = Instant::now();
    loop {
        if let Ok(found) = page.find(Locator::Css(css)).await {
            if let Ok(text) = found.text().await {
                if wanted(&text) {
                    return text;
                }
            }
        }
        if started.elapsed() > PATIENCE {
            panic!(
                "`{css}` never showed the expected text; the page shows:\n{}",
                shown(page).await
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Clicks what `css` names (once it is there; found again when the page
/// redrew it in between).
pub async fn click(page: &Client, css: &str) {
    let started = Instant::now();
    loop {
        match element(page, css).await.click().await {
            Ok(()) => return,
            Err(error) if started.elapsed() < PATIENCE && error.to_string().contains("stale") => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(error) => panic!("click `{css}`: {error}"),
        }
    }
}

/// Attribute `name` of what `css` names (once it is there; read again
/// when the page redrew it in between, as `click` does).
pub async fn attr(page: &Client, css: &str, name: &str) -> Option<String> {
    let started = Instant::now();
    loop {
        match element(page, css).await.attr(name).await {
            Ok(value) => return value,
            Err(error) if started.elapsed() < PATIENCE && error.to_string().contains("stale") => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(error) => panic!("attribute `{name}` of `{css}`: {error}"),
        }
    }
}
