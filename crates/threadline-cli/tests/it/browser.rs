//! A real headless Chromium driven over WebDriver (Debian's chromium + chromedriver,
//! through fantoccini), for the UI tests: pages opened from their URLs, clicks, DOM
//! checks, console errors and screenshots under `target/ui-screenshots/`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, Locator};

use crate::webdriver::Chromium;

pub(crate) struct Browser {
    session: Chromium,
    pub(crate) client: Client,
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

pub(crate) fn screenshot_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Browser {
    pub(crate) async fn start(driver_path: &str, width: u32, height: u32) -> Self {
        let chromium =
            std::env::var("THREADLINE_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let session = Chromium::start(driver_path, &chromium, width, height)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let client = session.client.clone();
        Browser { session, client }
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

    /// Waits until `css` matches at least `n` elements (pages that draw in steps, as
    /// their requests come back); how many it matched then.
    pub(crate) async fn wait_for_count(&self, css: &str, n: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found = self.count(css).await;
            if found >= n {
                return found;
            }
            if Instant::now() > deadline {
                panic!("{css} matched {found} elements, not {n}, within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Clicks the first element `css` matches. A page still laying out (a table filling
    /// in above the element) may put another element where the click lands: the click
    /// is tried again, on the element found anew, for up to 5 s.
    pub(crate) async fn click(&self, css: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let element = self
                .client
                .find(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("nothing to click at {css}: {e}"));
            match element.click().await {
                Ok(_) => return,
                Err(e) if Instant::now() < deadline && e.to_string().contains("intercepted") => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("clicking {css}: {e}"),
            }
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

    /// Console messages at SEVERE level since the last call.
    pub(crate) async fn console_errors(&self) -> Vec<String> {
        self.session.console_errors().await.unwrap()
    }

    pub(crate) async fn assert_no_console_errors(&self, page: &str) {
        let errors = self.console_errors().await;
        assert!(errors.is_empty(), "console errors on {page}: {errors:#?}");
    }

    /// Makes pages see `prefers-color-scheme: dark` (or light), through chromedriver's
    /// DevTools passthrough.
    pub(crate) async fn prefer_color_scheme(&self, scheme: &str) {
        let session = self.client.session_id().await.unwrap().unwrap();
        let resp = reqwest::Client::new()
            .post(format!(
                "{}/session/{session}/goog/cdp/execute",
                self.session.driver_url
            ))
            .json(
                &serde_json::json!({"cmd": "Emulation.setEmulatedMedia", "params": {
                "features": [{"name": "prefers-color-scheme", "value": scheme}]}}),
            )
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
    }

    pub(crate) async fn close(self) {
        self.session.close().await;
    }
}
