//! Tests of the LLM normalizer: one OTLP/JSON fixture per convention (in
//! `fixtures/conventions/`), decoded and converted exactly as ingest does.

use threadline_model::{LlmView, RejectionReason};

use crate::{convert_request, parse_otlp_json};

fn view_of(fixture: &str) -> LlmView {
    let request = parse_otlp_json(fixture.as_bytes()).expect("fixture should parse");
    let batch = convert_request(request, &crate::TimeBounds::storable());
    assert_eq!(batch.rejected_spans, 0, "{}", batch.error_message());
    batch.spans[0]
        .llm
        .clone()
        .expect("fixture span should have an LLM view")
}

#[test]
fn otel_genai_current_names() {
    let v = view_of(include_str!("../fixtures/conventions/genai-current.json"));
    assert_eq!(v.operation.as_deref(), Some("chat"));
    assert_eq!(v.provider.as_deref(), Some("openai"));
    assert_eq!(v.request_model.as_deref(), Some("gpt-4o"));
    assert_eq!(v.response_model.as_deref(), Some("gpt-4o-2024-08-06"));
    assert_eq!(
        (v.input_tokens, v.output_tokens, v.total_tokens),
        (Some(1200), Some(300), Some(1500))
    );
    assert_eq!(v.ttft_ms, Some(250.0));
    assert_eq!(v.finish_reasons, vec!["stop", "length"]);
    // The provider's prompt cache, as the client saw it: not an inference KV cache.
    assert_eq!(v.prompt_cache_hit_ratio, Some(0.5));
    assert_eq!(v.kv_cache_hit_ratio, None);
    assert_eq!(v.session_id.as_deref(), Some("conv-42"));
    assert_eq!(v.user_id.as_deref(), Some("user-7"));
    assert_eq!(v.prompt_template_id.as_deref(), Some("support-chat"));
    assert_eq!(v.prompt_template_version.as_deref(), Some("v2.1.4"));
    // sha256("You are a helpful bank assistant.\x1fuser: Why was my card declined?\x1fv2.1.4")
    assert_eq!(
        v.prompt_hash.as_deref(),
        Some("fa97366fe359284543430eb8877127b2c6a17c69a5461ed023d52746c1fd7f86")
    );
    assert_eq!(v.rejection_reason, None);
}

#[test]
fn otel_genai_deprecated_names_and_events() {
    let v = view_of(include_str!(
        "../fixtures/conventions/genai-deprecated.json"
    ));
    assert_eq!(
        v.provider.as_deref(),
        Some("azure.ai.openai"),
        "gen_ai.system values are renamed"
    );
    assert_eq!(
        (v.input_tokens, v.output_tokens, v.total_tokens),
        (Some(80), Some(20), Some(100))
    );
    assert_eq!(
        v.finish_reasons,
        vec!["length"],
        "from the gen_ai.choice event"
    );
    assert_eq!(
        v.rejection_reason,
        Some(RejectionReason::ContextOverflow),
        "from error.type"
    );
    assert_eq!(
        v.prompt_hash.as_deref(),
        Some("0bb8db8b51255bf46a7c7f4c63ed8161840a2fc9a88c269b30d82aba58036823")
    );
}

#[test]
fn openinference_names_and_flattened_messages() {
    let v = view_of(include_str!("../fixtures/conventions/openinference.json"));
    assert_eq!(v.operation.as_deref(), Some("chat"));
    assert_eq!(v.provider.as_deref(), Some("mistral_ai"));
    assert_eq!(v.request_model.as_deref(), Some("mistral-large"));
    assert_eq!(
        (v.input_tokens, v.output_tokens, v.total_tokens),
        (Some(500), Some(50), Some(550))
    );
    assert_eq!(v.prompt_cache_hit_ratio, Some(0.25));
    assert_eq!(v.kv_cache_hit_ratio, None);
    assert_eq!(v.finish_reasons, vec!["stop"]);
    assert_eq!(v.session_id.as_deref(), Some("sess-9"));
    assert_eq!(v.prompt_template_version.as_deref(), Some("t-9"));
    assert_eq!(
        v.prompt_hash.as_deref(),
        Some("b4fa1d0e1d7bf84770f3c98e846c7d3d50652fb6bb930a0985eb01c77eff556a")
    );
}

