//! What the rollups count among the spans of one export request: **requests**, as
//! their callers see them, and **model calls**.
//!
//! - A request is the entry span of a route: a span whose view carries a route (its
//!   own — `api.route`, `http.route` …) with no ancestor in the export request that
//!   carries one. It is measured whole — retrieval, tools, queueing and upstream
//!   services included — and takes its model fields (model, adapter, instance, image,
//!   prompt version, provider) from its first model call below, its A/B group and gray
//!   tag from itself or that call, its tokens from every model call below it. Its
//!   critical path says where its time went.
//! - A model call is a span whose view names a model, measured on its own duration;
//!   its route, A/B group and gray tag are inherited from its nearest ancestor in the
//!   export request that has them, as platforms set them at the gateway.
//!
//! A span may be both (a vLLM span that carries the route): it is counted once at
//! each level. Parts of a request sent in other export requests (another process's
//! spans) are not joined to it.

use threadline_model::trace_tree::{self, Tree};
use threadline_model::{LlmView, SpanRecord};

use crate::series::{Dimension, Level, SeriesKey};

/// One span on a request's critical path and the time it accounts for.
#[derive(Clone, Debug, PartialEq)]
pub struct PathPart {
    pub span: usize,
    pub critical_ns: u64,
    pub model_call: bool,
}

/// One request or model call, with its series.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The span measured: a request's entry span, or the model call.
    pub span: usize,
    pub key: SeriesKey,
    /// A request's first model call (its model fields and time to first token).
    pub call: Option<usize>,
    /// The spans whose tokens count: a request's model calls (each usage once), a
    /// model call itself.
    pub usage: Vec<usize>,
    /// A request's critical path.
    pub path: Vec<PathPart>,
}

impl Observed {
    /// The time to the first token as the caller waits for it: the model call's, plus
    /// how long after the request's start the call began (ms).
    pub fn ttft_ms(&self, spans: &[SpanRecord]) -> Option<f64> {
        let span = &spans[self.span];
        let call = &spans[self.call.unwrap_or(self.span)];
        let ttft = view(call)?.ttft_ms.filter(|t| t.is_finite() && *t >= 0.0)?;
        Some(
            ttft + call
                .start_time_unix_nano
                .saturating_sub(span.start_time_unix_nano) as f64
                / 1e6,
        )
    }

    /// Input and output tokens of its usage spans.
    pub fn tokens(&self, spans: &[SpanRecord]) -> (u64, u64) {
        self.usage
            .iter()
            .filter_map(|&u| view(&spans[u]))
            .fold((0, 0), |(i, o), l| {
                (
                    i + l.input_tokens.unwrap_or(0).max(0) as u64,
                    o + l.output_tokens.unwrap_or(0).max(0) as u64,
                )
            })
    }

    /// Whether it failed: its span's status, or its model call's.
    pub fn is_error(&self, spans: &[SpanRecord]) -> bool {
        spans[self.span].is_error() || self.call.is_some_and(|c| spans[c].is_error())
    }
}

fn view(span: &SpanRecord) -> Option<&LlmView> {
    span.llm.as_ref()
}

fn names_model(span: &SpanRecord) -> bool {
    view(span).is_some_and(|l| l.model().is_some())
}

fn reports_tokens(span: &SpanRecord) -> bool {
    view(span).is_some_and(|l| l.input_tokens.is_some() || l.output_tokens.is_some())
}

/// Every request and model call among `spans`.
pub fn observe(spans: &[SpanRecord]) -> Vec<Observed> {
    let tree = Tree::of(spans.iter().map(|s| (s.span_id, s.parent_span_id)));
    let has_route = |j: usize| view(&spans[j]).is_some_and(|l| l.route.is_some());
    let entries: Vec<usize> = (0..spans.len())
        .filter(|&i| has_route(i) && !tree.ancestors(i).any(has_route))
        .collect();
    // No entry is below another, so one walk gives every request's critical path.
    let times: Vec<(u64, u64)> = spans
        .iter()
        .map(|s| (s.start_time_unix_nano, s.end_time_unix_nano))
        .collect();
    let on = if entries.is_empty() {
        Vec::new()
    } else {
        trace_tree::critical_path(&times, &tree.children, entries.iter().copied())
    };
    let mut out: Vec<Observed> = entries
        .iter()
        .map(|&e| request(spans, &tree, &on, e))
        .collect();
    out.extend(
        (0..spans.len())
            .filter(|&i| names_model(&spans[i]))
            .map(|i| model_call(spans, &tree, i)),
    );
    out
}

fn text(v: Option<&String>) -> String {
    v.cloned().unwrap_or_default()
}

