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

/// POST with any content type and headers; (status, JSON body or Null, headers).
fn post_raw(
    url: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> (u16, serde_json::Value, reqwest::header::HeaderMap) {
    let mut req = client().post(url).body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().expect("POST");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (
        status,
        resp.json().unwrap_or(serde_json::Value::Null),
        headers,
    )
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

/// Every endpoint that takes a body takes it the same way: the configured limit,
/// checked on Content-Length before reading and after gzip; the key checked before
/// the body is read; one JSON error shape.
#[test]
fn bodies_have_one_limit_and_one_error_shape_everywhere() {
    let key = "tenant-a-key-0123456789";
    let server = TestServer::start_with_config(Some(&format!(
        "[server]\nmax_body_bytes = 100000\n[[tenants]]\nid = \"a\"\napi_keys = [\"{key}\"]\n"
    )));
    let bearer = format!("Bearer {key}");
    let big = vec![b' '; 150_000];
    for path in ["/api/v1/lineage", "/api/v1/assets", "/api/v1/erasures"] {
        let url = format!("{}{path}", server.api);
        let method = if path == "/api/v1/assets" {
            reqwest::Method::PUT
        } else {
            reqwest::Method::POST
        };
        let send = |body: Vec<u8>, headers: &[(&str, &str)]| {
            let mut req = client()
                .request(method.clone(), &url)
                .header("content-type", "application/json")
                .body(body);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            let resp = req.send().unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<serde_json::Value>().unwrap_or_default())
        };
        // Without a key: 401 before the 20 MB are read.
        let (status, body) = send(vec![b' '; 20_000_000], &[]);
        assert_eq!(status, 401, "{path}: {body}");
        // Over the limit: 413 in JSON, naming it.
        let (status, body) = send(big.clone(), &[("authorization", &bearer)]);
        assert_eq!(status, 413, "{path}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains("100000"),
            "{path}: {body}"
        );
        // Under the limit on the wire, over it inflated.
        let (status, body) = send(
            gzip(&big),
            &[("authorization", &bearer), ("content-encoding", "gzip")],
        );
        assert_eq!(status, 413, "{path}: {body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("after decompression"),
            "{path}: {body}"
        );
        // gzip is honoured everywhere.
        let (status, body) = send(
            gzip(b"{not json"),
            &[("authorization", &bearer), ("content-encoding", "gzip")],
        );
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains("JSON")
                || body["error"].as_str().unwrap().contains("json"),
            "{path}: {body}"
        );
        // Two Authorization headers: 400.
        let (status, _) = send(
            b"{}".to_vec(),
            &[
                ("authorization", &bearer),
                ("authorization", "Bearer other-key-0123456789"),
            ],
        );
        assert_eq!(status, 400, "{path}");
    }
    // Two Authorization headers on the OTLP port and on reads too.
    let resp = server.post_traces(
        PROTOBUF,
        Vec::new(),
        &[("authorization", &bearer), ("authorization", "Bearer x")],
    );
    assert_eq!(resp.status(), 400);
    let resp = client()
        .get(format!("{}/api/v1/services", server.api))
        .header("authorization", &bearer)
        .header("authorization", "Bearer x")
        .send()
        .unwrap();
    assert_eq!(resp.status(), 400);
}