#[test]
fn vllm_span_attributes() {
    let v = view_of(include_str!("../fixtures/conventions/vllm.json"));
    assert_eq!(v.provider.as_deref(), Some("vllm"));
    assert_eq!(
        v.response_model.as_deref(),
        Some("meta-llama/Meta-Llama-3-8B-Instruct")
    );
    assert_eq!(
        (v.input_tokens, v.output_tokens, v.total_tokens),
        (Some(1000), Some(200), Some(1200))
    );
    assert_eq!(v.ttft_ms, Some(85.0));
    assert_eq!(
        v.finish_reasons,
        vec!["stop"],
        "JSON-encoded string is decoded"
    );
    assert_eq!(
        v.kv_cache_hit_ratio,
        Some(0.25),
        "vLLM's cached prompt tokens"
    );
    assert_eq!(v.prompt_cache_hit_ratio, None);
}

#[test]
fn platform_attributes_resource_and_baggage() {
    let v = view_of(include_str!("../fixtures/conventions/platform.json"));
    assert_eq!(v.adapter_id.as_deref(), Some("fin-lora@7"));
    assert_eq!(v.base_model.as_deref(), Some("meta-llama/Meta-Llama-3-8B"));
    assert_eq!(
        v.instance_id.as_deref(),
        Some("inst-3"),
        "from the resource"
    );
    assert_eq!(
        v.image.as_deref(),
        Some("ghcr.io/acme/inference:v2.3.1"),
        "name + first tag"
    );
    assert_eq!(
        v.route.as_deref(),
        Some("/v1/chat/completions"),
        "api.route beats http.route"
    );
    assert_eq!(v.ab_group.as_deref(), Some("B"), "baggage.KEY copy");
    assert_eq!(
        v.gray_tag.as_deref(),
        Some("canary-2"),
        "raw baggage header, percent-decoded"
    );
    assert_eq!(v.kv_cache_hit_ratio, Some(0.82));
    assert_eq!(v.rejection_reason, Some(RejectionReason::RateLimit));
    assert_eq!(v.tool_name.as_deref(), Some("lookup_account"));
    assert_eq!(v.tool_call_id.as_deref(), Some("call_1"));
}

#[test]
fn spans_without_llm_signal_have_no_view() {
    let doc = include_str!("../fixtures/conventions/vllm.json")
        .replace("llm_request", "GET /health")
        .replace("gen_ai.", "x.");
    let batch = convert_request(
        parse_otlp_json(doc.as_bytes()).unwrap(),
        &crate::TimeBounds::storable(),
    );
    assert!(batch.spans[0].llm.is_none());
}

#[test]
fn an_embedding_calls_input_tokens_are_its_total() {
    let v = view_of(
        r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10",
        "spanId":"0102030405060708","name":"embeddings text-embedding-3-small","startTimeUnixNano":"1000",
        "endTimeUnixNano":"2000","attributes":[
        {"key":"gen_ai.operation.name","value":{"stringValue":"embeddings"}},
        {"key":"gen_ai.request.model","value":{"stringValue":"text-embedding-3-small"}},
        {"key":"gen_ai.usage.input_tokens","value":{"intValue":"812"}}]}]}]}]}"#,
    );
    assert_eq!(
        (v.input_tokens, v.output_tokens, v.total_tokens),
        (Some(812), None, Some(812))
    );
}

/// A key sent twice on one span reads as its last value, as it did when attributes
/// were looked up through a hash map.
#[test]
fn a_repeated_attribute_key_reads_as_its_last_value() {
    use threadline_model::{AttrValue, Attribute, SpanDetail, SpanOrigin};
    let detail = SpanDetail {
        attributes: vec![
            Attribute::new("gen_ai.request.model", AttrValue::String("first".into())),
            Attribute::new("api.route", AttrValue::String("/v1/chat".into())),
            Attribute::new("gen_ai.request.model", AttrValue::String("last".into())),
        ],
        ..Default::default()
    };
    let view = threadline_model::llm_view("chat", &detail, &SpanOrigin::default()).unwrap();
    assert_eq!(view.request_model.as_deref(), Some("last"));
    assert_eq!(view.route.as_deref(), Some("/v1/chat"));
}

