//! OTLP messages → `SpanRecord`s. Invalid spans are rejected one by one (counted and
//! described for `partial_success`), never failing the whole request.

use std::sync::Arc;

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use threadline_model::{
    AttrValue, Attribute, SpanDetail, SpanEvent, SpanId, SpanKind, SpanLink, SpanOrigin,
    SpanRecord, SpanStatus, StatusCode, TraceId,
};

use crate::{llm_view, ExportTraceServiceRequest, TimeBounds};

/// How many rejection reasons are spelled out in the partial-success message.
pub(crate) const MAX_REPORTED_ERRORS: usize = 5;

/// The spans accepted from one request and what was refused.
#[derive(Debug, Default, PartialEq)]
pub struct ConvertedBatch {
    pub spans: Vec<SpanRecord>,
    pub rejected_spans: u64,
    /// The first few rejection reasons, naming the offending span.
    pub errors: Vec<String>,
}

impl ConvertedBatch {
    /// Counts the spans refused before conversion (they did not decode), their
    /// reasons first.
    pub fn add_undecodable(&mut self, refused: crate::Undecodable) {
        refused.count_into(&mut self.rejected_spans, &mut self.errors);
    }

    /// Keeps a converted span, or counts a refused one and its reason.
    pub(crate) fn push(&mut self, span: Result<SpanRecord, String>) {
        match span {
            Ok(record) => self.spans.push(record),
            Err(reason) => {
                self.rejected_spans += 1;
                if self.errors.len() < MAX_REPORTED_ERRORS {
                    self.errors.push(reason);
                }
            }
        }
    }

    /// The `partial_success.error_message` for this batch, empty when nothing was refused.
    pub fn error_message(&self) -> String {
        rejection_message(self.rejected_spans, "span(s)", &self.errors)
    }
}

/// A `partial_success.error_message`: how many `what` were refused and the first
/// reasons (empty when none was).
pub(crate) fn rejection_message(rejected: u64, what: &str, errors: &[String]) -> String {
    if rejected == 0 {
        return String::new();
    }
    let mut msg = format!("rejected {rejected} {what}: {}", errors.join("; "));
    if rejected as usize > errors.len() {
        msg.push_str("; …");
    }
    msg
}

/// Converts and validates every span of an export request; spans whose times fall
/// outside `bounds` are refused.
pub fn convert_request(request: ExportTraceServiceRequest, bounds: &TimeBounds) -> ConvertedBatch {
    let mut batch = ConvertedBatch::default();
    for resource_spans in request.resource_spans {
        let resource = ResourceParts::new(resource_spans.resource, resource_spans.schema_url);
        for scope_spans in resource_spans.scope_spans {
            let origin = resource.origin(scope_spans.scope, scope_spans.schema_url);
            let service = origin.service_name();
            for span in scope_spans.spans {
                batch.push(convert_span(span, &origin, &service, bounds));
            }
        }
    }
    batch
}

/// A resource, converted once for the origins of its scopes.
pub(crate) struct ResourceParts {
    attributes: Vec<Attribute>,
    dropped: u32,
    schema_url: String,
}

impl ResourceParts {
    pub(crate) fn new(resource: Option<Resource>, schema_url: String) -> Self {
        match resource {
            Some(r) => Self::of(
                convert_attributes(r.attributes),
                r.dropped_attributes_count,
                schema_url,
            ),
            None => Self::of(Vec::new(), 0, schema_url),
        }
    }

    /// A resource's converted parts.
    pub(crate) fn of(attributes: Vec<Attribute>, dropped: u32, schema_url: String) -> Self {
        Self {
            attributes,
            dropped,
            schema_url,
        }
    }

    /// The origin of one scope's records.
    pub(crate) fn origin(
        &self,
        scope: Option<InstrumentationScope>,
        scope_schema_url: String,
    ) -> Arc<SpanOrigin> {
        self.origin_of(convert_scope(scope), scope_schema_url)
    }

    /// The same, for a scope already converted.
    pub(crate) fn origin_of(
        &self,
        scope: threadline_model::InstrumentationScope,
        scope_schema_url: String,
    ) -> Arc<SpanOrigin> {
        Arc::new(SpanOrigin {
            resource_attributes: self.attributes.clone(),
            resource_dropped_attributes_count: self.dropped,
            resource_schema_url: self.schema_url.clone(),
            scope,
            scope_schema_url,
        })
    }
}

fn convert_scope(scope: Option<InstrumentationScope>) -> threadline_model::InstrumentationScope {
    match scope {
        Some(s) => threadline_model::InstrumentationScope {
            name: s.name,
            version: s.version,
            attributes: convert_attributes(s.attributes),
            dropped_attributes_count: s.dropped_attributes_count,
        },
        None => Default::default(),
    }
}

