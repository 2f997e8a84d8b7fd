//! Conventions → the LLM view. One table of precedence per field; the first source that
//! is present wins. Order, documented in ARCHITECTURE.md ("LLM view precedence"):
//! Threadline platform attributes, then OpenTelemetry GenAI (current names, then
//! deprecated ones), then OpenInference, then vLLM's own names. Span attributes beat
//! W3C baggage entries copied onto the span, which beat resource attributes.

// Seeded per process: attribute keys come from senders, so a fixed hash (as Fx) could
// be flooded with colliding keys.
use foldhash::HashMap;

use crate::{AttrValue, LlmView, RejectionReason, SpanDetail, SpanOrigin};
use serde_json::Value as Json;

use keys::{k, Key, Slots};

/// Where the normalizer looks up attribute names, most specific first.
struct Sources<'a> {
    span: Slots<'a>,
    baggage: HashMap<String, String>,
    resource: &'a SpanOrigin,
    detail: &'a SpanDetail,
}

impl<'a> Sources<'a> {
    fn new(detail: &'a SpanDetail, origin: &'a SpanOrigin) -> Self {
        let span = Slots::of(&detail.attributes);
        let mut baggage = HashMap::default();
        // BaggageSpanProcessor-style copies may arrive as `baggage.KEY` attributes, or the
        // raw header may be recorded in a `baggage` attribute.
        for attr in &detail.attributes {
            if let Some(key) = attr.key.strip_prefix("baggage.") {
                if let Some(v) = attr.value.as_str() {
                    baggage.insert(key.to_owned(), v.to_owned());
                }
            }
        }
        for header_key in [k!("baggage"), k!("w3c.baggage")] {
            if let Some(header) = span.get(header_key).and_then(|v| v.as_str()) {
                for (k, v) in parse_baggage_header(header) {
                    baggage.entry(k).or_insert(v);
                }
            }
        }
        Self {
            span,
            baggage,
            resource: origin,
            detail,
        }
    }

    fn span_attr(&self, key: Key) -> Option<&'a AttrValue> {
        self.span
            .get(key)
            .filter(|v| !matches!(v, AttrValue::Empty))
    }

    /// First non-empty string among `keys`, looking at span attributes only.
    fn span_str(&self, keys: &[Key]) -> Option<String> {
        keys.iter().find_map(|k| {
            self.span_attr(*k)
                .map(|v| match v {
                    AttrValue::String(s) => s.trim().to_owned(),
                    other => other.to_display_string(),
                })
                .filter(|s| !s.is_empty())
        })
    }

    /// A platform attribute: span, then baggage copied onto the span, then resource.
    fn platform_str(&self, key: Key) -> Option<String> {
        self.platform_any(&[key])
    }

    fn span_i64(&self, keys: &[Key]) -> Option<i64> {
        keys.iter()
            .find_map(|k| self.span_attr(*k).and_then(AttrValue::as_i64))
    }

    fn span_f64(&self, keys: &[Key]) -> Option<f64> {
        keys.iter()
            .find_map(|k| self.span_attr(*k).and_then(AttrValue::as_f64))
    }

    /// A platform field in any of `keys`: the span's attributes, then baggage copied
    /// onto the span, then the resource (the first key found at the nearest level).
    fn platform_any(&self, keys: &[Key]) -> Option<String> {
        self.span_str(keys)
            .or_else(|| {
                keys.iter().find_map(|k| {
                    self.baggage
                        .get(k.name())
                        .filter(|s| !s.is_empty())
                        .cloned()
                })
            })
            .or_else(|| {
                keys.iter().find_map(|k| {
                    self.resource
                        .resource_attr(k.name())
                        .filter(|v| !matches!(v, AttrValue::Empty))
                        .map(|v| v.to_display_string())
                        .filter(|s| !s.is_empty())
                })
            })
    }

    /// Whether any attribute says this span is about an LLM call or LLM platform request.
    fn has_llm_signal(&self, span_name: &str) -> bool {
        const PLATFORM_KEYS: [Key; 8] = [
            k!("api.route"),
            k!("ab.group"),
            k!("gray.tag"),
            k!("model.instance.id"),
            k!("container.image"),
            k!("openinference.span.kind"),
            k!("embedding.model_name"),
            k!("request.tag"),
        ];
        span_name == "llm_request"
            || self
                .detail
                .attributes
                .iter()
                .any(|a| a.key.starts_with("gen_ai.") || a.key.starts_with("llm."))
            || PLATFORM_KEYS.iter().any(|k| self.span.get(*k).is_some())
            || self.baggage.contains_key("ab.group")
            || self.baggage.contains_key("gray.tag")
    }
}

