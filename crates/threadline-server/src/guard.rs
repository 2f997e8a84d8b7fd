//! What every HTTP request passes before a handler sees it, on both HTTP ports:
//!
//! - **Host** must be one this server answers to — an IP address, `localhost` (or a
//!   name under it), or one of `[server] allowed_hosts` — so that a web page whose
//!   DNS name was rebound to 127.0.0.1 cannot read or write through the operator's
//!   browser (DNS rebinding). Only on a server without API keys: with keys, such a page
//!   has none (the UI keeps its key per origin), and exporters address the server by
//!   whatever name their network gives it.
//! - **One `Authorization` header** at most: with two, which one decides the tenant
//!   would depend on the reader.
//! - **State-changing requests** (anything but GET, HEAD, OPTIONS) from a browser must
//!   come from the same origin (or one of `[server] allowed_origins`): a page on
//!   another site cannot erase or register anything, even when no API key is
//!   configured. On the API port they must also be `application/json`, which a
//!   browser cannot send cross-site without a preflight this server never grants; and
//!   their body is read here, after the key is checked, under the size limit, the
//!   in-flight byte budget and the read timeout, and inflated when gzip'd — one set of
//!   rules and one error shape for every endpoint that takes a body.

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::Authenticator;
use crate::body_budget::{announced, decode_status, drain, BodyBudget, BodyRefusal};
use crate::error::ApiError;

/// Which names and origins the server answers to.
#[derive(Clone, Debug, Default)]
pub(crate) struct Origins {
    /// Whether Host is checked (a server without API keys).
    pub(crate) check_hosts: bool,
    /// Extra host names (no port), lower case; `*` allows any.
    pub(crate) hosts: Vec<String>,
    /// Extra origins (`https://grafana.example.com`), lower case, no trailing slash.
    pub(crate) origins: Vec<String>,
}

/// A request refused by the guard: its status and message.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: String) -> Self {
        Self { status, message }
    }
}

impl From<BodyRefusal> for Refusal {
    fn from(r: BodyRefusal) -> Self {
        Refusal::new(r.status(), r.to_string())
    }
}

impl Origins {
    /// The checks every request passes, on every HTTP port.
    pub(crate) fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
        if let Some(host) = request_host(headers).filter(|_| self.check_hosts) {
            if !self.host_allowed(&host) {
                return Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Host {host:?} is not a name this server answers to: use its address or localhost, or add the name to [server] allowed_hosts"
                    ),
                ));
            }
        }
        single_authorization(headers)?;
        if changes_state(method) {
            if let Some(origin) = headers.get(header::ORIGIN) {
                let origin = origin.to_str().unwrap_or("").trim().to_ascii_lowercase();
                if !self.origin_allowed(&origin, headers) {
                    return Err(Refusal::new(
                        StatusCode::FORBIDDEN,
                        format!(
                            "cross-origin request from {origin:?} refused: state-changing requests must come from this server's own pages, a client that sends no Origin, or an origin in [server] allowed_origins"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host);
        name.parse::<IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || self.hosts.iter().any(|h| h == "*" || *h == name)
    }

    /// Same origin (the origin's authority is the request's Host) or a listed one.
    fn origin_allowed(&self, origin: &str, headers: &HeaderMap) -> bool {
        if self.origins.iter().any(|o| o == origin) {
            return true;
        }
        let Some((_, authority)) = origin.split_once("://") else {
            return false; // "null", or garbage
        };
        request_host(headers).is_some_and(|host| host == authority)
    }
}

/// GET, HEAD and OPTIONS change nothing here; every other method may.
fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// An HTTP/2 request names its host in `:authority`, which reaches us as the URI's
/// authority, not a Host header: copied into Host so that the checks read one place.
pub(crate) fn authority_as_host(uri: &axum::http::Uri, headers: &mut HeaderMap) {
    if headers.contains_key(header::HOST) {
        return;
    }
    if let Some(value) = uri
        .authority()
        .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    {
        headers.insert(header::HOST, value);
    }
}

/// The request's Host in lower case.
fn request_host(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{fffd}").trim().to_ascii_lowercase())
}

/// The name part of a Host value: `[::1]:8080` → `::1`, `example.com:80` → `example.com`.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Two `Authorization` headers are refused: which one is the caller's key would
/// depend on who reads them.
pub(crate) fn single_authorization(headers: &HeaderMap) -> Result<(), Refusal> {
    if headers.get_all(header::AUTHORIZATION).iter().count() > 1 {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "more than one Authorization header: send one".to_owned(),
        ));
    }
    Ok(())
}

/// The API port's guard's state.
#[derive(Clone)]
pub(crate) struct ApiGuard {
    pub(crate) origins: Arc<Origins>,
    pub(crate) auth: Arc<Authenticator>,
    pub(crate) budget: BodyBudget,
    /// Where OTLP goes, for what is sent here instead.
    pub(crate) ports: crate::misdirected::OtlpPorts,
}

/// The API port's middleware: the checks above, then for state-changing requests the
/// media type, the key and the body (read, bounded, inflated).
pub(crate) async fn api_guard(
    State(guard): State<ApiGuard>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(answer) = crate::misdirected::on_api_port(
        request.method(),
        request.uri().path(),
        request.headers(),
        guard.ports,
    ) {
        let announced = announced(request.headers());
        drain(request.into_body(), announced).await;
        return answer;
    }
    match admit(&guard, request).await {
        Ok((request, reservation)) => {
            let response = next.run(request).await;
            drop(reservation);
            response
        }
        Err(refusal) => api_refusal(refusal),
    }
}

/// A refusal as the JSON API's error shape.
fn api_refusal(refusal: Refusal) -> Response {
    let mut response = (
        refusal.status,
        axum::Json(serde_json::json!({ "error": refusal.message })),
    )
        .into_response();
    if refusal.status == StatusCode::TOO_MANY_REQUESTS {
        crate::error::insert_retry_after(&mut response);
    }
    response
}

async fn admit(
    guard: &ApiGuard,
    request: Request,
) -> Result<(Request, Option<crate::body_budget::Reservation>), Refusal> {
    let (mut parts, body) = request.into_parts();
    authority_as_host(&parts.uri, &mut parts.headers);
    if let Err(refusal) = guard.origins.check(&parts.method, &parts.headers) {
        drain(body, announced(&parts.headers)).await;
        return Err(refusal);
    }
    if !changes_state(&parts.method) {
        return Ok((Request::from_parts(parts, body), None));
    }
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !is_json(content_type) {
        drain(body, announced(&parts.headers)).await;
        return Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("unsupported content type {content_type:?}: send application/json"),
        ));
    }
    if let Err(e) = guard
        .auth
        .authenticate(crate::auth::authorization(&parts.headers))
    {
        drain(body, announced(&parts.headers)).await;
        let e = ApiError::from(e);
        return Err(Refusal::new(e.status(), e.to_string()));
    }
    let (bytes, mut reservation) = guard.budget.read(&parts.headers, body).await?;
    let encoding = parts
        .headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned());
    let bytes = match encoding {
        None => bytes,
        Some(encoding) => {
            let inflated = threadline_ingest::decode_body(
                Some(&encoding),
                &bytes,
                guard.budget.limits(),
                &mut reservation,
            )
            .map_err(|e| Refusal::new(decode_status(&e), e.to_string()))?;
            parts.headers.remove(header::CONTENT_ENCODING);
            bytes::Bytes::from(inflated.into_owned())
        }
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Ok((
        Request::from_parts(parts, Body::from(bytes)),
        Some(reservation),
    ))
}

