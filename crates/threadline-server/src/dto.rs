//! JSON shapes of the query API. Field names here are a public contract (UI, CLI and
//! users' scripts read them); `_unix_nano` values are strings as in OTLP/JSON because
//! they exceed what JSON numbers carry exactly in JavaScript.

use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;
use serde_json::{json, Map, Value};
use threadline_analysis::{DetectorConfig, Incident, PriceTable};
use threadline_diagnosis::RankedCause;
use threadline_model::{severity_name, AttrValue, Attribute, LlmView, LogRecord, SpanRecord};
use threadline_store::TraceSummary;

pub(crate) fn attr_value(value: &AttrValue) -> Value {
    match value {
        AttrValue::Empty => Value::Null,
        AttrValue::String(s) => Value::String(s.clone()),
        AttrValue::Bool(b) => Value::Bool(*b),
        AttrValue::Int(i) => Value::from(*i),
        AttrValue::Double(d) => serde_json::Number::from_f64(*d)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(d.to_string())),
        AttrValue::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        AttrValue::Array(items) => Value::Array(items.iter().map(attr_value).collect()),
        AttrValue::KvList(kvs) => attributes(kvs),
    }
}

pub(crate) fn attributes(attrs: &[Attribute]) -> Value {
    let map: Map<String, Value> = attrs
        .iter()
        .map(|a| (a.key.clone(), attr_value(&a.value)))
        .collect();
    Value::Object(map)
}

/// USD of one LLM span's tokens (`None` when it reports none).
pub(crate) fn span_cost(view: &LlmView, prices: &PriceTable) -> Option<f64> {
    if view.input_tokens.is_none() && view.output_tokens.is_none() {
        return None;
    }
    Some(prices.cost_usd(
        view.model().unwrap_or_default(),
        view.input_tokens.unwrap_or(0),
        view.output_tokens.unwrap_or(0),
    ))
}

pub(crate) fn llm(view: &LlmView, prices: &PriceTable) -> Value {
    json!({
        "cost_usd": span_cost(view, prices),
        "operation": view.operation,
        "provider": view.provider,
        "request_model": view.request_model,
        "response_model": view.response_model,
        "input_tokens": view.input_tokens,
        "output_tokens": view.output_tokens,
        "total_tokens": view.total_tokens,
        "ttft_ms": view.ttft_ms,
        "finish_reasons": view.finish_reasons,
        "rejection_reason": view.rejection_reason.as_ref().map(|r| r.as_str()),
        "prompt_template_id": view.prompt_template_id,
        "prompt_template_version": view.prompt_template_version,
        "prompt_hash": view.prompt_hash,
        "adapter_id": view.adapter_id,
        "base_model": view.base_model,
        "instance_id": view.instance_id,
        "image": view.image,
        "route": view.route,
        "ab_group": view.ab_group,
        "gray_tag": view.gray_tag,
        "session_id": view.session_id,
        "user_id": view.user_id,
        "kv_cache_hit_ratio": view.kv_cache_hit_ratio,
        "prompt_cache_hit_ratio": view.prompt_cache_hit_ratio,
        "tool_name": view.tool_name,
        "tool_call_id": view.tool_call_id,
    })
}

fn nanos_to_ms(n: u64) -> f64 {
    n as f64 / 1e6
}

/// One span without its children.
pub(crate) fn span(s: &SpanRecord, self_time_nanos: u64, prices: &PriceTable) -> Value {
    let d = &s.detail;
    let mut v = json!({
        "trace_id": s.trace_id.to_hex(),
        "span_id": s.span_id.to_hex(),
        "parent_span_id": s.parent_span_id.map(|p| p.to_hex()),
        "name": s.name,
        "service": s.service,
        "kind": s.kind.as_str(),
        "start_time_unix_nano": s.start_time_unix_nano.to_string(),
        "end_time_unix_nano": s.end_time_unix_nano.to_string(),
        "duration_ms": nanos_to_ms(s.duration_nanos()),
        "self_time_ms": nanos_to_ms(self_time_nanos),
        "status": { "code": d.status.code.as_str(), "message": d.status.message },
        "trace_state": d.trace_state,
        "flags": d.flags,
        "attributes": attributes(&d.attributes),
        "dropped_attributes_count": d.dropped_attributes_count,
        "events": d.events.iter().map(|e| json!({
            "time_unix_nano": e.time_unix_nano.to_string(),
            "name": e.name,
            "attributes": attributes(&e.attributes),
            "dropped_attributes_count": e.dropped_attributes_count,
        })).collect::<Vec<_>>(),
        "dropped_events_count": d.dropped_events_count,
        "links": d.links.iter().map(|l| json!({
            "trace_id": l.trace_id.to_hex(),
            "span_id": l.span_id.to_hex(),
            "trace_state": l.trace_state,
            "attributes": attributes(&l.attributes),
            "dropped_attributes_count": l.dropped_attributes_count,
            "flags": l.flags,
        })).collect::<Vec<_>>(),
        "dropped_links_count": d.dropped_links_count,
        "resource": {
            "attributes": attributes(&s.origin.resource_attributes),
            "dropped_attributes_count": s.origin.resource_dropped_attributes_count,
            "schema_url": s.origin.resource_schema_url,
        },
        "scope": {
            "name": s.origin.scope.name,
            "version": s.origin.scope.version,
            "attributes": attributes(&s.origin.scope.attributes),
            "dropped_attributes_count": s.origin.scope.dropped_attributes_count,
            "schema_url": s.origin.scope_schema_url,
        },
    });
    if let (Some(view), Value::Object(obj)) = (&s.llm, &mut v) {
        obj.insert("llm".to_owned(), llm(view, prices));
    }
    v
}