/// Span, baggage and resource names of the request context every span may carry, in
/// any convention: the platform's, OpenTelemetry's HTTP, user and session attributes,
/// GenAI's. A span that carries any of them gets a view (with only these set when it
/// is no LLM call), so its route is a series and its user or session can be erased.
const ROUTE_KEYS: [Key; 2] = [k!("api.route"), k!("http.route")];
const USER_KEYS: [Key; 3] = [k!("user.id"), k!("enduser.id"), k!("gen_ai.user.id")];
const SESSION_KEYS: [Key; 2] = [k!("gen_ai.conversation.id"), k!("session.id")];

/// The request context of a span: route, user, session, A/B group, gray tag.
struct Context {
    route: Option<String>,
    user_id: Option<String>,
    session_id: Option<String>,
    ab_group: Option<String>,
    gray_tag: Option<String>,
}

impl Context {
    fn of(src: &Sources<'_>) -> Self {
        // The platform's route (span → baggage → resource) beats the HTTP route, which
        // is only ever a span attribute.
        let route = src
            .platform_str(ROUTE_KEYS[0])
            .or_else(|| src.span_str(&ROUTE_KEYS[1..]));
        Self {
            route,
            user_id: src.platform_any(&USER_KEYS),
            session_id: src.platform_any(&SESSION_KEYS),
            ab_group: src.platform_str(k!("ab.group")),
            gray_tag: src.platform_str(k!("gray.tag")),
        }
    }

    fn is_empty(&self) -> bool {
        self.route.is_none()
            && self.user_id.is_none()
            && self.session_id.is_none()
            && self.ab_group.is_none()
            && self.gray_tag.is_none()
    }
}

/// Parses a W3C `baggage` header value into decoded key/value pairs (properties dropped).
fn parse_baggage_header(header: &str) -> Vec<(String, String)> {
    header
        .split(',')
        .filter_map(|member| {
            let kv = member.split(';').next()?;
            let (k, v) = kv.split_once('=')?;
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s.trim())
                    .decode_utf8_lossy()
                    .into_owned()
            };
            Some((decode(k), decode(v)))
        })
        .collect()
}

/// Builds the LLM view of a span, or `None` for a span that carries no LLM signal.
pub fn llm_view(span_name: &str, detail: &SpanDetail, origin: &SpanOrigin) -> Option<LlmView> {
    view_of(span_name, detail, origin, PromptHash::Computed)
}

/// `llm_view` but for `prompt_hash`, left `None`: what a store that keeps the hash
/// derives again on read — hashing the prompt reads its messages (JSON) and is most
/// of the view's cost on a span with text.
pub fn llm_view_but_prompt_hash(
    span_name: &str,
    detail: &SpanDetail,
    origin: &SpanOrigin,
) -> Option<LlmView> {
    view_of(span_name, detail, origin, PromptHash::Left)
}

/// Whether a view's prompt hash is computed.
#[derive(Clone, Copy, PartialEq)]
enum PromptHash {
    Computed,
    Left,
}

