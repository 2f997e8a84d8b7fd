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

use crate::series::{Dimension, Level, SeriesRef};

/// One span on a request's critical path and the time it accounts for.
#[derive(Clone, Debug, PartialEq)]
pub struct PathPart {
    pub span: usize,
    pub critical_ns: u64,
    pub model_call: bool,
}

/// A dimension's value on one span: its service (for `UpstreamService`, the span is the
/// upstream one), its model's family, or a field of its view.
fn read(dim: Dimension, span: &SpanRecord) -> Option<&str> {
    let text = |get: fn(&LlmView) -> Option<&String>| view(span).and_then(get).map(String::as_str);
    match dim {
        Dimension::Service | Dimension::UpstreamService => Some(&span.service),
        Dimension::Model => view(span)?.model().map(threadline_model::model_family),
        Dimension::Route => text(|l| l.route.as_ref()),
        Dimension::Adapter => text(|l| l.adapter_id.as_ref()),
        Dimension::Instance => text(|l| l.instance_id.as_ref()),
        Dimension::Image => text(|l| l.image.as_ref()),
        Dimension::PromptVersion => text(|l| l.prompt_template_version.as_ref()),
        Dimension::AbGroup => text(|l| l.ab_group.as_ref()),
        Dimension::GrayTag => text(|l| l.gray_tag.as_ref()),
        Dimension::Provider => text(|l| l.provider.as_ref()),
    }
}

/// Where a series dimension's value is: span `span` of the batch, its field `field`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Source {
    span: u32,
    field: Dimension,
}

/// The first of `candidates` (span indexes) whose `field` has a value.
fn source(
    spans: &[SpanRecord],
    field: Dimension,
    candidates: impl IntoIterator<Item = usize>,
) -> Option<Source> {
    candidates
        .into_iter()
        .find(|&j| read(field, &spans[j]).is_some())
        .map(|j| Source {
            span: j as u32,
            field,
        })
}

/// One request or model call, with its series.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The span measured: a request's entry span, or the model call.
    pub span: usize,
    level: Level,
    /// Where each dimension's value is (by `Dimension` order); none: `""`.
    dims: [Option<Source>; 11],
    /// A request's first model call (its model fields and time to first token).
    pub call: Option<usize>,
    /// The spans whose tokens count: a request's model calls (each usage once), a
    /// model call itself.
    pub usage: Vec<usize>,
    /// A request's critical path.
    pub path: Vec<PathPart>,
}

impl Observed {
    /// Its series, borrowed from `spans` (the spans it was observed among).
    pub fn series<'a>(&self, spans: &'a [SpanRecord]) -> SeriesRef<'a> {
        SeriesRef::new(
            self.level,
            self.dims.map(|d| {
                d.and_then(|d| read(d.field, &spans[d.span as usize]))
                    .unwrap_or_default()
            }),
        )
    }

    pub fn level(&self) -> Level {
        self.level
    }

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

/// The upstream service of span `i`: the nearest ancestor's of another service.
fn upstream(spans: &[SpanRecord], tree: &Tree, i: usize) -> Option<Source> {
    tree.ancestors(i)
        .find(|&p| spans[p].service != spans[i].service)
        .map(|p| Source {
            span: p as u32,
            field: Dimension::UpstreamService,
        })
}

fn model_call(spans: &[SpanRecord], tree: &Tree, i: usize) -> Observed {
    // Its own fields; route, A/B group and gray tag inherited from the nearest
    // ancestor that has them.
    let own = |field| source(spans, field, [i]);
    let inherited = |field| source(spans, field, std::iter::once(i).chain(tree.ancestors(i)));
    Observed {
        span: i,
        level: Level::Call,
        dims: [
            own(Dimension::Service),
            inherited(Dimension::Route),
            own(Dimension::Model),
            own(Dimension::Adapter),
            own(Dimension::Instance),
            own(Dimension::Image),
            own(Dimension::PromptVersion),
            inherited(Dimension::AbGroup),
            inherited(Dimension::GrayTag),
            own(Dimension::Provider),
            upstream(spans, tree, i),
        ],
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
    // A model field from the call, else from the entry; a request-context field
    // from the entry, else from the call.
    let field = |f| source(spans, f, call.into_iter().chain([entry]));
    let context = |f| source(spans, f, std::iter::once(entry).chain(call));
    let dims = [
        source(spans, Dimension::Service, [entry]),
        context(Dimension::Route),
        field(Dimension::Model),
        field(Dimension::Adapter),
        field(Dimension::Instance),
        field(Dimension::Image),
        field(Dimension::PromptVersion),
        context(Dimension::AbGroup),
        context(Dimension::GrayTag),
        field(Dimension::Provider),
        upstream(spans, tree, entry),
    ];
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
        level: Level::Request,
        dims,
        call,
        usage,
        path,
    }
}
