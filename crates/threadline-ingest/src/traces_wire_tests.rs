//! The direct reader against prost + `convert_request` on the same bytes: fixtures,
//! a request using every field, thousands of corruptions of both, and the shapes that
//! are left to prost.

use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;

use super::*;
use crate::fuzz_tests::{mutate, protobuf_fixtures, Rng};
use crate::{convert_request, decode_protobuf, ExportTraceServiceRequest};

/// What prost's decoding and `convert_request` make of `body`, refused records counted.
fn through_prost(body: &[u8], bounds: &TimeBounds) -> Option<ConvertedBatch> {
    let (request, refused) = decode_protobuf::<ExportTraceServiceRequest>(body).ok()?;
    let mut batch = convert_request(request, bounds);
    batch.add_undecodable(refused);
    Some(batch)
}

/// Whether the direct reader answered for `body`; where it did, its answer is prost's.
pub(crate) fn same_as_prost(body: &[u8]) -> bool {
    let bounds = TimeBounds::storable();
    match convert_protobuf(body, &bounds) {
        Ok(direct) => {
            let prost = through_prost(body, &bounds)
                .expect("what the direct reader reads, prost decodes whole");
            assert_eq!(direct, prost, "the two decoders differ on {body:02x?}");
            true
        }
        Err(Unsupported) => false,
    }
}

/// An export request of one resource, one scope and one span sent as these bytes.
fn wrap_span(span: Vec<u8>) -> Vec<u8> {
    let mut scope = Vec::new();
    prost::encoding::bytes::encode(2, &span, &mut scope);
    let mut resource = Vec::new();
    prost::encoding::bytes::encode(2, &scope, &mut resource);
    let mut body = Vec::new();
    prost::encoding::bytes::encode(1, &resource, &mut body);
    body
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn s(text: &str) -> any_value::Value {
    any_value::Value::StringValue(text.into())
}

/// Every field the reader reads, values of each kind, nested values, links, events,
/// a refused span of each kind.
fn rich_request() -> ExportTraceServiceRequest {
    let nested = any_value::Value::ArrayValue(ArrayValue {
        values: vec![
            AnyValue {
                value: Some(s("a")),
            },
            AnyValue { value: None },
            AnyValue {
                value: Some(any_value::Value::KvlistValue(KeyValueList {
                    values: vec![kv("inner", any_value::Value::DoubleValue(-0.5))],
                })),
            },
        ],
    });
    let attributes = vec![
        kv("gen_ai.request.model", s("llama-3-8b")),
        kv("gen_ai.usage.input_tokens", any_value::Value::IntValue(-3)),
        kv("ok", any_value::Value::BoolValue(true)),
        kv("ratio", any_value::Value::DoubleValue(0.25)),
        kv("blob", any_value::Value::BytesValue(vec![0, 0xff, 7])),
        kv("nested", nested),
        KeyValue {
            key: "absent".into(),
            value: None,
            ..Default::default()
        },
        kv(
            "gen_ai.input.messages",
            s(r#"[{"role":"system","content":"be brief"},{"role":"user","content":"hi ☃"}]"#),
        ),
    ];
    let good = Span {
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        parent_span_id: vec![3; 8],
        trace_state: "k=v".into(),
        flags: 0x301,
        name: "chat llama".into(),
        kind: span::SpanKind::Client as i32,
        start_time_unix_nano: 1_700_000_000_000_000_000,
        end_time_unix_nano: 1_700_000_000_500_000_000,
        attributes,
        dropped_attributes_count: 4,
        events: vec![span::Event {
            time_unix_nano: 1_700_000_000_100_000_000,
            name: "gen_ai.choice".into(),
            attributes: vec![kv("index", any_value::Value::IntValue(0))],
            dropped_attributes_count: 1,
        }],
        dropped_events_count: 2,
        links: vec![span::Link {
            trace_id: vec![9; 16],
            span_id: vec![8; 8],
            trace_state: "a=b".into(),
            attributes: vec![kv("why", s("retry"))],
            dropped_attributes_count: 5,
            flags: 1,
        }],
        dropped_links_count: 3,
        status: Some(Status {
            message: "boom".into(),
            code: 2,
        }),
    };
    let mut spans = vec![good.clone()];
    let mut root = good.clone();
    root.span_id = vec![4; 8];
    root.parent_span_id = vec![0; 8];
    root.status = None;
    spans.push(root);
    for broken in [
        |s: &mut Span| s.trace_id = vec![0; 16],
        |s: &mut Span| s.span_id.truncate(3),
        |s: &mut Span| s.parent_span_id = vec![1; 5],
        |s: &mut Span| s.end_time_unix_nano = 1,
        |s: &mut Span| s.links[0].span_id = vec![],
        |s: &mut Span| s.start_time_unix_nano = u64::MAX,
    ] {
        let mut span = good.clone();
        broken(&mut span);
        spans.push(span);
    }
    ExportTraceServiceRequest {
        resource_spans: vec![
            ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", s("gateway"))],
                    dropped_attributes_count: 6,
                    ..Default::default()
                }),
                scope_spans: vec![
                    ScopeSpans {
                        scope: Some(InstrumentationScope {
                            name: "openai".into(),
                            version: "1.2".into(),
                            attributes: vec![kv("scope.attr", s("x"))],
                            dropped_attributes_count: 7,
                        }),
                        spans,
                        schema_url: "https://opentelemetry.io/schemas/1.30.0".into(),
                    },
                    ScopeSpans::default(),
                ],
                schema_url: "https://opentelemetry.io/schemas/1.29.0".into(),
            },
            ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![good],
                    ..Default::default()
                }],
                ..Default::default()
            },
        ],
    }
}

