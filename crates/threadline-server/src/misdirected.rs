//! Answers for data sent to the wrong port, naming the right one: OTLP/HTTP posted to
//! the API port (the habit from tools that take both on one port), and gRPC calls on
//! either HTTP port (a gRPC client gets a gRPC status it can print, not an HTTP 404).

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

/// The ports the OTLP receivers listen on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OtlpPorts {
    pub(crate) http: u16,
    pub(crate) grpc: u16,
}

/// OTLP/HTTP's export paths.
const OTLP_PATHS: [&str; 3] = ["/v1/traces", "/v1/logs", "/v1/metrics"];

fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"))
}

/// A trailers-only gRPC answer: UNIMPLEMENTED with `message` (percent-encoded, as
/// gRPC carries it in `grpc-message`).
fn grpc_unimplemented(message: &str) -> Response {
    let encoded: String = message
        .bytes()
        .map(|b| match b {
            b' '..=b'~' if b != b'%' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let mut response = StatusCode::OK.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert("grpc-status", HeaderValue::from_static("12"));
    if let Ok(v) = HeaderValue::from_str(&encoded) {
        headers.insert("grpc-message", v);
    }
    response
}

/// On the JSON API port: OTLP/HTTP exports and gRPC calls, answered with where to send
/// them; `None` for anything else.
pub(crate) fn on_api_port(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    ports: OtlpPorts,
) -> Option<Response> {
    if is_grpc(headers) {
        return Some(grpc_unimplemented(&format!(
            "this is Threadline's JSON API port; send OTLP/gRPC to port {}",
            ports.grpc
        )));
    }
    if method == Method::POST && OTLP_PATHS.contains(&path) {
        return Some(
            (
                StatusCode::NOT_FOUND,
                axum::Json(serde_json::json!({
                    "error": format!(
                        "this is Threadline's JSON API port: send OTLP/HTTP to port {} ({path} there), OTLP/gRPC to port {}",
                        ports.http, ports.grpc
                    )
                })),
            )
                .into_response(),
        );
    }
    None
}

/// On the OTLP/HTTP port: gRPC calls, answered with the gRPC port.
pub(crate) fn grpc_on_http_port(headers: &HeaderMap, ports: OtlpPorts) -> Option<Response> {
    is_grpc(headers).then(|| {
        grpc_unimplemented(&format!(
            "this is Threadline's OTLP/HTTP port; send OTLP/gRPC to port {}",
            ports.grpc
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORTS: OtlpPorts = OtlpPorts {
        http: 4318,
        grpc: 4317,
    };

    #[test]
    fn otlp_on_the_api_port_names_the_otlp_ports() {
        let headers = HeaderMap::new();
        let r = on_api_port(&Method::POST, "/v1/traces", &headers, PORTS).unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert!(on_api_port(&Method::GET, "/v1/traces", &headers, PORTS).is_none());
        assert!(on_api_port(&Method::POST, "/api/v1/lineage", &headers, PORTS).is_none());
        let mut grpc = HeaderMap::new();
        grpc.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc+proto"),
        );
        let r = on_api_port(&Method::POST, "/x.Y/Z", &grpc, PORTS).unwrap();
        assert_eq!(r.headers()["grpc-status"], "12");
        assert_eq!(
            r.headers()["grpc-message"],
            "this is Threadline's JSON API port; send OTLP/gRPC to port 4317"
        );
    }
}
