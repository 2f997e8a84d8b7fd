//! Rows of the ClickHouse tables as RowBinary reads and writes them, and their making
//! from (and back into) model types. Field order is column order (`schema`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use threadline_model::{
    llm_view_but_prompt_hash, LlmView, LogDetail, LogRecord, SpanDetail, SpanId, SpanKind,
    SpanOrigin, SpanRecord, TraceId,
};

use crate::{SkeletonSpan, SpanLocation, StoreError};

/// A token count as stored: `i64::MIN` stands for none.
const NO_COUNT: i64 = i64::MIN;

fn count_of(n: Option<i64>) -> i64 {
    n.unwrap_or(NO_COUNT)
}

fn stored_count(n: i64) -> Option<i64> {
    (n != NO_COUNT).then_some(n)
}

/// A stored string: empty stands for none.
fn stored_text(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// A span's end as the nanoseconds after its start that `spans` stores, wrapping: an
/// end before its start (a skewed clock) comes back as it was sent (`end_of`).
fn end_after(start_ns: u64, end_ns: u64) -> u64 {
    end_ns.wrapping_sub(start_ns)
}

/// The end `end_after` stored.
fn end_of(start_ns: u64, duration_ns: u64) -> u64 {
    start_ns.wrapping_add(duration_ns)
}

/// An OTLP span kind as one byte.
fn kind_byte(kind: SpanKind) -> u8 {
    kind.to_otlp().clamp(0, 255) as u8
}

/// A row of `spans`: a span whole.
#[derive(clickhouse::Row, Serialize, Deserialize, Clone)]
pub(crate) struct SpanRow {
    pub(crate) tenant: String,
    pub(crate) trace_id: [u8; 16],
    pub(crate) span_id: [u8; 8],
    pub(crate) parent_span_id: [u8; 8],
    pub(crate) has_parent: u8,
    pub(crate) start_ns: u64,
    /// The end as nanoseconds after the start (`end_after`): a duration takes half
    /// the bytes of a second time.
    pub(crate) duration_ns: u64,
    pub(crate) service: String,
    pub(crate) name: String,
    pub(crate) kind: u8,
    pub(crate) error: u8,
    pub(crate) model: String,
    pub(crate) session_id: String,
    pub(crate) user_id: String,
    pub(crate) total_tokens: i64,
    pub(crate) input_tokens: i64,
    pub(crate) output_tokens: i64,
    #[serde(with = "bytes")]
    pub(crate) detail: Vec<u8>,
    #[serde(with = "bytes")]
    pub(crate) origin: Vec<u8>,
    pub(crate) version: u64,
}

/// A span's LLM view as `spans.detail` holds it: only its prompt hash when it is the
/// one its name, detail and origin give (`llm_view`, as for every span that came in
/// over OTLP) — the view repeats the attributes' ids and timings, a tenth of the bytes
/// of a span. The hash is kept: computing it again reads the prompt's messages.
#[derive(Serialize, Deserialize)]
enum StoredView<V, H> {
    /// The view `llm_view_but_prompt_hash` gives, with this prompt hash.
    Derived {
        prompt_hash: H,
    },
    Given(V),
}

/// The encoded detail (detail and LLM view) and origin of a span.
pub(crate) fn encode_span(span: &SpanRecord) -> Result<(Vec<u8>, Vec<u8>), StoreError> {
    let prompt_hash = span.llm.as_ref().and_then(|l| l.prompt_hash.as_ref());
    let derived = llm_view_but_prompt_hash(&span.name, &span.detail, &span.origin);
    let same = match (derived, &span.llm) {
        (None, None) => true,
        (Some(mut derived), Some(given)) => {
            derived.prompt_hash.clone_from(&given.prompt_hash);
            derived == *given
        }
        _ => false,
    };
    let view = if same {
        StoredView::Derived { prompt_hash }
    } else {
        StoredView::Given(&span.llm)
    };
    let detail = postcard::to_stdvec(&(&span.detail, view))
        .map_err(|e| StoreError::corrupt(format!("cannot encode a span detail: {e}")))?;
    let origin = postcard::to_stdvec(&*span.origin)
        .map_err(|e| StoreError::corrupt(format!("cannot encode a span origin: {e}")))?;
    Ok((detail, origin))
}

/// Rows of several traces decoded (`record`, origins shared) and grouped by trace, in
/// the order read.
pub(crate) fn by_trace<R, T>(
    rows: Vec<R>,
    trace_of: impl Fn(&R) -> [u8; 16],
    record: impl Fn(R, &mut Origins) -> Result<T, StoreError>,
) -> Result<foldhash::HashMap<threadline_model::TraceId, Vec<T>>, StoreError> {
    let mut out: foldhash::HashMap<threadline_model::TraceId, Vec<T>> = Default::default();
    let mut origins = Origins::default();
    for row in rows {
        let trace_id = threadline_model::TraceId(trace_of(&row));
        out.entry(trace_id)
            .or_default()
            .push(record(row, &mut origins)?);
    }
    Ok(out)
}

/// Origins decoded once per distinct encoding within one read.
#[derive(Default)]
pub(crate) struct Origins(foldhash::HashMap<Vec<u8>, Arc<SpanOrigin>>);

impl Origins {
    pub(crate) fn get(&mut self, bytes: &[u8]) -> Result<Arc<SpanOrigin>, StoreError> {
        if let Some(o) = self.0.get(bytes) {
            return Ok(Arc::clone(o));
        }
        let origin: SpanOrigin = postcard::from_bytes(bytes)
            .map_err(|e| StoreError::corrupt(format!("a stored origin does not decode: {e}")))?;
        let origin = Arc::new(origin);
        self.0.insert(bytes.to_vec(), Arc::clone(&origin));
        Ok(origin)
    }
}

impl SpanRow {
    pub(crate) fn of(tenant: &str, span: &SpanRecord, version: u64) -> Result<Self, StoreError> {
        let (detail, origin) = encode_span(span)?;
        let llm = span.llm.as_ref();
        Ok(Self {
            tenant: tenant.to_owned(),
            trace_id: span.trace_id.0,
            span_id: span.span_id.0,
            parent_span_id: span.parent_span_id.map_or([0; 8], |p| p.0),
            has_parent: u8::from(span.parent_span_id.is_some()),
            start_ns: span.start_time_unix_nano,
            duration_ns: end_after(span.start_time_unix_nano, span.end_time_unix_nano),
            service: span.service.clone(),
            name: span.name.clone(),
            kind: kind_byte(span.kind),
            error: u8::from(span.is_error()),
            model: llm.and_then(|l| l.model()).unwrap_or_default().to_owned(),
            session_id: llm.and_then(|l| l.session_id.clone()).unwrap_or_default(),
            user_id: llm.and_then(|l| l.user_id.clone()).unwrap_or_default(),
            total_tokens: count_of(llm.and_then(|l| l.total_tokens)),
            input_tokens: count_of(llm.and_then(|l| l.input_tokens)),
            output_tokens: count_of(llm.and_then(|l| l.output_tokens)),
            detail,
            origin,
            version,
        })
    }

    fn ids(&self) -> (TraceId, SpanId, Option<SpanId>) {
        (
            TraceId(self.trace_id),
            SpanId(self.span_id),
            (self.has_parent != 0).then_some(SpanId(self.parent_span_id)),
        )
    }

    /// The span as it was written.
    pub(crate) fn into_record(self, origins: &mut Origins) -> Result<SpanRecord, StoreError> {
        let (trace_id, span_id, parent_span_id) = self.ids();
        let (detail, view): (SpanDetail, StoredView<Option<LlmView>, Option<String>>) =
            postcard::from_bytes(&self.detail)
                .map_err(|e| StoreError::corrupt(format!("a stored span does not decode: {e}")))?;
        let origin = origins.get(&self.origin)?;
        let llm = match view {
            StoredView::Derived { prompt_hash } => {
                llm_view_but_prompt_hash(&self.name, &detail, &origin).map(|view| LlmView {
                    prompt_hash,
                    ..view
                })
            }
            StoredView::Given(llm) => llm,
        };
        Ok(SpanRecord {
            trace_id,
            span_id,
            parent_span_id,
            name: self.name,
            service: self.service,
            kind: SpanKind::from_otlp(i32::from(self.kind)),
            start_time_unix_nano: self.start_ns,
            end_time_unix_nano: end_of(self.start_ns, self.duration_ns),
            detail,
            origin,
            llm,
        })
    }
}

/// The header of a span (`spans` without detail and origin): a skeleton row.
#[derive(clickhouse::Row, Deserialize)]
pub(crate) struct HeadRow {
    pub(crate) span_id: [u8; 8],
    pub(crate) parent_span_id: [u8; 8],
    pub(crate) has_parent: u8,
    pub(crate) start_ns: u64,
    pub(crate) duration_ns: u64,
    pub(crate) service: String,
    pub(crate) name: String,
    pub(crate) kind: u8,
    pub(crate) error: u8,
    pub(crate) model: String,
    pub(crate) session_id: String,
    pub(crate) user_id: String,
    pub(crate) total_tokens: i64,
    pub(crate) input_tokens: i64,
    pub(crate) output_tokens: i64,
}

/// The columns of `HeadRow`, in order.
pub(crate) const HEAD_COLUMNS: &str =
    "span_id, parent_span_id, has_parent, start_ns, duration_ns, \
    service, name, kind, error, model, session_id, user_id, total_tokens, input_tokens, \
    output_tokens";

impl HeadRow {
    pub(crate) fn into_skeleton(self) -> SkeletonSpan {
        SkeletonSpan {
            span_id: SpanId(self.span_id),
            parent_span_id: (self.has_parent != 0).then_some(SpanId(self.parent_span_id)),
            name: self.name,
            service: self.service,
            kind: SpanKind::from_otlp(i32::from(self.kind)),
            start_time_unix_nano: self.start_ns,
            end_time_unix_nano: end_of(self.start_ns, self.duration_ns),
            error: self.error != 0,
            model: stored_text(self.model),
            total_tokens: stored_count(self.total_tokens),
            input_tokens: stored_count(self.input_tokens),
            output_tokens: stored_count(self.output_tokens),
            session_id: stored_text(self.session_id),
            user_id: stored_text(self.user_id),
            location: SpanLocation::remote(),
        }
    }
}

/// A row of `logs`.
#[derive(clickhouse::Row, Serialize, Deserialize, Clone)]
pub(crate) struct LogRow {
    pub(crate) tenant: String,
    pub(crate) time_ns: u64,
    pub(crate) seq: i64,
    pub(crate) trace_id: [u8; 16],
    pub(crate) has_trace: u8,
    pub(crate) span_id: [u8; 8],
    pub(crate) has_span: u8,
    pub(crate) service: String,
    pub(crate) severity: i32,
    pub(crate) event_name: String,
    /// Whose record it is (`LogDetail::subject_ids`): what an erasure finds it by.
    pub(crate) user_id: String,
    pub(crate) session_id: String,
    #[serde(with = "bytes")]
    pub(crate) detail: Vec<u8>,
    #[serde(with = "bytes")]
    pub(crate) origin: Vec<u8>,
    pub(crate) version: u64,
}

/// The columns of `LogRow`, in order.
pub(crate) const LOG_COLUMNS: &str = "tenant, time_ns, seq, trace_id, has_trace, span_id, \
    has_span, service, severity, event_name, user_id, session_id, detail, origin, version";

impl LogRow {
    pub(crate) fn of(
        tenant: &str,
        record: &LogRecord,
        seq: i64,
        version: u64,
    ) -> Result<Self, StoreError> {
        let detail = postcard::to_stdvec(&record.detail)
            .map_err(|e| StoreError::corrupt(format!("cannot encode a log record: {e}")))?;
        let origin = postcard::to_stdvec(&*record.origin)
            .map_err(|e| StoreError::corrupt(format!("cannot encode a log origin: {e}")))?;
        let (user_id, session_id) = record.detail.subject_ids();
        Ok(Self {
            tenant: tenant.to_owned(),
            time_ns: record.time_unix_nano,
            seq,
            trace_id: record.trace_id.map_or([0; 16], |t| t.0),
            has_trace: u8::from(record.trace_id.is_some()),
            span_id: record.span_id.map_or([0; 8], |s| s.0),
            has_span: u8::from(record.span_id.is_some()),
            service: record.service.clone(),
            severity: record.detail.severity_number,
            event_name: record.detail.event_name.clone(),
            user_id: user_id.unwrap_or_default().to_owned(),
            session_id: session_id.unwrap_or_default().to_owned(),
            detail,
            origin,
            version,
        })
    }

    pub(crate) fn into_record(self, origins: &mut Origins) -> Result<LogRecord, StoreError> {
        let detail: LogDetail = postcard::from_bytes(&self.detail).map_err(|e| {
            StoreError::corrupt(format!("a stored log record does not decode: {e}"))
        })?;
        Ok(LogRecord {
            time_unix_nano: self.time_ns,
            trace_id: (self.has_trace != 0).then_some(TraceId(self.trace_id)),
            span_id: (self.has_span != 0).then_some(SpanId(self.span_id)),
            service: self.service,
            detail,
            origin: origins.get(&self.origin)?,
        })
    }
}

/// A rollup cell or hop cell as one write computed it.
#[derive(clickhouse::Row, Serialize, Deserialize, Clone)]
pub(crate) struct CellRow {
    pub(crate) tenant: String,
    pub(crate) minute: i64,
    pub(crate) series: String,
    #[serde(with = "bytes")]
    pub(crate) cell: Vec<u8>,
    pub(crate) batch: u64,
}

#[derive(clickhouse::Row, Serialize, Deserialize, Clone)]
pub(crate) struct HopRow {
    pub(crate) tenant: String,
    pub(crate) minute: i64,
    pub(crate) caller: String,
    pub(crate) callee: String,
    #[serde(with = "bytes")]
    pub(crate) cell: Vec<u8>,
    pub(crate) batch: u64,
}

#[derive(clickhouse::Row, Serialize, Deserialize, Clone, PartialEq, Eq, Hash)]
pub(crate) struct OperationRow {
    pub(crate) tenant: String,
    pub(crate) service: String,
    pub(crate) name: String,
    pub(crate) kind: u8,
}

impl OperationRow {
    /// The distinct (service, name, kind) of `spans`, sorted.
    pub(crate) fn of_spans(tenant: &str, spans: &[SpanRecord]) -> Vec<Self> {
        let mut distinct: Vec<(&str, &str, u8)> = spans
            .iter()
            .map(|s| (s.service.as_str(), s.name.as_str(), kind_byte(s.kind)))
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        distinct
            .into_iter()
            .map(|(service, name, kind)| Self {
                tenant: tenant.to_owned(),
                service: service.to_owned(),
                name: name.to_owned(),
                kind,
            })
            .collect()
    }
}

#[derive(clickhouse::Row, Serialize, Deserialize, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TenantRow {
    pub(crate) tenant: String,
}

