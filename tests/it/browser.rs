//! Headless Chromium driven over WebDriver (Debian's `chromium` and
//! `chromium-driver`), for the console's tests.
//!
//! Where Chromium is missing the browser tests say so in one line and skip,
//! unless `SWITCHYARD_TEST_REQUIRE_BROWSER` is set (CI sets it), when they
//! fail.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// The accessibility checker run in the page (from npm, pinned).
const AXE_CORE: &str = "4.14.1";

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A browser session; the driver and browser stop when it is dropped.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium, or says why not and returns `None` (a failure when
    /// the browser is required).
    pub async fn start(test: &str) -> Option<Browser> {
        if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
            assert!(
                std::env::var_os("SWITCHYARD_TEST_REQUIRE_BROWSER").is_none(),
                "{test}: Chromium is required but {CHROMIUM} or {CHROMEDRIVER} is missing; apt-get install chromium chromium-driver"
            );
            eprintln!(
                "{test}: skipped, no Chromium here (apt-get install chromium chromium-driver)"
            );
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let profile = tempfile::tempdir().unwrap();
        // Without the network flags Chromium's own connections are refused
        // by these machines' closed network, and it logs errors for them.
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let url = format!("http://127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(e) if tokio::time::Instant::now() > deadline => {
                    panic!("{test}: chromedriver did not start a session within 30 s: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        Some(Browser {
            client,
            driver,
            _profile: profile,
        })
    }

    /// Goes to `url`.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// Types `text` into the field with id `id`, replacing what was there.
    pub async fn fill(&self, id: &str, text: &str) {
        let field = self.client.find(Locator::Id(id)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    /// Chooses the option with `value` in the select with id `id`.
    pub async fn choose(&self, id: &str, value: &str) {
        let select = self.client.find(Locator::Id(id)).await.unwrap();
        select.select_by_value(value).await.unwrap();
    }

    /// Clicks the button whose text is `label`, and waits for the page it
    /// leads to.
    pub async fn press(&self, label: &str) {
        let xpath = format!("//button[normalize-space()='{label}']");
        let button = self.client.find(Locator::XPath(&xpath)).await.unwrap();
        self.mark_page().await;
        button.click().await.unwrap();
        self.wait_for_new_page(label).await;
    }

    /// Marks the current page, so that a new one can be told from it.
    async fn mark_page(&self) {
        let mark = "document.documentElement.dataset.left = '1'";
        self.client.execute(mark, Vec::new()).await.unwrap();
    }

    /// Waits (up to 20 s) until a page without the mark has loaded.
    async fn wait_for_new_page(&self, after: &str) {
        let loaded = "return document.readyState === 'complete' \
                      && document.documentElement.dataset.left === undefined";
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            // While the old page unloads the script may fail: try again.
            if let Ok(Value::Bool(true)) = self.client.execute(loaded, Vec::new()).await {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no new page within 20 s of {after}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Clicks the button whose text is `label` and stays on the page (a
    /// script handles it).
    pub async fn click(&self, label: &str) {
        let xpath = format!("//button[normalize-space()='{label}']");
        let button = self.client.find(Locator::XPath(&xpath)).await.unwrap();
        button.click().await.unwrap();
    }

    /// Waits (up to 20 s) until the element with id `id` has text for
    /// which `done` holds; returns that text.
    pub async fn wait_for_text(&self, id: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let text = self.text_of(id).await;
            if done(&text) {
                return text;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "#{id} still reads {text:?} after 20 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Follows the link whose text is `label`.
    pub async fn follow(&self, label: &str) {
        let link = self.client.find(Locator::LinkText(label)).await.unwrap();
        self.mark_page().await;
        link.click().await.unwrap();
        self.wait_for_new_page(label).await;
    }

    /// The visible text of the page.
    pub async fn text(&self) -> String {
        let body = self.client.find(Locator::Css("body")).await.unwrap();
        body.text().await.unwrap()
    }

    /// The text of the element with id `id`.
    pub async fn text_of(&self, id: &str) -> String {
        let element = self.client.find(Locator::Id(id)).await.unwrap();
        element.text().await.unwrap()
    }

    /// Signs in with `key` and goes to the page the link `to` leads to.
    pub async fn sign_in(&self, host: &crate::harness::Host, key: &str, to: &str) {
        self.goto(&host.url("/sign-in")).await;
        self.fill("api_key", key).await;
        self.press("Sign in").await;
        self.follow(to).await;
    }

    /// Chooses `path` in the file input with id `id`.
    pub async fn attach(&self, id: &str, path: &std::path::Path) {
        let input = self.client.find(Locator::Id(id)).await.unwrap();
        input.send_keys(&path.display().to_string()).await.unwrap();
    }

    /// Ticks the checkbox with id `id`.
    pub async fn tick(&self, id: &str) {
        let box_ = self.client.find(Locator::Id(id)).await.unwrap();
        if box_.prop("checked").await.unwrap().as_deref() != Some("true") {
            box_.click().await.unwrap();
        }
    }

    /// The current value of the form field with id `id`.
    pub async fn value_of(&self, id: &str) -> String {
        let field = self.client.find(Locator::Id(id)).await.unwrap();
        field.prop("value").await.unwrap().unwrap_or_default()
    }

    /// The page's path.
    pub async fn path(&self) -> String {
        self.client.current_url().await.unwrap().path().to_string()
    }

    /// Saves a screenshot as `target/console-screenshots/{name}.png`, for
    /// review.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// The errors the browser logged to its console (a script error, a
    /// refused resource, a content-policy violation) since the last call.
    pub async fn console_errors(&self) -> Vec<Value> {
        let entries = self.client.issue_cmd(BrowserLog).await.unwrap();
        let Value::Array(entries) = entries else {
            panic!("the browser log is not a list: {entries}");
        };
        entries
            .into_iter()
            .filter(|e| e["level"] == "SEVERE")
            .collect()
    }

    /// Fails if the browser logged an error since the last check.
    pub async fn assert_no_console_errors(&self) {
        let errors = self.console_errors().await;
        assert!(errors.is_empty(), "browser console errors: {errors:?}");
    }

    /// Runs axe-core's WCAG 2 A and AA rules on the page and fails on any
    /// serious or critical violation.
    pub async fn assert_accessible(&self, page: &str) {
        self.client
            .execute(&axe_source(), Vec::new())
            .await
            .unwrap();
        let run = "const done = arguments[arguments.length - 1];\
                   axe.run(document, {runOnly: ['wcag2a', 'wcag2aa']})\
                     .then(r => done({passes: r.passes.length, violations: r.violations\
                       .filter(v => v.impact === 'serious' || v.impact === 'critical')\
                       .map(v => ({id: v.id, help: v.help, nodes: v.nodes.map(n => n.html)}))}))\
                     .catch(e => done({error: String(e)}));";
        let found = self.client.execute_async(run, Vec::new()).await.unwrap();
        assert!(
            found["passes"].as_u64().unwrap_or(0) > 0,
            "{page}: axe-core checked nothing: {found}"
        );
        let violations = &found["violations"];
        assert_eq!(
            violations.as_array().map(Vec::len),
            Some(0),
            "{page}: serious accessibility violations: {violations:#}"
        );
    }

    /// Scrolls the element with id `id` into view (for a screenshot).
    pub async fn scroll_to(&self, id: &str) {
        let script = format!("document.getElementById('{id}').scrollIntoView()");
        self.client.execute(&script, Vec::new()).await.unwrap();
    }

    /// Closes the session.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}

/// axe-core's script, fetched from npm once into `target/axe-core/`.
fn axe_source() -> String {
    let dir = PathBuf::from(crate::harness::TARGET).join("axe-core");
    let script = dir.join("package/axe.min.js");
    crate::harness::once_across_processes(
        "axe-core",
        || script.exists(),
        || {
            std::fs::create_dir_all(&dir).unwrap();
            let packed = Command::new("npm")
                .args(["pack", "--silent", &format!("axe-core@{AXE_CORE}")])
                .current_dir(&dir)
                .output()
                .expect("running npm (the accessibility check fetches axe-core)");
            assert!(
                packed.status.success(),
                "npm pack axe-core failed: {packed:?}"
            );
            let tarball = String::from_utf8(packed.stdout).unwrap();
            let status = Command::new("tar")
                .args(["xzf", tarball.trim()])
                .current_dir(&dir)
                .status()
                .unwrap();
            assert!(status.success(), "unpacking {tarball}");
        },
    );
    std::fs::read_to_string(&script).unwrap()
}

/// Where screenshots go: `target/console-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("console-screenshots")
}

/// ChromeDriver's log of the browser's console (`goog:loggingPrefs`).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or("")))
    }

    fn method_and_body(&self, _: &url::Url) -> (axum::http::Method, Option<String>) {
        (
            axum::http::Method::POST,
            Some(json!({"type": "browser"}).to_string()),
        )
    }
}