/// A client that writes its whole over-limit body before reading (Python's urllib)
/// receives the 413, not a broken pipe.
#[test]
fn a_client_that_writes_the_whole_body_first_gets_the_413() {
    let server = TestServer::start_with_config(Some("[server]\nmax_body_bytes = 100000\n"));
    let python = std::env::var("THREADLINE_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    for url in [
        format!("{}/v1/traces", server.otlp_http),
        format!("{}/api/v1/lineage", server.api),
    ] {
        let script = format!(
            r#"
import urllib.request, urllib.error
req = urllib.request.Request({url:?}, data=b" " * 20_000_000, method="POST",
                             headers={{"Content-Type": "application/json"}})
try:
    urllib.request.urlopen(req, timeout=30)
    print("ok")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
"#
        );
        let out = std::process::Command::new(&python)
            .args(["-c", &script])
            .output()
            .expect("run python");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.starts_with("413 ") && stdout.contains("100000"),
            "{url}: stdout {stdout:?}, stderr {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A gRPC export over the limit, as sent or once inflated, is INVALID_ARGUMENT (which
/// exporters do not retry), not OUT_OF_RANGE or RESOURCE_EXHAUSTED (which they do,
/// forever); two authorization entries are refused.
#[test]
fn an_oversized_grpc_export_is_not_retryable() {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    use tonic::codec::CompressionEncoding;

    let server = TestServer::start_with_config(Some("[server]\nmax_body_bytes = 100000\n"));
    let mut big = llm_trace([6; 16], "gw", "gpt-4o", now_nanos());
    big.resource_spans[0].scope_spans[0].spans[0]
        .attributes
        .push(kv("padding", &"x".repeat(300_000)));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut plain = TraceServiceClient::connect(server.otlp_grpc.clone())
                .await
                .unwrap()
                .max_encoding_message_size(usize::MAX);
            let err = plain.export(big.clone()).await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
            assert!(err.message().contains("100000"), "{err}");
            // Small on the wire, over the limit inflated.
            let mut gzip = TraceServiceClient::connect(server.otlp_grpc.clone())
                .await
                .unwrap()
                .send_compressed(CompressionEncoding::Gzip);
            let err = gzip.export(big).await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
            let mut twice = tonic::Request::new(llm_trace([6; 16], "gw", "m", now_nanos()));
            for key in [
                "Bearer a-key-0123456789abcdef",
                "Bearer b-key-0123456789abcdef",
            ] {
                twice
                    .metadata_mut()
                    .append("authorization", key.parse().unwrap());
            }
            let err = plain.export(twice).await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
            // The server still takes a good export.
            plain
                .export(llm_trace([6; 16], "gw", "gpt-4o", now_nanos()))
                .await
                .unwrap();
        });
}

/// Request bodies in flight share one byte budget over every port: while a client
/// holds most of it with a half-sent body, another body that does not fit gets 429 /
/// RESOURCE_EXHAUSTED with Retry-After, on OTLP/HTTP, the API and gRPC; once the
/// first is gone the budget is whole again.
#[test]
fn bodies_in_flight_share_one_byte_budget() {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    use std::io::Write;

    let server = TestServer::start_with_config(Some(
        "[server]\nmax_body_bytes = 1000000\n[limits]\nmax_inflight_body_bytes = 1500000\n",
    ));
    let otlp = server.otlp_http.trim_start_matches("http://").to_owned();
    let mut holder = std::net::TcpStream::connect(&otlp).unwrap();
    holder
        .write_all(
            b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"resourceSpans\":[",
        )
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut big = llm_trace([8; 16], "gw", "gpt-4o", now_nanos());
    big.resource_spans[0].scope_spans[0].spans[0]
        .attributes
        .push(kv("padding", &"x".repeat(600_000)));
    let resp = server.post_traces(PROTOBUF, proto(&big), &[]);
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    let (status, body, headers) = post_raw(
        &format!("{}/api/v1/lineage", server.api),
        Some("application/json"),
        vec![b' '; 600_000],
        &[],
    );
    assert_eq!(status, 429, "{body}");
    assert_eq!(headers["retry-after"], "1");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = TraceServiceClient::connect(server.otlp_grpc.clone())
            .await
            .unwrap();
        let err = client.export(big.clone()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
        assert!(err.metadata().get("retry-after").is_some(), "{err:?}");
    });
    // Small bodies still fit beside the held one.
    let small = llm_trace([9; 16], "gw", "gpt-4o", now_nanos());
    assert_eq!(
        server.post_traces(PROTOBUF, proto(&small), &[]).status(),
        200
    );
    drop(holder);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(server.post_traces(PROTOBUF, proto(&big), &[]).status(), 200);
    runtime.block_on(async {
        let mut client = TraceServiceClient::connect(server.otlp_grpc.clone())
            .await
            .unwrap();
        client.export(big).await.unwrap();
    });
}

