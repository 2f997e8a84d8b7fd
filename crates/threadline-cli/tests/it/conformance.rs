//! Conformance: every OTLP/JSON file of the shared corpus (real payloads from the
//! OpenTelemetry and Jaeger projects) is accepted and read back intact.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::harness::*;

/// What the API should show for an OTLP/JSON `AnyValue`.
fn expected_value(any: &Value) -> Value {
    let Some(obj) = any.as_object() else {
        return Value::Null;
    };
    if let Some(s) = obj.get("stringValue") {
        return s.clone();
    }
    if let Some(b) = obj.get("boolValue") {
        return b.clone();
    }
    if let Some(i) = obj.get("intValue") {
        let n: i64 = match i {
            Value::String(s) => s.parse().unwrap(),
            other => other.as_i64().unwrap(),
        };
        return json!(n);
    }
    if let Some(d) = obj.get("doubleValue") {
        return json!(d.as_f64().unwrap());
    }
    if let Some(b) = obj.get("bytesValue") {
        return b.clone();
    }
    if let Some(a) = obj.get("arrayValue") {
        let values = a
            .get("values")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        return Value::Array(values.iter().map(expected_value).collect());
    }
    if let Some(kv) = obj.get("kvlistValue") {
        return expected_attributes(kv.get("values").unwrap_or(&Value::Null));
    }
    Value::Null
}

fn expected_attributes(list: &Value) -> Value {
    let mut map = serde_json::Map::new();
    for kv in list.as_array().cloned().unwrap_or_default() {
        map.insert(
            kv["key"].as_str().unwrap().to_owned(),
            expected_value(kv.get("value").unwrap_or(&Value::Null)),
        );
    }
    Value::Object(map)
}

fn nanos(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => "0".to_owned(),
    }
}

/// Collects every span of the tree by span id.
fn flatten(node: &Value, out: &mut HashMap<String, Value>) {
    out.insert(node["span_id"].as_str().unwrap().to_owned(), node.clone());
    for c in node["children"].as_array().cloned().unwrap_or_default() {
        flatten(&c, out);
    }
}