fn span_json(name: &str, attributes: &str, resource: &str) -> String {
    format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{resource}]}},"scopeSpans":[{{"spans":[{{
        "traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"{name}",
        "kind":2,"startTimeUnixNano":"1000","endTimeUnixNano":"2000","attributes":[{attributes}]}}]}}]}}]}}"#
    )
}

fn str_attr(key: &str, value: &str) -> String {
    format!(r#"{{"key":"{key}","value":{{"stringValue":"{value}"}}}}"#)
}

/// A plain HTTP server span with OpenTelemetry's standard route, user and session
/// attributes — no GenAI or platform attribute at all — has its request context.
#[test]
fn a_plain_http_span_has_its_route_user_and_session() {
    let attrs = [
        str_attr("http.request.method", "POST"),
        str_attr("http.route", "/v1/users/{id}/chat"),
        str_attr("enduser.id", "alice@example.com"),
        str_attr("session.id", "s-77"),
    ]
    .join(",");
    let v = view_of(&span_json("POST /v1/users/{id}/chat", &attrs, ""));
    assert_eq!(v.route.as_deref(), Some("/v1/users/{id}/chat"));
    assert_eq!(v.user_id.as_deref(), Some("alice@example.com"));
    assert_eq!(v.session_id.as_deref(), Some("s-77"));
    assert_eq!((v.request_model, v.operation), (None, None));
}

/// The user or session may arrive in W3C baggage recorded on the span, or on the
/// resource (one process per user: a desktop app); A/B group and gray tag too.
#[test]
fn user_session_and_experiment_context_from_baggage_and_resource() {
    let baggage = str_attr("baggage", "user.id=u%2042,ab.group=B,gray.tag=canary");
    let v = view_of(&span_json("GET /", &baggage, ""));
    assert_eq!(v.user_id.as_deref(), Some("u 42"));
    assert_eq!(v.ab_group.as_deref(), Some("B"));
    assert_eq!(v.gray_tag.as_deref(), Some("canary"));
    let copied = str_attr("baggage.session.id", "s-9");
    assert_eq!(
        view_of(&span_json("GET /", &copied, ""))
            .session_id
            .as_deref(),
        Some("s-9")
    );
    let resource = str_attr("enduser.id", "desk-user");
    let v = view_of(&span_json("render", "", &resource));
    assert_eq!(v.user_id.as_deref(), Some("desk-user"));
    // The span's own beats the resource's.
    let v = view_of(&span_json(
        "render",
        &str_attr("user.id", "span-user"),
        &resource,
    ));
    assert_eq!(v.user_id.as_deref(), Some("span-user"));
}

/// An embedding call reports `cache_read.input_tokens = 0` under OpenLLMetry: no
/// cache applies to it, so it has neither ratio (it would read as a 0% hit rate).
#[test]
fn an_embedding_call_has_no_cache_ratio() {
    let attrs = [
        str_attr("gen_ai.operation.name", "embeddings"),
        str_attr("gen_ai.request.model", "text-embedding-3-small"),
        r#"{"key":"gen_ai.usage.input_tokens","value":{"intValue":"40"}}"#.to_owned(),
        r#"{"key":"gen_ai.usage.cache_read.input_tokens","value":{"intValue":"0"}}"#.to_owned(),
    ]
    .join(",");
    let v = view_of(&span_json("embeddings", &attrs, ""));
    assert_eq!(
        (v.kv_cache_hit_ratio, v.prompt_cache_hit_ratio),
        (None, None)
    );
    // A chat call's reported zero is a real miss of the provider's cache.
    let chat = attrs.replace("embeddings", "chat");
    let v = view_of(&span_json("chat", &chat, ""));
    assert_eq!(
        (v.kv_cache_hit_ratio, v.prompt_cache_hit_ratio),
        (None, Some(0.0))
    );
}
