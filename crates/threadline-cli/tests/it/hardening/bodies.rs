//! Bodies and queries: one limit and one error shape, the shared in-flight budget,
//! clients that write before they read, parameters checked everywhere.

use super::{post_raw, PROTOBUF};
use crate::harness::*;

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
    // The holder's budget is taken once the server has read its headers: until then a
    // big body still fits (a loaded machine may take a while to get there).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut attempt = 0x40u8;
    let resp = loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut big = llm_trace([attempt; 16], "gw", "gpt-4o", now_nanos());
        big.resource_spans[0].scope_spans[0].spans[0]
            .attributes
            .push(kv("padding", &"x".repeat(600_000)));
        let resp = server.post_traces(PROTOBUF, proto(&big), &[]);
        if resp.status() != 200 || std::time::Instant::now() > deadline {
            break resp;
        }
        attempt += 1;
    };
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    let mut big = llm_trace([8; 16], "gw", "gpt-4o", now_nanos());
    big.resource_spans[0].scope_spans[0].spans[0]
        .attributes
        .push(kv("padding", &"x".repeat(600_000)));
    let (status, body, headers) = post_raw(
        &format!("{}/api/v1/lineage", server.api),
        Some("application/json"),
        vec![b' '; 600_000],
        &[],
    );
    assert_eq!(status, 429, "{body}");
    assert_eq!(headers["retry-after"], "1");
    let runtime = runtime();
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
