//! Connections and browsers: timeouts on every port, and no writes from another site or
//! through a rebound DNS name.

use super::{post_raw, PROTOBUF};
use crate::harness::*;

/// A connection that sent part of a request, or nothing, is closed on every port once
/// the header-read or idle timeout passes; a finished request's keep-alive connection
/// too once idle.
#[test]
fn half_sent_and_idle_connections_are_closed_on_every_port() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    let server = TestServer::start_with_config(Some(
        "[limits]\nheader_read_timeout = \"1s\"\nbody_read_timeout = \"1s\"\nidle_timeout = \"2s\"\n",
    ));
    let addr = |url: &str| url.trim_start_matches("http://").to_owned();
    let (http, otlp, grpc) = (
        addr(&server.api),
        addr(&server.otlp_http),
        addr(&server.otlp_grpc),
    );
    let mut held = Vec::new();
    for (port, sent) in [
        (&http, &b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n"[..]),
        (&otlp, &b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"[..]),
        (&grpc, &b"PRI * HTTP/2.0\r\n"[..]),
        (&http, &b""[..]),
        (&grpc, &b""[..]),
        // Headers whole, body half-sent.
        (&http, &b"POST /api/v1/erasures HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"user"[..]),
        (&otlp, &b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"res"[..]),
    ] {
        let mut conn = TcpStream::connect(port).unwrap();
        conn.write_all(sent).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        held.push(conn);
    }
    // A whole request, then nothing: the keep-alive connection is closed when idle.
    let mut keep_alive = TcpStream::connect(&http).unwrap();
    keep_alive
        .write_all(b"GET /api/v1/services HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    keep_alive
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut first = [0u8; 12];
    keep_alive.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    held.push(keep_alive);

    let started = Instant::now();
    for (i, mut conn) in held.into_iter().enumerate() {
        let mut rest = Vec::new();
        // Closed: EOF (after any answer, e.g. 408) or a reset; a read timeout means
        // the server still held it after 10 s.
        match conn.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) => assert!(
                e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut,
                "connection {i} still open after {:?}",
                started.elapsed()
            ),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // And the server still answers.
    let (status, _) = server.get("/api/v1/health", None);
    assert_eq!(status, 200);
}

/// With no API keys (the default), a page on another site the operator opens must not
/// be able to erase or register anything: writes need JSON (which a browser cannot
/// send cross-site without a preflight), a cross-origin `Origin` is refused, and a
/// Host that is not this server's (DNS rebinding) is refused on reads too.
#[test]
fn another_site_cannot_write_through_the_operators_browser() {
    let server = TestServer::start();
    let now = now_nanos();
    let mut request = llm_trace([5; 16], "gw", "gpt-4o", now);
    for span in &mut request.resource_spans[0].scope_spans[0].spans {
        span.attributes.push(kv("user.id", "user-40"));
    }
    assert_eq!(
        server.post_traces(PROTOBUF, proto(&request), &[]).status(),
        200
    );
    let erase = format!("{}/api/v1/erasures", server.api);
    let body = br#"{"user_id":"user-40"}"#.to_vec();
    // What a form or fetch() without preflight can send.
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let (status, error, _) = post_raw(&erase, ct, body.clone(), &[]);
        assert_eq!(status, 415, "{ct:?}: {error}");
        assert!(
            error["error"]
                .as_str()
                .unwrap()
                .contains("application/json"),
            "{error}"
        );
    }
    // JSON from another origin (a preflight-less fetch could not send it, a
    // rebinding or permissive proxy might): refused.
    let (status, error, _) = post_raw(
        &erase,
        Some("application/json"),
        body.clone(),
        &[("origin", "https://evil.example")],
    );
    assert_eq!(status, 403, "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("cross-origin"),
        "{error}"
    );
    // A Host that is not this server's: a page whose name was rebound to 127.0.0.1.
    let (status, error, _) = post_raw(
        &erase,
        Some("application/json"),
        body.clone(),
        &[("host", "evil.example:8080")],
    );
    assert_eq!(status, 403, "{error}");
    let resp = client()
        .get(format!("{}/api/v1/traces", server.api))
        .header("host", "evil.example")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 403);
    // The same on the OTLP port.
    let resp = server.post_traces(
        PROTOBUF,
        proto(&request),
        &[("origin", "https://evil.example")],
    );
    assert_eq!(resp.status(), 403);
    // Nothing was erased.
    let (status, _) = server.get(&format!("/api/v1/traces/{}", hex(&[5; 16])), None);
    assert_eq!(status, 200);
    // The UI's own origin, and a client that sends no Origin (the CLI, SDKs), may.
    let own = server.api.clone();
    let (status, report, _) = post_raw(&erase, Some("application/json"), body, &[("origin", &own)]);
    assert_eq!(status, 201, "{report}");
    let (status, _) = server.get(&format!("/api/v1/traces/{}", hex(&[5; 16])), None);
    assert_eq!(status, 404);
}