/// `application/json` or a `+json` type, parameters aside.
fn is_json(content_type: &str) -> bool {
    let media = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    media == "application/json" || (media.starts_with("application/") && media.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hosts_are_addresses_localhost_or_listed() {
        let origins = Origins {
            check_hosts: true,
            hosts: vec!["threadline.internal".into()],
            origins: vec![],
        };
        for ok in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "localhost:8080",
            "app.localhost",
            "10.1.2.3",
            "threadline.internal:443",
        ] {
            assert!(
                origins
                    .check(&Method::GET, &headers(&[("host", ok)]))
                    .is_ok(),
                "{ok}"
            );
        }
        let refused = origins
            .check(&Method::GET, &headers(&[("host", "evil.example:8080")]))
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert!(
            refused.message.contains("allowed_hosts"),
            "{}",
            refused.message
        );
        let any = Origins {
            check_hosts: true,
            hosts: vec!["*".into()],
            origins: vec![],
        };
        assert!(any
            .check(&Method::GET, &headers(&[("host", "evil.example")]))
            .is_ok());
        // With API keys the Host is not checked.
        assert!(Origins::default()
            .check(&Method::GET, &headers(&[("host", "threadline.svc:4318")]))
            .is_ok());
    }

    #[test]
    fn writes_from_another_origin_are_refused() {
        let origins = Origins {
            check_hosts: true,
            hosts: vec![],
            origins: vec!["https://grafana.example.com".into()],
        };
        let post = |pairs: &[(&str, &str)]| origins.check(&Method::POST, &headers(pairs));
        assert!(
            post(&[("host", "127.0.0.1:8080")]).is_ok(),
            "no Origin: not a browser"
        );
        assert!(post(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080")
        ])
        .is_ok());
        assert!(post(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://grafana.example.com")
        ])
        .is_ok());
        for bad in ["https://evil.example", "null", "http://127.0.0.1:9999"] {
            let refused = post(&[("host", "127.0.0.1:8080"), ("origin", bad)]).unwrap_err();
            assert_eq!(refused.status, StatusCode::FORBIDDEN, "{bad}");
        }
        // Reads are left to the browser's same-origin policy.
        assert!(origins
            .check(
                &Method::GET,
                &headers(&[
                    ("host", "127.0.0.1:8080"),
                    ("origin", "https://evil.example")
                ])
            )
            .is_ok());
    }

    #[test]
    fn an_http2_authority_is_read_as_the_host() {
        let mut h = headers(&[]);
        let uri: axum::http::Uri = "http://evil.example:8080/api/v1/traces".parse().unwrap();
        authority_as_host(&uri, &mut h);
        let origins = Origins {
            check_hosts: true,
            ..Origins::default()
        };
        assert!(origins.check(&Method::GET, &h).is_err());
        let mut h = headers(&[("host", "127.0.0.1:8080")]);
        authority_as_host(&uri, &mut h);
        assert_eq!(h[header::HOST], "127.0.0.1:8080");
    }

    #[test]
    fn two_authorization_headers_are_refused() {
        let refused = Origins::default()
            .check(
                &Method::GET,
                &headers(&[("authorization", "Bearer a"), ("authorization", "Bearer b")]),
            )
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn json_media_types() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json("application/vnd.openlineage+json"));
        for no in [
            "",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ] {
            assert!(!is_json(no), "{no}");
        }
    }
}
