//! A small client of the JSON API: base URL, Bearer key, errors from `{"error": ...}`.

use anyhow::{bail, Context};
use serde_json::Value;

use crate::ClientArgs;

pub(crate) struct ApiClient {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
}

/// The API base URL from `--server`: `http://` is assumed when no scheme is given
/// (`127.0.0.1:8080`); another scheme than http or https is an error naming it.
fn server_base(server: &str) -> anyhow::Result<String> {
    let trimmed = server.trim().trim_end_matches('/');
    let url = match trimmed.split_once("://") {
        Some(("http" | "https", rest)) if !rest.is_empty() => trimmed.to_owned(),
        Some((scheme, _)) => anyhow::bail!(
            "--server {server:?}: scheme {scheme:?} is not http or https (e.g. http://127.0.0.1:8080)"
        ),
        None if !trimmed.is_empty() => format!("http://{trimmed}"),
        None => anyhow::bail!("--server is empty: give the API address, e.g. http://127.0.0.1:8080"),
    };
    Ok(url)
}

impl ApiClient {
    pub(crate) fn new(args: &ClientArgs) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .build()
                .context("cannot build HTTP client")?,
            base: server_base(&args.server)?,
            api_key: args.api_key.key.clone(),
        })
    }

    /// A client of a server this process started itself (no key: unauthenticated).
    pub(crate) fn local(base: &str) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .build()
                .context("cannot build HTTP client")?,
            base: base.trim_end_matches('/').to_owned(),
            api_key: None,
        })
    }

    pub(crate) async fn get(
        &self,
        path: &str,
        query: &[(String, String)],
    ) -> anyhow::Result<Value> {
        let url = format!("{}{}", self.base, path);
        self.send(&url, self.http.get(&url).query(query)).await
    }

    /// GET a non-JSON body (e.g. Turtle); errors still come as `{"error": ...}`.
    pub(crate) async fn get_bytes(
        &self,
        path: &str,
        query: &[(String, String)],
    ) -> anyhow::Result<Vec<u8>> {
        let url = format!("{}{}", self.base, path);
        self.send_raw(&url, self.http.get(&url).query(query)).await
    }

    /// PUT (or POST) a JSON body.
    pub(crate) async fn send_json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &Value,
    ) -> anyhow::Result<Value> {
        let url = format!("{}{}", self.base, path);
        self.send(&url, self.http.request(method, &url).json(body))
            .await
    }

    async fn send(&self, url: &str, req: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let body = self.send_raw(url, req).await?;
        serde_json::from_slice(&body)
            .with_context(|| format!("{url} answered with a body that is not JSON"))
    }

    /// Sends with the key; a non-2xx becomes an error carrying the API's message.
    async fn send_raw(
        &self,
        url: &str,
        mut req: reqwest::RequestBuilder,
    ) -> anyhow::Result<Vec<u8>> {
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|e| {
            // An HTTP/2-only peer (the OTLP/gRPC receiver) answers HTTP/1.1 with frames.
            let mut text = String::new();
            let mut cause: Option<&dyn std::error::Error> = Some(&e);
            while let Some(c) = cause {
                text.push_str(&c.to_string());
                cause = c.source();
            }
            let h2_only = text.contains("unexpected message") || text.contains("invalid HTTP version");
            let hint = if h2_only {
                " (it does not speak HTTP/1.1: is this the OTLP/gRPC port? The CLI talks to the JSON API, the UI's address: --server http://127.0.0.1:8080 by default)"
            } else {
                ""
            };
            anyhow::Error::new(e).context(format!("cannot reach {url}{hint}"))
        })?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .with_context(|| format!("cannot read the answer of {url}"))?;
        if !status.is_success() {
            let msg = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| "no error message".to_owned());
            bail!("{url} answered {status}: {msg}");
        }
        Ok(body.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::server_base;

    #[test]
    fn server_addresses_without_a_scheme_are_http() {
        assert_eq!(
            server_base("127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            server_base("https://t.example/").unwrap(),
            "https://t.example"
        );
        let err = server_base("ftp://x").unwrap_err().to_string();
        assert!(err.contains("ftp"), "{err}");
    }
}
