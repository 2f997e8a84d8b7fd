//! Threadline's spans in the shapes of Jaeger's query API, so Grafana's Jaeger data
//! source and Jaeger tooling read them unchanged:
//!
//! - v1 (`/api/traces`, the JSON Grafana reads): Jaeger's UI model — ids in hex
//!   (a 128-bit trace id whose high half is zero in 16 digits, as Jaeger prints it),
//!   `startTime` / `duration` in microseconds, typed `tags` (an int64 past 2^53 as a
//!   string, binary as base64), events as `logs`, parent and links as `references`,
//!   resources as `processes`; OpenTelemetry's fields as Jaeger's OTLP translator names
//!   them (`span.kind`, `otel.status_code`, `error`, `otel.status_description`,
//!   `otel.scope.name`, …); the LLM view as `llm.*` tags.
//! - v3 (current Jaeger UI and tooling): OTLP JSON with default values left out, as
//!   Jaeger's gateway writes it, and trace summaries.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{json, Map, Value};
use threadline_analysis::PriceTable;
use threadline_model::{AttrValue, Attribute, SpanKind, SpanRecord, StatusCode, TraceId};
use threadline_store::SkeletonSpan;

use crate::dto;

/// Jaeger's text form of a trace id: 16 hex digits when the high half is zero.
pub(crate) fn trace_id(id: &TraceId) -> String {
    let hex = id.to_hex();
    match hex.strip_prefix("0000000000000000") {
        Some(low) => low.to_owned(),
        None => hex,
    }
}

/// Largest integer a JavaScript number holds exactly.
const MAX_SAFE_INT: i64 = (1 << 53) - 1;

fn tag(key: &str, value: &AttrValue) -> Value {
    let (kind, v) = match value {
        AttrValue::String(s) => ("string", Value::from(s.clone())),
        AttrValue::Bool(b) => ("bool", Value::from(*b)),
        AttrValue::Int(i) if (-MAX_SAFE_INT..=MAX_SAFE_INT).contains(i) => {
            ("int64", Value::from(*i))
        }
        AttrValue::Int(i) => ("int64", Value::from(i.to_string())),
        AttrValue::Double(d) => (
            "float64",
            serde_json::Number::from_f64(*d)
                .map_or_else(|| Value::from(d.to_string()), Value::Number),
        ),
        AttrValue::Bytes(b) => (
            "binary",
            Value::from(base64::engine::general_purpose::STANDARD.encode(b)),
        ),
        // Arrays and maps: Jaeger's translator writes them as JSON text.
        AttrValue::Array(_) | AttrValue::KvList(_) => {
            ("string", Value::from(dto::attr_value(value).to_string()))
        }
        AttrValue::Empty => ("string", Value::from("")),
    };
    json!({"key": key, "type": kind, "value": v})
}

fn tags(attrs: &[Attribute]) -> Vec<Value> {
    attrs.iter().map(|a| tag(&a.key, &a.value)).collect()
}

fn str_tag(key: &str, value: &str) -> Value {
    tag(key, &AttrValue::String(value.to_owned()))
}

fn micros(nanos: u64) -> u64 {
    nanos / 1000
}

