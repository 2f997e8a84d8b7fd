//! Rollups: per-minute aggregates of requests and model calls (see `observe`), one
//! cell per series (the level and the values of the dimensions an observation
//! carried) and minute of span start time. Cells merge, so a minute can be built from
//! any number of export requests in any order, and a query merges cells over series
//! and minutes.

// Seeded per process: keys come from senders, so a fixed hash could be flooded.
use foldhash::HashMap;

use threadline_model::SpanRecord;

pub use crate::cell::{BatchCell, RollupCell};
use crate::observe::{observe, Observed};
pub use crate::series::{
    matches, matches_at, minute_of, Dimension, Level, SeriesKey, SeriesRef, BUCKET_NS,
};

/// Cells keyed by (minute, series): what one export request adds, and what the
/// writer accumulates between flushes.
#[derive(Clone, Debug, Default)]
pub struct Rollups {
    cells: HashMap<(i64, SeriesKey), RollupCell>,
}

impl Rollups {
    /// The requests and model calls among `spans`, by minute and series.
    pub fn of_spans(spans: &[SpanRecord]) -> Self {
        Self::of_observed(spans, &observe(spans))
    }

    /// `observed` (what `observe` found among `spans`), by minute and series.
    pub fn of_observed(spans: &[SpanRecord], observed: &[Observed]) -> Self {
        let mut rollups = Self::default();
        rollups.absorb_batch(BatchRollups::of_observed(spans, observed));
        rollups
    }

    /// `subject` replaced by `with` in every key and cell that holds it (keys that then
    /// coincide merge): an erasure's copy in cells not stored yet. How many changed.
    pub fn redact(&mut self, subject: &str, with: &str) -> usize {
        let named: Vec<(i64, SeriesKey)> = self
            .cells
            .iter()
            .filter(|((_, k), c)| {
                k.redacted(subject, with).is_some() || c.redacted(subject, with).is_some()
            })
            .map(|(at, _)| at.clone())
            .collect();
        for (minute, key) in &named {
            if let Some(cell) = self.cells.remove(&(*minute, key.clone())) {
                let cell = cell.redacted(subject, with).unwrap_or(cell);
                let key = key.redacted(subject, with).unwrap_or_else(|| key.clone());
                self.cells.entry((*minute, key)).or_default().merge(&cell);
            }
        }
        named.len()
    }

    /// Merges the cells of one export request.
    pub fn absorb_batch(&mut self, batch: BatchRollups) {
        use std::collections::hash_map::Entry;
        for (at, cell) in batch.cells {
            match self.cells.entry(at) {
                Entry::Occupied(mut e) => e.get_mut().absorb_batch(cell),
                Entry::Vacant(e) => {
                    e.insert(cell.into_cell());
                }
            }
        }
    }