/// Query parameters: unknown ones are refused on every endpoint, too many attribute
/// filters are a 400 naming the limit (not the database's 500), and Jaeger's
/// `traceID=A&traceID=B` returns exactly those traces. A manifest that registers
/// nothing, or registers from positional arrays, is refused.
#[test]
fn queries_are_checked_the_same_way_everywhere() {
    let server = TestServer::start();
    let now = now_nanos();
    for (i, id) in [[0x11u8; 16], [0x12; 16], [0x13; 16]].iter().enumerate() {
        let request = llm_trace(*id, "gw", "gpt-4o", now + i as u64);
        assert_eq!(
            server.post_traces(PROTOBUF, proto(&request), &[]).status(),
            200
        );
    }
    let trace = hex(&[0x11; 16]);
    for path in [
        "/api/v1/services?limit=5".to_owned(),
        "/api/v1/health?verbose=1".to_owned(),
        format!("/api/v1/traces/{trace}?span=x"),
        format!("/api/v1/traces/{trace}/skeleton?x=1"),
        format!("/api/v1/traces/{trace}/logs?q=a"),
        "/api/v1/erasures?user=1".to_owned(),
        "/api/v1/traces?sevice=gw".to_owned(),
        "/jaeger/api/services?x=1".to_owned(),
        "/jaeger/api/dependencies?endTs=1&bogus=2".to_owned(),
        format!("/jaeger/api/v3/traces/{trace}?bogus=1"),
    ] {
        let resp = client()
            .get(format!("{}{path}", server.api))
            .send()
            .unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().unwrap();
        assert_eq!(status, 400, "{path}: {text}");
        assert!(text.contains("unknown"), "{path}: {text}");
    }
    let many: String = (0..1000).map(|i| format!("&attr.k{i}=v")).collect();
    let (status, body) = server.get(&format!("/api/v1/traces?service=gw{many}"), None);
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("at most 64"),
        "{body}"
    );

    let (status, body) = server.get(
        &format!(
            "/jaeger/api/traces?traceID={}&traceID={}",
            hex(&[0x11; 16]),
            hex(&[0x13; 16])
        ),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let mut ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["traceID"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, [hex(&[0x11; 16]), hex(&[0x13; 16])]);

    for manifest in ["[]", "[[{\"id\":\"m\"}]]", "{}", "{\"models\":[[\"m\"]]}"] {
        let resp = client()
            .put(format!("{}/api/v1/assets", server.api))
            .header("content-type", "application/json")
            .body(manifest)
            .send()
            .unwrap();
        assert_eq!(resp.status(), 400, "{manifest}");
    }
}

/// With tenants, the server-wide figures (span counts, queue depth, commits: every
/// tenant's volume over time) are for an operator key only: the health endpoint
/// without a key says it is alive and nothing more, a tenant's `/metrics` shows its
/// own series and no internals, and an operator key reads no tenant's data.
#[test]
fn tenants_see_only_their_own_numbers() {
    let (a, b, op) = (
        "tenant-a-key-0123456789",
        "tenant-b-key-0123456789",
        "operator-key-0123456789",
    );
    let server = TestServer::start_with_config(Some(&format!(
        "[[tenants]]\nid = \"a\"\napi_keys = [\"{a}\"]\n[[tenants]]\nid = \"b\"\napi_keys = [\"{b}\"]\n[operator]\napi_keys = [\"{op}\"]\n"
    )));
    let bearer_b = format!("Bearer {b}");
    let resp = server.post_traces(
        PROTOBUF,
        proto(&llm_trace([0x21; 16], "b-app", "gpt-4o", now_nanos())),
        &[("authorization", &bearer_b)],
    );
    assert_eq!(resp.status(), 200);

    let (status, health) = server.get("/api/v1/health", None);
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    assert_eq!(health["auth_required"], true);
    assert!(
        health.get("store").is_none() && health.get("ingest").is_none(),
        "{health}"
    );
    let (_, health) = server.get("/api/v1/health", Some(a));
    assert_eq!(health["tenant"], "a");
    assert!(health.get("ingest").is_none(), "{health}");
    let (_, health) = server.get("/api/v1/health", Some(op));
    assert_eq!(health["ingest"]["spans_accepted"], 2, "{health}");

    let scrape = |key: &str| {
        let resp = client()
            .get(format!("{}/metrics", server.api))
            .bearer_auth(key)
            .send()
            .unwrap();
        (resp.status().as_u16(), resp.text().unwrap())
    };
    let (status, text_a) = scrape(a);
    assert_eq!(status, 200);
    assert!(!text_a.contains("threadline_spans_ingested"), "{text_a}");
    assert!(!text_a.contains("threadline_write_queue"), "{text_a}");
    assert!(!text_a.contains("b-app"), "{text_a}");
    let (_, text_b) = scrape(b);
    assert!(text_b.contains("b-app"), "{text_b}");
    assert!(!text_b.contains("threadline_store_commits"), "{text_b}");
    let (_, text_op) = scrape(op);
    assert!(
        text_op.contains("threadline_spans_ingested_total 2"),
        "{text_op}"
    );
    assert!(!text_op.contains("b-app"), "{text_op}");
    // An operator key is no tenant's key.
    let (status, body) = server.get("/api/v1/traces", Some(op));
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("operator key"),
        "{body}"
    );
}

