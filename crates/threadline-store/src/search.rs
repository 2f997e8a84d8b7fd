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
    /// Read every window even past the store's first-page time budget (a caller that
    /// cannot page, as Jaeger's API). Otherwise a store that scans (ClickHouse without
    /// skip indexes) may answer a first page with the traces that started in the span
    /// it searched in time (`TracePage::searched_from_unix_nano`).
    pub exhaustive: bool,
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

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TracePage {
    pub traces: Vec<TraceSummary>,
    pub next_cursor: Option<TraceCursor>,
    /// Set when the page is a first page cut short by the store's time budget: it holds
    /// every matching trace that started at or after this time (fewer than the limit),
    /// none older were searched yet, and `next_cursor` goes on with them.
    pub searched_from_unix_nano: Option<u64>,
}

impl TracePage {
    /// A page of `limit` from traces found newest first, one more than `limit` saying
    /// there is a next page (its cursor: the last trace kept).
    pub(crate) fn of_found(mut found: Vec<TraceSummary>, limit: usize) -> Self {
        let has_more = found.len() > limit;
        found.truncate(limit);
        let next_cursor = if has_more {
            found.last().map(|t| TraceCursor {
                start_unix_nano: t.start_time_unix_nano,
                trace_id: t.trace_id,
            })
        } else {
            None
        };
        Self {
            traces: found,
            next_cursor,
            searched_from_unix_nano: None,
        }
    }

    /// A first page cut short: `found` holds every matching trace that started at or
    /// after `searched_from` (newest first); older ones are the next page's. More than
    /// `limit` of them make an ordinary full page.
    pub(crate) fn searched_from(
        found: Vec<TraceSummary>,
        limit: usize,
        searched_from: u64,
    ) -> Self {
        if found.len() > limit {
            return Self::of_found(found, limit);
        }
        Self {
            traces: found,
            // Every trace that started before it (the cursor's id is the least).
            next_cursor: Some(TraceCursor {
                start_unix_nano: searched_from,
                trace_id: TraceId([0; 16]),
            }),
            searched_from_unix_nano: Some(searched_from),
        }
    }
}

impl TraceSummary {
    /// The summary of a trace from its spans' skeletons (any order): root, start,
    /// duration, models and token usage (agent spans that repeat their LLM calls'
    /// usage counted once), session and user.
    pub(crate) fn of_skeleton(trace_id: TraceId, heads: &[crate::SkeletonSpan]) -> Self {
        use std::collections::HashSet;
        use threadline_model::SpanId;
        let ids: HashSet<SpanId> = heads.iter().map(|h| h.span_id).collect();
        // The root: a span without a parent in this trace, earliest first.
        let root = heads
            .iter()
            .filter(|h| h.parent_span_id.is_none_or(|p| !ids.contains(&p)))
            .min_by_key(|h| h.start_time_unix_nano)
            .or_else(|| heads.iter().min_by_key(|h| h.start_time_unix_nano));
        let start = heads
            .iter()
            .map(|h| h.start_time_unix_nano)
            .min()
            .unwrap_or(0);
        let end = heads
            .iter()
            .map(|h| h.end_time_unix_nano)
            .max()
            .unwrap_or(0);
        let mut models: Vec<String> = heads.iter().filter_map(|h| h.model.clone()).collect();
        models.sort();
        models.dedup();
        // Agent spans repeat the usage of the LLM calls below them: count only spans whose
        // children carry no token counts.
        let parents_with_tokenized_children: HashSet<SpanId> = heads
            .iter()
            .filter(|h| h.total_tokens.is_some())
            .filter_map(|h| h.parent_span_id)
            .collect();
        let counted = || {
            heads
                .iter()
                .filter(|h| !parents_with_tokenized_children.contains(&h.span_id))
        };
        let total_tokens = counted().filter_map(|h| h.total_tokens).sum();
        let mut usage: Vec<ModelUsage> = Vec::new();
        for h in counted().filter(|h| h.input_tokens.is_some() || h.output_tokens.is_some()) {
            let model = h.model.clone().unwrap_or_default();
            let at = match usage.iter().position(|u| u.model == model) {
                Some(at) => at,
                None => {
                    usage.push(ModelUsage {
                        model,
                        ..ModelUsage::default()
                    });
                    usage.len() - 1
                }
            };
            usage[at].input_tokens += h.input_tokens.unwrap_or(0).max(0);
            usage[at].output_tokens += h.output_tokens.unwrap_or(0).max(0);
        }
        let (session_id, user_id) = crate::SkeletonSpan::session_and_user(heads);
        TraceSummary {
            session_id: session_id.cloned(),
            user_id: user_id.cloned(),
            trace_id,
            root_service: root.map(|r| r.service.clone()).unwrap_or_default(),
            root_name: root.map(|r| r.name.clone()).unwrap_or_default(),
            start_time_unix_nano: start,
            duration_nanos: end.saturating_sub(start),
            span_count: heads.len(),
            error: heads.iter().any(|h| h.error),
            models,
            total_tokens,
            usage,
        }
    }
}
