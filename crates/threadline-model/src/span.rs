//! A stored span: the indexed header fields plus the faithful detail (attributes,
//! events, links, status) and the resource/scope it came from.

use serde::{Deserialize, Serialize};

use crate::{LlmView, SpanId, TraceId};

/// An OTLP `AnyValue`, converted once at the edge.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum AttrValue {
    /// An `AnyValue` with no field set: valid OTLP, kept as such.
    #[default]
    Empty,
    String(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(Vec<u8>),
    Array(Vec<AttrValue>),
    KvList(Vec<Attribute>),
}

impl AttrValue {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// Integers, and strings or doubles holding a whole number (senders disagree on types).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            AttrValue::Int(i) => Some(*i),
            AttrValue::Double(d) if d.fract() == 0.0 && d.is_finite() => Some(*d as i64),
            AttrValue::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            AttrValue::Double(d) if d.is_finite() => Some(*d),
            AttrValue::Int(i) => Some(*i as f64),
            AttrValue::String(s) => s.trim().parse().ok().filter(|d: &f64| d.is_finite()),
            _ => None,
        }
    }

    /// A short text form for display and for matching `attr.KEY=VALUE` filters.
    pub fn to_display_string(&self) -> String {
        let mut out = String::new();
        self.write_display(&mut out);
        out
    }

    /// `to_display_string` appended to `out`: no string per array item or map entry.
    pub fn write_display(&self, out: &mut String) {
        use std::fmt::Write;
        // Writing to a String cannot fail.
        match self {
            AttrValue::Empty => {}
            AttrValue::String(s) => out.push_str(s),
            AttrValue::Bool(b) => {
                let _ = write!(out, "{b}");
            }
            AttrValue::Int(i) => {
                let _ = write!(out, "{i}");
            }
            AttrValue::Double(d) => {
                let _ = write!(out, "{d}");
            }
            AttrValue::Bytes(b) => {
                for byte in b {
                    let _ = write!(out, "{byte:02x}");
                }
            }
            AttrValue::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write_display(out);
                }
                out.push(']');
            }
            AttrValue::KvList(kvs) => {
                out.push('{');
                for (i, kv) in kvs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&kv.key);
                    out.push('=');
                    kv.value.write_display(out);
                }
                out.push('}');
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attribute {
    pub key: String,
    pub value: AttrValue,
}

impl Attribute {
    pub fn new(key: impl Into<String>, value: AttrValue) -> Self {
        Self {
            key: key.into(),
            value,
        }
    }
}

/// OTLP `SpanKind`; unknown numbers are kept as `Unspecified`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpanKind {
    Unspecified,
    Internal,
    Server,
    Client,
    Producer,
    Consumer,
}

impl SpanKind {
    pub fn from_otlp(code: i32) -> Self {
        match code {
            1 => SpanKind::Internal,
            2 => SpanKind::Server,
            3 => SpanKind::Client,
            4 => SpanKind::Producer,
            5 => SpanKind::Consumer,
            _ => SpanKind::Unspecified,
        }
    }

    pub fn to_otlp(self) -> i32 {
        match self {
            SpanKind::Unspecified => 0,
            SpanKind::Internal => 1,
            SpanKind::Server => 2,
            SpanKind::Client => 3,
            SpanKind::Producer => 4,
            SpanKind::Consumer => 5,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SpanKind::Unspecified => "unspecified",
            SpanKind::Internal => "internal",
            SpanKind::Server => "server",
            SpanKind::Client => "client",
            SpanKind::Producer => "producer",
            SpanKind::Consumer => "consumer",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum StatusCode {
    #[default]
    Unset,
    Ok,
    Error,
}

impl StatusCode {
    pub fn from_otlp(code: i32) -> Self {
        match code {
            1 => StatusCode::Ok,
            2 => StatusCode::Error,
            _ => StatusCode::Unset,
        }
    }

    pub fn to_otlp(self) -> i32 {
        match self {
            StatusCode::Unset => 0,
            StatusCode::Ok => 1,
            StatusCode::Error => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StatusCode::Unset => "unset",
            StatusCode::Ok => "ok",
            StatusCode::Error => "error",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpanStatus {
    pub code: StatusCode,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpanEvent {
    pub time_unix_nano: u64,
    pub name: String,
    pub attributes: Vec<Attribute>,
    pub dropped_attributes_count: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpanLink {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub trace_state: String,
    pub attributes: Vec<Attribute>,
    pub dropped_attributes_count: u32,
    pub flags: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InstrumentationScope {
    pub name: String,
    pub version: String,
    pub attributes: Vec<Attribute>,
    pub dropped_attributes_count: u32,
}

/// Where a span came from: its resource and instrumentation scope. Shared by many
/// spans, so the store keeps one copy per distinct origin.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpanOrigin {
    pub resource_attributes: Vec<Attribute>,
    pub resource_dropped_attributes_count: u32,
    pub resource_schema_url: String,
    pub scope: InstrumentationScope,
    pub scope_schema_url: String,
}

impl SpanOrigin {
    pub fn resource_attr(&self, key: &str) -> Option<&AttrValue> {
        self.resource_attributes
            .iter()
            .find(|a| a.key == key)
            .map(|a| &a.value)
    }

    /// `service.name` of the resource, `unknown_service` when absent (as the SDKs do).
    pub fn service_name(&self) -> String {
        self.resource_attr("service.name")
            .and_then(AttrValue::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown_service")
            .to_owned()
    }
}

/// Everything of a span that is not an indexed header field. Persisted compressed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpanDetail {
    pub trace_state: String,
    pub flags: u32,
    pub attributes: Vec<Attribute>,
    pub dropped_attributes_count: u32,
    pub events: Vec<SpanEvent>,
    pub dropped_events_count: u32,
    pub links: Vec<SpanLink>,
    pub dropped_links_count: u32,
    pub status: SpanStatus,
}

impl SpanDetail {
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        self.attributes
            .iter()
            .find(|a| a.key == key)
            .map(|a| &a.value)
    }
}

/// One span as Threadline keeps it: header, detail, origin and the normalized LLM view.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanRecord {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent_span_id: Option<SpanId>,
    pub name: String,
    pub service: String,
    pub kind: SpanKind,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub detail: SpanDetail,
    pub origin: std::sync::Arc<SpanOrigin>,
    pub llm: Option<LlmView>,
}

impl SpanRecord {
    pub fn duration_nanos(&self) -> u64 {
        self.end_time_unix_nano
            .saturating_sub(self.start_time_unix_nano)
    }

    pub fn is_error(&self) -> bool {
        self.detail.status.code == StatusCode::Error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_display_as_filters_match_them() {
        let nested = AttrValue::Array(vec![
            AttrValue::String("a".into()),
            AttrValue::Int(1),
            AttrValue::Array(vec![AttrValue::Bool(true), AttrValue::Empty]),
            AttrValue::KvList(vec![Attribute::new("k", AttrValue::Double(1.5))]),
            AttrValue::Bytes(vec![0xab, 0x01]),
        ]);
        assert_eq!(nested.to_display_string(), "[a,1,[true,],{k=1.5},ab01]");
        assert_eq!(AttrValue::Empty.to_display_string(), "");
        assert_eq!(AttrValue::Double(2.0).to_display_string(), "2");
        let mut out = String::from("x=");
        AttrValue::KvList(vec![]).write_display(&mut out);
        assert_eq!(out, "x={}");
    }
}
