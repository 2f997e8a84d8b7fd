//! OTLP/protobuf trace export requests read straight into `SpanRecord`s, without
//! prost's intermediate messages: ids stay borrowed until checked, strings are copied
//! once, and no `KeyValue` or `AnyValue` is built only to be converted. The answer is
//! the one `convert_request` gives for prost's decoding of the same bytes (a test
//! compares them); a request this reader gives up on (`Unsupported`: malformed, or a
//! rare shape) is decoded by prost as before.

use threadline_model::{
    AttrValue, Attribute, InstrumentationScope, SpanDetail, SpanEvent, SpanKind, SpanLink,
    SpanRecord, SpanStatus, StatusCode,
};

use crate::convert::{ConvertedBatch, ResourceParts, SpanHead};
use crate::wire::{once, Fields, Unsupported, Value, Wire};
use crate::TimeBounds;

/// Nesting of array and key-list values beyond which prost's decoding decides (its
/// recursion limit is counted from the request; this is well inside it).
const MAX_VALUE_DEPTH: usize = 16;

/// An `ExportTraceServiceRequest`'s spans, converted and checked as `convert_request`
/// does.
pub(crate) fn convert_protobuf(request: &[u8], bounds: &TimeBounds) -> Wire<ConvertedBatch> {
    let mut batch = ConvertedBatch::default();
    let mut fields = Fields::new(request);
    while let Some((tag, value)) = fields.next_field()? {
        if tag == 1 {
            resource_spans(value.bytes()?, bounds, &mut batch)?;
        }
    }
    Ok(batch)
}

/// `ResourceSpans`: its resource and schema URL first (they may follow the scopes on
/// the wire), then its scopes.
fn resource_spans(message: &[u8], bounds: &TimeBounds, batch: &mut ConvertedBatch) -> Wire<()> {
    let (resource, schema_url) = layer_head(message)?;
    // An absent resource reads as an empty one, as prost's default.
    let parts = resource_parts(resource.unwrap_or_default(), schema_url)?;
    for_each_inner(message, |scope| scope_spans(scope, &parts, bounds, batch))
}

/// The two layers above the spans (`ResourceSpans`, `ScopeSpans`) share their tags:
/// 1 its own message (resource, scope), 2 what it holds, 3 its schema URL. The first
/// two: its message and schema URL, wherever they sit among what it holds.
fn layer_head(message: &[u8]) -> Wire<(Option<&[u8]>, &str)> {
    let mut head = None;
    let mut schema_url = "";
    let mut fields = Fields::new(message);
    while let Some((tag, value)) = fields.next_field()? {
        match tag {
            1 => once(&mut head, value)?,
            2 => drop(value.bytes()?),
            3 => schema_url = value.str()?,
            _ => {}
        }
    }
    Ok((head, schema_url))
}

/// Each message a layer holds (tag 2), in order.
fn for_each_inner(message: &[u8], mut each: impl FnMut(&[u8]) -> Wire<()>) -> Wire<()> {
    let mut fields = Fields::new(message);
    while let Some((tag, value)) = fields.next_field()? {
        if tag == 2 {
            each(value.bytes()?)?;
        }
    }
    Ok(())
}

fn resource_parts(message: &[u8], schema_url: &str) -> Wire<ResourceParts> {
    let mut attributes = Vec::new();
    let mut dropped = 0;
    let mut fields = Fields::new(message);
    while let Some((tag, value)) = fields.next_field()? {
        match tag {
            1 => attributes.push(key_value(value.bytes()?, 0)?),
            2 => dropped = value.uint32()?,
            // Entity references: prost checks them, nothing here reads them.
            3 => return Err(Unsupported),
            _ => {}
        }
    }
    Ok(ResourceParts::of(
        attributes,
        dropped,
        schema_url.to_owned(),
    ))
}

/// `ScopeSpans`: its scope and schema URL, then each span.
fn scope_spans(
    message: &[u8],
    resource: &ResourceParts,
    bounds: &TimeBounds,
    batch: &mut ConvertedBatch,
) -> Wire<()> {
    let (scope, schema_url) = layer_head(message)?;
    let scope = instrumentation_scope(scope.unwrap_or_default())?;
    let origin = resource.origin_of(scope, schema_url.to_owned());
    let service = origin.service_name();
    for_each_inner(message, |message| {
        batch.push(span(message, bounds, (&origin, &service))?);
        Ok(())
    })
}