fn view_of(
    span_name: &str,
    detail: &SpanDetail,
    origin: &SpanOrigin,
    hash: PromptHash,
) -> Option<LlmView> {
    let src = Sources::new(detail, origin);
    let context = Context::of(&src);
    if !src.has_llm_signal(span_name) && context.is_empty() {
        return None;
    }
    let is_vllm = span_name == "llm_request"
        && src
            .detail
            .attributes
            .iter()
            .any(|a| a.key.starts_with("gen_ai.latency."));

    let mut view = LlmView {
        operation: operation(&src),
        provider: provider(&src).or_else(|| is_vllm.then(|| "vllm".to_owned())),
        request_model: src.span_str(&[
            k!("gen_ai.request.model"),
            k!("llm.request.model_name"),
            k!("llm.model_name"),
            k!("embedding.model_name"),
        ]),
        response_model: src.span_str(&[k!("gen_ai.response.model"), k!("llm.response.model_name")]),
        input_tokens: src.span_i64(&[
            k!("gen_ai.usage.input_tokens"),
            k!("gen_ai.usage.prompt_tokens"),
            k!("llm.token_count.prompt"),
        ]),
        output_tokens: src.span_i64(&[
            k!("gen_ai.usage.output_tokens"),
            k!("gen_ai.usage.completion_tokens"),
            k!("llm.token_count.completion"),
        ]),
        total_tokens: src.span_i64(&[k!("gen_ai.usage.total_tokens"), k!("llm.token_count.total")]),
        ttft_ms: src
            .span_f64(&[
                k!("gen_ai.response.time_to_first_chunk"),
                k!("gen_ai.server.time_to_first_token"),
                k!("gen_ai.latency.time_to_first_token"),
            ])
            .map(|secs| secs * 1000.0),
        finish_reasons: finish_reasons(&src),
        rejection_reason: None,
        prompt_template_id: src.span_str(&[
            k!("llm.prompt_template.id"),
            k!("gen_ai.prompt.name"),
            k!("prompt.id"),
        ]),
        prompt_template_version: src
            .span_str(&[k!("llm.prompt.version"), k!("llm.prompt_template.version")])
            .or_else(|| src.platform_str(k!("llm.prompt.version"))),
        prompt_hash: None,
        adapter_id: src.platform_str(k!("llm.lora.adapter_id")),
        base_model: src
            .span_str(&[k!("llm.base_model"), k!("llm.lora.base_model")])
            .or_else(|| src.platform_str(k!("llm.base_model"))),
        instance_id: src.platform_str(k!("model.instance.id")),
        image: src
            .platform_str(k!("container.image"))
            .or_else(|| resource_image(origin)),
        route: context.route,
        ab_group: context.ab_group,
        gray_tag: context.gray_tag,
        session_id: context.session_id,
        user_id: context.user_id,
        kv_cache_hit_ratio: None,
        tool_name: src.span_str(&[k!("gen_ai.tool.name"), k!("tool.name")]),
        tool_call_id: src.span_str(&[k!("gen_ai.tool.call.id"), k!("tool.id"), k!("tool_call.id")]),
        prompt_cache_hit_ratio: None,
    };
    if view.total_tokens.is_none() {
        // An embedding call reports input tokens only: they are its total.
        view.total_tokens = match (view.input_tokens, view.output_tokens) {
            (Some(i), Some(o)) => Some(i.saturating_add(o)),
            (one, None) | (None, one) => one,
        };
    }
    view.kv_cache_hit_ratio = kv_cache_hit_ratio(&src, view.input_tokens);
    view.prompt_cache_hit_ratio =
        prompt_cache_hit_ratio(&src, view.operation.as_deref(), view.input_tokens);
    view.rejection_reason = rejection_reason(&src, &view.finish_reasons);
    if hash == PromptHash::Computed {
        view.prompt_hash = prompt::prompt_hash(&src, view.prompt_template_version.as_deref());
    }
    Some(view)
}

fn operation(src: &Sources<'_>) -> Option<String> {
    if let Some(op) = src.span_str(&[k!("gen_ai.operation.name")]) {
        return Some(op);
    }
    let kind = src.span_str(&[k!("openinference.span.kind")])?;
    let op = match kind.to_ascii_uppercase().as_str() {
        "LLM" => "chat",
        "EMBEDDING" => "embeddings",
        "RETRIEVER" => "retrieval",
        "TOOL" => "execute_tool",
        "AGENT" => "invoke_agent",
        "RERANKER" => "rerank",
        "CHAIN" => "chain",
        "GUARDRAIL" => "guardrail",
        "EVALUATOR" => "evaluate",
        "PROMPT" => "prompt",
        _ => return Some(kind.to_ascii_lowercase()),
    };
    Some(op.to_owned())
}

