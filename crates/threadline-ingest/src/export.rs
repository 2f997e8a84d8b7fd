//! `SpanRecord`s → OTLP messages: the reverse of `convert`, for APIs that answer in
//! OTLP (Jaeger's v3 query API returns OTLP JSON). Spans sharing an origin (resource +
//! scope) are grouped under one `ResourceSpans` / `ScopeSpans`, in first-seen order.

use std::sync::Arc;

use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};
use threadline_model::{AttrValue, Attribute, SpanOrigin, SpanRecord};

pub fn any_value(value: &AttrValue) -> AnyValue {
    use any_value::Value as V;
    let v = match value {
        AttrValue::Empty => None,
        AttrValue::String(s) => Some(V::StringValue(s.clone())),
        AttrValue::Bool(b) => Some(V::BoolValue(*b)),
        AttrValue::Int(i) => Some(V::IntValue(*i)),
        AttrValue::Double(d) => Some(V::DoubleValue(*d)),
        AttrValue::Bytes(b) => Some(V::BytesValue(b.clone())),
        AttrValue::Array(items) => Some(V::ArrayValue(ArrayValue {
            values: items.iter().map(any_value).collect(),
        })),
        AttrValue::KvList(kvs) => Some(V::KvlistValue(KeyValueList {
            values: key_values(kvs),
        })),
    };
    AnyValue { value: v }
}

pub fn key_values(attrs: &[Attribute]) -> Vec<KeyValue> {
    attrs
        .iter()
        .map(|a| KeyValue {
            key: a.key.clone(),
            value: Some(any_value(&a.value)),
            ..KeyValue::default()
        })
        .collect()
}

fn span(s: &SpanRecord) -> Span {
    let d = &s.detail;
    Span {
        trace_id: s.trace_id.0.to_vec(),
        span_id: s.span_id.0.to_vec(),
        trace_state: d.trace_state.clone(),
        parent_span_id: s.parent_span_id.map(|p| p.0.to_vec()).unwrap_or_default(),
        flags: d.flags,
        name: s.name.clone(),
        kind: s.kind.to_otlp(),
        start_time_unix_nano: s.start_time_unix_nano,
        end_time_unix_nano: s.end_time_unix_nano,
        attributes: key_values(&d.attributes),
        dropped_attributes_count: d.dropped_attributes_count,
        events: d
            .events
            .iter()
            .map(|e| span::Event {
                time_unix_nano: e.time_unix_nano,
                name: e.name.clone(),
                attributes: key_values(&e.attributes),
                dropped_attributes_count: e.dropped_attributes_count,
            })
            .collect(),
        dropped_events_count: d.dropped_events_count,
        links: d
            .links
            .iter()
            .map(|l| span::Link {
                trace_id: l.trace_id.0.to_vec(),
                span_id: l.span_id.0.to_vec(),
                trace_state: l.trace_state.clone(),
                attributes: key_values(&l.attributes),
                dropped_attributes_count: l.dropped_attributes_count,
                flags: l.flags,
            })
            .collect(),
        dropped_links_count: d.dropped_links_count,
        status: Some(Status {
            message: d.status.message.clone(),
            code: d.status.code.to_otlp(),
        }),
    }
}

/// The spans as OTLP `ResourceSpans`, grouped by resource and scope.
pub fn to_resource_spans(spans: &[SpanRecord]) -> Vec<ResourceSpans> {
    let mut out: Vec<(Arc<SpanOrigin>, ResourceSpans)> = Vec::new();
    for s in spans {
        let same_resource = |o: &SpanOrigin| {
            o.resource_attributes == s.origin.resource_attributes
                && o.resource_schema_url == s.origin.resource_schema_url
                && o.resource_dropped_attributes_count == s.origin.resource_dropped_attributes_count
        };
        let at = match out.iter().position(|(o, _)| same_resource(o)) {
            Some(at) => at,
            None => {
                out.push((
                    Arc::clone(&s.origin),
                    ResourceSpans {
                        resource: Some(Resource {
                            attributes: key_values(&s.origin.resource_attributes),
                            dropped_attributes_count: s.origin.resource_dropped_attributes_count,
                            entity_refs: Vec::new(),
                        }),
                        scope_spans: Vec::new(),
                        schema_url: s.origin.resource_schema_url.clone(),
                    },
                ));
                out.len() - 1
            }
        };
        let scopes = &mut out[at].1.scope_spans;
        let scope = &s.origin.scope;
        let wanted = InstrumentationScope {
            name: scope.name.clone(),
            version: scope.version.clone(),
            attributes: key_values(&scope.attributes),
            dropped_attributes_count: scope.dropped_attributes_count,
        };
        match scopes.iter_mut().find(|ss| {
            ss.scope.as_ref() == Some(&wanted) && ss.schema_url == s.origin.scope_schema_url
        }) {
            Some(ss) => ss.spans.push(span(s)),
            None => scopes.push(ScopeSpans {
                scope: Some(wanted),
                spans: vec![span(s)],
                schema_url: s.origin.scope_schema_url.clone(),
            }),
        }
    }
    out.into_iter().map(|(_, rs)| rs).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{convert_request, ExportTraceServiceRequest};

    /// A request converted in and exported back out is the same request.
    #[test]
    fn export_inverts_convert() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/conventions");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let Ok(request) = crate::parse_otlp_json(text.as_bytes()) else {
                continue;
            };
            let batch = convert_request(request, &crate::TimeBounds::storable());
            if batch.rejected_spans > 0 || batch.spans.is_empty() {
                continue;
            }
            let again = convert_request(
                ExportTraceServiceRequest {
                    resource_spans: to_resource_spans(&batch.spans),
                },
                &crate::TimeBounds::storable(),
            );
            assert_eq!(again.spans, batch.spans, "{}", path.display());
            checked += 1;
        }
        assert!(checked > 3, "only {checked} fixtures checked");
    }
}