fn convert_span(
    span: Span,
    origin: &Arc<SpanOrigin>,
    service: &str,
    bounds: &TimeBounds,
) -> Result<SpanRecord, String> {
    let head = SpanHead {
        name: &span.name,
        trace_id: &span.trace_id,
        span_id: &span.span_id,
        parent_span_id: &span.parent_span_id,
        start: span.start_time_unix_nano,
        end: span.end_time_unix_nano,
    };
    let ids = head.check(bounds)?;
    let mut links = Vec::with_capacity(span.links.len());
    for link in span.links {
        let (trace_id, span_id) = head.link_ids(&link.trace_id, &link.span_id)?;
        links.push(SpanLink {
            trace_id,
            span_id,
            trace_state: link.trace_state,
            attributes: convert_attributes(link.attributes),
            dropped_attributes_count: link.dropped_attributes_count,
            flags: link.flags,
        });
    }
    let events = span
        .events
        .into_iter()
        .map(|e| SpanEvent {
            time_unix_nano: e.time_unix_nano,
            name: e.name,
            attributes: convert_attributes(e.attributes),
            dropped_attributes_count: e.dropped_attributes_count,
        })
        .collect();
    let status = match span.status {
        Some(s) => SpanStatus {
            code: StatusCode::from_otlp(s.code),
            message: s.message,
        },
        None => SpanStatus {
            code: StatusCode::Unset,
            message: String::new(),
        },
    };
    let detail = SpanDetail {
        trace_state: span.trace_state,
        flags: span.flags,
        attributes: convert_attributes(span.attributes),
        dropped_attributes_count: span.dropped_attributes_count,
        events,
        dropped_events_count: span.dropped_events_count,
        links,
        dropped_links_count: span.dropped_links_count,
        status,
    };
    Ok(ids.into_record(
        span.name,
        SpanKind::from_otlp(span.kind),
        (span.start_time_unix_nano, span.end_time_unix_nano),
        detail,
        (origin, service),
    ))
}

/// What is checked of a span before it is kept: its ids and times (and its links'
/// ids, named after it). Both decoders (`convert_span`, `traces_wire`) check through it.
pub(crate) struct SpanHead<'a> {
    pub(crate) name: &'a str,
    pub(crate) trace_id: &'a [u8],
    pub(crate) span_id: &'a [u8],
    pub(crate) parent_span_id: &'a [u8],
    pub(crate) start: u64,
    pub(crate) end: u64,
}

/// A span's checked ids.
pub(crate) struct SpanIds {
    trace_id: TraceId,
    span_id: SpanId,
    parent_span_id: Option<SpanId>,
}

impl SpanHead<'_> {
    fn label(&self) -> String {
        format!(
            "span {:?} (span_id {})",
            self.name,
            hex::encode(self.span_id)
        )
    }

    /// The span's ids, or why it is refused (ids, then times).
    pub(crate) fn check(&self, bounds: &TimeBounds) -> Result<SpanIds, String> {
        let label = || self.label();
        let trace_id =
            TraceId::from_bytes(self.trace_id).map_err(|e| format!("{}: {e}", label()))?;
        let span_id = SpanId::from_bytes(self.span_id).map_err(|e| format!("{}: {e}", label()))?;
        // An all-zero parent id is what some senders put on roots: treat it as "no parent".
        let parent_span_id =
            if self.parent_span_id.is_empty() || self.parent_span_id.iter().all(|b| *b == 0) {
                None
            } else {
                Some(
                    SpanId::from_bytes(self.parent_span_id)
                        .map_err(|e| format!("{}: parent {e}", label()))?,
                )
            };
        if self.end < self.start {
            return Err(format!(
                "{}: end_time_unix_nano {} is before start_time_unix_nano {}",
                label(),
                self.end,
                self.start
            ));
        }
        bounds
            .check("start_time_unix_nano", self.start)
            .and_then(|()| bounds.check("end_time_unix_nano", self.end))
            .map_err(|e| format!("{}: {e}", label()))?;
        Ok(SpanIds {
            trace_id,
            span_id,
            parent_span_id,
        })
    }

    /// One link's ids, or why the span is refused.
    pub(crate) fn link_ids(
        &self,
        trace_id: &[u8],
        span_id: &[u8],
    ) -> Result<(TraceId, SpanId), String> {
        let trace_id =
            TraceId::from_bytes(trace_id).map_err(|e| format!("{}: link {e}", self.label()))?;
        let span_id =
            SpanId::from_bytes(span_id).map_err(|e| format!("{}: link {e}", self.label()))?;
        Ok((trace_id, span_id))
    }
}

impl SpanIds {
    /// The record, with its LLM view read from the detail and origin.
    pub(crate) fn into_record(
        self,
        name: String,
        kind: SpanKind,
        (start, end): (u64, u64),
        detail: SpanDetail,
        (origin, service): (&Arc<SpanOrigin>, &str),
    ) -> SpanRecord {
        let llm = llm_view(&name, &detail, origin);
        SpanRecord {
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent_span_id: self.parent_span_id,
            name,
            service: service.to_owned(),
            kind,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            detail,
            origin: Arc::clone(origin),
            llm,
        }
    }
}