/// Provider in the current GenAI vocabulary, whichever name and vocabulary the sender used.
fn provider(src: &Sources<'_>) -> Option<String> {
    if let Some(p) = src.span_str(&[k!("gen_ai.provider.name")]) {
        return Some(p);
    }
    let raw = src.span_str(&[k!("gen_ai.system"), k!("llm.provider"), k!("llm.system")])?;
    let renamed = match raw.as_str() {
        "vertex_ai" | "vertexai" => "gcp.vertex_ai",
        "gemini" => "gcp.gemini",
        "google" => "gcp.gen_ai",
        "az.ai.inference" => "azure.ai.inference",
        "az.ai.openai" => "azure.ai.openai",
        "xai" => "x_ai",
        "mistralai" => "mistral_ai",
        "aws" | "amazon" => "aws.bedrock",
        other => other,
    };
    Some(renamed.to_owned())
}

fn resource_image(origin: &SpanOrigin) -> Option<String> {
    let name = origin.resource_attr("container.image.name")?.as_str()?;
    let tag = match origin.resource_attr("container.image.tags") {
        Some(AttrValue::Array(tags)) => tags.first().and_then(|t| t.as_str()).map(str::to_owned),
        Some(AttrValue::String(t)) => Some(t.clone()),
        _ => origin
            .resource_attr("container.image.tag")
            .and_then(AttrValue::as_str)
            .map(str::to_owned),
    };
    Some(match tag {
        Some(t) if !t.is_empty() => format!("{name}:{t}"),
        _ => name.to_owned(),
    })
}

/// Array, JSON-encoded string (vLLM) or single string; then OpenInference; then the
/// finish reasons inside output messages or deprecated `gen_ai.choice` events.
fn finish_reasons(src: &Sources<'_>) -> Vec<String> {
    if let Some(v) = src.span_attr(k!("gen_ai.response.finish_reasons")) {
        let reasons = string_list(v);
        if !reasons.is_empty() {
            return reasons;
        }
    }
    if let Some(r) = src.span_str(&[k!("llm.finish_reason")]) {
        return vec![r];
    }
    if let Some(Json::Array(messages)) = src.span_attr(k!("gen_ai.output.messages")).map(to_json) {
        let reasons: Vec<String> = messages
            .iter()
            .filter_map(|m| m.get("finish_reason")?.as_str().map(str::to_owned))
            .collect();
        if !reasons.is_empty() {
            return reasons;
        }
    }
    src.detail
        .events
        .iter()
        .filter(|e| e.name == "gen_ai.choice")
        .filter_map(|e| {
            e.attributes
                .iter()
                .find(|a| a.key == "finish_reason")
                .and_then(|a| a.value.as_str())
                .map(str::to_owned)
        })
        .collect()
}

fn string_list(value: &AttrValue) -> Vec<String> {
    match value {
        AttrValue::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        AttrValue::String(s) => {
            let trimmed = s.trim();
            if trimmed.starts_with('[') {
                if let Ok(Json::Array(items)) = serde_json::from_str::<Json>(trimmed) {
                    return items
                        .iter()
                        .filter_map(|i| i.as_str().map(str::to_owned))
                        .collect();
                }
            }
            if trimmed.is_empty() {
                Vec::new()
            } else {
                vec![trimmed.to_owned()]
            }
        }
        _ => Vec::new(),
    }
}

