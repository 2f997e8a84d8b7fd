//! What a log search asks (`LogQuery`) and answers (`LogPage`, newest record first,
//! with a cursor): the same for every backend.

use threadline_model::{LogRecord, SpanId, TraceId};

/// Filters of a log search; every set one must hold.
#[derive(Clone, Debug, Default)]
pub struct LogQuery {
    /// Every word in the record's body, event name or text attributes (the last word
    /// by prefix), in any case.
    pub text: Option<String>,
    pub trace_id: Option<TraceId>,
    pub span_id: Option<SpanId>,
    /// Exactly this service.
    pub service: Option<String>,
    /// At least this OTLP severity number.
    pub min_severity: Option<i32>,
    /// Event names starting so (`gen_ai.` for GenAI events).
    pub event_prefix: Option<String>,
    pub from_unix_nano: Option<u64>,
    pub to_unix_nano: Option<u64>,
    pub limit: usize,
    pub cursor: Option<LogCursor>,
}

/// Where the next page of a log search starts: (time, sequence) of the last record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogCursor {
    pub time_unix_nano: u64,
    pub seq: i64,
}

/// A stored log record and its place in the order of a search.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredLog {
    pub seq: i64,
    pub record: LogRecord,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LogPage {
    pub logs: Vec<StoredLog>,
    pub next_cursor: Option<LogCursor>,
}
