//! `RollupCell`: the aggregates of the requests of one series in one minute, mergeable
//! in any order. A request-level cell also keeps where its requests' time went: the
//! time each (service, span name) accounts for on their critical paths.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sketches_ddsketch::{Config, DDSketch};
use threadline_model::{LlmView, SpanRecord};

use crate::observe::Observed;

/// Distinct (service, span name) parts a cell keeps; the rest are added up under
/// `SpanSlot::other()`, so a span name carrying ids cannot grow a cell without bound.
pub const MAX_SPAN_SLOTS: usize = 32;

/// 1% relative accuracy; values under 1 µs (in ms) share the lowest bin.
pub(crate) fn new_sketch() -> DDSketch {
    DDSketch::new(Config::new(0.01, 2048, 1e-3))
}

/// A part of a request: the spans of one name in one service.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SpanSlot {
    pub service: String,
    pub name: String,
}

impl SpanSlot {
    /// Where the parts past `MAX_SPAN_SLOTS` are added up.
    pub fn other() -> Self {
        Self {
            service: String::new(),
            name: "(other spans)".into(),
        }
    }

    pub fn is_other(&self) -> bool {
        self.service.is_empty()
    }
}

/// The time one part accounts for on the critical paths of a cell's requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SlotTime {
    /// Milliseconds on the critical path, summed over the cell's requests.
    pub critical_ms: f64,
    /// Spans of this part on those paths.
    pub spans: u64,
    /// Whether the part's spans are model calls (their own attributes — adapter,
    /// instance … — then say more than the span does).
    pub model_call: bool,
}

/// Aggregates of the requests of one series in one minute.
#[derive(Clone, Serialize, Deserialize)]
pub struct RollupCell {
    pub requests: u64,
    /// Requests whose span status is ERROR (for a request: its entry span's or its
    /// model call's).
    pub errors: u64,
    pub latency_ms: DDSketch,
    pub ttft_ms: DDSketch,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Output tokens and generation seconds (duration after the first token) of the
    /// model calls that report output tokens: tokens/s is their ratio.
    pub gen_tokens: u64,
    pub gen_seconds: f64,
    /// An inference server's KV-cache hit ratios, summed, and how many.
    pub kv_hit_sum: f64,
    pub kv_hit_count: u64,
    /// A hosted provider's prompt-cache hit ratios, summed, and how many.
    pub prompt_cache_sum: f64,
    pub prompt_cache_count: u64,
    /// Rejected requests by reason.
    pub rejections: BTreeMap<String, u64>,
    /// Request level: where the time went, by part.
    pub span_time: BTreeMap<SpanSlot, SlotTime>,
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
            prompt_cache_sum: 0.0,
            prompt_cache_count: 0,
            rejections: BTreeMap::new(),
            span_time: BTreeMap::new(),
            cost_usd: 0.0,
        }
    }
}

/// A cell of one export request: its counts, and its latencies and times to first
/// token as values rather than sketches. A batch cell holds a request or two, and a
/// sketch's first value allocates and zeroes its bins: the values go into the cell
/// the batch is merged into (`RollupCell::absorb_batch`), whose bins exist already.
#[derive(Clone, Debug, Default)]
pub struct BatchCell {
    /// Everything but the sketches, which stay empty.
    counts: RollupCell,
    /// (latency, time to first token) in ms.
    samples: Vec<(f64, Option<f64>)>,
}

impl BatchCell {
    pub fn observe(&mut self, spans: &[SpanRecord], observed: &Observed) {
        let sample = self.counts.observe_but_sketches(spans, observed);
        self.samples.push(sample);
    }

    /// The cell with the sketches made.
    pub fn into_cell(self) -> RollupCell {
        let mut cell = self.counts;
        cell.add_samples(self.samples);
        cell
    }
}

fn llm_of(span: Option<&SpanRecord>) -> Option<&LlmView> {
    span.and_then(|s| s.llm.as_ref())
}

fn valid_ttft(llm: &LlmView) -> Option<f64> {
    llm.ttft_ms.filter(|t| t.is_finite() && *t >= 0.0)
}

impl RollupCell {
    /// Adds one observation (a request or a model call) found among `spans`.
    pub fn observe(&mut self, spans: &[SpanRecord], observed: &Observed) {
        let (latency_ms, ttft_ms) = self.observe_but_sketches(spans, observed);
        self.add_sample(latency_ms, ttft_ms);
    }

    /// Adds a latency and a time to first token to the sketches.
    fn add_sample(&mut self, latency_ms: f64, ttft_ms: Option<f64>) {
        self.latency_ms.add(latency_ms);
        if let Some(t) = ttft_ms {
            self.ttft_ms.add(t);
        }
    }

    /// `add_sample` for each (latency, time to first token) of a batch cell.
    fn add_samples(&mut self, samples: Vec<(f64, Option<f64>)>) {
        for (latency_ms, ttft_ms) in samples {
            self.add_sample(latency_ms, ttft_ms);
        }
    }