/// The inference server's KV / prefix-cache ratio: the platform attribute (span, then
/// baggage, then resource), else vLLM's cached prompt tokens over its prompt tokens.
/// A client's report of a provider's prompt cache is not this (`prompt_cache_hit_ratio`).
fn kv_cache_hit_ratio(src: &Sources<'_>, input_tokens: Option<i64>) -> Option<f64> {
    let explicit = src
        .platform_str(k!("llm.kvcache.hit_ratio"))
        .and_then(|s| s.parse::<f64>().ok());
    if let Some(r) = explicit.filter(|r| (0.0..=1.0).contains(r)) {
        return Some(r);
    }
    let cached = src.span_i64(&[k!("gen_ai.usage.cached_tokens")])?;
    cached_share(cached, input_tokens)
}

/// A hosted provider's prompt-cache ratio as its client reports it (GenAI's
/// `gen_ai.usage.cache_read.input_tokens`, OpenInference's
/// `llm.token_count.prompt_details.cache_read`), over the prompt tokens. Embeddings
/// have no prompt cache: the zero OpenLLMetry reports on them is not a miss.
fn prompt_cache_hit_ratio(
    src: &Sources<'_>,
    operation: Option<&str>,
    input_tokens: Option<i64>,
) -> Option<f64> {
    if operation.is_some_and(|op| op == "embeddings" || op == "embedding") {
        return None;
    }
    let cached = src.span_i64(&[
        k!("gen_ai.usage.cache_read.input_tokens"),
        k!("llm.token_count.prompt_details.cache_read"),
    ])?;
    cached_share(cached, input_tokens)
}

fn cached_share(cached: i64, input_tokens: Option<i64>) -> Option<f64> {
    let input = input_tokens.filter(|i| *i > 0)?;
    Some((cached.max(0) as f64 / input as f64).clamp(0.0, 1.0))
}

/// The platform attribute, else inferred from an error type or a content-filter stop.
fn rejection_reason(src: &Sources<'_>, finish_reasons: &[String]) -> Option<RejectionReason> {
    if let Some(r) = src.platform_str(k!("llm.rejection.reason")) {
        return Some(RejectionReason::parse(&r));
    }
    if let Some(error_type) = src.span_str(&[k!("error.type")]) {
        let e = error_type.to_ascii_lowercase();
        if e.contains("rate_limit") || e.contains("ratelimit") || e == "429" {
            return Some(RejectionReason::RateLimit);
        }
        if e.contains("context_length")
            || e.contains("context_window")
            || e.contains("context_overflow")
        {
            return Some(RejectionReason::ContextOverflow);
        }
        if e.contains("content_filter") || e.contains("safety") {
            return Some(RejectionReason::SafetyFilter);
        }
    }
    finish_reasons
        .iter()
        .any(|r| r == "content_filter")
        .then_some(RejectionReason::SafetyFilter)
}

/// An attribute as JSON; strings holding JSON (senders that cannot set structured
/// attributes) are parsed.
pub fn to_json(value: &AttrValue) -> Json {
    match value {
        AttrValue::String(s) => {
            let t = s.trim_start();
            if t.starts_with('[') || t.starts_with('{') {
                serde_json::from_str(t).unwrap_or_else(|_| Json::String(s.clone()))
            } else {
                Json::String(s.clone())
            }
        }
        AttrValue::Empty => Json::Null,
        AttrValue::Bool(b) => Json::Bool(*b),
        AttrValue::Int(i) => Json::from(*i),
        AttrValue::Double(d) => Json::from(*d),
        AttrValue::Bytes(b) => Json::String(hex::encode(b)),
        AttrValue::Array(items) => Json::Array(items.iter().map(to_json).collect()),
        AttrValue::KvList(kvs) => Json::Object(
            kvs.iter()
                .map(|kv| (kv.key.clone(), to_json(&kv.value)))
                .collect(),
        ),
    }
}

/// The text content of a message part list, a string, or an object with `content`.
pub fn json_text(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        Json::Array(parts) => parts
            .iter()
            .map(json_text)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Json::Object(obj) => match obj.get("type").and_then(Json::as_str) {
            Some("text") | None => obj.get("content").map(json_text).unwrap_or_default(),
            Some(_) => String::new(),
        },
        _ => String::new(),
    }
}

mod keys;
mod prompt;