    pub fn absorb(&mut self, other: Rollups) {
        use std::collections::hash_map::Entry;
        for (at, cell) in other.cells {
            match self.cells.entry(at) {
                Entry::Occupied(mut e) => e.get_mut().merge(&cell),
                Entry::Vacant(e) => {
                    e.insert(cell);
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&(i64, SeriesKey), &RollupCell)> {
        self.cells.iter()
    }
}

/// The cells of one export request (`BatchCell`s: values, not sketches), by minute
/// and series: what a batch carries to the writer, merged into `Rollups` there.
#[derive(Clone, Debug, Default)]
pub struct BatchRollups {
    cells: Vec<((i64, SeriesKey), BatchCell)>,
}

impl BatchRollups {
    /// `observed` (what `observe` found among `spans`), by minute and series.
    pub fn of_observed(spans: &[SpanRecord], observed: &[Observed]) -> Self {
        // Keyed by the series borrowed from the spans: a batch has a few series, and
        // a key (eleven strings) is allocated once per cell, not per observation.
        let mut by_key: HashMap<(i64, SeriesRef<'_>), BatchCell> = HashMap::default();
        for o in observed {
            let span = &spans[o.span];
            let minute = minute_of(span.start_time_unix_nano.min(i64::MAX as u64) as i64);
            by_key
                .entry((minute, o.series(spans)))
                .or_default()
                .observe(spans, o);
        }
        Self {
            cells: by_key
                .into_iter()
                .map(|((minute, key), cell)| ((minute, key.to_key()), cell))
                .collect(),
        }
    }
}

/// Cells at `level` that pass `filter`, merged per `group_by` projection and per step
/// of `step_minutes` counted from `origin_minute` (the key of each step is its first
/// minute).
pub fn group_cells<'a>(
    cells: impl IntoIterator<Item = &'a (i64, SeriesKey, RollupCell)>,
    level: Level,
    filter: &[(Dimension, String)],
    group_by: &[Dimension],
    step_minutes: i64,
    origin_minute: i64,
) -> std::collections::BTreeMap<SeriesKey, std::collections::BTreeMap<i64, RollupCell>> {
    let step = step_minutes.max(1);
    let mut out: std::collections::BTreeMap<
        SeriesKey,
        std::collections::BTreeMap<i64, RollupCell>,
    > = Default::default();
    for (minute, key, cell) in cells {
        if !matches_at(key, level, filter) {
            continue;
        }
        let bucket = origin_minute + (minute - origin_minute).div_euclid(step) * step;
        out.entry(key.project(group_by))
            .or_default()
            .entry(bucket)
            .or_default()
            .merge(cell);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use threadline_model::{LlmView, SpanDetail, SpanId, SpanKind, TraceId};

    pub(crate) fn request(start_s: i64, ms: f64, route: &str, adapter: &str) -> SpanRecord {
        SpanRecord {
            trace_id: TraceId([1; 16]),
            span_id: SpanId([2; 8]),
            parent_span_id: None,
            name: "chat".into(),
            service: "gateway".into(),
            kind: SpanKind::Server,
            start_time_unix_nano: (start_s * 1_000_000_000) as u64,
            end_time_unix_nano: (start_s * 1_000_000_000 + (ms * 1e6) as i64) as u64,
            detail: SpanDetail::default(),
            origin: Arc::default(),
            llm: Some(LlmView {
                route: (!route.is_empty()).then(|| route.into()),
                adapter_id: Some(adapter.into()),
                request_model: Some("llama".into()),
                output_tokens: Some(100),
                ttft_ms: Some(ms / 2.0),
                kv_cache_hit_ratio: Some(0.5),
                ..LlmView::default()
            }),
        }
    }

    fn span_id(n: u8) -> SpanId {
        SpanId([n; 8])
    }

    #[test]
    fn a_dated_snapshot_rolls_up_with_its_family() {
        let mut dated = request(60, 100.0, "", "a");
        dated.llm.as_mut().unwrap().request_model = Some("gpt-4o-mini-2024-07-18".into());
        let mut plain = request(60, 200.0, "", "a");
        plain.span_id = span_id(3);
        plain.llm.as_mut().unwrap().request_model = Some("gpt-4o-mini".into());
        let rollups = Rollups::of_spans(&[dated, plain]);
        let models: Vec<&str> = rollups
            .cells
            .keys()
            .map(|(_, k)| k.get(Dimension::Model))
            .collect();
        assert_eq!(models, ["gpt-4o-mini"]);
        assert_eq!(rollups.cells.values().next().unwrap().requests, 2);
    }

    #[test]
    fn cells_split_by_level_minute_and_series_and_merge() {
        let mut spans = vec![
            request(60, 100.0, "/v1/chat", "a"),
            request(119, 300.0, "/v1/chat", "a"),
            request(120, 200.0, "/v1/chat", "a"),
            request(60, 100.0, "/v1/chat", "b"),
        ];
        for (n, s) in spans.iter_mut().enumerate() {
            s.span_id = span_id(n as u8 + 1);
        }
        let rollups = Rollups::of_spans(&spans);
        // Each span is a request (it carries the route) and a model call.
        assert_eq!(rollups.len(), 6);
        let key = |level| {
            SeriesKey::at(level)
                .with(Dimension::Service, "gateway")
                .with(Dimension::Route, "/v1/chat")
                .with(Dimension::Model, "llama")
                .with(Dimension::Adapter, "a")
        };
        for level in Level::ALL {
            let cell = rollups.cells.get(&(1, key(level))).expect("minute 1");
            assert_eq!(cell.requests, 2);
            let max = cell.latency_ms.quantile(1.0).unwrap().unwrap();
            assert!((max - 300.0).abs() < 3.5, "{max}");
            // 100 tokens over 50 ms and 150 ms of generation.
            assert!((cell.gen_tokens as f64 / cell.gen_seconds - 1000.0).abs() < 1e-6);
            let mut merged = cell.clone();
            merged.merge(rollups.cells.get(&(2, key(level))).unwrap());
            assert_eq!(merged.requests, 3);
            assert!((RollupCell::count_above(&merged.latency_ms, 150.0) - 2.0).abs() < 0.1);
        }
        for level in Level::ALL {
            let k = key(level);
            assert_eq!(SeriesKey::from_text(&k.to_text()), Some(k));
        }
        // Keys stored before levels read as model calls.
        let legacy = r#"["vllm","/v1/chat","llama"]"#;
        let k = SeriesKey::from_text(legacy).unwrap();
        assert_eq!((k.level(), k.get(Dimension::Model)), (Level::Call, "llama"));
    }

    /// A batch's cells merged as values (`absorb_batch`) equal the cells observed one
    /// by one into sketches, whether the series is new or already held.
    #[test]
    fn batch_cells_merge_as_if_observed_into_the_cell() {
        let spans: Vec<SpanRecord> = (0..6u8)
            .map(|n| {
                let mut s = request(60, 50.0 * f64::from(n + 1), "/v1/chat", "a");
                s.span_id = span_id(n + 1);
                s
            })
            .collect();
        let found = observe(&spans);
        let mut by_hand: std::collections::HashMap<(i64, SeriesKey), RollupCell> =
            Default::default();
        for o in &found {
            let at = (1, o.series(&spans).to_key());
            by_hand.entry(at).or_default().observe(&spans, o);
        }
        let (first, second) = found.split_at(5);
        let mut rollups = Rollups::default();
        rollups.absorb_batch(BatchRollups::of_observed(&spans, first));
        rollups.absorb_batch(BatchRollups::of_observed(&spans, second));
        assert_eq!(rollups.len(), by_hand.len());
        for (at, cell) in &by_hand {
            let got = &rollups.cells[at];
            assert_eq!(
                (got.requests, got.output_tokens, got.latency_ms.count()),
                (cell.requests, cell.output_tokens, cell.latency_ms.count())
            );
            for q in [0.5, 0.99] {
                assert_eq!(
                    got.latency_ms.quantile(q).unwrap(),
                    cell.latency_ms.quantile(q).unwrap()
                );
                assert_eq!(
                    got.ttft_ms.quantile(q).unwrap(),
                    cell.ttft_ms.quantile(q).unwrap()
                );
            }
            assert_eq!(got.span_time, cell.span_time);
        }
    }

    /// gateway (route, A/B group) → retriever (plain) → LLM call (vllm, adapter) and a
    /// tool: one request on the gateway, whole, with the call's model fields and the
    /// time of each part; one model call on its own duration, with the gateway's route.
    #[test]
    fn a_request_is_its_entry_span_whole_and_a_model_call_its_own_span() {
        let ms = 1_000_000u64;
        let at = |n: u8, parent: Option<u8>, service: &str, name: &str, from: u64, to: u64| {
            let mut s = request(0, 0.0, "", "");
            s.span_id = span_id(n);
            s.parent_span_id = parent.map(span_id);
            s.service = service.into();
            s.name = name.into();
            s.start_time_unix_nano = from * ms;
            s.end_time_unix_nano = to * ms;
            s.llm = None;
            s
        };
        let mut gateway = at(1, None, "gateway", "POST /v1/chat", 0, 1000);
        gateway.llm = Some(LlmView {
            route: Some("/v1/chat".into()),
            ab_group: Some("B".into()),
            ..LlmView::default()
        });
        let retriever = at(2, Some(1), "docs-index", "search_docs", 10, 310);
        let mut call = at(3, Some(1), "vllm", "chat llama", 320, 950);
        call.llm = Some(LlmView {
            request_model: Some("llama".into()),
            adapter_id: Some("fin@7".into()),
            output_tokens: Some(100),
            ttft_ms: Some(80.0),
            ..LlmView::default()
        });
        let mut tool = at(4, Some(1), "gateway", "execute_tool lookup", 950, 990);
        tool.llm = Some(LlmView {
            tool_name: Some("lookup".into()),
            ..LlmView::default()
        });
        let spans = vec![gateway, retriever, call, tool];
        let found = observe(&spans);
        assert_eq!(found.len(), 2, "{found:#?}");
        let req = found.iter().find(|o| o.level() == Level::Request).unwrap();
        assert_eq!(req.span, 0);
        assert_eq!(req.call, Some(2));
        let k = req.series(&spans);
        assert_eq!(
            [
                k.get(Dimension::Service),
                k.get(Dimension::Route),
                k.get(Dimension::Model),
                k.get(Dimension::Adapter),
                k.get(Dimension::AbGroup)
            ],
            ["gateway", "/v1/chat", "llama", "fin@7", "B"]
        );
        let call = found.iter().find(|o| o.level() == Level::Call).unwrap();
        assert_eq!(call.span, 2);
        let k = call.series(&spans);
        assert_eq!(
            [
                k.get(Dimension::Service),
                k.get(Dimension::Route),
                k.get(Dimension::AbGroup),
                k.get(Dimension::UpstreamService)
            ],
            ["vllm", "/v1/chat", "B", "gateway"]
        );
        let rollups = Rollups::of_observed(&spans, &found);
        let request_cell = rollups
            .iter()
            .find(|((_, k), _)| k.level() == Level::Request)
            .map(|(_, c)| c)
            .unwrap();
        assert_eq!(request_cell.latency_ms.count(), 1);
        let p50 = request_cell.latency_ms.quantile(0.5).unwrap().unwrap();
        assert!((p50 - 1000.0).abs() < 15.0, "the whole request: {p50}");
        // The first token, from the request's start: 320 ms + 80 ms.
        let ttft = request_cell.ttft_ms.quantile(0.5).unwrap().unwrap();
        assert!((ttft - 400.0).abs() < 6.0, "{ttft}");
        let time = |service: &str, name: &str| {
            request_cell
                .span_time
                .get(&crate::cell::SpanSlot {
                    service: service.into(),
                    name: name.into(),
                })
                .map(|t| t.critical_ms)
        };
        assert_eq!(time("docs-index", "search_docs"), Some(300.0));
        assert_eq!(time("vllm", "chat llama"), Some(630.0));
        assert_eq!(time("gateway", "execute_tool lookup"), Some(40.0));
        assert_eq!(time("gateway", "POST /v1/chat"), Some(30.0));
        let total: f64 = request_cell.span_time.values().map(|t| t.critical_ms).sum();
        assert!((total - 1000.0).abs() < 1e-9);
        assert_eq!(request_cell.gen_tokens, 100);
    }

    #[test]
    fn a_plain_routed_span_alone_is_a_request_and_tools_are_neither() {
        let mut plain = request(0, 5.0, "/healthz", "");
        plain.llm = Some(LlmView {
            route: Some("/healthz".into()),
            ..LlmView::default()
        });
        let mut tool = request(0, 5.0, "", "");
        tool.span_id = span_id(9);
        tool.llm = Some(LlmView {
            tool_name: Some("search".into()),
            ..LlmView::default()
        });
        let found = observe(&[plain, tool]);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].span, found[0].level(), found[0].call),
            (0, Level::Request, None)
        );
    }

    #[test]
    fn a_cell_keeps_at_most_its_share_of_span_parts() {
        let mut cell = RollupCell::default();
        for n in 0..(crate::cell::MAX_SPAN_SLOTS + 10) {
            let mut other = RollupCell::default();
            other.span_time.insert(
                crate::cell::SpanSlot {
                    service: "svc".into(),
                    name: format!("GET /users/{n}"),
                },
                crate::cell::SlotTime {
                    critical_ms: 1.0,
                    spans: 1,
                    model_call: false,
                },
            );
            cell.merge(&other);
        }
        assert_eq!(cell.span_time.len(), crate::cell::MAX_SPAN_SLOTS + 1);
        let other = &cell.span_time[&crate::cell::SpanSlot::other()];
        assert_eq!(other.spans, 10);
    }
}
