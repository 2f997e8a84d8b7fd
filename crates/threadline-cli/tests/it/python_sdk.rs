//! The real OpenTelemetry Python SDK (OTLP/HTTP and OTLP/gRPC exporters, traces and
//! logs) against the real server. Needs a Python with the SDK: `THREADLINE_TEST_PYTHON` (set by `.ci/run`,
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
        // The error and the adapter are on different spans of the trace: filters hold
        // per trace, so it is found.
        assert!(
            page["traces"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["trace_id"] == id),
            "{page}"
        );
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

        // The GenAI events the SDK's log exporter sent: on the LLM span, in its
        // conversation, and searchable; the plain warning on the tool span.
        let key = Some("acme-secret-key-0001");
        let llm_id = llm["span_id"].as_str().unwrap();
        let (status, span) = server.get(&format!("/api/v1/traces/{id}/spans/{llm_id}"), key);
        assert_eq!(status, 200, "{span}");
        let events: Vec<&str> = span["logs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["event_name"].as_str().unwrap())
            .collect();
        assert_eq!(
            events,
            ["gen_ai.user.message", "gen_ai.choice"],
            "{transport}"
        );
        assert_eq!(span["logs"][0]["service"], format!("py-chat-{transport}"));
        let severity = span["logs"][0]["severity"].as_str().unwrap().to_lowercase();
        assert_eq!(severity, "info");
        let messages: Vec<(&str, &str)> = span["conversation"]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        assert_eq!(
            messages,
            [
                ("user", "Can I get a refund for the double charge?"),
                ("assistant", "Yes: the refund is on its way.")
            ],
            "{transport}"
        );
        let (_, logs) = server.get(&format!("/api/v1/traces/{id}/logs"), key);
        let logs = logs["logs"].as_array().unwrap();
        assert_eq!(logs.len(), 3, "{transport}");
        assert_eq!(logs[2]["severity_number"], 13);
        assert_eq!(logs[2]["body"], "retrying the model once");
        let (_, found) = server.get(
            &format!("/api/v1/logs?q=refund%20double&service=py-chat-{transport}"),
            key,
        );
        assert_eq!(found["logs"].as_array().unwrap().len(), 1, "{found}");
        assert_eq!(found["logs"][0]["trace_id"], id);
        let (_, found) = server.get("/api/v1/logs?severity=warn", key);
        assert_eq!(found["logs"].as_array().unwrap().len(), 2, "{found}");
        assert!(server.get("/api/v1/logs?q=refund", None).0 == 401);
    }
}