#[test]
fn fixtures_and_every_field_read_as_prost_reads_them() {
    for body in protobuf_fixtures() {
        assert!(same_as_prost(&body), "the reader gave up on a fixture");
    }
    let body = rich_request().encode_to_vec();
    assert!(same_as_prost(&body));
    let batch = convert_protobuf(&body, &TimeBounds::storable()).expect("read");
    assert_eq!((batch.spans.len(), batch.rejected_spans), (3, 6));
    assert_eq!(batch.spans[2].service, "unknown_service");
}

/// Fields in an order prost's encoder never writes (the resource and schema URLs after
/// the scopes), unknown fields of every wire type, and a string field sent twice
/// (the last one counts) read as prost reads them.
#[test]
fn field_order_unknown_fields_and_repeats_read_as_prost_reads_them() {
    let request = rich_request();
    let rs = &request.resource_spans[0];
    let mut reordered = Vec::new();
    for scope in &rs.scope_spans {
        prost::encoding::message::encode(2, scope, &mut reordered);
    }
    prost::encoding::string::encode(3, &rs.schema_url, &mut reordered);
    prost::encoding::message::encode(1, rs.resource.as_ref().expect("resource"), &mut reordered);
    // Unknown fields 20 (varint), 21 (fixed64), 22 (bytes), 23 (fixed32).
    reordered.extend_from_slice(&[0xa0, 0x01, 0x05, 0xa9, 0x01, 1, 2, 3, 4, 5, 6, 7, 8]);
    reordered.extend_from_slice(&[0xb2, 0x01, 0x02, b'x', b'y', 0xbd, 0x01, 1, 2, 3, 4]);
    prost::encoding::string::encode(3, &"second".to_string(), &mut reordered);
    let mut body = Vec::new();
    prost::encoding::bytes::encode(1, &reordered, &mut body);
    assert!(same_as_prost(&body));
}