pub(crate) fn convert_attributes(kvs: Vec<KeyValue>) -> Vec<Attribute> {
    kvs.into_iter()
        .map(|kv| Attribute {
            key: kv.key,
            value: convert_value(kv.value),
        })
        .collect()
}

pub(crate) fn convert_value(value: Option<AnyValue>) -> AttrValue {
    match value.and_then(|v| v.value) {
        None => AttrValue::Empty,
        Some(any_value::Value::StringValue(s)) => AttrValue::String(s),
        Some(any_value::Value::BoolValue(b)) => AttrValue::Bool(b),
        Some(any_value::Value::IntValue(i)) => AttrValue::Int(i),
        Some(any_value::Value::DoubleValue(d)) => AttrValue::Double(d),
        Some(any_value::Value::BytesValue(b)) => AttrValue::Bytes(b),
        Some(any_value::Value::ArrayValue(a)) => AttrValue::Array(
            a.values
                .into_iter()
                .map(|v| convert_value(Some(v)))
                .collect(),
        ),
        Some(any_value::Value::KvlistValue(kv)) => AttrValue::KvList(convert_attributes(kv.values)),
        // String-table references only exist in the profiles signal.
        #[allow(unreachable_patterns)]
        Some(_) => AttrValue::Empty,
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};

    use super::*;

    fn span(trace_id: Vec<u8>, span_id: Vec<u8>, start: u64, end: u64) -> Span {
        Span {
            trace_id,
            span_id,
            name: "op".into(),
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            ..Default::default()
        }
    }

    #[test]
    fn invalid_spans_are_rejected_one_by_one() {
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![
                        span(vec![1; 16], vec![1; 8], 1, 2),
                        span(vec![0; 16], vec![2; 8], 1, 2),
                        span(vec![1; 15], vec![3; 8], 1, 2),
                        span(vec![1; 16], vec![0; 8], 1, 2),
                        span(vec![1; 16], vec![5; 8], 5, 2),
                        span(vec![1; 16], vec![], 1, 2),
                        span(vec![1; 16], vec![6; 8], 1, u64::MAX),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let batch = convert_request(request, &crate::TimeBounds::storable());
        assert_eq!(batch.spans.len(), 1);
        assert_eq!(batch.rejected_spans, 6);
        assert_eq!(batch.errors.len(), MAX_REPORTED_ERRORS);
        let msg = batch.error_message();
        for needle in [
            "all zeros",
            "must be 16 bytes, got 15",
            "span id must not be all zeros",
            "before start",
        ] {
            assert!(msg.contains(needle), "{needle:?} missing from {msg}");
        }
        assert_eq!(batch.spans[0].service, "unknown_service");
        assert!(msg.ends_with("; …"), "{msg}");
    }

    /// An empty span id is refused like a short one, and so is a time past what can be
    /// stored — one span at a time, naming it.
    #[test]
    fn empty_span_ids_and_unstorable_times_are_refused_by_span() {
        let request = |spans| ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let batch = convert_request(
            request(vec![
                span(vec![1; 16], vec![], 1, 2),
                span(vec![1; 16], vec![6; 8], 1, i64::MAX as u64 + 1),
                span(vec![1; 16], vec![7; 8], 1, 2),
            ]),
            &crate::TimeBounds::storable(),
        );
        assert_eq!(batch.spans.len(), 1);
        let msg = batch.error_message();
        assert!(msg.contains("span id must be 8 bytes, got 0"), "{msg}");
        assert!(
            msg.contains(
                "end_time_unix_nano 9223372036854775808 is after the latest storable time"
            ),
            "{msg}"
        );
    }

    /// A span dated ahead of the server's clock by more than the skew is refused; the
    /// others of its request are kept.
    #[test]
    fn spans_from_a_fast_clock_are_refused_by_span() {
        let now = 1_764_400_000_000_000_000;
        let bounds = TimeBounds {
            now_unix_nano: now,
            max_future_skew: std::time::Duration::from_secs(900),
            max_age: None,
        };
        let year = 365 * 86_400 * 1_000_000_000;
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![
                        span(vec![1; 16], vec![1; 8], now - 5, now),
                        span(vec![1; 16], vec![2; 8], now + year, now + year + 1),
                        span(vec![1; 16], vec![3; 8], now, now + 600_000_000_000),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let batch = convert_request(request, &bounds);
        assert_eq!(batch.spans.len(), 2);
        assert_eq!(batch.rejected_spans, 1);
        let msg = batch.error_message();
        assert!(msg.contains("span_id 0202020202020202"), "{msg}");
        assert!(msg.contains("ahead of the server's clock"), "{msg}");
    }
}
