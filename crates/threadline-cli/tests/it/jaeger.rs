//! Jaeger's query API against Jaeger's own fixtures (`../shared/corpus/jaeger-api/`):
//! the spans of each fixture are sent over OTLP as Jaeger's OTLP translator would
//! carry them, and our answer for them must have the fixture's fields, types and
//! units. Then the v1 search, services, operations and dependencies Grafana calls.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};
use serde_json::{json, Value};

use crate::harness::*;

fn fixture(name: &str) -> Value {
    let path = corpus_dir().join("jaeger-api").join(name);
    serde_json::from_str(
        &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

fn id_bytes<const N: usize>(hex_text: &str) -> Vec<u8> {
    let padded = format!("{hex_text:0>width$}", width = N * 2);
    (0..N)
        .map(|i| u8::from_str_radix(&padded[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// A v1 tag as an OTLP attribute.
fn attribute(tag: &Value) -> KeyValue {
    use any_value::Value as V;
    let v = &tag["value"];
    let value = match tag["type"].as_str().unwrap() {
        "string" => V::StringValue(v.as_str().unwrap().into()),
        "bool" => V::BoolValue(v.as_bool().unwrap()),
        "int64" => V::IntValue(
            v.as_i64()
                .unwrap_or_else(|| v.as_str().unwrap().parse().unwrap()),
        ),
        "float64" => V::DoubleValue(v.as_f64().unwrap()),
        "binary" => {
            use base64::Engine;
            V::BytesValue(
                base64::engine::general_purpose::STANDARD
                    .decode(v.as_str().unwrap())
                    .unwrap(),
            )
        }
        other => panic!("tag type {other}"),
    };
    KeyValue {
        key: tag["key"].as_str().unwrap().into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// The fixture trace's spans as OTLP, with the span ids each will have. The fixture
/// reuses span id 2 for two spans (Jaeger's converter test does not mind); Threadline
/// keeps the first copy of a span id, so the first of them is sent as span id 6.
fn v1_fixture_as_otlp(trace: &Value) -> (ExportTraceServiceRequest, Vec<String>) {
    let mut by_process: Vec<(String, Vec<Span>)> = Vec::new();
    let mut ids = Vec::new();
    for (n, s) in trace["spans"].as_array().unwrap().iter().enumerate() {
        let span_id = if n == 0 {
            "0000000000000006".to_owned()
        } else {
            s["spanID"].as_str().unwrap().to_owned()
        };
        ids.push(span_id.clone());
        let refs = s["references"].as_array().unwrap();
        let trace_id = s["traceID"].as_str().unwrap();
        // The first CHILD_OF reference in the trace is the parent; the others are links.
        let parent = refs
            .iter()
            .find(|r| r["refType"] == "CHILD_OF" && r["traceID"] == trace_id)
            .map(|r| r["spanID"].as_str().unwrap());
        let links = refs
            .iter()
            .filter(|r| {
                Some(r["spanID"].as_str().unwrap()) != parent
                    || r["refType"] != "CHILD_OF"
                    || r["traceID"] != trace_id
            })
            .map(|r| span::Link {
                trace_id: id_bytes::<16>(r["traceID"].as_str().unwrap()),
                span_id: id_bytes::<8>(r["spanID"].as_str().unwrap()),
                attributes: if r["refType"] == "CHILD_OF" {
                    vec![kv("opentracing.ref_type", "child_of")]
                } else {
                    vec![]
                },
                ..Default::default()
            })
            .collect();
        let start_ns = s["startTime"].as_u64().unwrap() * 1000;
        let otlp = Span {
            trace_id: id_bytes::<16>(trace_id),
            span_id: id_bytes::<8>(&span_id),
            parent_span_id: parent.map(id_bytes::<8>).unwrap_or_default(),
            name: s["operationName"].as_str().unwrap().into(),
            start_time_unix_nano: start_ns,
            end_time_unix_nano: start_ns + s["duration"].as_u64().unwrap() * 1000,
            attributes: s["tags"]
                .as_array()
                .unwrap()
                .iter()
                .map(attribute)
                .collect(),
            events: s["logs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    let fields = l["fields"].as_array().unwrap();
                    let name = fields
                        .iter()
                        .find(|f| f["key"] == "event")
                        .and_then(|f| f["value"].as_str())
                        .unwrap_or("");
                    span::Event {
                        time_unix_nano: l["timestamp"].as_u64().unwrap() * 1000,
                        name: name.into(),
                        attributes: fields
                            .iter()
                            .filter(|f| f["key"] != "event")
                            .map(attribute)
                            .collect(),
                        ..Default::default()
                    }
                })
                .collect(),
            links,
            ..Default::default()
        };
        let service = trace["processes"][s["processID"].as_str().unwrap()]["serviceName"]
            .as_str()
            .unwrap()
            .to_owned();
        match by_process.iter_mut().find(|(svc, _)| *svc == service) {
            Some((_, spans)) => spans.push(otlp),
            None => by_process.push((service, vec![otlp])),
        }
    }
    let request = ExportTraceServiceRequest {
        resource_spans: by_process
            .into_iter()
            .map(|(service, spans)| ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", &service)],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    };
    (request, ids)
}

/// Sends `spans` of one resource over OTLP/HTTP; they must be accepted.
fn post_spans(server: &TestServer, resource: Resource, spans: Vec<Span>) {
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let status = server
        .post_traces("application/x-protobuf", proto(&request), &[])
        .status();
    assert_eq!(status, 200);
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

fn sorted_refs(v: &Value) -> Vec<String> {
    let mut r: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.to_string())
        .collect();
    r.sort();
    r
}

#[test]
fn v1_traces_have_the_fields_types_and_units_of_jaegers_fixture() {
    let server = TestServer::start();
    let expected = fixture("v1-ui_01.json");
    let (request, ids) = v1_fixture_as_otlp(&expected);
    assert_eq!(
        server
            .post_traces("application/x-protobuf", proto(&request), &[])
            .status(),
        200
    );

    for path in [
        "/jaeger/api/traces/0000000000000001",
        "/jaeger/api/traces/1?start=1485467191639&end=1485467191640",
    ] {
        let (status, body) = server.get(path, None);
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(keys(&body), ["data", "errors", "limit", "offset", "total"]);
        assert_eq!(body["total"], 1);
        let trace = &body["data"][0];
        assert_eq!(keys(trace), keys(&expected), "trace fields");
        assert_eq!(trace["traceID"], expected["traceID"]);
        assert!(
            trace["warnings"].is_null(),
            "no warnings here: null as Jaeger writes it"
        );
        let ours = trace["spans"].as_array().unwrap();
        assert_eq!(ours.len(), expected["spans"].as_array().unwrap().len());
        for (want, id) in expected["spans"].as_array().unwrap().iter().zip(&ids) {
            let got = ours
                .iter()
                .find(|s| s["spanID"] == id.as_str())
                .unwrap_or_else(|| panic!("span {id} missing: {trace}"));
            assert_eq!(keys(got), keys(want), "fields of {id}");
            for field in [
                "traceID",
                "operationName",
                "startTime",
                "duration",
                "tags",
                "logs",
            ] {
                assert_eq!(got[field], want[field], "{field} of span {id}");
            }
            assert_eq!(
                sorted_refs(&got["references"]),
                sorted_refs(&want["references"]),
                "references of {id}"
            );
            let process = &trace["processes"][got["processID"].as_str().unwrap()];
            let want_process = &expected["processes"][want["processID"].as_str().unwrap()];
            assert_eq!(process, want_process, "process of {id}");
        }
    }
    // An unknown trace: 404 in the v1 envelope, never a trace with no spans.
    let (status, body) = server.get("/jaeger/api/traces/00000000000000000000000000000abc", None);
    assert_eq!(status, 404);
    assert!(
        body["data"].is_null() && body["errors"][0]["code"] == 404,
        "{body}"
    );
    let (status, body) = server.get("/jaeger/api/traces/not-hex", None);
    assert_eq!(status, 400);
    assert!(body["errors"][0]["msg"]
        .as_str()
        .unwrap()
        .contains("not-hex"));
}

/// Jaeger's v3 snapshots: the same spans answer with the same fields and values.
#[test]
fn v3_answers_have_the_shapes_of_jaegers_snapshots() {
    let server = TestServer::start();
    // GetTrace / FindTraces: one span "foobar", kind server, status error, empty
    // resource and scope.
    let start = 1_000_000_000_000u64;
    post_spans(
        &server,
        Resource::default(),
        vec![Span {
            trace_id: id_bytes::<16>("1"),
            span_id: id_bytes::<8>("2"),
            name: "foobar".into(),
            kind: 2,
            start_time_unix_nano: start,
            end_time_unix_nano: start + 1000,
            status: Some(Status {
                code: 2,
                ..Default::default()
            }),
            ..Default::default()
        }],
    );
    let want = fixture("v3-GetTrace.json");
    let (status, got) = server.get(
        "/jaeger/api/v3/traces/00000000000000000000000000000001",
        None,
    );
    assert_eq!(status, 200, "{got}");
    let want_span = &want["result"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
    let got_rs = &got["result"]["resourceSpans"][0];
    let got_span = &got_rs["scopeSpans"][0]["spans"][0];
    for (k, v) in want_span.as_object().unwrap() {
        assert_eq!(&got_span[k], v, "span field {k}: {got}");
    }
    // Only the times are added (the snapshot's spans have none).
    let extra: Vec<&str> = keys(got_span)
        .into_iter()
        .filter(|k| want_span.get(*k).is_none())
        .collect();
    assert_eq!(extra, ["endTimeUnixNano", "startTimeUnixNano"]);
    assert_eq!(
        got_span["startTimeUnixNano"],
        start.to_string(),
        "uint64 as a string, in ns"
    );
    assert_eq!(keys(got_rs), ["resource", "scopeSpans"]);
    let find_want = fixture("v3-FindTraces.json");
    for q in [
        "query.service_name=unknown_service&query.start_time_min=1970-01-01T00:16:00Z&query.start_time_max=1970-01-01T00:17:00Z",
        "query.serviceName=unknown_service&query.startTimeMin=1970-01-01T01:16:00%2B01:00&query.searchDepth=5",
    ] {
        let (status, found) = server.get(&format!("/jaeger/api/v3/traces?{q}"), None);
        assert_eq!(status, 200, "{found}");
        assert_eq!(keys(&found), keys(&find_want));
        assert_eq!(found["result"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"], "foobar");
    }
    // Services and operations.
    let (_, services) = server.get("/jaeger/api/v3/services", None);
    assert_eq!(keys(&services), keys(&fixture("v3-GetServices.json")));
    assert_eq!(services["services"], json!(["unknown_service"]));
    let (_, ops) = server.get(
        "/jaeger/api/v3/operations?service=unknown_service&span_kind=server",
        None,
    );
    let want_ops = fixture("v3-GetOperations.json");
    assert_eq!(
        keys(&ops["operations"][0]),
        keys(&want_ops["operations"][0])
    );
    assert_eq!(
        ops["operations"],
        json!([{"name": "foobar", "spanKind": "server"}])
    );

    // FindTraceSummaries: two spans on "frontend", one of them an error.
    post_spans(
        &server,
        Resource {
            attributes: vec![kv("service.name", "frontend")],
            ..Default::default()
        },
        vec![
            Span {
                trace_id: id_bytes::<16>("a1"),
                span_id: id_bytes::<8>("1"),
                name: "HTTP GET /".into(),
                kind: 2,
                start_time_unix_nano: start,
                end_time_unix_nano: start + 1_000_000_000,
                ..Default::default()
            },
            Span {
                trace_id: id_bytes::<16>("a1"),
                span_id: id_bytes::<8>("2"),
                parent_span_id: id_bytes::<8>("1"),
                name: "db".into(),
                kind: 3,
                start_time_unix_nano: start + 10,
                end_time_unix_nano: start + 20,
                status: Some(Status {
                    code: 2,
                    ..Default::default()
                }),
                ..Default::default()
            },
        ],
    );
    let (status, got) = server.get(
        "/jaeger/api/v3/trace-summaries?query.service_name=frontend",
        None,
    );
    assert_eq!(status, 200, "{got}");
    let mut want = fixture("v3-FindTraceSummaries.json");
    want["summaries"][0]["traceId"] = json!("000000000000000000000000000000a1");
    assert_eq!(got, want);
    // Errors as v3 writes them.
    let (status, err) = server.get("/jaeger/api/v3/traces/ffff", None);
    assert_eq!(status, 404);
    assert_eq!(err["error"]["httpCode"], 404);
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not found"));
    let (status, err) = server.get("/jaeger/api/v3/traces?query.start_time_min=yesterday", None);
    assert_eq!(status, 400);
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("start_time_min"));
}

/// What Grafana's Jaeger data source calls: services, operations, search by tags and
/// duration, the dependency graph; with keys, a tenant's own data only.
#[test]
fn grafana_calls_search_and_dependencies_per_tenant() {
    let server = TestServer::start_with_config(Some(
        "[[tenants]]\nid = \"acme\"\napi_keys = [\"acme-jaeger-key-0001\"]\n\n[[tenants]]\nid = \"globex\"\napi_keys = [\"globex-jaeger-key-02\"]\n",
    ));
    let now = now_nanos();
    for (n, key) in [
        (1u8, "acme-jaeger-key-0001"),
        (2, "acme-jaeger-key-0001"),
        (3, "globex-jaeger-key-02"),
    ] {
        // The model call in a service of its own: the gateway calls it.
        let mut request = llm_trace(
            [n; 16],
            if n == 3 { "globex-gw" } else { "gateway" },
            "gpt-4o",
            now - u64::from(n) * 1_000_000,
        );
        let mut llm_service = request.resource_spans[0].clone();
        let call = request.resource_spans[0].scope_spans[0]
            .spans
            .pop()
            .unwrap();
        llm_service.resource = Some(Resource {
            attributes: vec![kv("service.name", "llm-proxy")],
            ..Default::default()
        });
        llm_service.scope_spans[0].spans = vec![call];
        request.resource_spans.push(llm_service);
        let resp = server.post_traces(
            "application/x-protobuf",
            proto(&request),
            &[("authorization", &format!("Bearer {key}"))],
        );
        assert!(resp.status().is_success());
    }
    let key = Some("acme-jaeger-key-0001");
    let (status, _) = server.get("/jaeger/api/services", None);
    assert_eq!(status, 401, "keys are required here as everywhere");
    let (_, services) = server.get("/jaeger/api/services", key);
    let names = services["data"].as_array().unwrap();
    assert!(
        names.contains(&json!("gateway")) && !names.contains(&json!("globex-gw")),
        "{services}"
    );
    let (_, ops) = server.get("/jaeger/api/services/gateway/operations", key);
    assert_eq!(ops["data"], json!(["POST /v1/chat/completions"]));
    let (_, ops) = server.get(
        "/jaeger/api/operations?service=gateway&spanKind=server",
        key,
    );
    assert_eq!(ops["data"][0]["spanKind"], "server");
    // Search as Grafana sends it: µs times, a logfmt tag, a Go duration, a limit.
    let start_us = (now - 3_600_000_000_000) / 1000;
    let end_us = (now + 60_000_000_000) / 1000;
    let (status, found) = server.get(
        &format!("/jaeger/api/traces?service=llm-proxy&tags=gen_ai.request.model%3Dgpt-4o&minDuration=100ms&start={start_us}&end={end_us}&limit=20"),
        key,
    );
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["data"].as_array().unwrap().len(), 2, "{found}");
    let span = &found["data"][0]["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["operationName"].as_str().unwrap().starts_with("chat"))
        .cloned()
        .unwrap();
    let tag = |k: &str| {
        span["tags"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["key"] == k)
            .cloned()
    };
    assert_eq!(
        tag("llm.request_model").unwrap()["value"],
        "gpt-4o",
        "LLM fields surface as tags"
    );
    assert_eq!(tag("llm.cost_usd").unwrap()["type"], "float64");
    assert_eq!(tag("span.kind").unwrap()["value"], "client");
    let (_, none) = server.get(&format!("/jaeger/api/traces?service=gateway&tags=%7B%22gen_ai.request.model%22%3A%22other%22%7D&start={start_us}&end={end_us}"), key);
    assert_eq!(none["data"], json!([]));
    // The service graph: gateway → the LLM service, from parent/child spans.
    let (_, deps) = server.get(
        &format!(
            "/jaeger/api/dependencies?endTs={}&lookback=3600000",
            (now + 60_000_000_000) / 1_000_000
        ),
        key,
    );
    let deps = deps["data"].as_array().unwrap();
    assert!(!deps.is_empty());
    assert_eq!(
        deps,
        &[json!({"parent": "gateway", "child": "llm-proxy", "callCount": 2})]
    );
    // The other tenant's trace is not there.
    let (status, _) = server.get(&format!("/jaeger/api/traces/{}", hex(&[3; 16])), key);
    assert_eq!(status, 404);
}
