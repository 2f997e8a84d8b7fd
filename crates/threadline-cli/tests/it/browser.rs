//! A real headless Chromium driven over WebDriver (Debian's chromium + chromedriver,
//! through fantoccini), for the UI tests: pages opened from their URLs, clicks, DOM
//! checks, console errors and screenshots under `target/ui-screenshots/`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

pub(crate) struct Browser {
    driver: Child,
    driver_url: String,
    pub(crate) client: Client,
    _profile: tempfile::TempDir,
}

/// The chromedriver to use, or `None` (saying so) outside `scripts/test`.
pub(crate) fn chromedriver(skipped: &str) -> Option<String> {
    match std::env::var("THREADLINE_CHROMEDRIVER") {
        Ok(path) => Some(path),
        Err(_) => {
            eprintln!(
                "THREADLINE_CHROMEDRIVER is not set: {skipped} skipped (scripts/test and CI set it)"
            );
            None
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn screenshot_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Browser {
    pub(crate) async fn start(driver_path: &str, width: u32, height: u32) -> Self {
        let port = free_port();
        let driver = Command::new(driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {driver_path}: {e}"));
        let driver_url = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": std::env::var("THREADLINE_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-quic",
                    format!("--user-data-dir={}", profile.path().display()),
                    format!("--window-size={width},{height}"),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let Value::Object(caps) = caps else {
            unreachable!()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&driver_url)
                .await
            {
                Ok(c) => break c,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("cannot open a Chromium session through {driver_url}: {e}"),
            }
        };
        Browser {
            driver,
            driver_url,
            client,
            _profile: profile,
        }
    }

    /// Opens `url` and waits for `css` to be in the page.
    pub(crate) async fn open(&self, url: &str, css: &str) -> Element {
        self.client.goto(url).await.unwrap();
        self.wait_for(css).await
    }

    pub(crate) async fn wait_for(&self, css: &str) -> Element {
        match self
            .client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css(css))
            .await
        {
            Ok(e) => e,
            Err(e) => {
                let url = self.client.current_url().await.map(|u| u.to_string());
                let text = self.text("body").await;
                panic!("{css} did not appear on {url:?}: {e}\npage text: {text}")
            }
        }
    }

    /// Waits until `css` matches an element whose text contains `needle`.
    pub(crate) async fn wait_for_text(&self, css: &str, needle: &str) -> Element {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for e in self.client.find_all(Locator::Css(css)).await.unwrap() {
                if e.text().await.unwrap_or_default().contains(needle) {
                    return e;
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "no {css} containing {needle:?}; page text: {}",
                    self.text("body").await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    pub(crate) async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map_or(0, |v| v.len())
    }

    pub(crate) async fn path(&self) -> String {
        let url = self.client.current_url().await.unwrap();
        format!(
            "{}{}",
            url.path(),
            url.query().map(|q| format!("?{q}")).unwrap_or_default()
        )
    }

    /// Waits until the page's path starts with `prefix`.
    pub(crate) async fn wait_path(&self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let path = self.path().await;
            if path.starts_with(prefix) {
                return path;
            }
            assert!(Instant::now() < deadline, "still on {path}, not {prefix}…");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Saves a PNG of the window as `target/ui-screenshots/NAME.png`.
    pub(crate) async fn screenshot(&self, name: &str) {
        // Let charts and layout settle.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let png = self.client.screenshot().await.unwrap();
        std::fs::write(screenshot_dir().join(format!("{name}.png")), png).unwrap();
    }

    /// Console messages at SEVERE level since the last call (chromedriver's log).
    pub(crate) async fn console_errors(&self) -> Vec<String> {
        let session = self.client.session_id().await.unwrap().unwrap();
        let log: Value = reqwest::Client::new()
            .post(format!("{}/session/{session}/se/log", self.driver_url))
            .json(&json!({"type": "browser"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        log["value"]
            .as_array()
            .unwrap_or_else(|| panic!("no browser log from chromedriver: {log}"))
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    pub(crate) async fn assert_no_console_errors(&self, page: &str) {
        let errors = self.console_errors().await;
        assert!(errors.is_empty(), "console errors on {page}: {errors:#?}");
    }

    pub(crate) async fn close(mut self) {
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