/// The upstream service of span `i`: the nearest ancestor's of another service.
fn upstream(spans: &[SpanRecord], tree: &Tree, i: usize) -> String {
    tree.ancestors(i)
        .find(|&p| spans[p].service != spans[i].service)
        .map(|p| spans[p].service.clone())
        .unwrap_or_default()
}

fn model_call(spans: &[SpanRecord], tree: &Tree, i: usize) -> Observed {
    let span = &spans[i];
    let llm = view(span).expect("a model call has a view");
    let inherited = |get: fn(&LlmView) -> Option<&String>| -> String {
        std::iter::once(i)
            .chain(tree.ancestors(i))
            .find_map(|j| view(&spans[j]).and_then(get).cloned())
            .unwrap_or_default()
    };
    let key = SeriesKey::default()
        .with(Dimension::Service, span.service.clone())
        .with(Dimension::Route, inherited(|l| l.route.as_ref()))
        .with(
            Dimension::Model,
            threadline_model::model_family(llm.model().unwrap_or_default()),
        )
        .with(Dimension::Adapter, text(llm.adapter_id.as_ref()))
        .with(Dimension::Instance, text(llm.instance_id.as_ref()))
        .with(Dimension::Image, text(llm.image.as_ref()))
        .with(
            Dimension::PromptVersion,
            text(llm.prompt_template_version.as_ref()),
        )
        .with(Dimension::AbGroup, inherited(|l| l.ab_group.as_ref()))
        .with(Dimension::GrayTag, inherited(|l| l.gray_tag.as_ref()))
        .with(Dimension::Provider, text(llm.provider.as_ref()))
        .with(Dimension::UpstreamService, upstream(spans, tree, i));
    Observed {
        span: i,
        key,
        call: None,
        usage: vec![i],
        path: Vec::new(),
    }
}

fn request(spans: &[SpanRecord], tree: &Tree, on: &[Option<u64>], entry: usize) -> Observed {
    let below = tree.subtree(entry);
    // The first model call: the entry itself if it is one, else the earliest below.
    let call = below
        .iter()
        .copied()
        .filter(|&j| names_model(&spans[j]))
        .min_by_key(|&j| (j != entry, spans[j].start_time_unix_nano, j));
    let entry_view = view(&spans[entry]);
    let call_view = call.and_then(|c| view(&spans[c]));
    // A model field from the call, else from the entry.
    let field = |get: fn(&LlmView) -> Option<&String>| -> String {
        call_view
            .and_then(get)
            .or_else(|| entry_view.and_then(get))
            .cloned()
            .unwrap_or_default()
    };
    // A request-context field from the entry, else from the call.
    let context = |get: fn(&LlmView) -> Option<&String>| -> String {
        entry_view
            .and_then(get)
            .or_else(|| call_view.and_then(get))
            .cloned()
            .unwrap_or_default()
    };
    let model = call_view
        .and_then(LlmView::model)
        .or_else(|| entry_view.and_then(LlmView::model))
        .unwrap_or_default();
    let key = SeriesKey::at(Level::Request)
        .with(Dimension::Service, spans[entry].service.clone())
        .with(Dimension::Route, context(|l| l.route.as_ref()))
        .with(Dimension::Model, threadline_model::model_family(model))
        .with(Dimension::Adapter, field(|l| l.adapter_id.as_ref()))
        .with(Dimension::Instance, field(|l| l.instance_id.as_ref()))
        .with(Dimension::Image, field(|l| l.image.as_ref()))
        .with(
            Dimension::PromptVersion,
            field(|l| l.prompt_template_version.as_ref()),
        )
        .with(Dimension::AbGroup, context(|l| l.ab_group.as_ref()))
        .with(Dimension::GrayTag, context(|l| l.gray_tag.as_ref()))
        .with(Dimension::Provider, field(|l| l.provider.as_ref()))
        .with(Dimension::UpstreamService, upstream(spans, tree, entry));
    // Each usage once: a span's tokens count unless a child reports them again (an
    // agent span repeats the calls below it).
    let usage = below
        .iter()
        .copied()
        .filter(|&j| {
            reports_tokens(&spans[j])
                && !tree.children[j].iter().any(|&c| reports_tokens(&spans[c]))
        })
        .collect();
    let path = below
        .iter()
        .filter_map(|&j| {
            on[j].map(|ns| PathPart {
                span: j,
                critical_ns: ns,
                model_call: names_model(&spans[j]),
            })
        })
        .collect();
    Observed {
        span: entry,
        key,
        call,
        usage,
        path,
    }
}