/// The span's tags: its attributes, then the OpenTelemetry fields Jaeger keeps as
/// tags, then the normalized LLM view as `llm.*` (what is not already an attribute).
fn span_tags(s: &SpanRecord, prices: &PriceTable) -> Vec<Value> {
    let d = &s.detail;
    let mut out = tags(&d.attributes);
    if s.kind != SpanKind::Unspecified {
        out.push(str_tag("span.kind", s.kind.as_str()));
    }
    match d.status.code {
        StatusCode::Error => {
            out.push(str_tag("otel.status_code", "ERROR"));
            out.push(tag("error", &AttrValue::Bool(true)));
        }
        StatusCode::Ok => out.push(str_tag("otel.status_code", "OK")),
        StatusCode::Unset => {}
    }
    if !d.status.message.is_empty() {
        out.push(str_tag("otel.status_description", &d.status.message));
    }
    if !s.origin.scope.name.is_empty() {
        out.push(str_tag("otel.scope.name", &s.origin.scope.name));
    }
    if !s.origin.scope.version.is_empty() {
        out.push(str_tag("otel.scope.version", &s.origin.scope.version));
    }
    if !d.trace_state.is_empty() {
        out.push(str_tag("w3c.tracestate", &d.trace_state));
    }
    if let Some(view) = &s.llm {
        if let Value::Object(fields) = dto::llm(view, prices) {
            for (k, v) in fields {
                let key = format!("llm.{k}");
                if d.attr(&key).is_some() {
                    continue;
                }
                let value = match v {
                    Value::Null => continue,
                    Value::Array(items) if items.is_empty() => continue,
                    Value::String(s) => AttrValue::String(s),
                    Value::Bool(b) => AttrValue::Bool(b),
                    Value::Number(n) => match n.as_i64() {
                        Some(i) => AttrValue::Int(i),
                        None => AttrValue::Double(n.as_f64().unwrap_or(0.0)),
                    },
                    other => AttrValue::String(other.to_string()),
                };
                out.push(tag(&key, &value));
            }
        }
    }
    out
}

/// Process keys (`p1`, `p2` …) per distinct resource.
#[derive(Default)]
pub(crate) struct Processes {
    ids: Vec<(String, Vec<Attribute>)>,
}

impl Processes {
    fn id(&mut self, s: &SpanRecord) -> String {
        let tags: Vec<Attribute> = s
            .origin
            .resource_attributes
            .iter()
            .filter(|a| a.key != "service.name")
            .cloned()
            .collect();
        let at = match self
            .ids
            .iter()
            .position(|(svc, t)| *svc == s.service && *t == tags)
        {
            Some(at) => at,
            None => {
                self.ids.push((s.service.clone(), tags));
                self.ids.len() - 1
            }
        };
        format!("p{}", at + 1)
    }

    pub(crate) fn to_json(&self) -> Value {
        let map: Map<String, Value> = self
            .ids
            .iter()
            .enumerate()
            .map(|(i, (svc, t))| {
                (
                    format!("p{}", i + 1),
                    json!({"serviceName": svc, "tags": tags(t)}),
                )
            })
            .collect();
        Value::Object(map)
    }
}

/// One span in Jaeger's v1 UI model; its process is added to `processes`.
pub(crate) fn v1_span(s: &SpanRecord, processes: &mut Processes, prices: &PriceTable) -> Value {
    let mut references = Vec::new();
    if let Some(parent) = s.parent_span_id {
        references.push(json!({"refType": "CHILD_OF", "traceID": trace_id(&s.trace_id), "spanID": parent.to_hex()}));
    }
    // A link is FOLLOWS_FROM unless it says otherwise the way Jaeger's OTLP translator
    // writes it (`opentracing.ref_type = child_of`).
    for link in &s.detail.links {
        let child_of = link
            .attributes
            .iter()
            .any(|a| a.key == "opentracing.ref_type" && a.value.as_str() == Some("child_of"));
        let ref_type = if child_of { "CHILD_OF" } else { "FOLLOWS_FROM" };
        references.push(json!({"refType": ref_type, "traceID": trace_id(&link.trace_id), "spanID": link.span_id.to_hex()}));
    }
    let logs: Vec<Value> = s
        .detail
        .events
        .iter()
        .map(|e| {
            let mut fields = Vec::new();
            if !e.name.is_empty() {
                fields.push(str_tag("event", &e.name));
            }
            fields.extend(tags(&e.attributes));
            json!({"timestamp": micros(e.time_unix_nano), "fields": fields})
        })
        .collect();
    json!({
        "traceID": trace_id(&s.trace_id),
        "spanID": s.span_id.to_hex(),
        "operationName": s.name,
        "references": references,
        "startTime": micros(s.start_time_unix_nano),
        "duration": micros(s.duration_nanos()),
        "tags": span_tags(s, prices),
        "logs": logs,
        "processID": processes.id(s),
        "warnings": null,
    })
}

