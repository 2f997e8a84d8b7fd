//! OTLP/HTTP ingest: both encodings, gzip, and every error path with its status code.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use serde_json::{json, Value};

use crate::harness::*;
use crate::scratch::*;

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

#[test]
fn protobuf_gzip_and_json_are_stored_and_read_back() {
    let server = TestServer::start();
    let t = now_nanos();
    // protobuf
    let resp = server.post_traces(PROTOBUF, proto(&llm_trace([1; 16], "gw", "gpt-4o", t)), &[]);
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], PROTOBUF);
    let body = ExportTraceServiceResponse::decode(resp.bytes().unwrap()).unwrap();
    assert!(body.partial_success.is_none());
    // gzip protobuf
    let resp = server.post_traces(
        PROTOBUF,
        gzip(&proto(&llm_trace([2; 16], "gw", "llama", t + 1))),
        &[("content-encoding", "gzip")],
    );
    assert_eq!(resp.status(), 200);
    // JSON (gzip too)
    let doc = serde_json::to_vec(&llm_trace([3; 16], "gw", "mistral", t + 2)).unwrap();
    let resp = server.post_traces(JSON, gzip(&doc), &[("content-encoding", "gzip")]);
    assert_eq!(resp.status(), 200, "{:?}", resp.text());

    for (id, model) in [
        ([1u8; 16], "gpt-4o"),
        ([2; 16], "llama"),
        ([3; 16], "mistral"),
    ] {
        let (status, trace) = server.get(&format!("/api/v1/traces/{}", hex(&id)), None);
        assert_eq!(status, 200);
        assert_eq!(trace["span_count"], 2);
        let root = &trace["roots"][0];
        assert_eq!(root["name"], "POST /v1/chat/completions");
        assert_eq!(root["service"], "gw");
        assert_eq!(root["llm"]["route"], "/v1/chat/completions");
        let child = &root["children"][0];
        assert_eq!(child["llm"]["request_model"], model);
        assert_eq!(child["llm"]["total_tokens"], 150);
        assert_eq!(child["llm"]["adapter_id"], "fin-lora@7");
        assert_eq!(root["duration_ms"], 900.0);
        assert_eq!(root["self_time_ms"], 200.0);
    }
    let (_, page) = server.get("/api/v1/traces?model=llama", None);
    assert_eq!(page["traces"].as_array().unwrap().len(), 1);
    assert_eq!(page["traces"][0]["trace_id"], hex(&[2; 16]));
    assert_eq!(page["traces"][0]["total_tokens"], 150);
    let (_, services) = server.get("/api/v1/services", None);
    assert_eq!(services, json!({"services": [{"name": "gw"}]}));
}

fn error_message(resp: reqwest::blocking::Response) -> (u16, String) {
    let status = resp.status().as_u16();
    let body: Value = resp.json().unwrap_or(Value::Null);
    (status, body["message"].as_str().unwrap_or("").to_owned())
}

#[test]
fn bad_input_gets_a_clear_4xx_and_never_kills_the_server() {
    let server = TestServer::start_with_config(Some("[server]\nmax_body_bytes = 200000\n"));
    let (status, msg) =
        error_message(server.post_traces(JSON, b"{\"resourceSpans\": [".to_vec(), &[]));
    assert_eq!(status, 400);
    assert!(msg.contains("not valid JSON"), "{msg}");

    let (status, msg) = error_message(server.post_traces(
        JSON,
        br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"xyz"}]}]}]}"#.to_vec(),
        &[],
    ));
    assert_eq!(status, 400);
    assert!(
        msg.contains("resourceSpans[0].scopeSpans[0].spans[0]"),
        "{msg}"
    );

    let resp = server.post_traces(PROTOBUF, vec![0x0a, 0xff, 0xff, 0xff, 0x0f], &[]);
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()["content-type"], PROTOBUF);

    let (status, msg) = error_message(server.post_traces("text/plain", b"hello".to_vec(), &[]));
    assert_eq!(status, 415);
    assert!(msg.contains("text/plain"), "{msg}");

    let (status, msg) =
        error_message(server.post_traces(JSON, b"{}".to_vec(), &[("content-encoding", "br")]));
    assert_eq!(status, 415);
    assert!(msg.contains("br"), "{msg}");

    let (status, msg) = error_message(server.post_traces(JSON, vec![b' '; 300_000], &[]));
    assert_eq!(status, 413);
    assert!(msg.contains("200000"), "{msg}");

    // A gzip bomb: small on the wire, far over the limit once inflated.
    let bomb = gzip(&vec![b' '; 50_000_000]);
    assert!(bomb.len() < 200_000);
    let (status, _) =
        error_message(server.post_traces(JSON, bomb, &[("content-encoding", "gzip")]));
    assert_eq!(status, 413);

    let (status, msg) = error_message(server.post_traces(
        JSON,
        b"not gzip".to_vec(),
        &[("content-encoding", "gzip")],
    ));
    assert_eq!(status, 400);
    assert!(msg.contains("gzip"), "{msg}");

    // Still alive and well.
    let resp = server.post_traces(JSON, b"{}".to_vec(), &[]);
    assert_eq!(resp.status(), 200);
    let (status, health) = server.get("/api/v1/health", None);
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
}

