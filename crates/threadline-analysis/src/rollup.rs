//! Rollups: per-minute aggregates of LLM requests, one cell per series (the values of
//! the dimensions a request carried) and minute of span start time. Cells merge, so a
//! minute can be built from any number of export requests in any order, and a query
//! merges cells over series and minutes.

use std::collections::BTreeMap;

// Seeded per process: keys come from senders, so a fixed hash could be flooded.
use foldhash::HashMap;

use serde::{Deserialize, Serialize};
use sketches_ddsketch::{Config, DDSketch};
use threadline_model::{LlmView, SpanId, SpanRecord};

/// One rollup bucket: a minute of span start time.
pub const BUCKET_NS: i64 = 60_000_000_000;

/// The minute a span time falls in, as unix minutes.
pub fn minute_of(unix_nano: i64) -> i64 {
    unix_nano.div_euclid(BUCKET_NS)
}

/// What a series is split by. Names are the API's `group_by=` / filter names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dimension {
    Service,
    Route,
    Model,
    Adapter,
    Instance,
    Image,
    PromptVersion,
    AbGroup,
    GrayTag,
    Provider,
    /// The service of the nearest ancestor span (in the export request) that belongs
    /// to another service: who called.
    UpstreamService,
}

impl Dimension {
    pub const ALL: [Dimension; 11] = [
        Dimension::Service,
        Dimension::Route,
        Dimension::Model,
        Dimension::Adapter,
        Dimension::Instance,
        Dimension::Image,
        Dimension::PromptVersion,
        Dimension::AbGroup,
        Dimension::GrayTag,
        Dimension::Provider,
        Dimension::UpstreamService,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Service => "service",
            Dimension::Route => "route",
            Dimension::Model => "model",
            Dimension::Adapter => "adapter",
            Dimension::Instance => "instance",
            Dimension::Image => "image",
            Dimension::PromptVersion => "prompt_version",
            Dimension::AbGroup => "ab_group",
            Dimension::GrayTag => "gray_tag",
            Dimension::Provider => "provider",
            Dimension::UpstreamService => "upstream_service",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The dimension values of one series; `""` where requests carried none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SeriesKey([String; 11]);

impl SeriesKey {
    pub fn get(&self, dim: Dimension) -> &str {
        &self.0[dim.index()]
    }

    pub fn with(mut self, dim: Dimension, value: impl Into<String>) -> Self {
        self.0[dim.index()] = value.into();
        self
    }

    /// The key reduced to `dims` (others blank): what a `group_by` merges under.
    pub fn project(&self, dims: &[Dimension]) -> SeriesKey {
        let mut out = SeriesKey::default();
        for &d in dims {
            out.0[d.index()] = self.0[d.index()].clone();
        }
        out
    }

    /// The LLM requests among the spans of one export request, with their series.
    ///
    /// A request is a span with an LLM view naming a model, or naming a route when no
    /// span below it in the batch names a model: a gateway span and the inference
    /// span under it are one request, counted once, on the inference span (its own
    /// duration, instance, adapter …). Route, A/B group and gray tag missing on a span
    /// are taken from its nearest ancestor in the batch that has them, as platforms
    /// set them at the gateway. Tool calls and retrievals (no route, no model) are not
    /// requests.
    pub fn requests(spans: &[SpanRecord]) -> Vec<(usize, SeriesKey)> {
        let by_id: HashMap<SpanId, usize> = spans
            .iter()
            .enumerate()
            .map(|(i, s)| (s.span_id, i))
            .collect();
        let parent = |i: usize| -> Option<usize> {
            spans[i]
                .parent_span_id
                .and_then(|p| by_id.get(&p).copied())
                .filter(|&p| p != i)
        };
        // Ancestors within the batch, nearest first; bounded, as parent links in bad
        // input may form a cycle.
        let ancestors = |i: usize| std::iter::successors(parent(i), move |&p| parent(p)).take(64);
        let names_model = |s: &SpanRecord| s.llm.as_ref().is_some_and(|l| l.model().is_some());
        // Spans with a model-naming descendant in the batch.
        let mut covered = vec![false; spans.len()];
        for (i, span) in spans.iter().enumerate() {
            if names_model(span) {
                for p in ancestors(i) {
                    if covered[p] {
                        break;
                    }
                    covered[p] = true;
                }
            }
        }
        let mut out = Vec::new();
        for (i, span) in spans.iter().enumerate() {
            let Some(llm) = span.llm.as_ref() else {
                continue;
            };
            let is_request = llm.model().is_some() || (llm.route.is_some() && !covered[i]);
            if !is_request {
                continue;
            }
            let inherited = |get: fn(&LlmView) -> Option<&String>| -> String {
                std::iter::once(i)
                    .chain(ancestors(i))
                    .find_map(|j| spans[j].llm.as_ref().and_then(get).cloned())
                    .unwrap_or_default()
            };
            let s = |v: Option<&str>| v.unwrap_or_default().to_owned();
            let upstream = ancestors(i)
                .find(|&p| spans[p].service != span.service)
                .map(|p| spans[p].service.clone())
                .unwrap_or_default();
            out.push((
                i,
                SeriesKey([
                    span.service.clone(),
                    inherited(|l| l.route.as_ref()),
                    s(llm.model()),
                    s(llm.adapter_id.as_deref()),
                    s(llm.instance_id.as_deref()),
                    s(llm.image.as_deref()),
                    s(llm.prompt_template_version.as_deref()),
                    inherited(|l| l.ab_group.as_ref()),
                    inherited(|l| l.gray_tag.as_ref()),
                    s(llm.provider.as_deref()),
                    upstream,
                ]),
            ));
        }
        out
    }

    /// A canonical text form (a JSON array), for storage.
    pub fn to_text(&self) -> String {
        serde_json::to_string(&self.0).unwrap_or_default()
    }

    /// Keys stored before a dimension was added have fewer values: the rest are blank.
    pub fn from_text(text: &str) -> Option<Self> {
        let values: Vec<String> = serde_json::from_str(text).ok()?;
        let mut key = SeriesKey::default();
        if values.len() > key.0.len() {
            return None;
        }
        for (slot, v) in key.0.iter_mut().zip(values) {
            *slot = v;
        }
        Some(key)
    }
}

/// 1% relative accuracy; values under 1 µs (in ms) share the lowest bin.
fn new_sketch() -> DDSketch {
    DDSketch::new(Config::new(0.01, 2048, 1e-3))
}

/// Aggregates of the requests of one series in one minute.
#[derive(Clone, Serialize, Deserialize)]
pub struct RollupCell {
    pub requests: u64,
    /// Requests whose span status is ERROR.
    pub errors: u64,
    pub latency_ms: DDSketch,
    pub ttft_ms: DDSketch,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Output tokens and generation seconds (duration after the first token) of the
    /// requests that report output tokens: tokens/s is their ratio.
    pub gen_tokens: u64,
    pub gen_seconds: f64,
    pub kv_hit_sum: f64,
    pub kv_hit_count: u64,
    /// Rejected requests by reason.
    pub rejections: BTreeMap<String, u64>,
    /// USD of the cell's tokens: not stored (prices change), set by `price` when read.
    #[serde(skip)]
    pub cost_usd: f64,
}

impl std::fmt::Debug for RollupCell {
    // The sketch has no Debug of its own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RollupCell")
            .field("requests", &self.requests)
            .field("errors", &self.errors)
            .field(
                "latency_p99_ms",
                &self.latency_ms.quantile(0.99).ok().flatten(),
            )
            .field("rejections", &self.rejections)
            .finish_non_exhaustive()
    }
}

impl Default for RollupCell {
    fn default() -> Self {
        Self {
            requests: 0,
            errors: 0,
            latency_ms: new_sketch(),
            ttft_ms: new_sketch(),
            input_tokens: 0,
            output_tokens: 0,
            gen_tokens: 0,
            gen_seconds: 0.0,
            kv_hit_sum: 0.0,
            kv_hit_count: 0,
            rejections: BTreeMap::new(),
            cost_usd: 0.0,
        }
    }
}

impl RollupCell {
    /// Adds one request span (the caller checked it is one).
    pub fn observe(&mut self, span: &SpanRecord) {
        self.requests += 1;
        if span.is_error() {
            self.errors += 1;
        }
        let duration_ms = span.duration_nanos() as f64 / 1e6;
        self.latency_ms.add(duration_ms);
        let Some(llm) = span.llm.as_ref() else {
            return;
        };
        let ttft = llm.ttft_ms.filter(|t| t.is_finite() && *t >= 0.0);
        if let Some(t) = ttft {
            self.ttft_ms.add(t);
        }
        let input = llm.input_tokens.unwrap_or(0).max(0) as u64;
        let output = llm.output_tokens.unwrap_or(0).max(0) as u64;
        self.input_tokens += input;
        self.output_tokens += output;
        let gen_ms = duration_ms - ttft.unwrap_or(0.0).min(duration_ms);
        if output > 0 && gen_ms > 0.0 {
            self.gen_tokens += output;
            self.gen_seconds += gen_ms / 1e3;
        }
        if let Some(kv) = llm.kv_cache_hit_ratio.filter(|k| (0.0..=1.0).contains(k)) {
            self.kv_hit_sum += kv;
            self.kv_hit_count += 1;
        }
        if let Some(reason) = &llm.rejection_reason {
            *self
                .rejections
                .entry(reason.as_str().to_owned())
                .or_default() += 1;
        }
    }