#[test]
fn every_corpus_otlp_json_file_is_accepted_and_read_back_intact() {
    let dir = corpus_dir().join("otlp-json");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus directory {} is missing: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "expected the shared corpus files, found {files:?}"
    );
    // Several files reuse the same trace and span ids with different content (they are
    // fixtures of separate test stores): give each file a tenant of its own.
    let config: String = (0..files.len())
        .map(|i| {
            format!("[[tenants]]\nid = \"corpus-{i}\"\napi_keys = [\"corpus-file-key-{i:04}\"]\n")
        })
        .collect();
    let server = TestServer::start_with_config(Some(&config));
    let mut checked_spans = 0;
    for (i, file) in files.iter().enumerate() {
        let key = format!("corpus-file-key-{i:04}");
        let bearer = format!("Bearer {key}");
        let text = std::fs::read(file).unwrap();
        let resp = server.post_traces(
            "application/json",
            text.clone(),
            &[("authorization", &bearer)],
        );
        let name = file.display();
        assert_eq!(resp.status(), 200, "{name}: {:?}", resp.text());
        let body: Value = resp.json().unwrap();
        assert!(
            body.get("partialSuccess")
                .is_none_or(|p| p.is_null() || p.get("rejectedSpans").is_none()),
            "{name}: {body}"
        );
        let doc: Value = serde_json::from_slice(&text).unwrap();
        for rs in doc["resourceSpans"].as_array().unwrap() {
            let resource_attrs =
                expected_attributes(rs.pointer("/resource/attributes").unwrap_or(&Value::Null));
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for span in ss["spans"].as_array().unwrap() {
                    let trace_id = span["traceId"].as_str().unwrap().to_ascii_lowercase();
                    let span_id = span["spanId"].as_str().unwrap().to_ascii_lowercase();
                    let (status, trace) =
                        server.get(&format!("/api/v1/traces/{trace_id}"), Some(&key));
                    assert_eq!(status, 200, "{name}: trace {trace_id}");
                    let mut by_id = HashMap::new();
                    for root in trace["roots"].as_array().unwrap() {
                        flatten(root, &mut by_id);
                    }
                    let got = by_id
                        .get(&span_id)
                        .unwrap_or_else(|| panic!("{name}: span {span_id} missing"));
                    let ctx = format!("{name}: span {span_id}");
                    assert_eq!(
                        got["name"],
                        span.get("name").cloned().unwrap_or(json!("")),
                        "{ctx}"
                    );
                    assert_eq!(
                        got["start_time_unix_nano"],
                        nanos(&span["startTimeUnixNano"]),
                        "{ctx}"
                    );
                    assert_eq!(
                        got["end_time_unix_nano"],
                        nanos(&span["endTimeUnixNano"]),
                        "{ctx}"
                    );
                    let parent = span
                        .get("parentSpanId")
                        .and_then(Value::as_str)
                        .filter(|p| !p.is_empty());
                    assert_eq!(
                        got["parent_span_id"].as_str(),
                        parent.map(|p| p.to_ascii_lowercase()).as_deref(),
                        "{ctx}"
                    );
                    assert_eq!(
                        got["trace_state"],
                        span.get("traceState").cloned().unwrap_or(json!("")),
                        "{ctx}"
                    );
                    assert_eq!(
                        got["flags"].as_u64().unwrap(),
                        span.get("flags").and_then(Value::as_u64).unwrap_or(0),
                        "{ctx}"
                    );
                    assert_eq!(
                        got["attributes"],
                        expected_attributes(&span["attributes"]),
                        "{ctx}"
                    );
                    assert_eq!(got["resource"]["attributes"], resource_attrs, "{ctx}");
                    let status_code = span
                        .pointer("/status/code")
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    assert_eq!(
                        got["status"]["code"],
                        ["unset", "ok", "error"][status_code as usize],
                        "{ctx}"
                    );
                    assert_eq!(
                        got["status"]["message"],
                        span.pointer("/status/message")
                            .cloned()
                            .unwrap_or(json!("")),
                        "{ctx}"
                    );
                    let events = span
                        .get("events")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    assert_eq!(
                        got["events"].as_array().unwrap().len(),
                        events.len(),
                        "{ctx}"
                    );
                    for (g, e) in got["events"].as_array().unwrap().iter().zip(&events) {
                        assert_eq!(
                            g["name"],
                            e.get("name").cloned().unwrap_or(json!("")),
                            "{ctx}"
                        );
                        assert_eq!(g["time_unix_nano"], nanos(&e["timeUnixNano"]), "{ctx}");
                        assert_eq!(
                            g["attributes"],
                            expected_attributes(&e["attributes"]),
                            "{ctx}"
                        );
                    }
                    let links = span
                        .get("links")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    assert_eq!(got["links"].as_array().unwrap().len(), links.len(), "{ctx}");
                    for (g, l) in got["links"].as_array().unwrap().iter().zip(&links) {
                        assert_eq!(
                            g["trace_id"].as_str().unwrap(),
                            l["traceId"].as_str().unwrap().to_ascii_lowercase(),
                            "{ctx}"
                        );
                        assert_eq!(
                            g["span_id"].as_str().unwrap(),
                            l["spanId"].as_str().unwrap().to_ascii_lowercase(),
                            "{ctx}"
                        );
                        assert_eq!(
                            g["trace_state"],
                            l.get("traceState").cloned().unwrap_or(json!("")),
                            "{ctx}"
                        );
                        assert_eq!(
                            g["attributes"],
                            expected_attributes(&l["attributes"]),
                            "{ctx}"
                        );
                    }
                    if let Some(scope_name) = ss.pointer("/scope/name") {
                        assert_eq!(&got["scope"]["name"], scope_name, "{ctx}");
                    }
                    checked_spans += 1;
                }
            }
        }
    }
    assert!(checked_spans >= 15, "checked only {checked_spans} spans");
}
