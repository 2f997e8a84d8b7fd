//! A headless Chromium session over WebDriver: Debian's `chromedriver` started on a
//! free loopback port, driving `/usr/bin/chromium` with the flags this workplace needs
//! (root, no sandbox, no background network). Used by `bench ui` and, through
//! `#[path]`, by the UI tests, so both open the browser the same way.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};

pub(crate) struct Chromium {
    driver: Child,
    /// chromedriver's base URL.
    pub(crate) driver_url: String,
    pub(crate) client: Client,
    _profile: tempfile::TempDir,
}

impl Chromium {
    /// Starts `chromedriver` and opens a session of a `width`×`height` window.
    pub(crate) async fn start(
        driver_path: &str,
        chromium_path: &str,
        width: u32,
        height: u32,
    ) -> Result<Self, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port for chromedriver: {e}"))?
            .port();
        let mut driver = Command::new(driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {driver_path}: {e}"))?;
        let driver_url = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir().map_err(|e| format!("no profile directory: {e}"))?;
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium_path,
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
            unreachable!("a JSON object literal")
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
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    let _ = driver.kill();
                    return Err(format!(
                        "cannot open a Chromium session through {driver_url}: {e}"
                    ));
                }
            }
        };
        Ok(Chromium {
            driver,
            driver_url,
            client,
            _profile: profile,
        })
    }

    /// Console messages at SEVERE level since the last call (chromedriver's log).
    pub(crate) async fn console_errors(&self) -> Result<Vec<String>, String> {
        let session = self
            .client
            .session_id()
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no WebDriver session")?;
        let log: Value = reqwest::Client::new()
            .post(format!("{}/session/{session}/se/log", self.driver_url))
            .json(&json!({"type": "browser"}))
            .send()
            .await
            .map_err(|e| format!("chromedriver's log: {e}"))?
            .json()
            .await
            .map_err(|e| format!("chromedriver's log: {e}"))?;
        let entries = log["value"]
            .as_array()
            .ok_or_else(|| format!("no browser log from chromedriver: {log}"))?;
        Ok(entries
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect())
    }

    /// Ends the session and chromedriver.
    pub(crate) async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}
