//! One very large trace read whole through the JSON API: the answer is streamed, so
//! the server's peak memory grows by its skeleton and a few caches, not by every
//! record and its JSON at once (which was ≈ 11 KB a span).

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

use crate::harness::*;

/// Peak resident memory of a process, from /proc (kB).
fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_40000_span_trace_streams_within_a_memory_bound() {
    const FANOUT: u64 = 200;
    let server = TestServer::start();
    let trace_id = [0x5a; 16];
    let start = now_nanos() - 3_600_000_000_000;
    let span_id = |n: u64| (n + 1).to_be_bytes().to_vec();
    let text = "retrieved passage about quarterly revenue and guidance ".repeat(16);
    // A root, FANOUT children, and FANOUT - 1 grandchildren under each child.
    let mut spans = vec![Span {
        trace_id: trace_id.to_vec(),
        span_id: span_id(0),
        name: "index documents".into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 3_000_000_000,
        ..Default::default()
    }];
    for c in 0..FANOUT {
        let child = 1 + c * FANOUT;
        spans.push(Span {
            trace_id: trace_id.to_vec(),
            span_id: span_id(child),
            parent_span_id: span_id(0),
            name: format!("batch {c}"),
            start_time_unix_nano: start + c * 10_000_000,
            end_time_unix_nano: start + c * 10_000_000 + 9_000_000,
            ..Default::default()
        });
        for g in 1..FANOUT {
            spans.push(Span {
                trace_id: trace_id.to_vec(),
                span_id: span_id(child + g),
                parent_span_id: span_id(child),
                name: "embed chunk".into(),
                start_time_unix_nano: start + c * 10_000_000 + g * 40_000,
                end_time_unix_nano: start + c * 10_000_000 + g * 40_000 + 30_000,
                attributes: vec![kv("chunk.text", &text), kv_int("chunk.index", g as i64)],
                ..Default::default()
            });
        }
    }
    let total = spans.len();
    for batch in spans.chunks(2_000) {
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", "indexer")],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: batch.to_vec(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let response = server.post_traces("application/x-protobuf", request.encode_to_vec(), &[]);
        assert_eq!(response.status().as_u16(), 200);
    }
    let before = peak_rss_kb(server.pid());
    let response = client()
        .get(format!("{}/api/v1/traces/{}", server.api, hex(&trace_id)))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body = response.bytes().unwrap();
    let after = peak_rss_kb(server.pid());
    let trace: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(trace["span_count"], total);
    let root = &trace["roots"][0];
    assert_eq!(trace["roots"].as_array().unwrap().len(), 1);
    assert_eq!(root["children"].as_array().unwrap().len(), FANOUT as usize);
    let leaves: usize = root["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["children"].as_array().unwrap().len())
        .sum();
    assert_eq!(1 + FANOUT as usize + leaves, total);
    assert_eq!(
        root["children"][3]["children"][5]["attributes"]["chunk.text"],
        text.as_str()
    );
    let grown_mb = after.saturating_sub(before) / 1024;
    eprintln!(
        "GET of a {total}-span trace ({} MB of JSON): peak RSS {} → {} MB",
        body.len() / 1_000_000,
        before / 1024,
        after / 1024
    );
    assert!(grown_mb < 128, "peak RSS grew by {grown_mb} MB");

    // Jaeger's trace by id, the same way.
    let response = client()
        .get(format!(
            "{}/jaeger/api/traces/{}",
            server.api,
            hex(&trace_id)
        ))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body = response.bytes().unwrap();
    let jaeger_after = peak_rss_kb(server.pid());
    let jaeger: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let data = &jaeger["data"][0];
    assert_eq!(data["spans"].as_array().unwrap().len(), total);
    assert_eq!(data["processes"]["p1"]["serviceName"], "indexer");
    assert_eq!(jaeger["total"], 1);
    let grown_mb = jaeger_after.saturating_sub(before) / 1024;
    assert!(
        grown_mb < 128,
        "peak RSS grew by {grown_mb} MB with Jaeger's API"
    );

    // Jaeger's v3 trace by id (OTLP JSON, in groups of at most 1,000 spans) and its
    // trace summaries (from the skeleton).
    let response = client()
        .get(format!(
            "{}/jaeger/api/v3/traces/{}",
            server.api,
            hex(&trace_id)
        ))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body = response.bytes().unwrap();
    let v3: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let groups = v3["result"]["resourceSpans"].as_array().unwrap();
    let spans: usize = groups
        .iter()
        .flat_map(|g| g["scopeSpans"].as_array().unwrap())
        .map(|ss| ss["spans"].as_array().unwrap().len())
        .sum();
    assert_eq!(spans, total);
    assert!(groups.len() <= total / 1000 + 2, "{} groups", groups.len());
    let (status, summaries) = server.get(
        "/jaeger/api/v3/trace-summaries?query.service_name=indexer",
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(summaries["summaries"][0]["spanCount"], total);
    let v3_after = peak_rss_kb(server.pid());
    let grown_mb = v3_after.saturating_sub(before) / 1024;
    assert!(
        grown_mb < 128,
        "peak RSS grew by {grown_mb} MB with Jaeger's v3 API"
    );
}
