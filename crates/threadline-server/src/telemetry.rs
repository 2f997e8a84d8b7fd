//! What the server counts about itself and its traffic, shared by the ingest path
//! (which records) and the readers (`/metrics`, the health endpoint, erasure):
//! ingest counters, and the per-tenant LLM metric families derived from committed
//! spans.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use threadline_analysis::{Dimension, Level, Observed};
use threadline_model::{SpanRecord, TenantId};

/// Counters exposed on the health endpoint (and `/metrics` later).
#[derive(Default)]
pub(crate) struct IngestStats {
    pub(crate) spans_accepted: AtomicU64,
    pub(crate) spans_rejected: AtomicU64,
    pub(crate) logs_accepted: AtomicU64,
    pub(crate) logs_rejected: AtomicU64,
    pub(crate) requests_throttled: AtomicU64,
}

type Labels = Vec<(String, String)>;

fn duration_histogram() -> Histogram {
    // 5 ms .. ~82 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// What one export request adds to the LLM metric families, grouped by label set on
/// the ingest pool: a batch of 100 spans has a handful of (level, service, route,
/// model) sets, so each family's series is looked up once per set, not per span.
#[derive(Default)]
pub(crate) struct LlmObservations {
    groups: Vec<LabelGroup>,
}

/// The requests or model calls of one batch that share a label set.
struct LabelGroup {
    labels: Labels,
    durations_s: Vec<f64>,
    ttfts_s: Vec<f64>,
    ok: u64,
    errors: u64,
    /// Model calls only: a request's tokens are its calls', counted once.
    input_tokens: u64,
    output_tokens: u64,
}

impl LlmObservations {
    /// The requests and model calls `threadline_analysis::observe` found among
    /// `spans`, labelled with their level: a route's requests end to end, model calls
    /// on their own (a request's tokens are its calls': counted on the calls only).
    pub(crate) fn of_observed(spans: &[SpanRecord], observed: &[Observed]) -> Self {
        let mut index: HashMap<(Level, &str, &str, &str), usize> = HashMap::new();
        let mut groups: Vec<LabelGroup> = Vec::new();
        for o in observed {
            let key = o.series(spans);
            let level = key.level();
            let (service, route, model) = (
                key.get(Dimension::Service),
                key.get(Dimension::Route),
                key.get(Dimension::Model),
            );
            let at = *index
                .entry((level, service, route, model))
                .or_insert_with(|| {
                    let label = |d: Dimension, v: &str| (d.as_str().to_owned(), v.to_owned());
                    groups.push(LabelGroup {
                        labels: vec![
                            ("level".to_owned(), level.as_str().to_owned()),
                            label(Dimension::Service, service),
                            label(Dimension::Route, route),
                            label(Dimension::Model, model),
                        ],
                        durations_s: Vec::new(),
                        ttfts_s: Vec::new(),
                        ok: 0,
                        errors: 0,
                        input_tokens: 0,
                        output_tokens: 0,
                    });
                    groups.len() - 1
                });
            let group = &mut groups[at];
            if level == Level::Call {
                let (input, output) = o.tokens(spans);
                group.input_tokens += input;
                group.output_tokens += output;
            }
            group
                .durations_s
                .push(spans[o.span].duration_nanos() as f64 / 1e9);
            if let Some(t) = o.ttft_ms(spans) {
                group.ttfts_s.push(t / 1e3);
            }
            if o.is_error(spans) {
                group.errors += 1;
            } else {
                group.ok += 1;
            }
        }
        Self { groups }
    }

    fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// The series of one label set in each family (handles share the family's values).
#[derive(Default)]
struct SeriesOf {
    duration: Option<Histogram>,
    ttft: Option<Histogram>,
    ok: Option<Counter>,
    error: Option<Counter>,
    input: Option<Counter>,
    output: Option<Counter>,
}

/// The LLM metric families of one tenant.
struct TenantFamilies {
    registry: Registry,
    /// The label sets observed (level, service, route, model) and their series in
    /// each family, made when first needed: a batch's groups find their series in one
    /// lookup, and an erasure takes those naming its subject out of every family.
    seen: std::sync::Mutex<HashMap<Labels, SeriesOf>>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    ttft: Family<Labels, Histogram, fn() -> Histogram>,
    requests: Family<Labels, Counter>,
    tokens: Family<Labels, Counter>,
}

impl TenantFamilies {
    fn new() -> Self {
        let mut registry = Registry::default();
        let duration: Family<Labels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        let ttft: Family<Labels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        let requests = Family::<Labels, Counter>::default();
        let tokens = Family::<Labels, Counter>::default();
        registry.register(
            "threadline_llm_request_duration_seconds",
            "Duration of LLM requests (level=request: a route's entry span, end to end) and model calls (level=call), by service, route and model",
            duration.clone(),
        );
        registry.register(
            "threadline_llm_time_to_first_token_seconds",
            "Time to first token of LLM request spans that report it",
            ttft.clone(),
        );
        registry.register(
            "threadline_llm_requests",
            "LLM request spans committed, by status (ok / error)",
            requests.clone(),
        );
        registry.register(
            "threadline_llm_tokens",
            "Tokens of committed LLM request spans, by direction (input / output)",
            tokens.clone(),
        );
        Self {
            registry,
            seen: Default::default(),
            duration,
            ttft,
            requests,
            tokens,
        }
    }

    fn record(&self, group: &LabelGroup) {
        let labels = &group.labels;
        // The handles this group needs, made once per label set and cloned out (they
        // share the family's values): the lock covers the lookup, not the recording.
        let counter = |slot: &mut Option<Counter>,
                       family: &Family<Labels, Counter>,
                       (key, value): (&str, &str)| {
            slot.get_or_insert_with(|| {
                let mut l = labels.clone();
                l.push((key.to_owned(), value.to_owned()));
                family.get_or_create(&l).clone()
            })
            .clone()
        };
        let tokens = group.input_tokens + group.output_tokens > 0;
        let (duration, ttft, ok, error, input, output) = {
            let Ok(mut seen) = self.seen.lock() else {
                return;
            };
            if !seen.contains_key(labels) {
                seen.insert(labels.clone(), SeriesOf::default());
            }
            let Some(series) = seen.get_mut(labels) else {
                return;
            };
            (
                series
                    .duration
                    .get_or_insert_with(|| self.duration.get_or_create(labels).clone())
                    .clone(),
                (!group.ttfts_s.is_empty()).then(|| {
                    series
                        .ttft
                        .get_or_insert_with(|| self.ttft.get_or_create(labels).clone())
                        .clone()
                }),
                (group.ok > 0).then(|| counter(&mut series.ok, &self.requests, ("status", "ok"))),
                (group.errors > 0)
                    .then(|| counter(&mut series.error, &self.requests, ("status", "error"))),
                tokens.then(|| counter(&mut series.input, &self.tokens, ("direction", "input"))),
                tokens.then(|| counter(&mut series.output, &self.tokens, ("direction", "output"))),
            )
        };
        for &d in &group.durations_s {
            duration.observe(d);
        }
        if let Some(ttft) = ttft {
            for &t in &group.ttfts_s {
                ttft.observe(t);
            }
        }
        for (counter, n) in [
            (ok, group.ok),
            (error, group.errors),
            (input, group.input_tokens),
            (output, group.output_tokens),
        ] {
            if let Some(counter) = counter {
                counter.inc_by(n);
            }
        }
    }
}

/// Every tenant's LLM metric families.
#[derive(Default)]
pub(crate) struct LlmMetrics {
    tenants: RwLock<HashMap<TenantId, Arc<TenantFamilies>>>,
}

impl LlmMetrics {
    /// Counts committed request spans.
    pub(crate) fn record(&self, tenant: &TenantId, observations: &LlmObservations) {
        if observations.is_empty() {
            return;
        }
        let existing = self
            .tenants
            .read()
            .ok()
            .and_then(|t| t.get(tenant).cloned());
        let families = match existing {
            Some(f) => f,
            None => match self.tenants.write() {
                Ok(mut t) => Arc::clone(
                    t.entry(tenant.clone())
                        .or_insert_with(|| Arc::new(TenantFamilies::new())),
                ),
                Err(_) => return,
            },
        };
        for group in &observations.groups {
            families.record(group);
        }
    }

    /// Removes every series whose labels name `subject` (an erasure): a scrape shows
    /// it no more. How many label sets went.
    pub(crate) fn erase(&self, tenant: &TenantId, subject: &str) -> usize {
        let Some(families) = self.of(tenant) else {
            return 0;
        };
        let Ok(mut seen) = families.seen.lock() else {
            return 0;
        };
        let naming: Vec<Labels> = seen
            .keys()
            .filter(|l| l.iter().any(|(_, v)| v.contains(subject)))
            .cloned()
            .collect();
        for labels in &naming {
            seen.remove(labels);
            families.duration.remove(labels);
            families.ttft.remove(labels);
            for (key, values) in [
                ("status", ["ok", "error"]),
                ("direction", ["input", "output"]),
            ] {
                for v in values {
                    let mut l = labels.clone();
                    l.push((key.to_owned(), v.to_owned()));
                    families.requests.remove(&l);
                    families.tokens.remove(&l);
                }
            }
        }
        naming.len()
    }

    /// Writes the tenant's LLM metric families (OpenMetrics text) to `out`.
    pub(crate) fn encode(&self, tenant: &TenantId, out: &mut String) -> std::fmt::Result {
        match self.of(tenant) {
            Some(families) => {
                prometheus_client::encoding::text::encode_registry(out, &families.registry)
            }
            None => Ok(()),
        }
    }

    fn of(&self, tenant: &TenantId) -> Option<Arc<TenantFamilies>> {
        self.tenants.read().ok()?.get(tenant).cloned()
    }
}
