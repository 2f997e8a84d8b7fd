//! Erasure finds a subject wherever it was sent — a span attribute of any span (plain
//! HTTP spans with OpenTelemetry's `enduser.id` included), W3C baggage recorded on a
//! span, a resource attribute, a route that holds the id — and wherever it was copied:
//! rollup series and cells, lineage nodes, the lists of operations, `/metrics` labels.
//! The database files are scanned for the id raw and inside every zstd frame they
//! hold, after the erasure and after a kill -9 and restart; an erasure that matches
//! nothing says so.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use crate::harness::*;

const SUBJECT: &str = "zq-7a41c-erase-everywhere";
const OTHER: &str = "zq-9b22d-keep";

fn span(trace: u8, id: u8, parent: Option<u8>, name: &str, attrs: Vec<KeyValue>) -> Span {
    let start = now_nanos() - 60_000_000_000 + u64::from(trace) * 1_000_000;
    Span {
        trace_id: vec![trace; 16],
        span_id: vec![trace, id, 0, 0, 0, 0, 0, 1],
        parent_span_id: parent
            .map(|p| vec![trace, p, 0, 0, 0, 0, 0, 1])
            .unwrap_or_default(),
        name: name.into(),
        kind: if parent.is_none() { 2 } else { 1 },
        start_time_unix_nano: start,
        end_time_unix_nano: start + 50_000_000 - u64::from(id) * 1_000_000,
        attributes: attrs,
        ..Default::default()
    }
}

fn resource(attrs: Vec<KeyValue>, spans: Vec<Span>) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: attrs,
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Four traces of the subject, one of another user.
fn traffic() -> ExportTraceServiceRequest {
    let web = || vec![kv("service.name", "web")];
    let call = |trace: u8| {
        span(
            trace,
            2,
            Some(1),
            "chat llama",
            vec![
                kv("gen_ai.request.model", "llama-3-8b"),
                kv("model.instance.id", &format!("inst-{trace}")),
                kv_int("gen_ai.usage.input_tokens", 10),
            ],
        )
    };
    // 1: a route that holds the id (a badly templated route), no user attribute.
    let route = format!("/v1/users/{SUBJECT}/chat");
    let a = vec![
        span(
            1,
            1,
            None,
            &format!("GET {route}"),
            vec![kv("http.route", &route)],
        ),
        call(1),
    ];
    // 2: a plain child span names the user (OpenTelemetry's enduser.id); the root does not.
    let b = vec![
        span(
            2,
            1,
            None,
            "POST /v1/ask",
            vec![kv("http.route", "/v1/ask")],
        ),
        span(
            2,
            2,
            Some(1),
            "load_profile",
            vec![kv("enduser.id", SUBJECT), kv("db.statement", "SELECT 1")],
        ),
    ];
    // 3: W3C baggage recorded on the span.
    let c = vec![span(
        3,
        1,
        None,
        "POST /v1/ask",
        vec![
            kv("http.route", "/v1/ask"),
            kv("baggage", &format!("user.id={SUBJECT},ab.group=B")),
        ],
    )];
    // 5: another user, same route.
    let e = vec![span(
        5,
        1,
        None,
        "POST /v1/ask",
        vec![kv("http.route", "/v1/ask"), kv("user.id", OTHER)],
    )];
    let mut web_spans = a;
    web_spans.extend(b);
    web_spans.extend(c);
    web_spans.extend(e);
    // 4: a process of the user's own (a desktop app): the resource names them.
    let d = vec![span(4, 1, None, "render", vec![])];
    ExportTraceServiceRequest {
        resource_spans: vec![
            resource(web(), web_spans),
            resource(
                vec![kv("service.name", "desk"), kv("enduser.id", SUBJECT)],
                d,
            ),
        ],
    }
}

fn trace_status(server: &TestServer, trace: u8) -> u16 {
    server
        .get(&format!("/api/v1/traces/{}", hex(&[trace; 16])), None)
        .0
}

fn scrape(server: &TestServer) -> String {
    client()
        .get(format!("{}/metrics", server.api))
        .send()
        .unwrap()
        .text()
        .unwrap()
}

#[test]
fn an_erasure_finds_the_subject_wherever_it_was_sent_or_copied() {
    let mut server = TestServer::start();
    let status = server
        .post_traces("application/x-protobuf", proto(&traffic()), &[])
        .status();
    assert_eq!(status, 200);
    for t in 1..=5 {
        assert_eq!(trace_status(&server, t), 200, "trace {t}");
    }
    assert!(
        scrape(&server).contains(SUBJECT),
        "a route label holds the id"
    );
    let routes = "/api/v1/metrics?metric=request_rate&group_by=route";
    let (_, before) = server.get(routes, None);
    assert!(before.to_string().contains(SUBJECT), "{before}");
    let node = encode_node(&format!("route:/v1/users/{SUBJECT}/chat"));
    assert_eq!(server.get(&format!("/api/v1/lineage/{node}"), None).0, 200);
    std::thread::sleep(std::time::Duration::from_millis(800));
    assert!(!server.files_holding(SUBJECT).is_empty());

    let (ok, out, err) = server.cli(&["erase", "--user-id", SUBJECT, "--requested-by", "dpo@acme"]);
    assert!(ok, "{err}");
    assert!(out.contains("4 traces"), "{out}");
    assert!(
        out.contains("copies of the id removed or rewritten"),
        "{out}"
    );
    for t in 1..=4 {
        assert_eq!(trace_status(&server, t), 404, "trace {t} survived");
    }
    assert_eq!(
        trace_status(&server, 5),
        200,
        "another user's trace was lost"
    );

    // The copies: metrics labels, rollup series (their numbers kept), lineage nodes.
    let metrics = scrape(&server);
    assert!(!metrics.contains(SUBJECT), "{metrics}");
    let (_, after) = server.get(routes, None);
    assert!(!after.to_string().contains(SUBJECT), "{after}");
    let erased = after["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["labels"]["route"] == "/v1/users/[erased]/chat");
    assert!(erased.is_some(), "the series keeps its numbers: {after}");
    assert_eq!(server.get(&format!("/api/v1/lineage/{node}"), None).0, 404);
    let (_, ops) = server.get("/jaeger/api/services/web/operations", None);
    assert!(!ops.to_string().contains(SUBJECT), "{ops}");

    let left = server.files_holding(SUBJECT);
    assert!(left.is_empty(), "the id is still in {left:?}");
    // Acknowledged, so it holds across a kill -9 and a restart.
    server.restart();
    let left = server.files_holding(SUBJECT);
    assert!(left.is_empty(), "after a restart the id is in {left:?}");
    assert_eq!(trace_status(&server, 1), 404);
    assert_eq!(trace_status(&server, 5), 200);

    // Nothing left to match: the answer says so.
    let (ok, out, err) = server.cli(&["erase", "--user-id", SUBJECT, "--requested-by", "dpo@acme"]);
    assert!(ok, "{err}");
    assert!(out.contains("nothing matched"), "{out}");
}
