//! A trace as a tree: children under parents (orphans become extra roots), each span's
//! self time = its duration minus the union of its children's time inside it.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};
use threadline_analysis::PriceTable;
use threadline_model::{SpanId, SpanRecord};

use crate::dto;

pub(crate) fn trace_tree(spans: &[SpanRecord], prices: &PriceTable) -> Value {
    let ids: HashSet<SpanId> = spans.iter().map(|s| s.span_id).collect();
    let mut children: HashMap<SpanId, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        match s.parent_span_id.filter(|p| ids.contains(p)) {
            Some(p) if p != s.span_id => children.entry(p).or_default().push(i),
            _ => roots.push(i),
        }
    }
    let (start, end) = time_bounds(
        spans
            .iter()
            .map(|s| (s.start_time_unix_nano, s.end_time_unix_nano)),
    );
    let mut visited = HashSet::new();
    let tree: Vec<Value> = roots
        .iter()
        .map(|&i| node(spans, i, &children, &mut visited, prices))
        .collect();
    let mut services: Vec<&str> = spans.iter().map(|s| s.service.as_str()).collect();
    services.sort_unstable();
    services.dedup();
    json!({
        "trace_id": spans.first().map(|s| s.trace_id.to_hex()),
        "span_count": spans.len(),
        "start_time_unix_nano": start.to_string(),
        "end_time_unix_nano": end.to_string(),
        "duration_ms": end.saturating_sub(start) as f64 / 1e6,
        "services": services,
        "cost_usd": trace_cost(spans, prices),
        "roots": tree,
    })
}

/// The earliest start and the latest end of (start, end) pairs; (0, 0) for none.
pub(crate) fn time_bounds(spans: impl Iterator<Item = (u64, u64)>) -> (u64, u64) {
    spans
        .fold(None, |acc: Option<(u64, u64)>, (s, e)| {
            Some(acc.map_or((s, e), |(a, b)| (a.min(s), b.max(e))))
        })
        .unwrap_or((0, 0))
}

/// USD of a trace: its LLM spans' tokens, leaving out spans whose children report
/// tokens (agent spans repeat the usage of the calls below them), as summaries do.
fn trace_cost(spans: &[SpanRecord], prices: &PriceTable) -> f64 {
    let reports = |s: &SpanRecord| {
        s.llm
            .as_ref()
            .is_some_and(|l| l.input_tokens.is_some() || l.output_tokens.is_some())
    };
    let repeated: HashSet<SpanId> = spans
        .iter()
        .filter(|s| reports(s))
        .filter_map(|s| s.parent_span_id)
        .collect();
    spans
        .iter()
        .filter(|s| !repeated.contains(&s.span_id))
        .filter_map(|s| s.llm.as_ref().and_then(|l| dto::span_cost(l, prices)))
        .sum()
}

fn node(
    spans: &[SpanRecord],
    i: usize,
    children: &HashMap<SpanId, Vec<usize>>,
    visited: &mut HashSet<usize>,
    prices: &PriceTable,
) -> Value {
    visited.insert(i);
    let s = &spans[i];
    let kids: Vec<usize> = children
        .get(&s.span_id)
        .map(|k| k.iter().copied().filter(|c| !visited.contains(c)).collect())
        .unwrap_or_default();
    let intervals: Vec<(u64, u64)> = kids
        .iter()
        .map(|&c| (spans[c].start_time_unix_nano, spans[c].end_time_unix_nano))
        .collect();
    let self_time = self_time(s.start_time_unix_nano, s.end_time_unix_nano, intervals);
    let mut v = dto::span(s, self_time, prices);
    let child_values: Vec<Value> = kids
        .iter()
        .map(|&c| node(spans, c, children, visited, prices))
        .collect();
    if let Value::Object(obj) = &mut v {
        obj.insert("children".to_owned(), Value::Array(child_values));
    }
    v
}

/// Duration of `[start, end]` not covered by any child interval (clipped to the span).
pub(crate) fn self_time(start: u64, end: u64, mut children: Vec<(u64, u64)>) -> u64 {
    children.sort_unstable();
    let mut covered = 0u64;
    let mut cursor = start;
    for (s, e) in children {
        let s = s.max(cursor);
        let e = e.min(end);
        if e > s {
            covered += e - s;
            cursor = e;
        }
    }
    end.saturating_sub(start).saturating_sub(covered)
}

#[cfg(test)]
mod tests {
    use super::self_time;

    #[test]
    fn self_time_subtracts_the_union_of_children() {
        assert_eq!(self_time(0, 100, vec![]), 100);
        assert_eq!(self_time(0, 100, vec![(10, 30), (20, 40)]), 70);
        assert_eq!(self_time(0, 100, vec![(90, 150), (0, 5)]), 85);
        assert_eq!(self_time(0, 100, vec![(0, 100), (10, 20)]), 0);
    }
}
