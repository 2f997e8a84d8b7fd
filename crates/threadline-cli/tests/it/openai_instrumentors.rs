//! The real OpenAI instrumentations — OpenLLMetry's and OpenInference's — around the
//! real `openai` client, calling a local fake OpenAI endpoint
//! (`tests/python/openai_instrumentors.py`). Their chat and embedding spans are
//! normalized alike; the plain HTTP server span above them gives the request its route
//! and user; the provider's prompt cache is kept apart from a KV cache, and the
//! embedding call (OpenLLMetry reports `cache_read.input_tokens = 0` on it) has none.

use serde_json::Value;

use crate::harness::*;

fn spans_of(trace: &Value) -> Vec<&Value> {
    fn walk<'a>(s: &'a Value, out: &mut Vec<&'a Value>) {
        out.push(s);
        for c in s["children"].as_array().into_iter().flatten() {
            walk(c, out);
        }
    }
    let mut out = Vec::new();
    for r in trace["roots"].as_array().into_iter().flatten() {
        walk(r, &mut out);
    }
    out
}

#[test]
fn openllmetry_and_openinference_openai_spans_have_one_llm_view() {
    let Some(python) = test_python("the OpenAI instrumentors test") else {
        return;
    };
    let server = TestServer::start();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/openai_instrumentors.py"
    );
    let out = std::process::Command::new(python)
        .args([script, &server.otlp_http])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Value = serde_json::from_slice(&out.stdout).unwrap();
    for instrumentor in ["openllmetry", "openinference"] {
        let id = ids[instrumentor].as_str().unwrap();
        let (status, trace) = server.get(&format!("/api/v1/traces/{id}"), None);
        assert_eq!(status, 200, "{instrumentor}: {trace}");
        let spans = spans_of(&trace);
        assert_eq!(spans.len(), 3, "{instrumentor}: {trace:#}");
        let root = &spans[0]["llm"];
        assert_eq!(root["route"], "/v1/support", "{instrumentor}");
        assert_eq!(root["user_id"], format!("{instrumentor}-user"));
        let by_op = |op: &str| {
            spans
                .iter()
                .find(|s| s["llm"]["operation"] == op)
                .unwrap_or_else(|| panic!("{instrumentor}: no {op} span in {trace:#}"))
        };
        let chat = &by_op("chat")["llm"];
        assert_eq!(chat["provider"], "openai", "{instrumentor}");
        assert_eq!(chat["request_model"], "gpt-4o-mini", "{instrumentor}");
        assert_eq!(
            (&chat["input_tokens"], &chat["output_tokens"]),
            (&Value::from(30), &Value::from(7)),
            "{instrumentor}"
        );
        assert_eq!(chat["finish_reasons"][0], "stop", "{instrumentor}");
        let cached = chat["prompt_cache_hit_ratio"].as_f64().unwrap();
        assert!((cached - 1.0 / 3.0).abs() < 1e-9, "{instrumentor}: {chat}");
        assert_eq!(chat["kv_cache_hit_ratio"], Value::Null, "{instrumentor}");
        let embed = &by_op("embeddings")["llm"];
        assert_eq!(embed["request_model"], "text-embedding-3-small");
        assert_eq!(embed["total_tokens"], 5, "{instrumentor}");
        assert_eq!(
            (
                &embed["kv_cache_hit_ratio"],
                &embed["prompt_cache_hit_ratio"]
            ),
            (&Value::Null, &Value::Null),
            "{instrumentor}: no cache applies to an embedding call: {embed}"
        );
    }
    // The requests on the route, end to end, by the plain server span; no KV cache
    // series at all, the provider's prompt cache on its own.
    let (_, requests) = server.get(
        "/api/v1/metrics?metric=request_rate&route=/v1/support&group_by=service",
        None,
    );
    assert_eq!(requests["level"], "request");
    let services: Vec<&str> = requests["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["labels"]["service"].as_str().unwrap())
        .collect();
    assert_eq!(
        services,
        ["openinference-app", "openllmetry-app"],
        "{requests}"
    );
    let (_, kv) = server.get("/api/v1/metrics?metric=kv_cache_hit_ratio&level=call", None);
    let values: Vec<&Value> = kv["series"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["points"].as_array().unwrap())
        .map(|p| &p["value"])
        .filter(|v| !v.is_null())
        .collect();
    assert!(values.is_empty(), "no KV cache applies: {kv}");
    let (_, prompt) = server.get(
        "/api/v1/metrics?metric=prompt_cache_hit_ratio&level=call&model=gpt-4o-mini",
        None,
    );
    let v = prompt["series"][0]["points"][0]["value"].as_f64().unwrap();
    assert!((v - 1.0 / 3.0).abs() < 1e-6, "{prompt}");
}