#[derive(clickhouse::Row, Serialize, Deserialize, Clone)]
pub(crate) struct IncidentRow {
    pub(crate) tenant: String,
    pub(crate) id: String,
    pub(crate) onset_minute: i64,
    #[serde(with = "bytes")]
    pub(crate) body: Vec<u8>,
    pub(crate) version: u64,
}

#[derive(clickhouse::Row, Serialize, Deserialize, Clone)]
pub(crate) struct MarkRow {
    pub(crate) tenant: String,
    pub(crate) minute: i64,
    pub(crate) version: u64,
}

/// Bytes as a `String` column: RowBinary writes both as a length and the bytes.
pub(crate) mod bytes {
    pub(crate) fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_borrowed_bytes<E: serde::de::Error>(self, v: &'de [u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
                Ok(v.as_bytes().to_vec())
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Vec<u8>, E> {
                Ok(v.into_bytes())
            }
        }
        d.deserialize_byte_buf(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client span `chat m` of `service` with no attributes.
    fn chat_span(service: &str, start: u64, end: u64) -> SpanRecord {
        SpanRecord {
            trace_id: TraceId([1; 16]),
            span_id: SpanId([2; 8]),
            parent_span_id: None,
            name: "chat m".into(),
            service: service.into(),
            kind: SpanKind::Client,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            detail: SpanDetail::default(),
            origin: Arc::new(SpanOrigin::default()),
            llm: None,
        }
    }

    #[test]
    fn a_span_row_gives_back_the_span_its_end_before_its_start_too() {
        for (start, end) in [(10, 25), (25, 10), (0, u64::MAX), (u64::MAX, 0)] {
            let written = chat_span("gateway", start, end);
            let row = SpanRow::of("acme", &written, 1).unwrap();
            let read = row.into_record(&mut Origins::default()).unwrap();
            assert_eq!(read, written);
        }
    }

    /// A view its span gives is stored as its prompt hash alone and reads back whole;
    /// one it does not give (a writer's own) is stored and reads back as written.
    #[test]
    fn an_llm_view_is_stored_only_where_the_span_does_not_give_it() {
        use threadline_model::{llm_view, AttrValue, Attribute};
        let mut span = chat_span("inference", 10, 20);
        let text = |s: &str| AttrValue::String(s.into());
        span.detail.attributes = vec![
            Attribute::new("gen_ai.request.model", text("m-1")),
            Attribute::new("gen_ai.prompt", text("how do I reset my password")),
            Attribute::new(
                "gen_ai.response.time_to_first_chunk",
                AttrValue::Double(0.123),
            ),
            Attribute::new("session.id", text("s-1")),
        ];
        span.llm = llm_view(&span.name, &span.detail, &span.origin);
        assert!(span.llm.as_ref().unwrap().prompt_hash.is_some());
        let round_trip = |span: &SpanRecord| {
            let row = SpanRow::of("acme", span, 1).unwrap();
            let stored = row.detail.len();
            (row.into_record(&mut Origins::default()).unwrap(), stored)
        };
        let (read, derived_bytes) = round_trip(&span);
        assert_eq!(read, span);
        let mut own = span.clone();
        own.llm.as_mut().unwrap().route = Some("/set-by-the-writer".into());
        let (read, given_bytes) = round_trip(&own);
        assert_eq!(read, own);
        assert!(
            given_bytes > derived_bytes + 20,
            "{given_bytes} bytes with the view, {derived_bytes} without"
        );
        own.llm = None;
        assert_eq!(round_trip(&own).0, own, "no view where the span gives one");
    }
}
