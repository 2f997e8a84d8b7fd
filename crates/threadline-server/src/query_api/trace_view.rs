//! The two-step trace view: a compact, columnar skeleton of every span (so a
//! 100,000-span trace is one small response the browser lays out without building an
//! object per span), and one span's full detail with its conversation when it is
//! opened. Times in the skeleton are microseconds from the trace's start.

use std::collections::HashMap;

use serde_json::{json, Value};
use threadline_analysis::PriceTable;
use threadline_model::{LogRecord, SpanRecord};
use threadline_store::SkeletonSpan;

use crate::dto;
use threadline_model::trace_tree;

/// Interns strings into a table, returning each one's index.
#[derive(Default)]
struct Interner<'a> {
    index: HashMap<&'a str, usize>,
    table: Vec<&'a str>,
}

impl<'a> Interner<'a> {
    fn id(&mut self, s: &'a str) -> usize {
        *self.index.entry(s).or_insert_with(|| {
            self.table.push(s);
            self.table.len() - 1
        })
    }
}

/// Each span's parent and children, by index into a trace's spans (a parent outside
/// the trace, or one closing a cycle, makes the span a root).
pub(crate) struct Tree {
    pub(crate) parent: Vec<Option<usize>>,
    pub(crate) children: Vec<Vec<usize>>,
}

impl Tree {
    pub(crate) fn of(spans: &[SkeletonSpan]) -> Self {
        let t = trace_tree::Tree::of(spans.iter().map(|s| (s.span_id, s.parent_span_id)));
        Self {
            parent: t.parent,
            children: t.children,
        }
    }

    /// Self time of span `i` (ns): its duration not covered by its children.
    pub(crate) fn self_time(&self, spans: &[SkeletonSpan], i: usize) -> u64 {
        let s = &spans[i];
        let kids = self.children[i]
            .iter()
            .map(|&c| (spans[c].start_time_unix_nano, spans[c].end_time_unix_nano))
            .collect();
        trace_tree::self_time(s.start_time_unix_nano, s.end_time_unix_nano, kids)
    }

    /// Whether span `i`'s usage counts: it reports tokens and none of its children
    /// reports them again (an agent span repeats the calls below it).
    pub(crate) fn counts_usage(&self, spans: &[SkeletonSpan], i: usize) -> bool {
        let reports = |s: &SkeletonSpan| s.input_tokens.is_some() || s.output_tokens.is_some();
        reports(&spans[i]) && !self.children[i].iter().any(|&c| reports(&spans[c]))
    }

    /// The trace's cost (USD) and tokens, each usage counted once.
    pub(crate) fn usage(&self, spans: &[SkeletonSpan], prices: &PriceTable) -> (f64, i64) {
        let (mut cost, mut tokens) = (0.0, 0i64);
        for (i, s) in spans.iter().enumerate() {
            if self.counts_usage(spans, i) {
                cost += prices.cost_usd(
                    s.model.as_deref().unwrap_or_default(),
                    s.input_tokens.unwrap_or(0),
                    s.output_tokens.unwrap_or(0),
                );
                tokens += s
                    .total_tokens
                    .unwrap_or_else(|| s.input_tokens.unwrap_or(0) + s.output_tokens.unwrap_or(0));
            }
        }
        (cost, tokens)
    }
}

/// The skeleton of a non-empty trace (spans in start order, as the store gives them).
pub(crate) fn skeleton(trace_id: &str, spans: &[SkeletonSpan], prices: &PriceTable) -> Value {
    let n = spans.len();
    let tree = Tree::of(spans);
    let (parent, children) = (&tree.parent, &tree.children);
    let (start, end) = trace_tree::time_bounds(
        spans
            .iter()
            .map(|s| (s.start_time_unix_nano, s.end_time_unix_nano)),
    );
    let micros = |ns: u64| ns as f64 / 1e3;
    let self_us: Vec<f64> = (0..n).map(|i| micros(tree.self_time(spans, i))).collect();
    let critical = critical_path(spans, parent, children);
    let (cost, tokens_total) = tree.usage(spans, prices);
    let mut names = Interner::default();
    let mut services = Interner::default();
    let mut models = Interner::default();
    let mut cols = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let mut times = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut flags = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (i, s) in spans.iter().enumerate() {
        cols.0.push(Value::String(s.span_id.to_hex()));
        cols.1.push(parent[i].map_or(-1, |p| p as i64));
        cols.2.push(names.id(&s.name));
        cols.3.push(services.id(&s.service));
        times
            .0
            .push(micros(s.start_time_unix_nano.saturating_sub(start)));
        times.1.push(micros(
            s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano),
        ));
        flags.0.push(u8::from(s.error));
        flags
            .1
            .push(s.model.as_deref().map_or(-1, |m| models.id(m) as i64));
        flags.2.push(s.total_tokens);
    }
    // The conversation and end user the trace belongs to.
    let (session_id, user_id) = SkeletonSpan::session_and_user(spans);
    json!({
        "trace_id": trace_id,
        "session_id": session_id,
        "user_id": user_id,
        "span_count": n,
        "start_time_unix_nano": start.to_string(),
        "end_time_unix_nano": end.to_string(),
        "duration_ms": end.saturating_sub(start) as f64 / 1e6,
        "total_tokens": tokens_total,
        "cost_usd": cost,
        "error_count": flags.0.iter().filter(|&&e| e == 1).count(),
        "names": names.table,
        "services": services.table,
        "models": models.table,
        "spans": {
            "span_id": cols.0,
            "parent": cols.1,
            "name": cols.2,
            "service": cols.3,
            "kind": spans.iter().map(|s| s.kind.as_str()).collect::<Vec<_>>(),
            "start_us": times.0,
            "duration_us": times.1,
            "self_us": self_us,
            "error": flags.0,
            "model": flags.1,
            "tokens": flags.2,
            "children": children.iter().map(Vec::len).collect::<Vec<_>>(),
            "critical": critical,
        },
    })
}