#[test]
fn corrupted_requests_read_as_prost_reads_them_or_go_to_prost() {
    let mut seeds = protobuf_fixtures();
    seeds.push(rich_request().encode_to_vec());
    let mut rng = Rng(0x5EED_0000_7777_0042);
    let mut answered = 0;
    for iteration in 0..6000 {
        let body = mutate(&mut rng, &seeds[iteration % seeds.len()]);
        answered += usize::from(same_as_prost(&body));
    }
    // Most corruptions break the message; those that keep it valid are still read here.
    assert!(answered > 300, "only {answered} of 6000 read directly");
}

/// What the reader leaves to prost: a singular message sent twice (prost merges),
/// a value with two of its oneof fields, profile string-table references, entity
/// references on the resource, values nested deeper than its limit, groups.
#[test]
fn rare_shapes_go_to_prost() {
    let span = &rich_request().resource_spans[0].scope_spans[0].spans[0];
    let mut twice_status = span.encode_to_vec();
    prost::encoding::message::encode(15, &Status::default(), &mut twice_status);
    let mut two_values = Span {
        attributes: vec![],
        ..span.clone()
    }
    .encode_to_vec();
    // attributes: {key "k", value {string_value "a", int_value 1}}
    two_values.extend_from_slice(&[0x4a, 9, 0x0a, 1, b'k', 0x12, 4, 0x0a, 1, b'a', 0x18, 1]);
    let mut strindex = span.encode_to_vec();
    strindex.extend_from_slice(&[0x4a, 2, 0x18, 1]);
    let mut deep = AnyValue {
        value: Some(s("x")),
    };
    for _ in 0..=MAX_VALUE_DEPTH {
        deep = AnyValue {
            value: Some(any_value::Value::ArrayValue(ArrayValue {
                values: vec![deep],
            })),
        };
    }
    let deep = Span {
        attributes: vec![KeyValue {
            key: "deep".into(),
            value: Some(deep),
            ..Default::default()
        }],
        ..span.clone()
    }
    .encode_to_vec();
    let entity_refs = {
        let mut resource = Vec::new();
        prost::encoding::bytes::encode(3, &vec![], &mut resource);
        let mut rs = Vec::new();
        prost::encoding::bytes::encode(1, &resource, &mut rs);
        let mut body = Vec::new();
        prost::encoding::bytes::encode(1, &rs, &mut body);
        body
    };
    for body in [
        wrap_span(twice_status),
        wrap_span(two_values),
        wrap_span(strindex),
        wrap_span(deep),
        entity_refs,
        vec![0x0b, 0x0c],
    ] {
        assert_eq!(
            convert_protobuf(&body, &TimeBounds::storable()).err(),
            Some(Unsupported),
            "{body:02x?}"
        );
    }
}

/// Values prost's encoder never writes but decodes: a bool of 2, an enum and a
/// `uint32` wider than 32 bits (truncated), an overlong varint.
#[test]
fn values_prost_never_writes_read_as_prost_reads_them() {
    let span = &rich_request().resource_spans[0].scope_spans[0].spans[0];
    let mut bytes = span.encode_to_vec();
    // attributes: {key "b", value {bool_value: 2}}
    bytes.extend_from_slice(&[0x4a, 7, 0x0a, 1, b'b', 0x12, 2, 0x10, 2]);
    // kind: 2^32 + 2; dropped_events_count: 2^32 + 2; dropped_links_count: 1 in 3 bytes.
    bytes.extend_from_slice(&[0x30, 0x82, 0x80, 0x80, 0x80, 0x10]);
    bytes.extend_from_slice(&[0x60, 0x82, 0x80, 0x80, 0x80, 0x10]);
    bytes.extend_from_slice(&[0x70, 0x81, 0x80, 0x00]);
    let body = wrap_span(bytes);
    assert!(same_as_prost(&body));
    let batch = convert_protobuf(&body, &TimeBounds::storable()).expect("read");
    let record = &batch.spans[0];
    assert_eq!(record.detail.attr("b"), Some(&AttrValue::Bool(true)));
    assert_eq!(
        (
            record.detail.dropped_events_count,
            record.detail.dropped_links_count
        ),
        (2, 1)
    );
}
