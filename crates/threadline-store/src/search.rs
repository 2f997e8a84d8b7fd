//! What a trace search asks (`TraceQuery`) and answers (`TracePage` of
//! `TraceSummary`s, newest trace start first, with a cursor): the same for every
//! backend.

use threadline_model::TraceId;

/// Filters of a trace search. Every set filter must hold on some span of the trace.
#[derive(Clone, Debug, Default)]
pub struct TraceQuery {
    /// A service name or its beginning, in any case.
    pub service: Option<String>,
    pub span_name: Option<String>,
    /// A model name or its beginning, in any case: the requested model or the one
    /// that responded.
    pub model: Option<String>,
    pub route: Option<String>,
    pub adapter: Option<String>,
    pub ab_group: Option<String>,
    pub session_id: Option<String>,
    pub user_id: Option<String>,
    /// Free text: every word in a span's name or texts (prompts, completions,
    /// messages, exceptions; `SpanDetail::for_each_text`), in any case, the last word
    /// by prefix. Text without a word filters nothing.
    pub text: Option<String>,
    pub errors_only: bool,
    pub min_duration_nanos: Option<u64>,
    pub max_duration_nanos: Option<u64>,
    pub start_from_unix_nano: Option<u64>,
    pub start_to_unix_nano: Option<u64>,
    /// `attr.KEY=VALUE` filters, matched against span then resource attributes.
    pub attributes: Vec<(String, String)>,
    /// How `service` and `model` match stored names.
    pub names: NameMatch,
    pub limit: usize,
    pub cursor: Option<TraceCursor>,
}

impl TraceQuery {
    /// Attribute filters one search may carry: each is a condition on every block
    /// and span read, and the database bounds a statement's arguments.
    pub const MAX_ATTRIBUTE_FILTERS: usize = 64;

    /// Why this query cannot run as asked, if it cannot.
    pub fn problem(&self) -> Option<String> {
        (self.attributes.len() > Self::MAX_ATTRIBUTE_FILTERS).then(|| {
            format!(
                "{} attribute filters given: a search takes at most {}",
                self.attributes.len(),
                Self::MAX_ATTRIBUTE_FILTERS
            )
        })
    }
}

/// How a service or model filter matches stored names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NameMatch {
    /// Equal or starting with the filter, ignoring case (what people type).
    #[default]
    Prefix,
    /// Exactly equal (what a picker of stored names sends, as Jaeger's UI does).
    Exact,
}

/// Where the next page starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceCursor {
    pub start_unix_nano: u64,
    pub trace_id: TraceId,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TraceSummary {
    pub trace_id: TraceId,
    pub root_service: String,
    pub root_name: String,
    pub start_time_unix_nano: u64,
    pub duration_nanos: u64,
    pub span_count: usize,
    pub error: bool,
    pub models: Vec<String>,
    pub total_tokens: i64,
    /// Tokens by model, of the spans that count toward `total_tokens`: what a price
    /// table turns into the trace's cost.
    pub usage: Vec<ModelUsage>,
    /// The first session and user its spans name (by start time).
    pub session_id: Option<String>,
    pub user_id: Option<String>,
}

/// Tokens one model consumed and produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelUsage {
    pub model: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TracePage {
    pub traces: Vec<TraceSummary>,
    pub next_cursor: Option<TraceCursor>,
}
