//! A route's requests are measured end to end: when only a plain (non-LLM) child span
//! of the requests slows — a retriever — the route raises an incident, and the RCA
//! names that span's service as where the added time went, ahead of a harmless prompt
//! bump made in the same minute.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use crate::diagnosis::T0_S;
use crate::harness::*;

const ONSET_MINUTE: u64 = 40;

fn span(
    trace: u64,
    id: u64,
    parent: Option<u64>,
    name: &str,
    (from_ms, to_ms): (f64, f64),
    start_s: f64,
    attributes: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
) -> Span {
    let base = T0_S * 1_000_000_000 + (start_s * 1e9) as u64;
    let mut trace_id = [9u8; 16];
    trace_id[..8].copy_from_slice(&trace.to_be_bytes());
    Span {
        trace_id: trace_id.to_vec(),
        span_id: (trace * 8 + id).to_be_bytes().to_vec(),
        parent_span_id: parent
            .map(|p| (trace * 8 + p).to_be_bytes().to_vec())
            .unwrap_or_default(),
        name: name.into(),
        kind: if parent.is_none() { 2 } else { 3 },
        start_time_unix_nano: base + (from_ms * 1e6) as u64,
        end_time_unix_nano: base + (to_ms * 1e6) as u64,
        attributes,
        ..Default::default()
    }
}

fn resource_spans(service: &str, spans: Vec<Span>) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![kv("service.name", service)],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// One minute of traffic: 60 requests gateway → search_docs (docs-index, plain HTTP
/// client span) → chat (vllm), in one export request. A little noise in every part.
fn minute(m: u64) -> ExportTraceServiceRequest {
    let (mut gateway, mut docs, mut vllm) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..60u64 {
        let trace = m * 1000 + r;
        let wobble = 1.0 + 0.2 * (((trace * 7919) % 100) as f64 / 100.0 - 0.5);
        let retrieve = if m >= ONSET_MINUTE { 560.0 } else { 70.0 } * wobble;
        let chat = 600.0 * wobble;
        let start_s = m as f64 * 60.0 + r as f64;
        let end = 10.0 + retrieve + chat + 15.0;
        gateway.push(span(
            trace,
            1,
            None,
            "POST /v1/ask",
            (0.0, end),
            start_s,
            vec![
                kv("http.route", "/v1/ask"),
                kv("http.request.method", "POST"),
            ],
        ));
        docs.push(span(
            trace,
            2,
            Some(1),
            "search_docs",
            (10.0, 10.0 + retrieve),
            start_s,
            vec![
                kv("db.system", "elasticsearch"),
                kv("server.address", "docs-index"),
            ],
        ));
        // A harmless prompt bump at the onset: same latency, same errors.
        let prompt = if m >= ONSET_MINUTE { "v8" } else { "v7" };
        vllm.push(span(
            trace,
            3,
            Some(1),
            "chat llama-3-8b",
            (10.0 + retrieve, 10.0 + retrieve + chat),
            start_s,
            vec![
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.request.model", "llama-3-8b"),
                kv("llm.prompt_template.id", "ask"),
                kv("llm.prompt.version", prompt),
                kv_int("gen_ai.usage.input_tokens", 900),
                kv_int("gen_ai.usage.output_tokens", 120),
            ],
        ));
    }
    ExportTraceServiceRequest {
        resource_spans: vec![
            resource_spans("gateway", gateway),
            resource_spans("docs-index", docs),
            resource_spans("vllm", vllm),
        ],
    }
}

#[test]
fn only_a_slower_retriever_raises_a_route_incident_that_names_it() {
    let server = TestServer::start();
    for m in 0..ONSET_MINUTE + 8 {
        let status = server
            .post_traces("application/x-protobuf", proto(&minute(m)), &[])
            .status();
        assert_eq!(status, 200);
    }
    let range = format!("from={T0_S}&to={}", T0_S + 60 * (ONSET_MINUTE + 8));
    let (status, incidents) = server.get(&format!("/api/v1/incidents?{range}"), None);
    assert_eq!(status, 200, "{incidents}");
    let listed = incidents["incidents"].as_array().unwrap();
    let on_route: Vec<_> = listed.iter().filter(|i| i["route"] == "/v1/ask").collect();
    assert_eq!(on_route.len(), 1, "one incident on the route: {incidents}");
    let incident = on_route[0];
    assert_eq!(incident["service"], "gateway", "{incident}");
    let onset = T0_S + 60 * ONSET_MINUTE;
    let onset_s = incident["onset_unix"].as_u64().unwrap();
    assert!(onset_s >= onset && onset_s <= onset + 120, "{incident}");
    // The model calls did not change: no incident on the model.
    assert!(
        listed.iter().all(|i| i["route"] == "/v1/ask"),
        "{incidents}"
    );

    let id = incident["id"].as_str().unwrap();
    let (status, rca) = server.get(&format!("/api/v1/rca?incident={id}"), None);
    assert_eq!(status, 200, "{rca}");
    assert_eq!(rca["target"]["level"], "request", "{rca}");
    let top = &rca["candidates"][0];
    assert_eq!(top["kind"], "span", "{rca:#}");
    assert_eq!(
        top["subject"], "service=docs-index span=search_docs",
        "{rca:#}"
    );
    let share = top["evidence"]["share_of_added"].as_f64().unwrap();
    assert!(share > 0.9, "{top}");
    assert!(
        top["explanation"]
            .as_str()
            .unwrap()
            .contains("search_docs on docs-index"),
        "{top}"
    );
    let prompt = rca["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "prompt_version");
    assert!(
        prompt.is_none_or(|p| p["confidence"].as_f64().unwrap() <= 0.5),
        "{rca:#}"
    );
}