/// Jaeger's v1 envelope.
pub(crate) fn v1_envelope(data: Value, total: usize) -> Value {
    json!({"data": data, "total": total, "limit": 0, "offset": 0, "errors": null})
}

/// OTLP JSON of spans with default values left out (empty strings, zeros, empty
/// lists), except inside attribute values, where `false` and `0` are data.
pub(crate) fn otlp_json(spans: &[SpanRecord]) -> Value {
    let resource_spans = threadline_ingest::to_resource_spans(spans);
    let mut v = serde_json::to_value(&resource_spans).unwrap_or(Value::Null);
    prune_defaults(&mut v);
    v
}

fn prune_defaults(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, child| {
                k == "value"
                    || !matches!(child, Value::Null)
                        && child != &Value::from("")
                        && child != &Value::from(0)
                        && child != &Value::from(false)
                        && child != &Value::from("0")
                        && !matches!(child, Value::Array(a) if a.is_empty())
            });
            for (k, child) in map.iter_mut() {
                if k != "value" {
                    prune_defaults(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(prune_defaults),
        _ => {}
    }
}

/// A v3 trace summary of one trace, from its skeleton.
pub(crate) fn v3_summary(trace_id: threadline_model::TraceId, spans: &[SkeletonSpan]) -> Value {
    let (start, end) = threadline_model::trace_tree::time_bounds(
        spans
            .iter()
            .map(|s| (s.start_time_unix_nano, s.end_time_unix_nano)),
    );
    let ids: std::collections::HashSet<_> = spans.iter().map(|s| s.span_id).collect();
    let root = spans
        .iter()
        .filter(|s| s.parent_span_id.is_none_or(|p| !ids.contains(&p)))
        .min_by_key(|s| s.start_time_unix_nano);
    let mut services: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for s in spans {
        let e = services.entry(&s.service).or_default();
        e.0 += 1;
        e.1 += usize::from(s.error);
    }
    json!({
        "traceId": trace_id.to_hex(),
        "rootServiceName": root.map(|r| r.service.as_str()),
        "rootOperationName": root.map(|r| r.name.as_str()),
        "minStartTimeUnixNano": start.to_string(),
        "maxEndTimeUnixNano": end.to_string(),
        "spanCount": spans.len(),
        "errorSpanCount": spans.iter().filter(|s| s.error).count(),
        "services": services.iter().map(|(name, (n, e))| json!({"name": name, "spanCount": n, "errorSpanCount": e})).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_ids_print_as_jaeger_does() {
        let mut low = [0u8; 16];
        low[15] = 1;
        assert_eq!(trace_id(&TraceId(low)), "0000000000000001");
        let mut high = low;
        high[0] = 0xab;
        assert_eq!(trace_id(&TraceId(high)), "ab000000000000000000000000000001");
    }

    #[test]
    fn tags_are_typed_and_big_ints_are_strings() {
        assert_eq!(
            tag("n", &AttrValue::Int(23456)),
            json!({"key": "n", "type": "int64", "value": 23456})
        );
        assert_eq!(
            tag("n", &AttrValue::Int(9_223_372_036_854_775_222)),
            json!({"key": "n", "type": "int64", "value": "9223372036854775222"})
        );
        assert_eq!(
            tag("b", &AttrValue::Bytes(vec![0, 0, 0x30, 0x39])),
            json!({"key": "b", "type": "binary", "value": "AAAwOQ=="})
        );
        assert_eq!(
            tag("t", &AttrValue::Double(72.5)),
            json!({"key": "t", "type": "float64", "value": 72.5})
        );
        assert_eq!(
            tag("e", &AttrValue::Bool(true)),
            json!({"key": "e", "type": "bool", "value": true})
        );
    }

    #[test]
    fn pruning_keeps_attribute_values() {
        let mut v = json!({"traceState": "", "kind": 2, "droppedAttributesCount": 0, "links": [],
            "resource": {}, "attributes": [{"key": "f", "value": {"boolValue": false}}]});
        prune_defaults(&mut v);
        assert_eq!(
            v,
            json!({"kind": 2, "resource": {}, "attributes": [{"key": "f", "value": {"boolValue": false}}]})
        );
    }
}
