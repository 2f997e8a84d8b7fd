//! `GET /metrics`: Prometheus exposition of the server's internals (ingested and
//! rejected spans, write queue depth, store commits) and of LLM metrics derived from
//! committed spans (request duration and time-to-first-token histograms, request and
//! token counters by service / route / model) plus a gauge of the instances currently
//! bound to each image, model / adapter and route in the lineage graph.
//!
//! LLM metrics are kept per tenant and a scrape shows only the scraper's tenant (the
//! API key decides, as everywhere). Internals are server-wide — every tenant's volume
//! over time — so a scrape shows them only with an operator key (which sees no
//! tenant's series) or on a server without tenant keys.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use threadline_analysis::{Dimension, Level, Observed};
use threadline_model::{SpanRecord, TenantId};
use threadline_store::Store;

use crate::auth::{Authenticator, Caller};
use crate::error::ApiError;
use crate::ingest::IngestStats;

type Labels = Vec<(String, String)>;

fn duration_histogram() -> Histogram {
    // 5 ms .. ~82 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// One request span as the exporter counts it, taken on the ingest pool.
pub(crate) struct LlmObservation {
    labels: Labels,
    duration_s: f64,
    ttft_s: Option<f64>,
    /// Model calls only: a request's tokens are its calls', counted once.
    input_tokens: u64,
    output_tokens: u64,
    error: bool,
}

impl LlmObservation {
    /// One per request and model call `threadline_analysis::observe` found among
    /// `spans`, labelled with its level: a route's requests end to end, model calls on
    /// their own (a request's tokens are its calls': counted on the calls only).
    pub(crate) fn of_observed(spans: &[SpanRecord], observed: &[Observed]) -> Vec<Self> {
        observed
            .iter()
            .map(|o| {
                let key = &o.key;
                let (input_tokens, output_tokens) = match key.level() {
                    Level::Call => o.tokens(spans),
                    Level::Request => (0, 0),
                };
                let label = |d: Dimension| (d.as_str().to_owned(), key.get(d).to_owned());
                Self {
                    labels: vec![
                        ("level".to_owned(), key.level().as_str().to_owned()),
                        label(Dimension::Service),
                        label(Dimension::Route),
                        label(Dimension::Model),
                    ],
                    duration_s: spans[o.span].duration_nanos() as f64 / 1e9,
                    ttft_s: o.ttft_ms(spans).map(|t| t / 1e3),
                    input_tokens,
                    output_tokens,
                    error: o.is_error(spans),
                }
            })
            .collect()
    }
}

/// The LLM metric families of one tenant.
struct TenantFamilies {
    registry: Registry,
    /// The label sets observed (level, service, route, model), so an erasure can take
    /// those naming its subject out of every family.
    seen: std::sync::Mutex<std::collections::HashSet<Labels>>,
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

    fn record(&self, o: &LlmObservation) {
        if let Ok(mut seen) = self.seen.lock() {
            if !seen.contains(&o.labels) {
                seen.insert(o.labels.clone());
            }
        }
        self.duration.get_or_create(&o.labels).observe(o.duration_s);
        if let Some(t) = o.ttft_s {
            self.ttft.get_or_create(&o.labels).observe(t);
        }
        let with = |k: &str, v: &str| {
            let mut l = o.labels.clone();
            l.push((k.to_owned(), v.to_owned()));
            l
        };
        self.requests
            .get_or_create(&with("status", if o.error { "error" } else { "ok" }))
            .inc();
        if o.input_tokens + o.output_tokens > 0 {
            self.tokens
                .get_or_create(&with("direction", "input"))
                .inc_by(o.input_tokens);
            self.tokens
                .get_or_create(&with("direction", "output"))
                .inc_by(o.output_tokens);
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
    pub(crate) fn record(&self, tenant: &TenantId, observations: &[LlmObservation]) {
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
        for o in observations {
            families.record(o);
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
            .iter()
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

    fn of(&self, tenant: &TenantId) -> Option<Arc<TenantFamilies>> {
        self.tenants.read().ok()?.get(tenant).cloned()
    }
}

#[derive(Clone)]
pub(crate) struct PrometheusState {
    pub(crate) store: Store,
    pub(crate) auth: Arc<Authenticator>,
    pub(crate) stats: Arc<IngestStats>,
    pub(crate) llm: Arc<LlmMetrics>,
}

pub(crate) fn router(state: PrometheusState) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(state)
}

/// Server internals, read at scrape time.
#[derive(Debug)]
struct Internals {
    values: Vec<(&'static str, &'static str, Value)>,
}

#[derive(Debug)]
enum Value {
    Counter(u64),
    CounterF(f64),
    Gauge(i64),
}

impl Collector for Internals {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, value) in &self.values {
            match value {
                Value::Counter(v) => {
                    let c = ConstCounter::new(*v);
                    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
                }
                Value::CounterF(v) => {
                    let c = ConstCounter::new(*v);
                    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
                }
                Value::Gauge(v) => {
                    let g = ConstGauge::new(*v);
                    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
                }
            }
        }
        Ok(())
    }
}

/// Instances bound per image / model / adapter / route, read from the graph.
#[derive(Debug)]
struct BoundInstances(Vec<threadline_store::Bound>);

impl Collector for BoundInstances {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauge_type = ConstGauge::new(0i64).metric_type();
        let mut family = encoder.encode_descriptor(
            "threadline_instances_bound",
            "Instances currently bound (seen serving in the last 15 minutes of span time) to an image, model, adapter or route",
            None,
            gauge_type,
        )?;
        for bound in &self.0 {
            let labels = [
                ("kind", bound.node.kind.as_str()),
                ("node", &bound.node.key),
            ];
            ConstGauge::new(bound.instances as i64).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

async fn scrape(
    State(state): State<PrometheusState>,
    _: crate::params::NoQuery,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let (tenant, internals) = match state.auth.caller_of(&headers)? {
        Caller::Operator => (None, true),
        Caller::Tenant(tenant) => (Some(tenant), !state.auth.required()),
        Caller::Anonymous => return Err(crate::auth::AuthError::Missing.into()),
    };
    let mut registry = Registry::default();
    if internals {
        registry.register_collector(Box::new(internals_now(&state)));
    }
    if let Some(tenant) = &tenant {
        let store = state.store.clone();
        let tenant = tenant.clone();
        let bound = crate::error::blocking(move || Ok(store.bound_instances(&tenant)?)).await?;
        registry.register_collector(Box::new(BoundInstances(bound)));
    }
    let mut body = String::new();
    let encoded = prometheus_client::encoding::text::encode_registry(&mut body, &registry)
        .and_then(|()| match tenant.and_then(|t| state.llm.of(&t)) {
            Some(f) => prometheus_client::encoding::text::encode_registry(&mut body, &f.registry),
            None => Ok(()),
        })
        .and_then(|()| prometheus_client::encoding::text::encode_eof(&mut body));
    encoded.map_err(|e| ApiError::Internal(format!("cannot encode metrics: {e}")))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        to_text_format(&body),
    ))
}

/// The server's internals as they are now.
fn internals_now(state: &PrometheusState) -> Internals {
    let writer = state.store.writer_stats();
    let s = &state.stats;
    Internals {
        values: vec![
            (
                "threadline_spans_ingested",
                "Spans committed to the store",
                Value::Counter(s.spans_accepted.load(Ordering::Relaxed)),
            ),
            (
                "threadline_spans_rejected",
                "Spans refused as invalid (partial success)",
                Value::Counter(s.spans_rejected.load(Ordering::Relaxed)),
            ),
            (
                "threadline_requests_throttled",
                "Export requests refused with 429 / RESOURCE_EXHAUSTED",
                Value::Counter(s.requests_throttled.load(Ordering::Relaxed)),
            ),
            (
                "threadline_write_queue_batches",
                "Jobs waiting for the store writer",
                Value::Gauge(writer.queued_batches as i64),
            ),
            (
                "threadline_write_queue_bytes",
                "Encoded bytes waiting for the store writer",
                Value::Gauge(writer.queued_bytes as i64),
            ),
            (
                "threadline_store_commits",
                "Store transactions committed",
                Value::Counter(writer.commits),
            ),
            (
                "threadline_store_commit_seconds",
                "Time spent in store commits; divide by threadline_store_commits_total for the mean latency",
                Value::CounterF(writer.commit_nanos_total as f64 / 1e9),
            ),
        ],
    }
}

/// OpenMetrics (what the encoder writes) → the Prometheus text format 0.0.4 that every
/// scraper and `promtool check metrics` read: counter families are named with their
/// `_total` suffix, and the `# EOF` / `# UNIT` lines go.
fn to_text_format(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" counter") {
                counters.insert(name.to_owned());
            }
        }
    }
    let mut out = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn counters_take_their_total_name_and_eof_goes() {
        let om = "# HELP a_b Things.\n# TYPE a_b counter\na_b_total 3\n# HELP g G.\n# TYPE g gauge\ng 1\n# EOF\n";
        assert_eq!(
            super::to_text_format(om),
            "# HELP a_b_total Things.\n# TYPE a_b_total counter\na_b_total 3\n# HELP g G.\n# TYPE g gauge\ng 1\n"
        );
    }
}
