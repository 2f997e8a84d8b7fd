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

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::{AppState, CallerOf};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(scrape))
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
    State(state): State<AppState>,
    _: crate::params::NoQuery,
    CallerOf(caller): CallerOf,
) -> Result<impl IntoResponse, ApiError> {
    let (tenant, internals) = match caller {
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
        // A store that does not answer (ClickHouse down) leaves this family out; the
        // rest — the spool's gauges above all — is what an operator needs then.
        match crate::error::blocking(move || Ok(store.bound_instances(&tenant)?)).await {
            Ok(bound) => registry.register_collector(Box::new(BoundInstances(bound))),
            Err(e) => tracing::warn!(error = %e, "instances bound left out of /metrics"),
        }
    }
    let mut body = String::new();
    let encoded = prometheus_client::encoding::text::encode_registry(&mut body, &registry)
        .and_then(|()| match &tenant {
            Some(t) => state.llm_metrics().encode(t, &mut body),
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
fn internals_now(state: &AppState) -> Internals {
    let writer = state.store.writer_stats();
    let s = state.stats();
    let mut internals = Internals {
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
    };
    if let Some(spool) = writer.spool {
        internals.values.extend([
            (
                "threadline_spool_bytes",
                "Bytes of writes spooled on local disk that ClickHouse has not taken yet",
                Value::Gauge(spool.bytes.min(i64::MAX as u64) as i64),
            ),
            (
                "threadline_spool_records",
                "Insert rounds spooled on local disk that ClickHouse has not taken yet",
                Value::Gauge(spool.records.min(i64::MAX as u64) as i64),
            ),
            (
                "threadline_spool_max_bytes",
                "Spool bytes past which writes are refused with 429",
                Value::Gauge(spool.max_bytes.min(i64::MAX as u64) as i64),
            ),
        ]);
    }
    internals
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