fn instrumentation_scope(message: &[u8]) -> Wire<InstrumentationScope> {
    let (mut name, mut version) = ("", "");
    let mut scope = InstrumentationScope::default();
    let mut fields = Fields::new(message);
    while let Some((tag, value)) = fields.next_field()? {
        match tag {
            1 => name = value.str()?,
            2 => version = value.str()?,
            3 => scope.attributes.push(key_value(value.bytes()?, 0)?),
            4 => scope.dropped_attributes_count = value.uint32()?,
            _ => {}
        }
    }
    scope.name = name.to_owned();
    scope.version = version.to_owned();
    Ok(scope)
}

/// A link as read, its ids checked once the span's own are known.
struct RawLink<'a> {
    trace_id: &'a [u8],
    span_id: &'a [u8],
    trace_state: &'a str,
    attributes: Vec<Attribute>,
    dropped_attributes_count: u32,
    flags: u32,
}

/// One `Span`: `Err` if the request must go to prost, `Ok(Err(reason))` if the span
/// is refused (as `convert_span` refuses it).
fn span(
    message: &[u8],
    bounds: &TimeBounds,
    (origin, service): (&std::sync::Arc<threadline_model::SpanOrigin>, &str),
) -> Wire<Result<SpanRecord, String>> {
    let mut head = SpanHead {
        name: "",
        trace_id: &[],
        span_id: &[],
        parent_span_id: &[],
        start: 0,
        end: 0,
    };
    let mut trace_state = "";
    let mut kind = 0;
    let mut flags = 0;
    let mut attributes = Vec::new();
    let (mut dropped_attributes, mut dropped_events, mut dropped_links) = (0, 0, 0);
    let mut events = Vec::new();
    let mut links = Vec::new();
    let mut status = None;
    let mut fields = Fields::new(message);
    while let Some((tag, value)) = fields.next_field()? {
        match tag {
            1 => head.trace_id = value.bytes()?,
            2 => head.span_id = value.bytes()?,
            3 => trace_state = value.str()?,
            4 => head.parent_span_id = value.bytes()?,
            5 => head.name = value.str()?,
            6 => kind = value.int32()?,
            7 => head.start = value.fixed64()?,
            8 => head.end = value.fixed64()?,
            9 => attributes.push(key_value(value.bytes()?, 0)?),
            10 => dropped_attributes = value.uint32()?,
            11 => events.push(event(value.bytes()?)?),
            12 => dropped_events = value.uint32()?,
            13 => links.push(link(value.bytes()?)?),
            14 => dropped_links = value.uint32()?,
            15 => once(&mut status, value)?,
            16 => flags = value.fixed32()?,
            _ => {}
        }
    }
    let status = span_status(status.unwrap_or_default())?;
    let ids = match head.check(bounds) {
        Ok(ids) => ids,
        Err(reason) => return Ok(Err(reason)),
    };
    let mut checked_links = Vec::with_capacity(links.len());
    for link in links {
        let (trace_id, span_id) = match head.link_ids(link.trace_id, link.span_id) {
            Ok(ids) => ids,
            Err(reason) => return Ok(Err(reason)),
        };
        checked_links.push(SpanLink {
            trace_id,
            span_id,
            trace_state: link.trace_state.to_owned(),
            attributes: link.attributes,
            dropped_attributes_count: link.dropped_attributes_count,
            flags: link.flags,
        });
    }
    let detail = SpanDetail {
        trace_state: trace_state.to_owned(),
        flags,
        attributes,
        dropped_attributes_count: dropped_attributes,
        events,
        dropped_events_count: dropped_events,
        links: checked_links,
        dropped_links_count: dropped_links,
        status,
    };
    Ok(Ok(ids.into_record(
        head.name.to_owned(),
        SpanKind::from_otlp(kind),
        (head.start, head.end),
        detail,
        (origin, service),
    )))
}

