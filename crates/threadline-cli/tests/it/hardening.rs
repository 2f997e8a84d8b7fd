//! What a careless client or an attacker on loopback must not be able to do: blind the
//! detector with a skewed clock, write from another site, hold connections or memory,
//! read other tenants' numbers, or start a second writer on the same data.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;

use crate::harness::*;

const PROTOBUF: &str = "application/x-protobuf";

/// A span dated a year ahead (a sender whose clock is wrong) is refused by span, with
/// a message naming the time; its batch's other spans are stored. A time past what
/// can be stored is refused the same way, and no message shows negative nanoseconds.
#[test]
fn spans_from_a_skewed_clock_are_refused_by_span() {
    let server = TestServer::start_with_config(Some("[limits]\nmax_future_skew = \"5m\"\n"));
    let now = now_nanos();
    let year = 365 * 86_400 * 1_000_000_000u64;
    let mut request = llm_trace([7; 16], "gw", "gpt-4o", now);
    let spans = &mut request.resource_spans[0].scope_spans[0].spans;
    spans[1].start_time_unix_nano = now + year;
    spans[1].end_time_unix_nano = now + year + 1;
    let mut past_i64 = spans[0].clone();
    past_i64.span_id = vec![9; 8];
    past_i64.end_time_unix_nano = u64::MAX;
    spans.push(past_i64);
    let resp = server.post_traces(PROTOBUF, proto(&request), &[]);
    assert_eq!(resp.status(), 200);
    let body = ExportTraceServiceResponse::decode(resp.bytes().unwrap()).unwrap();
    let partial = body.partial_success.expect("partial success");
    assert_eq!(partial.rejected_spans, 2);
    let msg = partial.error_message;
    assert!(msg.contains("ahead of the server's clock"), "{msg}");
    assert!(msg.contains("accepted skew of 5m"), "{msg}");
    assert!(msg.contains("latest storable time"), "{msg}");
    assert!(!msg.contains(" -") && !msg.contains("(-"), "{msg}");
    let (status, trace) = server.get(&format!("/api/v1/traces/{}", hex(&[7; 16])), None);
    assert_eq!(status, 200);
    assert_eq!(trace["span_count"], 1);

    // Query times past i64 ns are refused by name, not wrapped into negative numbers.
    let (status, body) = server.get(
        "/api/v1/metrics?metric=p99_latency&from=0&to=18446744073709551615",
        None,
    );
    assert_eq!(status, 400, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("latest time"), "{error}");
    let (status, body) = server.get(
        "/api/v1/metrics?metric=p99_latency&from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z",
        None,
    );
    assert_eq!(status, 400);
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("from (2026-12-02T00:00:00") && !error.contains("ns)"),
        "{error}"
    );
}

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