#[test]
fn invalid_spans_are_rejected_individually_with_partial_success() {
    let server = TestServer::start();
    let doc = json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "good",
         "startTimeUnixNano": "1796047500000000000", "endTimeUnixNano": "1796047500500000000"},
        {"traceId": "00000000000000000000000000000000", "spanId": "eee19b7ec3c1b175", "name": "zero-trace",
         "startTimeUnixNano": "1", "endTimeUnixNano": "2"},
        {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7e", "name": "short-span-id",
         "startTimeUnixNano": "1", "endTimeUnixNano": "2"},
        {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b177", "name": "backwards",
         "startTimeUnixNano": "10", "endTimeUnixNano": "2"}
    ]}]}]});
    let resp = server.post_traces(JSON, doc.to_string().into_bytes(), &[]);
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().unwrap();
    let partial = &body["partialSuccess"];
    assert_eq!(
        partial["rejectedSpans"]
            .as_i64()
            .or_else(|| partial["rejectedSpans"]
                .as_str()
                .and_then(|s| s.parse().ok())),
        Some(3)
    );
    let msg = partial["errorMessage"].as_str().unwrap();
    for needle in ["zero-trace", "short-span-id", "backwards", "before start"] {
        assert!(msg.contains(needle), "{needle} missing: {msg}");
    }
    let (status, trace) = server.get("/api/v1/traces/5b8efff798038103d269b633813fc60c", None);
    assert_eq!(status, 200);
    assert_eq!(trace["span_count"], 1);
    assert_eq!(trace["roots"][0]["name"], "good");
}

#[test]
fn sloppy_real_world_payloads_are_accepted() {
    let server = TestServer::start();
    let doc = json!({"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]},
    "scopeSpans": [{"scope": {}, "spans": [{
      "traceId": "0AF7651916CD43DD8448EB211C80319C", "spanId": "B7AD6B7169203331", "name": "llm_request", "kind": 2,
      "startTimeUnixNano": 1796047500000000000u64, "endTimeUnixNano": "1796047501000000000",
      "attributes": [
          {"key": "empty", "value": {}},
          {"key": "nullish", "value": {"intValue": null}},
          {"key": "empty.list", "value": {"arrayValue": {}}},
          {"key": "gen_ai.latency.time_to_first_token", "value": {"doubleValue": 0.12}},
          {"key": "gen_ai.response.finish_reasons", "value": {"stringValue": "[\"stop\"]"}},
          {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": 10}}
      ]}]}]}]});
    let resp = server.post_traces(JSON, doc.to_string().into_bytes(), &[]);
    assert_eq!(resp.status(), 200, "{:?}", resp.text());
    let (_, trace) = server.get("/api/v1/traces/0af7651916cd43dd8448eb211c80319c", None);
    let span = &trace["roots"][0];
    assert_eq!(span["llm"]["finish_reasons"], json!(["stop"]));
    assert_eq!(span["llm"]["provider"], "vllm");
    assert_eq!(span["llm"]["input_tokens"], 10);
    assert_eq!(span["attributes"]["empty"], Value::Null);
    assert_eq!(span["attributes"]["empty.list"], json!([]));
}