    /// `observe` but for the sketches: the latency and time to first token the
    /// observation would add to them.
    fn observe_but_sketches(
        &mut self,
        spans: &[SpanRecord],
        observed: &Observed,
    ) -> (f64, Option<f64>) {
        let span = &spans[observed.span];
        self.requests += 1;
        let call = observed.call.map(|c| &spans[c]);
        if observed.is_error(spans) {
            self.errors += 1;
        }
        let duration_ms = span.duration_nanos() as f64 / 1e6;
        let ttft_ms = observed.ttft_ms(spans);
        for &c in &observed.usage {
            self.add_usage(&spans[c]);
        }
        let model_view = llm_of(call).or(llm_of(Some(span)));
        if let Some(kv) = model_view
            .and_then(|l| l.kv_cache_hit_ratio)
            .filter(|k| (0.0..=1.0).contains(k))
        {
            self.kv_hit_sum += kv;
            self.kv_hit_count += 1;
        }
        if let Some(p) = model_view
            .and_then(|l| l.prompt_cache_hit_ratio)
            .filter(|k| (0.0..=1.0).contains(k))
        {
            self.prompt_cache_sum += p;
            self.prompt_cache_count += 1;
        }
        let rejection = llm_of(Some(span))
            .and_then(|l| l.rejection_reason.as_ref())
            .or(llm_of(call).and_then(|l| l.rejection_reason.as_ref()));
        if let Some(reason) = rejection {
            *self
                .rejections
                .entry(reason.as_str().to_owned())
                .or_default() += 1;
        }
        for part in &observed.path {
            let s = &spans[part.span];
            self.add_span_time(
                &s.service,
                &s.name,
                &SlotTime {
                    critical_ms: part.critical_ns as f64 / 1e6,
                    spans: 1,
                    model_call: part.model_call,
                },
            );
        }
        (duration_ms, ttft_ms)
    }

    /// Tokens and generation time of one model call.
    fn add_usage(&mut self, call: &SpanRecord) {
        let Some(llm) = call.llm.as_ref() else {
            return;
        };
        let input = llm.input_tokens.unwrap_or(0).max(0) as u64;
        let output = llm.output_tokens.unwrap_or(0).max(0) as u64;
        self.input_tokens += input;
        self.output_tokens += output;
        let duration_ms = call.duration_nanos() as f64 / 1e6;
        let gen_ms = duration_ms - valid_ttft(llm).unwrap_or(0.0).min(duration_ms);
        if output > 0 && gen_ms > 0.0 {
            self.gen_tokens += output;
            self.gen_seconds += gen_ms / 1e3;
        }
    }

    /// Adds `time` to the part `service`, `name` (found by a scan: a cell has a few
    /// parts, at most `MAX_SPAN_SLOTS`; the slot's strings are allocated only when new).
    fn add_span_time(&mut self, service: &str, name: &str, time: &SlotTime) {
        let add = |at: &mut SlotTime| {
            at.critical_ms += time.critical_ms;
            at.spans += time.spans;
            at.model_call |= time.model_call;
        };
        let found = self
            .span_time
            .iter_mut()
            .find(|(slot, _)| slot.name == name && slot.service == service);
        if let Some((_, at)) = found {
            return add(at);
        }
        let slot = if self.span_time.len() < MAX_SPAN_SLOTS {
            SpanSlot {
                service: service.to_owned(),
                name: name.to_owned(),
            }
        } else {
            SpanSlot::other()
        };
        add(self.span_time.entry(slot).or_default());
    }

    /// Merges a cell of one export request.
    pub fn absorb_batch(&mut self, batch: BatchCell) {
        // Its sketches are empty: merging them costs nothing.
        self.merge(&batch.counts);
        self.add_samples(batch.samples);
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
        self.prompt_cache_sum += other.prompt_cache_sum;
        self.prompt_cache_count += other.prompt_cache_count;
        self.cost_usd += other.cost_usd;
        for (reason, n) in &other.rejections {
            *self.rejections.entry(reason.clone()).or_default() += n;
        }
        for (slot, time) in &other.span_time {
            self.add_span_time(&slot.service, &slot.name, time);
        }
    }

    /// The cell with `subject` replaced by `with` in its span names, services and
    /// rejection reasons (an erasure); `None` when none holds it.
    pub fn redacted(&self, subject: &str, with: &str) -> Option<RollupCell> {
        let names_it = !subject.is_empty()
            && (self
                .span_time
                .keys()
                .any(|s| s.service.contains(subject) || s.name.contains(subject))
                || self.rejections.keys().any(|r| r.contains(subject)));
        if !names_it {
            return None;
        }
        let mut out = self.clone();
        out.span_time = BTreeMap::new();
        for (slot, time) in &self.span_time {
            out.add_span_time(
                &slot.service.replace(subject, with),
                &slot.name.replace(subject, with),
                time,
            );
        }
        out.rejections = BTreeMap::new();
        for (reason, n) in &self.rejections {
            *out.rejections
                .entry(reason.replace(subject, with))
                .or_default() += n;
        }
        Some(out)
    }

    /// Prices the cell's tokens as those of `model` (a series key's model).
    pub fn price(&mut self, model: &str, table: &crate::PriceTable) {
        self.cost_usd = table.cost_usd(
            model,
            self.input_tokens.min(i64::MAX as u64) as i64,
            self.output_tokens.min(i64::MAX as u64) as i64,
        );
    }

    /// The `q` quantile of the latency (ms); `None` without requests.
    pub fn latency_quantile_ms(&self, q: f64) -> Option<f64> {
        self.latency_ms.quantile(q).ok().flatten()
    }

    pub fn rejected(&self) -> u64 {
        self.rejections.values().sum()
    }

    /// Mean latency of the cell's requests (ms).
    pub fn mean_latency_ms(&self) -> Option<f64> {
        let n = self.latency_ms.count();
        (n > 0).then(|| self.latency_ms.sum().unwrap_or(0.0) / n as f64)
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
