//! The real OpenTelemetry Python SDK (OTLP/HTTP and OTLP/gRPC exporters) against the
//! real server. Needs a Python with the SDK: `THREADLINE_TEST_PYTHON` (set by `.ci/run`,
//! which builds the virtualenv; `scripts/test` sets it when `.venv` exists).

use serde_json::Value;

use crate::harness::*;

#[test]
fn opentelemetry_python_sdk_over_http_and_grpc() {
    let Some(python) = test_python("the OpenTelemetry Python SDK test") else {
        return;
    };
    let server = TestServer::start_with_config(Some(
        "[[tenants]]\nid = \"acme\"\napi_keys = [\"acme-secret-key-0001\"]\n",
    ));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/otel_sdk_send.py");
    let out = std::process::Command::new(python)
        .args([
            script,
            "--http",
            &server.otlp_http,
            "--grpc",
            &server.otlp_grpc,
            "--api-key",
            "acme-secret-key-0001",
        ])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Value = serde_json::from_slice(&out.stdout).unwrap();
    for transport in ["http", "grpc"] {
        let id = ids[transport].as_str().unwrap();
        let (status, trace) = server.get(
            &format!("/api/v1/traces/{id}"),
            Some("acme-secret-key-0001"),
        );
        assert_eq!(status, 200, "{transport}: {trace}");
        assert_eq!(trace["span_count"], 3, "{transport}");
        let root = &trace["roots"][0];
        assert_eq!(root["service"], format!("py-chat-{transport}"));
        assert_eq!(root["kind"], "server");
        assert_eq!(root["llm"]["route"], "/v1/chat/completions");
        assert_eq!(root["llm"]["ab_group"], "B");
        let children = root["children"].as_array().unwrap();
        let llm = children
            .iter()
            .find(|c| c["name"] == "chat llama-3-8b")
            .unwrap();
        let v = &llm["llm"];
        assert_eq!(v["operation"], "chat");
        assert_eq!(v["provider"], "openai");
        assert_eq!(v["request_model"], "meta-llama/Meta-Llama-3-8B-Instruct");
        assert_eq!(v["input_tokens"], 812);
        assert_eq!(v["output_tokens"], 97);
        assert_eq!(v["total_tokens"], 909);
        assert_eq!(v["finish_reasons"], serde_json::json!(["stop"]));
        assert_eq!(v["ttft_ms"], 210.0);
        assert_eq!(v["adapter_id"], "fin-lora@7");
        assert_eq!(v["instance_id"], "inst-3");
        assert_eq!(v["image"], "ghcr.io/acme/chat:v1.4.0");
        assert_eq!(v["prompt_template_version"], "v2.1.4");
        assert_eq!(v["kv_cache_hit_ratio"], 0.75);
        assert_eq!(llm["events"][0]["name"], "gen_ai.content.first_token");
        let tool = children
            .iter()
            .find(|c| c["name"] == "execute_tool lookup_account")
            .unwrap();
        assert_eq!(tool["llm"]["tool_name"], "lookup_account");
        assert_eq!(tool["status"]["code"], "error");
        assert_eq!(tool["status"]["message"], "account service unavailable");
        let (_, page) = server.get(
            "/api/v1/traces?status=error&adapter=fin-lora@7",
            Some("acme-secret-key-0001"),
        );
        // The error and the adapter are on different spans: no single span matches both.
        assert_eq!(page["traces"].as_array().unwrap().len(), 0);
        let (_, page) = server.get(
            &format!("/api/v1/traces?status=error&service=py-chat-{transport}"),
            Some("acme-secret-key-0001"),
        );
        assert_eq!(page["traces"][0]["trace_id"], id);
        assert_eq!(page["traces"][0]["error"], true);
        // Free text: the prompt's words (the last by prefix) and the status message.
        for text in ["INVOICE%20charged%20tw", "service%20unavailable"] {
            let (_, page) = server.get(
                &format!("/api/v1/traces?q={text}&service=py-chat-{transport}"),
                Some("acme-secret-key-0001"),
            );
            assert_eq!(
                page["traces"].as_array().unwrap().len(),
                1,
                "{text}: {page}"
            );
            assert_eq!(page["traces"][0]["trace_id"], id);
        }
        let (_, page) = server.get(
            "/api/v1/traces?q=invoice%20refunded",
            Some("acme-secret-key-0001"),
        );
        assert_eq!(page["traces"].as_array().unwrap().len(), 0);
    }
}