    pub fn merge(&mut self, other: &RollupCell) {
        self.requests += other.requests;
        self.errors += other.errors;
        // Both sketches come from `new_sketch`, so their configs always match.
        let _ = self.latency_ms.merge(&other.latency_ms);
        let _ = self.ttft_ms.merge(&other.ttft_ms);
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.gen_tokens += other.gen_tokens;
        self.gen_seconds += other.gen_seconds;
        self.kv_hit_sum += other.kv_hit_sum;
        self.kv_hit_count += other.kv_hit_count;
        self.cost_usd += other.cost_usd;
        for (reason, n) in &other.rejections {
            *self.rejections.entry(reason.clone()).or_default() += n;
        }
    }

    /// Prices the cell's tokens as those of `model` (a series key's model).
    pub fn price(&mut self, model: &str, table: &crate::PriceTable) {
        self.cost_usd = table.cost_usd(
            model,
            self.input_tokens.min(i64::MAX as u64) as i64,
            self.output_tokens.min(i64::MAX as u64) as i64,
        );
    }

    pub fn rejected(&self) -> u64 {
        self.rejections.values().sum()
    }

    /// Values of a sketch above `threshold`, estimated (1% accurate).
    pub fn count_above(sketch: &DDSketch, threshold: f64) -> f64 {
        let n = sketch.count();
        if n == 0 || sketch.max().is_some_and(|m| m <= threshold) {
            return 0.0;
        }
        // Bisect on q: the sketch answers value-at-quantile only, at rank
        // floor(q * (n - 1)), so the first rank above the threshold is floor(hi * (n - 1)).
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        for _ in 0..40 {
            let mid = (lo + hi) / 2.0;
            match sketch.quantile(mid) {
                Ok(Some(v)) if v > threshold => hi = mid,
                _ => lo = mid,
            }
        }
        (n as f64 - (hi * (n - 1) as f64).floor()).max(0.0)
    }
}

/// Cells merged into one.
impl<'a> FromIterator<&'a RollupCell> for RollupCell {
    fn from_iter<I: IntoIterator<Item = &'a RollupCell>>(cells: I) -> Self {
        let mut out = RollupCell::default();
        for c in cells {
            out.merge(c);
        }
        out
    }
}