/// A second `serve` on a data directory in use refuses to start and names the process
/// that holds it; once that one is gone (even by SIGKILL), the directory is free.
#[test]
fn a_second_server_on_the_same_data_directory_refuses_to_start() {
    let mut server = TestServer::start();
    let second = std::process::Command::new(BIN)
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--otlp-http",
            "127.0.0.1:0",
            "--otlp-grpc",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(&server.data_dir)
        .output()
        .expect("run a second serve");
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains(&format!("in use by process {}", server.pid())) && stderr.contains("serve"),
        "{stderr}"
    );
    // The first one is untouched, and after a crash the directory opens again.
    assert_eq!(server.get("/api/v1/services", None).0, 200);
    server.restart();
    assert_eq!(server.get("/api/v1/services", None).0, 200);
}

/// One span whose name is not UTF-8 is refused alone, through partial success, on both
/// transports; the rest of its batch is stored. A cost is never `-0.0`.
#[test]
fn a_span_with_invalid_utf8_is_refused_alone_and_costs_are_never_negative_zero() {
    let server = TestServer::start();
    let broken = |trace: u8| {
        let mut request = llm_trace([trace; 16], "gw", "gpt-4o", now_nanos());
        let spans = &mut request.resource_spans[0].scope_spans[0].spans;
        spans[1].name = "BROKEN-NAME".into();
        for span in spans.iter_mut() {
            span.attributes.push(kv("session.id", "sess-utf8"));
        }
        let mut bytes = proto(&request);
        let at = bytes.windows(6).position(|w| w == b"BROKEN").unwrap();
        bytes[at] = 0xc3; // a UTF-8 lead byte followed by ASCII
        bytes
    };
    let resp = server.post_traces(PROTOBUF, broken(0x31), &[]);
    assert_eq!(resp.status(), 200);
    let body = ExportTraceServiceResponse::decode(resp.bytes().unwrap()).unwrap();
    let partial = body.partial_success.expect("partial success");
    assert_eq!(partial.rejected_spans, 1, "{}", partial.error_message);
    assert!(
        partial.error_message.contains("span 1 of scope 0"),
        "{}",
        partial.error_message
    );
    let (status, trace) = server.get(&format!("/api/v1/traces/{}", hex(&[0x31; 16])), None);
    assert_eq!(status, 200);
    assert_eq!(trace["span_count"], 1);

    // gRPC: the same bytes as the message.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let channel = tonic::transport::Channel::from_shared(server.otlp_grpc.clone())
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.unwrap();
            let response: tonic::Response<ExportTraceServiceResponse> = grpc
                .unary(
                    tonic::Request::new(RawBytes(broken(0x32))),
                    "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
                        .parse()
                        .unwrap(),
                    RawCodec,
                )
                .await
                .unwrap();
            let partial = response
                .into_inner()
                .partial_success
                .expect("partial success");
            assert_eq!(partial.rejected_spans, 1);
        });
    let (status, trace) = server.get(&format!("/api/v1/traces/{}", hex(&[0x32; 16])), None);
    assert_eq!(status, 200);
    assert_eq!(trace["span_count"], 1);

    // The session's kept spans carry no tokens: its cost is 0.0, not -0.0.
    let resp = client()
        .get(format!("{}/api/v1/sessions/sess-utf8", server.api))
        .send()
        .unwrap();
    let text = resp.text().unwrap();
    assert!(text.contains("\"cost_usd\":0.0"), "{text}");
    assert!(!text.contains("-0.0"), "{text}");
}

/// Already-encoded protobuf bytes, sent as they are.
struct RawBytes(Vec<u8>);

/// Encodes `RawBytes` as is and decodes an export response.
#[derive(Clone, Copy)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = RawBytes;
    type Decode = ExportTraceServiceResponse;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = RawBytes;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: RawBytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item.0);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = ExportTraceServiceResponse;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<ExportTraceServiceResponse>, tonic::Status> {
        ExportTraceServiceResponse::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}