fn event(message: &[u8]) -> Wire<SpanEvent> {
    let mut name = "";
    let mut event = SpanEvent {
        time_unix_nano: 0,
        name: String::new(),
        attributes: Vec::new(),
        dropped_attributes_count: 0,
    };
    let mut fields = Fields::new(message);
    while let Some((tag, value)) = fields.next_field()? {
        match tag {
            1 => event.time_unix_nano = value.fixed64()?,
            2 => name = value.str()?,
            3 => event.attributes.push(key_value(value.bytes()?, 0)?),
            4 => event.dropped_attributes_count = value.uint32()?,
            _ => {}
        }
    }
    event.name = name.to_owned();
    Ok(event)
}

fn link(message: &[u8]) -> Wire<RawLink<'_>> {
    let mut link = RawLink {
        trace_id: &[],
        span_id: &[],
        trace_state: "",
        attributes: Vec::new(),
        dropped_attributes_count: 0,
        flags: 0,
    };
    let mut fields = Fields::new(message);
    while let Some((tag, value)) = fields.next_field()? {
        match tag {
            1 => link.trace_id = value.bytes()?,
            2 => link.span_id = value.bytes()?,
            3 => link.trace_state = value.str()?,
            4 => link.attributes.push(key_value(value.bytes()?, 0)?),
            5 => link.dropped_attributes_count = value.uint32()?,
            6 => link.flags = value.fixed32()?,
            _ => {}
        }
    }
    Ok(link)
}

fn span_status(message: &[u8]) -> Wire<SpanStatus> {
    let (mut code, mut text) = (0, "");
    let mut fields = Fields::new(message);
    while let Some((tag, value)) = fields.next_field()? {
        match tag {
            2 => text = value.str()?,
            3 => code = value.int32()?,
            _ => {}
        }
    }
    Ok(SpanStatus {
        code: StatusCode::from_otlp(code),
        message: text.to_owned(),
    })
}

/// `KeyValue` (`depth`: how many values it sits in).
#[inline]
fn key_value(message: &[u8], depth: usize) -> Wire<Attribute> {
    let mut key = "";
    let mut value = None;
    let mut fields = Fields::new(message);
    while let Some((tag, field)) = fields.next_field()? {
        match tag {
            1 => key = field.str()?,
            2 => once(&mut value, field)?,
            // A string-table key: profiles only, left to prost.
            3 => return Err(Unsupported),
            _ => {}
        }
    }
    let value = match value {
        Some(v) => any_value(v, depth)?,
        None => AttrValue::Empty,
    };
    Ok(Attribute {
        key: key.to_owned(),
        value,
    })
}

/// `AnyValue`: one field of its oneof at most (prost's merging of several is left to
/// prost).
fn any_value(message: &[u8], depth: usize) -> Wire<AttrValue> {
    if depth > MAX_VALUE_DEPTH {
        return Err(Unsupported);
    }
    let mut out = None;
    let mut fields = Fields::new(message);
    while let Some((tag, value)) = fields.next_field()? {
        let read = match tag {
            1 => AttrValue::String(value.str()?.to_owned()),
            2 => AttrValue::Bool(value.varint()? != 0),
            3 => AttrValue::Int(value.varint()? as i64),
            4 => AttrValue::Double(f64::from_bits(value.fixed64()?)),
            5 => AttrValue::Array(values_of(value, depth, any_value)?),
            6 => AttrValue::KvList(values_of(value, depth, key_value)?),
            7 => AttrValue::Bytes(value.bytes()?.to_vec()),
            // A string-table value (profiles only), or an unknown field.
            8 => return Err(Unsupported),
            _ => continue,
        };
        if out.replace(read).is_some() {
            return Err(Unsupported);
        }
    }
    Ok(out.unwrap_or(AttrValue::Empty))
}

/// The repeated field 1 of an `ArrayValue` or `KeyValueList`, each read by `item`.
fn values_of<T>(
    list: Value<'_>,
    depth: usize,
    item: impl Fn(&[u8], usize) -> Wire<T>,
) -> Wire<Vec<T>> {
    let mut out = Vec::new();
    let mut fields = Fields::new(list.bytes()?);
    while let Some((tag, value)) = fields.next_field()? {
        if tag == 1 {
            out.push(item(value.bytes()?, depth + 1)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "traces_wire_tests.rs"]
pub(crate) mod tests;