/// Cells keyed by (minute, series): what one export request adds, and what the
/// writer accumulates between flushes.
#[derive(Clone, Debug, Default)]
pub struct Rollups {
    cells: HashMap<(i64, SeriesKey), RollupCell>,
}

impl Rollups {
    /// The request spans among `spans`, by minute and series.
    pub fn of_spans(spans: &[SpanRecord]) -> Self {
        Self::of_requests(spans, SeriesKey::requests(spans))
    }

    /// `requests` (what `SeriesKey::requests` found among `spans`), by minute and series.
    pub fn of_requests(spans: &[SpanRecord], requests: Vec<(usize, SeriesKey)>) -> Self {
        let mut out = Self::default();
        for (i, key) in requests {
            let span = &spans[i];
            let minute = minute_of(span.start_time_unix_nano.min(i64::MAX as u64) as i64);
            out.cells.entry((minute, key)).or_default().observe(span);
        }
        out
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

/// A series filter: every listed dimension must have the given value.
pub fn matches(key: &SeriesKey, filter: &[(Dimension, String)]) -> bool {
    filter.iter().all(|(d, v)| key.get(*d) == v)
}

/// Cells that pass `filter`, merged per `group_by` projection and per step of
/// `step_minutes` counted from `origin_minute` (the key of each step is its first
/// minute).
pub fn group_cells<'a>(
    cells: impl IntoIterator<Item = &'a (i64, SeriesKey, RollupCell)>,
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
        if !matches(key, filter) {
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
                route: Some(route.into()),
                adapter_id: Some(adapter.into()),
                output_tokens: Some(100),
                ttft_ms: Some(ms / 2.0),
                kv_cache_hit_ratio: Some(0.5),
                ..LlmView::default()
            }),
        }
    }

    #[test]
    fn cells_split_by_minute_and_series_and_merge() {
        let spans = vec![
            request(60, 100.0, "/v1/chat", "a"),
            request(119, 300.0, "/v1/chat", "a"),
            request(120, 200.0, "/v1/chat", "a"),
            request(60, 100.0, "/v1/chat", "b"),
        ];
        let rollups = Rollups::of_spans(&spans);
        assert_eq!(rollups.len(), 3);
        let key = SeriesKey::default()
            .with(Dimension::Service, "gateway")
            .with(Dimension::Route, "/v1/chat")
            .with(Dimension::Adapter, "a");
        let cell = rollups.cells.get(&(1, key.clone())).expect("minute 1");
        assert_eq!(cell.requests, 2);
        let max = cell.latency_ms.quantile(1.0).unwrap().unwrap();
        assert!((max - 300.0).abs() < 3.5, "{max}");
        // 100 tokens over 50 ms and 150 ms of generation.
        assert!((cell.gen_tokens as f64 / cell.gen_seconds - 1000.0).abs() < 1e-6);
        let mut merged = cell.clone();
        merged.merge(rollups.cells.get(&(2, key)).unwrap());
        assert_eq!(merged.requests, 3);
        assert!((RollupCell::count_above(&merged.latency_ms, 150.0) - 2.0).abs() < 0.1);
    }

    #[test]
    fn a_gateway_span_and_its_model_call_are_one_request_on_the_model_call() {
        let mut gateway = request(0, 900.0, "/v1/chat", "a");
        gateway.llm.as_mut().unwrap().ab_group = Some("B".into());
        let mut call = request(0, 700.0, "", "a");
        call.span_id = SpanId([3; 8]);
        call.parent_span_id = Some(gateway.span_id);
        call.service = "vllm".into();
        let llm = call.llm.as_mut().unwrap();
        llm.route = None;
        llm.request_model = Some("llama".into());
        let mut tool = request(0, 5.0, "", "");
        tool.span_id = SpanId([4; 8]);
        tool.parent_span_id = Some(gateway.span_id);
        tool.llm = Some(LlmView {
            tool_name: Some("search".into()),
            ..LlmView::default()
        });
        let found = SeriesKey::requests(&[gateway.clone(), call, tool]);
        assert_eq!(found.len(), 1);
        let (i, key) = &found[0];
        assert_eq!(*i, 1);
        assert_eq!(
            (
                key.get(Dimension::Service),
                key.get(Dimension::Route),
                key.get(Dimension::Model)
            ),
            ("vllm", "/v1/chat", "llama")
        );
        assert_eq!(key.get(Dimension::AbGroup), "B");
        assert_eq!(key.get(Dimension::UpstreamService), "gateway");
        assert_eq!(SeriesKey::from_text(&key.to_text()).as_ref(), Some(key));
        // Alone, the gateway span is the request.
        assert_eq!(SeriesKey::requests(&[gateway]).len(), 1);
    }
}