/// USD of a trace summary's tokens.
pub(crate) fn summary_cost(t: &TraceSummary, prices: &PriceTable) -> f64 {
    PriceTable::total_usd(
        t.usage
            .iter()
            .map(|u| prices.cost_usd(&u.model, u.input_tokens, u.output_tokens)),
    )
}

pub(crate) fn trace_summary(t: &TraceSummary, prices: &PriceTable) -> Value {
    json!({
        "trace_id": t.trace_id.to_hex(),
        "root_service": t.root_service,
        "root_name": t.root_name,
        "start_time_unix_nano": t.start_time_unix_nano.to_string(),
        "duration_ms": nanos_to_ms(t.duration_nanos),
        "span_count": t.span_count,
        "error": t.error,
        "models": t.models,
        "total_tokens": t.total_tokens,
        "cost_usd": summary_cost(t, prices),
        "session_id": t.session_id,
        "user_id": t.user_id,
    })
}

/// A lineage node: `id` is the public `kind:key` form.
pub(crate) fn lineage_node(node: &threadline_model::LineageNode) -> Value {
    json!({
        "id": node.id.to_string(),
        "kind": node.id.kind.as_str(),
        "key": node.id.key,
        "first_seen_unix_nano": node.first_seen_ns.to_string(),
        "last_seen_unix_nano": node.last_seen_ns.to_string(),
        "props": node.props,
    })
}

/// A lineage edge; `src` feeds `dst`. Its validity: observed edges hold while seen
/// (`first_seen` .. `last_seen`); `declared` ones (registry) from `valid_from` (null:
/// from the start) until `superseded` (null: still hold).
pub(crate) fn lineage_edge(edge: &threadline_model::LineageEdge) -> Value {
    json!({
        "src": edge.src.to_string(),
        "dst": edge.dst.to_string(),
        "kind": edge.kind.as_str(),
        "first_seen_unix_nano": edge.first_seen_ns.to_string(),
        "last_seen_unix_nano": edge.last_seen_ns.to_string(),
        "valid_from_unix_nano": edge.valid_from_ns.map(|t| t.to_string()),
        "superseded_unix_nano": edge.superseded_ns.map(|t| t.to_string()),
        "declared": edge.declared,
        "evidence": edge.evidence,
    })
}

/// One record as the API shows it.
pub(crate) fn log_json(record: &LogRecord) -> Value {
    let d = &record.detail;
    json!({
        "time_unix_nano": record.time_unix_nano.to_string(),
        "observed_time_unix_nano": d.observed_time_unix_nano.to_string(),
        "trace_id": record.trace_id.map(|t| t.to_hex()),
        "span_id": record.span_id.map(|s| s.to_hex()),
        "service": record.service,
        "severity_number": d.severity_number,
        "severity": if d.severity_text.is_empty() { severity_name(d.severity_number) } else { d.severity_text.as_str() },
        "event_name": d.event_name,
        "body": crate::dto::attr_value(&d.body),
        "attributes": crate::dto::attributes(&d.attributes),
        "resource": crate::dto::attributes(&record.origin.resource_attributes),
        "scope": { "name": record.origin.scope.name, "version": record.origin.scope.version },
    })
}

/// RFC 3339 (seconds) of a unix minute.
pub(crate) fn minute_rfc3339(minute: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_secs((minute.max(0) * 60) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The public JSON of an incident.
pub(crate) fn incident_json(i: &Incident, cfg: &DetectorConfig) -> Value {
    let anomalies: Vec<Value> = i
        .anomalies
        .iter()
        .map(|a| {
            json!({
                "metric": a.metric,
                "onset": minute_rfc3339(a.onset_minute),
                "detected_at": minute_rfc3339(a.detected_minute + 1),
                "baseline": a.baseline,
                "observed": a.observed,
                "score": a.score,
            })
        })
        .collect();
    json!({
        "id": i.id,
        "service": i.service,
        "route": i.route,
        "model": i.model,
        "metric": i.metric,
        "onset": minute_rfc3339(i.onset_minute),
        "onset_unix": i.onset_minute * 60,
        "detected_at": minute_rfc3339(i.detected_minute + 1),
        "end": i.end_minute.map(|m| minute_rfc3339(m + 1)),
        "status": if i.is_open() { "open" } else { "resolved" },
        "severity": i.severity(cfg),
        "score": i.score,
        "anomalies": anomalies,
    })
}

/// One cause as the API, the CLI and alerts show it.
pub(crate) fn cause_json(cause: &RankedCause) -> Value {
    let c = &cause.candidate;
    let mut evidence = c.evidence.clone();
    if let Some(found) = &cause.exemplars {
        evidence["exemplar_trace_ids"] =
            json!(found.iter().map(|t| t.to_string()).collect::<Vec<_>>());
    }
    if let Some(m) = evidence.get("changed_at_minute").and_then(Value::as_i64) {
        evidence["changed_at"] = json!(minute_rfc3339(m));
    }
    json!({
        "rank": cause.rank,
        "kind": c.kind,
        "subject": c.subject,
        "confidence": (c.confidence * 1000.0).round() / 1000.0,
        "explanation": c.explanation,
        "scores": {
            "contrast": c.contrast,
            "before_after": c.before_after,
            "time_share": c.time_share,
            "proximity": c.proximity,
            "rule": c.rule,
        },
        "evidence": evidence,
    })
}