#[test]
fn full_write_queue_answers_429_with_retry_after() {
    // The store stalls (SQLite's write lock held from outside; a frozen ClickHouse) so
    // the writer's queue fills.
    let mut stalled = StalledStore::start("[server]\nmax_queued_batches = 1\n");
    let server = &stalled.server;
    let handles: Vec<_> = (0..6u8)
        .map(|i| {
            let url = format!("{}/v1/traces", server.otlp_http);
            std::thread::spawn(move || {
                let resp = client()
                    .post(url)
                    .header("content-type", PROTOBUF)
                    .body(proto(&llm_trace([10 + i; 16], "gw", "m", now_nanos())))
                    .send()
                    .unwrap();
                (
                    resp.status().as_u16(),
                    resp.headers()
                        .get("retry-after")
                        .map(|v| v.to_str().unwrap().to_owned()),
                )
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    stalled.release();
    let server = &stalled.server;
    let results: Vec<(u16, Option<String>)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    let throttled: Vec<_> = results.iter().filter(|(s, _)| *s == 429).collect();
    assert!(!throttled.is_empty(), "{results:?}");
    assert!(
        throttled.iter().all(|(_, ra)| ra.as_deref() == Some("1")),
        "{results:?}"
    );
    // Everything acknowledged is there.
    for (i, (status, _)) in results.iter().enumerate() {
        let (get_status, _) = server.get(
            &format!("/api/v1/traces/{}", hex(&[10 + i as u8; 16])),
            None,
        );
        if *status == 200 {
            assert_eq!(get_status, 200);
        }
    }
}

/// OTLP logs on `/v1/logs`: the same rules as traces — bad bodies get a 4xx naming
/// the fault, bad records are refused one by one, keys are checked.
#[test]
fn logs_follow_the_rules_of_traces() {
    let server = TestServer::start_with_config(Some(
        "[[tenants]]\nid = \"acme\"\napi_keys = [\"acme-logs-key-0001\"]\n",
    ));
    let auth = [("authorization", "Bearer acme-logs-key-0001")];
    let doc = json!({"resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"timeUnixNano": "1796047500000000000", "body": {"stringValue": "kept"},
         "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174"},
        {"timeUnixNano": "1796047500000000001", "spanId": "eee19b7ec3c1b174"},
        {"body": {"stringValue": "no time at all"}}
    ]}]}]});
    let resp = server.post_otlp("/v1/logs", JSON, doc.to_string().into_bytes(), &auth);
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().unwrap();
    let partial = &body["partialSuccess"];
    let rejected = partial["rejectedLogRecords"].as_i64().or_else(|| {
        partial["rejectedLogRecords"]
            .as_str()
            .and_then(|s| s.parse().ok())
    });
    assert_eq!(rejected, Some(2), "{body}");
    let msg = partial["errorMessage"].as_str().unwrap();
    assert!(
        msg.contains("span_id without a trace_id") && msg.contains("time"),
        "{msg}"
    );
    let key = Some("acme-logs-key-0001");
    let (status, logs) = server.get("/api/v1/traces/5b8efff798038103d269b633813fc60c/logs", key);
    assert_eq!(status, 200);
    assert_eq!(logs["logs"][0]["body"], "kept");
    assert_eq!(logs["logs"].as_array().unwrap().len(), 1);

    let (status, msg) =
        error_message(server.post_otlp("/v1/logs", JSON, b"{\"resourceLogs\": [".to_vec(), &auth));
    assert_eq!(status, 400);
    assert!(msg.contains("not valid JSON"), "{msg}");
    let (status, msg) = error_message(server.post_otlp(
        "/v1/logs",
        JSON,
        br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"traceId":"xyz"}]}]}]}"#.to_vec(),
        &auth,
    ));
    assert_eq!(status, 400);
    assert!(
        msg.contains("resourceLogs[0].scopeLogs[0].logRecords[0]"),
        "{msg}"
    );
    let resp = server.post_otlp(
        "/v1/logs",
        PROTOBUF,
        vec![0x0a, 0xff, 0xff, 0xff, 0x0f],
        &auth,
    );
    assert_eq!(resp.status(), 400);
    let (status, msg) = error_message(server.post_otlp("/v1/logs", JSON, b"{}".to_vec(), &[]));
    assert_eq!(status, 401, "{msg}");
    let (status, msg) = error_message(server.post_otlp("/v1/metrics", JSON, b"{}".to_vec(), &auth));
    assert_eq!(status, 501);
    assert!(msg.contains("/v1/logs"), "{msg}");
}