/// Spans on the critical path (1) of each root (`trace_tree::critical_path`).
fn critical_path(
    spans: &[SkeletonSpan],
    parent: &[Option<usize>],
    children: &[Vec<usize>],
) -> Vec<u8> {
    let times: Vec<(u64, u64)> = spans
        .iter()
        .map(|s| (s.start_time_unix_nano, s.end_time_unix_nano))
        .collect();
    let roots = (0..spans.len()).filter(|&i| parent[i].is_none());
    trace_tree::critical_path(&times, children, roots)
        .into_iter()
        .map(|t| u8::from(t.is_some()))
        .collect()
}

/// One span in full, with its conversation and cost.
pub(crate) fn span_detail(span: &SpanRecord, logs: &[LogRecord], prices: &PriceTable) -> Value {
    // Self time needs the children; the skeleton has it, so it is not repeated here.
    let mut v = dto::span(span, span.duration_nanos(), prices);
    if let Value::Object(obj) = &mut v {
        obj.remove("self_time_ms");
        obj.insert(
            "logs".to_owned(),
            Value::Array(logs.iter().map(crate::dto::log_json).collect()),
        );
        let genai_logs = logs
            .iter()
            .any(|l| l.detail.event_name.starts_with("gen_ai."));
        if span.llm.is_some() || genai_logs {
            let detail = threadline_ingest::with_log_events(&span.detail, logs);
            let conversation = threadline_ingest::conversation(&detail);
            obj.insert(
                "conversation".to_owned(),
                serde_json::to_value(conversation).unwrap_or(Value::Null),
            );
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadline_model::{SpanId, SpanKind};

    fn s(id: u8, parent: Option<u8>, start: u64, end: u64) -> SkeletonSpan {
        SkeletonSpan {
            session_id: None,
            user_id: None,
            span_id: SpanId([id; 8]),
            parent_span_id: parent.map(|p| SpanId([p; 8])),
            name: format!("op-{id}"),
            service: "svc".into(),
            kind: SpanKind::Internal,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            error: false,
            model: None,
            total_tokens: None,
            input_tokens: None,
            output_tokens: None,
            location: Default::default(),
        }
    }

    #[test]
    fn skeleton_columns_self_time_and_critical_path() {
        // root 0..100; a 0..30, b 20..90 (b finishes last: critical), c under b 25..80;
        // a accounts for 0..20, before b started: on the path too.
        let mut spans = vec![
            s(1, None, 0, 100_000),
            s(2, Some(1), 0, 30_000),
            s(3, Some(1), 20_000, 90_000),
            s(4, Some(3), 25_000, 80_000),
        ];
        spans[3].model = Some("gpt-4o".into());
        spans[3].input_tokens = Some(1000);
        spans[3].output_tokens = Some(500);
        spans[3].total_tokens = Some(1500);
        let v = skeleton("t", &spans, &PriceTable::default());
        assert_eq!(v["spans"]["parent"], json!([-1, 0, 0, 2]));
        assert_eq!(v["spans"]["children"], json!([2, 0, 1, 0]));
        assert_eq!(v["spans"]["critical"], json!([1, 1, 1, 1]));
        // root self time: 100 µs minus the union 0..90 µs.
        assert_eq!(v["spans"]["self_us"][0], json!(10.0));
        assert_eq!(v["spans"]["start_us"][3], json!(25.0));
        assert_eq!(v["models"], json!(["gpt-4o"]));
        assert!((v["cost_usd"].as_f64().unwrap() - 0.0075).abs() < 1e-12);
        assert_eq!(v["total_tokens"], json!(1500));
    }

    #[test]
    fn parent_cycles_are_cut() {
        let spans = vec![
            s(1, Some(2), 0, 10),
            s(2, Some(1), 0, 10),
            s(3, Some(2), 1, 5),
        ];
        let v = skeleton("t", &spans, &PriceTable::default());
        let parents: Vec<i64> = v["spans"]["parent"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_i64().unwrap())
            .collect();
        assert_eq!(
            parents.iter().filter(|&&p| p == -1).count(),
            1,
            "{parents:?}"
        );
    }
}
